"""The store contract as tests: schema, numbering, concurrency rules, values, purge, faults, threads, async.

Part of the store conformance suite; use it through
:class:`context_gatekeeper.testing.stores.StoreConformance`, which supplies the ``store``
and ``open_store`` fixtures these tests take.  Revisions are built from real
:class:`~context_gatekeeper.records.messages.Message` / ``Put`` / ``Change`` objects
(:mod:`.store_builders`), exactly as a transcript builds them.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

from ..errors import GatekeeperError, InvalidTypeError, StaleHeadError
from ..stores import FAULT_POINTS, Store
from ..records.messages import Message
from ..records.operations import AT_END, Change, Put, Remove, invert
from ..records.revisions import Revision, storable_revision
from ._requires import HealthCheck, given, pytest, settings, st
from .store_builders import (
    CONFUSABLE_SESSIONS, CONTENTS, NASTY_SESSIONS, NESTED, append, changed, delete, edit, fill, message, put_ids,
    raised, run_together, snapshot, turn,
)
from .store_modes import Capabilities, lacking, needs, run_async, together, unwrapped
from .store_processes import commit_in_a_child, commit_in_children
from ..stores.vectors import VectorRow, supports_vectors

__all__ = ["StoreContract"]

OpenStore = Callable[[], Store]

HOOK_DEADLINE_S = 10.0
"""How long the async test waits for ``acommit`` to reach ``fault_hook('begin')``."""

PROCESS_APPENDS = 30
"""How many appends each of the two child processes commits at once with the other."""

RACERS, RACES = 4, 3
"""How many handles race an edit at one expected head, and how many times."""


def once(suite: Any, mode: str) -> None:
    """Skip the run of a test in any mode but the first the suite runs: for a test that
    checks the store itself (its twins, another process), the same in every mode."""
    if mode != suite.modes[0]:
        pytest.skip(f"runs once per store, in the {suite.modes[0]!r} mode (it checks the store itself in every mode)")


def kept_as_sent(fetched: Revision, sent: Revision, returned: Revision) -> None:
    """``fetched`` (read back) is ``sent`` as the store must keep it: every field as given (text
    normalised as every store normalises it, :func:`storable_revision`: a message's metadata
    and parts, an edit's new versions included), but those the store assigns: ``number``,
    ``parent``, ``base`` and ``time``, as ``commit`` returned them, and the number stamped on
    the versions the revision produces (:meth:`Revision.stamped`).  Comparing with what
    ``commit`` returned alone passes a store that loses a field on the way in: its return
    value lacks it as well."""
    expected = replace(storable_revision(sent), number=returned.number, parent=returned.parent, base=returned.base,
                       time=returned.time).stamped()
    assert fetched == expected, (
        f"the log holds not the revision as sent (revision {returned.number}; only its number, parent, base and time "
        "are the store's to set): keep every field of every change, the metadata and parts of an edit's new version too")
    assert fetched == returned, f"the log holds not what commit returned for revision {returned.number}"


def follows(handle: Store, session: str, log: list[Revision]) -> None:
    """``handle``'s head, tip, revisions and sessions are those of ``log``."""
    tip = (log[-1].number, log[-1].time) if log else (0, 0.0)
    assert (handle.head(session), handle.tip(session)) == (len(log), tip), "a handle served a stale head or tip"
    assert handle.revisions(session) == log, "a handle served revisions another handle replaced or set aside"
    assert handle.revisions(session, after=1) == log[1:]
    assert handle.sessions() == ([session] if log else [])


class IndexOnly:
    """An integer type that is no ``int`` (as a NumPy integer is): usable through ``operator.index``."""

    def __init__(self, value: int) -> None:
        self.value = value

    def __index__(self) -> int:
        return self.value

    def __repr__(self) -> str:
        return f"IndexOnly({self.value})"


def async_twins(target: Any, capabilities: Capabilities) -> dict[str, Callable[[], Any]]:
    """Every async twin of ``target`` the suite can check, as calls on session ``s`` (two turns)."""
    twins: dict[str, Callable[[], Any]] = {
        "asetup": lambda: target.asetup(),
        "ahead": lambda: target.ahead("s"),
        "atip": lambda: target.atip("s"),
        "arevisions": lambda: target.arevisions("s"),
        "asessions": lambda: target.asessions(),
        "acommit": lambda: target.acommit("s", turn(3), expected_head=None),
    }
    if capabilities.vectors and supports_vectors(target):
        twins["asave_vectors"] = lambda: target.asave_vectors("s", [VectorRow("u1", "h", "e", (1.0,))])
        twins["aload_vectors"] = lambda: target.aload_vectors("s", "e")
        twins["adelete_vectors"] = lambda: target.adelete_vectors("s")
    if capabilities.truncate:
        twins["atruncate"] = lambda: target.atruncate("s", 2)
    twins["apurge"] = lambda: target.apurge("s")
    return twins


class StoreContract:
    """The revision-log contract every store keeps (see :mod:`context_gatekeeper.stores.base`)."""

    capabilities: Capabilities
    modes: tuple[str, ...]

    # -- schema -------------------------------------------------------------------------
    def test_setup_is_idempotent_and_keeps_data(self, store: Store, open_store: OpenStore) -> None:
        store.setup()
        store.setup()
        fill(store, "s", 2)
        store.setup()
        again = open_store()
        again.setup()
        again.setup()
        assert snapshot(again, "s") == snapshot(store, "s")
        assert again.head("s") == 2

    # -- reading and numbering ------------------------------------------------------------
    def test_an_unknown_session_is_empty(self, store: Store) -> None:
        assert store.head("nobody") == 0
        assert store.revisions("nobody") == []
        assert store.revisions("nobody", after=3) == []
        assert store.sessions() == []

    def test_commits_are_numbered_with_parent_and_base(self, store: Store) -> None:
        stored = fill(store, "s", 3)
        assert [(r.number, r.parent, r.base) for r in stored] == [(1, 0, 0), (2, 1, 1), (3, 2, 2)]
        assert store.head("s") == 3
        assert store.revisions("s") == stored

    def test_tip_is_the_head_and_its_time(self, store: Store) -> None:
        assert store.tip("s") == (0, 0.0)
        stored = fill(store, "s", 2)
        assert store.tip("s") == (2, stored[-1].time)
        assert run_async(store.atip("s")) == store.tip("s")

    def test_revisions_after(self, store: Store) -> None:
        stored = fill(store, "s", 3)
        assert store.revisions("s", after=0) == stored
        assert store.revisions("s", after=1) == stored[1:]
        assert store.revisions("s", after=2) == stored[2:]
        assert store.revisions("s", after=3) == []
        assert store.revisions("s", after=10) == []
        assert store.revisions("s", after=-1) == stored

    def test_any_integer_is_a_revision_number(self, store: Store) -> None:
        """``after`` may be any integer type (``operator.index``), a NumPy integer included, and
        any size (one beyond every revision number reads none, as on every store)."""
        stored = fill(store, "s", 3)
        assert store.revisions("s", after=cast(int, IndexOnly(1))) == stored[1:]
        assert run_async(store.arevisions("s", after=cast(int, IndexOnly(2)))) == stored[2:]
        assert store.revisions("s", after=2**70) == run_async(store.arevisions("s", after=2**63)) == []

    @pytest.mark.parametrize("bad", [1.5, 2.0, "1", None, True], ids=["float", "whole-float", "str", "None", "bool"])
    def test_a_revision_number_that_is_no_integer_is_refused(self, store: Store, bad: Any) -> None:
        """Not read as a damaged log (a ``CorruptLogError`` advising ``truncate``), nor an empty one."""
        fill(store, "s", 3)
        before = snapshot(store, "s")
        with pytest.raises(InvalidTypeError, match="after"):
            store.revisions("s", after=bad)
        with pytest.raises(InvalidTypeError, match="after"):
            run_async(store.arevisions("s", after=bad))
        assert snapshot(store, "s") == before

    def test_a_commit_at_the_current_head_has_base_equal_to_parent(self, store: Store) -> None:
        first = store.commit("s", turn(1), expected_head=None)
        stored = store.commit("s", edit(first.added[0], "revised"), expected_head=1)
        assert (stored.number, stored.parent, stored.base, stored.kind) == (2, 1, 1, "edit")
        assert store.revisions("s") == [first, stored]

    # -- concurrency rules ----------------------------------------------------------------
    def test_appends_never_conflict(self, store: Store, open_store: OpenStore) -> None:
        other = open_store()
        fill(store, "s", 1)
        store.commit("s", edit(message("u1"), "changed"), expected_head=1)
        for n in range(2, 6):  # two handles, each unaware of the other's writes
            writer = store if n % 2 else other
            stored = writer.commit("s", turn(n), expected_head=None)
            assert (stored.number, stored.parent, stored.base) == (n + 1, n, n)
        assert [r.number for r in store.revisions("s")] == [1, 2, 3, 4, 5, 6]

    @needs("reopens", "threads")
    def test_handles_committing_at_once_lose_nothing(self, open_store: OpenStore) -> None:
        """Handles on one storage (workers, processes) appending at the same time: every
        commit is in the log once, numbered 1..N, each handle's appends in its order."""
        handles, per_handle = [open_store() for _ in range(4)], 20

        def writer(k: int) -> Callable[[], None]:
            def commit_all() -> None:
                for j in range(per_handle):
                    handles[k].commit("s", append(message(f"h{k}-{j}")), expected_head=None)
            return commit_all

        errors = run_together(*(writer(k) for k in range(len(handles))))
        assert errors == [], raised(errors)
        total = len(handles) * per_handle
        for reader in (*handles, open_store()):
            log = reader.revisions("s")
            assert [r.number for r in log] == list(range(1, total + 1)), "handles committing at once lost or reused numbers"
            ids = put_ids(log)
            assert sorted(ids) == sorted(f"h{k}-{j}" for k in range(len(handles)) for j in range(per_handle))
            for k in range(len(handles)):
                assert [i for i in ids if i.startswith(f"h{k}-")] == [f"h{k}-{j}" for j in range(per_handle)]
            assert reader.head("s") == total

    def test_an_edit_is_rebased_over_appends_that_do_not_touch_it(self, store: Store) -> None:
        first, _ = fill(store, "s", 2)
        proposal = edit(first.added[1], "a corrected answer")  # computed at head 2
        fill_after = [store.commit("s", turn(n), expected_head=None) for n in (3, 4)]
        stored = store.commit("s", proposal, expected_head=2)
        assert (stored.number, stored.parent, stored.base) == (5, 4, 2)
        assert stored.base is not None and stored.base < stored.parent
        assert store.revisions("s", after=2) == fill_after + [stored]

    def test_a_stale_edit_over_a_non_append_raises_and_writes_nothing(self, store: Store) -> None:
        first, second = fill(store, "s", 2)
        proposal = edit(first.added[0], "mine")  # computed at head 2
        store.commit("s", edit(second.added[0], "theirs"), expected_head=2)
        before = snapshot(store, "s")
        with pytest.raises(StaleHeadError):
            store.commit("s", proposal, expected_head=2)
        assert snapshot(store, "s") == before
        removal = delete(second.added[1], "u2")  # a deletion is not an append either
        with pytest.raises(StaleHeadError):
            store.commit("s", removal, expected_head=2)
        assert snapshot(store, "s") == before

    def test_a_stale_edit_over_an_append_touching_its_messages_raises(self, store: Store) -> None:
        (first,) = fill(store, "s", 1)
        user = first.added[0]
        proposal = edit(user, "mine")  # computed at head 1
        touching = append(message("a9", "assistant"), after=user.id)  # an answer put right after it
        store.commit("s", touching, expected_head=None)
        before = snapshot(store, "s")
        with pytest.raises(StaleHeadError):
            store.commit("s", proposal, expected_head=1)
        assert snapshot(store, "s") == before

    def test_a_stale_insert_over_an_answer_to_its_anchor_raises(self, store: Store) -> None:
        """An insert after an open question, computed before another writer answered it:
        rebased, the answer would follow the inserted message and answer it instead."""
        store.commit("s", append(message("u1", content="What is the capital of Iceland?")), expected_head=None)
        insert = Revision(0, 0, "apply", (Put(message("n1", content="And of Norway?"), "u1"),))  # computed at head 1
        store.commit("s", append(message("a1", "assistant", "Reykjavik."), after="u1"), expected_head=None)
        before = snapshot(store, "s")
        with pytest.raises(StaleHeadError):
            store.commit("s", insert, expected_head=1)
        assert snapshot(store, "s") == before
        later = Revision(0, 0, "apply", (Put(message("n2", content="And of Norway?"), "a1"),))  # after the answer
        store.commit("s", turn(2), expected_head=None)
        assert store.commit("s", later, expected_head=2).base == 2  # an append at the end does not block it

    @pytest.mark.parametrize("conflict", ["non-append", "answer"])
    @pytest.mark.parametrize("position", ["first", "last"])
    def test_a_stale_edit_is_checked_against_every_later_revision(self, store: Store, conflict: str, position: str) -> None:
        """The conflicting revision first or last among three since ``expected_head``: a
        store checking only the head, or only the revision right after, lets it through."""
        (first,) = fill(store, "s", 1)
        user, answer = first.added
        proposal = edit(user, "mine")  # computed at head 1
        conflicting = edit(answer, "theirs") if conflict == "non-append" else append(message("x9", "assistant"), after=user.id)
        harmless = [append(message(f"n{k}"), after=AT_END) for k in range(2)]
        later = [conflicting, *harmless] if position == "first" else [*harmless, conflicting]
        for revision in later:
            store.commit("s", revision, expected_head=store.head("s"))
        before = snapshot(store, "s")
        with pytest.raises(StaleHeadError):
            store.commit("s", proposal, expected_head=1)
        assert snapshot(store, "s") == before

    @needs("threads")
    def test_edits_racing_at_one_expected_head_commit_once(self, open_store: OpenStore) -> None:
        """Handles (workers) edit one message, each at the same expected head, released
        together: exactly one commits, the others raise StaleHeadError, and every handle
        reads the log with the one that won.  A store that checks the expected head outside
        its write lock lets several commit, each overwriting the one before without a word."""
        handles = [open_store() for _ in range(RACERS)]
        log: list[Revision] = []
        for race in range(RACES):
            asked = handles[0].commit("s", append(message(f"q{race}")), expected_head=None)
            won: list[Revision] = []

            def editor(handle: Store, text: str, asked: Revision = asked, won: list[Revision] = won) -> Callable[[], None]:
                return lambda: won.append(handle.commit("s", edit(asked.added[0], text), expected_head=asked.number))

            errors = run_together(*(editor(handle, f"edit {k} of race {race}") for k, handle in enumerate(handles)))
            stale = [error for error in errors if isinstance(error, StaleHeadError)]
            assert len(won) == 1 and len(stale) == len(errors) == RACERS - 1, (
                f"edits racing at one expected_head: {len(won)} of {RACERS} committed, where exactly one must and the "
                f"others raise StaleHeadError (check the head inside the write transaction); {raised(errors)}")
            log += [asked, *won]
        for handle in (*handles, open_store()):
            follows(handle, "s", log)

    def test_an_expected_head_above_the_head_raises(self, store: Store) -> None:
        with pytest.raises(StaleHeadError):
            store.commit("empty", edit(message("u1"), "x"), expected_head=1)
        assert snapshot(store, "empty") == (0, [])
        fill(store, "s", 2)
        before = snapshot(store, "s")
        with pytest.raises(StaleHeadError):
            store.commit("s", edit(message("u1"), "x"), expected_head=3)
        assert snapshot(store, "s") == before
        assert store.sessions() == ["s"]

    @pytest.mark.parametrize("bad", [-1, 1.5, "2", True])
    def test_an_invalid_expected_head_is_refused(self, store: Store, bad: Any) -> None:
        fill(store, "s", 2)
        before = snapshot(store, "s")
        with pytest.raises(ValueError if bad == -1 else (TypeError, ValueError)):
            store.commit("s", edit(message("u1"), "x"), expected_head=bad)
        assert snapshot(store, "s") == before

    # -- values -------------------------------------------------------------------------
    @pytest.mark.parametrize("session", NASTY_SESSIONS, ids=range(len(NASTY_SESSIONS)))
    def test_session_ids_round_trip(self, store: Store, open_store: OpenStore, session: str) -> None:
        fill(store, "neighbour", 1)
        stored = fill(store, session, 2)
        again = open_store()
        fetched = again.revisions(session)
        assert fetched == stored
        for n, (kept, returned) in enumerate(zip(fetched, stored), start=1):
            kept_as_sent(kept, turn(n), returned)
        assert again.head(session) == 2
        assert sorted(again.sessions()) == sorted({"neighbour", session})
        assert again.head("neighbour") == 1

    def test_sessions_a_backend_could_confuse_keep_their_own_logs(self, store: Store, open_store: OpenStore) -> None:
        """Ids equal once trailing spaces are ignored, prefixes of one another, equal but for
        case or Unicode normalization, or equal in their first 280 characters: each its own log."""
        logs: dict[str, list[Revision]] = {}
        for i, session in enumerate(CONFUSABLE_SESSIONS):
            assert store.head(session) == 0 and store.revisions(session) == [], (
                f"session {session!r} shows revisions before its first commit (another session's?)")
            logs[session] = [
                store.commit(session, append(message(f"{i}-{n}", content=f"{n} of {session!r}")), expected_head=None)
                for n in range(i % 2 + 1)
            ]
        for handle in (store, open_store()):
            for session, log in logs.items():
                assert (handle.head(session), handle.revisions(session)) == (len(log), log), f"session {session!r}"
            assert handle.sessions() == sorted(CONFUSABLE_SESSIONS)
        store.purge(CONFUSABLE_SESSIONS[0])
        assert store.sessions() == sorted(CONFUSABLE_SESSIONS[1:])

    @pytest.mark.parametrize("name", sorted(CONTENTS))
    def test_content_round_trips(self, store: Store, open_store: OpenStore, name: str) -> None:
        text = CONTENTS[name]
        sent = append(message("u1", content=text), message("a1", "assistant", text))
        stored = store.commit("s", sent, expected_head=None)
        fetched = open_store().revisions("s")
        assert fetched == [stored]
        kept_as_sent(fetched[0], sent, stored)
        assert fetched[0].added[0].content == text

    def test_every_field_round_trips(self, store: Store, open_store: OpenStore) -> None:
        tool_call = Message(
            "a1",
            "assistant",
            "",
            parts=({"type": "text", "text": "see 🙂"}, {"type": "image", "url": "x'; --", "meta": NESTED}, "raw"),
            metadata=NESTED,
        )
        result = Message("t1", "tool", '{"ok": true}', parts=None, metadata={"tool_call_id": "call_1"})
        opening = append(message("u1"), tool_call, result)
        first = store.commit("s 'x'", opening, expected_head=None)
        edited = tool_call.revised("now with text — ✓", 2)
        inserted = Message("i1", "user", "new", origin="inserted", derived_from=(), revision=2)
        revision = Revision(
            number=0,
            parent=0,
            kind="edit",
            changes=(Change(tool_call, edited), Put(inserted, "t1"), Remove(result, "a1")),
            instruction="it was Iceland, not Ireland; DROP TABLE x; -- «quoted» 'single' \"double\"",
            model="gemini-2.5-flash ✨",
            time=1_700_000_000.123456789,
            target=None,
        )
        second = store.commit("s 'x'", revision, expected_head=1)
        bare = Revision(number=0, parent=0, kind="undo", changes=tuple(invert(second.changes)), target=2)
        third = store.commit("s 'x'", bare, expected_head=2)
        assert (second.base, third.target, third.instruction, third.model) == (1, 2, None, None)
        fetched = open_store().revisions("s 'x'")
        assert fetched == [first, second, third]
        for kept, sent, returned in zip(fetched, (opening, revision, bare), (first, second, third)):
            kept_as_sent(kept, sent, returned)
        assert changed(fetched[1]).derived_from == ("a1",)
        assert changed(fetched[1]).parts == tool_call.parts
        assert fetched[1].time == second.time >= revision.time  # stamped when committed

    def test_lone_surrogates_round_trip(self, store: Store, open_store: OpenStore) -> None:
        text = "broken \ud800 surrogate \udfff"
        stored = store.commit("s", append(message("u1", content=text)), expected_head=None)
        assert open_store().revisions("s") == [stored]

    def test_generated_values_round_trip(self, store: Store) -> None:
        json_values = st.recursive(
            st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
            lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
            max_leaves=8,
        )
        counter = iter(range(10**6))

        label = st.text(st.characters(exclude_categories=cast(Any, ("Cs",)), exclude_characters="\x00"))

        # database=None: no .hypothesis/ folder in the directory the store's tests run from
        @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        @given(label, st.text(), st.dictionaries(st.text(), json_values, max_size=3), st.none() | label)
        def check(session: str, content: str, metadata: dict[str, Any], instruction: str | None) -> None:
            session = f"{next(counter)}:{session}"
            m = Message("m1", "assistant", content, parts=(content, metadata), metadata=metadata)
            revision = Revision(0, 0, "apply", (Put(m, None),), instruction=instruction)
            stored = store.commit(session, revision, expected_head=None)
            fetched = store.revisions(session)
            assert fetched == [stored]
            kept_as_sent(fetched[0], revision, stored)

        check()

    def test_changing_what_the_store_handed_out_changes_nothing_stored(self, store: Store) -> None:
        def nested() -> dict[str, Any]:
            return {"calls": [{"name": "f", "args": {"x": [1]}}]}

        sent = Message("u1", "user", "hi", parts=({"type": "text", "text": "hi"},), metadata=nested())
        returned = store.commit("s", append(sent), expected_head=None)
        expected = ("hi", ({"type": "text", "text": "hi"},), nested())
        fetched = store.revisions("s")
        for handed_out in (sent, returned.added[0], fetched[0].added[0]):  # a caller's copies, mutated
            cast(Any, handed_out.metadata)["calls"][0]["args"]["x"].append(2)
            cast(Any, handed_out.metadata)["new"] = True
            cast(Any, handed_out.parts)[0]["text"] = "changed"
        (again,) = store.revisions("s")
        kept = again.added[0]
        assert (kept.content, kept.parts, kept.metadata) == expected, "the store handed out (or kept) objects a caller can change"

    # -- purge and sessions -------------------------------------------------------------
    def test_purge_erases_one_session_only(self, store: Store, open_store: OpenStore) -> None:
        fill(store, "keep", 2)
        fill(store, "drop", 3)
        kept = snapshot(store, "keep")
        store.purge("drop")
        again = open_store()
        for handle in (store, again):
            assert snapshot(handle, "drop") == (0, [])
            assert snapshot(handle, "keep") == kept
            assert handle.sessions() == ["keep"]
        store.purge("never existed")
        assert store.commit("drop", turn(1), expected_head=None).number == 1

    def test_a_handle_reads_what_another_handle_wrote_purged_and_truncated(self, store: Store, open_store: OpenStore) -> None:
        """A long-lived handle (a worker) follows another one's appends, purge and new
        text under the same numbers, and truncate: nothing read before is served again."""
        other = open_store()
        assert (store.tip("s"), store.revisions("s"), store.sessions()) == ((0, 0.0), [], [])
        written = fill(other, "s", 2)
        follows(store, "s", written)
        other.purge("s")
        follows(store, "s", [])
        again = [other.commit("s", append(message(f"new{n}", content=f"new text {n}")), expected_head=None) for n in range(3)]
        follows(store, "s", again)
        if self.capabilities.truncate:
            assert other.truncate("s", 1) == 2
            follows(store, "s", again[:1])

    @pytest.mark.parametrize("how", ["purge", "truncate"])
    def test_a_handle_never_serves_text_replaced_under_the_same_head(
        self, store: Store, open_store: OpenStore, how: str
    ) -> None:
        """Another handle purges the session (or truncates it) and writes it again up to the
        same head number, while this one reads nothing in between: this one then reads the
        new text.  A handle that keeps the log it read while the head number stays the same
        serves purged text again."""
        if how == "truncate" and not self.capabilities.truncate:
            pytest.skip(lacking(type(self).__name__, "truncate"))
        other = open_store()
        written = fill(other, "s", 2)
        follows(store, "s", written)
        kept = [] if how == "purge" else written[:1]
        if how == "purge":
            other.purge("s")
        else:
            assert other.truncate("s", 1) == 1
        again = kept + [
            other.commit("s", append(message(f"new{n}", content=f"new text {n}")), expected_head=None)
            for n in range(len(written) - len(kept))
        ]
        assert [r.number for r in again] == [r.number for r in written]
        follows(store, "s", again)

    @needs("truncate")
    def test_stored_sessions_lists_what_truncate_set_aside_until_purged(self, store: Store, mode: str) -> None:
        """``sessions()`` leaves out a session truncated to nothing; ``stored_sessions()``
        (and its twin) lists it, so purging what it lists erases everything; and truncate
        keeps no vector of a message it set aside."""
        once(self, mode)
        target: Any = unwrapped(store)
        fill(target, "kept", 1)
        fill(target, "emptied", 2)
        vectors = self.capabilities.vectors and supports_vectors(target)
        if vectors:
            target.save_vectors("emptied", [VectorRow(i, "h", "e", (1.0,)) for i in ("u1", "a1", "u2", "a2")])
        assert target.truncate("emptied", 1) == 1
        if vectors:  # the set-aside turn's vectors go with it
            assert sorted(row.message_id for row in target.load_vectors("emptied", "e")) == ["a1", "u1"]
        assert target.truncate("emptied", 0) == 1
        if vectors:
            assert target.load_vectors("emptied", "e") == []
        assert store.sessions() == ["kept"]
        assert store.stored_sessions() == run_async(target.astored_sessions()) == ["emptied", "kept"]  # as given: the twin in async mode
        for session in store.stored_sessions():
            store.purge(session)
        assert store.stored_sessions() == run_async(target.astored_sessions()) == []

    def test_sessions_lists_sessions_with_revisions_sorted(self, store: Store) -> None:
        for session in ("b", "a", "ü", "B"):
            fill(store, session, 1)
        assert store.sessions() == sorted(["b", "a", "ü", "B"])

    # -- faults -------------------------------------------------------------------------
    @needs("fault_hooks")
    @pytest.mark.parametrize("point", FAULT_POINTS)
    @pytest.mark.parametrize("kind", ["append", "edit"])
    def test_a_fault_inside_commit_writes_nothing(self, store: Store, open_store: OpenStore, point: str, kind: str) -> None:
        first, _ = fill(store, "s", 2)
        before = snapshot(store, "s")

        def hook(at: str) -> None:
            if at == point:
                raise RuntimeError(f"injected fault at {at}")

        revision = turn(3) if kind == "append" else edit(first.added[0], "changed")
        store.fault_hook = hook
        with pytest.raises(RuntimeError, match="injected fault"):
            store.commit("s", revision, expected_head=None if kind == "append" else 2)
        store.fault_hook = None
        assert snapshot(store, "s") == before
        assert snapshot(open_store(), "s") == before
        stored = store.commit("s", revision, expected_head=None if kind == "append" else 2)
        assert (stored.number, stored.parent) == (3, 2)
        assert store.revisions("s") == before[1] + [stored]

    @needs("fault_hooks")
    def test_the_fault_hook_sees_every_point_in_order(self, store: Store) -> None:
        seen: list[str] = []
        store.fault_hook = seen.append
        fill(store, "s", 2)
        store.fault_hook = None
        assert seen == list(FAULT_POINTS) * 2

    # -- threads ------------------------------------------------------------------------
    @needs("threads")
    def test_threads_committing_appends_lose_nothing(self, store: Store) -> None:
        threads, per_thread = 8, 50
        start = threading.Barrier(threads)
        errors: list[BaseException] = []

        def worker(t: int) -> None:
            try:
                start.wait()
                for j in range(per_thread):
                    store.commit("s", append(message(f"t{t}-{j}")), expected_head=None)
            except BaseException as exc:  # surfaced below
                errors.append(exc)

        pool = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
        for thread in pool:
            thread.start()
        for thread in pool:
            thread.join()
        assert errors == [], raised(errors)
        log = store.revisions("s")
        total = threads * per_thread
        assert [r.number for r in log] == list(range(1, total + 1))
        assert [r.parent for r in log] == list(range(total))
        ids = put_ids(log)
        assert sorted(ids) == sorted(f"t{t}-{j}" for t in range(threads) for j in range(per_thread))
        for t in range(threads):
            mine = [i for i in ids if i.startswith(f"t{t}-")]
            assert mine == [f"t{t}-{j}" for j in range(per_thread)]

    # -- processes ----------------------------------------------------------------------
    @needs("reopens", "processes")
    def test_what_a_process_committed_survives_its_exit_without_close(
        self, store: Store, open_store: OpenStore, tmp_path: Path, mode: str
    ) -> None:
        """A worker commits and dies (``os._exit``: no close, no atexit): its commits are
        in the storage, for handles opened before and after."""
        once(self, mode)
        fill(store, "s", 1)
        child = commit_in_a_child(type(self), tmp_path, "s", [2, 3], ["commit", "acommit"])
        assert child.committed, child.failure(type(self).__name__)
        for handle in (store, open_store()):
            log = handle.revisions("s")
            assert [r.number for r in log] == [1, 2, 3], (
                "commits of a process that exited without close() were lost (or make(where) opened other storage "
                "there: name storage kept outside where with storage_key(where), which every process reads alike)")
            assert put_ids(log) == ["u1", "a1", "u2", "a2", "u3", "a3"]
        assert store.commit("s", turn(4), expected_head=3).number == 4

    @needs("reopens", "processes")
    def test_processes_committing_at_once_lose_nothing(
        self, store: Store, open_store: OpenStore, tmp_path: Path, mode: str
    ) -> None:
        """Two worker processes append to one session at the same time (released together
        once both have opened a handle; one commits through ``commit``, the other through
        ``acommit``): every append is in the log once, numbered 1..N, each process's in its
        order.  A store serialising commits only within a process (a threading lock) passes
        every other test and loses revisions here."""
        once(self, mode)
        twins = ("commit", "acommit")
        commits = [[(twin, [(f"p{k}-{j}", "user")]) for j in range(PROCESS_APPENDS)] for k, twin in enumerate(twins)]
        for child in commit_in_children(type(self), tmp_path, "s", commits):
            assert child.committed, child.failure(type(self).__name__)
        total = len(twins) * PROCESS_APPENDS
        for handle in (store, open_store()):
            log = handle.revisions("s")
            assert [r.number for r in log] == list(range(1, total + 1)), (
                f"processes committing at once lost or reused numbers ({len(log)} revisions in the log for {total} "
                "appends): serialise commits across processes (a lock the storage holds, a transaction), not only "
                "within one")
            ids = put_ids(log)
            assert len(ids) == total, "processes committing at once lost appends"
            for k in range(len(twins)):
                assert [i for i in ids if i.startswith(f"p{k}-")] == [f"p{k}-{j}" for j in range(PROCESS_APPENDS)], (
                    f"the appends of process {k} are not in the log once each, in the order it committed them")

    # -- closing ------------------------------------------------------------------------
    def test_a_commit_after_close_raises_or_is_kept(self, open_store: OpenStore) -> None:
        """A handle used after ``close()``: its commit raises StoreClosedError (or another of
        the library's errors), or commits for real, where a handle opened afterwards reads
        it.  Never a revision returned as stored and then lost."""
        closing = open_store()
        (first,) = fill(closing, "s", 1)
        closing.close()
        try:
            stored = closing.commit("s", turn(2), expected_head=None)
        except GatekeeperError:  # StoreClosedError, as the built-in stores raise
            if not self.capabilities.reopens:
                return  # nothing is left to read the storage with
            log = [first]
        except Exception as exc:  # noqa: BLE001 - reported as the failure
            pytest.fail(
                f"{type(unwrapped(closing)).__name__}.commit after close() raised {type(exc).__name__}: {exc}; raise "
                "context_gatekeeper.errors.StoreClosedError there (the library's errors say what to do)")
        else:
            log = [first, stored]
        assert open_store().revisions("s") == log, (
            f"commit after close() returned revision {log[-1].number}, but the storage does not hold it"
            if len(log) == 2 else "a commit after close() raised, yet wrote to the storage")

    # -- async --------------------------------------------------------------------------
    def test_async_twins_match_the_sync_methods(self, store: Store) -> None:
        async def main() -> None:
            await store.asetup()
            await store.asetup()
            tasks = [store.acommit(s, append(message(f"{s}-{n}")), expected_head=None) for n in range(10) for s in "xy"]
            stored = await together(self, *tasks)  # one after the other for Capabilities(threads=False)
            for s in "xy":
                assert await store.ahead(s) == store.head(s) == 10
                log = await store.arevisions(s)
                assert log == store.revisions(s) == sorted((r for r in stored if r.added[0].id.startswith(s)), key=lambda r: r.number)
                assert sorted(put_ids(log)) == sorted(f"{s}-{n}" for n in range(10))
                assert await store.arevisions(s, after=7) == log[7:]
            assert await store.asessions() == ["x", "y"]
            x_log = await store.arevisions("x")
            edited = await store.acommit("x", edit(x_log[0].added[0], "async edit"), expected_head=3)
            assert (edited.number, edited.base) == (11, 3)
            with pytest.raises(StaleHeadError):
                await store.acommit("x", edit(message("nope"), "x"), expected_head=99)
            await together(self, store.apurge("x"), store.apurge("nobody"))
            assert (await store.ahead("x"), await store.asessions()) == (0, ["y"])

        run_async(main())

    @needs("fault_hooks")
    def test_async_commit_does_not_block_the_event_loop(self, store: Store) -> None:
        inside, release = threading.Event(), threading.Event()

        def hook(point: str) -> None:
            if point == "begin":
                inside.set()
                if not release.wait(10):  # only the event loop sets it
                    raise TimeoutError("the event loop was blocked while a commit ran")

        async def main() -> Revision:
            store.fault_hook = hook
            task = asyncio.create_task(store.acommit("s", turn(1), expected_head=None))
            deadline = asyncio.get_running_loop().time() + HOOK_DEADLINE_S
            while not inside.is_set():
                if task.done():  # finished (or failed) without ever reaching the hook
                    task.result()
                    pytest.fail(
                        "acommit never called fault_hook('begin'): call it inside the write transaction, "
                        "or declare Capabilities(fault_hooks=False)"
                    )
                if asyncio.get_running_loop().time() > deadline:
                    release.set()
                    pytest.fail(f"acommit did not reach fault_hook('begin') within {HOOK_DEADLINE_S:g} s")
                await asyncio.sleep(0.001)
            release.set()  # reached only because the loop kept running
            return await task

        try:
            stored = run_async(main())
        finally:
            store.fault_hook = None
        assert store.revisions("s") == [stored]

    def test_every_async_twin_lets_the_event_loop_run(self, store: Store, mode: str) -> None:
        """Each async twin awaits its I/O: it is still in flight after the loop ran other
        tasks once.  One that finishes without ever yielding did its work on the loop
        thread, so it blocks every other task while it waits for the storage."""
        once(self, mode)
        target: Any = unwrapped(store)
        fill(target, "s", 2)
        twins = async_twins(target, self.capabilities)

        async def main() -> list[str]:
            blocking = []
            for name, call in twins.items():
                task = asyncio.ensure_future(call())
                await asyncio.sleep(0)  # one pass of the loop: the twin's first step ran
                if task.done():
                    blocking.append(name)
                await task
            return blocking

        blocking = run_async(main())
        assert blocking == [], (
            f"{type(target).__name__}'s {blocking} returned without ever yielding to the event loop: they run the "
            "storage's calls on the loop thread, blocking every other task; await an async driver, or run the "
            "sync method in a thread (asyncio.to_thread, as Store's default twins do). A store with nothing to "
            "wait on (its data in this process) can yield with `await asyncio.sleep(0)` before its work"
        )

"""The conformance suite every store runs (in-memory, SQLite, PostgreSQL, ...).

Use it by subclassing :class:`StoreConformance` in a ``test_*.py`` module and saying
how to open the store::

    class TestSQLiteStore(StoreConformance):
        def make(self, where):                       # where: a fresh tmp_path per test
            return SQLiteStore(where / "store.db")

Each call of ``make(where)`` must open a *handle on the same storage* (the first
one starts empty): for a database, a new connection to the same file or schema.
A store that cannot be reopened (InMemoryStore) sets ``persistent = False``, and
"reopening" then hands back the first handle.

Revisions are built from real :class:`Message` / :class:`Put` / :class:`Change`
objects, exactly as a transcript would build them.

Values: anything goes inside messages (content, parts, metadata: NUL characters
and lone surrogates included, since they travel as JSON text); session ids,
instructions and model names are any text without NUL (PostgreSQL text cannot
hold it).
"""

from __future__ import annotations

import asyncio
import threading
from array import array
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from context_gatekeeper.errors import InvalidInputError, StaleHeadError
from context_gatekeeper.transcripts.messages import Message
from context_gatekeeper.transcripts.operations import Change, Put, Remove, invert
from context_gatekeeper.transcripts.revisions import Revision
from context_gatekeeper.stores import FAULT_POINTS, Store, VectorRow, supports_vectors

# -- revision builders ----------------------------------------------------------------------


def message(id: str, role: str = "user", content: str | None = None, **fields) -> Message:
    """A message with readable default text."""
    return Message(id=id, role=role, content=f"text of {id}" if content is None else content, **fields)


def append(*messages: Message, after: str | None = None) -> Revision:
    """An ``append`` revision putting ``messages`` in order after message ``after``."""
    changes = []
    for m in messages:
        changes.append(Put(m, after))
        after = m.id
    return Revision(number=0, parent=0, kind="append", changes=tuple(changes))


def turn(n: int, session_tag: str = "") -> Revision:
    """Turn ``n`` (a user question and its answer) as one append."""
    return append(message(f"{session_tag}u{n}", "user"), message(f"{session_tag}a{n}", "assistant"))


def edit(before: Message, content: str) -> Revision:
    """An ``edit`` rewriting ``before``'s text."""
    return Revision(
        number=0,
        parent=0,
        kind="edit",
        changes=(Change(before, before.revised(content, 0)),),
        instruction=f"rewrite {before.id}",
        model="fake-model",
    )


def delete(m: Message, after: str | None) -> Revision:
    """An ``apply`` revision removing ``m``."""
    return Revision(number=0, parent=0, kind="apply", changes=(Remove(m, after),))


def fill(store: Store, session: str, turns: int) -> list[Revision]:
    """Append ``turns`` turns to ``session``; the stored revisions."""
    return [store.commit(session, turn(n), expected_head=None) for n in range(1, turns + 1)]


def snapshot(store: Store, session: str) -> tuple[int, list[Revision]]:
    """The head and the whole log of a session."""
    return store.head(session), store.revisions(session)


def run_together(*calls: Callable[[], object]) -> list[BaseException]:
    """Run ``calls`` in threads released together; the exceptions they raised."""
    start, errors = threading.Barrier(len(calls)), []

    def body(call: Callable[[], object]) -> None:
        try:
            start.wait()
            call()
        except BaseException as exc:  # returned to the test
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(c,)) for c in calls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors


def put_ids(revisions: list[Revision]) -> list[str]:
    """Ids of the messages the revisions put, in log order."""
    return [m.id for r in revisions for m in r.added]


# Values that must come back exactly.
NASTY_SESSIONS = [
    "plain",
    "'; DROP TABLE revisions; --",
    'Robert"); DELETE FROM revisions WHERE ("1"="1',
    "100% _wild_ \\escape\\ %s {} ?",
    "ünïcødé 会话 🚀👩‍👩‍👧",
    " spaces and\ttabs\nnewline ",
    "",
]
NESTED = {
    "tool_calls": [{"id": "call_1", "name": "search", "args": {"q": "it's; DROP", "n": 3, "deep": [1, [2, [3]]]}}],
    "floats": [0.1, -2.5e-300, 1e300, 12345678901234567890],
    "flags": {"yes": True, "no": False, "none": None},
    "ünï 🔑": "välue ✓",
}
CONTENTS = {
    "unicode": "Grüße aus Zürich — 東京で会いましょう — مرحبا — Ελληνικά",
    "emoji": "🙂🚀👩🏽‍💻🇮🇸 family: 👨‍👩‍👧‍👦",
    "large": ("All work and no play, 100 KB of it. 多语言🙂\n" * 2_500)[:100_000],
    "sql": "'); DROP TABLE revisions; -- \"quoted\" ; SELECT * FROM x WHERE a='b';",
    "empty": "",
    "control": "tab\there\r\nnul\x00byte\x7f",
    "markdown": "# Title\n\n- item `code`\n\n```python\nprint('hi')\n```\n",
}


class StoreHandles:
    """The ``open_store`` and ``store`` fixtures over :meth:`make`; a base for store test suites."""

    persistent: bool = True
    """False when ``make`` cannot reopen the same storage (then reopening returns the first handle)."""

    def make(self, where: Path) -> Store:
        """Open a handle on the storage that lives at ``where``."""
        raise NotImplementedError

    # -- fixtures -----------------------------------------------------------------------
    @pytest.fixture
    def open_store(self, tmp_path: Path) -> Iterator[Callable[[], Store]]:
        """Opens handles on one storage; closes them all at the end of the test."""
        handles: list[Store] = []

        def open_() -> Store:
            if handles and not self.persistent:
                return handles[0]
            handles.append(self.make(tmp_path))
            return handles[-1]

        yield open_
        for handle in handles:
            handle.close()

    @pytest.fixture
    def store(self, open_store: Callable[[], Store]) -> Store:
        """A fresh, empty store."""
        return open_store()


class StoreConformance(StoreHandles):
    """Every store's contract as tests; subclass and define :meth:`make`."""

    # -- schema -------------------------------------------------------------------------
    def test_setup_is_idempotent_and_keeps_data(self, store: Store, open_store) -> None:
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
        assert asyncio.run(store.atip("s")) == store.tip("s")

    def test_revisions_after(self, store: Store) -> None:
        stored = fill(store, "s", 3)
        assert store.revisions("s", after=0) == stored
        assert store.revisions("s", after=1) == stored[1:]
        assert store.revisions("s", after=2) == stored[2:]
        assert store.revisions("s", after=3) == []
        assert store.revisions("s", after=10) == []
        assert store.revisions("s", after=-1) == stored

    def test_a_commit_at_the_current_head_has_base_equal_to_parent(self, store: Store) -> None:
        first = store.commit("s", turn(1), expected_head=None)
        stored = store.commit("s", edit(first.added[0], "revised"), expected_head=1)
        assert (stored.number, stored.parent, stored.base, stored.kind) == (2, 1, 1, "edit")
        assert store.revisions("s") == [first, stored]

    # -- concurrency rules ----------------------------------------------------------------
    def test_appends_never_conflict(self, store: Store, open_store) -> None:
        other = open_store()
        fill(store, "s", 1)
        store.commit("s", edit(message("u1"), "changed"), expected_head=1)
        for n in range(2, 6):  # two handles, each unaware of the other's writes
            writer = store if n % 2 else other
            stored = writer.commit("s", turn(n), expected_head=None)
            assert (stored.number, stored.parent, stored.base) == (n + 1, n, n)
        assert [r.number for r in store.revisions("s")] == [1, 2, 3, 4, 5, 6]

    def test_an_edit_is_rebased_over_appends_that_do_not_touch_it(self, store: Store) -> None:
        first, _ = fill(store, "s", 2)
        proposal = edit(first.added[1], "a corrected answer")  # computed at head 2
        fill_after = [store.commit("s", turn(n), expected_head=None) for n in (3, 4)]
        stored = store.commit("s", proposal, expected_head=2)
        assert (stored.number, stored.parent, stored.base) == (5, 4, 2)
        assert stored.base < stored.parent
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
    def test_an_invalid_expected_head_is_refused(self, store: Store, bad) -> None:
        fill(store, "s", 2)
        before = snapshot(store, "s")
        with pytest.raises(ValueError if bad == -1 else (TypeError, ValueError)):
            store.commit("s", edit(message("u1"), "x"), expected_head=bad)
        assert snapshot(store, "s") == before

    # -- values -------------------------------------------------------------------------
    @pytest.mark.parametrize("session", NASTY_SESSIONS, ids=range(len(NASTY_SESSIONS)))
    def test_session_ids_round_trip(self, store: Store, open_store, session: str) -> None:
        fill(store, "neighbour", 1)
        stored = fill(store, session, 2)
        again = open_store()
        assert again.revisions(session) == stored
        assert again.head(session) == 2
        assert sorted(again.sessions()) == sorted({"neighbour", session})
        assert again.head("neighbour") == 1

    @pytest.mark.parametrize("name", sorted(CONTENTS))
    def test_content_round_trips(self, store: Store, open_store, name: str) -> None:
        text = CONTENTS[name]
        stored = store.commit("s", append(message("u1", content=text), message("a1", "assistant", text)), expected_head=None)
        fetched = open_store().revisions("s")
        assert fetched == [stored]
        assert fetched[0].added[0].content == text

    def test_every_field_round_trips(self, store: Store, open_store) -> None:
        tool_call = Message(
            "a1",
            "assistant",
            "",
            parts=({"type": "text", "text": "see 🙂"}, {"type": "image", "url": "x'; --", "meta": NESTED}, "raw"),
            metadata=NESTED,
        )
        result = Message("t1", "tool", '{"ok": true}', parts=None, metadata={"tool_call_id": "call_1"})
        first = store.commit("s 'x'", append(message("u1"), tool_call, result), expected_head=None)
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
        assert fetched[1].changes[0].after.derived_from == ("a1",)
        assert fetched[1].changes[0].after.parts == tool_call.parts
        assert fetched[1].time == second.time >= revision.time  # stamped when committed

    def test_lone_surrogates_round_trip(self, store: Store, open_store) -> None:
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

        label = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"))

        @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
        @given(label, st.text(), st.dictionaries(st.text(), json_values, max_size=3), st.none() | label)
        def check(session: str, content: str, metadata: dict, instruction: str | None) -> None:
            session = f"{next(counter)}:{session}"
            m = Message("m1", "assistant", content, parts=(content, metadata), metadata=metadata)
            revision = Revision(0, 0, "apply", (Put(m, None),), instruction=instruction)
            stored = store.commit(session, revision, expected_head=None)
            assert store.revisions(session) == [stored]

        check()

    # -- purge and sessions -------------------------------------------------------------
    def test_purge_erases_one_session_only(self, store: Store, open_store) -> None:
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

    def test_sessions_lists_sessions_with_revisions_sorted(self, store: Store) -> None:
        for session in ("b", "a", "ü", "B"):
            fill(store, session, 1)
        assert store.sessions() == sorted(["b", "a", "ü", "B"])

    # -- faults -------------------------------------------------------------------------
    @pytest.mark.parametrize("point", FAULT_POINTS)
    @pytest.mark.parametrize("kind", ["append", "edit"])
    def test_a_fault_inside_commit_writes_nothing(self, store: Store, open_store, point: str, kind: str) -> None:
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

    def test_the_fault_hook_sees_every_point_in_order(self, store: Store) -> None:
        seen: list[str] = []
        store.fault_hook = seen.append
        fill(store, "s", 2)
        store.fault_hook = None
        assert seen == list(FAULT_POINTS) * 2

    # -- threads ------------------------------------------------------------------------
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
        assert errors == []
        log = store.revisions("s")
        total = threads * per_thread
        assert [r.number for r in log] == list(range(1, total + 1))
        assert [r.parent for r in log] == list(range(total))
        ids = put_ids(log)
        assert sorted(ids) == sorted(f"t{t}-{j}" for t in range(threads) for j in range(per_thread))
        for t in range(threads):
            mine = [i for i in ids if i.startswith(f"t{t}-")]
            assert mine == [f"t{t}-{j}" for j in range(per_thread)]

    # -- async --------------------------------------------------------------------------
    def test_async_twins_match_the_sync_methods(self, store: Store) -> None:
        async def main() -> None:
            await store.asetup()
            await store.asetup()
            tasks = [store.acommit(s, append(message(f"{s}-{n}")), expected_head=None) for n in range(10) for s in "xy"]
            stored = await asyncio.gather(*tasks)
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
            await asyncio.gather(store.apurge("x"), store.apurge("nobody"))
            assert (await store.ahead("x"), await store.asessions()) == (0, ["y"])

        asyncio.run(main())

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
            while not inside.is_set():
                await asyncio.sleep(0.001)
            release.set()  # reached only because the loop kept running
            return await task

        try:
            stored = asyncio.run(main())
        finally:
            store.fault_hook = None
        assert store.revisions("s") == [stored]

    # -- vectors (the optional VectorStore capability) ------------------------------------
    @pytest.fixture
    def vectors(self, store: Store) -> Store:
        """The store, if it has the vector capability (else the test is skipped, saying why)."""
        if not supports_vectors(store):
            pytest.skip(f"{type(store).__name__} has no vector capability (optional)")
        return store

    def test_vectors_round_trip_as_float32_and_survive_reopening(self, vectors, open_store) -> None:
        fill(vectors, "s", 1)
        rows = [
            VectorRow("m1", "h1", "e5", (0.1, -0.25, 3.0e-8)),
            VectorRow("nul\x00 surrogate \udc80 ünï 🚀", "h2", "e5", (1.0, 2.0, -3.5)),
            VectorRow("", "content-only", "e5", (0.0, 0.5, 1e30)),
        ]
        assert vectors.save_vectors("s", rows) == 3
        expected = [r._replace(vector=tuple(array("f", r.vector))) for r in rows]
        assert sorted(vectors.load_vectors("s", "e5")) == sorted(expected)
        assert sorted(open_store().load_vectors("s", "e5")) == sorted(expected)
        assert vectors.load_vectors("other", "e5") == []
        assert vectors.sessions() == ["s"]

    def test_a_session_without_revisions_takes_no_vectors(self, vectors, open_store) -> None:
        """A save for a session never written, or purged meanwhile (an embedding in flight
        during ``purge``), is dropped: vectors never come back after a purge."""
        assert vectors.save_vectors("never", [("m1", "h", "e", [1.0])]) == 0
        fill(vectors, "gone", 1)
        assert vectors.save_vectors("gone", [("u1", "h", "e", [1.0])]) == 1
        vectors.purge("gone")
        assert vectors.save_vectors("gone", [("u1", "h", "e", [1.0]), ("", "h2", "e", [2.0])]) == 0
        for handle in (vectors, open_store()):
            assert handle.load_vectors("never", "e") == handle.load_vectors("gone", "e") == []
            assert handle.sessions() == []
        fill(vectors, "gone", 1)  # a session written again takes vectors again
        assert vectors.save_vectors("gone", [("u1", "h", "e", [1.0])]) == 1

    def test_a_new_text_of_a_message_replaces_its_old_vectors(self, vectors) -> None:
        """An edit leaves no vector of the old text: saving a message's vector erases that
        message's vectors of other texts (every embedder), not its other rows."""
        (first,) = fill(vectors, "s", 1)
        user = first.changes[0].message
        vectors.save_vectors("s", [
            (user.id, "old", "e", [1.0]), (user.id, "old", "f", [1.0, 0.0]), (user.id, "same", "f", [2.0, 0.0]),
            ("a1", "old", "e", [3.0]), ("", "old", "e", [4.0]),
        ])
        vectors.commit("s", edit(user, "the secret is gone"), expected_head=None)
        assert vectors.save_vectors("s", [(user.id, "same", "e", [5.0])]) == 1
        assert sorted(vectors.load_vectors("s", "e")) == sorted([
            VectorRow("a1", "old", "e", (3.0,)), VectorRow("", "old", "e", (4.0,)), VectorRow(user.id, "same", "e", (5.0,)),
        ])
        assert vectors.load_vectors("s", "f") == [VectorRow(user.id, "same", "f", (2.0, 0.0))]

    def test_vectors_of_removed_messages_go_at_the_next_save(self, vectors, open_store) -> None:
        first, _ = fill(vectors, "s", 2)
        user, answer = (change.message for change in first.changes)
        vectors.save_vectors("s", [(user.id, "h1", "e", [1.0]), (answer.id, "h2", "e", [2.0]), ("u2", "h3", "e", [3.0])])
        vectors.commit("s", delete(user, None), expected_head=None)
        vectors.save_vectors("s", [("a2", "h4", "e", [4.0])])
        for handle in (vectors, open_store()):
            assert sorted(r.message_id for r in handle.load_vectors("s", "e")) == ["a1", "a2", "u2"]

    def test_vectors_of_other_embedders_and_dimensions_are_kept_apart(self, vectors) -> None:
        fill(vectors, "s", 1)
        vectors.save_vectors("s", [("m1", "h", "small", [1.0, 0.0]), ("m1", "h", "small", [1.0, 0.0, 0.0])])
        vectors.save_vectors("s", [("m1", "h", "large", [0.0, 1.0, 0.0, 0.0])])
        assert {r.dimension for r in vectors.load_vectors("s", "small")} == {2, 3}
        assert vectors.load_vectors("s", "small", dimension=2) == [VectorRow("m1", "h", "small", (1.0, 0.0))]
        assert vectors.load_vectors("s", "large") == [VectorRow("m1", "h", "large", (0.0, 1.0, 0.0, 0.0))]
        assert vectors.load_vectors("s", "large", dimension=2) == []
        assert vectors.load_vectors("s", "none") == []

    def test_saving_a_vector_again_replaces_it(self, vectors) -> None:
        fill(vectors, "s", 1)
        vectors.save_vectors("s", [("m1", "h", "e", [1.0, 0.0])])
        vectors.save_vectors("s", [("m1", "h", "e", [0.0, 1.0]), ("m2", "h", "e", [0.5, 0.5])])
        assert sorted(vectors.load_vectors("s", "e")) == [
            VectorRow("m1", "h", "e", (0.0, 1.0)),
            VectorRow("m2", "h", "e", (0.5, 0.5)),
        ]

    def test_purge_erases_the_sessions_vectors_only(self, vectors, open_store) -> None:
        fill(vectors, "drop", 1)
        fill(vectors, "keep", 1)
        for session in ("drop", "keep"):
            vectors.save_vectors(session, [("u1", "h", "e", [1.0]), ("", "h2", "f", [2.0])])
        vectors.purge("drop")
        for handle in (vectors, open_store()):
            assert handle.load_vectors("drop", "e") == handle.load_vectors("drop", "f") == []
            assert handle.load_vectors("keep", "e") == [VectorRow("u1", "h", "e", (1.0,))]

    def test_delete_vectors_of_one_embedder_or_all(self, vectors) -> None:
        fill(vectors, "s", 1)
        fill(vectors, "t", 1)
        vectors.save_vectors("s", [("a", "h", "e", [1.0]), ("b", "h", "e", [1.0]), ("a", "h", "f", [1.0])])
        vectors.save_vectors("t", [("a", "h", "e", [1.0])])
        assert vectors.delete_vectors("s", "e") == 2
        assert vectors.load_vectors("s", "e") == [] and len(vectors.load_vectors("s", "f")) == 1
        assert vectors.delete_vectors("s") == 1
        assert vectors.delete_vectors("s") == 0
        assert len(vectors.load_vectors("t", "e")) == 1

    @pytest.mark.parametrize(
        "bad",
        [
            ("m", "h", "e", []),
            ("m", "h", "e", [float("nan")]),
            ("m", "h", "e", [1e39]),
            ("m", "h", "e", ["x"]),
            ("m", "h", "e", "abc"),
            ("m", "", "e", [1.0]),
            ("m", "h", "", [1.0]),
            ("m", "h", "e\x00", [1.0]),
            (None, "h", "e", [1.0]),
            ("m", "h", "e"),
        ],
    )
    def test_an_invalid_vector_row_writes_nothing(self, vectors, bad) -> None:
        fill(vectors, "s", 1)
        with pytest.raises(InvalidInputError):
            vectors.save_vectors("s", [("good", "h", "e", [1.0]), bad])
        assert vectors.load_vectors("s", "e") == []

    def test_vector_async_twins_match(self, vectors) -> None:
        fill(vectors, "s", 1)

        async def main() -> None:
            await asyncio.gather(*(vectors.asave_vectors("s", [(f"m{i}", f"h{i}", "e", [float(i)])]) for i in range(5)))
            loaded = await vectors.aload_vectors("s", "e", dimension=1)
            assert sorted(loaded) == sorted(vectors.load_vectors("s", "e"))
            assert len(loaded) == 5
            assert await vectors.adelete_vectors("s", "e") == 5

        asyncio.run(main())

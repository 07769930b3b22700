"""Transcripts over every store, as a hypothesis state machine.

Random sequences of appends (duplicate ids, retried requests, taken ids, one id twice in an
append, ids of deleted messages), edits through
a scripted model with preview and a later commit, apply, set, undo, redo, revert,
purge and reopen, from two transcript objects on one storage.  After every step: the
log loads, the state equals an independent replay of the log, the record holds every
appended message once, no internal marker leaks, and both objects agree.  A refused
operation must leave the stored bytes unchanged.

CI profile: ``CG_STATEFUL_EXAMPLES`` examples (default 40) of up to
``CG_STATEFUL_STEPS`` steps (default 30) per store; raise them to search longer, e.g.
``CG_STATEFUL_EXAMPLES=1000 CG_STATEFUL_STEPS=60 pytest tests/test_transcript_stateful.py``.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from context_gatekeeper import Delete, InsertAfter, Replace, Transcript
from context_gatekeeper.editing.format import ideal_patch_reply
from context_gatekeeper.errors import GatekeeperError
from context_gatekeeper.records.messages import Message
from context_gatekeeper.records.operations import AT_END, Change, Put, Remove
from context_gatekeeper.stores import InMemoryStore, SQLiteStore, Store
from context_gatekeeper.testing import ScriptedModel

EXAMPLES = int(os.environ.get("CG_STATEFUL_EXAMPLES", "40"))
STEPS = int(os.environ.get("CG_STATEFUL_STEPS", "30"))
WORDS = st.sampled_from(["hi", "Ireland", "Iceland", "GDP 500", "lock TTL", "ok", "same"])
WHO = st.sampled_from([0, 1])


def naive_replay(log: list) -> list[Message]:
    """The state a log produces, by the definition (lists and linear scans, no index)."""
    state: list[Message] = []
    for revision in log:
        state = replayed(state, revision)
    return state


def replayed(state: list[Message], revision: Any) -> list[Message]:
    """``state`` with ``revision``'s changes applied, by the definition."""
    state = list(state)
    for change in revision.changes:
        if isinstance(change, Put):
            assert all(m.id != change.message.id for m in state), f"put twice: {change.message.id}"
            ids = [m.id for m in state]
            if change.after is None:
                at = 0
            elif change.after is AT_END or change.after not in ids:
                at = len(state)
            else:
                at = ids.index(change.after) + 1
            state.insert(at, change.message)
        elif isinstance(change, Remove):
            state = [m for m in state if m.id != change.message.id]
        else:
            assert isinstance(change, Change)
            state = [change.after if m.id == change.before.id else m for m in state]
    return state


def has_messages(machine: Any) -> bool:
    return bool(machine.views[0].messages)


def machine_for(open_store: Callable[[], Store], dump: Callable[[Store, str], Any]) -> type[RuleBasedStateMachine]:
    class TranscriptMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.session = f"s-{uuid.uuid4().hex[:8]}"
            self.stores = [open_store(), open_store()]
            self.views = [Transcript(self.session, store=s) for s in self.stores]
            self.appended: dict[str, tuple[str, str]] = {}  # id -> (role, content) since the last purge
            self.proposal = None

        # -- helpers --------------------------------------------------------------------
        def attempt(self, action: Callable[[], Any]) -> Any:
            """Run ``action``; a refusal must be a library error that changed no stored byte."""
            before = dump(self.stores[0], self.session)
            try:
                return action()
            except GatekeeperError:
                assert dump(self.stores[0], self.session) == before, "a refused operation changed the store"
                return None

        def note(self, revision: Any) -> None:
            if revision is not None and revision.kind == "append":
                for message in revision.added:
                    self.appended[message.id] = (message.role, message.content)

        def pick(self, who: int, index: int) -> Message | None:
            messages = self.views[who].messages
            return messages[index % len(messages)] if messages else None

        # -- rules ------------------------------------------------------------------------
        @rule(who=WHO, user=WORDS, answer=st.none() | WORDS)
        def append_turn(self, who: int, user: str, answer: str | None) -> None:
            self.note(self.attempt(lambda: self.views[who].append(user=user, assistant=answer)))

        @rule(who=WHO, answer=WORDS)
        def append_answer(self, who: int, answer: str) -> None:
            self.note(self.attempt(lambda: self.views[who].append(assistant=answer)))

        @rule(who=WHO, batch=st.lists(st.tuples(st.sampled_from(["same", "<end>", "dup"]),
                                                st.sampled_from(["user", "user", "assistant"]),
                                                st.sampled_from(["same", "same", "other"])), min_size=1, max_size=3),
              renew=st.booleans())
        def append_with_ids(self, who: int, batch: list[tuple[str, str, str]], renew: bool) -> None:
            """Retried requests, taken ids, an id twice in one append, ids of deleted messages and
            an id named like the old end marker.  A retry is a message the state holds now with
            its first role and text; every other message is appended (taken ids renewed) or the
            append is refused whole: nothing is ever dropped silently."""
            head = self.stores[0].head(self.session)
            held = {m.id for m in naive_replay(self.stores[0].revisions(self.session))}
            given: set[str] = set()
            new, taken = 0, False
            for id, role, text in batch:
                repeated = id in given
                given.add(id)
                if not repeated and id in held and self.appended.get(id) == (role, text):
                    continue  # a retry
                new += 1
                taken = taken or repeated or id in self.appended
            messages = [{"id": id, "role": role, "content": text} for id, role, text in batch]
            before = dump(self.stores[0], self.session)
            try:
                revision = self.views[who].append(messages=messages, renew_taken_ids=renew)
            except GatekeeperError as error:
                assert dump(self.stores[0], self.session) == before, "a refused operation changed the store"
                assert (taken and not renew) or batch[0][1] != "user", f"refused: {error}"
                return
            assert not (taken and not renew), "a taken id was neither renewed nor refused"
            assert len(revision.added) == new, "a message of the append was dropped"
            assert self.stores[0].head(self.session) == head + (1 if new else 0)
            state = [m.id for m in naive_replay(self.stores[0].revisions(self.session))]
            added = [m.id for m in revision.added]
            assert [i for i in state if i in set(added)] == added, "the append's messages are out of order"
            if batch[0][1] == "user" and added:  # appended at the end, whatever it repeated
                assert state[-len(added):] == added, "a message after a retry was put mid-transcript"
            self.note(revision)

        @precondition(has_messages)
        @rule(who=WHO, index=st.integers(0, 50), text=WORDS, kind=st.sampled_from(["replace", "delete", "insert"]))
        def apply(self, who: int, index: int, text: str, kind: str) -> None:
            target = self.pick(who, index)
            if target is None:
                return
            request = {"replace": Replace(target.id, text), "delete": Delete(target.id),
                       "insert": InsertAfter(target.id, "user", text)}[kind]
            self.attempt(lambda: self.views[who].apply([request]))

        @precondition(has_messages)
        @rule(who=WHO)
        def apply_nothing(self, who: int) -> None:
            head = self.stores[0].head(self.session)
            self.attempt(lambda: self.views[who].apply([]))
            assert self.stores[0].head(self.session) == head

        @precondition(has_messages)
        @rule(who=WHO, keep=st.lists(st.integers(0, 50), max_size=4), text=WORDS, reuse=st.booleans(),
              reword=st.booleans())
        def set_state(self, who: int, keep: list[int], text: str, reuse: bool, reword: bool) -> None:
            """A new state: kept messages in any order (the first one reworded, maybe), and a new
            one; every message claims provenance of its own, which set() must not take."""
            messages = self.views[who].messages
            kept = list({messages[i % len(messages)].id: messages[i % len(messages)] for i in keep}.values()) if messages else []
            before = {m.id: m for m in messages}
            claimed = {"origin": "edited", "derived_from": ("claimed",), "revision": 77}
            if reword and kept:
                kept[0] = replace(kept[0], content=kept[0].content + " (set)", **claimed)
            new = [*kept, {"role": "user", "content": text, "metadata": {"span": (0, 1), 1: "x"}, **claimed,
                           **({"id": "dup"} if reuse else {})}]
            revision = self.attempt(lambda: self.views[who].set(new))
            self.note(revision)
            if revision is None:
                return
            for message in self.views[who].messages:
                held = before.get(message.id)
                if held is None:  # set() brings new messages into the record, as originally written
                    assert (message.origin, message.derived_from) == ("original", ()), message
                    self.appended.setdefault(message.id, (message.role, message.content))
                elif (message.role, message.content, message.parts, message.metadata) == \
                        (held.role, held.content, held.parts, held.metadata):  # says what it said
                    assert (message.origin, message.derived_from) == (held.origin, held.derived_from), message
                else:  # its text or metadata changed: revised as an edit revises it
                    expected = held.revised(message.content, message.revision)
                    assert (message.origin, message.derived_from) == (expected.origin, expected.derived_from), message

        @precondition(has_messages)
        @rule(who=WHO, index=st.integers(0, 50), delete=st.booleans())
        def preview(self, who: int, index: int, delete: bool) -> None:
            target = self.pick(who, index)
            if target is None:
                return
            state = list(self.views[who].messages)
            request = Delete(target.id) if delete else Replace(target.id, "edited by the model")
            model = ScriptedModel([ideal_patch_reply(state, [request])] * 2)
            self.proposal = (who, self.attempt(
                lambda: self.views[who].edit("please change it", model=model, preview=True, allow_large_deletion=True)
            ))

        @precondition(lambda self: self.proposal is not None)
        @rule(who=WHO)
        def commit(self, who: int) -> None:
            if self.proposal is None or self.proposal[1] is None:
                return
            proposal = self.proposal[1]
            self.proposal = None
            self.attempt(lambda: self.views[who].commit(proposal))

        @rule(who=WHO)
        def undo(self, who: int) -> None:
            self.attempt(self.views[who].undo)

        @rule(who=WHO)
        def redo(self, who: int) -> None:
            self.attempt(self.views[who].redo)

        @rule(who=WHO, n=st.integers(0, 30))
        def revert(self, who: int, n: int) -> None:
            self.attempt(lambda: self.views[who].revert(n % (self.views[who].head + 1)))

        @rule(who=WHO)
        def purge(self, who: int) -> None:
            self.views[who].purge()
            self.appended.clear()

        @rule(who=WHO)
        def reopen(self, who: int) -> None:
            self.views[who] = Transcript(self.session, store=self.stores[who])

        # -- invariants ------------------------------------------------------------------
        @invariant()
        def the_log_loads_and_replays(self) -> None:
            log = self.stores[0].revisions(self.session)
            fresh = Transcript(self.session, store=self.stores[1])
            expected = naive_replay(log)
            assert [m.to_dict() for m in fresh.messages] == [m.to_dict() for m in expected]
            for view in self.views:
                assert [m.to_dict() for m in view.messages] == [m.to_dict() for m in expected]
            assert [r.number for r in log] == list(range(1, len(log) + 1))
            for revision in log:
                for change in revision.changes:
                    if isinstance(change, (Put, Remove)):
                        assert change.after is None or change.after is AT_END or isinstance(change.after, str)
            assert all(isinstance(m.id, str) for m in fresh.messages)

        @invariant()
        def each_revision_says_what_it_added_removed_and_moved(self) -> None:
            """``added``: the messages new to the state; ``removed``: those gone from it; ``moved``:
            messages it holds before and after (taken out and put back elsewhere)."""
            state: list[Message] = []
            for revision in self.stores[0].revisions(self.session):
                before = {m.id for m in state}
                state = replayed(state, revision)
                after = {m.id for m in state}
                assert {m.id for m in revision.added} == after - before, revision.number
                assert {m.id for m in revision.removed} == before - after, revision.number
                assert {m.id for m in revision.moved} <= before & after, revision.number

        @invariant()
        def the_record_holds_every_appended_message_once(self) -> None:
            record = Transcript(self.session, store=self.stores[0]).record()
            ids = [m.id for m in record]
            assert len(ids) == len(set(ids))
            assert set(self.appended) <= set(ids)

        def teardown(self) -> None:
            self.stores[0].purge(self.session)

    return TranscriptMachine


PROFILE = settings(
    max_examples=EXAMPLES,
    stateful_step_count=STEPS,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


def dump_memory(store: Store, session: str) -> Any:
    return ([r.to_dict() for r in store.revisions(session)], dict(store._index.get(session, {})))  # type: ignore[attr-defined]


def dump_sql(store: Store, session: str) -> Any:
    """The session's revisions and its id-index rows, read straight from the tables."""
    if isinstance(store, SQLiteStore):
        with store._connection() as conn:  # type: ignore[attr-defined]
            rows = conn.execute("SELECT message_id, present, digest FROM message_ids WHERE session_id = ?", (session,))
            index = {bytes(k): (bool(p), d) for k, p, d in rows}
    else:
        from psycopg import sql

        query = sql.SQL("SELECT message_id, present, digest FROM {} WHERE session_key = %s").format(store._names["ids"])  # type: ignore[attr-defined]
        with store._connection() as conn:  # type: ignore[attr-defined]
            index = {bytes(k): (p, d) for k, p, d in conn.execute(query, (store._key(session)[0],))}  # type: ignore[attr-defined]
    return ([r.to_dict() for r in store.revisions(session)], index)


@pytest.fixture
def handles() -> Iterator[list[Store]]:
    opened: list[Store] = []
    yield opened
    for store in opened:
        store.close()


def test_in_memory(handles: list[Store]) -> None:
    store = InMemoryStore()
    run_state_machine_as_test(machine_for(lambda: store, dump_memory), settings=PROFILE)


def test_sqlite(tmp_path: Path, handles: list[Store]) -> None:
    def open_() -> Store:
        handles.append(SQLiteStore(tmp_path / "stateful.db"))
        return handles[-1]

    run_state_machine_as_test(machine_for(open_, dump_sql), settings=PROFILE)


def test_postgres(tmp_path: Path, handles: list[Store]) -> None:
    from pg_support import drop_tables, postgres_dsn, prefix_for

    dsn = postgres_dsn()
    from context_gatekeeper.stores import PostgresStore

    pool = [PostgresStore(dsn, table_prefix=prefix_for(tmp_path)) for _ in range(2)]
    handles.extend(pool)
    turn = iter(range(10**9))
    try:
        run_state_machine_as_test(machine_for(lambda: pool[next(turn) % 2], dump_sql), settings=PROFILE)
    finally:
        for store in pool:
            store.close()
        handles.clear()
        drop_tables(dsn, prefix_for(tmp_path))

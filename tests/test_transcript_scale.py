"""Transcripts at scale: 2,000 turns over a real SQLite file (and PostgreSQL when the test
server is there).

One session gets 1,000 turns in one ``set`` and 1,000 more appended one at a time, so a
single revision carries thousands of changes and the log holds more than
:data:`~context_gatekeeper.stores.replica.BULK` revisions.  That reaches what small tests
never do: the stores' large-revision id lookups (a set, clear, undo, redo or revert of
thousands of messages), the paused garbage collector of bulk commits and reads, and a
reopened transcript that reads a long log at once.  After every step the state must be
what the version rules say, and the same from a transcript on a new store object.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from context_gatekeeper import Replace, Transcript
from context_gatekeeper.stores import SQLiteStore, Store
from context_gatekeeper.stores.replica import BULK

TURNS = 1_000  # set at once, and as many again appended one by one
Said = list[tuple[str, str]]


def turn(i: int) -> Said:
    return [("user", f"question {i} about topic{i % 50}"), ("assistant", f"answer {i} on topic{i % 50}")]


def said(transcript: Transcript) -> Said:
    return [(m.role, m.content) for m in transcript.messages]


@pytest.fixture(params=["sqlite", "postgres"])
def open_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], Store]]:
    """Opens a new store object on one storage each time it is called; closes them all after."""
    opened: list[Store] = []
    if request.param == "sqlite":
        def make() -> Store:
            return SQLiteStore(tmp_path / "big.db")
    else:
        from pg_support import drop_tables, postgres_dsn, prefix_for

        from context_gatekeeper.stores import PostgresStore

        dsn = postgres_dsn()

        def make() -> Store:
            return PostgresStore(dsn, table_prefix=prefix_for(tmp_path))

    def opening() -> Store:
        opened.append(make())
        return opened[-1]

    try:
        yield opening
    finally:
        for store in opened:
            store.close()
        if request.param == "postgres":
            drop_tables(dsn, prefix_for(tmp_path))


def test_two_thousand_turns_set_cleared_undone_redone_and_reverted(open_store: Callable[[], Store]) -> None:
    store = open_store()
    transcript = Transcript("big", store=store)

    def check(expected: Said) -> None:
        """The state is ``expected``, here and read afresh from the storage."""
        assert said(transcript) == expected
        fresh = Transcript("big", store=open_store())
        assert fresh.head == transcript.head and said(fresh) == expected
        assert [m.to_dict() for m in fresh.messages] == [m.to_dict() for m in transcript.messages]

    first = [pair for i in range(TURNS) for pair in turn(i)]
    transcript.set([{"role": role, "content": text} for role, text in first])  # revision 1: 2,000 messages
    check(first)
    for i in range(TURNS, 2 * TURNS):
        (user, question), (_, answer) = turn(i)
        transcript.append(user=question, assistant=answer)
    every = first + [pair for i in range(TURNS, 2 * TURNS) for pair in turn(i)]
    assert transcript.head == TURNS + 1 > BULK
    check(every)

    transcript.clear()  # 4,000 messages removed in one revision
    check([])
    transcript.undo()
    check(every)
    transcript.redo()
    check([])
    transcript.undo()
    check(every)

    edited = transcript.messages[1]
    transcript.apply([Replace(edited.id, "an edited answer")])
    check([*every[:1], ("assistant", "an edited answer"), *every[2:]])
    transcript.revert(1)  # the first set: drops the 2,000 appended messages and the edit
    check(first)
    assert [(m.role, m.content) for m in transcript.snapshot(TURNS + 1)] == every  # a replay of 1,001 revisions
    transcript.undo()  # of the revert: all of them back
    check([*every[:1], ("assistant", "an edited answer"), *every[2:]])
    transcript.revert(0)
    check([])

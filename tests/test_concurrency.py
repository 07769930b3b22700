"""Concurrent processes and crashes, on SQLite and on PostgreSQL (docs/architecture.md#concurrency-rules).

Every test runs once per store, in separate processes started with the ``spawn``
context (the bodies live in ``concurrency_workers.py``).  The PostgreSQL runs need
``CG_TEST_POSTGRES_DSN`` (see ``pg_support.py``).
"""

from __future__ import annotations

import json
import multiprocessing
import random
import signal
import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

import concurrency_workers as workers
from context_gatekeeper import Transcript
from context_gatekeeper.records.messages import Message
from context_gatekeeper.records.operations import Replace
from context_gatekeeper.stores import FAULT_POINTS, Store
from context_gatekeeper.transcripts.transcript_gate import TranscriptGate
from pg_support import drop_run_tables, postgres_dsn, prefix_for

CTX = multiprocessing.get_context("spawn")
APPENDERS, TURNS = 8, 200  # 8 writers x 200 turns: the contention the store must survive
JOIN_TIMEOUT = 120


@pytest.fixture(scope="module", autouse=True)
def _drop_tables_afterwards() -> Iterator[None]:
    yield
    drop_run_tables()


@pytest.fixture(params=["sqlite", "postgres"])
def spec(request, tmp_path: Path) -> Iterator[tuple[str, ...]]:
    """Which storage the test's processes share; created (set up) before any child starts."""
    if request.param == "sqlite":
        spec = ("sqlite", str(tmp_path / "shared.db"))
    else:
        spec = ("postgres", postgres_dsn(), prefix_for(tmp_path))
    workers.open_store(spec).close()
    yield spec


@pytest.fixture
def parent(spec) -> Iterator[Store]:
    """The test process's own handle on the storage."""
    store = workers.open_store(spec)
    yield store
    store.close()


def run(*processes: multiprocessing.Process) -> None:
    """Wait for the processes (killing them all if one hangs)."""
    try:
        for proc in processes:
            proc.join(JOIN_TIMEOUT)
            assert proc.exitcode is not None, f"{proc.name} did not finish within {JOIN_TIMEOUT} s"
    finally:
        for proc in processes:
            if proc.is_alive():
                proc.kill()
                proc.join()


def contents(messages: Sequence[Message]) -> list[str]:
    return [m.content for m in messages]


def assert_turns_in_order(texts: list[str], tags: list[str], count: int, *, adjacent: bool) -> None:
    """Each tag's questions and answers appear once each, in order; ``adjacent``: every answer
    right after its own question."""
    for tag in tags:
        mine = [t for t in texts if t.startswith(f"{tag} ")]
        assert mine == [f"{tag} {kind}{j}" for j in range(count) for kind in ("q", "a")], f"{tag}'s turns"
    if adjacent:
        for i, text in enumerate(texts):
            tag, _, rest = text.partition(" ")
            if tag in tags and rest.startswith("a"):
                assert texts[i - 1] == f"{tag} q{rest[1:]}", f"{text!r} follows {texts[i - 1]!r}"


# -- many writers ----------------------------------------------------------------------------
def test_eight_appenders_and_an_editor_lose_nothing(spec, parent: Store, tmp_path: Path) -> None:
    transcript = Transcript("chat", store=parent)
    seed = transcript.append(user="seed question", assistant="seed answer")
    target = seed.added[0].id
    ready, stop, out = CTX.Barrier(APPENDERS + 2), CTX.Event(), str(tmp_path / "editor.json")
    tags = [f"p{k}" for k in range(APPENDERS)]
    appenders = [CTX.Process(target=workers.appender, args=(spec, "chat", tag, TURNS, ready), name=tag) for tag in tags]
    editor = CTX.Process(target=workers.editor, args=(spec, "chat", target, ready, stop, out), name="editor")
    for proc in [*appenders, editor]:
        proc.start()
    try:
        ready.wait(JOIN_TIMEOUT)
        run(*appenders)
    finally:
        stop.set()
        run(editor)
    assert [p.exitcode for p in [*appenders, editor]] == [0] * (APPENDERS + 1)
    result = json.loads(Path(out).read_text())
    assert result["errors"] == []
    assert result["won"], "no edit committed"
    assert result["lost"], "no edit lost a race"  # every round has one loser by construction

    history = transcript.history()
    assert len(history) == 1 + APPENDERS * TURNS + len(result["won"])
    assert all(len(r.added) == 2 and r.added[0].role == "user" for r in history if r.kind == "append")
    record = contents(transcript.record())
    assert record[:2] == ["seed question", "seed answer"] and len(record) == 2 + 2 * APPENDERS * TURNS
    assert_turns_in_order(record, tags, TURNS, adjacent=True)  # appends are turn-atomic
    state = transcript.messages
    assert_turns_in_order(contents(state), tags, TURNS, adjacent=True)
    assert [m.id for m in state] == [m.id for m in transcript.record()]  # edits changed text, not order

    edits = [r for r in history if r.kind == "apply"]
    assert sorted(c.after.content for r in edits for c in r.changes) == sorted(result["won"])
    assert all(r.base <= r.parent for r in edits) and any(r.base < r.parent for r in edits)  # some rebased
    stored_text = json.dumps([r.changes_json() for r in parent.revisions("chat")])
    assert not [text for text in result["lost"] if f'"{text}"' in stored_text], "a losing edit left a trace"
    assert state[0].content == edits[-1].changes[0].after.content
    assert Transcript("chat", store=workers.open_store(spec)).messages == state  # a fresh process's view


def test_question_and_answer_writers_never_swap_answers(spec, parent: Store) -> None:
    ready, asked, rounds = CTX.Barrier(3), CTX.Barrier(2), 100
    writers = [CTX.Process(target=workers.question_answerer, args=(spec, "qa", tag, rounds, ready, asked))
               for tag in ("w1", "w2")]
    for proc in writers:
        proc.start()
    ready.wait(JOIN_TIMEOUT)
    run(*writers)
    assert [p.exitcode for p in writers] == [0, 0]
    transcript = Transcript("qa", store=parent)
    assert len(transcript.history()) == 4 * rounds  # every put its own revision
    state = contents(transcript.messages)
    assert len(state) == 4 * rounds
    assert_turns_in_order(state, ["w1", "w2"], rounds, adjacent=True)
    record = contents(transcript.record())
    interleaved = sum(  # a question of one writer directly followed by the other writer's message
        record[i][:2] != record[i + 1][:2] and record[i][3] == "q" for i in range(len(record) - 1)
    )
    assert interleaved >= rounds, "a round's questions did not both land before its answers"


# -- crashes ---------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["append", "edit"])
@pytest.mark.parametrize("point", FAULT_POINTS)
def test_a_writer_killed_inside_a_revision_loses_nothing(spec, parent: Store, point: str, kind: str) -> None:
    transcript = Transcript("s", store=parent)
    first = transcript.append(user="question one", assistant="answer one")
    transcript.append(user="question two", assistant="answer two")
    before = (parent.head("s"), parent.revisions("s"), transcript.messages)
    victim = CTX.Process(target=workers.die_inside, args=(spec, "s", point, kind, first.added[1].id))
    victim.start()
    run(victim)
    assert victim.exitcode == -signal.SIGKILL
    reopened = workers.open_store(spec)
    try:
        again = Transcript("s", store=reopened)
        assert (reopened.head("s"), reopened.revisions("s"), again.messages) == before
        assert (parent.head("s"), parent.revisions("s"), transcript.messages) == before
        assert again.append(user="question three", assistant="answer three").number == 3
        assert transcript.apply([Replace(first.added[1].id, "answer one, revised")]).number == 4
        assert contents(again.messages)[1] == "answer one, revised"
    finally:
        reopened.close()
    if spec[0] == "sqlite":
        with sqlite3.connect(spec[1]) as raw:
            assert raw.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        raw.close()


# -- reads after another process wrote ------------------------------------------------------
def test_reads_never_serve_text_another_process_superseded(spec, parent: Store) -> None:
    transcript = Transcript("s", store=parent)
    first = transcript.append(user="Where is the meeting? In Dublin", assistant="The meeting is in Dublin.")
    transcript.append(user="What about lunch?", assistant="Lunch is at noon.")
    gate = TranscriptGate(transcript, token_budget=10_000)
    answer = first.added[1].id
    assert "The meeting is in Dublin." in contents(gate.select_messages("meeting"))

    def elsewhere(action: str) -> None:
        proc = CTX.Process(target=workers.write_once, args=(spec, "s", action, answer))
        proc.start()
        run(proc)
        assert proc.exitcode == 0

    elsewhere("replace")
    assert contents(transcript.messages)[1] == "superseding text"
    assert "The meeting is in Dublin." not in contents(gate.select_messages("meeting"))
    elsewhere("append")
    assert contents(transcript.messages)[-2:] == ["from elsewhere", "answered elsewhere"]
    elsewhere("delete")
    assert answer not in [m.id for m in transcript.messages]
    assert all(m.id != answer for m in gate.select_messages("meeting"))
    elsewhere("undo")  # brings the superseding text back
    assert contents(transcript.messages)[1] == "superseding text"
    assert contents(transcript.record())[1] == "The meeting is in Dublin."  # the record keeps what was said


# -- identifiers -----------------------------------------------------------------------------
HOSTILE_SESSIONS = [
    "it's",
    'say "hi"',
    "x'; DROP TABLE revisions; --",
    "a;b;c;",
    "ünïcødé 会话 🚀",
    "".join(chr(random.Random(11).randrange(0x21, 0xD7FF)) for _ in range(10_000)),
    "z" * 10_240,
]


def test_hostile_session_ids_round_trip_between_processes(spec, parent: Store) -> None:
    proc = CTX.Process(target=workers.write_sessions, args=(spec, HOSTILE_SESSIONS))
    proc.start()
    run(proc)
    assert proc.exitcode == 0
    assert sorted(parent.sessions()) == sorted(HOSTILE_SESSIONS)
    for n, session in enumerate(HOSTILE_SESSIONS):
        expected = [f"question {n}", f"answer {n}", f"again {n}", f"again answered {n}"]
        assert contents(Transcript(session, store=parent).messages) == expected
        assert parent.head(session) == 2


def test_processes_retrying_the_same_requests_add_each_once(spec, parent: Store) -> None:
    """Retries raced into the log used to poison the session for good."""
    rounds, ready = 20, CTX.Event()
    procs = [CTX.Process(target=workers.retrier, args=(spec, "retry", rounds, ready), name=f"r{i}") for i in range(4)]
    for proc in procs:
        proc.start()
    ready.set()
    run(*procs)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    t = Transcript("retry", store=parent)  # loads: the session is not poisoned
    assert sorted(m.id for m in t.messages) == sorted(f"r{n}" for n in range(rounds))
    assert parent.head("retry") == rounds

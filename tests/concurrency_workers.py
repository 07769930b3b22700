"""Process bodies for ``test_concurrency.py`` (a light module: spawned children import it, not pytest).

A *spec* says which storage to open in the child: ``("sqlite", path)`` or
``("postgres", dsn, table_prefix)``.  Results go back as JSON files, which survive
a child that is killed.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Sequence
from typing import Any

from context_gatekeeper import Transcript
from context_gatekeeper.errors import StaleHeadError
from context_gatekeeper.records.operations import Delete, Replace
from context_gatekeeper.records.revisions import Revision
from context_gatekeeper.stores import SQLiteStore, Store

Spec = Sequence[str]


def open_store(spec: Spec) -> Store:
    """A new handle on the storage ``spec`` names."""
    if spec[0] == "sqlite":
        return SQLiteStore(spec[1])
    from context_gatekeeper.stores import PostgresStore

    return PostgresStore(spec[1], table_prefix=spec[2], min_size=1, max_size=2)


def dump(path: str, data: Any) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f)


# -- 8 appenders and an editor -------------------------------------------------------------
def appender(spec: Spec, session: str, tag: str, turns: int, ready: Any) -> None:
    """Append ``turns`` turns ("<tag> q<j>" / "<tag> a<j>"), each one revision."""
    store = open_store(spec)
    transcript = Transcript(session, store=store)
    ready.wait()
    for j in range(turns):
        transcript.append(user=f"{tag} q{j}", assistant=f"{tag} a{j}")
    store.close()


class RacingStore(Store):
    """Delegates to ``inner``; an ``apply`` commit first waits at ``gate``, so the two
    editing threads always commit the edits they computed against the same state."""

    def __init__(self, inner: Store, gate: threading.Barrier) -> None:
        self.inner, self.gate = inner, gate

    def setup(self) -> None:
        self.inner.setup()

    def head(self, session_id: str) -> int:
        return self.inner.head(session_id)

    def revisions(self, session_id: str, after: int = 0) -> list[Revision]:
        return self.inner.revisions(session_id, after)

    def commit(self, session_id: str, revision: Revision, *, expected_head: int | None) -> Revision:
        if revision.kind == "apply":
            self.gate.wait(30)
        return self.inner.commit(session_id, revision, expected_head=expected_head)

    def purge(self, session_id: str) -> None:
        self.inner.purge(session_id)

    def sessions(self) -> list[str]:
        return self.inner.sessions()

    def close(self) -> None:
        self.inner.close()


MIN_EDIT_ROUNDS = 3


def editor(spec: Spec, session: str, target: str, ready: Any, stop: Any, out: str) -> None:
    """Two threads with their own connections replace ``target``'s text, round after round,
    until ``stop``; in every round both commit at once, so one wins and one is stale."""
    gate = threading.Barrier(2)
    decided = {"stop": False, "rounds": 0}

    def next_round() -> None:
        # at least MIN_EDIT_ROUNDS rounds even when the appenders finished first (a loaded
        # machine may start these threads late): otherwise no edit is ever raced
        decided["stop"] = stop.is_set() and decided["rounds"] >= MIN_EDIT_ROUNDS
        decided["rounds"] += 1

    start = threading.Barrier(2, action=next_round)
    results: dict[str, list[str]] = {"won": [], "lost": [], "errors": []}

    def run(name: str) -> None:
        store = RacingStore(open_store(spec), gate)
        transcript = Transcript(session, store=store)
        try:
            for n in range(10**6):
                start.wait(60)
                if decided["stop"]:
                    break
                text = f"edit {name} {n}"
                try:
                    transcript.apply([Replace(target, text)])
                    results["won"].append(text)
                except StaleHeadError:
                    results["lost"].append(text)
                time.sleep(0.005)
        except BaseException as exc:  # reported to the parent
            results["errors"].append(repr(exc))
            gate.abort()
            start.abort()
        finally:
            store.close()

    threads = [threading.Thread(target=run, args=(name,)) for name in ("A", "B")]
    for thread in threads:
        thread.start()
    ready.wait()
    for thread in threads:
        thread.join()
    dump(out, results)


# -- LlamaIndex-style writers: put(user), later put(assistant) ------------------------------
def question_answerer(spec: Spec, session: str, tag: str, rounds: int, ready: Any, asked: Any) -> None:
    """Append a question, then (as a separate append) its answer, ``rounds`` times; every
    round both writers' questions land before either answer (``asked``, a barrier of the
    two), so the other writer's question always comes between a question and its answer."""
    store = open_store(spec)
    transcript = Transcript(session, store=store)
    ready.wait()
    try:
        for j in range(rounds):
            transcript.append(user=f"{tag} q{j}")
            asked.wait(60)
            transcript.append(assistant=f"{tag} a{j}")
    except BaseException:
        asked.abort()  # the other writer stops waiting too
        raise
    finally:
        store.close()


# -- killed mid-revision -------------------------------------------------------------------
def die_inside(spec: Spec, session: str, point: str, kind: str, target: str) -> None:
    """Start an append or an edit and SIGKILL this process at fault point ``point``."""
    store = open_store(spec)
    transcript = Transcript(session, store=store)

    def hook(at: str) -> None:
        if at == point:
            os.kill(os.getpid(), signal.SIGKILL)

    store.fault_hook = hook
    if kind == "append":
        transcript.append(user="doomed question", assistant="doomed answer")
    else:
        transcript.apply([Replace(target, "doomed edit")])
    raise AssertionError("still alive after the fault point")


# -- another process writes ----------------------------------------------------------------
def write_once(spec: Spec, session: str, action: str, target: str) -> None:
    """One write from another process: replace or delete ``target``, append, or undo."""
    store = open_store(spec)
    transcript = Transcript(session, store=store)
    if action == "replace":
        transcript.apply([Replace(target, "superseding text")])
    elif action == "delete":
        transcript.apply([Delete(target)])
    elif action == "append":
        transcript.append(user="from elsewhere", assistant="answered elsewhere")
    elif action == "undo":
        transcript.undo()
    store.close()


def write_sessions(spec: Spec, sessions: list[str]) -> None:
    """Two turns in each session, the text naming the session's index."""
    store = open_store(spec)
    for n, session in enumerate(sessions):
        transcript = Transcript(session, store=store)
        transcript.append(user=f"question {n}", assistant=f"answer {n}")
        transcript.append(user=f"again {n}", assistant=f"again answered {n}")
    store.close()


# -- retried requests -------------------------------------------------
def retrier(spec: Spec, session: str, rounds: int, ready: Any) -> None:
    """Each round, send the request "r<n>" (a message with a fixed id) with id renewal on,
    as a framework retrying a request does; every process sends every round."""
    store = open_store(spec)
    transcript = Transcript(session, store=store)
    ready.wait()
    for n in range(rounds):
        transcript.append(messages=[{"id": f"r{n}", "role": "user", "content": f"request {n}"}], renew_taken_ids=True)
    store.close()

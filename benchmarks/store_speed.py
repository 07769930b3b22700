"""Append throughput and edit-commit latency of each store, in one process and in eight;
and PostgreSQL's native async twins against thread-backed ones, with 50 sessions at once.

This is a script that prints figures, not a test.  It imports the installed package
(``pip install -e '.[postgres]'``).  Run it from a checkout::

    python benchmarks/store_speed.py                          # in-memory and SQLite
    python benchmarks/store_speed.py --dsn postgresql://...   # and PostgreSQL
    CG_TEST_POSTGRES_DSN=... python benchmarks/store_speed.py # the same (eval "$(.ci/postgres.sh start)")

The first table goes through a :class:`~context_gatekeeper.Transcript`, exactly as a chat
service would use it, so each figure includes the head check every call makes:

* **appends/s**: ``Transcript.append(user=..., assistant=...)`` calls (one turn, one
  ``append`` revision, one durable transaction each) per second of wall time.
  *1 process*: ``--turns`` turns in a row.  *N processes*: ``--processes`` processes
  (``spawn``) each append ``--turns`` turns to the same session at once; the clock
  runs from a shared start barrier until the last one finishes.
* **edit median / p95**: the latency of ``Transcript.apply([Replace(...)])`` (an
  explicit edit, no model), from the call until it returns committed.  *1 process*:
  ``--edits`` edits after the appends.  *N processes*: one more process edits the
  same session in a loop while the appenders run (its edits are rebased over
  their appends), so this is the latency under write contention.

**50 async sessions** (PostgreSQL only): ``--sessions`` asyncio tasks in one event loop,
each its own session, each committing ``--async-turns`` turns (one ``append`` revision
each) straight through the store's ``acommit`` (no Transcript, so the figure is the
store's async path alone).  *native*: ``PostgresStore.acommit``, on psycopg's async pool;
*threads*: the same store's sync ``commit`` through the :class:`~context_gatekeeper.stores.Store`
base class's twin (``Store.acommit(store, ...)``, i.e. ``asyncio.to_thread``), as
``PostgresStore`` did before.  Both use pools of the same size (``max_size=10``) and
run in this process, in ``--rounds`` alternating rounds after a warm-up; a commit's
latency runs from the call until it returns; *client CPU* is this process's CPU time
(all its threads) per commit.  What the two trade: the native twins
hold no thread per call and are not capped by the default executor's workers
(``min(32, cores + 4)``), but all of psycopg's own work (about a millisecond of CPU
per commit) runs on the event loop's one thread; the thread-backed twins spread that
work over several cores.  So the ratio depends on the machine: where the client shares
a few cores with the server, threads can come out ahead.

The in-memory store lives in one process, so it has no multi-process row.  SQLite
uses a fresh file in a temporary directory (WAL, ``synchronous=FULL``); PostgreSQL
uses tables with a fresh prefix, dropped at the end.  Durability settings are the
server's own (the figures depend on its ``fsync``/``synchronous_commit``).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import secrets
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import Any

from context_gatekeeper.stores import InMemoryStore, SQLiteStore, Store
from context_gatekeeper.records.messages import Message
from context_gatekeeper.records.operations import Put
from context_gatekeeper.records.revisions import Revision

Spec = tuple[str, ...]


def open_store(spec: Spec, max_size: int = 2) -> Any:
    """A new handle on the storage ``spec`` names: ``("memory",)``, ``("sqlite", path)`` or
    ``("postgres", dsn, prefix)``."""

    if spec[0] == "memory":
        return InMemoryStore()
    if spec[0] == "sqlite":
        return SQLiteStore(spec[1])
    from context_gatekeeper.stores import PostgresStore

    return PostgresStore(spec[1], table_prefix=spec[2], max_size=max_size)


def percentile(values: Sequence[float], share: float) -> float:
    """The ``share`` quantile (nearest rank) of ``values``."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(share * len(ordered)) - 1))]


def timed_edits(transcript: Any, target: str, count: int | None, until: Any = None) -> list[float]:
    """Latencies (s) of ``count`` edits, or of edits until the event ``until`` is set."""
    from context_gatekeeper.records.operations import Replace

    latencies: list[float] = []
    n = 0
    while (count is not None and n < count) or (until is not None and not until.is_set()):
        started = time.perf_counter()
        transcript.apply([Replace(target, f"revised text, version {n}")])
        latencies.append(time.perf_counter() - started)
        n += 1
        if until is not None:
            time.sleep(0.002)  # a human-ish pace; the appenders are the load
    return latencies


# -- one process ---------------------------------------------------------------------------
def single_process(spec: Spec, turns: int, edits: int) -> dict[str, float]:
    from context_gatekeeper import Transcript

    store = open_store(spec)
    transcript = Transcript("bench-single", store=store)
    started = time.perf_counter()
    for j in range(turns):
        transcript.append(user=f"question {j} about the cache", assistant=f"answer {j}: use a write-ahead log")
    elapsed = time.perf_counter() - started
    latencies = timed_edits(transcript, transcript.messages[0].id, edits)
    store.close()
    return {"appends": turns, "rate": turns / elapsed, **edit_figures(latencies)}


# -- several processes ---------------------------------------------------------------------
def appender(spec: Spec, session: str, turns: int, ready: Any) -> None:
    from context_gatekeeper import Transcript

    store = open_store(spec)
    transcript = Transcript(session, store=store)
    ready.wait()
    for j in range(turns):
        transcript.append(user=f"question {j} from {os.getpid()}", assistant=f"answer {j}")
    store.close()


def editor(spec: Spec, session: str, target: str, ready: Any, stop: Any, results: Any) -> None:
    from context_gatekeeper import Transcript

    store = open_store(spec)
    transcript = Transcript(session, store=store)
    ready.wait()
    results.put(timed_edits(transcript, target, None, until=stop))
    store.close()


def many_processes(spec: Spec, processes: int, turns: int) -> dict[str, float]:
    from context_gatekeeper import Transcript

    ctx = multiprocessing.get_context("spawn")
    store = open_store(spec)
    seed = Transcript("bench-many", store=store).append(user="seed question", assistant="seed answer")
    ready, stop, results = ctx.Barrier(processes + 2), ctx.Event(), ctx.Queue()
    appenders = [ctx.Process(target=appender, args=(spec, "bench-many", turns, ready)) for _ in range(processes)]
    edit_proc = ctx.Process(target=editor, args=(spec, "bench-many", seed.added[0].id, ready, stop, results))
    for proc in [*appenders, edit_proc]:
        proc.start()
    ready.wait()
    started = time.perf_counter()
    for proc in appenders:
        proc.join()
    elapsed = time.perf_counter() - started
    stop.set()
    latencies = results.get(timeout=120)
    edit_proc.join()
    if any(p.exitcode for p in [*appenders, edit_proc]):
        raise RuntimeError("a benchmark process failed; see its traceback above")
    head = store.head("bench-many")
    store.close()
    assert head == 1 + processes * turns + len(latencies), "lost a revision"
    return {"appends": processes * turns, "rate": processes * turns / elapsed, **edit_figures(latencies)}


def edit_figures(latencies: Sequence[float]) -> dict[str, float]:
    if not latencies:
        return {"edits": 0, "median": float("nan"), "p95": float("nan")}
    return {"edits": len(latencies), "median": statistics.median(latencies) * 1e3, "p95": percentile(latencies, 0.95) * 1e3}


# -- 50 async sessions ---------------------------------------------------------------------
def turn_revision(session: str, j: int) -> Revision:
    """Turn ``j`` of ``session``: a question and its answer, as one append."""
    question = Message(id=f"{session}-u{j}", role="user", content=f"question {j} about the cache")
    answer = Message(id=f"{session}-a{j}", role="assistant", content=f"answer {j}: use a write-ahead log")
    return Revision(number=0, parent=0, kind="append", changes=(Put(question, None), Put(answer, question.id)))


async def async_sessions(store: Any, tag: str, sessions: int, turns: int, native: bool) -> tuple[float, list[float]]:
    """``sessions`` tasks at once, each committing ``turns`` turns to its own session:
    the wall time and each commit's latency (s)."""
    commit = store.acommit if native else (lambda *args, **kwargs: Store.acommit(store, *args, **kwargs))
    latencies: list[float] = []

    async def session(n: int) -> None:
        name = f"{tag}-{n}"
        for j in range(turns):
            started = time.perf_counter()
            await commit(name, turn_revision(name, j), expected_head=None)
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(session(n) for n in range(sessions)))
    elapsed = time.perf_counter() - started
    heads = await asyncio.gather(*(store.ahead(f"{tag}-{n}") for n in range(sessions)))
    assert heads == [turns] * sessions, "lost a revision"
    return elapsed, latencies


def native_against_threads(spec: Spec, sessions: int, turns: int, rounds: int) -> dict[str, dict[str, float]]:
    """The native async twins and the thread-backed ones, on one store (pools of 10), in
    ``rounds`` alternating rounds (native first in even rounds, threads first in odd ones),
    so a slow spell of the server weighs on both."""
    modes = {"native async": True, "threads (Store.acommit)": False}
    times: dict[str, float] = dict.fromkeys(modes, 0.0)
    cpu: dict[str, float] = dict.fromkeys(modes, 0.0)
    latencies: dict[str, list[float]] = {mode: [] for mode in modes}

    async def main() -> None:
        store = open_store(spec, max_size=10)
        try:
            for native in modes.values():  # warm-up: opens the async pool and the sync pool's connections
                await async_sessions(store, f"warm-{native}", sessions, 2, native)
            for r in range(rounds):
                for mode in list(modes) if r % 2 == 0 else list(modes)[::-1]:
                    used = time.process_time()
                    elapsed, measured = await async_sessions(store, f"{r}-{modes[mode]}", sessions, turns, modes[mode])
                    cpu[mode] += time.process_time() - used
                    times[mode] += elapsed
                    latencies[mode] += measured
        finally:
            await store.aclose()

    asyncio.run(main())
    return {mode: {"commits": len(latencies[mode]), "rate": len(latencies[mode]) / times[mode],
                   "p50": percentile(latencies[mode], 0.5) * 1e3, "p95": percentile(latencies[mode], 0.95) * 1e3,
                   "cpu": cpu[mode] / len(latencies[mode]) * 1e3}
            for mode in modes}


def drop_tables(dsn: str, prefixes: Sequence[str]) -> None:
    """Drop the tables of the stores with these table prefixes."""
    import psycopg
    from psycopg import sql

    from context_gatekeeper.stores.postgres_ops import TABLES

    with psycopg.connect(dsn, autocommit=True) as conn:
        for prefix in prefixes:
            for table in TABLES.values():
                conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(prefix + table)))


# -- output --------------------------------------------------------------------------------
def table(rows: list[tuple[str, str, dict[str, float] | None]]) -> Any:
    from rich.table import Table

    out = Table(title="Store speed (through Transcript; every call does the head check)")
    for name, justify in [("store", "left"), ("writers", "left"), ("appends", "right"), ("appends/s", "right"),
                          ("edits", "right"), ("edit median ms", "right"), ("edit p95 ms", "right")]:
        out.add_column(name, justify=justify)  # type: ignore[arg-type]
    for store, mode, figures in rows:
        if figures is None:
            out.add_row(store, mode, "—", "n/a (one process only)", "", "", "")
            continue
        out.add_row(store, mode, f"{figures['appends']:,}", f"{figures['rate']:,.0f}", f"{figures['edits']:,}",
                    f"{figures['median']:.2f}", f"{figures['p95']:.2f}")
    return out


def async_table(figures: dict[str, dict[str, float]], sessions: int) -> Any:
    from rich.table import Table

    out = Table(title=f"PostgresStore: {sessions} concurrent async sessions (acommit, one event loop)")
    for name in ("async twins", "commits", "commits/s", "p50 ms", "p95 ms", "client CPU ms/commit"):
        out.add_column(name, justify="left" if name == "async twins" else "right")
    for mode, f in figures.items():
        out.add_row(mode, f"{f['commits']:,.0f}", f"{f['rate']:,.0f}", f"{f['p50']:.2f}", f"{f['p95']:.2f}", f"{f['cpu']:.2f}")
    return out


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=200, help="turns each appending process writes (default 200)")
    parser.add_argument("--processes", type=int, default=8, help="appending processes in the shared run (default 8)")
    parser.add_argument("--edits", type=int, default=100, help="edits timed in the one-process run (default 100)")
    parser.add_argument("--sessions", type=int, default=50, help="concurrent async sessions (default 50)")
    parser.add_argument("--async-turns", type=int, default=20, help="turns each async session commits (default 20)")
    parser.add_argument("--rounds", type=int, default=4, help="alternating rounds of each async mode (default 4)")
    parser.add_argument("--dsn", default=os.environ.get("CG_TEST_POSTGRES_DSN"),
                        help="PostgreSQL DSN (default: $CG_TEST_POSTGRES_DSN; none: PostgreSQL is skipped)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse(argv)
    load = os.getloadavg()[0]  # other work on the machine weighs on every figure
    from rich.console import Console

    console = Console()
    rows: list[tuple[str, str, dict[str, float] | None]] = []
    concurrent: dict[str, dict[str, float]] = {}
    prefix = f"bench_{secrets.token_hex(4)}_"
    with tempfile.TemporaryDirectory() as tmp:
        specs: list[tuple[str, Spec, Spec | None]] = [
            ("InMemoryStore", ("memory",), None),
            ("SQLiteStore", ("sqlite", f"{tmp}/single.db"), ("sqlite", f"{tmp}/many.db")),
        ]
        if args.dsn:
            specs.append(("PostgresStore", ("postgres", args.dsn, f"{prefix}1_"), ("postgres", args.dsn, f"{prefix}n_")))
        else:
            console.print("[yellow]PostgreSQL skipped: pass --dsn or set CG_TEST_POSTGRES_DSN[/yellow]")
        try:
            for name, single, many in specs:
                console.print(f"measuring {name} ...")
                rows.append((name, "1 process", single_process(single, args.turns, args.edits)))
                rows.append((name, f"{args.processes} processes + 1 editor",
                             many_processes(many, args.processes, args.turns) if many else None))
            if args.dsn:
                console.print(f"measuring PostgresStore with {args.sessions} async sessions ...")
                concurrent = native_against_threads(
                    ("postgres", args.dsn, f"{prefix}a_"), args.sessions, args.async_turns, args.rounds
                )
        finally:
            if args.dsn:
                drop_tables(args.dsn, [f"{prefix}{kind}_" for kind in "1na"])
    console.print(table(rows))
    if concurrent:
        console.print(async_table(concurrent, args.sessions))
        native, threads = concurrent.values()
        console.print(
            f"native / threads: {native['rate'] / threads['rate']:.2f}x the commits per second, "
            f"p50 latency {native['p50'] / threads['p50']:.2f}x, p95 {native['p95'] / threads['p95']:.2f}x "
            f"({args.sessions} sessions x {args.async_turns} turns, {args.rounds} rounds each; the default thread pool has "
            f"{min(32, (os.cpu_count() or 1) + 4)} workers; load average at the start: {load:.1f}, cores: {os.cpu_count()})."
        )
    console.print(
        f"1 process: {args.turns} appends then {args.edits} edits in a row.  "
        f"{args.processes} processes: each appends {args.turns} turns to one session at once while one more "
        "process edits it in a loop (latency under contention).  CPU cores: "
        f"{os.cpu_count()}; Python {sys.version.split()[0]}."
    )


if __name__ == "__main__":
    main()

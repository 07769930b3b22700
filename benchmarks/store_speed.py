"""Append throughput and edit-commit latency of each store, in one process and in eight.

This is a script that prints figures, not a test.  Run it from a checkout::

    python benchmarks/store_speed.py                          # in-memory and SQLite
    python benchmarks/store_speed.py --dsn postgresql://...   # and PostgreSQL
    CG_TEST_POSTGRES_DSN=... python benchmarks/store_speed.py # the same (eval "$(.ci/postgres.sh start)")

Everything goes through a :class:`~context_gatekeeper.Transcript`, exactly as a chat
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

The in-memory store lives in one process, so it has no multi-process row.  SQLite
uses a fresh file in a temporary directory (WAL, ``synchronous=FULL``); PostgreSQL
uses tables with a fresh prefix, dropped at the end.  Durability settings are the
server's own (the figures depend on its ``fsync``/``synchronous_commit``).
"""

from __future__ import annotations

import argparse
import importlib.util
import multiprocessing
import os
import secrets
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
Spec = tuple[str, ...]


def ensure_importable() -> None:
    """Put the checkout's ``shared/`` on ``sys.path`` unless ``context_gatekeeper`` is installed."""
    if importlib.util.find_spec("context_gatekeeper") is None:
        sys.path.insert(0, str(REPO / "shared"))


def open_store(spec: Spec) -> Any:
    """A new handle on the storage ``spec`` names: ``("memory",)``, ``("sqlite", path)`` or
    ``("postgres", dsn, prefix)``."""
    ensure_importable()
    from context_gatekeeper.stores import InMemoryStore, SQLiteStore

    if spec[0] == "memory":
        return InMemoryStore()
    if spec[0] == "sqlite":
        return SQLiteStore(spec[1])
    from context_gatekeeper.stores import PostgresStore

    return PostgresStore(spec[1], table_prefix=spec[2], max_size=2)


def percentile(values: Sequence[float], share: float) -> float:
    """The ``share`` quantile (nearest rank) of ``values``."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(share * len(ordered)) - 1))]


def timed_edits(transcript: Any, target: str, count: int | None, until: Any = None) -> list[float]:
    """Latencies (s) of ``count`` edits, or of edits until the event ``until`` is set."""
    from context_gatekeeper.transcripts.operations import Replace

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
    ensure_importable()
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
    ensure_importable()
    from context_gatekeeper import Transcript

    store = open_store(spec)
    transcript = Transcript(session, store=store)
    ready.wait()
    for j in range(turns):
        transcript.append(user=f"question {j} from {os.getpid()}", assistant=f"answer {j}")
    store.close()


def editor(spec: Spec, session: str, target: str, ready: Any, stop: Any, results: Any) -> None:
    ensure_importable()
    from context_gatekeeper import Transcript

    store = open_store(spec)
    transcript = Transcript(session, store=store)
    ready.wait()
    results.put(timed_edits(transcript, target, None, until=stop))
    store.close()


def many_processes(spec: Spec, processes: int, turns: int) -> dict[str, float]:
    ensure_importable()
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


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=200, help="turns each appending process writes (default 200)")
    parser.add_argument("--processes", type=int, default=8, help="appending processes in the shared run (default 8)")
    parser.add_argument("--edits", type=int, default=100, help="edits timed in the one-process run (default 100)")
    parser.add_argument("--dsn", default=os.environ.get("CG_TEST_POSTGRES_DSN"),
                        help="PostgreSQL DSN (default: $CG_TEST_POSTGRES_DSN; none: PostgreSQL is skipped)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse(argv)
    ensure_importable()
    from rich.console import Console

    console = Console()
    rows: list[tuple[str, str, dict[str, float] | None]] = []
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
        finally:
            if args.dsn:
                sys.path.insert(0, str(REPO / "tests"))
                from pg_support import drop_tables

                drop_tables(args.dsn, prefix)
    console.print(table(rows))
    console.print(
        f"1 process: {args.turns} appends then {args.edits} edits in a row.  "
        f"{args.processes} processes: each appends {args.turns} turns to one session at once while one more "
        "process edits it in a loop (latency under contention).  CPU cores: "
        f"{os.cpu_count()}; Python {sys.version.split()[0]}."
    )


if __name__ == "__main__":
    main()

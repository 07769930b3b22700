"""How transcript operations scale with the number of turns (issue #11 item 15).

This is a script that prints figures, not a test.  Run it from a checkout with the
package installed (``pip install -e .``)::

    python benchmarks/scale.py                        # 1,000 / 10,000 / 20,000 turns
    python benchmarks/scale.py --turns 1000 5000      # other sizes

For each size it writes a SQLite file holding that many turns (one ``append``
revision of a user message and its answer each, written in one bulk transaction
with the store's own row format, hash chain and id index, so building is quick and
reads verify the chain as usual), then times,
on a fresh :class:`~context_gatekeeper.SQLiteStore`, the fastest of ``--repeat`` runs, in CPU
time and in wall time:

* **first open**: ``Transcript(...)`` plus reading ``.messages`` (loads, verifies and replays the
  log) in a new process, nothing cached: what opening a session costs a restarted worker;
* **reopen**: the same again in the measuring process, whose caches of decoded revisions are
  warm (a second object or worker in one process);
* **append**: one more turn;
* **edit**: ``apply([Replace(...)])`` of the first answer;
* **revert**: ``revert(10)`` (drops almost every message);
* **undo**: undoing that revert (puts them all back);
* **diff**: ``diff(1, head)``.

The last row is the ratio of the largest size to the smallest: with linear work it
stays near the ratio of the sizes (20 for 1k -> 20k).  Target: open of 20k turns
<= 1 s on SQLite (the first open, in a new process), ratio <= 25.
"""

from __future__ import annotations

import argparse
import gc
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

from context_gatekeeper import Replace, SQLiteStore, Transcript
from context_gatekeeper.records.messages import Message
from context_gatekeeper.records.operations import AT_END, Put
from context_gatekeeper.records.revisions import Revision
from context_gatekeeper.stores.chain import genesis, row_digest
from context_gatekeeper.stores.integrity import index_of_log
from context_gatekeeper.stores.schema import changes_text, index_rows

OPERATIONS = ("first open", "reopen", "append", "edit", "revert", "undo", "diff")


def build(path: Path, turns: int) -> None:
    """A SQLite file with ``turns`` append revisions in session "bench"."""
    SQLiteStore(path).close()  # schema
    log = []
    for n in range(1, turns + 1):
        user = Message(f"u{n}", "user", f"Question {n}: how should shard {n % 97} rebalance under load?")
        answer = Message(f"a{n}", "assistant", f"Answer {n}: move replicas off the hot node and retry in {n % 13} s.")
        log.append(Revision(n, n - 1, "append", (Put(user, AT_END), Put(answer, user.id)), time=float(n), base=n - 1).stamped())
    import sqlite3

    rows, previous = [], genesis("bench")
    for r in log:  # the hash chain the store writes, so reads verify it (tamper verification is on)
        row = (r.number, r.parent, "append", None, None, r.time, r.base, None, changes_text(r))
        previous = row_digest(previous, row)
        rows.append((*row, previous))
    with closing(sqlite3.connect(path)) as conn, conn:  # closed: its write-ahead log is folded into the file
        conn.executemany(
            "INSERT INTO revisions (session_id, number, parent, kind, instruction, model, created_at, base, target,"
            " changes, digest) VALUES ('bench', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            rows,
        )
        conn.executemany(
            "INSERT INTO message_ids (session_id, message_id, present, digest) VALUES (?, ?, ?, ?)",
            index_rows("bench", index_of_log(log)),
        )


def best(action: Callable[[], object], repeat: int) -> tuple[float, float]:
    """``(CPU s, wall s)``, each the fastest of ``repeat`` runs (the usual benchmark estimate:
    noise only adds time; CPU time leaves out waiting for the disk and other processes)."""
    cpu, wall = [], []
    for _ in range(repeat):
        gc.collect()  # garbage left by the previous step is not this step's cost
        start, start_cpu = time.perf_counter(), time.process_time()
        action()
        cpu.append(time.process_time() - start_cpu)
        wall.append(time.perf_counter() - start)
    return min(cpu), min(wall)


def first_open(path: Path, repeat: int) -> tuple[float, float]:
    """``(CPU s, wall s)`` of opening the session in a new process (its first open: no decoded
    revision cached), the fastest of ``repeat`` processes."""
    runs = []
    for _ in range(repeat):
        out = subprocess.run([sys.executable, __file__, "--time-open", str(path)], check=True,
                             capture_output=True, text=True).stdout.split()
        runs.append((float(out[0]), float(out[1])))
    return min(r[0] for r in runs), min(r[1] for r in runs)


def _time_open(path: str) -> None:
    """Print ``CPU s wall s`` of one open of session "bench" in ``path`` (run in a new process)."""
    with closing(SQLiteStore(path)) as store:
        gc.collect()
        start, start_cpu = time.perf_counter(), time.process_time()
        Transcript("bench", store=store).messages
        print(time.process_time() - start_cpu, time.perf_counter() - start)


def measure(turns: int, where: Path, repeat: int) -> dict[str, tuple[float, float]]:
    path = where / f"scale-{turns}.db"
    build(path, turns)
    store = SQLiteStore(path)
    figures = {"first open": first_open(path, repeat),
               "reopen": best(lambda: Transcript("bench", store=store).messages, repeat)}
    t = Transcript("bench", store=store)
    figures["append"] = best(lambda: t.append(user="one more question", assistant="one more answer"), repeat)
    edits = iter(range(repeat))
    figures["edit"] = best(lambda: t.apply([Replace("a1", f"An edited first answer, take {next(edits)}.")]), repeat)
    reverts, undos = [], []
    for _ in range(repeat):  # each round reverts to revision 10 and undoes it, back to the full state
        reverts.append(best(lambda: t.revert(10), 1))
        undos.append(best(t.undo, 1))
    figures["revert"] = (min(r[0] for r in reverts), min(r[1] for r in reverts))
    figures["undo"] = (min(u[0] for u in undos), min(u[1] for u in undos))
    figures["diff"] = best(lambda: t.diff(1, t.head), repeat)
    assert len(t.messages) == 2 * turns + 2 * repeat
    store.close()
    return figures


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, nargs="+", default=[1_000, 10_000, 20_000])
    parser.add_argument("--repeat", type=int, default=5, help="runs per figure; the fastest is shown")
    parser.add_argument("--time-open", metavar="PATH", help=argparse.SUPPRESS)  # one first open, in a child process
    args = parser.parse_args(argv)
    if args.time_open:
        _time_open(args.time_open)
        return
    sizes = sorted(args.turns)
    with tempfile.TemporaryDirectory() as tmp:
        results = {n: measure(n, Path(tmp), args.repeat) for n in sizes}
    for clock, which in (("CPU", 0), ("wall", 1)):
        print(f"{clock + ' time':<10} " + " ".join(f"{op + ' s':>12}" for op in OPERATIONS))
        for n in sizes:
            print(f"{n:>10,} " + " ".join(f"{results[n][op][which]:>12.4f}" for op in OPERATIONS))
        if len(sizes) > 1:
            big, small = results[sizes[-1]], results[sizes[0]]
            label = f"{sizes[-1] // sizes[0]}x turns"
            print(f"{label:>10} " + " ".join(f"{big[op][which] / max(small[op][which], 1e-9):>11.1f}x" for op in OPERATIONS))


if __name__ == "__main__":
    main()

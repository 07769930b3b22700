"""Transcripts at scale: the issue #22 rows for long SQLite sessions (a section of ``speed.py``).

Run alone or through ``python benchmarks/speed.py --scale``::

    python benchmarks/speed_scale.py                 # 1k and 20k turns, add_turn at 50k
    python benchmarks/speed_scale.py --turns 1000 5000 --add-turns 5000
    python benchmarks/speed_scale.py --turns 20000 --add-turns 0 --keep /tmp/scale  # build once, reuse

Each session is a SQLite file written in bulk with the store's own row format, hash
chain and id index (tamper verification on, as by default), its turns LoCoMo text
(the longest conversation, repeated) when the data is there, else generated text.
Figures are CPU and wall time, best of ``--repeat`` runs (the machine is shared: noise
only adds time):

* **first select**: a new ``Transcript`` on a fresh store plus a ``TranscriptGate`` and
  its first ``select_messages`` (loads the log, builds the index), both the first run in
  the process (nothing cached: what adding the turns costs once) and the best run (the
  per-text and per-sequence caches shared by later objects);
* **catch-up**: a second ``Transcript`` (and its gate) on the session, after another
  writer appended one turn: the second object's next read (``head``; ``messages``, which
  copies every message), its gate's catching up (``sync``: reading the new revision and
  indexing its turn) and its next select (the sync and a selection over every turn);
* **add_turn**: ``ContextGatekeeper.add_turn`` per turn over ``--add-turns`` turns of real text.
"""

from __future__ import annotations

import argparse
import gc
import json
import lzma
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from contextlib import closing

from context_gatekeeper import SQLiteStore, Transcript
from context_gatekeeper.selection.gatekeeper import ContextGatekeeper
from context_gatekeeper.stores.chain import genesis, row_digest
from context_gatekeeper.stores.integrity import index_of_log
from context_gatekeeper.stores.schema import changes_text, index_rows
from context_gatekeeper.records.messages import Message
from context_gatekeeper.records.operations import AT_END, Put
from context_gatekeeper.records.revisions import Revision
from context_gatekeeper.transcripts.transcript_gate import TranscriptGate

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def real_turns(data_dir: Path = DATA) -> list[tuple[str, str]]:
    """The turns of every LoCoMo conversation (longest first), or generated ones when the data is absent."""
    path = data_dir / "locomo.dev.jsonl.xz"
    if path.is_file():
        with lzma.open(path, "rt", encoding="utf-8") as f:
            cases = [json.loads(line) for line in f if line.strip()]
        longest: dict[str, list[tuple[str, str]]] = {}
        for case in cases:
            turns = [(t["user"], t["assistant"]) for t in case["turns"]]
            if len(turns) > len(longest.get(case["conv_id"], [])):
                longest[case["conv_id"]] = turns
        out = [t for conv in sorted(longest.values(), key=len, reverse=True) for t in conv]
        if out:
            return out
    return [
        (f"Question {n}: how should shard {n % 97} rebalance under load?",
         f"Answer {n}: move replicas off the hot node and retry in {n % 13} s.")
        for n in range(1, 2001)
    ]


def turn_text(texts: Sequence[tuple[str, str]], n: int, tag: str = "") -> tuple[str, str]:
    """Turn ``n`` (from 1): the texts cycled, each made unique by its number and ``tag``, as
    a real conversation's are (so no per-text cache is hit on a repeat a real one would not
    have, nor by another session of the same run)."""
    u, a = texts[(n - 1) % len(texts)]
    return f"{u} (#{tag}{n})", f"{a} (#{tag}{n})"


def build(path: Path, turns: int, texts: Sequence[tuple[str, str]], session: str = "bench") -> None:
    """A SQLite file with ``turns`` append revisions in ``session``, chained and indexed as
    the store writes them (so reads verify them), written in one transaction."""
    SQLiteStore(path).close()  # schema
    log = []
    for n in range(1, turns + 1):
        u, a = turn_text(texts, n, f"{turns}.")
        user = Message(f"u{n}", "user", u)
        answer = Message(f"a{n}", "assistant", a)
        log.append(Revision(n, n - 1, "append", (Put(user, AT_END), Put(answer, user.id)), time=float(n), base=n - 1).stamped())
    rows = []
    previous = genesis(session)
    for r in log:
        row = (r.number, r.parent, "append", None, None, r.time, r.base, None, changes_text(r))
        previous = row_digest(previous, row)
        rows.append((session, *row, previous))
    with closing(sqlite3.connect(path)) as conn, conn:  # closed: its write-ahead log is folded into the file
        conn.executemany(
            "INSERT INTO revisions (session_id, number, parent, kind, instruction, model, created_at, base, target,"
            " changes, digest) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            rows,
        )
        conn.executemany(
            "INSERT INTO message_ids (session_id, message_id, present, digest) VALUES (?, ?, ?, ?)",
            index_rows(session, index_of_log(log)),
        )


def timed(action: Callable[[], object]) -> tuple[float, float]:
    """``(cpu s, wall s)`` of one run of ``action``."""
    gc.collect()
    cpu, wall = time.process_time(), time.perf_counter()
    action()
    return time.process_time() - cpu, time.perf_counter() - wall


def best(runs: Sequence[tuple[float, float]]) -> dict[str, float]:
    return {"cpu_ms": min(r[0] for r in runs) * 1e3, "wall_ms": min(r[1] for r in runs) * 1e3}


def measure_session(
    turns: int, where: Path, texts: Sequence[tuple[str, str]], repeat: int, reuse: bool = False
) -> dict[str, Any]:
    """First select and catch-up figures on a ``turns``-turn session (``reuse``: a session
    file built by an earlier run in ``where`` is copied instead of built again; the run
    measures on the copy, so the appends it makes never reach the kept file)."""
    kept = where / f"speed-scale-{turns}.db"
    if reuse:
        if not kept.is_file():
            build(kept, turns, texts)
        path = where / f"speed-scale-{turns}.run.db"
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        shutil.copyfile(kept, path)
        with closing(SQLiteStore(path)) as copied:
            if copied.head("bench") != turns:  # a copy missing rows would time a shorter session
                raise RuntimeError(f"{kept} holds {copied.head('bench')} revisions, not {turns}; delete it and run again")
    else:
        path = kept
        build(path, turns, texts)
    query = texts[len(texts) // 2][0]
    first = []
    for _ in range(repeat):
        def first_select() -> None:
            with closing(SQLiteStore(path)) as store:
                TranscriptGate(Transcript("bench", store=store)).select_messages(query)
        first.append(timed(first_select))
    out: dict[str, Any] = {"first_select_cold": best(first[:1]), "first_select": best(first)}
    with closing(SQLiteStore(path)) as writer_store, closing(SQLiteStore(path)) as reader_store:
        writer = Transcript("bench", store=writer_store)
        reader = Transcript("bench", store=reader_store)
        gate = TranscriptGate(reader)
        gate.select_messages(query)
        heads, reads, syncs, selects = [], [], [], []
        for k in range(repeat):
            writer.append(user=f"one more question {k}", assistant=f"one more answer {k}")
            heads.append(timed(lambda: reader.head))
            writer.append(user=f"another question {k}", assistant=f"another answer {k}")
            reads.append(timed(lambda: reader.messages))
            writer.append(user=f"a third question {k}", assistant=f"a third answer {k}")
            syncs.append(timed(gate.sync))
            writer.append(user=f"a fourth question {k}", assistant=f"a fourth answer {k}")
            selects.append(timed(lambda: gate.select_messages(query)))
        out["catch_up_head"], out["catch_up_messages"] = best(heads), best(reads)
        out["catch_up_sync"], out["catch_up_select"] = best(syncs), best(selects)
    return out


def measure_add_turn(turns: int, texts: Sequence[tuple[str, str]]) -> dict[str, float]:
    """Per-turn ``add_turn`` cost over ``turns`` turns of real text (one gatekeeper)."""
    gk = ContextGatekeeper()
    gc.collect()
    cpu, wall = time.process_time(), time.perf_counter()
    for n in range(turns):
        gk.add_turn(*turn_text(texts, n + 1, "add."))
    return {"cpu_ms": (time.process_time() - cpu) * 1e3 / turns, "wall_ms": (time.perf_counter() - wall) * 1e3 / turns}


def rows(
    sizes: Sequence[int] = (1_000, 20_000), add_turns: int = 50_000, repeat: int = 5, keep: Path | None = None
) -> list[dict[str, Any]]:
    """The scale rows of issue #22: ``{"path", "turns", "cpu_ms", "wall_ms", "ratio"}`` each;
    ``ratio`` is the figure at the largest size over the smallest (``None`` for one size).
    ``keep``: a folder where the session files are built once and reused by later runs."""
    texts = real_turns()
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        results = {n: measure_session(n, keep, texts, repeat, reuse=True) for n in sorted(sizes)}
    else:
        with tempfile.TemporaryDirectory() as tmp:
            results = {n: measure_session(n, Path(tmp), texts, repeat) for n in sorted(sizes)}
    out: list[dict[str, Any]] = []
    labels = {
        "first_select_cold": "TranscriptGate first select, first in the process",
        "first_select": "TranscriptGate first select, best of runs",
        "catch_up_head": "second Transcript catching up one append: head",
        "catch_up_messages": "second Transcript catching up one append: messages",
        "catch_up_sync": "second TranscriptGate catching up one append: sync",
        "catch_up_select": "second TranscriptGate catching up one append: select",
    }
    small = min(results)
    for key, label in labels.items():
        for n, figures in results.items():
            ratio = None if n == small else figures[key]["cpu_ms"] / max(results[small][key]["cpu_ms"], 1e-9)
            out.append({"path": label, "turns": n, **figures[key], "ratio": ratio})
    if add_turns:
        out.append({"path": "ContextGatekeeper.add_turn, real text, per turn", "turns": add_turns,
                    **measure_add_turn(add_turns, texts), "ratio": None})
    return out


def print_rows(table: Sequence[dict[str, Any]]) -> None:
    print(f"{'path':<56} {'turns':>7} {'cpu ms':>10} {'wall ms':>10} {'÷ smallest':>10}")
    for r in table:
        ratio = "" if r["ratio"] is None else f"{r['ratio']:.1f}x"
        print(f"{r['path']:<56} {r['turns']:>7,} {r['cpu_ms']:>10.3f} {r['wall_ms']:>10.3f} {ratio:>10}")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, nargs="+", default=[1_000, 20_000])
    parser.add_argument("--add-turns", type=int, default=50_000, help="turns for the add_turn row (0: skip it)")
    parser.add_argument("--repeat", type=int, default=5, help="runs per figure; the fastest is shown")
    parser.add_argument(
        "--keep", type=Path, default=None, metavar="DIR",
        help="build each session file once in DIR and reuse it in later runs (each run measures on a copy)",
    )
    args = parser.parse_args(argv)
    print_rows(rows(args.turns, args.add_turns, args.repeat, args.keep))


if __name__ == "__main__":
    main()

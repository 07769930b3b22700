"""Size on disk and append rate of the SQLite store: storage grows linearly with the turns.

This is a script that prints figures, not a test.  Run it from a checkout with the
package installed (``pip install -e .``)::

    python benchmarks/store_size.py                    # 1,000 / 5,000 / 10,000 turns
    python benchmarks/store_size.py --turns 500 2000   # other sizes

For each size it creates a fresh database file, appends that many turns (a user
message of about 30 tokens and an assistant answer of about 70, one ``append``
revision of two ``Put`` changes each, committed one by one exactly as a transcript
does), checkpoints the write-ahead log into the main file and reports:

* **file bytes**: the database file plus its ``-wal`` (empty after the checkpoint);
* **bytes/turn**: file bytes / turns; a flat column means linear growth (each
  turn costs one small revision, never a copy of the transcript);
* **JSON bytes/turn**: the revision's changes as JSON, the payload the file holds,
  so the difference is SQLite's own overhead (row header, primary-key index, pages);
* **appends/s**: commits per second, each its own durable transaction.

The text is synthetic and deterministic (``--seed``).
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

WORDS = (
    "the a of to and in is it for on with as this that be are you can by or from not use "
    "cache index token latency kernel query budget buffer thread socket schema router vector "
    "batch shard replica commit branch rebase merge patch deploy cluster container pipeline "
    "queue worker timeout retry proxy session header payload config metric trace mutex async "
    "snapshot backup restore migration rollback release version benchmark module database "
    "transaction write ahead log checkpoint page lock reader writer process file disk"
).split()


def sentence(rng: random.Random, words: int) -> str:
    """About ``words`` words (roughly as many tokens) of chat-like text."""
    picked = [rng.choice(WORDS) for _ in range(words)]
    return " ".join(picked).capitalize() + "."


def turn_revision(rng: random.Random, n: int, after: str | None):
    """Turn ``n`` as one ``append`` revision: a user and an assistant message."""
    from context_gatekeeper.records.messages import Message
    from context_gatekeeper.records.operations import Put
    from context_gatekeeper.records.revisions import Revision

    user = Message(f"u{n:06d}", "user", sentence(rng, 30))
    answer = Message(f"a{n:06d}", "assistant", sentence(rng, 70))
    return Revision(number=0, parent=0, kind="append", changes=(Put(user, after), Put(answer, user.id)))


@dataclass(frozen=True)
class Result:
    """The figures for one size."""

    turns: int
    file_bytes: int
    json_bytes: int
    seconds: float

    @property
    def bytes_per_turn(self) -> float:
        return self.file_bytes / self.turns

    @property
    def json_per_turn(self) -> float:
        return self.json_bytes / self.turns

    @property
    def appends_per_second(self) -> float:
        return self.turns / self.seconds


def file_bytes(db: Path) -> int:
    """The database file plus its write-ahead log."""
    return sum(p.stat().st_size for p in (db, db.with_name(db.name + "-wal")) if p.exists())


def measure(turns: int, folder: Path, seed: int) -> Result:
    """Append ``turns`` turns to a fresh file and measure it."""
    from context_gatekeeper.stores import SQLiteStore

    rng = random.Random(seed)
    revisions, after = [], None
    for n in range(1, turns + 1):
        revisions.append(turn_revision(rng, n, after))
        after = revisions[-1].changes[-1].message.id
    db = folder / f"turns-{turns}.db"
    store = SQLiteStore(db)
    start = time.perf_counter()
    for revision in revisions:
        store.commit("bench-session", revision, expected_head=None)
    seconds = time.perf_counter() - start
    store.checkpoint()
    size = file_bytes(db)
    store.close()
    payload = sum(len(r.changes_json().encode("utf-8")) for r in revisions)
    return Result(turns, size, payload, seconds)


def show(results: Sequence[Result]) -> None:
    """Print the figures as a table (rich when installed, else plain text)."""
    header = ("turns", "file bytes", "bytes/turn", "JSON bytes/turn", "appends/s")
    rows = [
        (f"{r.turns:,}", f"{r.file_bytes:,}", f"{r.bytes_per_turn:,.0f}", f"{r.json_per_turn:,.0f}",
         f"{r.appends_per_second:,.0f}")
        for r in results
    ]
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        for row in (header, *rows):
            print("  ".join(f"{cell:>16}" for cell in row))
        return
    table = Table(title="SQLiteStore: size on disk and append rate")
    for name in header:
        table.add_column(name, justify="right")
    for row in rows:
        table.add_row(*row)
    Console().print(table)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, nargs="+", default=[1_000, 5_000, 10_000], help="sizes to measure")
    parser.add_argument("--seed", type=int, default=7, help="seed of the synthetic text")
    parser.add_argument("--dir", type=Path, default=None, help="where to put the files (default: a temp dir)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    """Measure every size and print the table."""
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(dir=args.dir) as folder:
        show([measure(turns, Path(folder), args.seed) for turns in args.turns])


if __name__ == "__main__":
    main()

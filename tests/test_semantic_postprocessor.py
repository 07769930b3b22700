"""GatekeeperNodePostprocessor with an embedder: node.embedding, the query
bundle's embedding, a content-hash cache, calibrated semantic evidence, explain, fallback.

A real LlamaIndex BaseEmbedding subclass wraps the deterministic hashing fake of
tests/test_semantic.py (ranking); MockEmbedding checks the plumbing; real indexes and engines."""

from __future__ import annotations

import asyncio
import copy
import logging
import threading
from typing import Any

from llama_index.core import Document, VectorStoreIndex
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.embeddings import MockEmbedding
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

import pytest

from li_scripted_llm import ScriptedLLM
from llamaindex_gatekeeper.node_vectors import VECTORS
from llamaindex_gatekeeper.postprocessor import ANCHORS, FACTS, GatekeeperNodePostprocessor
from test_semantic import DESSERTS, HashEmbedder

QUERY = "What dessert should I serve?"
TEXTS = [
    "Serve the soup hot with fresh bread.",
    "A peach cobbler, a pie or a tiramisu all bake well ahead.",
    "Tire pressure should be checked monthly.",
    "The alps offer great hiking trails.",
    "Guitar chords come before scales.",
    "Repaint kitchen walls with washable paint.",
    "Dogs chew shoes when bored.",
    "Novels about pirates sell well.",
    "Cold weather calls for a jacket.",
    "Sisters visiting from Spain stay a week.",
]


class HashEmbedding(BaseEmbedding):
    """A LlamaIndex BaseEmbedding over the hashing fake; counts what it embeds."""

    _fake: Any = PrivateAttr()

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(model_name="hash-embedding", **kwargs)
        self._fake = HashEmbedder({"dessert": DESSERTS})

    @property
    def fake(self) -> HashEmbedder:
        return self._fake

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._fake.embed_query(query)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._fake.embed_query(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._fake.embed_documents([text])[0]

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return self._fake.embed_documents(texts)


@pytest.fixture(autouse=True)
def _cold_caches() -> None:
    """Each test starts with nothing embedded or analysed: the caches are shared by every
    postprocessor in the process, by embedder name, and the fakes here share a name."""
    for cache in (FACTS, ANCHORS, VECTORS):
        cache.clear()


def nodes(texts=TEXTS, embed: HashEmbedder | None = None) -> list[NodeWithScore]:
    return [
        NodeWithScore(node=TextNode(text=t, id_=f"n{i}", embedding=embed.vector(t) if embed else None), score=1 - i / 20)
        for i, t in enumerate(texts)
    ]


def embedded(fake: HashEmbedder) -> int:
    return sum(len(b) for b in fake.document_calls)


def test_a_node_that_shares_no_word_is_kept_on_its_meaning_and_explained() -> None:
    plain = GatekeeperNodePostprocessor()
    assert [n.node.node_id for n in plain.postprocess_nodes(nodes(), query_str=QUERY)] == ["n0"]
    fake = HashEmbedder({"dessert": DESSERTS})
    gate = GatekeeperNodePostprocessor(embedder=fake)
    kept = gate.postprocess_nodes(nodes(), query_str=QUERY)
    assert [n.node.node_id for n in kept] == ["n0", "n1"]
    lines = gate.explain(nodes(), QUERY)
    cobbler, car = lines[1], lines[2]
    assert cobbler.kept and cobbler.reason == "semantic" and cobbler.decisive
    assert cobbler.similarity is not None and cobbler.coverage.similarity_z >= 2.0
    assert "similarity" in str(cobbler) and "decisive" in str(cobbler)
    assert not car.kept and car.reason == "irrelevant" and not car.decisive
    assert car.similarity is not None and car.coverage.similarity_z < 2.0 and not car.coverage.semantic
    assert lines[0].reason == "covers" and not lines[0].decisive  # kept for its words
    assert all(line.similarity is None for line in plain.explain(nodes(), QUERY))


def test_node_embeddings_and_the_bundles_embedding_are_used_without_a_call() -> None:
    fake = HashEmbedder({"dessert": DESSERTS})
    gate = GatekeeperNodePostprocessor(embedder=fake)
    bundle = QueryBundle(QUERY, embedding=fake.vector(QUERY))
    kept = gate.postprocess_nodes(nodes(embed=fake), bundle)
    assert [n.node.node_id for n in kept] == ["n0", "n1"]
    assert fake.document_calls == [] and fake.query_calls == []


def test_nodes_without_embeddings_are_embedded_once_then_cached_by_content() -> None:
    fake = HashEmbedder({"dessert": DESSERTS})
    gate = GatekeeperNodePostprocessor(embedder=fake)
    gate.postprocess_nodes(nodes(), query_str=QUERY)
    assert embedded(fake) == len(TEXTS) and len(fake.document_calls) == 1 and len(fake.query_calls) == 1
    gate.postprocess_nodes(nodes()[::-1], query_str="Any dessert ideas?")
    assert embedded(fake) == len(TEXTS) and len(fake.query_calls) == 2  # only the new query


def test_postprocessors_with_one_embedder_share_its_vectors_across_threads() -> None:
    from concurrent.futures import ThreadPoolExecutor

    fake = HashEmbedder({"dessert": DESSERTS})
    first = GatekeeperNodePostprocessor(embedder=fake)
    expected = [n.node.node_id for n in first.postprocess_nodes(nodes(), query_str=QUERY)]
    assert expected == ["n0", "n1"] and embedded(fake) == len(TEXTS)
    with ThreadPoolExecutor(max_workers=3) as pool:
        runs = list(pool.map(lambda _: GatekeeperNodePostprocessor(embedder=fake, token_budget=500).postprocess_nodes(
            nodes(), query_str=QUERY), range(6)))
    assert all([n.node.node_id for n in run] == expected for run in runs)
    assert embedded(fake) == len(TEXTS)  # every later postprocessor found the vectors


def test_a_cached_vector_of_another_dimension_is_embedded_again() -> None:
    small = HashEmbedder({"dessert": DESSERTS}, dim=64)  # the same name as the next one: two models
    GatekeeperNodePostprocessor(embedder=small).postprocess_nodes(nodes(), query_str=QUERY)
    big = HashEmbedder({"dessert": DESSERTS})
    gate = GatekeeperNodePostprocessor(embedder=big)
    kept = gate.postprocess_nodes(nodes(), query_str=QUERY)
    assert [n.node.node_id for n in kept] == ["n0", "n1"] and embedded(big) == len(TEXTS)
    assert all(line.similarity is not None for line in gate.explain(nodes(), QUERY))


def test_too_few_nodes_are_not_calibrated() -> None:
    gate = GatekeeperNodePostprocessor(embedder=HashEmbedder({"dessert": DESSERTS}))
    two = nodes(TEXTS[:2])
    assert [n.node.node_id for n in gate.postprocess_nodes(two, query_str=QUERY)] == ["n0"]
    assert all(line.coverage.similarity_z is None for line in gate.explain(two, QUERY))


class Down(HashEmbedder):
    def embed_documents(self, texts):
        raise ConnectionError("embedding service down")

    def embed_query(self, text):
        raise ConnectionError("embedding service down")


def test_a_failing_embedder_falls_back_to_lexical_with_one_warning(caplog) -> None:
    gate = GatekeeperNodePostprocessor(embedder=Down(), embed_timeout=5)
    with caplog.at_level(logging.WARNING):
        result = gate.select(nodes(), QUERY)
        gate.postprocess_nodes(nodes(), query_str=QUERY)
    assert result.semantic_fallback and result.kept == [0]
    assert sum("selecting lexically" in r.getMessage() for r in caplog.records) == 1  # one per outage


def test_async_awaits_the_twins() -> None:
    calls = []

    def embed(texts):
        raise AssertionError("the sync embedder was called from the async path")

    async def aembed(texts):
        calls.append(list(texts))
        fake = HashEmbedder({"dessert": DESSERTS})
        return [fake.vector(t) for t in texts]

    embed.aembed = aembed
    gate = GatekeeperNodePostprocessor(embedder=embed)
    kept = asyncio.run(gate.apostprocess_nodes(nodes(), query_str=QUERY))
    assert [n.node.node_id for n in kept] == ["n0", "n1"] and len(calls) == 2  # the query, then the nodes


def build_index(embed_model) -> VectorStoreIndex:
    return VectorStoreIndex.from_documents([Document(text=t, doc_id=f"d{i}") for i, t in enumerate(TEXTS)],
                                           embed_model=embed_model)


def test_inside_a_real_query_engine_and_chat_engine() -> None:
    model = HashEmbedding()
    index = build_index(model)
    built = embedded(model.fake)
    gate = GatekeeperNodePostprocessor(embedder=model)
    llm = ScriptedLLM(default="Cobbler.")
    engine = index.as_query_engine(llm=llm, similarity_top_k=10, node_postprocessors=[gate])
    response = engine.query(QUERY)
    assert sorted(n.node.text for n in response.source_nodes) == sorted(TEXTS[:2])
    assert "peach cobbler" in llm.seen and "Tire pressure" not in llm.seen
    queries = len(model.fake.query_calls)
    assert queries == 1  # the retriever's; the postprocessor read it from the bundle
    # the simple vector store returns nodes without their vectors: each is embedded once ...
    assert all(n.node.embedding is None for n in response.source_nodes) and embedded(model.fake) - built == len(TEXTS)
    engine.query(QUERY)
    assert embedded(model.fake) - built == len(TEXTS)  # ... and then read from the content-hash cache
    from llama_index.core.memory import ChatMemoryBuffer

    # (LlamaIndex's default chat Memory opens an aiosqlite thread and connection it never closes)
    memory = ChatMemoryBuffer.from_defaults(llm=llm)
    chat = index.as_chat_engine(chat_mode="context", llm=llm, node_postprocessors=[gate], similarity_top_k=10,
                                memory=memory)
    asyncio.run(chat.achat(QUERY))
    sent = "\n".join(m.content or "" for m in llm.chats[-1])
    assert "peach cobbler" in sent and "Tire pressure" not in sent


def test_mock_embedding_plumbing_keeps_nothing_on_meaning() -> None:
    index = build_index(MockEmbedding(embed_dim=8))
    gate = GatekeeperNodePostprocessor(embedder=MockEmbedding(embed_dim=8))
    retrieved = index.as_retriever(similarity_top_k=10).retrieve(QUERY)
    lines = gate.explain(retrieved, QUERY)
    assert all(line.similarity is not None and not line.decisive for line in lines)  # one constant vector
    assert [line.reason for line in lines if line.kept] == ["covers"]


_COPIES = {"copy.deepcopy": copy.deepcopy, "model_copy(deep=True)": lambda gate: gate.model_copy(deep=True)}


@pytest.mark.parametrize("how", sorted(_COPIES))
@pytest.mark.parametrize("kind", ["MockEmbedding", "BaseEmbedding", "function"])
def test_a_deep_copy_with_an_embedder_shares_it_and_selects_exactly_as_the_original(kind: str, how: str) -> None:
    # both copy paths raised: NotImplementedError from the embedder's wrapt proxy (a LlamaIndex
    # embedding), TypeError "cannot pickle '_thread.lock'" (a plain function's NodeVectors)
    fake = HashEmbedder({"dessert": DESSERTS})
    embedder: Any = {"MockEmbedding": lambda: MockEmbedding(embed_dim=8), "BaseEmbedding": HashEmbedding,
                     "function": lambda: fake.embed_documents}[kind]()
    gate = GatekeeperNodePostprocessor(token_budget=500, embedder=embedder, embed_timeout=30.0)
    twin = _COPIES[how](gate)
    assert type(twin) is GatekeeperNodePostprocessor and twin is not gate
    assert twin.embedder is gate.embedder  # shared, not copied: a model, with its clients and lanes
    assert twin._vectors is not None and twin._vectors is not gate._vectors  # its own, rebuilt
    assert (twin.token_budget, twin.embed_timeout) == (500, 30.0)
    before = [(line.node_id, line.kept, line.reason, line.similarity) for line in gate.explain(nodes(), QUERY)]
    calls = embedded(fake)
    after = [(line.node_id, line.kept, line.reason, line.similarity) for line in twin.explain(nodes(), QUERY)]
    assert after == before
    assert all(similarity is not None for *_, similarity in after)  # semantic, not a lexical fallback
    if kind == "function":  # the process-wide VECTORS cache: the copy embedded the query alone, no node again
        assert embedded(fake) == calls + 1 and fake.document_calls[-1] == [QUERY]
    if kind == "BaseEmbedding":
        assert [n.node.node_id for n in twin.postprocess_nodes(nodes(), query_str=QUERY)] == ["n0", "n1"]
    twin.token_budget = 1  # the copy's fields are its own
    assert gate.token_budget == 500
    assert [(x.node_id, x.kept, x.reason) for x in gate.explain(nodes(), QUERY)] == [b[:3] for b in before]


def test_a_deep_copy_keeps_the_token_counter_shared_and_the_fields_copied() -> None:
    gate = GatekeeperNodePostprocessor(token_counter=len, embedder=HashEmbedder({"dessert": DESSERTS}))
    twin = copy.deepcopy(gate)
    assert twin.token_counter is len and twin._counter_key is gate._counter_key  # FACTS shared
    copied = copy.deepcopy({"gate": gate, "again": gate})
    assert copied["gate"] is copied["again"] and copied["gate"] is not gate  # the memo: one copy per object


# -- the pure coverage part -------------------------------------------------------------------
def test_select_covering_semantic_rules() -> None:
    import pytest

    from context_gatekeeper import SelectionParams
    from context_gatekeeper.selection.coverage import select_covering

    fillers = [f"filler {word}" for word in "car dog sky sea hat cup pen map key box bag toy".split()] * 2
    texts = ["Redis lock TTL.", "Redis lock TTL.", "peach cobbler", "tart", *fillers]
    costs = [5] * len(texts)
    sims = [0.1, 0.9, 0.9, 0.85] + [0.1] * len(fillers)
    result = select_covering("Redis lock TTL?", texts, costs=costs, similarities=sims)
    reasons = [e.reason for e in result.explanations]
    # ties in the greedy step go to the more similar copy; the other copy stays out however similar;
    # meaning alone keeps the two that stand out among the candidates
    assert reasons[:4] == ["no new coverage", "covers", "semantic", "semantic"] and result.kept == [1, 2, 3]
    assert result.explanations[1].semantic and not result.explanations[1].decisive
    assert result.explanations[2].decisive and result.explanations[2].similarity_z >= 2.0
    assert set(reasons[4:]) == {"irrelevant"}
    # at most semantic_max_keep, within the budget
    one = select_covering("Redis lock TTL?", texts, costs=costs, similarities=sims,
                          params=SelectionParams(semantic_max_keep=1))
    assert one.kept == [1, 2]
    assert select_covering("Redis lock TTL?", texts, costs=costs, similarities=sims, token_budget=10).kept == [1, 2]
    # no lexical evidence at all: the semantic matches instead of keeping everything in order
    none = select_covering("What desserts?", texts[2:], costs=costs[2:], similarities=sims[2:])
    assert none.kept == [0, 1] and {e.reason for e in none.explanations if not e.kept} == {"irrelevant"}
    # no one stands out: the fallback keeps them in order, as without similarities
    flat = select_covering("What desserts?", texts[2:8], costs=costs[2:8], similarities=[0.5] * 6)
    assert flat.kept == list(range(6)) and all(e.reason == "fallback" for e in flat.explanations)
    with pytest.raises(ValueError, match="similarities"):
        select_covering("x", texts, costs=costs, similarities=[0.1])


def test_a_hung_embedder_holds_one_lane_thread_and_later_calls_back_off_without_waiting() -> None:
    import threading

    class Hung(HashEmbedder):
        def __init__(self) -> None:
            super().__init__()
            self.release = threading.Event()

        def embed_query(self, text):
            self.query_calls.append(text)
            self.release.wait()
            return self.vector(text)

    hung = Hung()
    gate = GatekeeperNodePostprocessor(embedder=hung, embed_timeout=0.05)
    before = {t.name for t in threading.enumerate()}
    try:
        for _ in range(5):
            result = gate.select(nodes(), QUERY)
            assert result.semantic_fallback and result.kept == [0]  # the words' choice
        assert len(hung.query_calls) == 1  # the rest backed off without calling or waiting
        new = {t.name for t in threading.enumerate()} - before
        assert len(new) <= 2 and all(name.startswith("gatekeeper-embed") for name in new), new
    finally:
        hung.release.set()


@pytest.mark.parametrize("how", ["sync", "async"])
def test_a_call_that_waited_its_turn_too_long_is_lexical_but_no_outage(how: str) -> None:
    """Requests share one sync-only embedder's query lane: a call still queued when its
    timeout runs out (the calls ahead each ran in time) is dropped unrun; that request is
    lexical, but the embedder is not taken for down, and the next request embeds."""
    import threading
    import time

    from context_gatekeeper.selection.semantic.runner import forget_outages, state_of
    from test_semantic_execution import pause_until, until

    forget_outages()
    timeout = 2.0  # wall-clock by nature: the margins (half of it) outlast a loaded machine's stalls
    fake = HashEmbedder({"dessert": DESSERTS})
    gate = GatekeeperNodePostprocessor(embedder=fake, embed_timeout=timeout)
    state = state_of(gate._vectors.embedder)
    first, second = threading.Event(), threading.Event()
    state.queries.submit(first.wait, 30)  # two other requests' calls: one running, one queued
    state.queries.submit(second.wait, 30)
    result = {}

    def select() -> None:
        result["r"] = gate.select(nodes(), QUERY) if how == "sync" else asyncio.run(gate.aselect(nodes(), QUERY))

    worker = threading.Thread(target=select)
    worker.start()
    try:
        assert until(lambda: state.queries.queued == 2)
        queued = time.monotonic()
        pause_until(queued + timeout / 2)
        first.set()  # the second call starts: at this request's deadline it has run half the timeout
        worker.join(30)
    finally:
        first.set()
        second.set()
        worker.join(30)
    assert result["r"].semantic_fallback and fake.query_calls == []  # dropped unrun: lexical this time
    assert not state.failing
    again = gate.select(nodes(), QUERY)
    assert not again.semantic_fallback and fake.query_calls == [QUERY]
    forget_outages()


class SyncInsideEmbedding(HashEmbedding):
    """A LlamaIndex embedding whose async methods call the sync ones (as HuggingFaceEmbedding
    and most local models do): awaiting them would hold the event loop for the whole call.
    Records the thread each sync call runs on."""

    _threads: list = PrivateAttr(default_factory=list)

    def _get_query_embedding(self, query: str) -> list[float]:
        self._threads.append(("query", threading.current_thread().name))
        return super()._get_query_embedding(query)

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        self._threads.append(("nodes", threading.current_thread().name))
        return super()._get_text_embeddings(texts)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._get_query_embedding(query)

    async def _aget_text_embedding(self, text: str) -> list[float]:
        return self._get_text_embeddings([text])[0]


def test_async_runs_an_embedding_whose_async_methods_call_the_sync_ones_on_its_lanes() -> None:
    """Not on the event loop's thread, where embed_timeout could not interrupt them."""
    model = SyncInsideEmbedding()
    gate = GatekeeperNodePostprocessor(embedder=model, embed_timeout=5.0)
    kept = asyncio.run(gate.apostprocess_nodes(nodes(), query_str=QUERY))
    assert [n.node.node_id for n in kept] == ["n0", "n1"]
    assert [kind for kind, _ in model._threads] == ["query", "nodes"]
    assert model._threads[0][1].startswith("gatekeeper-embed-query")
    assert model._threads[1][1].startswith("gatekeeper-embed-documents")


def test_a_zero_node_embedding_is_embedded_again_not_read_as_unrelated() -> None:
    """A node whose own embedding is all zero (a placeholder) has no direction: it is embedded
    like a node without one, so the dessert node is still kept on its meaning."""
    fake = HashEmbedder({"dessert": DESSERTS})
    gate = GatekeeperNodePostprocessor(embedder=fake)
    given = nodes(embed=fake)
    given[1].node.embedding = [0.0] * len(given[1].node.embedding)
    assert [n.node.node_id for n in gate.postprocess_nodes(given, query_str=QUERY)] == ["n0", "n1"]
    assert fake.document_calls == [[TEXTS[1]]]


class Huge(HashEmbedder):
    """Vectors scaled past float32's range (1e39): only their direction matters."""

    def embed_documents(self, texts):
        return [[x * 1e39 for x in v] for v in super().embed_documents(texts)]


def test_node_vectors_beyond_float32s_range_keep_their_direction() -> None:
    gate = GatekeeperNodePostprocessor(embedder=Huge({"dessert": DESSERTS}))
    assert [n.node.node_id for n in gate.postprocess_nodes(nodes(), query_str=QUERY)] == ["n0", "n1"]
    assert all(line.similarity is not None and line.similarity == line.similarity for line in gate.explain(nodes(), QUERY))


class OneNaN(HashEmbedder):
    def embed_documents(self, texts):
        return [[float("nan")] * len(v) if "Tire" in t else v for t, v in zip(texts, super().embed_documents(texts))]


class Glitch(HashEmbedder):
    """Answers its first documents call with all-zero vectors (a degraded replica), then well."""

    glitched = False

    def embed_documents(self, texts):
        if not self.glitched:
            self.glitched = True
            return [[0.0] * len(v) for v in super().embed_documents(texts)]
        return super().embed_documents(texts)


def test_a_passing_glitch_of_unusable_vectors_turns_meaning_off_for_no_later_call() -> None:
    fake = Glitch({"dessert": DESSERTS})
    gate = GatekeeperNodePostprocessor(embedder=fake)
    assert [n.node.node_id for n in gate.postprocess_nodes(nodes(), query_str=QUERY)] == ["n0"]  # words only
    assert [n.node.node_id for n in gate.postprocess_nodes(nodes(), query_str=QUERY)] == ["n0", "n1"]
    assert [n.node.node_id for n in GatekeeperNodePostprocessor(embedder=fake).postprocess_nodes(
        nodes(), query_str=QUERY)] == ["n0", "n1"]


def test_an_unusable_node_vector_is_no_outage() -> None:
    """An embedder that answers one node with a NaN vector is not down: that node alone is
    lexical, the query and the other nodes keep their meaning, and the next calls still ask
    the embedder (no backoff)."""
    fake = OneNaN({"dessert": DESSERTS})
    gate = GatekeeperNodePostprocessor(embedder=fake)
    result = gate.select(nodes(), QUERY)
    assert not result.semantic_fallback and result.kept == [0, 1]
    assert [line.similarity is None for line in gate.explain(nodes(), QUERY)] == [t == TEXTS[2] for t in TEXTS]
    assert not gate._vectors._state.failing  # type: ignore[union-attr]
    queries = len(fake.query_calls)
    gate.select(nodes(TEXTS[:2] + TEXTS[3:]), "Any dessert ideas?")
    assert len(fake.query_calls) == queries + 1  # asked again: no backoff


BLANK = "---"  # no word at all: the hashing fake answers it with an all-zero vector


@pytest.mark.parametrize("how", ["sync", "async"])
def test_a_node_embedded_as_all_zeros_stays_lexical_alone(how: str, caplog) -> None:
    """One node the embedder cannot place (an all-zero vector for a blank chunk) is left to its
    words; the other nodes are embedded in the same one call, cached and still kept on their
    meaning; only the blank text is asked again by the next call (nothing is remembered as
    refused: a passing glitch must not turn meaning off for good); the log names a node."""
    fake = HashEmbedder({"dessert": DESSERTS})
    gate = GatekeeperNodePostprocessor(embedder=fake)
    given = TEXTS + [BLANK]

    def kept() -> list[str]:
        if how == "sync":
            out = gate.postprocess_nodes(nodes(given), query_str=QUERY)
        else:
            out = asyncio.run(gate.apostprocess_nodes(nodes(given), query_str=QUERY))
        return [n.node.node_id for n in out]

    with caplog.at_level(logging.WARNING):
        assert kept() == ["n0", "n1"]  # the cobbler still kept on its meaning
    assert fake.document_calls == [given]  # one call, no text asked alone on the request path
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and warnings[0].startswith("node(s) n10:") and "query" not in warnings[0]
    assert kept() == ["n0", "n1"] and fake.document_calls[1:] == [[BLANK]]  # the good ones cached
    result = gate.select(nodes(given), QUERY)
    assert not result.semantic_fallback and not gate._vectors._state.failing  # type: ignore[union-attr]
    assert [line.similarity is None for line in gate.explain(nodes(given), QUERY)] == [t == BLANK for t in given]


@pytest.mark.parametrize("how", ["sync", "async"])
def test_a_bundle_embedding_of_another_model_gives_way_to_the_embedders_query(how: str, caplog) -> None:
    """The retriever filled ``QueryBundle.embedding`` with its model's vector (8 dimensions), the
    nodes carry none, and ``embedder=`` is another model (512): the query is embedded with the
    embedder (logged once), every node gets a similarity, and the nodes' vectors, cached at the
    embedder's dimension, are not embedded again by later calls."""
    fake = HashEmbedder({"dessert": DESSERTS})
    bundle = QueryBundle(QUERY, embedding=HashEmbedder({"dessert": DESSERTS}, dim=8).vector(QUERY))
    gate = GatekeeperNodePostprocessor(embedder=fake)

    def select() -> Any:
        return gate.select(nodes(), bundle) if how == "sync" else asyncio.run(gate.aselect(nodes(), bundle))

    with caplog.at_level(logging.DEBUG, logger="llamaindex_gatekeeper"):
        for _ in range(3):
            result = select()
            assert not result.semantic_fallback and result.kept == [0, 1]  # the cobbler kept on its meaning
            assert all(line.similarity is not None for line in gate.explain(nodes(), bundle))
    assert embedded(fake) == len(TEXTS)  # once, then found in the cache
    logged = [r.getMessage() for r in caplog.records if "QueryBundle.embedding has 8 dimensions" in r.getMessage()]
    assert len(logged) == 1 and "512" in logged[0]
    state = gate._vectors._state  # type: ignore[union-attr]
    state.failed(ConnectionError("embedding service down"), fake.name)  # the query cannot be embedded now
    try:
        assert select().semantic_fallback  # lexical, and said so
    finally:
        state.reset()


class TwoModels(HashEmbedder):
    """Queries in ``dim`` dimensions, documents in 16: one name, two models."""

    def embed_documents(self, texts):
        self.document_calls.append(list(texts))
        small = HashEmbedder(dim=16)
        return [[*small.vector(t)[:-1], 1.0] for t in texts]  # (never all zero)


def test_an_embedder_whose_queries_and_documents_disagree_is_lexical_and_says_so(caplog) -> None:
    """An embedder answering queries in 512 dimensions and documents in 16: no node can be
    compared, so the call is lexical with ``semantic_fallback`` set, one warning, no backoff,
    and no node embedded again by later calls."""
    fake = TwoModels({"dessert": DESSERTS})
    gate = GatekeeperNodePostprocessor(embedder=fake)
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            result = gate.select(nodes(), QUERY)
            assert result.semantic_fallback and result.kept == [0]
    assert embedded(fake) == len(TEXTS) and not gate._vectors._state.failing  # type: ignore[union-attr]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "queries in 512 dimensions but documents in 16" in warnings[0]

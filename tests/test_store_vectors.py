"""Saved vectors: the stores' optional vector capability, the add-only migration that brings
it to existing SQLite files, and StoreVectorCache, through which a reopened history is not
embedded again.  (The capability's per-store contract is in context_gatekeeper.testing.store_vectors; the
PostgreSQL twins of these tests are in test_store_vectors_postgres.py.)"""

from __future__ import annotations

import hashlib
import sqlite3
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from context_gatekeeper import ContextGatekeeper
from context_gatekeeper.errors import InvalidInputError, StoreUnavailableError
from context_gatekeeper.stores import InMemoryStore, SQLiteStore, Store, StoreVectorCache, VectorRow, supports_vectors
from context_gatekeeper.stores import sqlite as sqlite_module
from context_gatekeeper.testing.store_builders import fill, snapshot

TOPICS = [
    ("How do I repot a fiddle leaf fig?", "Use a pot 5 cm wider, fresh soil, and water lightly."),
    ("What soil do ferns like?", "Ferns like loose, peaty soil that stays moist."),
    ("Book me a train from Lyon to Turin.", "The 8:10 TGV reaches Turin at 12:05."),
    ("Is there a later train?", "Yes, one leaves at 14:10."),
    ("How often should I water the fig?", "Once the top 3 cm of soil is dry."),
]


class CountingEmbedder:
    """A deterministic bag-of-words embedder (word hashes into 32 dimensions) that counts
    the texts and calls it receives: the fake the issue asks for in tests."""

    name = "counting-bow-32"

    def __init__(self) -> None:
        self.document_calls = 0
        self.query_calls = 0
        self.texts: list[str] = []

    @staticmethod
    def vector(text: str) -> list[float]:
        out = [0.0] * 32
        for word in text.lower().split():
            out[hashlib.sha256(word.strip("?.,!").encode()).digest()[0] % 32] += 1.0
        return out

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.document_calls += 1
        self.texts.extend(texts)
        return [self.vector(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        self.query_calls += 1
        return self.vector(text)


def gatekeeper(embedder: CountingEmbedder, cache: StoreVectorCache) -> ContextGatekeeper:
    gk = ContextGatekeeper(token_budget=200, embedder=embedder, vector_cache=cache)
    for user, assistant in TOPICS:
        gk.add_turn(user, assistant)
    gk.embed_pending()  # turns are embedded outside select (a background pass); now, for counting
    return gk


# -- StoreVectorCache -----------------------------------------------------------------------
@pytest.fixture(params=["memory", "sqlite"])
def store(request, tmp_path: Path):
    made = InMemoryStore() if request.param == "memory" else SQLiteStore(tmp_path / "v.db")
    yield made
    made.close()


def test_the_cache_writes_through_with_message_ids(store) -> None:
    fill(store, "s", 1)  # a store keeps vectors only for a session that holds revisions
    cache = StoreVectorCache(store, "s")
    assert cache.persistent and supports_vectors(store)
    assert cache.get(("e", "h1")) is None
    cache.put(("e", "h1"), [1.0, 0.0], message_id="u1")
    cache.put_many([(("e", "h2"), [0.0, 1.0]), ("a1", ("e", "h3"), [0.5, 0.5])])
    assert cache.get(("e", "h2")) == [0.0, 1.0]
    assert sorted(store.load_vectors("s", "e")) == [
        VectorRow("", "h2", "e", (0.0, 1.0)),
        VectorRow("a1", "h3", "e", (0.5, 0.5)),
        VectorRow("u1", "h1", "e", (1.0, 0.0)),
    ]
    fresh = StoreVectorCache(store, "s")
    assert fresh.get(("e", "h3")) == [0.5, 0.5]
    assert fresh.get(("e", "h1")) == [1.0, 0.0] and fresh.loads == 1  # one query for the embedder
    assert fresh.get(("other", "h1")) is None
    assert StoreVectorCache(store, "another session").get(("e", "h1")) is None


def test_a_new_dimension_under_one_name_starts_afresh(store) -> None:
    fill(store, "s", 1)
    cache = StoreVectorCache(store, "s")
    cache.put_many([(("e", "old"), [1.0, 0.0]), (("e", "both"), [1.0, 1.0])])
    cache.put(("e", "both"), [1.0, 1.0, 1.0])  # the model behind "e" changed
    assert cache.get(("e", "old")) is None
    assert cache.get(("e", "both")) == [1.0, 1.0, 1.0]
    reopened = StoreVectorCache(store, "s")  # the newest saved vector decides the dimension
    assert reopened.get(("e", "old")) is None and reopened.get(("e", "both")) == [1.0, 1.0, 1.0]
    assert len(store.load_vectors("s", "e", dimension=2)) == 2  # kept apart, not overwritten


@pytest.mark.parametrize(
    "items",
    [
        [(("e",), [1.0])],
        [(("e", 3), [1.0])],
        [("e", "h", [1.0])],
        [(("e", "h"), [float("inf")])],
        [(("e", "h"), [])],
        [("m", ("e", "h"), [1.0], "extra")],
    ],
)
def test_invalid_items_are_refused_and_change_nothing(store, items) -> None:
    cache = StoreVectorCache(store, "s")
    with pytest.raises(InvalidInputError):
        cache.put_many([(("e", "good"), [1.0]), *items])
    assert cache.get(("e", "good")) is None and store.load_vectors("s", "e") == []
    with pytest.raises(InvalidInputError):
        cache.get("e:h")  # type: ignore[arg-type]


def test_a_name_the_store_refuses_is_kept_in_memory_with_one_warning(store) -> None:
    fill(store, "s", 1)
    cache = StoreVectorCache(store, "s")
    long = "m" * 250  # over the 200 characters a store keeps
    with pytest.warns(RuntimeWarning, match="250 characters.*memory only"):
        cache.put_many([((long, "h1"), [1.0, 0.0]), ("u1", (long, "h2"), [0.0, 1.0])])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per name
        cache.put((long, "h3"), [1.0, 1.0], message_id="u1")
        assert cache.get((long, "h1")) == [1.0, 0.0] and cache.get((long, "h3")) == [1.0, 1.0]
    assert cache.saves == 0 and len(cache) == 3
    cache.put(("e", "h4"), [0.5, 0.5])  # another name still goes to the store
    assert store.load_vectors("s", "e") == [VectorRow("", "h4", "e", (0.5, 0.5))]
    with pytest.raises(InvalidInputError):
        cache.put(("", "h5"), [1.0])  # a name is still needed


def test_an_embedder_named_by_a_long_path_embeds_and_saves_its_vectors(tmp_path: Path) -> None:
    """A local model named by its long path gets a default name a store keeps: its turns are
    embedded, and saved."""
    from context_gatekeeper import Transcript, TranscriptGate
    from test_semantic import Local

    transcript = Transcript("s", store=SQLiteStore(tmp_path / "v.db"))
    for i in range(3):
        transcript.append(user=f"question {i}", assistant=f"answer {i}")
    gate = TranscriptGate(transcript, embedder=Local("/mnt/models/snapshots/" + "x" * 300))
    gate.embed_pending()
    name = gate.gatekeeper.embedder.name
    assert len(gate.gatekeeper._semantic.vectors) == 3 and not gate.gatekeeper._semantic.state.failing
    assert len(transcript.store.load_vectors("s", name)) == 3
    transcript.close()


def test_the_cache_holds_at_most_max_vectors_in_memory_and_the_store_keeps_them_all(store) -> None:
    fill(store, "s", 1)
    cache = StoreVectorCache(store, "s", max_vectors=2)
    cache.put_many([(("e", "a"), [1.0, 0.0]), (("e", "b"), [0.0, 1.0])])
    assert cache.get(("e", "a")) == [1.0, 0.0]  # now the most recently used
    cache.put(("e", "c"), [1.0, 1.0])
    assert len(cache) == 2 and cache.get(("e", "b")) is None and cache.get(("e", "a")) == [1.0, 0.0]
    assert len(store.load_vectors("s", "e")) == 3
    assert StoreVectorCache(store, "s", max_vectors=2).load("e") == 2  # the newest two of the three
    for bad in (0, True, "2"):
        with pytest.raises(InvalidInputError, match="max_vectors"):
            StoreVectorCache(store, "s", max_vectors=bad)


def test_purge_erases_the_vectors_a_cache_saved(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "v.db")
    fill(store, "s", 2)
    StoreVectorCache(store, "s").put(("e", "h"), [1.0, 2.0], message_id="u1")
    fill(store, "keep", 1)
    StoreVectorCache(store, "keep").put(("e", "h"), [1.0, 2.0])
    store.purge("s")
    store.close()
    raw = sqlite3.connect(tmp_path / "v.db")
    assert raw.execute("SELECT session_id FROM vectors").fetchall() == [("keep",)]
    raw.close()
    again = SQLiteStore(tmp_path / "v.db")
    assert StoreVectorCache(again, "s").get(("e", "h")) is None
    again.close()


class LogOnlyStore(Store):
    """A third-party store without the vector capability (it delegates its log)."""

    def __init__(self) -> None:
        self.inner = InMemoryStore()

    def setup(self) -> None:
        self.inner.setup()

    def head(self, session_id: str) -> int:
        return self.inner.head(session_id)

    def revisions(self, session_id: str, after: int = 0):
        return self.inner.revisions(session_id, after)

    def commit(self, session_id, revision, *, expected_head, renew_taken_ids=False):
        return self.inner.commit(session_id, revision, expected_head=expected_head, renew_taken_ids=renew_taken_ids)

    def purge(self, session_id: str) -> None:
        self.inner.purge(session_id)

    def sessions(self) -> list[str]:
        return self.inner.sessions()


def test_a_store_without_the_capability_still_works_in_memory() -> None:
    store = LogOnlyStore()
    assert not supports_vectors(store)
    fill(store, "s", 2)
    cache = StoreVectorCache(store, "s")
    assert not cache.persistent
    embedder = CountingEmbedder()
    gk = gatekeeper(embedder, cache)
    gk.explain("When should I water the fig?")
    assert len(embedder.texts) == len(TOPICS) and len(cache) == len(TOPICS)
    again = CountingEmbedder()
    gatekeeper(again, StoreVectorCache(store, "s")).explain("When should I water the fig?")
    assert len(again.texts) == len(TOPICS)  # nothing persisted: a restart embeds again
    assert snapshot(store, "s")[0] == 2


class BrokenVectorStore(InMemoryStore):
    """Vectors cannot be saved or read (a full disk, a dropped table); the log works."""

    def save_vectors(self, session_id, rows):
        raise OSError("disk full")

    def load_vectors(self, session_id, embedder, *, dimension=None):
        raise OSError("no such table")


def test_a_failing_vector_store_warns_once_and_selection_goes_on() -> None:
    cache = StoreVectorCache(BrokenVectorStore(), "s")
    embedder = CountingEmbedder()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gk = gatekeeper(embedder, cache)
        first = gk.explain("When should I water the fig?")
        gk.add_turn("And the ferns?", "Keep them moist.")
        gk.embed_pending()
        gk.explain("Any tips for ferns?")
    ours = [w for w in caught if "vectors of session" in str(w.message)]
    assert len(ours) == 1 and ("disk full" in str(ours[0].message) or "no such table" in str(ours[0].message))
    assert first.turn_ids and len(embedder.texts) == len(TOPICS) + 1
    assert len(cache) == len(TOPICS) + 1  # still cached in memory


# -- no re-embedding on reopen --------------------------------------------------------------
def test_a_reopened_store_embeds_nothing_again(tmp_path: Path) -> None:
    path = tmp_path / "chat.db"
    first = CountingEmbedder()
    store = SQLiteStore(path)
    fill(store, "chat", 1)
    before = gatekeeper(first, StoreVectorCache(store, "chat")).explain("When should I water the fig?")
    assert (len(first.texts), first.query_calls) == (len(TOPICS), 1)
    store.close()

    second = CountingEmbedder()
    store = SQLiteStore(path)  # a restarted worker
    cache = StoreVectorCache(store, "chat")
    after = gatekeeper(second, cache).explain("When should I water the fig?")
    assert (second.document_calls, second.texts, second.query_calls) == (0, [], 1)
    assert cache.loads == 1
    assert after.turn_ids == before.turn_ids and after.decision == before.decision

    gk = gatekeeper(second, cache)
    gk.replace_turn(2, assistant="Ferns want airy, acidic soil.")  # a changed turn: only it is embedded
    gk.embed_pending()
    gk.explain("What soil for ferns?")
    assert second.texts == ["What soil do ferns like?\nFerns want airy, acidic soil."]
    store.close()


def test_a_langchain_embeddings_goes_through_the_store_cache(tmp_path: Path) -> None:
    fake = pytest.importorskip("langchain_core.embeddings").DeterministicFakeEmbedding
    store = SQLiteStore(tmp_path / "lc.db")
    fill(store, "s", 1)
    gk = ContextGatekeeper(token_budget=200, embedder=fake(size=16), vector_cache=StoreVectorCache(store, "s"))
    for user, assistant in TOPICS:
        gk.add_turn(user, assistant)
    gk.embed_pending()
    gk.explain("Is there a later train?")
    (name,) = _names(tmp_path / "lc.db")
    assert "DeterministicFakeEmbedding" in name
    assert len(store.load_vectors("s", name, dimension=16)) == len(TOPICS)
    store.close()


@pytest.mark.parametrize("cut", ["substr(vector, 1, 6)", "substr(vector, 1, 8)", "x''"],
                         ids=["not-whole-floats", "fewer-floats", "empty"])
def test_a_vector_cut_short_by_hand_is_the_stores_error_and_the_gate_embeds_again(tmp_path: Path, cut: str) -> None:
    """A saved vector's blob cut short by hand: load_vectors raised a bare ValueError (or, cut
    to whole floats, handed out a vector shorter than its row says).  Now StoreUnavailableError
    names the session, the embedder and the repair; a gate warns, embeds again, and its save
    replaces the damaged row."""
    path = tmp_path / "chat.db"
    store = SQLiteStore(path)
    fill(store, "chat", 1)
    gatekeeper(CountingEmbedder(), StoreVectorCache(store, "chat"))
    conn = sqlite3.connect(path)
    with conn:
        conn.execute(f"UPDATE vectors SET vector = {cut} WHERE text_hash = (SELECT min(text_hash) FROM vectors)")
    conn.close()
    with pytest.raises(StoreUnavailableError) as caught:
        store.load_vectors("chat", CountingEmbedder.name)
    text = str(caught.value)
    assert "'chat'" in text and CountingEmbedder.name in text and "delete_vectors" in text, text
    again = CountingEmbedder()
    with pytest.warns(RuntimeWarning, match="could not load vectors.*StoreUnavailableError"):
        gatekeeper(again, StoreVectorCache(store, "chat"))
    assert len(again.texts) == len(TOPICS)  # embedded again
    assert len(store.load_vectors("chat", CountingEmbedder.name)) == len(TOPICS)  # the damaged row replaced
    store.close()


def _names(path: Path) -> set[str]:
    raw = sqlite3.connect(path)
    try:
        return {row[0] for row in raw.execute("SELECT DISTINCT embedder FROM vectors")}
    finally:
        raw.close()


# -- the migration --------------------------------------------------------------------------
def filled_before_vectors(
    monkeypatch: pytest.MonkeyPatch, module: Any, open_store: Callable[[], Store], turns: dict[str, int]
) -> dict[str, tuple[int, list[Any]]]:
    """Fills ``turns`` (session: turns) in a store ``open_store`` opens with all of ``module``'s
    migrations but 3 (today's schema without the vectors table; the revisions keep their hash
    chain, which this code writes), closes it; each session's snapshot."""
    with monkeypatch.context() as m:
        m.setattr(module, "MIGRATIONS", tuple(migration for migration in module.MIGRATIONS if migration.version != 3))
        old = open_store()
        for session, count in turns.items():
            fill(old, session, count)
        before = {s: snapshot(old, s) for s in turns}
        assert [v for v, _ in old.applied_migrations()] == [1, 2, 4, 5]
        old.close()
    return before


def test_a_file_from_before_vectors_gains_the_table_and_keeps_its_data(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "old.db"
    before = filled_before_vectors(monkeypatch, sqlite_module, lambda: SQLiteStore(path), {"a": 3, "b": 1})
    raw = sqlite3.connect(path)
    assert raw.execute("SELECT count(*) FROM sqlite_master WHERE name = 'vectors'").fetchone() == (0,)
    raw.close()

    store = SQLiteStore(path)
    assert store.applied_migrations()[2] == (3, "saved vectors")
    assert {s: snapshot(store, s) for s in ("a", "b")} == before
    assert store.commit("a", fill(InMemoryStore(), "x", 4)[-1], expected_head=None).number == 4
    store.save_vectors("a", [("u1", "h", "e", [1.0])])
    store.purge("a")
    assert store.load_vectors("a", "e") == [] and store.sessions() == ["b"]
    store.close()
    SQLiteStore(path).close()  # idempotent: nothing applied twice
    raw = sqlite3.connect(path)
    assert [r[0] for r in raw.execute("SELECT version FROM schema_migrations ORDER BY version")] == [1, 2, 3, 4, 5]
    raw.close()


def test_a_gatekeeper_saving_to_another_gates_session_is_refused(tmp_path: Path) -> None:
    """A gate's gatekeeper saves its vectors to that gate's session: handed (or copied) to a gate
    over another transcript, it would save that transcript's vectors under the first session,
    where purging the second leaves them. Refused with the way to build the gate instead."""
    from context_gatekeeper import Transcript, TranscriptGate

    store = SQLiteStore(tmp_path / "s.db")
    a, b = Transcript("session-a", store=store), Transcript("session-b", store=store)
    b.append(user="How long should a Redis lock TTL be?", assistant="Longer than the longest job.")
    gate_a = TranscriptGate(a, embedder=CountingEmbedder(), token_budget=200)
    for given in (gate_a.gatekeeper.empty_copy(), ContextGatekeeper(options=gate_a.gatekeeper.options)):
        with pytest.raises(InvalidInputError, match="another TranscriptGate's session"):
            TranscriptGate(b, gatekeeper=given)
    gate_a.gatekeeper.token_budget = 120  # assigned since: the advice keeps it
    for gate_b in (TranscriptGate(b, options=gate_a.gatekeeper.current_options()),  # the advice
                   TranscriptGate(b, options=gate_a.gatekeeper.options),  # another gate's cache is not taken
                   TranscriptGate(b, embedder=CountingEmbedder(), vector_cache=gate_a.gatekeeper.options.vector_cache)):
        gate_b.embed_pending()
        name = gate_b.gatekeeper.embedder.name
        assert len(store.load_vectors("session-b", name)) == 1 and store.load_vectors("session-a", name) == []
        store.delete_vectors("session-b")
    assert TranscriptGate(b, options=gate_a.gatekeeper.current_options()).gatekeeper.token_budget == 120
    store.close()

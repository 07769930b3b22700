"""Saved vectors on PostgreSQL: the add-only migration on tables made before vectors, purge,
and a restarted worker that embeds nothing again (skipped loudly without a server; failed
under CI=true).  The capability's contract runs in test_postgres_store.py (the shipped conformance suite)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from context_gatekeeper.stores import StoreVectorCache, supports_vectors
from pg_support import drop_run_tables, postgres_dsn, prefix_for
from context_gatekeeper.testing.store_builders import fill, snapshot
from test_store_vectors import TOPICS, CountingEmbedder, filled_before_vectors, gatekeeper


@pytest.fixture(scope="module", autouse=True)
def _drop_tables_afterwards() -> Iterator[None]:
    yield
    drop_run_tables()


def open_pg(where: Path):
    from context_gatekeeper.stores import PostgresStore

    return PostgresStore(postgres_dsn(), table_prefix=prefix_for(where))


def test_tables_from_before_vectors_gain_the_table_and_keep_their_data(tmp_path: Path, monkeypatch) -> None:
    postgres_dsn()
    from context_gatekeeper.stores import postgres as pg_module

    before = filled_before_vectors(monkeypatch, pg_module, lambda: open_pg(tmp_path), {"a": 3, "b": 2})

    store = open_pg(tmp_path)
    assert store.applied_migrations()[2] == (3, "saved vectors") and supports_vectors(store)
    assert {s: snapshot(store, s) for s in ("a", "b")} == before
    store.save_vectors("a", [("u1", "h", "e", [1.0, 2.0])])
    store.save_vectors("b", [("u1", "h", "e", [1.0, 2.0])])
    store.purge("a")
    assert store.load_vectors("a", "e") == [] and len(store.load_vectors("b", "e")) == 1
    store.close()
    again = open_pg(tmp_path)  # idempotent
    assert [v for v, _ in again.applied_migrations()] == [1, 2, 3, 4, 5]
    again.close()


def test_a_restarted_worker_embeds_nothing_again(tmp_path: Path) -> None:
    postgres_dsn()
    first = CountingEmbedder()
    store = open_pg(tmp_path)
    fill(store, "chat", 1)  # a store keeps vectors only for a session that holds revisions
    before = gatekeeper(first, StoreVectorCache(store, "chat")).explain("When should I water the fig?")
    assert len(first.texts) == len(TOPICS)
    store.close()

    second = CountingEmbedder()
    store = open_pg(tmp_path)
    after = gatekeeper(second, StoreVectorCache(store, "chat")).explain("When should I water the fig?")
    assert (second.document_calls, second.texts, second.query_calls) == (0, [], 1)
    assert after.turn_ids == before.turn_ids
    store.purge("chat")
    third = CountingEmbedder()
    gatekeeper(third, StoreVectorCache(store, "chat")).explain("When should I water the fig?")
    assert len(third.texts) == len(TOPICS)  # purged: embedded again
    store.close()

"""A store used after ``close()`` raises StoreClosedError, the rule ``Store.close`` states and the
conformance suite checks (``test_a_commit_after_close_raises_or_is_kept``): the in-memory store
now keeps it as the SQL stores do, instead of accepting commits that nothing will ever read."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from context_gatekeeper import Transcript
from context_gatekeeper.errors import StoreClosedError
from context_gatekeeper.stores import InMemoryStore, SQLiteStore, Store
from context_gatekeeper.testing.store_builders import fill, turn

CALLS: dict[str, Callable[[Any], Any]] = {
    "setup": lambda store: store.setup(),
    "head": lambda store: store.head("s"),
    "tip": lambda store: store.tip("s"),
    "revisions": lambda store: store.revisions("s"),
    "commit": lambda store: store.commit("s", turn(2), expected_head=None),
    "acommit": lambda store: asyncio.run(store.acommit("s", turn(2), expected_head=None)),
    "truncate": lambda store: store.truncate("s", 0),
    "purge": lambda store: store.purge("s"),
    "sessions": lambda store: store.sessions(),
    "stored_sessions": lambda store: store.stored_sessions(),
    "save_vectors": lambda store: store.save_vectors("s", [("u1", "h", "e", [1.0])]),
    "load_vectors": lambda store: store.load_vectors("s", "e"),
    "delete_vectors": lambda store: store.delete_vectors("s"),
}


@pytest.mark.parametrize("call", sorted(CALLS))
def test_an_in_memory_store_refuses_every_call_after_close(call: str) -> None:
    store = InMemoryStore()
    fill(store, "s", 1)
    store.close()
    store.close()  # idempotent
    with pytest.raises(StoreClosedError, match="was closed and may not be used any more"):
        CALLS[call](store)


@pytest.mark.parametrize("make", [lambda where: InMemoryStore(), lambda where: SQLiteStore(where / "s.db")],
                         ids=["memory", "sqlite"])
def test_a_transcript_on_a_closed_store_raises_instead_of_losing_its_append(
    tmp_path: Path, make: Callable[[Path], Store]
) -> None:
    """The reviewer's case: every built-in store refuses alike, so code that works on one works on all."""
    store = make(tmp_path)
    transcript = Transcript("s", store=store)
    transcript.append(user="q1", assistant="a1")
    store.close()
    with pytest.raises(StoreClosedError):
        transcript.append(user="q2 after close", assistant="a2")

"""The store-side integrity checks (a revision that does not apply is
refused inside the committing transaction; retried appends are idempotent, renewed under the
store's lock; no-op revisions are not written; ``truncate`` recovers) are part of the shipped
conformance suite (:mod:`context_gatekeeper.testing.store_integrity`), which every store runs
in test_stores.py and test_postgres_store.py.  What is specific to the in-memory store stays here."""

from __future__ import annotations

from context_gatekeeper import Transcript
from context_gatekeeper.stores import InMemoryStore
from context_gatekeeper.testing.store_builders import append, message
from context_gatekeeper.records.operations import Put, Remove
from context_gatekeeper.records.revisions import Revision


def revision(kind: str, *changes) -> Revision:
    return Revision(number=0, parent=0, kind=kind, changes=tuple(changes))  # type: ignore[arg-type]


def test_in_memory_logs_cannot_be_changed_through_what_they_return() -> None:
    store = InMemoryStore()
    sent = message("u1", metadata={"tags": ["a"]}, parts=({"type": "text", "text": "x"},))
    store.commit("s", append(sent), expected_head=None)
    sent.metadata["tags"].append("sent")  # the caller's own object
    store.revisions("s")[0].added[0].metadata["tags"].append("read")
    store.revisions("s")[0].added[0].parts[0]["text"] = "changed"
    stored = store.revisions("s")[0].added[0]
    assert (stored.metadata["tags"], stored.parts[0]["text"]) == (["a"], "x")


def test_remove_keeps_put_back_anchors_exact() -> None:
    """Undoing a deletion puts the message back after the neighbour it had."""
    store = InMemoryStore()
    store.commit("s", append(message("a"), message("b"), message("c")), expected_head=None)
    store.commit("s", revision("apply", Remove(message("b"), "a")), expected_head=1)
    store.commit("s", revision("undo", Put(message("b"), "a")), expected_head=2)
    assert [m.id for m in Transcript("s", store=store).messages] == ["a", "b", "c"]

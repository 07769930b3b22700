"""Issue #11 item 1 on every store: a revision that does not apply is refused inside the
committing transaction; retried appends are idempotent (renewed under the store's lock);
no-op revisions are not written; a log that does not load names its session and
revision, and ``truncate`` recovers every revision before it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from context_gatekeeper import Delete, Transcript
from context_gatekeeper.errors import InvalidInputError, InvalidRevisionError, StaleHeadError
from context_gatekeeper.transcripts.operations import AT_END, Change, Put, Remove
from context_gatekeeper.transcripts.revisions import Revision
from context_gatekeeper.stores import InMemoryStore, SQLiteStore, Store
from pg_support import drop_run_tables, postgres_dsn, prefix_for
from store_conformance import StoreHandles, append, delete, edit, fill, message, run_together, snapshot


def revision(kind: str, *changes) -> Revision:
    return Revision(number=0, parent=0, kind=kind, changes=tuple(changes))  # type: ignore[arg-type]


def same(id: str = "same", content: str = "hi") -> Revision:
    return append(message(id, "user", content))


class IntegrityConformance(StoreHandles):
    """Store-side integrity checks; subclass and define :meth:`make`."""

    BAD = {
        "put of a message already there (undo)": lambda u: revision("undo", Put(u, AT_END)),
        "remove of an absent message": lambda u: delete(message("ghost"), None),
        "change of an absent message": lambda u: edit(message("ghost"), "x"),
        "change that renames": lambda u: revision("apply", Change(u, message("other"))),
        "apply reusing a deleted id": lambda u: revision("apply", Put(message("gone"), None)),
        "set reusing a deleted id": lambda u: revision("set", Put(message("gone"), None)),
        "append after a deleted question": lambda u: append(message("late", "assistant"), after="gone"),
    }

    @pytest.mark.parametrize("name", sorted(BAD))
    def test_a_revision_that_does_not_apply_is_refused_and_writes_nothing(self, store: Store, name: str) -> None:
        (first,) = fill(store, "s", 1)
        store.commit("s", append(message("gone")), expected_head=None)
        store.commit("s", delete(message("gone"), "a1"), expected_head=2)
        before = snapshot(store, "s")
        with pytest.raises(InvalidRevisionError) as caught:
            store.commit("s", self.BAD[name](first.added[0]), expected_head=3)
        assert "'s'" in str(caught.value)
        assert snapshot(store, "s") == before
        assert len(Transcript("s", store=store).messages) == 2  # the session still loads

    def test_a_retried_append_is_a_no_op_and_other_text_under_a_taken_id_is_refused(self, store: Store) -> None:
        store.commit("s", same(), expected_head=None)
        before = snapshot(store, "s")
        again = store.commit("s", same(), expected_head=None)
        assert (again.number, again.changes) == (1, ())
        with pytest.raises(InvalidInputError, match="already used"):
            store.commit("s", same(content="other text"), expected_head=None)
        assert snapshot(store, "s") == before

    def test_a_taken_id_is_renewed_and_what_follows_it_moves_with_it(self, store: Store) -> None:
        store.commit("s", same(), expected_head=None)
        renewed = store.commit(
            "s",
            append(message("same", "user", "new"), message("ans", "assistant"), after=AT_END),
            expected_head=None,
            renew_taken_ids=True,
        )
        new_id = renewed.added[0].id
        assert new_id != "same" and renewed.changes[1].after == new_id
        assert [m.id for m in Transcript("s", store=store).messages] == ["same", new_id, "ans"]

    def test_a_no_op_revision_is_not_written(self, store: Store) -> None:
        (first,) = fill(store, "s", 1)
        user = first.added[0]
        before = snapshot(store, "s")
        for noop in (revision("apply"), revision("set"), edit(user, user.content)):
            result = store.commit("s", noop, expected_head=1)
            assert (result.number, result.changes) == (1, ())
        assert snapshot(store, "s") == before

    def test_an_edit_rebased_over_the_answer_to_the_question_it_deletes_is_stale(self, store: Store) -> None:
        store.commit("s", same(), expected_head=None)  # an open question
        store.commit("s", append(message("answer", "assistant"), after="same"), expected_head=None)
        before = snapshot(store, "s")
        with pytest.raises(StaleHeadError):
            store.commit("s", delete(message("same", content="hi"), None), expected_head=1)
        assert snapshot(store, "s") == before

    def test_threads_retrying_one_request_add_it_once(self, open_store: Callable[[], Store]) -> None:
        """Four writers, each with its own Transcript (and connection), retry one request."""
        stores = [open_store() for _ in range(4)]
        transcripts = [Transcript("s", store=s) for s in stores]
        message = {"id": "same", "role": "user", "content": "hi"}
        errors = run_together(*(lambda t=t: t.append(messages=[message], renew_taken_ids=True) for t in transcripts))
        assert errors == []
        t = Transcript("s", store=stores[0])
        assert [(m.id, m.content) for m in t.messages] == [("same", "hi")]
        assert stores[0].head("s") == 1
        t.append(user="still works")
        t.purge()
        assert stores[0].head("s") == 0

    def test_a_proposal_committed_after_a_purge_and_new_appends_is_refused(self, open_store) -> None:
        from context_gatekeeper.editing.format import ideal_patch_reply
        from context_gatekeeper.testing import ScriptedModel

        mine, theirs = Transcript("s", store=open_store()), Transcript("s", store=open_store())
        mine.append(user="What was Ireland's GDP?", assistant="About 500 billion.")
        model = ScriptedModel([ideal_patch_reply(list(mine.messages), [Delete(mine.messages[1].id)])])
        proposal = mine.edit("drop the answer", model=model, preview=True, allow_large_deletion=True)
        theirs.purge()
        for n in range(3):
            theirs.append(user=f"question {n}", assistant=f"answer {n}")
        before = snapshot(theirs.store, "s")
        with pytest.raises((InvalidRevisionError, StaleHeadError)):
            mine.commit(proposal)
        assert snapshot(theirs.store, "s") == before
        assert len(Transcript("s", store=open_store()).messages) == 6

    def test_truncate_sets_aside_what_follows_and_rebuilds_the_index(self, store: Store) -> None:
        fill(store, "s", 3)
        assert store.truncate("s", 1) == 2
        assert store.head("s") == 1
        store.commit("s", append(message("u3")), expected_head=None)  # u3 is free again
        with pytest.raises(InvalidInputError):
            store.commit("s", append(message("u1", content="different")), expected_head=None)
        with pytest.raises(InvalidInputError):
            store.truncate("s", -1)


class TestInMemory(IntegrityConformance):
    persistent = False

    def make(self, where: Path) -> Store:
        return InMemoryStore()


class TestSQLite(IntegrityConformance):
    def make(self, where: Path) -> Store:
        return SQLiteStore(where / "store.db")


@pytest.fixture(scope="module", autouse=True)
def _drop_tables_afterwards() -> Iterator[None]:
    yield
    drop_run_tables()


class TestPostgres(IntegrityConformance):
    def make(self, where: Path) -> Store:
        from context_gatekeeper.stores import PostgresStore

        return PostgresStore(postgres_dsn(), table_prefix=prefix_for(where))


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

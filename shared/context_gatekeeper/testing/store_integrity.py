"""Store-side integrity as tests: what a store refuses inside its committing transaction.

Part of the store conformance suite; use it through
:class:`context_gatekeeper.testing.stores.StoreConformance`.  The checks themselves live in
:mod:`context_gatekeeper.stores.integrity` (a new store gets them by committing through
:func:`context_gatekeeper.stores.prepare_commit` with a lookup of its id index).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from ..errors import InvalidInputError, InvalidRevisionError, StaleHeadError
from ..stores.base import Store, takes_keyword
from ..records.messages import Message
from ..records.operations import AT_END, Change, Delete, Put, Remove
from ..records.revisions import Proposal, Revision
from ..transcripts.transcript import Transcript
from ._requires import pytest
from .store_builders import append, changed, delete, edit, fill, message, put_ids, raised, run_together, snapshot, turn
from .store_modes import Capabilities, needs, unwrapped
from ..stores.vectors import supports_vectors

__all__ = ["IntegrityContract", "ContentContract", "refused", "revision", "started", "S"]

OpenStore = Callable[[], Store]
S = "s"


def revision(kind: str, *changes: Any) -> Revision:
    """A revision of ``kind`` (any text, even an unknown kind) with ``changes``."""
    return Revision(number=0, parent=0, kind=cast(Any, kind), changes=tuple(changes))


def same(id: str = "same", content: str = "hi") -> Revision:
    """An append of one user message ``id``."""
    return append(message(id, "user", content))


def refused(
    store: Store, bad: Revision, match: str | None = None, *, state: Callable[[Store, str], Any] = snapshot
) -> InvalidRevisionError:
    """Commit ``bad`` at session ``S``'s head: it must be refused, naming the session, and
    leave ``state(store, S)`` (default: head and log) unchanged."""
    before = state(store, S)
    with pytest.raises(InvalidRevisionError, match=match) as caught:
        store.commit(S, bad, expected_head=store.head(S))
    assert f"session {S!r}" in str(caught.value) and "nothing was written" in str(caught.value)
    assert state(store, S) == before
    return caught.value


def started(store: Store) -> tuple[Message, Message]:
    """A session holding a user question and its answer; the two messages."""
    first = store.commit(S, append(message("u1", "user", "stored question"), message("a1", "assistant", "answer")), expected_head=None)
    return first.added[0], first.added[1]


class IntegrityContract:
    """A revision that does not apply is refused inside the committing transaction; retried
    appends are idempotent; no-op revisions are not written; ``truncate`` recovers."""

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
        if not takes_keyword(unwrapped(store), "renew_taken_ids"):
            pytest.skip(f"{type(unwrapped(store)).__name__}.commit does not take renew_taken_ids (optional; see "
                        "test_commit_takes_every_optional_keyword)")
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

    @needs("threads")
    def test_threads_retrying_one_request_add_it_once(self, open_store: Callable[[], Store]) -> None:
        """Four writers, each with its own Transcript (and connection), retry one request."""
        stores = [open_store() for _ in range(4)]
        transcripts = [Transcript("s", store=s) for s in stores]
        message = {"id": "same", "role": "user", "content": "hi"}
        errors = run_together(*(lambda t=t: t.append(messages=[message], renew_taken_ids=True) for t in transcripts))
        assert errors == [], raised(errors)
        t = Transcript("s", store=stores[0])
        assert [(m.id, m.content) for m in t.messages] == [("same", "hi")]
        assert stores[0].head("s") == 1
        t.append(user="still works")
        t.purge()
        assert stores[0].head("s") == 0

    def test_a_proposal_committed_after_a_purge_and_new_appends_is_refused(self, open_store: OpenStore) -> None:
        from ..editing.format import ideal_patch_reply
        from . import ScriptedModel

        mine, theirs = Transcript("s", store=open_store()), Transcript("s", store=open_store())
        mine.append(user="What was Ireland's GDP?", assistant="About 500 billion.")
        model = ScriptedModel([ideal_patch_reply(list(mine.messages), [Delete(mine.messages[1].id)])])
        proposal = mine.edit("drop the answer", model=model, preview=True, allow_large_deletion=True)
        assert isinstance(proposal, Proposal)
        theirs.purge()
        for n in range(3):
            theirs.append(user=f"question {n}", assistant=f"answer {n}")
        before = snapshot(theirs.store, "s")
        with pytest.raises((InvalidRevisionError, StaleHeadError)):
            mine.commit(proposal)
        assert snapshot(theirs.store, "s") == before
        assert len(Transcript("s", store=open_store()).messages) == 6

    @needs("truncate")
    def test_truncate_sets_aside_what_follows_and_rebuilds_the_index(self, store: Store) -> None:
        fill(store, "s", 3)
        assert store.truncate("s", 1) == 2
        assert store.head("s") == 1
        again = store.commit("s", append(message("u3", content="asked again"), after=AT_END), expected_head=None)  # u3 is free again
        assert (again.number, again.parent) == (2, 1), "an id set aside by truncate must be free to append again"
        assert put_ids(store.revisions("s")) == ["u1", "a1", "u3"]
        assert [m.content for m in Transcript("s", store=store).messages][-1] == "asked again"
        with pytest.raises(InvalidInputError):
            store.commit("s", append(message("u1", content="different")), expected_head=None)
        with pytest.raises(InvalidInputError):
            store.truncate("s", -1)


    @needs("truncate")
    def test_a_session_truncated_to_nothing_is_not_listed(self, store: Store) -> None:
        fill(store, "gone", 2)
        fill(store, "kept", 1)
        assert store.truncate("gone", 0) == 2
        assert (store.sessions(), store.head("gone"), store.revisions("gone")) == (["kept"], 0, [])
        assert store.commit("gone", turn(1), expected_head=None).number == 1
        assert store.sessions() == ["gone", "kept"]


class ContentContract:
    """A store checks a revision's *content*, not only its ids: inside the committing
    transaction it refuses, with :class:`InvalidRevisionError` naming the session and writing
    nothing, a change whose ``before`` is not the role and text it holds for the message, a
    removal carrying other text, a revision of an unknown kind, and an append after a message
    the session never held."""

    capabilities: Capabilities

    def stored_state(self, store: Store, session: str) -> Any:
        """What must not change when a commit is refused: by default the session's head and
        log; a store's own tests may override it with every stored byte of the session."""
        return snapshot(store, session)

    def refused(self, store: Store, bad: Revision, match: str | None = None) -> InvalidRevisionError:
        """Commit ``bad`` at the head: it must be refused, naming the session, and change nothing stored."""
        return refused(store, bad, match, state=self.stored_state)

    # -- purge ------------------------------------------------------------------------------
    def test_purge_leaves_nothing_stored_of_the_session(self, store: Store) -> None:
        """After ``purge``, :meth:`stored_state` sees the session as one that never existed:
        revisions, id index, vectors and the revisions ``truncate`` set aside all gone."""
        never = self.stored_state(store, "never existed")
        user, answer = started(store)
        store.commit(S, revision("edit", Change(user, user.revised("my secret", 0))), expected_head=1)
        store.commit(S, append(message("extra", content="more secrets")), expected_head=None)
        if self.capabilities.vectors and supports_vectors(store):
            cast(Any, store).save_vectors(S, [(answer.id, "h", "e", [1.0])])
        if self.capabilities.truncate:
            assert store.truncate(S, 1) == 2  # set aside, kept apart: purge erases them too
        store.purge(S)
        assert self.stored_state(store, S) == never, "purge left some of the session stored"
        again = store.commit(S, append(message(user.id, content="another text")), expected_head=None)
        assert again.number == 1 and again.added[0].content == "another text"  # its ids are free again


    # -- a change's ``before`` ------------------------------------------------------------
    @pytest.mark.parametrize(
        "wrong",
        [
            pytest.param({"content": "WRONG BEFORE"}, id="other-text"),
            pytest.param({"role": "assistant"}, id="other-role"),
        ],
    )
    def test_a_change_whose_before_is_not_the_stored_message_is_refused(self, store: Store, wrong: dict[str, Any]) -> None:
        user, _ = started(store)
        fake = Message(**{"id": user.id, "role": user.role, "content": user.content, **wrong})
        error = self.refused(store, revision("edit", Change(fake, Message(user.id, "user", "y"))))
        assert repr(user.id) in str(error) and "Reload the transcript" in str(error)
        # the right ``before`` still commits, and undo restores the text that was stored
        transcript = Transcript(S, store=store)
        store.commit(S, revision("edit", Change(user, Message(user.id, "user", "y"))), expected_head=store.head(S))
        transcript.undo()
        assert [m.content for m in Transcript(S, store=store).messages] == ["stored question", "answer"]

    def test_a_change_built_on_text_edited_since_is_refused(self, store: Store) -> None:
        user, _ = started(store)
        edited = store.commit(S, revision("edit", Change(user, user.revised("second text", 0))), expected_head=1)
        now = changed(edited)
        self.refused(store, revision("edit", Change(user, user.revised("third text", 0))))  # the first text: stale
        self.refused(store, revision("apply", Remove(user, None)))
        store.commit(S, revision("edit", Change(now, now.revised("third text", 0))), expected_head=2)
        assert [m.content for m in Transcript(S, store=store).messages] == ["third text", "answer"]

    # -- a removal's message --------------------------------------------------------------
    @pytest.mark.parametrize("kind", ["apply", "set", "clear", "edit"])
    def test_a_remove_carrying_other_text_is_refused(self, store: Store, kind: str) -> None:
        user, answer = started(store)
        wrong = Message(answer.id, answer.role, "never the answer")
        error = self.refused(store, revision(kind, Remove(user, None), Remove(wrong, None)))
        assert repr(answer.id) in str(error)
        self.refused(store, revision(kind, Remove(Message(user.id, "system", user.content), None)))  # other role
        store.commit(S, revision(kind, Remove(user, None), Remove(answer, user.id)), expected_head=1)
        assert list(Transcript(S, store=store).messages) == []

    def test_an_undo_cannot_remove_a_message_under_other_text(self, store: Store) -> None:
        user, answer = started(store)
        self.refused(store, revision("undo", Remove(Message(answer.id, "assistant", "other"), user.id)))

    # -- kinds and anchors ----------------------------------------------------------------
    @pytest.mark.parametrize("kind", ["bogus", "", "APPEND"])
    def test_a_revision_of_unknown_kind_is_refused(self, store: Store, kind: str) -> None:
        user, _ = started(store)
        error = self.refused(store, revision(kind, Change(user, user.revised("y", 0))), match="unknown kind")
        assert repr(kind) in str(error)
        self.refused(store, revision(kind, Put(message("new"), AT_END)), match="unknown kind")

    def test_an_append_after_a_message_never_held_is_refused(self, store: Store) -> None:
        started(store)
        before = self.stored_state(store, S)
        for anchored in (
            append(message("late", "assistant"), after="never-there"),
            append(message("q", "user"), message("late", "assistant"), after="never-there"),
        ):
            with pytest.raises(InvalidRevisionError, match="never held") as caught:
                store.commit(S, anchored, expected_head=None)
            assert f"session {S!r}" in str(caught.value) and "'never-there'" in str(caught.value)
            assert self.stored_state(store, S) == before
        # anchors on a held message, on one put earlier in the same append, or none still commit
        store.commit(S, append(message("u2"), message("a2", "assistant"), after="a1"), expected_head=None)
        store.commit(S, append(message("u3"), after=AT_END), expected_head=None)
        assert [m.id for m in Transcript(S, store=store).messages] == ["u1", "a1", "u2", "a2", "u3"]

    # -- the index rebuilt by truncate knows the current text -----------------------------
    @needs("truncate")
    def test_the_rebuilt_index_checks_the_current_text(self, store: Store) -> None:
        user, answer = started(store)
        edited = store.commit(S, revision("edit", Change(user, user.revised("second text", 0))), expected_head=1)
        store.commit(S, revision("apply", Remove(answer, user.id)), expected_head=2)
        store.commit(S, append(message("extra")), expected_head=None)
        assert store.truncate(S, 3) == 1
        now = changed(edited)
        self.refused(store, revision("edit", Change(user, user.revised("third", 0))))
        self.refused(store, revision("undo", Put(Message(answer.id, "assistant", "answer"), user.id), Remove(user, None)))
        store.commit(S, revision("undo", Put(answer, user.id)), expected_head=3)
        store.commit(S, revision("edit", Change(now, now.revised("third", 0))), expected_head=4)
        assert [m.content for m in Transcript(S, store=store).messages] == ["third", "answer"]
        # the id set aside ("extra") is free again, under other text
        again = store.commit(S, append(message("extra", content="other text"), after=AT_END), expected_head=None)
        assert again.number == 6, "an id set aside by truncate must be free to append again"
        assert [m.content for m in Transcript(S, store=store).messages] == ["third", "answer", "other text"]

"""Transcripts over every store, as a hypothesis state machine.

Random sequences of appends (duplicate ids, retried requests, taken ids, one id twice in an
append, ids of deleted messages), edits through
a scripted model with preview and a later commit, apply, set, clear, undo, redo, revert,
purge and reopen, from two transcript objects on one storage.  After every step: the
log loads, the state equals an independent replay of the log, the record holds every
appended message once, no internal marker leaks, and both objects agree.  A refused
operation must leave the stored bytes unchanged.

The machine keeps a :class:`Reference` model: the state after each revision and its own
undo and redo stacks, kept by the documented rules alone (``docs/architecture.md``,
version rules).  Every call is checked against it: what apply, set, clear and a commit
give; which revision undo and redo act on and the state they leave (the reverted
revision's messages as they were, every message appended since kept, in order); that
``revert(n)`` gives exactly revision n's state; that a new state-changing revision
makes ``redo`` refuse; and which calls must be refused or record nothing.  ``purge``
runs only on a history of some length, so most steps build on a long history.

CI profile: ``CG_STATEFUL_EXAMPLES`` examples (default 40) of up to
``CG_STATEFUL_STEPS`` steps (default 40) per store; raise them to search longer, e.g.
``CG_STATEFUL_EXAMPLES=1000 CG_STATEFUL_STEPS=60 pytest tests/test_transcript_stateful.py``.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from context_gatekeeper import Delete, InsertAfter, Replace, Transcript
from context_gatekeeper.editing.format import ideal_patch_reply
from context_gatekeeper.errors import GatekeeperError, HistoryError
from context_gatekeeper.records.messages import Message
from context_gatekeeper.records.operations import AT_END, Change, Put, Remove
from context_gatekeeper.records.revisions import STATE_CHANGING
from context_gatekeeper.stores import InMemoryStore, SQLiteStore, Store
from context_gatekeeper.testing import ScriptedModel

EXAMPLES = int(os.environ.get("CG_STATEFUL_EXAMPLES", "40"))
STEPS = int(os.environ.get("CG_STATEFUL_STEPS", "40"))
WORDS = st.sampled_from(["hi", "Ireland", "Iceland", "GDP 500", "lock TTL", "ok", "same"])
WHO = st.sampled_from([0, 1])


def naive_replay(log: list) -> list[Message]:
    """The state a log produces, by the definition (lists and linear scans, no index)."""
    state: list[Message] = []
    for revision in log:
        state = replayed(state, revision)
    return state


def replayed(state: list[Message], revision: Any) -> list[Message]:
    """``state`` with ``revision``'s changes applied, by the definition."""
    state = list(state)
    for change in revision.changes:
        if isinstance(change, Put):
            assert all(m.id != change.message.id for m in state), f"put twice: {change.message.id}"
            ids = [m.id for m in state]
            if change.after is None:
                at = 0
            elif change.after is AT_END or change.after not in ids:
                at = len(state)
            else:
                at = ids.index(change.after) + 1
            state.insert(at, change.message)
        elif isinstance(change, Remove):
            state = [m for m in state if m.id != change.message.id]
        else:
            assert isinstance(change, Change)
            state = [change.after if m.id == change.before.id else m for m in state]
    return state


# -- the reference model -------------------------------------------------------------------
Shown = dict[str, Any]
PROVENANCE = ("origin", "derived_from", "revision")
PURGE_AFTER = 8  # purge only a history of at least this many revisions


def shown(messages: Iterable[Message]) -> list[Shown]:
    """Messages as the chat shows them: id, role, text, parts and metadata (no provenance)."""
    return [{k: v for k, v in m.to_dict().items() if k not in PROVENANCE} for m in messages]


def only(state: list[Shown], ids: set[str], *, keep: bool = True) -> list[Shown]:
    """The messages of ``state`` whose id is in ``ids`` (``keep=False``: not in ``ids``), in order."""
    return [m for m in state if (m["id"] in ids) == keep]


def ids_of(state: list[Shown]) -> set[str]:
    return {m["id"] for m in state}


@dataclass
class Reference:
    """What the transcript must hold, by the documented version rules alone.

    ``states[n]`` is the state after revision n (0: empty).  ``done`` lists the
    state-changing revisions (edit, apply, set, clear, revert) undo may revert, most
    recent last; ``undone`` the revisions undone that redo may re-apply, most recent
    last; a new state-changing revision empties ``undone``.  ``before``/``after`` hold
    each state-changing revision's state on either side of it."""

    states: list[list[Shown]] = field(default_factory=lambda: [[]])
    kinds: list[str] = field(default_factory=list)  # kinds[n - 1]: revision n's kind
    done: list[int] = field(default_factory=list)
    undone: list[int] = field(default_factory=list)
    before: dict[int, list[Shown]] = field(default_factory=dict)
    after: dict[int, list[Shown]] = field(default_factory=dict)
    generation: int = 0  # one more after each purge

    @property
    def head(self) -> int:
        return len(self.states) - 1

    @property
    def state(self) -> list[Shown]:
        return self.states[-1]

    def used_ids(self) -> set[str]:
        return {m["id"] for state in self.states for m in state}

    def recorded(self, kind: str, state: list[Shown]) -> None:
        """Revision ``head + 1`` of ``kind`` was stored and left ``state``."""
        number, previous = len(self.states), self.state
        self.states.append(state)
        self.kinds.append(kind)
        if kind in STATE_CHANGING:
            self.done.append(number)
            self.undone.clear()
            self.before[number], self.after[number] = previous, state
        elif kind == "undo":
            self.undone.append(self.done.pop())
        elif kind == "redo":
            self.done.append(self.undone.pop())

    def purged(self) -> None:
        """The session was erased: an empty history, nothing to undo or redo."""
        self.states, self.kinds, self.done, self.undone = [[]], [], [], []
        self.before.clear()
        self.after.clear()
        self.generation += 1

    def undone_state_ok(self, now: list[Shown]) -> None:
        """``now`` is what undoing ``done[-1]`` must leave: that revision's messages as they
        were before it, in their order, and every message appended since, in its order."""
        target = self.done[-1]
        self.check_swap(now, self.after[target], self.before[target], f"undo of revision {target}")

    def redone_state_ok(self, now: list[Shown]) -> None:
        """``now`` is what redoing ``undone[-1]`` must leave (the mirror of undo)."""
        target = self.undone[-1]
        self.check_swap(now, self.before[target], self.after[target], f"redo of revision {target}")

    def check_swap(self, now: list[Shown], gone: list[Shown], wanted: list[Shown], what: str) -> None:
        """``now`` is the current state with ``gone`` (held as a whole now, in its order) turned
        into ``wanted``, in its order, and every other message kept, in its order."""
        current = self.state
        held = only(current, ids_of(gone))
        assert by_id(held) == by_id(gone), f"{what}: the state does not hold the revision's messages as they were"
        others = only(current, ids_of(gone), keep=False)
        assert only(now, ids_of(wanted), keep=False) == others, f"{what}: later messages lost or moved: {shown_ids(now)}"
        assert held == gone, f"{what}: the state holds {shown_ids(held)}, not {shown_ids(gone)} in order"
        result = only(now, ids_of(wanted))
        assert result == wanted, f"{what}: {shown_ids(now)} does not hold {shown_ids(wanted)} in order"


def shown_ids(state: list[Shown]) -> list[str]:
    return [m["id"] for m in state]


def by_id(state: list[Shown]) -> dict[str, Shown]:
    return {m["id"]: m for m in state}


def has_messages(machine: Any) -> bool:
    return bool(machine.views[0].messages)


def machine_for(open_store: Callable[[], Store], dump: Callable[[Store, str], Any]) -> type[RuleBasedStateMachine]:
    class TranscriptMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.session = f"s-{uuid.uuid4().hex[:8]}"
            self.stores = [open_store(), open_store()]
            self.views = [Transcript(self.session, store=s) for s in self.stores]
            self.appended: dict[str, tuple[str, str]] = {}  # id -> (role, content) since the last purge
            self.proposal: tuple[int, Any, int] | None = None  # (who, proposal, the model's generation)
            self.model = Reference()

        # -- helpers --------------------------------------------------------------------
        def attempt(self, action: Callable[[], Any]) -> Any:
            """Run ``action``; a refusal must be a library error that changed no stored byte."""
            before = dump(self.stores[0], self.session)
            try:
                return action()
            except GatekeeperError:
                assert dump(self.stores[0], self.session) == before, "a refused operation changed the store"
                return None

        def note(self, revision: Any) -> None:
            if revision is not None and revision.kind == "append":
                for message in revision.added:
                    self.appended[message.id] = (message.role, message.content)

        def pick(self, who: int, index: int) -> Message | None:
            messages = self.views[who].messages
            return messages[index % len(messages)] if messages else None

        def now(self) -> list[Shown]:
            """The state as stored now (an independent replay of the log)."""
            return shown(naive_replay(self.stores[0].revisions(self.session)))

        def checked(self, kind: str, revision: Any, expected: list[Shown] | None = None) -> bool:
            """Tell the model what a call of ``kind`` returned (``None``: refused), checking the
            state against ``expected`` when given; True when a revision was stored."""
            now = self.now()
            if revision is None:
                assert self.stores[0].head(self.session) == self.model.head, f"a refused {kind} moved the head"
                return False
            if expected is not None:
                assert now == expected, f"{kind}: {shown_ids(now)}, expected {shown_ids(expected)}"
            if revision.number == self.model.head:  # recorded nothing
                assert not revision.changes and now == self.model.state, f"{kind} recorded nothing but changed the state"
                return False
            assert revision.number == self.model.head + 1, f"{kind} stored revision {revision.number}"
            assert revision.kind == kind, (revision.kind, kind)
            discards_redo = kind in STATE_CHANGING and bool(self.model.undone)
            self.model.recorded(kind, now)
            if discards_redo:
                self.redo_is_refused()
            return True

        def redo_is_refused(self) -> None:
            """A state-changing revision after an undo discards what was undone."""
            before = dump(self.stores[0], self.session)
            with pytest.raises(HistoryError):
                self.views[1].redo()
            assert dump(self.stores[0], self.session) == before, "a refused redo changed the store"

        def appended_ok(self, revision: Any) -> None:
            """An append keeps every message the state held, as it was, and adds its own."""
            if revision is None or revision.number == self.model.head:
                self.checked("append", revision)
                return
            now, old = self.now(), self.model.state
            assert only(now, ids_of(old)) == old, "an append changed or moved a message the state held"
            assert only(now, ids_of(old), keep=False) == shown(revision.added), "an append lost or reordered its messages"
            self.checked("append", revision)

        # -- rules ------------------------------------------------------------------------
        @rule(who=WHO, user=WORDS, answer=st.none() | WORDS)
        def append_turn(self, who: int, user: str, answer: str | None) -> None:
            revision = self.attempt(lambda: self.views[who].append(user=user, assistant=answer))
            self.note(revision)
            self.appended_ok(revision)

        @rule(who=WHO, answer=WORDS)
        def append_answer(self, who: int, answer: str) -> None:
            revision = self.attempt(lambda: self.views[who].append(assistant=answer))
            self.note(revision)
            self.appended_ok(revision)

        @rule(who=WHO, batch=st.lists(st.tuples(st.sampled_from(["same", "<end>", "dup"]),
                                                st.sampled_from(["user", "user", "assistant"]),
                                                st.sampled_from(["same", "same", "other"])), min_size=1, max_size=3),
              renew=st.booleans())
        def append_with_ids(self, who: int, batch: list[tuple[str, str, str]], renew: bool) -> None:
            """Retried requests, taken ids, an id twice in one append, ids of deleted messages and
            an id named like the old end marker.  A retry is a message the state holds now with
            its first role and text; with ``renew``, one behind a message that is not is a retry
            only when the batch's start, through it, repeats the end of the state (by role and
            text; that whole start is then the retry), else it is a taken id.  With ``renew``,
            held messages leading an answer to the view's open question are a retry only when
            they are the messages right after it (by id), or the batch's start, through them,
            repeats those messages (by role and text; that start is the retry), else taken ids.
            Every other message is appended (taken ids renewed) or the append is refused whole:
            nothing is ever dropped silently."""
            head = self.stores[0].head(self.session)
            current = naive_replay(self.stores[0].revisions(self.session))
            held = {m.id for m in current}
            given: set[str] = set()
            retry: list[bool] = []
            for id, role, text in batch:
                retry.append(id not in given and id in held and self.appended.get(id) == (role, text))
                given.add(id)
            lead = retry.index(False) if False in retry else len(batch)
            late = [i for i in range(lead, len(batch)) if retry[i]]
            start = 0
            if renew and late:
                tail = [(m.role, m.content) for m in current]
                start = next((n for n in range(min(len(batch), len(tail)), late[-1], -1)
                              if tail[len(tail) - n:] == [(role, text) for _, role, text in batch[:n]]), 0)
                retry = [i < start for i in range(len(batch))] if start else [
                    r and i not in late for i, r in enumerate(retry)]
            question = self.views[who]._open_user  # the open question an assistant-first batch answers
            if renew and batch[0][1] != "user" and question in held and retry[0] and not start:
                retry = self.answer_retries(current, question, batch, retry)
            given, new, taken = set(), 0, False
            for (id, role, text), retried in zip(batch, retry):
                repeated = id in given
                given.add(id)
                if retried:
                    continue
                new += 1
                taken = taken or repeated or id in self.appended
            messages = [{"id": id, "role": role, "content": text} for id, role, text in batch]
            before = dump(self.stores[0], self.session)
            try:
                revision = self.views[who].append(messages=messages, renew_taken_ids=renew)
            except GatekeeperError as error:
                assert dump(self.stores[0], self.session) == before, "a refused operation changed the store"
                assert (taken and not renew) or batch[0][1] != "user", f"refused: {error}"
                self.checked("append", None)
                return
            assert not (taken and not renew), "a taken id was neither renewed nor refused"
            assert len(revision.added) == new, "a message of the append was dropped"
            assert self.stores[0].head(self.session) == head + (1 if new else 0)
            state = [m.id for m in naive_replay(self.stores[0].revisions(self.session))]
            added = [m.id for m in revision.added]
            assert [i for i in state if i in set(added)] == added, "the append's messages are out of order"
            if batch[0][1] == "user" and added:  # appended at the end, whatever it repeated
                assert state[-len(added):] == added, "a message after a retry was put mid-transcript"
            self.note(revision)
            self.appended_ok(revision)

        @staticmethod
        def answer_retries(current: list[Message], question: str, batch: list[tuple[str, str, str]],
                           retry: list[bool]) -> list[bool]:
            """Which messages of ``batch``, an answer to the open ``question`` (renewing taken ids)
            whose first messages are held, are retries: those held ones when they are the messages
            right after the question, by id; else the longest start, through them, that those
            messages repeat by role and text; else none (the held ones are renewed, or the answer
            is refused when the question is answered)."""
            lead = retry.index(False) if False in retry else len(batch)
            at = [m.id for m in current].index(question) + 1
            after = current[at : at + len(batch)]
            if [m.id for m in after[:lead]] == [id for id, _, _ in batch[:lead]]:
                return retry
            start = next((n for n in range(min(len(batch), len(after)), lead - 1, -1)
                          if [(m.role, m.content) for m in after[:n]] == [(r, t) for _, r, t in batch[:n]]), 0)
            return [i < start for i in range(len(batch))]

        @precondition(has_messages)
        @rule(who=WHO, index=st.integers(0, 50), text=WORDS, kind=st.sampled_from(["replace", "delete", "insert"]))
        def apply(self, who: int, index: int, text: str, kind: str) -> None:
            target = self.pick(who, index)
            if target is None:
                return
            request = {"replace": Replace(target.id, text), "delete": Delete(target.id),
                       "insert": InsertAfter(target.id, "user", text)}[kind]
            revision = self.attempt(lambda: self.views[who].apply([request]))
            assert revision is not None, f"apply refused a valid {kind}"
            state, at = list(self.model.state), shown_ids(self.model.state).index(target.id)
            if kind == "replace":
                state[at] = {**state[at], "content": text}
            elif kind == "delete":
                del state[at]
            else:
                assert len(revision.added) == 1, "an insert adds one message"
                state.insert(at + 1, {"id": revision.added[0].id, "role": "user", "content": text})
            self.checked("apply", revision, state)

        @precondition(has_messages)
        @rule(who=WHO)
        def apply_nothing(self, who: int) -> None:
            self.checked("apply", self.attempt(lambda: self.views[who].apply([])), self.model.state)

        @precondition(has_messages)
        @rule(who=WHO, keep=st.lists(st.integers(0, 50), max_size=4), text=WORDS, reuse=st.booleans(),
              reword=st.booleans())
        def set_state(self, who: int, keep: list[int], text: str, reuse: bool, reword: bool) -> None:
            """A new state: kept messages in any order (the first one reworded, maybe), and a new
            one; every message claims provenance of its own, which set() must not take."""
            messages = self.views[who].messages
            kept = list({messages[i % len(messages)].id: messages[i % len(messages)] for i in keep}.values()) if messages else []
            before = {m.id: m for m in messages}
            claimed = {"origin": "edited", "derived_from": ("claimed",), "revision": 77}
            if reword and kept:
                kept[0] = replace(kept[0], content=kept[0].content + " (set)", **claimed)
            new = [*kept, {"role": "user", "content": text, "metadata": {"span": (0, 1), 1: "x"}, **claimed,
                           **({"id": "dup"} if reuse else {})}]
            revision = self.attempt(lambda: self.views[who].set(new))
            self.note(revision)
            taken = reuse and ("dup" in {m.id for m in kept} or ("dup" in self.model.used_ids() and "dup" not in before))
            assert (revision is None) == taken, f"set() {'accepted' if taken else 'refused'} the id 'dup'"
            if revision is None:
                self.checked("set", None)
                return
            now = self.now()
            assert now[:-1] == shown(kept), "set() did not keep the messages given, in their order"
            assert (now[-1]["role"], now[-1]["content"]) == ("user", text) and (now[-1]["id"] == "dup") == reuse
            self.checked("set", revision, now)
            for message in self.views[who].messages:
                held = before.get(message.id)
                if held is None:  # set() brings new messages into the record, as originally written
                    assert (message.origin, message.derived_from) == ("original", ()), message
                    self.appended.setdefault(message.id, (message.role, message.content))
                elif (message.role, message.content, message.parts, message.metadata) == \
                        (held.role, held.content, held.parts, held.metadata):  # says what it said
                    assert (message.origin, message.derived_from) == (held.origin, held.derived_from), message
                else:  # its text or metadata changed: revised as an edit revises it
                    expected = held.revised(message.content, message.revision)
                    assert (message.origin, message.derived_from) == (expected.origin, expected.derived_from), message

        @precondition(has_messages)
        @rule(who=WHO)
        def clear(self, who: int) -> None:
            self.checked("clear", self.attempt(self.views[who].clear), [])

        @precondition(has_messages)
        @rule(who=WHO, index=st.integers(0, 50), delete=st.booleans())
        def preview(self, who: int, index: int, delete: bool) -> None:
            target = self.pick(who, index)
            if target is None:
                return
            state = list(self.views[who].messages)
            request = Delete(target.id) if delete else Replace(target.id, "edited by the model")
            model = ScriptedModel([ideal_patch_reply(state, [request])] * 2)
            proposal = self.attempt(
                lambda: self.views[who].edit("please change it", model=model, preview=True, allow_large_deletion=True)
            )
            self.proposal = None if proposal is None else (who, proposal, self.model.generation)
            if proposal is not None:
                assert shown(proposal.diff.before) == self.model.state and proposal.base == self.model.head

        @precondition(lambda self: self.proposal is not None)
        @rule(who=WHO)
        def commit(self, who: int) -> None:
            """A proposal commits at its base head, or over appends only; else it is refused."""
            assert self.proposal is not None
            _, proposal, generation = self.proposal
            self.proposal = None
            revision = self.attempt(lambda: self.views[who].commit(proposal))
            if not proposal.changes:  # nothing to apply: records nothing, wherever the head is
                self.checked("edit", revision, self.model.state)
                return
            base = proposal.base
            if generation != self.model.generation or set(self.model.kinds[base:]) - {"append"}:
                assert revision is None, "a proposal was committed over a purge or a state-changing revision"
            elif base == self.model.head:
                assert revision is not None, "a proposal at the head was refused"
                self.checked("edit", revision, shown(proposal.diff.after))
                return
            elif revision is not None:  # rebased over appends: it changes only its own messages
                base_ids, now = ids_of(shown(proposal.diff.before)), self.now()
                assert only(now, base_ids) == shown(proposal.diff.after)
                assert only(now, base_ids, keep=False) == only(self.model.state, base_ids, keep=False)
            self.checked("edit", revision)

        @precondition(lambda self: bool(self.model.done))
        @rule(who=WHO)
        def undo(self, who: int) -> None:
            revision = self.attempt(self.views[who].undo)
            assert revision is not None and revision.target == self.model.done[-1], \
                f"undo reverted {getattr(revision, 'target', None)}, not revision {self.model.done[-1]}"
            self.model.undone_state_ok(self.now())
            self.checked("undo", revision)

        @precondition(lambda self: bool(self.model.undone))
        @rule(who=WHO)
        def redo(self, who: int) -> None:
            revision = self.attempt(self.views[who].redo)
            assert revision is not None and revision.target == self.model.undone[-1], \
                f"redo re-applied {getattr(revision, 'target', None)}, not revision {self.model.undone[-1]}"
            self.model.redone_state_ok(self.now())
            self.checked("redo", revision)

        @precondition(lambda self: bool(self.model.done))
        @rule(who=WHO, undos=st.integers(1, 3), redos=st.integers(0, 3))
        def undo_then_redo(self, who: int, undos: int, redos: int) -> None:
            """Several undos in a row, then redos (one view each, maybe), with nothing between."""
            for _ in range(undos):
                if self.model.done:
                    self.undo(who)
            for _ in range(redos):
                if self.model.undone:
                    self.redo(1 - who)

        @precondition(lambda self: not self.model.done)
        @rule(who=WHO, which=st.sampled_from(["undo", "redo"]))
        def nothing_to_undo_or_redo(self, who: int, which: str) -> None:
            """Undo with nothing state-changing left (redo, with nothing undone): refused."""
            if which == "redo" and self.model.undone:
                return
            revision = self.attempt(getattr(self.views[who], which))
            assert revision is None, f"{which} with nothing to act on was not refused"
            self.checked(which, None)

        @rule(who=WHO, n=st.integers(0, 30))
        def revert(self, who: int, n: int) -> None:
            target = n % (self.model.head + 1)
            revision = self.attempt(lambda: self.views[who].revert(target))
            assert revision is not None, f"revert({target}) was refused"
            self.checked("revert", revision, self.model.states[target])

        @precondition(lambda self: self.model.head >= PURGE_AFTER)
        @rule(who=WHO)
        def purge(self, who: int) -> None:
            self.views[who].purge()
            self.appended.clear()
            self.model.purged()

        @rule(who=WHO)
        def reopen(self, who: int) -> None:
            self.views[who] = Transcript(self.session, store=self.stores[who])

        # -- invariants ------------------------------------------------------------------
        @invariant()
        def the_state_is_the_models(self) -> None:
            assert self.stores[0].head(self.session) == self.model.head
            assert self.now() == self.model.state

        @invariant()
        def the_log_loads_and_replays(self) -> None:
            log = self.stores[0].revisions(self.session)
            fresh = Transcript(self.session, store=self.stores[1])
            expected = naive_replay(log)
            assert [m.to_dict() for m in fresh.messages] == [m.to_dict() for m in expected]
            for view in self.views:
                assert [m.to_dict() for m in view.messages] == [m.to_dict() for m in expected]
            assert [r.number for r in log] == list(range(1, len(log) + 1))
            for revision in log:
                for change in revision.changes:
                    if isinstance(change, (Put, Remove)):
                        assert change.after is None or change.after is AT_END or isinstance(change.after, str)
            assert all(isinstance(m.id, str) for m in fresh.messages)

        @invariant()
        def each_revision_says_what_it_added_removed_and_moved(self) -> None:
            """``added``: the messages new to the state; ``removed``: those gone from it; ``moved``:
            messages it holds before and after (taken out and put back elsewhere)."""
            state: list[Message] = []
            for revision in self.stores[0].revisions(self.session):
                before = {m.id for m in state}
                state = replayed(state, revision)
                after = {m.id for m in state}
                assert {m.id for m in revision.added} == after - before, revision.number
                assert {m.id for m in revision.removed} == before - after, revision.number
                assert {m.id for m in revision.moved} <= before & after, revision.number

        @invariant()
        def the_record_holds_every_appended_message_once(self) -> None:
            record = Transcript(self.session, store=self.stores[0]).record()
            ids = [m.id for m in record]
            assert len(ids) == len(set(ids))
            assert set(self.appended) <= set(ids)

        def teardown(self) -> None:
            self.stores[0].purge(self.session)

    return TranscriptMachine


PROFILE = settings(
    max_examples=EXAMPLES,
    stateful_step_count=STEPS,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


def dump_memory(store: Store, session: str) -> Any:
    return ([r.to_dict() for r in store.revisions(session)], dict(store._index.get(session, {})))  # type: ignore[attr-defined]


def dump_sql(store: Store, session: str) -> Any:
    """The session's revisions and its id-index rows, read straight from the tables."""
    if isinstance(store, SQLiteStore):
        with store._connection() as conn:  # type: ignore[attr-defined]
            rows = conn.execute("SELECT message_id, present, digest FROM message_ids WHERE session_id = ?", (session,))
            index = {bytes(k): (bool(p), d) for k, p, d in rows}
    else:
        from psycopg import sql

        query = sql.SQL("SELECT message_id, present, digest FROM {} WHERE session_key = %s").format(store._names["ids"])  # type: ignore[attr-defined]
        with store._connection() as conn:  # type: ignore[attr-defined]
            index = {bytes(k): (p, d) for k, p, d in conn.execute(query, (store._key(session)[0],))}  # type: ignore[attr-defined]
    return ([r.to_dict() for r in store.revisions(session)], index)


@pytest.fixture
def handles() -> Iterator[list[Store]]:
    opened: list[Store] = []
    yield opened
    for store in opened:
        store.close()


def test_in_memory(handles: list[Store]) -> None:
    store = InMemoryStore()
    run_state_machine_as_test(machine_for(lambda: store, dump_memory), settings=PROFILE)


def test_sqlite(tmp_path: Path, handles: list[Store]) -> None:
    def open_() -> Store:
        handles.append(SQLiteStore(tmp_path / "stateful.db"))
        return handles[-1]

    run_state_machine_as_test(machine_for(open_, dump_sql), settings=PROFILE)


def test_postgres(tmp_path: Path, handles: list[Store]) -> None:
    from pg_support import drop_tables, postgres_dsn, prefix_for

    dsn = postgres_dsn()
    from context_gatekeeper.stores import PostgresStore

    pool = [PostgresStore(dsn, table_prefix=prefix_for(tmp_path)) for _ in range(2)]
    handles.extend(pool)
    turn = iter(range(10**9))
    try:
        run_state_machine_as_test(machine_for(lambda: pool[next(turn) % 2], dump_sql), settings=PROFILE)
    finally:
        for store in pool:
            store.close()
        handles.clear()
        drop_tables(dsn, prefix_for(tmp_path))

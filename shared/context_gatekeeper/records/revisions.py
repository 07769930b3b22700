"""Revisions, proposals and diffs: the version history of a transcript.

Every change to a transcript is a :class:`Revision`: a numbered, timestamped list of
changes on message ids (:mod:`operations`).  The state at revision ``n`` is the
changes of revisions ``1..n`` applied in order to an empty transcript.
"""

from __future__ import annotations

import difflib
import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from ..errors import InvalidTypeError
from .messages import Message, detached, normalized_text, storable
from .operations import (
    _SET_CHANGE_AFTER, _SET_CHANGE_BEFORE, _SET_PUT_AFTER, _SET_PUT_MESSAGE, _SET_REMOVE_AFTER, _SET_REMOVE_MESSAGE,
    Applied, Change, Put, Remove, _stable_positions, change_from_dict, change_to_dict, is_noop, touched_ids,
)
from .replay import Skipped, replay, rewind, split_applicable  # replaying over a state others move too

__all__ = [
    "RevisionKind",
    "STATE_CHANGING",
    "Revision",
    "Proposal",
    "MessageDiff",
    "Diff",
    "diff_states",
    "rebase_conflicts",
    "undo_stacks",
    "split_applicable",
    "Skipped",
    "rewind",
    "replay",
    "storable_revision",
    "revision_of",
]

RevisionKind = Literal["append", "edit", "apply", "set", "clear", "undo", "redo", "revert"]
STATE_CHANGING: frozenset[str] = frozenset({"edit", "apply", "set", "clear", "revert"})
"""Kinds that ``undo`` reverts; appends are undone only by deleting them explicitly."""


@dataclass(frozen=True, slots=True)
class Revision:
    """One recorded change.

    Attributes:
        number: 1, 2, 3, ... within the session (0 is the empty transcript).
        parent: the revision this one was applied on (``number - 1``).
        kind: "append", "edit", "apply", "set", "clear", "undo", "redo" or "revert".
        changes: the changes on message ids, in order.
        instruction: the natural-language instruction (edits), else None.
        model: the name of the model that produced an edit, else None.
        time: seconds since the epoch when the store committed it.
        base: the head the change was computed on; below ``parent`` when an edit was
            rebased over appends that landed meanwhile.
        target: for "undo" and "redo", the revision undone or re-applied; for
            "revert", the revision whose state was restored.
    """

    number: int
    parent: int
    kind: RevisionKind
    changes: tuple[Applied, ...]
    instruction: str | None = None
    model: str | None = None
    time: float = field(default_factory=time.time)
    base: int | None = None
    target: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (the stores' format)."""
        return {
            "number": self.number,
            "parent": self.parent,
            "kind": self.kind,
            "changes": [change_to_dict(c) for c in self.changes],
            "instruction": self.instruction,
            "model": self.model,
            "time": self.time,
            "base": self.base,
            "target": self.target,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Revision":
        """Inverse of :meth:`to_dict`."""
        return cls(
            number=data["number"],
            parent=data["parent"],
            kind=data["kind"],
            changes=tuple(change_from_dict(c, legacy_end=data["kind"] == "append") for c in data["changes"]),
            instruction=data.get("instruction"),
            model=data.get("model"),
            time=data.get("time", 0.0),
            base=data.get("base"),
            target=data.get("target"),
        )

    def detached(self) -> "Revision":
        """This revision with its own copies of every message's metadata and parts."""
        return replace(self, changes=tuple(map(detached_change, self.changes)))

    def stamped(self) -> "Revision":
        """This revision with the versions it produces marked as produced by it (itself
        when they already are: stores stamp revisions as they commit them)."""
        number, out, same = self.number, [], True
        for change in self.changes:
            if isinstance(change, Put) and change.message.revision != number:
                change, same = Put(change.message.stamped(number), change.after), False
            elif isinstance(change, Change) and change.after.revision != number:
                change, same = Change(change.before, change.after.stamped(number)), False
            out.append(change)
        return self if same else replace(self, changes=tuple(out))

    @property
    def is_noop(self) -> bool:
        """Whether the revision changes nothing (no changes, or only changes to identical text)."""
        return all(is_noop(c) for c in self.changes)

    def changes_json(self) -> str:
        """The changes as compact JSON text."""
        return json.dumps([change_to_dict(c) for c in self.changes], ensure_ascii=False, separators=(",", ":"))

    @property
    def removed(self) -> tuple[Message, ...]:
        """Messages this revision took out of the state, and did not put back: a message it
        only moved (removed, then put back elsewhere) is in :attr:`moved` instead."""
        removed = [c.message for c in self.changes if isinstance(c, Remove)]
        put = {c.message.id for c in self.changes if isinstance(c, Put)} if removed else ()
        return tuple(m for m in removed if m.id not in put)

    @property
    def added(self) -> tuple[Message, ...]:
        """Messages this revision put into the state that were not in it: a message it only
        moved (removed, then put back elsewhere) is in :attr:`moved` instead."""
        put = [c.message for c in self.changes if isinstance(c, Put)]
        taken = {c.message.id for c in self.changes if isinstance(c, Remove)} if put else ()
        return tuple(m for m in put if m.id not in taken)

    @property
    def moved(self) -> tuple[Message, ...]:
        """Messages this revision moved: took out and put back elsewhere in the state (the
        versions it put back), as ``set`` of a new order, or an undo or revert of one, does."""
        taken = {c.message.id for c in self.changes if isinstance(c, Remove)}
        if not taken:
            return ()
        return tuple(c.message for c in self.changes if isinstance(c, Put) and c.message.id in taken)


def revision_of(
    number: int,
    parent: int,
    kind: RevisionKind,
    changes: tuple[Applied, ...],
    instruction: str | None,
    model: str | None,
    time: float,
    base: int | None,
    target: int | None,
) -> Revision:
    """``Revision(number, parent, kind, changes, instruction, model, time, base, target)``,
    its slots set through their descriptors rather than the frozen ``__init__`` (which
    checks nothing): the stores build one per stored revision of every session opened."""
    revision = _new_object(Revision)
    _SET_NUMBER(revision, number)
    _SET_PARENT(revision, parent)
    _SET_KIND(revision, kind)
    _SET_CHANGES(revision, changes)
    _SET_INSTRUCTION(revision, instruction)
    _SET_MODEL(revision, model)
    _SET_TIME(revision, time)
    _SET_BASE(revision, base)
    _SET_TARGET(revision, target)
    return revision


def storable_revision(revision: Revision) -> Revision:
    """``revision`` as a store keeps it: the messages it puts and the new versions it
    writes made :func:`~.messages.storable` (text normalised, metadata and parts checked),
    its instruction and model name normalised.  A change's ``before`` and a removed message
    stay as given: they must match what the store holds.  ``revision`` itself when nothing
    changes; :class:`InvalidInputError` for metadata or parts that cannot be stored, and
    :class:`InvalidTypeError` for an instruction or model name that is neither None nor a str
    (every store calls this before it writes anything)."""
    for name, value in (("instruction", revision.instruction), ("model name", revision.model)):
        if value is not None and not isinstance(value, str):
            raise InvalidTypeError(
                f"a revision's {name} must be a str or None, got {type(value).__name__} {_short(value)}; nothing "
                "was written. Pass it as text (decode bytes first), or None when there is none"
            )
    out: list[Applied] = []
    same = True
    for change in revision.changes:
        if isinstance(change, Put):
            message = storable(change.message)
            if message is not change.message:
                change, same = Put(message, change.after), False
        elif isinstance(change, Change):
            message = storable(change.after)
            if message is not change.after:
                change, same = Change(change.before, message), False
        out.append(change)
    instruction = None if revision.instruction is None else normalized_text(revision.instruction)
    model = None if revision.model is None else normalized_text(revision.model)
    if same and instruction == revision.instruction and model == revision.model:
        return revision
    return replace(revision, changes=tuple(out), instruction=instruction, model=model)


def _short(value: object) -> str:
    """``repr(value)``, cut to 80 characters (a value of any size may come in)."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def detached_change(change: Applied) -> Applied:
    """``change`` with copies of its messages (see :func:`detached`), built through the
    slot descriptors: a store and the transcript copy every change they hand out."""
    # ``type(change) is`` narrows ``change`` for the checker, and lets no subclass (with
    # fields these setters would not copy) through.
    if type(change) is Change:
        changed = _new_object(Change)
        _SET_CHANGE_BEFORE(changed, detached(change.before))
        _SET_CHANGE_AFTER(changed, detached(change.after))
        return changed
    if type(change) is Put:
        put = _new_object(Put)
        _SET_PUT_MESSAGE(put, detached(change.message))
        _SET_PUT_AFTER(put, change.after)
        return put
    if type(change) is Remove:
        removed = _new_object(Remove)
        _SET_REMOVE_MESSAGE(removed, detached(change.message))
        _SET_REMOVE_AFTER(removed, change.after)
        return removed
    raise InvalidTypeError(  # pragma: no cover - always one of the three
        f"not an applied change: {change!r}; pass a Put, Remove or Change"
    )


@dataclass(frozen=True, slots=True)
class MessageDiff:
    """How one message differs between two states.

    Attributes:
        id: the message id.
        status: "added", "removed", "changed" (its role, text, content parts or metadata) or
            "moved" (the same message, in another order among the messages both states hold).
        before: the message in the first state (None when added).
        after: the message in the second state (None when removed).
    """

    id: str
    status: Literal["added", "removed", "changed", "moved"]
    before: Message | None
    after: Message | None


def _entry(message_id: str, status: str, before: Message | None, after: Message | None) -> MessageDiff:
    """``MessageDiff(message_id, status, before, after)``, its slots set through their
    descriptors rather than the frozen ``__init__``'s ``object.__setattr__`` calls: a
    diff of a long transcript makes one per message, and this takes half the time."""
    entry = _new_object(MessageDiff)
    _SET_DIFF_ID(entry, message_id)
    _SET_DIFF_STATUS(entry, status)
    _SET_DIFF_BEFORE(entry, before)
    _SET_DIFF_AFTER(entry, after)
    return entry


_new_object = object.__new__
_SET_NUMBER, _SET_PARENT, _SET_KIND, _SET_CHANGES, _SET_INSTRUCTION, _SET_MODEL, _SET_TIME, _SET_BASE, _SET_TARGET = (
    Revision.__dict__[name].__set__
    for name in ("number", "parent", "kind", "changes", "instruction", "model", "time", "base", "target")
)
_SET_DIFF_ID, _SET_DIFF_STATUS, _SET_DIFF_BEFORE, _SET_DIFF_AFTER = (
    MessageDiff.__dict__[name].__set__ for name in ("id", "status", "before", "after")
)
# revision_of, detached_change and _entry set each field by name: tests/test_field_copies.py
# checks that they copy every field of Revision, Put, Remove, Change and MessageDiff.


def _hunk(entry: "MessageDiff", label: str) -> list[str]:
    """One message's change as a unified-diff hunk: its header, then its text lines."""
    before = _lines(entry.before.content) if entry.before else []
    after = _lines(entry.after.content) if entry.after else []
    lines = [f"@@ {label}: {entry.status} @@"]
    body = list(difflib.unified_diff(before, after, lineterm="", n=2))[2:]
    lines.extend(line for line in body if not line.startswith("@@"))
    if entry.status == "changed" and not body and entry.before is not None and entry.after is not None:
        lines.append(" (the same text; its content parts or metadata changed)")
    return lines


def _lines(text: str) -> list[str]:
    """``text``'s lines for a diff hunk: broken at newlines only (``str.splitlines`` also breaks
    at CR, form feed, U+2028 and other separators, and the pieces came out of the hunk without
    their ``+``/``-`` mark); a final newline ends the last line, as ``splitlines`` reads it.
    (``tests/test_transcript.py`` shows a carriage return and a line separator kept in their line.)"""
    if not text:
        return []
    lines = text.split("\n")
    return lines[:-1] if len(lines) > 1 and lines[-1] == "" else lines


def _moved(before: Sequence[Message], after: Sequence[Message]) -> set[str]:
    """Ids of the messages both states hold that are out of order: outside a longest run
    of them kept in their old order (none when the order did not change, the usual case)."""
    index = {m.id: i for i, m in enumerate(before)}
    kept = [m.id for m in after if m.id in index]
    positions = [index[message_id] for message_id in kept]
    if all(x < y for x, y in zip(positions, positions[1:])):
        return set()
    stable = _stable_positions(positions)
    return {message_id for i, message_id in enumerate(kept) if i not in stable}


def _positions(wanted: set[str], state: Sequence[Message]) -> dict[str, int]:
    """1-based positions in ``state`` of the messages whose ids are in ``wanted``."""
    return {m.id: i for i, m in enumerate(state, 1) if m.id in wanted}


@dataclass(frozen=True)
class Diff:
    """The difference between the states at two revisions.

    Attributes:
        a: the first revision number.
        b: the second revision number.
        messages: one entry per added, removed, changed or moved message, in the order of
            the second state; a removed message where it stood in the first: right after
            the message before it there that the second state still holds (first, when
            none), so before a message added in its place, as in a unified diff.
        before: the state at ``a``.
        after: the state at ``b``.

    ``str(diff)`` is a unified diff that shows only what changed: one hunk per added,
    removed or changed message, headed by its role and position as the chat shows
    them (``user #1``, ``assistant #2``): a removed message is numbered where it stood
    in the first state, any other where it stands in the second.  A diff built
    without its states names messages by id instead.
    """

    a: int
    b: int
    messages: tuple[MessageDiff, ...]
    before: tuple[Message, ...] = ()
    after: tuple[Message, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.messages)

    @property
    def added(self) -> tuple[MessageDiff, ...]:
        return tuple(m for m in self.messages if m.status == "added")

    @property
    def removed(self) -> tuple[MessageDiff, ...]:
        return tuple(m for m in self.messages if m.status == "removed")

    @property
    def changed(self) -> tuple[MessageDiff, ...]:
        return tuple(m for m in self.messages if m.status == "changed")

    @property
    def moved(self) -> tuple[MessageDiff, ...]:
        return tuple(m for m in self.messages if m.status == "moved")

    def __str__(self) -> str:
        if not self.messages:
            return f"no changes between revision {self.a} and revision {self.b}"
        wanted = {entry.id for entry in self.messages}
        after = _positions(wanted, self.after)
        before = _positions(wanted - after.keys(), self.before) if len(after) < len(wanted) else {}
        lines = [f"--- revision {self.a}", f"+++ revision {self.b}"]
        for entry in self.messages:
            message = entry.after or entry.before
            assert message is not None
            position = after.get(entry.id) or before.get(entry.id)
            lines.extend(_hunk(entry, f"{message.role} #{position}" if position else f"{message.role} {entry.id}"))
        return "\n".join(lines)


def diff_states(a: int, before: Sequence[Message], b: int, after: Sequence[Message]) -> Diff:
    """Compare two states message by message, by id: added, removed, changed (role, text,
    content parts or metadata), or moved (the fewest messages whose moving explains the
    new order of those both states hold).  Entries follow the second state; a removed
    message comes where it stood in the first: right after the entry of the message before
    it there that the second still holds (first, when none), so before a message added in
    its place, as in a unified diff."""
    old = {m.id: m for m in before}
    removed_after = _removed_by_previous_kept(before, {m.id for m in after})
    entries = [_entry(m.id, "removed", m, None) for m in removed_after.get(None, ())]
    moved = _moved(before, after)
    for message in after:
        previous = old.get(message.id)
        if previous is None:
            entries.append(_entry(message.id, "added", None, message))
            continue
        if (previous.content != message.content or previous.role != message.role
                or previous.parts != message.parts or previous.metadata != message.metadata):
            entries.append(_entry(message.id, "changed", previous, message))
        elif message.id in moved:
            entries.append(_entry(message.id, "moved", previous, message))
        entries.extend(_entry(m.id, "removed", m, None) for m in removed_after.get(message.id, ()))
    return Diff(a, b, tuple(entries), tuple(before), tuple(after))


def _removed_by_previous_kept(before: Sequence[Message], after_ids: set[str]) -> dict[str | None, list[Message]]:
    """The messages of ``before`` whose ids are not in ``after_ids``, grouped by the id of the
    kept message they followed in ``before`` (``None``: no kept message came before them)."""
    removed: dict[str | None, list[Message]] = {}
    last_kept: str | None = None
    for message in before:
        if message.id in after_ids:
            last_kept = message.id
        else:
            removed.setdefault(last_kept, []).append(message)
    return removed


@dataclass(frozen=True)
class Proposal:
    """An edit computed but not applied (``edit(..., preview=True)``).

    Attributes:
        session_id: the transcript it belongs to.
        base: the head it was computed on; ``commit`` applies it only if the head is
            still ``base``, or has moved by appends that touch none of its messages.
        changes: exactly what ``commit`` applies.
        diff: the change as a readable diff (base state against proposed state).
        instruction: the instruction it answers.
        model: the model that produced it.
        strategy: "rewrite" or "patch".
        base_time: the time of revision ``base`` (``None``: not checked): ``commit`` refuses
            the proposal when revision ``base`` is another revision by then (the session
            was purged and written again), whatever its number says.
    """

    session_id: str
    base: int
    changes: tuple[Applied, ...]
    diff: Diff
    instruction: str
    model: str | None
    strategy: str
    base_time: float | None = None


def rebase_conflicts(later: Iterable[Revision], changes: Sequence[Applied]) -> list[int]:
    """Revisions in ``later`` that stop ``changes`` from being applied on top of them.

    An edit computed at head ``h`` may commit after revisions ``h+1..`` if each is an
    append that touches none of the messages it changes and puts nothing after one of
    them (an answer to a question the edit removes or moves conflicts, so no answer
    ever loses its question), nor after a message the edit puts something after (an
    answer to a question the edit inserts a message behind would end up after that
    message, answering it instead); anything else conflicts.
    """
    ids = touched_ids(changes) | {c.after for c in changes if isinstance(c, Put) and isinstance(c.after, str)}
    blocking = []
    for revision in later:
        anchors = {c.after for c in revision.changes if isinstance(c, Put) and isinstance(c.after, str)}
        if revision.kind != "append" or (touched_ids(revision.changes) | anchors) & ids:
            blocking.append(revision.number)
    return blocking


def undo_stacks(log: Sequence[Revision]) -> tuple[list[int], list[Revision]]:
    """What undo and redo may act on, from a revision log.

    Returns ``(done, undone)``: the numbers of the state-changing revisions undo may
    revert (most recent last), and the undo revisions redo may re-apply (most recent
    last).  A new state-changing revision empties ``undone``.

    Rows that changed nothing are skipped, as if they had never been recorded (the
    rule since issue #11; older versions recorded them): a no-op state-changing
    revision, an undo or redo with no changes, an undo whose target is not on the
    undo stack (it undid such a no-op), and a redo that re-applies anything but the
    most recent undo left to redo.  So a session written by an older version opens,
    and undo and redo act on what really changed.
    """
    done: list[int] = []
    undone: list[Revision] = []
    for revision in log:
        kind = revision.kind
        if kind in STATE_CHANGING:
            if not revision.is_noop:
                done.append(revision.number)
                undone.clear()
        elif kind == "undo":
            if revision.target in done and not revision.is_noop:
                done.remove(revision.target)
                undone.append(revision)
        elif kind == "redo":
            target = revision.target
            # undone holds undos of numbered revisions only, so a match has a number
            if undone and target is not None and undone[-1].target == target and not revision.is_noop:
                undone.pop()
                done.append(target)
    return done, undone

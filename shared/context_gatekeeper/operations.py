"""Operations on message ids: what every revision is made of.

Two layers:

* **requests** a user or a model makes: :class:`Replace`, :class:`Delete`,
  :class:`InsertAfter` (what ``Transcript.apply`` and the ``patch`` strategy take);
* **changes** a revision stores: :class:`Put`, :class:`Remove`, :class:`Change`.
  Each carries full message records, so it can be inverted (:func:`invert`) and
  replayed (:func:`apply_changes`) without looking anything up.  Storage grows with
  the changes, never with the size of the transcript.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Union

from .errors import UnknownMessageError
from .messages import Message, Role, new_message_id
from .validation import require_text

__all__ = [
    "Replace",
    "Delete",
    "InsertAfter",
    "Request",
    "Put",
    "Remove",
    "Change",
    "Applied",
    "AT_END",
    "apply_changes",
    "invert",
    "touched_ids",
    "changes_between",
    "resolve_request",
    "change_to_dict",
    "change_from_dict",
]


# -- requests ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Replace:
    """Rewrite the text of message ``id`` (its role, parts and metadata stay)."""

    id: str
    content: str


@dataclass(frozen=True)
class Delete:
    """Remove message ``id`` from the current state (the record keeps it)."""

    id: str


@dataclass(frozen=True)
class InsertAfter:
    """Insert a new message after message ``id`` (``None``: at the start)."""

    id: str | None
    role: Role
    content: str


Request = Union[Replace, Delete, InsertAfter]


# -- changes -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Put:
    """Insert ``message`` after message ``after`` (``None``: at the start; :data:`AT_END`: at the end)."""

    message: Message
    after: str | None


@dataclass(frozen=True)
class Remove:
    """Remove ``message``, which sat after ``after`` (kept for inversion)."""

    message: Message
    after: str | None


@dataclass(frozen=True)
class Change:
    """Replace the ``before`` version of a message by ``after`` (same id)."""

    before: Message
    after: Message


Applied = Union[Put, Remove, Change]

AT_END = "<end>"
"""``Put.after`` for an append: the message goes to the end of the state as it is
when the revision lands, whatever other writers appended meanwhile."""


def _index_of(state: Sequence[Message], message_id: str | None) -> int:
    """Position of ``message_id`` in ``state``; -1 for ``None`` (the start)."""
    if message_id is None:
        return -1
    for i, message in enumerate(state):
        if message.id == message_id:
            return i
    raise UnknownMessageError(f"no message with id {message_id!r} in this transcript state")


def apply_changes(state: Sequence[Message], changes: Iterable[Applied]) -> list[Message]:
    """The state after ``changes``, applied in order (a new list; ``state`` is untouched).

    A :class:`Put` whose ``after`` message is gone lands at the end, so undoing an
    old deletion never fails for want of a neighbour.
    """
    out = list(state)
    for change in changes:
        if isinstance(change, Put):
            if any(m.id == change.message.id for m in out):
                raise ValueError(f"message {change.message.id!r} is already in the transcript")
            try:
                position = len(out) if change.after == AT_END else _index_of(out, change.after) + 1
            except UnknownMessageError:
                position = len(out)
            out.insert(position, change.message)
        elif isinstance(change, Remove):
            out.pop(_index_of(out, change.message.id))
        elif isinstance(change, Change):
            out[_index_of(out, change.before.id)] = change.after
        else:  # pragma: no cover - guarded by the type
            raise TypeError(f"not a change: {change!r}")
    return out


def invert(changes: Sequence[Applied]) -> list[Applied]:
    """Changes that undo ``changes`` (in reverse order)."""
    out: list[Applied] = []
    for change in reversed(changes):
        if isinstance(change, Put):
            out.append(Remove(change.message, change.after))
        elif isinstance(change, Remove):
            out.append(Put(change.message, change.after))
        else:
            out.append(Change(change.after, change.before))
    return out


def touched_ids(changes: Iterable[Applied]) -> set[str]:
    """Ids of the messages ``changes`` put, remove or change."""
    return {c.before.id if isinstance(c, Change) else c.message.id for c in changes}


def _stable_positions(old_positions: list[int]) -> set[int]:
    """Indices (into ``old_positions``) of a longest increasing subsequence: the kept
    messages that need not move."""
    tails: list[int] = []  # tails[k] = index ending the best run of length k + 1
    previous = [-1] * len(old_positions)
    for i, value in enumerate(old_positions):
        lo, hi = 0, len(tails)
        while lo < hi:
            mid = (lo + hi) // 2
            if old_positions[tails[mid]] < value:
                lo = mid + 1
            else:
                hi = mid
        previous[i] = tails[lo - 1] if lo else -1
        if lo == len(tails):
            tails.append(i)
        else:
            tails[lo] = i
    keep, i = set(), tails[-1] if tails else -1
    while i >= 0:
        keep.add(i)
        i = previous[i]
    return keep


def changes_between(old: Sequence[Message], new: Sequence[Message]) -> list[Applied]:
    """Changes that turn state ``old`` into state ``new`` (messages matched by id).

    Removals first, then insertions in ``new``'s order (a kept message whose relative
    order changed is removed and put back), then changed versions.
    """
    old_index = {m.id: i for i, m in enumerate(old)}
    new_ids = {m.id for m in new}
    kept = [m for m in new if m.id in old_index]
    stable_at = _stable_positions([old_index[m.id] for m in kept])
    stable = {kept[i].id for i in stable_at}
    changes: list[Applied] = []
    previous: dict[str, str | None] = {m.id: (old[i - 1].id if i else None) for i, m in enumerate(old)}
    for message in reversed(old):
        if message.id not in new_ids or message.id not in stable:
            changes.append(Remove(message, previous[message.id]))
    after: str | None = None
    for message in new:
        if message.id not in stable:
            changes.append(Put(message, after))
        after = message.id
    for message in new:
        if message.id in stable and message != old[old_index[message.id]]:
            changes.append(Change(old[old_index[message.id]], message))
    return changes


def resolve_request(request: Request, state: Sequence[Message]) -> Applied:
    """The change ``request`` makes on ``state`` (ids checked, text required)."""
    positions = {m.id: i for i, m in enumerate(state)}

    def find(message_id: object) -> int:
        if message_id not in positions:
            raise UnknownMessageError(
                f"no message with id {message_id!r} in this transcript; ids are the .id of transcript.messages"
            )
        return positions[message_id]  # type: ignore[index]

    if isinstance(request, Replace):
        old = state[find(request.id)]
        return Change(old, old.revised(require_text(request.content, "content"), 0))
    if isinstance(request, Delete):
        i = find(request.id)
        return Remove(state[i], state[i - 1].id if i else None)
    if isinstance(request, InsertAfter):
        if request.id is not None:
            find(request.id)
        message = Message(new_message_id(), request.role, require_text(request.content, "content"), origin="inserted")
        return Put(message, request.id)
    raise TypeError(f"apply takes Replace, Delete and InsertAfter, got {type(request).__name__}")


def change_to_dict(change: Applied) -> dict[str, Any]:
    """A JSON-ready dict (the stores' format)."""
    if isinstance(change, Put):
        return {"op": "put", "message": change.message.to_dict(), "after": change.after}
    if isinstance(change, Remove):
        return {"op": "remove", "message": change.message.to_dict(), "after": change.after}
    return {"op": "change", "before": change.before.to_dict(), "after": change.after.to_dict()}


def change_from_dict(data: dict[str, Any]) -> Applied:
    """Inverse of :func:`change_to_dict`."""
    op = data["op"]
    if op == "put":
        return Put(Message.from_dict(data["message"]), data["after"])
    if op == "remove":
        return Remove(Message.from_dict(data["message"]), data["after"])
    if op == "change":
        return Change(Message.from_dict(data["before"]), Message.from_dict(data["after"]))
    raise ValueError(f"unknown change op {op!r}")

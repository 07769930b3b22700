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

from ..errors import InvalidInputError, InvalidRevisionError, InvalidTypeError, UnknownMessageError
from .messages import Message, Role, new_message_id
from ..validation import require_items, require_text

__all__ = [
    "Replace",
    "Delete",
    "InsertAfter",
    "Request",
    "require_requests",
    "Put",
    "Remove",
    "Change",
    "Applied",
    "AT_END",
    "State",
    "apply_changes",
    "anchored",
    "invert",
    "touched_ids",
    "changes_between",
    "resolve_request",
    "after_earlier_insertions",
    "require_named_once",
    "is_noop",
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


def require_requests(requests: Any) -> list[Request]:
    """``requests`` as a list of :data:`Request` (``Replace``, ``Delete``, ``InsertAfter``), or
    the library's error saying what to pass (a lone request, a string or ``None`` included)."""
    return require_items(requests, "requests", (Replace, Delete, InsertAfter),
                         "pass a list of Replace, Delete or InsertAfter requests")


# -- changes -------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Put:
    """Insert ``message`` after message ``after`` (``None``: at the start; :data:`AT_END`: at the end)."""

    message: Message
    after: str | None


@dataclass(frozen=True, slots=True)
class Remove:
    """Remove ``message``, which sat after ``after`` (kept for inversion)."""

    message: Message
    after: str | None


@dataclass(frozen=True, slots=True)
class Change:
    """Replace the ``before`` version of a message by ``after`` (same id)."""

    before: Message
    after: Message


Applied = Union[Put, Remove, Change]

_new_object = object.__new__
_SET_PUT_MESSAGE, _SET_PUT_AFTER = (Put.__dict__[name].__set__ for name in ("message", "after"))
_SET_REMOVE_MESSAGE, _SET_REMOVE_AFTER = (Remove.__dict__[name].__set__ for name in ("message", "after"))
_SET_CHANGE_BEFORE, _SET_CHANGE_AFTER = (Change.__dict__[name].__set__ for name in ("before", "after"))
# change_from_dict and revisions.detached_change set each field by name: tests/test_field_copies.py
# checks that they set every field of Put, Remove and Change.


class _AtEnd:
    """The type of :data:`AT_END`: not a str, so no message id can ever equal it."""

    _instance: "_AtEnd | None" = None

    def __new__(cls) -> "_AtEnd":
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "AT_END"

    def __reduce__(self) -> str:
        return "AT_END"


AT_END: Any = _AtEnd()
"""``Put.after`` for an append: the message goes to the end of the state as it is
when the revision lands, whatever other writers appended meanwhile.  It is not a
str, so it never collides with a message id (stored as ``"end": true``; rows written
before it existed used the string ``"<end>"``, which still loads as the end)."""

LEGACY_AT_END = "<end>"


class State:
    """An ordered set of messages keyed by id, as a doubly linked list: putting after an
    id, removing and changing a message cost O(1), so replaying a log is linear.

    ``strict=False`` (for rebuilding indexes over logs written by buggy versions) skips
    changes that do not apply instead of raising.
    """

    __slots__ = ("_by_id", "_next", "_prev", "_tail", "_list")

    def __init__(self, messages: Iterable[Message] = ()) -> None:
        self._by_id: dict[str, Message] = {}
        self._next: dict[Any, Any] = {None: None}  # None is the head sentinel
        self._prev: dict[str, Any] = {}
        self._tail: Any = None
        self._list: list[Message] | None = None
        for message in messages:
            self.put(message, AT_END)

    def __contains__(self, message_id: object) -> bool:
        return message_id in self._by_id

    def __len__(self) -> int:
        return len(self._by_id)

    def get(self, message_id: str) -> Message | None:
        """The message with ``message_id``, or None."""
        return self._by_id.get(message_id)

    def previous_id(self, message_id: str) -> str | None:
        """The id of the message before ``message_id`` (None at the start)."""
        return self._prev[message_id]

    @property
    def last_id(self) -> str | None:
        """The id of the last message (None when empty)."""
        return self._tail

    def to_list(self) -> list[Message]:
        """The messages in order (cached until the next change; do not mutate)."""
        if self._list is None:
            out, node = [], self._next[None]
            while node is not None:
                out.append(self._by_id[node])
                node = self._next[node]
            self._list = out
        return self._list

    def put(self, message: Message, after: Any) -> None:
        """Insert ``message`` after ``after`` (None: the start; AT_END or a missing id: the end)."""
        by_id, next_, message_id = self._by_id, self._next, message.id  # once each: a replay puts every message
        if message_id in by_id:
            raise InvalidRevisionError(f"message {message_id!r} is already in the transcript")
        if after is not None and (after is AT_END or after not in by_id):
            after = self._tail
        following = next_[after]
        by_id[message_id] = message
        next_[message_id], self._prev[message_id] = following, after
        next_[after] = message_id
        if following is None:
            self._tail = message_id
        else:
            self._prev[following] = message_id
        self._list = None

    def remove(self, message_id: str) -> None:
        """Take message ``message_id`` out."""
        self._require(message_id)
        before, following = self._prev.pop(message_id), self._next.pop(message_id)
        del self._by_id[message_id]
        self._next[before] = following
        if following is None:
            self._tail = before
        else:
            self._prev[following] = before
        self._list = None

    def change(self, before: Message, after: Message) -> None:
        """Replace the version of message ``before.id`` by ``after``."""
        self._require(before.id)
        if after.id != before.id:
            raise InvalidRevisionError(f"a change must keep the id: {before.id!r} became {after.id!r}")
        self._by_id[before.id] = after
        self._list = None

    def apply(self, changes: Iterable[Applied], *, strict: bool = True) -> None:
        """Apply ``changes`` in order (``strict=False``: skip those that do not apply)."""
        for change in changes:
            try:
                if isinstance(change, Put):
                    self.put(change.message, change.after)
                elif isinstance(change, Remove):
                    self.remove(change.message.id)
                elif isinstance(change, Change):
                    self.change(change.before, change.after)
                else:
                    raise InvalidTypeError(f"not a change: {change!r}; pass Put, Remove or Change")
            except (InvalidRevisionError, UnknownMessageError):
                if strict:
                    raise

    def _require(self, message_id: str) -> None:
        if message_id not in self._by_id:
            raise UnknownMessageError(f"no message with id {message_id!r} in this transcript state")


def apply_changes(state: Sequence[Message], changes: Iterable[Applied]) -> list[Message]:
    """The state after ``changes``, applied in order (a new list; ``state`` is untouched).

    A :class:`Put` whose ``after`` message is gone lands at the end, so undoing an
    old deletion never fails for want of a neighbour.  A put of a message already
    there raises :class:`InvalidRevisionError`; a remove or change of a missing one
    :class:`UnknownMessageError`.  Linear in ``len(state)`` plus the changes.
    """
    current = State(state)
    current.apply(changes)
    return list(current.to_list())


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


def anchored(changes: Sequence[Applied], state: State) -> list[Applied]:
    """``changes`` with each :class:`Remove`'s ``after`` the message before it in ``state`` as the
    changes reach it, so that their inverse (a redo of an undo) puts every message back where it
    stood, not where it was first put (messages put after it since, an answer joining its
    question, would otherwise end up on the other side of it).

    Each removed or changed message is the version ``state`` holds (so the revision records what
    it really replaced).  Worked out by applying the changes to ``state`` and taking them back
    in reverse: ``state`` ends exactly as it began, also when a change does not apply (its error
    is raised) or the commit that follows is refused.  Costs the changes, not the state.
    """
    out: list[Applied] = []
    try:
        for change in changes:
            if isinstance(change, Remove) and change.message.id in state:
                # the version the state holds (a redo stamps a message anew): taking it back is exact
                held = state.get(change.message.id)
                change = Remove(held if held is not None else change.message, state.previous_id(change.message.id))
            elif isinstance(change, Change) and change.before.id in state:
                held = state.get(change.before.id)
                change = Change(held if held is not None else change.before, change.after)
            state.apply([change])
            out.append(change)
    finally:
        state.apply(invert(out))
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
    kept = [m for m in new if m.id in old_index]
    stable_at = _stable_positions([old_index[m.id] for m in kept])
    stable = {kept[i].id for i in stable_at}  # kept in place; every other old message is removed
    changes: list[Applied] = []
    for i in range(len(old) - 1, -1, -1):
        message = old[i]
        if message.id not in stable:
            changes.append(Remove(message, old[i - 1].id if i else None))
    after: str | None = None
    for message in new:
        if message.id not in stable:
            changes.append(Put(message, after))
        after = message.id
    for message in new:
        if message.id in stable and message != old[old_index[message.id]]:
            changes.append(Change(old[old_index[message.id]], message))
    return changes


def resolve_request(request: Request, state: "State | Sequence[Message]") -> Applied:
    """The change ``request`` makes on ``state`` (ids checked, text required)."""
    current = state if isinstance(state, State) else State(state)

    def find(message_id: object) -> str:
        if not isinstance(message_id, str) or message_id not in current:
            raise UnknownMessageError(
                f"no message with id {message_id!r} in this transcript; ids are the .id of transcript.messages"
            )
        return message_id

    if isinstance(request, Replace):
        old = current.get(find(request.id))
        assert old is not None
        return Change(old, old.revised(require_text(request.content, "content"), 0))
    if isinstance(request, Delete):
        message_id = find(request.id)
        removed = current.get(message_id)
        assert removed is not None  # find() checked it is there
        return Remove(removed, current.previous_id(message_id))
    if isinstance(request, InsertAfter):
        if request.id is not None:
            find(request.id)
        message = Message(new_message_id(), request.role, require_text(request.content, "content"), origin="inserted")
        return Put(message, request.id)
    raise InvalidTypeError(
        f"apply takes Replace, Delete and InsertAfter, got {type(request).__name__}; build the request "
        "with one of those classes"
    )


def after_earlier_insertions(put: Put, inserted: dict[str | None, str]) -> Put:
    """``put``, an insertion a list of requests makes after ``put.after``, placed after the
    last message an earlier request of the list inserted there, so several insertions after
    one message (``None``: the start) keep the list's order, as a model's edit keeps them.

    ``inserted`` maps each anchor to the last message inserted after it: start with ``{}``
    for a list and pass it to every insertion of that list; it is updated here."""
    anchor = put.after
    placed = Put(put.message, inserted[anchor]) if anchor in inserted else put
    inserted[anchor] = put.message.id
    return placed


_DONE = {Replace: "replaced", Delete: "deleted"}


def require_named_once(request: Request, position: int, named: dict[str, tuple[int, Request]]) -> None:
    """Refuse ``request``, the ``position``-th of a list (from 1), when an earlier request of
    the list replaced or deleted the message it names (``named``: id -> (position, request),
    filled in here): one request per message, every id naming a message of the state as the
    list found it.  An insertion after a replaced message is fine; after a deleted one not.

    Raises:
        InvalidInputError: naming which request, which earlier one, and what to do instead.
    """
    target = getattr(request, "id", None)
    if type(target) is not str:
        return  # InsertAfter(None, ...), or a request resolve_request refuses itself
    earlier = named.get(target)
    if earlier is not None:
        first_position, first = earlier
        what = f"request {first_position} ({type(first).__name__}) of this list {_DONE[type(first)]} it"
        if isinstance(request, InsertAfter):
            if isinstance(first, Delete):
                raise InvalidInputError(
                    f"request {position} (InsertAfter) inserts after message {target!r}, but {what}; nothing was "
                    "changed. Insert after the message before it (InsertAfter(None, ...) for the start), or keep it"
                )
        else:
            raise InvalidInputError(
                f"request {position} ({type(request).__name__}) names message {target!r}, but {what}; nothing was "
                "changed. Give one request per message (one Replace with the final text, or one Delete): ids "
                "name the messages as they are before the list is applied"
            )
    if isinstance(request, (Replace, Delete)):
        named.setdefault(target, (position, request))


def is_noop(change: Applied) -> bool:
    """Whether ``change`` leaves the state as it was (a change to identical text, parts and metadata)."""
    if not isinstance(change, Change):
        return False
    before, after = change.before, change.after
    return (before.role, before.content, before.parts, before.metadata) == (after.role, after.content, after.parts, after.metadata)


def _anchor_to_dict(after: Any) -> dict[str, Any]:
    if after is AT_END:
        return {"after": None, "end": True}
    if after == LEGACY_AT_END:  # a message really named "<end>": marked, so it is not read as the end
        return {"after": after, "literal": True}
    return {"after": after}


def _anchor_from_dict(data: dict[str, Any], legacy_end: bool) -> Any:
    after = data.get("after")
    if data.get("end"):
        return AT_END
    if legacy_end and after == LEGACY_AT_END and not data.get("literal"):
        return AT_END  # an append written when AT_END was the string "<end>"
    if after is not None and not isinstance(after, str):
        raise InvalidInputError(
            f"a change's 'after' must be a message id or null, got {after!r}; the stored change is damaged"
        )
    return after


def change_to_dict(change: Applied) -> dict[str, Any]:
    """A JSON-ready dict (the stores' format)."""
    if isinstance(change, (Put, Remove)):
        after = change.after
        data: dict[str, Any] = {"op": "put" if isinstance(change, Put) else "remove", "message": change.message.to_dict()}
        if after is None or (type(after) is str and after != LEGACY_AT_END):  # the usual case, without a merge
            data["after"] = after
        else:
            data.update(_anchor_to_dict(after))
        return data
    return {"op": "change", "before": change.before.to_dict(), "after": change.after.to_dict()}


def change_from_dict(data: dict[str, Any], *, legacy_end: bool = False) -> Applied:
    """Inverse of :func:`change_to_dict`.

    ``legacy_end``: the change belongs to an append, where rows written before
    :data:`AT_END` became a non-str marker used ``"after": "<end>"`` for the end
    (anywhere else that string was a message id, and stays one).
    """
    # Each change is built through its slot descriptors, not the frozen ``__init__`` (which
    # checks nothing): every change of every stored session opened comes through here.
    op = data["op"]
    if op == "put":
        put = _new_object(Put)
        _SET_PUT_MESSAGE(put, Message.from_dict(data["message"]))
        _SET_PUT_AFTER(put, _anchor_from_dict(data, legacy_end))
        return put
    if op == "remove":
        removed = _new_object(Remove)
        _SET_REMOVE_MESSAGE(removed, Message.from_dict(data["message"]))
        _SET_REMOVE_AFTER(removed, _anchor_from_dict(data, False))
        return removed
    if op == "change":
        changed = _new_object(Change)
        _SET_CHANGE_BEFORE(changed, Message.from_dict(data["before"]))
        _SET_CHANGE_AFTER(changed, Message.from_dict(data["after"]))
        return changed
    raise InvalidInputError(f"unknown change op {op!r}; a stored change's op is 'put', 'remove' or 'change'")

"""Replaying revisions over a state that other writers also move (an agent thread).

A :class:`~context_gatekeeper.transcripts.transcript.Transcript` is the only writer of its state,
so its undo applies a revision's inverse whole.  An agent thread is not: the agent
appends, summarisation replaces early messages, a redaction middleware or a user's
``update_state`` rewrites a message under its id.  An undo or redo there applies only
the changes that still fit what the revision recorded (:func:`split_applicable`) and
says which it left out (:class:`Skipped`); it never overwrites another writer's
version of a message, nor re-inserts a message where its neighbour no longer is.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from ..errors import InvalidInputError
from .messages import Message, storable
from .operations import AT_END, Applied, Change, Put, State, invert

if TYPE_CHECKING:
    from .revisions import Revision

__all__ = ["SkipReason", "SKIP_REASONS", "Skipped", "AsHeld", "split_applicable", "rewind", "replay"]

SkipReason = Literal["gone", "changed", "present", "no anchor"]
SKIP_REASONS: dict[str, str] = {
    "gone": "the message is no longer there",
    "changed": (
        "another writer changed the message since (its role, text, parts or metadata differ from the recorded version)"
    ),
    "present": "a message with its id is already there",
    "no anchor": "the message it followed is gone (e.g. summarised away), so it has no place to go back to",
}
"""Each :data:`SkipReason` in words."""


@dataclass(frozen=True, slots=True)
class Skipped:
    """A change an undo or redo left out, and why.

    Attributes:
        change: the change as the revision's inverse would have applied it.
        reason: "gone" (the message it removes or rewrites is no longer there),
            "changed" (another writer changed that message since: its role, text, parts
            or metadata differ from the version the revision recorded), "present" (the message it
            would re-insert is already there) or "no anchor" (the message it would
            re-insert followed one that is gone, e.g. summarised away).
    """

    change: Applied
    reason: SkipReason

    @property
    def id(self) -> str:
        """The id of the message the change is about."""
        change = self.change
        return change.before.id if isinstance(change, Change) else change.message.id

    def __str__(self) -> str:
        return f"{self.id}: {SKIP_REASONS[self.reason]}"


AsHeld = Callable[[Message], Message]
"""How a state holds a version a revision recorded (see :func:`split_applicable`)."""


def _skip_reason(change: Applied, current: State, start_gone: bool, as_held: AsHeld | None) -> SkipReason | None:
    """Why ``change`` must not be applied to ``current`` (None: it applies as recorded)."""
    if isinstance(change, Put):
        if change.message.id in current:
            return "present"
        after = change.after
        if after is None:
            return "no anchor" if start_gone else None
        return None if after is AT_END or after in current else "no anchor"
    recorded = change.before if isinstance(change, Change) else change.message
    now = current.get(recorded.id)
    if now is None:
        return "gone"
    if _same_version(now, recorded) or (as_held is not None and _same_version(now, as_held(recorded))):
        return None
    return "changed"


def _same_version(now: Message, recorded: Message) -> bool:
    """Whether ``now`` is the version ``recorded``: the same role, text, parts and metadata,
    compared as a store keeps them (:func:`~.messages.storable`: a tuple a list, surrogates
    joined), so a version that only went through a store or a checkpointer still matches.
    A version that cannot be stored (an object in its metadata) matches only as it is."""
    if _fields(now) == _fields(recorded):
        return True
    try:
        return _fields(storable(now)) == _fields(storable(recorded))
    except InvalidInputError:
        return False


def _fields(message: Message) -> tuple[object, ...]:
    """What a version says (provenance aside): role, text, parts and metadata."""
    return message.role, message.content, message.parts, message.metadata


def split_applicable(
    changes: Iterable[Applied], state: Sequence[Message], *, start_gone: bool = False, as_held: AsHeld | None = None
) -> tuple[list[Applied], list[Skipped]]:
    """The part of ``changes`` that applies to ``state`` as the revision recorded it, in
    order, and the rest with the reason each was left out.

    A change or removal applies only to the version it recorded (the same role, text,
    parts and metadata): another writer's later version is never overwritten nor deleted,
    also when it changed only a message's parts or metadata (a redaction dropping an image).
    A re-insertion applies only where its anchor (the message it followed) still is, so a
    group of messages never lands at the end, reversed, after its neighbours were
    summarised away; a message anchored on a skipped one is skipped too.  ``start_gone``:
    the state's first messages were replaced (a summary now opens it), so a re-insertion
    at the start has no place either.  ``as_held``: how ``state`` holds a version the
    revision recorded, for an adapter whose framework reshapes what it keeps (fills in
    defaults, drops keys): a message still counts as the recorded version when it is that
    version as held (LangChain: the round trip ``to_core(from_core(m))``).  Applying the
    first list to ``state`` never raises.
    """
    current, out, skipped = State(state), [], []
    for change in changes:
        reason = _skip_reason(change, current, start_gone, as_held)
        if reason is None:
            current.apply((change,))
            out.append(change)
        else:
            skipped.append(Skipped(change, reason))
    return out, skipped


def rewind(state: Sequence[Message], later: Sequence["Revision"]) -> list[Message]:
    """The state as it was before the revisions ``later`` (oldest first), from the state
    after them: each one's inverse, most recent first, as far as it still applies.
    Messages added by anything but those revisions stay."""
    current = State(state)
    for revision in reversed(later):
        current.apply(invert(revision.changes), strict=False)
    return list(current.to_list())


def replay(state: Sequence[Message], revisions: Sequence["Revision"]) -> list[Message]:
    """``state`` with the revisions' changes applied, oldest first, as far as they apply:
    what those revisions did to it, without what other writers did after them (the
    counterpart of :func:`rewind`, for showing what a revision changed)."""
    current = State(state)
    for revision in revisions:
        current.apply(revision.changes, strict=False)
    return list(current.to_list())

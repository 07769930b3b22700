"""An agent thread's edit log: the state key, its records, and the messages update.

The log is a list of ``Revision.to_dict()`` records in the private state key
:data:`EDITS_KEY`.  Its reducer (:func:`append_records`) only appends: every write
carries the new record alone, so an undo planned on a snapshot that another edit
overtook can never drop that edit's record, and revisions are numbered by their
position when the log is read (:func:`read_log`).  A thread never edited has no key.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Annotated, Any, cast

from langchain.agents.middleware.types import AgentState, PrivateStateAttr
from langchain_core.messages import BaseMessage, MessageLikeRepresentation, RemoveMessage
from langgraph.graph.message import REMOVE_ALL_MESSAGES, add_messages
from typing_extensions import NotRequired

from context_gatekeeper import Diff, HistoryError, InvalidInputError, Message, Revision
from context_gatekeeper.integration import (
    Applied,
    Change,
    Remove,
    Skipped,
    State,
    apply_changes,
    change_from_dict,
    change_to_dict,
    diff_states,
    invert,
    replay,
)

from .convert import from_core, from_core_messages, to_core_messages

__all__ = [
    "EDITS_KEY", "EDIT_MARK", "TURN_KEY", "GatekeeperState", "ThreadEdit", "append_records",
    "is_edit_record", "read_log", "state_update", "thread_values", "revisions_with_diffs",
]

EDITS_KEY = "gatekeeper_edits"
"""The private state key holding the thread's edit log (``Revision.to_dict()`` records)."""
TURN_KEY = "gatekeeper_turn"
"""The private state key holding where the current run's input lies: the id of its one message,
or ``[first id, last id]`` when the input is several messages (a question, then its image)."""
EDIT_MARK = "gatekeeper_edit"
"""``additional_kwargs["lc_source"]`` of messages that record an edit (never edited or selected)."""


def append_records(log: list[dict[str, Any]] | None, records: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """The edit log's reducer: ``records`` (the new ones) go after the log's, none is
    ever replaced (``langgraph.types.Overwrite`` still replaces the whole log)."""
    if not isinstance(records, (list, tuple)):
        raise InvalidInputError(f"{EDITS_KEY!r} takes a list of new edit records, got {type(records).__name__}")
    return [*(log or ()), *records]


class GatekeeperState(AgentState[Any]):
    """Agent state with the edit log and the current run's input id (private: not part of
    the agent's input or output)."""

    # "| None": the channel starts empty, so a thread never edited has no key at all
    gatekeeper_edits: NotRequired[Annotated[list[dict[str, Any]] | None, PrivateStateAttr, append_records]]
    gatekeeper_turn: NotRequired[Annotated[str | list[str] | None, PrivateStateAttr]]


@dataclass(frozen=True, slots=True)
class ThreadEdit(Revision):
    """A core :class:`~context_gatekeeper.records.revisions.Revision` of a thread (edit, undo or
    redo) plus what a revision cannot carry: ``diff``, the thread before against the
    thread after (``str()`` names messages ``user #1``), the edit's ``strategy``, and
    ``skipped``: the changes an undo or redo left out because another writer moved the
    thread since (:class:`~context_gatekeeper.records.revisions.Skipped`, each with its message
    id and reason)."""

    diff: Diff = field(default_factory=lambda: Diff(0, 0, ()), repr=False, compare=False)
    strategy: str | None = None
    skipped: tuple[Skipped, ...] = ()

    @property
    def changed(self) -> bool:
        """Whether anything changed."""
        return not self.is_noop

    def record(self) -> dict[str, Any]:
        """The log record: ``Revision.to_dict()`` plus the strategy and what was skipped."""
        skipped = [{"reason": s.reason, "change": change_to_dict(s.change)} for s in self.skipped]
        return {**Revision.to_dict(self), "strategy": self.strategy, "skipped": skipped}

    def __str__(self) -> str:
        return str(self.diff)


_REVISION_FIELDS = tuple(f.name for f in fields(Revision))


def is_edit_record(message: BaseMessage) -> bool:
    """A message that records an edit (the command or its confirmation)."""
    return message.additional_kwargs.get("lc_source") == EDIT_MARK


def state_update(before: Sequence[Message], changes: Sequence[Applied]) -> list[BaseMessage]:
    """The ``messages`` update that turns ``before`` into ``apply_changes(before, changes)``
    under the ``add_messages`` reducer, as targeted as possible."""
    after = apply_changes(before, changes)
    update: list[BaseMessage] = []
    for change in changes:
        if isinstance(change, Remove):
            update.append(RemoveMessage(id=change.message.id))
        else:
            update.append(from_core(change.after if isinstance(change, Change) else change.message))
    # add_messages takes lists of any message-like value (typed list[MessageLikeRepresentation])
    # and returns the merged list of messages (typed as any Messages: the checker can't see that)
    right: list[MessageLikeRepresentation] = [*update]
    try:
        left: list[MessageLikeRepresentation] = [*from_core_messages(before)]
        merged = cast("list[BaseMessage]", add_messages(left, right))
        targeted_ok = [m.id for m in merged] == [m.id for m in after]
    except ValueError:
        targeted_ok = False
    return update if targeted_ok else [RemoveMessage(id=REMOVE_ALL_MESSAGES), *from_core_messages(after)]


def _entry(number: int, record: dict[str, Any]) -> ThreadEdit:
    """Record ``number`` (its 1-based position) of the log as a :class:`ThreadEdit`."""
    if "number" in record:
        revision = Revision.from_dict(record)
    else:  # the earlier format: no number, an undo's "target" 0-based
        target = record.get("target")
        revision = Revision(
            number, number - 1, record["kind"], tuple(change_from_dict(c) for c in record["changes"]),
            record.get("instruction"), record.get("model"), record.get("time", 0.0),
            target=None if target is None else target + 1,
        )
    skipped = tuple(Skipped(change_from_dict(s["change"]), s["reason"]) for s in record.get("skipped") or ())
    values = {name: getattr(revision, name) for name in _REVISION_FIELDS}
    values.update(number=number, parent=number - 1)  # numbered where it stands: writes only ever append
    return ThreadEdit(**values, strategy=record.get("strategy"), skipped=skipped)


def read_log(records: Sequence[dict[str, Any]]) -> list[ThreadEdit]:
    """The thread's edit log as :class:`ThreadEdit` revisions (without diffs), oldest
    first, each numbered by its position from 1.

    A record written by an earlier version (``{"kind": "edit"|"undo", "changes": [...]}``
    without a ``number``) is the revision at its position, an undo's 0-based
    ``"target"`` the number it names.

    Raises HistoryError for a record of neither format.
    """
    log: list[ThreadEdit] = []
    for number, record in enumerate(records, 1):
        try:
            log.append(_entry(number, record))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise HistoryError(
                f"entry {number} of the thread's edit log ({EDITS_KEY!r}) cannot be read ({exc!r}); "
                "it was not written by edit_thread, undo_thread, redo_thread or the /edit route"
            ) from exc
    return log


def thread_values(snapshot: Any) -> tuple[list[BaseMessage], list[dict[str, Any]]]:
    """The thread's messages and its edit log's records, as stored."""
    values = snapshot.values or {}
    return list(values.get("messages") or []), list(values.get(EDITS_KEY) or [])


def revisions_with_diffs(messages: Sequence[BaseMessage], records: Sequence[dict[str, Any]]) -> list[ThreadEdit]:
    """:func:`read_log` with each revision's ``diff``: what it changed, its own changes
    applied to the thread as it found it (later revisions reverted from the current
    messages, as :func:`~langchain_gatekeeper.threads.thread_diff` does): a message
    another writer changed since shows the revision's version, not the writer's."""
    log = read_log(records)
    current = State(to_core_messages(messages))
    states = [list(current.to_list())]
    for revision in reversed(log):
        current.apply(invert(revision.changes), strict=False)
        states.append(list(current.to_list()))
    states.reverse()  # states[n]: the thread as revision n found the one after it
    return [replace(r, diff=diff_states(r.number - 1, states[r.number - 1], r.number, replay(states[r.number - 1], [r])))
            for r in log]

"""Editing a LangChain 1.x agent's thread: edit, undo, redo, history and diff.

:func:`edit_thread` reads a ``create_agent`` thread (``agent.get_state``), runs the core
edit (:func:`~context_gatekeeper.editing.compute_edit`) and writes the result back as
**one** ``agent.update_state`` through ``add_messages``: a kept message is replaced
under its id, a deleted one is a ``RemoveMessage``; an insertion anywhere but at the
end rewrites the list (``REMOVE_ALL_MESSAGES`` then the revised list, ids unchanged).

**One undo engine.**  Each edit, undo and redo is a core
:class:`~context_gatekeeper.revisions.Revision`, numbered from 1 within the thread and
stored as ``Revision.to_dict()`` in :data:`EDITS_KEY`, a private state key that
:class:`~langchain_gatekeeper.middleware.GatekeeperMiddleware` adds to the agent's
state schema (each write holds the whole log; a thread never edited has no key).  Undo and redo follow the core's rules
(:func:`~context_gatekeeper.revisions.undo_stacks`, inverses by
:func:`~context_gatekeeper.operations.invert`): undo reverts the last edit not yet
undone, redo re-applies the last undo, a new edit empties the redo stack.  Messages
the agent added after an edit stay (DESIGN.md §3); a change whose message is already
gone is skipped (:func:`~context_gatekeeper.revisions.applicable`), and an edit none of
whose messages is left is passed over.  The log is written in the same update as the
messages (both land or neither), lives in the checkpoint (it survives a restart with
a persistent checkpointer and follows forks and time travel), and needs no side
store.  Records written by earlier versions (``{"kind": "edit"|"undo", "changes":
[...], ...}`` without a number) are read as the revisions they were.

Edit records (the ``/edit`` command and its confirmation, ``additional_kwargs
["lc_source"] == "gatekeeper_edit"``) are never edited nor selected.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any

from langchain.agents.middleware.types import AgentState, PrivateStateAttr
from langchain_core.messages import BaseMessage, RemoveMessage
from langgraph.graph.message import REMOVE_ALL_MESSAGES, add_messages
from typing_extensions import NotRequired

from context_gatekeeper import Diff, EditOptions, HistoryError, Message
from context_gatekeeper.editing import EditResult, acompute_edit, compute_edit
from context_gatekeeper.operations import Applied, Change, Remove, apply_changes, change_from_dict, invert, touched_ids
from context_gatekeeper.revisions import Revision, applicable, diff_states, rewind, undo_stacks

from .convert import from_core, from_core_messages, to_core_messages
from .models import given_edit_model, resolve_edit_model

__all__ = [
    "EDITS_KEY", "EDIT_MARK", "TURN_KEY", "GatekeeperState", "ThreadEdit", "is_edit_record", "read_log",
    "edit_thread", "aedit_thread", "undo_thread", "aundo_thread", "redo_thread", "aredo_thread",
    "thread_history", "athread_history", "thread_diff", "athread_diff",
]

logger = logging.getLogger(__name__)

EDITS_KEY = "gatekeeper_edits"
"""The private state key holding the thread's edit log (``Revision.to_dict()`` records)."""
TURN_KEY = "gatekeeper_turn"
"""The private state key holding the id of the message that started the current run."""
EDIT_MARK = "gatekeeper_edit"
"""``additional_kwargs["lc_source"]`` of messages that record an edit (never edited or selected)."""


class GatekeeperState(AgentState[Any]):
    """Agent state with the edit log and the current run's input id (private: not part of
    the agent's input or output)."""

    gatekeeper_edits: NotRequired[Annotated[list[dict[str, Any]], PrivateStateAttr]]
    gatekeeper_turn: NotRequired[Annotated[str | None, PrivateStateAttr]]


@dataclass(frozen=True, slots=True)
class ThreadEdit(Revision):
    """A core :class:`~context_gatekeeper.revisions.Revision` of a thread (edit, undo or
    redo) plus what a revision cannot carry: ``diff``, the thread before against the
    thread after (``str()`` names messages ``user #1``), and the edit's ``strategy``."""

    diff: Diff = field(default_factory=lambda: Diff(0, 0, ()), repr=False, compare=False)
    strategy: str | None = None

    @property
    def changed(self) -> bool:
        """Whether anything changed."""
        return not self.is_noop

    def record(self) -> dict[str, Any]:
        """The log record: ``Revision.to_dict()`` plus the strategy."""
        return {**Revision.to_dict(self), "strategy": self.strategy}

    def __str__(self) -> str:
        return str(self.diff)


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
    try:
        targeted_ok = [m.id for m in add_messages(from_core_messages(before), update)] == [m.id for m in after]
    except ValueError:
        targeted_ok = False
    return update if targeted_ok else [RemoveMessage(id=REMOVE_ALL_MESSAGES), *from_core_messages(after)]


# -- the log ----------------------------------------------------------------------------------
def read_log(records: Sequence[dict[str, Any]]) -> list[Revision]:
    """The thread's edit log as core revisions, oldest first.

    A record written by an earlier version (``{"kind": "edit"|"undo", "changes": [...]}``
    without a ``number``) is the revision at its position, an undo's 0-based
    ``"target"`` the number it names.

    Raises HistoryError for a record of neither format.
    """
    log: list[Revision] = []
    for number, record in enumerate(records, 1):
        try:
            if "number" in record:
                log.append(Revision.from_dict(record))
                continue
            target = record.get("target")
            log.append(Revision(
                number, number - 1, record["kind"], tuple(change_from_dict(c) for c in record["changes"]),
                record.get("instruction"), record.get("model"), record.get("time", 0.0),
                target=None if target is None else target + 1,
            ))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise HistoryError(
                f"entry {number} of the thread's edit log ({EDITS_KEY!r}) cannot be read ({exc!r}); "
                "it was not written by edit_thread, undo_thread or the /edit route"
            ) from exc
    return log


def _values(snapshot: Any) -> tuple[list[BaseMessage], list[dict[str, Any]]]:
    """The thread's messages and its edit log's records, as stored."""
    values = snapshot.values or {}
    return list(values.get("messages") or []), list(values.get(EDITS_KEY) or [])


def _thread(snapshot: Any) -> tuple[list[BaseMessage], list[dict[str, Any]]]:
    messages, log = _values(snapshot)
    if not messages:
        raise HistoryError("the thread has no messages to edit; check config['configurable']['thread_id']")
    return messages, log


def _has_log(agent: Any) -> bool:
    return EDITS_KEY in getattr(agent, "channels", {})


# -- edits ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class EditPlan:
    """An edit computed over a thread, ready to write (internal to this adapter)."""

    entry: ThreadEdit
    update: list[BaseMessage]
    log: list[dict[str, Any]]  # the whole log to write: the records read, then this edit's


def _editable(state: Sequence[Message], messages: Sequence[BaseMessage]) -> list[Message]:
    return [c for c, m in zip(state, messages) if not is_edit_record(m)]


def _plan(messages: Sequence[BaseMessage], result: EditResult, log: Sequence[dict[str, Any]], instruction: str) -> EditPlan:
    state = to_core_messages(messages)
    number = len(log) + 1
    after = apply_changes(state, result.changes)
    entry = ThreadEdit(
        number, number - 1, "edit", tuple(result.changes), instruction, result.model_name,
        diff=diff_states(number - 1, state, number, after), strategy=result.strategy,
    )
    return EditPlan(entry, state_update(state, result.changes) if result.changes else [], [*log, entry.record()])


def plan_edit(
    messages: Sequence[BaseMessage], log: Sequence[dict[str, Any]], instruction: str, model: Any, options: EditOptions
) -> EditPlan:
    """Compute an edit of ``messages`` (edit records excluded) numbered after the log's
    records; nothing is written."""
    edit_model = resolve_edit_model(model)
    result = compute_edit(_editable(to_core_messages(messages), messages), instruction, edit_model, options=options)
    return _plan(messages, result, log, instruction)


async def aplan_edit(
    messages: Sequence[BaseMessage], log: Sequence[dict[str, Any]], instruction: str, model: Any, options: EditOptions
) -> EditPlan:
    """Async :func:`plan_edit`."""
    edit_model = resolve_edit_model(model)
    result = await acompute_edit(_editable(to_core_messages(messages), messages), instruction, edit_model, options=options)
    return _plan(messages, result, log, instruction)


def _write(agent: Any, plan: EditPlan, before: Any, now: Any) -> dict[str, Any]:
    """The update that writes ``plan`` (computed on snapshot ``before``), refused when the
    thread re-read just before writing (``now``) has another edit, undo or redo, or a
    different version of a message the edit touches (of any message, for a rewrite)."""
    (old, old_log), (new, new_log) = _values(before), _values(now)
    rewrite, touched = plan.update[:1] and plan.update[0].id == REMOVE_ALL_MESSAGES, touched_ids(plan.entry.changes)
    watched = lambda messages: [m for m in messages if rewrite or m.id in touched]  # noqa: E731
    if new_log != old_log or watched(new) != watched(old):
        raise HistoryError("the thread changed while the edit was computed; nothing was written: run the edit again")
    values: dict[str, Any] = {"messages": plan.update}
    if _has_log(agent):
        values[EDITS_KEY] = plan.log
    else:
        logger.warning("agent has no %r state key (add GatekeeperMiddleware); this edit cannot be undone", EDITS_KEY)
    return values


def _options(model: Any, llm: Any, options: EditOptions | None, **keywords: Any) -> tuple[Any, EditOptions]:
    """The model and the edit's settings, checked before anything is read."""
    return given_edit_model(model, llm), EditOptions.of(options, **keywords)


def edit_thread(
    agent: Any, config: dict[str, Any], instruction: str, model: Any = None, *,
    llm: Any = None, options: EditOptions | None = None, strategy: str | None = None,
    allow_large_deletion: bool | None = None,
) -> ThreadEdit:
    """Rewrite a thread's messages by a natural-language instruction, as one state update.

    Args:
        agent: a compiled agent with a checkpointer (``create_agent(..., checkpointer=...)``);
            add :class:`GatekeeperMiddleware` so that the edit can be undone.
        config: the thread's config (``{"configurable": {"thread_id": ...}}``).
        instruction: what to change, e.g. "it was Iceland, not Ireland".
        model: the editing model (any chat model or core model); default Gemini 2.5 Flash.
        llm: alias of ``model``.
        options: the edit's settings as one :class:`~context_gatekeeper.EditOptions`
            (default: patch, the default deletion guard); the keywords below override it.
        strategy: "patch" or "rewrite".
        allow_large_deletion: accept an edit that destroys more of the text than
            ``options.max_deletion_share``.

    Returns:
        the :class:`ThreadEdit` (a core ``Revision`` of kind "edit"; ``str()`` is the
        diff); nothing is written when it changes nothing.

    Raises:
        EditError: unusable model output (nothing changed). ModelUnavailableError: no model.
        HistoryError: the thread has no messages, or another edit (or a change to a message
            this edit touches) landed while the model worked. InvalidInputError: a bad option.
    """
    chosen, settings = _options(model, llm, options, strategy=strategy, allow_large_deletion=allow_large_deletion)
    messages, log = _thread(snapshot := agent.get_state(config))
    plan = plan_edit(messages, log, instruction, chosen, settings)
    if plan.entry.changed:
        agent.update_state(config, _write(agent, plan, snapshot, agent.get_state(config)))
    return plan.entry


async def aedit_thread(
    agent: Any, config: dict[str, Any], instruction: str, model: Any = None, *,
    llm: Any = None, options: EditOptions | None = None, strategy: str | None = None,
    allow_large_deletion: bool | None = None,
) -> ThreadEdit:
    """Async :func:`edit_thread` (``aget_state`` / ``aupdate_state``, the model's async call)."""
    chosen, settings = _options(model, llm, options, strategy=strategy, allow_large_deletion=allow_large_deletion)
    messages, log = _thread(snapshot := await agent.aget_state(config))
    plan = await aplan_edit(messages, log, instruction, chosen, settings)
    if plan.entry.changed:
        await agent.aupdate_state(config, _write(agent, plan, snapshot, await agent.aget_state(config)))
    return plan.entry


# -- undo and redo ----------------------------------------------------------------------------
def _plan_step(agent: Any, snapshot: Any, kind: str) -> tuple[ThreadEdit, dict[str, Any]]:
    """The undo (or redo) the core's rules pick, restricted to what still applies."""
    if not _has_log(agent):
        raise HistoryError(f"{kind}_thread needs the edit log that GatekeeperMiddleware keeps: add it to create_agent")
    messages, records = _thread(snapshot)
    log, state = read_log(records), to_core_messages(messages)
    done, undone = undo_stacks(log)
    changes: list[Applied] = []
    target = None
    if kind == "undo":
        for number in reversed(done):  # an edit none of whose messages is left is passed over
            changes = applicable(invert(log[number - 1].changes), state)
            if changes:
                target = number
                break
        if target is None:
            raise HistoryError("nothing to undo: this thread has no edit left whose messages are still there")
    else:
        if not undone:
            raise HistoryError("nothing to redo: redo follows undo_thread, and a later edit discards what was undone")
        target = undone[-1].target
        changes = applicable(invert(undone[-1].changes), state)
        if not changes:
            raise HistoryError(f"nothing to redo: the messages that undoing edit {target} restored are gone")
    number = len(log) + 1
    after = apply_changes(state, changes)
    entry = ThreadEdit(
        number, number - 1, kind, tuple(changes), target=target,  # type: ignore[arg-type]
        diff=diff_states(number - 1, state, number, after),
    )
    return entry, {"messages": state_update(state, changes), EDITS_KEY: [*records, entry.record()]}


def undo_thread(agent: Any, config: dict[str, Any]) -> ThreadEdit:
    """Revert the thread's last edit not yet undone, keeping every later message (a new checkpoint).

    Returns:
        the undo, a :class:`ThreadEdit` whose ``target`` is the number of the edit it reverted.

    Raises:
        HistoryError: nothing to undo, or the agent has no edit log (no GatekeeperMiddleware).
    """
    entry, values = _plan_step(agent, agent.get_state(config), "undo")
    agent.update_state(config, values)
    return entry


async def aundo_thread(agent: Any, config: dict[str, Any]) -> ThreadEdit:
    """Async :func:`undo_thread`."""
    entry, values = _plan_step(agent, await agent.aget_state(config), "undo")
    await agent.aupdate_state(config, values)
    return entry


def redo_thread(agent: Any, config: dict[str, Any]) -> ThreadEdit:
    """Re-apply what the last :func:`undo_thread` reverted (a new checkpoint); a later edit
    empties the redo stack, as in the core's ``Transcript.redo``.

    Returns:
        the redo, a :class:`ThreadEdit` whose ``target`` is the number of the edit re-applied.

    Raises:
        HistoryError: nothing to redo, or the agent has no edit log (no GatekeeperMiddleware).
    """
    entry, values = _plan_step(agent, agent.get_state(config), "redo")
    agent.update_state(config, values)
    return entry


async def aredo_thread(agent: Any, config: dict[str, Any]) -> ThreadEdit:
    """Async :func:`redo_thread`."""
    entry, values = _plan_step(agent, await agent.aget_state(config), "redo")
    await agent.aupdate_state(config, values)
    return entry


# -- history and diff -------------------------------------------------------------------------
def thread_history(agent: Any, config: dict[str, Any]) -> list[Revision]:
    """The thread's edits, undos and redos as core revisions, oldest first, numbered from 1
    (messages the agent adds are not revisions of a thread)."""
    return read_log(_values(agent.get_state(config))[1])


async def athread_history(agent: Any, config: dict[str, Any]) -> list[Revision]:
    """Async :func:`thread_history`."""
    return read_log(_values(await agent.aget_state(config))[1])


def _diff(snapshot: Any, a: int, b: int | None) -> Diff:
    messages, records = _values(snapshot)
    log = read_log(records)
    head = len(log)
    b = head if b is None else b
    for n in (a, b):
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= head:
            raise HistoryError(f"no revision {n!r}: this thread's revisions run 0..{head} (0: before its first edit)")
    state = to_core_messages(messages)
    return diff_states(a, rewind(state, log[a:]), b, rewind(state, log[b:]))


def thread_diff(agent: Any, config: dict[str, Any], a: int, b: int | None = None) -> Diff:
    """How the thread as revision ``b`` left it (default: now) differs from the thread as
    revision ``a`` left it (0: before the first edit).

    Both are the current messages with the later revisions reverted, so messages the
    agent added meanwhile are in both: the diff shows what the edits changed.  ``str()``
    names messages by role and position (``user #1``).

    Raises:
        HistoryError: ``a`` or ``b`` is not a revision of this thread.
    """
    return _diff(agent.get_state(config), a, b)


async def athread_diff(agent: Any, config: dict[str, Any], a: int, b: int | None = None) -> Diff:
    """Async :func:`thread_diff`."""
    return _diff(await agent.aget_state(config), a, b)

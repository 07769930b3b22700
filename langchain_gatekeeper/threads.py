"""Editing a LangChain 1.x agent's thread: edit, undo, redo, history and diff.

:func:`edit_thread` reads a ``create_agent`` thread (``agent.get_state``), runs the core
edit (:func:`~context_gatekeeper.editing.compute.compute_edit`) and writes the result back as
**one** ``agent.update_state`` through ``add_messages``: a kept message is replaced
under its id, a deleted one is a ``RemoveMessage``; an insertion anywhere but at the
end rewrites the list (``REMOVE_ALL_MESSAGES`` then the revised list, ids unchanged).

**One undo engine.**  Each edit, undo and redo is a core
:class:`~context_gatekeeper.records.revisions.Revision` (a :class:`ThreadEdit`), stored as
``Revision.to_dict()`` in :data:`EDITS_KEY`, a private state key that
:class:`~langchain_gatekeeper.middleware.GatekeeperMiddleware` adds to the agent's
state schema (:mod:`.thread_log`).  Its reducer only appends (each write carries its
own record, written once), and revisions are numbered from 1 by their place in the
log, so a record is never lost to a write planned on an older snapshot; a thread
never edited has no key.  Undo and redo follow the core's rules
(:func:`~context_gatekeeper.records.revisions.undo_stacks`, inverses by
:func:`~context_gatekeeper.records.operations.invert`): undo reverts the last edit not yet
undone, redo re-applies the last undo, a new edit empties the redo stack.

**Other writers win.**  A thread also moves by other means (the agent's turns,
summarisation, a redaction middleware, a user's ``update_state``), so an undo or redo
applies only the changes that still fit it
(:func:`~context_gatekeeper.records.revisions.split_applicable`): messages the agent added
after an edit stay (``docs/architecture.md#version-rules``); a message changed since keeps its new version; a
message gone stays gone; a deleted message whose neighbour was summarised away is not
re-inserted.  What is left out is reported in ``ThreadEdit.skipped``; an edit none of
whose changes still applies is passed over; an undo or redo that would split a tool
call from its result, or that another write overtook, writes nothing (HistoryError).
The log is written in the same update as the messages (both land or neither), lives
in the checkpoint (it survives a restart with a persistent checkpointer and follows
forks and time travel), and needs no side store.  Records written by earlier versions
(``{"kind": "edit"|"undo", "changes": [...], ...}`` without a number, or the whole
log in each write) are read as the revisions they were.

Edit records (the ``/edit`` command and its confirmation, ``additional_kwargs
["lc_source"] == "gatekeeper_edit"``) are never edited nor selected.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from langchain_core.messages import BaseMessage
from langgraph.constants import CONFIG_KEY_CHECKPOINTER
from langgraph.graph.message import REMOVE_ALL_MESSAGES

from context_gatekeeper import Diff, EditOptions, HistoryError, InvalidInputError, InvalidTypeError, Message
from context_gatekeeper.integration import (
    Applied,
    EditResult,
    SKIP_REASONS,
    Skipped,
    acompute_edit,
    apply_changes,
    check_instruction,
    compute_edit,
    diff_states,
    invert,
    replay,
    rewind,
    split_applicable,
    tool_violations,
    touched_ids,
    undo_stacks,
)

from .convert import from_core, to_core, to_core_messages
from .models import given_edit_model, resolve_edit_model
from .thread_log import (
    EDIT_MARK, EDITS_KEY, TURN_KEY, GatekeeperState, ThreadEdit, append_records, is_edit_record, read_log,
    revisions_with_diffs, state_update, thread_values,
)

__all__ = [
    "EDITS_KEY", "EDIT_MARK", "TURN_KEY", "GatekeeperState", "ThreadEdit", "is_edit_record", "read_log",
    "append_records", "state_update", "edit_thread", "aedit_thread", "undo_thread", "aundo_thread",
    "redo_thread", "aredo_thread", "thread_history", "athread_history", "thread_diff", "athread_diff",
]

logger = logging.getLogger(__name__)


def _thread(snapshot: Any) -> tuple[list[BaseMessage], list[dict[str, Any]]]:
    messages, log = thread_values(snapshot)
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
    log: list[dict[str, Any]]  # what to write to EDITS_KEY: this edit's record (the reducer appends it)


def _editable(state: Sequence[Message], messages: Sequence[BaseMessage]) -> list[Message]:
    return [c for c, m in zip(state, messages) if not is_edit_record(m)]


def _plan(state: list[Message], result: EditResult, log: Sequence[dict[str, Any]], instruction: str) -> EditPlan:
    """The plan for ``result``, computed over ``state`` (the thread's messages, as core messages).
    An edit that changes nothing is numbered like the head, as the core's ``Transcript`` numbers
    one (``number == parent == head``): it is never written, so ``head + 1`` would name no revision."""
    head = len(log)
    after = apply_changes(state, result.changes)
    entry = ThreadEdit(head + 1, head, "edit", tuple(result.changes), instruction, result.model_name, strategy=result.strategy)
    number = head if entry.is_noop else head + 1
    entry = replace(entry, number=number, diff=diff_states(head, state, number, after))
    return EditPlan(entry, state_update(state, result.changes) if result.changes else [], [entry.record()])


def plan_edit(
    messages: Sequence[BaseMessage], log: Sequence[dict[str, Any]], instruction: str, model: Any, options: EditOptions
) -> EditPlan:
    """Compute an edit of ``messages`` (edit records excluded) numbered after the log's
    records; nothing is written."""
    state = to_core_messages(messages)  # converted once: the edit and the plan read the same copies
    result = compute_edit(_editable(state, messages), instruction, resolve_edit_model(model), options=options)
    return _plan(state, result, log, instruction)


async def aplan_edit(
    messages: Sequence[BaseMessage], log: Sequence[dict[str, Any]], instruction: str, model: Any, options: EditOptions
) -> EditPlan:
    """Async :func:`plan_edit`."""
    state = to_core_messages(messages)
    result = await acompute_edit(_editable(state, messages), instruction, resolve_edit_model(model), options=options)
    return _plan(state, result, log, instruction)


def _check_fresh(update: Sequence[BaseMessage], changes: Sequence[Applied], before: Any, now: Any, what: str) -> None:
    """Refuse (HistoryError) when the thread re-read just before writing (``now``) has
    another edit, undo or redo than snapshot ``before`` (the one the plan was computed
    on), or a different version of a message the plan touches (of any message, when the
    update rewrites the whole list).  Messages appended meanwhile are fine."""
    (old, old_log), (new, new_log) = thread_values(before), thread_values(now)
    rewrite, touched = update[:1] and update[0].id == REMOVE_ALL_MESSAGES, touched_ids(changes)
    watched = lambda messages: [m for m in messages if rewrite or m.id in touched]  # noqa: E731
    if new_log != old_log or watched(new) != watched(old):
        raise HistoryError(f"the thread changed while the {what} was computed; nothing was written: run the {what} again")


def _write(agent: Any, plan: EditPlan, before: Any, now: Any) -> dict[str, Any]:
    """The update that writes ``plan`` (computed on snapshot ``before``); see :func:`_check_fresh`."""
    _check_fresh(plan.update, plan.entry.changes, before, now, "edit")
    values: dict[str, Any] = {"messages": plan.update}
    if _has_log(agent):
        values[EDITS_KEY] = plan.log
    else:
        logger.warning("agent has no %r state key (add GatekeeperMiddleware); this edit cannot be undone", EDITS_KEY)
    return values


def _check_thread(agent: Any, config: Any, method: str) -> None:
    """The library's error for an agent without ``method`` or a config that names no thread."""
    if not callable(getattr(agent, method, None)):
        raise InvalidTypeError(
            f"agent must be a compiled agent or graph with a checkpointer, got {type(agent).__name__}; "
            "pass what create_agent(..., checkpointer=...) returns"
        )
    configurable = config.get("configurable") if isinstance(config, Mapping) else None
    if not isinstance(configurable, Mapping) or configurable.get("thread_id") is None:
        raise InvalidInputError(
            f"config must name the thread, got {config!r:.80}; pass {{'configurable': {{'thread_id': ...}}}} "
            "as for agent.invoke"
        )
    # LangGraph's get_state would say only "No checkpointer set"; a parent graph or the LangGraph
    # server may lend one through the config, which LangGraph reads first
    if getattr(agent, "checkpointer", True) in (None, False) and configurable.get(CONFIG_KEY_CHECKPOINTER) is None:
        raise InvalidTypeError(
            f"agent {type(agent).__name__} has no checkpointer, so it keeps no threads to read or edit; "
            "build it with create_agent(..., checkpointer=InMemorySaver()) or another checkpointer"
        )


def _state(agent: Any, config: Any) -> Any:
    """``agent.get_state(config)``, the two checked first (:func:`_check_thread`)."""
    _check_thread(agent, config, "get_state")
    return agent.get_state(config)


async def _astate(agent: Any, config: Any) -> Any:
    """``await agent.aget_state(config)``, the two checked first (:func:`_check_thread`)."""
    _check_thread(agent, config, "aget_state")
    return await agent.aget_state(config)


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
        diff); nothing is written when it changes nothing, and that edit is numbered like
        the thread's head (``number == parent``), as the core's ``Transcript.edit`` numbers one.

    Raises:
        EditError: unusable model output (nothing changed). ModelUnavailableError: no model.
        HistoryError: the thread has no messages, or another edit (or a change to a message
            this edit touches) landed while the model worked. InvalidInputError: a bad option.
    """
    check_instruction(instruction)  # before the model is looked for: a blank one is no missing API key
    chosen, settings = _options(model, llm, options, strategy=strategy, allow_large_deletion=allow_large_deletion)
    messages, log = _thread(snapshot := _state(agent, config))
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
    check_instruction(instruction)  # before the model is looked for: a blank one is no missing API key
    chosen, settings = _options(model, llm, options, strategy=strategy, allow_large_deletion=allow_large_deletion)
    messages, log = _thread(snapshot := await _astate(agent, config))
    plan = await aplan_edit(messages, log, instruction, chosen, settings)
    if plan.entry.changed:
        await agent.aupdate_state(config, _write(agent, plan, snapshot, await agent.aget_state(config)))
    return plan.entry


# -- undo and redo ----------------------------------------------------------------------------
def _start_gone(messages: Sequence[BaseMessage]) -> bool:
    """Whether a summary opens the thread (after any system message): the messages that
    began it were summarised away, so nothing can go back "at the start"."""
    first = next((m for m in messages if m.type != "system"), None)
    return first is not None and first.additional_kwargs.get("lc_source") == "summarization"


def _why(number: int, skipped: Sequence[Skipped]) -> str:
    """What an undo or redo of edit ``number`` left out, by reason (message ids in brackets)."""
    by_reason: dict[str, list[str]] = {}
    for skip in skipped:
        by_reason.setdefault(SKIP_REASONS[skip.reason], []).append(skip.id)
    parts = [f"{len(ids)} message(s): {reason} [{', '.join(ids)}]" for reason, ids in by_reason.items()]
    return f"edit {number}: " + "; ".join(parts) if parts else f"edit {number} changed nothing"


def _check_pairs(state: Sequence[Message], after: Sequence[Message], kind: str, target: int, skipped: Sequence[Skipped]) -> None:
    """Refuse an undo or redo whose skipped changes would split a tool call from its result."""
    known = set(tool_violations(state))  # a call still pending at the end is no split of ours
    new = [v for v in tool_violations(after) if v not in known]
    if new:
        _, message_id, call_id = new[0]
        raise HistoryError(
            f"{kind} of edit {target} refused, nothing was written: it would split tool call {call_id!r} "
            f"(message {message_id!r}) from its result, because another writer moved the thread since "
            f"({_why(target, skipped)}); change those messages with update_state, or edit the thread"
        )


def _as_held(message: Message) -> Message:
    """A version the log recorded as the thread holds it once LangChain has stored it (its
    defaults filled in, a rewritten answer's provider-specific keys dropped): what
    :func:`split_applicable` compares the thread's messages with."""
    return to_core(from_core(message))


def _plan_step(agent: Any, snapshot: Any, kind: Literal["undo", "redo"]) -> tuple[ThreadEdit, dict[str, Any]]:
    """The undo (or redo) the core's rules pick, restricted to the changes that still fit
    the thread (:func:`~context_gatekeeper.records.revisions.split_applicable`)."""
    if not _has_log(agent):
        raise HistoryError(f"{kind}_thread needs the edit log that GatekeeperMiddleware keeps: add it to create_agent")
    messages, records = _thread(snapshot)
    log, state, start_gone = read_log(records), to_core_messages(messages), _start_gone(messages)
    done, undone = undo_stacks(log)
    changes: list[Applied] = []
    skipped: list[Skipped] = []
    target = None
    if kind == "undo":
        reasons = []
        for number in reversed(done):  # an edit none of whose changes still applies is passed over
            changes, skipped = split_applicable(
                invert(log[number - 1].changes), state, start_gone=start_gone, as_held=_as_held
            )
            if changes:
                target = number
                break
            reasons.append(_why(number, skipped))
            logger.info("undo_thread passes over edit %d: none of its changes still applies", number)
        if target is None:
            raise HistoryError(
                "nothing to undo: this thread has no edit left whose changes still apply"
                + (f" ({' | '.join(reasons)})" if reasons else "")
            )
    else:
        if not undone:
            raise HistoryError("nothing to redo: redo follows undo_thread, and a later edit discards what was undone")
        target = undone[-1].target
        assert target is not None  # undo_stacks keeps the undos of numbered edits only
        changes, skipped = split_applicable(invert(undone[-1].changes), state, start_gone=start_gone, as_held=_as_held)
        if not changes:
            raise HistoryError(f"nothing to redo: none of what undoing edit {target} restored still applies ({_why(target, skipped)})")
    number = len(log) + 1
    after = apply_changes(state, changes)
    _check_pairs(state, after, kind, target, skipped)
    entry = ThreadEdit(
        number, number - 1, kind, tuple(changes), target=target,
        diff=diff_states(number - 1, state, number, after), skipped=tuple(skipped),
    )
    return entry, {"messages": state_update(state, changes), EDITS_KEY: [entry.record()]}


def _step(agent: Any, config: dict[str, Any], kind: Literal["undo", "redo"]) -> ThreadEdit:
    snapshot = _state(agent, config)
    entry, values = _plan_step(agent, snapshot, kind)
    _check_fresh(values["messages"], entry.changes, snapshot, agent.get_state(config), kind)
    agent.update_state(config, values)
    return entry


async def _astep(agent: Any, config: dict[str, Any], kind: Literal["undo", "redo"]) -> ThreadEdit:
    snapshot = await _astate(agent, config)
    entry, values = _plan_step(agent, snapshot, kind)
    _check_fresh(values["messages"], entry.changes, snapshot, await agent.aget_state(config), kind)
    await agent.aupdate_state(config, values)
    return entry


def undo_thread(agent: Any, config: dict[str, Any]) -> ThreadEdit:
    """Revert the thread's last edit not yet undone, keeping every later message (a new checkpoint).

    Only changes that still fit the thread are applied, so no other writer's work is
    overwritten: a message another writer changed since (its role, text, content blocks or
    kwargs differ from the version the edit recorded) keeps that writer's version, a message already gone
    stays gone, and a deleted message whose neighbour is gone (summarised away) is not
    re-inserted (so an old question never comes back at the end of the thread).  Each
    change left out is in ``skipped`` with its message id and reason; an edit none of
    whose changes still applies is passed over.  When what is left would split a tool
    call from its result, nothing is written.  The thread is re-read just before
    writing: if another edit, undo or redo, or a change to a message this undo touches
    landed since it was read, nothing is written (run it again).  The log's reducer only
    appends, so no edit's record is ever lost.

    Returns:
        the undo, a :class:`ThreadEdit` whose ``target`` is the number of the edit it
        reverted and whose ``skipped`` lists the changes left out.

    Raises:
        HistoryError: nothing to undo, the agent has no edit log (no GatekeeperMiddleware),
            the thread changed while the undo was planned, or the undo would split a tool pair.
    """
    return _step(agent, config, "undo")


async def aundo_thread(agent: Any, config: dict[str, Any]) -> ThreadEdit:
    """Async :func:`undo_thread`."""
    return await _astep(agent, config, "undo")


def redo_thread(agent: Any, config: dict[str, Any]) -> ThreadEdit:
    """Re-apply what the last :func:`undo_thread` reverted (a new checkpoint); a later edit
    empties the redo stack, as in the core's ``Transcript.redo``.  The same rules as
    :func:`undo_thread`: only changes that still fit the thread are applied (the rest
    are in ``skipped``), a redo that would split a tool pair or that another write
    overtook writes nothing.

    Returns:
        the redo, a :class:`ThreadEdit` whose ``target`` is the number of the edit
        re-applied and whose ``skipped`` lists the changes left out.

    Raises:
        HistoryError: nothing to redo, the agent has no edit log (no GatekeeperMiddleware),
            the thread changed while the redo was planned, or the redo would split a tool pair.
    """
    return _step(agent, config, "redo")


async def aredo_thread(agent: Any, config: dict[str, Any]) -> ThreadEdit:
    """Async :func:`redo_thread`."""
    return await _astep(agent, config, "redo")


# -- history and diff -------------------------------------------------------------------------
def thread_history(agent: Any, config: dict[str, Any]) -> list[ThreadEdit]:
    """The thread's edits, undos and redos, oldest first, numbered from 1 by their place in
    the log (messages the agent adds are not revisions of a thread): the same
    :class:`ThreadEdit` (a core ``Revision``) that :func:`edit_thread`, :func:`undo_thread`
    and :func:`redo_thread` returned, with its ``strategy``, ``skipped`` and ``diff`` (as
    :func:`thread_diff` between it and the revision before)."""
    return revisions_with_diffs(*thread_values(_state(agent, config)))


async def athread_history(agent: Any, config: dict[str, Any]) -> list[ThreadEdit]:
    """Async :func:`thread_history`."""
    return revisions_with_diffs(*thread_values(await _astate(agent, config)))


def _diff(snapshot: Any, a: int, b: int | None) -> Diff:
    messages, records = thread_values(snapshot)
    log = read_log(records)
    head = len(log)
    now = b is None
    b = head if b is None else b
    for n in (a, b):
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= head:
            raise HistoryError(f"no revision {n!r}: this thread's revisions run 0..{head} (0: before its first edit)")
    state = to_core_messages(messages)
    if now:
        return diff_states(a, rewind(state, log[a:]), b, state)
    first = min(a, b)  # the thread as the earlier revision left it, then what the revisions up to the other did
    base = rewind(state, log[first:])
    return diff_states(a, replay(base, log[first:a]), b, replay(base, log[first:b]))


def thread_diff(agent: Any, config: dict[str, Any], a: int, b: int | None = None) -> Diff:
    """How the thread as revision ``b`` left it (default: the thread now) differs from the
    thread as revision ``a`` left it (0: before the first edit).

    The earlier of the two is the current messages with the later revisions reverted, so
    messages the agent added meanwhile are in both; the other is that state with the
    revisions between them applied: the diff shows what the edits changed, and a message
    another writer changed since shows the edit's version (with ``b`` left out, the
    current messages: what is there now).  ``str()`` names messages by role and position
    (``user #1``).

    Raises:
        HistoryError: ``a`` or ``b`` is not a revision of this thread.
    """
    return _diff(_state(agent, config), a, b)


async def athread_diff(agent: Any, config: dict[str, Any], a: int, b: int | None = None) -> Diff:
    """Async :func:`thread_diff`."""
    return _diff(await _astate(agent, config), a, b)

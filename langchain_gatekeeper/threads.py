"""Editing a LangChain 1.x agent's thread: ``edit_thread`` and ``undo_thread``.

An agent built with ``create_agent`` keeps a thread's messages in its checkpointer.
:func:`edit_thread` reads them (``agent.get_state``), runs the core edit
(:func:`~context_gatekeeper.editing.compute_edit`) over the converted messages, and
writes the result back as **one** state update (``agent.update_state``) through the
``add_messages`` reducer: a kept message is replaced under its own id, a deleted one
is a ``RemoveMessage``.  When an edit inserts a message anywhere but at the end (the
reducer can only append), the update is ``RemoveMessage(REMOVE_ALL_MESSAGES)``
followed by the whole revised list, ids unchanged; either way it is one checkpoint.

**Where undo lives.**  Each edit's changes (full before/after message records, the
core's operations on ids) are appended to a private state key,
:data:`EDITS_KEY`, that :class:`~langchain_gatekeeper.middleware.GatekeeperMiddleware`
adds to the agent's state schema.  The log is written in the same update as the
messages (an edit and its undo record land together or not at all), lives in the
checkpoint (so it survives a process restart with a persistent checkpointer and
follows forks and time travel of the thread), and needs no side store.
:func:`undo_thread` applies the inverse of the last edit not yet undone, by id,
keeping every message added after it (DESIGN.md §3), as a new checkpoint.

Messages that record an edit (the ``/edit`` command and its confirmation, marked
``additional_kwargs["lc_source"] == "gatekeeper_edit"``) are never edited nor selected.
"""

from __future__ import annotations

import logging
import operator
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from langchain.agents.middleware.types import AgentState, PrivateStateAttr
from langchain_core.messages import BaseMessage, RemoveMessage
from langgraph.graph.message import REMOVE_ALL_MESSAGES, add_messages
from typing_extensions import NotRequired

from context_gatekeeper.models import pick_model
from context_gatekeeper import Diff, HistoryError, Message
from context_gatekeeper.editing import EditResult, acompute_edit, compute_edit
from context_gatekeeper.operations import (
    Applied,
    Change,
    Put,
    Remove,
    apply_changes,
    change_from_dict,
    change_to_dict,
    invert,
)
from context_gatekeeper.revisions import diff_states

from .convert import from_core, from_core_messages, to_core_messages
from .models import resolve_edit_model

__all__ = [
    "EDITS_KEY",
    "EDIT_MARK",
    "GatekeeperState",
    "ThreadEdit",
    "edit_thread",
    "aedit_thread",
    "undo_thread",
    "aundo_thread",
    "is_edit_record",
]

logger = logging.getLogger(__name__)

EDITS_KEY = "gatekeeper_edits"
"""The private state key holding the thread's edit log (a list of JSON-ready dicts)."""
EDIT_MARK = "gatekeeper_edit"
"""``additional_kwargs["lc_source"]`` of messages that record an edit (never edited or selected)."""


class GatekeeperState(AgentState[Any]):
    """Agent state with the edit log (private: not part of the agent's input or output)."""

    gatekeeper_edits: NotRequired[Annotated[list[dict[str, Any]], PrivateStateAttr, operator.add]]


@dataclass(frozen=True)
class ThreadEdit:
    """What an edit (or an undo) of a thread changed.

    Attributes:
        kind: "edit" or "undo".
        number: the position of this entry in the thread's edit log (1-based).
        changes: the core's changes on message ids (Put / Remove / Change), as applied.
        diff: the thread before against the thread after; ``str(diff)`` is readable.
        instruction: the edit instruction (None for an undo).
        model: the editing model's name (None for an undo).
        strategy: "patch" or "rewrite" (None for an undo).
        target: for an undo, the number of the edit it reverted.
    """

    kind: Literal["edit", "undo"]
    number: int
    changes: tuple[Applied, ...]
    diff: Diff
    instruction: str | None = None
    model: str | None = None
    strategy: str | None = None
    target: int | None = None

    @property
    def changed(self) -> bool:
        """Whether anything changed."""
        return bool(self.changes)

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
        merged = add_messages(from_core_messages(before), update)
        targeted_ok = [m.id for m in merged] == [m.id for m in after]
    except ValueError:
        targeted_ok = False
    if targeted_ok:
        return update
    return [RemoveMessage(id=REMOVE_ALL_MESSAGES), *from_core_messages(after)]


# -- edits ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class EditPlan:
    """An edit computed over a thread, ready to write (internal to this adapter)."""

    entry: ThreadEdit
    update: list[BaseMessage]
    record: dict[str, Any]


def _editable(state: Sequence[Message], messages: Sequence[BaseMessage]) -> list[Message]:
    return [c for c, m in zip(state, messages) if not is_edit_record(m)]


def _plan(
    messages: Sequence[BaseMessage], result: EditResult, log: Sequence[dict[str, Any]], instruction: str
) -> EditPlan:
    state = to_core_messages(messages)
    number = len(log) + 1
    after = apply_changes(state, result.changes)
    entry = ThreadEdit(
        "edit", number, result.changes, diff_states(number - 1, state, number, after),
        instruction, result.model_name, result.strategy,
    )
    record = {
        "kind": "edit", "changes": [change_to_dict(c) for c in result.changes], "instruction": instruction,
        "model": result.model_name, "strategy": result.strategy, "time": time.time(),
    }
    return EditPlan(entry, state_update(state, result.changes) if result.changes else [], record)


def plan_edit(
    messages: Sequence[BaseMessage], log: Sequence[dict[str, Any]], instruction: str, model: Any, **options: Any
) -> EditPlan:
    """Compute an edit of ``messages`` (edit records excluded); nothing is written."""
    edit_model = resolve_edit_model(model)
    result = compute_edit(_editable(to_core_messages(messages), messages), instruction, edit_model, **options)
    return _plan(messages, result, log, instruction)


async def aplan_edit(
    messages: Sequence[BaseMessage], log: Sequence[dict[str, Any]], instruction: str, model: Any, **options: Any
) -> EditPlan:
    """Async :func:`plan_edit`."""
    edit_model = resolve_edit_model(model)
    result = await acompute_edit(_editable(to_core_messages(messages), messages), instruction, edit_model, **options)
    return _plan(messages, result, log, instruction)


def _thread(snapshot: Any) -> tuple[list[BaseMessage], list[dict[str, Any]]]:
    values = snapshot.values or {}
    messages = list(values.get("messages") or [])
    if not messages:
        raise HistoryError("the thread has no messages to edit; check config['configurable']['thread_id']")
    return messages, list(values.get(EDITS_KEY) or [])


def _has_log(agent: Any) -> bool:
    return EDITS_KEY in getattr(agent, "channels", {})


def _write(agent: Any, plan: EditPlan) -> dict[str, Any]:
    values: dict[str, Any] = {"messages": plan.update}
    if _has_log(agent):
        values[EDITS_KEY] = [plan.record]
    else:
        logger.warning("agent has no %r state key (add GatekeeperMiddleware); this edit cannot be undone", EDITS_KEY)
    return values


def _options(strategy: str, allow_large_deletion: bool, model: Any, llm: Any) -> tuple[Any, dict[str, Any]]:
    return pick_model(model, llm), {"strategy": strategy, "allow_large_deletion": allow_large_deletion}


def edit_thread(
    agent: Any,
    config: dict[str, Any],
    instruction: str,
    model: Any = None,
    *,
    llm: Any = None,
    strategy: str = "patch",
    allow_large_deletion: bool = False,
) -> ThreadEdit:
    """Rewrite a thread's messages by a natural-language instruction, as one state update.

    Args:
        agent: a compiled agent with a checkpointer (``create_agent(..., checkpointer=...)``);
            add :class:`GatekeeperMiddleware` so that the edit can be undone.
        config: the thread's config (``{"configurable": {"thread_id": ...}}``).
        instruction: what to change, e.g. "it was Iceland, not Ireland".
        model: the editing model (any chat model or core model); default Gemini 2.5 Flash.
        llm: alias of ``model``.
        strategy: "patch" or "rewrite".
        allow_large_deletion: accept an edit that removes more than half the text.

    Returns:
        the :class:`ThreadEdit` (``str()`` is the diff); nothing is written when it
        changes nothing.

    Raises:
        EditError: unusable model output (nothing changed). ModelUnavailableError: no model.
        HistoryError: the thread has no messages.
    """
    chosen, options = _options(strategy, allow_large_deletion, model, llm)
    messages, log = _thread(agent.get_state(config))
    plan = plan_edit(messages, log, instruction, chosen, **options)
    if plan.entry.changed:
        agent.update_state(config, _write(agent, plan))
    return plan.entry


async def aedit_thread(
    agent: Any,
    config: dict[str, Any],
    instruction: str,
    model: Any = None,
    *,
    llm: Any = None,
    strategy: str = "patch",
    allow_large_deletion: bool = False,
) -> ThreadEdit:
    """Async :func:`edit_thread` (``aget_state`` / ``aupdate_state``, the model's async call)."""
    chosen, options = _options(strategy, allow_large_deletion, model, llm)
    messages, log = _thread(await agent.aget_state(config))
    plan = await aplan_edit(messages, log, instruction, chosen, **options)
    if plan.entry.changed:
        await agent.aupdate_state(config, _write(agent, plan))
    return plan.entry


# -- undo -------------------------------------------------------------------------------------
def _undoable(log: Sequence[dict[str, Any]]) -> list[int]:
    """Log positions (0-based) of edits not yet undone, oldest first."""
    done: list[int] = []
    for i, record in enumerate(log):
        if record["kind"] == "edit":
            done.append(i)
        elif record["kind"] == "undo" and record["target"] in done:
            done.remove(record["target"])
    return done


def _plan_undo(agent: Any, snapshot: Any) -> tuple[ThreadEdit, dict[str, Any]]:
    if not _has_log(agent):
        raise HistoryError("undo_thread needs the edit log that GatekeeperMiddleware keeps: add it to create_agent")
    messages, log = _thread(snapshot)
    done = _undoable(log)
    if not done:
        raise HistoryError("nothing to undo: this thread has no edit left to revert")
    target = done[-1]
    state = to_core_messages(messages)
    present = {m.id for m in state}
    inverse: list[Applied] = []
    for change in invert([change_from_dict(c) for c in log[target]["changes"]]):
        # later messages are kept; a message that is already gone (or back) is skipped
        if isinstance(change, Put) and change.message.id not in present:
            present.add(change.message.id)
            inverse.append(change)
        elif isinstance(change, (Remove, Change)):
            key = change.message.id if isinstance(change, Remove) else change.before.id
            if key in present:
                inverse.append(change)
                if isinstance(change, Remove):
                    present.discard(key)
    number = len(log) + 1
    after = apply_changes(state, inverse)
    entry = ThreadEdit("undo", number, tuple(inverse), diff_states(number - 1, state, number, after), target=target + 1)
    record = {"kind": "undo", "target": target, "changes": [change_to_dict(c) for c in inverse], "time": time.time()}
    return entry, {"messages": state_update(state, inverse), EDITS_KEY: [record]}


def undo_thread(agent: Any, config: dict[str, Any]) -> ThreadEdit:
    """Revert the thread's last edit not yet undone, keeping every later message (a new checkpoint).

    Raises:
        HistoryError: nothing to undo, or the agent has no edit log (no GatekeeperMiddleware).
    """
    entry, values = _plan_undo(agent, agent.get_state(config))
    agent.update_state(config, values)
    return entry


async def aundo_thread(agent: Any, config: dict[str, Any]) -> ThreadEdit:
    """Async :func:`undo_thread`."""
    entry, values = _plan_undo(agent, await agent.aget_state(config))
    await agent.aupdate_state(config, values)
    return entry

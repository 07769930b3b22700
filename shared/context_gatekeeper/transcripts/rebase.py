"""Whether an edit rebased over turns appended meanwhile still leaves a sound conversation.

An edit's structure is checked (:mod:`~context_gatekeeper.editing.checks`) against the
state it was computed on.  When turns were appended while the model worked, the store
rebases the edit over them if no appended message touches or follows a message the edit
changes (:func:`~context_gatekeeper.records.revisions.rebase_conflicts`).  That rule looks
at ids only: a message the edit inserts at the end of the old state lands *before* the
new turns, so "from now on the budget is 500 EUR" followed by the user's next question
becomes two user messages in a row.  :func:`rebase_problem` finds such a violation: one
the rebased result has and the state it is applied to (the base plus the appends) has
not, each violation keyed by the ids of the messages it involves.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..editing.checks import alternation_violations, tool_violations
from ..errors import InvalidRevisionError, UnknownMessageError
from ..records.messages import Message
from ..records.operations import Applied, apply_changes

__all__ = ["rebase_problem"]

_EXCERPT = 60  # characters of a message's text quoted in a refusal

ViolationKey = tuple[str, str, str | None]


def _name(message: Message) -> str:
    """A message as a refusal names it: role, id and the start of its text."""
    text = " ".join(message.content.split())
    quoted = text if len(text) <= _EXCERPT else text[: _EXCERPT - 3] + "..."
    return f"{message.role} message {message.id!r} ({quoted!r})"


def _alternation(state: Sequence[Message]) -> dict[ViolationKey, str]:
    """Each pair of same-role neighbours of ``state`` (and an assistant-first start), keyed by ids."""
    found: dict[ViolationKey, str] = {}
    for first, second in alternation_violations(state):
        if second is None:
            found[("start", first.id, None)] = f"the conversation would start with {_name(first)}"
        else:
            found[("alternation", first.id, second.id)] = (
                f"{_name(first)} and {_name(second)} would be two {first.role} messages in a row"
            )
    return found


def _tool_pairs(state: Sequence[Message]) -> dict[ViolationKey, str]:
    """Each unanswered tool call and orphaned tool result of ``state``, keyed by ids."""
    found: dict[ViolationKey, str] = {}
    for kind, message_id, call_id in tool_violations(state):
        if kind == "orphan":
            why = f"the result of tool call {call_id!r} (message {message_id!r}) would not follow the call"
        else:
            why = f"tool call {call_id!r} of message {message_id!r} would be separated from its result"
        found[(kind, message_id, call_id)] = why
    return found


def rebase_problem(current: Sequence[Message], changes: Sequence[Applied]) -> str | None:
    """Words naming the first structural violation that applying ``changes`` to ``current``
    adds (``None``: it adds none).

    ``current`` is the state the edit is rebased onto: the state it was computed on plus
    the turns appended since.  Violations ``current`` already holds (agent transcripts
    hold some) do not count; only new ones, compared by the ids they involve, as the
    edit's own check compares them.  Changes that do not apply to ``current`` give
    ``None``: the store's own check refuses them, naming why.
    """
    try:
        result = apply_changes(current, changes)
    except (InvalidRevisionError, UnknownMessageError):
        return None
    for violations in (_alternation, _tool_pairs):
        before = violations(current)
        new = [why for key, why in violations(result).items() if key not in before]
        if new:
            return new[0]
    return None

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

from ..editing.checks import added_violations
from ..errors import InvalidRevisionError, UnknownMessageError
from ..records.messages import Message
from ..records.operations import Applied, apply_changes

__all__ = ["rebase_problem"]

_EXCERPT = 60  # characters of a message's text quoted in a refusal

def _name(message: Message) -> str:
    """A message as a refusal names it: role, id and the start of its text."""
    text = " ".join(message.content.split())
    quoted = text if len(text) <= _EXCERPT else text[: _EXCERPT - 3] + "..."
    return f"{message.role} message {message.id!r} ({quoted!r})"


def rebase_problem(current: Sequence[Message], changes: Sequence[Applied]) -> str | None:
    """Words naming the first structural violation that applying ``changes`` to ``current``
    adds (``None``: it adds none).

    ``current`` is the state the edit is rebased onto: the state it was computed on plus
    the turns appended since.  Violations ``current`` already holds (agent transcripts
    hold some) do not count; only new ones, compared by the ids they involve, as the
    edit's own check compares them (:func:`~context_gatekeeper.editing.checks.added_violations`).
    Changes that do not apply to ``current`` give ``None``: the store's own check refuses
    them, naming why.
    """
    try:
        result = apply_changes(current, changes)
    except (InvalidRevisionError, UnknownMessageError):
        return None
    pairs, tools = added_violations(current, result)
    if pairs:
        first, second = pairs[0]
        if second is None:
            return f"the conversation would start with {_name(first)}"
        return f"{_name(first)} and {_name(second)} would be two {first.role} messages in a row"
    if tools:
        kind, message_id, call_id = tools[0]
        if kind == "orphan":
            return f"the result of tool call {call_id!r} (message {message_id!r}) would not follow the call"
        return f"tool call {call_id!r} of message {message_id!r} would be separated from its result"
    return None

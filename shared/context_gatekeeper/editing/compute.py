"""Natural-language edits: ``T' = f(T, e)`` computed by a model, checked, as changes on ids.

:func:`compute_edit` (and its async twin :func:`acompute_edit`) asks a model to
apply an instruction to the editable messages of a transcript state, reads and
checks the answer (``docs/architecture.md#data-flow-of-an-edit``), and returns the result as changes computed
against that state.  It changes nothing itself: the transcript commits the
changes (stamping revision numbers) or shows them as a preview.

Strategies: ``"patch"`` (the model answers with operations only; messages it does
not touch never pass through it) and ``"rewrite"`` (the research prototype's: the
model answers with the whole revised conversation, which is diffed into changes).

**Structured output.**  A model advertising ``supports_json_schema`` is sent the
answer's JSON schema (:func:`~context_gatekeeper.editing.format.output_schema`).  When
that path fails (the model cannot bind the schema, raises, or answers nothing), the
edit asks the same model for JSON text instead, within the same attempt budget: a
failure before the model was called costs no attempt, one after it costs that
attempt, and a model is never asked more than ``MAX_ATTEMPTS`` (2) times.

Settings travel as one :class:`~context_gatekeeper.editing.options.EditOptions`
(``options=``); the keywords ``strategy``, ``max_deletion_share``,
``allow_large_deletion`` and ``token_counter`` override its fields when given (not
``None``).  The exact reply format the model is asked for is documented in
:mod:`context_gatekeeper.editing.format`.

An unusable answer (no JSON, unknown ids, empty text, a changed role, a broken
alternation or tool pair, JSON that never closes or that could only be repaired by
losing text, two different answers in one reply, a finish reason saying the model
hit its output limit) is retried once, showing the model its answer (the first
few thousand characters) and the problem; a second failure raises
:class:`~context_gatekeeper.errors.EditError`.  A finish reason saying the
provider stopped the answer for its content policy is not retried: it raises
:class:`~context_gatekeeper.editing.finish_reasons.FilteredReplyError` at once.
An edit destroying (removing or replacing, by a word-level diff) more than
``max_deletion_share`` (default 0.6) of the editable tokens is refused (not
retried) unless ``allow_large_deletion=True``.

>>> from context_gatekeeper.records.messages import Message
>>> from context_gatekeeper.testing import ScriptedModel
>>> state = [Message("q", "user", "GDP of Ireland?"), Message("r", "assistant", "Ireland: ...")]
>>> model = ScriptedModel(['{"operations": [{"op": "replace", "id": "1", "content": "GDP of Iceland?"},'
...                        ' {"op": "replace", "id": "2", "content": "Iceland: ..."}]}'])
>>> result = compute_edit(state, "Iceland, not Ireland", model)
>>> [(c.before.id, c.after.content) for c in result.changes]
[('q', 'GDP of Iceland?'), ('r', 'Iceland: ...')]
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Optional, Union

from .checks import build_changes, check_structure, deleted_share
from .finish_reasons import FilteredReplyError
from .format import EditView, build_prompt, output_schema, retry_prompt
from .options import STRATEGIES, EditOptions, Strategy
from .parse import parse_patch, parse_rewrite
from ..errors import EditError, InvalidInputError, InvalidTypeError, StructuredOutputError, TruncatedReplyError
from ..records.messages import Message
from .models import ChatMessages, EditModel, Reply, as_edit_model
from ..records.operations import Applied
from ..tokens import TokenCounterLike

__all__ = ["EditResult", "EditOptions", "compute_edit", "acompute_edit", "check_instruction", "STRATEGIES", "MAX_ATTEMPTS"]

logger = logging.getLogger(__name__)

MAX_ATTEMPTS = 2
"""Model calls one edit may make: the first answer, and one retry when it is unusable."""


@dataclass(frozen=True)
class EditResult:
    """What an edit computed, not yet applied.

    Attributes:
        changes: Put/Remove/Change computed against the input state, in the order
            to apply them; empty when the instruction needed no change.  New and
            changed versions carry ``revision=0``: the transcript stamps the number.
        model_name: the name of the model that produced it.
        attempts: the model calls it took: 1, or 2 when the first answer was unusable
            (or the structured-output call gave nothing) and the model was asked again.
        raw_outputs: the model's answer for each attempt, as text ("" for none).
        strategy: "patch" or "rewrite".
    """

    changes: tuple[Applied, ...]
    model_name: str
    attempts: int
    raw_outputs: tuple[str, ...]
    strategy: str = "patch"

    @property
    def changed(self) -> bool:
        """Whether the edit changes anything."""
        return bool(self.changes)


_SAY_WHAT = 'say what to change in natural language, e.g. "it was Iceland, not Ireland"'


def check_instruction(instruction: Any) -> str:
    """``instruction`` if it can be an edit instruction: a str with text and no NUL character.

    Callers check it before anything else (an adapter before it resolves its default
    model, so a blank instruction is not reported as a missing API key).

    Raises:
        InvalidTypeError: not a str.
        InvalidInputError: empty or whitespace, or holding a NUL character (``\\x00``).

    >>> check_instruction("  ")
    Traceback (most recent call last):
    ...
    context_gatekeeper.errors.InvalidInputError: the edit instruction is empty or whitespace; say what to change ...
    """
    if not isinstance(instruction, str):
        raise InvalidTypeError(f"the edit instruction must be a str, got {type(instruction).__name__}; {_SAY_WHAT}")
    if not instruction.strip():
        raise InvalidInputError(f"the edit instruction is empty or whitespace; {_SAY_WHAT}")
    if "\x00" in instruction:  # PostgreSQL cannot store it: refused before a model is paid for, on every store alike
        raise InvalidInputError("the edit instruction contains a NUL character (\\x00); remove it and say what to change")
    return instruction


def _check_state(state: Sequence[Message], instruction: Any) -> list[Message]:
    """Validate the state and instruction up front, with errors that say what to pass."""
    check_instruction(instruction)
    if isinstance(state, (str, bytes)) or not isinstance(state, Sequence):
        raise InvalidTypeError(
            f"state must be a sequence of Message, got {type(state).__name__}; pass a list of Message "
            "(Transcript.messages, or Message.from_dict for plain dicts)"
        )
    messages = list(state)
    for message in messages:
        if not isinstance(message, Message):
            raise InvalidTypeError(
                f"state must hold Message objects, got {type(message).__name__}; "
                "build each with Message(...) or Message.from_dict(...)"
            )
    if len({m.id for m in messages}) != len(messages):
        raise InvalidInputError("state holds two messages with the same id; message ids must be unique")
    return messages


def _as_text(reply: object) -> str:
    """A reply as text (parsed structured output is dumped back to JSON); ``object``, as
    it may be what a :class:`TruncatedReplyError` holds as ``partial``."""
    return reply if isinstance(reply, str) else json.dumps(reply, ensure_ascii=False)


_Ask = tuple[ChatMessages, Optional[Mapping[str, Any]]]
_Answer = Union[Reply, TruncatedReplyError, StructuredOutputError]
"""What the dialogue receives: the reply, the error of a reply cut off at the output
limit, or the failure of a structured-output call."""


def _structured_failure(reply: Any) -> StructuredOutputError | None:
    """The failure a structured-output answer amounts to: an error, or nothing at all."""
    if isinstance(reply, StructuredOutputError):
        return reply
    if reply is None or (isinstance(reply, str) and not reply.strip()) or reply == {} or reply == []:
        return StructuredOutputError("the structured-output answer was empty")
    return None


def _session(
    state: list[Message], instruction: str, options: EditOptions, structured: bool, name: str
) -> Generator[_Ask, _Answer, EditResult]:
    """The edit as a dialogue: yields what to send the model, receives its reply.

    Shared by the sync and async entry points, which only differ in how they call
    the model.  ``structured`` turns off for good once the structured path fails.
    """
    view = EditView.of(state)
    prompt = build_prompt(options.strategy, view, instruction)
    schema = output_schema(options.strategy)
    parse = parse_rewrite if options.strategy == "rewrite" else parse_patch
    messages, raw, problems, attempt = prompt, [], [], 0
    last: EditError | None = None  # why the latest attempt failed
    while attempt < MAX_ATTEMPTS:
        reply = yield messages, schema if structured else None
        failure = _structured_failure(reply) if structured else None
        if failure is not None:
            structured = False
            logger.info("structured output of %s failed (%s); asking for JSON text", name, failure)
            if failure.reached_model:  # the call was made: it used this attempt
                attempt += 1
                raw.append("")
                problems.append(f"structured output failed ({failure})")
                last = failure
                messages = prompt  # no text answer to show: ask afresh
            continue
        attempt += 1
        raw.append(_as_text(reply.partial if isinstance(reply, TruncatedReplyError) else reply))
        try:
            if isinstance(reply, TruncatedReplyError):
                raise reply
            changes, after = build_changes(state, view, parse(reply, view))
            check_structure(state, after, view)
        except EditError as exc:
            problems.append(str(exc))
            last = exc
            logger.info("edit attempt %d by %s was unusable: %s", attempt, name, exc)
            messages = retry_prompt(prompt, raw[-1], str(exc), options.strategy)
            continue
        share = deleted_share(state, changes, options.count)
        if share > options.max_deletion_share and not options.allow_large_deletion:
            raise EditError(
                f"the edit would delete or replace {share:.0%} of the conversation's text (limit "
                f"{options.max_deletion_share:.0%}), so it was refused and nothing was changed. If this is "
                "intended, show the preview to the user and pass allow_large_deletion=True."
            )
        return EditResult(tuple(changes), name, attempt, tuple(raw), options.strategy)
    first = f" (first attempt: {problems[0]})" if problems[0] != problems[-1] else ""
    said = f"model {name!r} gave no usable edit after {MAX_ATTEMPTS} attempts: {problems[-1]}{first}. Nothing was changed; "
    # the last attempt's own kind of failure, so `except TruncatedReplyError` can act on it
    if isinstance(last, TruncatedReplyError):
        limit = ("raise the model's output limit (max tokens)" if last.finish_reason is not None else
                 "its JSON never closed: if the model has an output limit (max tokens), raise it")
        smaller = (", or use strategy='patch', whose answer grows with the change, not the transcript"
                   if options.strategy == "rewrite" else ", or ask for a smaller change at a time")
        raise TruncatedReplyError(
            said + limit + smaller + ".", partial=last.partial, finish_reason=last.finish_reason,
        )
    raise EditError(said + "rephrase the instruction more precisely or use a stronger model.")


def _start(
    state: Sequence[Message], instruction: str, model: Any, options: EditOptions | None, **overrides: Any
) -> tuple[EditModel, Generator[_Ask, _Answer, EditResult], _Ask]:
    """Check the arguments (``options`` with the keyword ``overrides`` applied, see
    :func:`compute_edit`), normalise the model, open the edit dialogue and take its first ask."""
    settings = EditOptions.of(options, **overrides)
    messages = _check_state(state, instruction)
    edit_model = as_edit_model(model)
    session = _session(messages, instruction, settings, edit_model.supports_json_schema, edit_model.name)
    return edit_model, session, next(session)


def _advance(session: Generator[_Ask, _Answer, EditResult], reply: _Answer) -> _Ask | EditResult:
    """Give the dialogue ``reply``: what to send the model next, or the edit's result once it ends.

    The result is returned, not raised as ``StopIteration``: the async edit runs this step in
    a worker thread, and an asyncio future refuses a ``StopIteration``.
    """
    try:
        return session.send(reply)
    except StopIteration as done:
        return done.value


def _failed(exc: EditError, ask: _Ask) -> _Answer:
    """What the dialogue receives for a call that raised ``exc``; raises it when it is final.

    A cut-off reply goes to the dialogue (it retries); a reply the provider stopped
    for its content policy is final (asking again meets the same policy); any other
    failure of a call that asked for structured output becomes a
    :class:`StructuredOutputError` (the dialogue falls back to text); a failure of a
    text call is final.
    """
    if isinstance(exc, TruncatedReplyError):
        return exc
    if ask[1] is None or isinstance(exc, FilteredReplyError):
        raise exc
    if isinstance(exc, StructuredOutputError):
        return exc
    failure = StructuredOutputError(str(exc))
    failure.__cause__ = exc
    return failure


def compute_edit(
    state: Sequence[Message],
    instruction: str,
    model: Any,
    *,
    options: EditOptions | None = None,
    strategy: Strategy | None = None,
    max_deletion_share: float | None = None,
    allow_large_deletion: bool | None = None,
    token_counter: TokenCounterLike = None,
) -> EditResult:
    """Ask ``model`` to apply ``instruction`` to ``state``; return the checked changes.

    Args:
        state: the current messages, in order (only user and assistant text is editable).
        instruction: what to change, in natural language.
        model: anything :func:`~context_gatekeeper.editing.models.as_edit_model` accepts.
        options: the edit's settings (default: ``EditOptions()``: patch, 0.6, not allowed,
            tiktoken).  The keywords below override its fields when they are not ``None``.
        strategy: "patch" (operations only) or "rewrite" (the whole conversation).
        max_deletion_share: the largest share (0..1) of editable tokens an edit may destroy
            (remove, or replace with other words).
        allow_large_deletion: accept an edit above ``max_deletion_share``.
        token_counter: how to count tokens for the deletion guard (default cl100k_base).

    Raises:
        InvalidInputError: a blank instruction, an unknown strategy, a bad share (the
            same error :class:`EditOptions` and ``Transcript(...)`` raise).
        TypeError: a state that is not Messages, a model that cannot be called.
        EditError: the model's answer was unusable twice, the edit deletes too much,
            or the model failed (:class:`FilteredReplyError`: the provider stopped the
            answer for its content policy).
        ModelUnavailableError: the model could not be used (network, timeout, server
            failure, rejected key).
    """
    edit_model, session, ask = _start(
        state,
        instruction,
        model,
        options,
        strategy=strategy,
        max_deletion_share=max_deletion_share,
        allow_large_deletion=allow_large_deletion,
        token_counter=token_counter,
    )
    while True:
        reply: _Answer
        try:
            reply = edit_model.complete(ask[0], json_schema=ask[1])
        except EditError as exc:
            reply = _failed(exc, ask)
        step = _advance(session, reply)
        if isinstance(step, EditResult):
            return step
        ask = step


async def acompute_edit(
    state: Sequence[Message],
    instruction: str,
    model: Any,
    *,
    options: EditOptions | None = None,
    strategy: Strategy | None = None,
    max_deletion_share: float | None = None,
    allow_large_deletion: bool | None = None,
    token_counter: TokenCounterLike = None,
) -> EditResult:
    """Async twin of :func:`compute_edit`; never blocks the event loop.

    Only the model's async call runs on the loop.  Building the prompt, reading and checking
    each reply and counting the tokens the deletion guard weighs take time that grows with
    the history (tens of milliseconds at a few thousand messages), so each of those steps
    runs in a worker thread, one at a time, between the model calls.  Cancelled while one
    runs, the edit raises ``CancelledError`` at once and its result is dropped.
    """
    edit_model, session, ask = await asyncio.to_thread(
        _start,
        state,
        instruction,
        model,
        options,
        strategy=strategy,
        max_deletion_share=max_deletion_share,
        allow_large_deletion=allow_large_deletion,
        token_counter=token_counter,
    )
    while True:
        reply: _Answer
        try:
            reply = await edit_model.acomplete(ask[0], json_schema=ask[1])
        except EditError as exc:
            reply = _failed(exc, ask)
        step = await asyncio.to_thread(_advance, session, reply)
        if isinstance(step, EditResult):
            return step
        ask = step

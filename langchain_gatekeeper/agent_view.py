"""The gated view of an agent's messages, with a gatekeeper kept per thread.

:class:`GatedView` turns the messages a model call would receive into the ones it
needs: pinned content (leading system messages, summary messages) first, then the
earlier turns a :class:`~context_gatekeeper.ContextGatekeeper` selects for the
current query, then the current turn whole (the user's own last human message and everything
after it: the agent's tool loop is never gated, and a human message a tool delivers, such as
an image returned through a ``Command``, is part of it where the run's input is known or the
message has no text, see :func:`_own_ask`; so are the system messages the run's recorded input
opens with, :func:`_input_start`).  Each
pinned message is priced as the message it is sent as, so the list sent stays within
``token_budget`` (the current turn apart).  Turns group an AI tool call with
its ToolMessages (grouped as :func:`~context_gatekeeper.transcripts.transcript_gate.group_turns`
groups), so a pair is never split.

Per thread, the gatekeeper is updated incrementally by the core's
:class:`~context_gatekeeper.transcripts.transcript_gate.TurnIndex` (the routine
:class:`~context_gatekeeper.TranscriptGate` uses too): turns are keyed by the id of
their first message (agent state) or by their content (plain lists, see
:func:`~langchain_gatekeeper.gate_messages`), so a new call indexes only new or
changed turns (an edit of the thread re-indexes the turns it touched); a
reordering rebuilds that thread's index.  A list that extends the one the thread's
last call saw, unchanged, is not even re-read: only its new messages are grouped,
and the index takes only the new turns (``TurnIndex.extend``).  Threads are kept in a
bounded LRU cache, by count and by the characters their indexes hold (:data:`THREAD_INDEX_CHARS`:
an index costs several times its text, so a few threads of pasted logs must not hold what
``max_threads`` chats would), each weighed again at the end of each call on it (a thread
grows), and never evicted while a call holds it; :meth:`GatedView.forget` drops one.  Token
counts of turn texts are kept per counter and text (:func:`counted_once`), shared by every
thread, view and middleware of the process.

With an embedder, every thread's gatekeeper keeps its turn vectors in one
:class:`VectorLRU` of the view (keyed by embedder and a hash of the turn's text), so
a rebuilt index, a new thread showing turns seen before, or a thread evicted and
seen again re-embeds nothing it has seen.  A call embeds only the query (one call):
turns are embedded in the background (see
:meth:`~context_gatekeeper.ContextGatekeeper.aembed_pending`), and a turn not yet embedded
is scored lexically.  :meth:`GatedView.aview` awaits the query's embedding (the embedder's
async twin) instead of blocking the event loop, holding the thread's index meanwhile (a
concurrent call on the same index waits its turn); a list its thread's index is not nearly in
step with (a cold thread's first call) is read and indexed in a worker thread first, as without
an embedder.

A human message with no text (an image alone, a blank message) is gated as a query of no
content words (:data:`NO_TEXT_QUERY`): the gate continues the active topic, within the budget.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import functools
import logging
import math
import operator
import threading
from array import array
from collections.abc import Callable, Collection, Hashable, Sequence
from typing import Any, NamedTuple, TypeVar, cast

from langchain_core.language_models import BaseLanguageModel
from langchain_core.messages import AIMessage, BaseMessage, ChatMessage, HumanMessage, ToolMessage
from langchain_core.messages.utils import count_tokens_approximately

from context_gatekeeper import (
    ContextGatekeeper, GatekeeperError, GateOptions, InvalidInputError, InvalidTypeError,
    resolve_token_counter,
)
from context_gatekeeper.integration import (
    BoundedCache, TurnIndex, arguments_text, hashable, indexed_texts, report_overflow, text_key,
)

from .convert import role_of, text_of
from .threads import is_edit_record

__all__ = ["GatedView", "VectorLRU", "TOKEN_COUNTS", "THREAD_INDEX_CHARS", "TURN_CHARS", "NO_TEXT_QUERY", "adapter_options",
           "counted_once", "is_summary", "current_turn_start", "current_query", "one_text_counter", "semantic"]

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

NO_TEXT_QUERY = "?"
"""The query a human message with no text (an image alone, whitespace) is gated with: no
content word and no cue, so the gate reads it as it reads "ok?" (it continues the active
topic) and the budget holds.  The core takes a query as text, and a blank one is refused;
this one carries nothing of its own."""

THREAD_INDEX_CHARS = 32_000_000
"""The most characters the thread indexes of one :class:`GatedView` (one middleware, one
``topic_gate``; ``gate_messages`` keeps all its views' within it together) hold by default: the
characters of the texts each indexed, each turn counted :data:`TURN_CHARS` more.  Measured
(tracemalloc): about 13 bytes a character of chat (LoCoMo turns, 40 a thread, their per-turn
cost included), 8 of pasted prose, 18 of a server log, 58 of a text of all distinct words (each
word an anchor): some 420 MB when full of chat (1,024 threads of about 30 turns, what
``max_threads`` chats hold), 1.9 GB at most."""

TURN_CHARS = 500
"""What a turn weighs in its thread's index besides its texts' characters: its fixed cost there
(about 4.7 kB, measured on turns of a word or two), as much as 500 characters of chat cost."""


def _require_size(value: object, name: str, hint: str) -> int:
    """``value`` if it is an ``int >= 1`` (``bool`` refused), else :class:`InvalidInputError` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInputError(f"{name} must be an int >= 1, got {value!r}; {hint}")
    return value


def _role(message: BaseMessage) -> str:
    """A message's core role as grouping reads it: :func:`.convert.role_of` (a streamed chunk,
    a ``FunctionMessage``, a ``ChatMessage`` by its role too); ``"user"`` for other kinds, as
    :func:`.convert.to_core` stores them."""
    return role_of(message) or "user"


def is_summary(message: BaseMessage) -> bool:
    """A summary message (LangChain's SummarizationMiddleware marks them)."""
    return message.additional_kwargs.get("lc_source") == "summarization"


def _asks(message: BaseMessage) -> bool:
    """Whether ``message`` is a user's message of the conversation (a ``HumanMessage`` or a
    ``ChatMessage`` of role user, not a summary)."""
    return role_of(message) == "user" and not is_summary(message)


def current_turn_start(
    messages: Sequence[BaseMessage], cost: Callable[[BaseMessage], int] | None = None, room: int = 0,
    run_input: str | None = None,
) -> int | None:
    """Where the current turn starts (None when no human message): the user's own last
    message (:func:`_own_ask`; ``run_input`` is the id of the first message of the run's input,
    as the middleware records it), or the system messages the run's input opens with
    (:func:`_input_start`), and the human messages right before that, unanswered (a pasted text or an
    image, then the question: one turn, as the LlamaIndex memory reads it), while together
    they ``cost`` at most ``room`` (without ``cost``: all of them).  Older ones are earlier
    turns, gated as any other: a long run of unanswered messages is not sent whole."""
    own = _own_ask(messages, run_input)
    return None if own is None else _run_start(messages, _input_start(messages, own, run_input), cost, room)[0]


def _instructs(message: BaseMessage) -> bool:
    """Whether ``message`` is a system message of the conversation (a ``SystemMessage`` or a
    ``ChatMessage`` of role system, not a summary)."""
    return _role(message) == "system" and not is_summary(message)


def _instructions_before(messages: Sequence[BaseMessage], i: int) -> int:
    """Where the system messages standing right before ``messages[i]`` start (``i`` when none
    does): a run's input may open with them, an instruction sent with the question in one
    invoke ("Reply in French only.")."""
    while i and _instructs(messages[i - 1]):
        i -= 1
    return i


def _opened_ask(messages: Sequence[BaseMessage], i: int) -> int | None:
    """The user's message a run's input starting at ``messages[i]`` opens its questions with:
    ``i`` itself, or the one right after the system messages the input opens with; ``None``
    when there is none."""
    while i < len(messages) - 1 and _instructs(messages[i]):
        i += 1
    return i if _asks(messages[i]) else None


def _input_start(messages: Sequence[BaseMessage], own: int, run_input: str | None) -> int:
    """Where the run's input whose first user's message is ``own`` starts: at the system message
    right before it (past other system messages only) that ``run_input`` names, the middleware's
    record of an input that opened with an instruction sent with the question, so it is the
    current turn's, sent whole and never charged to the budget; else at ``own``.  The record
    alone tells: without it (a plain list, or a later run) a system message before a question is
    a mid-conversation reminder, grouped with the turn before it (:func:`_turns`)."""
    if run_input is not None:
        for i in range(_instructions_before(messages, own), own):
            if messages[i].id == run_input:
                return i
    return own


def _ask_before(messages: Sequence[BaseMessage], end: int) -> int | None:
    """Index of the last user's message (:func:`_asks`) before ``end``, or None."""
    return next((i for i in range(end - 1, -1, -1) if _asks(messages[i])), None)


def _tool_step(messages: Sequence[BaseMessage], i: int) -> bool:
    """Whether ``messages[i]`` is a step of an agent's tool loop: an AI message with tool calls,
    or a tool result after one (past other results).  A result patched in for a call the model
    garbled (``invalid_tool_calls``: the run ended there, no tool ran) is not."""
    while i >= 0 and _role(messages[i]) == "tool":
        i -= 1
    step = messages[i] if i >= 0 else None
    return isinstance(step, AIMessage) and bool(step.tool_calls)


def _call_ids(message: BaseMessage) -> frozenset[str]:
    """The ids of the tool calls an AI message makes (valid and invalid: a result answers either)."""
    if not isinstance(message, AIMessage) or not (message.tool_calls or message.invalid_tool_calls):
        return frozenset()
    return frozenset(c.get("id") or "" for c in (*message.tool_calls, *message.invalid_tool_calls)) - {""}


def _result_id(message: BaseMessage) -> str | None:
    """The id of the call a tool result answers (``None``: not a tool result, or no id)."""
    call_id = getattr(message, "tool_call_id", None)
    return call_id if call_id and isinstance(call_id, str) and _role(message) == "tool" else None


def _answered_until(messages: Sequence[BaseMessage], i: int, calls: Collection[str]) -> int:
    """The position of the last result of one of ``calls`` after ``messages[i]`` and before the next
    AI message (``-1``: none): a human message before it sits inside a tool step (parallel calls
    whose results a tool's delivery, such as an image in its ``Command``, stands between), so it
    does not start a turn of its own, and is not the user's question."""
    until = -1
    for j in range(i + 1, len(messages)):
        message = messages[j]
        role = _role(message)
        if role == "assistant":
            break
        if role == "tool" and _result_id(message) in calls:
            until = j
    return until


def _inside_step(messages: Sequence[BaseMessage], i: int) -> bool:
    """Whether ``messages[i]`` stands between a tool call and its result (see :func:`_answered_until`)."""
    j = i - 1
    while j >= 0 and _role(messages[j]) != "assistant":
        j -= 1
    calls = _call_ids(messages[j]) if j >= 0 else frozenset()
    return bool(calls) and _answered_until(messages, i, calls) > i


def _user_ask_before(messages: Sequence[BaseMessage], end: int) -> int | None:
    """Index of the last user's message (:func:`_asks`) before ``end`` that is not inside a tool
    step (:func:`_inside_step`: a tool delivered it between parallel results), or None."""
    ask = _ask_before(messages, end)
    while ask is not None and _inside_step(messages, ask):
        ask = _ask_before(messages, ask)
    return ask


def _own_ask(messages: Sequence[BaseMessage], run_input: str | None = None) -> int | None:
    """Index of the user's own last message, the one the open run answers (None: no user's message).

    Human messages can join a run after its question: a tool hands the model an image, a file
    or a text as a ``HumanMessage`` in its ``Command``, or a middleware asks the model again
    ("cite a source"). They belong to the run, not to a turn of their own (they would take
    the run's question and tool calls out of the current turn).  Where the run's input is
    known (``run_input``: the id of the first message of the run's input, which the middleware
    keeps in the thread's state) it is the answer (its first user's message, past the system
    messages it may open with: :func:`_opened_ask`).  Otherwise the shape alone must tell.  A
    human message between a tool call and its result (parallel calls, one tool's delivery
    standing before another's result: :func:`_inside_step`) is the tool's, whatever it says
    (taking it for the question would send a result without its call).  Otherwise the shape
    cannot always tell: a run that ends on a tool result (a ``return_direct`` tool, structured
    output through a tool) followed by the next question looks like a tool's delivery.  So
    only human messages *without text* (images, files) right after a tool step are taken for
    the tool's; the last human message with text is the user's own.  ``None`` also when every
    human message stands inside a tool step (no question of the user's: nothing is gated)."""
    last = _ask_before(messages, len(messages))
    if last is None:
        return None
    if run_input is not None:
        for i in range(last, -1, -1):
            if messages[i].id == run_input and (opened := _opened_ask(messages, i)) is not None:
                return opened
    ask = _user_ask_before(messages, last + 1)
    while ask is not None and not messages[ask].text.strip():
        first = ask
        while first and _asks(messages[first - 1]) and not messages[first - 1].text.strip():
            first -= 1
        if not first or not _tool_step(messages, first - 1):
            return ask
        earlier = _user_ask_before(messages, first)
        if earlier is None:
            return first
        ask = earlier
    return ask


def _run_start(
    messages: Sequence[BaseMessage], last: int, cost: Callable[[BaseMessage], int] | None, room: int
) -> tuple[int, int]:
    """``(start, spent)``: the unanswered human messages right before ``last`` join it while
    together they ``cost`` at most ``room`` (without ``cost``: all of them, ``spent`` 0)."""
    start, spent = last, 0
    while start and _asks(messages[start - 1]):
        if cost is not None:
            added = cost(messages[start - 1])
            if spent + added > room:
                break
            spent += added
        start -= 1
    return start, spent


def current_query(messages: Sequence[BaseMessage], start: int) -> str:
    """The query of the current turn starting at ``start``: the text of its human messages."""
    return "\n".join(m.text for m in messages[start:] if _asks(m) and m.text.strip())


def _asked_from(messages: Sequence[BaseMessage], start: int, own: int | None, run_input: str | None) -> int:
    """Where the query of the current turn starting at ``start`` begins: at the run's own input
    (``own``, the user's own message :func:`_own_ask` found) when ``run_input`` names it or the
    system messages it opens with (:func:`_input_start`), so the
    unanswered questions of earlier runs (cancelled, stopped, failed) that join the current turn
    are sent but never select turns; else at ``start`` (a pasted text, then the question about
    it: one query, as a list alone cannot tell them apart)."""
    if own is not None and run_input is not None and messages[_input_start(messages, own, run_input)].id == run_input:
        return own
    return start


def _query(text: str) -> str:
    """The query for a human message's text: the text, or :data:`NO_TEXT_QUERY` when it is blank."""
    return text if text.strip() else NO_TEXT_QUERY


def _indexed_text(message: BaseMessage) -> str:
    """What selection reads: the text, plus tool-call names and arguments."""
    content = message.content
    text = content if isinstance(content, str) else text_of(content)  # BaseMessage.text, without its str subclass
    if isinstance(message, AIMessage) and message.tool_calls:
        calls = " ".join(f"{c['name']} {arguments_text(c.get('args', {}))}" for c in message.tool_calls)
        text = f"{text}\n{calls}" if text else calls
    return text


def semantic(gatekeeper: ContextGatekeeper) -> bool:
    """Whether ``gatekeeper`` has an embedder (its selection may call it)."""
    return gatekeeper.embedder is not None


class VectorLRU:
    """Turn vectors by ``(embedder name, text hash)``, shared by the threads of one
    middleware or gate (the vector cache protocol of :mod:`context_gatekeeper.selection.semantic.embedding`).

    Bounded: beyond ``max_vectors`` the least recently used go first (float32, so
    20,000 vectors of 1,536 dimensions take about 120 MB).  Thread-safe: the entries live
    in the core's :class:`~context_gatekeeper.integration.BoundedCache`."""

    in_memory = True  # no I/O: selection may read it on an event loop thread

    def __init__(self, max_vectors: int = 20_000) -> None:
        self.max_vectors = _require_size(max_vectors, "max_vectors", "pass how many vectors to keep")
        self._vectors: BoundedCache[tuple[str, str], array] = BoundedCache(max_vectors)

    def get(self, key: tuple[str, str]) -> Any:
        return self._vectors.get(key)

    def put(self, key: tuple[str, str], vector: Sequence[float]) -> None:
        self._vectors.put(key, array("f", vector))

    def put_many(self, items: Any) -> None:
        self._vectors.put_many((key, array("f", vector)) for key, vector in items)

    def __len__(self) -> int:
        return len(self._vectors)


class Same:
    """An unhashable object as a cache key by identity, kept alive by the key (so its id
    cannot be reused by another object while the key exists)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __hash__(self) -> int:
        return id(self.value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Same) and other.value is self.value


TOKEN_COUNTS: BoundedCache[tuple[Hashable, str], int] = BoundedCache(maxsize=100_000)
"""Token counts of turn texts, by (the counter's ``BoundedCache.identity_key``,
:func:`~context_gatekeeper.integration.text_key` of the text), shared by every gate, middleware
and thread of this process.  Neither key holds the counter nor the text: a chat model built per
request (``token_counter=model``) is collected with its clients once the caller and the views
built for it let it go, its counts left to age out (never read as a later object's).  About
0.3 kB an entry: some 30 MB when full."""


def approximate_tokens(text: str) -> int:
    """About four characters a token (``token_counter="approximate"``, as ``trim_messages``'s)."""
    return math.ceil(len(text) / 4)


def one_text_counter(counter: Any) -> Any:
    """``counter`` as the core calls it, with one text: LangChain's ``count_tokens_approximately``
    (a ``trim_messages`` counter, which takes a list of messages and would count each
    character of a text as a message) is :func:`approximate_tokens`; others as given."""
    return approximate_tokens if counter is count_tokens_approximately else counter


def counted_once(counter: Any) -> Callable[[str], int]:
    """``counter`` (any ``token_counter`` the core accepts) resolved, each text counted once:
    counts are kept in :data:`TOKEN_COUNTS` by the counter (its identity) and the text's
    hash, so a turn seen before, by any thread, index or gate with the same counter, is not
    counted again.  An encoding name or ``None`` gives the core's tiktoken counter, whose
    counts the core keeps per text itself.  A bad counter raises the core's error now, and a
    caller's counter is tried on a sample text now (:func:`_probe`): one that cannot count a
    text (a ``trim_messages`` counter, which reads a list of messages) raises
    :class:`~context_gatekeeper.InvalidInputError` here, not at the first model call.  A bad
    count later raises when it happens (and is not kept)."""
    count = resolve_token_counter(counter)
    if counter is None or isinstance(counter, str):
        return count  # a tiktoken encoding: the core keeps its counts per text already
    identity = BoundedCache.identity_key(counter)  # does not keep the counter (a model and its clients) alive

    models_own = _models_own(counter)
    counted = _reported(count, counter) if models_own else count

    def cached(text: str) -> int:
        return TOKEN_COUNTS.get_or_compute((identity, text_key(text)), lambda: counted(text))

    cached.__name__ = f"counted_once_{getattr(count, '__name__', 'counter')}"
    cached._checked_counter = True  # type: ignore[attr-defined]  # resolve_token_counter checked its counts
    if not models_own:
        _probe(cached, counter)
    return cached


def _reported(count: Callable[[str], int], counter: Any) -> Callable[[str], int]:
    """``count`` (a model's own ``get_num_tokens``, resolved), its failures raised as
    :class:`~context_gatekeeper.InvalidInputError` naming it and what to pass instead: it is not
    tried on a sample (:func:`_models_own`), so a tokenizer it cannot load (many models fall
    back to GPT-2's, which needs ``transformers``) shows at its first count; the library's own
    error for a bad count passes as it is."""

    def reported(text: str) -> int:
        try:
            return count(text)
        except GatekeeperError:
            raise
        except Exception as error:
            owner = type(getattr(counter, "__self__", None)).__name__
            raise InvalidInputError(
                f"the token counter {owner}.get_num_tokens failed ({type(error).__name__}: {error}); a model's own "
                f"counter is not tried when the options are checked (it may load a tokenizer or call the provider), "
                f"so its failure shows at its first count: pass token_counter='cl100k_base' (tiktoken, offline) or "
                f"another counter that works here"
            ) from error

    return reported


PROBE_TEXT = "How long should a Redis lock TTL be?"
"""The text a caller's token counter is tried on when the options are checked (:func:`counted_once`)."""

COUNTER_FORMS = (
    "pass LangChain's count_tokens_approximately (read as about four characters a token), None (tiktoken "
    "cl100k_base), a tiktoken encoding name ('cl100k_base', 'o200k_base'), or a callable(str) -> int such as "
    "a chat model's get_num_tokens (gate_messages also takes 'approximate' or the chat model itself)"
)
"""The token counters every LangChain entry point accepts, for error messages."""


def _models_own(counter: Any) -> bool:
    """Whether ``counter`` is a language model's own ``get_num_tokens`` (one text by its contract;
    trying it could load a tokenizer or call the provider, so it is not tried on a sample)."""
    return isinstance(getattr(counter, "__self__", None), BaseLanguageModel)


def _probe(count: Callable[[str], int], counter: Any) -> None:
    """Count :data:`PROBE_TEXT` with ``count`` (``counter`` resolved): a counter that raises on
    one text is refused with :class:`~context_gatekeeper.InvalidInputError` saying which forms
    are accepted; the library's own error for a bad count (negative, not a number) passes as
    it is.  Its count is kept, so probing the same counter again calls nothing."""
    try:
        count(PROBE_TEXT)
    except Exception as error:
        # the core's own refusal of a counter that cannot take a str is reworded with the forms a
        # LangChain user has at hand; its other errors (a bad count) pass as they are
        cause = error.__cause__ if isinstance(error, GatekeeperError) else error
        if not isinstance(cause, Exception) or (cause is not error and not isinstance(cause, (TypeError, AttributeError))):
            raise
        name = getattr(counter, "__name__", type(counter).__name__)
        raise InvalidInputError(_probe_failed(name, cause)) from cause


def _probe_failed(name: str, error: Exception) -> str:
    """The message of :func:`_probe`'s refusal of the counter called ``name``."""
    return (
        f"token_counter {name!r} failed on a sample text ({type(error).__name__}: {error}); a token_counter "
        "counts the tokens of ONE text: it is called with a str and returns an int (a trim_messages counter, "
        f"which takes a list of messages, does not fit): {COUNTER_FORMS}"
    )


def adapter_options(options: GateOptions) -> tuple[GateOptions, VectorLRU | None]:
    """``options`` (already checked) as the adapters' gatekeepers use them, and the vector
    cache made for them: ``on_overflow`` left ``None`` becomes ``"keep_pinned"`` (the current
    turn is always sent), each text is counted once (:func:`counted_once`), and with an
    embedder but no ``vector_cache`` the turn vectors go to a new :class:`VectorLRU` shared
    by every thread built from the result (returned too; ``None`` otherwise).  LangChain's
    ``count_tokens_approximately`` is :func:`approximate_tokens` (the
    middleware and ``topic_gate`` take it as ``gate_messages`` does)."""
    vectors = VectorLRU() if options.embedder is not None and options.vector_cache is None else None
    changes: dict[str, Any] = {
        "on_overflow": options.overflow("keep_pinned"), "token_counter": counted_once(one_text_counter(options.token_counter)),
    }
    if options.embedder is not None:  # normalised once: every thread shares one embedder (and its state)
        changes["embedder"] = options.resolved_embedder
    if vectors is not None:
        changes["vector_cache"] = vectors
    return dataclasses.replace(options, **changes), vectors


class _IndexLock:
    """A lock for sync and async holders alike, across threads and event loops.

    ``with lock:`` blocks (the sync paths, as fast as a plain lock); ``await
    lock.acquire_async()`` waits without blocking its event loop, so an async holder
    can keep it across an await (the embedding calls) while other coroutines, on any
    loop or thread, wait their turn.  Cancelling a waiter leaves the lock untouched."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._guard = threading.Lock()
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []

    def __enter__(self) -> None:
        self._lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()

    def acquire(self, blocking: bool = True) -> bool:  # noqa: D102 -- threading.Lock's
        return self._lock.acquire(blocking)

    def locked(self) -> bool:  # noqa: D102 -- threading.Lock's
        return self._lock.locked()

    def release(self) -> None:
        self._lock.release()
        with self._guard:
            waiters, self._waiters = self._waiters, []
        for loop, future in waiters:  # each re-tries; the losers wait again
            with contextlib.suppress(RuntimeError):  # a closed loop has no waiter left
                loop.call_soon_threadsafe(_wake, future)

    async def acquire_async(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._lock.acquire(blocking=False):
            future: asyncio.Future[None] = loop.create_future()
            with self._guard:
                self._waiters.append((loop, future))
            try:
                if self._lock.acquire(blocking=False):  # released before we were listed
                    return
                await future
            finally:
                with self._guard, contextlib.suppress(ValueError):
                    self._waiters.remove((loop, future))


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _in_event_loop() -> bool:
    """Whether the calling thread runs an event loop (a blocking wait there could wait on itself)."""
    try:
        return asyncio.get_running_loop() is not None
    except RuntimeError:
        return False


class _ThreadIndex:
    """One thread's gatekeeper, driven by the core's :class:`TurnIndex`, and its lock
    (held by :meth:`GatedView.agated` across the embedding calls)."""

    def __init__(self, gatekeeper: ContextGatekeeper, thread: Hashable) -> None:
        self.turns = TurnIndex(gatekeeper)
        self.gatekeeper = gatekeeper
        self.thread = thread
        """The thread it is kept for (its key in :attr:`GatedView._threads`)."""
        self.lock = _IndexLock()
        self.memo: _ListMemo | None = None
        """What the last call read from its list (see :meth:`GatedView._read`)."""
        self.warned_overflow = False
        """Whether the pinned content's overflow was logged for this thread (:func:`_overflow`)."""
        self.weight = 0
        """The characters of the texts it holds, each turn counted :data:`TURN_CHARS` more, as of
        its last call (:meth:`GatedView._synced`): its weight in the view's cache."""


def _index_weight(thread: Hashable, index: _ThreadIndex) -> int:
    """A thread index's weight in its view's cache (:attr:`_ThreadIndex.weight`)."""
    return index.weight


def _index_in_use(index: _ThreadIndex) -> bool:
    """Whether a call holds the index (its lock): eviction passes over it."""
    return index.lock.locked()


def _pinned_chars(gatekeeper: ContextGatekeeper) -> int:
    """The characters of the pinned texts (system prompt, pinned messages, summaries) ``gatekeeper`` holds."""
    total = 0
    for pinned in (gatekeeper.system_prompt, gatekeeper.summary):
        if pinned is not None:
            total += len(pinned) if isinstance(pinned, str) else sum(map(len, pinned))
    return total


class _Turn:
    """A turn of a message list, as the index reads it: a key, its texts, and where its
    messages stand in the list (lighter than a core MessageTurn: no message copies)."""

    __slots__ = ("key", "base", "positions", "opens_with_user", "parts", "texts", "size")

    _PART = {"user": "user", "assistant": "assistant", "tool": "tool", "system": "tool"}
    """Which of :attr:`parts` a message of each role goes to: a system message inside a turn is
    sent with it, so it is counted against the budget as a tool result is (see :meth:`close`)."""

    def __init__(self, position: int, role: str) -> None:
        self.key = ""
        self.base: Hashable | None = None
        """What :attr:`key` counts repeats of (the texts' hash, or the first message's id); ``None``: none."""
        self.positions = [position]
        self.opens_with_user = role == "user"
        self.parts: dict[str, list[str]] = {"user": [], "assistant": [], "tool": []}
        self.texts: tuple[str, str, tuple[str, ...]] = ("", "", ())
        self.size = TURN_CHARS
        """Its weight in its thread's index: its texts' characters plus :data:`TURN_CHARS` (set by :meth:`close`)."""

    def add(self, role: str, text: str) -> None:
        """Add the text of a message of ``role`` (a core role) to its part."""
        self.parts[self._PART[role]].append(text)

    def close(self) -> None:
        """Fix :attr:`texts`: (user text, assistant text, tool texts), as MessageTurn.texts
        reads them (:func:`~context_gatekeeper.transcripts.transcript_gate.indexed_texts`: each
        message one text, so each costs its ``message_overhead``); a system message inside
        the turn is sent with it, so its tokens count in the turn's cost and its words are
        indexed, as a tool result's are."""
        parts = self.parts
        self.texts = user, assistant, tools = indexed_texts(parts["user"], parts["assistant"], parts["tool"])
        self.size = TURN_CHARS + len(user) + len(assistant) + sum(map(len, tools))


def _turns(
    messages: Sequence[BaseMessage], keyed_by: str, offset: int = 0, seen: dict[Hashable, int] | None = None
) -> list[_Turn]:
    """``messages`` (the messages from position ``offset`` of the list's non-pinned ones on, the
    first a turn's first) grouped as :func:`~context_gatekeeper.transcripts.transcript_gate.group_turns`
    groups (a turn starts at each user message, unless it stands between a tool call and its
    result: :func:`_answered_until`; answers and tool results join it), keyed.

    ``"id"``: the id of the turn's first message (its position when it has none), so an
    edit of a message re-indexes only its turn.  ``"content"``: the turn's texts, so a list that
    grew by a turn, or lost its oldest ones, costs only what changed whatever its ids.  Either
    key carries a count of its repeats (in ``seen``, from the turns before ``offset``), so two
    turns opened by messages of one id, or of the same texts, are two turns, read alike
    whether the list grew into them or was read whole.
    """
    turns: list[_Turn] = []
    turn: _Turn | None = None
    calls: frozenset[str] = frozenset()  # the calls of the last AI message
    until, scanned = -1, True  # where the results of ``calls`` end, once a human message asked
    for i, message in enumerate(messages):
        role = _role(message)
        if role == "assistant":
            calls = _call_ids(message)
            until, scanned = -1, not calls
        elif role == "user" and not scanned:
            until, scanned = _answered_until(messages, i, calls), True
        if (role == "user" and i >= until) or turn is None:
            turn = _Turn(offset + i, role)
            turns.append(turn)
        else:
            turn.positions.append(offset + i)
        turn.add(role, _indexed_text(message))
    seen = {} if seen is None else seen
    for turn in turns:
        turn.close()
        if keyed_by == "id":
            message_id = messages[turn.positions[0] - offset].id
            if not message_id:
                turn.key = f"#{turn.positions[0]}"  # positions are unique; a counted key starts with a digit
                continue
            turn.base = message_id
            n = seen[message_id] = seen.get(message_id, -1) + 1
            turn.key = f"{n}:{message_id}"
        else:
            digest = turn.base = hash(turn.texts)
            n = seen[digest] = seen.get(digest, -1) + 1
            turn.key = f"{digest:x}.{n}"
    return turns


_content = operator.attrgetter("content")
_id = operator.attrgetter("id")
_kwargs = operator.attrgetter("additional_kwargs")
_source = operator.methodcaller("get", "lc_source")
_tool_calls = operator.attrgetter("tool_calls")
_invalid_calls = operator.attrgetter("invalid_tool_calls")
_call_id = operator.attrgetter("tool_call_id")

LIGHT_PAYLOAD = 4096
"""Characters (or bytes) a message's content blocks may hold besides their text for
:class:`_Prints` to keep a copy of them; a heavier list (an image as base64, a file) is kept
as what selection reads of it (:class:`_BlockText`), so no image outlives its call."""


def _payload(value: Any, limit: int = LIGHT_PAYLOAD) -> int:
    """The characters of the strings and bytes in ``value`` (a content block, nested), counted
    until past ``limit``; the ``text`` of a text block is not counted (selection reads it)."""
    if isinstance(value, (str, bytes, bytearray)):
        return len(value)
    if isinstance(value, dict):
        total = 0
        for key, item in value.items():
            if key != "text" or value.get("type") != "text":
                total += _payload(item, limit - total)
                if total > limit:
                    break
        return total
    if isinstance(value, (list, tuple)):
        total = 0
        for item in value:
            total += _payload(item, limit - total)
            if total > limit:
                break
        return total
    return 0


def _block_reads(content: list[Any]) -> tuple[Any, ...]:
    """What selection reads of a content-block list (``BaseMessage.text`` and :func:`.convert.text_of`):
    each block as its text (a string block, a text block's ``text``) or ``None`` (any other block)."""
    return tuple(
        block if isinstance(block, str)
        else ("text", copy.deepcopy(block.get("text"))) if isinstance(block, dict) and block.get("type") == "text"
        else None
        for block in content
    )


class _BlockText:
    """The print of a heavy content-block list (:data:`LIGHT_PAYLOAD`): what selection reads of it
    (:func:`_block_reads`), equal to any list that reads the same.  A change to an image or a
    file changes nothing selection reads, and the blocks are the caller's, never kept here."""

    __slots__ = ("reads",)

    def __init__(self, content: list[Any]) -> None:
        self.reads = _block_reads(content)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, _BlockText):
            return self.reads == other.reads
        if isinstance(other, list):  # a message's content, compared with this print (list == print: reflected here)
            return _block_reads(other) == self.reads
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]


def _content_print(content: Any) -> Any:
    """What :class:`_Prints` keeps of a message's content: a string as it is (the text the index
    holds anyway), a light block list copied, a heavy one as what selection reads (:class:`_BlockText`)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and _payload(content) > LIGHT_PAYLOAD:
        return _BlockText(content)
    return copy.deepcopy(content)


class _Prints:
    """Everything of each message read that pinning, grouping and indexing read, kept as
    columns: its class, its id (when turns are keyed by id), its content (:func:`_content_print`),
    its ``lc_source`` mark, (AI messages) its tool calls, valid and invalid, (tool results) the
    id of the call each answers and (``ChatMessage``) its role.  A snapshot: content that is not
    a string, and tool calls, are copied, so a later change in place to a message shows as a
    difference; no message, and no image or file its content carries, is kept.

    Columns, so that :meth:`begin` compares a grown list with one ``map`` and one list
    comparison per field, in C, instead of a loop of attribute reads per message."""

    __slots__ = ("classes", "ids", "contents", "marks", "marked", "calls_at", "calls", "invalid", "results_at",
                 "results", "roles_at", "roles")

    def __init__(self) -> None:
        self.classes: list[type] = []
        self.ids: list[str | None] = []
        self.contents: list[Any] = []
        self.marks: list[Any] = []
        self.marked = 0
        """How many of :attr:`marks` are not ``None``."""
        self.calls_at: list[int] = []
        """Positions of the AI messages (``isinstance``, as :func:`_indexed_text` reads them)."""
        self.calls: list[Any] = []
        """Their tool calls, copied (``[]`` for none), in the order of :attr:`calls_at`."""
        self.invalid: list[Any] = []
        """Their invalid tool calls, copied (``[]`` for none): their ids pair results too (:func:`_call_ids`)."""
        self.results_at: list[int] = []
        """Positions of the ``ToolMessage``s (the call each answers groups the turns: :func:`_turns`)."""
        self.results: list[Any] = []
        """The ``tool_call_id`` of each, in the order of :attr:`results_at`."""
        self.roles_at: list[int] = []
        """Positions of the ``ChatMessage``s (their ``role`` decides their part in a turn)."""
        self.roles: list[str] = []
        """Their roles, in the order of :attr:`roles_at`."""

    def __len__(self) -> int:
        return len(self.classes)

    def add(self, messages: Sequence[BaseMessage], keyed_by: str) -> None:
        """Append the prints of ``messages`` (the ones after those already read)."""
        start = len(self.classes)
        self.classes.extend(map(type, messages))
        self.contents.extend(map(_content_print, map(_content, messages)))
        if keyed_by == "id":
            self.ids.extend(map(_id, messages))
        marks = list(map(_source, map(_kwargs, messages)))
        self.marks.extend(marks)
        self.marked += len(marks) - marks.count(None)
        for position, message in enumerate(messages, start):
            if isinstance(message, AIMessage):
                self.calls_at.append(position)
                calls, invalid = message.tool_calls, message.invalid_tool_calls
                self.calls.append(copy.deepcopy(calls) if calls else [])  # never the message's own list
                self.invalid.append(copy.deepcopy(invalid) if invalid else [])
            elif isinstance(message, ToolMessage):
                self.results_at.append(position)
                self.results.append(message.tool_call_id)
            elif isinstance(message, ChatMessage):
                self.roles_at.append(position)
                self.roles.append(message.role)

    def begin(self, earlier: Sequence[BaseMessage], keyed_by: str) -> bool:
        """Whether ``earlier`` starts with the messages printed here, none of them changed
        (class by identity, the other fields by ``==``)."""
        n = len(self.classes)
        if len(earlier) < n:
            return False
        head = list(earlier[:n])
        if not (
            list(map(type, head)) == self.classes
            and list(map(_content, head)) == self.contents
            and (keyed_by != "id" or list(map(_id, head)) == self.ids)
            and self._same_marks(list(map(_kwargs, head)))
        ):
            return False
        ais = list(map(head.__getitem__, self.calls_at))
        return (
            list(map(_tool_calls, ais)) == self.calls
            and list(map(_invalid_calls, ais)) == self.invalid
            and list(map(_call_id, map(head.__getitem__, self.results_at))) == self.results
            and [head[i].role for i in self.roles_at] == self.roles  # type: ignore[attr-defined]  # ChatMessages
        )

    def _same_marks(self, kwargs: list[dict[str, Any]]) -> bool:
        """Whether these ``additional_kwargs`` hold the marks printed.  Most messages have none
        and no mark printed: when no message has any extra kwargs and none was marked, that
        is the answer without reading each."""
        if not self.marked and not any(kwargs):
            return True
        return list(map(_source, kwargs)) == self.marks


class _ListMemo:
    """What one call read from its earlier messages, for the next call on the same thread:
    the messages' :class:`_Prints`, the summaries' texts, where :func:`_split` put each message,
    and the turns :func:`_turns` made of them.  No message object is kept (a thread's images
    would stay in memory with its index): a call reads the messages it needs from its own list,
    at the positions kept here."""

    __slots__ = ("prints", "summaries", "at", "turns", "seen", "by_id", "chars")

    def __init__(self, prints: _Prints, summaries: list[str], at: _Positions, turns: list[_Turn],
                 seen: dict[Hashable, int], by_id: dict[int, _Turn] | None = None, chars: int = 0) -> None:
        self.prints, self.summaries = prints, summaries
        self.at = at
        """Where each pinned message and each other message sits in the list read: what a call
        returns are the caller's own objects at those positions."""
        self.turns, self.seen = turns, seen
        self.by_id = by_id
        """Gatekeeper turn id -> turn, once the index is in step with ``turns`` (see :meth:`GatedView._synced`)."""
        self.chars = chars
        """The sum of the :attr:`_Turn.size` of ``turns``, kept as they change (never summed anew)."""

    def extends(self, earlier: Sequence[BaseMessage], keyed_by: str) -> bool:
        """Whether ``earlier`` starts with the messages this memo read, none of them changed."""
        return self.prints.begin(earlier, keyed_by)


class GatedView:
    """Builds gated message lists, keeping one incremental index per thread.

    Args:
        gatekeeper: the checked :class:`~context_gatekeeper.GateOptions` each new thread's
            gatekeeper is built with (``ContextGatekeeper(options=...)``), or a callable
            that builds a fresh, configured gatekeeper.
        max_threads: how many threads' indexes to keep (least recently used go first).
        max_thread_chars: the most characters the kept indexes may hold together (the texts
            each indexed, each turn counted :data:`TURN_CHARS` more; default
            :data:`THREAD_INDEX_CHARS`): the least recently used go first, but never one a call
            is using (a thread heavier than this alone is kept until another thread's call).
        keyed_by: how a turn is recognised from one call to the next: ``"id"`` (its first
            message's id; agent state, where every message has one) or ``"content"``
            (its texts; plain message lists, whose ids may be missing or made up per call).
    """

    def __init__(
        self,
        gatekeeper: GateOptions | Callable[[], ContextGatekeeper],
        *,
        max_threads: int = 1024,
        max_thread_chars: int = THREAD_INDEX_CHARS,
        keyed_by: str = "id",
    ) -> None:
        _require_size(max_threads, "max_threads", "pass how many threads' indexes to keep")
        _require_size(max_thread_chars, "max_thread_chars", "pass the most characters the thread indexes may hold")
        if keyed_by not in ("id", "content"):
            raise InvalidInputError(f"keyed_by must be 'id' or 'content', got {keyed_by!r}")
        self.options: GateOptions | None = gatekeeper if isinstance(gatekeeper, GateOptions) else None
        """The options every thread's gatekeeper is built with (``None`` when given a callable)."""
        self._make: Callable[[], ContextGatekeeper] = (
            self._built if isinstance(gatekeeper, GateOptions) else gatekeeper
        )
        self._keyed_by = keyed_by
        self._threads: BoundedCache[Any, _ThreadIndex] = BoundedCache(
            max_threads, weigh=_index_weight, max_weight=max_thread_chars, in_use=_index_in_use)
        self._lock = threading.Lock()

    def _built(self) -> ContextGatekeeper:
        return ContextGatekeeper(options=self.options)

    @property
    def weight(self) -> int:
        """The characters the kept thread indexes hold together (see ``max_thread_chars``)."""
        return self._threads.weight

    def _index(self, thread: Any) -> _ThreadIndex:
        _require_thread(thread)
        with self._lock:  # one index per thread, even when two calls meet a new thread at once
            index = self._threads.get(thread)
            if index is None:
                index = _ThreadIndex(self._make(), thread)
                self._threads.put(thread, index)
            return index

    def forget(self, thread: Any) -> None:
        """Drop ``thread``'s index now (a conversation that ended, a thread deleted from the
        checkpointer), so its memory need not wait for the least recently used to go.  A call
        using it ends with it, and does not put it back; the thread's next call builds it anew
        from its list.  A thread with no index kept: nothing happens."""
        _require_thread(thread)
        with self._lock:
            self._threads.discard(thread)

    async def aforget(self, thread: Any) -> None:
        """Async :meth:`forget` (in-memory work under a lock held only briefly: nothing to await)."""
        self.forget(thread)

    def gatekeeper(self, thread: Any) -> ContextGatekeeper:
        """The gatekeeper kept for ``thread`` (for inspection, e.g. ``explain``)."""
        return self._index(thread).gatekeeper

    def index(self, thread: Any) -> TurnIndex:
        """The core :class:`~context_gatekeeper.transcripts.transcript_gate.TurnIndex` kept for ``thread``."""
        return self._index(thread).turns

    def turn_start(
        self, messages: Sequence[BaseMessage], thread: Any = None, run_input: str | None = None
    ) -> int | None:
        """:func:`current_turn_start` of ``messages`` with the unanswered human messages before
        the user's own last one counted as the thread's gatekeeper counts a message (its
        counter and ``message_overhead``) within its ``token_budget`` less the pinned content."""
        return self._current(messages, thread, run_input=run_input)[0]

    def _current(
        self, messages: Sequence[BaseMessage], thread: Any, system_prompt: str | None = None,
        run_input: str | None = None,
    ) -> tuple[int | None, int, int | None]:
        """``(where the current turn starts, the tokens of its human messages before the user's
        own last one, where that one is)``: those take their share of the budget, so the earlier
        turns get what remains.  They join the current turn within the budget less the pinned content (the
        system prompt and the messages :func:`_split` pins, each priced as its own message:
        :func:`_pinned_cost`), which every selection pays for first.  The system messages the run's
        input opens with (:func:`_input_start`) are the current turn's, never counted."""
        own = _own_ask(messages, run_input)
        if own is None:
            return None, 0, None
        begin = _input_start(messages, own, run_input)
        if not begin or not _asks(messages[begin - 1]):
            return begin, 0, own  # no unanswered human message before it: nothing to count
        gatekeeper = self._index(thread).gatekeeper
        count, overhead = gatekeeper.options.count, gatekeeper.message_overhead

        def cost(message: BaseMessage) -> int:
            return count(_indexed_text(message)) + overhead

        pinned = _pinned_cost(gatekeeper, _pinned_of(messages[:begin]), system_prompt)
        return (*_run_start(messages, begin, cost, max(0, gatekeeper.token_budget - pinned)), own)

    def view(
        self, messages: Sequence[BaseMessage], *, thread: Any = None, system_prompt: str | None = None,
        run_input: str | None = None,
    ) -> list[BaseMessage]:
        """The gated list for ``messages`` (a model request's messages, system prompt excluded):
        the current turn (the user's own last message, the unanswered human messages right
        before it, and everything after it, the run's tool loop and any human message a tool
        delivered included: :func:`current_turn_start`) is kept whole and its human messages'
        text is the query (none, e.g. an image alone, is gated as :data:`NO_TEXT_QUERY`);
        earlier messages go through :meth:`gated`.  A list without a human message comes
        back whole.  ``run_input`` is the id of the first message of the run's input
        (:func:`_own_ask`; system messages it opens with start the current turn,
        :func:`_input_start`): with it the query is the text of the run's own human messages
        only, and the unanswered ones of earlier runs before it are sent within the budget
        without selecting turns (:func:`_asked_from`)."""
        start, reserved, own = self._current(messages, thread, system_prompt, run_input)
        if start is None:
            return list(messages)
        query = current_query(messages, _asked_from(messages, start, own, run_input))
        earlier = self.gated(messages[:start], query, thread=thread, system_prompt=system_prompt, reserved=reserved)
        return earlier + list(messages[start:])

    async def aview(
        self, messages: Sequence[BaseMessage], *, thread: Any = None, system_prompt: str | None = None,
        run_input: str | None = None,
    ) -> list[BaseMessage]:
        """:meth:`view` with the query's embedding awaited (see :meth:`agated`)."""
        start, reserved, own = self._current(messages, thread, system_prompt, run_input)
        if start is None:
            return list(messages)
        query = current_query(messages, _asked_from(messages, start, own, run_input))
        earlier = await self.agated(messages[:start], query, thread=thread, system_prompt=system_prompt,
                                    reserved=reserved)
        return earlier + list(messages[start:])

    def gated(
        self, earlier: Sequence[BaseMessage], query: str, *, thread: Any = None, system_prompt: str | None = None,
        reserved: int = 0,
    ) -> list[BaseMessage]:
        """``earlier`` narrowed for ``query``: pinned messages (leading system messages,
        summaries) first, then the turns the thread's gatekeeper selects, in order, as the
        caller's own message objects.  Edit records are never selected.  A blank ``query``
        (a message with no text) is :data:`NO_TEXT_QUERY`: the active topic, within the budget.
        ``reserved``: tokens of the budget already spent (the current turn's earlier human
        messages, :meth:`view`).  The pinned messages and the system prompt are each priced
        as the message they are sent as (:func:`_turns_budget`); when they alone are over
        the budget, ``on_overflow`` applies (:func:`_overflow`) and no earlier turn is kept."""
        index = self._index(thread)
        if not index.lock.acquire(blocking=False):
            if semantic(index.gatekeeper) and _in_event_loop():  # maybe held across an await by this
                index = _ThreadIndex(self._make(), thread)  # very loop: waiting could wait on ourselves; one-off
            index.lock.acquire()
        try:
            return self._selected(index, earlier, _query(query), system_prompt, reserved)
        finally:
            index.lock.release()

    def _selected(
        self, index: _ThreadIndex, earlier: Sequence[BaseMessage], query: str, system_prompt: str | None,
        reserved: int, extends: bool | None = None,
    ) -> list[BaseMessage]:
        """:meth:`gated`'s work, under the thread's lock (held by the caller): the index brought in
        step with ``earlier`` (:meth:`_stepped`), then the lexical selection."""
        at, by_id, budget = self._stepped(index, earlier, system_prompt, reserved, extends)
        turn_ids: list[int] = []
        if budget is not None:  # select: the turns explain keeps, without building its per-turn report
            turn_ids = [cast(int, kept["turn_id"]) for kept in index.gatekeeper.select(query, token_budget=budget)]
        return _returned(earlier, at, turn_ids, by_id)  # under the lock: the next call grows these maps

    def _stepped(
        self, index: _ThreadIndex, earlier: Sequence[BaseMessage], system_prompt: str | None, reserved: int,
        extends: bool | None = None,
    ) -> tuple[_Positions, dict[int, _Turn], int | None]:
        """Under the thread's lock (held by the caller): the index brought in step with ``earlier``
        (``extends``: whether the thread's memo was found to cover its start, checked under this
        lock; ``None``: check), the CPU-bound part of a call (a cold thread's read and index build).
        Returns where ``earlier``'s messages stand, its turns by gatekeeper turn id, and the budget
        to select them with (``None``: the pinned content alone is over it, :func:`_turns_budget`)."""
        pinned, summaries, turns, tail, memo = self._read(index, earlier, extends)
        index.memo = None  # until the index is in step with this list
        by_id = self._synced(index, memo, turns, tail, pinned, summaries, system_prompt)
        return memo.at, by_id, _turns_budget(index, pinned, system_prompt, reserved)

    async def agated(
        self, earlier: Sequence[BaseMessage], query: str, *, thread: Any = None, system_prompt: str | None = None,
        reserved: int = 0,
    ) -> list[BaseMessage]:
        """:meth:`gated` without blocking the event loop: with an embedder, the thread's
        lock is awaited, then held while the index is brought in step and the selection
        awaits the query's embedding (one call), so a concurrent call with another list
        (``thread=None`` shares one index) waits instead of re-syncing the index under
        this one.  Bringing the index in step is CPU-bound: it runs on the loop when the
        thread's memo covers all of ``earlier`` but its last few messages (:func:`_covers`, as
        below), else in a worker thread (:meth:`_astepped`), so a cold thread's index build
        never stalls the loop.  Turns are not awaited: new and changed ones are embedded in the
        background (:meth:`~context_gatekeeper.ContextGatekeeper.aembed_pending` waits for
        them) and scored lexically until then.  Calls on other threads run concurrently.

        Without an embedder it is :meth:`gated`, CPU-bound: run on the event loop only when it
        is cheap, that is when the thread's index is free and in step with all of ``earlier`` but
        its last few messages (:data:`INLINE_NEW`: a conversation that grew by a turn, the
        steady state, a millisecond or so even on a long thread, less than a hop to a worker
        thread); anything else (a thread seen for the first time, after a restart or an
        eviction, an edited list, a lock held by another call) runs in a worker thread, so
        building a long thread's index never stalls the loop."""
        index = self._index(thread)
        if not semantic(index.gatekeeper):
            if index.lock.acquire(blocking=False):
                try:
                    if _covers(index.memo, earlier, self._keyed_by):
                        return self._selected(index, earlier, _query(query), system_prompt, reserved, extends=True)
                finally:
                    index.lock.release()
            return await asyncio.to_thread(
                self.gated, earlier, query, thread=thread, system_prompt=system_prompt, reserved=reserved,
            )
        query = _query(query)
        await index.lock.acquire_async()
        try:
            at, by_id, budget = await self._astepped(index, earlier, system_prompt, reserved)
            if budget is None:  # the pinned content alone is over the budget: no turn, no embedding call
                return _returned(earlier, at, (), by_id)
            selection = await index.gatekeeper.aexplain(query, token_budget=budget)
            return _returned(earlier, at, selection.turn_ids, by_id)  # under the lock: see gated
        finally:
            index.lock.release()

    async def _astepped(
        self, index: _ThreadIndex, earlier: Sequence[BaseMessage], system_prompt: str | None, reserved: int,
    ) -> tuple[_Positions, dict[int, _Turn], int | None]:
        """:meth:`_stepped` under the thread's lock, which the caller holds across this await,
        without stalling the event loop: on the loop when it is cheap (the thread's memo covers
        ``earlier`` but its last few messages, :func:`_covers`, the rule :meth:`agated` gates a
        list without an embedder by), else in a worker thread, awaited to its end
        (:func:`_worked_off_loop`: the caller's lock is never released under it)."""
        if _covers(index.memo, earlier, self._keyed_by):
            return self._stepped(index, earlier, system_prompt, reserved, extends=True)
        return await _worked_off_loop(functools.partial(self._stepped, index, earlier, system_prompt, reserved))

    def _read(
        self, index: _ThreadIndex, earlier: Sequence[BaseMessage], extends: bool | None = None,
    ) -> tuple[list[BaseMessage], list[str], list[_Turn], list[_Turn] | None, _ListMemo]:
        """``earlier``'s pinned messages, summaries' texts, and the turns of its other messages
        (:func:`_split`, :func:`_turns`), the turns that changed (``None``: all may have),
        and the memo for the next call.  When ``earlier`` extends the list the last call on
        this thread read, unchanged (a conversation that grew), only the new messages are
        read: the last turn is regrouped when they join it (they continue it, or answer a
        call it made), the earlier turns are the last call's, and the changed turns are the
        regrouped and the new ones.  Any other list is read whole, and so is a grown one whose
        new tool results answer a call of an older turn (:func:`_reach`).  ``extends``: whether
        the thread's memo extends to ``earlier``, when the caller checked it under this lock
        (``None``: check it here)."""
        keyed_by = self._keyed_by
        memo = index.memo
        tail: list[_Turn] | None
        reach: bool | None = None
        if memo is not None and (memo.extends(earlier, keyed_by) if extends is None else extends):
            # the last call's memo grows in place: it is no longer the thread's until this call's is in step
            index.memo = None
            reach = _reach(earlier, len(memo.prints), memo.at, memo.turns)
        if memo is not None and reach is not None:
            read = len(memo.prints)
            summaries, turns, seen, at, prints, by_id = memo.summaries, memo.turns, memo.seen, memo.at, memo.prints, memo.by_id
            chars = memo.chars
            prints.add(earlier[read:], keyed_by)
            tail = []
        else:
            read, reach, chars = 0, False, 0
            summaries, turns, seen, by_id = [], [], {}, None
            at = _Positions([], [])
            prints = _Prints()
            prints.add(earlier, keyed_by)
            tail = None
        known = len(at.rest)
        _split(earlier[read:], summaries, at, read)
        if len(at.rest) > known:
            start, last = known, None
            if turns and (reach or _role(earlier[at.rest[known]]) != "user"):  # the new messages continue the last turn
                last = turns.pop()
                chars -= last.size
                start = last.positions[0]
                if last.base is not None:  # regrouped, it is counted again
                    seen[last.base] -= 1
            added = _turns([earlier[i] for i in at.rest[start:]], keyed_by, start, seen)
            turns.extend(added)
            chars += sum(turn.size for turn in added)
            if tail is not None:
                # a regrouped turn keyed by content has a new key: the old one must go, which a full sync does
                tail = added if last is None or added[0].key == last.key else None
        memo = _ListMemo(prints, summaries, at, turns, seen, by_id, chars)
        return [earlier[i] for i in at.pinned], list(summaries), turns, tail, memo

    def _synced(
        self, index: _ThreadIndex, memo: _ListMemo, turns: list[_Turn], tail: list[_Turn] | None,
        pinned: list[BaseMessage], summaries: list[str], system_prompt: str | None,
    ) -> dict[int, _Turn]:
        """Under the thread's lock: :meth:`_sync`, then ``memo`` kept for the next call, with
        its turns by gatekeeper turn id (the last call's map and the new turns when the index
        only took ``tail``, else built from every turn), which is returned.  The index is
        weighed again in the view's cache (what it holds now: ``memo``'s turns and the pinned
        texts), unless it was dropped or replaced meanwhile (:meth:`forget`, an eviction)."""
        extended = self._sync(index, turns, tail, pinned, summaries, system_prompt)
        ids = index.turns.ids
        by_id = memo.by_id
        if extended and by_id is not None:
            for turn in cast(list[_Turn], tail):  # a regrouped last turn keeps its key, so its id
                by_id[ids[turn.key]] = turn
        else:
            by_id = memo.by_id = {ids[turn.key]: turn for turn in turns}
        index.memo = memo
        index.weight = memo.chars + _pinned_chars(index.gatekeeper)
        self._threads.reweigh(index.thread, index)
        return by_id

    @staticmethod
    def _sync(
        index: _ThreadIndex, turns: list[_Turn], tail: list[_Turn] | None, pinned: list[BaseMessage],
        summaries: list[str], system_prompt: str | None,
    ) -> bool:
        """Under the thread's lock: the index in step with ``turns`` (only ``tail`` applied,
        when the list only grew since the index's last sync), pinned text set.  Returns whether
        only ``tail`` was applied."""
        extended = tail is not None and index.turns.extend(tail)
        if not extended:
            index.turns.sync(turns)
        gk = index.gatekeeper
        prompt = (system_prompt,) if system_prompt is not None and system_prompt.strip() else ()
        system = (*prompt, *(m.text for m in pinned if not is_summary(m))) or None  # one text a message sent
        if system != gk.system_prompt:
            gk.system_prompt = system
        summary = tuple(summaries) or None
        if summary != gk.summary:
            gk.summary = summary
        return extended


INLINE_NEW = 16
"""Messages a list may add to what its thread's index read last for :meth:`GatedView.agated`
to gate it on the event loop (no embedder): a turn or a tool loop's step or two; more, and
the work goes to a worker thread."""


def _covers(memo: _ListMemo | None, earlier: Sequence[BaseMessage], keyed_by: str) -> bool:
    """Whether ``memo`` (a thread's, read under its lock) covers ``earlier`` but at most
    :data:`INLINE_NEW` new messages: the list grew from the one its index is in step with, so
    gating it reads only those (the check itself compares the messages read, in C)."""
    return memo is not None and 0 <= len(earlier) - len(memo.prints) <= INLINE_NEW and memo.extends(earlier, keyed_by)


async def _worked_off_loop(work: Callable[[], _T]) -> _T:
    """``work()`` in a worker thread, awaited to its end: a caller cancelled meanwhile waits for
    the worker (a thread cannot be stopped) before its cancellation goes on, so a lock it holds
    for the work (:meth:`GatedView._astepped`) is never released while the worker still uses it.
    The worker's error then has no caller to go to: it is taken (logged at debug), or asyncio
    would report it, traceback and all, as never retrieved when the task is collected."""
    done = asyncio.ensure_future(asyncio.to_thread(work))
    cancelled: asyncio.CancelledError | None = None
    while not done.done():
        try:
            await asyncio.wait((done,))  # a cancelled wait leaves ``done`` running
        except asyncio.CancelledError as error:
            cancelled = error
    if cancelled is not None:
        failed = None if done.cancelled() else done.exception()
        if failed is not None:
            logger.debug("the work of a cancelled call failed: %r", failed, exc_info=failed)
        raise cancelled
    return done.result()


def _require_thread(thread: Any) -> None:
    """Refuse a ``thread`` that cannot key an index (a list, a dict)."""
    if not hashable(thread):
        raise InvalidTypeError(
            f"thread must be hashable (it keys the thread's index), got {type(thread).__name__}; "
            "pass a string id, e.g. the conversation's thread_id"
        )


def _pinned_of(messages: Sequence[BaseMessage]) -> list[BaseMessage]:
    """The messages of ``messages`` that :func:`_split` pins (the one rule for what is pinned)."""
    at = _Positions([], [])
    _split(messages, [], at, 0)
    return [messages[i] for i in at.pinned]


def _reach(earlier: Sequence[BaseMessage], read: int, at: _Positions, turns: Sequence[_Turn]) -> bool | None:
    """Whether the messages of ``earlier`` from ``read`` on (those a grown list added) answer a
    tool call of the last turn read (``turns``: its messages stand in ``earlier`` at ``at``), so
    that turn is regrouped with them (a delivered message read as a turn of its own joins it);
    ``None`` when one answers a call other than one of the last AI message before it (a call of
    an older turn, or one no message made): the list is read whole (never when a list grows by
    whole runs, as an agent's does).  The messages are walked in order, as :func:`_turns` reads
    them: a call id made again after the result (providers that number calls ``call_0``,
    ``call_1`` in each step) does not count as answering it."""
    calls: frozenset[str] = frozenset()
    for i in reversed(turns[-1].positions if turns else ()):
        message = earlier[at.rest[i]]
        if _role(message) == "assistant":
            calls = _call_ids(message)
            break
    reach, made = False, False  # whether a result answers the last turn's calls; whether ``calls`` are new
    for message in earlier[read:]:
        if is_summary(message) or is_edit_record(message):
            continue  # not grouped (:func:`_split`)
        role = _role(message)
        if role == "assistant":
            calls, made = _call_ids(message), True
        elif role == "tool":
            result = _result_id(message)
            if result is None:
                continue
            if result not in calls:
                return None
            reach = reach or not made
    return reach


def _pinned_cost(gatekeeper: ContextGatekeeper, pinned: Sequence[BaseMessage], system_prompt: str | None) -> int:
    """Tokens the pinned content costs as it is sent: each pinned message (leading system
    messages, summaries) and the system prompt (unless blank) is its own message, so each
    is its text's count plus one ``message_overhead``."""
    count, overhead = gatekeeper.options.count, gatekeeper.message_overhead
    texts: list[str] = [message.text for message in pinned]
    if system_prompt is not None and system_prompt.strip():
        texts.append(system_prompt)
    return sum(count(text) + overhead for text in texts)


def _turns_budget(
    index: _ThreadIndex, pinned: Sequence[BaseMessage], system_prompt: str | None, reserved: int
) -> int | None:
    """The ``token_budget`` to select earlier turns with, or None when the pinned content
    alone is over the thread's ``token_budget`` (see :func:`_overflow`).

    The gatekeeper holds the pinned messages and the system prompt as :meth:`GatedView._sync`
    set them, one text a message sent, and prices them as :func:`_pinned_cost` does; it pays
    for them first out of the budget given, which is the thread's less ``reserved`` (the
    current turn's unanswered messages), never less than the pinned content itself."""
    gatekeeper = index.gatekeeper
    priced = gatekeeper.pinned_cost()
    if priced > gatekeeper.token_budget:
        _overflow(index, priced, pinned, system_prompt)
        return None
    return max(priced, gatekeeper.token_budget - reserved)


def _overflow(index: _ThreadIndex, priced: int, pinned: Sequence[BaseMessage], system_prompt: str | None) -> None:
    """The pinned content alone costs ``priced`` tokens, over the thread's ``token_budget``:
    :class:`BudgetError` with ``on_overflow="raise"``, else one warning per thread (the
    pinned content and the current turn are sent, no earlier turn)."""
    gatekeeper = index.gatekeeper
    summaries = sum(map(is_summary, pinned))
    parts = ["the system prompt"] if system_prompt is not None and system_prompt.strip() else []
    parts += [_counted(len(pinned) - summaries, "system message"), _counted(summaries, "summary message")]
    detail = (
        f"pinned content needs {priced} tokens ({', '.join(p for p in parts if p)}, each with its message_overhead of "
        f"{gatekeeper.message_overhead}) but token_budget is {gatekeeper.token_budget}"
    )
    index.warned_overflow = report_overflow(
        gatekeeper.on_overflow, detail, "raise token_budget, shorten the pinned messages", index.warned_overflow,
        "sending the pinned content and the current turn only", logger,
    )


def _counted(n: int, noun: str) -> str:
    """``"1 summary message"``, ``"2 summary messages"``; ``""`` for none."""
    return "" if not n else f"{n} {noun}" + ("s" if n > 1 else "")


class _Positions(NamedTuple):
    """Where the pinned messages and the other messages (:func:`_split`) sit in the list read."""

    pinned: list[int]
    rest: list[int]


def _split(earlier: Sequence[BaseMessage], summaries: list[str], at: _Positions, offset: int) -> None:
    """Append to ``at`` where each message of ``earlier`` (which follow those already split)
    sits, ``offset`` plus its index: among the pinned (leading system messages, summaries) or
    the others (edit records left out), and to ``summaries`` the texts of the summaries."""
    for i, message in enumerate(earlier, offset):
        if is_summary(message):
            summaries.append(message.text)
            at.pinned.append(i)
        elif not at.rest and _role(message) == "system":  # a SystemMessage, or a ChatMessage of role system
            at.pinned.append(i)
        elif not is_edit_record(message):
            at.rest.append(i)


def _returned(
    earlier: Sequence[BaseMessage], at: _Positions, turn_ids: Sequence[int], by_id: dict[int, _Turn]
) -> list[BaseMessage]:
    """The caller's own messages for a selection: the pinned ones, then those of the selected
    turns (``by_id``: gatekeeper turn id -> turn), in order.  After the system messages the
    list starts on a user message: a turn opens on one, or a pinned summary is one
    (SummarizationMiddleware's), and the rest of a turn it cut may follow it (the answer a
    "Why?" asks about), unless that opens on a tool result (its call was not sent).  With no
    user's message before it, the first turn is sent only when it is the assistant's greeting
    the list opens with (answers with no tool call, as the core's ``TranscriptGate`` keeps it):
    a selected turn of tool calls or results before any question is left out."""
    kept: list[BaseMessage] = [earlier[i] for i in at.pinned]
    summarised = any(_role(message) == "user" for message in kept)
    for turn_id in turn_ids:
        turn = by_id.get(turn_id)
        if turn is None:
            continue  # defensive: every selected turn is one of ``turns``
        messages = [earlier[at.rest[i]] for i in turn.positions]
        if not turn.opens_with_user and not _may_open(messages, summarised):
            continue  # only the list's first turn opens otherwise: nothing user-role is kept before it
        kept.extend(messages)
    return kept


def _may_open(messages: Sequence[BaseMessage], summarised: bool) -> bool:
    """Whether the list's first turn (``messages``), which does not open on a user's message, may
    come first after the pinned messages: after a pinned summary (``summarised``) when it does
    not open on a tool result, else when it is the assistant's greeting (answers only, none
    calling a tool)."""
    if summarised:
        return _role(messages[0]) != "tool"
    return all(_role(message) == "assistant" and not _call_ids(message) for message in messages)

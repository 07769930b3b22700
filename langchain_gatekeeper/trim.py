"""``gate_messages``: topic gating as a plain function over message lists, shaped like
LangChain's ``trim_messages``.

LangGraph graphs, ``pre_model_hook``s and hand-written chains work on plain lists of
messages.  Where ``trim_messages`` keeps the *last* messages that fit a token budget,
:func:`gate_messages` keeps the earlier turns the current query is *about*:

>>> from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
>>> chat = [
...     SystemMessage("Be brief."),
...     HumanMessage("How long should a Redis lock TTL be?"), AIMessage("Longer than the longest job."),
...     HumanMessage("Best espresso grind?"), AIMessage("Fine, like table salt."),
...     HumanMessage("And the Redis lock watchdog?"),
... ]
>>> [m.text for m in gate_messages(chat, token_budget=1000)]
['Be brief.', 'How long should a Redis lock TTL be?', 'Longer than the longest job.', 'And the Redis lock watchdog?']

The last human message is the query, and it and everything after it (the current
turn, tool calls included; a human message a tool delivered after its result belongs to
the run, so the current turn starts at the user's own message before it) is kept whole;
leading system messages and summaries are pinned, each priced as its own message; an AI
tool call and its ToolMessages are kept or dropped together.  Called
without messages it returns a Runnable, as ``trim_messages`` does.  The selection
is the agent middleware's (:class:`~langchain_gatekeeper.agent_view.GatedView`): one
code path.

The index behind it is kept across calls (per set of options, compared by value, and
``thread``), keyed by the turns' content, so a list that grew by one turn costs one turn to index.  With an
``embedder=``, turn vectors are kept beside it by content hash, shared by every
``thread`` of one set of options, so a rebuilt or reordered list embeds nothing seen before.
The indexes of the 32 sets of options last used are kept, 256 threads each, and all of them
together hold at most :data:`~langchain_gatekeeper.agent_view.THREAD_INDEX_CHARS` characters
(:func:`_view_cache`): options used per request (a chat model built per request as the
``token_counter``) never keep more.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
from collections.abc import Hashable, Iterable, Mapping
from functools import partial
from typing import Any

from langchain_core.language_models import BaseLanguageModel
from langchain_core.messages import BaseMessage
from langchain_core.prompt_values import PromptValue
from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda

from context_gatekeeper import GateOptions, InvalidInputError, InvalidTypeError
from context_gatekeeper.integration import BoundedCache

from .agent_view import THREAD_INDEX_CHARS, GatedView, Same, adapter_options, approximate_tokens, hashable
from .convert import as_messages

__all__ = ["gate_messages", "agate_messages", "approximate_tokens"]

_CACHE_SIZE = 32


def _view_weight(key: Hashable, view: GatedView) -> int:
    """A view's weight: the characters its thread indexes hold (:attr:`GatedView.weight`)."""
    return view.weight


def _view_cache(max_weight: int) -> BoundedCache[Hashable, GatedView]:
    """The views of the :data:`_CACHE_SIZE` sets of options last used, weighed by what their
    thread indexes hold (each view weighed again after each call on it: :func:`_gate`), so the
    threads of every view together hold at most ``max_weight`` characters, as one view's may:
    the least recently used views go first, with their indexes."""
    return BoundedCache(_CACHE_SIZE, weigh=_view_weight, max_weight=max_weight)


_views = _view_cache(THREAD_INDEX_CHARS)


def _counter(token_counter: Any) -> Any:
    """The core's token counter for ``token_counter`` (one text in, a count out).

    ``"approximate"`` is :func:`approximate_tokens`; a chat model is its ``get_num_tokens``;
    any other value is the core's to read (a callable is called with one text; LangChain's
    ``count_tokens_approximately`` is read as :func:`approximate_tokens` where every adapter
    path reads its counter, :func:`.agent_view.adapter_options`)."""
    if isinstance(token_counter, str) and token_counter == "approximate":
        return approximate_tokens
    if isinstance(token_counter, BaseLanguageModel):
        return token_counter.get_num_tokens
    return token_counter


def _frozen(value: Any) -> Hashable:
    """A cache key for an option's value: plain data (a ``SelectionParams`` built per call,
    dicts, lists) by value, typed (``1`` and ``True`` differ); other unhashable objects by
    identity; the rest by type and value."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (type(value), tuple((f.name, _frozen(getattr(value, f.name))) for f in dataclasses.fields(value)))
    if isinstance(value, Mapping):
        return (type(value), frozenset((_frozen(k), _frozen(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return (type(value), tuple(_frozen(v) for v in value))
    if isinstance(value, (set, frozenset)):
        return (type(value), frozenset(_frozen(v) for v in value))
    return (type(value), value) if hashable(value) else Same(value)


_OBJECTS = frozenset({"embedder", "token_counter", "vector_cache"})
"""Options that are live objects: keyed as they hash (identity for most), never copied."""


def _key(name: str, value: Any) -> Hashable:
    """The cache key of one option: live objects as they hash (else by identity), data by value."""
    if name not in _OBJECTS:
        return _frozen(value)
    return value if hashable(value) else Same(value)


def _by_value(name: str, value: Any) -> bool:
    """Whether ``value`` is keyed by its content (the view then keeps a copy of it)."""
    return name not in _OBJECTS and (
        (dataclasses.is_dataclass(value) and not isinstance(value, type)) or isinstance(value, (Mapping, list, set)))


def _view(options: dict[str, Any], given: GateOptions | None = None) -> tuple[Hashable, GatedView]:
    """The cached content-keyed view for these gatekeeper options (built and checked on first
    use), and its key in :data:`_views`.  Options are keyed by value, so a ``params=`` built per
    call finds its view; ``given`` is the caller's own :class:`GateOptions` when ``options`` are
    its fields."""
    key = tuple(sorted((name, _key(name, value)) for name, value in options.items()))
    return key, _views.get_or_compute(key, lambda: _new_view(options, given))


def _new_view(options: dict[str, Any], given: GateOptions | None) -> GatedView:
    """A view for these options, checked once (a bad option raises before anything is cached)."""
    if given is None:
        # a copy of what was keyed by value: the caller mutating its object later cannot change this view
        options = {name: copy.deepcopy(value) if _by_value(name, value) else value for name, value in options.items()}
        given = GateOptions.of(**dict(options, token_counter=_counter(options.get("token_counter"))))
    gate, _ = adapter_options(given)  # count_tokens_approximately in the caller's options is read there
    return GatedView(gate, max_threads=256, max_thread_chars=THREAD_INDEX_CHARS, keyed_by="content")


def _as_messages(messages: Iterable[Any] | PromptValue) -> list[BaseMessage]:
    """``messages`` as a list of messages (``convert_to_messages`` forms: messages, role/content
    dicts, ``(role, text)`` tuples, strings), or the library's error for anything else."""
    if isinstance(messages, PromptValue):
        return messages.to_messages()
    if isinstance(messages, (str, bytes)):
        raise InvalidInputError("gate_messages takes a list of messages, not a string")
    if isinstance(messages, (BaseMessage, Mapping)) or not isinstance(messages, Iterable):
        raise InvalidTypeError(
            f"gate_messages takes a list of messages, got {type(messages).__name__}; pass [message] for one message"
        )
    if isinstance(messages, list) and all(issubclass(kind, BaseMessage) for kind in set(map(type, messages))):
        return messages  # already messages (checked per class): the same list, no copy
    return as_messages(list(messages))


_Settings = tuple[dict[str, Any], "GateOptions | None"]
"""The options of one call as a dict (the view's cache key) and the caller's GateOptions, if given."""


def _check_thread(thread: Any) -> None:
    """Refuse a ``thread`` that cannot key an index (a list, a dict), before anything is read."""
    if not hashable(thread):
        raise InvalidTypeError(
            f"thread must be hashable (it keys the kept index), got {type(thread).__name__}; "
            "pass a string id for the conversation"
        )


def _gate(messages: Any, settings: _Settings, thread: Any, config: RunnableConfig | None = None) -> list[BaseMessage]:
    if thread is None and config is not None:
        thread = (config.get("configurable") or {}).get("thread_id")
    key, view = _view(*settings)
    try:
        return view.view(_as_messages(messages), thread=thread)
    finally:
        _views.reweigh(key, view)  # its threads grew: other views go first when all hold too much


async def _agate(
    messages: Any, settings: _Settings, thread: Any, config: RunnableConfig | None = None
) -> list[BaseMessage]:
    """:func:`_gate` for async callers: without an embedder in a worker thread (as before),
    with one awaiting the query's embedding (turns are embedded in the background)."""
    if settings[0].get("embedder") is None:
        return await asyncio.to_thread(_gate, messages, settings, thread, config)
    if thread is None and config is not None:
        thread = (config.get("configurable") or {}).get("thread_id")
    key, view = _view(*settings)
    try:
        return await view.aview(_as_messages(messages), thread=thread)
    finally:
        _views.reweigh(key, view)


def gate_messages(
    messages: Iterable[Any] | PromptValue | None = None,
    *,
    options: GateOptions | None = None,
    token_budget: int | None = None,
    max_tokens: int | None = None,
    token_counter: Any = None,
    thread: Hashable | None = None,
    embedder: Any = None,
    embed_timeout: float | None = None,
    **gate_options: Any,
) -> list[BaseMessage] | Runnable[Any, list[BaseMessage]]:
    """The messages the current query needs, within ``token_budget`` tokens.

    Args:
        messages: message-likes (``BaseMessage``, ``("human", "hi")`` tuples, dicts, as
            ``trim_messages`` accepts) or a ``PromptValue``.  ``None`` returns a Runnable
            that gates what it is invoked with (its ``config``'s ``thread_id``, when
            present and no ``thread`` is given, picks the index).
        options: the gate's settings as one :class:`~context_gatekeeper.GateOptions`
            instead of the keywords below (not both); its ``on_overflow`` left ``None``
            means ``"keep_pinned"``, and its ``token_counter`` must be one the core
            accepts (pass LangChain's ``count_tokens_approximately``, read as four
            characters a token, or ``model.get_num_tokens``; the ``"approximate"``
            spelling is this function's keyword only).
        token_budget: tokens for everything sent but the current turn (an ``int >= 0``,
            default 4000); ``max_tokens``, ``trim_messages``'s name, is an alias.
        token_counter: counts the tokens of ONE text (a ``str``), unlike ``trim_messages``'s,
            which counts a list of messages: ``None`` (tiktoken's ``cl100k_base``,
            offline), ``"approximate"`` (four characters a token; LangChain's
            ``count_tokens_approximately`` is read as it), a chat model (its
            ``get_num_tokens``), a tiktoken encoding name, or any callable ``str -> int``
            (called with one text: ``len`` counts characters).  It is tried on a sample
            text when the options are checked, before the list is read: a
            ``trim_messages``-style counter that fails on a text is refused.
        thread: which kept index to use for this conversation, a hashable id such as a
            string (``None``: one per set of options).  Any list is gated correctly with
            any index; separate threads only keep separate conversations from
            re-indexing each other (and, with an embedder, concurrent async calls from
            waiting on each other: a selection holds its index while it awaits the
            embedder).
        embedder: turns on the semantic channel: a LangChain ``Embeddings``, a LlamaIndex
            ``BaseEmbedding``, or a callable ``list[str] -> list[list[float]]`` (numpy
            needed).  Each turn is embedded once (vectors kept in memory by content hash,
            shared across the threads of one set of options); a call makes at most one
            embedding call, for the query.  :func:`agate_messages` and the Runnable's
            ``ainvoke`` await the embedder's async twins.  ``None`` (default): lexical,
            exactly as without it.
        embed_timeout: seconds one embedding call may take before the list is gated
            lexically; ``None``: wait.
        **gate_options: other :class:`~context_gatekeeper.GateOptions` fields
            (``message_overhead``, ``params``, ``preset``, ``vector_cache``) and selection
            parameters; ``on_overflow`` defaults to ``"keep_pinned"``.

    Returns:
        The caller's own message objects, in order: pinned messages, the selected
        earlier turns, the current turn.  A list without a human message comes back whole.
        A last human message with no text (an image alone, whitespace) is gated as a query
        of no content words (:data:`~langchain_gatekeeper.agent_view.NO_TEXT_QUERY`, as
        "ok?" is): the gate continues the active topic, within ``token_budget``.  A system
        message inside an earlier turn is sent with its turn and counted in its cost.

    Raises:
        BudgetError: a budget that is not an ``int >= 0``, or (``on_overflow="raise"``)
            pinned messages that alone cost more than it, each with its ``message_overhead``.
            TypeError: an unknown option, or ``options=`` with other gate keywords.
            InvalidTypeError: a ``thread`` that is not hashable (pass a string id).
            InvalidInputError: a ``token_counter`` that fails on a sample text (one taking a
            list of messages).
    """
    _check_thread(thread)
    settings = _settings(options, gate_options, token_counter, token_budget, max_tokens, embedder, embed_timeout)
    if messages is not None:
        return _gate(messages, settings, thread)
    _view(*settings)  # check the options now, not at the first call
    return RunnableLambda(
        partial(_gate, settings=settings, thread=thread), afunc=partial(_agate, settings=settings, thread=thread),
        name="gate_messages",
    )


def _settings(
    options: GateOptions | None, keywords: dict[str, Any], token_counter: Any, token_budget: int | None,
    max_tokens: int | None, embedder: Any, timeout: Any,
) -> _Settings:
    """The gate options of one call (``max_tokens`` is ``token_budget``'s alias), as the
    view cache's key and the caller's :class:`GateOptions` (checked when its view is built)."""
    if token_budget is not None and max_tokens is not None and token_budget != max_tokens:
        raise InvalidInputError(f"pass token_budget or its alias max_tokens, not both ({token_budget} != {max_tokens})")
    budget = token_budget if token_budget is not None else max_tokens
    settings = dict(keywords, token_counter=token_counter)
    if budget is not None:
        settings["token_budget"] = budget
    if embedder is not None:
        settings["embedder"] = embedder
    if timeout is not None:
        settings["embed_timeout"] = timeout
    if options is None:
        return settings, None
    GateOptions.of(options, **settings)  # a GateOptions, and no keyword beside it
    return {f.name: getattr(options, f.name) for f in dataclasses.fields(options) if f.init}, options


async def agate_messages(
    messages: Iterable[Any] | PromptValue,
    *,
    token_budget: int | None = None,
    max_tokens: int | None = None,
    token_counter: Any = None,
    thread: Hashable | None = None,
    embedder: Any = None,
    embed_timeout: float | None = None,
    options: GateOptions | None = None,
    **gate_options: Any,
) -> list[BaseMessage]:
    """Async :func:`gate_messages` (same kept index).  Without an embedder the gating
    runs in a worker thread; with one, the query's embedding is awaited (turns are
    embedded in the background and scored lexically until then)."""
    if messages is None:
        raise InvalidInputError("agate_messages needs messages; gate_messages() without them returns a Runnable")
    _check_thread(thread)
    settings = _settings(options, gate_options, token_counter, token_budget, max_tokens, embedder, embed_timeout)
    return await _agate(_as_messages(messages), settings, thread)  # read (and checked) before the await

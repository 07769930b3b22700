"""Topic-gated history for classic LangChain chains.

Two ways to send a chain only the earlier turns the current query needs:

* :func:`topic_gate` is a Runnable to put in front of a chain inside
  ``RunnableWithMessageHistory``::

      RunnableWithMessageHistory(topic_gate(input_messages_key="question",
                                            history_messages_key="history") | chain,
                                 get_session_history,
                                 input_messages_key="question", history_messages_key="history")

* :class:`GatedRunnableWithMessageHistory` is a drop-in with the same constructor
  as ``RunnableWithMessageHistory`` that does exactly that for you.

Both replace the history in the chain's input with the gated view (system
messages, the selected earlier turns, the open turn) and leave the stored history
alone.  With a :class:`~langchain_gatekeeper.GatekeeperChatMessageHistory` whose
messages the chain's history matches position by position (same roles and texts;
ids may be absent), the view comes from the history's own incremental index; with
any other ``BaseChatMessageHistory`` (or no history at all) the gate keeps an index
of the lists it is given, in memory, keyed by the turns' content (the agent
middleware's :class:`~langchain_gatekeeper.agent_view.GatedView`), so a list that
grew by one turn costs one turn to index.
``RunnableWithMessageHistory``'s own bookkeeping still sees the full, ungated input
(the gate sits *inside* the runnable it watches), so the user's message is stored
exactly once in every mode.

**Deprecation decision.**  ``RunnableWithMessageHistory`` is deprecated in
langchain-core 1.x (LangGraph persistence, or for this library the agent
middleware, replace it) and warns on every construction.  The drop-in
*subclasses* it, so it stays an ``isinstance`` of it, keeps its constructor,
config specs, schemas and exactly its history bookkeeping (the part that must
never lose or duplicate a message), and wraps ``runnable`` as
``topic_gate(...) | runnable``.  Its construction runs under langchain-core's
``suppress_langchain_deprecation_warning`` (a context variable, not a global
warnings filter, so other code is unaffected): a user who picked our class
cannot act on the upstream warning, and the README points classic-chain users to
the agent middleware instead.  A user who builds a plain
``RunnableWithMessageHistory`` around :func:`topic_gate` still sees upstream's
warning, which they can act on.  It is tied to langchain-core 1.x (the
distribution pins ``langchain-core<2``), where ``RunnableWithMessageHistory`` exists.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import warnings
import weakref
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from typing import Any

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import BaseMessage, HumanMessage
from langchain_core.runnables import Runnable, RunnableBinding, RunnableConfig, RunnableLambda
from langchain_core.runnables.base import coerce_to_runnable
from langchain_core.runnables.history import RunnableWithMessageHistory

from context_gatekeeper import GateOptions, InvalidInputError, InvalidTypeError, TranscriptGate

from .agent_view import NO_TEXT_QUERY, GatedView, adapter_options, current_query
from .convert import as_messages, from_core_messages, role_of, same_messages, text_of
from .gate_keys import TopicGateKeysError, infer_keys, input_key_beside
from .history import GatekeeperChatMessageHistory

__all__ = ["topic_gate", "GatedRunnableWithMessageHistory", "TopicGateKeysError", "infer_keys"]


def _input_messages(value: Any) -> list[BaseMessage]:
    """The new input as messages (RunnableWithMessageHistory's rules: str, message, list), a
    list's message-likes (``(role, text)`` tuples, role/content dicts) converted as the chain's
    model converts them; of a list LangChain cannot read whole, its messages only."""
    if isinstance(value, str):
        return [HumanMessage(content=value)]
    if isinstance(value, BaseMessage):
        return [value]
    if isinstance(value, (list, tuple)):
        try:
            return as_messages(value)
        except InvalidInputError:
            return [m for m in value if isinstance(m, BaseMessage)]
    return []


def _query(new: Sequence[BaseMessage]) -> str:
    """The query of the new messages: the text of their human messages (a pasted text, then
    the question: one turn), else of the last message."""
    if not any(role_of(m) == "user" for m in new):
        return text_of(new[-1].content) if new else ""
    return current_query(new, 0)


class _TopicGate:
    """The work behind :func:`topic_gate` (one instance per gate Runnable).

    The transformation is written once, as a generator that yields each
    ``(prior, query, history)`` to gate and receives the gated list: :meth:`invoke`
    answers it with the sync gating, :meth:`ainvoke` (with an embedder) with the
    async one, which awaits the embedding calls."""

    def __init__(self, input_key: str | None, history_key: str | None, options: GateOptions | None) -> None:
        self.input_key = input_key
        self.history_key = history_key
        self.options = options
        """The checked gate settings (``None``: a GatekeeperChatMessageHistory gates with its own)."""
        self.embedder = options.embedder if options is not None else None
        self._gates: weakref.WeakKeyDictionary[GatekeeperChatMessageHistory, TranscriptGate] = weakref.WeakKeyDictionary()
        """This gate's index per history object, while the object lives (keyed by the history,
        not its transcript, which the index holds: the entry goes with the history)."""
        self._lock = threading.Lock()
        views, self.vectors = adapter_options(options if options is not None else GateOptions())
        # over a history's transcript: the same settings and embedder, but the vectors go to the
        # history's store (unless a vector_cache was given)
        self._history_options = None if options is None else views.with_(vector_cache=options.vector_cache)
        """Turn vectors shared by the indexes of plain lists (``None`` without an embedder)."""
        self.views = GatedView(views, max_threads=256, keyed_by="content")
        """Indexes of plain lists, one per chat history object (or one without), kept across calls."""

    # -- entry points -------------------------------------------------------------------
    def invoke(self, value: Any, config: RunnableConfig) -> Any:
        """Replace the history in ``value`` with the gated view (sync)."""
        hist = _history_of(config)
        stored = None if hist is None or isinstance(hist, GatekeeperChatMessageHistory) else len(hist.messages)
        return _drive(self._transform(value, hist, stored), self._gated)

    async def ainvoke(self, value: Any, config: RunnableConfig) -> Any:
        """Async :meth:`invoke`: the history is awaited; without an embedder the gating runs
        in a worker thread, with one the embedding calls are awaited."""
        hist = _history_of(config)
        stored = None
        semantic = self.embedder is not None or (isinstance(hist, GatekeeperChatMessageHistory) and hist.gate.semantic)
        if isinstance(hist, GatekeeperChatMessageHistory):
            stored = len(await hist.amessage_ids()) if semantic else None
        elif hist is not None:
            stored = len(await hist.aget_messages())
        if not semantic:
            return await asyncio.to_thread(lambda: _drive(self._transform(value, hist, stored), self._gated))
        steps = self._transform(value, hist, stored)
        try:  # _drive, awaiting each answer
            request = next(steps)
            while True:
                request = steps.send(await self._agated(*request))
        except StopIteration as done:
            return done.value

    # -- the transformation -------------------------------------------------------------
    def _transform(self, value: Any, hist: BaseChatMessageHistory | None, stored: int | None) -> Steps:
        input_key, history_key = self.input_key, self.history_key
        if input_key is None and history_key is None and isinstance(value, Mapping):
            input_key, history_key = infer_keys(value)
        if history_key is not None:
            if not isinstance(value, Mapping) or history_key not in value:
                raise InvalidInputError(
                    f"topic_gate(history_messages_key={history_key!r}) expects a dict input with "
                    f"that key, got {type(value).__name__}"
                    + (f" with keys {sorted(value)}" if isinstance(value, Mapping) else "")
                )
            if input_key is None:
                input_key = input_key_beside(value, history_key)
            elif input_key not in value:
                raise InvalidInputError(
                    f"topic_gate(input_messages_key={input_key!r}) expects a dict input with that key, "
                    f"got keys {sorted(value)}"
                )
            query = _query(_input_messages(value[input_key]))
            return {**value, history_key: (yield list(value[history_key]), query, hist)}
        if input_key is not None:
            if not isinstance(value, Mapping) or input_key not in value:
                raise InvalidInputError(
                    f"topic_gate(input_messages_key={input_key!r}) expects a dict input with that key, "
                    f"got {type(value).__name__}"
                )
            return {**value, input_key: (yield from self._gated_list(value[input_key], hist, stored))}
        if isinstance(value, (list, tuple)):
            return (yield from self._gated_list(value, hist, stored))
        return value  # a prompt value or a string: nothing to gate

    def _gated_list(self, value: Any, hist: BaseChatMessageHistory | None, stored: int | None) -> Steps:
        """History followed by new messages: gate the history, keep the new messages."""
        messages = _input_messages(value)
        if not isinstance(value, (list, tuple)) or len(messages) != len(value):
            return value
        if isinstance(hist, GatekeeperChatMessageHistory) and stored is None:
            stored = len(hist.transcript.messages)
        if stored is None or stored > len(messages):
            start = self.views.turn_start(messages)  # the unanswered human messages at the end
            stored = start if start is not None else max(len(messages) - 1, 0)
        prior, new = messages[:stored], messages[stored:]
        return (yield prior, _query(new), hist) + new

    def _gated(self, prior: list[BaseMessage], query: str, hist: BaseChatMessageHistory | None) -> list[BaseMessage]:
        """The gated view of ``prior`` for ``query`` (``prior`` itself when it is empty); a
        blank ``query`` (a message with no text) is :data:`~.agent_view.NO_TEXT_QUERY`."""
        if not prior:
            return list(prior)
        query = query if query.strip() else NO_TEXT_QUERY
        if isinstance(hist, GatekeeperChatMessageHistory):
            # matched by position (ids may be absent): the history's incremental index answers
            if same_messages(prior, hist.transcript.messages):
                gate = self._gate_for(hist)
                return from_core_messages(gate.select_messages(query, include_open="fits"))
        return self.views.gated(prior, query, thread=None if hist is None else id(hist))

    async def _agated(self, prior: list[BaseMessage], query: str, hist: BaseChatMessageHistory | None) -> list[BaseMessage]:
        """:meth:`_gated` with the store read in a worker thread and the embedding awaited."""
        if not prior:
            return list(prior)
        query = query if query.strip() else NO_TEXT_QUERY
        if isinstance(hist, GatekeeperChatMessageHistory):
            if same_messages(prior, await hist.transcript.aget_messages()):
                gate = self._gate_for(hist)
                if gate.semantic:
                    return from_core_messages(await gate.aselect_messages(query, include_open="fits"))
                return await asyncio.to_thread(  # converted there too: a long selection stalls the loop
                    lambda: from_core_messages(gate.select_messages(query, include_open="fits"))
                )
        return await self.views.agated(prior, query, thread=None if hist is None else id(hist))

    def _gate_for(self, hist: GatekeeperChatMessageHistory) -> TranscriptGate:
        """The index that answers for ``hist``: its own without gate options, else this gate's."""
        if self._history_options is None:
            return hist.gate
        with self._lock:
            gate = self._gates.get(hist)
            if gate is None:
                gate = self._gates[hist] = TranscriptGate(hist.transcript, options=self._history_options)
            return gate


Steps = Generator[tuple[list[BaseMessage], str, "BaseChatMessageHistory | None"], list[BaseMessage], Any]


def _drive(steps: Steps, gated: Callable[..., list[BaseMessage]]) -> Any:
    """Run a transformation, answering each request with ``gated(prior, query, history)``."""
    try:
        request = next(steps)
        while True:
            request = steps.send(gated(*request))
    except StopIteration as done:
        return done.value


def _history_of(config: RunnableConfig | None) -> BaseChatMessageHistory | None:
    """The history RunnableWithMessageHistory put in the config, if any."""
    hist = ((config or {}).get("configurable") or {}).get("message_history")
    return hist if isinstance(hist, BaseChatMessageHistory) else None


def topic_gate(
    *,
    input_messages_key: str | None = None,
    history_messages_key: str | None = None,
    options: GateOptions | None = None,
    embedder: Any = None,
    embed_timeout: float | None = None,
    **gate_options: Any,
) -> Runnable[Any, Any]:
    """A Runnable that replaces the history in its input with the topic-gated view.

    Use the same keys as the ``RunnableWithMessageHistory`` around it:

    * dict mode with ``history_messages_key``: ``input[history_messages_key]`` is
      replaced by the view for the query in ``input[input_messages_key]``;
    * list mode (no ``history_messages_key``): the input (or ``input[input_messages_key]``)
      is the history followed by the new messages; the history part is gated and
      the new messages are kept.  The split comes from the session history in the
      config; without one, the new messages start at the last human message.

    With neither key, a dict input has them inferred when its shape is unambiguous
    (:func:`~langchain_gatekeeper.gate_keys.infer_keys`): one list of messages and one
    message, or one string beside a list not ending with a human message (history and
    input); or one list of messages alone (history followed by the new messages).  With
    ``history_messages_key`` alone the input is ``"input"`` (upstream's default), else
    the one other key holding a string or messages.  Any other dict, including a list
    ending with a human message beside a lone string (is the string the question or
    another field?), raises :class:`TopicGateKeysError` (a ``TypeError``) naming the
    keys to pass: the history is never gated for a guessed query, nor passed ungated.

    Args:
        input_messages_key: the key of the new input in a dict input.
        history_messages_key: the key of the history in a dict input.
        options: the gate's settings as one :class:`~context_gatekeeper.GateOptions`
            instead of the keywords below (not both); its ``on_overflow`` left ``None``
            means ``"keep_pinned"``.
        embedder: turns on the semantic channel: a LangChain ``Embeddings``, a LlamaIndex
            ``BaseEmbedding``, or a callable ``list[str] -> list[list[float]]`` (numpy
            needed).  Over a :class:`GatekeeperChatMessageHistory` its vectors are saved in
            the history's store; over plain lists they are kept in memory by content hash,
            shared by every history this gate sees (a rebuilt view embeds nothing it has
            seen).  ``ainvoke`` awaits the embedder's async twins.  ``None`` (default):
            lexical, exactly as without it (a history given its own ``embedder=`` still
            uses it when no other option is passed).
        embed_timeout: seconds one embedding call may take before the view is selected
            lexically; ``None``: wait.
        **gate_options: other :class:`~context_gatekeeper.GateOptions` fields
            (``token_budget``, ``token_counter``, ``on_overflow`` defaulting to
            ``"keep_pinned"``, ``params``, ``preset``) and selection parameters.  Without
            any (and without ``options``), a :class:`GatekeeperChatMessageHistory` gates
            with its own options.

    Invalid options are rejected here, once, not on the first call.
    """
    given = {k: v for k, v in dict(gate_options, embedder=embedder, embed_timeout=embed_timeout).items() if v is not None}
    checked = GateOptions.of(options, **given) if options is not None or given else None
    gate = _TopicGate(input_messages_key, history_messages_key, checked)
    return RunnableLambda(gate.invoke, afunc=gate.ainvoke, name="topic_gate")


@contextlib.contextmanager
def _upstream_deprecation_silenced() -> Iterator[None]:
    """Silence langchain-core's RunnableWithMessageHistory warning for our own construction only."""
    try:
        from langchain_core._api.deprecation import suppress_langchain_deprecation_warning
    except ImportError:  # pragma: no cover - older or newer langchain-core
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="RunnableWithMessageHistory is deprecated")
            yield
        return
    with suppress_langchain_deprecation_warning():
        yield


class _GateThen(RunnableBinding):
    """``topic_gate(...) | runnable`` whose listeners attach the way ``runnable`` attaches its own.

    ``RunnableWithMessageHistory`` stores the turn from listeners it attaches with
    ``runnable.with_listeners`` / ``with_alisteners``.  They must wrap the gate too (they
    read the full, ungated input), yet a runnable may customise how its listeners run
    (upstream's tests use one whose listener errors are raised): the binding ``runnable``
    would make is moved onto the whole sequence.
    """

    inner: Runnable[Any, Any]

    def _moved(self, probe: Runnable[Any, Any], fallback: Any) -> Runnable[Any, Any]:
        if isinstance(probe, RunnableBinding) and probe.bound is self.inner:
            return RunnableBinding(
                bound=self.bound, kwargs=probe.kwargs, config=probe.config, config_factories=probe.config_factories
            )
        return fallback()

    def with_listeners(self, *, on_start: Any = None, on_end: Any = None, on_error: Any = None) -> Runnable[Any, Any]:
        """Listeners around gate and runnable, attached as ``runnable`` attaches them."""
        probe = self.inner.with_listeners(on_start=on_start, on_end=on_end, on_error=on_error)
        return self._moved(probe, lambda: self.bound.with_listeners(on_start=on_start, on_end=on_end, on_error=on_error))

    def with_alisteners(self, *, on_start: Any = None, on_end: Any = None, on_error: Any = None) -> Runnable[Any, Any]:
        """Async :meth:`with_listeners`."""
        probe = self.inner.with_alisteners(on_start=on_start, on_end=on_end, on_error=on_error)
        return self._moved(probe, lambda: self.bound.with_alisteners(on_start=on_start, on_end=on_end, on_error=on_error))


class GatedRunnableWithMessageHistory(RunnableWithMessageHistory):
    """``RunnableWithMessageHistory`` that sends the wrapped runnable only the gated history.

    Same constructor as ``RunnableWithMessageHistory`` (``runnable``,
    ``get_session_history``, ``input_messages_key``, ``output_messages_key``,
    ``history_messages_key``, ``history_factory_config``), plus ``gate_options``:
    :class:`~context_gatekeeper.ContextGatekeeper` options for the gate, ``embedder``
    and ``embed_timeout`` included (see :func:`topic_gate`).  The stored history keeps every message; each call stores
    the user's message and the answer once, as the upstream class does.
    Constructing it raises no deprecation warning (see the module docstring).
    """

    gate_options: dict[str, Any] | None = None
    """ContextGatekeeper options for the gate; ``None`` uses the session history's own."""

    def __init__(
        self,
        runnable: Any,
        get_session_history: Any,
        *,
        input_messages_key: str | None = None,
        output_messages_key: str | None = None,
        history_messages_key: str | None = None,
        history_factory_config: Any = None,
        gate_options: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if gate_options is not None and not isinstance(gate_options, Mapping):
            raise InvalidTypeError(
                f"gate_options must be a dict of gate settings, got {type(gate_options).__name__}; pass e.g. "
                "gate_options={'token_budget': 2000}, or a GateOptions record as gate_options={'options': record}"
            )
        gate = topic_gate(
            input_messages_key=input_messages_key, history_messages_key=history_messages_key, **dict(gate_options or {})
        )
        inner = coerce_to_runnable(runnable)
        with _upstream_deprecation_silenced():
            super().__init__(
                _GateThen(bound=gate | inner, inner=inner),
                get_session_history,
                input_messages_key=input_messages_key,
                output_messages_key=output_messages_key,
                history_messages_key=history_messages_key,
                history_factory_config=history_factory_config,
                gate_options=dict(gate_options) if gate_options else None,
                **kwargs,
            )

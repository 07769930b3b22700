"""A LlamaIndex chat memory with topic-gated ``get`` and versioned natural-language edits.

:class:`GatekeeperMemory` is a ``BaseMemory``: pass it as ``memory=`` to any chat
engine or agent.  ``put`` / ``set`` / ``reset`` write to a core
:class:`~context_gatekeeper.Transcript` (every change a recorded revision);
``get(input)`` returns only what the current message needs: every system message
(pinned content: the leading ones, then those put later, in order), the earlier turns
the topic gate selects (a tool call always with its result), and the current turn
whole, within ``token_limit``.  Everything else
(``edit``, ``undo``, ``history``, ...) is the core's
:class:`~context_gatekeeper.transcripts.versioned.VersionedTranscriptMixin`, delegating to the
transcript; ``to_dict`` / ``from_dict``, pickling and ``copy.deepcopy`` call the plain
functions of :mod:`~.serialisation`.

How ``get`` selects: sync ``get`` reads and selects under the memory's lock; with an
embedder, ``aget`` reads under the lock in a worker thread and awaits the selection's
embedding calls with the lock released.  Both cut the current turn, as read, out of the
selected earlier turns by its key (its first message), with whatever follows it: an answer
``put`` meanwhile (or written by another process before the gate read the store) never
comes back ahead of its question.

>>> from llama_index.core.llms import ChatMessage
>>> memory = GatekeeperMemory.from_defaults(token_limit=2000)
>>> memory.put_messages([ChatMessage(role="user", content="How long should a Redis lock TTL be?"),
...                      ChatMessage(role="assistant", content="Longer than the longest job.")])
>>> memory.put_messages([ChatMessage(role="user", content="By the way, best espresso grind?"),
...                      ChatMessage(role="assistant", content="Fine, like table salt.")])
>>> memory.put(ChatMessage(role="user", content="And the Redis lock watchdog?"))
>>> [m.content for m in memory.get()]
['How long should a Redis lock TTL be?', 'Longer than the longest job.', 'And the Redis lock watchdog?']
>>> len(memory.get_all())
5
"""

from __future__ import annotations

import asyncio
import dataclasses
import difflib
import inspect
import os
import threading
from collections.abc import Callable, Hashable, Sequence, Sized
from contextlib import AbstractContextManager
from typing import Any, NamedTuple

from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.bridge.pydantic import Field, PrivateAttr, ValidationError, field_validator
from llama_index.core.memory.types import BaseMemory
from llama_index.core.schema import QueryBundle

from context_gatekeeper import (
    BudgetError,
    GateOptions,
    InvalidInputError,
    InvalidTypeError,
    Message,
    Selection,
    SelectionParams,
    Store,
    Strategy,
    Transcript,
    TranscriptGate,
    resolve_token_counter,
)
from context_gatekeeper.integration import (
    DEFAULT_MAX_DELETION_SHARE, BoundedCache, MessageTurn, VersionedTranscriptMixin, group_turns, require_budget,
    names_postgres, require_items, text_key,
)

from . import serialisation, stored
from .convert import call_text, from_core_messages, match_ids, to_core, validation_problems
from .models import given_edit_model, resolve_edit_model
from .serialisation import add_note, require_session_id

__all__ = ["GatekeeperMemory", "DEFAULT_TOKEN_LIMIT", "COUNTS"]

DEFAULT_TOKEN_LIMIT = 3000
_CONTEXT_WINDOW_RATIO = 0.75  # as ChatMemoryBuffer.from_defaults(llm=...)
_EXCEEDS = "Initial token count exceeds token limit"
_CHAT_MESSAGES = "pass a list of ChatMessage(role=..., content=...)"
_COPY_UPDATES = ("token_limit", "session_id")
"""The fields ``model_copy(update=...)`` may name (``tokenizer_fn`` is not one: the budget
counts with the counter the memory was built with)."""
QueryInput = str | ChatMessage | QueryBundle | None
"""What ``get`` / ``aget`` take as ``input``."""

COUNTS: BoundedCache[tuple[Hashable, str], int] = BoundedCache(maxsize=20_000)
"""Token counts by ``(counter, text)``, shared by every memory using one counter: a message
is counted once, not on every ``get``.  Keyed by the counter's ``BoundedCache.identity_key``
and the text's :func:`~context_gatekeeper.integration.text_key`, so no key holds a text (a
pasted log) or keeps a counter alive (a ``tokenizer_fn`` made per memory is collected with
it; its counts age out, never read as a later counter's): entries are small and alike, about
0.3 kB each, some 6 MB when full."""


def _options_budget(options: GateOptions | None) -> int | None:
    """The ``token_budget`` the caller set in ``options``, or ``None`` when it was left at
    GateOptions' default (a record built for its other settings): that one is not a budget the
    caller chose, so ``token_limit=``, ``llm=`` sizing or :data:`DEFAULT_TOKEN_LIMIT` apply
    instead (:attr:`GateOptions.budget_given`; a budget passed as 4000 is the caller's)."""
    if options is None or not options.budget_given:
        return None
    return options.token_budget


def _counted(count: Callable[[str], int], counter: Hashable, text: str) -> int:
    """``count(text)``, from :data:`COUNTS` when known (``counter``: ``count``'s identity key)."""
    return COUNTS.get_or_compute((counter, text_key(text)), lambda: count(text))


class GatekeeperMemory(VersionedTranscriptMixin, BaseMemory):
    """Chat memory with topic-gated selection and versioned natural-language edits.

    Build it with :meth:`from_defaults`.  ``get`` returns fresh copies every call, so
    callers may mutate what they get; writes may come from several threads (a
    streaming engine writes its answer from a worker thread) and none is lost: each
    ``put`` is one append under the memory's lock, and ``get`` reads one consistent
    state under the same lock.

    Message ids live in the core only; returned messages carry none (LLM integrations
    send ``additional_kwargs`` to the provider).  ``put`` gives new messages fresh ids;
    ``set`` keeps the ids of messages it finds unchanged (see :func:`~.convert.match_ids`),
    so ``set(get_all())`` records nothing and undo/diff stay exact.

    Where it differs from ``ChatMemoryBuffer`` on purpose: ``get`` gates (an earlier
    turn unrelated to the message is left out, even when it would fit); the budget
    counts ``message_overhead`` tokens per message (3 by default, the chat format's
    cost; ``ChatMemoryBuffer`` counts none: pass ``message_overhead=0`` to count alike)
    and the name and arguments of each tool call;
    and it has none of ``Memory``'s memory blocks or flushing.  Pickling and
    ``copy.deepcopy`` keep the session (see :mod:`~.serialisation`).

    ``embedder=`` (a LlamaIndex ``BaseEmbedding``, a LangChain ``Embeddings``, or a
    callable ``list[str] -> list[list[float]]``) and ``embed_timeout=`` turn on the
    semantic channel (see :meth:`from_defaults`); without them ``get`` is lexical.

    Attributes:
        token_limit: tokens that ``get`` may return in all: pinned content (leading
            system messages), the selected earlier turns and the current turn, less the
            ``initial_token_count`` an engine passes.  Priced: each message's text blocks,
            the name and arguments of each tool call, and ``message_overhead``; not priced
            (as ``ChatMemoryBuffer`` prices none of them): ``DocumentBlock`` documents,
            ``ThinkingBlock`` reasoning, ``CitableBlock`` / ``CitationBlock`` content,
            images, audio and video, and the text standing in for a stored part LlamaIndex
            cannot hold.  Turns carrying those can make ``get`` return many times this
            limit: keep documents in a retriever (an index and a node postprocessor, which
            price their text), or lower the limit or raise ``message_overhead`` to leave
            room for them.
        session_id: which conversation of the store this is; it cannot be reassigned (build
            another memory for another session).
        tokenizer_fn: ``text -> sequence of tokens``; chat engines count their prefix
            messages with it.  It counts exactly as the memory's budget does (one of
            ``tokenizer_fn=`` / ``token_counter=`` sets both; passing both is refused).
    """

    token_limit: int = Field(default=DEFAULT_TOKEN_LIMIT)
    session_id: str = Field(default="default", min_length=1)
    # __init__ always sets it; pydantic types Field(default=None) as None
    tokenizer_fn: Callable[[str], Sequence[Any]] = Field(default=None, exclude=True)  # type: ignore[assignment]

    _transcript: Transcript = PrivateAttr()
    _gate: TranscriptGate = PrivateAttr()
    _count: Callable[[str], int] = PrivateAttr()
    _lock: Any = PrivateAttr()
    _default_model: Any = PrivateAttr(default=None)
    _options: dict[str, Any] = PrivateAttr(default_factory=dict)
    _opened_store: Any = PrivateAttr(default=None)  # a store an unpickle or deepcopy opened for this memory
    _live_token: str | None = PrivateAttr(default=None)  # the live-export token to_dict last wrote (see .stored)
    _closed: bool = PrivateAttr(default=False)  # close() was called: to_dict writes no live-export token
    _owns_store: bool = PrivateAttr(default=False)  # the transcript opened its store (none or a path was given)

    def __init__(
        self,
        *,
        store: Store | str | os.PathLike[str] | None = None,
        model: Any = None,
        llm: Any = None,
        strategy: Strategy = "patch",
        max_deletion_share: float = DEFAULT_MAX_DELETION_SHARE,
        token_counter: Any = None,
        embedder: Any = None,
        embed_timeout: float | None = None,
        options: GateOptions | None = None,
        **data: Any,
    ) -> None:
        data.pop("class_name", None)  # model_dump() output, as LlamaIndex's from_dict drops it
        _refuse_unknown_keywords(data)  # before GateOptions.of, whose list names what this memory refuses
        fields = {k: data.pop(k) for k in ("token_limit", "session_id", "tokenizer_fn") if k in data}
        if "session_id" in fields:
            require_session_id(fields["session_id"])
        given_tokenizer = fields.pop("tokenizer_fn", None)
        if given_tokenizer is not None and token_counter is not None and not _paired(given_tokenizer, token_counter):
            raise InvalidTypeError(
                "pass tokenizer_fn= or token_counter=, not both: chat engines count their prefix (the system "
                "prompt) with memory.tokenizer_fn and the budget must count alike. tokenizer_fn= (text -> sequence "
                "of tokens) also sets the budget's count (the length of what it returns); token_counter= "
                "(text -> int) also sets tokenizer_fn (that many tokens)"
            )
        tokenizer_fn = _require_tokenizer(given_tokenizer)
        semantic: dict[str, Any] = {
            k: v for k, v in (("embedder", embedder), ("embed_timeout", embed_timeout)) if v is not None
        }
        if "token_budget" in data:
            raise InvalidTypeError(
                "GatekeeperMemory's budget is token_limit= (everything get() returns, the current turn "
                "included); pass token_limit, not token_budget"
            )
        gate = GateOptions.of(options, **data, **semantic)  # checked once; options= beside keywords is refused
        if options is not None:
            limit, budget = fields.get("token_limit"), _options_budget(options)
            if limit is not None and budget is not None and limit != budget:  # both set, and different
                raise InvalidTypeError(
                    f"token_limit={limit!r} and options.token_budget={budget!r} disagree; "
                    "pass one of them (options.with_(token_budget=...) changes a copy)"
                )
            if token_counter is not None or tokenizer_fn is not None:
                raise InvalidTypeError(
                    "pass the token counter in options= (options.with_(token_counter=...)) or as token_counter= / "
                    "tokenizer_fn= without options=, not both: the budget and the edits must count alike"
                )
            if limit is None and budget is not None:  # GateOptions' default budget is no choice: 3000 here
                fields["token_limit"] = budget
            token_counter = options.token_counter
        if "token_limit" in fields:  # the library's one budget rule, with its own error
            require_budget(fields["token_limit"], "token_limit")
        try:
            super().__init__(**fields)
        except ValidationError as error:  # the library's error, not pydantic's
            problems = validation_problems(error)
            raise InvalidInputError(f"GatekeeperMemory: {problems}; see help(GatekeeperMemory.from_defaults)") from None
        default_model = given_edit_model(model, llm)
        if token_counter is None and tokenizer_fn is not None:
            token_counter = _token_count_of(tokenizer_fn)
        count = resolve_token_counter(token_counter)
        self.tokenizer_fn = _pair(tokenizer_fn or (lambda text: range(count(text))), count)
        self._count = count
        self._lock = threading.RLock()
        self._default_model = default_model
        # how a copy or an export rebuilds this memory: the resolved settings (a preset= or
        # tunable keyword as the params it gave), whichever way they were passed
        self._options = {
            "on_overflow": gate.overflow("keep_pinned"), "message_overhead": gate.message_overhead,
            "params": gate.params,
            **{k: v for k in ("embedder", "embed_timeout", "vector_cache") if (v := getattr(gate, k)) is not None},
            "strategy": strategy, "max_deletion_share": max_deletion_share,
        }
        gate = gate.with_(token_budget=self.token_limit, token_counter=count, on_overflow=gate.overflow("keep_pinned"))
        self._owns_store = not isinstance(store, Store)
        self._transcript = stored.RevokingTranscript(  # a purge revokes the session's live-export token
            self.session_id, store=store, strategy=strategy, max_deletion_share=max_deletion_share, token_counter=count
        )
        self._gate = TranscriptGate(self._transcript, options=gate)

    @field_validator("token_limit", mode="before")
    @classmethod
    def _one_budget_rule(cls, value: Any) -> Any:
        """The library's one budget rule (an ``int >= 0``, bool refused) where pydantic builds the
        memory itself (``model_validate``); ``__init__`` checks first, raising ``BudgetError``."""
        return require_budget(value, "token_limit")

    def __setattr__(self, name: str, value: Any) -> None:
        """``session_id`` is refused (see :func:`_refuse_session_change`); ``token_limit``
        is checked by the library's budget rule (``BudgetError``); a new ``tokenizer_fn`` is
        refused (the budget and the edits count with the counter the memory was built with,
        and an engine counting its prefix with another would not match them)."""
        if name == "session_id" and value != self.session_id:
            _refuse_session_change(self.session_id, value)
        if name == "tokenizer_fn" and self.__dict__.get("tokenizer_fn") not in (None, value):  # set once, by __init__
            raise InvalidTypeError(
                "a GatekeeperMemory counts with the tokenizer it was built with; build a new one with "
                "GatekeeperMemory.from_defaults(tokenizer_fn=...) (or token_counter=) to count otherwise"
            )
        if name == "token_limit":
            value = require_budget(value, "token_limit")
        super().__setattr__(name, value)

    def model_copy(self, *, update: Any = None, deep: bool = False) -> "GatekeeperMemory":
        """A copy as :meth:`__deepcopy__` makes one, ``deep`` or not (on the same session of the
        same store): a shallow copy would share this memory's transcript, and closing it would
        close a store this memory opened.  ``update`` may
        change ``token_limit`` (checked), never ``session_id``: build a memory for the other session.
        Any other name raises ``InvalidTypeError``, before anything is copied."""
        changes = dict(update or {})
        unknown = sorted(str(name) for name in changes if name not in _COPY_UPDATES)
        if unknown:
            raise InvalidTypeError(
                f"model_copy(update=...) got {unknown}; a GatekeeperMemory copy may change only "
                f"{list(_COPY_UPDATES)} (session_id only to the same value): pass other settings to "
                "GatekeeperMemory.from_defaults to build a memory with them"
            )
        if changes.get("session_id", self.session_id) != self.session_id:  # before a copy opens a connection
            _refuse_session_change(self.session_id, changes["session_id"])
        if "token_limit" in changes:
            require_budget(changes["token_limit"], "token_limit")
        copied = self.__deepcopy__()
        for name, value in changes.items():
            setattr(copied, name, value)
        return copied

    @classmethod
    def class_name(cls) -> str:
        """The name LlamaIndex serialisers record."""
        return "GatekeeperMemory"

    @classmethod
    def from_defaults(
        cls,
        chat_history: list[ChatMessage] | None = None,
        llm: Any = None,
        token_limit: int | None = None,
        *,
        model: Any = None,
        store: Store | str | os.PathLike[str] | None = None,
        session_id: str = "default",
        tokenizer_fn: Callable[[str], Sequence[Any]] | None = None,
        token_counter: Any = None,
        embedder: Any = None,
        embed_timeout: float | None = None,
        options: GateOptions | None = None,
        **keywords: Any,
    ) -> "GatekeeperMemory":
        """A memory with sensible defaults.

        **What** ``llm=`` **means here.**  In ``ChatMemoryBuffer.from_defaults(llm=...)`` the
        LLM only sizes the buffer (``token_limit`` = 3/4 of its context window).  Here it
        does that too, and it is also the memory's **editing model**: ``llm=`` is an alias of
        ``model=``, the model :meth:`edit` calls when none is passed to it (passing both,
        and different, raises ``TypeError``).  It is never the chat model (the engine or
        agent keeps its own) and never counts tokens (``tokenizer_fn`` / ``token_counter``
        do; default tiktoken ``cl100k_base``).  Nothing calls it until you call ``edit``.
        To size the memory from your chat LLM but edit with another model, pass
        ``token_limit=`` yourself and ``model=`` the editing model.

        Args:
            chat_history: messages to start from (``set``: replaces what the session holds).
            llm: alias of ``model=`` (see above); a LlamaIndex LLM also sets ``token_limit``
                to 3/4 of its context window when ``token_limit`` is not given.
            token_limit: see the class attributes (default 3000).
            model: default editing model (any LlamaIndex LLM or the core's model protocol);
                with neither ``model=`` nor ``llm=``, ``edit`` uses Gemini (``GOOGLE_API_KEY``).
            store: ``None`` (in memory), a SQLite file path, or any core ``Store``.
            session_id: the conversation's key in the store (a non-empty str).
            tokenizer_fn / token_counter: how to count tokens, one or the other (default: tiktoken
                ``cl100k_base``, offline); both together raise ``InvalidTypeError``, as the
                budget and ``memory.tokenizer_fn`` (which engines count their prefix with) must
                count alike.  ``tokenizer_fn`` is a callable text -> sequence
                of tokens (as ``ChatMemoryBuffer`` takes it), tried once on a short text
                before the store is opened: anything else, or one that returns a count,
                raises the library's error (a count is ``token_counter=``).
            embedder: turns on the semantic channel for ``get``: a LlamaIndex
                ``BaseEmbedding`` (for example the index's ``embed_model``), a LangChain
                ``Embeddings``, or a callable ``list[str] -> list[list[float]]`` (numpy
                needed).  Each turn is embedded once and its vector saved in the store
                (a SQLite file or PostgreSQL keeps it across restarts), so ``get`` makes
                at most one embedding call, for the query.  ``None``: lexical only.  Not
                pickled (like the editing model); ``copy.deepcopy`` keeps it.
            embed_timeout: seconds one embedding call may take before ``get`` selects
                lexically (``explain(...).semantic_fallback`` is set); ``None``: wait.
            options: the gate's settings as one :class:`~context_gatekeeper.GateOptions`
                (checked once), instead of the keywords; ``on_overflow`` left ``None`` is
                ``"keep_pinned"``.  A ``token_budget`` set in it is the ``token_limit``; one not
                passed to it (``GateOptions.budget_given`` false) counts as not set, so
                ``token_limit=``, ``llm=`` sizing or the default 3000 apply.  A ``token_limit=`` that differs
                from a budget set in it raises ``InvalidTypeError`` (pass one of them).
            **keywords: ``strategy``, ``max_deletion_share``, and any
                :class:`~context_gatekeeper.GateOptions` field (``message_overhead``,
                ``params``, ``preset``, selection parameters); ``on_overflow`` defaults to
                ``"keep_pinned"``.
        """
        if token_limit is None:
            token_limit = _options_budget(options)
        if token_limit is None:
            window = getattr(getattr(llm, "metadata", None), "context_window", None)
            token_limit = int(window * _CONTEXT_WINDOW_RATIO) if isinstance(window, int) else DEFAULT_TOKEN_LIMIT
        memory = cls(
            token_limit=token_limit,
            session_id=session_id,
            tokenizer_fn=tokenizer_fn,
            store=store,
            model=model,
            llm=llm,
            token_counter=token_counter,
            embedder=embedder,
            embed_timeout=embed_timeout,
            options=options,
            **keywords,
        )
        if chat_history:
            memory.set(chat_history)
        return memory

    def __repr__(self) -> str:
        return f"GatekeeperMemory(session_id={self.session_id!r}, token_limit={self.token_limit}, head={self._transcript.head})"

    @property
    def transcript(self) -> Transcript:
        """The core transcript behind this memory."""
        return self._transcript

    @property
    def gate(self) -> TranscriptGate:
        """The core gate that selects for ``get``."""
        return self._gate

    @property
    def store(self) -> Store:
        """The core store the transcript lives in."""
        return self._transcript.store

    # -- reading ------------------------------------------------------------------------
    def get(self, input: QueryInput = None, initial_token_count: int = 0, **kwargs: Any) -> list[ChatMessage]:
        """The messages to send now: pinned content, the selected earlier turns, the current turn.

        The query is ``input`` when given (a str, a ``ChatMessage``, or a ``QueryBundle``
        as ``ContextChatEngine.chat(QueryBundle(...))`` passes it: its ``query_str``),
        else the current turn's text.  The current turn is never gated and always returned
        whole, at the end: the last turn when it is still being answered (unanswered, or an
        agent's tool loop: it ends in a tool call or a tool result, as after a multi-agent
        handoff), with the unanswered user messages right before it while together they fit
        ``token_limit`` (a pasted text or an image, then the question, are one turn; older ones
        are gated as earlier turns); else the last turn when there is no ``input``; else there
        is none (an engine's ``get(input=...)`` before it puts the message, even one that
        repeats the last question).  Every system message is pinned content: a system message put
        mid-conversation (a new instruction) is sent on every call, after the leading ones, in
        order, and paid for once.  ``initial_token_count`` (tokens the caller
        adds, such as a system prompt) is taken off ``token_limit``; other keyword
        arguments engines pass are accepted and ignored.  Returns fresh copies.

        The budget counts what is returned message by message: each message's text, the
        name and arguments of its tool calls, and ``message_overhead`` (no other block: see
        ``token_limit`` in the class docstring).  The gate prices a
        turn by its texts (its assistant messages as one), so when what it selected costs
        more as returned, the oldest selected turns are left out, whole, until it fits
        (when the system messages and the current turn alone exceed it, they are returned
        all the same, with no earlier turn).  When that leaves out every selected turn and the
        current turn has no user message, the newest is kept as its question and final answer
        if those fit without its tool calls.

        Raises:
            TypeError: ``input`` is none of the above (``get(5)`` passes 5 as the query;
                write ``get(initial_token_count=5)``).
            InvalidInputError: (a ``ValueError``) ``initial_token_count`` is not an int >= 0.
            BudgetError: (a ``ValueError``) ``initial_token_count`` exceeds
                ``token_limit``, as ``ChatMemoryBuffer.get`` raises; nothing is read.
        """
        self._check_initial(initial_token_count)
        return from_core_messages(self._select(_text_of(input), initial_token_count))

    async def aget(self, input: QueryInput = None, initial_token_count: int = 0, **kwargs: Any) -> list[ChatMessage]:
        """Async :meth:`get` (same arguments, same errors).  The store is read in a worker
        thread; with an embedder the embedding calls are awaited (the embedder's async
        twins), so the event loop is never blocked.

        With an embedder, turns are embedded in the background and scored by their words
        until their vectors arrive, so a ``get`` / ``aget`` soon after a change may select
        otherwise than a later one; ``await memory.gate.aembed_pending()`` (sync:
        ``memory.gate.embed_pending()``) first gives reproducible results."""
        if not self._gate.semantic:
            return await asyncio.to_thread(self.get, input, initial_token_count, **kwargs)
        self._check_initial(initial_token_count)
        return from_core_messages(await self._aselect(_text_of(input), initial_token_count))

    def _check_initial(self, initial_token_count: Any) -> None:
        if isinstance(initial_token_count, bool) or not isinstance(initial_token_count, int) or initial_token_count < 0:
            raise InvalidInputError(f"initial_token_count must be an int >= 0, got {initial_token_count!r}")
        if initial_token_count > self.token_limit:
            error = BudgetError(_EXCEEDS)  # ChatMemoryBuffer's exact text, which callers may match
            add_note(
                error,
                f"initial_token_count={initial_token_count} is more than token_limit={self.token_limit}: pass a "
                "larger token_limit to GatekeeperMemory.from_defaults, or a shorter prompt; nothing was read",
            )
            raise error

    def get_all(self, status: Any = None) -> list[ChatMessage]:
        """Every message of the current state (fresh copies), not the gated view.

        ``status`` is ``Memory.get_all``'s: ``None`` or ``"active"`` (``MessageStatus.ACTIVE``)
        give the current state; ``"archived"`` gives ``[]``, as this memory never
        archives (what edits and ``reset`` removed stays in :meth:`record`).
        """
        return [] if _status(status) == "archived" else from_core_messages(self._transcript.messages)

    async def aget_all(self, status: Any = None) -> list[ChatMessage]:
        """Async :meth:`get_all`."""
        return await asyncio.to_thread(self.get_all, status)

    def explain(self, query: str) -> Selection:
        """The core :class:`~context_gatekeeper.Selection` for ``query`` over the earlier turns."""
        with self._lock:
            return self._gate.explain(query, token_budget=self.token_limit)

    async def aexplain(self, query: str) -> Selection:
        """Async :meth:`explain`: with an embedder the query's embedding is awaited, else the
        store is read in a worker thread."""
        if self._gate.semantic:
            return await self._gate.aexplain(query, token_budget=self.token_limit)
        return await asyncio.to_thread(self.explain, query)

    def close(self) -> None:
        """Close the store if this memory opened it (from a path or URL, or as a pickle's or
        deepcopy's connection to the original's PostgreSQL store), and end its live exports:
        the live-export token its ``to_dict`` wrote is revoked (data carrying it is then
        restored apart, as data from elsewhere is), and its later ``to_dict`` output carries
        none (see :mod:`.stored`)."""
        self._closed = True
        if self._live_token is not None:
            stored.revoke_tokens([self._live_token])
            self._live_token = None
        owned = [s for s in (self._transcript.store if self._owns_store else None, self._opened_store) if s is not None]
        self._transcript.close()
        if self._opened_store is not None:
            self._opened_store.close()
            self._opened_store = None
        for store in owned:  # closed for good: no token of it can attach again
            stored.revoke_store(store)

    # -- writing ------------------------------------------------------------------------
    def put(self, message: ChatMessage) -> None:
        """Append one message (an answer attaches to the user message it answers)."""
        self.put_messages([message])

    def put_messages(self, messages: list[ChatMessage]) -> None:
        """Append ``messages`` as one revision (a tool call lands with its results)."""
        batch = [to_core(m) for m in require_items(messages, "messages", ChatMessage, _CHAT_MESSAGES)]
        if batch:
            with self._lock:
                self._transcript.append(messages=batch)

    def set(self, messages: list[ChatMessage]) -> None:
        """Replace the whole state, as one recorded ``set`` revision (undo restores it).

        Messages that match the current state keep their ids (see
        :func:`~.convert.match_ids`); a ``set`` that changes nothing records nothing.  A
        changed message standing where one holding parts another adapter wrote (or LlamaIndex
        cannot hold) stood may change its text alone: it keeps those parts, as stored; any
        other change of it raises ``InvalidInputError`` and nothing is written.
        """
        messages = require_items(messages, "messages", ChatMessage, _CHAT_MESSAGES)
        with self._lock:
            current = list(self._transcript.messages)
            new = match_ids(current, messages)
            if new != current:
                self._transcript.set(new)

    def reset(self, status: Any = None) -> None:
        """Empty the current state as one recorded revision; ``record()`` keeps every message
        and ``undo()`` brings them back.  (To erase a session, use ``transcript.purge()``.)

        ``status`` is ``Memory.areset``'s: ``None`` or ``"active"`` empty the state;
        ``"archived"`` does nothing (this memory never archives).
        """
        if _status(status) == "archived":
            return
        with self._lock:
            if self._transcript.messages:
                self._transcript.clear()

    async def areset(self, status: Any = None) -> None:
        """Async :meth:`reset`."""
        await asyncio.to_thread(self.reset, status)

    # -- editing and versions (the core's VersionedTranscriptMixin) ----------------------
    @property
    def _versioned_transcript(self) -> Transcript:
        return self._transcript

    def _edit_model(self, model: Any, llm: Any) -> Any:
        """``model`` or ``llm``, else the memory's default, else Gemini (a LlamaIndex LLM
        wrapped once; see :func:`~.models.resolve_edit_model`)."""
        if model is not None or llm is not None:
            return resolve_edit_model(model, llm)
        return resolve_edit_model(self._default_model)

    def _export_messages(self, messages: Sequence[Message]) -> list[ChatMessage]:
        return from_core_messages(messages)

    # -- serialisation (see .serialisation) -----------------------------------------------
    def to_dict(self, **kwargs: Any) -> dict[str, Any]:
        """State and full revision history as JSON-ready data (:func:`.serialisation.to_dict`)."""
        return serialisation.to_dict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any], **kwargs: Any) -> "GatekeeperMemory":
        """Rebuild a memory from :meth:`to_dict` output (:func:`.serialisation.from_dict`: the
        log is checked whole before anything is written; ``kwargs`` are constructor options
        and win over the data's).  The data's store is never opened: pass ``store=``, or
        see :meth:`trusted_stores`.  Data this process exported from a memory that is still
        open, whose log is the session's as it is now (a workflow ``Context`` reused across
        runs), attaches to that store; other data (a checkpoint whose session changed since
        it was saved included) is replayed into a new in-memory store, apart, with a
        ``StoreDetachedWarning`` when it names a SQLite file or PostgreSQL database."""
        return serialisation.from_dict(cls, data, **kwargs)

    @staticmethod
    def trusted_stores(*stores: Store | str | os.PathLike[str]) -> AbstractContextManager[None]:
        """A ``with`` block in which :meth:`from_dict` reattaches a memory whose data names one
        of ``stores`` (SQLite paths or open stores), for restores you do not call yourself:
        ``with GatekeeperMemory.trusted_stores("chats.db"): ctx = Context.from_dict(agent, data)``
        (:func:`.stored.trusted_stores`).  A PostgreSQL connection string is no path and is
        never connected to here, so it raises ``InvalidInputError``: pass the open
        ``PostgresStore`` (nothing is trusted then)."""
        for entry in stores:
            if isinstance(entry, str) and names_postgres(entry):
                raise InvalidInputError(
                    "trusted_stores takes SQLite paths and open stores, got what looks like a PostgreSQL "
                    "connection string; pass the open store instead: "
                    "GatekeeperMemory.trusted_stores(PostgresStore(dsn)) (it is used as it is and left open)"
                )
        return stored.trusted_stores(*stores)

    def __reduce__(self) -> tuple[Any, tuple[type, dict[str, Any]]]:
        """Pickle as the session (:func:`.serialisation.pickled`): never a model, a token
        counter or a password."""
        return serialisation.pickled(self)

    def __copy__(self) -> "GatekeeperMemory":
        """:meth:`__deepcopy__`: a shallow copy would share the transcript, and closing it
        would close a store this memory opened."""
        return self.__deepcopy__()

    def __deepcopy__(self, memo: dict[int, Any] | None = None) -> "GatekeeperMemory":
        """A copy on the same session of the same store (the store is a live handle: agent
        workflows deep-copy their state and keep the copy), keeping the model, the token
        counter and every option (:func:`.serialisation.deep_copy`; for a copy apart, pickle
        an in-memory memory or ``from_dict(memory.to_dict(), store=InMemoryStore())``)."""
        return serialisation.deep_copy(self, memo)

    # -- selection (what get returns) -----------------------------------------------------
    def _plan(self, input_text: str | None, reserved: int) -> _Plan:
        """Under the lock: what ``get`` selects from (see :class:`_Plan`)."""
        if input_text is not None and not input_text.strip():
            input_text = None  # a blank input is no input: the last turn is the query, as for get()
        system, turns, inner = _pinned_apart(self._transcript.messages)
        # the unanswered user messages before the last join it while they fit beside the system messages
        limit = self.token_limit - reserved - self._cost(system)
        current, earlier, exclude = _current_turn(turns, input_text, self._cost, limit)
        query = input_text or (current.texts[0] if current else None)
        tail = list(current.messages) if current else []
        room = max(0, self.token_limit - reserved - self._cost(tail))  # an open turn over the limit leaves none
        keys = exclude or ((current.key,) if current else ())
        outside = self._cost([m for key in keys for m in inner.get(key, ())])
        inside = self._cost([m for messages in inner.values() for m in messages]) - outside
        return _Plan(system, earlier, current, exclude, query, tail, room, outside, inside)

    def _select(self, input_text: str | None, reserved: int) -> list[Message]:
        with self._lock:
            plan = self._plan(input_text, reserved)
            if plan.query is None or not plan.query.strip():
                return self._assembled(plan, self._recent(plan.earlier, plan.room - self._cost(plan.system)))
            chosen = self._gated(plan)
            if plan.inside and not self._fits(plan, chosen):  # system messages whose turns were left out
                chosen = self._gated(plan, pinned=True)
            return self._assembled(plan, chosen)

    async def _aselect(self, input_text: str | None, reserved: int) -> list[Message]:
        """:meth:`_select` with the embedding awaited (the lock is held only to read)."""

        def plan() -> _Plan:
            with self._lock:
                return self._plan(input_text, reserved)

        read = await asyncio.to_thread(plan)
        if read.query is None or not read.query.strip():
            return self._assembled(read, self._recent(read.earlier, read.room - self._cost(read.system)))
        chosen = await self._agated(read)
        if read.inside and not self._fits(read, chosen):
            chosen = await self._agated(read, pinned=True)
        return self._assembled(read, chosen)

    def _gated(self, plan: _Plan, pinned: bool = False) -> list[Message]:
        """The earlier turns the gate selects for ``plan.query`` within :meth:`_Plan.gate_budget`
        as it prices turns (:meth:`_fit` then checks it message by message), with whatever
        system messages it returns (:meth:`_assembled` puts every system message in its place).

        The current turn is cut off by its key (see :func:`_before`), not by the ids of
        its messages as read: an answer ``put`` meanwhile (or from another process
        before the gate read the store) is never returned ahead of its question.  The
        turns a current turn still being answered is made of (``exclude``: an open run of
        unanswered user messages, an agent's tool loop) are never candidates.  An answered
        current turn is indexed like any other: the gate may select it (it matches its own
        question), paying for it from the budget, so its cost as the gate prices it (its
        system messages, ``plan.outside``, included) is handed back first; the caller returns
        it once, at the end.
        """
        gate, query, budget = self._gate, plan.query or "", plan.gate_budget(pinned)
        current, exclude = plan.current, plan.exclude
        if current is None or exclude:
            return _before(gate.select_messages(query, include_open=False, token_budget=budget, exclude_keys=exclude),
                           current)
        handed_back = budget + self._cost(current.messages) + plan.outside
        selected = gate.select_messages(query, include_open=False, token_budget=handed_back)
        cut = _cut(selected, current)
        if cut is None:  # not picked: the others must fit without it
            return _before(gate.select_messages(query, include_open=False, token_budget=budget), current)
        return selected[:cut]

    async def _agated(self, plan: _Plan, pinned: bool = False) -> list[Message]:
        """:meth:`_gated` with the embedding awaited."""
        gate, query, budget = self._gate, plan.query or "", plan.gate_budget(pinned)
        current, exclude = plan.current, plan.exclude
        if current is None or exclude:
            selected = await gate.aselect_messages(query, include_open=False, token_budget=budget, exclude_keys=exclude)
            return _before(selected, current)
        handed_back = budget + self._cost(current.messages) + plan.outside
        selected = await gate.aselect_messages(query, include_open=False, token_budget=handed_back)
        cut = _cut(selected, current)
        if cut is None:
            return _before(await gate.aselect_messages(query, include_open=False, token_budget=budget), current)
        return selected[:cut]

    def _recent(self, turns: list[MessageTurn], budget: int) -> list[Message]:
        """No text to gate on: the latest whole turns that fit ``budget``."""
        kept: list[MessageTurn] = []
        for turn in reversed(turns):
            cost = self._cost(turn.messages)
            if cost > budget:
                break
            kept.append(turn)
            budget -= cost
        return [m for turn in reversed(kept) for m in turn.messages]

    def _fits(self, plan: _Plan, chosen: list[Message]) -> bool:
        """Whether every system message and the turns of ``chosen`` fit ``plan.room``."""
        return self._cost(plan.system) + self._cost(_unpinned(chosen)) <= plan.room

    def _assembled(self, plan: _Plan, chosen: list[Message]) -> list[Message]:
        """What ``get`` returns: every system message (pinned: the leading ones, then those put
        later, in order), the turns of ``chosen`` that fit (:meth:`_fit`), the current turn."""
        needs_user = not any(m.role == "user" for m in plan.tail)
        return self._fit([*plan.system, *_unpinned(chosen)], plan.room, needs_user) + plan.tail

    def _fit(self, earlier: list[Message], room: int, needs_user: bool = False) -> list[Message]:
        """``earlier`` (system messages, then whole earlier turns) within ``room`` tokens
        as :meth:`_cost` counts them, message by message.

        The gate prices a turn by the texts it indexes (one text and one ``message_overhead`` a
        message), which need not be what ``get`` counts (:meth:`_cost`: a ``tokenizer_fn`` of
        its own, tool calls rendered), so what it selected may cost more as ``get`` returns it.  Then the oldest selected turns are left out, whole (a tool call
        never without its result), until the rest fits; the system messages always stay
        (pinned content).  When that would leave out every selected turn and the current turn
        has no user message (``needs_user``: an engine's ``get(input=...)`` before it puts
        the message), the newest selected turn is kept as its question and final answer, if
        they fit without its tool calls (:meth:`_gist`)."""
        if self._cost(earlier) <= room:
            return earlier
        system, turns = group_turns(earlier)
        costs = [self._cost(turn.messages) for turn in turns]
        spare, first = room - self._cost(system), 0
        total = sum(costs)
        while first < len(turns) and total > spare:
            total -= costs[first]
            first += 1
        kept = [m for turn in turns[first:] for m in turn.messages]
        if needs_user and not any(m.role == "user" for m in kept):
            kept = self._gist(turns, spare) or kept
        return system + kept

    def _gist(self, turns: list[MessageTurn], spare: int) -> list[Message]:
        """The newest of ``turns`` that asks something, as its user message and its final
        answer (the last message, an assistant message calling no tool), when the two fit
        ``spare``; else ``[]`` (a question sent without its answer would be asked again)."""
        for turn in reversed(turns):
            first, last = turn.messages[0], turn.messages[-1]
            if first.role == "user":
                if last is first or last.role != "assistant" or call_text(last):
                    return []
                gist = [first, last]
                return gist if self._cost(gist) <= spare else []
        return []

    def _cost(self, messages: Sequence[Message]) -> int:
        """What ``messages`` cost as ``get`` returns them: each message's text and the name and
        arguments of each tool call it makes (:func:`~.convert.call_text`), plus
        ``message_overhead`` per message."""
        overhead, count = self._gate.gatekeeper.message_overhead, self._count
        counter = BoundedCache.identity_key(count)
        total = 0
        for message in messages:
            total += _counted(count, counter, message.content) + overhead
            calls = call_text(message)
            if calls:
                total += _counted(count, counter, calls)
        return total


class _Plan(NamedTuple):
    """What ``get`` selects from, read under the memory's lock.

    Attributes:
        system: every system message, pinned: the leading ones, then those inside turns, in order.
        earlier: the turns before the current one (without their system messages).
        current: the current turn (returned whole, without its system messages), or None.
        exclude: the keys of the turns a current turn still being answered is made of (an open
            run of user messages, an agent's tool loop): the gate must not pick them.
        query: the text to gate on (the input, else the current turn's user text), or None.
        tail: the current turn's messages ([] without one).
        room: tokens left for the system messages and the earlier turns.
        outside: what the system messages inside the current turn cost (the gate never pays them).
        inside: what the system messages inside the earlier turns cost (the gate prices each
            with its turn, not as pinned content).
    """

    system: list[Message]
    earlier: list[MessageTurn]
    current: MessageTurn | None
    exclude: tuple[str, ...]
    query: str | None
    tail: list[Message]
    room: int
    outside: int = 0
    inside: int = 0

    def gate_budget(self, pinned: bool = False) -> int:
        """The gate's budget for the earlier turns: ``room`` less the system messages it does
        not see as pinned.  The gate prices a system message inside an earlier turn with that
        turn, so by default each is paid for only if its turn is selected (exact when it is);
        ``pinned``: paid for up front, whether its turn is selected or not (the selection then
        surely fits, though a selected host pays twice)."""
        return max(0, self.room - self.outside - (self.inside if pinned else 0))


def _pinned_apart(messages: Sequence[Message]) -> tuple[list[Message], list[MessageTurn], dict[str, list[Message]]]:
    """``messages`` as every system message (pinned content: the leading ones, then each one
    put after the first turn, in order), the turns without them, and the system messages
    each turn held, by turn key (the core's :func:`group_turns` keeps a system message put
    mid-conversation in the turn before it; ``get`` sends it at the front, always)."""
    system, turns = group_turns(messages)
    inner = {t.key: [m for m in t.messages if m.role == "system"] for t in turns}
    inner = {key: held for key, held in inner.items() if held}
    if not inner:
        return system, turns, {}
    turns = [MessageTurn(t.key, tuple(m for m in t.messages if m.role != "system")) if t.key in inner else t
             for t in turns]
    return [*system, *(m for held in inner.values() for m in held)], turns, inner


def _unpinned(messages: Sequence[Message]) -> list[Message]:
    """``messages`` without their system messages (sent apart, as pinned content)."""
    return [m for m in messages if m.role != "system"]


def _current_turn(
    turns: list[MessageTurn], input_text: str | None, cost: Callable[[Sequence[Message]], int], limit: int
) -> tuple[MessageTurn | None, list[MessageTurn], tuple[str, ...]]:
    """The current turn, the turns before it, and the keys of the turns it is made of when it
    is still being answered (the gate must not pick them; ``()`` otherwise).

    The last turn is current, returned whole and never gated, when it is still being
    answered: unanswered (a run of user messages) or an agent's tool loop (it ends in a
    tool result or a tool call: after a multi-agent handoff the next agent is sent the
    question, the call and its result).  The unanswered user messages right before it (a
    pasted text or an image, then the question) join it, keyed by the first, while together
    they cost at most ``limit`` (older ones are earlier turns, gated as any other: a long run
    of unanswered messages is not sent whole).  An answered last turn is current when there
    is no input; with one (an engine's ``get(input=...)`` before it puts the message) there is
    none, and the answered turn is an earlier turn, gated within the budget, even when the
    input repeats its question ("Continue", "Why?": returned whole, a long answer went over
    ``token_limit``)."""
    if not turns:
        return None, [], ()
    last = turns[-1]
    if last.is_open or _in_tool_loop(last):
        run = turns[_request_start(turns, cost, limit):]
        merged = run[0] if len(run) == 1 else MessageTurn(run[0].key, tuple(m for t in run for m in t.messages))
        return merged, turns[: len(turns) - len(run)], tuple(turn.key for turn in run)
    if input_text is None:
        return last, turns[:-1], ()
    return None, turns, ()


def _request_start(turns: list[MessageTurn], cost: Callable[[Sequence[Message]], int], limit: int) -> int:
    """Where the current request starts: the last turn, and the unanswered user messages right
    before it while together they cost at most ``limit`` (the last turn counts, always kept)."""
    start, spent = len(turns) - 1, cost(turns[-1].messages)
    while start > 0 and turns[start - 1].is_open:
        spent += cost(turns[start - 1].messages)
        if spent > limit:
            break
        start -= 1
    return start


def _in_tool_loop(turn: MessageTurn) -> bool:
    """Whether ``turn`` has no final answer yet: it ends in a tool result or a tool call."""
    last = turn.messages[-1]
    return last.role == "tool" or (last.role == "assistant" and bool(call_text(last)))


def _cut(selected: Sequence[Message], current: MessageTurn | None) -> int | None:
    """Where the current turn starts in ``selected`` (the position of its first message,
    the turn's key); ``None`` when it was not selected."""
    if current is not None:
        for position, message in enumerate(selected):
            if message.id == current.key:
                return position
    return None


def _before(selected: list[Message], current: MessageTurn | None) -> list[Message]:
    """``selected`` without the current turn and anything after it: the current turn is
    returned once, whole, at the end, and whatever was written after it was read (an
    answer to it included) cannot come before it."""
    cut = _cut(selected, current)
    return selected if cut is None else selected[:cut]


_PROBE = "How long should a Redis lock TTL be?"
"""The text a new ``tokenizer_fn`` is tried on before the memory opens its store."""


def _require_tokenizer(tokenizer_fn: Any) -> Callable[[str], Any] | None:
    """``tokenizer_fn`` checked before the memory opens its store: ``None``, or a callable,
    wrapped so that a result with no length raises the library's error
    (:func:`_checked_tokens`) and tried once on a short text, so that one returning a count
    is refused here and not at the first ``get``; anything else raises ``InvalidTypeError``."""
    if tokenizer_fn is None or getattr(tokenizer_fn, "_checked_tokenizer", False):
        return tokenizer_fn
    if not callable(tokenizer_fn):
        raise InvalidTypeError(
            f"tokenizer_fn must be a callable text -> sequence of tokens (such as tiktoken's encode), got "
            f"{type(tokenizer_fn).__name__}; to give a count per text, pass token_counter= (a callable text -> int)"
        )
    checked = _checked_tokens(tokenizer_fn)
    checked(_PROBE)
    return checked


def _checked_tokens(tokenizer_fn: Callable[[str], Any]) -> Callable[[str], Any]:
    """``tokenizer_fn``, refusing a result with no length (a count, ``None``) with
    ``InvalidInputError``: the budget counts ``len(tokenizer_fn(text))``, as chat engines do."""
    name = getattr(tokenizer_fn, "__name__", type(tokenizer_fn).__name__)

    def tokens(text: str) -> Any:
        result = tokenizer_fn(text)
        if not isinstance(result, Sized):
            raise InvalidInputError(
                f"tokenizer_fn must return a sequence of tokens; {name!r} returned {type(result).__name__} for a "
                f"text of {len(text)} characters. To give a count, pass token_counter= (a callable text -> int) "
                "instead of tokenizer_fn="
            )
        return result

    tokens.__name__ = f"checked_{name}"
    tokens._checked_tokenizer = True  # type: ignore[attr-defined]  # mypy types no attributes set on a function
    return tokens


def _token_count_of(tokenizer_fn: Callable[[str], Any]) -> Callable[[str], int]:
    """The token counter of a (checked) ``tokenizer_fn``: the length of what it returns."""
    return lambda text: len(tokenizer_fn(text))


def _pair(tokenizer_fn: Callable[[str], Any], count: Callable[[str], int]) -> Callable[[str], Any]:
    """A memory's own ``tokenizer_fn``: ``tokenizer_fn`` (unwrapped, when it is another memory's)
    in a new function that knows ``count``, the budget's counter it agrees with: a copy of the
    memory passes both back (:func:`~.serialisation.deep_copy`), and :func:`_paired` accepts them."""
    source = getattr(tokenizer_fn, "_tokens_of", tokenizer_fn)

    def tokenizer(text: str) -> Any:
        return source(text)

    tokenizer.__name__ = getattr(source, "__name__", type(source).__name__)
    tokenizer._tokens_of = source  # type: ignore[attr-defined]  # mypy types no attributes set on a function
    tokenizer._counts_with = count  # type: ignore[attr-defined]
    tokenizer._checked_tokenizer = True  # type: ignore[attr-defined]
    return tokenizer


def _paired(tokenizer_fn: Any, token_counter: Any) -> bool:
    """Whether ``tokenizer_fn`` and ``token_counter`` are one memory's own pair (its
    ``tokenizer_fn`` and the counter its budget uses, as a copy passes them): they count alike."""
    return getattr(tokenizer_fn, "_counts_with", None) is token_counter


_CONSTRUCTOR_ONLY = ("strategy", "max_deletion_share")
"""Keywords ``from_defaults`` passes through ``**keywords`` that are not gate settings."""

_OTHER_MEMORIES = {
    "chat_store": "ChatMemoryBuffer's; pass store= instead (None: in memory; a SQLite file path; or a core "
                  "Store such as SQLiteStore(path) or PostgresStore(...): a LlamaIndex chat store keeps no revisions)",
    "chat_store_key": "ChatMemoryBuffer's; pass session_id= instead (the conversation's key in the store)",
    "chat_history": "from_defaults'; pass it to GatekeeperMemory.from_defaults(chat_history=...)",
    **dict.fromkeys(("memory_blocks", "token_flush_size", "chat_history_token_ratio", "insert_method"),
                    "Memory's; GatekeeperMemory has no memory blocks and never flushes (get selects what fits "
                    "token_limit): leave it out"),
    **dict.fromkeys(("async_database_uri", "async_engine", "table_name", "db_schema"),
                    "Memory's; pass store= instead (a SQLite file path, or a core Store such as PostgresStore(...))"),
}
"""What other LlamaIndex memories' keywords are here (``token_budget``, the core's, has its own error)."""


def _gate_keywords() -> set[str]:
    """The gate settings ``__init__`` takes as keywords: the fields of ``GateOptions`` and
    ``SelectionParams`` (read from them, so a new field is taken at once) and ``preset``."""
    own = {f.name for f in dataclasses.fields(GateOptions) if f.init}
    return own | {"preset"} | {f.name for f in dataclasses.fields(SelectionParams)}


def _refuse_unknown_keywords(data: dict[str, Any]) -> None:
    """``InvalidTypeError`` for a keyword ``GatekeeperMemory`` does not take, saying what another
    memory's keyword is here and listing only the keywords it takes (``token_budget`` has its
    own error, raised after this)."""
    accepted = {"token_limit", "session_id", "tokenizer_fn", "token_budget"} | _gate_keywords()
    unknown = sorted(str(name) for name in data if name not in accepted)
    if not unknown:
        return
    notes = []
    for name in unknown:
        if name in _OTHER_MEMORIES:
            notes.append(f"{name}= is {_OTHER_MEMORIES[name]}")
        else:
            close = difflib.get_close_matches(name, sorted(_listed_keywords() | _gate_keywords()), n=1)
            if close:
                notes.append(f"{name}= may be {close[0]}= misspelt")
    listed = ", ".join(sorted(_listed_keywords()))
    raise InvalidTypeError(
        f"GatekeeperMemory got unexpected keyword argument(s) {unknown}"
        + (f": {'; '.join(notes)}" if notes else "")
        + f". GatekeeperMemory.from_defaults takes {listed}, and any field of context_gatekeeper.SelectionParams "
        "(the selection tunables, such as top_m); see help(GatekeeperMemory.from_defaults)"
    )


def _listed_keywords() -> set[str]:
    """The keywords the error of :func:`_refuse_unknown_keywords` lists: ``from_defaults``' own,
    :data:`_CONSTRUCTOR_ONLY` and the fields of ``GateOptions`` (less its ``token_budget``: here
    ``token_limit``)."""
    named = {
        name for name, parameter in inspect.signature(GatekeeperMemory.from_defaults).parameters.items()
        if parameter.kind is not inspect.Parameter.VAR_KEYWORD
    }
    own = {f.name for f in dataclasses.fields(GateOptions) if f.init} | {"preset"}
    return named | set(_CONSTRUCTOR_ONLY) | (own - {"token_budget"})


def _refuse_session_change(current: str, wanted: Any) -> None:
    """``InvalidTypeError``: a memory's session cannot be changed in place."""
    raise InvalidTypeError(
        f"session_id of a GatekeeperMemory cannot be changed ({current!r} to {wanted!r}): it names the session "
        "its transcript is stored under, and a new label would not move it. For another conversation build "
        "another memory on a store you open, share and close yourself: store = SQLiteStore(path) (from "
        f"context_gatekeeper), then GatekeeperMemory.from_defaults(store=store, session_id={wanted!r}, ...) for "
        "each session, and store.close() when all are done (a memory built from a path owns its store and "
        "closes it on close(), which would break every memory sharing it)"
    )


def _text_of(value: Any) -> str | None:
    """The query text of ``input``: a str, a message's text, or a ``QueryBundle``'s
    ``query_str`` (unwrapped however deep: engines wrap what they are given)."""
    while isinstance(value, QueryBundle):
        value = value.query_str
    if value is None:
        return None
    if isinstance(value, ChatMessage):
        return value.content or None
    if isinstance(value, str):
        return value
    raise InvalidTypeError(
        f"input must be a str, a ChatMessage, a QueryBundle or None, got {type(value).__name__}; "
        "to reserve tokens pass initial_token_count= by keyword"
    )


def _status(status: Any) -> str:
    """``Memory``'s ``MessageStatus`` (or its value) as ``"active"`` / ``"archived"``."""
    value = str(getattr(status, "value", status or "active")).lower()
    if value not in ("active", "archived"):
        raise InvalidInputError(f"status must be None, 'active' or 'archived' (MessageStatus), got {status!r}")
    return value

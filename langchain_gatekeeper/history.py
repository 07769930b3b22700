"""A LangChain chat message history backed by a versioned, editable transcript.

:class:`GatekeeperChatMessageHistory` is a ``BaseChatMessageHistory`` whose
``messages`` are the *full* current state of a core
:class:`~context_gatekeeper.Transcript` (``RunnableWithMessageHistory`` relies on
that for its bookkeeping), plus what the core adds: natural-language ``edit``
with preview and ``commit``, ``undo`` / ``redo`` / ``revert``, ``history``,
``diff``, the untouched ``record``, and ``select(query)``, the topic-gated view
for a query.  Everything is converted (:mod:`.convert`) and delegated; no
selection or editing logic lives here.

Messages come back as they were added: an id the caller gave is kept, and a
message added without one comes back without one (``HumanMessage("Hello")`` equals
its stored copy), while the transcript keeps an id of its own for it.  Those ids,
in the order of ``messages``, are :meth:`~GatekeeperChatMessageHistory.message_ids`;
they are what ``diff`` entries, ``record()`` and the core's ``Replace`` / ``Delete`` /
``InsertAfter`` name.  :meth:`~GatekeeperChatMessageHistory.apply` also takes a
position in ``messages`` in place of an id.

>>> from langchain_core.messages import AIMessage, HumanMessage
>>> history = GatekeeperChatMessageHistory("doc-demo")
>>> history.add_messages([HumanMessage("Trip to Ireland in 2021?"), AIMessage("Sure: Dublin first.")])
>>> [m.type for m in history.messages]
['human', 'ai']
>>> history.clear()
>>> history.messages, len(history.record())
([], 2)
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import replace
from collections.abc import Sequence
from typing import Any

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import BaseMessage, MessageLikeRepresentation, RemoveMessage

from context_gatekeeper import (
    GateOptions,
    InsertAfter,
    InvalidInputError,
    Message,
    Revision,
    Selection,
    Store,
    Strategy,
    Transcript,
    TranscriptGate,
    UnknownMessageError,
)
from context_gatekeeper.integration import (
    DEFAULT_MAX_DELETION_SHARE, Request, VersionedTranscriptMixin, require_items, require_requests,
)

from .agent_view import one_text_counter
from .convert import MESSAGE_LIKES, as_messages, from_core_messages, to_core
from .models import given_edit_model, resolve_edit_model
from .pickling import pickled_state, rebuild, unpickle

__all__ = ["GatekeeperChatMessageHistory"]

_MESSAGES = "pass a list of messages, e.g. [HumanMessage(...)] or [('human', '...')]"


def _batch(messages: Any) -> list[BaseMessage]:
    """``messages`` as the list of messages :meth:`GatekeeperChatMessageHistory.add_messages`
    stores: message-likes converted as LangChain converts them (``RunnableWithMessageHistory``
    hands a history the chain's input as it was given, ``(role, text)`` tuples included), before
    anything is written.

    Raises:
        InvalidTypeError: not a list, or an item that is no message-like.
        InvalidInputError: a message-like LangChain cannot read, or a ``RemoveMessage``."""
    batch = as_messages(require_items(messages, "messages", MESSAGE_LIKES, _MESSAGES))
    removal = next((m for m in batch if isinstance(m, RemoveMessage)), None)
    if removal is not None:
        raise InvalidInputError(
            f"add_messages got a RemoveMessage (id {removal.id!r}), LangGraph's delete marker, which a history "
            "would store as a message; nothing was stored. Delete messages with history.apply([Delete(id)]) "
            "(an id from message_ids(), or a position in messages)"
        )
    return batch


class GatekeeperChatMessageHistory(VersionedTranscriptMixin, BaseChatMessageHistory):
    """Chat history with topic-gated selection and versioned natural-language edits.

    Args:
        session_id: which conversation of the store this is.
        store: ``None`` (in memory), a SQLite file path (str or PathLike), or any core
            :class:`~context_gatekeeper.Store`.
        model: default editing model (any LangChain chat model, or the core's model
            protocol); ``llm`` is an alias.  With neither, edits use Gemini 2.5 Flash
            (needs ``GOOGLE_API_KEY``), resolved only when an edit runs.
        strategy: default edit strategy, ``"patch"`` or ``"rewrite"``.
        max_deletion_share: an edit deleting more than this share of the editable
            tokens is refused unless ``allow_large_deletion=True``.
        token_counter: token counter for the budget and the deletion guard (default:
            tiktoken, offline).
        embedder: turns on the semantic channel for :meth:`select`: a LangChain
            ``Embeddings``, a LlamaIndex ``BaseEmbedding``, or a callable
            ``list[str] -> list[list[float]]`` (numpy needed).  Each turn is embedded
            once, in batches, and its vector saved in the store (a SQLite file or
            PostgreSQL keeps it across restarts, so a reopened history embeds only the
            query).  ``None`` (default): lexical selection, exactly as without it.
        embed_timeout: seconds one embedding call may take before :meth:`select` goes
            on lexically (``explain(...).semantic_fallback`` is set); ``None``: wait.
        options: the gate's settings for :meth:`select` as one
            :class:`~context_gatekeeper.GateOptions` (checked once), instead of the keywords
            below; ``on_overflow`` left ``None`` is ``"keep_pinned"``.
        **gate_options: :class:`~context_gatekeeper.GateOptions` fields for
            :meth:`select` (``token_budget``, ``message_overhead``, ``params``, ``preset``,
            any selection parameter); ``on_overflow`` defaults to ``"keep_pinned"``.

    Reuse one object per session where you can (for example a dict in your
    ``get_session_history``): the selection index is kept in step incrementally.

    Messages added without an id come back without one; :meth:`message_ids` gives the
    transcript's id for each message of :attr:`messages` (what :meth:`apply`,
    ``diff`` and ``record`` use), and :meth:`apply` also takes positions.

    A history pickles (``pickle``, ``multiprocessing``) and deep-copies as its session: one
    in a SQLite file or PostgreSQL reattaches to the same session of the same store, one
    in memory carries its whole revision log (see :mod:`langchain_gatekeeper.pickling`).
    A pickle leaves out the editing model, a custom token counter and the embedder;
    ``copy.deepcopy`` keeps them.

    LangChain has deprecated ``BaseChatMessageHistory`` and ``RunnableWithMessageHistory``
    (and its ``InMemoryChatMessageHistory``) in favour of agent short-term memory
    (https://docs.langchain.com/oss/python/langchain/short-term-memory); this class
    keeps classic chains working, and for agents :class:`~langchain_gatekeeper.GatekeeperMiddleware`
    brings the same gating and editing to LangChain's ``create_agent``.
    """

    def __init__(
        self,
        session_id: str = "default",
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
        **gate_options: Any,
    ) -> None:
        # every setting is checked before anything is opened or stored
        # token_counter= is a record field too: beside options= it is refused, like any other field
        gate = GateOptions.of(
            options, token_counter=token_counter, embedder=embedder, embed_timeout=embed_timeout, **gate_options
        )
        # count_tokens_approximately (a trim_messages counter) counts one text as the adapters read it
        gate = gate.with_(on_overflow=gate.overflow("keep_pinned"), token_counter=one_text_counter(gate.token_counter))
        super().__init__()
        default_model = given_edit_model(model, llm)
        self._opened_store: Store | None = None  # a store a copy opened (pickling.rebuild); close() closes it
        self._options: dict[str, Any] = {
            "strategy": strategy,
            "max_deletion_share": max_deletion_share,
            "token_counter": token_counter,
            "embedder": embedder,
            "embed_timeout": embed_timeout,
            **({"options": options} if options is not None else {}),
            **gate_options,
        }
        self.transcript = Transcript(
            session_id,
            store=store,
            model=default_model,
            strategy=strategy,
            max_deletion_share=max_deletion_share,
            token_counter=gate.token_counter,
        )
        self.gate = TranscriptGate(self.transcript, options=gate)

    def __repr__(self) -> str:
        return f"GatekeeperChatMessageHistory(session_id={self.session_id!r}, head={self.transcript.head})"

    @property
    def session_id(self) -> str:
        """The session this history reads and writes."""
        return self.transcript.session_id

    @property
    def store(self) -> Store:
        """The core store the transcript lives in."""
        return self.transcript.store

    # -- BaseChatMessageHistory ---------------------------------------------------------
    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]  # LangChain declares an attribute, documents a property
        """The full current transcript (every message of the state, not the gated view)."""
        return from_core_messages(self.transcript.messages)

    async def aget_messages(self) -> list[BaseMessage]:
        """Async :attr:`messages`: read and converted in a worker thread (converting is a deep
        copy and a pydantic model per message, too long for the event loop on a long history)."""
        return await asyncio.to_thread(lambda: self.messages)

    def message_ids(self) -> list[str]:
        """The transcript's id of each message of :attr:`messages`, in the same order.

        A message added with an id keeps it; one added without gets an id of the
        transcript's (it still comes back id-less from :attr:`messages`).  These ids name
        messages in ``diff()``, ``record()`` and :meth:`apply`."""
        return [m.id for m in self.transcript.messages]

    async def amessage_ids(self) -> list[str]:
        """Async :meth:`message_ids`."""
        return [m.id for m in await self.transcript.aget_messages()]

    def apply(self, requests: Sequence[Request]) -> Revision:
        """Explicit edits without a model, as one revision: the core's ``Replace(id, text)``,
        ``Delete(id)`` and ``InsertAfter(id, role, text)``, where ``id`` is a transcript id
        (:meth:`message_ids`) or an int position in :attr:`messages` (negative counts from
        the end; ``InsertAfter(None, ...)`` inserts at the start).

        >>> from context_gatekeeper import Replace
        >>> from langchain_core.messages import HumanMessage
        >>> h = GatekeeperChatMessageHistory("apply-demo")
        >>> h.add_messages([HumanMessage("Teh cat")])
        >>> _ = h.apply([Replace(0, "The cat")])
        >>> h.messages
        [HumanMessage(content='The cat', additional_kwargs={}, response_metadata={})]

        Raises:
            UnknownMessageError: a position or id that is not in the current state
                (nothing is changed).
            InvalidInputError: an ``InsertAfter`` of a tool message, or requests that would
                separate a tool call from its result (a message inserted between an
                ``AIMessage``'s tool calls and their ``ToolMessage`` results, the call or a
                result deleted without the other), as :meth:`edit` refuses them: every later
                call would send the provider an invalid sequence (nothing is changed).
        """
        requests = require_requests(requests)
        for request in requests:
            if isinstance(request, InsertAfter) and request.role == "tool":
                raise InvalidInputError(
                    "InsertAfter cannot add a tool message: LangChain needs the tool call it answers (a "
                    "ToolMessage's tool_call_id), which a request cannot carry; add it with add_messages("
                    "[ToolMessage(..., tool_call_id=...)]), or insert a user or assistant message. Nothing was changed"
                )
        ids = self.message_ids()
        resolved = []
        for request in requests:
            target = request.id
            if isinstance(target, int) and not isinstance(target, bool):
                if not -len(ids) <= target < len(ids):
                    raise UnknownMessageError(
                        f"position {target} is not in this history of {len(ids)} messages; "
                        "pass a position in range(len(history.messages)) or an id from message_ids()"
                    )
                request = replace(request, id=ids[target])
            resolved.append(request)
        return self.transcript.apply(resolved, keep_tool_pairs=True)

    async def aapply(self, requests: Sequence[Request]) -> Revision:
        """Async :meth:`apply`."""
        return await asyncio.to_thread(self.apply, require_requests(requests))

    def add_messages(self, messages: Sequence[MessageLikeRepresentation]) -> None:
        """Append ``messages`` as one revision (a user message and its answer land together).

        Message-likes are converted as chat models convert them: ``("human", "...")`` tuples,
        ``{"role": "user", "content": "..."}`` dicts, strings (human messages).  A
        ``RemoveMessage`` is refused (``InvalidInputError``, nothing stored): delete with
        ``apply([Delete(id)])``.

        Each message keeps the id it came with; one without an id stays without one in
        :attr:`messages`.  Ids are never reused, and no message is dropped:

        * a message whose id this history holds now, with the role and text it was first
          added with, leading the batch, is a retried request and is not stored again; the
          messages after it still go to the end (``[HumanMessage("yes", id="q1"),
          AIMessage("new")]`` after ``q1`` was answered adds the new answer last);
        * such a message given again for a new question (an LLM cache answers a question asked
          again with the earlier ``AIMessage``, id and all) is stored under a fresh id, with
          what followed it in the batch (a tool call's ``ToolMessage`` results) after it.
          Behind a new message of the batch it is a retry only when the batch, or its start,
          repeats (by role and text) the messages that end the history.  Leading the answer
          to a question added on its own just before (``add_user_message``, then
          ``add_ai_message`` or an agent's output) it is a retry only when it, or the batch's
          start, is already right after that question (the same ids, or the same roles and
          texts); otherwise it answers the question, right after it.  Two histories adding
          one batch whose messages carry ids of their own at the same time store it once;
        * an id given twice in ``messages``, the id of a message since deleted, cleared
          or reverted, or an id held with other text: the message is stored under a fresh
          id, which :attr:`messages` and :meth:`message_ids` show.
        """
        self._add(_batch(messages))

    async def aadd_messages(self, messages: Sequence[MessageLikeRepresentation]) -> None:
        """Async :meth:`add_messages`."""
        await asyncio.to_thread(self._add, _batch(messages))

    def _add(self, batch: list[BaseMessage]) -> None:
        """Append ``batch`` (read by :func:`_batch`), as :meth:`add_messages` says."""
        if batch:
            self.transcript.append(messages=[to_core(m) for m in batch], renew_taken_ids=True)

    def clear(self) -> None:
        """Empty the current state as one recorded revision; ``record()`` keeps every message
        and ``undo()`` brings them back.  (To erase a session, use ``transcript.purge()``.)"""
        if self.transcript.messages:
            self.transcript.clear()

    async def aclear(self) -> None:
        """Async :meth:`clear`."""
        await asyncio.to_thread(self.clear)

    # -- gated view ---------------------------------------------------------------------
    def select(self, query: str) -> list[BaseMessage]:
        """The messages to send with ``query``: leading system messages, the earlier turns
        the topic gate selects, and the open (unanswered) turn, in transcript order; human
        messages sent unanswered right before the last (a paste, then the question) are part
        of the open turn while they fit the budget (their tokens come out of it first).
        Selecting changes nothing."""
        return from_core_messages(self.gate.select_messages(query))

    async def aselect(self, query: str) -> list[BaseMessage]:
        """Async :meth:`select` (with an embedder, its embedding calls are awaited)."""
        if self.gate.semantic:
            return from_core_messages(await self.gate.aselect_messages(query))
        return await asyncio.to_thread(self.select, query)

    async def aexplain(self, query: str) -> Selection:
        """Async :meth:`explain`."""
        if self.gate.semantic:
            return await self.gate.aexplain(query)
        return await asyncio.to_thread(self.explain, query)

    def explain(self, query: str) -> Selection:
        """The core :class:`~context_gatekeeper.Selection` behind :meth:`select` (gate decision,
        scores, tokens)."""
        return self.gate.explain(query)

    def close(self) -> None:
        """Close the store if this history opened it (from a path or URL, or as an
        unpickled copy)."""
        self.transcript.close()
        if self._opened_store is not None:
            self._opened_store.close()

    # -- pickling and copies (see .pickling) ----------------------------------------------
    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle as the session: a SQLite path, a password-free PostgreSQL conninfo, or the
        whole revision log; never the model, a token counter or the embedder."""
        return unpickle, (type(self), pickled_state(self, in_process=False))

    def __copy__(self) -> GatekeeperChatMessageHistory:
        """:meth:`__deepcopy__`: a copy shares no transcript with its original (a shallow copy
        would share the revision state without its lock), and keeps the model and options."""
        return self.__deepcopy__()

    def __deepcopy__(self, memo: dict[int, Any] | None = None) -> GatekeeperChatMessageHistory:
        """An independent copy, as ``pickle`` makes one, that keeps the model, the token
        counter, the embedder and every option (the same objects): a SQLite or PostgreSQL
        history's copy attaches to the same session; an in-memory one's replays its log
        into a new in-memory store, so later writes to either leave the other alone."""
        state = pickled_state(self, in_process=True)
        state["options"]["model"] = self.transcript.model
        copied = rebuild(type(self), state)
        if memo is not None:
            memo[id(self)] = copied
        return copied

    # -- editing and versions (the core's VersionedTranscriptMixin) ----------------------
    @property
    def _versioned_transcript(self) -> Transcript:
        return self.transcript

    def _edit_model(self, model: Any, llm: Any) -> Any:
        """``model`` or ``llm``, else the history's default, else Gemini 2.5 Flash."""
        if model is not None or llm is not None:
            return resolve_edit_model(model, llm)
        return self.transcript.model if self.transcript.model is not None else resolve_edit_model()

    def _export_messages(self, messages: Sequence[Message]) -> list[BaseMessage]:
        return from_core_messages(messages)

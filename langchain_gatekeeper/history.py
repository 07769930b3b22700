"""A LangChain chat message history backed by a versioned, editable transcript.

:class:`GatekeeperChatMessageHistory` is a ``BaseChatMessageHistory`` whose
``messages`` are the *full* current state of a core
:class:`~context_gatekeeper.Transcript` (``RunnableWithMessageHistory`` relies on
that for its bookkeeping), plus what the core adds: natural-language ``edit``
with preview and ``commit``, ``undo`` / ``redo`` / ``revert``, ``history``,
``diff``, the untouched ``record``, and ``select(query)``, the topic-gated view
for a query.  Everything is converted (:mod:`.convert`) and delegated; no
selection or editing logic lives here.

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
import threading
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Literal

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import BaseMessage

from context_gatekeeper import Diff, Message, Proposal, Revision, Selection, Store, Transcript, TranscriptGate
from context_gatekeeper.messages import new_message_id

from .convert import from_core_messages, to_core
from .models import resolve_edit_model

__all__ = ["GatekeeperChatMessageHistory", "ADAPTER_GATE_DEFAULTS"]

ADAPTER_GATE_DEFAULTS: dict[str, Any] = {"on_overflow": "keep_pinned"}
"""Gatekeeper options the adapters default to (a chain never dies because pinned content overflows)."""

Strategy = Literal["patch", "rewrite"]


class GatekeeperChatMessageHistory(BaseChatMessageHistory):
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
        **gate_options: :class:`~context_gatekeeper.ContextGatekeeper` options for
            :meth:`select` (``token_budget``, ``message_overhead``, ``params``, any
            selection parameter); ``on_overflow`` defaults to ``"keep_pinned"``.

    Reuse one object per session where you can (for example a dict in your
    ``get_session_history``): the selection index is kept in step incrementally.
    """

    def __init__(
        self,
        session_id: str = "default",
        *,
        store: Store | str | os.PathLike[str] | None = None,
        model: Any = None,
        llm: Any = None,
        strategy: Strategy = "patch",
        max_deletion_share: float = 0.5,
        token_counter: Any = None,
        **gate_options: Any,
    ) -> None:
        super().__init__()
        default_model = resolve_edit_model(model, llm) if (model is not None or llm is not None) else None
        self.transcript = Transcript(
            session_id,
            store=store,
            model=default_model,
            strategy=strategy,
            max_deletion_share=max_deletion_share,
            token_counter=token_counter,
        )
        options = {**ADAPTER_GATE_DEFAULTS, **gate_options}
        if token_counter is not None:
            options.setdefault("token_counter", token_counter)
        self.gate = TranscriptGate(self.transcript, **options)
        self._ids_lock = threading.Lock()
        self._used_ids: set[str] = set()
        self._ids_seen = 0  # revisions scanned into _used_ids

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
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        """The full current transcript (every message of the state, not the gated view)."""
        return from_core_messages(self.transcript.messages)

    async def aget_messages(self) -> list[BaseMessage]:
        """Async :attr:`messages`."""
        return from_core_messages(await self.transcript.aget_messages())

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Append ``messages`` as one revision (a user message and its answer land together).

        An id already used in this session (or twice in ``messages``) is replaced by a
        fresh one: ids are never reused.
        """
        batch = list(messages)
        if batch:
            with self._ids_lock:
                self.transcript.append(messages=self._fresh(batch))

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Async :meth:`add_messages`."""
        await asyncio.to_thread(self.add_messages, list(messages))

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
        the topic gate selects, and the open (unanswered) turn, in transcript order.
        Selecting changes nothing."""
        return from_core_messages(self.gate.select_messages(query))

    async def aselect(self, query: str) -> list[BaseMessage]:
        """Async :meth:`select`."""
        return await asyncio.to_thread(self.select, query)

    def explain(self, query: str) -> Selection:
        """The core :class:`~context_gatekeeper.Selection` behind :meth:`select` (gate decision,
        scores, tokens)."""
        return self.gate.explain(query)

    # -- editing ------------------------------------------------------------------------
    def _edit_model(self, model: Any, llm: Any) -> Any:
        if model is not None or llm is not None:
            return resolve_edit_model(model, llm)
        return self.transcript.model if self.transcript.model is not None else resolve_edit_model()

    def edit(
        self,
        instruction: str,
        model: Any = None,
        *,
        llm: Any = None,
        strategy: Strategy | None = None,
        preview: bool = False,
        allow_large_deletion: bool = False,
    ) -> Revision | Proposal:
        """Revise the history as ``instruction`` says (user and assistant text), through a model.

        ``model`` (or its alias ``llm``) overrides the history's default model; with none
        at all, Gemini 2.5 Flash (``ModelUnavailableError`` naming ``GOOGLE_API_KEY`` when no
        key is set).  Returns the new :class:`~context_gatekeeper.Revision`, or with
        ``preview=True`` a :class:`~context_gatekeeper.Proposal` to :meth:`commit`.  A failed
        edit raises ``EditError`` / ``ModelUnavailableError`` and changes nothing.
        """
        chosen = self._edit_model(model, llm)
        return self.transcript.edit(
            instruction, model=chosen, strategy=strategy, preview=preview, allow_large_deletion=allow_large_deletion
        )

    async def aedit(
        self,
        instruction: str,
        model: Any = None,
        *,
        llm: Any = None,
        strategy: Strategy | None = None,
        preview: bool = False,
        allow_large_deletion: bool = False,
    ) -> Revision | Proposal:
        """Async :meth:`edit` (the model is awaited)."""
        chosen = self._edit_model(model, llm)
        return await self.transcript.aedit(
            instruction, model=chosen, strategy=strategy, preview=preview, allow_large_deletion=allow_large_deletion
        )

    def commit(self, proposal: Proposal) -> Revision:
        """Apply a proposal from ``edit(..., preview=True)`` (``StaleHeadError`` if overtaken)."""
        return self.transcript.commit(proposal)

    async def acommit(self, proposal: Proposal) -> Revision:
        """Async :meth:`commit`."""
        return await self.transcript.acommit(proposal)

    # -- versions -----------------------------------------------------------------------
    def undo(self) -> Revision:
        """Revert the latest edit, clear or revert not yet undone; later turns are kept."""
        return self.transcript.undo()

    async def aundo(self) -> Revision:
        """Async :meth:`undo`."""
        return await self.transcript.aundo()

    def redo(self) -> Revision:
        """Re-apply what the last undo reverted."""
        return self.transcript.redo()

    async def aredo(self) -> Revision:
        """Async :meth:`redo`."""
        return await self.transcript.aredo()

    def revert(self, revision: int) -> Revision:
        """Make the state equal to ``revision``'s, as a new revision (its ``removed`` says what it drops)."""
        return self.transcript.revert(revision)

    async def arevert(self, revision: int) -> Revision:
        """Async :meth:`revert`."""
        return await self.transcript.arevert(revision)

    def history(self) -> list[Revision]:
        """Every revision, oldest first."""
        return self.transcript.history()

    async def ahistory(self) -> list[Revision]:
        """Async :meth:`history`."""
        return await self.transcript.ahistory()

    def diff(self, a: int, b: int | None = None) -> Diff:
        """How the state at revision ``b`` (default: now) differs from revision ``a``; ``str()`` it to read."""
        return self.transcript.diff(a, b)

    async def adiff(self, a: int, b: int | None = None) -> Diff:
        """Async :meth:`diff`."""
        return await self.transcript.adiff(a, b)

    def record(self) -> list[BaseMessage]:
        """Every message ever added, as originally written (edits and clears never touch it)."""
        return from_core_messages(self.transcript.record())

    async def arecord(self) -> list[BaseMessage]:
        """Async :meth:`record`."""
        return from_core_messages(await self.transcript.arecord())

    # -- internals ----------------------------------------------------------------------
    def _fresh(self, batch: list[BaseMessage]) -> list[Message]:
        """Core messages for ``batch``, with ids already used in the session replaced
        (the caller holds ``_ids_lock``)."""
        log = self.transcript.history()
        if len(log) < self._ids_seen:  # purged meanwhile
            self._used_ids, self._ids_seen = set(), 0
        for revision in log[self._ids_seen :]:
            self._used_ids.update(m.id for m in revision.added)
        self._ids_seen = len(log)
        out: list[Message] = []
        taken = set(self._used_ids)
        for message in batch:
            core = to_core(message)
            if core.id in taken:
                core = replace(core, id=new_message_id())
            taken.add(core.id)
            out.append(core)
        return out


"""Edits and version operations of :class:`~llamaindex_gatekeeper.memory.GatekeeperMemory`.

Every method converts and delegates to the memory's core
:class:`~context_gatekeeper.Transcript`: ``edit`` / ``aedit`` with preview and
``commit``, ``undo``, ``redo``, ``revert``, ``history``, ``diff`` and ``record``,
each with its async twin.  The editing model is any LlamaIndex LLM or anything the
core's model protocol accepts (a callable ``fn(messages) -> str``, an object with
``complete`` / ``acomplete``); LlamaIndex LLMs and the default (Gemini, when a key
is set) are resolved by :func:`llamaindex_gatekeeper.models.resolve_edit_model`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from llama_index.core.base.llms.base import BaseLLM
from llama_index.core.base.llms.types import ChatMessage

from context_gatekeeper import Diff, Proposal, Revision

from .convert import from_core_messages

if TYPE_CHECKING:
    from context_gatekeeper import Transcript

__all__ = ["VersionsMixin", "resolve_model"]

Strategy = Literal["patch", "rewrite"]


def resolve_model(model: Any = None, llm: Any = None) -> Any:
    """The editing model for ``model=`` or its alias ``llm=``.

    A core-protocol model is returned as is; a LlamaIndex LLM, or nothing at all (the
    default Gemini model), goes through ``llamaindex_gatekeeper.models.resolve_edit_model``,
    imported only then.
    """
    if model is not None and llm is not None and model is not llm:
        raise TypeError("pass model= or llm= (an alias), not both")
    chosen = model if model is not None else llm
    if chosen is not None and not isinstance(chosen, BaseLLM):
        return chosen
    from .models import resolve_edit_model  # LlamaIndex LLMs and the Gemini default

    return resolve_edit_model(model=chosen)


class VersionsMixin:
    """Edit and version operations; needs ``_transcript`` and ``_default_model`` on the host."""

    _transcript: "Transcript"
    _default_model: Any

    def _model_for(self, model: Any, llm: Any) -> Any:
        if model is not None or llm is not None:
            return resolve_model(model, llm)
        return resolve_model(self._default_model)

    # -- editing ------------------------------------------------------------------------
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

        ``model`` (or its alias ``llm``) overrides the memory's default model; with none at
        all, the core's Gemini model (``ModelUnavailableError`` saying how to pass one when
        no key is set).  Returns the new :class:`~context_gatekeeper.Revision`, or with
        ``preview=True`` a :class:`~context_gatekeeper.Proposal` to :meth:`commit`.  A
        failed edit raises ``EditError`` / ``ModelUnavailableError`` and changes nothing.
        """
        chosen = self._model_for(model, llm)
        return self._transcript.edit(
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
        """Async :meth:`edit` (the model is awaited; the store runs in a worker thread)."""
        chosen = self._model_for(model, llm)
        return await self._transcript.aedit(
            instruction, model=chosen, strategy=strategy, preview=preview, allow_large_deletion=allow_large_deletion
        )

    def commit(self, proposal: Proposal) -> Revision:
        """Apply a proposal from ``edit(..., preview=True)`` (``StaleHeadError`` if overtaken)."""
        return self._transcript.commit(proposal)

    async def acommit(self, proposal: Proposal) -> Revision:
        """Async :meth:`commit`."""
        return await self._transcript.acommit(proposal)

    # -- versions -----------------------------------------------------------------------
    def undo(self) -> Revision:
        """Revert the latest edit, set, reset or revert not yet undone; later turns are kept."""
        return self._transcript.undo()

    async def aundo(self) -> Revision:
        """Async :meth:`undo`."""
        return await self._transcript.aundo()

    def redo(self) -> Revision:
        """Re-apply what the last undo reverted."""
        return self._transcript.redo()

    async def aredo(self) -> Revision:
        """Async :meth:`redo`."""
        return await self._transcript.aredo()

    def revert(self, revision: int) -> Revision:
        """Make the state equal to ``revision``'s, as a new revision (its ``removed`` says what it drops)."""
        return self._transcript.revert(revision)

    async def arevert(self, revision: int) -> Revision:
        """Async :meth:`revert`."""
        return await self._transcript.arevert(revision)

    def history(self) -> list[Revision]:
        """Every revision, oldest first."""
        return self._transcript.history()

    async def ahistory(self) -> list[Revision]:
        """Async :meth:`history`."""
        return await self._transcript.ahistory()

    def diff(self, a: int, b: int | None = None) -> Diff:
        """How the state at revision ``b`` (default: now) differs from revision ``a``; ``str()`` it to read."""
        return self._transcript.diff(a, b)

    async def adiff(self, a: int, b: int | None = None) -> Diff:
        """Async :meth:`diff`."""
        return await self._transcript.adiff(a, b)

    def record(self) -> list[ChatMessage]:
        """Every message ever put, as originally written (edits, sets and resets never touch it)."""
        return from_core_messages(self._transcript.record())

    async def arecord(self) -> list[ChatMessage]:
        """Async :meth:`record`."""
        return from_core_messages(await self._transcript.arecord())

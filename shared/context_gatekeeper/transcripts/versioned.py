"""Edit and version operations for adapters that wrap a :class:`~context_gatekeeper.Transcript`.

:class:`VersionedTranscriptMixin` gives a framework's history or memory class the
core's vocabulary — ``edit`` / ``aedit`` (``model=`` or its alias ``llm=``) with
preview and ``commit``, ``undo``, ``redo``, ``revert``, ``history``, ``diff`` and
``record``, each with its async twin — by delegating to the transcript: ``x`` calls
``transcript.x`` and ``ax`` awaits ``transcript.ax``, nothing more (an edit resolves the
host's editing model first; ``record`` converts the messages, and ``arecord`` runs it in a
worker thread, conversion included).  The host class supplies
three hooks: the transcript, how to resolve an editing model for its framework, and how
to convert core messages into its own message type.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..editing.compute import check_instruction
from ..editing.options import EditOptions, Strategy
from ..records.revisions import Diff, Proposal, Revision

if TYPE_CHECKING:
    from ..records.messages import Message
    from .transcript import Transcript

__all__ = ["VersionedTranscriptMixin"]


class VersionedTranscriptMixin:
    """Version operations delegating to ``self._versioned_transcript``.

    Hooks for the host class:

    * ``_versioned_transcript``: the :class:`Transcript` (a property, or an attribute the
      host class declares);
    * ``_edit_model(model, llm)``: the model an edit should use (``model`` or its alias
      ``llm``, else the host's default, else the framework's default model);
    * ``_export_messages(messages)``: core messages as the framework's messages.
    """

    if TYPE_CHECKING:  # read-only here, so a host may provide it as a property

        @property
        def _versioned_transcript(self) -> Transcript: ...

    def _edit_model(self, model: Any, llm: Any) -> Any:  # pragma: no cover - hosts override
        raise NotImplementedError

    def _export_messages(self, messages: Sequence["Message"]) -> list[Any]:  # pragma: no cover
        raise NotImplementedError

    # -- editing ------------------------------------------------------------------------
    def edit(
        self,
        instruction: str,
        model: Any = None,
        *,
        llm: Any = None,
        strategy: Strategy | None = None,
        preview: bool = False,
        allow_large_deletion: bool | None = None,
        options: EditOptions | None = None,
    ) -> Revision | Proposal:
        """Revise the history as ``instruction`` says (user and assistant text), through a model.

        ``model`` (or its alias ``llm``) overrides the default editing model.  Returns the
        new :class:`Revision`, or with ``preview=True`` a :class:`Proposal` to
        :meth:`commit`.  A failed edit raises ``EditError`` / ``ModelUnavailableError``
        and changes nothing.  ``options`` (an :class:`EditOptions`; default: the
        transcript's) sets the edit's settings; ``strategy`` and ``allow_large_deletion``
        override its fields when given.  A blank or non-str ``instruction`` is refused
        (``InvalidInputError`` / ``InvalidTypeError``) before the model is resolved.
        """
        check_instruction(instruction)
        settings = self._edit_call(model, llm, strategy, preview, allow_large_deletion, options)
        return self._versioned_transcript.edit(instruction, **settings)

    async def aedit(
        self,
        instruction: str,
        model: Any = None,
        *,
        llm: Any = None,
        strategy: Strategy | None = None,
        preview: bool = False,
        allow_large_deletion: bool | None = None,
        options: EditOptions | None = None,
    ) -> Revision | Proposal:
        """Async :meth:`edit` (the model is awaited; the store runs in a worker thread)."""
        check_instruction(instruction)
        settings = self._edit_call(model, llm, strategy, preview, allow_large_deletion, options)
        return await self._versioned_transcript.aedit(instruction, **settings)

    def _edit_call(
        self,
        model: Any,
        llm: Any,
        strategy: Strategy | None,
        preview: bool,
        allow_large_deletion: bool | None,
        options: EditOptions | None,
    ) -> dict[str, Any]:
        """The keywords :meth:`Transcript.edit` and :meth:`Transcript.aedit` take, the host's
        editing model resolved (the one place ``edit`` and ``aedit`` differ from a plain
        delegation)."""
        return {
            "model": self._edit_model(model, llm),
            "strategy": strategy,
            "preview": preview,
            "allow_large_deletion": allow_large_deletion,
            "options": options,
        }

    def commit(self, proposal: Proposal) -> Revision:
        """Apply a proposal from ``edit(..., preview=True)`` (``StaleHeadError`` if overtaken)."""
        return self._versioned_transcript.commit(proposal)

    async def acommit(self, proposal: Proposal) -> Revision:
        """Async :meth:`commit`."""
        return await self._versioned_transcript.acommit(proposal)

    # -- versions -----------------------------------------------------------------------
    def undo(self) -> Revision:
        """Revert the latest state-changing revision not yet undone; later turns are kept."""
        return self._versioned_transcript.undo()

    async def aundo(self) -> Revision:
        """Async :meth:`undo`."""
        return await self._versioned_transcript.aundo()

    def redo(self) -> Revision:
        """Re-apply what the last undo reverted."""
        return self._versioned_transcript.redo()

    async def aredo(self) -> Revision:
        """Async :meth:`redo`."""
        return await self._versioned_transcript.aredo()

    def revert(self, revision: int) -> Revision:
        """Make the state equal to ``revision``'s, as a new revision (its ``removed`` says what it drops)."""
        return self._versioned_transcript.revert(revision)

    async def arevert(self, revision: int) -> Revision:
        """Async :meth:`revert`."""
        return await self._versioned_transcript.arevert(revision)

    def history(self) -> list[Revision]:
        """Every revision, oldest first."""
        return self._versioned_transcript.history()

    async def ahistory(self) -> list[Revision]:
        """Async :meth:`history`."""
        return await self._versioned_transcript.ahistory()

    def diff(self, a: int, b: int | None = None) -> Diff:
        """How the state at revision ``b`` (default: now) differs from revision ``a``; ``str()`` it to read."""
        return self._versioned_transcript.diff(a, b)

    async def adiff(self, a: int, b: int | None = None) -> Diff:
        """Async :meth:`diff`."""
        return await self._versioned_transcript.adiff(a, b)

    def record(self) -> list[Any]:
        """Every message ever added, as originally written (edits and clears never touch it)."""
        return self._export_messages(self._versioned_transcript.record())

    async def arecord(self) -> list[Any]:
        """Async :meth:`record`: read and converted in a worker thread (converting every message
        ever added into the framework's type is too long for the event loop)."""
        return await asyncio.to_thread(self.record)

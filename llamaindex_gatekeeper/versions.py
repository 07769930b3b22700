"""Edits and version operations of :class:`~llamaindex_gatekeeper.memory.GatekeeperMemory`.

The operations themselves (``edit`` / ``aedit`` with preview and ``commit``,
``undo``, ``redo``, ``revert``, ``history``, ``diff`` and ``record``, each with its
async twin) come from the core's
:class:`~context_gatekeeper.transcripts.versioned.VersionedTranscriptMixin`; this module supplies
the LlamaIndex hooks.  The editing model is any LlamaIndex LLM or anything the
core's model protocol accepts (a callable ``fn(messages) -> str``, an object with
``complete`` / ``acomplete``); LlamaIndex LLMs and the default (Gemini, when a key
is set) are resolved by :func:`llamaindex_gatekeeper.models.resolve_edit_model`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from llama_index.core.base.llms.types import ChatMessage

from context_gatekeeper import EditModel
from context_gatekeeper.integration import VersionedTranscriptMixin

from .convert import from_core_messages

if TYPE_CHECKING:
    from context_gatekeeper import Transcript

__all__ = ["VersionsMixin", "resolve_model"]


def resolve_model(model: Any = None, llm: Any = None) -> EditModel:
    """The editing model for ``model=`` or its alias ``llm=``, as the core's :class:`EditModel`.

    The same as :func:`llamaindex_gatekeeper.models.resolve_edit_model`: a LlamaIndex
    LLM is wrapped once, another core-protocol model normalised, and with neither the
    default Gemini model is built.
    """
    from .models import resolve_edit_model  # LlamaIndex LLMs and the Gemini default

    return resolve_edit_model(model, llm)


class VersionsMixin(VersionedTranscriptMixin):
    """The core's version operations (:class:`~context_gatekeeper.transcripts.versioned.VersionedTranscriptMixin`)
    for the memory; needs ``_transcript`` and ``_default_model`` on the host."""

    _transcript: "Transcript"
    _default_model: Any

    @property
    def _versioned_transcript(self) -> "Transcript":
        return self._transcript

    def _edit_model(self, model: Any, llm: Any) -> Any:
        if model is not None or llm is not None:
            return resolve_model(model, llm)
        return resolve_model(self._default_model)

    def _export_messages(self, messages: Any) -> list[ChatMessage]:
        return from_core_messages(messages)

"""LlamaIndex adapter for context-gatekeeper: a topic-gated, editable chat memory and a
covering node postprocessor.

Converts types and delegates to the core; imports LlamaIndex and the core only (never LangChain).
"""

from __future__ import annotations

from .convert import from_core, from_core_messages, to_core, to_core_messages
from .memory import GatekeeperMemory
from .models import DEFAULT_MODEL, LlamaIndexEditModel, resolve_edit_model
from .postprocessor import GatekeeperNodePostprocessor, NodeExplanation, build_corpus

__all__ = [
    # chat memory
    "GatekeeperMemory",
    # retrieval
    "GatekeeperNodePostprocessor",
    "NodeExplanation",
    "build_corpus",
    # models and conversion
    "DEFAULT_MODEL",
    "LlamaIndexEditModel",
    "resolve_edit_model",
    "to_core",
    "to_core_messages",
    "from_core",
    "from_core_messages",
]

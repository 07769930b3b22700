"""LlamaIndex adapter for context-gatekeeper: a topic-gated, editable chat memory and a
covering node postprocessor.

Converts types and delegates to the core; imports LlamaIndex and the core only (never LangChain).
"""

from __future__ import annotations

from context_gatekeeper import MissingExtraError

_EXTRA_PACKAGES = frozenset({"llama_index"})
"""The top-level packages of the ``llamaindex`` extra the adapter imports."""

try:
    from .convert import from_core, from_core_messages, to_core, to_core_messages
    from .memory import GatekeeperMemory
    from .models import DEFAULT_MODEL, LlamaIndexEditModel, resolve_edit_model
    from .postprocessor import GatekeeperNodePostprocessor, NodeExplanation, build_corpus
    from .stored import StoreDetachedWarning
except ImportError as missing:  # the framework (missing, or too old), not this package: say which extra installs it
    error = MissingExtraError.of_framework(
        missing, adapter="llamaindex_gatekeeper", needs="llama-index-core >= 0.14.5, < 0.15", extra="llamaindex",
        packages=_EXTRA_PACKAGES, floors={"llama-index-core": "0.14.5"},  # pyproject.toml's llamaindex extra
    )
    if error is None:
        raise
    raise error from missing

__all__ = [
    # chat memory
    "GatekeeperMemory",
    "StoreDetachedWarning",
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

"""LangChain adapter for context-gatekeeper: gated context and mutable, versioned history.

Converts types and delegates to the core (``context_gatekeeper``); no selection or
editing logic lives here.
"""

from .convert import from_core, from_core_messages, to_core, to_core_messages
from .models import DEFAULT_MODEL, LangChainEditModel, default_chat_model, resolve_edit_model

__all__ = [
    "DEFAULT_MODEL",
    "LangChainEditModel",
    "default_chat_model",
    "from_core",
    "from_core_messages",
    "resolve_edit_model",
    "to_core",
    "to_core_messages",
]

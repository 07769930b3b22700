"""LangChain adapter for context-gatekeeper: gated context and mutable, versioned history.

Converts types and delegates to the core (``context_gatekeeper``); no selection or
editing logic lives here.
"""

from context_gatekeeper import MissingExtraError

_EXTRA_PACKAGES = frozenset({"langchain_core", "langchain", "langgraph"})
"""The top-level packages of the ``langchain`` extra the adapter imports."""

try:
    from .convert import from_core, from_core_messages, to_core, to_core_messages
    from .gate import GatedRunnableWithMessageHistory, TopicGateKeysError, topic_gate
    from .history import GatekeeperChatMessageHistory
    from .middleware import GatekeeperMiddleware
    from .models import DEFAULT_MODEL, LangChainEditModel, default_chat_model, resolve_edit_model
    from .trim import agate_messages, gate_messages
    from .threads import (
        GatekeeperState,
        ThreadEdit,
        aedit_thread,
        aredo_thread,
        athread_diff,
        athread_history,
        aundo_thread,
        edit_thread,
        is_edit_record,
        redo_thread,
        thread_diff,
        thread_history,
        undo_thread,
    )
except ImportError as missing:  # the framework (missing, or too old), not this package: say which extra installs it
    error = MissingExtraError.of_framework(
        missing, adapter="langchain_gatekeeper", needs="LangChain >= 1.3.15 (langchain-core, langchain and langgraph)",
        extra="langchain", packages=_EXTRA_PACKAGES,
        floors={"langchain": "1.3.15", "langchain-core": "1.5.4", "langgraph": "1.2.11"},  # pyproject.toml's langchain extra
    )
    if error is None:
        raise
    raise error from missing

__all__ = [
    # classic chains
    "GatekeeperChatMessageHistory",
    "GatedRunnableWithMessageHistory",
    "topic_gate",
    "TopicGateKeysError",
    # plain message lists (LangGraph, pre_model_hook): shaped like trim_messages
    "gate_messages",
    "agate_messages",
    # agents (LangChain 1.x create_agent)
    "GatekeeperMiddleware",
    "GatekeeperState",
    "ThreadEdit",
    "edit_thread",
    "aedit_thread",
    "undo_thread",
    "aundo_thread",
    "redo_thread",
    "aredo_thread",
    "thread_history",
    "athread_history",
    "thread_diff",
    "athread_diff",
    "is_edit_record",
    # models and conversion
    "DEFAULT_MODEL",
    "LangChainEditModel",
    "default_chat_model",
    "from_core",
    "from_core_messages",
    "resolve_edit_model",
    "to_core",
    "to_core_messages",
]

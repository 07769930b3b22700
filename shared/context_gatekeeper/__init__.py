"""context-gatekeeper: topic-gated context selection and mutable transcripts for LLM chat."""

from __future__ import annotations

__version__ = "0.1.0"

from .errors import (
    BudgetError,
    EditError,
    GatekeeperError,
    ModelUnavailableError,
    StaleHeadError,
    UnknownMessageError,
    UnknownTurnError,
)
from .tokens import estimate_tokens, resolve_token_counter, tiktoken_counter

__all__ = [
    "__version__",
    "BudgetError",
    "EditError",
    "GatekeeperError",
    "ModelUnavailableError",
    "StaleHeadError",
    "UnknownMessageError",
    "UnknownTurnError",
    "estimate_tokens",
    "resolve_token_counter",
    "tiktoken_counter",
]

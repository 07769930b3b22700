"""context-gatekeeper: topic-gated context selection and mutable transcripts for LLM chat."""

from __future__ import annotations

__version__ = "0.1.0"

from .anchors import extract as extract_anchors
from .errors import (
    BudgetError,
    EditError,
    GatekeeperError,
    InvalidInputError,
    ModelUnavailableError,
    StaleHeadError,
    UnknownMessageError,
    UnknownTurnError,
)
from .gate import Decision, GateFeatures
from .gatekeeper import ContextGatekeeper
from .params import SelectionParams
from .selection import Selection, Turn, TurnScore
from .tokens import estimate_tokens, resolve_token_counter, tiktoken_counter

__all__ = [
    "__version__",
    "ContextGatekeeper",
    "Decision",
    "GateFeatures",
    "Selection",
    "SelectionParams",
    "Turn",
    "TurnScore",
    "extract_anchors",
    "InvalidInputError",
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

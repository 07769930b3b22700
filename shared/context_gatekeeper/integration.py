"""The integration surface: the names adapters and applications build on.

:mod:`context_gatekeeper` exports what application code needs (``Transcript``,
``ContextGatekeeper``, the stores, the errors, ...).  Code that *integrates* the
core with something else needs a few more: a framework adapter converts messages
and keeps agent threads in its own checkpointed state, the terminal chat renders
diffs and checks session files.  Those names are declared here, and only here:
the adapters (``langchain_gatekeeper``, ``llamaindex_gatekeeper``) and the
terminal chat (``context_gatekeeper.chat``) import nothing else from the core's
rooms (``tests/test_architecture.py`` checks it).  Each name keeps its meaning
within a minor version, like the top-level names; moving or changing one is a
deprecation, never a silent break.

Groups (see ``docs/architecture.md`` for how the rooms fit):

* **transcript records**: the change vocabulary (``Put``, ``Remove``, ``Change``,
  ``Applied``, ``Request``, ``State``), applying and inverting changes
  (``apply_changes``, ``invert``, ``touched_ids``), serialising them
  (``change_to_dict`` / ``change_from_dict``), message ids (``new_message_id``,
  ``ROLES`` and their type ``Role``), and revision logs (``RevisionKind``, ``STATE_CHANGING``,
  ``diff_states``, ``undo_stacks``, ``split_applicable``, ``rewind``, ``replay``,
  ``Skipped``, ``SKIP_REASONS``): what an adapter needs to keep its own versioned
  log (LangGraph threads) with the core's undo rules; ``lines_to_blocks`` (an edited
  text cut back into a multimodal message's text blocks, each line where its own stood).
* **versioned objects**: ``VersionedTranscriptMixin``, the version operations
  (undo, redo, revert, diff, history, ...) a framework object gets by delegating
  to a ``Transcript``.
* **editing**: ``compute_edit`` / ``acompute_edit`` / ``EditResult`` (an edit as
  changes, committed by the caller), ``check_instruction`` (an edit instruction checked
  before the adapter looks for its model), ``DEFAULT_MAX_DELETION_SHARE``,
  ``deleted_share``, ``tool_violations``, the model plumbing an adapter's model
  wrapper uses (``as_edit_model``, ``finish_reason_of``, ``refuse_truncated``,
  ``is_unavailable_error``, ``DEFAULT_GEMINI_MODEL``, ``gemini_api_key``), the
  reply-text helper ``replace_lone_surrogates``, ``take_estimate_notice`` (an application
  that shows the token-estimate notice itself), ``normalized_text`` (text as every
  store keeps it: surrogate pairs joined, lone surrogates escaped) and
  ``ideal_patch_reply`` (the answer a perfect model would give: offline demos).
* **selection over framework lists**: ``group_turns`` / ``MessageTurn`` (messages
  to turns), ``indexed_texts`` (a turn's texts as the gatekeeper indexes and prices
  them: one text a message), ``TurnIndex`` (an incremental index over a list that grows) and
  ``kept_covering`` (what ``select_covering`` keeps, counting only the costs it needs)
  with ``may_match`` (which texts may hold a query's anchors, before extracting them),
  ``held_anchors`` (which of them a text holds, mostly without extracting it) and
  ``anchor_set`` (a text's distinct anchors, all that coverage reads).
* **stores**: ``IdEntry`` and ``check_revision``, the integrity check every store
  runs before it writes (for adapters that import a revision log); ``store_spec`` and
  ``store_from_spec``, how a pickled adapter object names its store and reopens it;
  ``names_postgres``, whether a store string is a PostgreSQL one (as ``Transcript(store=...)`` decides).
* **semantic channel**: ``text_hash`` (the text half of a vector key),
  ``UnusableVectorError`` (an embedder answered with vectors that cannot be used: no outage),
  ``unit_rows`` and ``load_numpy`` (numpy, imported on first use), ``state_of`` (an
  embedder's lanes and outage state) and ``call_within`` / ``acall_within`` (one call on a
  lane, its timeout counted from the call's start).
"""

from __future__ import annotations

from .caching import BoundedCache, hashable, text_key
from .tokens import take_estimate_notice
from .validation import require_budget, require_items, require_timeout
from .editing.checks import DEFAULT_MAX_DELETION_SHARE, deleted_share, tool_violations
from .editing.compute import EditResult, acompute_edit, check_instruction, compute_edit
from .editing.format import ideal_patch_reply
from .editing.gemini import DEFAULT_GEMINI_MODEL, gemini_api_key
from .editing.models import as_edit_model, finish_reason_of, is_unavailable_error, refuse_truncated
from .editing.parse import replace_lone_surrogates
from .selection.semantic.embedding import UnusableVectorError, text_hash
from .selection.semantic.fusion import numpy as load_numpy
from .selection.semantic.fusion import unit_rows
from .selection.semantic.runner import acall_within, call_within, state_of
from .stores.integrity import IdEntry, check_revision
from .stores.spec import store_from_spec, store_spec
from .records.messages import ROLES, Role, new_message_id, normalized_text
from .records.operations import (
    Applied,
    Change,
    Put,
    Remove,
    Request,
    State,
    apply_changes,
    change_from_dict,
    change_to_dict,
    invert,
    require_requests,
    touched_ids,
)
from .records.blocks import lines_to_blocks
from .records.replay import SKIP_REASONS
from .records.revisions import (
    STATE_CHANGING, RevisionKind, Skipped, diff_states, replay, rewind, split_applicable, undo_stacks,
)
from .transcripts.transcript_gate import MessageTurn, TurnIndex, arguments_text, group_turns, indexed_texts
from .selection.anchors import anchor_set
from .selection.options import report_overflow
from .selection.coverage import held_anchors, kept_covering, may_match
from .transcripts.transcript import names_postgres
from .transcripts.versioned import VersionedTranscriptMixin

__all__ = [
    # per-text caches
    "BoundedCache",
    "text_key",
    "hashable",
    # input checks (the one budget rule, for adapters whose budget may be None; lists of items; timeouts)
    "require_budget",
    "require_items",
    "require_timeout",
    "require_requests",
    "report_overflow",
    # transcript records
    "Applied",
    "Change",
    "Put",
    "Remove",
    "Request",
    "State",
    "apply_changes",
    "change_from_dict",
    "change_to_dict",
    "invert",
    "touched_ids",
    "ROLES",
    "Role",
    "new_message_id",
    "RevisionKind",
    "STATE_CHANGING",
    "Skipped",
    "SKIP_REASONS",
    "diff_states",
    "rewind",
    "replay",
    "split_applicable",
    "undo_stacks",
    "lines_to_blocks",
    # versioned objects
    "VersionedTranscriptMixin",
    # editing
    "EditResult",
    "compute_edit",
    "acompute_edit",
    "check_instruction",
    "DEFAULT_MAX_DELETION_SHARE",
    "deleted_share",
    "tool_violations",
    "as_edit_model",
    "finish_reason_of",
    "refuse_truncated",
    "is_unavailable_error",
    "DEFAULT_GEMINI_MODEL",
    "gemini_api_key",
    "replace_lone_surrogates",
    "normalized_text",
    "take_estimate_notice",
    "ideal_patch_reply",
    # selection over framework lists
    "MessageTurn",
    "group_turns",
    "indexed_texts",
    "arguments_text",
    "TurnIndex",
    "kept_covering",
    "may_match",
    "held_anchors",
    "anchor_set",
    # stores
    "IdEntry",
    "check_revision",
    "store_spec",
    "store_from_spec",
    "names_postgres",
    # semantic channel
    "text_hash",
    "unit_rows",
    "UnusableVectorError",
    "load_numpy",
    "state_of",
    "call_within",
    "acall_within",
]

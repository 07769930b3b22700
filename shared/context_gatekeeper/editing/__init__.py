"""Editing room: a model turns a natural-language instruction into changes on ids.

:mod:`.models` (the ``EditModel`` protocol and the one model picker,
``resolve_model``), :mod:`.failures` (which model errors mean "unavailable"),
:mod:`.finish_reasons` (reading a reply's finish reason),
:mod:`.gemini` (the default Gemini 2.5 Flash model), :mod:`.options`
(``EditOptions``), :mod:`.format` (the prompt and the reply format),
:mod:`.extract` (finding the JSON in a reply: fences, prose, checked repair,
cut-off answers), :mod:`.parse` (the reply as requests on ids), :mod:`.checks`
(structure, tool pairs, the deletion guard) and :mod:`.compute`
(``compute_edit``: ask, check, retry once, return changes).  Editing commits
nothing: the transcript does.

Imports: the foundation modules and the transcript records (messages,
operations); never ``Transcript``, stores or selection.  See
``docs/architecture.md``.

``compute_edit`` and its companions (and the ``Strategy`` type) are importable
from here as they were from the former ``context_gatekeeper.editing`` module.
"""

from __future__ import annotations

from .compute import MAX_ATTEMPTS, STRATEGIES, EditOptions, EditResult, acompute_edit, compute_edit
from .options import Strategy

__all__ = ["EditResult", "EditOptions", "Strategy", "compute_edit", "acompute_edit", "STRATEGIES", "MAX_ATTEMPTS"]

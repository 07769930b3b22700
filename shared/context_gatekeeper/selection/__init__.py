"""Selection room: which earlier turns the current message needs, under a budget.

The path of a select, in module order: :mod:`.anchors` (words, CJK n-grams and
technical terms, with :mod:`.stopwords` and :mod:`.glossary`), :mod:`.cues`
(reference cues such as "as I said"), :mod:`.index` (an incremental inverted
index of turns), :mod:`.history` (the turns and their statistics),
:mod:`.segments` and :mod:`.gate` (does the query continue the active topic?),
:mod:`.scoring` (BM25/IDF formulas as small pure functions), :mod:`.selector`
(greedy minimum coverage under the token budget), :mod:`.params` (every tunable
number), :mod:`.records` (what a select returns) and :mod:`.coverage` (the same
cover over arbitrary passages, for retrieved nodes).  :mod:`.gatekeeper` holds
:class:`~context_gatekeeper.ContextGatekeeper`, the room's facade.  The optional
embedding channel is the :mod:`.semantic` sub-room.

Imports: the foundation modules only (``errors``, ``tokens``, ``validation``);
never transcripts, editing or stores.  See ``docs/architecture.md``.

The record types (and the gate's ``Decision`` and ``GateFeatures`` they carry)
are importable from here as they were from the former
``context_gatekeeper.selection`` module.
"""

from __future__ import annotations

from .gate import Decision, GateFeatures
from .records import Evidence, Selection, Turn, TurnScore

__all__ = ["Turn", "Evidence", "TurnScore", "Selection", "Decision", "GateFeatures"]

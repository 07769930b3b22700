"""The semantic part of coverage selection: similarities calibrated on the candidates.

Used by :func:`~context_gatekeeper.selection.coverage.select_covering` when it is given each
candidate's similarity to the query.  Pure Python (a candidate set is small); no numpy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from ...errors import InvalidInputError
from ..params import SelectionParams
from .fusion import mix_part

__all__ = ["SEMANTIC", "calibrated", "tie_break", "with_meaning"]

SEMANTIC = "semantic"
"""Kept on its meaning: it holds none of the query's informative anchors, but its
similarity to the query stands out among the candidates' (z >= ``semantic_floor``)."""


def calibrated(similarities: Sequence[float | None] | None, count: int, params: SelectionParams) -> list[float | None]:
    """Each candidate's similarity as a z-score over the candidates that have one (``None``
    for the others, and for all when fewer than ``params.semantic_min_turns`` have one)."""
    if similarities is None:
        return [None] * count
    if len(similarities) != count:
        raise InvalidInputError(
            f"got {len(similarities)} similarities for {count} texts; pass one per text (None: unknown)"
        )
    known = [float(s) for s in similarities if s is not None]
    if len(known) < max(2, params.semantic_min_turns):
        return [None] * count
    mean = sum(known) / len(known)
    std = max((sum((s - mean) ** 2 for s in known) / len(known)) ** 0.5, 1e-6)
    return [None if s is None else (float(s) - mean) / std for s in similarities]


def tie_break(z: float | None, params: SelectionParams) -> float:
    """A semantic match's part in the greedy step's tie-break (calibrated mixing)."""
    return mix_part(z or 0.0, params.semantic_floor, params.semantic_top_z, params.semantic_weight)


def with_meaning(
    explanations: list[Any], similarities: Sequence[float | None] | None, zs: list[float | None], evidence: list[bool]
) -> list[Any]:
    """The explanations with each one's similarity, z-score and semantic role filled in."""
    if similarities is None:
        return explanations
    return [
        replace(e, similarity=None if similarities[e.index] is None else float(similarities[e.index]),
                similarity_z=zs[e.index], semantic=evidence[e.index], decisive=e.reason == SEMANTIC)
        for e in explanations
    ]

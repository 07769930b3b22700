"""Scoring formulas, each a tiny pure function, chosen by name from a dict.

After bm25s: formulas are data; :class:`~context_gatekeeper.selection.params.SelectionParams`
names the IDF variant to use.
"""

from __future__ import annotations

import math
from collections.abc import Callable

__all__ = [
    "IDF_FORMULAS", "idf_bm25", "idf_smooth", "bm25_saturation", "recency_prior", "recency_weights", "coverage_gain",
]


def idf_bm25(df: int, n: float) -> float:
    """Lucene's BM25 IDF: ``ln(1 + (n - df + 0.5) / (df + 0.5))``; always positive."""
    return math.log(1.0 + (n - df + 0.5) / (df + 0.5))


def idf_smooth(df: int, n: float) -> float:
    """Smoothed classic IDF: ``ln((n + 1) / (df + 0.5))``; unseen terms weigh most."""
    return math.log((n + 1.0) / (df + 0.5))


IDF_FORMULAS: dict[str, Callable[[int, float], float]] = {"bm25": idf_bm25, "smooth": idf_smooth}
"""IDF variants by name."""


def bm25_saturation(tf: int, doc_len: int, avg_len: float, k1: float, b: float) -> float:
    """BM25's term-frequency part: saturates in ``tf``, normalised by document length.

    Returns 0 for ``tf == 0`` and tends to ``k1 + 1`` as ``tf`` grows.
    """
    if tf <= 0:
        return 0.0
    norm = 1.0 - b + b * (doc_len / avg_len if avg_len > 0 else 1.0)
    return tf * (k1 + 1.0) / (tf + k1 * norm)


def recency_prior(distance: int, half_life: float) -> float:
    """1.0 for the newest turn (``distance == 0``), halving every ``half_life`` turns."""
    return 0.5 ** (distance / half_life) if half_life > 0 else 0.0


_RECENCY: dict[tuple[float, float], list[float]] = {}
"""``recency_weights``' tables by ``(weight, half_life)``; a few settings per process."""
_RECENCY_KEYS = 64


def recency_weights(weight: float, half_life: float, n: int) -> list[float]:
    """``weight * recency_prior(d, half_life)`` for every distance ``d`` in ``0..n-1`` (at
    least): the same floats as computing each, taken from a table kept per setting and
    grown by doubling, so scoring a query costs a list lookup per candidate, not a power.
    The caller must not change the list."""
    key = (weight, half_life)
    table = _RECENCY.get(key)
    if table is None or len(table) < n:
        size = max(n, 2 * len(table) if table else 64)
        table = [weight * recency_prior(d, half_life) for d in range(size)]
        if len(_RECENCY) >= _RECENCY_KEYS and key not in _RECENCY:
            _RECENCY.clear()  # settings are few; a process sweeping many starts over
        _RECENCY[key] = table  # a new list, never one grown in place: a concurrent reader sees a whole table
    return table


def coverage_gain(new_weight: float, cost: int, alpha: float) -> float:
    """The report's greedy gain: newly covered anchor weight per ``cost ** alpha``."""
    return new_weight / (max(cost, 1) ** alpha)

"""One unit vector per turn, as the rows of a float32 matrix (the semantic channel's store).

Rows are in the order turns were embedded; a query's similarities and z-scores do not
depend on it (:meth:`TurnVectors.view`, :func:`fusion.zscores`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .embedding import Vector
from .fusion import QueryView, numpy, unit_rows, zscores

__all__ = ["TurnVectors"]


class TurnVectors:
    """turn id -> unit vector, as the rows of one float32 matrix grown by doubling
    (adding or replacing a vector is O(dimension); removing one moves the last row)."""

    def __init__(self) -> None:
        self.ids: list[int] = []
        self.rows: dict[int, int] = {}
        self.hashes: dict[int, str] = {}
        self._matrix: Any = None

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def dim(self) -> int | None:
        """The dimension of the stored vectors (None before the first)."""
        return None if self._matrix is None else int(self._matrix.shape[1])

    def set(self, turn_id: int, vector: Vector, digest: str) -> list[int]:
        """Store a turn's vector (normalised here); another dimension than the stored
        ones means another model: the old vectors are dropped, and their turn ids are
        returned (to be embedded again)."""
        row_vector = unit_rows(vector)[0]
        dropped: list[int] = []
        if self._matrix is not None and self._matrix.shape[1] != row_vector.shape[0]:
            dropped = [t for t in self.ids if t != turn_id]
            self.clear()
        if self._matrix is None:
            self._matrix = numpy().zeros((64, row_vector.shape[0]), dtype=numpy().float32)
        row = self.rows.get(turn_id)
        if row is None:
            row = len(self.ids)
            if row == self._matrix.shape[0]:
                grown = numpy().zeros((2 * row, self._matrix.shape[1]), dtype=self._matrix.dtype)
                grown[:row] = self._matrix
                self._matrix = grown
            self.ids.append(turn_id)
            self.rows[turn_id] = row
        self._matrix[row] = row_vector
        self.hashes[turn_id] = digest
        return dropped

    def drop(self, turn_id: int) -> None:
        """Forget a turn's vector (nothing happens when it has none)."""
        row = self.rows.pop(turn_id, None)
        self.hashes.pop(turn_id, None)
        if row is None:
            return
        last = len(self.ids) - 1
        if row != last:
            moved = self.ids[last]
            self._matrix[row] = self._matrix[last]
            self.ids[row], self.rows[moved] = moved, row
        self.ids.pop()

    def clear(self) -> None:
        self.ids, self.rows, self.hashes, self._matrix = [], {}, {}, None

    def view(self, query: Vector, min_turns: int, present: Mapping[int, Any] | None = None) -> QueryView | None:
        """The query's similarity to every stored turn (``None`` without vectors or on a
        dimension mismatch); calibrated z-scores from ``min_turns`` turns on.  With ``present``
        (the history's turn id -> position), only the turns it holds: a vector kept for a turn
        the history no longer holds (a removal not taken in yet) is left out, never looked up."""
        if self._matrix is None or not self.ids:
            return None
        q = unit_rows(query)[0]
        if q.shape[0] != self._matrix.shape[1]:
            return None
        ids: list[int] = self.ids
        rows: Mapping[int, int] = self.rows
        vectors = self._matrix[: len(ids)]
        if present is not None and not self.rows.keys() <= present.keys():  # (a subset test in C)
            held = [row for row, turn_id in enumerate(ids) if turn_id in present]
            if not held:
                return None
            ids = [ids[row] for row in held]
            rows = {turn_id: row for row, turn_id in enumerate(ids)}
            vectors = vectors[held]
        # each row's dot product computed alike wherever the row is (a matrix-vector product
        # sums a row differently by where it falls in the BLAS kernel's blocks, so the same
        # turns embedded in another order would get similarities a last bit apart)
        sims = numpy().einsum("ij,j->i", vectors, q)
        z = zscores(sims) if len(ids) >= max(2, min_turns) else None
        return QueryView(ids, rows, sims, z, vectors)

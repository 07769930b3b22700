"""The in-memory store: the default, for one process."""

from __future__ import annotations

import threading

from ..revisions import Revision
from .base import Store, place_revision

__all__ = ["InMemoryStore"]


class InMemoryStore(Store):
    """Revision logs in a dict, guarded by a lock.  Lost when the process ends."""

    def __init__(self) -> None:
        self._logs: dict[str, list[Revision]] = {}
        self._lock = threading.Lock()

    def setup(self) -> None:
        """Nothing to create."""

    def head(self, session_id: str) -> int:
        with self._lock:
            log = self._logs.get(session_id)
            return log[-1].number if log else 0

    def revisions(self, session_id: str, after: int = 0) -> list[Revision]:
        with self._lock:
            return list(self._logs.get(session_id, [])[max(after, 0) :])

    def commit(self, session_id: str, revision: Revision, *, expected_head: int | None) -> Revision:
        with self._lock:
            self._fault("begin")
            log = self._logs.get(session_id, [])
            head = log[-1].number if log else 0
            later = log[expected_head:] if expected_head is not None and expected_head < head else []
            stored = place_revision(session_id, revision, head, expected_head, later)
            self._fault("written")
            self._fault("before_commit")
            self._logs.setdefault(session_id, []).append(stored)
            return stored

    def purge(self, session_id: str) -> None:
        with self._lock:
            self._logs.pop(session_id, None)

    def sessions(self) -> list[str]:
        with self._lock:
            return sorted(self._logs)

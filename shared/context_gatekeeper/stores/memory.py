"""The in-memory store: the default, for one process."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping

from ..revisions import Revision
from .base import Store, checked_keep, prepare_commit
from .integrity import IdEntry, index_of_log

__all__ = ["InMemoryStore"]


class InMemoryStore(Store):
    """Revision logs in a dict, guarded by a lock.  Lost when the process ends.

    Revisions go in and come out as copies (:meth:`Revision.detached`), so mutating a
    message's ``metadata`` or ``parts`` after committing or reading never changes the log.
    """

    def __init__(self) -> None:
        self._logs: dict[str, list[Revision]] = {}
        self._index: dict[str, dict[str, IdEntry]] = {}
        self._set_aside: dict[str, list[Revision]] = {}
        self._lock = threading.Lock()

    def setup(self) -> None:
        """Nothing to create."""

    def head(self, session_id: str) -> int:
        with self._lock:
            log = self._logs.get(session_id)
            return log[-1].number if log else 0

    def tip(self, session_id: str) -> tuple[int, float]:
        with self._lock:
            log = self._logs.get(session_id)
            return (log[-1].number, log[-1].time) if log else (0, 0.0)

    def revisions(self, session_id: str, after: int = 0) -> list[Revision]:
        with self._lock:
            return [r.detached() for r in self._logs.get(session_id, [])[max(after, 0) :]]

    def commit(
        self, session_id: str, revision: Revision, *, expected_head: int | None, renew_taken_ids: bool = False
    ) -> Revision:
        with self._lock:
            self._fault("begin")
            log = self._logs.get(session_id, [])
            index = self._index.get(session_id, {})
            head = log[-1].number if log else 0
            later = log[expected_head:] if isinstance(expected_head, int) and 0 <= expected_head < head else []

            def lookup(ids: Iterable[str]) -> Mapping[str, IdEntry]:
                return {i: index[i] for i in ids if i in index}

            stored, rows = prepare_commit(session_id, revision, head, expected_head, later, lookup, renew_taken_ids)
            if stored.number == head:
                return stored.detached()  # a no-op: nothing to write
            self._fault("written")
            self._fault("before_commit")
            self._logs.setdefault(session_id, []).append(stored.detached())
            self._index.setdefault(session_id, {}).update(rows)
            return stored.detached()

    def truncate(self, session_id: str, keep: int) -> int:
        keep = checked_keep(keep)
        with self._lock:
            log = self._logs.get(session_id, [])
            dropped = log[keep:]
            if dropped:
                self._set_aside.setdefault(session_id, []).extend(dropped)
                del log[keep:]
                self._index[session_id] = index_of_log(log)
                if not log:
                    self._logs.pop(session_id, None)
            return len(dropped)

    def purge(self, session_id: str) -> None:
        with self._lock:
            self._logs.pop(session_id, None)
            self._index.pop(session_id, None)
            self._set_aside.pop(session_id, None)

    def sessions(self) -> list[str]:
        with self._lock:
            return sorted(self._logs)

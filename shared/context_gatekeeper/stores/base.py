"""The store interface every backend implements (in-memory, SQLite, PostgreSQL).

A store keeps, per session, the ordered log of :class:`~context_gatekeeper.records.revisions.Revision`
records.  It knows nothing about messages beyond serialising revisions; the
:class:`~context_gatekeeper.transcripts.transcript.Transcript` rebuilds state from the log.

Contract (checked by :mod:`context_gatekeeper.testing.stores`, which every backend runs; see
``docs/architecture.md#how-to-add-a-store``):

* ``setup()`` is idempotent; schema changes are an add-only list of migrations
  recorded in a table.
* ``commit`` is one transaction: it either stores the whole revision as number
  ``head + 1`` or nothing (a failure, or a crash at any point, leaves the
  previous revision intact).
* Appends (``expected_head=None``) commit at whatever the head is and never
  conflict.  Other revisions give the head they were computed on: if the head has
  moved, the revision still commits (rebased) when every revision since is an
  append touching none of its messages (:func:`revisions.rebase_conflicts`);
  otherwise ``StaleHeadError``, and nothing is written.
* ``commit`` also checks, in the same transaction, that the revision applies to
  the head it follows (:func:`.integrity.check_revision`, against the session's id
  index): otherwise :class:`InvalidRevisionError` and nothing is written.  A
  retried append (ids already used, same role and text) is dropped; a revision
  left with no changes is not written, and ``commit`` returns it numbered like
  the head it leaves unchanged, with no changes.  The check trusts the index for the
  ids it does not list (confirming them would cost a read of the whole log per
  commit): an index whose rows were deleted by hand lets an append reuse an id the log
  holds, and the session then fails to load at that revision (:class:`CorruptLogError`
  naming the truncate that sets it aside).  A refusal, and a retry dropped, are checked
  against the log, and ``Transcript`` checks its appends against the log it has read,
  so it never writes such a revision.
* ``truncate(session_id, keep)`` sets aside the revisions above ``keep``: the
  documented recovery for a log that fails to load (:class:`CorruptLogError`).
* ``fault_hook``, when set, is called with a point name at fixed places inside the
  write transaction ("begin", "written", "before_commit"), so tests can make a
  writer fail or die mid-transaction deterministically.
* Objects are safe to share between threads.  Async twins never block the event
  loop (by default they run the sync method in a worker thread).
"""

from __future__ import annotations

import asyncio
import inspect
import operator
import threading
import time
import weakref
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import SupportsIndex

from ..errors import InvalidInputError, InvalidRevisionError, InvalidTypeError, StaleHeadError, StoreCapabilityError
from ..records.revisions import Revision, rebase_conflicts, storable_revision
from .chain import field_problem
from .integrity import IdEntry, Lookup, checked_revision, index_damage, retry_damage

__all__ = [
    "Store", "FaultHook", "FAULT_POINTS", "place_revision", "prepare_commit", "checked_keep", "checked_after",
    "checked_seconds", "takes_keyword", "COMMIT_KEYWORDS",
]

FaultHook = Callable[[str], None]
FAULT_POINTS = ("begin", "written", "before_commit")


def place_revision(
    session_id: str, revision: Revision, head: int, expected_head: int | None, later: Sequence[Revision]
) -> Revision:
    """Number ``revision`` for a store whose head is ``head`` (the check every backend runs
    inside its write transaction).

    ``later`` must hold the revisions after ``expected_head`` when it differs from ``head``.
    Raises :class:`StaleHeadError` when the revision cannot be rebased over them.
    """
    if expected_head is not None and (isinstance(expected_head, bool) or not isinstance(expected_head, int)):
        raise InvalidTypeError(
            f"expected_head must be None or an int, got {type(expected_head).__name__}; pass the head "
            "revision number you last read (store.head(session_id)), or None to skip the check"
        )
    if expected_head is not None and expected_head < 0:
        raise InvalidInputError(f"expected_head must be None or a revision number >= 0, got {expected_head}")
    base = head if expected_head is None else expected_head
    if expected_head is not None and expected_head != head:
        if expected_head > head:
            raise StaleHeadError(
                f"session {session_id!r}: this change was computed at revision {expected_head}, "
                f"but the store's head is {head}; reload the transcript and try again"
            )
        blocking = rebase_conflicts(later, revision.changes)
        if blocking:
            raise StaleHeadError(
                f"session {session_id!r}: revision(s) {blocking} changed the transcript after revision "
                f"{expected_head}, which this {revision.kind} was computed on; nothing was written. "
                "Reload (read transcript.messages) and run it again."
            )
    return replace(revision, number=head + 1, parent=head, base=base, time=time.time())


def prepare_commit(
    session_id: str,
    revision: Revision,
    head: int,
    expected_head: int | None,
    later: Sequence[Revision],
    lookup: Lookup,
    renew_taken_ids: bool,
    log: Callable[[], Iterable[Revision]] | None = None,
) -> tuple[Revision, dict[str, IdEntry]]:
    """:func:`place_revision`, then :func:`.integrity.check_revision`: the revision to
    store and the id-index rows to write (no changes: write nothing).

    ``log`` reads the session's verified revisions 1..``head`` (in the same transaction).
    When given and the index refuses the revision, the refused ids' index rows are checked
    against the log (:func:`.integrity.index_damage`): an index changed outside the library
    raises :class:`CorruptLogError` naming the repair instead of a refusal that reloading
    never clears.  Likewise, when the index takes messages of an append for retries, the
    log must hold them (:func:`.integrity.retry_damage`), else :class:`CorruptLogError`
    instead of messages dropped without a word.  Only a refused commit, or an append
    holding a retry, reads the log."""
    placed = place_revision(session_id, storable_revision(revision), head, expected_head, later)
    try:
        checked, rows, retried = checked_revision(session_id, placed, lookup, renew_taken_ids=renew_taken_ids)
    except (InvalidRevisionError, InvalidInputError):
        damage = index_damage(session_id, placed, head, lookup, log()) if log is not None else None
        if damage is not None:
            raise damage from None
        raise
    if retried and log is not None:
        lost = retry_damage(session_id, head, retried, log())
        if lost is not None:
            raise lost
    problem = field_problem(checked.number, checked.parent, checked.kind, checked.base, checked.target)
    if problem is not None:  # what a read would refuse (see .chain) is never written
        raise InvalidRevisionError(f"session {session_id!r}: {problem}; nothing was written. Give a target that fits")
    if not checked.changes:
        return replace(checked, number=head, parent=head), {}
    return checked.stamped(), rows


COMMIT_KEYWORDS: dict[str, str] = {
    "renew_taken_ids": "an append's message under a taken id gets a fresh id inside the write transaction "
    "(without it, Transcript renews taken ids itself, from what it has read, before committing)",
}
"""Optional keywords of :meth:`Store.commit`, added after the first release, and what each
gives.  A store whose ``commit`` does not take one still works: the library does the work
on its side, or refuses with :class:`StoreCapabilityError` naming it (never a TypeError)."""

_KEYWORDS: weakref.WeakKeyDictionary[type, dict[tuple[str, str], bool]] = weakref.WeakKeyDictionary()
_KEYWORDS_LOCK = threading.Lock()


def takes_keyword(store: object, name: str, method: str = "commit") -> bool:
    """Whether ``store``'s ``method`` accepts the keyword argument ``name`` (or any, through
    ``**kwargs``): inspected once per class, as LangGraph detects what a checkpointer can
    do, so a store written before a keyword existed is never called with it."""
    cls = type(store)
    with _KEYWORDS_LOCK:
        known = _KEYWORDS.setdefault(cls, {})
        found = known.get((method, name))
    if found is not None:
        return found
    function = getattr(cls, method, None)
    try:
        parameters = inspect.signature(function).parameters if function is not None else {}
    except (TypeError, ValueError):  # no signature to read (a builtin): assume the old contract
        parameters = {}
    kinds = (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    found = (name in parameters and parameters[name].kind in kinds) or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()
    )
    with _KEYWORDS_LOCK:
        known[(method, name)] = found
    return found


def lacking_keyword(store: object, name: str, method: str = "commit") -> StoreCapabilityError:
    """The error for a call that needs ``method``'s keyword ``name``, which ``store`` lacks."""
    what = COMMIT_KEYWORDS.get(name, "")
    return StoreCapabilityError(
        f"{type(store).__name__}.{method} does not take {name}=, a capability this call needs"
        + (f" ({what})" if what else "")
        + f"; nothing was written. Add the keyword to {type(store).__name__}.{method} (see Store.{method}), or call "
        "it through Transcript, which works around it"
    )


def checked_keep(keep: object) -> int:
    """``keep`` for :meth:`Store.truncate` if it is an int >= 0."""
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 0:
        raise InvalidInputError(f"truncate keeps revisions 1..keep: keep must be an int >= 0, got {keep!r}")
    return keep


MAX_REVISION = 2**63 - 1
"""No revision number is higher: SQLite's largest integer (it cannot even bind a larger one).
PostgreSQL's ``number`` column is an ``integer``, whose largest is 2**31 - 1
(:data:`.postgres_ops.LARGEST_NUMBER`); a larger ``after`` compares with it all the same."""


def checked_after(after: object) -> int:
    """``after`` for :meth:`Store.revisions` as an int: any integer (``operator.index``
    takes it: a NumPy integer too); below 0 counts as 0 (every revision), above
    :data:`MAX_REVISION` as it (none: SQLite cannot even bind a larger one)."""
    if isinstance(after, bool) or not isinstance(after, SupportsIndex):
        raise InvalidTypeError(
            f"revisions(after=...) takes a revision number (an int), got {type(after).__name__} {after!r}; "
            "pass 0 for every revision, or the number of the last revision you have read"
        )
    return min(max(operator.index(after), 0), MAX_REVISION)


MAX_SECONDS = 2_147_483.647
"""The longest wait a database driver takes, in seconds (2**31 - 1 milliseconds)."""


def checked_seconds(name: str, value: object, *, zero: bool, hint: str = "") -> float:
    """``value`` (an argument ``name`` of a store) as seconds to wait: a finite number of
    seconds, above 0 (``zero``: or 0), up to :data:`MAX_SECONDS`; ``hint`` ends the error."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidTypeError(f"{name} must be a number of seconds, got {type(value).__name__} {value!r}{hint}")
    if not (0 <= value <= MAX_SECONDS) or (value == 0 and not zero):  # NaN fails every comparison
        least = "0 or more" if zero else "more than 0"
        raise InvalidInputError(
            f"{name} must be a number of seconds, {least} and at most {MAX_SECONDS} (about 24 days), got "
            f"{value!r}{hint}"
        )
    return float(value)


class Store(ABC):
    """Keeps the revision log of each session.

    Revisions go in and come out as copies (or values nothing can change): a caller that
    mutates a message's ``metadata`` or ``parts`` after ``commit`` or a read never changes
    the log.  A session that ``truncate(session, 0)`` emptied holds nothing and, like a
    purged one, is not listed by ``sessions()``; ``stored_sessions()`` lists it, as its
    revisions are kept set aside until it is purged.
    """

    fault_hook: FaultHook | None = None

    # -- sync ---------------------------------------------------------------------------
    @abstractmethod
    def setup(self) -> None:
        """Create or migrate the schema (idempotent)."""

    @abstractmethod
    def head(self, session_id: str) -> int:
        """The latest revision number of a session (0 when it has none)."""

    @abstractmethod
    def revisions(self, session_id: str, after: int = 0) -> list[Revision]:
        """The revisions numbered above ``after``, in order (``after``: an int, see
        :func:`checked_after`; anything else raises :class:`InvalidTypeError`)."""

    def _shared_revisions(self, session_id: str, after: int = 0) -> list[Revision]:
        """:meth:`revisions`, for a reader inside the library that never changes what it gets
        nor hands it out uncopied (the transcript's replica): a store may return revisions
        shared with other such readers (the SQL stores: decoded once per row and process,
        :data:`.chain.decoded_revisions`, the chain verified on every read as always).
        By default, :meth:`revisions`."""
        return self.revisions(session_id, after)

    def tip(self, session_id: str) -> tuple[int, float]:
        """``(head, time of the head revision)``, ``(0, 0.0)`` for an empty session: what a
        transcript checks before every read.  Stores override it with one small query."""
        head = self.head(session_id)
        last = self.revisions(session_id, after=head - 1) if head else []
        return (last[-1].number, last[-1].time) if last else (0, 0.0)

    @abstractmethod
    def commit(
        self, session_id: str, revision: Revision, *, expected_head: int | None, renew_taken_ids: bool = False
    ) -> Revision:
        """Store ``revision`` as the next one, atomically, and return it as stored
        (``number``, ``parent`` and ``base`` filled in); see the module docstring.
        ``renew_taken_ids``: an append's message whose id is taken and that is not a
        retry (see :mod:`.integrity`) gets a fresh id instead of being refused."""

    def truncate(self, session_id: str, keep: int) -> int:
        """Set aside every revision above ``keep`` (kept apart, never loaded again) and
        rebuild the session's id index; returns how many were set aside.  The recovery
        for a log whose revision ``keep + 1`` fails to load (:class:`CorruptLogError`)."""
        raise NotImplementedError(f"{type(self).__name__} does not support truncate")

    @abstractmethod
    def purge(self, session_id: str) -> None:
        """Erase a session entirely, record included."""

    @abstractmethod
    def sessions(self) -> list[str]:
        """Ids of the sessions that have at least one revision."""

    def stored_sessions(self) -> list[str]:
        """Ids of every session the store keeps anything of, sorted: those :meth:`sessions`
        lists, and those ``truncate(session, 0)`` emptied, whose revisions are kept set aside.
        Purging each of them erases everything the store holds (what :meth:`sessions` alone
        would miss).  By default :meth:`sessions`, for a store that sets nothing aside."""
        return sorted(self.sessions())

    def close(self) -> None:
        """Release connections; idempotent.  The store may not be used afterwards: a call on
        a closed store raises :class:`~context_gatekeeper.errors.StoreClosedError` (as every
        built-in store's does) and writes nothing.  A store that keeps working after
        ``close`` must keep what it commits then, where every handle reads it; it never
        returns a revision as committed and loses it (the conformance suite checks both)."""

    def _fault(self, point: str) -> None:
        if self.fault_hook is not None:
            self.fault_hook(point)

    # -- async twins --------------------------------------------------------------------
    async def asetup(self) -> None:
        await asyncio.to_thread(self.setup)

    async def ahead(self, session_id: str) -> int:
        return await asyncio.to_thread(self.head, session_id)

    async def atip(self, session_id: str) -> tuple[int, float]:
        return await asyncio.to_thread(self.tip, session_id)

    async def arevisions(self, session_id: str, after: int = 0) -> list[Revision]:
        return await asyncio.to_thread(self.revisions, session_id, checked_after(after))

    async def acommit(
        self, session_id: str, revision: Revision, *, expected_head: int | None, renew_taken_ids: bool = False
    ) -> Revision:
        if not renew_taken_ids:
            return await asyncio.to_thread(self.commit, session_id, revision, expected_head=expected_head)
        if not takes_keyword(self, "renew_taken_ids"):  # a store written before the keyword existed
            raise lacking_keyword(self, "renew_taken_ids")
        return await asyncio.to_thread(self.commit, session_id, revision, expected_head=expected_head, renew_taken_ids=True)

    async def atruncate(self, session_id: str, keep: int) -> int:
        return await asyncio.to_thread(self.truncate, session_id, keep)

    async def apurge(self, session_id: str) -> None:
        await asyncio.to_thread(self.purge, session_id)

    async def asessions(self) -> list[str]:
        return await asyncio.to_thread(self.sessions)

    async def astored_sessions(self) -> list[str]:
        return await asyncio.to_thread(self.stored_sessions)

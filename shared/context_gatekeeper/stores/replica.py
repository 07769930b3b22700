"""A session's revision log held in memory and kept in step with its store.

:class:`~context_gatekeeper.Transcript` reads through one: every read first checks
the store's tip (one small query) and applies only the revisions it lacks, on a
:class:`~context_gatekeeper.records.operations.State`, so catching up costs time linear in
what changed.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

from ..errors import CorruptLogError, InvalidRevisionError, UnknownMessageError
from ..records.messages import Message
from ..records.operations import Put, State
from ..records.revisions import Revision
from .base import Store
from .chain import check_fields

__all__ = ["Replica", "collector_paused", "BULK"]

BULK = 1_000
"""Reading more revisions, or committing more changes, than this at once pauses the
cyclic garbage collector (:func:`collector_paused`)."""


@contextmanager
def collector_paused(pause: bool) -> Iterator[None]:
    """Pause the cyclic garbage collector (if ``pause`` and it is on) for the block.

    A long log is loaded as hundreds of thousands of objects that are all kept, so
    collections during the load only re-scan them: about a quarter of the time of
    opening 20,000 turns (and a tenth of a revert of them).  Reference counting still frees everything as usual, and
    the collector is switched back on when the block ends, however it ends.

    When the block ends, what it created is moved to the oldest generation
    (``gc.freeze()`` then ``gc.unfreeze()``, which moves whole generation lists, in
    constant time): left in the youngest, it would be scanned again by the next young
    collection and by the middle generation's after it (about a tenth of opening 20,000
    turns); in the oldest, only full collections scan it, and they still free any cycle
    among it.  Skipped when objects are frozen already (an application that called
    ``gc.freeze()`` itself, as pre-forking servers do, keeps them frozen).
    """
    if not pause or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        if not gc.get_freeze_count():
            gc.freeze()  # every tracked object to the permanent generation ...
            gc.unfreeze()  # ... and back, into the oldest one
        gc.enable()


class Replica:
    """The log of ``session_id`` in ``store`` as far as this object has read it.

    Attributes:
        log: the revisions, oldest first (stamped: each produced version carries its number).
        state: the state they produce.
        used_ids: every message id the session has held (ids are never reused); gathered
            from the log when first read (only ``set`` and renewing ids need it), then kept.
    """

    def __init__(self, store: Store, session_id: str) -> None:
        self.store, self.session_id = store, session_id
        self.reset()

    def reset(self) -> None:
        """Forget everything read (the next :meth:`refresh` reads the log again)."""
        self.log: list[Revision] = []
        self.state = State()
        self._used_ids: set[str] | None = set()  # None: not gathered yet (see used_ids)

    @property
    def used_ids(self) -> set[str]:
        if self._used_ids is None:
            self._used_ids = {c.message.id for r in self.log for c in r.changes if isinstance(c, Put)}
        return self._used_ids

    @property
    def head(self) -> int:
        return len(self.log)

    def refresh(self) -> None:
        """Catch up with the store (the check every read makes).

        The time of the last revision known is compared with the store's, so a session
        that another process purged and rewrote to the same length or longer is
        reloaded rather than served stale.  When nothing changed this costs one small
        query (:meth:`Store.tip`), whatever the size of the revisions.
        """
        head, stamp = self.store.tip(self.session_id)
        known = len(self.log)
        if known and head == known and stamp == self.log[-1].time:
            return
        with collector_paused(head - known > BULK or (not known and head > BULK)):
            self._catch_up(head, known)

    def _catch_up(self, head: int, known: int) -> None:
        if known and head >= known:
            fetched = self.store._shared_revisions(self.session_id, after=known - 1)
            if fetched and fetched[0].number == known and fetched[0].time == self.log[-1].time:
                fetched = fetched[1:]
            else:  # purged and rewritten elsewhere
                self.reset()
                fetched = self.store._shared_revisions(self.session_id)
        elif head != known:  # fewer revisions (purged), or a first read
            self.reset()
            fetched = self.store._shared_revisions(self.session_id) if head else []
        else:
            return
        if not self.log:
            self._used_ids = None  # gathered when first needed: a first read of a long log skips it
        for revision in fetched:
            self.add(revision)

    def add(self, revision: Revision) -> None:
        """Apply the next revision of the log (:class:`CorruptLogError` if it is not numbered
        next, its kind or target cannot be (:func:`.chain.check_fields`, for every store), or
        it does not apply; then everything read is forgotten, so no half-loaded log is ever
        served)."""
        try:
            check_fields(self.session_id, revision, len(self.log) + 1)  # numbered without gaps, kind and target fit
        except CorruptLogError:
            self.reset()
            raise
        stamped = revision.stamped()
        try:
            self.state.apply(stamped.changes)
        except (InvalidRevisionError, UnknownMessageError) as exc:
            self.reset()
            raise CorruptLogError(self.session_id, revision.number, str(exc)) from exc
        if self._used_ids is not None:
            self._used_ids.update(c.message.id for c in stamped.changes if isinstance(c, Put))
        self.log.append(stamped)

    def state_at(self, revision: int) -> list[Message]:
        """The state at ``revision`` (0..head): a replay, linear in the changes up to it."""
        if revision == len(self.log):
            return self.state.to_list()
        state = State()
        for entry in self.log[:revision]:
            state.apply(entry.changes)
        return state.to_list()

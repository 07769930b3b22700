"""The check every store runs inside its write transaction: does a revision apply?

A store keeps, per session, an *id index*: for every message id the session ever
held, whether it is in the current state and a digest of the role and text it was
first appended with.  :func:`check_revision` validates a revision against that
index in time linear in the revision (never in the transcript), and returns the
index rows to write with it.  :func:`index_of_log` rebuilds the index from a log
(migrations backfill with it; it tolerates logs that do not replay).

The rules:

* appends put new messages.  A message whose id the session already used is a
  *retried append*: with the same role and content it is dropped (idempotent);
  otherwise it gets a fresh id when ``renew_taken_ids``, else the revision is
  refused.  A message put after a renamed one follows it under its new id.
* edits, applies, sets and clears may put an id the session used only if this
  revision removed it first (a message moved); ids are never reused.
* undo, redo and revert may put back a message that is absent.
* every revision removes and changes only messages that are present, and puts
  only messages that are absent.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import NamedTuple

from ..errors import InvalidInputError, InvalidRevisionError
from ..messages import Message, new_message_id
from ..operations import Applied, Change, Put, Remove, State, is_noop
from ..revisions import Revision

__all__ = ["IdEntry", "Lookup", "digest", "check_revision", "index_of_log", "touched"]

_RESTORING = frozenset({"undo", "redo", "revert"})


class IdEntry(NamedTuple):
    """One row of a session's id index."""

    present: bool
    digest: str


Lookup = Callable[[Iterable[str]], Mapping[str, IdEntry]]
"""Reads the index rows of the given ids (missing ids: never used)."""


def digest(message: Message) -> str:
    """A short digest of a message's role and text (what a retried append must match)."""
    return hashlib.sha256(f"{message.role}\x00{message.content}".encode("utf-8", "surrogatepass")).hexdigest()[:32]


def touched(changes: Iterable[Applied]) -> set[str]:
    """Every message id ``changes`` put, remove or change."""
    return {c.before.id if isinstance(c, Change) else c.message.id for c in changes}


def _dedupe_append(
    session_id: str, changes: Iterable[Applied], known: dict[str, IdEntry], renew: bool
) -> list[Applied]:
    """An append's puts with retried messages dropped and taken ids renewed."""
    renamed: dict[str, str] = {}
    out: list[Applied] = []
    for change in changes:
        if not isinstance(change, Put):
            raise InvalidRevisionError(f"session {session_id!r}: an append may only put messages, got {change!r}")
        message, after = change.message, change.after
        after = renamed.get(after, after) if isinstance(after, str) else after
        anchor = known.get(after) if isinstance(after, str) else None
        if anchor is not None and not anchor.present:
            raise InvalidRevisionError(
                f"session {session_id!r}: message {after!r}, which this append follows (the question it "
                "answers), was deleted meanwhile; nothing was written. Reload the transcript and append again"
            )
        entry = known.get(message.id)
        if entry is not None:
            if entry.digest == digest(message):
                continue  # the same message again: a retried request
            if not renew:
                raise InvalidInputError(
                    f"message id {message.id!r} is already used in session {session_id!r} with other "
                    "content: ids are never reused; give new messages new ids (or none), or pass "
                    "renew_taken_ids=True"
                )
            fresh = new_message_id()
            renamed[message.id] = fresh
            message = replace(message, id=fresh)
        known[message.id] = IdEntry(True, digest(message))
        out.append(Put(message, after))
    return out


def check_revision(
    session_id: str, revision: Revision, lookup: Lookup, *, renew_taken_ids: bool = False
) -> tuple[Revision, dict[str, IdEntry]]:
    """``(revision as it may be stored, index rows to write)``, or a named error.

    The returned revision has no changes when the whole revision was a no-op (the
    store then writes nothing).  Raises :class:`InvalidRevisionError` when a change
    does not apply and :class:`InvalidInputError` for an id reused with other text.
    """
    changes = revision.changes
    ids = touched(changes)
    if revision.kind == "append":
        ids |= {c.after for c in changes if isinstance(c, Put) and isinstance(c.after, str)}
    before = lookup(ids)  # only read
    known = dict(before)
    if revision.kind == "append":
        checked = _dedupe_append(session_id, changes, known, renew_taken_ids)
        return replace(revision, changes=tuple(checked)), {k: known[k] for k in touched(checked) if before.get(k) != known[k]}
    removed_here: set[str] = set()
    kept: list[Applied] = []  # the changes without the no-ops (changes to identical text)
    for change in changes:
        if isinstance(change, Put):
            message_id = change.message.id
            entry = known.get(message_id)
            if entry is not None and entry.present:
                raise InvalidRevisionError(f"session {session_id!r}: message {message_id!r} is already in the transcript")
            if entry is not None and revision.kind not in _RESTORING and message_id not in removed_here:
                raise InvalidRevisionError(
                    f"session {session_id!r}: message id {message_id!r} was used before; ids are never reused"
                )
            old = before.get(message_id)
            known[message_id] = IdEntry(True, old.digest if old else digest(change.message))
            kept.append(change)
        else:
            message_id = change.before.id if isinstance(change, Change) else change.message.id
            entry = known.get(message_id)
            if entry is None or not entry.present:
                raise InvalidRevisionError(
                    f"session {session_id!r}: message {message_id!r} is not in the transcript, so this "
                    f"{revision.kind} cannot {'change' if isinstance(change, Change) else 'remove'} it; "
                    "reload the transcript and try again"
                )
            if isinstance(change, Change) and change.after.id != message_id:
                raise InvalidRevisionError(f"session {session_id!r}: a change must keep the message id {message_id!r}")
            if isinstance(change, Remove):
                known[message_id] = IdEntry(False, entry.digest)
                removed_here.add(message_id)
            elif is_noop(change):
                continue
            kept.append(change)
    return replace(revision, changes=tuple(kept)), {k: v for k, v in known.items() if before.get(k) != v}


def index_of_log(revisions: Iterable[Revision]) -> dict[str, IdEntry]:
    """The id index a log produces, replayed leniently (changes that do not apply are
    skipped, so sessions written by buggy versions still get an index)."""
    state = State()
    first: dict[str, str] = {}
    for revision in revisions:
        for change in revision.changes:
            if isinstance(change, Put):
                first.setdefault(change.message.id, digest(change.message))
        state.apply(revision.changes, strict=False)
    return {k: IdEntry(k in state, d) for k, d in first.items()}

"""The check every store runs inside its write transaction: does a revision apply?

A store keeps, per session, an *id index*: for every message id the session ever
held, whether it is in the current state, a digest of the role and text it was
first appended with, and a digest of the role and text it holds now (or held when
it was removed).  :func:`check_revision` validates a revision against that index
in time linear in the revision (never in the transcript), and returns the index
rows to write with it.  :func:`index_of_log` rebuilds the index from a log
(migrations backfill with it; it tolerates logs that do not replay).

The rules:

* a revision's kind is one of :data:`~context_gatekeeper.records.revisions.RevisionKind`.
* appends put new messages, at the end or after a message the session holds (or
  one put earlier in the same append); an anchor the session never held is refused.
  A message whose id the session *holds now*, with the role and content it was
  first appended with, is a *retried append*: it is dropped (idempotent), and the
  message put after it takes its place (the end, or after the message put before
  it in this append; after its stored copy only when it answered a message held
  before).  The stores confirm each retry against the log before dropping it
  (:func:`retry_damage`: an index that outlived the revision it describes would
  otherwise lose the message).  Any other taken id (held with other text, used by
  a message no longer in the state, or given twice in this append) gets a fresh id
  when ``renew_taken_ids``, else the revision is refused.  A message put after a
  renamed one follows it under its new id.
* edits, applies, sets and clears may put an id the session used only if this
  revision removed it first (a message moved); ids are never reused.
* an id the index does not list is new: the check never reads the log to confirm it (that
  would cost a read of the whole log per commit).  An index whose rows were deleted by hand
  lets a revision through that reuses an id the log holds; the session then fails to load at
  that revision (:class:`CorruptLogError`).  What the index refuses, and the retries it drops,
  are checked against the log (:func:`index_damage`, :func:`retry_damage`), and a
  ``Transcript`` checks its appends against the log it has read.
* undo, redo and revert may put back a message that is absent.
* every revision removes and changes only messages that are present, and puts
  only messages that are absent.
* a change's ``before`` and a removal's message carry the role and content the
  message holds in the store (so undoing them restores text that existed).
  Index rows written before the current digest was kept (a 32-character digest)
  do not know the current text; their messages are checked again once a change
  through this version has recorded it (``Store.truncate`` rebuilds a session's
  index whole).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any, NamedTuple, get_args

from ..errors import CorruptLogError, InvalidInputError, InvalidRevisionError
from ..records.messages import Message, new_message_id
from ..records.operations import Applied, Change, Put, State, is_noop
from ..records.revisions import Revision, RevisionKind

__all__ = [
    "IdEntry", "Lookup", "Checked", "digest", "entry", "check_revision", "checked_revision", "index_damage",
    "retry_damage", "index_of_log", "revision_ids", "touched",
]

_RESTORING = frozenset({"undo", "redo", "revert"})
_KINDS = frozenset(get_args(RevisionKind))
_DIGEST_LENGTH = 32


class IdEntry(NamedTuple):
    """One row of a session's id index.

    ``digest`` is the digest of the role and text the message was first appended
    with, followed by the digest of those it holds now (or held when removed).  Rows
    written by versions that kept only the first hold that alone (32 characters):
    their current text is unknown (``current`` is None).
    """

    present: bool
    digest: str

    @property
    def first(self) -> str:
        """The digest of the role and text the message was first appended with."""
        return self.digest[:_DIGEST_LENGTH]

    @property
    def current(self) -> str | None:
        """The digest of the role and text the message holds now (None: not recorded)."""
        return self.digest[_DIGEST_LENGTH:] or None


def entry(present: bool, first: str, current: str) -> IdEntry:
    """An index row from the two digests."""
    return IdEntry(present, first + current)


Lookup = Callable[[Iterable[str]], Mapping[str, IdEntry]]
"""Reads the index rows of the given ids (missing ids: never used)."""


def digest(message: Message) -> str:
    """A short digest of a message's role and text (what a retried append, a change's
    ``before`` and a removal must match)."""
    return hashlib.sha256(f"{message.role}\x00{message.content}".encode("utf-8", "surrogatepass")).hexdigest()[:32]


def touched(changes: Iterable[Applied]) -> set[str]:
    """Every message id ``changes`` put, remove or change."""
    return {c.before.id if isinstance(c, Change) else c.message.id for c in changes}


def revision_ids(revision: Revision) -> set[str]:
    """The ids whose index rows :func:`check_revision` reads for ``revision``: the messages
    it puts, removes or changes, and an append's anchors."""
    ids = touched(revision.changes)
    if revision.kind == "append":
        ids |= {c.after for c in revision.changes if isinstance(c, Put) and isinstance(c.after, str)}
    return ids


def _agrees(stored: IdEntry | None, rebuilt: IdEntry | None) -> bool:
    """Whether a stored index row says what the log does (a row without the current digest,
    written by an older version, agrees on what it holds)."""
    if stored is None or rebuilt is None:
        return stored is rebuilt
    return (
        stored.present == rebuilt.present
        and stored.first == rebuilt.first
        and stored.current in (None, rebuilt.current)
    )


def index_damage(
    session_id: str, revision: Revision, head: int, lookup: Lookup, log: Iterable[Revision]
) -> CorruptLogError | None:
    """Why a refused ``revision`` was refused by an id index that no longer matches the
    verified ``log`` (revisions 1..``head``), or None when the index agrees with the log
    (the refusal stands).  Called only once :func:`check_revision` has refused, so a
    commit that goes through never replays the log.

    The index is kept beside the log, outside its hash chain: rows deleted or changed by
    hand, or a newest revision deleted by hand (nothing after it in the chain notices),
    leave the index saying what the log does not.  ``store.truncate(session_id, head)``
    sets nothing aside and rebuilds the index from the log."""
    ids = revision_ids(revision)
    rebuilt = index_of_log(log)
    stored = lookup(ids)
    wrong = sorted(i for i in ids if not _agrees(stored.get(i), rebuilt.get(i)))
    if not wrong:
        return None
    return CorruptLogError(
        session_id,
        head + 1,
        f"this {revision.kind} was refused by the session's message-id index, but the index rows of "
        f"message(s) {_listed(wrong)} do not match revisions 1..{head}: the message_ids table, or the newest "
        "revision(s), were changed or deleted outside context-gatekeeper; nothing was written, and reloading "
        f"will not help. store.truncate({session_id!r}, {head}) rebuilds the index from the log and sets nothing "
        "aside",
    )


def retry_damage(
    session_id: str, head: int, retried: Mapping[str, str], log: Iterable[Revision]
) -> CorruptLogError | None:
    """Why messages of an append that the id index took for retries (``retried``: their ids
    and :func:`digest`) must not be dropped: the verified ``log`` (revisions
    1..``head``) does not hold them, with that role and text, in its state; None when it
    does (each is a retry: dropping it loses nothing).  Called only when an append holds a
    retry, so other appends never replay the log.

    An index that says the session holds a message the log lacks was left by a newest
    revision deleted by hand (nothing after it in the chain notices), revisions restored from
    an older backup beside a newer index, or rows of the index changed by hand: dropping
    the message would lose it without a word."""
    rebuilt = index_of_log(log)
    lost = sorted(
        i for i, hashed in retried.items()
        if (found := rebuilt.get(i)) is None or not found.present or found.first != hashed
    )
    if not lost:
        return None
    return CorruptLogError(
        session_id,
        head + 1,
        f"the session's message-id index took this append's message(s) {_listed(lost)} for retries of messages it "
        f"holds, but revisions 1..{head} do not hold them: the message_ids table, or the newest "
        "revision(s), were changed or deleted outside context-gatekeeper (or the revisions restored from an older "
        "backup); nothing was written (dropping them would have lost them), and reloading will not help. "
        f"store.truncate({session_id!r}, {head}) rebuilds the index from the log and sets nothing aside; then "
        "append them again",
    )


def _listed(ids: list[str]) -> str:
    """Up to five ids, quoted, and how many more."""
    return ", ".join(repr(i) for i in ids[:5]) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")


def _dedupe_append(
    session_id: str, changes: Iterable[Applied], known: dict[str, IdEntry], renew: bool, retried: dict[str, str]
) -> list[Applied]:
    """An append's puts with retried messages dropped (their ids and digests added to
    ``retried``) and taken ids renewed.

    A message is a retry only when the session holds its id now, first appended with
    the same role and text.  A skipped retry stands aside for what follows it: a
    message put after it goes where the retry would have gone (the end, or after the
    message this append put before it); only a retry put after a message the session
    already held (an answer to an open question) is followed at its stored copy.  An id
    the session used but no longer holds (the message was deleted), one held with
    other text, or one this append already put is renewed when ``renew``, else refused.
    """
    renamed: dict[str, Any] = {}  # an id of this append -> the anchor that stands for it
    put_here: set[str] = set()  # ids this append puts (renewed ones under their new id)
    given: set[str] = set()  # ids the append's messages came with
    out: list[Applied] = []
    for change in changes:
        if not isinstance(change, Put):
            raise InvalidRevisionError(f"session {session_id!r}: an append may only put messages, got {change!r}")
        message, after = change.message, change.after
        after = renamed.get(after, after) if isinstance(after, str) else after
        anchor = known.get(after) if isinstance(after, str) else None
        if isinstance(after, str) and anchor is None:
            raise InvalidRevisionError(
                f"session {session_id!r}: this append puts message {message.id!r} after message {after!r}, "
                "which the session never held; nothing was written. Append at the end (no anchor) or after a "
                "message the transcript holds"
            )
        if anchor is not None and not anchor.present:
            raise InvalidRevisionError(
                f"session {session_id!r}: message {after!r}, which this append follows (the question it "
                "answers), was deleted meanwhile; nothing was written. Reload the transcript and append again"
            )
        taken = known.get(message.id)
        hashed = digest(message)
        repeated = message.id in given
        given.add(message.id)
        if taken is not None:
            if taken.present and taken.first == hashed and not repeated:
                # the same message again: a retried request; what follows takes its place
                held_before = isinstance(after, str) and after not in put_here
                renamed[message.id] = message.id if held_before else after
                retried[message.id] = hashed
                continue
            if not renew:
                raise InvalidInputError(_taken_id_text(session_id, message.id, taken, repeated))
            fresh = new_message_id()
            renamed[message.id] = fresh
            message = replace(message, id=fresh)
        known[message.id] = entry(True, hashed, hashed)
        put_here.add(message.id)
        out.append(Put(message, after))
    return out


def _taken_id_text(session_id: str, message_id: str, taken: IdEntry, repeated: bool) -> str:
    """Why an append's message under a taken id is refused, and what to do."""
    if repeated:
        why = "appears twice in this append"
    elif not taken.present:
        why = f"was used in session {session_id!r} by a message no longer in it (deleted, cleared or undone)"
    else:
        why = f"is already used in session {session_id!r} with other content"
    return (
        f"message id {message_id!r} {why}; nothing was written. Ids are never reused: give new messages "
        "new ids (or none), or pass renew_taken_ids=True to give this one a fresh id"
    )


def _refuse_content(session_id: str, revision: Revision, message_id: str, what: str) -> InvalidRevisionError:
    return InvalidRevisionError(
        f"session {session_id!r}: this {revision.kind} {what} message {message_id!r} with a role or text that "
        "is not what the store holds for it; nothing was written. Reload the transcript and build the "
        "change from the messages it holds now"
    )


class Checked(NamedTuple):
    """What :func:`checked_revision` found: the revision as it may be stored, the index rows
    to write with it, and the messages of an append dropped as retries (their ids and
    :func:`digest`; empty for any other kind)."""

    revision: Revision
    rows: dict[str, IdEntry]
    retried: dict[str, str]


def check_revision(
    session_id: str, revision: Revision, lookup: Lookup, *, renew_taken_ids: bool = False
) -> tuple[Revision, dict[str, IdEntry]]:
    """``(revision as it may be stored, index rows to write)``, or a named error
    (:func:`checked_revision` without the retries it names)."""
    checked = checked_revision(session_id, revision, lookup, renew_taken_ids=renew_taken_ids)
    return checked.revision, checked.rows


def checked_revision(
    session_id: str, revision: Revision, lookup: Lookup, *, renew_taken_ids: bool = False
) -> Checked:
    """``(revision as it may be stored, index rows to write, retries dropped)``, or a named error.

    The returned revision has no changes when the whole revision was a no-op (the
    store then writes nothing).  Raises :class:`InvalidRevisionError` when a change
    does not apply (an unknown kind, an absent or present message, a ``before`` or a
    removed message whose role or text differs from the stored one, an append after
    a message the session never held) and :class:`InvalidInputError` for an id
    reused with other text.
    """
    if revision.kind not in _KINDS:
        raise InvalidRevisionError(
            f"session {session_id!r}: a revision of unknown kind {revision.kind!r} (one of {sorted(_KINDS)} "
            "expected); nothing was written. Build revisions with Transcript, or give one of those kinds"
        )
    changes = revision.changes
    before = lookup(revision_ids(revision))  # only read
    known = dict(before)
    if revision.kind == "append":
        retried: dict[str, str] = {}
        checked = _dedupe_append(session_id, changes, known, renew_taken_ids, retried)
        rows = {k: known[k] for k in touched(checked) if before.get(k) != known[k]}
        return Checked(replace(revision, changes=tuple(checked)), rows, retried)
    removed_here: set[str] = set()
    kept: list[Applied] = []  # the changes without the no-ops (changes to identical text)
    for change in changes:
        if isinstance(change, Put):
            message_id = change.message.id
            found = known.get(message_id)
            if found is not None and found.present:
                raise InvalidRevisionError(f"session {session_id!r}: message {message_id!r} is already in the transcript")
            if found is not None and revision.kind not in _RESTORING and message_id not in removed_here:
                raise InvalidRevisionError(
                    f"session {session_id!r}: message id {message_id!r} was used before; ids are never reused"
                )
            hashed = digest(change.message)
            known[message_id] = entry(True, found.first if found else hashed, hashed)
            kept.append(change)
        else:
            is_change = isinstance(change, Change)
            message = change.before if isinstance(change, Change) else change.message
            message_id = message.id
            found = known.get(message_id)
            if found is None or not found.present:
                raise InvalidRevisionError(
                    f"session {session_id!r}: message {message_id!r} is not in the transcript, so this "
                    f"{revision.kind} cannot {'change' if is_change else 'remove'} it; "
                    "reload the transcript and try again"
                )
            if isinstance(change, Change) and change.after.id != message_id:
                raise InvalidRevisionError(f"session {session_id!r}: a change must keep the message id {message_id!r}")
            current = found.current
            if current is not None and current != digest(message):
                raise _refuse_content(session_id, revision, message_id, "changes" if is_change else "removes")
            if not isinstance(change, Change):
                known[message_id] = found._replace(present=False)
                removed_here.add(message_id)
            elif is_noop(change):
                continue
            else:
                known[message_id] = entry(True, found.first, digest(change.after))
            kept.append(change)
    return Checked(replace(revision, changes=tuple(kept)), {k: v for k, v in known.items() if before.get(k) != v}, {})


def index_of_log(revisions: Iterable[Revision]) -> dict[str, IdEntry]:
    """The id index a log produces, replayed leniently (changes that do not apply are
    skipped, so sessions written by buggy versions still get an index)."""
    state = State()
    first: dict[str, str] = {}
    last: dict[str, str] = {}
    for revision in revisions:
        for change in revision.changes:
            if isinstance(change, Put):
                first.setdefault(change.message.id, digest(change.message))
            message_id = change.before.id if isinstance(change, Change) else change.message.id
            held = state.get(message_id)
            state.apply((change,), strict=False)
            now = state.get(message_id)
            if now is not None:
                last[message_id] = digest(now)
            elif held is not None:
                last[message_id] = digest(held)  # removed: the text it held
    return {k: entry(k in state, d, last.get(k, d)) for k, d in first.items()}

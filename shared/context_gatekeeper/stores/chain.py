"""Tamper evidence for stored revision logs: structural checks and a hash chain.

A person (or a tool) can edit a database by hand: delete, reorder, duplicate or alter
rows.  Two checks make every such change visible as a :class:`CorruptLogError` naming
the session and the first revision that is not what was written:

* :func:`check_fields` (every store, run by the transcript's replica on every revision
  it reads): revisions are numbered ``1, 2, 3, ...`` without gaps, each one's ``parent``
  is the one before, its ``kind`` is a revision kind, and its ``target`` fits its kind
  (an undo or redo names an earlier revision, a revert an earlier state, other kinds none;
  a revision committed through the Store API may name none).
* :func:`row_digest` (the SQL stores): each row stores the SHA-256 of its own fields
  (its changes as the stored JSON text, byte for byte) and of its predecessor's digest;
  the first row chains from a digest of the session id (:func:`genesis`); the fields are
  written so that no two rows give the same text (:func:`chain_text`).  Reading a
  session recomputes the chain (:func:`verified`), so a row changed, removed, moved or
  copied from elsewhere breaks it at that row.  Removing the *last* rows leaves a valid
  prefix, which no chain can tell from a shorter log.  The chain has no secret: it shows
  edits made outside this library (by hand, by a script, by a faulty copy), not those of
  someone who recomputes it on purpose.

``store.truncate(session_id, error.revision - 1)`` keeps the intact prefix, as for any
other corrupt log.  A store migrated to the chain backfills the digests of each session's
valid prefix (:func:`chained_prefix`); rows after the first invalid one get none, so the
session keeps failing at that revision until truncated.

The first chain (migration 4) wrote a missing instruction or model name as the text
``None`` and separated fields by U+001F without escaping it, so a hand edit from NULL to
``'None'``, or characters moved across the U+001F between the instruction and the model
name, left the digest as it was.  Migration 5 recomputes, with :func:`chain_text`, the
digests of the rows whose text that changes (after checking the old chain up to them,
:func:`rechained`); every other row's digest is the same under both.  A read-only file
that has not had migration 5 is read with the first chain (``legacy=True``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from typing import Any, get_args

from ..caching import BoundedCache, payload_chars
from ..errors import CorruptLogError
from ..records.operations import Change
from ..records.revisions import Revision, RevisionKind
from .schema import revision_from_fields, revision_from_row

__all__ = ["KINDS", "CHAIN_READS", "next_read", "genesis", "chain_text", "row_digest", "check_fields", "verified", "chained_prefix", "rechained",
           "anchor_damage", "unfollowable", "DECODED_CACHE_SIZE", "DECODED_CACHE_CHARS", "DECODED_MESSAGE_CHARS",
           "decoded_revisions", "forget_decoded"]

KINDS = frozenset(get_args(RevisionKind))
_sha256 = hashlib.sha256
_TARGETED = frozenset({"undo", "redo"})

DECODED_CACHE_SIZE = 32_768
"""Verified revisions the process keeps decoded, by their row's digest
(:data:`decoded_revisions`): a second transcript on the same session (another object, a
reopened store, a worker serving the next request) verifies the chain as always but
decodes only rows it has not seen.  About 1.7 kB a revision of chat (an append of a
question and its answer, its texts included), shared with every transcript that holds the
revision: some 55 MB when full."""

DECODED_CACHE_CHARS = 32_000_000
"""... and revisions holding at most this many characters in all (:func:`_revision_chars`), so
sessions that each pasted a long text or an image, closed long ago, do not stay in memory for as
long as 32,768 revisions of chat would.  Chat reaches the count first (about 870 a revision:
some 28 million when full, 2.1 bytes each).  Measured (tracemalloc): 1.0 byte a character of
pasted ASCII text, so some 32 MB of pastes when full; 4.0 for text of characters outside the
Basic Multilingual Plane, 130 MB at most."""

DECODED_MESSAGE_CHARS = 200
"""What a message weighs in :data:`decoded_revisions` besides its texts (its record and fields)."""


def _revision_chars(digest: str, revision: Revision) -> int:
    """A decoded revision's weight: the characters of each message its changes hold (content,
    provider parts and metadata: :func:`~context_gatekeeper.caching.payload_chars`), each
    counted :data:`DECODED_MESSAGE_CHARS` more, and its instruction's."""
    total = len(revision.instruction or "")
    for change in revision.changes:
        for message in (change.before, change.after) if isinstance(change, Change) else (change.message,):
            total += (DECODED_MESSAGE_CHARS + len(message.content) + payload_chars(message.parts)
                      + payload_chars(message.metadata))
    return total


decoded_revisions: BoundedCache[str, Revision] = BoundedCache(
    maxsize=DECODED_CACHE_SIZE, weigh=_revision_chars, max_weight=DECODED_CACHE_CHARS)
"""Recomputed row digest -> the revision decoded from that row (at most
:data:`DECODED_CACHE_SIZE` of them holding :data:`DECODED_CACHE_CHARS`).  The digest covers every
field of the row, the changes' JSON text byte for byte, and (through the chain) the
session and every row before it, so a row is served from here only when it is exactly
a row decoded before; a row changed by hand no longer verifies, and is refused before
this is read.  The revisions are shared by every reader: read only (see
:meth:`.base.Store._shared_revisions`).  A purge drops its session's revisions from here, a
truncate those it sets aside (:func:`forget_decoded`)."""


def forget_decoded(digests: Iterable[str | None]) -> None:
    """Drop the revisions of the rows whose digests are ``digests`` from :data:`decoded_revisions`
    (rows a purge erases or a truncate sets aside): this process then holds their text only where
    a transcript still does.  Other processes' caches keep theirs until evicted."""
    for digest in digests:
        if digest is not None:
            decoded_revisions.discard(digest)


def genesis(session_id: str) -> str:
    """The digest the first revision of ``session_id`` chains from."""
    return hashlib.sha256(b"context-gatekeeper log\x00" + session_id.encode("utf-8", "surrogatepass")).hexdigest()


_UNIT = "\x1f"
"""The separator between a row's fields in the text a digest is taken of."""
_ESCAPE = "\x1e"
"""What an escaped text field starts with (:func:`chain_text`)."""


def chain_text(value: Any) -> str:
    """A nullable text field of a row (its instruction, its model name) as the chain writes it:
    NULL as ``None``; a string as itself, unless it could be read as another value (the text
    ``None``, one holding U+001F, one starting with U+001E) or is not a string (a BLOB put in
    by hand): then U+001E, its type and its JSON (or hex) form.  No two values give the same
    text, no text holds U+001F, and every value but those few gives what the first chain gave.

    >>> chain_text(None), chain_text("tighten the tone"), chain_text("None")
    ('None', 'tighten the tone', '\\x1estr:"None"')
    """
    if value is None:
        return "None"
    if type(value) is str and value != "None" and _UNIT not in value and not value.startswith(_ESCAPE):
        return value
    if isinstance(value, str):
        return f"{_ESCAPE}str:{json.dumps(value)}"  # control characters written as \u escapes
    if isinstance(value, (bytes, bytearray, memoryview)):
        return f"{_ESCAPE}bytes:{bytes(value).hex()}"
    return f"{_ESCAPE}{type(value).__name__}:{value!r}"


def _legacy_text(value: Any) -> str:
    """A text field as the first chain wrote it (what an f-string gives)."""
    return f"{value}"


CHAIN_READS = 3
"""Reads of a session whose row fails the chain before the error stands (:func:`next_read`)."""


def next_read(reads: int, legacy: bool, unmigrated: bool) -> bool | None:
    """The chain the next read of a session uses (``True``: the first chain's), after its
    ``reads``-th read, with the chain ``legacy`` says, met a row that fails; ``None``: the
    failure stands.  ``unmigrated``: the file or tables have not had migration 5, as read now.

    A store that may hold rows of either chain (a file or tables another process may be
    migrating, also between two statements of a read) reads again with the chain they use
    now; a row that still fails with that chain is damaged (at most :data:`CHAIN_READS` reads)."""
    if (reads > 1 and unmigrated == legacy) or reads >= CHAIN_READS:
        return None
    return unmigrated


def row_digest(previous: str, row: Sequence[Any], *, legacy: bool = False) -> str:
    """The digest of a stored row ``(number, parent, kind, instruction, model, created_at,
    base, target, changes)`` following a row whose digest is ``previous``: SHA-256 over the
    fields as text, separated by U+001F, the instruction and model name by :func:`chain_text`,
    the changes as the stored JSON text.  ``legacy``: as the first chain wrote it (see the
    module docstring)."""
    number, parent, kind, instruction, model, created_at, base, target, changes = row
    text_of = _legacy_text if legacy else chain_text
    text = (f"{previous}\x1f{number}\x1f{parent}\x1f{kind}\x1f{text_of(instruction)}\x1f{text_of(model)}"
            f"\x1f{created_at}\x1f{base}\x1f{target}\x1f{changes}")
    return _sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def field_problem(number: int, parent: Any, kind: Any, base: Any, target: Any) -> str | None:
    """Why a revision's own fields cannot be what this library wrote (None: they can)."""
    if kind not in KINDS:
        return f"its kind {kind!r} is not a revision kind ({', '.join(sorted(KINDS))})"
    if parent != number - 1:
        return f"its parent is {parent!r}, not {number - 1}"
    if base is not None and (isinstance(base, bool) or not isinstance(base, int) or not 0 <= base <= parent):
        return f"its base {base!r} is not a revision before it"
    if target is None:
        return None  # revisions committed through the Store API may leave it out
    if kind in _TARGETED:
        if isinstance(target, bool) or not isinstance(target, int) or not 1 <= target < number:
            return f"this {kind} names revision {target!r}, which is not an earlier revision"
    elif kind == "revert":
        if isinstance(target, bool) or not isinstance(target, int) or not 0 <= target < number:
            return f"this revert names revision {target!r}, which is not an earlier state"
    else:
        return f"a {kind} names no target, but this one names {target!r}"
    return None


def check_fields(session_id: str, revision: Revision, expected: int) -> None:
    """:class:`CorruptLogError` unless ``revision`` is numbered ``expected`` and its fields
    fit (see the module docstring); what the replica checks for every store."""
    if revision.number != expected:
        raise CorruptLogError(session_id, expected, _gap(expected, revision.number))
    problem = field_problem(revision.number, revision.parent, revision.kind, revision.base, revision.target)
    if problem is not None:
        raise CorruptLogError(session_id, expected, f"{problem}; the row was not written by context-gatekeeper")


def _gap(expected: int, found: Any) -> str:
    return (
        f"revision {expected} is missing (the log goes from revision {expected - 1} to {found!r}): "
        "rows were deleted or renumbered outside context-gatekeeper"
    )


def verified(
    session_id: str, rows: Iterable[Sequence[Any]], after: int, previous: str | None, *, shared: bool = False,
    legacy: bool = False,
) -> list[Revision]:
    """The revisions of ``rows`` (each a stored row followed by its digest), numbered from
    ``after + 1``, after checking their numbering, fields and hash chain.

    ``previous`` is the digest of revision ``after`` (the genesis when ``after`` is 0;
    None when that row holds none, so the first row cannot be vouched for).  Raises
    :class:`CorruptLogError` naming the first revision that fails.  ``shared``: a row
    whose digest verifies and was decoded before is not decoded again, but taken from
    :data:`decoded_revisions` (and rows decoded now are kept there): the revisions are
    then shared with other readers, and the caller must never change them or hand them
    out (see :meth:`.base.Store._shared_revisions`); otherwise each is decoded anew,
    the caller's own.  ``legacy``: the rows carry the first chain's digests (a read-only
    file that has not had migration 5).
    """
    out: list[Revision] = []
    text_of = _legacy_text if legacy else chain_text
    expected = after + 1
    sha256 = _sha256
    decoded: list[tuple[str, Revision]] = []
    lookup = decoded_revisions.get if shared else _nothing
    for row in rows:
        number, parent, kind, instruction, model, created_at, base, target, changes, digest = row
        if number != expected:
            raise CorruptLogError(session_id, expected, _gap(expected, number))
        if digest is None or previous is None:
            raise CorruptLogError(session_id, number, _why(row, "the row carries no digest: it was inserted, or its "
                                                                "digest removed, outside context-gatekeeper"))
        # row_digest, inlined: this loop runs once per revision of every session opened
        # (most rows, appends, have neither an instruction nor a model name: no call for them)
        text = (f"{previous}\x1f{number}\x1f{parent}\x1f{kind}"
                f"\x1f{'None' if instruction is None else text_of(instruction)}"
                f"\x1f{'None' if model is None else text_of(model)}"
                f"\x1f{created_at}\x1f{base}\x1f{target}\x1f{changes}")
        previous = sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
        if previous != digest:
            raise CorruptLogError(session_id, number, _why(row, "its digest does not match its content and the revision "
                                                                "before it: the row was changed, or rows before it were "
                                                                "replaced or reordered, outside context-gatekeeper"))
        revision = lookup(previous)  # by the digest just recomputed (and equal to the stored one)
        if revision is None:
            revision = revision_from_fields(session_id, number, parent, kind, instruction, model, created_at, base,
                                            target, changes)
            if shared:
                decoded.append((previous, revision))
        out.append(revision)
        expected += 1
    if decoded:
        decoded_revisions.put_many(decoded)
    return out


def anchor_damage(
    session_id: str, anchor: Sequence[Any], previous: str | None, *, legacy: bool = False
) -> CorruptLogError | None:
    """Why ``anchor``, the row a catch-up read chains from (a stored row and its digest), fails
    the chain after the row before it, whose stored digest is ``previous`` (the genesis for
    revision 1); None when it verifies, or when ``previous`` is None (that row is gone or holds
    no digest: a fresh open names that one).

    A catch-up (``revisions(after=n)``) chains the rows above ``n`` from the stored digest of
    row ``n`` without recomputing it.  When the first of them fails, that digest may be what
    was damaged (removed or changed by hand): the stores check the anchor then, and only then,
    so they name the revision a fresh open names, and the truncate that recovers."""
    if previous is None:
        return None
    try:
        verified(session_id, (anchor,), anchor[0] - 1, previous, legacy=legacy)
    except CorruptLogError as error:
        return error
    return None


def unfollowable(number: int) -> str:
    """Why a log whose newest revision is numbered ``number``, the largest its column holds,
    takes no commit (the reason of the :class:`CorruptLogError` a store raises when reading
    the log names no earlier revision)."""
    return (f"a revision number is {number}, the largest the column holds, so no revision can follow it: "
            "the row was renumbered outside context-gatekeeper")


def _nothing(digest: str) -> None:
    """No decoded revision (the lookup of a reader that decodes every row)."""
    return None


def _why(row: Sequence[Any], otherwise: str) -> str:
    """The reason a row fails: what is wrong with its fields when something is, else ``otherwise``."""
    problem = field_problem(row[0], row[1], row[2], row[6], row[7])
    return f"{problem}; the row was not written by context-gatekeeper" if problem is not None else otherwise


def chained_prefix(session_id: str, rows: Iterable[Sequence[Any]]) -> list[tuple[int, str]]:
    """``(number, digest)`` for the valid prefix of a session's rows (numbered from 1 without
    gaps, fields that fit, readable): what a migration to the chain backfills."""
    out: list[tuple[int, str]] = []
    previous = genesis(session_id)
    for expected, row in enumerate(rows, 1):
        number = row[0]
        if number != expected or field_problem(number, row[1], row[2], row[6], row[7]) is not None:
            break
        try:
            revision_from_row(row, session_id)
        except CorruptLogError:
            break
        previous = row_digest(previous, row, legacy=True)  # migration 4 wrote the first chain
        out.append((number, previous))
    return out


def rechained(session_id: str, rows: Iterable[Sequence[Any]]) -> list[tuple[int, str]]:
    """Migration 5: ``(number, digest)`` for each row of a session (stored rows followed by
    their digests, in order) whose digest changes when the chain is written with
    :func:`chain_text`, within the prefix whose first chain verifies.  A row after the first
    that does not verify keeps its digest, so the session keeps failing there."""
    out: list[tuple[int, str]] = []
    old = new = genesis(session_id)
    for expected, row in enumerate(rows, 1):
        fields, stored = row[:9], row[9]
        old = row_digest(old, fields, legacy=True)
        if fields[0] != expected or stored != old:
            break
        new = row_digest(new, fields)
        if new != stored:
            out.append((expected, new))
    return out

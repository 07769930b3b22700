"""What the SQL stores share: migrations, row encoding, and session-id checks.

Both :mod:`.sqlite` and :mod:`.postgres` keep a session's revisions as rows holding
the revision's fields and its changes as JSON text; this module turns revisions into
that text and rows back into revisions, and holds the add-only migration record.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from ..errors import SchemaVersionError
from ..operations import change_to_dict
from ..revisions import Revision

__all__ = ["Migration", "checked_session", "refuse_newer", "changes_text", "revision_from_row"]


class Migration(NamedTuple):
    """One schema change: applied once, in ``version`` order, never edited after release."""

    version: int
    name: str
    statements: tuple[str, ...]


def checked_session(session_id: Any) -> str:
    """``session_id`` if it is a str, else ``TypeError``."""
    if not isinstance(session_id, str):
        raise TypeError(f"session_id must be a str, got {type(session_id).__name__}")
    return session_id


def refuse_newer(applied: Iterable[int], migrations: Sequence[Migration], what: str = "database") -> None:
    """Raise :class:`SchemaVersionError` if ``applied`` holds migrations this code does not know."""
    unknown = sorted(set(applied) - {m.version for m in migrations})
    if unknown:
        raise SchemaVersionError(
            f"this {what} has schema migration(s) {unknown}, which this version of context-gatekeeper "
            "does not know; upgrade context-gatekeeper to open it"
        )


def changes_text(revision: Revision) -> str:
    """The changes as JSON text; ASCII-escaped if they hold text UTF-8 cannot encode
    (lone surrogates), which JSON still round-trips exactly."""
    text = revision.changes_json()
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps([change_to_dict(c) for c in revision.changes], separators=(",", ":"))
    return text


def revision_from_row(row: Sequence[Any]) -> Revision:
    """A revision from ``(number, parent, kind, instruction, model, created_at, base, target, changes)``."""
    number, parent, kind, instruction, model, created_at, base, target, changes = row
    return Revision.from_dict(
        {
            "number": number,
            "parent": parent,
            "kind": kind,
            "changes": json.loads(changes),
            "instruction": instruction,
            "model": model,
            "time": created_at,
            "base": base,
            "target": target,
        }
    )

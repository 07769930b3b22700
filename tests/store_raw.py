"""Every stored byte of a session, per store of this package: what a refused commit must
leave unchanged (the conformance suite's ``stored_state``, made byte-exact for our stores)."""

from __future__ import annotations

from typing import Any

from context_gatekeeper.stores import InMemoryStore, SQLiteStore, Store
from context_gatekeeper.testing.stores import unwrapped


def raw(store: Store, session: str) -> Any:
    """Every stored byte of a session: its revision rows and its id-index rows, as stored."""
    store = unwrapped(store)
    if isinstance(store, InMemoryStore):
        return (
            [r.to_dict() for r in store._logs.get(session, [])],  # type: ignore[attr-defined]
            dict(store._index.get(session, {})),  # type: ignore[attr-defined]
        )
    if isinstance(store, SQLiteStore):
        with store._connection() as conn:  # type: ignore[attr-defined]
            revisions = conn.execute("SELECT * FROM revisions WHERE session_id = ? ORDER BY number", (session,)).fetchall()
            ids = conn.execute("SELECT * FROM message_ids WHERE session_id = ? ORDER BY message_id", (session,)).fetchall()
        return revisions, ids
    from psycopg import sql

    names = store._names  # type: ignore[attr-defined]
    key = store._key(session)[0]  # type: ignore[attr-defined]
    with store._connection() as conn:  # type: ignore[attr-defined]
        revisions = conn.execute(
            sql.SQL("SELECT * FROM {} WHERE session_key = %s ORDER BY number").format(names["revisions"]), (key,)
        ).fetchall()
        ids = conn.execute(
            sql.SQL("SELECT * FROM {} WHERE session_key = %s ORDER BY message_id").format(names["ids"]), (key,)
        ).fetchall()
    return revisions, ids

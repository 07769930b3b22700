"""Every stored byte of a session, per store of this package: what a refused commit must
leave unchanged and a purge must leave nothing of (the conformance suite's ``stored_state``,
made byte-exact for our stores)."""

from __future__ import annotations

from typing import Any

from context_gatekeeper.stores import InMemoryStore, SQLiteStore, Store
from context_gatekeeper.testing.stores import unwrapped


def raw(store: Store, session: str) -> Any:
    """Every stored byte of a session: its revision rows, its id-index rows, the revisions
    ``truncate`` set aside and its saved vectors, as stored."""
    store = unwrapped(store)
    if isinstance(store, InMemoryStore):
        return (
            [r.to_dict() for r in store._logs.get(session, [])],  # type: ignore[attr-defined]
            dict(store._index.get(session, {})),  # type: ignore[attr-defined]
            [r.to_dict() for r in store._set_aside.get(session, [])],  # type: ignore[attr-defined]
            sorted(map(repr, store._vectors.get(session, {}).values())),  # type: ignore[attr-defined]
        )
    if isinstance(store, SQLiteStore):
        with store._connection() as conn:  # type: ignore[attr-defined]
            return tuple(
                conn.execute(f"SELECT * FROM {table} WHERE session_id = ? ORDER BY {order}", (session,)).fetchall()
                for table, order in (("revisions", "number"), ("message_ids", "message_id"),
                                     ("set_aside_revisions", "number, set_aside_at"),
                                     ("vectors", "embedder, dimension, text_hash, message_id"))
            )
    from psycopg import sql

    names = store._names  # type: ignore[attr-defined]
    key = store._key(session)[0]  # type: ignore[attr-defined]
    with store._connection() as conn:  # type: ignore[attr-defined]
        return tuple(
            conn.execute(
                sql.SQL("SELECT * FROM {} WHERE session_key = %s ORDER BY " + order).format(names[table]), (key,)
            ).fetchall()
            for table, order in (("revisions", "number"), ("ids", "message_id"), ("set_aside", "number, set_aside_at"),
                                 ("vectors", "embedder, dimension, text_hash, message_id"))
        )


ROW_CONTENT = "kind, instruction, model, created_at, base, target, changes, digest"
"""The columns of a revision row that hold what it says (all but its session and number)."""

ONE_STATEMENT = {
    "alter": "UPDATE {table} SET changes = replace(changes, 'text of', 'TEXT OF')",
    "delete": "DELETE FROM {table}",
    "kind": "UPDATE {table} SET kind = 'bogus'",
    "field": "UPDATE {table} SET instruction = 'forged', created_at = created_at + 3600",
}
"""The tamperings one SQL statement makes, each followed by ``WHERE session_id = .. AND number = ..``."""


def tamper_rows(
    how: str, session: str, revision: int, copied_from: str,
    content: Any, put: Any, run: Any,
) -> None:
    """One tampering of the conformance suite as a person with a SQL shell makes it, in any
    dialect: ``content(session, number)`` reads a row's :data:`ROW_CONTENT`, ``put(values,
    number)`` writes them to ``session``'s row, ``run(statement)`` runs one of
    :data:`ONE_STATEMENT` (its ``{table}`` filled in by the caller) on ``session``'s row."""
    if how == "copy":  # another session's row, digest and all, at the same number
        put(content(copied_from, revision), revision)
    elif how == "swap":  # two rows' content exchanged
        mine, next_one = content(session, revision), content(session, revision + 1)
        put(next_one, revision)
        put(mine, revision + 1)
    else:
        run(ONE_STATEMENT[how])


class LostReplyStore(SQLiteStore):
    """A SQLite store that commits, then loses the reply once when ``lose_next`` is set (a
    connection dropped after COMMIT): the caller retries a write that landed."""

    lose_next = False

    def commit(self, *args: Any, **kwargs: Any) -> Any:
        stored = super().commit(*args, **kwargs)
        if self.lose_next:
            self.lose_next = False
            raise ConnectionError("connection reset after COMMIT")
        return stored

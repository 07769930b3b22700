"""How a store is named in a pickle, and reopened from that name.

An adapter object that pickles (a LangChain history, a LlamaIndex memory) carries the
name of its store rather than the store: a SQLite file's path, or a PostgreSQL
connection string (without the password unless it stays in this process, as a deepcopy
does) with its table prefix.  A store that cannot be named (in memory, a store of your
own) gives ``None``: the object then carries its revision log instead.
"""

from __future__ import annotations

from typing import Any

from .base import Store
from .sqlite import SQLiteStore

__all__ = ["store_spec", "store_from_spec"]


def store_spec(store: Store, *, keep_password: bool = False) -> dict[str, Any] | None:
    """``{"sqlite": path}``, ``{"postgres": conninfo, "table_prefix": prefix}`` or ``None``."""
    if isinstance(store, SQLiteStore) and store.path != ":memory:":
        return {"sqlite": store.path}
    try:
        from .postgres import PostgresStore
    except ImportError:  # no postgres extra: no store can be a PostgresStore
        return None
    conninfo = getattr(getattr(store, "_pool", None), "conninfo", None)
    if isinstance(store, PostgresStore) and isinstance(conninfo, str):  # subclasses too: the same tables
        from psycopg.conninfo import conninfo_to_dict, make_conninfo

        parts = {
            k: v for k, v in conninfo_to_dict(conninfo).items() if (keep_password or k != "password") and v is not None
        }
        return {"postgres": make_conninfo("", **parts), "table_prefix": store.table_prefix}
    return None


def store_from_spec(spec: dict[str, Any]) -> str | Store:
    """What to hand the new owner for a :func:`store_spec` name: a SQLite path (the owner
    opens it, owns it and closes it) or an opened ``PostgresStore`` (the caller closes it)."""
    if "sqlite" in spec:
        return str(spec["sqlite"])
    from .postgres import PostgresStore

    return PostgresStore(spec["postgres"], table_prefix=spec["table_prefix"])

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
    """``{"sqlite": absolute path, "read_only": ..., "busy_timeout": ...}``,
    ``{"postgres": conninfo, "table_prefix": prefix, "lock_timeout": ...}`` or ``None``; a
    conninfo keeps its secrets (passwords, passphrases, client secrets) only with
    ``keep_password`` (a copy that stays in this process)."""
    if isinstance(store, SQLiteStore) and store.path != ":memory:":
        return {"sqlite": store.absolute_path, "read_only": store.read_only, "busy_timeout": store.busy_timeout}
    try:
        from .postgres import PostgresStore
    except ImportError:  # no postgres extra: no store can be a PostgresStore
        return None
    conninfo = getattr(getattr(store, "_pool", None), "conninfo", None)
    if isinstance(store, PostgresStore) and isinstance(conninfo, str):  # subclasses too: the same tables
        from psycopg.conninfo import conninfo_to_dict, make_conninfo

        from .postgres_conninfo import is_secret_key

        parts = {
            k: v for k, v in conninfo_to_dict(conninfo).items()
            if (keep_password or not is_secret_key(k)) and v is not None
        }
        return {"postgres": make_conninfo("", **parts), "table_prefix": store.table_prefix,
                "lock_timeout": store.lock_timeout}
    return None


def store_from_spec(spec: dict[str, Any]) -> Store:
    """The store a :func:`store_spec` name names, opened (the caller closes it): a SQLite
    file with its read-only flag and busy timeout, or a ``PostgresStore``."""
    if "sqlite" in spec:
        return SQLiteStore(str(spec["sqlite"]), read_only=bool(spec.get("read_only", False)),
                           busy_timeout=float(spec.get("busy_timeout", 30.0)))
    from .postgres import PostgresStore

    return PostgresStore(spec["postgres"], table_prefix=spec["table_prefix"], lock_timeout=spec.get("lock_timeout", 30.0))

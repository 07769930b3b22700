"""Where a serialised memory lived, and which stores a restore may reattach.

``to_dict`` names the memory's store (a SQLite file's absolute path, or a PostgreSQL
connection string without its password); serialised data is untrusted, so ``from_dict``
never opens a store the data names: it restores into memory and warns
(:class:`StoreDetachedWarning`), unless the caller passes ``store=`` or names the store
in :func:`trusted_stores` (for restores a framework runs, as a workflow ``Context`` does).
"""

from __future__ import annotations

import contextvars
import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from context_gatekeeper import InvalidInputError, InvalidTypeError, Store
from context_gatekeeper.integration import store_spec

__all__ = ["StoreDetachedWarning", "trusted_stores", "named_store", "trusted_store", "detached"]

_TRUSTED: contextvars.ContextVar[tuple[Store | str | os.PathLike[str], ...]] = contextvars.ContextVar(
    "gatekeeper_trusted_stores", default=()
)
"""The stores :func:`trusted_stores` names, in the context of its block: the code it runs and
the asyncio tasks and ``asyncio.to_thread`` calls started inside it, never another request."""


class StoreDetachedWarning(UserWarning):
    """``from_dict`` restored a memory whose data names a SQLite file or PostgreSQL
    database into a new in-memory store (the data may not choose a store): later writes
    do not reach the named one.  Pass ``store=``, or use :func:`trusted_stores`."""


def named_store(data: dict[str, Any]) -> dict[str, Any] | None:
    """``data["store"]``: where the exported memory lived (never opened from the data)."""
    named = data.get("store")
    if named is None:
        return None
    if isinstance(named, dict) and (
        isinstance(named.get("sqlite"), str)
        or (isinstance(named.get("postgres"), str) and isinstance(named.get("table_prefix"), str))
    ):
        return named
    raise InvalidInputError(
        "serialised memory: 'store' must be null, {'sqlite': path, ...} or {'postgres': conninfo, "
        f"'table_prefix': prefix}} as to_dict() writes it, got {named!r}; nothing was created. "
        "Export the memory again with to_dict()"
    )


def _described(named: dict[str, Any]) -> str:
    if "sqlite" in named:
        return f"the SQLite file {named['sqlite']!r}"
    return f"the PostgreSQL database {named['postgres']!r} (table prefix {named['table_prefix']!r})"


def _names(entry: Store | str | os.PathLike[str], named: dict[str, Any]) -> bool:
    """Whether the trusted ``entry`` (a SQLite path or a store) is the store ``named``."""
    if isinstance(entry, (str, os.PathLike)):
        return "sqlite" in named and os.path.abspath(os.fspath(entry)) == named["sqlite"]
    spec = store_spec(entry)
    if spec is None:
        return False
    key = "sqlite" if "sqlite" in spec else "postgres"
    return (spec.get(key), spec.get("table_prefix")) == (named.get(key), named.get("table_prefix"))


def trusted_store(named: dict[str, Any]) -> Store | str | None:
    """The store of :func:`trusted_stores` that ``named`` names (a path as a str, for the
    memory to open and own), else ``None``."""
    trusted = _TRUSTED.get()
    for entry in trusted:
        if _names(entry, named):
            return entry if isinstance(entry, Store) else os.fspath(entry)
    return None


def detached(named: dict[str, Any]) -> None:
    warnings.warn(
        f"GatekeeperMemory.from_dict: this memory lived in {_described(named)}, but no store= was passed, so it "
        "was restored into a new in-memory store: later turns will not reach that store. Pass "
        "from_dict(data, store=...), or wrap the call that restores it (Context.from_dict(...)) in "
        "`with GatekeeperMemory.trusted_stores(<that path or store>):`",
        StoreDetachedWarning,
        stacklevel=4,
    )


@contextmanager
def trusted_stores(*stores: Store | str | os.PathLike[str]) -> Iterator[None]:
    """While the block runs, ``from_dict`` called in its context (the block's own code, and
    the asyncio tasks and ``asyncio.to_thread`` calls started inside it; never another
    request's thread or task) reattaches a memory whose data names one of ``stores`` (a
    SQLite file's path, or an open store: a ``SQLiteStore`` or ``PostgresStore``, used as it
    is and left open), as ``from_dict(data, store=...)`` would; data naming any other store
    is still restored in memory, with :class:`StoreDetachedWarning`.  It is for restores
    that a framework runs for you.  A workflow ``Context`` decodes its state when the run
    starts, not in ``Context.from_dict``, so keep the block open around the run::

        with GatekeeperMemory.trusted_stores("chats.db"):
            ctx = Context.from_dict(agent, data)
            await agent.run(user_msg=question, ctx=ctx)

    A path is opened by the restored memory (``memory.close()`` closes it).  The data
    still chooses nothing: it can only name a store listed here.

    Raises:
        InvalidTypeError: an entry is neither a path nor a store; nothing is trusted.
    """
    for entry in stores:
        if not isinstance(entry, (Store, str, os.PathLike)):
            raise InvalidTypeError(
                f"trusted_stores takes SQLite paths and open stores, got {type(entry).__name__}; "
                "pass GatekeeperMemory.trusted_stores('chats.db') or an open SQLiteStore / PostgresStore"
            )
    token = _TRUSTED.set((*_TRUSTED.get(), *stores))
    try:
        yield
    finally:
        _TRUSTED.reset(token)

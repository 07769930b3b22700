"""Where a serialised memory lived, and which stores a restore may reattach.

``to_dict`` names the memory's store (a SQLite file's absolute path, or a PostgreSQL
connection string without its password); serialised data is untrusted, so ``from_dict``
never opens a store the data names: it restores into memory and warns
(:class:`StoreDetachedWarning`), unless the caller passes ``store=``, names the store in
:func:`trusted_stores` (for restores a framework runs, as a workflow ``Context`` does), or
the data is a live export of this process (see below).

**Live exports.**  ``to_dict`` also writes a random token (:data:`LIVE_TOKEN`) that this
process maps, weakly, to the memory's open store object and session (:func:`export_token`).
``from_dict`` of data carrying a token this process issued, for that session and naming that
store (or, for an ``InMemoryStore`` or a store of your own, naming none), while the store is
still open, may attach to the same store object (:func:`live_store`): a workflow ``Context``
reused across runs serialises its state and rebuilds it through ``from_dict`` at every run,
and its memory must go on writing where the caller's memory lives.  It attaches only when the
data's log is the session's log as it is now (``from_dict`` checks it; a checkpoint saved
earlier is restored apart).  The token chooses nothing: data from elsewhere (another process,
a restart, a file) holds no token this process issued, and a token only ever stands for the
store and session it was issued for, and only while it is registered here.

The registry stays small: a token goes when its store is garbage-collected, when the memory
that exported it is closed (:func:`revoke_tokens`), when its session is purged through a
memory's transcript or a memory closes the store it opened (:func:`revoke`,
:func:`revoke_store`), when ``from_dict`` finds its store closed, and, beyond
:data:`MAX_LIVE_TOKENS` live tokens, oldest (least recently exported) first.  Data whose token
went is restored as data from elsewhere is.
"""

from __future__ import annotations

import contextvars
import os
import secrets
import threading
import warnings
import weakref
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from context_gatekeeper import InvalidInputError, InvalidTypeError, Store, StoreClosedError, Transcript
from context_gatekeeper.integration import store_spec

__all__ = [
    "StoreDetachedWarning", "trusted_stores", "named_store", "trusted_store", "detached", "export_token",
    "live_store", "LIVE_TOKEN", "MAX_LIVE_TOKENS", "revoke", "revoke_store", "revoke_tokens", "RevokingTranscript",
]

LIVE_TOKEN = "live_token"
"""The key of ``to_dict`` output that holds the live-export token (see the module docstring)."""

MAX_LIVE_TOKENS = 10_000
"""The most live-export tokens this process keeps; beyond it the least recently exported goes
(data carrying it is then restored as data from elsewhere is: apart, with
:class:`StoreDetachedWarning` when it names a store; a reused workflow ``Context`` exports its
memory again just before rebuilding it, so it gets a fresh token)."""

_LIVE: dict[str, tuple[weakref.ReferenceType[Store], str, tuple[int, str]]] = {}
"""Tokens this process issued, least recently exported first: token -> (the store, weakly;
the session; its key in :data:`_ISSUED`).  An entry goes when its store is garbage-collected (a
weakref callback), so the map never keeps a store alive (see the module docstring)."""

_ISSUED: dict[tuple[int, str], str] = {}
"""The token issued for each (live store's ``id``, session): one per session of a store, however
many memories export it (an entry goes with its store, before its ``id`` can be reused)."""

_BY_STORE: dict[int, set[str]] = {}
"""The tokens issued for each live store's ``id`` (what :func:`revoke_store` drops, without
walking the registry)."""

_REGISTRY_LOCK = threading.RLock()
"""Guards the two maps' compound updates (re-entrant: a weakref callback may run inside them)."""

_TRUSTED: contextvars.ContextVar[tuple[Store | str | os.PathLike[str], ...]] = contextvars.ContextVar(
    "gatekeeper_trusted_stores", default=()
)
"""The stores :func:`trusted_stores` names, in the context of its block: the code it runs and
the asyncio tasks and ``asyncio.to_thread`` calls started inside it, never another request."""


class StoreDetachedWarning(UserWarning):
    """``from_dict`` restored a memory whose data names a SQLite file or PostgreSQL
    database into a new in-memory store (the data may not choose a store, and it was no
    live export of this process): later writes do not reach the named one.  Pass
    ``store=``, or use :func:`trusted_stores`."""


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


def export_token(store: Store, session_id: str) -> str:
    """The live-export token for ``session_id`` of the open ``store``: the one this process
    issued for that store and session (now the most recently exported), else a new random
    one, mapped weakly to the store; beyond :data:`MAX_LIVE_TOKENS`, the least recently
    exported token goes."""
    key = (id(store), session_id)
    with _REGISTRY_LOCK:
        token = _ISSUED.get(key)
        entry = _LIVE.pop(token, None) if token is not None else None
        if token is not None and entry is not None and entry[0]() is store and entry[1] == session_id:
            _LIVE[token] = entry  # the most recently exported: the last to go
            return token
        token = secrets.token_urlsafe(24)

        def forget(_gone: object) -> None:  # the store was garbage-collected: its token goes with it
            _drop(token)

        while len(_LIVE) >= MAX_LIVE_TOKENS:  # the least recently exported goes
            _drop(next(iter(_LIVE)))
        _LIVE[token] = (weakref.ref(store, forget), session_id, key)
        _ISSUED[key] = token
        _BY_STORE.setdefault(key[0], set()).add(token)
        return token


def _drop(token: str) -> None:
    """Forget ``token`` (and its :data:`_ISSUED` entry, if it is still the one issued)."""
    with _REGISTRY_LOCK:
        entry = _LIVE.pop(token, None)
        if entry is None:
            return
        key = entry[2]
        if _ISSUED.get(key) == token:
            del _ISSUED[key]
        tokens = _BY_STORE.get(key[0])
        if tokens is not None:
            tokens.discard(token)
            if not tokens:
                del _BY_STORE[key[0]]


def revoke_tokens(tokens: Iterable[str]) -> None:
    """Forget ``tokens`` (those a memory exported, when it is closed): data carrying them is
    restored as data from elsewhere is."""
    for token in list(tokens):
        _drop(token)


def revoke(store: Store, session_id: str) -> None:
    """Forget the token issued for ``session_id`` of ``store`` (the session was purged)."""
    with _REGISTRY_LOCK:
        token = _ISSUED.get((id(store), session_id))
        entry = _LIVE.get(token) if token is not None else None
        if token is not None and entry is not None and entry[0]() is store:
            _drop(token)


def revoke_store(store: Store) -> None:
    """Forget every token issued for ``store`` (it was closed)."""
    with _REGISTRY_LOCK:
        for token in list(_BY_STORE.get(id(store), ())):
            entry = _LIVE.get(token)
            if entry is not None and entry[0]() is store:
                _drop(token)
        _BY_STORE.pop(id(store), None)  # and whatever was left there


class RevokingTranscript(Transcript):
    """A memory's transcript: purging the session (``memory.transcript.purge()``, ``apurge``)
    also revokes its live-export token (:func:`revoke`), so no registry entry outlives it."""

    def purge(self) -> None:
        super().purge()
        revoke(self.store, self.session_id)


def live_store(data: dict[str, Any], named: dict[str, Any] | None, session_id: str) -> Store | None:
    """The open store that ``data``'s live-export token stands for, when this
    process issued it for ``session_id`` of the store ``named`` names (``None``: a store
    ``to_dict`` cannot name, such as an ``InMemoryStore``), has not revoked it, and that
    store is still open; else ``None`` (the data came from elsewhere, or its token or
    store went).  Whether the data may attach there (its log must be the session's as it
    is now) is for ``from_dict`` to check.

    Raises:
        InvalidInputError: ``data[LIVE_TOKEN]`` is there but not a str.
    """
    token = data.get(LIVE_TOKEN)
    if token is None:
        return None
    if not isinstance(token, str):
        raise InvalidInputError(
            f"serialised memory: {LIVE_TOKEN!r} must be a str as to_dict() writes it, got {type(token).__name__}; "
            "nothing was created. Export the memory again with to_dict(), or leave the key out"
        )
    entry = _LIVE.get(token)
    store = entry[0]() if entry is not None else None
    if entry is None or store is None or entry[1] != session_id:
        return None
    if not (_names(store, named) if named is not None else store_spec(store) is None):
        return None
    try:
        store.head(session_id)  # a closed store raises; a reattached memory could not use it
    except StoreClosedError:
        revoke_store(store)  # closed for good: none of its tokens can attach again
        return None
    return store


def detached(named: dict[str, Any]) -> None:
    warnings.warn(
        f"GatekeeperMemory.from_dict: this memory lived in {_described(named)}, but the data was not exported by "
        "a memory whose store is still open in this process (it was saved and read back after a restart, came "
        "from another process, or its memory was closed), and serialised data may not choose a store: it was "
        "restored into a new in-memory store, and later turns will not reach that store. Pass "
        "from_dict(data, store=...), or, where a framework restores it for you (a workflow Context built with "
        "Context.from_dict(...) decodes it when its run starts), run that inside "
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
    is and left open), but only to a session holding exactly the data's revisions (never
    importing into an empty one, never attaching to one that went on: ``InvalidInputError``,
    nothing written; pass ``from_dict(data, store=...)`` yourself to import or attach on
    purpose); data naming any other store is still restored in memory, with
    :class:`StoreDetachedWarning`.  It is for restores
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

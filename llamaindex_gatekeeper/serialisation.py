"""Serialisation of :class:`~llamaindex_gatekeeper.memory.GatekeeperMemory`: state and history.

``to_dict`` writes the session's full revision log as JSON-ready data (no
``SimpleChatStore``, whose serialisation fails under pydantic >= 2.14); ``from_dict``
replays it into a store.  LlamaIndex's ``to_json`` / ``from_json`` and the workflow
``Context`` serialiser go through these two, so an agent context that holds the
memory round-trips with it.

Serialised data is treated as untrusted: ``from_dict`` takes only the options in
:data:`DATA_OPTIONS` from it (scalars: the editing strategy, the deletion limit and
the selection tunables), never a store, a model or a token counter, which would let
the data choose where the memory writes or what code counts its tokens.  The caller
passes those to ``from_dict``.

Pickling (``pickle``, ``multiprocessing``) keeps the session: a memory in a SQLite
file pickles as that file's path and reattaches to the live session; one in
PostgreSQL as its connection string *without the password* (the unpickling side
supplies it through ``PGPASSWORD`` or ``~/.pgpass``); any other store as its full
revision log, replayed into a new in-memory store.  A model and a custom token
counter are never pickled (they may hold API keys or be closures): the unpickled
memory uses the defaults.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from context_gatekeeper import InvalidInputError, Revision, SelectionParams, Store
from context_gatekeeper.stores import InMemoryStore

if TYPE_CHECKING:
    from context_gatekeeper import Transcript

__all__ = ["SerialisationMixin", "DATA_OPTIONS"]

_SCALAR_OPTIONS = (str, int, float, bool, type(None))
DATA_OPTIONS = frozenset(
    {"strategy", "max_deletion_share", "message_overhead", "system_prompt", "on_overflow"}
    | {f.name for f in dataclasses.fields(SelectionParams)}
)
"""The options ``from_dict`` accepts from serialised data (scalar values only)."""


def _data_options(data: dict[str, Any]) -> dict[str, Any]:
    """The whitelisted scalar options of serialised data; anything else is refused, naming it."""
    options = data.get("options", {})
    if not isinstance(options, dict):
        raise InvalidInputError(f"serialised memory: 'options' must be an object, got {type(options).__name__}")
    refused = sorted(k for k, v in options.items() if k not in DATA_OPTIONS or not isinstance(v, _SCALAR_OPTIONS))
    if refused:
        raise InvalidInputError(
            f"serialised memory: option(s) {refused} cannot come from serialised data (a store, model or "
            "token counter there would let the data choose where the memory writes or what runs); "
            "nothing was created. Pass them to from_dict(data, store=..., model=..., token_counter=...)"
        )
    return dict(options)


def _store_spec(store: Store) -> dict[str, Any] | None:
    """How a pickle names ``store``: a SQLite path, a password-free PostgreSQL conninfo, or None."""
    from context_gatekeeper.stores.sqlite import SQLiteStore

    if isinstance(store, SQLiteStore) and store.path != ":memory:":
        return {"sqlite": store.path}
    conninfo = getattr(getattr(store, "_pool", None), "conninfo", None)
    if type(store).__name__ == "PostgresStore" and isinstance(conninfo, str):
        from psycopg.conninfo import conninfo_to_dict, make_conninfo

        parts = {k: v for k, v in conninfo_to_dict(conninfo).items() if k != "password" and v is not None}
        return {"postgres": make_conninfo(**parts), "table_prefix": store.table_prefix}  # type: ignore[attr-defined]
    return None


def _open_spec(spec: dict[str, Any]) -> Store:
    """The store a pickle named."""
    if "sqlite" in spec:
        from context_gatekeeper.stores.sqlite import SQLiteStore

        return SQLiteStore(spec["sqlite"])
    from context_gatekeeper.stores.postgres import PostgresStore

    return PostgresStore(spec["postgres"], table_prefix=spec["table_prefix"])


def _unpickle(cls: type, state: dict[str, Any]) -> Any:
    """Rebuild a pickled memory (see the module docstring)."""
    spec = state.get("store")
    if spec is None:
        return cls.from_dict(state["memory"])  # type: ignore[attr-defined]
    memory = state["memory"]
    return cls(
        token_limit=memory["token_limit"], session_id=memory["session_id"], store=_open_spec(spec), **memory["options"]
    )


class SerialisationMixin:
    """``to_dict`` / ``from_dict`` and pickling; needs ``_options``, ``_transcript``,
    ``session_id``, ``token_limit``, ``class_name`` and ``history`` on the host."""

    _options: dict[str, Any]
    _transcript: "Transcript"
    session_id: str
    token_limit: int

    def to_dict(self, **kwargs: Any) -> dict[str, Any]:
        """State and full revision history as JSON-ready data (no SimpleChatStore involved).

        Scalar options are kept; a custom token counter, ``params`` object or editing
        model is not: pass it again to :meth:`from_dict`.
        """
        options = {k: v for k, v in self._options.items() if k in DATA_OPTIONS and isinstance(v, _SCALAR_OPTIONS)}
        return {
            "class_name": self.class_name(),  # type: ignore[attr-defined]
            "session_id": self.session_id,
            "token_limit": self.token_limit,
            "options": options,
            "revisions": [r.to_dict() for r in self._transcript.history()],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], **kwargs: Any) -> Any:  # type: ignore[override]
        """Rebuild a memory from :meth:`to_dict` output.

        The revisions are written into ``store=`` (default: a new in-memory store).  A
        store whose session already holds exactly these revisions (a SQLite file the
        memory lived in) is attached as it is; one holding other revisions is refused
        (``ValueError``).  Other keyword arguments are constructor options (``model``,
        ``token_counter``, ``params``, ...).  Revision times are those of the import.

        Raises:
            InvalidInputError: ``data["options"]`` names an option outside
                :data:`DATA_OPTIONS` (a store, a model, a token counter ...) or a value
                that is not a scalar; nothing is created.
        """
        options = {**_data_options(data), **kwargs}
        store = options.pop("store", None) or InMemoryStore()
        memory = cls(token_limit=data["token_limit"], session_id=data["session_id"], store=store, **options)
        revisions = [Revision.from_dict(entry) for entry in data.get("revisions", [])]
        existing = memory.history()
        if existing:
            if [(r.number, r.kind) for r in existing] != [(r.number, r.kind) for r in revisions]:
                raise ValueError(
                    f"session {memory.session_id!r} already has other revisions in that store; "
                    "pass an empty store (or another session_id)"
                )
            return memory
        for revision in revisions:
            memory.store.commit(memory.session_id, revision, expected_head=revision.number - 1)
        return memory

    def __reduce__(self) -> tuple[Any, tuple[type, dict[str, Any]]]:
        """Pickle as the session (see the module docstring): never a model, a token counter or a password."""
        spec = _store_spec(self._transcript.store)
        memory = self.to_dict()
        if spec is not None:
            memory["revisions"] = []  # the live session is reattached, not replayed
        return _unpickle, (type(self), {"memory": memory, "store": spec})

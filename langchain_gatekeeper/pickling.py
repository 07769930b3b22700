"""Pickling and ``copy.deepcopy`` of :class:`~langchain_gatekeeper.history.GatekeeperChatMessageHistory`.

A history holds locks, a store connection and an index, none of which pickle.  What
travels instead is the session, as the LlamaIndex memory does it
(``llamaindex_gatekeeper.serialisation``):

* a history in a SQLite file pickles as that file's path and reattaches to the same
  session of the same file (nothing is copied; both see every later write);
* one in PostgreSQL pickles as its connection string *without the password* (the
  unpickling side supplies it through ``PGPASSWORD`` or ``~/.pgpass``) and its table
  prefix, and reattaches the same way;
* one in any other store (``InMemoryStore``, the default) carries its whole revision
  log, replayed into a new in-memory store: the copy has the same messages, ``history``,
  ``record``, ``undo`` and ``redo`` (each revision's ``time`` is that of the replay), and
  later writes to either leave the other alone.

The editing model, a custom token counter, the embedder and a vector cache are never
pickled (they may hold API keys or be closures; a token counter given by name, such as
``"o200k_base"``, is no code and travels): the unpickled history uses the
defaults, so pass them again where you need them (``history.transcript.model = ...``,
or build the history anew on the same store).  Scalar options (strategy, deletion
limit, token budget, selection tunables) and ``params`` travel.  ``copy.deepcopy``
stays in the process, so it keeps every option, the model and embedder included (the
same objects), and a PostgreSQL password.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from context_gatekeeper import GateOptions, InMemoryStore, Revision, SelectionParams, Store
from context_gatekeeper.integration import store_from_spec, store_spec

if TYPE_CHECKING:
    from .history import GatekeeperChatMessageHistory

__all__ = ["CODE_OPTIONS", "pickled_state", "rebuild", "unpickle"]

CODE_OPTIONS = frozenset({"model", "token_counter", "embedder", "vector_cache"})
"""Options a pickle leaves out when they are objects (which may hold keys or code); a deepcopy
keeps them.  A name given for one (a tiktoken encoding such as ``"o200k_base"`` as the
``token_counter``) is no code, and travels."""

_SCALARS = (str, int, float, bool, type(None))


def pickled_state(history: GatekeeperChatMessageHistory, *, in_process: bool) -> dict[str, Any]:
    """What a pickle (``in_process=False``) or a deepcopy (``True``) of ``history`` carries."""
    transcript = history.transcript
    spec = store_spec(transcript.store, keep_password=in_process)
    options = dict(history._options)
    if not in_process:
        options = {
            k: v
            for k, v in options.items()
            if _travels(k, v) and (isinstance(v, _SCALARS) or isinstance(v, SelectionParams))
        }
        record = history._options.get("options")
        if isinstance(record, GateOptions):  # the record, less what is code
            options["options"] = record.with_(
                **{name: None for name in ("embedder", "token_counter", "vector_cache")
                   if not _travels(name, getattr(record, name))}
            )
    return {
        "session_id": history.session_id,
        "options": options,
        "store": spec,
        # the live session is reattached when the store can be named; otherwise its log travels
        "revisions": None if spec is not None else [r.to_dict() for r in transcript.history()],
    }


def _travels(name: str, value: Any) -> bool:
    """Whether option ``name`` set to ``value`` goes into a pickle: anything but an object of
    :data:`CODE_OPTIONS` (a name, such as an encoding name for ``token_counter``, is no code)."""
    return name not in CODE_OPTIONS or isinstance(value, str)


def rebuild(cls: type[GatekeeperChatMessageHistory], state: dict[str, Any]) -> GatekeeperChatMessageHistory:
    """The history ``state`` (:func:`pickled_state` output) describes."""
    spec, session_id = state["store"], state["session_id"]
    store: Any
    if spec is None:
        store = InMemoryStore()
        for revision in state["revisions"]:
            loaded = Revision.from_dict(revision)
            store.commit(session_id, loaded, expected_head=loaded.number - 1)
    else:  # a SQLite or PostgreSQL store, opened here: the new history closes it
        store = store_from_spec(spec)
    try:
        history = cls(session_id, store=store, **state["options"])
    except BaseException:
        if isinstance(store, Store) and spec is not None:
            store.close()
        raise
    if isinstance(store, Store) and spec is not None:
        history._opened_store = store  # opened here: close() closes it
    return history


def unpickle(cls: type[GatekeeperChatMessageHistory], state: dict[str, Any]) -> GatekeeperChatMessageHistory:
    """Rebuild a pickled history (the callable ``__reduce__`` names)."""
    return rebuild(cls, state)

"""Serialisation of :class:`~llamaindex_gatekeeper.memory.GatekeeperMemory`: state and history.

Plain functions the memory's ``to_dict`` / ``from_dict`` / ``__reduce__`` /
``__deepcopy__`` call (:func:`to_dict`, :func:`from_dict`, :func:`pickled`,
:func:`deep_copy`): the checking of untrusted serialised logs is its own concern.

``to_dict`` writes the session's full revision log as JSON-ready data (no
``SimpleChatStore``, whose serialisation fails under pydantic >= 2.14); ``from_dict``
replays it into a store.  LlamaIndex's ``to_json`` / ``from_json`` and the workflow
``Context`` serialiser go through these two, so an agent context that holds the
memory round-trips with it.

The revision log is imported whole or not at all: ``from_dict`` checks all of it in
memory first, with the check the stores run inside every commit
(:func:`~context_gatekeeper.stores.integrity.check_revision`, plus the undo/redo
stacks), and refuses a log with a revision that does not apply, naming it, before
anything is written.  No-op revisions, which older versions recorded and exported
(``"changes": []``, a change to identical text), are skipped and the later revisions
renumbered, undo/redo/revert targets with them, as the stores no longer write them.

Serialised data is treated as untrusted: ``from_dict`` takes only the options in
:data:`DATA_OPTIONS` from it (scalars of the right type: the editing strategy, the
deletion limit and the selection tunables), never a store, a model or a token counter,
which would let the data choose where the memory writes or what code counts its
tokens.  The caller passes those to ``from_dict``, and its keywords win over the data:
``session_id=`` and ``token_limit=`` replace the data's, ``options=`` (a
``GateOptions``) replaces the data's gate settings and tunables, ``params=`` /
``preset=`` its tunables.  What cannot travel as JSON: the non-scalar tunables
(``kind_weights``, ``switch_model``, ``semantic_preference_model``,
``extra_stopwords``), an embedder, a vector cache, a token counter and the editing
model; pass them to ``from_dict`` again (``params=`` for the tunables).

**The store.**  ``to_dict`` records where the memory lived (``data["store"]``: a SQLite
file's absolute path, or a PostgreSQL connection string without its password and the
table prefix; nothing for an in-memory store), but ``from_dict`` never opens a store
the data names.  Data this process exported from a memory whose store is still open
carries a token this process issued (``data["live_token"]``, see :mod:`.stored`):
when the data's log is that session's log as it is now, ``from_dict`` attaches it to
that same open store object and session, whatever the store, and imports nothing (a
workflow ``Context`` reused across runs serialises its memory and rebuilds it from
that JSON at every run, and its memory goes on writing to yours).
Other data (saved and read back after a restart, from another process, or a
checkpoint of this process whose session changed since it was saved) with no
``store=`` is replayed into a new in-memory store, apart, with a warning
(:class:`StoreDetachedWarning`) when it names a store, that later writes will not reach
it.  To reattach such data, pass ``store=``, or, where a framework calls ``from_dict``
for you (a workflow ``Context`` decoding its state), name the stores you trust while it
runs with :func:`trusted_stores` (also ``GatekeeperMemory.trusted_stores``).  A store
the data chooses that way (it names the store and the session) is attached only when
its session holds exactly the data's revisions: one that went on since the export, or
whose log differs, is refused, and so is an empty session (purged, or never used) when
the data holds revisions: ``from_dict`` never imports into a trusted store, so a
checkpoint kept from before a purge cannot bring the erased conversation back, nor data
naming an unused session id plant a history there.  A store you pass as ``store=``, your own choice,
imports into an empty session, and may also hold revisions after the data's, as for a
checkpoint of this session, which went on since: it is attached as it is.  For example:

>>> import tempfile, warnings
>>> from llamaindex_gatekeeper import GatekeeperMemory
>>> folder = tempfile.TemporaryDirectory()
>>> path = folder.name + "/chats.db"
>>> memory = GatekeeperMemory.from_defaults(store=path, session_id="s1")
>>> data = memory.to_dict()
>>> memory.close()  # closed: its exports are no live exports any more
>>> with GatekeeperMemory.trusted_stores(path):
...     again = GatekeeperMemory.from_dict(data)
>>> again.store.path == path
True
>>> again.close()
>>> with warnings.catch_warnings(record=True) as caught:
...     warnings.simplefilter("always")
...     detached = GatekeeperMemory.from_dict(data)
>>> [w.category.__name__ for w in caught]
['StoreDetachedWarning']
>>> detached.close()
>>> folder.cleanup()

Pickling (``pickle``, ``multiprocessing``) and ``copy.deepcopy`` keep the session and the
selection parameters whole (a pickle is trusted: unpickling runs code anyway): a memory in a SQLite
file pickles as that file's path and reattaches to the live session; one in
PostgreSQL as its connection string *without the password* (the unpickling side
supplies it through ``PGPASSWORD`` or ``~/.pgpass``); any other store as its full
revision log, replayed into a new in-memory store, apart.  ``copy.deepcopy`` (and
``model_copy``), which stays in the process, attaches the copy to the same session of
the same store, whatever the store: a SQLite or PostgreSQL one through a connection of
its own (as such copies always did), any other store (an ``InMemoryStore`` included) as
the same object.  Agent workflows deep-copy their state (``ctx.store.edit_state()``) and
keep the copy, which must go on writing to the caller's memory.  For a copy apart, pickle
an in-memory memory, or pass ``from_dict(memory.to_dict(), store=InMemoryStore())``.  A model and a
custom token counter are never pickled (they may hold API keys or be closures): the
unpickled memory uses the defaults; ``copy.deepcopy`` keeps them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, get_args

from context_gatekeeper import (
    InMemoryStore, InvalidInputError, InvalidRevisionError, InvalidTypeError, Revision, SelectionParams, Store,
)
from context_gatekeeper.integration import (
    IdEntry, RevisionKind, STATE_CHANGING, check_revision, require_budget, store_from_spec, store_spec,
)

from .stored import (
    LIVE_TOKEN, StoreDetachedWarning, detached, export_token, live_store, named_store, trusted_store, trusted_stores,
)

if TYPE_CHECKING:
    from .memory import GatekeeperMemory

__all__ = [
    "to_dict", "from_dict", "pickled", "deep_copy", "trusted_stores", "StoreDetachedWarning", "DATA_OPTIONS",
    "require_session_id", "add_note",
]

_SCALAR_OPTIONS = (str, int, float, bool, type(None))
_TYPES_BY_NAME: dict[str, tuple[type, ...]] = {"bool": (bool,), "int": (int,), "float": (int, float), "str": (str,)}
_OPTION_TYPES: dict[str, tuple[type, ...]] = {
    "strategy": (str,),
    "max_deletion_share": (int, float),
    "message_overhead": (int,),
    "on_overflow": (str, type(None)),
    **{
        f.name: _TYPES_BY_NAME[str(f.type)]
        for f in dataclasses.fields(SelectionParams)
        if str(f.type) in _TYPES_BY_NAME
    },
}
DATA_OPTIONS = frozenset(_OPTION_TYPES)
"""The options ``from_dict`` accepts from serialised data (scalar values of the option's type only)."""

_TUNABLES = frozenset(f.name for f in dataclasses.fields(SelectionParams))
_GATE_SETTINGS = frozenset({"message_overhead", "on_overflow"}) | _TUNABLES  # what an options= record sets
def _fits(value: object, kinds: tuple[type, ...]) -> bool:
    """Whether ``value`` is one of ``kinds`` (a bool only where a bool is expected)."""
    return bool in kinds if isinstance(value, bool) else isinstance(value, kinds)


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
    mistyped = [
        f"{k}={v!r} ({' or '.join(t.__name__ for t in _OPTION_TYPES[k])} expected)"
        for k, v in options.items()
        if not _fits(v, _OPTION_TYPES[k])
    ]
    if mistyped:
        raise InvalidInputError(
            f"serialised memory: option(s) of the wrong type: {', '.join(mistyped)}; nothing was created. "
            "Export the memory again with to_dict(), or pass the option to from_dict(data, ...) yourself"
        )
    return dict(options)


def _under_caller(data_options: dict[str, Any], caller: dict[str, Any]) -> dict[str, Any]:
    """The data's options with the caller's keywords over them: ``options=`` replaces the
    data's gate settings and tunables, ``params=`` / ``preset=`` its tunables, any other
    keyword the option of its name."""
    if caller.get("options") is not None:
        covered = _GATE_SETTINGS
    elif caller.get("params") is not None or caller.get("preset") is not None:
        covered = _TUNABLES
    else:
        covered = frozenset()
    return {**{k: v for k, v in data_options.items() if k not in covered}, **caller}


def require_session_id(value: Any) -> str:
    """The session id rule, the core's: a non-empty ``str``."""
    if not isinstance(value, str):
        raise InvalidTypeError(f"session_id must be a str, got {type(value).__name__}; pass the conversation's key")
    if not value:
        raise InvalidInputError("session_id must not be empty; pass the conversation's key, for example 'user-42'")
    return value


def _required(data: Any, caller: dict[str, Any]) -> tuple[str, int]:
    """The session id and token limit ``from_dict`` builds with: the caller's, else the
    data's (``options=``'s budget standing for ``token_limit``), each checked."""
    if not isinstance(data, dict):
        raise InvalidTypeError(
            f"serialised memory must be a dict (to_dict() output), got {type(data).__name__}; nothing was created"
        )
    if caller.get("token_limit") is None and caller.get("options") is not None:
        caller["token_limit"] = caller["options"].token_budget
    found: dict[str, Any] = {}
    for key in ("session_id", "token_limit"):
        value = caller.pop(key, None)
        if value is None:
            value = data.get(key)
        if value is None:
            raise InvalidInputError(
                f"serialised memory has no {key!r}; nothing was created. Pass to_dict() output, or "
                f"from_dict(data, {key}=...)"
            )
        found[key] = value
    return require_session_id(found["session_id"]), require_budget(found["token_limit"], "token_limit")


_KINDS = frozenset(get_args(RevisionKind))
_TARGETED = frozenset({"undo", "redo", "revert"})
_NOTHING_WRITTEN = "nothing was written to the store"
_WHAT_TO_DO = (
    "The data was damaged or edited: export the memory again with to_dict(), or remove that revision "
    "(and those that build on it) from data['revisions']"
)


def _refused(position: int, kind: object, reason: str) -> str:
    """The message naming revision ``position`` of serialised data and saying what to do."""
    return f"serialised memory: revision {position} ({kind}) {reason}; {_NOTHING_WRITTEN}. {_WHAT_TO_DO}"


def _parse(entry: object, position: int) -> Revision:
    """Entry ``position`` (1-based) of ``data["revisions"]`` as a revision, or InvalidInputError naming it."""
    kind = entry.get("kind") if isinstance(entry, dict) else None
    if not isinstance(entry, dict):
        raise InvalidInputError(_refused(position, kind, f"is not a revision object but {type(entry).__name__}"))
    number = entry.get("number")
    if type(number) is not int or number != position:
        raise InvalidInputError(
            _refused(position, kind, f"is numbered {number!r}: a log's revisions are numbered 1, 2, 3 ... in order")
        )
    if kind not in _KINDS:
        raise InvalidInputError(_refused(position, kind, f"has an unknown kind (one of {sorted(_KINDS)} expected)"))
    if not isinstance(entry.get("changes"), list):
        raise InvalidInputError(_refused(position, kind, "cannot be read ('changes' must be a list)"))
    if not all(isinstance(entry.get(key), (str, type(None))) for key in ("instruction", "model")):
        raise InvalidInputError(_refused(position, kind, "cannot be read ('instruction' and 'model' are text or null)"))
    try:
        return Revision.from_dict(entry)
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        detail = f"missing field {error}" if isinstance(error, KeyError) else str(error)
        raise InvalidInputError(_refused(position, kind, f"cannot be read ({detail})")) from error


def _checked_log(session_id: str, entries: object) -> list[Revision]:
    """The serialised log as the store will hold it: every revision read and checked as
    the stores check it, in order, with no-op revisions skipped and the rest numbered
    1, 2, 3 ... (undo/redo/revert targets renumbered with them).  Writes nothing.

    Raises:
        InvalidInputError: an entry is not a revision, or an append reuses an id with other text.
        InvalidRevisionError: a revision does not apply to those before it (a message put
            twice, removed or changed while absent or with other text than it holds, an id
            reused, an append after a message never held), or undoes, redoes or
            reverts to a revision it cannot.
    """
    if not isinstance(entries, list):
        raise InvalidInputError(
            f"serialised memory: 'revisions' must be a list, got {type(entries).__name__}; {_NOTHING_WRITTEN}. "
            "Pass to_dict() output"
        )
    index: dict[str, IdEntry] = {}

    def lookup(ids: Iterable[str]) -> Mapping[str, IdEntry]:
        return {i: index[i] for i in ids if i in index}

    kept: list[Revision] = []
    stored_as: dict[int, int] = {}  # position in the data -> number in the store (kept revisions)
    state_at: dict[int, int] = {0: 0}  # position -> the stored revision whose state it leaves
    done: list[int] = []  # undo_stacks, replayed as the log is read
    undone: list[Revision] = []
    for position, entry in enumerate(entries, 1):
        revision = _parse(entry, position)
        kind, head, target = revision.kind, len(kept), revision.target
        if kind not in _TARGETED:
            target = None
        elif not revision.is_noop:  # a no-op is skipped, whatever it names
            targets = state_at if kind == "revert" else stored_as
            if type(target) is not int or target not in targets:
                skipped = type(target) is int and target in state_at and target not in stored_as and target > 0
                reason = (
                    f"{kind}s revision {target}, which changed nothing"
                    if skipped
                    else f"has target {target!r}, which is not an earlier revision it can {kind}"
                )
                raise InvalidRevisionError(_refused(position, kind, reason))
            target = targets[target]
        placed = dataclasses.replace(revision, number=head + 1, parent=head, base=head, target=target)
        try:
            checked, rows = check_revision(session_id, placed, lookup)
        except (InvalidRevisionError, InvalidInputError) as error:
            reason = f"does not apply to the revisions before it: {error}"
            raise type(error)(_refused(position, kind, reason)) from error
        if not checked.changes:
            state_at[position] = head  # a no-op: the store would not write it
            continue
        if kind in STATE_CHANGING:
            done.append(placed.number)
            undone.clear()
        elif kind == "undo":
            if placed.target not in done:
                raise InvalidRevisionError(
                    _refused(position, kind, f"undoes revision {revision.target}, which is not done at that point")
                )
            done.remove(placed.target)
            undone.append(placed)
        elif kind == "redo":
            if not undone or placed.target is None or undone[-1].target != placed.target:
                raise InvalidRevisionError(
                    _refused(position, kind, f"redoes revision {revision.target}, which is not the last one undone")
                )
            undone.pop()
            done.append(placed.target)
        index.update(rows)
        kept.append(placed)
        stored_as[position] = state_at[position] = placed.number
    return kept


def _same_revision(stored: Revision, imported: Revision) -> bool:
    """Whether ``stored`` is ``imported`` as the store holds it (number, kind, target and
    changes, in the canonical JSON the stores write; times differ by design)."""
    return (stored.number, stored.kind, stored.target, stored.changes_json()) == (
        imported.number,
        imported.kind,
        imported.target,
        imported.changes_json(),
    )


def _same_log(existing: list[Revision], imported: list[Revision]) -> bool:
    """Whether the two logs hold the same revisions (see :func:`_same_revision`; a revision
    read back from the store it was exported from is equal as it is, times included)."""
    return len(existing) == len(imported) and all(
        stored == wanted or _same_revision(stored, wanted) for stored, wanted in zip(existing, imported)
    )


def _refuse_other_log(session_id: str, existing: list[Revision], imported: list[Revision], *, later: bool) -> None:
    """InvalidInputError (a ValueError) naming the first revision where the store's log
    and the imported one differ, or the first that only one of them has; nothing when they
    are the same, nor, with ``later`` (the caller passed the store), when the data's log is
    a beginning of the store's (the data was exported from this session, which went on
    since: the store is the memory's truth, as a pickle reattaches).

    Without ``later`` (the data chose the store: :func:`trusted_stores`) the store's log must
    be the data's: a session's revisions are only ever reached by data holding all of them,
    never by data naming its id with fewer (an empty log included), and an empty session
    (``existing`` empty: purged, or never used) is never filled by data holding revisions."""
    for position, (stored, wanted) in enumerate(zip(existing, imported), 1):
        if not _same_revision(stored, wanted):
            what = f"its revision {position} ({stored.kind}) differs from revision {position} ({wanted.kind}) of the data"
            break
    else:
        if len(existing) == len(imported) or (later and len(existing) > len(imported)):
            return
        position = min(len(existing), len(imported)) + 1
        what = (
            f"it has {len(existing)} revision(s) and the data {len(imported)}: revision {position} is only in "
            f"{'the store' if len(existing) > len(imported) else 'the data'}"
        )
        if not later and not existing:
            raise InvalidInputError(
                f"session {session_id!r} in a store named by the data (trusted_stores) is empty (purged, or "
                f"never used) and the data holds {len(imported)} revision(s); {_NOTHING_WRITTEN}. Data naming "
                "a trusted store attaches only to a session holding exactly its revisions, never writes a "
                "history into an empty one (that would bring back a purged conversation or plant one in a "
                "session not yet used). To import the data on purpose, pass from_dict(data, store=...)"
            )
        if len(existing) > len(imported):
            raise InvalidInputError(
                f"session {session_id!r} in a store named by the data (trusted_stores) holds revisions the data "
                f"does not: {what}; {_NOTHING_WRITTEN}. Data naming a trusted store attaches only to a session "
                "holding exactly its revisions. If it is yours (a checkpoint of this session, which went on "
                "since), pass from_dict(data, store=...) to attach to the session as it is now, or export the "
                "session again with to_dict()"
            )
    raise InvalidInputError(
        f"session {session_id!r} already has other revisions in that store: {what}; {_NOTHING_WRITTEN}. "
        "Pass an empty store (or another session_id), or export this session again with to_dict()"
    )


def _unpickle(cls: type[GatekeeperMemory], state: dict[str, Any]) -> GatekeeperMemory:
    """Rebuild a pickled memory (see the module docstring)."""
    trusted = {"params": state["params"]} if state.get("params") is not None else {}  # older pickles have none
    return _rebuild(cls, state["memory"], state.get("store"), trusted)


def _rebuild(
    cls: type[GatekeeperMemory], memory: dict[str, Any], spec: dict[str, Any] | None, trusted: dict[str, Any]
) -> GatekeeperMemory:
    """The memory ``memory`` (:func:`to_dict` output) describes: attached to the store
    ``spec`` names (a SQLite path is reopened by the new memory, which then owns and
    closes it), or, with no spec, its revisions replayed into a new in-memory store.
    ``trusted`` are constructor options from this process (a model, a token counter)."""
    if spec is None:
        return from_dict(cls, memory, **trusted)
    store = store_from_spec(spec)
    options = _under_caller(_data_options(memory), trusted)
    try:
        rebuilt = cls(token_limit=memory["token_limit"], session_id=memory["session_id"], store=store, **options)
    except BaseException:
        store.close()
        raise
    rebuilt._opened_store = store  # close() closes it
    return rebuilt


def to_dict(memory: GatekeeperMemory) -> dict[str, Any]:
    """``memory``'s state and full revision history as JSON-ready data (no SimpleChatStore involved).

    Scalar options are kept, and so are the scalar values the selection parameters
    (however given: ``params=``, ``preset=``, tunable keywords, an ``options=`` record)
    change from the defaults; non-scalar tunables, a custom token counter, an embedder or
    an editing model are not: pass them again to :func:`from_dict`.  ``"store"`` names
    the SQLite file or PostgreSQL database (no password) the memory lives in, for
    :func:`from_dict` to warn about or :func:`trusted_stores` to reattach, and
    ``"live_token"`` is this process's token for that open store and session, with which
    :func:`from_dict` in this process reattaches while the log is unchanged (see
    :mod:`.stored`); a closed memory writes none, and closing one revokes the token it wrote.
    """
    data = _exported(memory)
    if not memory._closed:
        token = export_token(memory.transcript.store, memory.transcript.session_id)
        memory._live_token = token  # close() revokes it
        data[LIVE_TOKEN] = token
    return data


def _exported(memory: GatekeeperMemory, log: bool = True) -> dict[str, Any]:
    """:func:`to_dict` without the live-export token (what a pickle or a copy carries);
    without ``log``, ``"revisions"`` is empty (a copy attaches to the live session)."""
    options = {k: v for k, v in memory._options.items() if k in DATA_OPTIONS and isinstance(v, _SCALAR_OPTIONS)}
    params = memory._options.get("params")
    if isinstance(params, SelectionParams):  # a params object travels as the scalar values it changes
        default = SelectionParams()
        for field in dataclasses.fields(SelectionParams):
            value = getattr(params, field.name)
            if isinstance(value, _SCALAR_OPTIONS) and value != getattr(default, field.name):
                options.setdefault(field.name, value)
    data = {
        "class_name": memory.class_name(),
        "session_id": memory.transcript.session_id,
        "token_limit": memory.token_limit,
        "options": options,
        "revisions": [r.to_dict() for r in memory.transcript.history()] if log else [],
    }
    named = store_spec(memory.transcript.store)  # never the password
    if named is not None:
        data["store"] = named
    return data


def from_dict(cls: type[GatekeeperMemory], data: dict[str, Any], **kwargs: Any) -> GatekeeperMemory:
    """A memory of class ``cls`` rebuilt from :func:`to_dict` output.

    The revisions are written into ``store=`` (default: a store of
    :func:`trusted_stores` that the data names, else the open store a live export of
    this process came from when the data's log is that session's log as it is now (see
    the module docstring), else a new in-memory store, with :class:`StoreDetachedWarning`
    when the data names a SQLite file or PostgreSQL database).  A store whose session
    already holds exactly these revisions is attached as it is; so is a ``store=`` whose
    session holds them and later ones (a SQLite file the memory lived in, which went on
    since), never a trusted store the data names.  One holding other revisions (another
    number, kind, target or change, the text included), or fewer than the data (or, for
    a trusted store, more), is refused with :class:`InvalidInputError` (a ``ValueError``)
    naming the first that differs.  An empty session is imported into only when the
    caller passed ``store=`` (or into a new in-memory store): in a trusted store the data names,
    data holding revisions never fills an empty session (purged, or never used), and is
    refused with :class:`InvalidInputError`.  Other
    keyword arguments are constructor options (``model``, ``token_counter``, ``params``,
    ``options``, ``session_id``, ``token_limit`` ...), and win over the data's (see the
    module docstring).  Revision times are those of the import.

    The whole log is checked before anything is written (see the module
    docstring): no-op revisions of older exports are skipped, the rest renumbered.

    Raises:
        InvalidTypeError: ``data`` is not a dict, or its ``session_id`` not a str.
        InvalidInputError: ``data`` lacks ``session_id`` or ``token_limit`` (and the
            caller passed none); ``data["options"]`` names an option outside
            :data:`DATA_OPTIONS` (a store, a model, a token counter ...) or a value
            that is not a scalar of the option's type; ``data["store"]`` or
            ``data["live_token"]`` is not what :func:`to_dict` writes; or an entry of
            ``data["revisions"]`` is not a
            revision, or an append there reuses a message id with other text.
            Nothing is created.  Also when ``store=`` (or a trusted store) already
            holds the session with other revisions (the first that differs is named),
            or a trusted store the data names holds the session empty while the data
            holds revisions; nothing is written and a store opened from a path is closed.
        BudgetError: ``token_limit`` is not an ``int >= 0``.
        InvalidRevisionError: a revision of the log does not apply to those before
            it (named in the message); nothing is written.
    """
    caller = dict(kwargs)
    session_id, token_limit = _required(data, caller)
    options = _under_caller(_data_options(data), caller)
    named = named_store(data)
    revisions = _checked_log(session_id, data.get("revisions", []))
    store = options.pop("store", None)
    chosen = store is not None  # the caller's choice; a trusted or live store is the data's
    if store is None and named is not None:
        store = trusted_store(named)
    trusted = not chosen and store is not None  # the data chose it, through trusted_stores
    if store is None:
        live = _live(data, named, session_id, revisions, lambda found: cls(
            token_limit=token_limit, session_id=session_id, store=found, **options
        ))
        if live is not None:
            return live
        if named is not None:
            detached(named)
    memory = cls(token_limit=token_limit, session_id=session_id, store=store or InMemoryStore(), **options)
    try:
        existing = memory.transcript.history()
        if existing or (trusted and revisions):  # from_dict never imports into a store the data chose
            _refuse_other_log(memory.session_id, existing, revisions, later=chosen)
        else:
            _import(memory, revisions)
    except BaseException:
        memory.close()  # a store it opened from a path; a store passed in stays open
        raise
    return memory


def _live(
    data: dict[str, Any],
    named: dict[str, Any] | None,
    session_id: str,
    revisions: list[Revision],
    build: Callable[[Store], GatekeeperMemory],
) -> GatekeeperMemory | None:
    """A memory ``build`` makes on the open store a live export of this process came from
    (:func:`.stored.live_store`), when the data's log is that session's log as it is now
    (a reused workflow ``Context`` serialises the live memory just before rebuilding it);
    else ``None``: a checkpoint saved before the session changed is restored apart, as
    data from elsewhere is.  The head settles most checkpoints in one small read; else the
    whole log is compared with the checked one (``revisions``), and with the data's own
    entries where the store kept no-op rows of an older version, which the check skips."""
    store = live_store(data, named, session_id)
    entries = data.get("revisions", [])  # read and checked by _checked_log already
    if store is None or store.head(session_id) != len(entries):
        return None
    memory = build(store)
    held = memory.transcript.history()
    if _same_log(held, revisions) or (
        len(revisions) != len(entries)
        and _same_log(held, [_parse(entry, position) for position, entry in enumerate(entries, 1)])
    ):
        return memory
    memory.close()  # a store it did not open stays open
    return None


def _import(memory: GatekeeperMemory, revisions: list[Revision]) -> None:
    """Commit the checked ``revisions`` into the memory's empty session, in order."""
    for written, revision in enumerate(revisions):
        try:
            stored = memory.store.commit(memory.session_id, revision, expected_head=revision.number - 1)
        except Exception as error:
            if written:  # checked above: only the store failing or a concurrent writer
                add_note(
                    error,
                    f"from_dict: revisions 1..{written} of session {memory.session_id!r} were imported before "
                    f"this; store.purge({memory.session_id!r}) removes them",
                )
            raise
        if stored.number != revision.number:
            raise InvalidRevisionError(
                f"session {memory.session_id!r}: the store did not write revision {revision.number} of the "
                f"import (its head is {stored.number}); revisions 1..{written} were imported. "
                f"store.purge({memory.session_id!r}) removes them"
            )


def pickled(memory: GatekeeperMemory) -> tuple[Any, tuple[type, dict[str, Any]]]:
    """``memory.__reduce__()``: the session (see the module docstring), never a model, a
    token counter or a password."""
    spec = store_spec(memory.transcript.store)
    data = _exported(memory, log=spec is None)  # a named store's live session is reattached, not replayed
    state = {"memory": data, "store": spec, "params": memory._options.get("params")}  # the params whole
    return _unpickle, (type(memory), state)


def deep_copy(memory: GatekeeperMemory, memo: dict[int, Any] | None = None) -> GatekeeperMemory:
    """A copy of ``memory`` on the same session of the same store (``copy.deepcopy``,
    ``model_copy(deep=True)``): the store is a live handle, not part of the copy, as a
    SQLite or PostgreSQL memory's copies always shared their session.  Both see every
    later write: agent workflows deep-copy their state (``ctx.store.edit_state()``) and
    keep the copy, which must go on writing to the caller's memory.  (LlamaIndex's own
    memories differ: ``ChatMemoryBuffer`` copies are independent and ``Memory`` cannot be
    deep-copied.)  For a copy apart, pickle an in-memory memory, or
    ``from_dict(memory.to_dict(), store=InMemoryStore())``.

    A memory in a SQLite file or PostgreSQL attaches the copy through a connection of its
    own (PostgreSQL's password is kept, in memory), which ``close()`` on the copy closes;
    one in any other store (an ``InMemoryStore``, a store of your own) attaches the copy to
    the same store object, which the copy never closes.  Unlike a pickle (which replays an
    in-memory store's log into a new one, independent), the copy keeps the editing model,
    the token counter and every option.
    """
    store = memory.transcript.store
    spec = store_spec(store, keep_password=True)
    trusted = {
        **memory._options,
        "model": memory._default_model,
        "token_counter": memory._count,
        "tokenizer_fn": memory.tokenizer_fn,
    }
    data = _exported(memory, log=False)
    if spec is not None:
        copied = _rebuild(type(memory), data, spec, trusted)
    else:
        options = _under_caller(_data_options(data), trusted)
        copied = type(memory)(token_limit=data["token_limit"], session_id=data["session_id"], store=store, **options)
    if memo is not None:
        memo[id(memory)] = copied
    return copied


def add_note(error: BaseException, note: str) -> None:
    """``error.add_note(note)`` (PEP 678); Python 3.10 has no ``add_note``, so there the
    note goes on the same ``__notes__`` list (which pytest and the ``exceptiongroup``
    backport show) instead of failing with an ``AttributeError``."""
    if hasattr(error, "add_note"):
        error.add_note(note)
    else:  # Python 3.10
        setattr(error, "__notes__", [*getattr(error, "__notes__", ()), note])

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
:data:`DATA_OPTIONS` from it (scalars: the editing strategy, the deletion limit and
the selection tunables), never a store, a model or a token counter, which would let
the data choose where the memory writes or what code counts its tokens.  The caller
passes those to ``from_dict``.

Pickling (``pickle``, ``multiprocessing``) and ``copy.deepcopy`` keep the session: a memory in a SQLite
file pickles as that file's path and reattaches to the live session; one in
PostgreSQL as its connection string *without the password* (the unpickling side
supplies it through ``PGPASSWORD`` or ``~/.pgpass``); any other store as its full
revision log, replayed into a new in-memory store.  A model and a custom token
counter are never pickled (they may hold API keys or be closures): the unpickled
memory uses the defaults; ``copy.deepcopy``, which stays in the process, keeps them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, get_args

from context_gatekeeper import InMemoryStore, InvalidInputError, InvalidRevisionError, Revision, SelectionParams
from context_gatekeeper.integration import (
    IdEntry, RevisionKind, STATE_CHANGING, check_revision, store_from_spec, store_spec,
)

if TYPE_CHECKING:
    from .memory import GatekeeperMemory

__all__ = ["to_dict", "from_dict", "pickled", "deep_copy", "DATA_OPTIONS", "add_note"]

_SCALAR_OPTIONS = (str, int, float, bool, type(None))
DATA_OPTIONS = frozenset(
    {"strategy", "max_deletion_share", "message_overhead", "on_overflow"}
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


def _refuse_other_log(session_id: str, existing: list[Revision], imported: list[Revision]) -> None:
    """InvalidInputError (a ValueError) naming the first revision where the store's log
    and the imported one differ; nothing when they are the same."""
    for position, (stored, wanted) in enumerate(zip(existing, imported), 1):
        if not _same_revision(stored, wanted):
            what = f"its revision {position} ({stored.kind}) differs from revision {position} ({wanted.kind}) of the data"
            break
    else:
        if len(existing) == len(imported):
            return
        position = min(len(existing), len(imported)) + 1
        what = (
            f"it has {len(existing)} revision(s) and the data {len(imported)}: revision {position} is only in "
            f"{'the store' if len(existing) > len(imported) else 'the data'}"
        )
    raise InvalidInputError(
        f"session {session_id!r} already has other revisions in that store: {what}; {_NOTHING_WRITTEN}. "
        "Pass an empty store (or another session_id), or export this session again with to_dict()"
    )


def _unpickle(cls: type[GatekeeperMemory], state: dict[str, Any]) -> GatekeeperMemory:
    """Rebuild a pickled memory (see the module docstring)."""
    return _rebuild(cls, state["memory"], state.get("store"), {})


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
    options = {**_data_options(memory), **trusted}
    try:
        rebuilt = cls(token_limit=memory["token_limit"], session_id=memory["session_id"], store=store, **options)
    except BaseException:
        store.close()
        raise
    rebuilt._opened_store = store  # close() closes it
    return rebuilt


def to_dict(memory: GatekeeperMemory) -> dict[str, Any]:
    """``memory``'s state and full revision history as JSON-ready data (no SimpleChatStore involved).

    Scalar options are kept, and so are the scalar values a ``params`` object (or an
    ``options=`` record) changes from the defaults; a custom token counter, an embedder
    or an editing model is not: pass it again to :func:`from_dict`.
    """
    options = {k: v for k, v in memory._options.items() if k in DATA_OPTIONS and isinstance(v, _SCALAR_OPTIONS)}
    params = memory._options.get("params")
    if isinstance(params, SelectionParams):  # a params object travels as the scalar values it changes
        default = SelectionParams()
        for field in dataclasses.fields(SelectionParams):
            value = getattr(params, field.name)
            if isinstance(value, _SCALAR_OPTIONS) and value != getattr(default, field.name):
                options.setdefault(field.name, value)
    return {
        "class_name": memory.class_name(),
        "session_id": memory.session_id,
        "token_limit": memory.token_limit,
        "options": options,
        "revisions": [r.to_dict() for r in memory.transcript.history()],
    }


def from_dict(cls: type[GatekeeperMemory], data: dict[str, Any], **kwargs: Any) -> GatekeeperMemory:
    """A memory of class ``cls`` rebuilt from :func:`to_dict` output.

    The revisions are written into ``store=`` (default: a new in-memory store).  A
    store whose session already holds exactly these revisions (a SQLite file the
    memory lived in) is attached as it is; one holding other revisions (another
    number, kind, target or change, the text included) is refused with
    :class:`InvalidInputError` (a ``ValueError``) naming the first that differs.  Other
    keyword arguments are constructor options (``model``, ``token_counter``, ``params``,
    ...).  Revision times are those of the import.

    The whole log is checked before anything is written (see the module
    docstring): no-op revisions of older exports are skipped, the rest renumbered.

    Raises:
        InvalidInputError: ``data["options"]`` names an option outside
            :data:`DATA_OPTIONS` (a store, a model, a token counter ...) or a value
            that is not a scalar; or an entry of ``data["revisions"]`` is not a
            revision, or an append there reuses a message id with other text.
            Nothing is created.  Also when ``store=`` already holds the session with
            other revisions (the first that differs is named); nothing is written.
        InvalidRevisionError: a revision of the log does not apply to those before
            it (named in the message); nothing is written.
    """
    options = {**_data_options(data), **kwargs}
    revisions = _checked_log(str(data.get("session_id")), data.get("revisions", []))
    store = options.pop("store", None) or InMemoryStore()
    memory = cls(token_limit=data["token_limit"], session_id=data["session_id"], store=store, **options)
    existing = memory.transcript.history()
    if existing:
        _refuse_other_log(memory.session_id, existing, revisions)
        return memory
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
    return memory


def pickled(memory: GatekeeperMemory) -> tuple[Any, tuple[type, dict[str, Any]]]:
    """``memory.__reduce__()``: the session (see the module docstring), never a model, a
    token counter or a password."""
    spec = store_spec(memory.transcript.store)
    data = to_dict(memory)
    if spec is not None:
        data["revisions"] = []  # the live session is reattached, not replayed
    return _unpickle, (type(memory), {"memory": data, "store": spec})


def deep_copy(memory: GatekeeperMemory, memo: dict[int, Any] | None = None) -> GatekeeperMemory:
    """An independent copy of ``memory``, as ``pickle`` makes one (``copy.deepcopy``,
    ``model_copy(deep=True)``).

    A memory in a SQLite file or PostgreSQL attaches the copy to the same session
    of the same store through a connection of its own (nothing copied, nothing
    lost: both see every later write; PostgreSQL's password is kept, in memory);
    one in any other store gets its whole revision log replayed into a new
    in-memory store, so the copy's ``history``, ``undo`` and ``redo`` work as the
    original's and later writes to either leave the other alone.  Unlike a
    pickle, the copy keeps the editing model, the token counter and every option.
    """
    spec = store_spec(memory.transcript.store, keep_password=True)
    trusted = {
        **memory._options,
        "model": memory._default_model,
        "token_counter": memory._count,
        "tokenizer_fn": memory.tokenizer_fn,
    }
    copied = _rebuild(type(memory), to_dict(memory), spec, trusted)
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

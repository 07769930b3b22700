"""Transcript: a conversation whose history can be revised, with every revision kept.

*Record* (what was said) and *state* (what is currently true) are separate: the
state is the result of the revision log; the record is every message ever appended,
as originally written.  Every change, whatever produced it, is a list of changes on
message ids (:mod:`operations`), which gives one undo rule that never loses later
turns (``docs/architecture.md#version-rules``):

* ``undo()`` reverts the most recent state-changing revision (edit, apply, set,
  clear, revert) not yet undone, by applying its inverse, and keeps every message
  appended after it; appends are undone only by deleting them explicitly.
* ``redo()`` re-applies what the last undo reverted, if no state-changing revision
  came after it; otherwise :class:`HistoryError`.
* ``revert(n)`` makes the state equal to revision ``n``'s, as a new revision whose
  ``removed`` lists what it drops.

Both are recorded revisions.  Reads check the store's head first, so a transcript
never serves text another process has superseded.

Integrity (issue #11):

* the store checks, inside its write transaction, that each revision applies to the
  head it follows (:mod:`.stores.integrity`); one that does not raises
  :class:`InvalidRevisionError` and nothing is written.  An append is checked the same
  way against the log this object has just read, before it goes to the store, so a
  store's id index edited by hand (it is not chained) never makes a retried message
  land twice;
* an edit rebased over turns appended since its base must still alternate and keep tool
  calls with their results (:mod:`.rebase`), else :class:`StaleHeadError`;
* a call that changes nothing (``apply([])``, ``set()`` of the current state, a
  replace with the same text, an edit with no operations, a retried append) records
  nothing and returns a revision numbered like the head, with no changes; undo and
  redo skip such rows written by older versions, and the undo and redo rows that
  acted on them (:func:`~.revisions.undo_stacks`);
* a log that fails to load raises :class:`CorruptLogError` naming the session and
  the first bad revision; ``store.truncate(session_id, error.revision - 1)`` sets
  aside that revision and the ones after it, and the session opens again;
* returned messages are independent copies, each with a ``metadata`` dict of its own
  (empty or not): changing it or ``parts`` is allowed and never changes the history.
"""

from __future__ import annotations

import asyncio
import os
import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import fields, replace
from typing import Any

from ..editing.options import EditOptions, Strategy
from ..editing.checks import tool_violations
from ..editing.compute import acompute_edit, check_instruction, compute_edit
from ..errors import (
    HistoryError, InvalidInputError, InvalidRevisionError, InvalidTypeError, ModelUnavailableError, StaleHeadError,
)
from ..records.messages import Message, detached, new_message_id, storable
from ..records.operations import (
    AT_END,
    Applied,
    Put,
    Remove,
    Request,
    State,
    after_earlier_insertions,
    anchored,
    changes_between,
    invert,
    is_noop,
    require_named_once,
    require_requests,
    resolve_request,
)
from ..records.revisions import (
    Diff, Proposal, Revision, RevisionKind, detached_change, diff_states, rebase_conflicts, storable_revision, undo_stacks,
)
from ..stores.base import Store, takes_keyword
from ..stores.integrity import IdEntry, check_revision, checked_revision, digest, entry
from ..stores.memory import InMemoryStore
from ..stores.replica import BULK, Replica, collector_paused
from ..validation import require_items, require_text
from .rebase import rebase_problem

__all__ = ["Transcript"]


_RENEW_ATTEMPTS = 5
"""How often an append renewing its ids on a store without ``renew_taken_ids`` is tried
again after another writer took one of them meanwhile."""


_LIBPQ_KEYWORDS = frozenset(
    "host hostaddr port dbname user password passfile require_auth channel_binding connect_timeout client_encoding "
    "options application_name fallback_application_name keepalives keepalives_idle keepalives_interval "
    "keepalives_count tcp_user_timeout replication gssencmode sslmode sslnegotiation sslcompression sslcert sslkey "
    "sslpassword sslcertmode sslrootcert sslcrl sslcrldir sslsni sslkeylogfile requirepeer ssl_min_protocol_version "
    "ssl_max_protocol_version min_protocol_version max_protocol_version krbsrvname gsslib gssdelegation service "
    "target_session_attrs load_balance_hosts oauth_issuer oauth_client_id oauth_client_secret oauth_scope "
    "scram_client_key scram_server_key".split()
)
"""libpq's connection keywords (``PQconndefaults`` of libpq 18): a string starting
``keyword=`` is a connection string, not a file name (a newer libpq's own list is read
too when psycopg is installed)."""
_FIRST_KEY = re.compile(r"\s*([A-Za-z_]+)\s*=")
_SECRET_PAIR = re.compile(r"(?:\A|\s)(?:\w*password|\w*secret|scram_\w*_key)\s*=", re.IGNORECASE)
_DRIVER_URL = re.compile(r"\s*postgres(?:ql)?\+\w+://", re.IGNORECASE)


def _libpq_keywords() -> frozenset[str]:
    """:data:`_LIBPQ_KEYWORDS`, with the installed libpq's own where psycopg can say."""
    try:
        from psycopg import pq

        return _LIBPQ_KEYWORDS | {d.keyword.decode() for d in pq.Conninfo.get_defaults()}
    except Exception:  # noqa: BLE001 - no psycopg (the postgres extra) or no libpq: the list above
        return _LIBPQ_KEYWORDS


def names_postgres(store: str) -> bool:
    """Whether ``store`` names a PostgreSQL database: a ``postgresql://`` (or ``postgres://``)
    URL, or libpq ``key=value`` pairs (the first a libpq keyword, or any a secret: such a
    string never becomes a SQLite file named with the password) -- unless it is a path into
    a folder that exists (``user=alice/chat.db`` under a folder named ``user=alice``).

    Raises:
        InvalidInputError: a SQLAlchemy-style ``postgresql+driver://`` URL."""
    text = store.lstrip()
    if _DRIVER_URL.match(text):
        raise InvalidInputError(
            "store= takes a libpq URL (postgresql://...), not a SQLAlchemy one with a driver (postgresql+driver://); "
            "drop the '+driver' part"
        )
    if text.startswith(("postgresql://", "postgres://")):
        return True
    folder = os.path.dirname(store)
    if folder and os.path.isdir(folder):
        return False
    first = _FIRST_KEY.match(text)
    return (first is not None and first.group(1).lower() in _libpq_keywords()) or bool(_SECRET_PAIR.search(text))


def _open_store(store: Store | str | os.PathLike[str] | None) -> Store:
    if store is None:
        return InMemoryStore()
    if isinstance(store, Store):
        return store
    if isinstance(store, str) and not store.strip():  # an unset environment variable's default, say
        raise InvalidInputError(
            f"store= got an empty string ({store!r}), which would keep the conversation in a temporary database "
            "lost on close; pass a SQLite file path (such as 'chat.db'), a postgresql:// URL, a Store, or None to "
            "keep the transcript in memory"
        )
    if isinstance(store, str) and names_postgres(store):
        from ..stores.postgres import PostgresStore  # the ``postgres`` extra, imported only now

        return PostgresStore(store.strip())
    if isinstance(store, (str, os.PathLike)):
        from ..stores.sqlite import SQLiteStore

        return SQLiteStore(store)
    raise InvalidTypeError(
        f"store must be a Store, a SQLite file path, a postgresql:// URL (or libpq key=value string) or None, "
        f"got {type(store).__name__}; "
        "pass one of those (None keeps the transcript in memory)"
    )


_MESSAGE_KEYS = tuple(f.name for f in fields(Message))
"""The keys a message dict may have: :class:`Message`'s fields (:meth:`Message.to_dict` writes them)."""
_MESSAGES_HINT = (
    "pass a list of Message(...) objects or dicts such as {'role': 'user', 'content': '...'} "
    "(messages=[...] for one message too), or () for none"
)


def _require_messages(messages: Any) -> list[Message | Mapping[str, Any]]:
    """``messages`` as a list, if it is an iterable of messages or message dicts; else
    :class:`InvalidTypeError` (``None``, one message or one dict, a string) before anything
    is read or written."""
    return require_items(messages, "messages", (Message, Mapping), _MESSAGES_HINT)


def _refuse_unknown_keys(data: Mapping[str, Any]) -> None:
    """Refuse a message dict with keys a :class:`Message` does not have (``tool_call_id``,
    ``tool_calls`` and ``name`` in the OpenAI / LangChain shape, a typo such as ``metdata``):
    dropping them would lose what they carry (a tool result its call) without a word."""
    unknown = [key for key in data if key not in _MESSAGE_KEYS]
    if unknown:
        raise InvalidInputError(
            f"a message dict has key(s) {', '.join(sorted(map(repr, unknown)))} that a Message does not have "
            f"(accepted: {', '.join(_MESSAGE_KEYS)}); nothing was written. Put tool calls, tool_call_id, "
            "name and any other data in metadata, e.g. {'role': 'tool', 'content': '42', "
            "'metadata': {'tool_call_id': 'call_1'}}"
        )


def _as_message(item: Message | Mapping[str, Any]) -> Message:
    """A message the transcript owns: a copy of ``item``, or one built from its dict (whose
    keys must all be :class:`Message` fields)."""
    if isinstance(item, Message):
        return detached(item)  # the caller's dicts stay theirs
    if isinstance(item, Mapping):
        _refuse_unknown_keys(item)
        data = dict(item)
        data.setdefault("id", new_message_id())
        try:
            return detached(Message.from_dict(data))
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidInputError(
                f"not a usable message ({type(exc).__name__}: {exc}); give role, content and optionally id, "
                "parts (a list), metadata (a dict), origin"
            ) from exc
    raise InvalidTypeError(
        f"expected a Message or a dict with role and content, got {type(item).__name__}; "
        "pass Message(...) or {'role': ..., 'content': ...}"
    )


def _refuse_split_tool_calls(before: Sequence[Message], after: Sequence[Message]) -> None:
    """Refuse an apply that leaves ``after`` with a tool call separated from its result that
    ``before`` did not have (:func:`~context_gatekeeper.editing.checks.tool_violations`, the
    tool-pair half of the check an edit runs).

    Raises:
        InvalidInputError: naming the call and the message."""
    known = set(tool_violations(before))
    tools = [problem for problem in tool_violations(after) if problem not in known]
    if not tools:
        return
    kind, message_id, call_id = tools[0]
    if kind == "orphan":
        problem = (f"the result of tool call {call_id!r} (message {message_id!r}) would lose the assistant "
                   "message that made the call")
    else:
        problem = f"tool call {call_id!r} of message {message_id!r} would be separated from its result"
    raise InvalidInputError(
        f"{problem}; nothing was changed. Delete a tool call together with its results, and insert messages "
        "before the call or after its last result"
    )


def _put_id(change: Applied) -> str | None:
    """The id of the message an append's ``change`` puts (None for another change)."""
    return change.message.id if isinstance(change, Put) else None


def _leading(flags: Sequence[bool]) -> int:
    """How many of ``flags`` are true before the first false one."""
    return flags.index(False) if False in flags else len(flags)


def _flagged_ids(changes: Sequence[Applied], flags: Sequence[bool]) -> set[str | None]:
    """The ids of the messages ``changes`` put where ``flags`` is true."""
    return {_put_id(c) for c, flag in zip(changes, flags) if flag}


def _indexes_of(changes: Sequence[Applied], ids: set[str | None], start: int = 0) -> set[int]:
    """The indexes, from ``start`` on, of the messages ``changes`` put under one of ``ids``."""
    return {i for i in range(start, len(changes)) if _put_id(changes[i]) in ids}


def _rechained(changes: Sequence[Applied], start: int, first_after: Any, renew: set[int]) -> list[Applied]:
    """The append ``changes`` from index ``start`` on, the first put after ``first_after``, the
    messages at the indexes ``renew`` under fresh ids, and each put that followed the message
    before it still following it, under its new id (a tool call's results stay with it)."""
    out: list[Applied] = []
    for index in range(start, len(changes)):
        change, previous = changes[index], changes[index - 1] if index else None
        if not isinstance(change, Put):
            out.append(change)
            continue
        after = change.after
        if index == start:
            after = first_after
        elif isinstance(previous, Put) and after == previous.message.id and out and isinstance(out[-1], Put):
            after = out[-1].message.id
        message = replace(change.message, id=new_message_id()) if index in renew else change.message
        out.append(Put(message, after))
    return out


def _same_content(held: Message, given: Message) -> bool:
    """Whether ``given`` says what ``held`` says: the same role, text, parts and metadata."""
    return (held.role, held.content, held.parts, held.metadata) == (given.role, given.content, given.parts, given.metadata)


def _set_version(held: Message | None, given: Message) -> Message:
    """The version :meth:`Transcript.set` stores for ``given``, whose id the state holds as
    ``held`` (``None``: a new id), with provenance computed here, never taken from ``given``:
    a new message as originally written; ``held`` itself when ``given`` says the same (as a
    store keeps it, :func:`storable`); else ``held`` revised as an edit revises it."""
    if held is None:
        if given.origin == "original" and not given.derived_from and not given.revision:
            return given
        return replace(given, origin="original", derived_from=(), revision=0)
    if _same_content(held, given):
        return held
    given = storable(given)  # compared as stored: a tuple for a list, surrogates joined
    if _same_content(held, given):
        return held
    return replace(held.revised(given.content, 0), role=given.role, parts=given.parts, metadata=given.metadata)


class Transcript:
    """A mutable, versioned conversation transcript.

    Every method that reads or writes the store has an async twin named ``a`` + its name,
    with the same parameters (``aget_messages`` for :attr:`messages`): the store work runs
    in a worker thread (``asyncio.to_thread``) and an edit awaits the model's own async
    call, so none blocks the event loop.

    >>> from context_gatekeeper.testing import ScriptedModel
    >>> t = Transcript("demo")
    >>> _ = t.append(user="What was Ireland's GDP in 2021?", assistant="About 500 billion USD.")
    >>> [m.content for m in t.messages]
    ["What was Ireland's GDP in 2021?", 'About 500 billion USD.']

    Args:
        session_id: which conversation of the store this is.
        store: an :class:`~context_gatekeeper.stores.Store`, a SQLite file path, a
            ``postgresql://`` URL or libpq ``key=value`` connection string (``"host=... dbname=..."``),
            or ``None`` for an in-memory store.  A store opened
            here from a path or URL is closed by :meth:`close`.
        model: the default editing model (see :mod:`models`); ``edit(model=...)`` overrides it.
        strategy: the default edit strategy: ``"patch"`` (the model returns operations on
            ids; untouched messages stay byte-for-byte identical) or ``"rewrite"`` (it
            returns the whole revised transcript, as the research prototype did).
        max_deletion_share: an edit deleting more than this share of the editable tokens
            is refused unless ``allow_large_deletion=True``.
        token_counter: counts tokens for the deletion guard (default: tiktoken, offline).
        options: the edit settings as one :class:`EditOptions` (``edit_options`` holds the
            result); ``strategy``, ``max_deletion_share`` and ``token_counter`` override
            its fields when given.  A bad value raises :class:`InvalidInputError`.
    """

    def __init__(
        self,
        session_id: str = "default",
        *,
        store: Store | str | os.PathLike[str] | None = None,
        model: Any = None,
        strategy: Strategy | None = None,
        max_deletion_share: float | None = None,
        token_counter: Any = None,
        options: EditOptions | None = None,
    ) -> None:
        if not isinstance(session_id, str):
            raise InvalidTypeError(
                f"session_id must be a str naming the conversation, got {type(session_id).__name__} {session_id!r}; "
                "pass a non-empty str, e.g. Transcript('user-42'), or leave it out for 'default'"
            )
        if not session_id:
            raise InvalidInputError("session_id must be a non-empty str, got ''; pass a name such as 'user-42'")
        self.edit_options = EditOptions.of(
            options, strategy=strategy, max_deletion_share=max_deletion_share, token_counter=token_counter
        )
        self.session_id = session_id
        self.store = _open_store(store)
        self._owns_store = self.store is not store
        self.model = model
        self._lock = threading.RLock()
        self._replica = Replica(self.store, session_id)
        self._open_user: str | None = None  # the last user message this object appended without an answer
        self._replica.refresh()

    @property
    def strategy(self) -> Strategy:
        """The default edit strategy (``edit_options.strategy``)."""
        return self.edit_options.strategy

    @property
    def max_deletion_share(self) -> float:
        """The deletion guard's limit (``edit_options.max_deletion_share``)."""
        return self.edit_options.max_deletion_share

    @property
    def token_counter(self) -> Any:
        """The deletion guard's token counter as given (``edit_options.token_counter``)."""
        return self.edit_options.token_counter

    # -- reading ------------------------------------------------------------------------
    @property
    def messages(self) -> tuple[Message, ...]:
        """The current state, each message with its provenance."""
        with self._lock:
            self._replica.refresh()
            with collector_paused(self._large()):  # one copy per message, all kept
                return tuple(map(detached, self._replica.state.to_list()))

    def _snapshot(self) -> tuple[tuple[int, float], tuple[Message, ...]]:
        """``(version, state)`` read together, the state's messages as the transcript holds
        them, not copied: for a follower inside the library (:class:`TranscriptGate`) that
        keeps every message but hands out few, and copies (:func:`detached`) only those.
        Nothing may change the messages' ``metadata`` or ``parts``: they are the history's."""
        with self._lock:
            self._replica.refresh()
            log = self._replica.log
            return (len(log), log[-1].time if log else 0.0), tuple(self._replica.state.to_list())

    async def aget_messages(self) -> tuple[Message, ...]:
        """Async :attr:`messages`."""
        return await asyncio.to_thread(lambda: self.messages)

    @property
    def version(self) -> tuple[int, float]:
        """``(head, time of the head revision)``: changes whenever the state may have changed,
        including a purge followed by as many new revisions (cheap; for caches)."""
        with self._lock:
            self._replica.refresh()
            return len(self._replica.log), (self._replica.log[-1].time if self._replica.log else 0.0)

    def _appended_since(
        self, version: tuple[int, float], last_id: str | None
    ) -> tuple[tuple[int, float], list[Message]] | None:
        """What a follower that read the state at ``version`` (a :attr:`version` it got), whose
        last message then was ``last_id``, lacks, when that is only messages added at the end.

        Returns ``(version now, the messages added since, in state order)`` (no messages when
        nothing changed), or ``None`` when anything else happened since (an edit, a removal,
        an insertion before the end, a purge): the follower then reads :attr:`messages`.
        Costs time proportional to the revisions since ``version``, not to the transcript
        (what :class:`~context_gatekeeper.TranscriptGate` catches up with)."""
        head, stamp = version
        with self._lock:
            self._replica.refresh()
            log, state = self._replica.log, self._replica.state
            if head > len(log) or (log[head - 1].time != stamp if head else stamp != 0.0):
                return None  # a shorter or rewritten log: not the history the follower read
            added: set[str] = set()
            for revision in log[head:]:
                for change in revision.changes:
                    if not isinstance(change, Put):
                        return None
                    added.add(change.message.id)
            ids: list[str] = []
            node = state.last_id
            for _ in range(len(added)):  # the added messages must be the last ones, right after last_id
                if node is None or node not in added:
                    return None
                ids.append(node)
                node = state.previous_id(node)
            if node != last_id:
                return None
            ids.reverse()
            now = (len(log), log[-1].time if log else 0.0)
            return now, [detached(m) for m in map(state.get, ids) if m is not None]

    def close(self) -> None:
        """Close the store if this transcript opened it (from a path or URL).  An
        :class:`InMemoryStore` it made (no store given) is left open: it holds nothing to
        release, and copies of an adapter object built on this transcript may write to it
        (a deep-copied LlamaIndex memory in an agent workflow's state outlives the original)."""
        if self._owns_store and not isinstance(self.store, InMemoryStore):
            self.store.close()

    def __enter__(self) -> "Transcript":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def head(self) -> int:
        """The latest revision number (0 for an empty transcript)."""
        with self._lock:
            self._replica.refresh()
            return len(self._replica.log)

    def history(self) -> list[Revision]:
        """Every revision, oldest first."""
        with self._lock:
            self._replica.refresh()
            return [r.detached() for r in self._replica.log]

    async def ahistory(self) -> list[Revision]:
        """Async :meth:`history`."""
        return await asyncio.to_thread(self.history)

    def record(self) -> list[Message]:
        """Every message ever appended (or first brought in by ``set``), as originally
        written, once each, in order; edits never touch it."""
        with self._lock:
            self._replica.refresh()
            first: dict[str, tuple[bool, Message]] = {}
            for revision in self._replica.log:
                for message in revision.added:
                    first.setdefault(message.id, (revision.kind in ("append", "set"), message))
            return [detached(m) for appended, m in first.values() if appended]

    async def arecord(self) -> list[Message]:
        """Async :meth:`record`."""
        return await asyncio.to_thread(self.record)

    def snapshot(self, revision: int) -> tuple[Message, ...]:
        """The state as it was at ``revision`` (0 is the empty transcript)."""
        with self._lock:
            self._replica.refresh()
            return tuple(map(detached, self._replica.state_at(self._check_revision(revision))))

    async def asnapshot(self, revision: int) -> tuple[Message, ...]:
        """Async :meth:`snapshot`."""
        return await asyncio.to_thread(self.snapshot, revision)

    def diff(self, a: int, b: int | None = None) -> Diff:
        """How the state at revision ``b`` (default: the head) differs from revision ``a``."""
        with self._lock:
            self._replica.refresh()
            b = len(self._replica.log) if b is None else b
            a, b = self._check_revision(a), self._check_revision(b)
            with collector_paused(self._large()):  # it builds an entry per message, all kept
                old, new = self._replica.state_at(a), self._replica.state_at(b)
                # one copy per stored message: unchanged ones are in both states (and a Message is never falsy)
                copies = {id(m): detached(m) for m in (old if len(old) <= len(new) else new)}
                get = copies.get
                before = tuple([get(id(m)) or detached(m) for m in old])
                after = tuple([get(id(m)) or detached(m) for m in new])
                return diff_states(a, before, b, after)

    async def adiff(self, a: int, b: int | None = None) -> Diff:
        """Async :meth:`diff`."""
        return await asyncio.to_thread(self.diff, a, b)

    def __len__(self) -> int:
        return len(self.messages)

    # -- appending ----------------------------------------------------------------------
    def append(
        self,
        user: str | None = None,
        assistant: str | None = None,
        *,
        messages: Iterable[Message | Mapping[str, Any]] = (),
        renew_taken_ids: bool = False,
    ) -> Revision:
        """Append a turn as one revision: a user message, its answer, or both.

        Appends are turn-atomic and never conflict with other writers: a user message
        with its answer lands together; a user message alone stays open, and this
        object's next answer-only append attaches right after it, whatever others
        appended meanwhile.  ``messages`` appends ready-made messages (or dicts with
        ``role`` and ``content``) after the user/assistant pair: a list, also for one
        message.  A dict may hold only :class:`Message` fields (``id``, ``parts``,
        ``metadata``, ...): any other key (``tool_call_id``, ``tool_calls`` or ``name`` as
        OpenAI and LangChain dicts have them; a typo) is refused with
        :class:`InvalidInputError` and nothing is written; tool-call data goes in
        ``metadata``.

        Ids are never reused.  A message whose id the session holds now, with the role
        and text it was first appended with (a *held* message; the same id given again later
        in this append is not), is a retried request: it is skipped (an idempotent no-op) and
        the messages after it still go where it would have gone.  Any other taken id (held
        with other text, of a message since removed, or given twice in this append) is refused
        (``InvalidInputError``, nothing written), or, with ``renew_taken_ids=True``, given a
        fresh id.

        With ``renew_taken_ids=True`` every message given is stored except a retry, and a held
        message is a retry only where the append repeats what its first write stored.
        Elsewhere it is an earlier turn's message given again (an LLM cache answers a question
        asked again with the earlier answer, id and all): it is stored under a fresh id (and so
        is its id given again later in the append) where it stands in the append, with the
        messages that followed it (a tool call's results) after it:

        * held messages that lead an append at the end are retries;
        * a held message behind a new one is a retry only when the append, or its start
          through it, repeats (by role and text) the messages that end the state: that start
          is skipped and the rest goes after it;
        * held messages that lead an answer to this object's open question are retries when
          they are the messages right after the question (by id), or when the answer, or its
          start through them, repeats those messages by role and text (their first write
          renewed them): that start is skipped and the rest follows it.  Otherwise they answer
          the question, renewed, right after it.

        This object takes such a decision against the log it has just read and commits it at
        that head: when a revision lands first that is no append, or that puts one of these
        messages or something anchored after one of them or after the question, the store
        refuses the write and this object decides again on the new log (after 5 tries,
        :class:`StaleHeadError`, nothing written).  Another writer's message appended at the
        end of the log is no conflict, even when the end was the open question: its answer
        and this one then both follow the question (as for any answer written meanwhile).  Without ``renew_taken_ids`` a held message
        is a retry wherever it is stored (what is new in an answer still goes right after the
        open question).  The store checks what is left again inside its write transaction, so
        concurrent writers retrying one request (its messages under the same ids) add it once.

        When every message was skipped, nothing is recorded and the returned revision is
        numbered like the head, with no changes.  An answer whose open question was
        deleted meanwhile (by any writer, this object included) is refused
        (:class:`InvalidRevisionError`, naming what to append instead); so is one whose
        question was answered meanwhile (an edit, apply, undo, redo, revert or another writer
        put an assistant or tool message right after it: the answer would be a second one in
        a row; the answer's own first copy, a retry after a lost reply or one another writer
        delivered first, is skipped as above, not refused).  The question is then forgotten,
        so this object's later appends go at the end as usual.
        """
        new: list[Message] = []
        if user is not None:
            new.append(Message(new_message_id(), "user", require_text(user, "user")))
        if assistant is not None:
            new.append(Message(new_message_id(), "assistant", require_text(assistant, "assistant", allow_empty=True)))
        new.extend(_as_message(m) for m in _require_messages(messages))
        if not new:
            raise InvalidInputError("append needs user=, assistant= or messages=")
        with self._lock:
            for _ in range(_RENEW_ATTEMPTS):
                self._replica.refresh()
                head = len(self._replica.log)
                answers = new[0].role != "user" and self._open_user is not None
                changes, decided = self._append_changes(new, answers, renew_taken_ids)
                try:
                    revision = self._commit(
                        "append", changes, expected_head=head if decided else None, renew_taken_ids=renew_taken_ids
                    )
                except StaleHeadError:
                    if not decided:
                        raise
                    continue  # a write touching this append's messages landed first: decide again on its log
                except InvalidRevisionError:
                    if answers and self._open_user is not None:
                        self._replica.refresh()
                        if self._open_user not in self._replica.state:  # deleted between our read and the write
                            self._orphaned_answer(self._open_user)
                    raise
                if revision.changes:
                    stored = revision.added
                    last_user = next((m.id for m in reversed(stored) if m.role == "user"), None)
                    self._open_user = last_user if stored[-1].role == "user" else None
                elif answers and self._open_user is not None and self._answer_to(self._open_user) is not None:
                    self._open_user = None  # a retried answer: its first write landed, and answered the question
                return revision
        raise StaleHeadError(
            f"session {self.session_id!r}: other writers kept appending messages of this append while it was "
            f"told which of them are retries ({_RENEW_ATTEMPTS} tries); nothing was written. Append again"
        )

    async def aappend(
        self,
        user: str | None = None,
        assistant: str | None = None,
        *,
        messages: Iterable[Message | Mapping[str, Any]] = (),
        renew_taken_ids: bool = False,
    ) -> Revision:
        """Async :meth:`append`."""
        return await asyncio.to_thread(
            self.append, user, assistant, messages=_require_messages(messages), renew_taken_ids=renew_taken_ids
        )

    def _orphaned_answer(self, question: str) -> None:
        """Refuse an answer whose open question ``question`` is no longer in the state, and
        forget that question, so this object's appends work again (caller holds the lock)."""
        self._open_user = None
        gone = next(
            (r for r in reversed(self._replica.log) if any(m.id == question for m in r.removed)), None
        )
        by = f" by revision {gone.number} ({gone.kind})" if gone is not None else ""
        raise InvalidRevisionError(
            f"session {self.session_id!r}: the open question {question!r} this answer follows was deleted "
            f"meanwhile{by}, so the answer was not appended: an answer never loses its question. "
            "Append the answer with a question of its own, append(user=..., assistant=...), or append "
            "the user message first with append(user=...)"
        )

    def _after(self, question: str, count: int) -> list[Message]:
        """Up to ``count`` messages right after ``question`` in the state (caller holds the
        lock; ``question`` is in the state).  Walks the state only when the question is not
        its last message (the usual case needs no walk)."""
        state = self._replica.state
        if state.last_id == question:
            return []
        messages = state.to_list()
        index = next(i for i in range(len(messages) - 1, -1, -1) if messages[i].id == question)
        return messages[index + 1 : index + 1 + count]

    def _answer_to(self, question: str) -> Message | None:
        """The assistant or tool message right after ``question`` in the state, if any: what
        answers it now (caller holds the lock; ``question`` is in the state)."""
        following = self._after(question, 1)
        return following[0] if following and following[0].role in ("assistant", "tool") else None

    def _answer_chain(self, question: str, ids: Sequence[str]) -> bool:
        """Whether the messages ``ids`` are, in this order, the ones right after ``question`` in
        the state: the stored copy of an answer to it (caller holds the lock; ``question`` is
        in the state)."""
        return bool(ids) and [m.id for m in self._after(question, len(ids))] == list(ids)

    def _append_changes(
        self, new: Sequence[Message], answers: bool, renew_taken_ids: bool
    ) -> tuple[list[Applied], bool]:
        """The changes of an append of ``new`` as they may be written, and whether they were
        decided from the log as read (caller holds the lock and has just refreshed): held
        messages told apart as retries or an earlier turn's messages given again (renewed, see
        :meth:`append`).  Such a decision is committed at the head it was taken on, and taken
        again when a write touching these messages landed first.  ``answers``: the append
        answers this object's open question.

        Raises:
            InvalidRevisionError: the open question was deleted or answered meanwhile.
            InvalidInputError: a taken id, without ``renew_taken_ids``."""
        anchor: Any = AT_END
        if answers:
            anchor = self._open_user
            if anchor not in self._replica.state:
                self._orphaned_answer(anchor)
        changes: list[Applied] = []
        for message in new:
            changes.append(Put(message, anchor))
            anchor = message.id
        if not renew_taken_ids:
            if answers and self._open_user is not None:
                changes = self._placed_answer(self._open_user, changes, False)
            return changes, False  # held messages are retries wherever they are: the store's own check decides
        decided = self._repeated_turns(changes)
        if answers and self._open_user is not None and decided:
            decided = self._placed_answer(self._open_user, decided, True)
        return decided, decided != changes

    def _placed_answer(self, question: str, changes: list[Applied], renew_taken_ids: bool) -> list[Applied]:
        """The answer-only append ``changes`` to the open question ``question`` as it may be
        written (caller holds the lock), or refused when the question was answered meanwhile:
        an edit, an apply, an undo, a redo, a revert or another writer put an assistant or
        tool message right after it, so the answer would make a second one in a row.  The
        question is then forgotten, so this object's appends work again.  Another writer's
        whole turn after the question (a user message first) is no answer: the answer still
        goes right after its question.

        A retried request is no second answer.  The held messages it starts with
        (:meth:`_retry_flags`) are this answer's first write when their stored copies are the
        chain right after the question (a retry after a reply that was lost, or one another
        writer delivered first): they are dropped, and what is new follows that stored copy.
        Held messages stored anywhere else (an earlier answer given again) are no answer to
        this question.  Without ``renew_taken_ids`` they are still retries, dropped, and what
        is new goes right after the question.  With it, they are this answer's first write only
        when the answer, or its start through them, repeats by role and text the messages right
        after the question (its first write, which renewed them): that start is dropped and the
        rest follows it; otherwise they get fresh ids (and so does their id given again later in
        the answer) and the answer goes right after the question, whatever followed a held
        message (a tool call's results) still following it.

        Raises:
            InvalidRevisionError: the question was answered by another message.
            InvalidInputError: a taken id, without ``renew_taken_ids`` (as the append would)."""
        used = self._replica.used_ids
        if self._replica.state.last_id == question and not any(
            isinstance(c, Put) and c.message.id in used for c in changes
        ):
            return changes  # the usual case: all new, right after an unanswered question
        is_retry = self._retry_flags(changes, renew_taken_ids)
        lead = _leading(is_retry)
        skipped = [c.message.id for c in changes[:lead] if isinstance(c, Put)]
        if self._answer_chain(question, skipped):
            return changes  # this answer's first write landed: skipped, and what is new follows it
        held = _flagged_ids(changes, is_retry)
        renewing = renew_taken_ids and lead > 0
        if renewing:
            start = self._repeated_start(changes, lead, question)
            if start:  # its first write, held messages renewed: what is new follows that stored copy
                copy = self._after(question, start)[-1].id
                return _rechained(changes, start, copy, _indexes_of(changes, held, start))
        following = self._answer_to(question)
        if following is None:
            if renewing:  # an earlier turn's messages given again: they answer the question, renewed
                return _rechained(changes, 0, question, _indexes_of(changes, held))
            if 0 < lead < len(changes):  # retries stored elsewhere: what is new still answers the question
                first = changes[lead]
                if isinstance(first, Put):
                    changes = [*changes[:lead], Put(first.message, question), *changes[lead + 1 :]]
            return changes
        self._open_user = None
        put = next((r for r in reversed(self._replica.log)
                    if any(isinstance(c, Put) and c.message.id == following.id for c in r.changes)), None)
        by = f" by revision {put.number} ({put.kind})" if put is not None else ""
        raise InvalidRevisionError(
            f"session {self.session_id!r}: the open question {question!r} this answer follows was answered "
            f"meanwhile{by} ({'a tool result' if following.role == 'tool' else 'an assistant message'} follows "
            "it now), so the answer was not appended: "
            "it would be a second answer in a row. Append it with a question of its own, "
            "append(user=..., assistant=...), or change the answer the question has now with "
            "apply([Replace(message_id, text)])"
        )

    def _retry_flags(self, changes: Sequence[Applied], renew_taken_ids: bool) -> list[bool]:
        """Per message of the append ``changes``: whether it is held, as :meth:`_append_as_read`
        will find it (the session holds its id now with the role and text it was first
        appended with), and its id not given earlier in this append (a second message under
        one id is none: the store renews it); caller holds the lock.

        Raises:
            InvalidInputError: a taken id, without ``renew_taken_ids`` (as the append would).
            InvalidRevisionError: an anchor the append may not follow (as the append would)."""
        draft = storable_revision(Revision(number=0, parent=0, kind="append", changes=tuple(changes)))
        retried = checked_revision(self.session_id, draft, self._lookup_read, renew_taken_ids=renew_taken_ids).retried
        seen: set[str | None] = set()
        flags: list[bool] = []
        for change in changes:
            message_id = _put_id(change)
            flags.append(message_id in retried and message_id not in seen)
            seen.add(message_id)
        return flags

    def _repeated_turns(self, changes: list[Applied]) -> list[Applied]:
        """The append ``changes`` (renewing taken ids) with its held messages that come after a
        new one told apart (caller holds the lock): a retry, or an earlier turn's message given
        again.

        A retried request repeats what its first write stored: held messages lead it (the
        store drops them, and what follows goes to the end), or the whole append, or its
        start, ends the state.  A held message behind a new one is neither when the state does
        not end so: an LLM cache answers a question asked again with the earlier answer's
        message, id and all, and as a retry it would be dropped, leaving the new question
        unanswered.  Such a message is stored under a fresh id, and so is its id given again
        later in the append (the store would take that for a first copy).  When the append's
        start does end the state (compared by role and text: a message the caller left without
        an id has a fresh one each time), that start is dropped as the retry it is, and what
        follows it goes after its stored copy."""
        used = self._replica.used_ids
        if not any(isinstance(c, Put) and c.message.id in used for c in changes[1:]):
            return changes  # the usual case: no held message behind another
        is_retry = self._retry_flags(changes, True)
        lead = _leading(is_retry)
        late = [i for i in range(lead, len(changes)) if is_retry[i]]
        if not late:
            return changes
        start = self._repeated_start(changes, late[-1] + 1)  # 0: no retry; the held ones are renewed
        if start == len(changes):
            return []
        renew = _indexes_of(changes, _flagged_ids(changes, is_retry), start or lead)  # held, or given again after
        first = changes[start]
        after = first.after if isinstance(first, Put) else AT_END
        if start:
            after = self._replica.state.last_id or after  # what follows a retried start follows its stored copy
        return _rechained(changes, start, after, renew)

    def _repeated_start(self, changes: Sequence[Applied], shortest: int, question: str | None = None) -> int:
        """The length of the longest start of the append ``changes``, at least ``shortest``
        messages, that stored messages repeat by role and text: the messages that end the
        state, or, given ``question`` (in the state), the messages right after it; 0 when none
        does (caller holds the lock)."""
        stored = self._last(len(changes)) if question is None else self._after(question, len(changes))
        held = [digest(m) for m in stored]
        given = [digest(storable(c.message)) if isinstance(c, Put) else None for c in changes]
        for length in range(min(len(changes), len(held)), max(shortest, 1) - 1, -1):
            run = held[len(held) - length :] if question is None else held[:length]
            if run == given[:length]:
                return length
        return 0

    def _last(self, count: int) -> list[Message]:
        """Up to ``count`` messages that end the state, in order (caller holds the lock)."""
        state = self._replica.state
        tail: list[Message] = []
        node = state.last_id
        while node is not None and len(tail) < count:
            held = state.get(node)
            if held is None:
                break
            tail.append(held)
            node = state.previous_id(node)
        tail.reverse()
        return tail

    # -- editing ------------------------------------------------------------------------
    def edit(
        self,
        instruction: str,
        *,
        model: Any = None,
        strategy: Strategy | None = None,
        preview: bool = False,
        allow_large_deletion: bool | None = None,
        options: EditOptions | None = None,
    ) -> Revision | Proposal:
        """Revise the history as ``instruction`` says, through a model.

        Returns the new :class:`Revision`, or with ``preview=True`` a :class:`Proposal`
        that changes nothing until :meth:`commit`.  A failed edit (unusable model
        output after one retry, invalid operations, a model that raises or times out)
        raises :class:`EditError` or :class:`ModelUnavailableError` and changes nothing; so
        does an edit that turns appended while the model worked would break (see
        :meth:`commit`), with :class:`StaleHeadError`.  ``options`` (default: the
        transcript's ``edit_options``) sets this edit's settings; ``strategy`` and
        ``allow_large_deletion`` override its fields when given.
        Per-call ``options`` can tighten the transcript's deletion guard, never loosen it
        (the lower ``max_deletion_share`` holds; pass ``allow_large_deletion=True`` for a
        larger edit), and count with the transcript's token counter and edit with its
        strategy unless they name their own.
        """
        settings = self._edit_settings(options, strategy, allow_large_deletion)
        proposal = self._propose(instruction, model, settings)
        return proposal if preview else self.commit(proposal)

    async def aedit(
        self,
        instruction: str,
        *,
        model: Any = None,
        strategy: Strategy | None = None,
        preview: bool = False,
        allow_large_deletion: bool | None = None,
        options: EditOptions | None = None,
    ) -> Revision | Proposal:
        """Async :meth:`edit`: the model's async call is awaited, the store runs in a worker thread."""
        settings = self._edit_settings(options, strategy, allow_large_deletion)
        proposal = await self._apropose(instruction, model, settings)
        return proposal if preview else await self.acommit(proposal)

    def commit(self, proposal: Proposal) -> Revision:
        """Apply exactly ``proposal``: at its base head, or rebased over appends that touch
        none of its messages and leave the result alternating, with tool calls next to their
        results (an insertion at the end of the old state would land before the new turns);
        otherwise :class:`StaleHeadError` and nothing changes: compute the edit again."""
        if not isinstance(proposal, Proposal):
            raise InvalidTypeError(
                f"commit takes a Proposal from edit(preview=True), got {type(proposal).__name__}; "
                "pass what edit(..., preview=True) returned"
            )
        if proposal.session_id != self.session_id:
            raise InvalidInputError(
                f"this proposal belongs to session {proposal.session_id!r}, not {self.session_id!r}"
            )
        with self._lock:
            self._replica.refresh()
            log = self._replica.log
            base, base_time = proposal.base, proposal.base_time
            if base_time is not None and (base > len(log) or (base > 0 and log[base - 1].time != base_time)):
                raise StaleHeadError(
                    f"session {self.session_id!r} was purged or written anew since this proposal was computed "
                    f"(revision {base} is another revision now); nothing changed: compute the edit again"
                )
            self._refuse_broken_rebase(proposal)
            return self._commit(
                "edit",
                proposal.changes,
                expected_head=proposal.base,
                instruction=proposal.instruction,
                model=proposal.model,
            )

    async def acommit(self, proposal: Proposal) -> Revision:
        """Async :meth:`commit`."""
        return await asyncio.to_thread(self.commit, proposal)

    def _refuse_broken_rebase(self, proposal: Proposal) -> None:
        """Refuse ``proposal`` when the turns appended since its base would break the
        conversation's structure once it is rebased over them (caller holds the lock and
        has just refreshed): an insertion at the end of the old state lands before the new
        turns, which its own check never saw (see :mod:`.rebase`).

        Raises:
            StaleHeadError: the rebased result adds an alternation or tool-pairing
                violation; nothing is written."""
        log, base = self._replica.log, proposal.base
        if isinstance(base, bool) or not isinstance(base, int) or not 0 <= base < len(log):
            return  # at the head, or no head at all: the store's own checks answer
        later = log[base:]
        if rebase_conflicts(later, proposal.changes):
            return  # the store refuses it, naming the revisions in the way
        problem = rebase_problem(self._replica.state.to_list(), proposal.changes)
        if problem is not None:
            numbers = [revision.number for revision in later]
            raise StaleHeadError(
                f"session {self.session_id!r}: revision(s) {numbers} appended turns after revision "
                f"{base}, which this edit was computed on; applied after them, {problem}; nothing was "
                "written. Compute the edit again (edit() sees the new turns)"
            )

    def apply(self, requests: Sequence[Request], *, keep_tool_pairs: bool = False) -> Revision:
        """Explicit edits, no model: ``Replace(id, text)``, ``Delete(id)``, ``InsertAfter(id, role, text)``.

        Requests that change nothing (none at all, a replace with the same text) record
        nothing: the result is then numbered like the head, with no changes.  One request
        per message: a ``Replace`` or ``Delete`` of a message an earlier request of the list
        replaced or deleted, or an ``InsertAfter`` a message it deleted, is refused
        (:class:`InvalidInputError` naming both requests); so is an id not in the state
        (:class:`UnknownMessageError`).  With ``keep_tool_pairs=True`` (what a history whose
        messages go to a provider passes) a list that would separate a tool call from its
        result (a message inserted between them, the call or a result deleted alone) is
        refused too (:class:`InvalidInputError`), as :meth:`edit` refuses it; a split the state
        already holds does not count.  A refused list changes nothing.  Several
        ``InsertAfter`` of one message (or of ``None``, the start) land in the list's order,
        as a model's edit puts them.
        """
        requests = require_requests(requests)
        with self._lock:
            self._replica.refresh()
            # Each request is resolved on the state as the ones before it left it: on the
            # replica's own state, every change taken back (in reverse, so each lands where it
            # was) before anything else reads it -- a copy of the state would cost the whole
            # transcript for an edit of one message.
            state = self._replica.state
            before = state.to_list() if keep_tool_pairs else None
            changes: list[Applied] = []
            named: dict[str, tuple[int, Request]] = {}
            inserted: dict[str | None, str] = {}  # anchor -> the last message this list put after it
            try:
                for position, request in enumerate(requests, 1):
                    require_named_once(request, position, named)
                    change = resolve_request(request, state)
                    if isinstance(change, Put):
                        change = after_earlier_insertions(change, inserted)
                    if not is_noop(change):
                        state.apply([change])
                        changes.append(change)
                if before is not None and changes:
                    _refuse_split_tool_calls(before, state.to_list())
            finally:
                try:
                    state.apply(invert(changes))
                except Exception:  # never expected; the next read then loads the log again
                    self._replica.reset()
                    raise
            return self._commit("apply", changes, expected_head=len(self._replica.log))

    async def aapply(self, requests: Sequence[Request], *, keep_tool_pairs: bool = False) -> Revision:
        """Async :meth:`apply`."""
        checked = require_requests(requests)  # refused here, before a thread is started
        return await asyncio.to_thread(lambda: self.apply(checked, keep_tool_pairs=keep_tool_pairs))

    def set(self, messages: Iterable[Message | Mapping[str, Any]]) -> Revision:
        """Replace the whole state (as LlamaIndex's ``memory.set`` does), as one revision.

        Messages keep their ids where given.  The transcript computes each message's
        provenance; the ``origin``, ``derived_from`` and ``revision`` of the messages given
        are ignored:

        * a new id counts as originally written (``origin="original"``, no ``derived_from``);
        * an id the state holds, with the role, text, parts and metadata it holds, keeps the
          version held: its ``origin`` and ``derived_from`` wherever it goes in the order,
          and its ``revision`` too where it stays in place.  One the set moves is recorded as
          taken out and put back, so it is stamped with this set's revision (as an undo, redo
          or revert that moves it back stamps it with theirs): a state compared with ``==``
          across a move differs in ``revision`` though :meth:`diff` shows no change;
        * an id the state holds, with anything of those changed, gets what an edit gives
          (:meth:`Message.revised`: ``origin="edited"`` and ``derived_from`` the message it
          derives from, or still ``"inserted"`` for a message an edit inserted).

        An id the session used for a message that is no longer in the state is refused:
        ids are never reused.  Setting the current state again records nothing.
        ``messages`` is a list of messages or dicts, as :meth:`append` takes them (a dict
        key that is not a :class:`Message` field is refused); a refused call writes nothing.

        A question this object appended without an answer stays open (its next answer-only
        :meth:`append` goes right after it) unless the set takes it out, moves it or puts a
        message right after it; a refused or no-op set keeps it open.
        """
        new = [_as_message(m) for m in _require_messages(messages)]
        if len({m.id for m in new}) != len(new):
            raise InvalidInputError("set() got two messages with the same id")
        with self._lock:
            self._replica.refresh()
            state = self._replica.state
            reused = sorted(m.id for m in new if m.id in self._replica.used_ids and m.id not in state)
            if reused:
                raise InvalidInputError(
                    f"set() would reuse the id(s) {reused} of deleted messages in session {self.session_id!r}: "
                    "ids are never reused; give those messages new ids (or none)"
                )
            wanted = [_set_version(state.get(m.id), m) for m in new]
            changes = changes_between(state.to_list(), wanted)
            revision = self._commit("set", changes, expected_head=len(self._replica.log))
            self._forget_open_question(revision)
            return revision

    async def aset(self, messages: Iterable[Message | Mapping[str, Any]]) -> Revision:
        """Async :meth:`set`."""
        return await asyncio.to_thread(self.set, _require_messages(messages))

    def clear(self) -> Revision:
        """Remove every message from the state, as one revision (the record keeps them);
        clearing an empty state records nothing.  This object's open question goes with the
        rest (its next answer-only :meth:`append` goes at the end), unless nothing was cleared."""
        with self._lock:
            self._replica.refresh()
            changes = changes_between(self._replica.state.to_list(), [])
            revision = self._commit("clear", changes, expected_head=len(self._replica.log))
            self._forget_open_question(revision)
            return revision

    async def aclear(self) -> Revision:
        """Async :meth:`clear`."""
        return await asyncio.to_thread(self.clear)

    def _forget_open_question(self, revision: Revision) -> None:
        """Forget this object's open question when ``revision``, a set or clear it committed,
        took it out, moved it or put a message right after it: its next answer-only append
        then goes at the end (caller holds the lock).  A refused or no-op set or clear, or one
        that leaves the question where it was, keeps it, so that append still answers it."""
        question = self._open_user
        if question is None:
            return
        for change in revision.changes:
            if (isinstance(change, Remove) and change.message.id == question) or (
                isinstance(change, Put) and change.after == question
            ):
                self._open_user = None
                return

    def purge(self) -> None:
        """Erase the session entirely, record and history included: the one operation that forgets."""
        with self._lock:
            self.store.purge(self.session_id)
            self._replica.reset()
            self._open_user = None

    async def apurge(self) -> None:
        """Async :meth:`purge`."""
        await asyncio.to_thread(self.purge)

    # -- versions -----------------------------------------------------------------------
    def undo(self) -> Revision:
        """Revert the most recent state-changing revision not yet undone (see the module docstring)."""
        with self._lock:
            self._replica.refresh()
            done, _ = undo_stacks(self._replica.log)
            if not done:
                raise HistoryError("nothing to undo: no edit, apply, set, clear or revert is left to revert")
            target = self._replica.log[done[-1] - 1]
            with collector_paused(len(target.changes) > BULK):  # the inverse is built before _commit pauses it
                inverse = anchored(invert(target.changes), self._replica.state)  # a redo puts them back where they stand now
                return self._commit("undo", inverse, expected_head=len(self._replica.log), target=target.number)

    async def aundo(self) -> Revision:
        """Async :meth:`undo`."""
        return await asyncio.to_thread(self.undo)

    def redo(self) -> Revision:
        """Re-apply what the last undo reverted, if nothing state-changing came after it."""
        with self._lock:
            self._replica.refresh()
            _, undone = undo_stacks(self._replica.log)
            if not undone:
                raise HistoryError(
                    "nothing to redo: redo follows an undo, and a later edit, apply, set, clear or "
                    "revert discards what was undone"
                )
            undo_revision = undone[-1]
            with collector_paused(len(undo_revision.changes) > BULK):
                return self._commit(
                    "redo", anchored(invert(undo_revision.changes), self._replica.state),
                    expected_head=len(self._replica.log), target=undo_revision.target,
                )

    async def aredo(self) -> Revision:
        """Async :meth:`redo`."""
        return await asyncio.to_thread(self.redo)

    def revert(self, revision: int) -> Revision:
        """Make the state equal to revision ``revision``'s, as a new revision.

        The returned revision's ``removed`` lists the messages it drops, including
        turns appended after ``revision``; messages it only puts back in that revision's
        order are in its ``moved``.  ``revision`` is an int, 0..head
        (:class:`InvalidTypeError` for another type, :class:`HistoryError` out of range).
        """
        with self._lock:
            self._replica.refresh()
            target = self._check_revision(revision)
            with collector_paused(self._large()):  # the changes are built before _commit pauses it
                changes = changes_between(self._replica.state.to_list(), self._replica.state_at(target))
                return self._commit("revert", changes, expected_head=len(self._replica.log), target=target)

    async def arevert(self, revision: int) -> Revision:
        """Async :meth:`revert`."""
        return await asyncio.to_thread(self.revert, revision)

    # -- internals ----------------------------------------------------------------------
    def _edit_settings(self, options: EditOptions | None, strategy: Any, allow_large: Any) -> EditOptions:
        """This edit's options: ``options`` (else the transcript's) with the given keywords applied.

        Per-call ``options`` never loosen the transcript's deletion guard by accident: the
        limit is the lower of the two shares, and a per-call record without a token counter
        counts with the transcript's.  Only ``allow_large_deletion=True`` lets a larger
        edit through.  A per-call record that leaves ``strategy`` at its default keeps the
        transcript's strategy (:attr:`EditOptions.strategy_given`)."""
        own = self.edit_options
        base = own if options is None else options.with_(
            strategy=options.strategy if options.strategy_given else own.strategy,
            max_deletion_share=min(options.max_deletion_share, own.max_deletion_share),
            token_counter=options.token_counter if options.token_counter is not None else own.token_counter,
        )
        return EditOptions.of(base, strategy=strategy, allow_large_deletion=allow_large)

    def _edit_model(self, instruction: str, model: Any) -> Any:
        check_instruction(instruction)
        chosen = model if model is not None else self.model
        if chosen is None:
            raise ModelUnavailableError(
                "no editing model: pass model= to edit() or to Transcript(...) (any callable "
                "fn(messages) -> str works; the LangChain and LlamaIndex adapters default to Gemini)"
            )
        return chosen

    def _make_proposal(
        self, instruction: str, base: tuple[int, float | None], state: list[Message], result: Any, strategy: str
    ) -> Proposal:
        scratch = State(state)
        scratch.apply(result.changes)
        proposed = scratch.to_list()
        head, head_time = base
        return Proposal(
            session_id=self.session_id,
            base=head,
            changes=tuple(map(detached_change, result.changes)),
            diff=diff_states(head, state, head + 1, proposed),
            instruction=instruction,
            model=result.model_name,
            strategy=strategy,
            base_time=head_time,
        )

    def _propose(self, instruction: str, model: Any, options: EditOptions) -> Proposal:
        chosen = self._edit_model(instruction, model)
        base, state = self._base_and_state()
        result = compute_edit(state, instruction, chosen, options=options)  # outside the lock: models are slow
        return self._make_proposal(instruction, base, state, result, options.strategy)

    async def _apropose(self, instruction: str, model: Any, options: EditOptions) -> Proposal:
        chosen = self._edit_model(instruction, model)
        base, state = await asyncio.to_thread(self._base_and_state)
        result = await acompute_edit(state, instruction, chosen, options=options)
        return self._make_proposal(instruction, base, state, result, options.strategy)

    def _base_and_state(self) -> tuple[tuple[int, float | None], list[Message]]:
        """The head (its number and time) and a copy of the state at it, read together (what an
        edit starts from)."""
        with self._lock:
            self._replica.refresh()
            log = self._replica.log
            return (len(log), log[-1].time if log else None), list(map(detached, self._replica.state.to_list()))

    def _commit(
        self,
        kind: RevisionKind,
        changes: Sequence[Applied],
        *,
        expected_head: int | None,
        renew_taken_ids: bool = False,
        **fields: Any,
    ) -> Revision:
        """Store one revision and bring this object up to date (caller holds the lock).

        A revision with no changes (or only changes to identical text) is a no-op: it is
        not stored, and the result is numbered like the head, with no changes.
        """
        head = len(self._replica.log)
        draft = Revision(number=0, parent=0, kind=kind, changes=tuple(c for c in changes if not is_noop(c)), **fields)
        if not draft.changes:
            return replace(draft, number=head, parent=head, base=head)
        draft = storable_revision(draft)  # one text per revision, and metadata a store can keep, before any write
        if renew_taken_ids and not takes_keyword(self.store, "renew_taken_ids"):
            return self._commit_renewing(draft, expected_head)  # which runs the same check against the log it reads
        if kind == "append":
            draft = self._append_as_read(draft, renew_taken_ids)
            if not draft.changes:  # every message was a retry of one the state holds: nothing to record
                return replace(draft, number=head, parent=head, base=head)
        options = {"renew_taken_ids": True} if renew_taken_ids else {}  # stores of our own take it; others need not
        with collector_paused(len(draft.changes) > BULK):
            stored = self.store.commit(self.session_id, draft, expected_head=expected_head, **options)
            return self._committed(stored)

    def _committed(self, stored: Revision) -> Revision:
        """Bring this object up to date with ``stored``, what the store returned, and return
        the caller's copy (callers keep the collector paused for a large one: one object per message).

        The replica takes a copy of ``stored``: a store may hand back the revision it was given
        (whose messages a committed :class:`Proposal` still holds) or one it keeps itself, and
        neither's metadata or parts may be this object's history."""
        if stored.changes and stored.parent == len(self._replica.log):
            self._replica.add(stored.detached())  # nothing landed in between: no need to read it back
        else:
            self._replica.refresh()
        if not stored.changes or stored.number > len(self._replica.log):
            return stored.detached()
        return self._replica.log[stored.number - 1].detached()

    def _append_as_read(self, draft: Revision, renew_taken_ids: bool) -> Revision:
        """The append ``draft`` checked against the log as this object has just read it,
        before anything is written (caller holds the lock): a retried message the state
        holds is dropped, and any other taken id is refused or renewed, as the store would
        (:func:`~context_gatekeeper.stores.integrity.check_revision`).  The store checks what
        is left again, inside its write transaction, against its id index (for writers that
        came between).  That index is not covered by the hash chain: when it was edited by
        hand, a retry it no longer knows would otherwise be stored as a second copy of a
        message the session holds, a revision no reader can load.

        Raises:
            InvalidInputError: a taken id, without ``renew_taken_ids``; nothing is written.
            InvalidRevisionError: a message put after one the session never held, or after
                a deleted one; nothing is written."""
        checked, _rows = check_revision(self.session_id, draft, self._lookup_read, renew_taken_ids=renew_taken_ids)
        return checked

    def _commit_renewing(self, draft: Revision, expected_head: int | None) -> Revision:
        """Commit the append ``draft`` with taken ids renewed, for a store whose ``commit``
        does not take ``renew_taken_ids`` (written before it existed): the ids are renewed
        here, against the log as read, and the result committed at that head, so an append
        that landed meanwhile with one of its ids makes the store refuse it as stale, and it
        is renewed again against the log read anew.  An ``expected_head`` (the head the append
        decided its retries on) is the head it commits at, and a refusal goes to the caller,
        who decides again."""
        for _ in range(_RENEW_ATTEMPTS):
            self._replica.refresh()
            head = len(self._replica.log)
            placed = replace(draft, number=head + 1, parent=head)
            renewed, _rows = check_revision(self.session_id, placed, self._lookup_read, renew_taken_ids=True)
            if not renewed.changes:  # every message was a retry: nothing to record
                return replace(draft, changes=(), number=head, parent=head, base=head)
            try:
                with collector_paused(len(renewed.changes) > BULK):
                    stored = self.store.commit(
                        self.session_id, replace(renewed, number=0, parent=0),
                        expected_head=head if expected_head is None else expected_head,
                    )
                    return self._committed(stored)
            except StaleHeadError:
                if expected_head is not None:
                    raise
                continue  # another writer took one of these ids meanwhile: renew against the new log
        raise StaleHeadError(
            f"session {self.session_id!r}: other writers kept taking the ids of this append while it was renewed "
            f"({_RENEW_ATTEMPTS} tries); nothing was written. Append again"
        )

    def _lookup_read(self, ids: Iterable[str]) -> dict[str, IdEntry]:
        """The id-index rows of ``ids`` as this object has read the log (what a store's
        index would say): for :meth:`_append_as_read` and :meth:`_commit_renewing`.  Costs a
        set lookup per id; only an id the session used reads the log, up to its first put."""
        wanted = {i for i in ids if i in self._replica.used_ids}
        if not wanted:
            return {}
        first: dict[str, str] = {}
        for revision in self._replica.log:
            for message in revision.added:
                if message.id in wanted and message.id not in first:
                    first[message.id] = digest(message)
            if len(first) == len(wanted):
                break
        state = self._replica.state
        found: dict[str, IdEntry] = {}
        for message_id, first_digest in first.items():
            held = state.get(message_id)
            found[message_id] = entry(held is not None, first_digest, digest(held) if held is not None else first_digest)
        return found

    def _large(self) -> bool:
        """Whether the state or the log is big enough that a whole-state operation (a diff,
        a revert) should run with the cyclic collector paused (see :func:`collector_paused`)."""
        return len(self._replica.state) > BULK or len(self._replica.log) > BULK

    def _check_revision(self, revision: Any) -> int:
        """``revision`` when it numbers a revision of this session (0..head, caller holds the lock).

        Raises:
            InvalidTypeError: not an int (a str, a float, ``None``, a bool).
            HistoryError: an int outside 0..head."""
        head = len(self._replica.log)
        if isinstance(revision, bool) or not isinstance(revision, int):
            raise InvalidTypeError(
                f"a revision number must be an int, got {type(revision).__name__} {revision!r}; pass a revision's "
                f"number (0..{head} in session {self.session_id!r}: Revision.number, or transcript.head)"
            )
        if not 0 <= revision <= head:
            raise HistoryError(f"no revision {revision!r}: revisions of session {self.session_id!r} run 0..{head}")
        return revision

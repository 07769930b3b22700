"""Selection over a transcript's current state: a gatekeeper that follows a transcript.

:class:`TranscriptGate` groups the transcript's messages into turns (a user message
and every assistant and tool message that answers it) and keeps a
:class:`~context_gatekeeper.selection.gatekeeper.ContextGatekeeper` in step with them through
``replace_turn`` / ``remove_turn`` / ``insert_turn``, so after any revision (an
edit, an undo, a revert) no superseded text can be selected, and only the turns a
revision touched are re-indexed.

With an ``embedder=``, the gate's gatekeeper keeps its turn vectors in a
:class:`~context_gatekeeper.stores.StoreVectorCache` over the transcript's own store
and session (each vector saved with the id of its turn's first message), so a
reopened transcript or a restarted worker embeds only what it has not seen.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, Union

from ..selection.semantic.runner import run_locked
from ..selection.semantic.embedding import text_hash, turn_text
from ..errors import InvalidInputError, InvalidTypeError
from ..selection.gatekeeper import ContextGatekeeper
from ..selection.options import GateOptions
from ..records.messages import Message, detached
from ..selection.records import Selection
from ..stores.replica import BULK, collector_paused
from ..validation import require_budget, require_items
from .transcript import Transcript

IncludeOpen = Union[bool, Literal["fits"]]
"""What selection does with the open turn (the unanswered user message at the end): ``True``
sends it and the unanswered messages right before it that fit, never gated; ``False`` leaves
them out; ``"fits"`` charges them to the budget and sends them only if they fit (a chain whose
new input is the open turn reads a stored unanswered message so)."""

__all__ = ["MessageTurn", "IndexedTurn", "indexed_texts", "message_text", "arguments_text", "group_turns", "TurnIndex", "TranscriptGate"]


@dataclass(frozen=True)
class MessageTurn:
    """Messages that belong together for selection.

    Attributes:
        key: the id of the turn's first message (stable across edits of its text).
        messages: the turn's messages in order: the user message (if any), then its answers.
    """

    key: str
    messages: tuple[Message, ...]

    @property
    def texts(self) -> tuple[str, str, tuple[str, ...]]:
        """(user text, assistant text, tool texts) as the gatekeeper indexes them
        (:func:`indexed_texts` of the turn's messages by role)."""
        messages = self.messages
        if len(messages) == 2:  # a question and its answer (most turns): the texts as they are
            first, second = messages
            if (first.role == "user" and second.role == "assistant" and not second.metadata.get("tool_calls")
                    and first.content and second.content):
                return first.content, second.content, ()
        return indexed_texts(
            [m.content for m in messages if m.role == "user"],
            [message_text(m) for m in messages if m.role == "assistant"],
            [m.content for m in messages if m.role == "tool" or m.role == "system"],
        )

    @property
    def is_open(self) -> bool:
        """A user message nobody has answered yet."""
        return all(m.role == "user" for m in self.messages)


def message_text(message: Message) -> str:
    """What selection reads of a message, and prices: its text, and for an assistant message
    the tool calls it makes (``metadata["tool_calls"]``, as both adapters store them), each as
    its name and its arguments, on a line after the text.  The calls are sent to the
    model with the message, so they cost tokens and carry its words: an agent's
    ``write_file`` call with a page of code in its arguments and no text was priced as an
    empty message (a history's selection went over its budget) and matched no word of the
    code.  The LangChain list path reads a message the same way."""
    calls = message.metadata.get("tool_calls") if message.role == "assistant" else None
    if not calls or not isinstance(calls, list):
        return message.content
    text = " ".join(_call_text(call) for call in calls)
    return f"{message.content}\n{text}" if message.content else text


def _call_text(call: Any) -> str:
    """One tool call as ``name arguments``, in LangChain's shape (``{"name", "args"}``) or
    OpenAI's (``{"function": {"name", "arguments"}}``): arguments given as a string (a
    provider's JSON) as they are, others as JSON (a value JSON cannot hold as its ``str``),
    none as nothing."""
    if not isinstance(call, dict):
        return ""
    function = call.get("function")
    if isinstance(function, dict) and "name" not in call:
        call = {"name": function.get("name"), "args": function.get("arguments")}
    return f"{call.get('name') or ''} {arguments_text(call.get('args'))}".strip()


def arguments_text(arguments: Any) -> str:
    """A tool call's arguments as they are sent: a string (a provider's JSON) as it is, anything
    else as JSON (a value JSON cannot hold as its ``str``), none as ``""``.  The one rendering
    every adapter prices and indexes a tool call by."""
    if arguments is None:
        return ""
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments, ensure_ascii=False, default=str)


def indexed_texts(
    users: Sequence[str], answers: Sequence[str], others: Sequence[str]
) -> tuple[str, str, tuple[str, ...]]:
    """A turn's ``(user text, assistant text, tool texts)`` as the gatekeeper indexes them, from
    the texts of its user messages, its assistant messages and its other messages (tool
    results; a system message inside the turn, which is sent with it), each in order.

    The first user message is the user text; the last assistant message is the answer (the
    gate reads whether it ends with a question); the earlier assistant messages (an agent's
    tool calls), the later user messages (a tool's delivery, such as an image it hands the
    model between parallel results) and the other messages are tool texts.  The gatekeeper
    costs a turn by its texts with one ``message_overhead`` each, so each message sent is one
    text: a turn of several messages is not priced as one message (an agent turn of several
    answers, or of several user messages joined, went over the budget by the overhead of
    each).  A message that is sent but has no text (an image alone, an empty answer) is read
    as :data:`NO_TEXT`, so it is charged its ``message_overhead`` like any other message (the
    gatekeeper reads an empty text as no message)."""
    user = (users[0] or NO_TEXT) if users else ""
    answer = (answers[-1] or NO_TEXT) if answers else ""
    return user, answer, (*answers[:-1], *(text or NO_TEXT for text in users[1:]), *others)


class IndexedTurn(Protocol):
    """What :class:`TurnIndex` reads of a turn: a key and the texts it indexes
    (:class:`MessageTurn` is one; adapters may pass lighter objects)."""

    @property
    def key(self) -> str: ...

    @property
    def texts(self) -> tuple[str, str, tuple[str, ...]]: ...


def group_turns(messages: Sequence[Message]) -> tuple[list[Message], list[MessageTurn]]:
    """Split a state into leading system messages and turns.

    A turn starts at each user message, unless it stands between a tool call and its result
    (parallel calls, one tool's delivery, an image it hands the model as a user message,
    standing before another call's result: :func:`_answered_until`); assistant and tool
    messages join the turn before them (a tool call is never separated from its result);
    answers before any user message form a turn of their own.  System messages after the
    start stay in the turn where they stand.
    """
    system: list[Message] = []
    turns: list[list[Message]] = []
    calls: frozenset[str] = frozenset()  # the calls of the last assistant message
    until, scanned = -1, True  # where the results of ``calls`` end, once a user message asked
    for i, message in enumerate(messages):
        role = message.role
        if role == "assistant":
            calls = _call_ids(message)
            until, scanned = -1, not calls
        elif role == "user" and not scanned:
            until, scanned = _answered_until(messages, i, calls), True
        if role == "system" and not turns:
            system.append(message)
        elif (role == "user" and i >= until) or not turns:
            turns.append([message])
        else:
            turns[-1].append(message)
    return system, [MessageTurn(t[0].id, tuple(t)) for t in turns]


def _call_ids(message: Message) -> frozenset[str]:
    """The ids of the tool calls an assistant message makes (``metadata["tool_calls"]``, in
    LangChain's shape or OpenAI's: each with its ``id``), invalid ones included
    (``metadata["invalid_tool_calls"]``: a call whose arguments did not parse is still
    answered by a tool message, as LangChain's agent view reads it)."""
    if message.role != "assistant":
        return frozenset()
    ids: set[str] = set()
    for key in ("tool_calls", "invalid_tool_calls"):
        calls = message.metadata.get(key)
        if calls and isinstance(calls, list):
            ids.update(c["id"] for c in calls if isinstance(c, dict) and isinstance(c.get("id"), str) and c["id"])
    return frozenset(ids)


def _result_id(message: Message) -> str | None:
    """The id of the call a tool message answers (``metadata["tool_call_id"]``), or None."""
    call_id = message.metadata.get("tool_call_id") if message.role == "tool" else None
    return call_id if isinstance(call_id, str) and call_id else None


def _answered_until(messages: Sequence[Message], i: int, calls: Collection[str]) -> int:
    """The position of the last result of one of ``calls`` after ``messages[i]`` and before the
    next assistant message (``-1``: none).  A user message before it stands inside the tool step
    (a call made before it is answered after it), so it does not start a turn."""
    until = -1
    for j in range(i + 1, len(messages)):
        message = messages[j]
        if message.role == "assistant":
            break
        if _result_id(message) in calls:
            until = j
    return until


def _answers_before(tail: Sequence[Message], added: Sequence[Message]) -> bool:
    """Whether a tool result of ``added`` answers a call other than one of the last assistant
    message before it in ``tail`` (the turn that ``added`` is regrouped with) and ``added``: a
    call of an older turn, whose step a regrouping from ``tail`` would split (a user message of
    ``tail`` the result follows stands inside that step), so the state is grouped whole instead.
    The messages are walked in order, as :func:`group_turns` reads them: a call id made again
    after the result (providers that number calls ``call_0``, ``call_1`` in each step) does not
    count as answering it."""
    calls: frozenset[str] = frozenset()
    for message in reversed(tail):
        if message.role == "assistant":
            calls = _call_ids(message)
            break
    for message in added:
        if message.role == "assistant":
            calls = _call_ids(message)
            continue
        result = _result_id(message)
        if result is not None and result not in calls:
            return True
    return False


class TurnIndex:
    """Keeps a :class:`ContextGatekeeper` in step with a list of turns, incrementally.

    The one sync routine behind :class:`TranscriptGate` and the adapters' per-thread
    indexes.  A turn is a :class:`MessageTurn` or anything with its ``key`` and
    ``texts`` (:class:`IndexedTurn`).  Turns are identified by :attr:`MessageTurn.key`: a key seen before whose
    texts changed is re-indexed in place (``replace_turns``), keys no longer present are
    removed (``remove_turns``), new keys are inserted where they stand (``insert_turns``),
    each kind at once, so a list replaced whole costs what indexing it costs; when keys the gatekeeper already
    holds now stand in another order, the index is rebuilt: every turn gets a new
    gatekeeper turn id (ids are not stable across a rebuild; keys are), and a pinned turn
    that is still there is pinned again under its new id (pins follow the turn's key).
    Not thread-safe on its own: callers hold their lock around :meth:`sync` and the
    gatekeeper call that follows.

    Attributes:
        gatekeeper: the gatekeeper driven.
        ids: turn key -> gatekeeper turn id, for every turn of the last sync.
    """

    def __init__(self, gatekeeper: ContextGatekeeper) -> None:
        self.gatekeeper = gatekeeper
        self.ids: dict[str, int] = {}
        self._texts: dict[str, tuple[str, str, tuple[str, ...]]] = {}
        self._order: list[str] = []
        self._repin: set[str] = set()  # keys of turns pinned before a rebuild, pinned again once placed
        self.builds = 0
        """How many times the index was built from empty (the first sync and each rebuild)."""

    def sync(self, turns: Sequence[IndexedTurn]) -> None:
        """Bring the gatekeeper in step with ``turns`` (cheap when nothing changed)."""
        gk = self.gatekeeper
        keys = [t.key for t in turns]
        present = set(keys)
        if len(present) != len(keys):
            raise InvalidInputError("turn keys must be unique within one sync (give each turn its own key)")
        if [k for k in self._order if k in present] != [k for k in keys if k in self.ids]:
            self._repin |= self._pinned_keys()
            gk.clear()  # a kept turn moved (a set, a revert, a reordered list): rebuild
            self.ids.clear()
            self._texts.clear()
        if not self.ids and turns:
            self.builds += 1
        gone = [k for k in self.ids if k not in present]
        gk.remove_turns([self.ids[k] for k in gone])  # at once: a list replaced whole is not quadratic
        for key in gone:
            del self.ids[key], self._texts[key]
        self._place_all(turns, None)
        self._order = keys
        self._pin_again()

    def _pinned_keys(self) -> set[str]:
        """The keys of the turns pinned on the gatekeeper."""
        by_id = self.keys_by_id()
        return {by_id[turn_id] for turn_id in self.gatekeeper.pinned if turn_id in by_id}

    def _pin_again(self) -> None:
        """Pin the turns that were pinned before a rebuild under their new ids (a turn the
        rebuild left out stays unpinned, as a removed turn does).  Kept until a sync places
        the turns, so a rebuild that failed midway loses no pin."""
        for key in self._repin:
            if key in self.ids:
                self.gatekeeper.pin(self.ids[key])
        self._repin.clear()

    def extend(self, turns: Sequence[IndexedTurn]) -> bool:
        """Bring the gatekeeper in step after turns were added at the end, in time
        proportional to ``turns``: the first may be the last turn of the previous sync
        (its key, its texts possibly grown), every other one must be new.  Returns False,
        changing nothing, when ``turns`` are not such an extension (call :meth:`sync`)."""
        keys = [t.key for t in turns]
        if len(set(keys)) != len(keys):
            raise InvalidInputError("turn keys must be unique within one sync (give each turn its own key)")
        order = self._order
        if not keys:
            return True
        known = [k for k in keys if k in self.ids]
        if known and (known != keys[:1] or not order or order[-1] != keys[0]):
            return False
        previous = self.ids[order[-1]] if order else None
        added = [k for k in keys if k not in self.ids]
        self._place_all(turns, previous)
        order.extend(added)
        if not self.builds:
            self.builds = 1
        return True

    def _place_all(self, turns: Sequence[IndexedTurn], previous: int | None) -> None:
        """Place ``turns`` in order, the first after gatekeeper turn ``previous``: a held key
        whose texts changed is re-indexed in place, and each run of new keys is inserted
        at once (:meth:`ContextGatekeeper.insert_turns`)."""
        run: list[IndexedTurn] = []
        changed: dict[int, IndexedTurn] = {}  # held turns whose texts changed, by gatekeeper id
        for turn in turns:
            turn_id = self.ids.get(turn.key)
            if turn_id is None:
                run.append(turn)
                continue
            if run:
                self._insert(run, previous)
                run = []
            if self._texts[turn.key] != turn.texts:
                changed[turn_id] = turn
            previous = turn_id
        if run:
            self._insert(run, previous)
        if changed:  # ids and positions stay: re-indexed at once, later turns segmented once
            self.gatekeeper.replace_turns({turn_id: _indexed(turn.texts) for turn_id, turn in changed.items()})
            for turn in changed.values():
                self._texts[turn.key] = turn.texts

    def _insert(self, run: list[IndexedTurn], previous: int | None) -> None:
        """Insert turns with new keys after gatekeeper turn ``previous``, in order and at once:
        when one fails (a token counter that raises), none is inserted and its error is raised."""
        texts = [turn.texts for turn in run]
        ids = self.gatekeeper.insert_turns(previous, [_indexed(t) for t in texts])
        for turn, held, turn_id in zip(run, texts, ids):
            self.ids[turn.key] = turn_id
            self._texts[turn.key] = held

    def keys_by_id(self) -> dict[int, str]:
        """Gatekeeper turn id -> turn key."""
        return {turn_id: key for key, turn_id in self.ids.items()}


NO_TEXT = "\u2026"
"""What a turn with no text (an image sent alone, an empty tool-call answer) is indexed as,
in its user text: the gatekeeper refuses a turn whose texts are all blank, and the turn must
hold its place (its topic, its position).  One character ("…") that gives no anchor and no
cue, so nothing matches it, and costs one token (one character with a ``len`` counter); the
turn is charged one ``message_overhead`` for it, as for a user message with text."""


def _indexed(texts: tuple[str, str, tuple[str, ...]]) -> tuple[str, str, tuple[str, ...]]:
    """A turn's texts as the gatekeeper indexes them: a turn of empty messages still holds
    its place, as :data:`NO_TEXT`."""
    user, assistant, tools = texts
    if not (user.strip() or assistant.strip() or any(t.strip() for t in tools)):
        return NO_TEXT, assistant, tools
    return texts


def _require_transcript(transcript: Any) -> None:
    """Refuse what is not a :class:`Transcript` (nor an object with its ``version`` and
    ``messages``) with :class:`InvalidTypeError`, before anything is read."""
    kind = type(transcript)
    if not isinstance(transcript, Transcript) and not (hasattr(kind, "version") and hasattr(kind, "messages")):
        raise InvalidTypeError(
            f"transcript must be a Transcript, got {kind.__name__}; pass the Transcript to follow, "
            "e.g. TranscriptGate(Transcript('user-42'))"
        )


def _require_empty(gatekeeper: Any) -> None:
    """Refuse a gatekeeper that is not a :class:`ContextGatekeeper`, or that holds turns or a
    system prompt: the gate owns both (they would be mixed with the transcript's, or the
    prompt replaced by its system messages), and it never clears what the caller put there."""
    if not isinstance(gatekeeper, ContextGatekeeper):
        raise InvalidTypeError(
            f"gatekeeper must be a ContextGatekeeper or None, got {type(gatekeeper).__name__}; "
            "pass ContextGatekeeper(...) or leave gatekeeper= out"
        )
    held = [f"{len(gatekeeper)} turn(s)"] if len(gatekeeper) else []
    if gatekeeper.system_prompt is not None:
        held.append("a system prompt")
    if held:
        raise InvalidInputError(
            f"gatekeeper= holds {' and '.join(held)}, but a TranscriptGate owns its gatekeeper's turns (the "
            "transcript's) and system prompt (the transcript's leading system messages); nothing was changed. "
            "Pass an empty one with the same settings, gatekeeper.empty_copy(), and put "
            "a system prompt in the transcript as its first message ({'role': 'system', 'content': ...})"
        )


def _require_own_vectors(gatekeeper: ContextGatekeeper) -> None:
    """Refuse a gatekeeper whose turn vectors go to another :class:`TranscriptGate`'s session
    (built by that gate, or copied from its gatekeeper): this transcript's vectors would be
    saved under that session, and purging this one would leave them there."""
    if isinstance(gatekeeper.options.vector_cache, _MessageVectorCache):
        raise InvalidInputError(
            "gatekeeper= keeps its turn vectors in another TranscriptGate's session (its vector cache is that "
            "gate's); nothing was changed. Build this gate from its settings instead, and it saves to this "
            "transcript's session: TranscriptGate(transcript, options=gk.current_options())"
        )


def _system_texts(system: Sequence[Message]) -> tuple[str, ...] | None:
    """The gatekeeper's system prompt: the leading system messages' texts, one message each,
    as :meth:`TranscriptGate.select_messages` sends them (a blank one, such as an image alone,
    costs its ``message_overhead``); ``None`` without any."""
    return tuple(m.content for m in system) or None


class TranscriptGate:
    """Topic-gated selection over a transcript's current state.

    >>> t = Transcript("gate-demo")
    >>> _ = t.append(user="How long should a Redis lock TTL be?", assistant="Longer than the longest job.")
    >>> _ = t.append(user="By the way, best espresso grind?", assistant="Fine, like table salt.")
    >>> gate = TranscriptGate(t, token_counter=len, message_overhead=0)
    >>> [m.content for m in gate.select_messages("And the Redis lock watchdog?")][:1]
    ['How long should a Redis lock TTL be?']

    The gate owns its gatekeeper's turns and system prompt: the turns are the transcript's
    (keyed by the id of each turn's first message) and the system prompt is the text of the
    transcript's leading system messages (``None`` when it has none), set again on each sync.
    Gatekeeper turn ids are not stable: a revision that moves a turn (a ``set`` in another
    order, a revert) rebuilds the index and every turn gets a new id; a pin set on
    ``gate.gatekeeper`` follows the turn's key across it.  The summary and the settings
    stay the caller's.

    Args:
        transcript: the transcript to follow.
        gatekeeper: a configured, empty gatekeeper to drive (no turns, no system prompt:
            :class:`InvalidInputError` otherwise; ``gk.empty_copy()`` is
            an empty one with ``gk``'s settings), or ``None`` to create one from the keywords
            below and ``gatekeeper_options`` (any :class:`ContextGatekeeper` keyword).
        options: the new gatekeeper's settings as one checked :class:`GateOptions` instead
            of keywords (not both); its embedder's vectors go to the store as with ``embedder=``.
        embedder: turns on the semantic channel: a LangChain ``Embeddings``, a LlamaIndex
            ``BaseEmbedding``, or a callable ``list[str] -> list[list[float]]`` (numpy
            needed).  Turns are embedded once, in batches, and their vectors saved in the
            transcript's store (when it has the vector capability; otherwise they live
            in this process and are embedded again after a restart).  ``None`` (the
            default): lexical selection only, exactly as without the keyword.
        embed_timeout: seconds one embedding call may take before selection goes on
            lexically (``Selection.semantic_fallback``); ``None``: wait.
        vector_cache: where turn vectors are kept instead of the transcript's store
            (see :class:`~context_gatekeeper.selection.semantic.embedding.VectorCache`).
    """

    def __init__(
        self,
        transcript: Transcript,
        gatekeeper: ContextGatekeeper | None = None,
        *,
        options: GateOptions | None = None,
        embedder: Any = None,
        embed_timeout: float | None = None,
        vector_cache: Any = None,
        **gatekeeper_options: Any,
    ) -> None:
        _require_transcript(transcript)
        semantic = embedder is not None or embed_timeout is not None or vector_cache is not None
        if gatekeeper is not None and (gatekeeper_options or semantic or options is not None):
            raise InvalidTypeError(
                "pass either a gatekeeper or options to build one (embedder= included), not both: "
                "set the options on the ContextGatekeeper you pass, or leave gatekeeper= out"
            )
        if gatekeeper is not None:
            _require_empty(gatekeeper)
            _require_own_vectors(gatekeeper)
        self.transcript = transcript
        if isinstance(vector_cache, _MessageVectorCache):
            vector_cache = None  # another gate's: its vectors would go to that gate's session
        if options is not None:  # checked already (GateOptions.of refuses keywords beside it)
            options = GateOptions.of(options, embedder=embedder, embed_timeout=embed_timeout,
                                     vector_cache=vector_cache, **gatekeeper_options)
            if isinstance(options.vector_cache, _MessageVectorCache):  # another gate's (options=gk.options)
                options = options.with_(vector_cache=None)
            if options.embedder is not None and options.vector_cache is None:  # vectors to the store, as with embedder=
                from ..stores.vector_cache import StoreVectorCache

                store_cache = StoreVectorCache(transcript.store, transcript.session_id)
                options = options.with_(vector_cache=_MessageVectorCache(store_cache, self))
            gatekeeper = ContextGatekeeper(options=options)
        if gatekeeper is None and embedder is not None:
            if vector_cache is None:
                from ..stores.vector_cache import StoreVectorCache

                vector_cache = _MessageVectorCache(StoreVectorCache(transcript.store, transcript.session_id), self)
            gatekeeper_options.update(embedder=embedder, embed_timeout=embed_timeout, vector_cache=vector_cache)
        elif gatekeeper is None and semantic:
            gatekeeper_options.update(embed_timeout=embed_timeout, vector_cache=vector_cache)
        self.gatekeeper = gatekeeper if gatekeeper is not None else ContextGatekeeper(**gatekeeper_options)  # an empty one is falsy
        self._lock = threading.RLock()
        self._index = TurnIndex(self.gatekeeper)
        self._ids = self._index.ids  # turn key -> gatekeeper turn id (the same dict)
        self._turns: list[MessageTurn] = []
        self._system: list[Message] = []
        self._open: MessageTurn | None = None
        self._version: tuple[int, float] | None = None
        self._last_id: str | None = None  # the last message of the state last synced
        self._by_turn_id: dict[int, MessageTurn] = {}  # gatekeeper turn id -> its turn
        self._digests: dict[str, str] = {}  # text hash -> the key of a turn that held that text when hashed
        self._hashed: dict[str, tuple[Any, str]] = {}  # key -> (the Turn hashed, its text hash)

    @property
    def semantic(self) -> bool:
        """Whether the gatekeeper has an embedder (the semantic channel is on)."""
        return self.gatekeeper.embedder is not None

    def sync(self) -> None:
        """Bring the gatekeeper in step with the transcript's current state (cheap when nothing changed)."""
        with self._lock:
            appended = getattr(self.transcript, "_appended_since", None)  # a Transcript's; stand-ins may lack it
            if self._version is not None and appended is not None:
                found = appended(self._version, self._last_id)
                if found is not None and self._extend(found[1]):
                    self._version = found[0]
                    return
            snapshot = getattr(self.transcript, "_snapshot", None)
            if snapshot is not None:
                version, messages = snapshot()
                if version == self._version:
                    return
            else:
                version = self.transcript.version
                if version == self._version:
                    return
                messages = self.transcript.messages
            with collector_paused(len(messages) > BULK):  # a turn and its index entries per turn, all kept
                system, turns = group_turns(messages)
                self._open = turns.pop() if turns and turns[-1].is_open else None
                self._index.sync(turns)
            gk = self.gatekeeper
            system_texts = _system_texts(system)
            if system_texts != gk.system_prompt:
                gk.system_prompt = system_texts
            self._system, self._turns, self._version = system, turns, version
            self._last_id = messages[-1].id if messages else None
            self._by_turn_id = {self._ids[t.key]: t for t in turns}

    def _extend(self, added: Sequence[Message]) -> bool:
        """Take in messages added at the end of the state synced last (caller holds the lock),
        in time proportional to them: the last turn (or the open one) is regrouped with them.
        False, changing nothing, when a full sync is needed instead."""
        if not added:
            return True
        tail = self._open if self._open is not None else (self._turns[-1] if self._turns else None)
        if tail is None:  # no turn yet (leading system messages only): the full sync is as cheap
            return False
        if _answers_before(tail.messages, added):  # a result for a call of an older turn: grouped whole
            return False
        _, regrouped = group_turns([*tail.messages, *added])
        opened = regrouped.pop() if regrouped[-1].is_open else None
        if not self._index.extend(regrouped):
            return False
        if self._open is None:
            self._turns[-1:] = regrouped
        else:
            self._turns.extend(regrouped)
        for turn in regrouped:
            self._by_turn_id[self._ids[turn.key]] = turn
        self._open, self._last_id = opened, added[-1].id
        return True

    def explain(
        self,
        query: str,
        *,
        token_budget: int | None = None,
        exclude_keys: Collection[str] = (),
        include_open: IncludeOpen = True,
    ) -> Selection:
        """The gatekeeper's selection for ``query`` over the current state (``token_budget``
        overrides the budget for this call; ``exclude_keys`` is a list of the keys of turns not to
        select: one key as a string, ``None`` or another type raises :class:`InvalidTypeError`).

        With ``include_open`` (the default), the unanswered user messages right before the
        open one (a pasted text, then the question) belong to the open turn while together
        they cost at most the budget (:meth:`open_run`): they are not candidates, and the
        earlier turns get the budget they leave.  ``include_open="fits"`` charges the open turn
        too and leaves it out (its run then earlier turns) when it does not fit: for a caller
        whose own new message is the query, such as a chain over a stored history
        (:data:`IncludeOpen`).  The leading system messages are the gatekeeper's system
        prompt, each priced as the message :meth:`select_messages` sends (its text's count and
        one ``message_overhead``); when they and the rest of the pinned content alone exceed
        the budget, the gatekeeper's ``on_overflow`` applies."""
        exclude, budget, _, _ = self._plan(token_budget, exclude_keys, include_open)
        return self.gatekeeper.explain(query, token_budget=budget, exclude=exclude)  # not under the lock

    def open_run(self, token_budget: int | None = None) -> tuple[tuple[MessageTurn, ...], int]:
        """``(turns, tokens)``: the unanswered user messages right before the open turn, as the
        turns they are indexed as, oldest first, that join it while together they cost at most
        ``token_budget`` (default the gatekeeper's) less the pinned content, and what they
        cost.  Older ones stay earlier turns, gated as any other (a long run of unanswered
        messages is not sent whole).  Empty when the last message is answered or no unanswered
        message comes before it.  The turns hold copies of the transcript's messages (as
        :meth:`select_messages` returns), so changing them never changes its history."""
        budget = None if token_budget is None else require_budget(token_budget)
        self.sync()
        with self._lock:
            turns, spent = self._open_run(self.gatekeeper.token_budget if budget is None else budget)
        return tuple(MessageTurn(t.key, tuple(map(detached, t.messages))) for t in turns), spent

    async def aopen_run(self, token_budget: int | None = None) -> tuple[tuple[MessageTurn, ...], int]:
        """:meth:`open_run` with the transcript read in a worker thread."""
        return await asyncio.to_thread(self.open_run, token_budget)

    def _open_run(self, budget: int) -> tuple[tuple[MessageTurn, ...], int]:
        """:meth:`open_run` within ``budget`` less the pinned content (the system prompt, the
        summary, pinned turns: every selection pays for them first); caller holds the lock."""
        if self._open is None:
            return (), 0
        budget -= self.gatekeeper.pinned_cost()
        turns, start, spent = self._turns, len(self._turns), 0
        while start and turns[start - 1].is_open:
            added = self.gatekeeper.turn_cost(self._ids[turns[start - 1].key])
            if spent + added > budget:
                break
            spent += added
            start -= 1
        return tuple(turns[start:]), spent

    def _plan(
        self, token_budget: int | None, exclude_keys: Collection[str], include_open: IncludeOpen
    ) -> tuple[list[int], int | None, tuple[str, ...], bool]:
        """Sync, then ``(turn ids not to select, the budget for the selection, keys of the open
        run, whether the open turn is sent)``: :meth:`open_run` (with ``include_open``) is left
        out and paid for first; with ``include_open="fits"`` the open turn is paid for too, and
        left out with its run when they do not fit beside the pinned content.  The arguments
        are checked before anything is read."""
        excluded = require_items(
            exclude_keys, "exclude_keys", str,
            "pass the keys (each the id of a turn's first message) in a list, e.g. [message.id], or () for none",
        )
        if include_open not in (True, False, "fits"):
            raise InvalidTypeError(f"include_open must be True, False or 'fits', got {include_open!r}")
        if token_budget is not None:
            require_budget(token_budget)
        self.sync()
        self.gatekeeper.take_cached()  # saved vectors read here (aexplain: in a worker thread)
        with self._lock:
            total = self.gatekeeper.token_budget if token_budget is None else token_budget
            run: tuple[MessageTurn, ...] = ()
            spent = own = 0
            sent = bool(include_open) and self._open is not None
            if sent:
                own = self._open_cost() if include_open == "fits" else 0
                if own and self.gatekeeper.pinned_cost() + own > total:
                    sent, own = False, 0  # the open turn does not fit: it is left out, its run gated as earlier turns
                else:
                    run, spent = self._open_run(total - own)
            if spent + own:
                token_budget = max(0, total - spent - own)
            keys = [*excluded, *(turn.key for turn in run)]
            return [self._ids[k] for k in keys if k in self._ids], token_budget, tuple(t.key for t in run), sent

    def _open_cost(self) -> int:
        """Tokens the open turn costs as the gatekeeper prices a turn (caller holds the lock)."""
        assert self._open is not None
        user, assistant, tools = _indexed(self._open.texts)
        return self.gatekeeper.cost_of(user, assistant, tools)

    def embed_pending(self) -> int:
        """Bring the gatekeeper in step, then embed the turns not yet embedded and wait
        (see :meth:`ContextGatekeeper.embed_pending`; a background worker does it anyway)."""
        self.sync()
        return self.gatekeeper.embed_pending()

    async def aembed_pending(self) -> int:
        """:meth:`embed_pending` without blocking the event loop."""
        await asyncio.to_thread(self.sync)
        return await self.gatekeeper.aembed_pending()

    def select_messages(
        self,
        query: str,
        *,
        include_open: IncludeOpen = True,
        token_budget: int | None = None,
        exclude_keys: Collection[str] = (),
    ) -> list[Message]:
        """The messages to send with ``query``: leading system messages, the selected
        turns, and (``include_open``) the open, unanswered turn, in transcript order (with
        the unanswered user messages right before it that fit: see :meth:`explain`)."""
        exclude, budget, run, sent = self._plan(token_budget, exclude_keys, include_open)
        selection = self.gatekeeper.explain(query, token_budget=budget, exclude=exclude)
        return self._messages(selection, sent, run)

    def _messages(self, selection: Selection, include_open: bool, run: tuple[str, ...] = ()) -> list[Message]:
        """A selection's messages as of now: a turn removed meanwhile is left out, and a
        turn's messages are always its current ones; the open run's turns (``run``, by key)
        come right before the open turn.  After the system messages the list starts on a user
        message, or on the assistant's greeting the transcript itself opens with (a question the
        user's first message answers, "Which product is failing?", must not be lost): a selected
        turn of tool calls or results before any question is left out when it would come first
        (a provider refuses a tool result whose call it was not sent)."""
        with self._lock:
            by_id, ids = self._by_turn_id, self._ids
            turns = [by_id[turn_id] for turn_id in selection.turn_ids if turn_id in by_id]
            while turns and turns[0].messages[0].role != "user" and not self._greeting(turns[0]):
                del turns[0]  # a tool call or result before any question: the view starts on a user message
            kept = [m for turn in turns for m in turn.messages]
            tail: list[Message] = []
            if include_open and self._open:
                tail = [m for key in run if ids.get(key) in by_id for m in by_id[ids[key]].messages]
                tail += self._open.messages
            return list(map(detached, self._system + kept + tail))

    def _greeting(self, turn: MessageTurn) -> bool:
        """Whether ``turn`` is the assistant's greeting the transcript opens with: its first
        turn, plain assistant messages (no tool call) before any question (caller holds the lock)."""
        return bool(self._turns) and self._turns[0] is turn and all(
            m.role == "assistant" and not m.metadata.get("tool_calls") for m in turn.messages
        )

    async def aexplain(
        self,
        query: str,
        *,
        token_budget: int | None = None,
        exclude_keys: Collection[str] = (),
        include_open: IncludeOpen = True,
    ) -> Selection:
        """:meth:`explain` without blocking the event loop: the transcript is read in a
        worker thread and the query's embedding is awaited; no lock is waited for on the
        event loop thread."""
        exclude, budget, _, _ = await asyncio.to_thread(self._plan, token_budget, exclude_keys, include_open)
        return await self.gatekeeper.aexplain(query, token_budget=budget, exclude=exclude)

    async def aselect_messages(
        self,
        query: str,
        *,
        include_open: IncludeOpen = True,
        token_budget: int | None = None,
        exclude_keys: Collection[str] = (),
    ) -> list[Message]:
        """:meth:`select_messages` without blocking the event loop.  A revision that lands
        while the embedder works is taken into account as far as it can: a turn it
        removed is not returned, and a turn's messages are always its current ones."""
        exclude, budget, run, sent = await asyncio.to_thread(self._plan, token_budget, exclude_keys, include_open)
        selection = await self.gatekeeper.aexplain(query, token_budget=budget, exclude=exclude)
        return await run_locked(self._lock, self._messages, selection, sent, run)

    def _message_id(self, digest: str) -> str:
        """The id of the first message of the turn whose embedded text has ``digest`` (``""``
        when none has).  Hashes only turns whose text changed since the last lookup.

        Called by the embedding lane when it saves vectors, which may be while a sync is
        placing turns: the gatekeeper may already hold a turn whose key the index has not
        recorded yet.  The lookup therefore waits for the sync (it holds the same lock;
        the lane holds no lock of the gatekeeper when it saves, and the sync takes this
        lock before the gatekeeper's, so the order is always the same).

        A key remembered for ``digest`` is returned only while its turn still holds that
        text: a message edited or deleted since it was hashed would otherwise be given the
        vector of a text it no longer holds (and the message that holds it now, none)."""
        with self._lock:
            known = self._digests.get(digest)
            if known is not None and self._holds(known, digest):
                return known
            gk, seen = self.gatekeeper, self._hashed
            for key, turn_id in self._ids.items():
                try:
                    turn = gk.get_turn(turn_id)
                except Exception:  # noqa: BLE001 -- removed meanwhile
                    continue
                held = seen.get(key)
                if held is not None and held[0] is turn:  # a changed turn is a new Turn object
                    continue
                hashed = text_hash(turn_text(turn))
                seen[key] = (turn, hashed)
                self._digests[hashed] = key
            for key in [k for k in seen if k not in self._ids]:  # turns gone: their texts are held by no key
                del seen[key]
            known = self._digests.get(digest)
            if known is not None and self._holds(known, digest):
                return known
            # another turn holds the same text (the one remembered was edited or removed)
            found = next((key for key, (_, hashed) in seen.items()
                          if hashed == digest and self._holds(key, digest)), "")
            if found:
                self._digests[digest] = found
            else:
                self._digests.pop(digest, None)
            return found

    def _holds(self, key: str, digest: str) -> bool:
        """Whether the turn with ``key`` holds the text with ``digest`` now: it is still a turn
        of the gatekeeper, unchanged since it was hashed with that digest (caller holds the lock)."""
        held, turn_id = self._hashed.get(key), self._ids.get(key)
        if held is None or turn_id is None or held[1] != digest:
            return False
        try:
            return self.gatekeeper.get_turn(turn_id) is held[0]
        except Exception:  # noqa: BLE001 -- removed meanwhile
            return False


class _MessageVectorCache:
    """A vector cache that hands the store the message id of each vector's turn
    (:meth:`StoreVectorCache.put_many` takes ``(message_id, key, vector)`` items), and never
    saves the vector of a text no current turn holds (edited away or deleted while it was
    embedded: the store would keep it with no message to drop it with)."""

    saves_by_message = True
    """The store keeps each vector with its message and drops it with the message: the semantic
    channel saves a vector again when a turn brings back a removed turn's text (an undone
    deletion), though it finds the vector in memory."""

    def __init__(self, cache: Any, gate: TranscriptGate) -> None:
        self.cache = cache
        self._gate = gate

    def __repr__(self) -> str:
        return f"_MessageVectorCache({self.cache!r})"

    def get(self, key: tuple[str, str]) -> Any:
        return self.cache.get(key)

    def put(self, key: tuple[str, str], vector: Any) -> None:
        self.put_many([(key, vector)])

    def put_many(self, items: Iterable[tuple[tuple[str, str], Any]]) -> None:
        rows = [(self._gate._message_id(key[1]), key, vector) for key, vector in items]
        held = [row for row in rows if row[0]]  # "": no current turn holds the text
        if held:
            self.cache.put_many(held)

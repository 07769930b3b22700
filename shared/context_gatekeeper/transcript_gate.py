"""Selection over a transcript's current state: a gatekeeper that follows a transcript.

:class:`TranscriptGate` groups the transcript's messages into turns (a user message
and every assistant and tool message that answers it) and keeps a
:class:`~context_gatekeeper.gatekeeper.ContextGatekeeper` in step with them through
``replace_turn`` / ``remove_turn`` / ``insert_turn``, so after any revision (an
edit, an undo, a revert) no superseded text can be selected, and only the turns a
revision touched are re-indexed.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from .errors import InvalidInputError
from .gatekeeper import ContextGatekeeper
from .messages import Message
from .selection import Selection
from .transcript import Transcript

__all__ = ["MessageTurn", "IndexedTurn", "group_turns", "TurnIndex", "TranscriptGate"]


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
        """(user text, assistant text, tool texts) as the gatekeeper indexes them."""
        user = "\n".join(m.content for m in self.messages if m.role == "user")
        assistant = "\n".join(m.content for m in self.messages if m.role == "assistant")
        tools = tuple(m.content for m in self.messages if m.role == "tool")
        return user, assistant, tools

    @property
    def is_open(self) -> bool:
        """A user message nobody has answered yet."""
        return all(m.role == "user" for m in self.messages)


class IndexedTurn(Protocol):
    """What :class:`TurnIndex` reads of a turn: a key and the texts it indexes
    (:class:`MessageTurn` is one; adapters may pass lighter objects)."""

    @property
    def key(self) -> str: ...

    @property
    def texts(self) -> tuple[str, str, tuple[str, ...]]: ...


def group_turns(messages: Sequence[Message]) -> tuple[list[Message], list[MessageTurn]]:
    """Split a state into leading system messages and turns.

    A turn starts at each user message; assistant and tool messages join the turn
    before them (a tool call is never separated from its result); answers before any
    user message form a turn of their own.  System messages after the start stay in
    the turn where they stand.
    """
    system: list[Message] = []
    turns: list[list[Message]] = []
    for message in messages:
        if message.role == "system" and not turns:
            system.append(message)
        elif message.role == "user" or not turns:
            turns.append([message])
        else:
            turns[-1].append(message)
    return system, [MessageTurn(t[0].id, tuple(t)) for t in turns]


class TurnIndex:
    """Keeps a :class:`ContextGatekeeper` in step with a list of turns, incrementally.

    The one sync routine behind :class:`TranscriptGate` and the adapters' per-thread
    indexes.  A turn is a :class:`MessageTurn` or anything with its ``key`` and
    ``texts`` (:class:`IndexedTurn`).  Turns are identified by :attr:`MessageTurn.key`: a key seen before whose
    texts changed is re-indexed in place (``replace_turn``), a key no longer present is
    removed, a new key is inserted where it stands; when keys the gatekeeper already
    holds now stand in another order, the index is rebuilt.  Not thread-safe on its own:
    callers hold their lock around :meth:`sync` and the gatekeeper call that follows.

    Attributes:
        gatekeeper: the gatekeeper driven.
        ids: turn key -> gatekeeper turn id, for every turn of the last sync.
    """

    def __init__(self, gatekeeper: ContextGatekeeper) -> None:
        self.gatekeeper = gatekeeper
        self.ids: dict[str, int] = {}
        self._texts: dict[str, tuple[str, str, tuple[str, ...]]] = {}
        self._order: list[str] = []
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
            gk.clear()  # a kept turn moved (a set, a revert, a reordered list): rebuild
            self.ids.clear()
            self._texts.clear()
        if not self.ids and turns:
            self.builds += 1
        for key in [k for k in self.ids if k not in present]:
            gk.remove_turn(self.ids.pop(key))
            del self._texts[key]
        previous: int | None = None
        for turn in turns:
            texts = turn.texts
            user, assistant, tools = texts
            if not (user.strip() or assistant.strip() or any(t.strip() for t in tools)):
                user = "[no text]"  # a turn of empty messages still holds its place
            turn_id = self.ids.get(turn.key)
            if turn_id is None:
                turn_id = gk.insert_turn(previous, user, assistant, tool_texts=tools)
                self.ids[turn.key] = turn_id
            elif self._texts[turn.key] != texts:
                gk.replace_turn(turn_id, user, assistant, tool_texts=tools)
            self._texts[turn.key] = texts
            previous = turn_id
        self._order = keys

    def keys_by_id(self) -> dict[int, str]:
        """Gatekeeper turn id -> turn key."""
        return {turn_id: key for key, turn_id in self.ids.items()}


class TranscriptGate:
    """Topic-gated selection over a transcript's current state.

    >>> t = Transcript("gate-demo")
    >>> _ = t.append(user="How long should a Redis lock TTL be?", assistant="Longer than the longest job.")
    >>> _ = t.append(user="By the way, best espresso grind?", assistant="Fine, like table salt.")
    >>> gate = TranscriptGate(t, token_counter=len, message_overhead=0)
    >>> [m.content for m in gate.select_messages("And the Redis lock watchdog?")][:1]
    ['How long should a Redis lock TTL be?']

    Args:
        transcript: the transcript to follow.
        gatekeeper: a configured gatekeeper to drive, or ``None`` to create one from
            ``gatekeeper_options`` (any :class:`ContextGatekeeper` keyword).
    """

    def __init__(self, transcript: Transcript, gatekeeper: ContextGatekeeper | None = None, **gatekeeper_options: Any) -> None:
        if gatekeeper is not None and gatekeeper_options:
            raise TypeError("pass either a gatekeeper or options to build one, not both")
        self.transcript = transcript
        self.gatekeeper = gatekeeper or ContextGatekeeper(**gatekeeper_options)
        self._lock = threading.RLock()
        self._index = TurnIndex(self.gatekeeper)
        self._ids = self._index.ids  # turn key -> gatekeeper turn id (the same dict)
        self._turns: list[MessageTurn] = []
        self._system: list[Message] = []
        self._open: MessageTurn | None = None
        self._version: tuple[int, float] | None = None

    def sync(self) -> None:
        """Bring the gatekeeper in step with the transcript's current state (cheap when nothing changed)."""
        with self._lock:
            version = self.transcript.version
            if version == self._version:
                return
            system, turns = group_turns(self.transcript.messages)
            self._open = turns.pop() if turns and turns[-1].is_open else None
            self._index.sync(turns)
            gk = self.gatekeeper
            system_text = "\n".join(m.content for m in system) or None
            if system_text != gk.system_prompt:
                gk.system_prompt = system_text
            self._system, self._turns, self._version = system, turns, version

    def explain(self, query: str, *, token_budget: int | None = None, exclude_keys: Collection[str] = ()) -> Selection:
        """The gatekeeper's selection for ``query`` over the current state (``token_budget``
        overrides the budget for this call; ``exclude_keys`` names turns, by key, not to select)."""
        self.sync()
        with self._lock:
            exclude = [self._ids[k] for k in exclude_keys if k in self._ids]
            return self.gatekeeper.explain(query, token_budget=token_budget, exclude=exclude)

    def select_messages(
        self,
        query: str,
        *,
        include_open: bool = True,
        token_budget: int | None = None,
        exclude_keys: Collection[str] = (),
    ) -> list[Message]:
        """The messages to send with ``query``: leading system messages, the selected
        turns, and (``include_open``) the open, unanswered turn, in transcript order."""
        with self._lock:
            selection = self.explain(query, token_budget=token_budget, exclude_keys=exclude_keys)
            by_id = {self._ids[t.key]: t for t in self._turns}
            kept = [m for turn_id in selection.turn_ids for m in by_id[turn_id].messages]
            tail = list(self._open.messages) if include_open and self._open else []
            return self._system + kept + tail

"""Chat and edit logic of the terminal chat, with no screen: testable on its own.

:class:`ChatSession` ties a :class:`~context_gatekeeper.Transcript` (the durable
state), a :class:`~context_gatekeeper.TranscriptGate` (what each call may see) and
two models (one answers, one edits).  Rules:

* A chat exchange is appended only when the answer has arrived, user message and
  answer together (turn-atomic): a model error or Ctrl-C during the call leaves
  the transcript exactly as it was.
* Each call sends the system prompt, the gated earlier turns and the new message;
  the :class:`LastCall` (selection and messages) is kept for ``/context``.
* An edit is computed as a preview.  No change: nothing is committed.  A proposal
  deleting more than ``max_deletion_share`` of the text is returned unapplied so
  the caller can ask the user; anything else is committed at once (``/undo``
  takes it back).
* Pins are kept by the id of the turn's first message, so they follow a turn
  through edits.  They are stored with the conversation, in the same store: a
  companion *pin record* (the session :func:`pin_record_id` names, one system
  message holding the pinned ids as JSON), written in one store transaction each
  time they change, and read back whenever they are used, so pins another process
  (another chat on the same database) changed are seen, and a pin or unpin is a
  read-modify-write that keeps them (never a write over a stale copy).  A pin whose turn an edit deleted is kept but ignored (an ``/undo`` that
  brings the turn back brings its pin back too).  Lists of conversations should
  leave pin records out (:func:`is_pin_record`, :func:`chat_sessions`), and
  deleting a conversation should delete its pins too (:meth:`ChatSession.purge`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ..integration import (
    DEFAULT_MAX_DELETION_SHARE,
    MessageTurn,
    Put,
    as_edit_model,
    deleted_share,
    group_turns,
    new_message_id,
    replace_lone_surrogates,
)
from .. import (
    GatekeeperError,
    InvalidInputError,
    Message,
    Proposal,
    Revision,
    Selection,
    StaleHeadError,
    Store,
    Transcript,
    TranscriptGate,
    TruncatedReplyError,
    UnknownTurnError,
    resolve_token_counter,
)

__all__ = [
    "ChatSession",
    "LastCall",
    "EditOutcome",
    "DEFAULT_SYSTEM_PROMPT",
    "PIN_RECORD_PREFIX",
    "pin_record_id",
    "is_pin_record",
    "chat_sessions",
]

DEFAULT_SYSTEM_PROMPT = "You are a helpful, concise assistant."

PIN_RECORD_PREFIX = "gatekeeper-chat-pins:"
"""Session ids starting with this hold a conversation's pins, not a conversation."""
_PIN_MESSAGE_ID = "pins"
_PIN_WRITE_TRIES = 8
"""How often a pin change is done again over pins another process wrote at the same moment."""


def pin_record_id(session_id: str) -> str:
    """The id of the store session that keeps the pins of conversation ``session_id``.

    >>> pin_record_id("work")
    'gatekeeper-chat-pins:work'
    """
    return PIN_RECORD_PREFIX + session_id


def is_pin_record(session_id: str) -> bool:
    """Whether store session ``session_id`` holds pins rather than a conversation.

    >>> is_pin_record("gatekeeper-chat-pins:work"), is_pin_record("work")
    (True, False)
    """
    return session_id.startswith(PIN_RECORD_PREFIX)


def chat_sessions(store: Store) -> list[str]:
    """The conversations of ``store`` (``store.sessions()`` without the pin records)."""
    return [s for s in store.sessions() if not is_pin_record(s)]


def _read_pins(record: Transcript, messages: Sequence[Message] | None = None) -> tuple[set[str], str | None]:
    """The pinned ids pin record ``record`` holds (or ``messages``, one of its states), and
    what is wrong with them (None when they are usable)."""
    if messages is None:
        messages = record.messages
    if not messages:
        return set(), None
    try:
        pinned = json.loads(messages[-1].content)["pinned"]
    except (ValueError, KeyError, TypeError):
        pinned = None
    if not isinstance(pinned, list) or not all(isinstance(p, str) for p in pinned):
        return set(), (
            f"the pins stored for session {record.session_id[len(PIN_RECORD_PREFIX):]!r} cannot be read "
            "(not the JSON list of ids the chat writes); the chat starts with no pins, and the next "
            "/pin or /unpin writes a fresh list"
        )
    return set(pinned), None


def _pins_message(pinned: set[str]) -> Message:
    """The one message of a pin record holding ``pinned``."""
    return Message(_PIN_MESSAGE_ID, "system", json.dumps({"pinned": sorted(pinned)}, ensure_ascii=False))


@dataclass(frozen=True)
class LastCall:
    """What the chat model was sent on the last call, and why.

    Attributes:
        query: the user's new message.
        selection: the gatekeeper's decision and per-turn scores for it.
        sent: the exact messages the model received (system prompt first, query last).
        turn_count: how many earlier turns the transcript held at the time.
    """

    query: str
    selection: Selection
    sent: tuple[dict[str, str], ...]
    turn_count: int


@dataclass(frozen=True)
class EditOutcome:
    """The result of :meth:`ChatSession.edit`.

    Attributes:
        proposal: what the editing model proposed.
        revision: the committed revision, or None (no change, or awaiting confirmation).
        deleted_share: the share of the conversation's text the proposal deletes.
        needs_confirmation: the proposal deletes more than the limit and was not applied.
    """

    proposal: Proposal
    revision: Revision | None
    deleted_share: float
    needs_confirmation: bool

    @property
    def changed(self) -> bool:
        """Whether the proposal changes anything."""
        return bool(self.proposal.changes)


class ChatSession:
    """One conversation: chat through the gate, edit, undo, pin.

    Args:
        transcript: the durable conversation (its ``model`` is not used).
        chat_model: answers chat messages (any model the core's protocol accepts).
        editor: rewrites the history on ``/edit`` (same protocol).
        token_budget: tokens the earlier turns (and pins) may use per call.
        system_prompt: sent first on every call (outside the transcript and the budget).
        max_deletion_share: edits deleting more than this share need confirmation.
        token_counter: counts tokens for the gate and the deletion check (default tiktoken).
        keep_pins: store pins in the transcript's store (the pin record) and read them
            back on opening; False keeps them in this object only.

    Attributes:
        pins_problem: why the stored pins could not be read (the session then opens
            with none), or None; a front end shows it once.
        last_call: what the chat model was sent on the last :meth:`ask`, or None.
    """

    def __init__(
        self,
        transcript: Transcript,
        chat_model: Any,
        editor: Any,
        *,
        token_budget: int = 4000,
        system_prompt: str | None = DEFAULT_SYSTEM_PROMPT,
        max_deletion_share: float = DEFAULT_MAX_DELETION_SHARE,
        token_counter: Any = None,
        keep_pins: bool = True,
    ) -> None:
        self.transcript = transcript
        self.chat_model = as_edit_model(chat_model)
        self.editor = editor
        self.token_budget = token_budget
        self.system_prompt = system_prompt
        self.max_deletion_share = max_deletion_share
        self._count = resolve_token_counter(token_counter)
        self.gate = TranscriptGate(
            transcript, token_budget=token_budget, token_counter=self._count, on_overflow="keep_pinned"
        )
        self._pinned: set[str] = set()
        self.pins_problem: str | None = None
        self._pin_record: Transcript | None = None
        if keep_pins:
            record_id = pin_record_id(transcript.session_id)
            try:
                self._pin_record = Transcript(record_id, store=transcript.store)
                self._pinned, self.pins_problem = _read_pins(self._pin_record)
            except GatekeeperError as exc:  # a pin log that cannot load must not stop the chat
                self._pin_record = None
                self.pins_problem = (
                    f"the pins stored for session {transcript.session_id!r} cannot be loaded ({exc}); "
                    f"this run keeps pins in memory only (store session {record_id!r} holds them)"
                )
        self.last_call: LastCall | None = None

    # -- turns --------------------------------------------------------------------------
    def turns(self) -> list[tuple[int, MessageTurn]]:
        """Answered turns as ``(turn number, turn)`` in order; the numbers ``/pin`` takes."""
        self.gate.sync()
        _, turns = group_turns(self.transcript.messages)
        if turns and turns[-1].is_open:
            turns.pop()
        return [(t.id, turn) for t, turn in zip(self.gate.gatekeeper.turns, turns)]

    @property
    def pinned(self) -> frozenset[str]:
        """Ids of the first messages of the pinned turns, as stored now (some may belong to
        turns an edit deleted); change them with :meth:`pin`, :meth:`unpin` or :meth:`load`."""
        return frozenset(self._current_pins())

    def pin(self, number: int) -> MessageTurn:
        """Always keep turn ``number`` in context, from now on and when the session is
        resumed (:class:`UnknownTurnError` if there is no such turn)."""
        turn = self._turn(number)
        self._change_pins(lambda pinned: pinned | {turn.key})
        return turn

    def unpin(self, number: int) -> MessageTurn:
        """Stop pinning turn ``number`` (:class:`UnknownTurnError` if there is no such turn)."""
        turn = self._turn(number)
        self._change_pins(lambda pinned: pinned - {turn.key})
        return turn

    def pinned_numbers(self) -> list[int]:
        """Numbers of the pinned turns that still exist."""
        pinned = self._current_pins()
        return [n for n, turn in self.turns() if turn.key in pinned]

    def _current_pins(self) -> set[str]:
        """The pins as stored now (another process may have changed them since), kept here
        too; ``pins_problem`` says whether they could be read."""
        if self._pin_record is not None:
            self._pinned, self.pins_problem = _read_pins(self._pin_record)
        return self._pinned

    def _change_pins(self, change: Callable[[set[str]], set[str]]) -> None:
        """Apply ``change`` to the stored pins, read-modify-write: a pin another process stored
        meanwhile is kept, and a failed write changes nothing.

        The record is read at a head, changed and written whole; when the write did not
        land right on that head (another process wrote in between, and this write covered
        it), the change is done again on what that process wrote.
        """
        record = self._pin_record
        if record is None:  # pins kept in this object only
            self._pinned = change(set(self._pinned))
            return
        seen = source = record.head  # seen: the head the write must land on; source: the state to change
        for attempt in range(_PIN_WRITE_TRIES):
            current, problem = _read_pins(record, record.snapshot(source))
            wanted = change(set(current))
            if attempt == 0 and wanted == current and problem is None:
                self._pinned, self.pins_problem = current, None
                return
            try:
                written = record.set([_pins_message(wanted)])
            except StaleHeadError:  # another process wrote between the read and the write: nothing written
                seen = source = record.head
                continue
            if not written.changes or written.number == seen + 1:
                self._pinned, self.pins_problem = wanted, None  # a fresh list replaced one that could not be read
                return
            seen, source = written.number, written.number - 1  # change again what the other process wrote
        raise StaleHeadError(
            f"the pins of session {self.transcript.session_id!r} kept changing in another process "
            f"({_PIN_WRITE_TRIES} tries); nothing more was changed here: pin or unpin again"
        )

    def _turn(self, number: int) -> MessageTurn:
        turns = dict(self.turns())
        if number not in turns:
            shown = ", ".join(map(str, turns)) or "none yet"
            raise UnknownTurnError(f"no turn {number}; turns are numbered as /show lists them ({shown})")
        return turns[number]

    def _apply_pins(self, turns: Iterable[tuple[int, MessageTurn]], pinned: set[str]) -> None:
        gk = self.gate.gatekeeper
        wanted = {n for n, turn in turns if turn.key in pinned}
        for number in set(gk.pinned) - wanted:
            gk.unpin(number)
        for number in wanted - set(gk.pinned):
            gk.pin(number)

    # -- chat ---------------------------------------------------------------------------
    def prepare(self, text: str) -> LastCall:
        """The gated messages to send with ``text``, and why (no side effects on the transcript)."""
        text = text.strip()
        if not text:
            raise InvalidInputError("an empty message: type something to send")
        turns = self.turns()
        self._apply_pins(turns, self._current_pins())
        selection = self.gate.explain(text, token_budget=self.token_budget)
        by_number = dict(turns)
        system, _ = group_turns(self.transcript.messages)
        kept: list[Message] = list(system)
        for number in selection.turn_ids:
            kept.extend(by_number[number].messages)
        sent = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        sent += [{"role": m.role, "content": m.content} for m in kept]
        sent.append({"role": "user", "content": text})
        return LastCall(text, selection, tuple(sent), len(turns))

    def ask(self, text: str) -> str:
        """Send ``text`` with the gated context; append the exchange once the answer is in.

        Raises whatever the model raised (``ModelUnavailableError``, ``EditError``,
        ``KeyboardInterrupt``) with the transcript unchanged.
        """
        call = self.prepare(text)
        self.last_call = call
        reply: object  # a Reply, or what a TruncatedReplyError kept of one
        try:
            reply = self.chat_model.complete([dict(m) for m in call.sent])
        except TruncatedReplyError as exc:  # a chat answer cut off is still the answer the user saw
            reply = exc.partial
        answer = replace_lone_surrogates(reply if isinstance(reply, str) else str(reply))
        self.transcript.append(user=call.query, assistant=answer)
        return answer

    # -- edits --------------------------------------------------------------------------
    def edit(self, instruction: str) -> EditOutcome:
        """Revise the history as ``instruction`` says (see the module docstring for when it commits)."""
        proposal = self.transcript.edit(
            instruction, model=self.editor, preview=True, allow_large_deletion=True
        )
        assert isinstance(proposal, Proposal)
        share = deleted_share(self.transcript.snapshot(proposal.base), proposal.changes, self._count)
        if not proposal.changes:
            return EditOutcome(proposal, None, share, False)
        if share > self.max_deletion_share:
            return EditOutcome(proposal, None, share, True)
        return EditOutcome(proposal, self.transcript.commit(proposal), share, False)

    def commit(self, proposal: Proposal) -> Revision:
        """Apply a proposal the user confirmed."""
        return self.transcript.commit(proposal)

    def load(self, messages: Iterable[Message], pinned: Iterable[str] = ()) -> Revision:
        """Make ``messages`` the current state as one revision (``/undo`` takes it back).

        Ids the current state holds with the same role are kept (so loading what was
        just saved changes nothing); ids this session used before get fresh ones,
        since ids are never reused.  ``pinned`` (ids of first messages) replaces the
        pins, and is stored like :meth:`pin` stores them.
        """
        current = {m.id: m for m in self.transcript.messages}
        used = {c.message.id for r in self.transcript.history() for c in r.changes if isinstance(c, Put)}
        renamed: dict[str, str] = {}
        fixed: list[Message] = []
        for message in messages:
            same = current.get(message.id)
            if (same is None or same.role != message.role) and (message.id in used or message.id in renamed):
                renamed[message.id] = new_message_id()
                message = Message(renamed[message.id], message.role, message.content)
            fixed.append(message)
        revision = self.transcript.set(fixed)
        wanted = {renamed.get(p, p) for p in pinned}
        self._change_pins(lambda _: wanted)
        return revision

    def purge(self) -> None:
        """Erase the conversation entirely, its history and its pins included."""
        self.transcript.purge()
        if self._pin_record is not None:
            self._pin_record.purge()
        self._pinned = set()
        self.last_call = None

    def last_change(self) -> Revision | None:
        """The most recent revision that is not an append (what a bare ``/diff`` shows)."""
        return next((r for r in reversed(self.transcript.history()) if r.kind != "append"), None)

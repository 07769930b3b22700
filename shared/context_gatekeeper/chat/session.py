"""Chat and edit logic of the terminal chat, with no screen: testable on its own.

:class:`ChatSession` ties a :class:`~context_gatekeeper.Transcript` (the durable
state), a :class:`~context_gatekeeper.TranscriptGate` (what each call may see) and
two models (one answers, one edits).  Rules:

* A chat exchange is appended only when the answer has arrived, user message and
  answer together (turn-atomic): a model error or Ctrl-C during the call leaves
  the transcript exactly as it was.
* Each call sends the system prompt, the gated earlier turns and the new message;
  the :class:`LastCall` (selection and messages) is kept for ``/context``.  The call
  reads the conversation once and selects over that state (another chat on the same
  database may write at any moment: the next call sees it).
* Turns are numbered 1 to N by their position: the terminal's ``/show``, ``/pin`` and
  ``/context``, the web page's turns and pins, and the :class:`LastCall`'s selection use
  the same numbers, which an undo, a redo or a restart never puts out of order (the
  gate's own turn ids do: they are never shown).
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
  read-modify-write that keeps them (never a write over a stale copy).  A pin whose
  turn an edit deleted is kept but ignored (an ``/undo`` that brings the turn back
  brings its pin back too).  A :meth:`~ChatSession.load` replaces the pins; the pin
  record remembers what it replaced, so undoing the load (and redoing it) takes the
  pins back too.  A :meth:`~ChatSession.revert` to a revision before a load takes the
  load's pins back the same way (and one to a revision a load had made, since undone,
  makes them again); the revert's own pin change is remembered like a load's, so
  undoing the revert puts the pins back.  A load that changes no message records
  nothing and leaves the pins as they are.  Lists of conversations should leave pin
  records out (:func:`is_pin_record`, :func:`chat_sessions`), and deleting a
  conversation should delete its pins too (:meth:`ChatSession.purge`).  :mod:`.pins` holds the record's
  format and the rules for new conversations' names.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any, cast

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
    EditModel,
    FilteredReplyError,
    GatekeeperError,
    InvalidInputError,
    Message,
    Proposal,
    Revision,
    Selection,
    StaleHeadError,
    Transcript,
    TranscriptGate,
    TruncatedReplyError,
    UnknownTurnError,
    resolve_token_counter,
)
from .pins import (  # the pin record and name rules, kept importable from here too
    MAX_SESSION_NAME,
    PIN_RECORD_PREFIX,
    LoadedPins,
    chat_sessions,
    check_session_name,
    is_pin_record,
    pin_changes_in_effect,
    pin_record_id,
    pins_after,
    pins_message,
    read_loads,
    read_pins,
)

__all__ = [
    "ChatSession",
    "LastCall",
    "chat_reply",
    "chat_reply_pieces",
    "EditOutcome",
    "DEFAULT_SYSTEM_PROMPT",
    "PIN_RECORD_PREFIX",
    "pin_record_id",
    "is_pin_record",
    "chat_sessions",
    "check_session_name",
    "MAX_SESSION_NAME",
]

DEFAULT_SYSTEM_PROMPT = "You are a helpful, concise assistant."

_PIN_WRITE_TRIES = 8
"""How often a pin change is done again over pins another process wrote at the same moment."""


def _kept_extras(message: Message, held: Message) -> Message:
    """``message`` with the parts and metadata of ``held`` (the version the conversation holds
    for its id) where it has none of its own (a session file written before ``/save`` kept them)."""
    parts = message.parts if message.parts is not None else held.parts
    metadata = message.metadata or held.metadata
    if parts is message.parts and metadata is message.metadata:
        return message
    return replace(message, parts=parts, metadata=metadata)


def chat_reply(model: EditModel, sent: list[dict[str, str]]) -> object:
    """The chat model's answer to ``sent``.  An answer cut off at the output limit, or stopped
    by the provider's policy, is still the answer the user saw when it holds text; with no
    text at all there is nothing to show or store, and the error is raised (the message is
    not added: the user may send it again)."""
    try:
        return model.complete(sent)
    except (TruncatedReplyError, FilteredReplyError) as exc:
        partial = exc.partial
        if not (partial.strip() if isinstance(partial, str) else partial):
            raise
        return partial


def chat_reply_pieces(model: EditModel, sent: list[dict[str, str]]) -> Iterator[str]:
    """The chat model's answer to ``sent`` in text pieces, as they arrive: streamed when the
    model streams (:attr:`~context_gatekeeper.EditModel.streams`: the offline model, a
    LangChain chat model, a LlamaIndex LLM), else :func:`chat_reply`'s answer in one piece.
    Joined, the pieces are the answer :func:`chat_reply` gives: a streamed answer cut off
    at the output limit or stopped by the provider's policy stands when it holds text, and
    the error is raised when it holds none (the message is then not added)."""
    if not model.streams:
        reply = chat_reply(model, sent)
        yield reply if isinstance(reply, str) else str(reply)
        return
    try:
        yield from model.stream_text(sent)
    except (TruncatedReplyError, FilteredReplyError) as exc:
        partial = exc.partial
        if not (partial.strip() if isinstance(partial, str) else partial):
            raise


class _ReadOnce:
    """The conversation as :meth:`read` last read it, for the session's gate to follow.

    The gate reads its transcript on every sync; another chat on the same database may
    write between two of those reads, and the turns the gate selected would then not be
    the turns the session sends (a turn selected but unknown, a turn's text from before an
    edit).  Following this object instead, the gate sees the store only when the session
    reads it: one read per call, and everything the call does is over that one state.
    It has what a gate needs of a transcript, ``version`` and ``messages``.
    """

    def __init__(self, transcript: Transcript) -> None:
        self._transcript = transcript
        self._version: tuple[int, float] | None = None
        self._messages: tuple[Message, ...] = ()

    @property
    def version(self) -> tuple[int, float] | None:
        """The transcript's version when it was read (None before the first read)."""
        return self._version

    @property
    def messages(self) -> tuple[Message, ...]:
        """The state read."""
        return self._messages

    def read(self) -> tuple[Message, ...]:
        """Read the transcript's state now, and return it.  The version is read first: a state newer
        than the version it is kept under only makes the gate sync once more next time,
        whereas the other way round the gate would keep a stale state."""
        self._version = self._transcript.version
        self._messages = self._transcript.messages
        return self._messages


def _numbered(selection: Selection, numbers: Mapping[int, int]) -> Selection:
    """``selection`` with each of the gate's turn ids replaced by ``numbers[id]``, the turn's
    number as :meth:`ChatSession.turns` gives it (by position, 1 to N: the gate's ids go
    out of order after an undo or a redo and change after a restart, positions do not)."""

    def renumbered(ids: Iterable[int]) -> tuple[int, ...]:
        return tuple(numbers[i] for i in ids)

    return replace(
        selection,
        turn_ids=renumbered(selection.turn_ids),
        active_segment=renumbered(selection.active_segment),
        matched_segment=renumbered(selection.matched_segment),
        pinned_turn_ids=renumbered(selection.pinned_turn_ids),
        scores=tuple(replace(score, turn_id=numbers[score.turn_id]) for score in selection.scores),
    )


@dataclass(frozen=True)
class LastCall:
    """What the chat model was sent on the last call, and why.

    Attributes:
        query: the user's new message.
        selection: the gatekeeper's decision and per-turn scores for it, each turn named
            by its number as :meth:`ChatSession.turns` gives it.
        sent: the exact messages the model received (system prompt first, query last).
        turns: the answered turns the selection was made over, in order: turn ``n`` of
            :attr:`selection` is ``turns[n - 1]``.
    """

    query: str
    selection: Selection
    sent: tuple[dict[str, str], ...]
    turns: tuple[MessageTurn, ...]

    @property
    def turn_count(self) -> int:
        """How many earlier turns the transcript held at the time."""
        return len(self.turns)


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
        self._state = _ReadOnce(transcript)
        self.gate = TranscriptGate(  # it follows what the session read (a stand-in the gate accepts)
            cast(Any, self._state), token_budget=token_budget, token_counter=self._count, on_overflow="keep_pinned"
        )
        self._pinned: set[str] = set()
        self._loads: LoadedPins = {}  # what loads did to the pins, when they are kept in this object only
        self.pins_problem: str | None = None
        self._pin_record: Transcript | None = None
        if keep_pins:
            record_id = pin_record_id(transcript.session_id)
            try:
                self._pin_record = Transcript(record_id, store=transcript.store)
                self._pinned, self.pins_problem = read_pins(self._pin_record)
            except GatekeeperError as exc:  # a pin log that cannot load must not stop the chat
                self._pin_record = None
                self.pins_problem = (
                    f"the pins stored for session {transcript.session_id!r} cannot be loaded ({exc}); "
                    f"this run keeps pins in memory only (store session {record_id!r} holds them)"
                )
        self.last_call: LastCall | None = None

    # -- turns --------------------------------------------------------------------------
    def turns(self) -> list[tuple[int, MessageTurn]]:
        """Answered turns as ``(turn number, turn)`` in order, numbered 1 to N by position:
        the numbers ``/show`` lists and ``/pin`` takes."""
        return [(number, turn) for number, (_, turn) in enumerate(self._read()[1], 1)]

    def _read(self) -> tuple[list[Message], list[tuple[int, MessageTurn]]]:
        """One read of the conversation: its leading system messages, and its answered turns
        in order, each with the gate's id for it; the gate is in step with exactly this state
        (:class:`_ReadOnce`), whatever another process writes after."""
        messages = self._state.read()
        self.gate.sync()
        system, turns = group_turns(messages)
        if turns and turns[-1].is_open:
            turns.pop()
        return system, [(t.id, turn) for t, turn in zip(self.gate.gatekeeper.turns, turns)]

    @property
    def pinned(self) -> frozenset[str]:
        """Ids of the first messages of the pinned turns, as stored now (some may belong to
        turns an edit deleted); change them with :meth:`pin`, :meth:`unpin` or :meth:`load`."""
        return frozenset(self._current_pins())

    def pin(self, number: int) -> MessageTurn:
        """Always keep turn ``number`` in context, from now on and when the session is
        resumed (:class:`UnknownTurnError` if there is no such turn)."""
        return self.pin_turns([number])[0]

    def unpin(self, number: int) -> MessageTurn:
        """Stop pinning turn ``number`` (:class:`UnknownTurnError` if there is no such turn)."""
        return self.pin_turns([number], pinned=False)[0]

    def pin_turns(self, numbers: Iterable[int], *, pinned: bool = True) -> list[MessageTurn]:
        """Pin (or unpin) every turn of ``numbers`` in one stored change; the turns.

        Every number is checked first: one that names no turn raises
        :class:`UnknownTurnError` and no pin changes.
        """
        turns = [self._turn(n) for n in numbers]
        keys = {turn.key for turn in turns}
        self._change_pins(lambda now: now | keys if pinned else now - keys)
        return turns

    def number_of(self, key: object) -> int:
        """The number the turn whose first message has id ``key`` has now (a page names the
        turn it shows by that id, which no restart or renumbering changes);
        :class:`UnknownTurnError` when no answered turn has it."""
        number = next((n for n, turn in self.turns() if turn.key == key), None)
        if number is None:
            raise UnknownTurnError(
                f"no turn starts with message {key!r} any more (deleted or changed elsewhere); "
                "look at the conversation as it is now and try again"
            )
        return number

    def pinned_numbers(self) -> list[int]:
        """Numbers of the pinned turns that still exist."""
        pinned = self._current_pins()
        return [n for n, turn in self.turns() if turn.key in pinned]

    def _current_pins(self) -> set[str]:
        """The pins as stored now (another process may have changed them since), kept here
        too; ``pins_problem`` says whether they could be read."""
        if self._pin_record is not None:
            self._pinned, self.pins_problem = read_pins(self._pin_record)
        return self._pinned

    def _change_pins(self, change: Callable[[set[str]], set[str]], *, load: int | None = None) -> None:
        """Apply ``change`` to the stored pins, read-modify-write: a pin another process stored
        meanwhile is kept, and a failed write changes nothing.  ``load``: the revision of the
        load that makes this change (remembered, so undoing the load takes it back).

        The record is read at a head, changed and written whole; when the write did not
        land right on that head (another process wrote in between, and this write covered
        it), the change is done again on what that process wrote.
        """
        record = self._pin_record
        if record is None:  # pins kept in this object only
            wanted = change(set(self._pinned))
            if load is not None and wanted != self._pinned:
                self._loads[str(load)] = (frozenset(self._pinned), frozenset(wanted))
            self._pinned = wanted
            return
        seen = source = record.head  # seen: the head the write must land on; source: the state to change
        for attempt in range(_PIN_WRITE_TRIES):
            state = record.snapshot(source)
            current, problem = read_pins(record, state)
            wanted = change(set(current))
            if attempt == 0 and wanted == current and problem is None:
                self._pinned, self.pins_problem = current, None
                return
            loads = read_loads(state)
            if load is not None:
                loads[str(load)] = (frozenset(current), frozenset(wanted))
            try:
                written = record.set([pins_message(wanted, loads)])
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
        """Pin on the gate the turns (``(gate id, turn)``, as :meth:`_read` gives) whose key is in ``pinned``."""
        gk = self.gate.gatekeeper
        wanted = {turn_id for turn_id, turn in turns if turn.key in pinned}
        for turn_id in set(gk.pinned) - wanted:
            gk.unpin(turn_id)
        for turn_id in wanted - set(gk.pinned):
            gk.pin(turn_id)

    # -- chat ---------------------------------------------------------------------------
    def prepare(self, text: str) -> LastCall:
        """The gated messages to send with ``text``, and why (no side effects on the transcript).

        The conversation is read once (:meth:`_read`): the gate selects over that state, and
        the messages sent are that state's, whatever another chat on the same database
        writes meanwhile (the next call sees it)."""
        text = text.strip()
        if not text:
            raise InvalidInputError("an empty message: type something to send")
        system, turns = self._read()
        self._apply_pins(turns, self._current_pins())
        # the stored state's own unanswered messages (a loaded file, a shared database) stay
        # candidates: only what the selection names is sent, and the question is `text`
        selection = self.gate.explain(text, token_budget=self.token_budget, include_open=False)  # no new read
        by_id = dict(turns)
        kept: list[Message] = list(system)
        for turn_id in selection.turn_ids:
            kept.extend(by_id[turn_id].messages)
        sent = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        sent += [{"role": m.role, "content": m.content} for m in kept]
        sent.append({"role": "user", "content": text})
        numbers = {turn_id: number for number, (turn_id, _) in enumerate(turns, 1)}
        return LastCall(text, _numbered(selection, numbers), tuple(sent), tuple(turn for _, turn in turns))

    def ask(self, text: str) -> str:
        """Send ``text`` with the gated context; append the exchange once the answer is in.

        Raises whatever the model raised (``ModelUnavailableError``, ``EditError``,
        ``KeyboardInterrupt``) with the transcript unchanged.
        """
        call, answer = self.answer(text)
        self.keep(call, answer)
        return answer

    def answer(self, text: str) -> tuple[LastCall, str]:
        """:meth:`ask` up to the answer, storing nothing: ``(the call, the answer)``, which
        :meth:`keep` stores (a front end can let Ctrl-C cancel this step, and not that one)."""
        call = self.prepare(text)
        self.last_call = call
        reply = chat_reply(self.chat_model, [dict(m) for m in call.sent])
        return call, replace_lone_surrogates(reply if isinstance(reply, str) else str(reply))

    def keep(self, call: LastCall, answer: str) -> Revision:
        """Append the exchange :meth:`answer` gave (user message and answer together); its revision."""
        return self.transcript.append(user=call.query, assistant=answer)

    # -- edits --------------------------------------------------------------------------
    def edit(self, instruction: str) -> EditOutcome:
        """Revise the history as ``instruction`` says (see the module docstring for when it commits)."""
        outcome = self.propose(instruction)
        if not outcome.changed or outcome.needs_confirmation:
            return outcome
        return replace(outcome, revision=self.transcript.commit(outcome.proposal))

    def propose(self, instruction: str) -> EditOutcome:
        """:meth:`edit` up to the proposal, committing nothing (its ``revision`` is None):
        :meth:`commit` applies it (a front end can let Ctrl-C cancel this step, and not that one)."""
        proposal = self.transcript.edit(
            instruction, model=self.editor, preview=True, allow_large_deletion=True
        )
        assert isinstance(proposal, Proposal)
        share = deleted_share(self.transcript.snapshot(proposal.base), proposal.changes, self._count)
        return EditOutcome(proposal, None, share, bool(proposal.changes) and share > self.max_deletion_share)

    def commit(self, proposal: Proposal) -> Revision:
        """Apply a proposal the user confirmed."""
        return self.transcript.commit(proposal)

    def load(self, messages: Iterable[Message], pinned: Iterable[str] = ()) -> Revision:
        """Make ``messages`` the current state as one revision (:meth:`undo` takes it back).

        Ids the current state holds with the same role are kept, with the parts and
        metadata held for them when a message brings none (a file written before
        ``/save`` kept them), so loading what was just saved changes nothing (the
        revision returned then has no changes, and none is recorded); ids this session
        used before get fresh ones, since ids are never reused.  ``pinned`` (ids of
        first messages) replaces the pins, and is stored like :meth:`pin` stores them;
        undoing the load puts back the pins it replaced.  A load that changes no message
        records no revision and changes no pin either (``/undo`` could not take a pin
        change back): the pins stay as they are.
        """
        current = {m.id: m for m in self.transcript.messages}
        used = {c.message.id for r in self.transcript.history() for c in r.changes if isinstance(c, Put)}
        renamed: dict[str, str] = {}
        fixed: list[Message] = []
        for message in messages:
            same = current.get(message.id)
            if same is not None and same.role == message.role:
                message = _kept_extras(message, same)
            elif message.id in used or message.id in renamed:
                renamed[message.id] = new_message_id()
                message = replace(message, id=renamed[message.id])
            fixed.append(message)
        revision = self.transcript.set(fixed)
        if revision.changes:  # no revision, no pin change: nothing /undo could not take back
            wanted = {renamed.get(p, p) for p in pinned}
            self._change_pins(lambda _: wanted, load=revision.number)
        return revision

    def undo(self) -> Revision:
        """Undo the latest edit, load, revert or redo (chat turns stay); undoing a load also
        puts back the pins it replaced, keeping pins changed since."""
        revision = self.transcript.undo()
        self._replay_load_pins(revision.target, undo=True)
        return revision

    def redo(self) -> Revision:
        """Re-apply what the last :meth:`undo` reverted (a load's pins included)."""
        revision = self.transcript.redo()
        self._replay_load_pins(revision.target, undo=False)
        return revision

    def revert(self, revision: int) -> Revision:
        """Make the conversation what it was at ``revision``, as a new revision (its ``removed``
        lists the messages dropped, later turns included), and the pins what loads had made
        them then: the pin changes of loads in effect now but not then are taken back, those
        of loads in effect then but undone since are made again, and every other pin stays
        as it is now (as :meth:`undo` does).  :meth:`undo` of the revert puts them back.
        A revert that changes no message records no revision and changes no pin."""
        made = self.transcript.revert(revision)
        if not made.changes:
            return made
        log = self.transcript.history()
        loads = self._remembered_loads()
        then = pin_changes_in_effect([r for r in log if r.number <= revision], loads)
        now = pin_changes_in_effect([r for r in log if r.number < made.number], loads)
        steps = [(after, before) for before, after in reversed([loads[n] for n in now if n not in then])]
        steps += [loads[n] for n in then if n not in now]
        if steps:
            self._change_pins(lambda pins: pins_after(pins, steps), load=made.number)
        return made

    def _remembered_loads(self) -> LoadedPins:
        """What each load (and revert) did to the pins, by revision number."""
        return self._loads if self._pin_record is None else read_loads(self._pin_record.messages)

    def _replay_load_pins(self, target: int | None, *, undo: bool) -> None:
        """When revision ``target`` was a load (or a revert that changed pins): take back
        (``undo``) or make again the change it made to the pins, leaving every other pin as
        it is now."""
        change = self._remembered_loads().get(str(target))
        if change is None:
            return
        step = (change[1], change[0]) if undo else change
        self._change_pins(lambda now: pins_after(now, [step]))

    def purge(self) -> None:
        """Erase the conversation entirely, its history and its pins included."""
        self.transcript.purge()
        if self._pin_record is not None:
            self._pin_record.purge()
        self._pinned = set()
        self._loads = {}
        self.last_call = None

    def last_change(self) -> Revision | None:
        """The most recent revision that is not an append (what a bare ``/diff`` shows)."""
        return next((r for r in reversed(self.transcript.history()) if r.kind != "append"), None)


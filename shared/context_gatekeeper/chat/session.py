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
  through edits; they live as long as the process (and in ``/save`` files).
"""

from __future__ import annotations

from collections.abc import Iterable
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
    InvalidInputError,
    Message,
    Proposal,
    Revision,
    Selection,
    Transcript,
    TranscriptGate,
    TruncatedReplyError,
    UnknownTurnError,
    resolve_token_counter,
)

__all__ = ["ChatSession", "LastCall", "EditOutcome", "DEFAULT_SYSTEM_PROMPT"]

DEFAULT_SYSTEM_PROMPT = "You are a helpful, concise assistant."


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
        self.pinned: set[str] = set()
        self.last_call: LastCall | None = None

    # -- turns --------------------------------------------------------------------------
    def turns(self) -> list[tuple[int, MessageTurn]]:
        """Answered turns as ``(turn number, turn)`` in order; the numbers ``/pin`` takes."""
        self.gate.sync()
        _, turns = group_turns(self.transcript.messages)
        if turns and turns[-1].is_open:
            turns.pop()
        return [(t.id, turn) for t, turn in zip(self.gate.gatekeeper.turns, turns)]

    def pin(self, number: int) -> MessageTurn:
        """Always keep turn ``number`` in context (:class:`UnknownTurnError` if there is none)."""
        turn = self._turn(number)
        self.pinned.add(turn.key)
        return turn

    def unpin(self, number: int) -> MessageTurn:
        """Stop pinning turn ``number``."""
        turn = self._turn(number)
        self.pinned.discard(turn.key)
        return turn

    def pinned_numbers(self) -> list[int]:
        """Numbers of the pinned turns that still exist."""
        return [n for n, turn in self.turns() if turn.key in self.pinned]

    def _turn(self, number: int) -> MessageTurn:
        turns = dict(self.turns())
        if number not in turns:
            shown = ", ".join(map(str, turns)) or "none yet"
            raise UnknownTurnError(f"no turn {number}; turns are numbered as /show lists them ({shown})")
        return turns[number]

    def _apply_pins(self, turns: Iterable[tuple[int, MessageTurn]]) -> None:
        gk = self.gate.gatekeeper
        wanted = {n for n, turn in turns if turn.key in self.pinned}
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
        self._apply_pins(turns)
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
        since ids are never reused.
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
        self.pinned = {renamed.get(p, p) for p in pinned}
        return revision

    def last_change(self) -> Revision | None:
        """The most recent revision that is not an append (what a bare ``/diff`` shows)."""
        return next((r for r in reversed(self.transcript.history()) if r.kind != "append"), None)

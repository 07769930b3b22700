"""The web chat's operations on the session layer, with no HTTP: testable on its own.

:class:`WebChat` holds one :class:`~context_gatekeeper.chat.session.ChatSession`
per conversation of one store and answers every page action with a JSON-ready
view.  Rules:

* **One writer at a time per conversation in this process**: each session has a
  lock; the model call of a chat message runs outside it (a slow model never
  blocks the other tab), and the exchange is appended under it once the whole
  answer is in (turn-atomic, as in the terminal chat: an error or a closed page
  mid-answer leaves the transcript as it was).
* **Never a lost update**: undo, redo, revert and a preview name the revision the
  page showed (``head``); when the session moved on since (another tab, another
  process), :class:`~context_gatekeeper.StaleHeadError` says so and nothing
  changes.  Committing a preview goes through the core's rule (rebased over
  appends that touch none of its messages, else ``StaleHeadError``).
* **Edits are previewed**: an instruction produces a proposal kept here (one per
  session, so a reload shows it again) until Commit or Discard.  A proposal
  deleting more than ``max_deletion_share`` of the conversation needs an explicit
  ``confirm_large`` on commit (the deletion guard).
* **Names**: a conversation in the store is opened and deleted by its exact id,
  whatever wrote it (the terminal chat, the library); the name rules
  (:func:`check_session_name`) apply to names that are new.  The list holds the
  stored conversations and those made with New; looking at a name registers
  nothing.
* **A deleted conversation stays deleted**: an answer or a preview that was under
  way when it was deleted is refused (nothing is stored), never written back.
* **Stopping**: model calls run where a stopping server can walk away from them
  (:mod:`.stopping`); requests waiting for one end at once, storing nothing.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, cast

from ..session import MAX_SESSION_NAME, ChatSession, LastCall, chat_reply_pieces, chat_sessions, check_session_name
from .stopping import Stopper
from .views import CONTEXT_KEY, context_record, context_view, diff_view, history_view, undo_state
from ... import (
    GatekeeperError,
    HistoryError,
    InvalidInputError,
    Message,
    Proposal,
    StaleHeadError,
    Store,
    Transcript,
    resolve_token_counter,
)
from ...integration import deleted_share, new_message_id, replace_lone_surrogates

__all__ = ["WebChat", "ChatStream", "MAX_SESSION_NAME", "check_session_name"]


@dataclass
class _Preview:
    token: str
    proposal: Proposal
    share: float


@dataclass
class _Entry:
    """One open conversation: its session, its lock, its pending preview; ``deleted`` once
    :meth:`WebChat.delete` erased it (whoever still holds it must not write); ``noticed``:
    the pin problem already shown."""

    session: ChatSession
    lock: threading.RLock = field(default_factory=threading.RLock)
    preview: _Preview | None = None
    deleted: bool = False
    noticed: str | None = None

    def check_alive(self) -> None:
        """:class:`HistoryError` once the conversation was deleted (call with the lock held)."""
        if self.deleted:
            raise HistoryError(
                f"session {self.session.transcript.session_id!r} was deleted (in this or another tab) while "
                "this was under way; nothing was stored"
            )


class WebChat:
    """Every conversation of ``store``, through the same session layer as the terminal chat.

    Args:
        store: where the transcripts live (the caller closes it after :meth:`close`).
        chat_model: answers chat messages; one that streams (the model protocol's
            ``stream_text(messages)``, a LangChain chat model, a LlamaIndex LLM: see
            :func:`~context_gatekeeper.chat.session.chat_reply_pieces`) is streamed, any
            other answers in one chunk.
        editor: rewrites the history for edit instructions.
        token_budget: tokens of earlier turns sent per call.
        session_options: more keyword arguments for each ``ChatSession`` (``system_prompt``...).
    """

    def __init__(
        self, store: Store, chat_model: Any, editor: Any, *, token_budget: int = 4000, **session_options: Any
    ) -> None:
        self.store = store
        self.chat_model = chat_model
        self.editor = editor
        self.token_budget = token_budget
        self.session_options = session_options
        self._count = resolve_token_counter(session_options.get("token_counter"))
        self._entries: dict[str, _Entry] = {}
        self._created: set[str] = set()
        self._lock = threading.Lock()
        self._stopper = Stopper()

    # -- sessions -------------------------------------------------------------------------
    def sessions(self) -> list[str]:
        """Names of the stored conversations and of those made with :meth:`create` (still empty)."""
        stored = chat_sessions(self.store)
        with self._lock:
            return sorted(set(stored) | self._created)

    def _known_name(self, name: object) -> tuple[str, bool]:
        """``(name, True)`` when this chat or the store has conversation ``name`` (exactly
        that id, whatever its characters); else ``(name as a new conversation's name, False)``
        (:func:`check_session_name`)."""
        if isinstance(name, str) and name:
            with self._lock:
                known = name in self._entries or name in self._created
            if known or name in chat_sessions(self.store):
                return name, True
        return check_session_name(name), False

    def _entry(self, name: object, *, keep: bool = True) -> _Entry:
        """The entry of conversation ``name``, kept for the next request; with ``keep=False``
        one for a name nobody has used yet is not kept (looking at a name registers nothing)."""
        name, known = self._known_name(name)
        with self._lock:
            entry = self._entries.get(name)
            if entry is None:
                transcript = Transcript(name, store=self.store)
                session = ChatSession(
                    transcript, self.chat_model, self.editor, token_budget=self.token_budget, **self.session_options
                )
                entry = _Entry(session)
                if keep or known:
                    self._entries[name] = entry
            return entry

    @contextmanager
    def _locked(self, name: object, *, keep: bool = True) -> Iterator[_Entry]:
        """The entry of ``name`` (:meth:`_entry`) with its lock held; one a concurrent
        :meth:`delete` retired is replaced by a fresh one (the operation then acts on the
        conversation as it is now)."""
        while True:
            entry = self._entry(name, keep=keep)
            with entry.lock:
                if not entry.deleted:
                    yield entry
                    return

    def create(self, name: object = None) -> dict[str, Any]:
        """Open a new conversation (``name``, or the first free ``chat-N``); its view.

        The name is picked and reserved in one step, so requests at the same moment get
        different conversations; one that cannot be shown is given up again (no trace).
        """
        stored = chat_sessions(self.store)
        with self._lock:
            taken = set(stored) | self._created
            if name is None:
                name = next(f"chat-{n}" for n in range(1, len(taken) + 2) if f"chat-{n}" not in taken)
            name = check_session_name(name)
            if name in taken:
                raise InvalidInputError(f"a session named {name!r} exists already: switch to it, or pick another name")
            self._created.add(name)
        try:
            return self.view(name)
        except BaseException:
            with self._lock:
                self._created.discard(name)
                self._entries.pop(name, None)
            raise

    def delete(self, name: object, confirm: object) -> list[str]:
        """Erase conversation ``name`` (history and pins included) when ``confirm`` repeats its name;
        the sessions left.  An answer or preview still under way for it is refused when it ends."""
        with self._locked(name) as entry:
            name = entry.session.transcript.session_id
            if confirm != name:
                raise InvalidInputError(
                    f"deleting session {name!r} erases it with its whole history: confirm by sending its name"
                )
            entry.session.purge()
            entry.deleted = True
            entry.preview = None
            with self._lock:
                self._entries.pop(name, None)
                self._created.discard(name)
        return self.sessions()

    def stop(self) -> None:
        """The server is stopping: every request waiting for a model ends now, storing nothing
        (the model call itself runs on in the background and its result is dropped)."""
        self._stopper.stop()

    def close(self) -> None:
        """Stop (:meth:`stop`) and forget the open sessions (the store stays open: its owner closes it)."""
        self.stop()
        with self._lock:
            self._entries.clear()

    # -- reading --------------------------------------------------------------------------
    def view(self, name: object) -> dict[str, Any]:
        """Everything the page shows for conversation ``name``."""
        with self._locked(name, keep=False) as entry:
            return self._view(entry)

    def _view(self, entry: _Entry) -> dict[str, Any]:
        session = entry.session
        transcript = session.transcript
        history = transcript.history()
        messages = transcript.messages
        turns = session.turns()
        pinned = set(session.pinned_numbers())
        numbers = {turn.key: n for n, turn in turns}
        turn_of = {m.id: (n, turn.key) for n, turn in turns for m in turn.messages}
        can_undo, can_redo = undo_state(history)
        rows = []
        for m in messages:
            number, key = turn_of.get(m.id, (None, None))
            rows.append({
                "id": m.id,
                "role": m.role,
                "content": m.content,
                "turn": number,
                "turn_key": key,  # the id of its turn's first message (whatever its role): pin's key
                "origin": m.origin,
                "pinned": number in pinned,
                "context": context_view(m.metadata.get(CONTEXT_KEY), numbers) if m.role == "assistant" else None,
            })
        preview = entry.preview
        notice = session.pins_problem
        if notice == entry.noticed:
            notice = None  # shown once per problem, not after every action
        else:
            entry.noticed = notice
        return {
            "session": transcript.session_id,
            "head": len(history),
            "messages": rows,
            "pinned": sorted(pinned),
            "history": history_view(history),
            "can_undo": can_undo,
            "can_redo": can_redo,
            "preview": None if preview is None else self._preview_view(preview, session),
            "sessions": sorted({*self.sessions(), transcript.session_id}),  # this one too, even while new
            "notice": notice,
        }

    def _preview_view(self, preview: _Preview, session: ChatSession) -> dict[str, Any]:
        proposal = preview.proposal
        return {
            "token": preview.token,
            "instruction": proposal.instruction,
            "base": proposal.base,
            "rows": diff_view(proposal.diff),
            "deleted_share": round(preview.share, 3),
            "needs_confirmation": preview.share > session.max_deletion_share,
        }

    # -- chat -----------------------------------------------------------------------------
    def start_chat(self, name: str, text: object) -> "ChatStream":
        """Prepare ``text`` for sending (bad input raises here, before anything streams)."""
        if not isinstance(text, str):
            raise InvalidInputError("a chat message is text: send {'text': '...'}")
        with self._locked(name) as entry:
            call = entry.session.prepare(replace_lone_surrogates(text))
            record = context_record(call, list(enumerate(call.turns, 1)))  # the turns the call was made over
        return ChatStream(self, entry, call, record)

    # -- edits ----------------------------------------------------------------------------
    def preview(self, name: str, instruction: object, head: object = None) -> dict[str, Any]:
        """Compute the edit ``instruction`` asks for, as a preview (nothing changes); the view."""
        if not isinstance(instruction, str) or not instruction.strip():
            raise InvalidInputError("an edit needs an instruction, e.g. 'it was Iceland, not Ireland'")
        with self._locked(name) as entry:
            self._check_head(entry, head)
        session = entry.session  # the editing model runs outside the lock, like a chat answer
        text = replace_lone_surrogates(instruction.strip())
        proposal = self._stopper.call(
            lambda: session.transcript.edit(text, model=session.editor, preview=True, allow_large_deletion=True)
        )
        assert isinstance(proposal, Proposal)
        with entry.lock:
            entry.check_alive()
            if not proposal.changes:
                raise HistoryError("the editor proposed no change for that instruction; nothing was changed")
            share = deleted_share(session.transcript.snapshot(proposal.base), proposal.changes, self._count)
            entry.preview = _Preview(secrets.token_hex(8), proposal, share)
            return self._view(entry)

    def commit(self, name: str, token: object, confirm_large: bool = False) -> dict[str, Any]:
        """Make the previewed edit ``token`` the state; the view."""
        with self._locked(name) as entry:
            preview = self._pending(entry, token)
            if preview.share > entry.session.max_deletion_share and not confirm_large:
                raise InvalidInputError(
                    f"this edit deletes or replaces {preview.share:.0%} of the conversation, more than the "
                    f"{entry.session.max_deletion_share:.0%} guard: confirm it to commit, or discard it"
                )
            try:
                entry.session.commit(preview.proposal)
            except StaleHeadError as exc:
                entry.preview = None
                raise StaleHeadError(
                    f"{exc} The preview was discarded: the view is refreshed, preview the edit again"
                ) from exc
            entry.preview = None
            return self._view(entry)

    def discard(self, name: str, token: object) -> dict[str, Any]:
        """Drop the previewed edit ``token`` (nothing changes); the view."""
        with self._locked(name) as entry:
            self._pending(entry, token)
            entry.preview = None
            return self._view(entry)

    def _pending(self, entry: _Entry, token: object) -> _Preview:
        preview = entry.preview
        if preview is None or not isinstance(token, str) or not secrets.compare_digest(preview.token, token):
            raise HistoryError("that preview is no longer pending (committed, discarded or replaced): preview again")
        return preview

    # -- versions -------------------------------------------------------------------------
    def undo(self, name: str, head: object = None) -> dict[str, Any]:
        """Undo the latest edit, undo's redo, revert or load (a load's pins too); the view."""
        return self._version(name, head, lambda s: s.undo())

    def redo(self, name: str, head: object = None) -> dict[str, Any]:
        """Re-apply what the last undo reverted; the view."""
        return self._version(name, head, lambda s: s.redo())

    def revert(self, name: str, revision: object, head: object = None) -> dict[str, Any]:
        """Make the state what it was at ``revision``, as a new revision, with the pins loads
        had made then (:meth:`ChatSession.revert`); the view."""
        if type(revision) is not int:
            raise InvalidInputError(f"revert needs a revision number, got {revision!r}")
        number = revision
        return self._version(name, head, lambda s: s.revert(number))  # a load's pins follow, as undo's do

    def _version(self, name: str, head: object, action: Callable[[ChatSession], object]) -> dict[str, Any]:
        with self._locked(name) as entry:
            self._check_head(entry, head)
            action(entry.session)
            entry.preview = None  # its base is gone; committing it would be refused anyway
            return self._view(entry)

    def pin(self, name: str, turn: object, pinned: object = True, key: object = None) -> dict[str, Any]:
        """Pin (or unpin) a turn; the view.

        ``key`` (the id of the turn's first message, which the page shows as each of the
        turn's messages' ``turn_key``) names the turn whatever its number is now: a page open
        across a server restart pins the turn it shows.  Without it, ``turn`` (its number)
        names it.
        """
        if key is not None and (not isinstance(key, str) or not key):
            raise InvalidInputError(f"pin's key must be the id of the turn's first message, got {key!r}")
        if key is None and type(turn) is not int:
            raise InvalidInputError(f"pin needs a turn number, got {turn!r}")
        with self._locked(name) as entry:
            session = entry.session
            number = session.number_of(key) if key is not None else cast(int, turn)  # an int: checked above
            session.pin_turns([number], pinned=bool(pinned))
            return self._view(entry)

    def _check_head(self, entry: _Entry, head: object) -> None:
        """StaleHeadError unless the page's ``head`` (None: not checked) is the session's."""
        if head is None:
            return
        if type(head) is not int:
            raise InvalidInputError(f"head must be the revision number the page shows, got {head!r}")
        now = entry.session.transcript.head
        if head != now:
            raise StaleHeadError(
                f"session {entry.session.transcript.session_id!r} changed elsewhere (another tab or window): "
                f"it is at revision {now}, this page showed {head}. Nothing was changed; the view is "
                "refreshed, look and try again"
            )


class ChatStream:
    """One chat message on its way: iterate it for the page's events, in order.

    ``{"type": "start", "query", "context"}``, then ``{"type": "chunk", "text"}`` per
    piece of the answer, then ``{"type": "done", "view"}`` once the exchange is
    stored, or ``{"type": "error", "message", "view"}`` (nothing stored).
    """

    def __init__(self, chat: WebChat, entry: _Entry, call: LastCall, record: dict[str, Any]) -> None:
        self._chat = chat
        self._entry = entry
        self.call = call
        self.record = record

    def __iter__(self) -> Iterator[dict[str, Any]]:
        entry = self._entry
        session = entry.session
        stopper = self._chat._stopper
        yield {"type": "start", "query": self.call.query, "context": self._context()}
        parts: list[str] = []
        try:
            sent = [dict(m) for m in self.call.sent]
            for chunk in stopper.items(lambda: chat_reply_pieces(session.chat_model, sent)):
                parts.append(chunk)
                yield {"type": "chunk", "text": chunk}
            answer = replace_lone_surrogates("".join(parts))
            with entry.lock:
                entry.check_alive()  # deleted meanwhile: it stays deleted
                stopper.check()
                session.last_call = self.call
                session.transcript.append(
                    user=self.call.query,
                    messages=[Message(new_message_id(), "assistant", answer, metadata={CONTEXT_KEY: self.record})],
                )
        except Exception as exc:  # the model or the store failed, or the session went: say so, store nothing
            yield {"type": "error", "message": error_message(exc, chat=True), "view": self._view_now()}
            return
        yield {"type": "done", "view": self._view_now()}

    def _view_now(self) -> dict[str, Any]:
        """The conversation's view now (a deleted one's is empty, as the store has it)."""
        with self._entry.lock:
            return self._chat._view(self._entry)

    def _context(self) -> dict[str, Any] | None:
        with self._entry.lock:
            current = {turn.key: n for n, turn in self._entry.session.turns()}
        return context_view(self.record, current)


def error_message(exc: BaseException, *, chat: bool = False) -> str:
    """What the page shows for ``exc``: the library's own message, never a traceback."""
    import sqlite3

    if isinstance(exc, GatekeeperError):
        text = str(exc)
    elif isinstance(exc, sqlite3.Error):
        text = f"the database failed ({exc or type(exc).__name__}); what was stored before is intact"
    else:
        text = f"{type(exc).__name__}: {exc} (nothing was changed)"
    if chat:
        text = text.rstrip()
        text += ("" if text.endswith((".", "!", "?")) else ".") + " Your message was not added to the conversation; send it again."
    return text

"""The read-eval loop of the terminal chat: read a line, chat, edit or run a command.

Nothing is lost when something fails: the transcript is written to its store
after each exchange or edit, a model error or Ctrl-C during a model call leaves
it untouched (the loop shows the error and carries on), and Ctrl-C at the prompt
or end of input leaves the loop with the conversation saved.  What the loop says
after Ctrl-C is true: each command's write (and what belongs to it, such as a
load's pins) is one step that Ctrl-C waits for (:func:`ctrl_c_held`), and Ctrl-C
after it, while the result is drawn, says the change is stored (and how to undo
it) instead of "nothing was changed".  SIGTERM (inside
:func:`~.signals.sigterm_as_ctrl_c`) leaves it wherever it comes, a model call
abandoned unstored, with :data:`~.signals.EXIT_TERMINATED`.  A store that
cannot be written (locked, read-only, a full disk) ends the loop with one line
saying so and :data:`EXIT_STORE`: the failed write was rolled back, and what was
stored before is kept.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from .commands import dispatch
from .readers import Reader
from .render import Renderer
from .session import ChatSession
from .signals import EXIT_TERMINATED, Terminated
from ..integration import replace_lone_surrogates
from .. import GatekeeperError, Revision

__all__ = [
    "ChatLoop", "EXIT_OK", "EXIT_STORE", "EXIT_INTERRUPTED", "EXIT_TERMINATED", "store_failure", "is_store_failure",
    "described", "ctrl_c_held",
]

T = TypeVar("T")

EXIT_OK = 0
EXIT_STORE = 1
EXIT_INTERRUPTED = 130

_STORE_HINTS = (
    ("not a database", "it is not a gatekeeper-chat database, or it is damaged; it was not changed. "
     "Pass --db with another file"),
    ("locked", "another program is writing to it; close it (or the other gatekeeper-chat) and try again"),
    # before "read-only": the store's own "unable to open" message lists a read-only mount among the causes
    ("unable to open", "check that the path is a file in a folder you can write, or pass --db with another path"),
    ("readonly", "it is read-only; make it writable or pass --db with another file"),
    ("read-only", "it is read-only; make it writable or pass --db with another file"),
    ("disk is full", "the disk is full; free some space and try again"),
)


def store_failure(path: object, exc: BaseException) -> str:
    """One line saying why the database at ``path`` failed, and what to do.

    A folder is said to be one (SQLite only says it is "unable to open" it, which reads as
    a permission problem).

    >>> store_failure("c.db", sqlite3.OperationalError("database or disk is full"))
    'cannot use the database c.db (database or disk is full): the disk is full; free some space and try again'
    """
    if isinstance(path, (str, os.PathLike)) and os.path.isdir(path):
        example = Path(path) / "chat.sqlite3"
        return f"cannot use the database {path}: it is a folder; pass --db with the path of a file, e.g. --db {example}"
    detail = str(exc) or type(exc).__name__
    hint = next((h for key, h in _STORE_HINTS if key in detail.lower()), "check the file, or pass --db with another")
    return f"cannot use the database {path} ({detail}): {hint}"


def described(exc: BaseException) -> str:
    """``exc`` as the chat shows it: this library's errors by their message (which says what
    went wrong and what to do), any other with its type first, so that ``KeyError(27)``
    reads ``KeyError: 27``, never a bare ``27``.

    >>> described(KeyError(27)), described(RuntimeError())
    ('KeyError: 27', 'RuntimeError')
    """
    text = str(exc)
    if isinstance(exc, GatekeeperError):
        return text or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


_HELD_SIGNALS = (signal.SIGTERM, signal.SIGINT)
"""What :func:`ctrl_c_held` holds, in the order delivered after (SIGTERM ends the chat, so it goes first)."""


@contextlib.contextmanager
def ctrl_c_held() -> Iterator[None]:
    """Ctrl-C (or SIGTERM) that comes while the block runs interrupts when it is done: a
    write and what belongs to it (a load and its pins, an exchange and forgetting it as
    unsent) are one step, never cut in two, so what the chat says after Ctrl-C is true.

    The signal is delivered again, to the handler found (Ctrl-C's raises ``KeyboardInterrupt``,
    :func:`~.signals.sigterm_as_ctrl_c`'s :class:`~.signals.Terminated`), after a block that
    succeeded; after one that failed, its error is what is shown.  Outside the main thread,
    or when a handler found was not set from Python, no handler can be set or put back:
    the block runs as it is.
    """
    found = {signum: signal.getsignal(signum) for signum in _HELD_SIGNALS}
    if threading.current_thread() is not threading.main_thread() or None in found.values():
        yield
        return
    came: list[int] = []
    for signum in found:
        signal.signal(signum, lambda number, frame: came.append(number))
    try:
        yield
    finally:
        for signum, handler in found.items():
            signal.signal(signum, handler)
    for signum in _HELD_SIGNALS:
        if signum in came:
            signal.raise_signal(signum)  # the handler found raises here (a default one ends the process)


def is_store_failure(exc: BaseException) -> bool:
    """Whether ``exc`` says the database failed (not the model): one of ``sqlite3``'s own
    errors, or an error of this library that is also an ``OSError`` (how the stores report
    a database that is locked, read-only, full or damaged).

    >>> is_store_failure(sqlite3.OperationalError("database is locked")), is_store_failure(ValueError("x"))
    (True, False)
    """
    return isinstance(exc, sqlite3.Error) or (isinstance(exc, GatekeeperError) and isinstance(exc, OSError))


class ChatLoop:
    """Drives one :class:`ChatSession` from a reader to a renderer.

    Args:
        session: the conversation.
        renderer: draws everything.
        reader: ``reader(prompt) -> str`` (see :mod:`.readers`).
        resume_hint: the command that resumes this conversation, shown on leaving.

    Attributes:
        editing: True in EDIT HISTORY mode (plain lines are edit instructions).
        unsent: a message whose model call failed (``/retry`` resends it).
        done: set by ``/quit`` (and by a store failure).
        store_failed: the store could not be written; :meth:`run` returns :data:`EXIT_STORE`.
        stored: what the line being handled has stored (see :meth:`write`), or None.
    """

    def __init__(self, session: ChatSession, renderer: Renderer, reader: Reader, *, resume_hint: str = "") -> None:
        self.session = session
        self.renderer = renderer
        self.reader = reader
        self.resume_hint = resume_hint
        self.editing = False
        self.unsent: str | None = None
        self.done = False
        self.store_failed = False
        self.stored: str | None = None

    def run(self) -> int:
        """Read and handle lines until /quit, end of input, Ctrl-C at the prompt, SIGTERM
        anywhere (:class:`~.signals.Terminated`) or a store failure; the exit status."""
        status = EXIT_OK
        while not self.done:
            try:
                self.handle(self.reader(self.renderer.prompt(self.editing)))
            except EOFError:
                break
            except KeyboardInterrupt as stop:  # handle() lets only Terminated through
                terminated = isinstance(stop, Terminated)
                self.renderer.notice("terminated (SIGTERM)" if terminated else "interrupted")
                status = EXIT_TERMINATED if terminated else EXIT_INTERRUPTED
                break
        if not self._saved():
            self.renderer.info("--db :memory: kept the conversation in memory only: nothing was saved.")
        elif self.store_failed:
            self.renderer.info(f"Everything before that is saved. Resume it with: {self.resume_hint}")
        else:
            self.renderer.info(f"The conversation is saved. Resume it with: {self.resume_hint}")
        return EXIT_STORE if self.store_failed else status

    def _saved(self) -> bool:
        """Whether the conversation outlives this run: not in SQLite's ``:memory:`` database."""
        return getattr(self.session.transcript.store, "path", None) != ":memory:"

    def handle(self, line: str) -> None:
        """One line of input; errors are shown, never raised (a store failure ends the loop).
        Ctrl-C cancels what the line started; SIGTERM (:class:`~.signals.Terminated`) is raised."""
        text = replace_lone_surrogates(line).strip()  # undecodable input bytes become U+FFFD
        if not text:
            return
        self.stored = None
        try:
            if text.startswith("/"):
                dispatch(self, text)
            elif self.editing:
                self.edit(text)
            else:
                self.chat(text)
        except KeyboardInterrupt as stop:
            if isinstance(stop, Terminated):
                raise  # the process is asked to end: run() stops
            self.renderer.notice(f"cancelled: {self.stored or 'nothing was changed'}")
        except Exception as exc:
            if is_store_failure(exc):  # the store cannot be written: say so once and stop
                self.renderer.error(store_failure(getattr(self.session.transcript.store, "path", "?"), exc))
                self.store_failed = self.done = True
            elif isinstance(exc, GatekeeperError):
                self.renderer.error(str(exc))
            else:  # an unexpected failure must not lose the session
                self.renderer.error(
                    f"{described(exc)} ({self.stored or 'nothing was changed'}). Try again; if it fails again, "
                    "/quit and start gatekeeper-chat again"
                )

    def write(self, action: Callable[[], T], stored: Callable[[T], str | None]) -> T:
        """``action()``, a command's write (an exchange, an edit, an undo, a load and its
        pins ...), with Ctrl-C held until it is done (:func:`ctrl_c_held`); then ``stored(result)``
        says what it stored, as the end of a sentence such as "the edit is already stored as
        revision 5; /undo takes it back" (None: nothing), and Ctrl-C or an unexpected failure
        later in the same line says that, not "nothing was changed"."""
        with ctrl_c_held():
            result = action()
            self.stored = stored(result) or self.stored
        return result

    # -- actions ------------------------------------------------------------------------
    def set_mode(self, editing: bool) -> None:
        self.editing = editing
        self.renderer.mode(editing)

    def chat(self, text: str) -> None:
        """Send ``text``; on failure keep it for ``/retry`` and say the transcript is unchanged."""
        self.unsent = text
        try:
            with self.renderer.working("the model is thinking..."):
                call, answer = self.session.answer(text)  # Ctrl-C here cancels: nothing is stored

            def keep() -> Revision:
                revision = self.session.keep(call, answer)
                self.unsent = None  # in the same step: a stored exchange is never sent again
                return revision

            self.write(keep, lambda r: f"the exchange is already stored as revision {r.number} (/show shows it)")
        except Exception as exc:  # KeyboardInterrupt passes to handle(): "cancelled"
            if is_store_failure(exc):
                raise  # the store, not the model: handle() ends the loop
            self.renderer.error(described(exc))
            self.renderer.info("Your message was not added to the conversation; /retry sends it again.")
            return
        self.renderer.answer(answer)
        self.renderer.sent_note(self.session.last_call)

    def edit(self, instruction: str) -> None:
        """Apply an edit instruction and show its diff (large deletions ask first)."""
        with self.renderer.working("rewriting the history..."):
            outcome = self.session.propose(instruction)
        if not outcome.changed:
            self.renderer.info("the editor proposed no change; nothing was changed")
            return
        if outcome.needs_confirmation:
            self.renderer.diff(outcome.proposal.diff)
            if not self._confirmed(outcome.deleted_share):
                self.renderer.info("not applied; nothing was changed")
                return
        revision = self.write(
            lambda: self.session.commit(outcome.proposal),
            lambda r: f"the edit is already stored as revision {r.number}; /undo takes it back",
        )
        self.renderer.ok(f"history edited (revision {revision.number}); /undo takes it back:")
        self.renderer.diff(self.session.transcript.diff(revision.number - 1, revision.number))

    def _confirmed(self, share: float) -> bool:
        """Whether the user answers yes to applying an edit deleting ``share`` of the text;
        end of input there is a no, and ends the loop as it does at the prompt."""
        question = f"This edit deletes or replaces {share:.0%} of the conversation. Apply it? [y/N] "
        try:
            answer = self.reader(self.renderer.prompt(True).append(question))
        except EOFError:
            self.done = True
            return False
        return answer.strip().lower() in ("y", "yes")

    def show_conversation(self) -> None:
        """Print the current state, numbered by turn."""
        turns = self.session.turns()
        shown = {m.id for _, turn in turns for m in turn.messages}
        extra = [m for m in self.session.transcript.messages if m.id not in shown]
        self.renderer.conversation(turns, self.session.pinned_numbers(), extra)

"""The read-eval loop of the terminal chat: read a line, chat, edit or run a command.

Nothing is lost when something fails: the transcript is written to its store
after each exchange or edit, a model error or Ctrl-C during a model call leaves
it untouched (the loop shows the error and carries on), and Ctrl-C at the prompt
or end of input leaves the loop with the conversation saved.
"""

from __future__ import annotations

from .commands import dispatch
from .readers import Reader
from .render import Renderer
from .session import ChatSession
from ..errors import GatekeeperError

__all__ = ["ChatLoop", "EXIT_OK", "EXIT_INTERRUPTED"]

EXIT_OK = 0
EXIT_INTERRUPTED = 130


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
        done: set by ``/quit``.
    """

    def __init__(self, session: ChatSession, renderer: Renderer, reader: Reader, *, resume_hint: str = "") -> None:
        self.session = session
        self.renderer = renderer
        self.reader = reader
        self.resume_hint = resume_hint
        self.editing = False
        self.unsent: str | None = None
        self.done = False

    def run(self) -> int:
        """Read and handle lines until /quit, end of input or Ctrl-C; the exit status."""
        status = EXIT_OK
        while not self.done:
            try:
                line = self.reader(self.renderer.prompt(self.editing))
            except EOFError:
                break
            except KeyboardInterrupt:
                self.renderer.notice("interrupted")
                status = EXIT_INTERRUPTED
                break
            self.handle(line)
        self.renderer.info(f"The conversation is saved. Resume it with: {self.resume_hint}")
        return status

    def handle(self, line: str) -> None:
        """One line of input; errors are shown, never raised."""
        text = line.strip()
        if not text:
            return
        try:
            if text.startswith("/"):
                dispatch(self, text)
            elif self.editing:
                self.edit(text)
            else:
                self.chat(text)
        except KeyboardInterrupt:
            self.renderer.notice("cancelled: nothing was changed")
        except GatekeeperError as exc:
            self.renderer.error(str(exc))
        except Exception as exc:  # an unexpected failure must not lose the session
            self.renderer.error(f"{type(exc).__name__}: {exc} (nothing was changed)")

    # -- actions ------------------------------------------------------------------------
    def set_mode(self, editing: bool) -> None:
        self.editing = editing
        self.renderer.mode(editing)

    def chat(self, text: str) -> None:
        """Send ``text``; on failure keep it for ``/retry`` and say the transcript is unchanged."""
        self.unsent = text
        try:
            with self.renderer.working("the model is thinking..."):
                answer = self.session.ask(text)
        except Exception as exc:  # KeyboardInterrupt passes to handle(): "cancelled"
            self.renderer.error(str(exc) or type(exc).__name__)
            self.renderer.info("Your message was not added to the conversation; /retry sends it again.")
            return
        self.unsent = None
        self.renderer.answer(answer)

    def edit(self, instruction: str) -> None:
        """Apply an edit instruction and show its diff (large deletions ask first)."""
        with self.renderer.working("rewriting the history..."):
            outcome = self.session.edit(instruction)
        if not outcome.changed:
            self.renderer.info("the editor proposed no change; nothing was changed")
            return
        if outcome.needs_confirmation:
            self.renderer.diff(outcome.proposal.diff)
            question = f"This edit deletes {outcome.deleted_share:.0%} of the conversation. Apply it? [y/N] "
            if self.reader(self.renderer.prompt(True).append(question)).strip().lower() not in ("y", "yes"):
                self.renderer.info("not applied; nothing was changed")
                return
            revision = self.session.commit(outcome.proposal)
        else:
            revision = outcome.revision
        assert revision is not None
        self.renderer.ok(f"history edited (revision {revision.number}); /undo takes it back:")
        self.renderer.diff(self.session.transcript.diff(revision.number - 1, revision.number))

    def show_conversation(self) -> None:
        """Print the current state, numbered by turn."""
        turns = self.session.turns()
        shown = {m.id for _, turn in turns for m in turn.messages}
        extra = [m for m in self.session.transcript.messages if m.id not in shown]
        self.renderer.conversation(turns, self.session.pinned_numbers(), extra)

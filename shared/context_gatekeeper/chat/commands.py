"""The slash commands of the terminal chat: one small handler each, listed in one table.

A handler takes the running :class:`~context_gatekeeper.chat.loop.ChatLoop` and the
text after the command name.  Errors of this library raised by a handler are shown
by the loop, which then carries on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .. import HistoryError, InvalidInputError
from .session_file import read_session_file, session_document, write_session_file

if TYPE_CHECKING:
    from .loop import ChatLoop

__all__ = ["Command", "COMMANDS", "dispatch"]


@dataclass(frozen=True)
class Command:
    """One slash command: ``usage`` and ``help`` are what ``/help`` lists."""

    name: str
    usage: str
    help: str
    run: Callable[["ChatLoop", str], None]


def _edit(loop: "ChatLoop", arg: str) -> None:
    if arg:
        loop.edit(arg)
    else:
        loop.set_mode(not loop.editing)


def _chat(loop: "ChatLoop", arg: str) -> None:
    loop.set_mode(False)


def _undo(loop: "ChatLoop", arg: str) -> None:
    revision = loop.write(
        loop.session.undo, lambda r: f"the undo is already stored as revision {r.number}; /redo takes it back"
    )
    loop.renderer.ok(f"undid revision {revision.target} (now revision {revision.number}):")
    loop.renderer.diff(loop.session.transcript.diff(revision.number - 1, revision.number))


def _redo(loop: "ChatLoop", arg: str) -> None:
    revision = loop.write(
        loop.session.redo, lambda r: f"the redo is already stored as revision {r.number}; /undo takes it back"
    )
    loop.renderer.ok(f"redid revision {revision.target} (now revision {revision.number}):")
    loop.renderer.diff(loop.session.transcript.diff(revision.number - 1, revision.number))


def _numbers(arg: str, usage: str) -> list[int]:
    try:
        return [int(part) for part in arg.split()]
    except ValueError:
        raise InvalidInputError(f"expected revision or turn numbers: {usage}") from None


def _diff(loop: "ChatLoop", arg: str) -> None:
    transcript = loop.session.transcript
    numbers = _numbers(arg, "/diff [a [b]]")
    if len(numbers) > 2:
        raise InvalidInputError("usage: /diff [a [b]]")
    if not numbers:
        last = loop.session.last_change()
        if last is None:
            loop.renderer.info("no edits yet: /diff shows what the last edit, undo or redo changed")
            return
        numbers = [last.number - 1, last.number]
    loop.renderer.diff(transcript.diff(*numbers))


def _history(loop: "ChatLoop", arg: str) -> None:
    transcript = loop.session.transcript
    loop.renderer.history(transcript.history(), transcript.head)


def _show(loop: "ChatLoop", arg: str) -> None:
    loop.show_conversation()


def _context(loop: "ChatLoop", arg: str) -> None:
    loop.renderer.context(loop.session.last_call)


def _pins_line(loop: "ChatLoop") -> str:
    """What is pinned, and how to change it."""
    pinned = loop.session.pinned_numbers()
    if not pinned:
        return "no pinned turns; /pin N pins turn N so it is always sent (/show numbers the turns)"
    return f"pinned turns: {', '.join(map(str, pinned))} (always sent to the model; /unpin N stops that)"


_PINS_STORED = "the new pins are already stored; /pin lists them"


def _pin(loop: "ChatLoop", arg: str) -> None:
    numbers = _numbers(arg, "/pin N")  # all or none: one unknown number pins nothing
    loop.write(lambda: loop.session.pin_turns(numbers), lambda _: _PINS_STORED)
    loop.renderer.ok(_pins_line(loop))


def _unpin(loop: "ChatLoop", arg: str) -> None:
    numbers = _numbers(arg, "/unpin N")
    loop.write(lambda: loop.session.pin_turns(numbers, pinned=False), lambda _: _PINS_STORED)
    loop.renderer.ok(_pins_line(loop))


def _save(loop: "ChatLoop", arg: str) -> None:
    if not arg:
        raise InvalidInputError("usage: /save PATH")
    session = loop.session
    document = session_document(session.transcript.session_id, session.transcript.messages, pinned=session.pinned)
    database = getattr(session.transcript.store, "path", None)
    protected = [database] if isinstance(database, str) and database != ":memory:" else []
    try:
        path = loop.write(
            lambda: write_session_file(arg, document, protected=protected),
            lambda written: f"the conversation is already saved to {written}",
        )
    except OSError as exc:
        raise InvalidInputError(f"cannot write {arg}: {exc}") from exc
    loop.renderer.ok(f"saved {len(document['messages'])} messages to {path}")


def _load(loop: "ChatLoop", arg: str) -> None:
    if not arg:
        raise InvalidInputError("usage: /load PATH")
    loaded = read_session_file(arg)  # validated in full before anything changes
    revision = loop.write(  # the messages and the pins: one step, which Ctrl-C waits for
        lambda: loop.session.load(loaded.messages, loaded.pinned),
        lambda r: f"the load is already stored as revision {r.number}; /undo takes it back (pins included)"
        if r.changes else None,
    )
    count = len(loaded.messages)
    filed = [n for n, turn in loop.session.turns() if turn.key in set(loaded.pinned)]
    if revision.changes:
        loop.renderer.ok(f"loaded {count} messages as revision {revision.number} (/undo takes it back, pins included)")
    elif filed != loop.session.pinned_numbers():  # a pin change alone would be no revision: /undo could not take it back
        shown = f"turn{'s' if len(filed) > 1 else ''} {', '.join(map(str, filed))}" if filed else "no turn"
        loop.renderer.ok(
            f"the conversation already holds the {count} messages of {arg}: nothing changed, pins included "
            f"(the file pins {shown}; /pin N and /unpin N change the pins)"
        )
    else:
        loop.renderer.ok(f"the conversation already is what {arg} holds ({count} messages and its pins): nothing changed")
    loop.show_conversation()


def _retry(loop: "ChatLoop", arg: str) -> None:
    if loop.unsent is None:
        raise HistoryError("nothing to retry: /retry resends a message whose model call failed")
    loop.chat(loop.unsent)


def _help(loop: "ChatLoop", arg: str) -> None:
    loop.renderer.help([(c.usage, c.help) for c in COMMANDS.values()])


def _quit(loop: "ChatLoop", arg: str) -> None:
    loop.done = True


COMMANDS: dict[str, Command] = {
    c.name: c
    for c in (
        Command("edit", "/edit [INSTRUCTION]", "toggle EDIT HISTORY mode, or apply one edit instruction now", _edit),
        Command("chat", "/chat", "back to chat mode", _chat),
        Command("undo", "/undo", "revert the last edit, load or redo (chat turns stay)", _undo),
        Command("redo", "/redo", "re-apply what the last /undo reverted", _redo),
        Command("diff", "/diff [A [B]]", "what changed: the last edit, A to now, or A to B", _diff),
        Command("history", "/history", "the revision list (appends, edits, undos...)", _history),
        Command("show", "/show", "the current conversation, turn by turn", _show),
        Command("context", "/context", "what the model saw on the last call, and why each turn was kept or dropped", _context),
        Command("pin", "/pin [N]", "always send turn N (or turns: /pin 1 3) to the model, also after a restart; /pin alone lists the pins", _pin),
        Command("unpin", "/unpin N", "stop pinning turn N (or turns: /unpin 1 3)", _unpin),
        Command("save", "/save PATH", "write the conversation to a JSON session file", _save),
        Command("load", "/load PATH", "replace the conversation and its pins with a session file (validated; /undo takes both back)", _load),
        Command("retry", "/retry", "resend the last message whose model call failed", _retry),
        Command("help", "/help", "this list", _help),
        Command("quit", "/quit", "leave (the conversation is already saved)", _quit),
    )
}
_ALIASES = {"exit": "quit", "q": "quit", "h": "help", "?": "help"}


def dispatch(loop: "ChatLoop", line: str) -> None:
    """Run the slash command in ``line`` (which starts with ``/``)."""
    parts = line[1:].split(None, 1)  # any whitespace after the name: "/edit<TAB>..."
    name, arg = (parts + ["", ""])[:2]
    command = COMMANDS.get(_ALIASES.get(name.lower(), name.lower()))
    if command is None:
        raise InvalidInputError(f"unknown command /{name}; /help lists the commands")
    command.run(loop, arg.strip())

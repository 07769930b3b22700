"""Everything the terminal chat draws, with ``rich``.

The only module of the chat that imports ``rich`` at import time; the prompt's
mode indicator, messages, diffs, the revision list and the ``/context`` report
are drawn here, so the loop and commands never deal with markup.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import sys
from collections.abc import Iterator, Sequence
from typing import IO, Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from .. import Diff, Message, Revision
from ..integration import Change, MessageTurn, Remove
from .session import LastCall
from .visible import visible

__all__ = ["Renderer", "SafeOutput", "make_console", "styled", "visible", "CHAT_PROMPT", "EDIT_PROMPT"]

CHAT_PROMPT = "[chat] > "
EDIT_PROMPT = "[EDIT HISTORY] > "
_ROLE_STYLE = {"user": "bold cyan", "assistant": "bold green", "system": "bold magenta", "tool": "bold yellow"}


class SafeOutput:
    """A text stream that never fails on text it cannot encode.

    A lone surrogate (``"\\ud800"``, from a session file, a model or a stored
    session) or a character the terminal's encoding lacks is written as a
    backslash escape instead of raising ``UnicodeEncodeError`` mid-draw.
    Everything else is the wrapped stream's.
    """

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        encoding = getattr(self._stream, "encoding", None) or "utf-8"
        try:
            text.encode(encoding)
        except UnicodeEncodeError:
            text = text.encode(encoding, "backslashreplace").decode(encoding)
        except LookupError:  # an encoding Python does not know: keep to ASCII
            text = text.encode("ascii", "backslashreplace").decode("ascii")
        return self._stream.write(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def make_console(*, plain: bool = False, file: IO[str] | None = None, width: int | None = None) -> Console:
    """A console: colours unless ``plain`` (or the output is not a terminal); long lines are not
    wrapped; text that cannot be encoded is escaped (see :class:`SafeOutput`)."""
    output: Any = SafeOutput(file if file is not None else sys.stdout)
    return Console(file=output, no_color=plain, highlight=False, emoji=False, width=width, soft_wrap=True)


def styled(*parts: str | tuple[str, str] | Text) -> Text:
    """``Text.assemble(*parts)`` (each a text, a ``(text, style)`` pair or a ``Text``), every
    text made :func:`visible` first: rich drops CR, BS, VT, FF and BEL as it builds a
    ``Text``, so they must become their pictures before, not after."""
    return Text.assemble(*(_visible_part(part) for part in parts))


def _visible_part(part: str | tuple[str, str] | Text) -> str | tuple[str, str] | Text:
    """One part of :func:`styled`, its text made :func:`visible` (a ``Text`` is taken as built)."""
    if isinstance(part, tuple):
        return visible(part[0]), part[1]
    return visible(part) if isinstance(part, str) else part


def _short(text: str, limit: int = 70) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


class Renderer:
    """Draws the chat on a :class:`rich.console.Console`."""

    def __init__(self, console: Console) -> None:
        self.console = console

    def _print(self, *objects: Any) -> None:
        """``console.print``, every text first made :func:`visible` (a ``Text`` is built by
        :func:`styled`, a table's cells are made visible where the table is built; making
        a ``Text`` visible again here catches one built otherwise, though rich has already
        dropped its CR, BS, VT, FF and BEL)."""
        shown = []
        for item in objects:
            if isinstance(item, Text):
                item.plain = visible(item.plain)  # one character for one: its styles stay in place
            elif isinstance(item, str):
                item = visible(item)
            shown.append(item)
        self.console.print(*shown)

    # -- prompt and status --------------------------------------------------------------
    def prompt(self, editing: bool) -> Text:
        """The input prompt: an unmistakable ``[chat]`` or ``[EDIT HISTORY]`` prefix."""
        if editing:
            return Text(EDIT_PROMPT, style="bold black on yellow")
        return Text(CHAT_PROMPT, style="bold green")

    @contextlib.contextmanager
    def working(self, what: str) -> Iterator[None]:
        """A spinner while the model works (only on a terminal; piped output stays clean)."""
        if self.console.is_terminal:
            with self.console.status(what, spinner="dots"):
                yield
        else:
            yield

    def info(self, text: str) -> None:
        self._print(styled((text, "dim")))

    def notice(self, text: str) -> None:
        self._print(styled((text, "bold yellow")))

    def ok(self, text: str) -> None:
        self._print(styled((text, "green")))

    def error(self, text: str) -> None:
        self._print(styled(("error: ", "bold red"), text))

    def echo(self, prompt: Text, line: str) -> None:
        """Show an input line that did not come from a terminal (piped or scripted)."""
        self._print(styled(prompt, line))

    def mode(self, editing: bool) -> None:
        if editing:
            self.notice("EDIT HISTORY mode: what you type now rewrites the conversation. /edit returns to chat.")
        else:
            self.ok("chat mode: what you type is sent to the model.")

    # -- conversation -------------------------------------------------------------------
    def message(self, message: Message | None, *, role: str | None = None, text: str | None = None) -> None:
        """One message: its role, its provenance if edited, its text."""
        role = role or (message.role if message else "assistant")
        provenance = ""
        if message is not None and message.origin != "original":
            provenance = f"({message.origin} r{message.revision}) "
        body = text if text is not None else (message.content if message else "")
        self._print(styled((f"{role}: ", _ROLE_STYLE.get(role, "bold")), (provenance, "italic yellow"), body))

    def answer(self, text: str) -> None:
        self.message(None, role="assistant", text=text)

    def sent_note(self, call: LastCall | None) -> None:
        """One dim line after an answer: how many earlier turns the model was sent (nothing
        before the first turn).  Shown, never stored: the answer alone goes into the transcript."""
        if call is None or not call.turn_count:
            return
        kept, total = len(call.selection.turn_ids), call.turn_count
        self.info(f"(the model was sent {kept} of {total} earlier turn{'' if total == 1 else 's'}; /context shows why)")

    def conversation(self, turns: Sequence[tuple[int, MessageTurn]], pinned: Sequence[int], extra: Sequence[Message] = ()) -> None:
        """The current state, turn by turn, numbered as ``/pin`` takes them."""
        if not turns and not extra:
            self.info("(the conversation is empty)")
            return
        for number, turn in turns:
            mark = " (pinned)" if number in pinned else ""
            self._print(styled((f"-- turn {number}{mark}", "dim")))
            for message in turn.messages:
                self.message(message)
        for message in extra:
            self.message(message)

    # -- versions -----------------------------------------------------------------------
    def diff(self, diff: Diff) -> None:
        """A unified diff of two states, coloured line by line (messages named by position)."""
        for line in diff_lines(diff):
            style = "green" if line.startswith("+") else "red" if line.startswith("-") else "cyan" if line.startswith("@@") else ""
            self._print(styled((line, style)))

    def history(self, revisions: Sequence[Revision], head: int) -> None:
        """The revision list: number, kind, time, what it did."""
        if not revisions:
            self.info("(no revisions yet)")
            return
        table = Table(title=f"revisions (head {head})", show_edge=False, pad_edge=False)
        for column in ("#", "kind", "time", "change", "details"):
            table.add_column(column, overflow="fold")
        for revision in revisions:
            table.add_row(
                str(revision.number),
                revision.kind,
                _dt.datetime.fromtimestamp(revision.time).strftime("%H:%M:%S"),
                _counts(revision),
                escape(visible(_details(revision))),
            )
        self._print(table)

    # -- /context -----------------------------------------------------------------------
    def context(self, call: LastCall | None) -> None:
        """What the model saw on the last call and why each earlier turn was kept or dropped."""
        if call is None:
            self.info("no model call yet in this run: send a message first")
            return
        s, g = call.selection, call.selection.gate
        cues = ", ".join(g.cues.reference + g.cues.switch + g.cues.returning) or "none"
        self._print(styled((f"last query: {call.query}", "bold")))
        self._print(
            f"gate: {s.decision} | "
            f"overlap {g.overlap:.2f} | new-anchor ratio {g.new_anchor_ratio:.2f} | cues: {escape(visible(cues))}"
        )
        kept = ", ".join(map(str, s.turn_ids)) or "none"
        self._print(
            f"kept turns: {kept} of {call.turn_count} | tokens {s.tokens_kept}/{s.tokens_total} "
            f"(saved {s.tokens_saved}) | coverage {s.coverage:.0%}"
            + (" | OVER BUDGET (pinned content only)" if s.over_budget else "")
        )
        if s.scores:
            table = Table(show_edge=False, pad_edge=False)
            for column in ("turn", "kept", "reason", "score", "user", "asst", "exact", "recent", "tokens"):
                left = column in ("kept", "reason")
                table.add_column(column, justify="left" if left else "right", no_wrap=column == "reason")
            for t in sorted(s.scores, key=lambda t: t.turn_id):
                table.add_row(
                    str(t.turn_id), "yes" if t.kept else "no", t.reason, f"{t.total:.2f}", f"{t.user:.2f}",
                    f"{t.assistant:.2f}", f"{t.exact:.2f}", f"{t.recency:.2f}", str(t.cost),
                )
            self._print(table)
            self.info("score = user + asst + exact + recent (already weighted); reason: why kept or dropped")
        scored = {t.turn_id for t in s.scores}
        unscored = call.turn_count - len(scored)
        if unscored > 0:
            self.info(f"{unscored} other turn(s) shared no anchor with the query: dropped")
        self._print(styled((f"sent to the model ({len(call.sent)} messages):", "bold")))
        for m in call.sent:
            role = m["role"]
            self._print(styled((f"  {role}: ", _ROLE_STYLE.get(role, "")), _short(m["content"])))

    def help(self, rows: Sequence[tuple[str, str]]) -> None:
        table = Table(show_header=False, show_edge=False, pad_edge=False, box=None)
        table.add_column("command", style="bold", no_wrap=True)
        table.add_column("what it does")
        for usage, text in rows:
            table.add_row(Text(usage), Text(text))
        self._print(table)


def diff_lines(diff: Diff) -> list[str]:
    """``str(diff)`` line by line: each message named by role and position (``user #1``), not by id.

    Split at newlines only: a carriage return or a separator character (U+2028, ``\\x1c``)
    inside a message is drawn as itself (:func:`visible`), never starts a line of its own."""
    text = str(diff)
    return text.removesuffix("\n").split("\n") if text else []


def _says(message: Message) -> tuple[Any, ...]:
    """What a message says (a moved message that says the same is only moved)."""
    return message.role, message.content, message.parts, message.metadata


def _counts(revision: Revision) -> str:
    """What ``revision`` did, as ``/history`` shows it: ``+added -removed ~changed``, then
    ``N moved`` for messages it only moved, as ``diff`` counts them (a message moved and
    rewritten counts as changed)."""
    added, removed, moves = len(revision.added), len(revision.removed), revision.moved
    taken = {c.message.id: c.message for c in revision.changes if isinstance(c, Remove)} if moves else {}
    moved = sum(1 for m in moves if _says(m) == _says(taken[m.id]))
    changed = sum(isinstance(c, Change) for c in revision.changes) + len(moves) - moved
    parts = [f"+{added}" if added else "", f"-{removed}" if removed else "", f"~{changed}" if changed else "",
             f"{moved} moved" if moved else ""]
    return " ".join(p for p in parts if p) or "none"


def _details(revision: Revision) -> str:
    if revision.instruction:
        return f'"{_short(revision.instruction, 50)}" ({revision.model})'
    if revision.target is not None:
        return f"revision {revision.target}"
    first = next((m for m in revision.added if m.role == "user"), None)
    return _short(first.content, 50) if first else ""

"""Pluggable input for the chat loop.

A reader is any callable ``reader(prompt) -> str`` that shows ``prompt`` (a
:class:`rich.text.Text`), returns one line without its newline, raises
``EOFError`` when input ends and ``KeyboardInterrupt`` on Ctrl-C.

* :class:`TerminalReader` reads from an interactive terminal (line editing through
  ``input()``);
* :class:`LineReader` reads from any iterable of lines (piped stdin, a list in a
  test) and echoes each line after the prompt, so a piped session reads like an
  interactive one.  An item that is an exception (class or instance) is raised
  instead: ``LineReader(["hi", KeyboardInterrupt], ...)`` simulates Ctrl-C.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol

__all__ = ["Reader", "TerminalReader", "LineReader"]


class Reader(Protocol):
    """Reads one line of input after showing ``prompt``."""

    def __call__(self, prompt: Any) -> str: ...


class TerminalReader:
    """Reads lines from an interactive terminal through the console (with line editing)."""

    def __init__(self, console: Any) -> None:
        self.console = console

    def __call__(self, prompt: Any) -> str:
        return self.console.input(prompt)


class LineReader:
    """Reads from an iterable of lines and echoes each after the prompt.

    Args:
        lines: the input (a file object such as ``sys.stdin``, or a list).
        echo: ``echo(prompt, line)`` shows the prompt with the line read.
    """

    def __init__(self, lines: Iterable[Any], echo: Callable[[Any, str], None]) -> None:
        self._lines = iter(lines)
        self._echo = echo

    def __call__(self, prompt: Any) -> str:
        item = next(self._lines, None)
        if item is None:
            raise EOFError
        if isinstance(item, BaseException) or (isinstance(item, type) and issubclass(item, BaseException)):
            raise item
        line = str(item).rstrip("\r\n")
        self._echo(prompt, line)
        return line

"""SIGTERM for both front ends: it takes Ctrl-C's path, so their clean-up runs.

A process ended by SIGTERM's default handler skips every ``finally``: the store is not
closed, the SQLite database is not checkpointed (what was said last lives only in the
``-wal`` file, and a copy of the ``.sqlite3`` file alone misses it), and the exit status
is 143 from a signal death.  Inside :func:`sigterm_as_ctrl_c` SIGTERM raises
:class:`Terminated` instead, a :class:`KeyboardInterrupt` that says it came from SIGTERM:
code that stops on Ctrl-C stops on it too, and code that *cancels* on Ctrl-C (the terminal
chat cancels a model call and carries on) can tell it apart and stop.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

__all__ = ["Terminated", "sigterm_as_ctrl_c", "EXIT_TERMINATED"]

EXIT_TERMINATED = 128 + signal.SIGTERM
"""The terminal chat's exit status after SIGTERM (143, the shell's code for it), its
conversation saved and its store closed."""


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C's :class:`KeyboardInterrupt` would be."""

    def __init__(self) -> None:
        super().__init__("SIGTERM")


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    raise Terminated()


@contextmanager
def sigterm_as_ctrl_c() -> Iterator[None]:
    """SIGTERM raises :class:`Terminated` (a :class:`KeyboardInterrupt`) while the block
    runs, in the main thread (elsewhere a signal cannot be handled: the block runs as it
    is); the handler found is put back after.

    The web server: uvicorn shuts down on SIGINT or SIGTERM, then raises the signal again
    with the handler it found, so the server's caller sees :class:`Terminated` and closes
    the store.  The terminal chat: SIGTERM at the prompt or during a model call ends the
    loop with the conversation saved (:data:`EXIT_TERMINATED`).  A second SIGTERM while
    the first is handled is another :class:`Terminated`, as a second Ctrl-C is another
    :class:`KeyboardInterrupt`.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)

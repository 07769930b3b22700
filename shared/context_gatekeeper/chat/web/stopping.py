"""Model calls a stopping web chat can walk away from.

A request that waits for a model (a chat answer, an edit preview) runs the call in
a daemon thread and waits for its results here.  When the server stops
(:meth:`Stopper.stop`, on Ctrl-C or SIGTERM), every such wait ends at once with
:class:`ServerStoppingError`: nothing is stored, the page hears why, and a model
call that never returns (a network call that hangs) cannot keep the server, or the
process, from stopping.  The call itself runs on until it returns, and its result
is dropped.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Generator, Iterable, Iterator
from contextlib import closing
from typing import Any, TypeVar

from ... import ModelUnavailableError

__all__ = ["Stopper", "ServerStoppingError"]

T = TypeVar("T")


class ServerStoppingError(ModelUnavailableError):
    """The web chat is stopping: a model call still under way was abandoned, nothing stored."""


def _stopping_error() -> ServerStoppingError:
    return ServerStoppingError(
        "the web chat is stopping (Ctrl-C or SIGTERM): the model's answer was abandoned and nothing was "
        "stored; start the server again to go on."
    )


def _feed(produce: Callable[[], Iterable[Any]], box: "queue.SimpleQueue[tuple[str, Any]]", gone: threading.Event) -> None:
    """Put the items of ``produce()`` into ``box``, then ``end`` (or ``error``); stop early,
    closing a model's stream, once the waiting side is ``gone``."""
    items: Iterator[Any] | None = None
    try:
        items = iter(produce())
        for item in items:
            box.put(("item", item))
            if gone.is_set():
                return
        box.put(("end", None))
    except BaseException as exc:  # handed to the waiting side, which raises it
        box.put(("error", exc))
    finally:
        close = getattr(items, "close", None)
        if callable(close):
            close()


class Stopper:
    """Runs model calls in daemon threads and ends every wait for them on :meth:`stop`."""

    def __init__(self) -> None:
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._waiting: set[queue.SimpleQueue[tuple[str, Any]]] = set()

    @property
    def stopping(self) -> bool:
        """Whether :meth:`stop` was called."""
        return self._stopping.is_set()

    def stop(self) -> None:
        """End every wait for a model call now, and refuse new ones."""
        with self._lock:
            self._stopping.set()
            for box in self._waiting:
                box.put(("stop", None))

    def check(self) -> None:
        """:class:`ServerStoppingError` once :meth:`stop` was called."""
        if self._stopping.is_set():
            raise _stopping_error()

    def items(self, produce: Callable[[], Iterable[T]]) -> Generator[T, None, None]:
        """The items of ``produce()`` (a model's streamed chunks), computed in a daemon thread;
        :class:`ServerStoppingError` as soon as the server stops."""
        box: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        gone = threading.Event()
        with self._lock:
            self.check()
            self._waiting.add(box)
        try:
            threading.Thread(target=_feed, args=(produce, box, gone), name="gatekeeper-web-model", daemon=True).start()
            while True:
                kind, value = box.get()
                if kind == "item":
                    yield value
                elif kind == "end":
                    return
                elif kind == "error":
                    raise value
                else:
                    raise _stopping_error()
        finally:
            gone.set()
            with self._lock:
                self._waiting.discard(box)

    def call(self, function: Callable[[], T]) -> T:
        """``function()`` computed in a daemon thread (see :meth:`items`)."""
        with closing(self.items(lambda: (function(),))) as results:
            return next(results)

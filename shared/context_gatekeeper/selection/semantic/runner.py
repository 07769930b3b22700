"""Where embedding calls run, and what an outage does: per embedder, shared by every user.

Each underlying embedder object (a LangChain ``Embeddings``, a LlamaIndex model, a
function; ``functools.partial`` and bound methods count as their target) gets one
:class:`EmbedderState`, shared by every gatekeeper, history and channel that uses it:

* two *lanes* -- serial executors on one daemon thread each, one for batches of turns,
  one for queries.  A sync-only embedder's calls run there, one at a time per lane, so
  a hung embedder holds at most two threads of the process, never the asyncio default
  executor, and never keeps the process from exiting.  An idle lane's thread ends
  after :data:`IDLE_SECONDS` and is started again on demand.
* the outage state: after a failure or a timeout, the embedder is not called again for
  :data:`BACKOFF_SECONDS` (doubling up to :data:`MAX_BACKOFF_SECONDS` while it keeps
  failing), and one warning is logged per outage, not per caller.

Nothing here imports numpy or a framework.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import functools
import logging
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

__all__ = ["EmbedderState", "Lane", "state_of", "run_locked", "forget_outages", "wait_idle", "BACKOFF_SECONDS", "MAX_BACKOFF_SECONDS", "IDLE_SECONDS"]

logger = logging.getLogger("context_gatekeeper.selection.gatekeeper")

BACKOFF_SECONDS = 30.0
"""How long an embedder that failed or timed out is left alone before the next try."""
MAX_BACKOFF_SECONDS = 600.0
"""The backoff doubles while the embedder keeps failing, up to this."""
IDLE_SECONDS = 30.0
"""A lane's thread ends after this long without work."""


class Lane:
    """A serial executor on one daemon thread, started on demand and ended when idle."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._cond = threading.Condition(threading.Lock())
        self._jobs: collections.deque = collections.deque()
        self._thread: threading.Thread | None = None
        self._running = False
        self._started = 0.0  # when the running call began (time.monotonic)
        self._closed = False  # its embedder is gone: the thread ends once idle, without waiting

    def submit(self, fn: Callable[..., Any], *args: Any) -> concurrent.futures.Future:
        """Queue ``fn(*args)``; its future (``cancel()`` works until it starts)."""
        future: concurrent.futures.Future = concurrent.futures.Future()
        with self._cond:
            self._jobs.append((future, fn, args))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()
            else:
                self._cond.notify()
        return future

    @property
    def busy(self) -> bool:
        """Whether a call runs or waits here now."""
        with self._cond:
            return bool(self._jobs) or self._running

    def close(self) -> None:
        """End the thread as soon as no call is left (its embedder is gone: no call can come)."""
        with self._cond:
            self._closed = True
            self._cond.notify()

    def running_for(self) -> float | None:
        """Seconds the call running here has run, or ``None`` when none runs."""
        with self._cond:
            return time.monotonic() - self._started if self._running else None

    def _run(self) -> None:
        while True:
            with self._cond:
                self._running = False
                if not self._jobs and not self._closed:
                    self._cond.wait(IDLE_SECONDS)
                if not self._jobs:
                    self._thread = None
                    return
                future, fn, args = self._jobs.popleft()
                self._running, self._started = True, time.monotonic()
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn(*args))
                except BaseException as exc:  # noqa: BLE001 -- handed to whoever waits
                    future.set_exception(exc)
            future = fn = args = None  # hold nothing while idle


class EmbedderState:
    """The lanes and the outage state of one underlying embedder (see the module doc)."""

    def __init__(self, label: str) -> None:
        self.documents = Lane(f"gatekeeper-embed-documents[{label}]")
        self.queries = Lane(f"gatekeeper-embed-query[{label}]")
        self._lock = threading.Lock()
        self.failing = False
        self.retry_at = 0.0
        self.delay = 0.0
        self.warnings = 0

    def blocked(self) -> bool:
        """Whether the embedder is being left alone after a failure (backoff)."""
        return self.failing and time.monotonic() < self.retry_at

    def failed(self, exc: BaseException, name: str) -> None:
        """Record a failure or timeout: back off, and warn once per outage.

        The outage's warning is logged before the outage is visible: ``failing`` is set
        only after it, and a concurrent ``failed`` waits on the lock meanwhile, so whoever
        falls back because of this outage (backing off, or failing in turn) finds its one
        warning already logged, whichever thread noticed the outage first.  A failure
        reported while the embedder is already backing off (a call on the other lane that
        raced the one that failed first) changes nothing: the backoff doubles once per try."""
        with self._lock:
            if self.failing and time.monotonic() < self.retry_at:
                return  # a call that raced this one already recorded this failure: one doubling per try
            first = not self.failing
            delay = BACKOFF_SECONDS if first else min(2 * self.delay, MAX_BACKOFF_SECONDS)
            if first:
                self.warnings += 1
                logger.warning(
                    "embedder %r failed (%s: %s); selecting lexically, next try in %.0f s",
                    name, type(exc).__name__, exc, delay,
                )
            self.delay, self.retry_at = delay, time.monotonic() + delay
            self.failing = True  # last: blocked() reads it without the lock

    def answered(self) -> None:
        """Record a success: the outage (if any) is over."""
        if self.failing:
            with self._lock:
                self.failing, self.delay, self.retry_at = False, 0.0, 0.0

    def reset(self) -> None:
        """Forget the outage (tests; an operator who knows the service is back)."""
        with self._lock:
            self.failing, self.delay, self.retry_at = False, 0.0, 0.0


_states: dict[int, tuple[Any, EmbedderState]] = {}
_states_lock = threading.Lock()
_dead: collections.deque = collections.deque()  # (key, ref) of objects gone; removed under the lock


def _target(fn: Any) -> Any:
    """The object behind a method, a partial or a plain callable."""
    while True:
        inner = getattr(fn, "__self__", None)
        if inner is None or isinstance(inner, type(collections)):  # builtins' __self__ is a module
            inner = getattr(fn, "func", None)  # functools.partial
        if inner is None or inner is fn:
            return fn
        fn = inner


def state_of(embedder: Any) -> EmbedderState:
    """The shared state of the object behind an :class:`~embedding.Embedder` (keyed by
    identity, held weakly: it goes when the object goes; an object that can't be
    referenced weakly gets one state per ``Embedder``)."""
    target = _target(getattr(embedder, "_documents", embedder))
    try:
        ref = weakref.ref(target, functools.partial(_forget, id(target)))
    except TypeError:
        target = embedder
        ref = weakref.ref(target, functools.partial(_forget, id(target)))
    with _states_lock:
        _purge()
        held = _states.get(id(target))
        if held is not None and held[0]() is target:
            return held[1]
        state = EmbedderState(getattr(embedder, "name", type(target).__name__))
        _states[id(target)] = (ref, state)
        return state


def _forget(key: int, ref: Any) -> None:
    # a weakref callback runs inside garbage collection, maybe while this thread holds
    # _states_lock: only note it (deque.append is atomic); _purge removes it later
    _dead.append((key, ref))


def _purge() -> None:
    while _dead:
        key, ref = _dead.popleft()
        held = _states.get(key)
        if held is not None and held[0] is ref:
            del _states[key]
            held[1].documents.close()  # no call can come for an embedder that is gone
            held[1].queries.close()


def _all_states() -> list[EmbedderState]:
    with _states_lock:
        _purge()
        return [state for _, state in tuple(_states.values())]


async def run_locked(lock: Any, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` holding ``lock`` (a ``threading`` lock), without ever waiting for it
    on the event loop thread: inline when it is free, else in a worker thread (the lock
    is only ever held for short CPU work and cache reads, never an embedding call)."""
    if lock.acquire(blocking=False):
        try:
            return fn(*args)
        finally:
            lock.release()

    def locked() -> Any:
        with lock:
            return fn(*args)

    return await asyncio.to_thread(locked)


def forget_outages() -> None:
    """Forget every embedder's outage state (tests; an operator who knows services are back)."""
    for state in _all_states():
        state.reset()


def wait_idle(timeout: float | None = None) -> bool:
    """Wait until no embedder has background work queued or running (every pass of
    turns done); ``False`` if ``timeout`` seconds pass first.  For tests and benchmarks
    that cannot reach a gatekeeper's ``embed_pending`` (e.g. a view built per call)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    for state in _all_states():
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                state.documents.submit(_nothing).result(left)
            except concurrent.futures.TimeoutError:
                return False
            if not state.documents.busy:
                break
    return True


def _nothing() -> None:
    return None

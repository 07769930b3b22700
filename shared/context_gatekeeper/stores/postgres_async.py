"""The native async twins of :class:`~context_gatekeeper.stores.postgres.PostgresStore`.

They run the very operations the sync methods run (the step generators of
:mod:`.postgres_ops`) on a :class:`psycopg.AsyncConnection`, so a commit makes the same
head check, rebase, :func:`~.base.prepare_commit` and advisory-lock wait inside the
same transaction, without a worker thread and without blocking the event loop.

Event loops: an :class:`~psycopg_pool.AsyncConnectionPool` belongs to the loop it was
opened in.  A store opened from a connection string opens one on first async use in
each loop (``asyncio.run`` twice, or a test runner's loop per test, each get their
own).  How a loop's pool is released:

* ``await store.aclose()`` on that loop closes it there; ``close()`` or ``aclose()``
  elsewhere closes it on its loop: scheduled there if the loop is running, else, if the
  loop is idle (neither running nor closed, e.g. a ``new_event_loop()`` driven by
  ``run_until_complete`` and left open), by running the loop in a short-lived thread
  until the pool is closed (so do not start that loop from another thread meanwhile);
* a loop that has closed: its pool is forgotten at the next opening or close (its tasks
  were cancelled with the loop; its idle connections go when the pool is collected);
* an idle loop whose thread (the one that asked for the pool) has ended: its pool is
  closed as above when another loop next opens one.  An idle loop of a live thread may
  run again, so its pool stays until the store is closed.

Pools are keyed by the loop itself: a weak reference would free nothing, as the pool's
own tasks hold their loop.  A pool given as ``async_pool`` belongs to the loop its
tasks run on (or, not open yet, to the first loop that uses it) and is refused from
another (:class:`InvalidInputError`) instead of hanging.  Closing is idempotent per
resource: a ``close`` or ``aclose`` that was cancelled or failed partway still closes
the sync pool, and calls racing it raise :class:`StoreClosedError`.  See
``docs/architecture.md#concurrency-rules``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractAsyncContextManager, contextmanager, nullcontext
from typing import Any, NamedTuple, TypeVar

import psycopg
from psycopg_pool import AsyncConnectionPool, PoolClosed

from ..errors import InvalidInputError, StoreClosedError
from ..records.revisions import Revision
from .base import checked_keep
from .postgres_ops import PostgresOps, Step, Stepper, Steps, postgres_errors

__all__ = ["PostgresAsync", "PoolOptions", "arun_steps"]

T = TypeVar("T")
_closing: set[concurrent.futures.Future[None]] = set()  # pool closings scheduled on other loops (kept from collection)


class _Opening(NamedTuple):
    """A loop's pool, being opened or open, and the thread that asked for it (when that
    thread has ended and the loop is idle, nothing will run the loop again)."""

    task: asyncio.Task[AsyncConnectionPool]
    thread: threading.Thread


class _Released(NamedTuple):
    """What :meth:`PostgresAsync._release_async_pools` leaves its caller to close."""

    mine: asyncio.Task[AsyncConnectionPool] | None
    idle: list[tuple[asyncio.AbstractEventLoop, _Opening]]


class PoolOptions(NamedTuple):
    """The sizing and timeout of every pool a store opens, sync or async."""

    min_size: int
    max_size: int
    timeout: float

    def pool_kwargs(self) -> dict[str, Any]:
        """Keywords for a psycopg pool: autocommit connections (writes open explicit
        transactions), opened by the caller."""
        return {"min_size": self.min_size, "max_size": self.max_size, "kwargs": {"autocommit": True},
                "open": False, "name": "context-gatekeeper"}


async def arun_steps(conn: Any, pipeline: Any, steps: Steps[T]) -> T:
    """Run ``steps`` on an async connection (``pipeline``: its pipeline, or None); the
    twin of :func:`.postgres_ops.run_steps`."""

    async def execute(step: Step) -> Any:
        if step.fetch == "many":
            async with conn.cursor() as cursor:
                await cursor.executemany(step.query, step.params)
            return None
        if step.fetch == "sync":
            return None if pipeline is None else await pipeline.sync()
        if step.fetch == "hook":  # a test's fault hook may block: never on the loop
            return await asyncio.to_thread(step.query, step.params)
        cursor = await conn.execute(step.query, step.params)
        if step.fetch == "one":
            return await cursor.fetchone()
        return await cursor.fetchall() if step.fetch == "all" else None

    stepper = Stepper(steps)
    step = stepper.next(None)
    while step is not None:
        step = stepper.next(await execute(step))
    return stepper.value


class PostgresAsync(PostgresOps):
    """The async twins, mixed into the store ahead of :class:`~.base.Store` (whose twins
    would run the sync methods in threads)."""

    _closed: bool
    _owns_pool: bool
    _pool: Any  # the sync pool
    _closed_error: Callable[[], StoreClosedError]
    _setup_steps: Callable[[], Steps[None]]
    _run: Any

    def _init_async(self, dsn: str | None, options: PoolOptions, given: AsyncConnectionPool | None) -> None:
        """Where the async twins get connections: ``given``, else pools opened from ``dsn``
        per loop, else (neither) the sync methods in worker threads."""
        self._adsn, self._aoptions, self._agiven = dsn, options, given
        self._agiven_loop: asyncio.AbstractEventLoop | None = None
        self._apools: dict[asyncio.AbstractEventLoop, _Opening] = {}
        # guards _apools, _agiven_loop and the switch of _closed: loops in several threads
        # may open pools at once, and close() may run in yet another thread
        self._apools_lock = threading.Lock()

    async def _apool(self) -> AsyncConnectionPool | None:
        """The async pool of the running loop (opened on first use); None: use threads."""
        if self._closed:
            raise self._closed_error()
        loop = asyncio.get_running_loop()
        if self._agiven is not None:
            return self._given_pool(loop, self._agiven)
        if self._adsn is None:
            return None
        opening = self._apools.get(loop)
        if opening is None or not _succeeded(opening.task):
            opening = self._opening(loop, self._adsn)
        pool = await asyncio.shield(opening.task)  # a cancelled caller leaves the opening to the others
        if self._closed:  # closed while it opened: close() took this pool too; close it now anyway
            await pool.close()
            raise self._closed_error()
        return pool

    def _given_pool(self, loop: asyncio.AbstractEventLoop, given: AsyncConnectionPool) -> AsyncConnectionPool:
        """The caller's ``async_pool``, if ``loop`` is its loop (the loop its tasks run on
        once it is open, else the first loop that uses it)."""
        with self._apools_lock:
            if self._closed:
                raise self._closed_error()
            if self._agiven_loop is None:
                self._agiven_loop = _loop_of(given) or loop
            if self._agiven_loop is not loop:
                raise InvalidInputError(
                    "the async_pool given to this PostgresStore belongs to another event loop (the one it "
                    "was opened in, or that first used it); give each event loop its own store and pool "
                    "(or pass a connection string, and the store opens a pool per loop)"
                )
        return given

    def _opening(self, loop: asyncio.AbstractEventLoop, dsn: str) -> _Opening:
        """The opening of ``loop``'s pool: the one under way or done, else a new one (also
        in place of one that failed or was cancelled).  Forgets the pools of loops that
        have closed, and closes those of loops left idle by a thread that has ended."""
        with self._apools_lock:
            if self._closed:
                raise self._closed_error()
            opening = self._apools.get(loop)
            if opening is None or (opening.task.done() and not _succeeded(opening.task)):
                opening = self._apools[loop] = _Opening(
                    loop.create_task(_aopen_pool(dsn, self._aoptions)), threading.current_thread()
                )
            abandoned = [(other, entry) for other, entry in self._apools.items()
                         if other.is_closed() or (not other.is_running() and not entry.thread.is_alive())]
            for other, _entry in abandoned:
                del self._apools[other]
        close_idle_pools([(other, entry) for other, entry in abandoned if not other.is_closed()], wait=False)
        return opening

    @contextmanager
    def _closing_race(self) -> Iterator[None]:
        """Around a pool checkout: a pool closed by :meth:`close` under a call still in
        flight raises :class:`StoreClosedError`, as a call after it does (a pool of the
        caller's that its owner closed still raises psycopg's ``PoolClosed``)."""
        try:
            yield
        except PoolClosed as exc:
            if not self._closed:
                raise
            raise self._closed_error() from exc

    async def _arun(self, steps: Steps[T], lock: int | None = None) -> T:
        """The async twin of ``_run``: the same steps on a connection of the loop's pool."""
        with postgres_errors(self):
            pool = await self._apool()
        if pool is None:
            return await asyncio.to_thread(self._run, steps, lock)
        with postgres_errors(self), self._closing_race():
            async with pool.connection() as conn:
                if lock is None:
                    return await arun_steps(conn, None, steps)
                async with _apipeline(conn) as pipeline, conn.transaction():
                    return await arun_steps(conn, pipeline, self._locked(lock, steps))

    def _release_async_pools(self, current: asyncio.AbstractEventLoop | None) -> _Released:
        """Mark the store closed and take every pool it opened (so each is closed once):
        those of other running loops are closed on their loop (scheduled), those of loops
        that have closed are dropped (their tasks were cancelled when the loop ended, their
        connections go when the pool is collected).  Returns ``current``'s opening and the
        idle loops' (not running, not closed) for the caller to close."""
        with self._apools_lock:
            self._closed = True
            pools, self._apools = self._apools, {}
        released = _Released(None, [])
        for loop, entry in pools.items():
            if loop is current:
                released = released._replace(mine=entry.task)
            elif loop.is_running():
                _close_on_its_loop(loop, entry.task)
            elif not loop.is_closed():
                released.idle.append((loop, entry))
        return released

    # -- the twins ------------------------------------------------------------------------
    async def asetup(self) -> None:
        """Async :meth:`setup`."""
        await self._arun(self._setup_steps(), self._lock_key("setup"))

    async def ahead(self, session_id: str) -> int:
        """Async :meth:`head`."""
        return await self._arun(self._head_steps(self._key(session_id)))

    async def atip(self, session_id: str) -> tuple[int, float]:
        """Async :meth:`tip`."""
        return await self._arun(self._tip_steps(self._key(session_id)))

    async def arevisions(self, session_id: str, after: int = 0) -> list[Revision]:
        """Async :meth:`revisions`."""
        return await self._arun(self._load_steps(self._key(session_id), after))

    async def acommit(
        self, session_id: str, revision: Revision, *, expected_head: int | None, renew_taken_ids: bool = False
    ) -> Revision:
        """Async :meth:`commit`: the same checks in the same transaction."""
        key = self._key(session_id)
        steps = self._commit_steps(key, revision, expected_head, renew_taken_ids)
        return await self._arun(steps, self._session_lock(key))

    async def atruncate(self, session_id: str, keep: int) -> int:
        """Async :meth:`truncate`."""
        key, keep = self._key(session_id), checked_keep(keep)
        return await self._arun(self._truncate_steps(key, keep), self._session_lock(key))

    async def apurge(self, session_id: str) -> None:
        """Async :meth:`purge`."""
        key = self._key(session_id)
        await self._arun(self._purge_steps(key), self._session_lock(key))

    async def asessions(self) -> list[str]:
        """Async :meth:`sessions`."""
        return await self._arun(self._sessions_steps())

    async def aapplied_migrations(self) -> list[tuple[int, str]]:
        """Async :meth:`applied_migrations`."""
        return await self._arun(self._applied_steps())

    async def aclose(self) -> None:
        """Async :meth:`close`: closes this loop's pool here, other running loops' pools on
        their loop, idle loops' pools on their loop in a worker thread, and the sync pool
        (if the store opened them).  Idempotent; a cancelled or failed ``aclose`` still
        closes the sync pool, and a later ``close`` or ``aclose`` closes what is left."""
        mine, idle = self._release_async_pools(asyncio.get_running_loop())
        try:
            if mine is not None:  # shielded: a cancelled aclose leaves the closing to finish
                await asyncio.shield(asyncio.ensure_future(_close_opened(mine)))
            await asyncio.to_thread(close_idle_pools, idle, wait=True)
        finally:
            if self._owns_pool:
                await asyncio.to_thread(self._pool.close)  # joins the sync pool's worker threads (idempotent)


async def _aopen_pool(dsn: str, options: PoolOptions) -> AsyncConnectionPool:
    """An open async pool (see ``_open_pool`` in :mod:`.postgres`): one direct connection
    first, so a wrong DSN or password fails with the server's own reason."""
    first = await psycopg.AsyncConnection.connect(dsn, connect_timeout=max(1, round(options.timeout)))
    await first.close()
    pool: AsyncConnectionPool = AsyncConnectionPool(dsn, **options.pool_kwargs())
    try:
        await pool.open(wait=True, timeout=options.timeout)
    except BaseException:
        await pool.close()
        raise
    return pool


async def _close_opened(opening: asyncio.Task[AsyncConnectionPool]) -> None:
    """Close the pool ``opening`` opens (nothing if its opening failed or was cancelled)."""
    try:
        pool = await opening
    except Exception:
        return
    except asyncio.CancelledError:
        if opening.cancelled():
            return
        raise  # this closing itself was cancelled
    await pool.close()


def _close_on_its_loop(loop: asyncio.AbstractEventLoop, opening: asyncio.Task[AsyncConnectionPool]) -> None:
    """Schedule the closing of ``opening``'s pool on ``loop``, a loop running in another thread."""
    future = asyncio.run_coroutine_threadsafe(_close_opened(opening), loop)
    _closing.add(future)
    future.add_done_callback(_closing.discard)


def _close_on_idle_loops(idle: list[tuple[asyncio.AbstractEventLoop, _Opening]]) -> None:
    """Close the pools of loops that are neither running nor closed by running each loop
    until its pool is closed; call it in a thread that runs no loop.  A loop that started
    running (or closed) meanwhile has its pool closed on it (or dropped) instead."""
    for loop, entry in idle:
        closing = _close_opened(entry.task)
        try:
            loop.run_until_complete(closing)
        except RuntimeError:  # raised before the loop took the coroutine
            closing.close()
            if loop.is_running():
                _close_on_its_loop(loop, entry.task)


def close_idle_pools(idle: list[tuple[asyncio.AbstractEventLoop, _Opening]], *, wait: bool) -> None:
    """Close the pools of idle loops (see :func:`_close_on_idle_loops`) in a short-lived
    thread: the calling thread may be running a loop, and one thread cannot run two.
    ``wait``: return once they are closed."""
    if idle:
        closer = threading.Thread(target=_close_on_idle_loops, args=(idle,), name="context-gatekeeper-pool-closer",
                                  daemon=True)
        closer.start()
        if wait:
            closer.join()


def _succeeded(opening: asyncio.Task[AsyncConnectionPool]) -> bool:
    """Whether ``opening`` has opened its pool (not still under way, failed or cancelled)."""
    return opening.done() and not opening.cancelled() and opening.exception() is None


def _loop_of(pool: AsyncConnectionPool) -> asyncio.AbstractEventLoop | None:
    """The loop an open pool's tasks run on (None before it is opened).  psycopg_pool keeps
    no public record of it: its scheduler task tells."""
    runner = getattr(pool, "_sched_runner", None)
    return runner.get_loop() if isinstance(runner, asyncio.Task) else None


def _apipeline(conn: psycopg.AsyncConnection[Any]) -> AbstractAsyncContextManager[psycopg.AsyncPipeline | None]:
    """Pipeline mode where libpq supports it (14+), else plain statements (same results)."""
    return conn.pipeline() if psycopg.Pipeline.is_supported() else nullcontext()

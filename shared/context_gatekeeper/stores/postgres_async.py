"""The native async twins of :class:`~context_gatekeeper.stores.postgres.PostgresStore`.

They run the very operations the sync methods run (the step generators of
:mod:`.postgres_ops`) on a :class:`psycopg.AsyncConnection`, so a commit makes the same
head check, rebase, :func:`~.base.prepare_commit` and advisory-lock wait inside the
same transaction, without a worker thread and without blocking the event loop.

Event loops: an :class:`~psycopg_pool.AsyncConnectionPool` belongs to the loop it was
opened in.  A store opened from a connection string opens one on first async use in
each loop (``asyncio.run`` twice, or a test runner's loop per test, each get their
own) and forgets the pools of loops that have closed (they cannot be awaited any
more; their idle connections are released when the pool is collected).  A pool given
as ``async_pool`` is used in the loop that first uses it, and refused from another
(:class:`InvalidInputError`) instead of hanging.  See
``docs/architecture.md#concurrency-rules``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager, nullcontext
from typing import Any, NamedTuple, TypeVar

import psycopg
from psycopg_pool import AsyncConnectionPool

from ..errors import InvalidInputError, StoreClosedError
from ..transcripts.revisions import Revision
from .base import checked_keep
from .postgres_ops import PostgresOps, Step, Stepper, Steps

__all__ = ["PostgresAsync", "PoolOptions", "arun_steps"]

T = TypeVar("T")
_closing: set[concurrent.futures.Future[None]] = set()  # pool closings scheduled on other loops (kept from collection)


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
        self._apools: dict[asyncio.AbstractEventLoop, asyncio.Task[AsyncConnectionPool]] = {}
        self._apools_lock = threading.Lock()  # loops in several threads may open pools at once

    async def _apool(self) -> AsyncConnectionPool | None:
        """The async pool of the running loop (opened on first use); None: use threads."""
        if self._closed:
            raise self._closed_error()
        loop = asyncio.get_running_loop()
        if self._agiven is not None:
            if self._agiven_loop is None:
                self._agiven_loop = loop
            elif self._agiven_loop is not loop:
                raise InvalidInputError(
                    "the async_pool given to this PostgresStore belongs to the event loop that first used it, "
                    "not to this one; give each event loop its own store and pool (or pass a connection "
                    "string, and the store opens a pool per loop)"
                )
            return self._agiven
        if self._adsn is None:
            return None
        opening = self._apools.get(loop)
        if opening is not None and opening.done() and not opening.cancelled() and opening.exception() is None:
            return opening.result()  # the common case: open already
        with self._apools_lock:
            opening = self._apools.get(loop)
            if opening is None:
                for gone in [other for other in self._apools if other.is_closed()]:
                    del self._apools[gone]
                opening = self._apools[loop] = loop.create_task(_aopen_pool(self._adsn, self._aoptions))
        try:
            return await asyncio.shield(opening)  # a cancelled caller leaves the opening to the others
        except BaseException:
            if opening.done():  # the opening failed: the next call tries again
                with self._apools_lock:
                    if self._apools.get(loop) is opening:
                        del self._apools[loop]
            raise

    async def _arun(self, steps: Steps[T], lock: int | None = None) -> T:
        """The async twin of ``_run``: the same steps on a connection of the loop's pool."""
        pool = await self._apool()
        if pool is None:
            return await asyncio.to_thread(self._run, steps, lock)
        async with pool.connection() as conn:
            if lock is None:
                return await arun_steps(conn, None, steps)
            async with _apipeline(conn) as pipeline, conn.transaction():
                return await arun_steps(conn, pipeline, self._locked(lock, steps))

    def _release_async_pools(self, current: asyncio.AbstractEventLoop | None) -> asyncio.Task[AsyncConnectionPool] | None:
        """Forget every pool the store opened; those of other running loops are closed on
        their loop (scheduled).  Returns the opening of ``current``'s pool, for the caller
        to await and close."""
        with self._apools_lock:
            pools, self._apools = self._apools, {}
        mine = None
        for loop, opening in pools.items():
            if loop is current:
                mine = opening
            elif loop.is_running():
                future = asyncio.run_coroutine_threadsafe(_close_opened(opening), loop)
                _closing.add(future)
                future.add_done_callback(_closing.discard)
        return mine

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
        their loop, and the sync pool (if the store opened them); idempotent."""
        if self._closed:
            return
        self._closed = True
        mine = self._release_async_pools(asyncio.get_running_loop())
        if mine is not None:
            await _close_opened(mine)
        if self._owns_pool:
            await asyncio.to_thread(self._pool.close)  # joins the sync pool's worker threads


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
    """Close the pool ``opening`` opens (nothing if its opening failed)."""
    try:
        pool = await opening
    except Exception:
        return
    await pool.close()


def _apipeline(conn: psycopg.AsyncConnection[Any]) -> AbstractAsyncContextManager[psycopg.AsyncPipeline | None]:
    """Pipeline mode where libpq supports it (14+), else plain statements (same results)."""
    return conn.pipeline() if psycopg.Pipeline.is_supported() else nullcontext()

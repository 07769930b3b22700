"""PostgresStore's lifecycle: closing while calls are in flight or interrupted, the pools
of event loops that end without being closed, first use of a pool from several loops,
and the commit's id-index reads (one step per missing set of ids).

Everything but the last test needs the PostgreSQL server (``CG_TEST_POSTGRES_DSN``)."""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from context_gatekeeper.errors import InvalidInputError, StoreClosedError
from context_gatekeeper.testing.store_builders import turn
from pg_support import drop_run_tables, postgres_dsn, prefix_for


@pytest.fixture(scope="module")
def _tables() -> Iterator[None]:
    """Drops this run's tables after the module's server tests."""
    yield
    drop_run_tables()


def open_pg(where: Path, **options: Any) -> Any:
    from context_gatekeeper.stores import PostgresStore

    postgres_dsn()  # skips (fails under CI=true) without a server
    return PostgresStore(postgres_dsn(), table_prefix=prefix_for(where), **options)


@pytest.fixture
def store(_tables: None, tmp_path: Path) -> Iterator[Any]:
    """A PostgresStore on this test's tables, closed afterwards (closing twice is fine)."""
    opened = open_pg(tmp_path)
    yield opened
    opened.close()


def wait_until(condition: Callable[[], bool], what: str, limit: float = 20.0) -> None:
    """Wait (polling) for ``condition`` to hold; fail with ``what`` if it never does."""
    deadline = time.monotonic() + limit
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting for {what}")
        time.sleep(0.01)


# -- closing ---------------------------------------------------------------------------------
@pytest.mark.usefixtures("_tables")
def test_a_cancelled_aclose_still_closes_the_sync_pool_and_close_finishes_the_rest(tmp_path: Path) -> None:
    store = open_pg(tmp_path, min_size=2)

    async def main() -> None:
        await store.ahead("s")  # this loop's pool is open
        closing = asyncio.create_task(store.aclose())
        await asyncio.sleep(0)  # aclose is now awaiting the closing of this loop's pool
        closing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await closing

    asyncio.run(main())
    assert store._pool.closed  # closed although aclose was cancelled
    store.close()  # a later close finishes what is left (here: nothing) and raises nothing
    assert store._pool.closed
    with pytest.raises(StoreClosedError):
        store.head("s")


@pytest.mark.usefixtures("_tables")
def test_a_failing_aclose_still_closes_the_sync_pool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = open_pg(tmp_path)

    async def main() -> None:
        pool = await store._apool()
        real_close = pool.close

        async def failing_close(*args: Any, **kwargs: Any) -> None:
            raise OSError("the async pool failed to close")

        monkeypatch.setattr(pool, "close", failing_close)
        with pytest.raises(OSError, match="failed to close"):
            await store.aclose()
        await real_close()

    asyncio.run(main())
    assert store._pool.closed


@pytest.mark.usefixtures("_tables")
def test_a_sync_call_waiting_for_a_connection_when_the_store_closes_gets_store_closed_error(tmp_path: Path) -> None:
    store = open_pg(tmp_path, min_size=1, max_size=1)
    holding, release = threading.Event(), threading.Event()
    outcome: dict[str, Any] = {}

    def hook(point: str) -> None:
        if point == "begin":
            holding.set()
            release.wait(30)

    def commit() -> None:
        outcome["commit"] = store.commit("s", turn(1), expected_head=None).number

    def head() -> None:
        try:
            outcome["head"] = store.head("s")
        except BaseException as exc:  # reported by the test
            outcome["head"] = exc

    store.fault_hook = hook
    committer = threading.Thread(target=commit)
    committer.start()
    assert holding.wait(30)  # the pool's only connection is in use
    waiter = threading.Thread(target=head)
    waiter.start()
    wait_until(lambda: store._pool.get_stats().get("requests_waiting", 0) == 1, "head() to queue for a connection")
    store.close()
    waiter.join(30)
    release.set()
    committer.join(30)
    assert isinstance(outcome["head"], StoreClosedError), outcome["head"]
    assert outcome["commit"] == 1  # the call that had its connection finished


@pytest.mark.usefixtures("_tables")
def test_an_async_call_waiting_for_a_connection_when_the_store_closes_gets_store_closed_error(tmp_path: Path) -> None:
    store = open_pg(tmp_path, min_size=1, max_size=1)
    holding, release = threading.Event(), threading.Event()

    def hook(point: str) -> None:  # runs in a worker thread: may block
        if point == "begin":
            holding.set()
            release.wait(30)

    async def main() -> tuple[Any, Any]:
        pool = await store._apool()
        store.fault_hook = hook
        commit = asyncio.create_task(store.acommit("s", turn(1), expected_head=None))
        await asyncio.to_thread(holding.wait, 30)  # the pool's only connection is in use
        head = asyncio.create_task(store.ahead("s"))
        while pool.get_stats().get("requests_waiting", 0) != 1:
            await asyncio.sleep(0.01)
        await store.aclose()
        release.set()
        return tuple(await asyncio.gather(commit, head, return_exceptions=True))

    committed, head = asyncio.run(main())
    assert isinstance(head, StoreClosedError), head
    assert committed.number == 1


class _CloseOnFirstEntry:
    """A stand-in for the store's registry lock that runs ``action`` the first time it is
    entered, before taking the real lock: a close() landing between a caller's check of
    ``_closed`` and its taking the lock."""

    def __init__(self, real: Any, action: Callable[[], None]) -> None:
        self.real, self.action = real, action

    def __enter__(self) -> Any:
        action, self.action = self.action, None
        if action is not None:
            action()
        return self.real.__enter__()

    def __exit__(self, *exc: Any) -> Any:
        return self.real.__exit__(*exc)


def wrap_pool_opening(monkeypatch: pytest.MonkeyPatch, wrapper: Any) -> None:
    """Route every async pool opening through ``await wrapper(real_open, dsn, options)``."""
    from context_gatekeeper.stores import postgres

    real_open = postgres._aopen_pool

    async def opening(dsn: str, options: Any) -> Any:
        return await wrapper(real_open, dsn, options)

    monkeypatch.setattr(postgres, "_aopen_pool", opening)


@pytest.mark.usefixtures("_tables")
def test_close_between_the_closed_check_and_the_lock_registers_no_new_pool(tmp_path: Path) -> None:
    store = open_pg(tmp_path)
    store._apools_lock = _CloseOnFirstEntry(store._apools_lock, store.close)
    with pytest.raises(StoreClosedError):
        asyncio.run(store.ahead("s"))
    assert not store._apools  # no pool opened after close(), none left behind


def test_close_while_a_pool_opens_closes_that_pool_and_the_call_gets_store_closed_error(
    store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[Any] = []

    async def open_then_close_the_store(real_open: Any, dsn: str, options: Any) -> Any:
        pool = await real_open(dsn, options)
        opened.append(pool)
        store.close()  # e.g. from another thread, while the opening was under way
        return pool

    wrap_pool_opening(monkeypatch, open_then_close_the_store)

    async def main() -> None:
        with pytest.raises(StoreClosedError):
            await store.ahead("s")
        assert opened and opened[0].closed

    asyncio.run(main())
    assert not store._apools


# -- loops that end without being closed ---------------------------------------------------------
@pytest.mark.usefixtures("_tables")
def test_close_closes_the_pools_of_loops_left_open_quietly(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = open_pg(tmp_path)
    loops = [asyncio.new_event_loop() for _ in range(3)]  # run, then left open (never closed)
    try:
        pools = [loop.run_until_complete(store._apool()) for loop in loops]
        assert [loop.run_until_complete(store.ahead("s")) for loop in loops] == [0, 0, 0]
        with caplog.at_level(logging.ERROR, logger="asyncio"):
            store.close()
            gc.collect()
        assert all(pool.closed for pool in pools)
        assert not [r for r in caplog.records if r.name == "asyncio"]  # no "Task was destroyed but it is pending"
    finally:
        for loop in loops:
            loop.close()


@pytest.mark.usefixtures("_tables")
def test_the_pool_of_a_loop_whose_thread_ended_is_closed_when_another_loop_opens_one(tmp_path: Path) -> None:
    store = open_pg(tmp_path)
    left: dict[str, Any] = {}

    def thread_with_its_own_loop() -> None:
        loop = left["loop"] = asyncio.new_event_loop()  # never closed: the thread just ends
        left["pool"] = loop.run_until_complete(store._apool())
        left["head"] = loop.run_until_complete(store.ahead("s"))

    try:
        worker = threading.Thread(target=thread_with_its_own_loop)
        worker.start()
        worker.join(30)
        assert left["head"] == 0 and not left["pool"].closed
        assert asyncio.run(store.ahead("s")) == 0  # a new loop's pool: the ended thread's goes
        wait_until(lambda: left["pool"].closed, "the ended thread's pool to be closed")
        assert left["loop"] not in store._apools
    finally:
        store.close()
        left["loop"].close()


# -- first use -----------------------------------------------------------------------------------
@pytest.mark.usefixtures("_tables")
def test_a_callers_async_pool_is_bound_to_the_loop_it_was_opened_in_not_the_first_user(tmp_path: Path) -> None:
    dsn = postgres_dsn()  # skips (fails under CI=true) before any thread or loop is started
    from psycopg_pool import AsyncConnectionPool

    home = asyncio.new_event_loop()
    runner = threading.Thread(target=home.run_forever, name="home-loop")
    runner.start()

    def at_home(coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, home).result(30)

    async def open_pool() -> AsyncConnectionPool:
        pool = AsyncConnectionPool(dsn, min_size=1, max_size=2, open=False)
        await pool.open(wait=True)
        return pool

    try:  # whatever fails from here on, the loop is stopped and its thread joined
        pool = at_home(open_pool())
        try:
            store = open_pg(tmp_path, async_pool=pool)
            try:
                async def elsewhere() -> int:  # the store's first async use, from another loop
                    return int(await asyncio.wait_for(store.ahead("s"), 10))

                with pytest.raises(InvalidInputError, match="event loop"):
                    asyncio.run(elsewhere())
                assert at_home(store.ahead("s")) == 0  # its own loop is served
            finally:
                store.close()
        finally:
            at_home(pool.close())
    finally:
        home.call_soon_threadsafe(home.stop)
        runner.join(30)
        home.close()


def test_an_opening_that_failed_with_no_one_waiting_is_retried_not_reraised(
    store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    attempts: list[int] = []

    async def flaky_open(real_open: Any, dsn: str, options: Any) -> Any:
        attempts.append(1)
        if len(attempts) == 1:
            await gate.wait()
            raise ConnectionError("the first opening fails")
        return await real_open(dsn, options)

    wrap_pool_opening(monkeypatch, flaky_open)

    async def main() -> int:
        first = asyncio.create_task(store.ahead("s"))
        while not attempts:
            await asyncio.sleep(0)
        first.cancel()  # the only caller waiting for the opening goes away
        with pytest.raises(asyncio.CancelledError):
            await first
        gate.set()
        for _ in range(5):  # let the opening fail
            await asyncio.sleep(0)
        return int(await store.ahead("s"))

    gate = asyncio.Event()
    assert asyncio.run(main()) == 0
    assert len(attempts) == 2


# -- saving nothing on a closed store --------------------------------------------------------------
@pytest.mark.usefixtures("_tables")
def test_saving_no_vectors_on_a_closed_store_raises_store_closed_error(tmp_path: Path) -> None:
    store = open_pg(tmp_path)
    store.close()
    with pytest.raises(StoreClosedError):
        store.save_vectors("s", [])
    with pytest.raises(StoreClosedError):
        asyncio.run(store.asave_vectors("s", []))


# -- the commit's id-index reads (no server) -----------------------------------------------------
def test_prepared_reads_each_missing_id_set_once_and_answers_every_lookup_with_its_own_rows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pytest.importorskip("psycopg")
    from context_gatekeeper.stores import postgres_ops
    from context_gatekeeper.stores.integrity import IdEntry
    from context_gatekeeper.stores.schema import id_key

    answers: list[dict[str, IdEntry]] = []

    def fake_prepare_commit(session_id: str, revision: Any, head: int, expected_head: Any, later: Any,
                            lookup: Callable[[Any], dict[str, IdEntry]], renew: bool,
                            log: Any = None) -> tuple[Any, dict[str, IdEntry]]:
        answers.clear()
        answers.append(lookup(["a", "b"]))
        answers.append(lookup(iter(["b", "c"])))  # any iterable, read once
        answers.append(lookup([]))
        return revision, {}

    monkeypatch.setattr(postgres_ops, "prepare_commit", fake_prepare_commit)
    _names, statements = postgres_ops.compose("t_")
    rows = {"a": (id_key("a"), True, "digest-a"), "c": (id_key("c"), False, "digest-c")}  # "b" is not indexed
    steps = postgres_ops.prepared_steps(statements, (b"k", "s"), "the revision", 0, None, [], False)
    asked: list[set[bytes]] = []
    try:
        step = next(steps)
        while True:
            assert step.fetch == "all"
            wanted = {bytes(k) for k in step.params[1]}
            asked.append(wanted)
            step = steps.send([row for row in rows.values() if row[0] in wanted])
    except StopIteration as done:
        result = done.value
    assert result == ("the revision", {})
    assert asked == [{id_key("a"), id_key("b")}, {id_key("c")}]  # "b" not asked again, [] never asked
    assert answers == [{"a": IdEntry(True, "digest-a")}, {"c": IdEntry(False, "digest-c")}, {}]

"""PostgresStore's native async twins (psycopg's async pool): no worker threads, no sync
pool, the same in-transaction checks as the sync methods, any number of event loops.

The whole conformance suite also runs through the async twins (its ``[async]`` mode, in
test_postgres_store.py); these tests cover what is specific to the native path."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest

from context_gatekeeper.errors import InvalidInputError, SchemaVersionError, StaleHeadError, StoreClosedError
from context_gatekeeper.stores import FAULT_POINTS
from context_gatekeeper.testing.store_builders import append, edit, message, put_ids, turn
from pg_support import drop_run_tables, postgres_dsn, prefix_for


@pytest.fixture(scope="module", autouse=True)
def _server_then_cleanup() -> Iterator[None]:
    """Every test here needs the server (skipped without one, failed under CI=true); this
    run's tables are dropped afterwards."""
    postgres_dsn()
    yield
    drop_run_tables()


def open_pg(where: Path, **options: Any) -> Any:
    from context_gatekeeper.stores import PostgresStore

    return PostgresStore(postgres_dsn(), table_prefix=prefix_for(where), **options)


@pytest.fixture
def two(tmp_path: Path) -> Iterator[tuple[Any, Any]]:
    """Two handles on one set of tables: one for the async twins, one for the sync methods."""
    first, second = open_pg(tmp_path), open_pg(tmp_path)
    yield first, second
    first.close()
    second.close()


def run(store: Any, body: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    """``body()`` in a new event loop, then the store closed on it (its async pool included)."""

    async def main() -> Any:
        try:
            return await body()
        finally:
            await store.aclose()

    return asyncio.run(main())


def shape(revisions: list[Any]) -> list[tuple[int, int, int | None, str, list[str]]]:
    """What two sessions given the same history must agree on (times and ids aside)."""
    return [(r.number, r.parent, r.base, r.kind, [m.content for m in r.added]) for r in revisions]


def test_the_async_twins_use_neither_threads_nor_the_sync_pool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = open_pg(tmp_path)
    checkouts: list[str] = []
    sync_checkout = store._pool.connection
    real_to_thread = asyncio.to_thread

    def counted(*args: Any, **kwargs: Any) -> Any:
        checkouts.append("sync pool")
        return sync_checkout(*args, **kwargs)

    async def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"asyncio.to_thread({args[0]!r}) called by a native async twin")

    async def main() -> dict[str, Any]:
        monkeypatch.setattr(store._pool, "connection", counted)
        monkeypatch.setattr(asyncio, "to_thread", refuse)
        await store.asetup()
        first = await store.acommit("s", turn(1), expected_head=None)
        await store.acommit("s", turn(2), expected_head=None)
        edited = await store.acommit("s", edit(first.added[0], "reworded"), expected_head=1)  # rebased over turn 2
        seen = {
            "head": await store.ahead("s"),
            "tip": await store.atip("s"),
            "log": await store.arevisions("s"),
            "after 2": await store.arevisions("s", after=2),
            "sessions": await store.asessions(),
            "saved": await store.asave_vectors("s", [("u1", "h1", "emb", [0.5, 1.5]), ("", "h2", "emb", [2.0, 3.0])]),
            "vectors": await store.aload_vectors("s", "emb", dimension=2),
            "deleted": await store.adelete_vectors("s", "emb"),
            "truncated": await store.atruncate("s", 2),
        }
        await store.acommit("gone", turn(1), expected_head=None)
        await store.apurge("gone")
        seen["sessions after purge"] = await store.asessions()
        seen["edited"] = edited
        assert checkouts == [], "an async twin checked out a connection of the sync pool"
        monkeypatch.setattr(asyncio, "to_thread", real_to_thread)  # aclose may join the sync pool's threads
        return seen

    try:
        seen = asyncio.run(main())
        assert (seen["edited"].number, seen["edited"].base) == (3, 1)
        assert seen["head"] == 3 and seen["tip"][0] == 3 and seen["tip"][1] == seen["log"][-1].time
        assert [r.number for r in seen["log"]] == [1, 2, 3] and seen["after 2"] == seen["log"][2:]
        assert seen["sessions"] == ["s"] and seen["sessions after purge"] == ["s"]
        assert seen["saved"] == 2 and seen["deleted"] == 2
        assert [(v.message_id, v.vector) for v in seen["vectors"]] == [("u1", (0.5, 1.5)), ("", (2.0, 3.0))]
        assert seen["truncated"] == 1
        assert store.revisions("s") == seen["log"][:2]  # what the async twins wrote, read back in sync
    finally:
        store.close()


def test_concurrent_acommits_lose_nothing_and_number_one_to_n(tmp_path: Path) -> None:
    store = open_pg(tmp_path, max_size=4)  # 40 tasks queue for 4 connections and for the session's lock
    reader = open_pg(tmp_path)
    writers, turns = 40, 3

    async def writer(w: int) -> list[int]:
        return [(await store.acommit("shared", turn(j, f"w{w}-"), expected_head=None)).number for j in range(turns)]

    async def body() -> list[list[int]]:
        return await asyncio.gather(*(writer(w) for w in range(writers)))

    numbers = run(store, body)
    try:
        log = reader.revisions("shared")
        assert [r.number for r in log] == list(range(1, writers * turns + 1))
        assert [r.parent for r in log] == list(range(writers * turns))
        assert sorted(n for mine in numbers for n in mine) == list(range(1, writers * turns + 1))
        assert all(mine == sorted(mine) for mine in numbers)  # each task's own commits in its order
        assert sorted(put_ids(log)) == sorted(f"w{w}-{k}{j}" for w in range(writers) for j in range(turns) for k in "ua")
    finally:
        reader.close()


def test_a_stale_edit_raises_and_writes_nothing_as_in_sync(two: tuple[Any, Any]) -> None:
    store, again = two
    u1 = message("u1")

    history: list[tuple[str, Any, int | None]] = [  # a first edit, then two that cannot be rebased
        ("turn", turn(1), None), ("edit", edit(u1, "first"), 1),
        ("stale", edit(u1, "second"), 1), ("future", edit(u1, "third"), 9),
    ]

    async def body() -> list[Any]:
        outcomes: list[Any] = []
        for name, revision, expected in history:
            before = await store.arevisions("async")
            try:
                outcomes.append((await store.acommit("async", revision, expected_head=expected)).number)
            except StaleHeadError as exc:
                outcomes.append(type(exc))
                assert await store.arevisions("async") == before, f"the refused {name} wrote something"
        return outcomes

    outcomes = run(store, body)
    assert outcomes == [1, 2, StaleHeadError, StaleHeadError]
    expected: list[Any] = []
    for _, revision, head in history:
        try:
            expected.append(again.commit("sync", revision, expected_head=head).number)
        except StaleHeadError as exc:
            expected.append(type(exc))
    assert outcomes == expected
    assert shape(again.revisions("async")) == shape(again.revisions("sync"))


def test_renew_taken_ids_behaves_as_in_sync(two: tuple[Any, Any]) -> None:
    store, sync = two
    clash = append(message("u1", "user", "other text under a taken id"))

    async def body() -> tuple[Any, Any]:
        await store.acommit("async", turn(1), expected_head=None)
        with pytest.raises(InvalidInputError, match="renew_taken_ids"):
            await store.acommit("async", clash, expected_head=None)
        assert await store.ahead("async") == 1
        renewed = await store.acommit("async", clash, expected_head=None, renew_taken_ids=True)
        retried = await store.acommit("async", turn(1), expected_head=None)  # the same turn again: dropped
        return renewed, retried

    renewed, retried = run(store, body)
    sync.commit("sync", turn(1), expected_head=None)
    with pytest.raises(InvalidInputError, match="renew_taken_ids"):
        sync.commit("sync", clash, expected_head=None)
    sync_renewed = sync.commit("sync", clash, expected_head=None, renew_taken_ids=True)
    sync_retried = sync.commit("sync", turn(1), expected_head=None)
    assert renewed.added[0].id not in ("u1", sync_renewed.added[0].id)
    assert shape([renewed, retried]) == shape([sync_renewed, sync_retried])
    assert (retried.number, retried.changes) == (2, ())
    assert shape(sync.revisions("async")) == shape(sync.revisions("sync"))


def test_one_store_serves_successive_and_concurrent_event_loops(tmp_path: Path) -> None:
    store = open_pg(tmp_path)
    try:
        for n in (1, 2, 3):  # asyncio.run again and again: a new loop each time, never the last one's pool
            stored = asyncio.run(store.acommit("s", turn(n), expected_head=None))
            assert stored.number == n
        errors: list[BaseException] = []

        def in_its_own_loop(tag: str) -> None:
            async def body() -> None:
                for j in range(5):
                    await store.acommit("s", turn(j, tag), expected_head=None)

            try:
                asyncio.run(body())
            except BaseException as exc:  # reported by the test
                errors.append(exc)

        threads = [threading.Thread(target=in_its_own_loop, args=(tag,)) for tag in ("x", "y")]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert not errors and not any(t.is_alive() for t in threads)
        assert [r.number for r in store.revisions("s")] == list(range(1, 14))
        assert asyncio.run(store.ahead("s")) == 13
    finally:
        store.close()
    with pytest.raises(StoreClosedError):
        asyncio.run(store.ahead("s"))


def test_a_closed_store_raises_store_closed_error_sync_and_async(tmp_path: Path) -> None:
    store = open_pg(tmp_path)

    async def body() -> None:
        await store.acommit("s", turn(1), expected_head=None)
        await store.aclose()
        await store.aclose()  # idempotent
        for call in (store.ahead("s"), store.acommit("s", turn(2), expected_head=None), store.asessions(),
                     store.aload_vectors("s", "emb")):
            with pytest.raises(StoreClosedError, match="open a new PostgresStore"):
                await call
        with pytest.raises(StoreClosedError, match="open a new PostgresStore"):
            store.head("s")

    asyncio.run(body())
    other = open_pg(tmp_path)
    other.close()  # closed in sync: the async twins refuse too
    with pytest.raises(StoreClosedError):
        asyncio.run(other.acommit("s", turn(2), expected_head=None))
    reader = open_pg(tmp_path)
    try:
        assert reader.head("s") == 1
    finally:
        reader.close()


@pytest.mark.parametrize("point", FAULT_POINTS)
def test_a_fault_inside_acommit_writes_nothing(tmp_path: Path, point: str) -> None:
    store = open_pg(tmp_path)

    class Boom(Exception):
        pass

    def hook(at: str) -> None:
        if at == point:
            raise Boom(at)

    async def body() -> Any:
        await store.acommit("s", turn(1), expected_head=None)
        before = await store.arevisions("s")
        store.fault_hook = hook
        with pytest.raises(Boom):
            await store.acommit("s", turn(2), expected_head=None)
        store.fault_hook = None
        assert await store.arevisions("s") == before
        # the id index was not written either: turn 2 is new to the store, not a retry
        return await store.acommit("s", turn(2), expected_head=None)

    stored = run(store, body)
    assert stored.number == 2 and [m.id for m in stored.added] == ["u2", "a2"]


def test_a_callers_async_pool_is_used_in_its_loop_never_closed_and_refused_elsewhere(tmp_path: Path) -> None:
    from psycopg_pool import AsyncConnectionPool

    holder: dict[str, Any] = {}

    async def body() -> None:
        async with AsyncConnectionPool(postgres_dsn(), min_size=1, max_size=3, open=False) as pool:
            store = holder["store"] = open_pg(tmp_path, async_pool=pool)
            await store.acommit("s", turn(1), expected_head=None)
            assert await store.ahead("s") == 1
            assert pool.get_stats()["requests_num"] >= 2  # served by the caller's pool
            holder["pool"] = pool

    asyncio.run(body())
    store = holder["store"]
    try:
        with pytest.raises(InvalidInputError, match="event loop"):
            asyncio.run(store.ahead("s"))
        assert store.head("s") == 1  # the sync methods use the store's own pool
    finally:
        asyncio.run(store.aclose())
    assert holder["pool"].closed  # closed by its own context manager, not by the store


def test_a_callers_async_pool_of_dict_rows_serves_the_native_twins(tmp_path: Path) -> None:
    # LangGraph's AsyncPostgresSaver needs row_factory=dict_row on the pool it shares; behind
    # PgBouncer pools bind client-side (AsyncClientCursor), which cannot return binary results
    from psycopg import AsyncClientCursor
    from psycopg.rows import dict_row
    from psycopg_pool import AsyncConnectionPool

    async def body() -> list[int]:
        kwargs = {"autocommit": True, "row_factory": dict_row, "cursor_factory": AsyncClientCursor}
        async with AsyncConnectionPool(postgres_dsn(), min_size=1, max_size=2, kwargs=kwargs, open=False) as pool:
            store = open_pg(tmp_path, async_pool=pool, setup=False)
            try:
                await store.asetup()
                await store.acommit("s", turn(1), expected_head=None)
                await store.acommit("s", turn(2), expected_head=None)
                assert await store.ahead("s") == 2 and await store.atip("s") == store.tip("s")
                assert await store.atruncate("s", 1) == 1 and await store.asessions() == ["s"]
                return [r.number for r in await store.arevisions("s")]
            finally:
                await store.aclose()

    assert asyncio.run(body()) == [1]


def test_a_callers_sync_pool_alone_keeps_the_async_twins_on_threads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from psycopg_pool import ConnectionPool

    from context_gatekeeper.stores import PostgresStore

    threads: list[str] = []
    real_to_thread = asyncio.to_thread

    async def counted(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        threads.append(getattr(func, "__name__", "?"))
        return await real_to_thread(func, *args, **kwargs)

    monkeypatch.setattr(asyncio, "to_thread", counted)
    with ConnectionPool(postgres_dsn(), min_size=1, max_size=2, open=True) as pool:
        store = PostgresStore(pool, table_prefix=prefix_for(tmp_path))

        async def body() -> int:
            await store.acommit("s", turn(1), expected_head=None)
            return await store.ahead("s")

        assert run(store, body) == 1
        assert threads and not pool.closed  # no connection opened behind the caller's back


def test_tables_behind_the_schema_give_the_same_error_as_in_sync(tmp_path: Path) -> None:
    """The native twins raise what the sync methods raise on tables not yet migrated (``setup=False``)."""
    from test_postgres_store import as_schema_3

    store = as_schema_3(tmp_path)

    async def body() -> list[str]:
        errors = []
        for call in (lambda: store.arevisions("s"), lambda: store.acommit("s", turn(2), expected_head=None)):
            with pytest.raises(SchemaVersionError, match=r"schema version 3 .*setup\(\)") as caught:
                await call()
            errors.append(str(caught.value))
        return errors

    errors = run(store, body)
    never = open_pg(tmp_path / "never set up", setup=False)
    with pytest.raises(SchemaVersionError, match="never set up"):
        asyncio.run(_then_closed(never, never.ahead("s")))
    assert errors[0] == errors[1]


async def _then_closed(store: Any, call: Coroutine[Any, Any, Any]) -> Any:
    """Await ``call``, then close ``store`` on this loop, whatever happened."""
    try:
        return await call
    finally:
        await store.aclose()


def test_a_wrong_pool_argument_is_refused_with_what_to_pass(tmp_path: Path) -> None:
    from psycopg_pool import AsyncConnectionPool

    from context_gatekeeper.errors import InvalidTypeError

    from context_gatekeeper.stores import PostgresStore

    pool = AsyncConnectionPool(postgres_dsn(), open=False)  # never opened: nothing to close
    with pytest.raises(InvalidTypeError, match="async_pool="):
        PostgresStore(pool, table_prefix=prefix_for(tmp_path))
    with pytest.raises(InvalidTypeError, match="AsyncConnectionPool"):
        open_pg(tmp_path, async_pool="postgresql://elsewhere")


def test_cancelled_acommits_land_whole_or_not_at_all_and_the_pool_keeps_working(tmp_path: Path) -> None:
    store = open_pg(tmp_path, max_size=3)

    async def body() -> tuple[list[Any], list[Any]]:
        landed: list[Any] = []
        for steps in range(0, 40, 2):  # cancel after 0, 2, 4, ... passes of the loop: a different phase each time
            tasks = [asyncio.create_task(store.acommit("s", turn(steps * 10 + i), expected_head=None)) for i in range(6)]
            for _ in range(steps):
                await asyncio.sleep(0)
            for task in tasks[::2]:
                task.cancel()
            for outcome in await asyncio.gather(*tasks, return_exceptions=True):
                if isinstance(outcome, BaseException):
                    assert isinstance(outcome, asyncio.CancelledError), outcome
                else:
                    landed.append(outcome)
        after = await asyncio.wait_for(store.acommit("s", turn(999), expected_head=None), 30)
        return landed + [after], await store.arevisions("s")

    landed, log = run(store, body)
    assert [r.number for r in log] == list(range(1, len(log) + 1))
    assert all(len(r.added) == 2 for r in log)  # a turn is stored whole or not at all
    assert {r.number for r in landed} <= {r.number for r in log}
    assert landed[-1].number == len(log)

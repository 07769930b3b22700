"""PostgresStore runs the conformance suite on a real server, through a DSN and through a pool
of the caller's; then what is specific to PostgreSQL: migrations, reopening, identifiers, locks."""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from context_gatekeeper import Transcript
from context_gatekeeper.errors import CorruptLogError, InvalidInputError, SchemaVersionError, StoreUnavailableError
from context_gatekeeper.stores import Store
from pg_support import drop_run_tables, postgres_dsn, prefix_for, set_up_async
from context_gatekeeper.testing.stores import Capabilities, StoreConformance, edit, fill, snapshot, turn
from context_gatekeeper.testing.store_tampering import COPIED_FROM
from store_raw import ROW_CONTENT, tamper_rows
from store_raw import raw as stored_bytes

"""A revision row but its session and number (what the ``copy`` and ``swap`` tamperings move)."""


@pytest.fixture(scope="module", autouse=True)
def _drop_tables_afterwards() -> Iterator[None]:
    yield
    drop_run_tables()


@pytest.fixture(autouse=True)
def _server() -> None:
    """Every test here needs the server: skipped without one (failed under CI=true)."""
    postgres_dsn()


def open_pg(where: Path | str, **options) -> Store:
    from context_gatekeeper.stores import PostgresStore

    return PostgresStore(postgres_dsn(), table_prefix=prefix_for(where), **options)


class TestPostgresStore(StoreConformance):
    capabilities = Capabilities(tamper_evident=True, processes=True)

    def stored_state(self, store: Store, session: str) -> Any:
        return stored_bytes(store, session)  # every stored byte: the revision rows and the id index

    def make(self, where: Path) -> Store:
        return open_pg(where)

    def tamper(self, store: Store, session: str, revision: int, how: str) -> None:
        """Change a stored row with plain SQL, as a person with psql would."""
        from psycopg import sql

        table = store._names["revisions"]  # type: ignore[attr-defined]
        where = " WHERE session_id = %s AND number = %s"
        with store._connection() as conn:  # type: ignore[attr-defined]
            def content(session_id: str, number: int) -> tuple[Any, ...]:
                return conn.execute(sql.SQL(f"SELECT {ROW_CONTENT} FROM {{}}" + where).format(table),
                                    (session_id, number)).fetchone()

            def put(values: tuple[Any, ...], number: int) -> None:
                marks = ", ".join(["%s"] * len(values))
                conn.execute(sql.SQL(f"UPDATE {{}} SET ({ROW_CONTENT}) = ({marks})" + where).format(table),
                             (*values, session, number))

            tamper_rows(how, session, revision, COPIED_FROM, content, put,
                        lambda statement: conn.execute(sql.SQL(statement.format(table="{}") + where).format(table),
                                                       (session, revision)))


class TestPostgresStoreOnACallersPool(StoreConformance):
    """The caller's pool, with psycopg's default (non-autocommit) connections; never closed by the store."""

    capabilities = Capabilities(processes=True)
    pools: list = []

    @staticmethod
    def pool_kwargs() -> dict[str, Any]:
        """The caller's connection settings (psycopg's defaults here)."""
        return {}

    @pytest.fixture(autouse=True)
    def _close_pools(self) -> Iterator[None]:
        yield
        while self.pools:
            pool = self.pools.pop()
            assert not pool.closed, "the store closed a pool it does not own"
            pool.close()

    def make(self, where: Path) -> Store:
        from psycopg_pool import ConnectionPool

        from context_gatekeeper.stores import PostgresStore

        pool = ConnectionPool(postgres_dsn(), min_size=1, max_size=8, kwargs=self.pool_kwargs(), open=True)
        self.pools.append(pool)
        return PostgresStore(pool, table_prefix=prefix_for(where))


class TestPostgresStoreOnAnUnusualPool(TestPostgresStoreOnACallersPool):
    """A caller's pool set up as other libraries and servers set theirs: dict rows (LangGraph's
    ``PostgresSaver`` needs them), client-side-binding cursors (used behind PgBouncer; they
    cannot return binary results), SERIALIZABLE as the default isolation, and floats sent as
    text rounded to 15 digits (``extra_float_digits=0``, the default before PostgreSQL 12)."""

    pools: list = []

    @staticmethod
    def pool_kwargs() -> dict[str, Any]:
        from psycopg import ClientCursor
        from psycopg.rows import dict_row

        return {"autocommit": True, "row_factory": dict_row, "cursor_factory": ClientCursor,
                "options": UNUSUAL_SETTINGS}


UNUSUAL_SETTINGS = "-c default_transaction_isolation=serializable -c extra_float_digits=0"
"""Server settings a store must not depend on (as libpq ``options``)."""


# -- PostgreSQL only -------------------------------------------------------------------------
def with_settings(settings: str) -> str:
    """The test server's DSN with ``settings`` (``-c name=value ...``) for every connection."""
    from psycopg.conninfo import make_conninfo

    return make_conninfo(postgres_dsn(), options=settings)


def wait_for_a_lock_waiter() -> None:
    """Return once some connection waits for an advisory lock (polling, up to 10 s)."""
    import time

    import psycopg

    with psycopg.connect(postgres_dsn(), autocommit=True) as conn:
        query = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND wait_event = 'advisory'"
        deadline = time.monotonic() + 10
        while not conn.execute(query).fetchone()[0]:
            assert time.monotonic() < deadline, "no commit ever waited for the session's lock"
            time.sleep(0.01)


def everything(store: Store) -> dict[str, tuple[int, list]]:
    return {session: snapshot(store, session) for session in store.sessions()}


def raw():
    import psycopg

    return psycopg.connect(postgres_dsn(), autocommit=True)


def test_migrations_are_recorded_once_in_a_table(tmp_path: Path) -> None:
    import psycopg
    from psycopg import sql

    from context_gatekeeper.stores.postgres import MIGRATIONS

    store = open_pg(tmp_path, setup=False)
    with pytest.raises(SchemaVersionError, match=r"never set up.*setup\(\).*table_prefix") as caught:
        store.head("s")  # nothing created yet
    assert isinstance(caught.value.__cause__, psycopg.errors.UndefinedTable)
    store.setup()
    assert store.applied_migrations() == [(m.version, m.name) for m in MIGRATIONS]
    table = sql.Identifier(f"{prefix_for(tmp_path)}schema_migrations")
    with raw() as conn:
        rows = conn.execute(sql.SQL("SELECT * FROM {}").format(table)).fetchall()
        store.setup()
        open_pg(tmp_path).close()
        assert conn.execute(sql.SQL("SELECT * FROM {}").format(table)).fetchall() == rows
        conn.execute(sql.SQL("INSERT INTO {} VALUES (999, 'from the future', 0)").format(table))
    store.close()
    with pytest.raises(SchemaVersionError, match="upgrade"):
        open_pg(tmp_path)


def as_schema_3(where: Path) -> Store:
    """Tables as schema 3 left them (before the hash chain: no digests, migrations 4 and 5 not
    recorded), session "s" holding one revision; a store on them opened with ``setup=False``."""
    from psycopg import sql

    store = open_pg(where)
    store.commit("s", turn(1), expected_head=None)
    names = store._names  # type: ignore[attr-defined]
    with raw() as conn:
        conn.execute(sql.SQL("ALTER TABLE {} DROP COLUMN digest").format(names["revisions"]))
        conn.execute(sql.SQL("DELETE FROM {} WHERE version > 3").format(names["migrations"]))
    store.close()
    return open_pg(where, setup=False)


def test_tables_before_the_hash_chain_opened_without_setup_say_to_run_setup(tmp_path: Path) -> None:
    """``setup=False`` leaves migrating to another job; meanwhile tables at a schema older than a
    call needs give the library's error (reads and writes alike), and a refused write writes nothing."""
    import psycopg

    store = as_schema_3(tmp_path)
    try:
        rows = stored_bytes(store, "s")
        for call in (lambda: store.revisions("s"), lambda: store.commit("s", turn(2), expected_head=None)):
            with pytest.raises(SchemaVersionError, match=r"schema version 3 \(migration\(s\) \[4, 5\] not applied.*setup\(\)") as caught:
                call()
            assert isinstance(caught.value.__cause__, psycopg.errors.UndefinedColumn)
        assert stored_bytes(store, "s") == rows
        store.setup()
        assert store.commit("s", turn(2), expected_head=None).number == 2 and len(store.revisions("s")) == 2
    finally:
        store.close()


def _run(store: Store, statement: str, *params: Any) -> list[Any]:
    """``statement`` on the store's revisions table (``{}``), as a person with psql would."""
    from psycopg import sql

    query = sql.SQL(statement).format(store._names["revisions"])  # type: ignore[attr-defined]
    with store._connection() as conn:  # type: ignore[attr-defined]
        cursor = conn.execute(query, params)
        return cursor.fetchall() if cursor.description else []


def _edited(store: Store, instruction: str, model: str) -> None:
    """Session "s" gains an edit of its first message recorded with ``instruction`` and ``model``."""
    import json
    from dataclasses import replace

    from context_gatekeeper.testing import ScriptedModel

    t = Transcript("s", store=store)
    editor = ScriptedModel([json.dumps({"operations": [{"op": "replace", "id": "1", "content": "first, edited"}]})])
    t.commit(replace(t.edit("shorten it", model=editor, preview=True), instruction=instruction, model=model))


def _refused_at(where: Path, revision: int, **options: Any) -> None:
    """Opening session "s" on a new store fails naming ``revision``."""
    store = open_pg(where, **options)
    try:
        with pytest.raises(CorruptLogError) as caught:
            Transcript("s", store=store)
        assert (caught.value.session_id, caught.value.revision) == ("s", revision)
    finally:
        store.close()


def test_a_missing_instruction_written_in_by_hand_is_named(tmp_path: Path) -> None:
    """NULL and the text 'None' were one text to the first hash chain."""
    from context_gatekeeper.records.operations import Replace

    store = open_pg(tmp_path)
    Transcript("s", store=store).append(user="question", assistant="answer")
    t = Transcript("s", store=store)
    t.apply([Replace(t.messages[0].id, "question, edited")])  # an edit without an instruction
    _run(store, "UPDATE {} SET instruction = 'None' WHERE session_id = 's' AND number = 2")
    _refused_at(tmp_path, 2)
    store.close()


def _as_the_first_chain_left_it(store: Store) -> None:
    """Session "s" gets the first chain's digests and the tables lose migration 5's record:
    what the release before migration 5 left."""
    from psycopg import sql

    from context_gatekeeper.stores.chain import genesis, row_digest

    previous = genesis("s")
    for row in _run(store, "SELECT number, parent, kind, instruction, model, created_at, base, target, changes "
                           "FROM {} WHERE session_id = 's' ORDER BY number"):
        previous = row_digest(previous, row, legacy=True)
        _run(store, "UPDATE {} SET digest = %s WHERE session_id = 's' AND number = %s", previous, row[0])
    with store._connection() as conn:  # type: ignore[attr-defined]
        conn.execute(sql.SQL("DELETE FROM {} WHERE version = 5").format(store._names["migrations"]))  # type: ignore[attr-defined]


def test_migration_5_rewrites_the_rows_the_first_chain_wrote_ambiguously(tmp_path: Path) -> None:
    store = open_pg(tmp_path)
    Transcript("s", store=store).append(user="question", assistant="answer")
    _edited(store, "None", "a\x1fb")
    Transcript("s", store=store).append(user="later", assistant="still here")
    Transcript("other", store=store).append(user="elsewhere", assistant="fine")
    _as_the_first_chain_left_it(store)
    store.close()
    deferred = open_pg(tmp_path, setup=False)  # another job upgrades: the tables are read with the old chain
    assert Transcript("s", store=deferred).head == 3
    deferred.close()
    store = open_pg(tmp_path)  # migration 5
    assert store.applied_migrations()[-1] == (5, "unambiguous hash chain fields")
    assert Transcript("s", store=store).head == 3 and store.revisions("s")[1].instruction == "None"
    assert [m.content for m in Transcript("other", store=store).messages] == ["elsewhere", "fine"]
    _run(store, "UPDATE {} SET instruction = NULL WHERE session_id = 's' AND number = 2")
    _refused_at(tmp_path, 2)  # the rewritten row is checked with the new text
    store.close()


def test_migration_5_holds_the_lock_of_each_session_it_rewrites_until_it_commits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer that does not migrate (``setup=False``, or the previous release in a rolling
    upgrade) and commits to a session while migration 5 rewrites its digests waits for the
    migration: chaining from the digest being replaced would break a session nobody touched."""
    from context_gatekeeper.stores import postgres
    from context_gatekeeper.stores.postgres_ops import Step

    store = open_pg(tmp_path)
    Transcript("s", store=store).append(user="question", assistant="answer")
    _edited(store, "None", "gpt")
    _as_the_first_chain_left_it(store)
    store.close()
    worker = open_pg(tmp_path, setup=False, lock_timeout=0.2)
    during: list[int] = []

    def commit_meanwhile(_: object) -> None:  # in the migration's transaction, after its rewrite
        with pytest.raises(StoreUnavailableError, match="lock"):
            worker.commit("s", turn(9, "while migrating"), expected_head=None)
        during.append(worker.commit("untouched", turn(1), expected_head=None).number)  # not held up

    def backfill_then_commit(table_prefix: str, q: Any) -> Any:
        yield from migration_5.backfill(table_prefix, q)
        yield Step("hook", commit_meanwhile, None)

    migration_5 = postgres.MIGRATIONS[4]
    monkeypatch.setattr(postgres, "MIGRATIONS", (*postgres.MIGRATIONS[:4], migration_5._replace(backfill=backfill_then_commit)))
    upgraded = None
    try:
        upgraded = open_pg(tmp_path)  # the upgrade job: migration 5
        assert during == [1] and upgraded.applied_migrations()[-1][0] == 5
        assert worker.commit("s", turn(9, "after the migration"), expected_head=None).number == 3
        assert Transcript("s", store=upgraded).head == 3  # the whole log verifies
    finally:
        worker.close()
        if upgraded is not None:
            upgraded.close()


def test_setup_from_many_threads_at_once_on_new_tables(tmp_path: Path) -> None:
    stores, errors = [], []
    start = threading.Barrier(6)

    def opener() -> None:
        try:
            start.wait()
            stores.append(open_pg(tmp_path, min_size=1, max_size=1))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=opener) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        assert errors == []
        assert stores[0].applied_migrations() == stores[-1].applied_migrations() != []
    finally:
        for store in stores:
            store.close()


def test_reopening_restores_state_and_history_exactly(tmp_path: Path) -> None:
    store = open_pg(tmp_path)
    first, _ = fill(store, "a", 2)
    fill(store, "b 🚀", 3)
    store.commit("a", turn(3), expected_head=None)
    store.commit("a", edit(first.added[1], "rewritten — ✓"), expected_head=2)  # rebased
    before = everything(store)
    store.close()
    with pytest.raises(RuntimeError, match="closed"):
        store.head("a")
    again = open_pg(tmp_path)
    assert everything(again) == before
    assert again.revisions("a")[-1].base == 2
    assert again.commit("a", turn(9), expected_head=None).number == 5
    again.close()


HOSTILE = [
    "it's",
    'x"; DROP TABLE cg_revisions; --',
    "a;b;c; SELECT pg_sleep(10); --",
    "$$ $tag$ \\x00 %s %(x)s {0} ?",
    "ünïcødé 会话 🚀 \u202etxet-lbd\u202c",
    "".join(chr(random.Random(7).randrange(0x20, 0xD7FF)) for _ in range(10_000)),  # 10 KB, incompressible
    "y" * 10_240,
]


def test_hostile_session_ids_round_trip_and_harm_nothing(tmp_path: Path) -> None:
    store = open_pg(tmp_path)
    fill(store, "neighbour", 1)
    stored = {session: fill(store, session, 2) for session in HOSTILE}
    store.close()
    again = open_pg(tmp_path)
    assert sorted(again.sessions()) == sorted([*HOSTILE, "neighbour"])
    for session in HOSTILE:
        assert again.revisions(session) == stored[session]
        assert again.head(session) == 2
    again.purge(HOSTILE[1])
    assert again.head(HOSTILE[1]) == 0 and again.head("neighbour") == 1
    again.close()


@pytest.mark.parametrize("session", ["nul\x00inside", "lone \ud800 surrogate"])
def test_unstorable_session_ids_are_refused_clearly(tmp_path: Path, session: str) -> None:
    store = open_pg(tmp_path)
    with pytest.raises(InvalidInputError, match="session id"):
        store.commit(session, turn(1), expected_head=None)
    with pytest.raises(InvalidInputError):
        store.head(session)
    with pytest.raises(TypeError, match="session_id"):
        store.head(42)  # type: ignore[arg-type]
    store.close()


@pytest.mark.parametrize("prefix", ['x"; DROP TABLE y; --', "1abc", "a" * 41, "", "sp ace", "ü_", None])
def test_a_hostile_table_prefix_is_refused(prefix) -> None:
    from context_gatekeeper.stores import PostgresStore

    with pytest.raises(InvalidInputError, match="table_prefix"):
        PostgresStore(postgres_dsn(), table_prefix=prefix)


def test_a_mixed_case_prefix_names_the_tables_exactly(tmp_path: Path) -> None:
    prefix = prefix_for(tmp_path).upper()
    from context_gatekeeper.stores import PostgresStore

    store = PostgresStore(postgres_dsn(), table_prefix=prefix)
    fill(store, "s", 1)
    with raw() as conn:
        names = {r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE starts_with(tablename, %s)", (prefix,))}
    assert names == {f"{prefix}{t}" for t in ("revisions", "schema_migrations", "message_ids", "set_aside_revisions", "vectors")}
    store.close()
    from pg_support import drop_tables

    drop_tables(postgres_dsn(), prefix)


def test_a_dsn_and_a_pool_are_both_accepted_and_see_each_other(tmp_path: Path) -> None:
    from psycopg_pool import ConnectionPool

    from context_gatekeeper.stores import PostgresStore

    with ConnectionPool(postgres_dsn(), min_size=1, max_size=2, kwargs={"autocommit": True}) as pool:
        on_pool = PostgresStore(pool, table_prefix=prefix_for(tmp_path))
        on_dsn = open_pg(tmp_path)
        on_pool.commit("s", turn(1), expected_head=None)
        on_dsn.commit("s", turn(2), expected_head=None)
        assert on_pool.revisions("s") == on_dsn.revisions("s") and on_pool.head("s") == 2
        on_pool.close()
        assert not pool.closed  # the caller's pool stays the caller's
        on_dsn.close()
    with pytest.raises(TypeError, match="connection string or a ConnectionPool"):
        PostgresStore(42)  # type: ignore[arg-type]


def test_repr_hides_the_password(tmp_path: Path) -> None:
    store = open_pg(tmp_path)
    password = __import__("psycopg").conninfo.conninfo_to_dict(postgres_dsn()).get("password")
    assert "PostgresStore(" in repr(store)
    if password:
        assert password not in repr(store)
    store.close()


def test_a_wrong_password_fails_fast_with_the_servers_reason(tmp_path: Path) -> None:
    import psycopg
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    from context_gatekeeper.stores import PostgresStore

    parts = conninfo_to_dict(postgres_dsn())
    parts["password"] = "certainly-wrong"
    with pytest.raises(StoreUnavailableError, match="password") as caught:  # the server's reason, not a pool timeout
        PostgresStore(make_conninfo(**parts), table_prefix=prefix_for(tmp_path), connect_timeout=2)
    assert isinstance(caught.value, OSError) and isinstance(caught.value.__cause__, psycopg.OperationalError)
    assert "certainly-wrong" not in str(caught.value) and "credentials" in str(caught.value)


def test_a_commit_holds_its_sessions_lock_and_only_that(tmp_path: Path) -> None:
    mine, theirs = open_pg(tmp_path), open_pg(tmp_path)
    results: dict[str, int] = {}

    def other(session: str) -> None:
        results[session] = theirs.commit(session, turn(1, "x"), expected_head=None).number

    def meanwhile(point: str) -> None:
        if point != "begin":
            return
        free = threading.Thread(target=other, args=("elsewhere",))
        free.start()
        free.join(5)
        assert results.get("elsewhere") == 1  # another session's writer is not held up
        blocked = threading.Thread(target=other, args=("s",))
        blocked.start()
        blocked.join(0.3)
        assert blocked.is_alive() and "s" not in results  # the same session's writer waits
        meanwhile.thread = blocked

    mine.fault_hook = meanwhile
    assert mine.commit("s", turn(1), expected_head=None).number == 1
    mine.fault_hook = None
    meanwhile.thread.join(5)
    assert results["s"] == 2
    mine.close()
    theirs.close()


def test_a_fault_hook_set_while_a_commit_waits_for_the_lock_sees_that_commit(tmp_path: Path) -> None:
    # the hook is read at each fault point inside the transaction, as the other stores read it
    holder, waiter = open_pg(tmp_path), open_pg(tmp_path)
    holding, release = threading.Event(), threading.Event()

    def hold(point: str) -> None:
        if point == "begin":
            holding.set()
            release.wait(10)

    holder.fault_hook = hold
    first = threading.Thread(target=holder.commit, args=("s", turn(1)), kwargs={"expected_head": None})
    first.start()
    try:
        assert holding.wait(10)  # the holder has the session's lock
        second = threading.Thread(target=waiter.commit, args=("s", turn(2, "y")), kwargs={"expected_head": None})
        second.start()
        wait_for_a_lock_waiter()
        seen: list[str] = []
        waiter.fault_hook = seen.append
    finally:
        release.set()
        first.join(10)
    second.join(10)
    assert seen == ["begin", "written", "before_commit"]
    assert [r.number for r in waiter.revisions("s")] == [1, 2]
    holder.close()
    waiter.close()


def test_async_twins_share_a_small_pool_without_blocking(tmp_path: Path) -> None:
    store = open_pg(tmp_path, max_size=2)

    async def main() -> list[int]:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.001)

        clock = asyncio.create_task(ticker())
        try:
            stored = await asyncio.gather(*(store.acommit("s", turn(n), expected_head=None) for n in range(20)))
            heads = await asyncio.gather(*(store.ahead("s") for _ in range(10)))
        finally:
            clock.cancel()
            # closed on this loop: a loop that ends cancels a growing pool's tasks, and
            # psycopg_pool can lose that cancellation (see the stores guide)
            await store.aclose()
        assert ticks > 1 and set(heads) == {20}
        return sorted(r.number for r in stored)

    assert asyncio.run(main()) == list(range(1, 21))
    store.close()


def test_transcripts_and_adapters_open_a_postgresql_url() -> None:
    """``store="postgresql://..."`` (default prefix ``cg_``) in the core and both adapters."""
    dsn = postgres_dsn()
    url = dsn if dsn.startswith(("postgresql://", "postgres://")) else None
    if url is None:
        pytest.skip("CG_TEST_POSTGRES_DSN is not a URL")
    session = f"url-test-{prefix_for('url')}"
    t = Transcript(session, store=url)
    try:
        t.append(user="hello", assistant="hi")
        assert type(t.store).__name__ == "PostgresStore" and t.store.table_prefix == "cg_"
        short = url.replace("postgresql://", "postgres://", 1)
        assert [m.content for m in Transcript(session, store=short).messages] == ["hello", "hi"]
        lc = pytest.importorskip("langchain_gatekeeper")
        history = lc.GatekeeperChatMessageHistory(session, store=url)
        assert [m.content for m in history.messages] == ["hello", "hi"]
        history.store.close()
        li = pytest.importorskip("llamaindex_gatekeeper")
        memory = li.GatekeeperMemory.from_defaults(store=url, session_id=session)
        assert [m.content for m in memory.get_all()] == ["hello", "hi"]
        memory.store.close()
    finally:
        t.purge()
        t.store.close()


@pytest.mark.parametrize("isolation", ["repeatable read", "serializable"])
def test_a_writer_that_waited_for_the_lock_reads_the_head_it_waited_for(tmp_path: Path, isolation: str) -> None:
    # under a stricter default isolation the snapshot would predate the writer it waited for
    from context_gatekeeper.stores import PostgresStore

    holder = open_pg(tmp_path)
    waiter = PostgresStore(with_settings("-c default_transaction_isolation=" + isolation.replace(" ", "\\ ")),
                           table_prefix=prefix_for(tmp_path))
    holder.commit("s", turn(1), expected_head=None)
    holding, release = threading.Event(), threading.Event()
    outcome: dict[str, Any] = {}

    def hold(point: str) -> None:
        if point == "written":
            holding.set()
            release.wait(10)

    def wait_then_commit() -> None:
        try:
            outcome["number"] = waiter.commit("s", turn(3, "w"), expected_head=None).number
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            outcome["error"] = exc

    holder.fault_hook = hold
    first = threading.Thread(target=holder.commit, args=("s", turn(2)), kwargs={"expected_head": None})
    first.start()
    second = threading.Thread(target=wait_then_commit)
    try:
        assert holding.wait(10)  # revision 2 is written, not committed, and its writer holds the lock
        second.start()
        wait_for_a_lock_waiter()
    finally:
        release.set()
        first.join(10)
        if second.ident is not None:
            second.join(10)
    assert outcome == {"number": 3}
    assert [r.number for r in waiter.revisions("s")] == [1, 2, 3]
    holder.close()
    waiter.close()


def test_times_come_back_exactly_whatever_the_servers_float_format(tmp_path: Path) -> None:
    from context_gatekeeper.stores import PostgresStore

    writer = open_pg(tmp_path)
    fill(writer, "s", 2)
    rounding = PostgresStore(with_settings("-c extra_float_digits=0"), table_prefix=prefix_for(tmp_path))

    async def async_reads() -> tuple[list[Any], tuple[int, float]]:
        try:
            return await rounding.arevisions("s"), await rounding.atip("s")
        finally:
            await rounding.aclose()

    assert rounding.revisions("s") == writer.revisions("s")  # the hash chain verifies
    assert rounding.tip("s") == writer.tip("s")
    rounding.commit("s", turn(3), expected_head=None)
    assert writer.revisions("s") == rounding.revisions("s") and writer.head("s") == 3
    assert asyncio.run(async_reads()) == (writer.revisions("s"), writer.tip("s"))
    rounding.close()
    writer.close()


def test_a_shared_dict_row_pool_serves_every_operation(tmp_path: Path) -> None:
    # LangGraph's PostgresSaver needs row_factory=dict_row on the pool it shares
    from psycopg.rows import dict_row
    from psycopg_pool import ConnectionPool

    from context_gatekeeper.stores import PostgresStore

    writer = open_pg(tmp_path)
    fill(writer, "s", 2)
    with ConnectionPool(postgres_dsn(), min_size=1, max_size=2, kwargs={"autocommit": True, "row_factory": dict_row}) as pool:
        store = PostgresStore(pool, table_prefix=prefix_for(tmp_path))  # setup() too
        assert store.head("s") == 2 and store.revisions("s") == writer.revisions("s")
        assert store.commit("s", turn(3), expected_head=None).number == 3
        assert store.truncate("s", 2) == 1 and store.sessions() == ["s"]
        assert store.applied_migrations() == writer.applied_migrations()
        store.close()
    writer.close()


@pytest.mark.parametrize("field", ["instruction", "model"])
def test_a_nul_in_an_instruction_or_model_name_is_refused_before_anything_is_written(
    tmp_path: Path, field: str
) -> None:
    from dataclasses import replace

    store = open_pg(tmp_path)
    [first] = fill(store, "s", 1)
    before = stored_bytes(store, "s")
    revision = replace(edit(first.added[0], "better"), **{field: "fix\x00this"})
    with pytest.raises(InvalidInputError, match="NUL"):
        store.commit("s", revision, expected_head=1)
    twin = open_pg(tmp_path)

    async def async_commit() -> None:
        try:
            await twin.acommit("s", revision, expected_head=1)
        finally:
            await twin.aclose()

    with pytest.raises(InvalidInputError, match="NUL"):
        asyncio.run(async_commit())
    assert stored_bytes(store, "s") == before
    store.close()


def test_transcripts_open_a_libpq_key_value_string_never_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    parts = conninfo_to_dict(postgres_dsn())
    monkeypatch.chdir(tmp_path)
    session = f"kv-test-{prefix_for('kv')}"
    t = Transcript(session, store=make_conninfo(**parts))
    try:
        t.append(user="hello", assistant="hi")
        assert type(t.store).__name__ == "PostgresStore" and t.store.table_prefix == "cg_"
    finally:
        t.purge()
        t.close()
    with pytest.raises(InvalidInputError, match="connection string") as caught:  # not libpq's: refused, no file
        Transcript(session, store="colour=blue password=hunter22 host=nowhere")
    assert "hunter22" not in str(caught.value)
    with pytest.raises(InvalidInputError, match=r"drop the '\+driver'") as caught:  # SQLAlchemy's form, as PGVector's docs write it
        Transcript(session, store="postgresql+psycopg://app:hunter22@nowhere/chat")
    assert "hunter22" not in str(caught.value)
    t = Transcript(session, store="\n" + postgres_dsn())  # read from a file, with its newline
    assert type(t.store).__name__ == "PostgresStore"
    t.close()
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "user=alice").mkdir()  # a folder that happens to look like a keyword: a path into it is a path
    t = Transcript(session, store="user=alice/chat.db")
    assert type(t.store).__name__ == "SQLiteStore" and (tmp_path / "user=alice" / "chat.db").exists()
    t.close()


def test_pooled_connections_the_server_ended_are_replaced_not_failed(tmp_path: Path) -> None:
    # a server restart, a failover or an idle timeout ends every idle pooled connection
    import psycopg

    store = open_pg(tmp_path, min_size=1, max_size=1)
    fill(store, "s", 1)

    def end_backend(pid: int) -> None:
        with psycopg.connect(postgres_dsn(), autocommit=True) as admin:
            assert admin.execute("SELECT pg_terminate_backend(%s, 10000)", (pid,)).fetchone()[0]  # waits until gone

    with store._connection() as conn:  # type: ignore[attr-defined]
        pid = conn.info.backend_pid
    end_backend(pid)
    assert store.head("s") == 1

    async def async_twins() -> int:
        try:
            assert await store.ahead("s") == 1
            pool = await store._apool()  # type: ignore[attr-defined]
            async with pool.connection() as conn:
                pid = conn.info.backend_pid
            end_backend(pid)
            return await store.ahead("s")
        finally:
            await store.aclose()

    assert asyncio.run(async_twins()) == 1
    store.close()


def test_an_id_index_deleted_by_hand_is_named_when_an_undo_needs_it(tmp_path: Path) -> None:
    """The index is checked against the log only when it refuses a write: rows deleted by
    hand are CorruptLogError naming the repair (was a refusal saying to reload, forever)."""
    from psycopg import sql

    from context_gatekeeper.records.operations import Replace

    store = open_pg(tmp_path)
    try:
        t = Transcript("s", store=store)
        t.append(user="hello", assistant="hi")
        t.apply([Replace(t.messages[0].id, "HELLO")])
        with store._connection() as conn:  # type: ignore[attr-defined]
            conn.execute(sql.SQL("DELETE FROM {}").format(store._names["ids"]))  # type: ignore[attr-defined]
        for _ in range(2):  # reloading does not help
            with pytest.raises(CorruptLogError, match=r"store\.truncate\('s', 2\)") as caught:
                Transcript("s", store=store).undo()
            assert "message-id index" in str(caught.value)
        assert store.head("s") == 2  # nothing was written
        store.truncate("s", 2)
        t = Transcript("s", store=store)
        t.undo()
        assert [m.content for m in t.messages] == ["hello", "hi"]
    finally:
        store.close()


def test_a_message_the_index_holds_but_the_log_lacks_is_never_dropped_as_a_retry(tmp_path: Path) -> None:
    """The newest append deleted by hand (nothing after it in the chain notices), then re-sent
    with its ids: the index took the messages for a retry and dropped them without a word.  Now
    CorruptLogError names the repair, from the sync and the native async commit alike, and
    nothing is written; after the repair the same append stores them."""
    resent = [{"id": "u2", "role": "user", "content": "second question"},
              {"id": "a2", "role": "assistant", "content": "second answer"}]
    store = open_pg(tmp_path)
    try:
        t = Transcript("s", store=store)
        t.append(user="hello", assistant="hi")
        t.append(messages=[dict(m) for m in resent])
        lost = store.revisions("s")[1]
        _run(store, "DELETE FROM {} WHERE session_id = 's' AND number = 2")
        rows = stored_bytes(store, "s")

        def sync_append() -> object:
            return Transcript("s", store=store).append(messages=[dict(m) for m in resent])

        async def async_commit() -> object:
            twin = open_pg(tmp_path)
            try:
                return await twin.acommit("s", replace(lost, number=0, parent=0), expected_head=None,
                                          renew_taken_ids=True)
            finally:
                await twin.aclose()

        for call in (sync_append, sync_append, lambda: asyncio.run(async_commit())):  # reloading does not help
            with pytest.raises(CorruptLogError) as caught:
                call()
            assert (caught.value.session_id, caught.value.revision) == ("s", 2)
            assert "retries" in str(caught.value) and "store.truncate('s', 1)" in str(caught.value)
            assert stored_bytes(store, "s") == rows  # nothing was written
        assert store.truncate("s", 1) == 0
        stored = Transcript("s", store=store).append(messages=[dict(m) for m in resent])
        assert stored.number == 2 and [m.id for m in stored.added] == ["u2", "a2"]
        assert [m.content for m in Transcript("s", store=store).messages] == [
            "hello", "hi", "second question", "second answer"]
    finally:
        store.close()


@pytest.mark.parametrize("lost", ["1", "2", "3", "4", "the table"])
def test_a_migration_record_deleted_by_hand_is_named_and_nothing_is_written(tmp_path: Path, lost: str) -> None:
    """Every open ran the migration again and failed with psycopg's DuplicateTable (or
    DuplicateColumn); now SchemaVersionError says what happened and how to restore the record,
    from the sync and the async setup, and no table is created or changed."""
    from psycopg import sql

    from context_gatekeeper.stores.schema import created_objects
    from context_gatekeeper.stores.postgres import MIGRATIONS

    assert [len(created_objects(m)) for m in MIGRATIONS] == [1, 2, 1, 1, 0]
    store = open_pg(tmp_path)
    Transcript("s", store=store).append(user="hello", assistant="hi")
    table = store._names["migrations"]  # type: ignore[attr-defined]
    store.close()
    with raw() as conn:
        if lost == "the table":
            conn.execute(sql.SQL("DROP TABLE {}").format(table))
        else:
            conn.execute(sql.SQL("DELETE FROM {} WHERE version = %s").format(table), (int(lost),))
    tables = "SELECT tablename FROM pg_tables WHERE starts_with(tablename, %s) ORDER BY tablename"
    with raw() as conn:
        before = conn.execute(tables, (prefix_for(tmp_path),)).fetchall()
    unopened = open_pg(tmp_path, setup=False)

    for call in (lambda: open_pg(tmp_path), lambda: set_up_async(unopened)):
        with pytest.raises(SchemaVersionError) as caught:
            call()
        text = str(caught.value)
        assert "but no record of them" in text and "outside context-gatekeeper" in text and "nothing was written" in text
        assert ("CREATE TABLE" in text) == (lost == "the table") and "INSERT INTO" in text
    with raw() as conn:
        assert conn.execute(tables, (prefix_for(tmp_path),)).fetchall() == before
        conn.execute(text.split("restore the record (", 1)[1].rsplit(") or the database from a backup", 1)[0])
    store = open_pg(tmp_path)
    try:
        assert [m.content for m in Transcript("s", store=store).messages] == ["hello", "hi"]
        assert [v for v, _ in store.applied_migrations()] == [m.version for m in MIGRATIONS]
    finally:
        store.close()


@pytest.mark.parametrize(
    ("damage", "named", "rerun"),
    [("DROP TABLE {vectors}", "vectors", [3]),
     ("DROP TABLE {ids}", "message_ids", None),  # set_aside_revisions, of the same migration, is there
     ("ALTER TABLE {revisions} DROP COLUMN digest", "revisions.digest", [4])],
    ids=["vectors", "message_ids", "digest"],
)
def test_a_recorded_table_that_is_missing_is_named_and_nothing_is_written(
    tmp_path: Path, damage: str, named: str, rerun: list[int] | None
) -> None:
    """A table that the migrations table records but that is gone (``DROP TABLE cg_vectors``)
    made load_vectors and purge raise psycopg's UndefinedTable.  Now opening the store, sync or
    async, names the missing table and how to restore it, and so does a call on a store opened
    with setup=False; nothing is written.  Where the migration can run again, the statement that
    lets it does."""
    from psycopg import sql

    store = open_pg(tmp_path)
    Transcript("s", store=store).append(user="hello", assistant="hi")
    names = store._names  # type: ignore[attr-defined]
    store.close()
    with raw() as conn:
        conn.execute(sql.SQL(damage).format(**names))
    tables = """SELECT c.relname::text, a.attname::text FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid
        WHERE c.relkind = 'r' AND starts_with(c.relname, %s) AND a.attnum > 0 AND NOT a.attisdropped ORDER BY 1, 2"""
    with raw() as conn:
        before = conn.execute(tables, (prefix_for(tmp_path),)).fetchall()
        rows = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(names["revisions"])).fetchone()
    unopened = open_pg(tmp_path, setup=False)

    def call_later() -> None:
        later = open_pg(tmp_path, setup=False)
        try:
            if named == "vectors":
                later.load_vectors("s", "e")
            elif named == "message_ids":
                later.purge("s")
            else:
                later.revisions("s")
        finally:
            later.close()

    text = ""
    for call in (lambda: open_pg(tmp_path), lambda: set_up_async(unopened), call_later):
        with pytest.raises(SchemaVersionError) as caught:
            call()
        text = str(caught.value)
        assert f"missing: {prefix_for(tmp_path)}{named}" in text and "nothing was written" in text, text
        assert ("DELETE FROM" in text) == (rerun is not None) and "backup" in text
    with raw() as conn:
        assert conn.execute(tables, (prefix_for(tmp_path),)).fetchall() == before
        assert conn.execute(sql.SQL("SELECT count(*) FROM {}").format(names["revisions"])).fetchone() == rows
        if rerun is None:
            return
        repair = text.split("apply them again: ", 1)[1].split(", then open it", 1)[0]
        assert repair.endswith(f"WHERE version IN ({', '.join(map(str, rerun))})")
        conn.execute(repair)
    store = open_pg(tmp_path)
    try:
        assert [m.content for m in Transcript("s", store=store).messages] == ["hello", "hi"]
        assert store.load_vectors("s", "e") == []
    finally:
        store.close()


# -- timeouts the server, database or role sets ----------------------------------------------------
def _waited_for_an_advisory_lock(opening: threading.Thread, seconds: float) -> bool:
    """Whether some connection has waited ``seconds`` for an advisory lock while ``opening`` still
    runs (polling, up to 10 s; False as soon as ``opening`` has ended)."""
    import time

    import psycopg

    query = """SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND wait_event = 'advisory'
        AND now() - query_start > make_interval(secs => %s)"""
    with psycopg.connect(postgres_dsn(), autocommit=True) as conn:
        deadline = time.monotonic() + 10
        while opening.is_alive() and time.monotonic() < deadline:
            if conn.execute(query, (seconds,)).fetchone()[0]:
                return True
            time.sleep(0.02)
    return False


@pytest.mark.parametrize("twin", ["setup", "asetup"])
def test_opening_waits_out_another_workers_migration_whatever_lock_timeout_the_server_sets(
    tmp_path: Path, twin: str
) -> None:
    """The guide: opening a store waits as long as another worker's migration takes, whatever
    lock_timeout says.  A lock_timeout set for the role, database or server (here for the
    connection, as ``ALTER ROLE app SET lock_timeout = '1s'`` sets it) ended setup's wait after it,
    telling the caller to give the store a longer lock_timeout, which changed nothing."""
    import psycopg
    from psycopg.conninfo import make_conninfo

    from context_gatekeeper.stores import PostgresStore
    from context_gatekeeper.stores.postgres_ops import lock_key

    open_pg(tmp_path).close()
    prefix = prefix_for(tmp_path)
    dsn = make_conninfo(postgres_dsn(), options="-c lock_timeout=10ms")
    failed: list[BaseException] = []

    def open_it() -> None:
        try:
            store = PostgresStore(dsn, table_prefix=prefix, setup=twin == "setup", lock_timeout=0.01)
            try:
                if twin == "asetup":
                    set_up_async(store)
                else:
                    assert store.applied_migrations()[-1][0] == 5
            finally:
                store.close()
        except BaseException as exc:
            failed.append(exc)

    with psycopg.connect(postgres_dsn(), autocommit=True) as migrating:  # another worker, mid-migration
        migrating.execute("SELECT pg_advisory_lock(%s)", (lock_key(prefix, "setup"),))
        opening = threading.Thread(target=open_it)
        opening.start()
        try:
            assert _waited_for_an_advisory_lock(opening, 0.5), failed  # fifty times the connection's lock_timeout
        finally:
            migrating.execute("SELECT pg_advisory_unlock(%s)", (lock_key(prefix, "setup"),))
            opening.join(30)
    assert not opening.is_alive() and failed == []


def test_a_statement_cancelled_by_statement_timeout_says_so(tmp_path: Path) -> None:
    """A statement the server cancels after a statement_timeout set for the role (or connection)
    was reported as "timed out or lost a race waiting for a lock ... give the store a longer
    lock_timeout", a plain read that takes no lock included.  Here another session holds the
    revisions table, so the read and the commit outlast the connection's statement_timeout."""
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import make_conninfo

    from context_gatekeeper.stores import PostgresStore

    store = open_pg(tmp_path)
    store.commit("s", turn(1), expected_head=None)
    names = store._names  # type: ignore[attr-defined]
    store.close()
    timed = PostgresStore(make_conninfo(postgres_dsn(), options="-c statement_timeout=200"),
                          table_prefix=prefix_for(tmp_path))
    try:
        with psycopg.connect(postgres_dsn()) as holder:
            holder.execute(sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(names["revisions"]))
            for call in (lambda: timed.head("s"), lambda: timed.commit("s", turn(2), expected_head=None)):
                with pytest.raises(StoreUnavailableError, match=r"statement_timeout.*ALTER ROLE") as caught:
                    call()
                assert "lock_timeout" not in str(caught.value) and "nothing was written" in str(caught.value)
                assert isinstance(caught.value.__cause__, psycopg.errors.QueryCanceled)
            holder.rollback()
        assert timed.head("s") == 1
    finally:
        timed.close()


@pytest.mark.parametrize("twin", ["commit", "acommit"])
def test_a_statement_failing_inside_a_pipelined_commit_logs_nothing(
    tmp_path: Path, twin: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A statement failing while later ones of the transaction were already sent left the
    transaction's ROLLBACK to be skipped too ("pipeline aborted"), which psycopg logged as
    "error ignored terminating <psycopg.Pipeline ...>" beside the error the store raised.  Here a
    constraint added by hand refuses the commit's id-index rows."""
    from psycopg import sql

    store = open_pg(tmp_path)
    store.commit("s", turn(1), expected_head=None)
    with raw() as conn:
        conn.execute(sql.SQL("ALTER TABLE {} ADD CONSTRAINT refused CHECK (length(digest) < 0) NOT VALID").format(
            store._names["ids"]))  # type: ignore[attr-defined]

    async def acommit(n: int) -> None:
        twin_store = open_pg(tmp_path)
        try:
            await twin_store.acommit("s", turn(n), expected_head=None)
        finally:
            await twin_store.aclose()

    try:
        for n in range(2, 7):
            with pytest.raises(StoreUnavailableError, match="conflicts with the rows stored"):
                if twin == "commit":
                    store.commit("s", turn(n), expected_head=None)
                else:
                    asyncio.run(acommit(n))
        assert [r.getMessage() for r in caplog.records if "error ignored" in r.getMessage()] == []
        assert store.head("s") == 1
    finally:
        store.close()


@pytest.mark.parametrize("twin", ["setup", "asetup"])
def test_a_migration_behind_a_readers_transaction_gives_up_after_the_connections_lock_timeout(
    tmp_path: Path, twin: str
) -> None:
    """Setup waits out another worker's migration whatever lock_timeout says, but only for that
    advisory lock: the migration's own DDL (migration 4's ``ALTER TABLE``) keeps the lock_timeout
    the role or connection sets.  Lifted for the whole transaction, an upgrading worker behind one
    reader idle in a transaction waited forever, and its queued ACCESS EXCLUSIVE lock made every
    other worker's reads of the table wait behind it."""
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import make_conninfo

    from context_gatekeeper.stores import PostgresStore

    as_schema_3(tmp_path).close()
    prefix = prefix_for(tmp_path)
    dsn = make_conninfo(postgres_dsn(), options="-c lock_timeout=300ms")
    outcome: list[BaseException | None] = []

    def open_it() -> None:
        try:
            if twin == "setup":
                PostgresStore(dsn, table_prefix=prefix).close()
            else:
                set_up_async(PostgresStore(dsn, table_prefix=prefix, setup=False))
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    with psycopg.connect(postgres_dsn()) as reader:  # a report idle in its transaction
        reader.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(prefix + "revisions"))).fetchone()
        opening = threading.Thread(target=open_it, daemon=True)
        opening.start()
        opening.join(15)  # far beyond the 300ms; a hang would end with the reader and then succeed, failing below
        reader.rollback()
    opening.join(15)
    assert outcome and isinstance(outcome[0], StoreUnavailableError), outcome  # given up, not waited out
    assert "waiting for a lock" in str(outcome[0])
    store = open_pg(tmp_path)  # nothing was written: the migration runs once the reader is gone
    try:
        assert [version for version, _name in store.applied_migrations()] == [1, 2, 3, 4, 5]
        assert store.head("s") == 1
    finally:
        store.close()

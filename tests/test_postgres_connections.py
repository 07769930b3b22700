"""The connections and pools a PostgresStore opens from a connection string: TCP keepalives and
``tcp_user_timeout`` derived from ``connect_timeout`` (so a network partition ends a call
instead of blocking it), each call's wait for a connection bounded by ``connect_timeout``, and
a lost server retried every few seconds, not with psycopg_pool's backoff of up to minutes;
settings the connection string gives win.

The first tests need psycopg only; the last needs the PostgreSQL server (``CG_TEST_POSTGRES_DSN``)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from pg_support import drop_run_tables, postgres_dsn, prefix_for

pytest.importorskip("psycopg")
pytest.importorskip("psycopg_pool")

from psycopg_pool import AsyncConnectionPool, ConnectionPool  # noqa: E402 - after the skips

from context_gatekeeper.stores.postgres import PoolOptions  # noqa: E402
from context_gatekeeper.stores.postgres_conninfo import connection_settings  # noqa: E402


@pytest.fixture(scope="module")
def _tables() -> Iterator[None]:
    yield
    drop_run_tables()


def test_connections_carry_keepalives_derived_from_connect_timeout() -> None:
    """A partition is noticed after about twice connect_timeout: keepalive probes from
    connect_timeout seconds of silence on, three of them connect_timeout / 3 apart, and
    data left unacknowledged as long (tcp_user_timeout, in milliseconds)."""
    import psycopg

    settings = connection_settings("host=db.example dbname=app", 9.0)
    expected = {"connect_timeout": 9, "keepalives": 1, "keepalives_idle": 9, "keepalives_interval": 3,
                "keepalives_count": 3}
    if psycopg.pq.version() >= 120000:  # libpq 12 added tcp_user_timeout
        expected["tcp_user_timeout"] = 18000
    assert settings == expected
    short = connection_settings("host=db.example", 0.2)  # whole seconds for libpq, never 0 (no limit)
    assert short["connect_timeout"] == short["keepalives_idle"] == short["keepalives_interval"] == 1


@pytest.mark.parametrize("dsn, given", [
    ("host=db.example keepalives_idle=60 tcp_user_timeout=0", {"keepalives_idle", "tcp_user_timeout"}),
    ("postgresql://db.example/app?keepalives=0&connect_timeout=3", {"keepalives", "connect_timeout"}),
])
def test_settings_the_connection_string_gives_win(dsn: str, given: set[str]) -> None:
    settings = connection_settings(dsn, 10.0)
    assert not given & set(settings)
    assert {"keepalives_count", "keepalives_interval"} <= set(settings)


@pytest.mark.parametrize("pool_class", [ConnectionPool, AsyncConnectionPool])
def test_pools_wait_connect_timeout_and_retry_a_lost_server_every_few_seconds(pool_class: type) -> None:
    """Each call waits at most connect_timeout for a connection (psycopg_pool's default is
    30 s whatever connect_timeout says); a lost connection is retried for a few seconds,
    then the pool checks itself, which starts retrying afresh (psycopg_pool's own backoff
    doubles up to minutes, so a restarted server went unused for that long)."""
    kwargs = PoolOptions(1, 4, 4.0).pool_kwargs(pool_class, "host=db.example")
    assert kwargs["timeout"] == 4.0
    assert 1.0 <= kwargs["reconnect_timeout"] <= 5.0
    assert kwargs["reconnect_failed"] is pool_class.check
    assert kwargs["check"] is pool_class.check_connection
    assert kwargs["kwargs"] == {"autocommit": True, **connection_settings("host=db.example", 4.0)}


def test_a_stores_pools_and_connections_use_these_settings(_tables: None, tmp_path: Path) -> None:
    from context_gatekeeper.stores import PostgresStore

    store = PostgresStore(postgres_dsn(), table_prefix=prefix_for(tmp_path), connect_timeout=4)
    try:
        with store._connection() as conn:
            parameters = conn.info.get_parameters()
        assert (parameters["keepalives"], parameters["keepalives_idle"], parameters["keepalives_count"]) == ("1", "4", "3")
        assert store._pool.timeout == 4.0

        async def async_pool() -> tuple[float, str]:
            pool = await store._apool()
            try:
                async with pool.connection() as conn:
                    return pool.timeout, conn.info.get_parameters()["keepalives_idle"]
            finally:
                await store.aclose()  # this loop's pool, on this loop

        assert asyncio.run(async_pool()) == (4.0, "4")
    finally:
        store.close()

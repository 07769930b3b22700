"""The connections and pools a PostgresStore opens from a connection string: TCP keepalives and
``tcp_user_timeout`` derived from ``connect_timeout`` (so a network partition ends a call
instead of blocking it), each call's wait for a connection bounded by ``connect_timeout``, and
a lost server retried every few seconds, not with psycopg_pool's backoff of up to minutes, but
only while a call may wait for it; settings the connection string, libpq's environment variables
or a service file give win.

The first tests need psycopg only; the last needs the PostgreSQL server (``CG_TEST_POSTGRES_DSN``)."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from pg_support import drop_run_tables, postgres_dsn, prefix_for

pytest.importorskip("psycopg")
pytest.importorskip("psycopg_pool")

import psycopg  # noqa: E402 - after the skips
from psycopg_pool import AsyncConnectionPool, ConnectionPool  # noqa: E402 - after the skips

from context_gatekeeper.stores import postgres  # noqa: E402
from context_gatekeeper.stores.postgres import PoolOptions, _RetryWhileCallsWait  # noqa: E402
from context_gatekeeper.stores.postgres_conninfo import connection_settings  # noqa: E402


@pytest.fixture(scope="module")
def _tables() -> Iterator[None]:
    yield
    drop_run_tables()


def test_connections_carry_keepalives_derived_from_connect_timeout(libpq_environment: Path) -> None:
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
def test_settings_the_connection_string_gives_win(dsn: str, given: set[str], libpq_environment: Path) -> None:
    settings = connection_settings(dsn, 10.0)
    assert not given & set(settings)
    assert {"keepalives_count", "keepalives_interval"} <= set(settings)


@pytest.fixture
def libpq_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No libpq variable set (the test sets its own) and the user's service file, which does not
    exist yet, at the path returned (``PGSERVICEFILE``)."""
    for option in psycopg.pq.Conninfo.get_defaults():
        if option.envvar is not None:
            monkeypatch.delenv(option.envvar.decode(), raising=False)
    monkeypatch.delenv("PGSYSCONFDIR", raising=False)
    monkeypatch.setenv("PGSERVICEFILE", str(tmp_path / "pg_service.conf"))
    return tmp_path / "pg_service.conf"


SERVICES = """# services of the test
[other]
keepalives_idle=99

[app]
host=db.example
keepalives=0
  tcp_user_timeout=600000

[app2]
connect_timeout=99
"""


@pytest.mark.parametrize("dsn", ["host=db.example", "service=app"])
def test_settings_set_by_libpq_environment_variables_are_left_to_them(
    dsn: str, libpq_environment: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    libpq_environment.write_text("[app]\nhost=db.example\n", encoding="utf-8")
    monkeypatch.setenv("PGCONNECT_TIMEOUT", "45")
    settings = connection_settings(dsn, 10.0)
    assert "connect_timeout" not in settings
    assert settings["keepalives_idle"] == 10


@pytest.mark.parametrize("dsn, service", [("service=app", None), ("dbname=app", "app")])
def test_settings_a_service_file_section_gives_are_left_to_it(
    dsn: str, service: str | None, libpq_environment: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Named in the string or by PGSERVICE; only that section counts."""
    libpq_environment.write_text(SERVICES, encoding="utf-8")
    if service is not None:
        monkeypatch.setenv("PGSERVICE", service)
    settings = connection_settings(dsn, 10.0)
    assert not {"keepalives", "tcp_user_timeout"} & set(settings)
    assert (settings["connect_timeout"], settings["keepalives_idle"]) == (10, 10)


def test_the_system_service_file_counts_when_the_users_lacks_the_section(
    libpq_environment: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    libpq_environment.write_text("[other]\nkeepalives=0\n", encoding="utf-8")
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "pg_service.conf").write_text(SERVICES, encoding="utf-8")
    monkeypatch.setenv("PGSYSCONFDIR", str(tmp_path / "etc"))
    settings = connection_settings("service=app2", 10.0)
    assert "connect_timeout" not in settings and settings["keepalives"] == 1


def test_a_service_whose_section_cannot_be_found_keeps_every_derived_setting(libpq_environment: Path) -> None:
    """It may be in the system folder libpq was built with, which Python cannot locate: the
    store keeps its protections rather than dropping them all on a guess (a section there
    that sets none of them, the usual case, left a partition unbounded)."""
    libpq_environment.write_text(SERVICES, encoding="utf-8")
    assert connection_settings("service=elsewhere", 10.0) == connection_settings("host=db.example", 10.0) != {}


@pytest.mark.parametrize("pool_class", [ConnectionPool, AsyncConnectionPool])
def test_pools_wait_connect_timeout_and_retry_a_lost_server_every_few_seconds(pool_class: type) -> None:
    """Each call waits at most connect_timeout for a connection (psycopg_pool's default is
    30 s whatever connect_timeout says); a lost connection is retried for a few seconds,
    and again while a call may still wait (psycopg_pool's own backoff doubles up to
    minutes, so a restarted server went unused for that long)."""
    kwargs = PoolOptions(1, 4, 4.0).pool_kwargs(pool_class, "host=db.example")
    assert kwargs["timeout"] == 4.0
    assert 1.0 <= kwargs["reconnect_timeout"] <= 5.0
    assert isinstance(kwargs["reconnect_failed"], _RetryWhileCallsWait)
    assert kwargs["reconnect_failed"].wait == 4.0
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


def test_a_pool_that_gave_up_retries_again_only_while_a_call_may_wait() -> None:
    """After a reconnection window failed, another starts only within connect_timeout (a
    call's longest wait) of the first give-up after a call asked for a connection; a database
    that stays down is otherwise left alone (it was retried, and a WARNING logged, about once a
    second for as long as the store stayed open), until the next call asks."""
    policy = _RetryWhileCallsWait(10.0)
    assert not policy.retries(0, 100.0)  # no call has asked: the pool's own refill gave up
    assert policy.retries(1, 100.0)  # a call asked: it may wait until 110 at the latest
    assert policy.retries(1, 105.0)
    assert not policy.retries(1, 110.0)
    assert not policy.retries(1, 4000.0)  # an hour of outage: nothing more
    assert policy.retries(2, 4000.0)  # the next call


class _Outage:
    """A simulated server outage: every connection attempt before ``until`` (``time.monotonic()``)
    fails as a refused connection would, the others reach the test server; ``attempts`` counts them."""

    def __init__(self) -> None:
        self.until = math.inf
        self.attempts = 0
        self.over: Callable[[], bool] = lambda: False
        """Ends the outage early once true (by what the pool did, not by the clock)."""

    def attempt(self) -> None:
        self.attempts += 1
        if time.monotonic() < self.until and not self.over():
            raise psycopg.OperationalError("connection refused (simulated outage)")


def _outage_connection(outage: _Outage, base: type) -> type:
    """A subclass of ``base`` (psycopg's Connection or AsyncConnection) whose connect obeys ``outage``."""
    if issubclass(base, psycopg.AsyncConnection):
        async def aconnect(cls: type, *args: Any, **kwargs: Any) -> Any:
            outage.attempt()
            return await base.connect.__func__(cls, *args, **kwargs)  # type: ignore[attr-defined]
        return type("OutageAsyncConnection", (base,), {"connect": classmethod(aconnect)})

    def connect(cls: type, *args: Any, **kwargs: Any) -> Any:
        outage.attempt()
        return base.connect.__func__(cls, *args, **kwargs)  # type: ignore[attr-defined]
    return type("OutageConnection", (base,), {"connect": classmethod(connect)})


@pytest.fixture
def short_windows(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Reconnection windows of 0.2 s; returns the list of the pools' retry decisions as made."""
    decisions: list[bool] = []
    retries = _RetryWhileCallsWait.retries

    def recorded(self: _RetryWhileCallsWait, requests: int, now: float) -> bool:
        decisions.append(retries(self, requests, now))
        return decisions[-1]

    monkeypatch.setattr(postgres, "RECONNECT_WINDOW", 0.2)
    monkeypatch.setattr(_RetryWhileCallsWait, "retries", recorded)
    return decisions


def _until(condition: Any, what: str) -> None:
    deadline = time.monotonic() + 20
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


@contextmanager
def _outage_pool(outage: _Outage, connect_timeout: float) -> Iterator[ConnectionPool]:
    """An open pool with the store's settings (no connection to begin with) whose connections obey ``outage``."""
    dsn = postgres_dsn()
    pool = ConnectionPool(dsn, connection_class=_outage_connection(outage, psycopg.Connection),
                          **PoolOptions(0, 2, connect_timeout).pool_kwargs(ConnectionPool, dsn))
    pool.open()
    try:
        yield pool
    finally:
        pool.close()


def test_a_pool_stops_retrying_a_server_that_stays_down_and_the_next_call_connects(short_windows: list[bool]) -> None:
    from psycopg_pool import PoolTimeout

    outage = _Outage()
    with _outage_pool(outage, 0.5) as pool:
        with pytest.raises(PoolTimeout), pool.connection():
            pass
        _until(lambda: False in short_windows, "the pool never stopped retrying")
        tried = outage.attempts
        time.sleep(1.0)  # five windows
        assert outage.attempts == tried and pool.get_stats()["pool_size"] == 0
        outage.until = 0.0  # the server is back: the next call's request connects
        with pool.connection(timeout=5.0) as conn:
            conn.execute("SELECT 1")


def test_a_sync_pool_retries_while_a_call_waits_and_the_call_gets_the_server_back(short_windows: list[bool]) -> None:
    outage = _Outage()
    with _outage_pool(outage, 10.0) as pool:
        outage.over = lambda: True in short_windows  # down until a window has given up and been restarted
        with pool.connection() as conn:
            conn.execute("SELECT 1")
    assert True in short_windows  # the call got its connection from a window started for it


def test_an_async_pool_retries_while_a_call_waits_and_the_call_gets_the_server_back(
    short_windows: list[bool],
) -> None:
    dsn, outage = postgres_dsn(), _Outage()
    options = PoolOptions(0, 2, 10.0)

    async def scenario() -> None:
        pool = AsyncConnectionPool(dsn, connection_class=_outage_connection(outage, psycopg.AsyncConnection),
                                   **options.pool_kwargs(AsyncConnectionPool, dsn))
        await pool.open()
        try:
            outage.over = lambda: True in short_windows  # down until a window has given up and been restarted
            async with pool.connection() as conn:
                await conn.execute("SELECT 1")
        finally:
            await pool.close()

    asyncio.run(scenario())
    assert True in short_windows  # the call got its connection from a window started for it


def test_a_store_keeps_what_the_environment_and_its_service_file_set(
    _tables: None, tmp_path: Path, libpq_environment: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from psycopg.conninfo import conninfo_to_dict

    from context_gatekeeper.stores import PostgresStore

    server = conninfo_to_dict(postgres_dsn())
    libpq_environment.write_text(
        "[cgsvc]\n" + "".join(f"{key}={server[key]}\n" for key in ("host", "port", "dbname", "user", "password"))
        + "keepalives_idle=300\ntcp_user_timeout=600000\n", encoding="utf-8")
    monkeypatch.setenv("PGCONNECT_TIMEOUT", "45")
    store = PostgresStore("service=cgsvc", table_prefix=prefix_for(tmp_path), connect_timeout=4)
    try:
        with store._connection() as conn:
            parameters = conn.info.get_parameters()
        assert (parameters["connect_timeout"], parameters["keepalives_idle"]) == ("45", "300")
        assert parameters.get("tcp_user_timeout", "600000") == "600000"  # libpq 12+
        assert (parameters["keepalives"], parameters["keepalives_count"]) == ("1", "3")  # the store's
    finally:
        store.close()

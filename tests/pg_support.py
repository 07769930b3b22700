"""Access to the test PostgreSQL server (``CG_TEST_POSTGRES_DSN``), for the PostgreSQL tests.

Start one with ``eval "$(.ci/postgres.sh start)"``.  Without it the PostgreSQL tests
are skipped with a loud reason, except under CI (``CI=true``), where they fail:
CI must never pass without having run them.

Every test run gets its own table prefix (``RUN_PREFIX``), and every storage a
further suffix, so runs and tests never see each other's tables; :func:`drop_tables`
removes them afterwards.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import threading
from pathlib import Path
from typing import Any

import pytest

ENV = "CG_TEST_POSTGRES_DSN"
RUN_PREFIX = f"t{secrets.token_hex(4)}_"
"""Unique to this test run (processes spawned by it get their prefixes from the parent)."""
_prefixes: dict[str, str] = {}
_prefixes_lock = threading.Lock()


def postgres_dsn() -> str:
    """The test server's DSN; skips the calling test without one (fails it under ``CI=true``)."""
    dsn = os.environ.get(ENV, "")
    problem = None
    if not dsn:
        problem = f'{ENV} is not set: start a server with  eval "$(.ci/postgres.sh start)"'
    else:
        try:
            __import__("psycopg")
            __import__("psycopg_pool")
        except ImportError:
            problem = "psycopg is not installed: pip install -e '.[postgres]'"
    if problem is not None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"PostgreSQL tests cannot run under CI=true: {problem}", pytrace=False)
        pytest.skip(f"PostgreSQL tests NOT RUN: {problem}")
    return dsn


PREFIX_FILE = ".pg-table-prefix"
"""The file inside a storage directory that keeps its prefix, for the processes a test starts."""


def prefix_for(where: Path | str) -> str:
    """One table prefix per storage location (a test's ``tmp_path``), unique to this run.
    For a directory, kept in a file inside it: a child process the test starts (the
    conformance suite's ``processes`` check runs ``make(where)`` in one) opens the same tables."""
    key = str(where)
    with _prefixes_lock:  # threads of one test ask at once (setup from many threads)
        if key not in _prefixes:
            kept = Path(where) / PREFIX_FILE
            if kept.is_file():
                _prefixes[key] = kept.read_text(encoding="utf-8")
            else:
                _prefixes[key] = f"{RUN_PREFIX}{len(_prefixes)}_"
                if Path(where).is_dir():  # whole or not at all: a child process never reads half of it
                    partial = kept.with_name(f"{PREFIX_FILE}.{os.getpid()}")
                    partial.write_text(_prefixes[key], encoding="utf-8")
                    os.replace(partial, kept)
        return _prefixes[key]


def drop_tables(dsn: str, prefix: str) -> None:
    """Drop every table whose name starts with ``prefix`` (identifiers composed safely)."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(dsn, autocommit=True) as conn:
        names = [
            row[0]
            for row in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() AND starts_with(tablename, %s)",
                (prefix,),
            )
        ]
        for name in names:
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(name)))


def drop_run_tables() -> None:
    """Drop this run's tables, if a server is configured (for module teardown)."""
    dsn = os.environ.get(ENV)
    if dsn:
        try:
            drop_tables(dsn, RUN_PREFIX)
        except ImportError:
            pass


def set_up_async(store: Any) -> None:
    """``store.asetup()`` on a loop of its own, the store closed afterwards whatever happens
    (what the tests of setup's async twin run)."""

    async def run() -> None:
        try:
            await store.asetup()
        finally:
            await store.aclose()

    asyncio.run(run())

"""Stores refuse unusable arguments with the library's own errors, before touching storage.

A store's constructor checks its settings (SQLite's ``busy_timeout``; PostgreSQL's pool
sizes and ``connect_timeout``) before it opens a file or a connection, so a typo fails at
once with :class:`InvalidTypeError` / :class:`InvalidInputError` saying what is expected,
never with a driver's bare ``TypeError`` or a misleading "server unreachable" after waiting.
Reads check ``revisions(after=...)`` the same way (see the store contract).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from context_gatekeeper.errors import InvalidInputError, InvalidTypeError
from context_gatekeeper.stores import SQLiteStore
from context_gatekeeper.stores.base import checked_after

UNREACHABLE = "postgresql://nobody@/nothing?host=/nonexistent-socket-dir&connect_timeout=1"
"""A server that is not there: a store that got as far as connecting would say so instead."""


@pytest.mark.parametrize(
    ("busy_timeout", "error"),
    [(None, InvalidTypeError), ("5", InvalidTypeError), (True, InvalidTypeError), (-1, InvalidInputError),
     (float("nan"), InvalidInputError), (float("inf"), InvalidInputError), (1e12, InvalidInputError)],
    ids=["None", "str", "bool", "negative", "nan", "inf", "huge"],
)
def test_sqlite_refuses_an_unusable_busy_timeout_before_creating_the_file(
    tmp_path: Path, busy_timeout: Any, error: type[Exception]
) -> None:
    path = tmp_path / "chat.db"
    with pytest.raises(error, match="busy_timeout"):
        SQLiteStore(path, busy_timeout=busy_timeout)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("busy_timeout", [0, 0.5, 30])
def test_sqlite_takes_a_busy_timeout_of_zero_or_more_seconds(tmp_path: Path, busy_timeout: float) -> None:
    store = SQLiteStore(tmp_path / "chat.db", busy_timeout=busy_timeout)
    try:
        assert store.busy_timeout == busy_timeout
    finally:
        store.close()


@pytest.mark.parametrize(
    ("options", "error", "named"),
    [
        ({"min_size": 5, "max_size": 2}, InvalidInputError, "min_size"),
        ({"min_size": 0, "max_size": 0}, InvalidInputError, "max_size"),
        ({"min_size": -1}, InvalidInputError, "min_size"),
        ({"min_size": "2"}, InvalidTypeError, "min_size"),
        ({"max_size": 2.0}, InvalidTypeError, "max_size"),
        ({"connect_timeout": 0}, InvalidInputError, "connect_timeout"),
        ({"connect_timeout": -3}, InvalidInputError, "connect_timeout"),
        ({"connect_timeout": float("nan")}, InvalidInputError, "connect_timeout"),
        ({"connect_timeout": None}, InvalidTypeError, "connect_timeout"),
        ({"connect_timeout": "10"}, InvalidTypeError, "connect_timeout"),
    ],
    ids=["min-above-max", "max-zero", "min-negative", "min-str", "max-float", "timeout-zero", "timeout-negative",
         "timeout-nan", "timeout-None", "timeout-str"],
)
def test_postgres_refuses_unusable_pool_options_before_connecting(options: dict[str, Any], error: type[Exception],
                                                                  named: str) -> None:
    pytest.importorskip("psycopg_pool")
    from context_gatekeeper.stores.postgres import PostgresStore

    threads = threading.active_count()
    with pytest.raises(error, match=named):
        PostgresStore(UNREACHABLE, **options)
    assert threading.active_count() == threads  # no pool was started


class IndexOnly:
    """An integer type that is no ``int``, as a NumPy integer is."""

    def __index__(self) -> int:
        return 4


@pytest.mark.parametrize(("after", "expected"), [(0, 0), (3, 3), (-2, 0), (IndexOnly(), 4)])
def test_checked_after_takes_any_integer(after: Any, expected: int) -> None:
    assert checked_after(after) == expected
    assert type(checked_after(after)) is int


@pytest.mark.parametrize("after", [1.5, 2.0, "1", None, True, b"1"])
def test_checked_after_refuses_anything_else(after: Any) -> None:
    with pytest.raises(InvalidTypeError, match="revision number"):
        checked_after(after)


# -- an empty path -------------------------------------------------------------------------------
@pytest.mark.parametrize("path", ["", "   ", "\t\n"], ids=["empty", "spaces", "whitespace"])
def test_sqlite_refuses_an_empty_or_blank_path_before_opening_anything(
    path: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite takes "" for a private temporary database: every write was lost on close, and the
    store's absolute_path was the working folder, which a pickled adapter could not reopen."""
    import sqlite3

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sqlite3, "connect", lambda *args, **kwargs: pytest.fail("a connection was opened"))
    for read_only in (False, True):
        with pytest.raises(InvalidInputError, match=r"empty.*file path.*':memory:'"):
            SQLiteStore(path, read_only=read_only)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("path", ["", "  "], ids=["empty", "blank"])
def test_a_transcript_and_a_history_refuse_an_empty_store_path(
    path: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``store=os.environ.get("CHAT_DB", "")`` with the variable unset: refused, saying what to
    pass (None keeps the conversation in memory), instead of keeping it in a throwaway database."""
    from context_gatekeeper import Transcript

    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidInputError, match=r"empty.*file path.*None"):
        Transcript("chat-1", store=path)
    pytest.importorskip("langchain_core")
    from langchain_gatekeeper import GatekeeperChatMessageHistory

    with pytest.raises(InvalidInputError, match=r"empty.*file path.*None"):
        GatekeeperChatMessageHistory("user-1", store=path)
    assert list(tmp_path.iterdir()) == []

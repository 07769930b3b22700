"""SQLiteStore given a URL instead of a file path: refused before anything is opened or created,
and never with the URL's password in the message (a PostgreSQL URL whose scheme is not written
in lower case is no URL to libpq, so ``Transcript(store=...)`` took it for a SQLite path and
quoted it whole, password included)."""

from __future__ import annotations

from pathlib import Path

import pytest

from context_gatekeeper import InvalidInputError, Transcript
from context_gatekeeper.stores import SQLiteStore

SECRET = "s3cret-pw"


@pytest.mark.parametrize("url", [
    f"POSTGRESQL://cg:{SECRET}@db.example:5432/app",
    f"Postgres://cg:{SECRET}@db.example/app",
    f" postgresql://cg:{SECRET}/with/slash@db.example/app",
])
def test_a_postgresql_url_is_refused_as_a_sqlite_path_without_its_password(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidInputError, match=r"write postgres(ql)?://|PostgresStore\(url\)") as caught:
        SQLiteStore(url)
    assert SECRET not in str(caught.value)
    assert "cg:***@" in str(caught.value)
    assert list(tmp_path.iterdir()) == []  # nothing created


def test_a_transcript_given_an_upper_case_postgresql_url_says_the_scheme_must_be_lower_case(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidInputError, match="lower case") as caught:
        Transcript("s", store=f"POSTGRESQL://cg:{SECRET}@db.example/app")
    assert SECRET not in str(caught.value)
    assert list(tmp_path.iterdir()) == []


def test_any_url_with_a_password_is_refused_without_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidInputError, match="file path") as caught:
        SQLiteStore(f"mysql://app:{SECRET}@db.example/chats")
    assert SECRET not in str(caught.value)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", ["chats.db", "user@host.db", "a:b@c.db", "odd://name.db"])
def test_file_paths_that_are_no_urls_with_passwords_still_open(name: str, tmp_path: Path) -> None:
    (tmp_path / "odd:").mkdir()
    store = SQLiteStore(f"{tmp_path}/{name}")
    try:
        assert store.head("s") == 0
    finally:
        store.close()

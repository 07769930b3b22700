"""GatekeeperMemory.trusted_stores tells a PostgreSQL connection string from a SQLite path as
Transcript(store=...) does (one detection): every string Transcript would open as PostgreSQL is
refused there (it is never connected to), every other one is a path."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("llama_index.core")

from context_gatekeeper import InvalidInputError  # noqa: E402
from llamaindex_gatekeeper import GatekeeperMemory  # noqa: E402


@pytest.mark.parametrize("conninfo", [
    "postgresql://cg@db.example/app",
    "host=db.example dbname=app",
    "password=p host=h",
    "sslmode=disable host=h dbname=d password=p",
    "application_name=x host=h",
])
def test_what_transcript_opens_as_postgresql_is_refused(conninfo: str) -> None:
    with pytest.raises(InvalidInputError, match="PostgreSQL"):
        GatekeeperMemory.trusted_stores(conninfo)


def test_a_path_into_a_folder_named_like_a_setting_is_a_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "user=alice").mkdir()
    with GatekeeperMemory.trusted_stores("user=alice/chat.db"):
        pass

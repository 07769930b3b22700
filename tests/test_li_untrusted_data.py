"""Serialised memory data is untrusted; pickles name a store, never a secret."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest
from llama_index.core.llms import ChatMessage

from context_gatekeeper import InvalidInputError
from llamaindex_gatekeeper import GatekeeperMemory
from pg_support import drop_tables, postgres_dsn, prefix_for


def exchange(memory: GatekeeperMemory, question: str, answer: str) -> None:
    memory.put_messages([ChatMessage(role="user", content=question), ChatMessage(role="assistant", content=answer)])


def contents(memory: GatekeeperMemory) -> list[str]:
    return [str(m.content) for m in memory.get_all()]


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("store", "EVIL"),  # a SQLite path the data chose (filled in below)
        ("store", "postgresql://attacker:pw@127.0.0.1:1/db"),
        ("model", "gemini-2.5-pro"),
        ("llm", "anything"),
        ("token_counter", "o200k_base"),
        ("tokenizer_fn", "len"),
        ("params", {"gate_threshold": 0}),
        ("message_overhead", [1]),  # a whitelisted name with a value that is not a scalar
    ],
)
def test_from_dict_refuses_options_the_data_must_not_choose(tmp_path: Path, key: str, value: object) -> None:
    memory = GatekeeperMemory.from_defaults(session_id="s")
    exchange(memory, "Redis lock TTL?", "Longer than the job.")
    data = json.loads(json.dumps(memory.to_dict()))
    evil = tmp_path / "chosen-by-the-data.db"
    data["options"][key] = str(evil) if value == "EVIL" else value
    with pytest.raises(InvalidInputError, match=rf"\['{key}'\] cannot come from serialised data"):
        GatekeeperMemory.from_dict(data)
    assert not evil.exists()


def test_the_caller_still_passes_store_model_and_token_counter(tmp_path: Path) -> None:
    memory = GatekeeperMemory.from_defaults(session_id="s", message_overhead=1, strategy="rewrite")
    exchange(memory, "Redis lock TTL?", "Longer than the job.")
    data = json.loads(json.dumps(memory.to_dict()))
    assert set(data["options"]) <= {"message_overhead", "strategy", "max_deletion_share", "on_overflow"}
    path = tmp_path / "mine.db"
    restored = GatekeeperMemory.from_dict(data, store=str(path), token_counter=lambda text: len(text.split()))
    assert contents(restored) == contents(memory) and path.exists()
    assert restored.gate.gatekeeper.message_overhead == 1


def test_an_in_memory_memory_pickles_with_its_history_and_unpickles_independent() -> None:
    memory = GatekeeperMemory.from_defaults(session_id="p", token_limit=1234)
    exchange(memory, "We went to Ireland.", "Ireland, noted.")
    copy = pickle.loads(pickle.dumps(memory))
    assert (copy.session_id, copy.token_limit) == ("p", 1234)
    assert contents(copy) == contents(memory) and len(copy.history()) == len(memory.history())
    exchange(copy, "More?", "Yes.")
    assert len(memory.get_all()) == 2


def test_a_sqlite_memory_pickles_as_its_path_and_reattaches(tmp_path: Path) -> None:
    path = str(tmp_path / "chat.db")
    memory = GatekeeperMemory.from_defaults(store=path, session_id="s")
    exchange(memory, "Redis lock TTL?", "Longer than the job.")
    data = pickle.dumps(memory)
    assert path.encode() in data and b"Redis lock TTL" not in data  # the path, not a copy of the log
    again = pickle.loads(data)
    exchange(again, "And the watchdog?", "Renews the lock.")
    assert len(memory.get_all()) == 4  # one live session


def test_copies_of_a_memory_on_a_relative_path_reopen_the_same_file_read_only_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import copy

    from context_gatekeeper import SQLiteStore, StoreUnavailableError

    (tmp_path / "here").mkdir()
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    memory = GatekeeperMemory.from_defaults(store="chats.db", session_id="s")  # as the README writes it
    exchange(memory, "Redis lock TTL?", "Longer than the job.")
    data = pickle.dumps(memory)
    memory.close()
    monkeypatch.chdir(tmp_path / "elsewhere")
    again = pickle.loads(data)
    assert len(again.get_all()) == 2
    again.close()
    assert not list((tmp_path / "elsewhere").iterdir())  # no new, empty chats.db there
    store = SQLiteStore("../here/chats.db", read_only=True)
    reader = GatekeeperMemory.from_defaults(store=store, session_id="s")
    for twin in (pickle.loads(pickle.dumps(reader)), copy.deepcopy(reader)):
        with pytest.raises(StoreUnavailableError):
            exchange(twin, "And the watchdog?", "Renews the lock.")
        twin.close()
    store.close()
    check = SQLiteStore(tmp_path / "here" / "chats.db")
    assert check.head("s") == 1  # nothing was written through a copy
    check.close()


def test_a_postgres_memory_pickles_without_its_password(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    dsn = postgres_dsn()
    from psycopg.conninfo import conninfo_to_dict

    from context_gatekeeper.stores.postgres import PostgresStore

    password = conninfo_to_dict(dsn).get("password")
    assert password, "the test server's DSN carries a password"
    prefix = prefix_for(tmp_path)
    store = PostgresStore(dsn, table_prefix=prefix)
    try:
        memory = GatekeeperMemory.from_defaults(store=store, session_id="pg")
        exchange(memory, "Redis lock TTL?", "Longer than the job.")
        data = pickle.dumps(memory)
        assert password.encode() not in data
        monkeypatch.setenv("PGPASSWORD", password)  # where the unpickling side keeps it
        again = pickle.loads(data)
        try:
            assert contents(again) == contents(memory)
        finally:
            again.store.close()
    finally:
        store.close()
        drop_tables(dsn, prefix)

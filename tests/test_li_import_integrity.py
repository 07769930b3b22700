"""``GatekeeperMemory.from_dict`` imports a serialised revision log whole or not at all:
no revision that does not apply is ever written.

The log is checked in memory, with the stores' own check, before anything is written:
a revision that does not apply (or an entry that is not a revision) is refused with
one error naming it, and the store's session stays empty.  No-op revisions, which
older versions wrote and exported, are skipped and the rest renumbered (undo, redo
and revert targets with them), instead of shifting the numbering under the import.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from llama_index.core.llms import ChatMessage

from context_gatekeeper import InvalidInputError, InvalidRevisionError, Message, Store
from context_gatekeeper.records.operations import Change, Remove, change_to_dict
from context_gatekeeper.stores import InMemoryStore
from context_gatekeeper.stores.sqlite import SQLiteStore
from llamaindex_gatekeeper import GatekeeperMemory
from pg_support import drop_tables, postgres_dsn, prefix_for

SESSION = "imported"


# -- helpers ------------------------------------------------------------------------------
def exchange(memory: GatekeeperMemory, question: str, answer: str) -> None:
    memory.put_messages([ChatMessage(role="user", content=question), ChatMessage(role="assistant", content=answer)])


def contents(memory: GatekeeperMemory) -> list[str]:
    return [str(m.content) for m in memory.get_all()]


def exported() -> tuple[GatekeeperMemory, dict[str, Any]]:
    """A memory with appends, a set, an undo, a redo and a revert, and its JSON export."""
    memory = GatekeeperMemory.from_defaults(session_id=SESSION)
    exchange(memory, "We went to Ireland in 2021.", "Ireland in 2021, noted.")  # 1
    exchange(memory, "Redis lock TTL?", "Longer than the longest job.")  # 2
    messages = memory.get_all()
    messages[0] = ChatMessage(role="user", content="We went to Iceland in 2021.")
    memory.set(messages)  # 3
    memory.undo()  # 4 (target 3)
    memory.redo()  # 5 (target 3)
    memory.revert(2)  # 6 (target 2)
    exchange(memory, "And the watchdog?", "It renews the lock.")  # 7
    assert [r.kind for r in memory.history()] == ["append", "append", "set", "undo", "redo", "revert", "append"]
    return memory, json.loads(json.dumps(memory.to_dict()))


def insert(data: dict[str, Any], at: int, entry: dict[str, Any]) -> dict[str, Any]:
    """``data`` with ``entry`` inserted as revision ``at`` and the later ones renumbered,
    as an older version that wrote no-op revisions exported it."""
    data = copy.deepcopy(data)
    revisions = data["revisions"]
    for revision in revisions:
        if revision["number"] >= at:
            revision["number"] += 1
            revision["parent"] += 1
            if revision["kind"] in ("undo", "redo", "revert") and revision["target"] >= at:
                revision["target"] += 1
    entry = {"number": at, "parent": at - 1, "instruction": None, "model": None, "time": 0.0, "base": at - 1,
             "target": None, **entry}
    revisions.insert(at - 1, entry)
    return data


def message_put_by(data: dict[str, Any], number: int, index: int = 0) -> dict[str, Any]:
    """The message dict revision ``number`` of ``data`` put (its ``index``-th put)."""
    puts = [c for c in data["revisions"][number - 1]["changes"] if c["op"] == "put"]
    return copy.deepcopy(puts[index]["message"])


def appended(data: dict[str, Any], changes: list[dict[str, Any]], kind: str = "edit", **extra: Any) -> dict[str, Any]:
    """``data`` with one more revision at the end."""
    return insert(data, len(data["revisions"]) + 1, {"kind": kind, "changes": changes, **extra})


def ghost_removal() -> dict[str, Any]:
    """A change removing a message that was never in the transcript."""
    return change_to_dict(Remove(Message("ghost", "user", "Never said."), None))


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Store, Callable[[], Store]]]:
    """``(store to import into, how to open that storage afresh)``."""
    if request.param == "memory":
        store: Store = InMemoryStore()
        yield store, lambda: store
    elif request.param == "sqlite":
        path = str(tmp_path / "import.db")
        store = SQLiteStore(path)
        opened: list[Store] = [store]

        def reopen() -> Store:
            opened.append(SQLiteStore(path))
            return opened[-1]

        yield store, reopen
        for each in opened:
            each.close()
    else:
        from context_gatekeeper.stores.postgres import PostgresStore

        dsn = postgres_dsn()
        prefix = prefix_for(tmp_path)
        store = PostgresStore(dsn, table_prefix=prefix)
        opened = [store]

        def reopen_pg() -> Store:
            opened.append(PostgresStore(dsn, table_prefix=prefix))
            return opened[-1]

        try:
            yield store, reopen_pg
        finally:
            for each in opened:
                each.close()
            drop_tables(dsn, prefix)


def assert_nothing_written(store: Store, reopen: Callable[[], Store]) -> None:
    for each in (store, reopen()):
        assert each.revisions(SESSION) == [] and each.head(SESSION) == 0
        assert SESSION not in each.sessions()


def refused(
    target: tuple[Store, Callable[[], Store]], data: dict[str, Any], error: type[Exception], match: str
) -> pytest.ExceptionInfo[Exception]:
    """Importing ``data`` into the ``target`` store raises ``error`` matching ``match``, and
    nothing is written (seen through the store and through the storage opened afresh)."""
    store, reopen = target
    with pytest.raises(error, match=match) as caught:
        GatekeeperMemory.from_dict(data, store=store)
    assert_nothing_written(store, reopen)
    return caught


# -- a log that does not apply: refused whole ---------------------------------------------
def test_a_revision_that_does_not_apply_is_refused_and_nothing_is_written(target) -> None:
    _, data = exported()
    bad = appended(data, [ghost_removal()])  # revision 8 removes a message that is not there
    caught = refused(target, bad, InvalidRevisionError, r"revision 8 .*nothing was written")
    assert "'ghost'" in str(caught.value)


def test_a_message_put_twice_in_the_middle_of_the_log_is_refused_before_anything_is_written(target) -> None:
    _, data = exported()
    twice = insert(data, 3, {"kind": "edit", "changes": [{"op": "put", "message": message_put_by(data, 1), "after": None}]})
    refused(target, twice, InvalidRevisionError, r"revision 3 .*nothing was written")


def test_an_append_reusing_an_id_with_other_text_is_refused_and_nothing_is_written(target) -> None:
    _, data = exported()
    reused = message_put_by(data, 1)
    reused["content"] = "Something else entirely."
    bad = appended(data, [{"op": "put", "message": reused, "after": None, "end": True}], kind="append")
    refused(target, bad, InvalidInputError, r"revision 8 .*nothing was written")


def test_an_undo_of_a_revision_that_was_never_done_is_refused_and_nothing_is_written(target) -> None:
    _, data = exported()
    # revision 8 "undoes" revision 1, an append (undo never reverts appends) with valid changes
    first = data["revisions"][0]["changes"]
    from context_gatekeeper.records.operations import change_from_dict, invert

    undo = [change_to_dict(c) for c in invert([change_from_dict(c, legacy_end=True) for c in first])]
    bad = appended(data, undo, kind="undo", target=1)
    refused(target, bad, InvalidRevisionError, r"revision 8 .*nothing was written")


@pytest.mark.parametrize(
    "breakage",
    [
        lambda entry: entry.pop("changes"),
        lambda entry: entry.update(changes=[{"op": "teleport"}]),
        lambda entry: entry.update(kind="rewind"),
        lambda entry: entry.update(number="three"),
        lambda entry: entry.update(changes="put everything"),
        lambda entry: entry.update(instruction={"not": "text"}),
    ],
    ids=["no-changes", "unknown-op", "unknown-kind", "bad-number", "changes-not-a-list", "bad-instruction"],
)
def test_an_entry_that_is_not_a_revision_is_refused_naming_it_and_nothing_is_written(target, breakage) -> None:
    _, data = exported()
    breakage(data["revisions"][2])
    refused(target, data, InvalidInputError, r"revision 3\b.*nothing was written")


def test_revisions_must_be_a_list(target) -> None:
    _, data = exported()
    data["revisions"] = {"1": data["revisions"][0]}
    refused(target, data, InvalidInputError, r"'revisions'.*nothing was written")


# -- old exports with no-op revisions: skipped, renumbered --------------------------------
def noop_entries(data: dict[str, Any]) -> list[tuple[int, dict[str, Any]]]:
    """No-op revisions as older versions wrote them: empty, and a change to identical text."""
    first = Message.from_dict(message_put_by(data, 1))
    same = change_to_dict(Change(first, first))
    return [
        (2, {"kind": "set", "changes": []}),
        (4, {"kind": "edit", "changes": [same], "instruction": "fix nothing"}),
        (6, {"kind": "append", "changes": []}),
    ]


def test_an_old_export_with_noop_revisions_imports_whole_and_renumbered(target) -> None:
    store, _ = target
    memory, data = exported()
    old = data
    for at, entry in noop_entries(data):
        old = insert(old, at, entry)
    assert len(old["revisions"]) == 10
    restored = GatekeeperMemory.from_dict(old, store=store)
    assert contents(restored) == contents(memory)
    assert [(r.number, r.kind, r.target) for r in restored.history()] == [
        (r.number, r.kind, r.target) for r in memory.history()
    ]
    assert [m.id for m in restored.transcript.messages] == [m.id for m in memory.transcript.messages]
    restored.undo()  # the revert (renumbered target) is undone, as in the original
    memory.undo()
    assert contents(restored) == contents(memory)


def test_an_old_export_with_only_noop_revisions_imports_as_an_empty_session(target) -> None:
    store, reopen = target
    data = {"class_name": "GatekeeperMemory", "session_id": SESSION, "token_limit": 500, "options": {},
            "revisions": [{"number": 1, "parent": 0, "kind": "set", "changes": []},
                          {"number": 2, "parent": 1, "kind": "clear", "changes": []}]}
    restored = GatekeeperMemory.from_dict(data, store=store)
    assert restored.get_all() == [] and restored.history() == []
    assert_nothing_written(store, reopen)


def test_an_old_export_reattaches_to_the_session_it_was_imported_into(tmp_path: Path) -> None:
    memory, data = exported()
    old = insert(data, 2, {"kind": "set", "changes": []})
    path = str(tmp_path / "chat.db")
    first = GatekeeperMemory.from_dict(old, store=path)
    again = GatekeeperMemory.from_dict(old, store=path)  # the same log, its no-op skipped again: attached
    assert contents(again) == contents(first) == contents(memory)
    assert len(again.history()) == len(memory.history())
    first.close()
    again.close()


def test_a_revert_to_a_skipped_noop_revision_restores_the_state_before_it(target) -> None:
    store, _ = target
    memory, data = exported()
    old = insert(data, 3, {"kind": "set", "changes": []})  # a no-op after the two appends
    revert = next(r for r in old["revisions"] if r["kind"] == "revert")
    assert revert["target"] == 2
    revert["target"] = 3  # the state at the no-op is the state at revision 2
    restored = GatekeeperMemory.from_dict(old, store=store)
    assert contents(restored) == contents(memory)
    assert next(r for r in restored.history() if r.kind == "revert").target == 2


def test_the_options_whitelist_still_refuses_before_the_log_is_read(target) -> None:
    _, data = exported()
    data["options"]["store"] = "elsewhere.db"
    data["revisions"].append("not a revision")
    refused(target, data, InvalidInputError, r"\['store'\] cannot come from serialised data")

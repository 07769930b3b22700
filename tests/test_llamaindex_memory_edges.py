"""GatekeeperMemory at its edges: over its budget and after a partial ``from_dict`` import
on Python 3.10 (exceptions without ``add_note``) it still raises the right error with its
note; a deep copy on a ``PostgresStore`` subclass writes to the same session.  Also the
history's position view, a whole ``Sequence`` (slices included).

The type checker found each of these (the package claims ``Typing :: Typed``); each test
fails on the code as it was before its fix."""

from __future__ import annotations

from pathlib import Path

import pytest

import llamaindex_gatekeeper.memory as li_memory
from context_gatekeeper import BudgetError
from llamaindex_gatekeeper import GatekeeperMemory


def as_on_python_310(error_class: type[BaseException]) -> type[BaseException]:
    """``error_class`` as Python 3.10 (which the package supports) builds it: exceptions
    there have no ``add_note`` (PEP 678 came in 3.11)."""

    def __getattribute__(self: BaseException, name: str) -> object:
        if name == "add_note":
            raise AttributeError(f"{type(self).__name__!r} object has no attribute 'add_note'")
        return error_class.__getattribute__(self, name)

    return type(f"{error_class.__name__}OnPython310", (error_class,), {"__getattribute__": __getattribute__})


_BudgetErrorOnPython310 = as_on_python_310(BudgetError)


def test_memory_get_over_its_budget_raises_budget_error_on_python_310(monkeypatch: pytest.MonkeyPatch) -> None:
    # mypy (python_version 3.10): "BudgetError" has no attribute "add_note"; the memory
    # raised AttributeError there instead of ChatMemoryBuffer's BudgetError.
    monkeypatch.setattr(li_memory, "BudgetError", _BudgetErrorOnPython310)
    memory = GatekeeperMemory.from_defaults(token_limit=10)
    with pytest.raises(BudgetError) as caught:
        memory.get(initial_token_count=11)
    assert str(caught.value) == "Initial token count exceeds token limit"  # ChatMemoryBuffer's text
    notes = caught.value.__dict__.get("__notes__", [])
    assert any("initial_token_count=11" in note and "token_limit=10" in note for note in notes), notes


def test_the_histories_position_view_is_a_whole_sequence() -> None:
    # mypy: its __getitem__ overrode Sequence's without the slice overload (an ignore hid
    # it); a slice failed with TypeError (a list of ids used as one dict key).
    from context_gatekeeper.selection.history import _ByPosition

    view = _ByPosition([3, 1, 2], {1: "one", 2: "two", 3: "three"})  # strings stand in for the inputs
    assert view[0] == "three" and view[-1] == "two"
    assert view[1:] == ["one", "two"]
    assert list(reversed(view)) == ["two", "one", "three"] and view.index("one") == 1


def test_a_memory_on_a_postgres_store_subclass_copies_attached_to_the_same_session(tmp_path: Path) -> None:
    # the copy matched PostgresStore by class *name*, so a
    # subclass was replayed into an InMemoryStore and the copy's writes never reached
    # the database
    import copy

    from llama_index.core.llms import ChatMessage
    from pg_support import drop_tables, postgres_dsn, prefix_for

    from context_gatekeeper import PostgresStore

    class TracedPostgresStore(PostgresStore):
        pass

    dsn, prefix = postgres_dsn(), prefix_for(tmp_path)
    store = TracedPostgresStore(dsn, table_prefix=prefix)
    try:
        memory = GatekeeperMemory.from_defaults(store=store, session_id="traced")
        memory.put(ChatMessage(role="user", content="Redis lock TTL?"))
        twin = copy.deepcopy(memory)
        try:
            assert isinstance(twin.store, PostgresStore)
            twin.put(ChatMessage(role="assistant", content="Longer than the job."))
            assert store.head("traced") == 2  # the copy wrote to the same session
        finally:
            twin.store.close()
    finally:
        store.close()
        drop_tables(dsn, prefix)


def test_a_partial_from_dict_import_says_what_was_written_on_python_310() -> None:
    # from_dict's note was skipped where exceptions have no
    # add_note (Python 3.10), so nobody learnt that revisions 1..N were already imported
    from llama_index.core.llms import ChatMessage

    from context_gatekeeper import InMemoryStore

    source = GatekeeperMemory.from_defaults(session_id="s")
    for text in ("one", "two", "three"):
        source.put(ChatMessage(role="user", content=text))
    data = source.to_dict()

    StoreFull = as_on_python_310(RuntimeError)

    commits = []

    def fail_on_the_second_commit(point: str) -> None:
        if point == "begin":
            commits.append(point)
            if len(commits) == 2:
                raise StoreFull("the disk is full")

    target = InMemoryStore()
    target.fault_hook = fail_on_the_second_commit
    with pytest.raises(StoreFull) as caught:
        GatekeeperMemory.from_dict(data, store=target)
    notes = caught.value.__dict__.get("__notes__", [])
    assert any("revisions 1..1" in note and "store.purge('s')" in note for note in notes), notes


@pytest.mark.parametrize("dsn", [
    "postgresql://bob:secret@db.example:5432/chats",
    "postgres://db.example/chats",
    "host=db.example dbname=chats user=bob password=secret",
])
def test_trusted_stores_refuses_a_postgres_url_it_cannot_match_without_connecting(
    dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A URL was taken as a SQLite path that could never match, so the restore silently went
    into memory with a StoreDetachedWarning; now it is refused, naming what to pass, and nothing connects."""
    import warnings

    import psycopg
    from llama_index.core.llms import ChatMessage

    from context_gatekeeper import InvalidInputError

    def no_connection(*args: object, **kwargs: object) -> None:
        raise AssertionError("trusted_stores connected to a database")

    monkeypatch.setattr(psycopg, "connect", no_connection)
    with pytest.raises(InvalidInputError, match="PostgresStore") as refused:
        with GatekeeperMemory.trusted_stores(dsn):
            pass
    assert "secret" not in str(refused.value)
    path = tmp_path / "chats.sqlite3"
    memory = GatekeeperMemory.from_defaults(store=str(path), session_id="s1")
    memory.put(ChatMessage(role="user", content="hi"))
    data = memory.to_dict()
    memory.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a SQLite path still reattaches, with no warning
        with GatekeeperMemory.trusted_stores(str(path)):
            restored = GatekeeperMemory.from_dict(data)
    try:
        assert [m.content for m in restored.get_all()] == ["hi"] and type(restored.store).__name__ == "SQLiteStore"
    finally:
        restored.close()

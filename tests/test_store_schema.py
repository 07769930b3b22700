"""``stores.schema``: a stored row that cannot be read is the library's CorruptLogError,
whatever Python error reading it raised (the chain check catches edits made without
recomputing the digests; these are rows whose digests were recomputed, or read unchained)."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from context_gatekeeper.errors import CorruptLogError
from context_gatekeeper.stores.schema import revision_from_fields


def _fields(**overrides: object) -> dict[str, object]:
    fields: dict[str, object] = dict(
        number=1, parent=0, kind="append", instruction=None, model=None, created_at=1.0, base=None, target=None,
        changes=json.dumps([]),
    )
    fields.update(overrides)
    return fields


@pytest.mark.parametrize(
    "overrides",
    [
        pytest.param({"changes": "[" * 100_000 + "]" * 100_000}, id="JSON nested past the recursion limit"),
        pytest.param(
            {"changes": '[{"op":"put","message":{"id":"m1","role":"user","content":"hi","revision":1e400},'
                        '"after":null,"end":true}]'},
            id="a message's revision too large for an integer",
        ),
        pytest.param({"changes": json.dumps([{"op": "put", "message": 5}])}, id="a message that is not an object"),
        pytest.param({"changes": "{not json"}, id="not JSON"),
    ],
)
def test_an_unreadable_row_is_a_corrupt_log_error_naming_session_and_revision(overrides: dict[str, object]) -> None:
    with pytest.raises(CorruptLogError, match="unreadable row") as caught:
        revision_from_fields("s", **_fields(**overrides))  # type: ignore[arg-type]
    assert (caught.value.session_id, caught.value.revision) == ("s", 1)


def test_a_readable_row_reads() -> None:
    revision = revision_from_fields("s", **_fields())  # type: ignore[arg-type]
    assert (revision.number, revision.kind, revision.changes) == (1, "append", ())


def test_schema_behind_names_what_is_missing_and_leaves_other_failures_alone() -> None:
    from context_gatekeeper.errors import SchemaVersionError
    from context_gatekeeper.stores.schema import Migration, schema_behind

    migrations = [Migration(n, f"m{n}", ()) for n in (1, 2, 3)]
    assert schema_behind({1, 2, 3}, migrations, "db", "call setup()") is None  # up to date: another failure
    for nothing in (None, set()):
        error = schema_behind(nothing, migrations, "db", "call setup()", "the path")
        assert isinstance(error, SchemaVersionError)
        assert str(error).startswith("db holds no context-gatekeeper tables") and str(error).endswith("check the path")
    error = schema_behind({1}, migrations, "db", "call setup()")
    assert isinstance(error, SchemaVersionError) and "schema version 1 (migration(s) [2, 3] not applied yet)" in str(error)
    assert "Call setup() to bring the schema up to date" in str(error)


# -- a migration's record deleted by hand ------------------------------------------------------
def test_created_objects_names_what_every_sqlite_migration_creates() -> None:
    from context_gatekeeper.stores.schema import created_objects
    from context_gatekeeper.stores.sqlite import MIGRATIONS

    assert {m.version: created_objects(m) for m in MIGRATIONS} == {
        1: (("revisions", None),),
        2: (("message_ids", None), ("set_aside_revisions", None)),
        3: (("vectors", None),),
        4: (("revisions", "digest"),),
        5: (),  # no tables or columns: applying it again rewrites nothing (see .chain.rechained)
    }


def _stored(path: Path) -> tuple[bytes, bytes]:
    """The database file's bytes and its write-ahead log's (the ``-shm`` index is no content)."""
    log = Path(f"{path}-wal")
    return path.read_bytes(), log.read_bytes() if log.exists() else b""


@pytest.mark.parametrize("lost", ["1", "2", "3", "4", "the table"])
def test_a_migration_record_deleted_by_hand_is_named_and_nothing_is_written(tmp_path: Path, lost: str) -> None:
    """Opening a file whose ``schema_migrations`` lacks the record of a migration whose tables or
    columns exist ran the migration again and failed with a bare sqlite3.OperationalError ("table
    revisions already exists") on every open.  Now: SchemaVersionError saying what happened and
    the statement that restores the record; no byte changes; after running it, the file opens."""
    from context_gatekeeper import Transcript
    from context_gatekeeper.errors import SchemaVersionError
    from context_gatekeeper.stores.sqlite import SQLiteStore

    path = tmp_path / "chat.db"
    with Transcript("s", store=path) as t:
        t.append(user="hello", assistant="hi")
    damage = "DROP TABLE schema_migrations" if lost == "the table" else f"DELETE FROM schema_migrations WHERE version = {lost}"
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute(damage)
    before = _stored(path)
    def setup_later() -> None:
        store = SQLiteStore(path, setup=False)
        try:
            store.setup()
        finally:
            store.close()

    for call in (lambda: SQLiteStore(path), lambda: SQLiteStore(path, read_only=True), setup_later):
        with pytest.raises(SchemaVersionError) as caught:
            call()
        text = str(caught.value)
        assert "no record of them in schema_migrations" in text and "outside context-gatekeeper" in text, text
        assert "nothing was written" in text and "INSERT INTO schema_migrations" in text
        assert ("CREATE TABLE schema_migrations" in text) == (lost == "the table")
        assert _stored(path) == before
    repair = text.split("restore the record (", 1)[1].rsplit(") or the database from a backup", 1)[0]
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.executescript(repair)
    with Transcript("s", store=path) as t:
        assert [m.content for m in t.messages] == ["hello", "hi"]
        t.append(user="after the repair")
    with closing(sqlite3.connect(path)) as conn:
        assert [row[0] for row in conn.execute("SELECT version FROM schema_migrations ORDER BY version")] == [1, 2, 3, 4, 5]


# -- a recorded migration's table dropped by hand ----------------------------------------------
@pytest.mark.parametrize(
    ("damage", "named", "rerun"),
    [
        ("DROP TABLE vectors", "vectors", [3]),
        ("DROP TABLE message_ids", "message_ids", None),  # set_aside_revisions, of the same migration, is there
        ("DROP TABLE revisions", "revisions", [1, 4]),  # and with it migration 4's column
        ("ALTER TABLE revisions DROP COLUMN digest", "revisions.digest", [4]),
    ],
    ids=["vectors", "message_ids", "revisions", "digest"],
)
def test_a_recorded_table_that_is_missing_is_named_and_nothing_is_written(
    tmp_path: Path, damage: str, named: str, rerun: list[int] | None
) -> None:
    """A table that ``schema_migrations`` records but that is gone (``DROP TABLE vectors``) made
    load_vectors, stored_sessions and purge raise a bare sqlite3.OperationalError ("no such
    table").  Now opening the file says which table is missing and how to restore it, writing
    nothing; so does a call on a store opened with setup=False.  Where the migration can simply
    run again, the statement that lets it does, and the file opens."""
    from context_gatekeeper import Transcript
    from context_gatekeeper.errors import SchemaVersionError
    from context_gatekeeper.stores.sqlite import SQLiteStore

    path = tmp_path / "chat.db"
    with Transcript("s", store=path) as t:
        t.append(user="hello", assistant="hi")
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute(damage)
    before = _stored(path)

    def setup_later() -> None:
        with closing(SQLiteStore(path, setup=False)) as store:
            store.setup()

    def call_later() -> None:
        with closing(SQLiteStore(path, setup=False)) as store:
            if named == "vectors":
                store.load_vectors("s", "e")
            elif named == "message_ids":
                store.purge("s")
            else:
                store.revisions("s")

    text = ""
    for call in (lambda: SQLiteStore(path), lambda: SQLiteStore(path, read_only=True), setup_later, call_later):
        with pytest.raises(SchemaVersionError) as caught:
            call()
        text = str(caught.value)
        assert "records schema migration(s)" in text and f"missing: {named}" in text, text
        assert "nothing was written" in text and "backup" in text
        assert ("DELETE FROM schema_migrations" in text) == (rerun is not None)
        assert _stored(path) == before
    if rerun is None:
        return
    repair = text.split("apply them again: ", 1)[1].split(", then open it", 1)[0]
    assert repair == f"DELETE FROM schema_migrations WHERE version IN ({', '.join(map(str, rerun))})"
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute(repair)
    with closing(SQLiteStore(path)) as store:
        assert [v for v, _ in store.applied_migrations()] == [1, 2, 3, 4, 5]
        assert store.load_vectors("s", "e") == []

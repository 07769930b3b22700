"""PostgreSQL tables edited by hand (with psql, as a person or a script would): a row moved to
another session, a session renamed, a column's type changed, a revision number set to the
column's largest value, the digest of the row a catch-up reads from damaged.  Each is named
(the library's error, saying what to do), the named repair recovers, and purging each session
``stored_sessions()`` lists erases everything (skipped loudly without a server; failed under
CI=true)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from context_gatekeeper import Transcript
from context_gatekeeper.errors import CorruptLogError, SchemaVersionError
from context_gatekeeper.stores import Store
from context_gatekeeper.testing.store_builders import turn
from pg_support import drop_run_tables, postgres_dsn, prefix_for, set_up_async
from store_raw import raw as stored_bytes


@pytest.fixture(scope="module", autouse=True)
def _drop_tables_afterwards() -> Iterator[None]:
    yield
    drop_run_tables()


@pytest.fixture(autouse=True)
def _server() -> None:
    """Every test here needs the server: skipped without one (failed under CI=true)."""
    postgres_dsn()


def open_pg(where: Path | str, **options: Any) -> Store:
    from context_gatekeeper.stores import PostgresStore

    return PostgresStore(postgres_dsn(), table_prefix=prefix_for(where), **options)


def psql(where: Path, statement: str, *params: Any) -> list[Any]:
    """``statement`` on the tables of ``where`` (``{revisions}``, ``{ids}``, ... for their names),
    on a connection of its own, as a person with psql would."""
    import psycopg
    from psycopg import sql

    from context_gatekeeper.stores.postgres_ops import TABLES

    names = {name: sql.Identifier(prefix_for(where) + table) for name, table in TABLES.items()}
    with psycopg.connect(postgres_dsn(), autocommit=True) as conn:
        cursor = conn.execute(sql.SQL(statement).format(**names), params)
        return cursor.fetchall() if cursor.description else []


def everything_left(where: Path) -> dict[str, int]:
    """How many rows each of the store's session tables still holds."""
    return {name: psql(where, f"SELECT count(*) FROM {{{name}}}")[0][0]
            for name in ("revisions", "ids", "set_aside", "vectors")}


def opened(store: Store, session: str) -> list[str]:
    return [m.content for m in Transcript(session, store=store).messages]


# -- a row moved to another session, a session renamed ----------------------------------------
def test_a_row_moved_to_another_session_is_named_and_the_named_repair_recovers(tmp_path: Path) -> None:
    """One row's session_id changed by hand: the session was wedged for good (the truncate the
    error named left the row behind, and every append then failed on the primary key, purge
    included); now the row is named, truncate sets it aside, and the session takes appends."""
    store = open_pg(tmp_path)
    try:
        t = Transcript("s", store=store)
        for n in range(4):
            t.append(user=f"q{n}", assistant=f"a{n}")
        store.save_vectors("s", [("u", "h", "e", [1.0, 2.0])])
        Transcript("other", store=store).append(user="elsewhere", assistant="fine")
        psql(tmp_path, "UPDATE {revisions} SET session_id = 'elsewhere' WHERE session_id = 's' AND number = 2")
        assert store.sessions() == ["other", "s"]  # 'elsewhere' holds no revision: opening it finds none
        for call in (lambda: Transcript("s", store=store), lambda: store.revisions("s", after=1),
                     lambda: asyncio.run(_arevisions(tmp_path, "s"))):
            with pytest.raises(CorruptLogError) as caught:
                call()
            assert (caught.value.session_id, caught.value.revision) == ("s", 2), str(caught.value)
            assert "'elsewhere'" in str(caught.value) and "store.truncate('s', 1)" in str(caught.value)
        assert store.truncate("s", 1) == 3
        t = Transcript("s", store=store)
        assert t.messages and [m.content for m in t.messages] == ["q0", "a0"]
        for n in range(2):
            assert t.append(user=f"after the repair {n}", assistant="ok").number == 2 + n
        assert opened(store, "s")[-2:] == ["after the repair 1", "ok"]
        assert opened(store, "other") == ["elsewhere", "fine"]
        assert store.stored_sessions() == ["other", "s"]
        for session in store.stored_sessions():
            store.purge(session)
        assert everything_left(tmp_path) == {"revisions": 0, "ids": 0, "set_aside": 0, "vectors": 0}
    finally:
        store.close()


async def _arevisions(where: Path, session: str) -> object:
    twin = open_pg(where)
    try:
        return await twin.arevisions(session)
    finally:
        await twin.aclose()


def test_a_purge_erases_a_row_moved_to_another_session_and_the_session_takes_appends(tmp_path: Path) -> None:
    """purge('s') left the moved row (with the session's text) under the session's key, so
    every append after it failed on the primary key."""
    store = open_pg(tmp_path)
    try:
        t = Transcript("s", store=store)
        for n in range(3):
            t.append(user=f"q{n}", assistant=f"a{n}")
        psql(tmp_path, "UPDATE {revisions} SET session_id = 'elsewhere' WHERE session_id = 's' AND number = 2")
        store.purge("s")
        assert everything_left(tmp_path)["revisions"] == 0 and store.stored_sessions() == []
        t = Transcript("s", store=store)
        assert [t.append(user=f"fresh {n}", assistant="ok").number for n in range(3)] == [1, 2, 3]
    finally:
        store.close()


def test_purging_each_stored_session_erases_sessions_renamed_or_moved_by_hand(tmp_path: Path) -> None:
    """A session renamed whole (every row's session_id changed) keeps its rows under the old
    name's key: no name opened them, and purging every session stored_sessions() listed left
    them, with their text, behind.  Now the old name is refused naming the repair, and a purge
    of the name the rows carry erases them, their index and their vectors."""
    store = open_pg(tmp_path)
    try:
        Transcript("old", store=store).append(user="hello", assistant="hi")
        Transcript("old", store=store).append(user="two", assistant="2")
        store.save_vectors("old", [("u", "h", "e", [1.0, 2.0])])
        for n in range(2):
            Transcript("other", store=store).append(user=f"else {n}", assistant="fine")
        psql(tmp_path, "UPDATE {revisions} SET session_id = 'new' WHERE session_id = 'old'")
        psql(tmp_path, "UPDATE {revisions} SET session_id = 'moved' WHERE session_id = 'other' AND number = 2")
        for session, revision in (("old", 1), ("other", 2)):
            with pytest.raises(CorruptLogError) as caught:
                Transcript(session, store=store)
            assert (caught.value.session_id, caught.value.revision) == (session, revision), str(caught.value)
        assert store.sessions() == store.stored_sessions() == ["new", "other"]
        for session in store.stored_sessions():
            store.purge(session)
        assert everything_left(tmp_path) == {"revisions": 0, "ids": 0, "set_aside": 0, "vectors": 0}
        assert store.stored_sessions() == [] and opened(store, "old") == []
    finally:
        store.close()


def test_a_purge_erases_set_aside_rows_renamed_by_hand(tmp_path: Path) -> None:
    """Rows a truncate set aside, renamed by hand afterwards, are listed by stored_sessions()
    under the name they carry, and purging that name erases them."""
    store = open_pg(tmp_path)
    try:
        for n in range(2):
            Transcript("s", store=store).append(user=f"q{n}", assistant=f"a{n}")
        store.truncate("s", 0)
        psql(tmp_path, "UPDATE {set_aside} SET session_id = 'renamed'")
        assert store.sessions() == [] and store.stored_sessions() == ["renamed"]
        store.purge("renamed")
        assert everything_left(tmp_path)["set_aside"] == 0 and store.stored_sessions() == []
    finally:
        store.close()


# -- a column's type changed by hand -------------------------------------------------------------
@pytest.mark.parametrize(
    ("table", "column", "new_type", "found"),
    [("revisions", "changes", "jsonb USING changes::jsonb", "jsonb"),
     ("revisions", "created_at", "numeric", "numeric"),
     ("revisions", "kind", "varchar(20)", "character varying(20)"),
     ("ids", "present", "integer USING present::integer", "integer")],
    ids=["changes-jsonb", "created_at-numeric", "kind-varchar", "index-present-integer"],
)
def test_a_column_type_changed_by_hand_is_refused_on_open_and_nothing_is_written(
    tmp_path: Path, table: str, column: str, new_type: str, found: str
) -> None:
    """A DBA's ALTER TABLE ... TYPE made every session look tampered with at revision 1 (the
    advice: truncate to 0, setting the logs aside) while new appends went through and could
    not be read back.  Now opening the store, sync or async, raises SchemaVersionError naming
    the column, its type and the one the store needs, and writes nothing."""
    from context_gatekeeper.stores.postgres_ops import COLUMN_TYPES, TABLES

    store = open_pg(tmp_path)
    for n in range(2):
        Transcript("s", store=store).append(user=f"q{n}", assistant=f"a{n}")
    store.close()
    psql(tmp_path, f"ALTER TABLE {{{table}}} ALTER COLUMN {column} TYPE {new_type}")
    before = psql(tmp_path, "SELECT * FROM {revisions} ORDER BY number")
    unopened = open_pg(tmp_path, setup=False)

    name = prefix_for(tmp_path) + TABLES[table]
    for call in (lambda: open_pg(tmp_path), lambda: set_up_async(unopened)):
        with pytest.raises(SchemaVersionError) as caught:
            call()
        text = str(caught.value)
        assert f"{name}.{column}" in text and found in text and "nothing was written" in text, text
        assert f'ALTER TABLE "{name}" ALTER COLUMN {column} TYPE' in text
    assert psql(tmp_path, "SELECT * FROM {revisions} ORDER BY number") == before
    if column in ("kind", "present"):  # changed back, losslessly: the sessions open again
        expected = COLUMN_TYPES[table][column]
        psql(tmp_path, f"ALTER TABLE {{{table}}} ALTER COLUMN {column} TYPE {expected} USING {column}::{expected}")
        store = open_pg(tmp_path)
        try:
            assert opened(store, "s") == ["q0", "a0", "q1", "a1"]
        finally:
            store.close()


def test_a_lossless_widening_by_hand_still_opens_and_works(tmp_path: Path) -> None:
    """integer -> bigint (revision numbers) and text -> varchar without a length read every value
    back exactly as written: such tables opened before the column type check, and still do;
    changes that rewrite values (jsonb, numeric) or bound them (varchar(n)) stay refused (above)."""
    store = open_pg(tmp_path)
    Transcript("s", store=store).append(user="q1", assistant="a1")
    store.close()
    psql(tmp_path, "ALTER TABLE {revisions} ALTER COLUMN number TYPE bigint, ALTER COLUMN parent TYPE bigint")
    psql(tmp_path, "ALTER TABLE {set_aside} ALTER COLUMN session_id TYPE varchar")
    psql(tmp_path, "ALTER TABLE {revisions} ALTER COLUMN changes TYPE character varying")
    store = open_pg(tmp_path)
    try:
        transcript = Transcript("s", store=store)
        transcript.append(user="q2", assistant="a2")
        transcript.revert(1)
        store.truncate("s", 2)
        assert opened(store, "s") == ["q1", "a1", "q2", "a2"] and store.stored_sessions() == ["s"]
    finally:
        store.close()


def test_the_column_types_checked_are_those_the_migrations_create(tmp_path: Path) -> None:
    """The types setup checks (postgres_ops.COLUMN_TYPES) are what the migrations made."""
    from context_gatekeeper.stores.postgres_ops import COLUMN_TYPES, TABLES

    open_pg(tmp_path).close()
    created: dict[str, dict[str, str]] = {}
    for name, table in TABLES.items():
        created[name] = dict(psql(
            tmp_path, "SELECT attname::text, format_type(atttypid, atttypmod) FROM pg_attribute "
                      "WHERE attrelid = to_regclass(%s) AND attnum > 0 AND NOT attisdropped",
            f'"{prefix_for(tmp_path)}{table}"'))
    assert created == COLUMN_TYPES


# -- a revision number at the column's largest value -----------------------------------------------
def test_a_commit_after_a_revision_number_set_to_the_largest_integer_is_named(tmp_path: Path) -> None:
    """The newest revision's number set by hand to 2**31 - 1 (the largest an ``integer`` column
    holds): a commit raised psycopg's NumericValueOutOfRange; now CorruptLogError names the
    first revision that fails and the truncate that recovers, and nothing is written."""
    store = open_pg(tmp_path)
    try:
        for n in range(2):
            Transcript("s", store=store).append(user=f"q{n}", assistant=f"a{n}")
        psql(tmp_path, "UPDATE {revisions} SET number = 2147483647 WHERE number = 2")
        rows = stored_bytes(store, "s")

        async def acommit() -> object:
            twin = open_pg(tmp_path)
            try:
                return await twin.acommit("s", turn(3), expected_head=None)
            finally:
                await twin.aclose()

        for call in (lambda: store.commit("s", turn(3), expected_head=None), lambda: asyncio.run(acommit())):
            with pytest.raises(CorruptLogError) as caught:
                call()
            assert (caught.value.session_id, caught.value.revision) == ("s", 2), str(caught.value)
            assert "store.truncate('s', 1)" in str(caught.value)
            assert stored_bytes(store, "s") == rows
        assert store.truncate("s", 1) == 1
        assert store.commit("s", turn(3), expected_head=None).number == 2
    finally:
        store.close()


# -- a catch-up read from a damaged row --------------------------------------------------------------
@pytest.mark.parametrize(
    ("edit", "named"),
    [("UPDATE {revisions} SET digest = NULL WHERE number = 3", 3),
     ("UPDATE {revisions} SET digest = md5(digest) || md5(digest) WHERE number = 3", 3),
     ("UPDATE {revisions} SET changes = replace(changes, 'q3', 'Q3') WHERE number = 4", 4)],
    ids=["anchor-digest-removed", "anchor-digest-changed", "first-row-after-the-anchor-changed"],
)
def test_a_catching_up_reader_names_the_damaged_row_it_reads_from(tmp_path: Path, edit: str, named: int) -> None:
    """A reader at revision 4 catches up from revision 3 (the row before its newest): when the
    digest of that row was damaged, it named revision 4 and advised a truncate that did not
    recover; now it names the row a fresh open names."""
    store = open_pg(tmp_path)
    try:
        t = Transcript("s", store=store)
        for n in range(4):
            t.append(user=f"q{n}", assistant=f"a{n}")
        reader = Transcript("s", store=open_pg(tmp_path))
        try:
            assert len(reader.messages) == 8
            psql(tmp_path, edit)
            t.append(user="q4", assistant="a4")  # a writer that read the log before the edit
            with pytest.raises(CorruptLogError) as caught:
                reader.messages
            assert (caught.value.session_id, caught.value.revision) == ("s", named), str(caught.value)
        finally:
            reader.store.close()
        with pytest.raises(CorruptLogError) as fresh:
            Transcript("s", store=store)
        assert fresh.value.revision == named
        store.truncate("s", named - 1)
        assert len(opened(store, "s")) == 2 * (named - 1)
    finally:
        store.close()


def test_listings_name_sessions_moved_or_renamed_by_hand_whatever_characters_their_ids_hold(tmp_path: Path) -> None:
    """The listings group rows by key in the server and compare the ids they carry there (in
    the "C" collation, byte for byte): a key whose rows carry ids that differ only in ways a
    collation may ignore is still told apart, a row moved out of a session whose id is not
    ASCII is not listed, and a session renamed whole onto such an id is, and purged by it."""
    store = open_pg(tmp_path)
    try:
        kept, renamed = "ünï 😀 'q' \\ a\u0301", "nouveau ✓"
        for n in range(2):
            Transcript(kept, store=store).append(user=f"q{n}", assistant=f"a{n}")
        Transcript("old", store=store).append(user="hello", assistant="hi")
        psql(tmp_path, "UPDATE {revisions} SET session_id = 'moved' WHERE session_id = %s AND number = 2", kept)
        for n in range(2):
            Transcript("case", store=store).append(user=f"q{n}", assistant=f"a{n}")
        psql(tmp_path, "UPDATE {revisions} SET session_id = 'CASE' WHERE session_id = 'case' AND number = 2")
        psql(tmp_path, "UPDATE {revisions} SET session_id = %s WHERE session_id = 'old'", renamed)
        assert store.sessions() == store.stored_sessions() == sorted(["case", kept, renamed])
        for session in store.stored_sessions():
            store.purge(session)
        assert everything_left(tmp_path) == {"revisions": 0, "ids": 0, "set_aside": 0, "vectors": 0}
    finally:
        store.close()


def test_a_purge_of_an_id_no_key_holds_erases_the_rows_carrying_it_in_one_statement() -> None:
    """A purge of an id whose key holds no row must look for rows that carry it under other
    keys (a session renamed whole by hand), and the session id column has no index: that
    search reads the revisions and set-aside tables through once each, in one statement
    (one round trip), after the four indexed deletes of the id's key."""
    from context_gatekeeper.stores import postgres_ops as ops

    _names, q = ops.compose("cg_")
    steps = ops.purge_steps(q, ops.session_key("never stored"))
    replies: list[Any] = [None, [], None, (0,), None]
    asked = [steps.send(reply) for reply in replies[:5]]
    claimed = [asked[-1]]
    try:
        while True:
            claimed.append(steps.send([]))
    except StopIteration:
        pass
    assert [s.query for s in asked[:4]] == [q["purge"], q["purge_ids"], q["purge_set_aside"], q["purge_vectors"]]
    assert [s.query for s in claimed] == [q["purge_claimed"]]

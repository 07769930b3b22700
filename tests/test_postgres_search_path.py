"""PostgresStore's setup and the connection's ``search_path``: tables found in one schema are
migrated in that schema, never beside a second, empty set in another (a role with a schema of
its own under PostgreSQL's default ``"$user", public``); a search_path naming no schema that
exists is reported, not raised as psycopg's error.

Every test needs the PostgreSQL server (``CG_TEST_POSTGRES_DSN``); the role tests also need
a server role that may create roles (skipped, saying why, elsewhere)."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from context_gatekeeper.errors import StoreUnavailableError
from context_gatekeeper.testing.store_builders import append, message
from pg_support import drop_run_tables, postgres_dsn, prefix_for


@pytest.fixture(scope="module", autouse=True)
def _drop_tables_afterwards() -> Iterator[None]:
    yield
    drop_run_tables()


def open_pg(where: Path, dsn: str | None = None, **options: Any) -> Any:
    """A PostgresStore on this test's tables (skipped without a server)."""
    postgres_dsn()
    from context_gatekeeper.stores import PostgresStore

    return PostgresStore(dsn or postgres_dsn(), table_prefix=prefix_for(where), **options)


def with_settings(settings: str) -> str:
    """The test server's DSN with ``settings`` (``-c name=value ...``) for every connection."""
    from psycopg.conninfo import make_conninfo

    return make_conninfo(postgres_dsn(), options=settings)


@pytest.fixture
def owner(tmp_path: Path) -> Iterator[Any]:
    """The store of the tables' owner (the test server's role), holding one revision; closed afterwards."""
    store = open_pg(tmp_path)
    try:
        store.commit("s", append(message("first")), expected_head=None)
        yield store
    finally:
        store.close()


@contextlib.contextmanager
def role_with_own_schema(store: Any) -> Iterator[tuple[Any, str]]:
    """``(an autocommit admin connection, a new role)``: the role owns a schema named after it
    (PostgreSQL's recommended per-user schema, first on the default search_path) and may read
    and write ``store``'s tables, which the test server's role created in its own schema.
    The role, its schema and what it owns are dropped afterwards."""
    import psycopg
    from psycopg import sql

    role = f"cg_own_schema_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(postgres_dsn(), autocommit=True) as admin:
        if not admin.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone()[0]:
            pytest.skip("the test server's role is no superuser: it cannot create a role with a schema to test with")
        name = sql.Identifier(role)
        admin.execute(sql.SQL("CREATE ROLE {} NOLOGIN").format(name))
        try:
            admin.execute(sql.SQL("CREATE SCHEMA {} AUTHORIZATION {}").format(name, name))
            admin.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(
                sql.Identifier(admin.execute("SELECT current_schema()").fetchone()[0]), name))
            for table in store._names.values():
                admin.execute(sql.SQL("GRANT SELECT, INSERT, UPDATE, DELETE ON {} TO {}").format(table, name))
            yield admin, role
        finally:
            admin.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(name))
            admin.execute(sql.SQL("DROP OWNED BY {}").format(name))
            admin.execute(sql.SQL("DROP ROLE {}").format(name))


def tables_in(admin: Any, schema: str, prefix: str) -> list[str]:
    """The names of the tables in ``schema`` whose names start with ``prefix``."""
    rows = admin.execute("SELECT tablename FROM pg_tables WHERE schemaname = %s AND starts_with(tablename, %s)",
                         (schema, prefix)).fetchall()
    return sorted(row[0] for row in rows)


def forget_migrations(admin: Any, store: Any, *versions: int) -> None:
    """Delete the records of ``versions``, as tables an older release migrated would lack them."""
    admin.execute(f"DELETE FROM {store._names['migrations'].as_string(admin)} WHERE version = ANY(%s)", (list(versions),))


def test_a_role_with_its_own_schema_migrates_the_tables_where_it_finds_them(tmp_path: Path, owner: Any) -> None:
    """Tables in the shared schema that miss migration 5 (an older release's), opened by a
    role whose own schema comes first on the search path: migrated where they are; no second,
    empty set appears in the role's schema, and both roles read and write one log."""
    with role_with_own_schema(owner) as (admin, role):
        forget_migrations(admin, owner, 5)
        worker = open_pg(tmp_path, with_settings(f"-c role={role}"))  # setup=True, the default
        try:
            assert tables_in(admin, role, owner.table_prefix) == []
            assert worker.head("s") == 1
            assert [v for v, _ in worker.applied_migrations()] == [1, 2, 3, 4, 5]
            assert worker.commit("s", append(message("second")), expected_head=1).number == 2
        finally:
            worker.close()
        assert tables_in(admin, role, owner.table_prefix) == []
    assert owner.head("s") == 2


def test_a_migration_creates_its_tables_in_the_schema_of_the_others(tmp_path: Path, owner: Any) -> None:
    """A migration that creates a table (the vectors table, migration 3), run by a role whose
    own schema comes first on the search path, creates it beside the tables it found."""
    import psycopg
    from psycopg import sql

    with role_with_own_schema(owner) as (admin, role):
        shared = admin.execute("SELECT current_schema()").fetchone()[0]
        admin.execute(sql.SQL("GRANT CREATE ON SCHEMA {} TO {}").format(sql.Identifier(shared), sql.Identifier(role)))
        admin.execute(sql.SQL("DROP TABLE {}").format(owner._names["vectors"]))
        forget_migrations(admin, owner, 3)
        worker = open_pg(tmp_path, with_settings(f"-c role={role}"))
        try:
            assert tables_in(admin, role, owner.table_prefix) == []
            assert owner.table_prefix + "vectors" in tables_in(admin, shared, owner.table_prefix)
            assert [v for v, _ in worker.applied_migrations()] == [1, 2, 3, 4, 5]
            assert worker.head("s") == 1
        finally:
            worker.close()
            with contextlib.suppress(psycopg.Error):
                admin.execute(sql.SQL("REVOKE CREATE ON SCHEMA {} FROM {}").format(sql.Identifier(shared),
                                                                                    sql.Identifier(role)))
    assert owner.head("s") == 1


def test_a_search_path_naming_no_schema_that_exists_is_reported(tmp_path: Path) -> None:
    """``options=-c search_path=...`` naming a schema not created yet leaves setup nowhere to
    create its tables: StoreUnavailableError saying to create the schema or fix the search
    path (psycopg's InvalidSchemaName as its cause), nothing created."""
    import psycopg

    missing = f"cg_missing_{uuid.uuid4().hex[:8]}"
    with pytest.raises(StoreUnavailableError, match="search_path") as caught:
        open_pg(tmp_path, with_settings(f"-c search_path={missing}"))
    assert "CREATE SCHEMA" in str(caught.value)
    assert isinstance(caught.value.__cause__, psycopg.errors.InvalidSchemaName)
    with psycopg.connect(postgres_dsn()) as conn:
        found = conn.execute("SELECT count(*) FROM pg_tables WHERE starts_with(tablename, %s)",
                             (prefix_for(tmp_path),)).fetchone()[0]
    assert found == 0

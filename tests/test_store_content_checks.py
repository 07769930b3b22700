"""A store checks a revision's *content*, not only its ids.

Inside the committing transaction every store (in memory, SQLite, PostgreSQL) refuses,
with :class:`InvalidRevisionError` naming the session and writing nothing:

* a change whose ``before`` is not the role and text the store holds for the message
  (undoing it would restore text that never existed), and a removal carrying other text;
* a revision of an unknown kind;
* an append after a message the session never held (it used to land at the end).

Those checks are part of the shipped conformance suite
(:class:`context_gatekeeper.testing.store_integrity.ContentContract`), run by every store in
test_stores.py and test_postgres_store.py byte-exact (``stored_state`` = :func:`store_raw.raw`).
What stays here: SQLite's compatibility with index rows of older versions, and
``GatekeeperMemory.from_dict(data, store=...)``: on a session the store already holds it
compares the revisions' changes too, and refuses other text under the same shape.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from context_gatekeeper.errors import InvalidInputError
from context_gatekeeper.stores import InMemoryStore, SQLiteStore, Store
from context_gatekeeper.testing.store_builders import changed
from context_gatekeeper.testing.store_integrity import S, refused, revision, started
from context_gatekeeper.records.operations import Change
from pg_support import drop_run_tables, postgres_dsn, prefix_for
from store_raw import raw


def test_index_rows_of_older_versions_do_not_refuse_changes_to_edited_messages(tmp_path: Path) -> None:
    """SQLite: rows written before the current digest was kept hold only the first one: their
    current text is unknown, so a change is not refused for it (compatibility)."""
    store = SQLiteStore(tmp_path / "store.db")
    user, _ = started(store)
    edited = store.commit(S, revision("edit", Change(user, user.revised("second", 0))), expected_head=1)
    with store._connection() as conn:  # type: ignore[attr-defined]
        conn.execute("UPDATE message_ids SET digest = substr(digest, 1, 32)")
    now = changed(edited)
    store.commit(S, revision("edit", Change(now, now.revised("third", 0))), expected_head=2)
    refused(store, revision("edit", Change(now, now.revised("fourth", 0))), state=raw)  # recorded again: checked
    store.close()


@pytest.fixture(scope="module", autouse=True)
def _drop_tables_afterwards() -> Iterator[None]:
    yield
    drop_run_tables()


# -- GatekeeperMemory.from_dict on a session the store already holds -------------------------
@pytest.fixture(params=["memory", "sqlite", "postgres"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "memory":
        yield InMemoryStore()
        return
    if request.param == "sqlite":
        store: Store = SQLiteStore(tmp_path / "memory.db")
    else:
        from context_gatekeeper.stores import PostgresStore

        store = PostgresStore(postgres_dsn(), table_prefix=prefix_for(tmp_path))
    try:
        yield store
    finally:
        store.close()


def exported(store: Store | None, question: str, answer: str) -> tuple[Any, dict[str, Any]]:
    from llama_index.core.llms import ChatMessage

    from llamaindex_gatekeeper import GatekeeperMemory

    memory = GatekeeperMemory.from_defaults(session_id="imported", **({"store": store} if store else {}))
    memory.put_messages([ChatMessage(role="user", content=question), ChatMessage(role="assistant", content=answer)])
    memory.put_messages([ChatMessage(role="user", content="second"), ChatMessage(role="assistant", content="reply")])
    return memory, json.loads(json.dumps(memory.to_dict()))


def test_from_dict_refuses_a_session_with_the_same_shape_but_other_text(target: Store) -> None:
    from llamaindex_gatekeeper import GatekeeperMemory

    held, own = exported(target, "We went to Ireland.", "Ireland, noted.")
    _, other = exported(None, "We went to Iceland.", "Iceland, noted.")
    assert [(r["number"], r["kind"]) for r in own["revisions"]] == [(r["number"], r["kind"]) for r in other["revisions"]]
    before = raw(target, "imported")
    with pytest.raises(InvalidInputError, match=r"revision 1 \(append\)") as caught:
        GatekeeperMemory.from_dict(other, store=target)
    assert isinstance(caught.value, ValueError) and "'imported'" in str(caught.value)
    assert "nothing was written" in str(caught.value)
    assert raw(target, "imported") == before
    # a later revision differing is named; a log the store's goes on from (exported before the
    # session went on) is attached as it is, as a pickle reattaches
    other["revisions"][0] = own["revisions"][0]
    with pytest.raises(InvalidInputError, match=r"revision 2 \(append\)"):
        GatekeeperMemory.from_dict(other, store=target)
    earlier = GatekeeperMemory.from_dict({**own, "revisions": own["revisions"][:1]}, store=target)
    assert [str(m.content) for m in earlier.get_all()] == [str(m.content) for m in held.get_all()]
    assert raw(target, "imported") == before
    # the same log is attached as it is
    attached = GatekeeperMemory.from_dict(own, store=target)
    assert [str(m.content) for m in attached.get_all()] == [str(m.content) for m in held.get_all()]
    assert raw(target, "imported") == before

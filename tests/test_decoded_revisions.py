"""The process-wide cache of decoded revisions (``chain.decoded_revisions``): a second
transcript on a SQLite session verifies every row's digest as always, but decodes only
rows it has not seen; a row changed by hand is still refused, and a row rewritten with
a recomputed chain is read as it now is, never served stale."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from context_gatekeeper import CorruptLogError, Transcript
from context_gatekeeper.caching import BoundedCache
from context_gatekeeper.stores import SQLiteStore
from context_gatekeeper.stores import chain
from context_gatekeeper.stores.chain import DECODED_CACHE_SIZE, genesis, row_digest


def _session(path: Path, turns: int = 20) -> None:
    with closing(SQLiteStore(path)) as store:
        t = Transcript("s", store=store)
        for n in range(turns):
            t.append(user=f"question {n}", assistant=f"answer {n}")


def _rechain(path: Path, session: str = "s") -> None:
    """Recompute every digest of ``session`` (what only someone forging the chain does)."""
    with sqlite3.connect(path) as conn:
        rows = conn.execute(
            "SELECT number, parent, kind, instruction, model, created_at, base, target, changes FROM revisions"
            " WHERE session_id = ? ORDER BY number", (session,)).fetchall()
        previous = genesis(session)
        for row in rows:
            previous = row_digest(previous, row)
            conn.execute("UPDATE revisions SET digest = ? WHERE session_id = ? AND number = ?", (previous, session, row[0]))
    conn.close()


def test_decoded_revisions_are_shared_by_replicas_but_store_reads_are_copies(tmp_path: Path) -> None:
    path = tmp_path / "chat.db"
    _session(path)
    with closing(SQLiteStore(path)) as one, closing(SQLiteStore(path)) as two:
        first, second = Transcript("s", store=one), Transcript("s", store=two)
        assert all(a is b for a, b in zip(first._replica.log, second._replica.log, strict=True))
        assert [m.content for m in first.messages] == [m.content for m in second.messages]
        read = one.revisions("s")
        assert read == first._replica.log and not any(r is s for r, s in zip(read, first._replica.log))


def test_decoded_revisions_never_serve_a_row_changed_by_hand(tmp_path: Path) -> None:
    path = tmp_path / "chat.db"
    _session(path)
    Transcript("s", store=SQLiteStore(path))  # every row decoded and kept
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE revisions SET changes = replace(changes, 'answer 7', 'answer 8') WHERE number = 8")
    conn.close()
    with pytest.raises(CorruptLogError) as caught:
        Transcript("s", store=SQLiteStore(path))
    assert caught.value.revision == 8


def test_decoded_revisions_read_a_rechained_row_as_it_now_is(tmp_path: Path) -> None:
    path = tmp_path / "chat.db"
    _session(path)
    before = Transcript("s", store=SQLiteStore(path))
    assert "answer 7" in [m.content for m in before.messages]
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE revisions SET changes = replace(changes, 'answer 7', 'answer seven') WHERE number = 8")
    conn.close()
    _rechain(path)
    contents = [m.content for m in Transcript("s", store=SQLiteStore(path)).messages]
    assert "answer seven" in contents and "answer 7" not in contents


def test_decoded_revisions_hold_at_most_their_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert chain.decoded_revisions.maxsize == DECODED_CACHE_SIZE
    small: BoundedCache[str, object] = BoundedCache(maxsize=5)
    monkeypatch.setattr(chain, "decoded_revisions", small)
    path = tmp_path / "chat.db"
    _session(path, turns=30)
    reopened = Transcript("s", store=SQLiteStore(path))
    assert len(small) == 5
    assert reopened.head == 30 and [m.content for m in reopened.messages][-2:] == ["question 29", "answer 29"]


def test_a_store_subclass_overriding_revisions_is_read_through_it(tmp_path: Path) -> None:
    class Counting(SQLiteStore):
        read = 0

        def revisions(self, session_id: str, after: int = 0):  # type: ignore[no-untyped-def]
            found = super().revisions(session_id, after)
            self.read += len(found)
            return found

    path = tmp_path / "chat.db"
    _session(path, turns=3)
    store = Counting(path)
    Transcript("s", store=store)
    assert store.read == 3


def _digests(path: Path, session: str) -> list[str]:
    with closing(sqlite3.connect(path)) as conn:
        return [d for (d,) in conn.execute("SELECT digest FROM revisions WHERE session_id = ? ORDER BY number", (session,))]


def test_purge_drops_the_sessions_decoded_revisions_and_truncate_those_it_sets_aside(tmp_path: Path) -> None:
    """A purged session's text stays nowhere in the process (the privacy request purge answers),
    and a truncated one's set-aside revisions are no longer held decoded; other sessions' stay."""
    path = tmp_path / "chat.db"
    with closing(SQLiteStore(path)) as store:
        for session in ("alice", "bob"):
            t = Transcript(session, store=store)
            for n in range(4):
                t.append(user=f"{session}'s card is 4111 {n}", assistant="noted")
            Transcript(session, store=store).messages  # a second reader: decoded through the shared cache
        alice, bob = _digests(path, "alice"), _digests(path, "bob")
        assert all(d in chain.decoded_revisions for d in alice + bob)
        assert store.truncate("bob", 2) == 2
        assert [d in chain.decoded_revisions for d in bob] == [True, True, False, False]
        Transcript("alice", store=store).purge()
        assert not any(d in chain.decoded_revisions for d in alice)
        assert all(d in chain.decoded_revisions for d in bob[:2])
        assert [m.content for m in Transcript("bob", store=store).messages][0] == "bob's card is 4111 0"

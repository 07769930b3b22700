"""The process-wide cache of decoded revisions (``chain.decoded_revisions``) is bounded by the
characters its revisions hold as well as by their number: sessions that each pasted a long
text, all closed, leave at most ``DECODED_CACHE_CHARS`` in it.  Read through the cache's own
accounting (entries, weight)."""

from __future__ import annotations

from contextlib import closing
from pathlib import Path

import pytest

from context_gatekeeper import Message, Transcript
from context_gatekeeper.caching import BoundedCache
from context_gatekeeper.records.operations import Change, Put
from context_gatekeeper.records.revisions import Revision
from context_gatekeeper.stores import SQLiteStore, chain


def paste(seed: int, chars: int) -> str:
    return " ".join(f"w{seed}x{i}" for i in range(chars // 6))[:chars]


def test_the_cache_is_bounded_by_weight_by_default() -> None:
    assert chain.decoded_revisions.max_weight == chain.DECODED_CACHE_CHARS
    assert chain.decoded_revisions.maxsize == chain.DECODED_CACHE_SIZE


def test_a_revision_weighs_the_texts_it_holds() -> None:
    said = Message("m1", "user", "x" * 1000, parts=({"type": "image", "data": "y" * 5000},), metadata={"k": "z" * 300})
    edited = Message("m1", "user", "short")
    appended = Revision(1, 0, "append", (Put(said, None),))
    changed = Revision(2, 1, "edit", (Change(said, edited),), instruction="i" * 50)
    weight = chain._revision_chars("digest", appended)
    assert 6300 <= weight <= 6300 + 2 * chain.DECODED_MESSAGE_CHARS
    assert chain._revision_chars("digest", changed) >= weight + len("short") + 50


def test_closed_sessions_of_long_pastes_keep_at_most_the_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bounded: BoundedCache[str, Revision] = BoundedCache(
        maxsize=chain.DECODED_CACHE_SIZE, weigh=chain._revision_chars, max_weight=300_000)
    monkeypatch.setattr(chain, "decoded_revisions", bounded)
    with closing(SQLiteStore(tmp_path / "chat.db")) as store:
        for s in range(6):
            with closing(Transcript(f"session-{s}", store=store)) as t:
                t.append(paste(s, 100_000), "The log shows a timeout.")
            with closing(Transcript(f"session-{s}", store=store)) as t:  # the next request reads it back
                assert t.messages[0].content.startswith(f"w{s}x0")
            assert bounded.weight <= 300_000
            assert bounded.weight >= 100_000  # the last session's revision, weighed by its text
    assert len(bounded) < 6

"""The quickstart (examples/quickstart.py): its replay keeps, turn by turn, what its docstring and the README say."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import quickstart  # noqa: E402

REDIS, ASYNCIO, KAFKA, POSTGRES, DOCKER = {1, 2, 3, 4}, {5, 6, 7}, {8, 9, 10, 11}, {12, 13}, {17, 18}


@pytest.fixture(scope="module")
def kept() -> dict[int, tuple[str, set[int]]]:
    selections = quickstart.replay(quickstart.make_gatekeeper(quickstart.DEFAULT_BUDGET))
    return {turn: (s.decision, set(s.turn_ids)) for turn, s in enumerate(selections, start=1)}


@pytest.mark.parametrize("turn", [5, 8])
def test_announced_switches_keep_nothing(kept, turn):
    assert kept[turn] == ("switch", set())


@pytest.mark.parametrize(("turn", "topic"), [(6, ASYNCIO), (9, KAFKA), (10, KAFKA), (11, KAFKA), (18, DOCKER)])
def test_follow_ups_keep_only_their_own_topic(kept, turn, topic):
    decision, ids = kept[turn]
    assert ids and ids <= topic, (turn, decision, ids)


def test_the_pronoun_follow_up_on_cost_holds_the_kafka_topic(kept):
    decision, ids = kept[11]  # "What does it cost for roughly 50 MB/s of ingress?"
    assert decision == "continue" and ids <= KAFKA and ids


@pytest.mark.parametrize(("turn", "topic"), [(14, REDIS), (15, KAFKA)])
def test_returns_keep_the_topic_returned_to(kept, turn, topic):
    decision, ids = kept[turn]
    assert decision == "return" and ids and ids <= topic


def test_kafka_after_the_return_keeps_no_postgresql_turn(kept):
    decision, ids = kept[16]
    assert ids and ids <= KAFKA | {15} and not ids & POSTGRES


def test_the_quickstart_runs_and_prints_segments_and_topics(capsys):
    assert quickstart.main(["--plain", "--detail", "14"]) == 0
    out = capsys.readouterr().out
    assert "Segments (turn ids): 1,2,3,4 | 5,6,7 | 8,9,10,11 | 12,13 | 14 | 15,16 | 17,18" in out
    assert "Topics (every run of each): 1,2,3,4,14 | 5,6,7 | 8,9,10,11,15,16 | 12,13 | 17,18" in out
    assert "Turn 14 in detail" in out and "evidence" in out


def test_the_detail_names_a_topic_by_the_turn_that_opened_it(capsys):
    # evidence.topic is a 0-based position label; the table shows 1-based turn ids, so it must too
    assert quickstart.main(["--plain", "--detail", "15"]) == 0
    rows = re.findall(r"^\s+(\d+)\s.*\btopic from turn (\d+)", capsys.readouterr().out, re.M)
    assert rows, "the Kafka turns kept for the return name their topic"
    assert all(int(turn) in KAFKA and opener == str(min(KAFKA)) for turn, opener in rows), rows


@pytest.mark.parametrize(("turn", "earlier"), [(13, 12), (18, 17)])
def test_mixed_language_follow_ups_keep_the_turn_they_build_on(kept, turn, earlier):
    # "加了索引" -> "partial index", "Docker 镜像" -> "base image": the glossary bridges them
    decision, ids = kept[turn]
    assert ids == {earlier}, (turn, decision, ids)

"""Candidate scoring over postings, and the greedy minimum-coverage selector."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from context_gatekeeper.selection.anchors import TextAnchors
from context_gatekeeper.selection.index import AnchorIndex
from context_gatekeeper.selection.params import SelectionParams
from context_gatekeeper.selection.selector import Candidate, distinctive, greedy_cover, match_share, score_candidates
from context_gatekeeper.selection.word_prior import anchor_commonness

P = SelectionParams()


def ta(*anchors: str) -> TextAnchors:
    return TextAnchors.of(anchors)


# -- score_candidates ---------------------------------------------------------------------------


def build(turns, labels):
    """turns: [(turn_id, user anchors, assistant anchors, cost)] in position order."""
    index = AnchorIndex()
    positions, costs = {}, {}
    for position, (turn_id, user, assistant, cost) in enumerate(turns):
        index.add(turn_id, ta(*user), ta(*assistant))
        positions[turn_id] = position
        costs[turn_id] = cost
    return index, positions, list(labels), costs


@pytest.fixture
def small():
    # ids are not positions: 10, 20, 30, 40 sit at positions 0..3.
    return build(
        [
            (10, ["redis", "lock"], ["ttl"], 11),
            (20, ["python"], ["redis", "redis"], 22),
            (30, ["bread", "#3.11"], ["flour"], 33),
            (40, ["common"], ["flour"], 44),
        ],
        labels=[0, 0, 1, 1],
    )


WEIGHTS = {"redis": 2.0, "ttl": 1.0, "#3.11": 1.0, "go": 5.0, "common": 0.04}


def test_only_turns_holding_a_usable_query_anchor_are_scored(small):
    index, positions, labels, costs = small
    p = P.with_(b=0.0)
    candidates, _ = score_candidates(WEIGHTS, index, positions, labels, costs, p)
    # 40 holds only "common", whose IDF is below min_anchor_idf: too common to retrieve by.
    assert WEIGHTS["common"] / p.kind_weights["word"] < p.min_anchor_idf
    assert set(candidates) == {10, 20, 30}
    assert {c.turn_id: (c.position, c.cost) for c in candidates.values()} == {10: (0, 11), 20: (1, 22), 30: (2, 33)}
    assert set(candidates[10].covered) == {"redis", "ttl"}
    assert candidates[20].covered == ["redis"]
    assert candidates[30].covered == ["#3.11"]


def test_score_parts_by_hand(small):
    index, positions, labels, costs = small
    p = P.with_(b=0.0)  # no length normalisation: saturation is tf (k1 + 1) / (tf + k1)
    candidates, _ = score_candidates(WEIGHTS, index, positions, labels, costs, p)
    total = sum(WEIGHTS.values())  # the query's whole weight, matched or not
    k1 = p.k1

    def lex(weight, tf):  # a lexical part before its side's weight is applied
        return weight / total * (tf * (k1 + 1) / (tf + k1)) / (k1 + 1)

    c10, c20, c30 = candidates[10], candidates[20], candidates[30]
    assert c10.user == pytest.approx(p.user_weight * lex(2.0, 1))
    assert c10.assistant == pytest.approx(p.assistant_weight * lex(1.0, 1))
    assert c10.exact == 0.0
    assert c20.user == 0.0
    assert c20.assistant == pytest.approx(p.assistant_weight * lex(2.0, 2))  # tf 2 saturates
    assert c30.user == pytest.approx(p.user_weight * lex(1.0, 1))
    assert c30.exact == pytest.approx(p.exact_weight * 1.0 / total)
    # recency: distance from the last position (3), halving every half-life
    for c in (c10, c20, c30):
        assert c.recency == pytest.approx(p.recency_weight * 0.5 ** ((3 - c.position) / p.recency_half_life))
        assert c.total == pytest.approx(c.user + c.assistant + c.exact + c.recency)


def test_topic_weight_counts_each_anchor_once_per_topic(small):
    index, positions, labels, costs = small
    _, topic_weight = score_candidates(WEIGHTS, index, positions, labels, costs, P)
    # Segment 0 holds redis (in two turns: counted once) and ttl; segment 1 holds #3.11.
    assert topic_weight == pytest.approx({0: 3.0, 1: 1.0})


def test_length_normalisation_favours_the_shorter_turn():
    index, positions, labels, costs = build(
        [(1, ["redis"], [], 5), (2, ["redis", "a", "b"], [], 5)], labels=[0, 0]
    )
    p = P.with_(b=1.0, recency_weight=0.0)
    candidates, _ = score_candidates({"redis": 1.0}, index, positions, labels, costs, p)
    k1 = p.k1
    # avg user length 2: norm 0.5 for the short turn, 1.5 for the long one
    short = (k1 + 1) / (1 + k1 * 0.5)
    long = (k1 + 1) / (1 + k1 * 1.5)
    assert candidates[1].user == pytest.approx(p.user_weight * short / (k1 + 1))
    assert candidates[2].user == pytest.approx(p.user_weight * long / (k1 + 1))
    assert candidates[1].total > candidates[2].total


def test_no_query_anchors_no_candidates(small):
    index, positions, labels, costs = small
    assert score_candidates({}, index, positions, labels, costs, P) == ({}, {})
    assert score_candidates({"unknown": 3.0}, index, positions, labels, costs, P) == ({}, {})


side = st.lists(st.sampled_from(["a", "b", "c", "锁", "脑裂", "#x"]), max_size=8)


@given(
    turns=st.lists(st.tuples(side, side), min_size=1, max_size=6),
    weights=st.dictionaries(st.sampled_from(["a", "b", "c", "锁", "脑裂", "#x", "z"]), st.floats(0.06, 5.0), min_size=1),
)
def test_score_parts_are_normalised(turns, weights):
    index, positions, labels, costs = build(
        [(i + 1, u, a, 1) for i, (u, a) in enumerate(turns)], labels=[0] * len(turns)
    )
    candidates, topic_weight = score_candidates(weights, index, positions, labels, costs, P)
    for c in candidates.values():
        assert c.covered and set(c.covered) <= set(weights)
        assert len(c.covered) == len(set(c.covered))
        assert 0 <= c.user <= P.user_weight + 1e-9
        assert 0 <= c.assistant <= P.assistant_weight + 1e-9
        assert 0 <= c.exact <= P.exact_weight + 1e-9
        assert 0 < c.recency <= P.recency_weight
        holders = index.turns[c.turn_id].anchors
        assert set(c.covered) == holders & set(weights)
    assert sum(topic_weight.values()) <= sum(weights.values()) + 1e-9


# -- distinctive ------------------------------------------------------------------------------------


def test_lone_cjk_characters_are_not_distinctive_evidence():
    assert distinctive(Candidate(1, 0, 1, covered=["加", "用"])) == ()
    assert distinctive(Candidate(1, 0, 1, covered=["加", "加密"])) == ("加密",)
    assert distinctive(Candidate(1, 0, 1, covered=["redis"])) == ("redis",)


def test_distinctive_is_kept_on_the_candidate_and_matches_its_anchors():
    # score_candidates' candidates, CJK characters and bigrams among their anchors: the kept
    # answer is the one computed from ``covered`` (a wrong or stale memo fails here)
    index, positions, labels, costs = build(
        [(1, ["加", "加密", "redis"], ["用"], 5), (2, ["加"], ["用"], 5), (3, ["redis"], ["加密"], 5)], [0, 0, 0])
    weights = {"加": 2.0, "用": 2.0, "加密": 3.0, "redis": 3.0}
    candidates, _ = score_candidates(weights, index, positions, labels, costs, P)
    expected = {1: {"加密", "redis"}, 2: set(), 3: {"redis", "加密"}}
    for turn_id, candidate in candidates.items():
        assert candidate.distinct is None  # computed on first use, once covered is complete
        first = distinctive(candidate)
        assert set(first) == expected[turn_id] and list(first) == [a for a in candidate.covered if a in expected[turn_id]]
        assert distinctive(candidate) is first is candidate.distinct  # kept: not recomputed


# -- greedy_cover ------------------------------------------------------------------------------------

COVER_WEIGHTS = {"a": 4.0, "b": 4.0, "c": 1.0}


def cand(turn_id: int, covered: list[str], cost: int, score: float = 0.0) -> Candidate:
    return Candidate(turn_id, turn_id, cost, user=score, covered=list(covered))


@pytest.fixture
def xyz():
    # X covers both heavy anchors but is expensive; Y and Z each cover one, cheaply.
    x = cand(1, ["a", "b"], 100, score=3.0)
    y = cand(2, ["a"], 10, score=1.0)
    z = cand(3, ["b"], 10, score=2.0)
    return x, y, z


def test_prefers_gain_per_cost_to_the_alpha(xyz):
    x, y, z = xyz
    # gains at alpha 0.8: X 8 / 100**0.8 ~ 0.20; Y and Z 4 / 10**0.8 ~ 0.63 (tie: Z scores higher)
    chosen, covered = greedy_cover([x, y, z], COVER_WEIGHTS, target=8.0, budget=1000, alpha=0.8)
    assert chosen == [z, y]
    assert covered == 8.0


def test_alpha_zero_ignores_cost(xyz):
    x, y, z = xyz
    chosen, covered = greedy_cover([x, y, z], COVER_WEIGHTS, target=8.0, budget=1000, alpha=0.0)
    assert chosen == [x]
    assert covered == 8.0


def test_stops_at_the_target(xyz):
    x, y, z = xyz
    chosen, covered = greedy_cover([x, y, z], COVER_WEIGHTS, target=4.0, budget=1000, alpha=0.8)
    assert chosen == [z]
    assert covered == 4.0


def test_respects_the_budget(xyz):
    x, y, z = xyz
    chosen, covered = greedy_cover([x, y, z], COVER_WEIGHTS, target=8.0, budget=15, alpha=0.8)
    assert chosen == [z]  # Y no longer fits after Z; X never fit
    assert covered == 4.0
    chosen, _ = greedy_cover([x], COVER_WEIGHTS, target=8.0, budget=99, alpha=0.0)
    assert chosen == []


def test_budget_is_inclusive(xyz):
    _, y, z = xyz
    chosen, _ = greedy_cover([y, z], COVER_WEIGHTS, target=8.0, budget=20, alpha=0.8)
    assert sorted(c.turn_id for c in chosen) == [2, 3]


def test_honours_the_pre_covered_set(xyz):
    x, y, z = xyz
    chosen, covered = greedy_cover([x, y, z], COVER_WEIGHTS, target=8.0, budget=1000, alpha=0.8, covered={"b"})
    # b is covered by a pinned turn: Z adds nothing; Y covers the rest.
    assert chosen == [y]
    assert covered == 8.0
    chosen, covered = greedy_cover([x, y, z], COVER_WEIGHTS, target=4.0, budget=1000, alpha=0.8, covered={"b"})
    assert chosen == [] and covered == 4.0  # the target is met before anything is picked


def test_does_not_mutate_its_inputs(xyz):
    pre = {"b"}
    candidates = list(xyz)
    greedy_cover(candidates, COVER_WEIGHTS, target=9.0, budget=1000, alpha=0.8, covered=pre)
    assert pre == {"b"}
    assert candidates == list(xyz)


def test_candidates_adding_nothing_are_never_picked():
    dup1, dup2 = cand(1, ["a"], 1), cand(2, ["a"], 1)
    chosen, covered = greedy_cover([dup1, dup2], COVER_WEIGHTS, target=100.0, budget=100, alpha=0.8)
    assert len(chosen) == 1
    assert covered == 4.0


def test_ties_go_to_the_higher_score():
    low, high = cand(1, ["a"], 5, score=0.1), cand(2, ["b"], 5, score=0.9)
    chosen, _ = greedy_cover([low, high], COVER_WEIGHTS, target=4.0, budget=100, alpha=0.8)
    assert chosen == [high]


@st.composite
def cover_problems(draw):
    names = ["a", "b", "c", "d", "e", "f"]
    weights = {n: draw(st.floats(0.1, 10.0)) for n in names}
    candidates = [
        cand(i, draw(st.lists(st.sampled_from(names), min_size=1, max_size=4, unique=True)), draw(st.integers(0, 50)))
        for i in range(draw(st.integers(0, 8)))
    ]
    pre = draw(st.sets(st.sampled_from(names), max_size=2))
    budget = draw(st.integers(0, 120))
    target = draw(st.floats(0.0, sum(weights.values())))
    alpha = draw(st.sampled_from([0.0, 0.5, 0.8, 1.0]))
    return candidates, weights, target, budget, alpha, pre


@given(cover_problems())
def test_greedy_cover_properties(problem):
    candidates, weights, target, budget, alpha, pre = problem
    chosen, covered_weight = greedy_cover(candidates, weights, target, budget, alpha, covered=set(pre))
    # never over budget, never the same turn twice
    assert sum(c.cost for c in chosen) <= budget
    assert len({c.turn_id for c in chosen}) == len(chosen)
    # the reported weight is exactly what the pre-covered set and the picks hold
    union = set(pre).union(*(c.covered for c in chosen))
    assert covered_weight == pytest.approx(sum(weights[a] for a in union))
    # every pick added new weight
    seen = set(pre)
    for c in chosen:
        assert set(c.covered) - seen
        seen |= set(c.covered)
    # stopping early means nothing left fits and adds coverage
    if covered_weight < target:
        left = budget - sum(c.cost for c in chosen)
        for c in candidates:
            if c not in chosen and c.cost <= left:
                assert not set(c.covered) - union


@given(
    turns=st.lists(st.tuples(side, side), min_size=1, max_size=6),
    weights=st.dictionaries(st.sampled_from(["a", "b", "c", "锁", "脑裂", "#x", "z"]), st.floats(0.06, 5.0), min_size=1),
    b=st.sampled_from([0.0, 0.5, 0.75, 1.0]),
)
def test_score_parts_are_the_bm25_formulas_floats(turns, weights, b):
    """score_candidates inlines scoring.bm25_saturation: its parts are the pure formula's
    products summed in query order, to the last bit (selections compare scores exactly)."""
    from context_gatekeeper.selection.scoring import bm25_saturation

    p = P.with_(b=b)
    index, positions, labels, costs = build([(i + 1, u, a, 1) for i, (u, a) in enumerate(turns)], labels=[0] * len(turns))
    candidates, _ = score_candidates(weights, index, positions, labels, costs, p)
    total, k1 = sum(weights.values()) or 1.0, p.k1
    user_scale, assistant_scale = p.user_weight / (total * (k1 + 1.0)), p.assistant_weight / (total * (k1 + 1.0))
    for turn_id, c in candidates.items():
        user = assistant = 0.0
        turn = index.turns[turn_id]
        for anchor in c.covered:
            tf_user, tf_assistant = index.postings[anchor][turn_id]
            if tf_user:
                user += weights[anchor] * user_scale * bm25_saturation(tf_user, turn.user_len, index.avg_user_len, k1, b)
            if tf_assistant:
                assistant += weights[anchor] * assistant_scale * bm25_saturation(
                    tf_assistant, turn.assistant_len, index.avg_assistant_len, k1, b)
        assert (c.user, c.assistant) == (user, assistant)


def test_evidence_max_commonness_draws_the_line_the_docs_give() -> None:
    """As params, match_share and the selection guide say: "一般" (0.90) and "不能" (0.93) are at
    or above ``evidence_max_commonness`` (0.9) and tie no turn of another topic to the query;
    "usually" (0.73) is below it and still does."""
    assert anchor_commonness("不能") > anchor_commonness("一般") >= P.evidence_max_commonness
    assert anchor_commonness("usually") < P.evidence_max_commonness
    index, positions, labels, costs = build([(1, ["usually", "一般", "不能"], [], 5)], [0])
    weights = {"usually": 1.0, "一般": 1.0, "不能": 2.0}
    candidates, _ = score_candidates(weights, index, positions, labels, costs, P)
    assert candidates[1].covered == ["usually", "一般", "不能"] and candidates[1].telling == ["usually"]
    assert match_share(candidates[1], weights) == 0.25

"""The topic gate: features (shares of the query's weight) and the decision rule.

Thresholds and the switch score's weights are read from SelectionParams (or set by the
test), so these tests check the rule, not the tuning.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from context_gatekeeper.selection.cues import Cues
from context_gatekeeper.selection.gate import (
    GateFeatures, anchor_weights, decide, gate_features, switch_contributions, switch_inputs,
)
from context_gatekeeper.selection.params import SWITCH_FEATURES, SelectionParams

P = SelectionParams()
STRONG = P.weak_switch_factor * P.switch_min_new_weight  # new content that makes a cued switch hold


def model(**weights: float) -> dict[str, float]:
    """A switch model with every weight 0 but these."""
    return {**dict.fromkeys(SWITCH_FEATURES, 0.0), **weights}

NO_CUES = Cues()
REF = Cues(reference=("it",))
SWITCH = Cues(switch=("btw",))
RETURN = Cues(returning=("back to",))


def features(
    overlap: float = 0.0,
    new_anchor_ratio: float = 0.0,
    elsewhere_ratio: float | None = None,
    new_weight: float = 0.0,
    earlier_segment: int | None = None,
    earlier_overlap: float = 0.0,
    cues: Cues = NO_CUES,
    query_weight: float = 10.0,
) -> GateFeatures:
    if elsewhere_ratio is None:
        elsewhere_ratio = max(0.0, 1.0 - overlap - new_anchor_ratio)
    return GateFeatures(
        overlap, new_anchor_ratio, elsewhere_ratio, new_weight, earlier_segment, earlier_overlap, cues, query_weight
    )


def clear_switch(**changes) -> GateFeatures:
    """A query that shares nothing with the history and brings a lot of new content."""
    values = dict(overlap=0.0, new_anchor_ratio=1.0, elsewhere_ratio=0.0, new_weight=STRONG * 2)
    values.update(changes)
    return features(**values)


def test_defaults_keep_the_bands_ordered():
    # The rule assumes continue <= switch threshold (else the band between would be unreachable).
    assert P.continue_threshold <= P.switch_threshold
    assert P.weak_switch_factor >= 1


# -- rule 1: no anchors ---------------------------------------------------------------------------


@pytest.mark.parametrize("cues", [NO_CUES, REF])
def test_query_without_anchors_continues(cues):
    assert decide(features(query_weight=0.0, new_anchor_ratio=0.0, cues=cues), P) == "continue"


def test_a_switch_cue_without_content_switches():
    # "Never mind that.", "By the way...": the topic is set aside; nothing to continue
    assert decide(features(query_weight=0.0, new_anchor_ratio=0.0, cues=SWITCH), P) == "switch"


def test_a_return_cue_without_content_returns():
    # "回到刚才的话题", "back to what we were saying": the caller returns to the previous topic
    assert decide(features(query_weight=0.0, new_anchor_ratio=0.0, cues=RETURN), P) == "return"


# -- rule 2: return and switch cues ---------------------------------------------------------------


def test_return_cue_with_a_better_earlier_segment_returns():
    # A return cue needs only that the earlier segment beats the active topic, no threshold.
    f = features(overlap=0.05, earlier_segment=1, earlier_overlap=0.06, cues=RETURN)
    assert f.earlier_overlap < P.return_threshold
    assert decide(f, P) == "return"


def test_return_cue_without_a_better_earlier_segment_falls_through():
    f = features(overlap=0.5, earlier_segment=1, earlier_overlap=0.3, cues=RETURN)
    assert decide(f, P) == "continue"  # rule 4: overlap above the continue threshold


def test_return_cue_uses_elsewhere_share_when_no_segment_is_named():
    # During segmentation no earlier segment is known: gate_features estimates its overlap
    # by the weight seen outside the topic.
    f = gate_features({"old": 6.0, "fresh": 4.0}, lambda a: int(a == "old"), {}, RETURN)
    assert (f.earlier_segment, f.earlier_overlap, f.elsewhere_ratio) == (None, pytest.approx(0.6), pytest.approx(0.6))
    assert decide(f, P) == "return"


def test_switch_cue_on_the_active_topics_words_does_not_switch():
    # "anyway, how does the watchdog renew the Redis lock?" while on Redis locks
    f = features(overlap=P.cue_hold_overlap, new_anchor_ratio=0.1, new_weight=STRONG - 0.1, cues=SWITCH)
    assert decide(f, P) == "continue"


def test_switch_cue_switches_with_a_lot_of_new_content_or_little_overlap():
    assert decide(features(overlap=0.9, new_anchor_ratio=0.1, new_weight=STRONG, cues=SWITCH), P) == "switch"
    low = features(overlap=P.cue_hold_overlap - 0.01, new_anchor_ratio=0.5, new_weight=1.0, cues=SWITCH)
    assert decide(low, P) == "switch"


def test_return_cue_on_the_active_topics_words_continues_and_otherwise_returns():
    assert decide(features(overlap=P.continue_threshold, cues=RETURN), P) == "continue"
    assert decide(features(overlap=0.0, new_anchor_ratio=0.5, new_weight=1.0, cues=RETURN), P) == "return"


def test_switch_cue_with_a_strong_earlier_match_is_a_return():
    f = features(overlap=0.1, earlier_segment=0, earlier_overlap=P.return_threshold, cues=SWITCH)
    assert decide(f, P) == "return"


def test_switch_cue_with_a_weak_earlier_match_stays_a_switch():
    f = features(overlap=0.0, earlier_segment=0, earlier_overlap=P.return_threshold - 0.01, cues=SWITCH)
    assert decide(f, P) == "switch"


def test_return_cue_beats_a_reference_cue():
    both = Cues(reference=("that",), returning=("back to",))
    f = features(overlap=0.0, earlier_segment=2, earlier_overlap=0.3, cues=both)
    assert decide(f, P) == "return"


# -- rule 5: return without a cue -------------------------------------------------------------------


def test_strong_earlier_segment_returns_without_a_cue():
    f = features(overlap=0.0, new_anchor_ratio=0.2, earlier_segment=0, earlier_overlap=P.return_threshold)
    assert decide(f, P) == "return"


def test_earlier_segment_below_the_return_threshold_does_not_return():
    f = features(overlap=0.0, new_anchor_ratio=0.2, earlier_segment=0, earlier_overlap=P.return_threshold - 0.01)
    assert decide(f, P.with_(switch_model=model(bias=-1.0))) == "continue"


def test_weight_seen_outside_the_topic_stands_in_for_an_earlier_segment_once_the_score_leaves():
    seen = P.return_threshold * 10 + 0.01
    f = gate_features({"old": seen, "fresh": 10 - seen}, lambda a: int(a == "old"), {}, NO_CUES)
    assert f.earlier_overlap == pytest.approx(P.return_threshold + 0.001)
    assert decide(f, P.with_(switch_model=model(bias=1.0))) == "return"
    assert decide(f, P.with_(switch_model=model(bias=-1.0))) == "continue"  # the estimate alone moves nothing


def test_return_needs_a_margin_over_the_active_topic():
    p = P.with_(switch_model=model(bias=-1.0))
    barely = features(overlap=0.4, earlier_segment=0, earlier_overlap=0.4 + p.return_margin - 0.01)
    clearly = features(overlap=0.4, earlier_segment=0, earlier_overlap=0.4 + p.return_margin + 0.01)
    assert barely.earlier_overlap >= p.return_threshold
    assert decide(barely, p) == "continue"
    assert decide(clearly, p) == "return"


# -- rule 6: the fitted switch score -----------------------------------------------------------------


def test_switch_inputs_are_the_named_features():
    f = features(overlap=0.25, new_anchor_ratio=0.5, new_weight=math.e - 1, earlier_segment=2, earlier_overlap=0.1,
                 cues=REF, query_weight=math.e ** 2 - 1)
    x = switch_inputs(f)
    assert tuple(x) == SWITCH_FEATURES
    assert x["bias"] == 1.0 and x["overlap"] == 0.25 and x["new_share"] == 0.5 and x["elsewhere"] == 0.1
    # only a measured other topic counts: the estimate also holds the active topic's faded turns
    assert switch_inputs(features(earlier_segment=None, earlier_overlap=0.1))["elsewhere"] == 0.0
    assert x["new_content"] == pytest.approx(1.0) and x["content"] == pytest.approx(2.0)
    assert x["reference"] == 1.0 and x["asks"] == x["closes"] == x["established"] == 0.0


def test_the_score_is_the_sum_of_the_contributions_and_decides_its_sign():
    f = clear_switch()
    leaves = switch_contributions(f, model(bias=-1.0, new_share=1.5))
    assert dict(leaves)["new_share"] == 1.5 and sum(v for _, v in leaves) == pytest.approx(0.5)
    assert decide(features_with(f, leaves), P) == "switch"
    stays = switch_contributions(f, model(bias=-1.0, new_share=0.5))
    assert decide(features_with(f, stays), P) == "continue"


def test_without_contributions_decide_scores_with_the_params_model():
    f = clear_switch()
    assert f.switch_score is None
    assert decide(f, P.with_(switch_model=model(bias=0.5))) == "switch"
    assert decide(f, P.with_(switch_model=model(bias=-0.5))) == "continue"


def features_with(f: GateFeatures, contributions) -> GateFeatures:
    from dataclasses import replace

    return replace(f, contributions=tuple(contributions))


def test_the_fitted_defaults_read_the_way_the_signals_point():
    # The fit chooses the sizes; the directions are what the features mean.
    w = P.switch_model
    assert w["overlap"] < 0  # words of the active topic hold it
    assert w["new_content"] > 0  # new content opens a topic
    assert w["elsewhere"] > 0  # words of another topic leave this one
    assert w["asks"] < 0 < w["closes"]  # a reply to a question stays; after "Anything else?" it moves on


def test_with_the_defaults_a_clear_switch_switches_and_a_short_follow_up_continues():
    assert decide(clear_switch(), P) == "switch"
    follow_up = features(overlap=0.5, new_anchor_ratio=0.2, new_weight=1.0, query_weight=4.0)
    assert decide(follow_up, P) == "continue"


@given(
    overlap=st.floats(0, 1),
    ratio=st.floats(0, 1),
    new_weight=st.floats(0, 100),
    earlier=st.floats(0, 1),
    segment=st.sampled_from([None, 0, 3]),
    cues=st.sampled_from([NO_CUES, REF, SWITCH, RETURN]),
)
def test_decide_always_answers_one_of_three(overlap, ratio, new_weight, earlier, segment, cues):
    f = features(overlap, ratio, None, new_weight, segment, earlier, cues)
    decision = decide(f, P)
    assert decision in ("continue", "switch", "return")
    score = sum(v for _, v in switch_contributions(f, P.switch_model))
    if decision == "switch":
        assert cues.switch or score >= 0
    if not (cues.switch or cues.returning) and score < 0:
        measured_return = segment is not None and earlier >= max(P.return_threshold, overlap + P.return_margin)
        assert decision == ("return" if measured_return else "continue")


# -- anchor_weights ---------------------------------------------------------------------------------


def test_anchor_weights_are_idf_times_kind_weight():
    df = {"redis": 2, "脑裂": 1, "锁": 0, "#3.11": 4}.get
    weights = anchor_weights(["redis", "脑裂", "锁", "#3.11", "redis"], lambda a: df(a, 0), 5, P)
    docs = 5 + P.idf_prior_docs  # pseudo-documents keep short histories sensible

    def bm25(d):
        return math.log(1 + (docs - d + 0.5) / (d + 0.5))

    kinds = P.kind_weights
    assert weights == pytest.approx(
        {
            "redis": bm25(2) * kinds["word"],
            "脑裂": bm25(1) * kinds["cjk_bigram"],
            "锁": bm25(0) * kinds["cjk_char"],
            "#3.11": bm25(4) * kinds["exact"],
        }
    )


def test_anchor_weights_use_the_named_idf_and_drop_extra_stopwords():
    p = P.with_(idf="smooth", extra_stopwords=frozenset({"redis"}))
    weights = anchor_weights(["redis", "lock"], lambda a: 1, 3, p)
    assert weights == pytest.approx({"lock": math.log((3 + p.idf_prior_docs + 1) / 1.5)})


def test_rarer_anchors_weigh_more():
    weights = anchor_weights(["rare", "common"], {"rare": 1, "common": 9}.__getitem__, 10, P)
    assert weights["rare"] > weights["common"] > 0


# -- gate_features ----------------------------------------------------------------------------------


def test_gate_features_by_hand():
    weights = {"a": 1.0, "b": 2.0, "c": 3.0, "d": 4.0, "#a.b": 100.0}
    topic = {"a": 1.0, "b": 0.5}  # b is in the topic, but from an older turn
    df = {"a": 3, "b": 1, "c": 0, "d": 2}.get
    f = gate_features(weights, lambda x: df(x, 0), topic, REF, earlier=(2, 0.4))
    # the exact anchor is left out: total 10
    assert f.query_weight == pytest.approx(10.0)
    assert f.overlap == pytest.approx((1.0 * 1 + 2.0 * 0.5) / 10)  # 0.2
    assert f.new_anchor_ratio == pytest.approx(3.0 / 10)  # only c was never seen
    assert f.elsewhere_ratio == pytest.approx(0.5)  # d, and the faded half of b
    assert f.new_weight == pytest.approx(3.0)
    assert (f.earlier_segment, f.earlier_overlap, f.cues) == (2, 0.4, REF)


def test_exact_anchors_are_excluded():
    with_exact = gate_features({"redis": 2.0, "#3.11": 50.0, "`ttl`": 50.0}, lambda a: 0, {}, NO_CUES)
    without = gate_features({"redis": 2.0}, lambda a: 0, {}, NO_CUES)
    assert with_exact == without
    assert with_exact.new_weight == pytest.approx(2.0)


def test_query_of_only_exact_anchors_has_no_weight():
    f = gate_features({"#3.11": 5.0}, lambda a: 0, {"#3.11": 1.0}, NO_CUES, earlier=(1, 0.7))
    assert f == GateFeatures(0.0, 0.0, 0.0, 0.0, 1, 0.7, NO_CUES, 0.0)
    assert decide(f, P) == "continue"


def test_an_anchor_in_the_topic_is_not_new_even_if_df_says_so():
    f = gate_features({"lock": 1.0}, lambda a: 0, {"lock": 1.0}, NO_CUES)
    assert (f.overlap, f.new_anchor_ratio, f.new_weight) == (1.0, 0.0, 0.0)


anchor_names = st.sampled_from(["a", "b", "c", "d", "e", "锁", "脑裂", "#x", "`y`"])


@given(
    weights=st.dictionaries(anchor_names, st.floats(0.01, 10)),
    topic=st.dictionaries(anchor_names, st.floats(0, 1)),
    seen=st.sets(anchor_names),
)
def test_shares_sum_to_one(weights, topic, seen):
    f = gate_features(weights, lambda a: int(a in seen or a in topic), topic, NO_CUES)
    if f.query_weight > 0:
        for share in (f.overlap, f.new_anchor_ratio, f.elsewhere_ratio):
            assert -1e-9 <= share <= 1 + 1e-9
        assert f.overlap + f.new_anchor_ratio + f.elsewhere_ratio == pytest.approx(1.0)
        assert f.new_weight == pytest.approx(f.new_anchor_ratio * f.query_weight)
    else:
        assert all(k.startswith(("#", "`")) for k in weights)


# -- the one-pass gate features and weights equal the formulas written one share at a time -------


def _reference_gate_features(weights, df, topic, cues, earlier, context, switch_model):
    """gate_features as it was written before it measured the shares in one pass: one
    comprehension per share, the frozen constructor, then the context and contributions."""
    import dataclasses

    from context_gatekeeper.selection.anchors import AnchorKind, anchor_kind

    weights = {a: w for a, w in weights.items() if anchor_kind(a) != AnchorKind.EXACT}
    total = sum(weights.values())
    if total <= 0:
        segment, overlap = earlier or (None, 0.0)
        f = GateFeatures(0.0, 0.0, 0.0, 0.0, segment, overlap, cues, 0.0)
    else:
        in_topic = sum(w * topic[a] for a, w in weights.items() if a in topic)
        unseen = sum(w for a, w in weights.items() if a not in topic and df(a) == 0)
        elsewhere = max(0.0, 1.0 - (in_topic + unseen) / total)
        segment, overlap = earlier if earlier is not None else (None, elsewhere)
        cjk = sum(w for a, w in weights.items() if anchor_kind(a) in (AnchorKind.CJK_BIGRAM, AnchorKind.CJK_CHAR))
        f = GateFeatures(in_topic / total, unseen / total, elsewhere, unseen, segment, overlap, cues, total,
                         cjk_share=cjk / total)
    f = dataclasses.replace(f, **context)
    if switch_model is not None:
        inputs = switch_inputs(f)
        f = dataclasses.replace(f, contributions=tuple((n, switch_model[n] * v) for n, v in inputs.items()))
    return f


@given(
    weights=st.dictionaries(anchor_names, st.floats(0.0, 10)),
    topic=st.dictionaries(anchor_names, st.floats(0, 1)),
    seen=st.sets(anchor_names),
    earlier=st.none() | st.tuples(st.none() | st.integers(0, 5), st.floats(0, 1)),
    cues=st.sampled_from([NO_CUES, REF, SWITCH, RETURN]),
    context=st.fixed_dictionaries({
        "asks": st.booleans(), "closes": st.booleans(), "established": st.booleans(),
        "history_turns": st.integers(0, 10_000),
    }),
    with_model=st.booleans(),
)
def test_gate_features_equal_the_share_by_share_formulas(weights, topic, seen, earlier, cues, context, with_model):
    """Bit for bit (repr compares every float's digits): each sum adds the same weights in
    the same order, and the context and contributions are those set afterwards before."""
    df = lambda a: int(a in seen)  # noqa: E731
    switch_model = P.switch_model if with_model else None
    got = gate_features(weights, df, topic, cues, earlier, switch_model=switch_model, **context)
    expected = _reference_gate_features(weights, df, topic, cues, earlier, context, switch_model)
    assert repr(got) == repr(expected) and got == expected
    assert (got.switch_score is None) == (not with_model)


def test_switch_contributions_follow_the_inputs_in_order():
    f = features(overlap=0.3, new_weight=2.0, earlier_segment=1, earlier_overlap=0.2)
    weights = {name: float(i) - 4.5 for i, name in enumerate(SWITCH_FEATURES)}
    inputs = switch_inputs(f)
    assert list(inputs) == list(SWITCH_FEATURES)
    assert switch_contributions(f, weights) == tuple((n, weights[n] * v) for n, v in inputs.items())
    with pytest.raises(KeyError):  # a model missing an input is refused as before
        switch_contributions(f, {"bias": 1.0})


@given(
    anchors=st.lists(anchor_names) | st.frozensets(anchor_names),
    counts=st.dictionaries(anchor_names, st.integers(0, 50)),
    n=st.integers(0, 60),
    extra=st.frozensets(anchor_names, max_size=2),
    formula=st.sampled_from(["bm25", "smooth"]),
)
def test_anchor_weights_equal_the_formula_per_anchor(anchors, counts, n, extra, formula):
    """The IDF computed once per document frequency gives each anchor the weight the
    formula gives it, in the order of the anchors' first appearance, stopwords left out;
    the exact anchors segmentation leaves out are those of the weights, in their order."""
    from context_gatekeeper.selection.anchors import anchor_kind
    from context_gatekeeper.selection.gate import _weights_and_exact
    from context_gatekeeper.selection.scoring import IDF_FORMULAS

    params = SelectionParams(extra_stopwords=extra, idf=formula)
    df = lambda a: counts.get(a, 0)  # noqa: E731
    idf = IDF_FORMULAS[formula]
    expected = {a: idf(df(a), n + params.idf_prior_docs) * params.kind_weights[anchor_kind(a)]
                for a in dict.fromkeys(anchors) if a not in extra}
    got = anchor_weights(anchors, df, n, params)
    assert list(got.items()) == list(expected.items())
    weights, exact = _weights_and_exact(anchors, df, n, params)  # what segmentation reads
    assert weights == got and exact == [a for a in got if anchor_kind(a) == "exact"]


@pytest.mark.parametrize("invisible", ["\u200b", "\u00ad", "\u200d", "\ufeff"])
def test_acknowledgements_and_closing_questions_are_read_through_invisible_characters(invisible: str) -> None:
    """acknowledges, last_question and is_courtesy read the text as anchors and cues do (invisible
    characters removed, full-width letters folded): "thanks" followed by a zero-width space is an
    acknowledgement, and a courtesy question with a soft hyphen or a zero-width joiner in it still
    closes the topic (they read the raw text: a pasted or streamed message read otherwise)."""
    from context_gatekeeper.selection.gate import acknowledges, asks_question, closes_topic, is_courtesy, last_question

    assert acknowledges(f"thanks{invisible}") and acknowledges(f"ok{invisible} thanks!")
    assert acknowledges("ｏｋ ｔｈａｎｋｓ")  # full-width
    assert not acknowledges(f"thanks{invisible}?")
    assert last_question(f"Renew it. Which client do you use?{invisible}") == "Which client do you use?"
    assert is_courtesy(f"Any{invisible}thing else?")
    assert closes_topic(f"Renew it with a watchdog. Any{invisible}thing else?{invisible}")
    assert asks_question(f"Renew it with a watchdog. Which client do you use?{invisible}")
    assert not asks_question(f"Renew it with a watchdog. Does that{invisible} help?")

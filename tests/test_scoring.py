"""Scoring formulas: BM25 / smoothed IDF, BM25 saturation, the recency prior, the greedy gain."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from context_gatekeeper.selection.scoring import (
    IDF_FORMULAS,
    bm25_saturation,
    coverage_gain,
    idf_bm25,
    idf_smooth,
    recency_prior,
    recency_weights,
)

# -- IDF ---------------------------------------------------------------------------------------


def test_formulas_are_chosen_by_name():
    assert IDF_FORMULAS == {"bm25": idf_bm25, "smooth": idf_smooth}


@pytest.mark.parametrize(
    ("df", "n", "expected"),
    [
        (0, 10, math.log(1 + 10.5 / 0.5)),  # ln 22
        (1, 10, math.log(1 + 9.5 / 1.5)),
        (5, 10, math.log(1 + 5.5 / 5.5)),  # half the documents: ln 2
        (10, 10, math.log(1 + 0.5 / 10.5)),  # in every document: small but positive
        (3, 13.0, math.log(1 + 10.5 / 3.5)),  # n may be fractional (prior pseudo-documents)
    ],
)
def test_idf_bm25_values(df, n, expected):
    assert idf_bm25(df, n) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("df", "n", "expected"),
    [(0, 10, math.log(11 / 0.5)), (1, 10, math.log(11 / 1.5)), (10, 10, math.log(11 / 10.5))],
)
def test_idf_smooth_values(df, n, expected):
    assert idf_smooth(df, n) == pytest.approx(expected)


@given(n=st.integers(0, 10_000))
def test_both_idfs_agree_on_unseen_terms(n):
    # bm25 at df=0: ln(1 + (n + 0.5) / 0.5) = ln((n + 1) / 0.5), the smooth formula.
    assert idf_bm25(0, n) == pytest.approx(idf_smooth(0, n))


@given(n=st.integers(1, 5_000), data=st.data())
def test_bm25_idf_is_positive_and_falls_with_df(n, data):
    df = data.draw(st.integers(0, n - 1))
    assert idf_bm25(df, n) > idf_bm25(df + 1, n) > 0
    assert idf_smooth(df, n) > idf_smooth(df + 1, n)


@given(df=st.integers(0, 100), n=st.integers(100, 5_000))
def test_idf_rises_with_the_number_of_documents(df, n):
    assert idf_bm25(df, n + 1) > idf_bm25(df, n)
    assert idf_smooth(df, n + 1) > idf_smooth(df, n)


# -- BM25 saturation --------------------------------------------------------------------------


def test_absent_term_scores_zero():
    assert bm25_saturation(0, 10, 10.0, 1.2, 0.75) == 0.0


def test_one_occurrence_in_an_average_document_scores_one():
    # norm = 1 at doc_len == avg_len, so tf * (k1 + 1) / (tf + k1) = 1 at tf = 1, whatever b.
    for b in (0.0, 0.5, 0.75, 1.0):
        assert bm25_saturation(1, 20, 20.0, 1.2, b) == pytest.approx(1.0)


def test_saturation_value_by_hand():
    # tf=3, k1=1.2, b=0.75, doc twice the average: norm = 0.25 + 0.75 * 2 = 1.75
    expected = 3 * 2.2 / (3 + 1.2 * 1.75)
    assert bm25_saturation(3, 40, 20.0, 1.2, 0.75) == pytest.approx(expected)


@given(tf=st.integers(1, 1000), k1=st.floats(0.1, 3.0), b=st.floats(0.0, 1.0), doc_len=st.integers(1, 500))
def test_saturation_rises_with_tf_and_stays_below_k1_plus_1(tf, k1, b, doc_len):
    avg = 50.0
    now, more = bm25_saturation(tf, doc_len, avg, k1, b), bm25_saturation(tf + 1, doc_len, avg, k1, b)
    assert 0 < now < more < k1 + 1


def test_saturation_tends_to_k1_plus_1():
    assert bm25_saturation(10**7, 10, 10.0, 1.2, 0.75) == pytest.approx(2.2, rel=1e-5)


@given(tf=st.integers(1, 50), short=st.integers(1, 100), extra=st.integers(1, 100))
def test_longer_documents_score_lower_unless_b_is_zero(tf, short, extra):
    long = short + extra
    assert bm25_saturation(tf, long, 30.0, 1.2, 0.75) < bm25_saturation(tf, short, 30.0, 1.2, 0.75)
    assert bm25_saturation(tf, long, 30.0, 1.2, 0.0) == bm25_saturation(tf, short, 30.0, 1.2, 0.0)


def test_k1_zero_is_binary():
    assert {bm25_saturation(tf, 10, 10.0, 0.0, 0.75) for tf in (1, 2, 50)} == {1.0}


def test_empty_index_average_does_not_divide_by_zero():
    # avg_len 0 (nothing indexed yet): no length normalisation.
    assert bm25_saturation(2, 5, 0.0, 1.2, 0.75) == pytest.approx(2 * 2.2 / (2 + 1.2))


# -- recency -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("distance", "expected"), [(0, 1.0), (3, 0.5), (6, 0.25), (9, 0.125), (1, 0.5 ** (1 / 3))])
def test_recency_halves_every_half_life(distance, expected):
    assert recency_prior(distance, 3.0) == pytest.approx(expected)


def test_zero_half_life_switches_recency_off():
    assert recency_prior(0, 0.0) == 0.0
    assert recency_prior(5, 0.0) == 0.0


@given(d=st.integers(0, 200), h=st.floats(1.0, 50))
def test_recency_falls_with_distance(d, h):
    assert 0 < recency_prior(d + 1, h) < recency_prior(d, h) <= 1.0


@given(weight=st.floats(-2.0, 2.0), h=st.floats(0.0, 50), n=st.integers(0, 300))
def test_recency_weights_table_holds_the_same_floats_as_the_formula(weight, h, n):
    # the table must equal the product computed per distance, float for float (selection output
    # must not change), however it was grown: from a small table, then past it
    for size in (max(n // 3, 1), n, 2 * n + 1):
        table = recency_weights(weight, h, size)
        assert len(table) >= size
        assert all(table[d] == weight * recency_prior(d, h) for d in range(size))


def test_recency_weights_table_is_kept_per_setting():
    first = recency_weights(0.2, 3.0, 10)
    assert recency_weights(0.2, 3.0, 5) is first  # kept: no power computed per call
    assert recency_weights(0.3, 3.0, 10)[1] == 0.3 * recency_prior(1, 3.0)  # another setting, its own table
    grown = recency_weights(0.2, 3.0, len(first) + 1)
    assert len(grown) > len(first) and grown[: len(first)] == first


# -- coverage gain ---------------------------------------------------------------------------------


def test_coverage_gain_by_hand():
    assert coverage_gain(16.0, 16, 0.5) == pytest.approx(4.0)
    assert coverage_gain(3.0, 10, 0.0) == 3.0  # alpha 0 ignores cost
    assert coverage_gain(3.0, 10, 1.0) == pytest.approx(0.3)
    assert coverage_gain(8.0, 100, 0.8) == pytest.approx(8.0 / 100**0.8)


def test_free_turns_cost_one():
    assert coverage_gain(2.0, 0, 0.8) == coverage_gain(2.0, 1, 0.8) == 2.0


@given(new=st.floats(0.01, 100), cost=st.integers(1, 10_000), alpha=st.floats(0.01, 2.0))
def test_gain_falls_with_cost_and_rises_with_weight(new, cost, alpha):
    assert coverage_gain(new, cost + 1, alpha) < coverage_gain(new, cost, alpha)
    assert coverage_gain(new * 2, cost, alpha) == pytest.approx(2 * coverage_gain(new, cost, alpha))

"""SelectionParams: documented defaults, validated up front, immutable."""

from __future__ import annotations

import dataclasses

import pytest

from context_gatekeeper.selection.anchors import AnchorKind, TextAnchors
from context_gatekeeper.selection.index import AnchorIndex
from context_gatekeeper.selection.params import SelectionParams
from context_gatekeeper.selection.scoring import IDF_FORMULAS
from context_gatekeeper.selection.selector import score_candidates


def test_report_defaults_that_were_kept():
    p = SelectionParams()
    assert (p.user_weight, p.assistant_weight, p.exact_weight, p.recency_weight) == (1.5, 0.7, 1.0, 0.2)
    assert (p.top_m, p.coverage_target, p.cost_exponent) == (20, 0.85, 0.8)
    assert p.idf in IDF_FORMULAS
    assert set(p.kind_weights) == {AnchorKind.WORD, AnchorKind.CJK_BIGRAM, AnchorKind.CJK_CHAR, AnchorKind.EXACT}


def test_every_field_is_documented():
    import ast
    import inspect

    from context_gatekeeper.selection import params

    tree = ast.parse(inspect.getsource(params.SelectionParams))
    body = tree.body[0].body
    documented = set()
    for node, following in zip(body, body[1:]):
        is_docstring = isinstance(following, ast.Expr) and isinstance(following.value, ast.Constant)
        if isinstance(node, ast.AnnAssign) and is_docstring:
            documented.add(node.target.id)
    assert {f.name for f in dataclasses.fields(SelectionParams)} <= documented


def test_params_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        SelectionParams().k1 = 2.0  # type: ignore[misc]


def test_with_returns_a_changed_copy():
    p = SelectionParams()
    q = p.with_(k1=2.0)
    assert q.k1 == 2.0 and p.k1 == 1.2
    assert dataclasses.replace(q, k1=1.2) == p


@pytest.mark.parametrize(
    "changes",
    [
        {"idf": "tfidf"},
        {"k1": -0.1},
        {"recency_half_life": -1.0},
        {"top_m": 0},
        {"topic_window": 0},
        {"coverage_target": 0.0},
        {"coverage_target": 1.5},
        {"top_m": "3"},
        {"top_m": 3.0},
        {"k1": float("nan")},
        {"k1": "1.2"},
        {"keep_topic_opener": 1},
        {"reply_continues": None},
    ],
)
def test_invalid_values_are_rejected_up_front(changes):
    with pytest.raises(ValueError):
        SelectionParams(**changes)
    with pytest.raises(ValueError):
        SelectionParams().with_(**changes)


def test_numpy_numbers_from_a_tuning_loop_are_taken_as_plain_values():
    np = pytest.importorskip("numpy")
    p = SelectionParams(top_m=np.int64(3), k1=np.float32(1.5), keep_topic_opener=np.bool_(False))
    assert (p.top_m, p.k1, p.keep_topic_opener) == (3, 1.5, False)
    assert (type(p.top_m), type(p.k1), type(p.keep_topic_opener)) == (int, float, bool)
    with pytest.raises(ValueError, match="top_m must be an int"):
        SelectionParams(top_m=np.float64(3.0))


def test_a_threshold_may_be_infinite_and_an_int_stands_for_a_float():
    assert SelectionParams(switch_min_new_weight=float("inf"), k1=2).k1 == 2


def test_unknown_idf_names_the_choices():
    with pytest.raises(ValueError, match="bm25"):
        SelectionParams(idf="tfidf")


def test_kind_weights_missing_a_kind_is_rejected_up_front():
    with pytest.raises(ValueError):
        SelectionParams(kind_weights={AnchorKind.WORD: 1.0})


def test_a_zero_kind_weight_switches_that_kind_off():
    p = SelectionParams(kind_weights={**SelectionParams().kind_weights, AnchorKind.CJK_CHAR: 0.0})
    index = AnchorIndex()
    index.add(1, TextAnchors.of(["锁"]), TextAnchors.of([]))
    candidates, _ = score_candidates({"锁": 0.0, "redis": 1.0}, index, {1: 0}, [0], {1: 5}, p)
    assert candidates == {}


@pytest.mark.parametrize("name", ["reference_override", "new_angle_factor"])
def test_a_knob_the_fitted_gate_replaced_still_works_but_warns(name):
    with pytest.warns(DeprecationWarning, match="switch_model"):
        params = SelectionParams(**{name: 99.0})
    assert getattr(params, name) == 99.0


def test_the_defaults_raise_no_deprecation_warning(recwarn):
    SelectionParams()
    SelectionParams.preset("recall")
    assert not [w for w in recwarn if issubclass(w.category, DeprecationWarning)]


@pytest.mark.parametrize("model", [{"bias": 1.0}, {**SelectionParams().switch_model, "extra": 1.0},
                                   {**SelectionParams().switch_model, "bias": float("nan")},
                                   {**SelectionParams().switch_model, "bias": True}])
def test_a_switch_model_must_weigh_exactly_the_named_features(model):
    from context_gatekeeper.errors import InvalidInputError

    with pytest.raises(InvalidInputError, match="switch_model needs a finite weight for each of"):
        SelectionParams(switch_model=model)


def test_the_dict_fields_refuse_changes_in_place_and_travel_as_dicts():
    """The weights are read-only: a change in place would leave a gatekeeper's topics and the
    process-wide label cache computed with weights the record no longer shows."""
    import copy
    import json
    import pickle

    from context_gatekeeper.errors import InvalidTypeError

    p = SelectionParams()
    for name in ("kind_weights", "switch_model", "semantic_preference_model"):
        weights = getattr(p, name)
        before = dict(weights)
        key = next(iter(weights))
        for change in (lambda: weights.__setitem__(key, 0.0), lambda: weights.__delitem__(key), weights.clear,
                       lambda: weights.pop(key), weights.popitem, lambda: weights.setdefault("x", 1.0),
                       lambda: weights.update({key: 0.0})):
            with pytest.raises(InvalidTypeError, match=r"with_\("):
                change()
        with pytest.raises(InvalidTypeError):
            weights |= {key: 0.0}
        assert dict(getattr(p, name)) == before
        changed = {**weights, key: 0.5}  # a changed copy is a plain dict, and builds a changed record
        assert p.with_(**{name: changed}) != p and getattr(p.with_(**{name: changed}), name) == changed
    mine = dict(SelectionParams().kind_weights)
    q = SelectionParams(kind_weights=mine)
    mine["word"] = 0.0  # the caller's dict is copied
    assert q.kind_weights["word"] == 1.0
    for copied in (pickle.loads(pickle.dumps(p)), copy.deepcopy(p), copy.copy(p), dataclasses.replace(p)):
        assert copied == p and hash(copied) == hash(p) and type(copied.switch_model) is type(p.switch_model)
    assert json.loads(json.dumps(dataclasses.asdict(p)["kind_weights"])) == dict(p.kind_weights)
    assert repr(p.kind_weights) == repr(dict(p.kind_weights))  # the record's repr (its cache key) as before
    assert len({SelectionParams(), SelectionParams(), SelectionParams.preset("recall")}) == 2


def test_labels_are_cached_by_the_values_of_the_parameters(monkeypatch):
    """The label cache's key is a key of the record's values (kept on the record, which cannot
    change): equal records share labels, a changed copy assigned to a gatekeeper labels its
    turns as a fresh gatekeeper, with nothing cached, does, and leaves the default's alone."""
    from context_gatekeeper import ContextGatekeeper
    from context_gatekeeper.caching import BoundedCache, text_key
    from context_gatekeeper.selection import history

    assert SelectionParams()._fingerprint == SelectionParams()._fingerprint == text_key(repr(SelectionParams()))
    zero = SelectionParams().with_(kind_weights={**SelectionParams().kind_weights, "word": 0.0})
    assert zero._fingerprint != SelectionParams()._fingerprint
    turns = [("How do I size a Redis lock TTL?", "Longer than the longest job."),
             ("What is a Python TaskGroup?", "An asyncio scope that cancels its siblings on failure."),
             ("And the watchdog for the Redis lock?", "It renews the TTL."),
             ("Best espresso grind?", "Fine, like table salt."),
             ("And for a moka pot espresso?", "Medium-fine.")]
    changed = ContextGatekeeper(token_counter=len)
    changed.insert_turns(None, turns)
    changed.params = zero
    default = ContextGatekeeper(token_counter=len)
    default.insert_turns(None, turns)
    monkeypatch.setattr(history, "_labels", BoundedCache(maxsize=100))  # nothing cached from here on
    fresh = {}
    for params, gk in ((SelectionParams(), default), (zero, changed)):
        fresh[params] = ContextGatekeeper(token_counter=len, params=params)
        fresh[params].insert_turns(None, turns)
        assert gk._history.labels == fresh[params]._history.labels
    assert fresh[zero]._history.labels != fresh[SelectionParams()]._history.labels  # the weights matter here


def test_extra_stopwords_are_a_set_of_words():
    from context_gatekeeper.errors import InvalidInputError

    assert SelectionParams(extra_stopwords=["acme", "acme"]).extra_stopwords == frozenset({"acme"})
    assert SelectionParams(extra_stopwords={"acme"}).extra_stopwords == frozenset({"acme"})
    for bad in ("international", b"acme", {"acme": 1}, 5, ["acme", 3]):
        with pytest.raises(InvalidInputError, match="extra_stopwords"):
            SelectionParams(extra_stopwords=bad)


@pytest.mark.parametrize("weight", [float("nan"), float("inf"), -0.5, "1", True, None])
def test_kind_weights_are_finite_numbers_at_or_above_zero(weight):
    from context_gatekeeper.errors import InvalidInputError

    with pytest.raises(InvalidInputError, match="kind_weights needs a finite weight >= 0"):
        SelectionParams(kind_weights={**SelectionParams().kind_weights, "word": weight})
    with pytest.raises(InvalidInputError, match="kind_weights"):
        SelectionParams(kind_weights=[("word", 1.0)])


def test_numpy_weights_are_taken_as_plain_floats():
    np = pytest.importorskip("numpy")
    p = SelectionParams(kind_weights={**SelectionParams().kind_weights, "word": np.float32(0.5)})
    assert p.kind_weights["word"] == 0.5 and type(p.kind_weights["word"]) is float

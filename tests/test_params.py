"""SelectionParams: documented defaults, validated up front, immutable."""

from __future__ import annotations

import dataclasses

import pytest

from context_gatekeeper.selection.anchors import AnchorKind, TextAnchors
from context_gatekeeper.selection.index import AnchorIndex
from context_gatekeeper.selection.params import _NEVER_REACHED, SelectionParams
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


_DEPRECATED_CALLS = [  # (the call, the knob it passes), each as a user's script writes it
    ("SelectionParams(reference_override=3.0)", "reference_override"),
    ("SelectionParams.preset('recall', semantic_topic_floor=0.1)", "semantic_topic_floor"),
    ("SelectionParams().with_(semantic_words_share=0.1)", "semantic_words_share"),
    ("dataclasses.replace(SelectionParams(), semantic_topic_margin=0.9)", "semantic_topic_margin"),
    ("GateOptions(params=SelectionParams(semantic_reference_drop=0.9))", "semantic_reference_drop"),
    ("GateOptions.of(token_counter=len, new_angle_factor=3.0)", "new_angle_factor"),
    ("GateOptions(token_counter=len).with_(reference_override=4.0)", "reference_override"),
    ("ContextGatekeeper(semantic_switch_z=1.0, token_counter=len)", "semantic_switch_z"),
    ("ContextGatekeeper(preset='recall', semantic_words_share=0.2, token_counter=len)", "semantic_words_share"),
]


def test_a_deprecated_knob_warns_in_the_callers_script_under_default_filters(tmp_path):
    """Python's default filters show a DeprecationWarning only when it names code of ``__main__``:
    each warning names the line of the user's script that passed the knob, however many of
    the library's calls lie between (``ContextGatekeeper`` -> ``GateOptions.of`` -> ``with_``)."""
    import os
    import subprocess
    import sys

    script = tmp_path / "user_script.py"
    header = ["import dataclasses", "from context_gatekeeper import ContextGatekeeper, GateOptions, SelectionParams"]
    script.write_text("\n".join(header + [call for call, _ in _DEPRECATED_CALLS]) + "\n", "utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONWARNINGS", "PYTHONDEVMODE")}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    for line, (call, knob) in enumerate(_DEPRECATED_CALLS, start=len(header) + 1):
        assert f"{script}:{line}: DeprecationWarning: SelectionParams.{knob} no longer changes selection" in done.stderr, (
            call, done.stderr)
    assert "context_gatekeeper" not in done.stderr  # no warning named after a frame of the library


def test_caller_stacklevel_names_the_first_frame_outside_the_library():
    import warnings

    from context_gatekeeper import ContextGatekeeper
    from context_gatekeeper.selection.params import caller_stacklevel

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ContextGatekeeper(semantic_switch_z=1.0, token_counter=len)
        SelectionParams.preset("recall", semantic_topic_floor=0.1)
    assert [(w.filename, w.category) for w in caught] == [(__file__, DeprecationWarning)] * 2

    def here() -> int:
        return caller_stacklevel()

    assert here() == 1  # a function outside the library warns in its own name


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


def test_extra_stopwords_are_read_as_a_query_reads_them():
    """A stopword is written as users write it: each anchor its text gives (lower-cased and
    stemmed, a Chinese word's character pairs and glossary term) is what selection ignores."""
    from context_gatekeeper.selection.anchors import extract
    from context_gatekeeper.selection.gate import anchor_weights

    p = SelectionParams(extra_stopwords={"Acme", "caching", "containers", "数据库"})
    assert p.extra_stopwords == frozenset({"Acme", "caching", "containers", "数据库"})  # kept as given
    assert {"acm", "cach", "container", "数据", "据库", "databas"} <= p.stopword_anchors
    assert "acme" in p.stopword_anchors  # the word itself too: an anchor written as one still works
    query = extract("Acme caching containers on Kubernetes, 数据库呢？", query=True).counts
    assert set(anchor_weights(query, lambda anchor: 0, 3, p)) == {"kubernet"}
    assert {"acm", "cach", "container", "数据"} <= set(anchor_weights(query, lambda anchor: 0, 3, SelectionParams()))


@pytest.mark.parametrize("changes", [
    {"k1": float("inf")}, {"b": float("inf")}, {"idf_prior_docs": float("inf")}, {"cost_exponent": 1e308},
    {"topic_decay": 1e308}, {"topic_decay": 1.5}, {"b": 1.01}, {"k1": 101.0}, {"cost_exponent": 4.5},
    {"user_weight": float("inf")}, {"recency_weight": float("inf")}, {"recency_half_life": float("inf")},
    {"affinity_margin": float("inf")}, {"semantic_top_z": float("inf")}, {"semantic_rrf_k": float("inf")},
    {"weak_switch_factor": float("inf")}, {"exact_weight": 10**400},
])
def test_a_number_outside_its_fields_range_is_refused_naming_field_value_and_range(changes):
    """Infinity only where a threshold is never reached; weights, factors, rates and exponents
    must be finite, and a share, a decay or an exponent in its range: otherwise selection would
    give NaN scores or overflow far from here."""
    from context_gatekeeper.errors import GatekeeperError, InvalidInputError

    (name, value), = changes.items()
    with pytest.raises(InvalidInputError) as refused:
        SelectionParams(**changes)
    assert isinstance(refused.value, ValueError) and isinstance(refused.value, GatekeeperError)
    message = str(refused.value)
    assert f"SelectionParams.{name} must be" in message and repr(value)[:20] in message
    assert ("from 0 to" in message) or ("finite number >= 0" in message)
    with pytest.raises(InvalidInputError, match=name):
        SelectionParams().with_(**changes)


@pytest.mark.parametrize("name", sorted(_NEVER_REACHED))
def test_a_threshold_set_to_infinity_is_never_reached_and_scores_stay_numbers(name):
    import math

    from context_gatekeeper import ContextGatekeeper

    gk = ContextGatekeeper(token_budget=500, token_counter=len, message_overhead=0, **{name: math.inf})
    gk.add_turn("How do I size a Redis lock TTL?", "Longer than the longest job, renewed by a watchdog.")
    gk.add_turn("What is a Python TaskGroup?", "An asyncio scope that cancels its siblings.")
    gk.add_turn("Why does the watchdog renew the Redis lock?", "So a slow job keeps it.")
    selection = gk.explain("How often should the watchdog renew the Redis lock?")
    assert all(math.isfinite(score.total) for score in selection.scores)
    assert math.isfinite(selection.gate.overlap) and math.isfinite(selection.coverage)


def test_the_ends_of_the_bounded_ranges_select_with_finite_scores():
    import math

    from context_gatekeeper import ContextGatekeeper

    for changes in ({"k1": 100.0, "b": 1.0, "topic_decay": 1.0, "cost_exponent": 4.0},
                    {"k1": 0.0, "b": 0.0, "topic_decay": 0.0, "cost_exponent": 0.0}):
        gk = ContextGatekeeper(token_budget=500, token_counter=len, message_overhead=0, **changes)
        for i in range(6):
            gk.add_turn(f"Redis lock TTL question {i} " + "lock " * i, "Renew it with a watchdog. " * (i + 1))
        selection = gk.explain("How often should the watchdog renew the Redis lock?")
        assert selection.turn_ids and all(math.isfinite(score.total) for score in selection.scores)


def test_a_preset_is_named_by_a_string():
    from context_gatekeeper.errors import InvalidTypeError

    for bad in (["recall"], ("recall",), 1, None):
        with pytest.raises(InvalidTypeError, match=r"pass one of \['default', 'recall'\]"):
            SelectionParams.preset(bad)  # type: ignore[arg-type]


def test_with_leaves_the_process_warning_filters_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """A copy of params holding a deprecated knob warns nothing again, without swapping the
    process's warning filters (``warnings.catch_warnings`` would, and another thread's warnings
    raised meanwhile were swallowed)."""
    import warnings

    from context_gatekeeper.selection import params as module

    name = next(iter(module.DEPRECATED_PARAMS))
    default = module._DEFAULTS.get(name)
    with pytest.warns(DeprecationWarning):
        old = SelectionParams(**{name: default + 1 if isinstance(default, (int, float)) else default})
    filters = warnings.filters
    seen: list[bool] = []
    real = module.replace

    def watched(*args, **kwargs):
        seen.append(warnings.filters is filters)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, "replace", watched)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        filters = warnings.filters
        old.with_(k1=2.0)
    assert seen == [True] and not [w for w in caught if issubclass(w.category, DeprecationWarning)]

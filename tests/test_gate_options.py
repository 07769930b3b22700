"""GateOptions: the one checked record of a gate's settings, and the one budget rule.

Each setting is checked once, when the record is built, with the library's own error; a
gatekeeper built from the record and one built from the same keywords select alike; the
budget rule (an int >= 0, bool refused) is the same for a gatekeeper, a per-call override,
a covering selection and the node postprocessor."""

from __future__ import annotations

import copy
import pickle
import subprocess
import sys

import pytest

from context_gatekeeper import (
    BudgetError,
    ContextGatekeeper,
    GateOptions,
    InvalidInputError,
    InvalidTypeError,
    SelectionParams,
    select_covering,
)
from context_gatekeeper.validation import require_budget


def words(text: str) -> int:
    return len(text.split())


BAD_BUDGETS = [-1, 1.5, "100", True, False, float("nan")]


@pytest.mark.parametrize("budget", BAD_BUDGETS)
def test_one_budget_rule_everywhere(budget: object) -> None:
    with pytest.raises(BudgetError, match="int >= 0"):
        require_budget(budget)
    with pytest.raises(BudgetError, match="int >= 0"):
        GateOptions(token_budget=budget)  # type: ignore[arg-type]
    with pytest.raises(BudgetError, match="int >= 0"):
        ContextGatekeeper(token_budget=budget)  # type: ignore[arg-type]
    gk = ContextGatekeeper(token_counter=words)
    gk.add_turn("q", "a")
    with pytest.raises(BudgetError, match="int >= 0"):
        gk.explain("q", token_budget=budget)  # type: ignore[arg-type]
    with pytest.raises(BudgetError, match="int >= 0"):
        select_covering("q", ["q"], token_budget=budget)  # type: ignore[arg-type]
    for valid in (0, 1, 4000):
        assert require_budget(valid) == valid == GateOptions(token_budget=valid).token_budget


def test_each_setting_is_checked_with_the_librarys_error() -> None:
    with pytest.raises(InvalidInputError, match="message_overhead"):
        GateOptions(message_overhead=-1)
    with pytest.raises(InvalidInputError, match="message_overhead"):
        GateOptions(message_overhead=True)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="on_overflow"):
        GateOptions(on_overflow="drop")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="embed_timeout"):
        GateOptions(embed_timeout=0)
    with pytest.raises(InvalidInputError, match="unknown token encoding"):
        GateOptions(token_counter="no_such_encoding")
    with pytest.raises(InvalidTypeError, match="token_counter"):
        GateOptions(token_counter=42)
    with pytest.raises(InvalidTypeError, match="vector_cache"):
        GateOptions(vector_cache=object())
    with pytest.raises(InvalidTypeError, match="embedder"):
        GateOptions(embedder=42)
    with pytest.raises(InvalidTypeError, match="params"):
        GateOptions(params={"top_m": 3})  # type: ignore[arg-type]
    with pytest.raises(InvalidTypeError, match="not both"):
        GateOptions(params=SelectionParams(), preset="recall")
    with pytest.raises(InvalidInputError, match="unknown preset"):
        GateOptions(preset="fast")
    for build in (GateOptions, GateOptions.of, GateOptions().with_, ContextGatekeeper):
        with pytest.raises(InvalidTypeError, match=r"a preset is named by a string.*\['default', 'recall'\]"):
            build(preset=["recall"])  # type: ignore[operator]
    with pytest.raises(TypeError, match="unexpected keyword"):
        GateOptions.of(tokn_budget=5)
    with pytest.raises(InvalidInputError, match="top_m"):
        GateOptions.of(top_m=0)


def test_the_approximate_spelling_says_what_gate_options_takes_instead() -> None:
    # "approximate" is gate_messages's keyword spelling; GateOptions names what to pass instead
    with pytest.raises(InvalidInputError, match="gate_messages") as refused:
        GateOptions(token_counter="approximate")
    assert "count_tokens_approximately" in str(refused.value) and "callable" in str(refused.value)


def test_a_record_is_frozen_and_keeps_what_it_was_given() -> None:
    params = SelectionParams(top_m=7)
    options = GateOptions(token_budget=300, token_counter=words, params=params, on_overflow="keep_pinned")
    with pytest.raises(AttributeError):
        options.token_budget = 5  # type: ignore[misc]
    assert options.params is params and options.token_counter is words and options.count("a b c") == 3
    assert GateOptions().params == SelectionParams() and GateOptions().on_overflow is None
    assert GateOptions(preset="recall").params == SelectionParams.preset("recall")
    assert options.overflow("raise") == "keep_pinned" and GateOptions().overflow("raise") == "raise"


def test_with_and_of_build_changed_checked_copies() -> None:
    base = GateOptions(token_budget=300)
    changed = base.with_(token_budget=200, top_m=4, preset=None)
    assert (changed.token_budget, changed.params.top_m, base.token_budget) == (200, 4, 300)
    assert base.with_(preset="recall").params == SelectionParams.preset("recall")
    with pytest.raises(BudgetError):
        base.with_(token_budget=-5)
    built = GateOptions.of(token_budget=250, preset="recall", top_m=3, embedder=None)
    assert (built.token_budget, built.params.top_m, built.params.fill_ratio) == (250, 3, 0.0)
    assert GateOptions.of(base) is base and GateOptions.of() == GateOptions()
    with pytest.raises(InvalidTypeError, match="not both"):
        GateOptions.of(base, token_budget=100)
    with pytest.raises(InvalidTypeError, match="must be a GateOptions"):
        GateOptions.of({"token_budget": 100})  # type: ignore[arg-type]


def test_a_gatekeeper_takes_the_record_or_its_keywords_not_both() -> None:
    options = GateOptions.of(token_budget=60, token_counter=words, message_overhead=0, on_overflow="keep_pinned", top_m=5)
    by_record = ContextGatekeeper(options=options, system_prompt="Be brief.")
    by_keywords = ContextGatekeeper(token_budget=60, token_counter=words, message_overhead=0,
                                    on_overflow="keep_pinned", top_m=5, system_prompt="Be brief.")
    assert by_record.options is options and by_keywords.options == options
    for gk in (by_record, by_keywords):
        gk.add_turn("How long should a Redis lock TTL be?", "Longer than the longest job.")
        gk.add_turn("Best espresso grind?", "Fine, like table salt.")
    query = "And the Redis lock watchdog?"
    assert by_record.explain(query) == by_keywords.explain(query)
    assert (by_record.token_budget, by_record.on_overflow, by_record.params.top_m) == (60, "keep_pinned", 5)
    assert ContextGatekeeper().on_overflow == "raise"  # the core's default for a record left None
    with pytest.raises(InvalidTypeError, match="not both"):
        ContextGatekeeper(options=options, token_budget=100)
    with pytest.raises(InvalidTypeError, match="not both"):
        ContextGatekeeper(options=options, top_m=3)


def test_pickling_and_copying_rebuild_the_record() -> None:
    options = GateOptions(token_budget=123, token_counter="cl100k_base", preset="recall")
    for copied in (pickle.loads(pickle.dumps(options)), copy.deepcopy(options)):
        assert copied == options and copied.count("hello world") == options.count("hello world")


def test_building_options_reads_the_word_prior_so_no_later_select_does_file_io() -> None:
    # a fresh interpreter: nothing has read the packaged word-frequency file yet; after the
    # options are built, a select (as an async agent would run it, inside its event loop)
    # must not read it again
    code = (
        "from context_gatekeeper import ContextGatekeeper, GateOptions\n"
        "from context_gatekeeper.selection import word_prior\n"
        "options = GateOptions(token_budget=500)\n"
        "def no_io():\n"
        "    raise AssertionError('the word prior was read during a select')\n"
        "word_prior._load = no_io\n"
        "gk = ContextGatekeeper(options=options)\n"
        "gk.add_turn('How do I rotate the TLS certificate?', 'Renew it with certbot and reload nginx.')\n"
        "print(gk.explain('And the certificate expiry alert?').turn_ids)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "(1,)"


def test_a_misspelt_keyword_is_refused_even_when_none() -> None:
    with pytest.raises(InvalidTypeError, match="token_budgett"):
        GateOptions.of(token_budgett=None)
    with pytest.raises(InvalidTypeError, match="bogus"):
        GateOptions.of(GateOptions(), bogus=None)
    assert GateOptions.of(token_budget=None, top_m=None) == GateOptions()  # None: not given


def test_equal_records_hash_alike() -> None:
    """The records are immutable (SelectionParams' weights too), so they serve as dict keys."""
    assert hash(GateOptions()) == hash(GateOptions()) and hash(SelectionParams()) == hash(SelectionParams())
    kept = {GateOptions(token_budget=300): "small", GateOptions(preset="recall"): "recall"}
    assert kept[GateOptions(token_budget=300)] == "small" and kept[GateOptions(preset="recall")] == "recall"


def test_a_budget_passed_is_told_from_the_default_even_at_the_same_size() -> None:
    """``budget_given`` says whether the caller chose the budget (an adapter with a budget of
    its own takes only a chosen one); the default stays an int equal to, and hashed like, 4000,
    and its mark survives copies and pickling, while a budget set through ``with_`` or ``of`` counts."""
    default, chosen = GateOptions(), GateOptions(token_budget=4000)
    assert not default.budget_given and chosen.budget_given
    assert default == chosen and hash(default) == hash(chosen) and default.token_budget == 4000
    assert repr(default.token_budget) == "4000" and isinstance(default.token_budget, int)
    assert not default.with_(message_overhead=0).budget_given
    assert default.with_(token_budget=4000).budget_given
    assert not GateOptions.of(preset="recall").budget_given and GateOptions.of(token_budget=4000).budget_given
    assert not pickle.loads(pickle.dumps(default)).budget_given and not copy.deepcopy(default).budget_given
    assert pickle.loads(pickle.dumps(chosen)).budget_given

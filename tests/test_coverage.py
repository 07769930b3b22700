"""The core's coverage selector over arbitrary texts (context_gatekeeper.selection.coverage)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from context_gatekeeper import BudgetError, SelectionParams, extract_anchors
from context_gatekeeper.tokens import tiktoken_counter, word_floor
from context_gatekeeper.selection.coverage import (
    COVERS,
    DUPLICATE,
    FALLBACK,
    IRRELEVANT,
    NO_NEW_COVERAGE,
    OVER_BUDGET,
    TARGET_REACHED,
    CoverageCorpus,
    kept_covering,
    may_match,
    select_covering,
)

QUERY = "How do I set the TTL of a Redis lock, and what is a fencing token?"
TTL = "A Redis lock should get a TTL longer than the critical section."
FENCING = "A fencing token is a number that grows with every lock grant."
BREAD = "Sourdough bread needs a long, cold proof overnight."


def reasons(result) -> list[str]:
    return [e.reason for e in result.explanations]


def test_keeps_the_covering_subset_in_input_order() -> None:
    result = select_covering(QUERY, [FENCING, BREAD, TTL], costs=[10, 10, 10])
    assert result.kept == [0, 2]
    assert reasons(result) == [COVERS, IRRELEVANT, COVERS]
    assert result.coverage == pytest.approx(1.0)
    assert result.tokens_kept == 20 and result.tokens_total == 30


def test_a_duplicate_adds_no_new_coverage() -> None:
    result = select_covering(QUERY, [TTL, TTL, FENCING], costs=[10, 10, 10])
    assert result.kept == [0, 2]
    dropped = result.explanations[1]
    assert dropped.reason == NO_NEW_COVERAGE and not dropped.kept
    assert set(dropped.matched) >= {"redis", "lock", "ttl"} and dropped.covered == () and dropped.gain == 0


def test_one_candidate_covering_both_beats_two_partial_ones() -> None:
    both = TTL + " " + FENCING
    result = select_covering(QUERY, [TTL, both, FENCING], costs=[10, 15, 10])
    assert result.kept == [1]  # all the weight for 15 tokens beats half of it for 10
    assert reasons(result) == [NO_NEW_COVERAGE, COVERS, NO_NEW_COVERAGE]


def test_the_budget_is_respected_and_explained() -> None:
    result = select_covering(QUERY, [TTL, FENCING], costs=[30, 30], token_budget=40)
    assert result.tokens_kept <= 40 and len(result.kept) == 1
    dropped = next(e for e in result.explanations if not e.kept)
    assert dropped.reason == OVER_BUDGET and dropped.covered and dropped.gain > 0
    assert "over budget" in str(dropped)
    nothing = select_covering(QUERY, [TTL, FENCING], costs=[30, 30], token_budget=0)
    assert nothing.kept == [] and reasons(nothing) == [OVER_BUDGET, OVER_BUDGET]


def test_greedy_prefers_new_weight_per_token() -> None:
    cheap, costly = "Redis lock TTL.", TTL + " " + "x " * 200
    result = select_covering("redis lock ttl", [costly, cheap], costs=[300, 5])
    assert result.kept == [1]
    assert result.explanations[1].pick == 1 and result.explanations[0].reason == NO_NEW_COVERAGE


def test_a_lower_target_stops_early() -> None:
    result = select_covering(QUERY, [TTL, FENCING], costs=[10, 10], target=0.3)
    assert len(result.kept) == 1
    assert TARGET_REACHED in reasons(result)


def test_no_lexical_evidence_falls_back_to_input_order_within_budget() -> None:
    texts = ["Paris is the capital of France.", "Berlin is in Germany.", "Rome is old."]
    result = select_covering("tell me more", texts, costs=[10, 10, 10], token_budget=25)
    assert result.kept == [0, 1]
    assert reasons(result) == [FALLBACK, FALLBACK, OVER_BUDGET]
    strict = select_covering("tell me more", texts, costs=[10, 10, 10], fallback=False)
    assert strict.kept == [] and reasons(strict) == [IRRELEVANT] * 3


def test_the_fallback_drops_a_repeated_text_and_spends_its_budget_on_the_next_distinct_one() -> None:
    texts = ["Paris is the capital of France.", "Paris is the capital of France.", "Berlin is in Germany.",
             "Paris is the capital of France.", "", "", "Rome is old."]
    result = select_covering("tell me more", texts, costs=[10, 10, 10, 10, 0, 0, 10], token_budget=25)
    assert result.kept == [0, 2, 4, 5]  # a blank text is no repeat: it says nothing either way
    assert reasons(result) == [FALLBACK, DUPLICATE, FALLBACK, DUPLICATE, FALLBACK, FALLBACK, OVER_BUDGET]
    assert [e.repeats for e in result.explanations] == [None, 0, None, 0, None, None, None]
    assert str(result.explanations[3]) == "dropped #3: duplicate, the same text as kept #0 (10 tokens)"
    assert result.tokens_kept == 20
    asked: list[int] = []
    kept = kept_covering("tell me more", [extract_anchors(t).counts for t in texts],
                         lambda i: asked.append(i) or 10 * bool(texts[i]), token_budget=25, text=texts.__getitem__)
    assert kept == result.kept
    unlimited = select_covering("tell me more", texts, costs=[10] * len(texts))
    assert unlimited.kept == [0, 2, 4, 5, 6]
    assert kept_covering("tell me more", [{}] * len(texts), lambda i: 10, text=texts.__getitem__) == unlimited.kept


def test_the_fallback_reads_a_text_that_differs_only_in_whitespace_as_a_repeat() -> None:
    """A chunk with a trailing newline, or a line broken elsewhere, says what the kept one says:
    the fallback compares texts with their runs of whitespace read as one space."""
    texts = ["Paris is the capital of France.", "  Paris is the capital\nof France.\n", "Berlin is in Germany."]
    result = select_covering("tell me more", texts, costs=[10, 10, 10], token_budget=20)
    assert result.kept == [0, 2]
    assert reasons(result) == [FALLBACK, DUPLICATE, FALLBACK] and result.explanations[1].repeats == 0
    assert kept_covering("tell me more", [{}] * 3, lambda i: 10, token_budget=20, text=texts.__getitem__) == [0, 2]
    blank = select_covering("tell me more", ["", " \n", "Rome is old."], costs=[0, 0, 10], token_budget=10)
    assert blank.kept == [0, 1, 2]  # blank texts say nothing either way: never repeats


def test_a_corpus_supplies_term_weights() -> None:
    # Among the candidates "redis" and "lock" are everywhere, but in the corpus they are rare
    # and "cluster" is common: the corpus decides which candidate is worth its tokens first.
    corpus = CoverageCorpus.from_texts(["redis lock"] + ["cluster node shard"] * 50)
    assert corpus.n_docs == 51 and corpus.df("cluster") == 50 and corpus.df("redis") == 1
    texts = ["redis lock cluster", "redis lock", "cluster"]
    own = select_covering("redis lock cluster", texts, costs=[3, 2, 1])
    with_corpus = select_covering("redis lock cluster", texts, costs=[3, 2, 1], corpus=corpus)
    assert own.weights["cluster"] > own.weights["redis"] * 0.5  # all similar without the corpus
    assert with_corpus.weights["redis"] > 2 * with_corpus.weights["cluster"]
    assert with_corpus.coverage == pytest.approx(1.0)
    restored = CoverageCorpus.from_dict(corpus.to_dict())
    assert restored.df("cluster") == 50 and restored.n_docs == 51


def test_costs_are_counted_with_a_token_counter_when_omitted() -> None:
    result = select_covering(QUERY, [TTL, FENCING], token_counter=lambda text: len(text.split()))
    assert [e.cost for e in result.explanations] == [len(TTL.split()), len(FENCING.split())]


def test_chinese_and_mixed_queries() -> None:
    texts = ["Redis 锁续租的 TTL 怎么设？", "asyncio.gather 会并发运行协程", "今天天气很好"]
    result = select_covering("Redis 锁续租 TTL", texts, costs=[10, 10, 10])
    assert result.kept == [0]
    assert result.explanations[2].reason == IRRELEVANT


def test_extra_stopwords_from_params_are_ignored() -> None:
    params = SelectionParams(extra_stopwords=frozenset({"redis"}))
    result = select_covering("redis", ["redis lock"], costs=[2], params=params, fallback=False)
    assert result.kept == [] and "redis" not in result.weights


def test_invalid_arguments_are_rejected_up_front() -> None:
    with pytest.raises(BudgetError):
        select_covering(QUERY, [TTL], costs=[1], token_budget=-1)
    with pytest.raises(ValueError, match="costs"):
        select_covering(QUERY, [TTL, FENCING], costs=[1])
    with pytest.raises(ValueError, match="target"):
        select_covering(QUERY, [TTL], costs=[1], target=0)


def test_a_query_or_texts_of_the_wrong_type_say_what_to_pass() -> None:
    """The arguments swapped, a string for the list, or a non-text item failed with a bare
    TypeError (unhashable type: 'list', no attribute 'encode')."""
    from context_gatekeeper.errors import InvalidTypeError

    with pytest.raises(InvalidTypeError, match=r"query must be a str .* got list; pass the query first"):
        select_covering(["a"], "b")  # type: ignore[arg-type]
    with pytest.raises(InvalidTypeError, match="query must be a str"):
        kept_covering(None, [], lambda i: 1)  # type: ignore[arg-type]
    for bad in ("one text", 5, {"a": 1}):
        with pytest.raises(InvalidTypeError, match="texts must be a list of strings"):
            select_covering(QUERY, bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidTypeError, match=r"texts\[1\] must be a str .* got int"):
        select_covering(QUERY, [TTL, 2])  # type: ignore[list-item]


def test_a_corpus_of_the_wrong_type_says_what_to_pass() -> None:
    from context_gatekeeper.errors import InvalidTypeError

    for bad in (5, "one text"):
        with pytest.raises(InvalidTypeError, match="texts must be an iterable of strings"):
            CoverageCorpus.from_texts(bad)  # type: ignore[arg-type]
    corpus = CoverageCorpus.from_texts([TTL])
    with pytest.raises(InvalidTypeError, match=r"texts\[1\] must be a str .* got NoneType"):
        corpus.add_texts([FENCING, None])  # type: ignore[list-item]
    assert corpus.n_docs == 1, "nothing added from a refused batch"


@pytest.mark.parametrize("bad", [2.9, 3.0, True, False, float("nan"), float("inf"), "3", None, 1 + 0j])
def test_a_cost_that_is_not_an_int_is_refused_naming_it(bad) -> None:
    """A float cost was truncated (two texts of 2.9 tokens kept within a budget of 4), a
    bool taken as 1 or 0, NaN, a string or None failed with a bare builtin error."""
    from context_gatekeeper.errors import InvalidTypeError

    with pytest.raises(InvalidTypeError, match=r"costs\[1\] must be an int >= 0 \(a number of tokens\), got ") as caught:
        select_covering(QUERY, [TTL, FENCING], costs=[2, bad], token_budget=4)
    assert repr(bad)[:20] in str(caught.value) and "costs=None" in str(caught.value)


def test_fractional_costs_never_let_the_kept_texts_pass_the_budget() -> None:
    from context_gatekeeper.errors import InvalidTypeError

    texts = ["Redis lock TTL sizing", "Redis watchdog renewal"]
    with pytest.raises(InvalidTypeError, match="math.ceil"):
        select_covering("Redis lock TTL watchdog renewal", texts, costs=[2.9, 2.9], token_budget=4)
    rounded_up = select_covering("Redis lock TTL watchdog renewal", texts, costs=[3, 3], token_budget=4)
    assert len(rounded_up.kept) == 1 and rounded_up.tokens_kept == 3


def test_a_negative_cost_is_refused_naming_it() -> None:
    from context_gatekeeper.errors import InvalidInputError

    with pytest.raises(InvalidInputError, match=r"costs\[2\] must be an int >= 0 .* got -1; .*costs=None"):
        select_covering(QUERY, [TTL, FENCING, BREAD], costs=[1, 0, -1])


def test_costs_that_are_not_a_list_are_refused() -> None:
    from context_gatekeeper.errors import InvalidTypeError

    for bad in (5, "12", (c for c in [1, 2]), {0: 1, 1: 2}):
        with pytest.raises(InvalidTypeError, match="costs must be a list of ints"):
            select_covering(QUERY, [TTL, FENCING], costs=bad)  # type: ignore[arg-type]


def test_integer_costs_of_any_integral_type_are_taken_as_ints() -> None:
    numpy = pytest.importorskip("numpy")
    result = select_covering(QUERY, [FENCING, BREAD, TTL], costs=numpy.array([10, 10, 10]), token_budget=25)
    assert result.tokens_kept == 20 and type(result.tokens_kept) is int
    assert all(type(e.cost) is int for e in result.explanations)
    assert select_covering(QUERY, [FENCING, TTL], costs=(numpy.int32(4), 6)).tokens_total == 10


def test_empty_candidates() -> None:
    result = select_covering(QUERY, [], costs=[])
    assert result.kept == [] and result.explanations == [] and "kept 0 of 0" in str(result)


def test_kept_covering_keeps_what_select_covering_keeps_asking_only_the_costs_it_needs() -> None:
    """On the hand-labelled mixed-topic cases (each message a candidate), with and without
    a budget, a corpus, a lower target and no fallback: the same indices, and a cost asked
    at most once, only for a candidate holding a query term unless the fallback keeps
    candidates in order within a budget; given tiktoken's counts and their word floor,
    the same indices with fewer counts."""
    lines = (Path(__file__).resolve().parents[1] / "benchmarks" / "data" / "interleaved.jsonl").read_text("utf-8")
    cases = [json.loads(line) for line in lines.splitlines() if line.strip()]
    corpus = CoverageCorpus.from_texts(m for case in cases[:50] for t in case["turns"] for m in t.values())
    fallbacks = skipped = 0
    count, tokens = tiktoken_counter(), {}
    for k, case in enumerate(cases):
        texts = [m for t in case["turns"] for m in (t["user"], t["assistant"])]
        anchors = [extract_anchors(t).counts for t in texts]
        costs = [len(t.split()) for t in texts]
        tokens[k] = [count(t) for t in texts]
        query = case["query"] if k % 9 else "and then?"  # no informative term: the fallback
        for options in ({}, {"token_budget": 60}, {"token_budget": 0}, {"corpus": corpus, "token_budget": 90},
                        {"target": 0.5}, {"fallback": False, "token_budget": 40}):
            expected = select_covering(query, texts, costs=costs, anchors=anchors, **options)
            asked: list[int] = []
            kept = kept_covering(query, anchors, lambda i: asked.append(i) or costs[i], **options,
                                 text=texts.__getitem__)
            assert kept == expected.kept, (k, options)
            assert len(asked) == len(set(asked))
            if expected.coverable_weight > 0 or options.get("token_budget") is None or options.get("fallback") is False:
                assert set(asked) <= {e.index for e in expected.explanations if e.matched}, (k, options)
            else:
                fallbacks += 1
                assert sorted(asked) == list(range(len(texts)))
            # tiktoken's counts, and word_floor as their lower bound: the same kept, fewer counted
            lazily: list[int] = []
            kept = kept_covering(query, anchors, lambda i: lazily.append(i) or tokens[k][i], **options,
                                 floor=lambda i: word_floor(texts[i]), text=texts.__getitem__)
            assert kept == select_covering(query, texts, costs=tokens[k], anchors=anchors, **options).kept, (k, options)
            assert len(lazily) == len(set(lazily))
            if expected.coverable_weight > 0 and options.get("token_budget") is not None:
                skipped += len(set(asked) - set(lazily))
    assert fallbacks > 50  # the fallback path was taken
    assert skipped > 100  # the floor spared counts


def test_kept_covering_refuses_what_select_covering_refuses() -> None:
    anchors = [extract_anchors(TTL).counts]
    with pytest.raises(BudgetError):
        kept_covering(QUERY, anchors, lambda i: 1, token_budget=-1)
    with pytest.raises(ValueError, match="target"):
        kept_covering(QUERY, anchors, lambda i: 1, target=1.5)
    assert kept_covering(QUERY, [], lambda i: 1) == []


def test_the_coverable_weight_is_summed_in_query_order() -> None:
    """The same figure in every process (a set's order changes with the string hash seed)."""
    query = "Redis lock TTL, fencing token grant, sourdough proof overnight, critical section number"
    result = select_covering(query, [TTL, FENCING, BREAD], costs=[9, 9, 9])
    held = [a for a in result.weights if any(a in e.matched for e in result.explanations)]
    assert result.coverable_weight == sum(result.weights[a] for a in held) and len(held) > 8


def test_the_lazy_greedy_step_picks_what_the_chat_selectors_greedy_cover_picks() -> None:
    """select_covering's greedy step brings only the top candidate's gain up to date; on
    random candidate sets full of ties (equal weights, costs and scores), with budgets,
    targets and semantic tie-breaks, it picks the same candidates in the same order as
    selector.greedy_cover, with the same covered weight."""
    import random

    from context_gatekeeper.selection.coverage import _greedy
    from context_gatekeeper.selection.selector import Candidate, greedy_cover

    rng = random.Random(7)
    for case in range(3000):
        terms = [f"t{k}" for k in range(rng.randrange(1, 9))]
        weights = {t: rng.choice([0.5, 1.0, 1.0, 2.25, rng.random() * 3]) for t in terms}
        found = {i: rng.sample(terms, rng.randrange(1, len(terms) + 1)) for i in range(rng.randrange(1, 25))
                 if rng.random() < 0.8}
        costs = {i: rng.choice([0, 1, 5, 5, 8, rng.randrange(40)]) for i in found}
        semantic = {i: rng.choice([0.0, 0.0, 0.1, 0.3]) for i in found}
        alpha = rng.choice([0.0, 0.5, 1.0])
        budget = rng.choice([10**6, 0, 5, 12, 30])
        target = sum(weights.values()) * rng.choice([1.0, 0.6, 0.3]) * (1 - 1e-9)
        candidates = [Candidate(turn_id=i, position=i, cost=costs[i], user=sum(weights[a] for a in found[i]),
                                covered=list(found[i]), semantic=semantic[i]) for i in sorted(found)]
        expected, expected_weight = greedy_cover(candidates, weights, target, budget, alpha)
        chosen, weight = _greedy(found, weights, costs.__getitem__, semantic.__getitem__, target, budget, alpha)
        assert [i for i, _, _ in chosen] == [c.turn_id for c in expected] and weight == expected_weight, case
        # a lower bound of each cost (0, the cost itself, or between): the same picks, each counted once
        floors = {i: rng.choice([0, c, c // 2, max(c - 1, 0)]) for i, c in costs.items()}
        asked: list[int] = []
        chosen, weight = _greedy(found, weights, lambda i: asked.append(i) or costs[i], semantic.__getitem__,
                                 target, budget, alpha, floors.__getitem__)
        assert [i for i, _, _ in chosen] == [c.turn_id for c in expected] and weight == expected_weight, case
        assert len(asked) == len(set(asked)) and {c.turn_id for c in expected} <= set(asked), case


def _hand_labelled_texts() -> list[str]:
    data = Path(__file__).resolve().parents[1] / "benchmarks" / "data"
    return [m for name in ("interleaved.jsonl", "hard_cases.jsonl")
            for line in (data / name).read_text("utf-8").splitlines() if line.strip()
            for turn in json.loads(line)["turns"] for m in (turn["user"], turn["assistant"])]


def test_may_match_never_turns_away_a_text_that_holds_a_query_anchor() -> None:
    """Every anchor of every ASCII text (the hand-labelled sets' messages, and random
    texts of words, identifiers, versions, numbers, quotes and code) passes the test
    built from a query holding just that anchor's text; a text beyond ASCII always passes."""
    import random

    from context_gatekeeper.selection.coverage import _core

    rng = random.Random(3)
    words = ["studies", "Study", "running", "runs", "moved", "embedding", "classes", "HTTPServer", "max_retries",
             "asyncio.gather", "v3.11", "2024", "a1b2", "x->y", "Foo::Bar", '"fencing token"', "`ttl`", "it's",
             "flies", "lied", "buses", "e.g.", "U.S.", "naïve", "ok", "by", "Cooking", "hopping", "agreed"]
    texts = _hand_labelled_texts() + [" ".join(rng.choice(words) for _ in range(rng.randrange(1, 12)))
                                      for _ in range(3000)]
    checked = 0
    for text in texts:
        if not text.isascii():
            assert may_match("anything at all")(text)
            continue
        lowered = text.lower()
        for anchor in extract_anchors(text).counts:
            assert _core(anchor) in lowered, (anchor, text)
            checked += 1
    assert checked > 20_000
    assert not may_match("Redis lock TTL")("Bake bread at 220 degrees.") and not may_match("the of and")("Redis")


def test_texts_may_match_turns_away_are_irrelevant_to_select_covering() -> None:
    for case, line in enumerate((Path(__file__).resolve().parents[1] / "benchmarks" / "data" /
                                 "interleaved.jsonl").read_text("utf-8").splitlines()):
        data = json.loads(line)
        texts = [m for t in data["turns"] for m in (t["user"], t["assistant"])]
        test = may_match(data["query"])
        result = select_covering(data["query"], texts, costs=[1] * len(texts))
        assert all(test(texts[e.index]) for e in result.explanations if e.matched), case


def test_held_anchors_tells_which_query_anchors_a_text_holds() -> None:
    """``held_anchors(query)(text)``, when not None, holds exactly the query anchors that
    ``extract`` finds in the text (it may hold other anchors of the text); it is None only
    for text ``anchors_near`` cannot read, and empty whenever ``may_match`` turns the text
    away.  Hand-labelled messages against their own queries and others', and random texts
    of words, identifiers, versions, numbers, quotes and code."""
    import random

    from context_gatekeeper.selection.coverage import _asked, held_anchors

    rng = random.Random(7)
    words = ["studies", "Study", "running", "runs", "moved", "embedding", "classes", "HTTPServer", "max_retries",
             "asyncio.gather", "v3.11", "2024", "a1b2", "x->y", "Foo::Bar", '"fencing token"', "`ttl`", "it's",
             "flies", "lied", "buses", "e.g.", "naïve", "ok", "by", "Cooking", "hopping", "agreed", "TaskGroup",
             "task", "groups", "study", "embed", "fly", "class"]
    texts = _hand_labelled_texts()[:1500] + [" ".join(rng.choice(words) for _ in range(rng.randrange(1, 12)))
                                             for _ in range(1500)]
    queries = [json.loads(line)["query"] for line in (Path(__file__).resolve().parents[1] / "benchmarks" / "data" /
                                                      "interleaved.jsonl").read_text("utf-8").splitlines() if line]
    queries += [" ".join(rng.choice(words) for _ in range(4)) for _ in range(40)]
    params = SelectionParams()
    told = 0
    for k, query in enumerate(queries):
        asked, held, test = set(_asked(query, params)), held_anchors(query), may_match(query)
        for text in texts[k % 7::7]:
            found = held(text)
            if found is None:
                assert test(text)
                continue
            told += 1
            assert found & asked == asked & set(extract_anchors(text).counts), (query, text)
            if not test(text):
                assert found == frozenset()
    assert told > 10_000


def test_asked_kept_per_query_is_the_querys_anchors_read_afresh() -> None:
    """``_asked`` keeps each query's anchors (lru): read again, or with another read
    length, they are what extracting the cut query (cues stripped) gives."""
    from context_gatekeeper.selection.anchors import extract as extract_fresh
    from context_gatekeeper.selection.coverage import _asked
    from context_gatekeeper.selection.cues import strip_cues

    queries = [json.loads(line)["query"] for line in (Path(__file__).resolve().parents[1] / "benchmarks" / "data" /
                                                      "interleaved.jsonl").read_text("utf-8").splitlines() if line]
    for size in (SelectionParams().max_query_chars, 12):
        params = SelectionParams(max_query_chars=size)
        for query in queries[:60] * 2:
            fresh = tuple(dict.fromkeys(extract_fresh(strip_cues(query[:size])[1], query=True).counts))
            assert _asked(query, params) == fresh, (query, size)


def test_ascii_stand_in_has_the_anchors_of_the_text_it_stands_for() -> None:
    """``_ascii_stand_in(text)``, when not None, is ASCII and ``extract`` finds the same
    anchors in it as in ``text`` (random texts mixing words, identifiers, versions and
    numbers with dashes, emoji, joiners, curly apostrophes, accented letters, full-width
    and composed forms, CJK, quotes and code); it exists for plain English chat with
    dashes and emoji, and ``held_anchors`` then reads a text beyond ASCII exactly."""
    import random

    from context_gatekeeper.selection.coverage import _ascii_stand_in, _asked, held_anchors

    rng = random.Random(11)
    words = ["studies", "Study", "running", "moved", "HTTPServer", "max_retries", "asyncio.gather", "v3.11", "2024",
             "a1b2", "x->y", "Foo::Bar", "it's", "e.g.", "U.S.", "ok", "TaskGroup", "groups", "1.2", ".5", "a.b"]
    beyond = ["\u2014", "\u2013", "\U0001f4aa", "\U0001f9d8\u200d\u2640\ufe0f", "\u2019", "\u2019s", "\u00e9",
              "na\u00efve", "\u201cquoted\u201d", "\u300cx\u300d", "\ufb01", "e\u0301", "\uff12\uff10", "\uff32edis",
              "\u2026", "\u00b2", "\u00bd", "\u9501\u7eed\u79df", "\u00a0", "\u2028", "\u0301", '"q"', "`c`", "\u0660\u0661",
              "\ud800", "?", "\u00ad"]
    texts = [m for m in _hand_labelled_texts() if not m.isascii()]
    for _ in range(3000):
        pieces = [rng.choice(words if rng.random() < 0.6 else beyond) for _ in range(rng.randrange(1, 12))]
        texts.append("".join(p + rng.choice([" ", "", ".", "-", "\n"]) for p in pieces))
    stood, plain = 0, 0
    for text in texts:
        stand_in = _ascii_stand_in(text)
        if stand_in is None:
            continue
        stood += 1
        assert stand_in.isascii()
        assert set(extract_anchors(stand_in).counts) == set(extract_anchors(text).counts), text
    told = 0
    for k in range(30):
        query = " ".join(rng.choice(words + ["gym", "yoga"]) for _ in range(3))
        asked, held = set(_asked(query, SelectionParams())), held_anchors(query)
        for text in texts[k % 3::3]:
            found = held(text)
            if found is not None and not text.isascii():
                told += 1
                assert found & asked == asked & set(extract_anchors(text).counts), (query, text)
    assert told > 2000
    for text in ["Great run \u2014 see you at the gym \U0001f4aa", "You\u2019re doing great \U0001f9d8\u200d\u2640\ufe0f"]:
        assert _ascii_stand_in(text) is not None
        query = "Who goes to the gym and does yoga?"
        found = held_anchors(query)(text)
        assert found is not None
        asked = set(_asked(query, SelectionParams()))
        assert found & asked == asked & set(extract_anchors(text).counts)
        plain += 1
    assert stood > 300 and plain == 2


def test_an_invisible_character_inside_a_word_is_read_as_extract_reads_it() -> None:
    """A soft hyphen or zero-width space inside a word (text pasted from a web page or a PDF)
    is removed, as extract removes it: the stand-in and ``held_anchors`` find "Kubernetes"."""
    from context_gatekeeper.selection.coverage import _ascii_stand_in, held_anchors

    for char in "\u00ad\u200b\u200c\u200d\u2060\ufeff":
        text = f"Our Kuber{char}netes upgrade \u2014 Friday"
        assert _ascii_stand_in(text) == "Our Kubernetes upgrade ? Friday"
        assert held_anchors("Which Kubernetes version?")(text) == frozenset({"kubernet"})
        assert select_covering("Which Kubernetes version?", [text, BREAD], costs=[5, 5], fallback=False).kept == [0]

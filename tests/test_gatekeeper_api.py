"""ContextGatekeeper's public API: ids, mutation, pinning, budget, errors, odd input."""

from __future__ import annotations

import logging

import pytest

from context_gatekeeper import (
    BudgetError,
    ContextGatekeeper,
    GatekeeperError,
    InvalidInputError,
    InvalidTypeError,
    SelectionParams,
    UnknownTurnError,
)


def words(text: str) -> int:
    """A transparent token counter: one token per whitespace-separated word."""
    return len(text.split())


def make(**kwargs) -> ContextGatekeeper:
    kwargs.setdefault("token_counter", words)
    kwargs.setdefault("message_overhead", 0)
    return ContextGatekeeper(**kwargs)


def test_ids_are_stable_never_reused_and_inserted_turns_sit_in_place() -> None:
    gk = make()
    assert [gk.add_turn(f"question {i}", f"answer {i}") for i in range(3)] == [1, 2, 3]
    gk.remove_turn(2)
    assert gk.add_turn("question 3", "answer 3") == 4
    inserted = gk.insert_turn(1, "inserted question", "inserted answer")
    assert inserted == 5
    assert [t.id for t in gk.turns] == [1, 5, 3, 4]
    first = gk.insert_turn(None, "very first", "")
    assert [t.id for t in gk.turns] == [6, 1, 5, 3, 4] and first == 6


def test_replace_keeps_id_and_position_and_changes_what_is_selected() -> None:
    gk = make()
    gk.add_turn("How do I tune Postgres autovacuum?", "Lower the scale factor.")
    gk.add_turn("What is a good espresso grind?", "Fine, like table salt.")
    before = gk.explain("autovacuum scale factor")
    assert before.scores[0].turn_id == 1 and before.scores[0].reason == "coverage"
    gk.replace_turn(1, user="How do I tune the Linux page cache?", assistant="Adjust vm.dirty_ratio.")
    assert gk.get_turn(1).user == "How do I tune the Linux page cache?"
    assert [t.id for t in gk.turns] == [1, 2]
    after = gk.explain("autovacuum scale factor")
    assert not any(score.covered for score in after.scores), "superseded text still matches"
    assert gk.explain("vm.dirty_ratio page cache").scores[0].turn_id == 1


def test_replace_with_none_keeps_that_part() -> None:
    gk = make()
    gk.add_turn("original question", "original answer")
    gk.replace_turn(1, assistant="revised answer")
    assert (gk.get_turn(1).user, gk.get_turn(1).assistant) == ("original question", "revised answer")


def test_removed_turn_is_never_selected_and_its_id_is_unknown() -> None:
    gk = make()
    gk.add_turn("Kafka consumer lag keeps growing", "Add partitions or consumers.")
    gk.remove_turn(1)
    assert gk.explain("Kafka consumer lag").turn_ids == ()
    with pytest.raises(UnknownTurnError):
        gk.remove_turn(1)


def _held(gk: ContextGatekeeper) -> tuple:
    return [(t.id, t.user, t.assistant) for t in gk.turns], gk.pinned, list(gk._history.labels)


def test_remove_turns_removes_many_at_once_and_drops_their_pins() -> None:
    gk = make()
    ids = [gk.add_turn(f"Kafka partition question {k}", f"answer {k}") for k in range(5)]
    gk.pin(ids[1])
    gone = gk.remove_turns([ids[3], ids[1]])
    assert [t.id for t in gone] == [ids[3], ids[1]]  # in the order given
    assert [t.id for t in gk.turns] == [ids[0], ids[2], ids[4]] and not gk.pinned


@pytest.mark.parametrize("ids", [[1, 99], [2, 2], [1, "2"]])
def test_remove_turns_is_all_or_nothing(ids) -> None:
    gk = make()
    for k in range(3):
        gk.add_turn(f"Redis lock question {k}", f"answer {k}")
    gk.pin(1)
    before = _held(gk)
    with pytest.raises((UnknownTurnError, InvalidInputError)):
        gk.remove_turns(ids)
    assert _held(gk) == before


def test_replace_turns_is_all_or_nothing() -> None:
    gk = make()
    for k in range(3):
        gk.add_turn(f"Redis lock question {k}", f"answer {k}")
    before = _held(gk)
    with pytest.raises(UnknownTurnError):
        gk.replace_turns({1: ("sourdough starter", "feed it"), 99: ("x", "y")})
    with pytest.raises(InvalidTypeError, match="mapping of turn id"):
        gk.replace_turns([(1, ("x", "y"))])  # type: ignore[arg-type]
    assert _held(gk) == before
    gk.replace_turns({1: ("sourdough starter", "feed it"), 3: ("rye flour", "denser")})
    assert [(t.user, t.assistant) for t in gk.turns] == [
        ("sourdough starter", "feed it"), ("Redis lock question 1", "answer 1"), ("rye flour", "denser")]


@pytest.mark.parametrize("bad_id", [0, 99, -1, "1", 1.0, True, None])
def test_unknown_ids_raise_a_named_key_error(bad_id) -> None:
    gk = make()
    gk.add_turn("q", "a")
    for call in (gk.pin, gk.unpin, gk.remove_turn, gk.get_turn, gk.turn_cost, lambda i: gk.replace_turn(i, "x")):
        with pytest.raises(UnknownTurnError) as info:
            call(bad_id)
        assert isinstance(info.value, KeyError) and isinstance(info.value, GatekeeperError)
        assert "add_turn" in str(info.value)


def test_pinned_turns_are_always_kept_and_count_against_the_budget() -> None:
    gk = make(token_budget=30)
    gk.add_turn("Our deploy target is Kubernetes on GKE", "Noted: GKE.")
    gk.add_turn("What wine goes with salmon?", "A Pinot Noir.")
    gk.pin(1)
    selection = gk.explain("wine with salmon")
    assert selection.turn_ids == (1, 2)
    assert selection.pinned_turn_ids == (1,)
    assert selection.tokens_kept == gk.turn_cost(1) + gk.turn_cost(2)
    gk.unpin(1)
    assert gk.explain("wine with salmon").turn_ids == (2,)


def test_a_system_prompt_of_several_messages_is_priced_one_message_each() -> None:
    """Several system messages (an adapter's leading ones) are held as a tuple, each its text's
    count plus one overhead, as they are sent; a blank one costs its overhead; an empty list is
    no prompt; the plain-text prompt keeps each non-blank one."""
    gk = make(token_budget=100, message_overhead=3, system_prompt=["Be brief.", " ", "Cite sources."])
    assert gk.system_prompt == ("Be brief.", " ", "Cite sources.")
    assert gk.pinned_cost() == (2 + 3) + (0 + 3) + (2 + 3)
    gk.summary = ["Earlier: Kafka 3.6.", "Then: retention."]
    assert gk.summary == ("Earlier: Kafka 3.6.", "Then: retention.") and gk.pinned_cost() == 13 + (3 + 3) + (2 + 3)
    gk.add_turn("Kafka retention settings?", "Use retention.ms.")
    selection = gk.explain("Kafka retention.ms default")
    assert selection.system_prompt == gk.system_prompt and selection.tokens_kept == gk.pinned_cost() + gk.turn_cost(1)
    prompt = gk.build_prompt("Kafka retention.ms default")
    assert prompt.startswith("Be brief.\n\nCite sources.\n\nSummary of the earlier conversation:\nEarlier: Kafka 3.6.")
    gk.message_overhead = 1  # every pinned message costed again
    assert gk.pinned_cost() == (2 + 0 + 2 + 3 + 2) + 5
    gk.system_prompt = []
    assert gk.system_prompt is None and gk.pinned_cost() == 5 + 2


@pytest.mark.parametrize("bad, error", [
    (["Be brief.", 3], InvalidTypeError), ([None], InvalidTypeError), (b"Be brief.", InvalidTypeError),
    ({"role": "system"}, InvalidTypeError), (7, InvalidTypeError), ("  ", InvalidInputError),
    ({"Be brief.", "Cite sources."}, InvalidTypeError),  # no order: the messages would move between runs
])
def test_a_refused_system_prompt_changes_nothing(bad: object, error: type[Exception]) -> None:
    gk = make(token_budget=100, system_prompt="Be brief.")
    with pytest.raises(error, match="system_prompt"):
        gk.system_prompt = bad  # type: ignore[assignment]
    with pytest.raises(error, match="summary"):
        gk.summary = bad  # type: ignore[assignment]
    assert gk.system_prompt == "Be brief." and gk.summary is None and gk.pinned_cost() == 2
    with pytest.raises(error, match="system_prompt"):
        make(system_prompt=bad)


def test_system_prompt_and_summary_are_pinned_content() -> None:
    gk = make(token_budget=100, system_prompt="You are terse.")
    gk.summary = "Earlier: the user runs Kafka 3.6."
    gk.add_turn("Kafka retention settings?", "Use retention.ms.")
    selection = gk.explain("Kafka retention.ms default")
    assert selection.system_prompt == "You are terse." and selection.summary.startswith("Earlier")
    assert selection.tokens_kept == words("You are terse.") + words(gk.summary) + gk.turn_cost(1)
    prompt = gk.build_prompt("Kafka retention.ms default")
    assert prompt.startswith("You are terse.") and "Earlier: the user runs Kafka 3.6." in prompt


def test_overflowing_pinned_content_raises_by_default() -> None:
    gk = make(token_budget=5, system_prompt="one two three four five six seven")
    gk.add_turn("q", "a")
    with pytest.raises(BudgetError, match="keep_pinned"):
        gk.explain("anything at all")


def test_keep_pinned_returns_pinned_only_and_warns_once(caplog) -> None:
    gk = make(token_budget=5, system_prompt="one two three four five six seven", on_overflow="keep_pinned")
    gk.add_turn("kafka lag", "add consumers")
    with caplog.at_level(logging.WARNING, logger="context_gatekeeper"):
        first = gk.explain("kafka lag")
        second = gk.explain("kafka lag again")
    assert first.over_budget and second.over_budget
    assert first.turn_ids == () and first.system_prompt is not None
    assert sum("keeping the pinned content only" in r.getMessage() for r in caplog.records) == 1


@pytest.mark.parametrize("budget", [-5, 1.5, "100", True, False])
def test_invalid_budgets_are_budget_errors(budget) -> None:
    with pytest.raises(BudgetError, match="int >= 0") as info:
        ContextGatekeeper(token_budget=budget, token_counter=words)
    assert isinstance(info.value, ValueError)
    gk = make(token_budget=100)
    with pytest.raises(BudgetError, match="int >= 0"):  # a per-call budget follows the same rule
        gk.explain("anything", token_budget=budget)


def test_a_zero_budget_keeps_nothing_but_pinned_content_and_none_means_the_default() -> None:
    gk = make(token_budget=0)
    gk.add_turn("Redis lock TTL?", "Longer than the job.")
    assert gk.explain("Redis lock TTL again?").turn_ids == ()
    assert make(token_budget=None).token_budget == 4000
    wide = make(token_budget=100)
    wide.add_turn("Redis lock TTL?", "Longer than the job.")
    assert wide.explain("Redis lock TTL again?").turn_ids == (1,)
    assert wide.explain("Redis lock TTL again?", token_budget=0).turn_ids == ()


@pytest.mark.parametrize("query", ["", "   ", "\n\t"])
def test_blank_queries_are_rejected(query: str) -> None:
    gk = make()
    gk.add_turn("q", "a")
    for call in (gk.explain, gk.select, gk.build_prompt):
        with pytest.raises(InvalidInputError, match="empty"):
            call(query)


@pytest.mark.parametrize("value", [None, 42, b"bytes", ["list"]])
def test_non_string_input_is_a_type_error(value) -> None:
    gk = make()
    with pytest.raises(TypeError, match="must be a str"):
        gk.add_turn(value, "answer")
    with pytest.raises(TypeError, match="must be a str"):
        gk.add_turn("question", value)
    gk.add_turn("q", "a")
    with pytest.raises(TypeError, match="must be a str"):
        gk.explain(value)


def test_a_turn_needs_some_text_but_either_side_may_be_empty() -> None:
    gk = make()
    with pytest.raises(InvalidInputError):
        gk.add_turn("  ", "")
    assert gk.add_turn("", "Hi! I'm the assistant; ask me anything.") == 1
    assert gk.add_turn("A question with no written answer", "") == 2
    with pytest.raises(TypeError, match="single string"):
        gk.add_turn("q", "a", tool_texts="not a list")


def test_unknown_keyword_and_bad_options_are_rejected_up_front() -> None:
    with pytest.raises(TypeError, match="unexpected keyword"):
        ContextGatekeeper(token_budget=10, tokn_budget=5)
    with pytest.raises(ValueError, match="on_overflow"):
        ContextGatekeeper(on_overflow="drop")
    with pytest.raises(ValueError, match="message_overhead"):
        ContextGatekeeper(message_overhead=-1)
    with pytest.raises(ValueError, match="top_m"):
        ContextGatekeeper(top_m=0)
    assert ContextGatekeeper(coverage_target=0.5, token_counter=words).params.coverage_target == 0.5


def test_params_override_keywords_and_object() -> None:
    base = SelectionParams(top_m=7)
    gk = ContextGatekeeper(params=base, recency_weight=0.0, token_counter=words)
    assert gk.params.top_m == 7 and gk.params.recency_weight == 0.0


def test_assigning_params_segments_the_turns_again_as_a_gatekeeper_built_with_them() -> None:
    turns = [("How do I renew a Redis lock TTL?", "With a watchdog thread that extends the expiry."),
             ("What grind for espresso in a V60?", "Medium fine, like table salt."),
             ("And how long should the lock TTL be?", "Longer than the longest job."),
             ("Which espresso beans roast?", "A light roast.")]
    other = SelectionParams(topic_affinity=0.9, topic_lookback=1, max_query_chars=12)
    live = make(token_budget=2000)
    for turn in turns[:2]:
        live.add_turn(*turn)
    before = live.segments()
    live.params = other
    for turn in turns[2:]:
        live.add_turn(*turn)
    built = make(token_budget=2000, params=other)
    for turn in turns:
        built.add_turn(*turn)
    assert live.params is other and before == [(1,), (2,)]
    assert live.segments() == built.segments() == [(1,), (2,), (3,), (4,)]  # a chain by default: [(1, 3), (2, 4)]
    query = "how long is the redis lock ttl?"
    assert (live.explain(query).turn_ids, live.explain(query).topic) == (built.explain(query).turn_ids, built.explain(query).topic)


def test_params_must_be_selection_params_and_a_refused_assignment_changes_nothing() -> None:
    gk = make()
    gk.add_turn("How do I renew a Redis lock TTL?", "With a watchdog.")
    params = gk.params
    with pytest.raises(GatekeeperError, match="SelectionParams"):
        gk.params = {"top_m": 3}  # type: ignore[assignment]
    assert gk.params is params


def test_a_token_counter_failing_on_a_new_system_prompt_leaves_the_old_prompt_and_its_cost() -> None:
    def counter(text: str) -> int:
        if "BOOM" in text:
            raise RuntimeError("tokenizer failed")
        return words(text)

    gk = make(token_budget=100, token_counter=counter, system_prompt="be brief")
    gk.add_turn("How do I renew a Redis lock TTL?", "With a watchdog.")
    kept = gk.explain("redis lock ttl?").tokens_kept
    with pytest.raises(RuntimeError, match="tokenizer failed"):
        gk.system_prompt = "BOOM " + "word " * 500
    with pytest.raises(RuntimeError, match="tokenizer failed"):
        gk.summary = "BOOM"
    assert (gk.system_prompt, gk.summary) == ("be brief", None)
    assert gk.explain("redis lock ttl?").tokens_kept == kept


def test_turn_cost_counts_text_tools_and_per_message_overhead() -> None:
    gk = make(message_overhead=3)
    turn_id = gk.add_turn("one two", "three", tool_texts=["four five six"])
    assert gk.turn_cost(turn_id) == words("one two") + words("three") + words("four five six") + 3 * 3


def test_cost_of_prices_and_checks_texts_as_add_turn_does() -> None:
    gk = make(message_overhead=3)
    added = gk.add_turn("one two", "three", tool_texts=["four five"])
    assert gk.cost_of("one two", "three", ["four five"]) == gk.turn_cost(added)
    for bad in ("a single string", [None], 5):
        with pytest.raises(GatekeeperError):
            gk.cost_of("one", "two", bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        gk.cost_of("", "")  # add_turn refuses a turn with no text


def test_each_text_of_a_turn_is_counted_as_the_message_it_is_sent_as() -> None:
    """A counter that rounds up per text (about four characters a token): twenty small tool
    messages cost what each costs, not what their joined text costs (11% less: a selection
    went over its budget)."""
    gk = ContextGatekeeper(token_budget=1000, token_counter=lambda text: -(-len(text) // 4), message_overhead=0)
    tools = [f"ok {n}" for n in range(10, 30)]  # five characters: two tokens each, 1.2 joined
    turn_id = gk.add_turn("Run the checks", "All passed.", tool_texts=tools)
    count = gk.options.count
    each = sum(count(t) for t in ["Run the checks", "All passed.", *tools])
    assert gk.turn_cost(turn_id) == each > count("\n".join(["Run the checks", "All passed.", *tools]))


def test_a_one_megabyte_message_is_indexed_and_selected() -> None:
    gk = ContextGatekeeper(token_budget=10**7)
    big = ("lorem ipsum dolor sit amet 锁续租 " * 40_000)[:1_000_000]
    turn_id = gk.add_turn(big, "noted")
    gk.add_turn("unrelated espresso question", "grind finer")
    assert gk.turn_cost(turn_id) > 100_000
    assert turn_id in gk.explain("lorem ipsum dolor").turn_ids
    as_query = gk.explain(big)  # only the head of a huge query is read for anchors and cues
    assert as_query.query == big and turn_id in as_query.turn_ids


def test_mixed_scripts_and_emoji_work() -> None:
    gk = make()
    gk.add_turn("🚀 部署 Kubernetes 集群 with Helm 3.14 😀", "用 helm upgrade --install 😀")
    gk.add_turn("Привет, как настроить nginx?", "Используйте proxy_pass.")
    assert gk.explain("Helm 3.14 部署").turn_ids[0] == 1
    assert 2 in gk.explain("nginx proxy_pass настроить").turn_ids
    assert gk.explain("😀😀").decision == "continue"  # no anchors: nothing to switch on


def test_empty_history_selects_nothing() -> None:
    selection = make().explain("anything")
    assert selection.turn_ids == () and selection.tokens_total == 0 and selection.decision == "switch"


def test_clear_removes_turns_but_ids_keep_counting() -> None:
    gk = make()
    gk.add_turn("a question", "an answer")
    gk.clear()
    assert len(gk) == 0 and gk.segments() == []
    assert gk.add_turn("next", "one") == 2


def test_scores_explain_every_kept_turn() -> None:
    gk = make(token_budget=1000)
    gk.add_turn("Postgres VACUUM FULL locks the table?", "Yes, an ACCESS EXCLUSIVE lock.")
    gk.add_turn("Best pizza dough hydration?", "About 65%.")
    selection = gk.explain("does VACUUM FULL lock the table")
    kept = {s.turn_id: s for s in selection.scores if s.kept}
    assert set(kept) == set(selection.turn_ids) == {1}
    score = kept[1]
    assert score.total == pytest.approx(score.user + score.assistant + score.exact + score.recency)
    assert score.reason == "coverage" and "vacuum" in score.covered


def test_a_per_call_budget_overrides_the_default_for_that_call_only() -> None:
    gk = make(token_budget=1000)
    gk.add_turn("Kafka consumer lag grows during rebalances", "Use the cooperative-sticky assignor.")
    gk.add_turn("Kafka partitions for a new topic?", "Start with 12.")
    wide = gk.explain("Kafka consumer lag partitions")
    narrow = gk.explain("Kafka consumer lag partitions", token_budget=gk.turn_cost(1))
    assert len(wide.turn_ids) == 2 and len(narrow.turn_ids) == 1 and narrow.tokens_kept <= gk.turn_cost(1)
    assert gk.token_budget == 1000 and gk.explain("Kafka consumer lag partitions") == wide
    with pytest.raises(BudgetError):
        gk.explain("Kafka", token_budget="10")  # type: ignore[arg-type]


def test_excluded_turns_are_not_selected_and_leave_their_budget_to_others() -> None:
    gk = make(token_budget=1000)
    gk.add_turn("Redis lock TTL sizing?", "Longer than the job.")
    gk.add_turn("Redis lock renewal?", "A watchdog.")
    selection = gk.explain("Redis lock renewal?", exclude=[2], token_budget=gk.turn_cost(1))
    assert selection.turn_ids == (1,)
    assert 2 not in {s.turn_id for s in selection.scores}


def test_select_and_build_prompt_keep_the_turns_explain_keeps_without_its_report() -> None:
    """``select`` and ``build_prompt`` skip building explain's per-turn records, and nothing
    else: the same turns, in the same order, for queries that continue, switch and return."""
    gk = make(token_budget=60)
    chat = [
        ("How long should a Redis lock TTL be?", "Longer than the longest job holding the lock."),
        ("What grind size for a moka pot?", "Fine, a little coarser than espresso."),
        ("Does the Redis lock need a watchdog?", "Yes: renew the TTL while the job runs."),
        ("How hot should the moka pot water be?", "Just off the boil, preheated."),
        ("And the fencing token for the Redis lock?", "Increase it per acquisition and check it in storage."),
    ]
    for user, assistant in chat:
        gk.add_turn(user, assistant)
    for query in ("What about the Redis lock TTL again?", "moka pot grind?", "By the way, what is a B-tree?", "it"):
        selection = gk.explain(query)
        assert bool(selection.scores) == bool(selection.turn_ids)  # explain reports the kept turns
        assert [t["turn_id"] for t in gk.select(query)] == list(selection.turn_ids)
        assert gk.build_prompt(query) == selection.as_prompt({t.id: t for t in gk.turns})
        light = gk._select_for(query, None, frozenset(), None, records=False)
        assert light.scores == () and light.active_segment == () and light.matched_segment == ()
        assert (light.turn_ids, light.decision, light.coverage) == (selection.turn_ids, selection.decision, selection.coverage)


def test_a_dropped_gatekeeper_is_freed_at_once_with_its_index() -> None:
    # its history must not hold the gatekeeper back (a reference cycle would keep a dropped
    # gatekeeper, and every turn's index entries, until the next cyclic collection)
    import gc
    import weakref

    gatekeeper = make(token_budget=100)
    gatekeeper.add_turn("How do I rotate the API keys?", "Use the rotate command.")
    gone, history = weakref.ref(gatekeeper), weakref.ref(gatekeeper._history)
    enabled = gc.isenabled()
    gc.disable()
    try:
        del gatekeeper
        assert gone() is None and history() is None
    finally:
        if enabled:
            gc.enable()


def state(gk: ContextGatekeeper) -> tuple:
    """What a gatekeeper holds that a call could change: turns, costs, labels, pins, budget."""
    history = gk._history
    return (gk.turns, dict(history.costs), history.total_cost, list(history.labels), gk.pinned, gk.token_budget,
            gk.message_overhead, dict(gk._fixed_costs))


@pytest.mark.parametrize("call, hint", [
    (lambda gk: gk.select("redis", exclude=None), "exclude must be an iterable of turn ids"),
    (lambda gk: gk.explain("redis", exclude=3), "exclude must be an iterable of turn ids"),
    (lambda gk: gk.build_prompt("redis", exclude=["1"]), "exclude must be an iterable of turn ids"),
    (lambda gk: gk.explain("redis", exclude=[[1]]), "exclude must be an iterable of turn ids"),
    (lambda gk: __import__("asyncio").run(gk.aselect("redis", exclude=None)), "exclude must be an iterable"),
    (lambda gk: __import__("asyncio").run(gk.abuild_prompt("redis", exclude=5)), "exclude must be an iterable"),
    (lambda gk: gk.add_turn("u", "a", tool_texts=None), "tool_texts must be an iterable of strings"),
    (lambda gk: gk.insert_turn(None, "u", tool_texts=5), "tool_texts must be an iterable of strings"),
    (lambda gk: gk.replace_turn(1, "u", tool_texts=7), "tool_texts must be an iterable of strings"),
    (lambda gk: gk.insert_turns(None, None), "turns must be an iterable of"),
    (lambda gk: gk.insert_turns(None, 3), "turns must be an iterable of"),
])
def test_wrong_types_are_the_librarys_type_error_and_change_nothing(call, hint) -> None:
    from context_gatekeeper import InvalidTypeError

    gk = make()
    gk.add_turn("redis lock", "ttl")
    before = state(gk)
    with pytest.raises(InvalidTypeError, match=hint):
        call(gk)
    assert state(gk) == before


def test_an_encode_that_returns_no_tokens_is_the_librarys_type_error() -> None:
    from context_gatekeeper import InvalidTypeError

    class Mistaken:  # a tokenizer wrapped so that encode() returns nothing
        def encode(self, text):
            return None

    gk = ContextGatekeeper(token_counter=Mistaken())
    with pytest.raises(InvalidTypeError, match=r"Mistaken.encode\(\) returned NoneType"):
        gk.add_turn("redis lock", "ttl")
    assert len(gk) == 0


@pytest.mark.parametrize("budget", [None, "2000", -10, 2.5, True])
def test_an_assigned_budget_is_checked_as_the_constructors(budget) -> None:
    gk = make(token_budget=100)
    gk.add_turn("redis lock ttl", "renew with a watchdog")
    with pytest.raises(BudgetError, match="int >= 0"):
        gk.token_budget = budget
    assert gk.token_budget == 100
    gk.token_budget = 0
    assert gk.explain("redis lock").turn_ids == () and gk.token_budget == 0


def test_an_assigned_message_overhead_costs_everything_again_as_a_fresh_build() -> None:
    gk = make(token_budget=2000, message_overhead=3, system_prompt="be brief")
    gk.summary = "we talked about locks"
    for turn in [("redis lock ttl", "renew with a watchdog"), ("espresso grind", "fine")]:
        gk.add_turn(*turn)
    gk.add_turn("run it", "done", tool_texts=["log line one", "log line two"])
    for bad in (-100, 1.5, "3", None, True):
        before = state(gk)
        with pytest.raises(InvalidInputError, match="message_overhead must be an int >= 0"):
            gk.message_overhead = bad
        assert state(gk) == before
    gk.message_overhead = 7
    fresh = make(token_budget=2000, message_overhead=7, system_prompt="be brief")
    fresh.summary = "we talked about locks"
    for turn in gk.turns:
        fresh.add_turn(turn.user, turn.assistant, tool_texts=turn.tool_texts)
    assert state(gk) == state(fresh)
    assert gk.explain("redis lock ttl").tokens_kept == fresh.explain("redis lock ttl").tokens_kept


def test_a_counter_failing_while_costing_again_leaves_the_old_costs() -> None:
    fail = []

    def counter(text: str) -> int:
        if fail:
            raise RuntimeError("tokenizer failed")
        return words(text)

    gk = make(token_budget=100, token_counter=counter, message_overhead=2, system_prompt="be brief")
    gk.add_turn("redis lock ttl", "renew with a watchdog")
    before = state(gk)
    fail.append(True)
    with pytest.raises(RuntimeError, match="tokenizer failed"):
        gk.message_overhead = 5
    assert state(gk) == before


@pytest.mark.parametrize("name", ["system_prompt", "summary"])
def test_pinned_text_is_priced_with_an_overhead_assigned_while_it_is_counted(name) -> None:
    """The text of a system prompt or summary is counted outside the lock; an overhead assigned
    meanwhile (here by the counter itself, in this thread: no timing) costs only the old text
    again, so the new one is charged the overhead current when it is stored, not the old one:
    priced with the old overhead it made selections go over the budget unflagged."""
    assigned = []

    def counter(text: str) -> int:
        if text == "SYSTEM PROMPT" and not assigned:
            assigned.append(True)
            gk.message_overhead = 40  # lands while the new text is being counted
        return words(text)

    gk = make(token_budget=100, token_counter=counter, message_overhead=0)
    setattr(gk, name, "SYSTEM PROMPT")
    assert assigned and gk.message_overhead == 40
    assert gk.pinned_cost() == 2 + 40  # two words, one message
    fresh = make(token_budget=100, message_overhead=40)
    setattr(fresh, name, "SYSTEM PROMPT")
    assert state(gk)[-1] == state(fresh)[-1]
    gk.add_turn("alpha beta gamma", "delta")  # 4 words + 2 * 40: does not fit beside the prompt
    selection = gk.explain("alpha beta gamma")
    assert selection.turn_ids == () and selection.tokens_kept == 42 <= gk.token_budget


@pytest.mark.parametrize("bad", [None, 3, "12", b"1"])
def test_remove_turns_refuses_what_is_no_list_of_ids(bad) -> None:
    gk = make()
    for k in range(3):
        gk.add_turn(f"Redis lock question {k}", f"answer {k}")
    before = _held(gk)
    with pytest.raises(InvalidTypeError, match=r"turn_ids must be an iterable of turn ids .*pass e\.g\. \[3, 4\]"):
        gk.remove_turns(bad)
    assert _held(gk) == before


def test_extra_stopwords_written_as_users_write_them_are_ignored() -> None:
    """"Acme", "caching" and "containers" are stemmed as anchors ("acm", "cach", "container"):
    the stopwords match them as written, so an old turn sharing only them is not pulled in."""
    turns = [("Acme caching containers question about billing", "Acme billing answer"),
             ("How do I bake sourdough bread?", "Use a starter and a long proof."),
             ("And the oven temperature?", "About 250 C with steam.")]
    kept = {}
    for stopwords in (frozenset(), frozenset({"Acme", "caching", "containers"})):
        gk = make(extra_stopwords=stopwords)
        gk.insert_turns(None, turns)
        selection = gk.explain("Acme caching containers for my bakery?")
        kept[stopwords] = (selection.turn_ids, {score.turn_id: score.covered for score in selection.scores})
    assert kept[frozenset()] == ((1,), {1: ("acm", "cach", "container")})
    assert 1 not in kept[frozenset({"Acme", "caching", "containers"})][0]
    assert not any(kept[frozenset({"Acme", "caching", "containers"})][1].values())


def copy_state(gk: ContextGatekeeper) -> tuple:
    """Everything a user of a gatekeeper can read of it."""
    return (state(gk), gk.segments(), gk.topics(), gk.system_prompt, gk.summary, gk.on_overflow, gk.params,
            gk.pinned_cost(), len(gk))


def test_a_copy_is_independent_and_selects_exactly_as_the_original() -> None:
    import copy

    gk = make(token_budget=60, system_prompt="Answer briefly.")
    gk.insert_turns(None, [("How do I size a Redis lock TTL?", "Longer than the longest job."),
                           ("What is a Python TaskGroup?", "An asyncio scope that cancels its siblings."),
                           ("And the watchdog for the Redis lock?", "It renews the TTL."),
                           ("Best espresso grind?", "Fine, like table salt.")])
    gk.remove_turn(2)
    gk.insert_turn(1, "Does the Redis lock need a fencing token?", "Yes, against a paused client.")  # id 5, 2nd
    gk.add_turn("And for a moka pot?", "Medium-fine.", tool_texts=("grind chart",))
    gk.remove_turn(gk.add_turn("A turn taken back", "gone"))  # id 7: never issued again, in a copy either
    gk.pin(3)
    gk.summary = "Earlier: setting up a cache."
    gk.token_budget, gk.message_overhead, gk.on_overflow = 80, 1, "keep_pinned"
    gk.params = gk.params.with_(top_m=5)
    before = copy_state(gk)
    queries = ["How often should the watchdog renew the Redis lock?", "Why?", "By the way, what about tea?",
               "and the espresso grind again?"]
    pair = copy.deepcopy([gk, gk])
    assert pair[0] is pair[1]  # one copy, as deepcopy promises for one object met twice
    for copied in (copy.copy(gk), copy.deepcopy(gk), pair[0]):
        assert type(copied) is ContextGatekeeper and copied._history is not gk._history
        assert copied.options is gk.options and copied._count is gk._count  # the counter object is shared
        assert copy_state(copied) == before
        assert [t.id for t in copied.turns] == [1, 5, 3, 4, 6] and copied.pinned == (3,)
        for query in queries:
            assert copied.explain(query) == gk.explain(query)
            assert copied.build_prompt(query) == gk.build_prompt(query)
        assert copied.add_turn("What about the lock's TTL now?", "Still the longest job.") == 8
        copied.remove_turn(1)
        copied.unpin(3)
        copied.system_prompt = None
        copied.params = copied.params.with_(top_m=2)
        assert copy_state(gk) == before  # the original never changes with its copy
    again = copy.deepcopy(gk)
    gk.pin(5)
    gk.replace_turn(3, assistant="It renews the TTL every third of it.")
    assert again.pinned == (3,) and again.get_turn(3).assistant == "It renews the TTL."
    assert gk.add_turn("next", "one") == again.add_turn("next", "one") == 8


def test_a_copy_keeps_the_turns_vectors_and_shares_the_embedder() -> None:
    import copy

    calls: list[list[str]] = []

    def embed(texts: list[str]) -> list[list[float]]:  # a scripted embedder: letters counted
        calls.append(list(texts))
        return [[float(text.lower().count(c)) + 0.1 for c in "aeiorstlnk"] for text in texts]

    gk = make(embedder=embed, system_prompt="Be brief.")
    gk.insert_turns(None, [("How do I size a Redis lock TTL?", "Longer than the longest job."),
                           ("What is a Python TaskGroup?", "An asyncio scope that cancels its siblings."),
                           ("And the watchdog for the Redis lock?", "It renews the TTL."),
                           ("Best espresso grind?", "Fine, like table salt.")])
    gk.pin(2)
    gk.embed_pending()
    embedded = len(calls)
    copied = copy.deepcopy(gk)
    for query in ("How often should the watchdog renew the Redis lock?", "and the grind?"):
        assert copied.explain(query) == gk.explain(query)
    assert copied.embedder is gk.embedder and copied.embed_pending() == 0
    assert len(calls) == embedded + 2 * 2  # each query embedded once per gatekeeper, and no turn again


def test_a_copy_takes_in_a_removal_and_keeps_no_vector_of_a_turn_it_does_not_hold() -> None:
    """A turn removed since the last selection, while the embedder backs off (so no background
    pass takes the removal in): the copy holds neither the turn nor its vector, and selects
    (the vector of a turn it does not hold raised KeyError in fusion)."""
    import copy

    from context_gatekeeper.selection.semantic.runner import forget_outages, state_of

    class Letters:  # a scripted embedder: letters counted, with a model name
        model = "letters-copy-test"

        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            return [self.embed_query(text) for text in texts]

        def embed_query(self, text: str) -> list[float]:
            return [float(text.lower().count(c)) + 0.1 for c in "aeiorstlnkpcbh"]

    gk = make(embedder=Letters())
    for user, assistant in [("I baked a peach cobbler yesterday", "Sounds lovely, fresh peaches?"),
                            ("My car needs new tires", "Check the tread depth first."),
                            ("We went hiking in the alps", "The views must have been great."),
                            ("Work has been stressful lately", "Try to take breaks."),
                            ("I read a novel about pirates", "Which one?")]:
        gk.add_turn(user, assistant)
    gk.embed_pending()
    state = state_of(gk.embedder)
    try:
        state.failed(ConnectionError("503"), gk.embedder.name)  # backing off: nothing takes the removal in
        gk.remove_turn(1)
        for copied in (copy.deepcopy(gk), copy.copy(gk)):
            assert [t.id for t in copied.turns] == [2, 3, 4, 5]
            assert sorted(copied._semantic.vectors.ids) == [2, 3, 4, 5]
            forget_outages()  # the service is back: the copy's query is embedded
            selection = copied.explain("peach cobbler baked fresh peaches")
            assert not selection.semantic_fallback and 1 not in selection.turn_ids
            state.failed(ConnectionError("503"), gk.embedder.name)
        assert sorted(gk._semantic.vectors.ids) == [2, 3, 4, 5]  # the original took it in too
    finally:
        forget_outages()


def test_an_empty_copy_has_the_current_settings_and_nothing_else() -> None:
    """empty_copy: the settings as assigned since the gatekeeper was built (budget, overhead,
    on_overflow, params), no turns, pins, system prompt or summary; ``options`` stays what it
    was built with (the recipe ContextGatekeeper(options=gk.options) lost the assigned ones)."""
    gk = make(token_budget=500, message_overhead=0)
    gk.add_turn("How do I size a Redis lock TTL?", "Longer than the longest job.")
    gk.pin(1)
    gk.system_prompt, gk.summary = "Be brief.", "Redis locks."
    gk.token_budget, gk.message_overhead, gk.on_overflow = 200, 10, "keep_pinned"
    gk.params = gk.params.with_(fill_ratio=0.0)
    empty = gk.empty_copy()
    assert (empty.token_budget, empty.message_overhead, empty.on_overflow) == (200, 10, "keep_pinned")
    assert empty.params == gk.params and empty.options is gk.options
    assert len(empty) == 0 and not empty.pinned and empty.system_prompt is None and empty.summary is None
    assert gk.options.token_budget == 500  # what it was built with


def test_a_gatekeeper_refuses_pickling_and_says_how_to_rebuild_one() -> None:
    import pickle

    from context_gatekeeper import InvalidTypeError

    for gk in (make(), ContextGatekeeper()):  # a plain function as counter, and the default tiktoken one
        gk.add_turn("How do I size a Redis lock TTL?", "Longer than the longest job.")
        gk.pin(1)
        before = state(gk)
        with pytest.raises(InvalidTypeError, match="cannot be pickled.*insert_turns.*copy.deepcopy") as refused:
            pickle.dumps(gk)
        assert isinstance(refused.value, TypeError) and state(gk) == before
        rebuilt = gk.empty_copy()  # the recipe the message gives
        rebuilt.insert_turns(None, [(t.user, t.assistant, t.tool_texts) for t in gk.turns])
        rebuilt.pin(1)
        assert rebuilt.explain("redis lock ttl?") == gk.explain("redis lock ttl?")

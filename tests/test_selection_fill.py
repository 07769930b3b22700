"""The default evidence fill (``SelectionParams.fill_ratio``, ``fill_min_share``,
``fill_min_words``): a strong match is kept even when an earlier pick already covered its
words, and one shared word is never enough."""

from __future__ import annotations

from context_gatekeeper import ContextGatekeeper, SelectionParams

FILLER = [
    ("How do I repot a fiddle-leaf fig without shocking it?", "Water a day before and keep the root ball intact."),
    ("What is a good budget for a week in Lisbon?", "About 80 to 120 euros a day covers a mid-range stay."),
    ("Why does my sourdough come out dense?", "Usually an underactive starter or too short a bulk rise."),
    ("Which tyres suit winter driving in Norway?", "Studded or Nordic winter tyres with the snowflake mark."),
    ("How should I store espresso beans?", "Airtight, away from light, and use them within a month."),
    ("Can a goldfish tank go without a filter?", "Not for long: ammonia builds up quickly without one."),
    ("What is the capital gains rate on index funds?", "It depends on your bracket and how long you held them."),
    ("How many sets should a beginner deadlift?", "Three sets of five with good form is a fine start."),
    ("Is a heat pump worth it in a cold climate?", "Modern cold-climate models work well below freezing."),
    ("How do I get wax out of a carpet?", "Freeze it, scrape, then iron through a paper towel."),
    ("Which telescope for viewing Saturn's rings?", "A 100 mm refractor or a 6 inch Dobsonian shows them."),
    ("What knots should a new sailor learn first?", "Bowline, cleat hitch, figure eight and a reef knot."),
    ("How do I stop a cat scratching the sofa?", "Give it a sturdy post nearby and cover the corners."),
]
TURNS = [
    ("Melanie told me she started violin lessons with her daughter.", "That sounds like a lovely hobby to share."),
    *FILLER,
    ("Melanie played violin at the school concert on Friday.", "She must have practised a lot for that."),
]
FIRST, LAST = 1, len(TURNS)


def chat(**options: object) -> ContextGatekeeper:
    gk = ContextGatekeeper(token_budget=1000, **options)  # type: ignore[arg-type]
    for user, assistant in TURNS:
        gk.add_turn(user, assistant)
    return gk


def test_a_strong_match_is_kept_when_an_earlier_pick_covered_its_words():
    query = "How often does Melanie play violin?"
    selection = chat().explain(query)
    assert {FIRST, LAST} <= set(selection.turn_ids), selection.scores
    no_fill = chat(fill_ratio=1.0).explain(query)  # minimum coverage alone keeps one of them
    assert len({FIRST, LAST} & set(no_fill.turn_ids)) == 1, no_fill.scores
    fills = [s for s in selection.scores if s.kept and s.reason == "fill"]
    assert fills and all(s.evidence.fill and len(set(s.evidence.covered)) >= 2 for s in fills)


def test_one_shared_word_is_not_evidence_for_the_fill():
    assert SelectionParams().fill_min_words == 2
    query = "Is violin hard?"
    kept = set(chat().explain(query).turn_ids)
    assert len({FIRST, LAST} & kept) <= 1
    assert {FIRST, LAST} <= set(chat(fill_min_words=1).explain(query).turn_ids)


def test_the_recall_preset_fills_as_before():
    params = SelectionParams.preset("recall")
    assert (params.fill_ratio, params.fill_min_share, params.fill_min_words) == (0.0, 0.1, 0)

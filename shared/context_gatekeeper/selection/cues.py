"""Discourse cues: words that say how a query relates to the conversation.

* reference cues ("它", "这个", "it", "the above"): the query leans on what came just before;
* switch cues ("换个话题", "by the way", "另外"): the user announces a new topic, or sets
  the current one aside ("never mind that", "先不管这个了");
* return cues ("回到", "back to"): the user goes back to an earlier topic.

Matching is on the normalised text (:func:`anchors.normalise`: NFKC, invisible characters
such as a zero-width space removed, case-folded); English cues match whole
words only, Chinese cues match as substrings.

Cues steer the gate; they are never content.  :func:`strip_cues` returns the cues
of a message together with its text with every cue blanked out, and that text is
what the message's content anchors come from, so "back to the moka pot" never
matches a turn on "back", and "回到刚才的锁" matches on "锁" alone.

Precedence (applied by :func:`gate.decide`): a return cue with a matching earlier
topic returns; a *pronoun* reference cue ("it", "这个") in a message that brings
little new content holds the active topic even beside a switch cue ("By the way,
is it thread-safe?" continues); a switch cue with new content switches.  "what
about" and "how about" are reference cues too, but they introduce what follows,
so they never outweigh a switch cue.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .anchors import trie_pattern, visible

__all__ = [
    "Cues",
    "find_cues",
    "strip_cues",
    "REFERENCE_CUES",
    "SWITCH_CUES",
    "RETURN_CUES",
    "INTRODUCING_CUES",
]

REFERENCE_CUES: tuple[str, ...] = (
    "这个", "那个", "这些", "那些", "这种", "那种", "这家", "那家", "这里", "那里", "这样", "上面", "上述",
    "前面", "刚才", "它", "它们", "其中", "那边", "这边", "这玩意", "这玩意儿", "这东西", "那东西",
    "it", "its", "it's", "this", "that", "these", "those", "they", "them", "their", "theirs",
    "he", "him", "his", "she", "her", "the above", "above", "the same", "there", "such",
    "a new one", "the one", "which one", "this one", "that one", "what about", "how about", "and what about",
    "same one", "the former", "the latter", "那它", "它呢", "这点", "那点", "这一步", "那一步",
)
"""Pronouns and demonstratives that point back.  "前者" / "后者" (the former / the latter) and
"她" / "他" are left out on purpose: a reference leans on the latest turn, and in the tuning
half's chats all four queries with "前者" / "后者" reach past it ("那前者一般要提前多久开始准备？"
after a detour), so as cues they sent queries to the wrong topic (hard set @300, half A, with
"前者" / "后者" alone: recall 0.398 -> 0.387, off-topic 0.115 -> 0.123; with the personal
pronouns too, and the embedder's preference refitted, see ``benchmarks/fit_semantic.py``)."""
INTRODUCING_CUES: frozenset[str] = frozenset({"what about", "how about", "and what about"})
"""Reference cues that introduce new content rather than point back at old: they hold
the topic for a short follow-up, but never outweigh a switch cue."""
SWITCH_CUES: tuple[str, ...] = (
    "换个话题", "换个问题", "换一个话题", "另外", "顺便", "顺便问", "顺便问下", "顺便问一下", "题外话", "说点别的",
    "聊点别的", "另一个问题", "换个方向", "问个别的", "问点别的", "插个话", "插一句", "跟这个无关", "和这个无关",
    "换个事儿", "跟这个没关系", "和这个没关系", "跟刚才的无关", "和刚才的无关", "跟刚才无关", "和刚才无关",
    "by the way", "btw", "on another note", "on a different note", "changing the subject",
    "change of topic", "different topic", "another question", "unrelated", "switching gears",
    "new topic", "moving on", "let's talk about", "switching topic", "switching topics",
    "change the topic", "another topic", "different question", "anyway", "anyways", "random question",
    "side question", "unrelated question", "totally unrelated", "off topic", "off-topic", "separate question",
    "something else", "also unrelated", "quick unrelated question", "on an unrelated note",
    "different thing", "totally different", "something different", "completely different",
    # closings: the user sets the current topic aside ("never mind that, ...")
    # (only phrases that say so whatever follows: "forget it", "drop that" or "先放一放" also
    # occur inside technical follow-ups: "can I just forget it during the load?")
    "never mind", "nevermind", "never mind that", "nevermind that", "never mind this", "never mind about that",
    "forget about that", "let's drop that", "enough about that", "let's leave that", "scratch that",
    "先不管这个", "不管这个了", "不说这个了", "不聊这个了", "先不说这个", "先不聊这个", "这个先放一放", "先不提这个",
)
RETURN_CUES: tuple[str, ...] = (
    "回到", "再回到", "说回", "再说回", "回头说", "之前说的", "之前提到", "前面说的", "前面提到", "回到刚才",
    "还是说回", "再聊回", "聊回", "刚才那个", "刚才说的", "之前那个", "前面那个",
    "back to", "going back", "coming back", "earlier you said", "you mentioned earlier", "as we discussed",
    "returning to", "go back to", "get back to", "circling back", "circle back", "revisit", "revisiting",
    "again about", "you said before", "as you said before",
)


@dataclass(frozen=True)
class Cues:
    """The cues found in one text, each kind in order of appearance."""

    reference: tuple[str, ...] = ()
    switch: tuple[str, ...] = ()
    returning: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.reference or self.switch or self.returning)

    @property
    def points_back(self) -> bool:
        """A reference cue that points at what came before ("it", "这个"), not one that
        introduces what follows ("what about", :data:`INTRODUCING_CUES`)."""
        return any(cue not in INTRODUCING_CUES for cue in self.reference)


_CJK_NOT_AFTER = {"它": "其"}
"""Chinese cues that are part of a longer word after this character ("其它" = "other")."""


_KINDS: dict[str, tuple[str, ...]] = {}
for _kind, _cues in (("reference", REFERENCE_CUES), ("switch", SWITCH_CUES), ("returning", RETURN_CUES)):
    for _cue in _cues:
        _KINDS[_cue] = _KINDS.get(_cue, ()) + (_kind,)
_CUES = re.compile(
    r"(?<![\w'])(?i:" + trie_pattern([c for c in _KINDS if c.isascii()]) + r")(?!\w)"  # "that's" holds "that"
    + "|" + trie_pattern([c for c in _KINDS if not c.isascii()])
)
"""Every cue in one pattern: English cues as whole words in any case, Chinese as substrings."""
_ASCII_CUES = re.compile(r"[^\w'](" + trie_pattern([c for c in _KINDS if c.isascii()]) + r")(?!\w)", re.ASCII)
""":data:`_CUES` for ASCII text lower-cased and led by a space (the English cues are lower case;
lowering ASCII keeps every position, and no Chinese cue can match): group 1 is a match of
:data:`_CUES`, one position on.  The case-sensitive trie is scanned about three times faster,
and the character before a cue, matched rather than looked behind at, lets the engine skip
to the next character that is no letter, digit, "_" or "'" (about a third faster again);
``re.ASCII`` reads those classes from a byte table (the same classes on ASCII text)."""


def _canonical(matched: str) -> str:
    """The listed cue a case-insensitive match stands for: "İt" and "It" are "it"
    (``casefold`` turns "İ" into "i" plus a combining dot, the regex engine into "i")."""
    return matched.casefold().replace("i\u0307", "i").replace("\u0131", "i")


def _scan(text: str) -> tuple[Cues, list[tuple[int, int]]]:
    """The cues of ``text`` (each kind in order of appearance, each cue once) and their spans."""
    found: dict[str, dict[str, None]] = {"reference": {}, "switch": {}, "returning": {}}
    spans: list[tuple[int, int]] = []
    if text.isascii():  # every match is a listed cue as written (lower case): no canonical form to find
        for match in _ASCII_CUES.finditer(" " + text.lower()):
            cue = match.group(1)
            start, end = match.span(1)
            spans.append((start - 1, end - 1))  # (the text was led by a space)
            for kind in _KINDS[cue]:
                found[kind][cue] = None
    else:
        for match in _CUES.finditer(text):
            cue = _canonical(match.group(0))
            before = _CJK_NOT_AFTER.get(cue[0])
            if cue not in _KINDS or (before is not None and match.start() > 0 and text[match.start() - 1] == before):
                continue
            spans.append(match.span())
            for kind in _KINDS[cue]:
                found[kind][cue] = None
    return Cues(tuple(found["reference"]), tuple(found["switch"]), tuple(found["returning"])), spans


def find_cues(normalised_text: str) -> Cues:
    """Find the cues in a text already passed through :func:`anchors.normalise`."""
    return _scan(normalised_text)[0]


def strip_cues(text: str) -> tuple[Cues, str]:
    """The cues of ``text`` and its content: the text as anchors read it (NFKC-normalised,
    invisible characters removed: :func:`anchors.visible`) with every cue
    blanked out (replaced by a space), case kept for identifier splitting.

    >>> cues, content = strip_cues("Back to the moka pot: by the way, is it hot?")
    >>> cues.returning, cues.switch, content.split()
    (('back to',), ('by the way',), ['the', 'moka', 'pot:', ',', 'is', 'hot?'])
    """
    text = visible(text)  # NFKC, no invisible character splitting a word or a cue
    cues, spans = _scan(text)
    if not spans:
        return cues, text
    pieces, last = [], 0
    for start, end in spans:
        pieces += [text[last:start], " "]
        last = end
    pieces.append(text[last:])
    return cues, "".join(pieces)

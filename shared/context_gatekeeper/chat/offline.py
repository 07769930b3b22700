"""The scripted models behind ``--offline``: deterministic, no network, no key.

* :class:`OfflineChatModel` answers every message with a short scripted reply
  about the question's subject, built from the question's own words, so gating
  behaves as it does with a real model and an edit of the question's words
  reaches the answer too.
* :class:`OfflineEditor` applies simple substitution instructions by computing
  the ideal patch (:func:`~context_gatekeeper.editing.format.ideal_patch_reply`), so
  an offline edit really changes the history.  It understands::

      it was X, not Y        X, not Y        X instead of Y
      replace Y with X       change Y to X   rename Y to X

  Anything else fails cleanly with :class:`~context_gatekeeper.errors.EditError`
  (nothing changes), as does a ``Y`` that appears nowhere in the conversation.

>>> parse_substitution("it was Iceland, not Ireland")
('Ireland', 'Iceland')
>>> parse_substitution("replace 'dogs' with cats.")
('dogs', 'cats')
>>> parse_substitution("make it shorter") is None
True
"""

from __future__ import annotations

import json
import re
import time
import zlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from ..integration import ideal_patch_reply
from .. import EditError, Message, Replace, extract_anchors

__all__ = ["OfflineChatModel", "OfflineEditor", "parse_substitution", "subject_phrase", "OFFLINE_NOTICE"]

OFFLINE_NOTICE = "OFFLINE: answers come from a scripted model, not Gemini (no network, no API key)."

_QUOTES = "\"'`“”‘’"
_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # (pattern, which group is the new text: "first" or "second")
    (re.compile(r"^(?:replace|swap)\s+(.+?)\s+(?:with|by)\s+(.+)$", re.I | re.S), "second"),
    (re.compile(r"^(?:change|rename)\s+(.+?)\s+(?:to|into)\s+(.+)$", re.I | re.S), "second"),
    (re.compile(r"^(?:it\s+(?:was|is)\s+|it's\s+|use\s+)?(.+?)\s+instead\s+of\s+(.+)$", re.I | re.S), "first"),
    (re.compile(r"^(?:it\s+(?:was|is)\s+|it's\s+|they\s+were\s+)?(.+?),\s*not\s+([^,;]+)", re.I | re.S), "first"),
)


def _clean(text: str) -> str:
    return text.strip().rstrip(".!?;:").strip().strip(_QUOTES).strip()


def parse_substitution(instruction: str) -> tuple[str, str] | None:
    """``(old, new)`` for an instruction the offline editor understands, else None."""
    text = instruction.strip()
    for pattern, new_group in _PATTERNS:
        match = pattern.match(text)
        if match:
            first, second = _clean(match.group(1)), _clean(match.group(2))
            old, new = (second, first) if new_group == "first" else (first, second)
            if old and new and old.lower() != new.lower():
                return old, new
    return None


_INSTRUCTION_START = "<instruction>\n"
_CONVERSATION_START = "\n</instruction>\n\n<conversation>\n"


def _read_prompt(prompt: str) -> tuple[str, list[dict[str, Any]]] | None:
    """The instruction and the conversation's messages in the core's edit prompt, else None.

    The conversation is read as JSON from just after its opening tag (the core writes
    ``<`` in message text as ``\\u003c``, and the decoder stops where the array ends),
    so no text in a message or in the instruction can cut either one short.
    """
    start = prompt.find(_INSTRUCTION_START)
    middle = prompt.rfind(_CONVERSATION_START)
    if start < 0 or middle < start:
        return None
    instruction = prompt[start + len(_INSTRUCTION_START) : middle]
    try:
        messages, _ = json.JSONDecoder().raw_decode(prompt, middle + len(_CONVERSATION_START))
    except ValueError:
        return None
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        return None
    return instruction, messages


class OfflineEditor:
    """An editing model for ``--offline`` that applies "X, not Y" and "replace Y with X".

    It reads the instruction and the conversation from the edit prompt the core
    sends (``<instruction>`` and ``<conversation>``), replaces every occurrence of the
    old text (case-insensitively, whole words where the text starts and ends with
    one) in user and assistant messages, and answers with the ideal patch.
    """

    name = "offline-editor"

    def complete(self, messages: Sequence[Mapping[str, Any]]) -> str:
        """The patch reply for the edit prompt ``messages``; :class:`EditError` if it cannot edit."""
        prompt = str(messages[-1].get("content", "")) if messages else ""
        if len(messages) > 2:  # a retry: our first answer was unusable, so give up cleanly
            raise EditError("the offline editor could not produce a usable edit; nothing was changed")
        read = _read_prompt(prompt)
        if read is None:
            raise EditError("the offline editor only answers the core's edit prompt; nothing was changed")
        instruction, conversation = read
        parsed = parse_substitution(instruction)
        if parsed is None:
            raise EditError(
                f"the offline editor cannot apply {instruction.strip()!r}: offline it understands only "
                "'X, not Y', 'X instead of Y' and 'replace Y with X'. Nothing was changed "
                "(set GOOGLE_API_KEY and drop --offline for free-form edits)."
            )
        old, new = parsed
        state = [Message(str(m["id"]), m["role"], m["content"]) for m in conversation]
        pattern = _word_pattern(old)
        # the new words as they are (a str replacement would read backslashes as escapes and groups)
        requests = [Replace(m.id, pattern.sub(lambda _: new, m.content)) for m in state if pattern.search(m.content)]
        if not requests:
            raise EditError(f"{old!r} does not appear in the conversation, so nothing was changed")
        return ideal_patch_reply(state, requests)

    __call__ = complete


def _word_pattern(text: str) -> re.Pattern[str]:
    """``text`` case-insensitively, as a whole word where it starts/ends with a word character."""
    start = r"\b" if re.match(r"\w", text) else ""
    end = r"\b" if re.search(r"\w$", text) else ""
    return re.compile(start + re.escape(text) + end, re.I)


_TOKEN = re.compile(r"[^\W_](?:[\w.+#'-]*[^\W_])?")
_CONNECTORS = frozenset("of in on for to the a an and with from at by 's".split())
"""Short words that may sit inside a subject phrase ("GDP of Ireland in 2021")."""
_MAX_PHRASE_WORDS = 6

# Scripted answers.  Apart from the placeholders, every word in them is one the gate
# ignores (a stopword: tests/test_chat_offline_model.py checks it), so two answers
# never share a topic word their questions do not.  {q} is the question's subject
# phrase (quoted, as people quote what they were asked about), {a} and {z} its first
# and last content words; {Q} is {q} with a capital first letter.
_NO_SUBJECT = (
    "Hello! What would you like to know?",
    "Sure. What should we look at?",
    "OK. Tell me more about what you need.",
)
_ONE_WORD = (
    '"{Q}": it all comes down to how it is used here. Want more detail?',
    'About "{q}": there are a few things to look at. Which one should I explain?',
    'Here is what I know about "{q}": quite a lot, so tell me what you want to know.',
)
_SEVERAL_WORDS = (
    '"{Q}", roughly: {a}, and then {z}. Let me know which to explain further.',
    'Good question. When it comes to "{q}", it is all about {z}; {a} is where most of the details are.',
    'About "{q}": basically, it comes down to {a} and {z}. I can go into more detail if you want.',
    'On "{q}": {a} is the thing to look at, and {z} is probably what you want to compare it with.',
)


def _is_content(token: str) -> bool:
    return bool(extract_anchors(token).counts)


def subject_phrase(text: str) -> tuple[str, list[str]]:
    """The subject of ``text``: its longest run of content words (words the gate
    matches on), joined by short connectors such as "of" and "in", as written; and
    that run's content words.  ``("", [])`` when ``text`` has no content word.

    >>> subject_phrase("What was the GDP of Ireland in 2021?")
    ('GDP of Ireland in 2021', ['GDP', 'Ireland', '2021'])
    >>> subject_phrase("How long should a Redis lock TTL be?")
    ('Redis lock TTL', ['Redis', 'lock', 'TTL'])
    >>> subject_phrase("what about its lag?")
    ('lag', ['lag'])
    >>> subject_phrase("hi there!")
    ('', [])
    """
    best: list[str] = []
    run: list[str] = []
    for token in [*_TOKEN.findall(text), ""]:  # "" ends the last run
        if token and _is_content(token) and len(run) < _MAX_PHRASE_WORDS:
            run.append(token)
            continue
        if token.casefold() in _CONNECTORS and run:
            run.append(token)
            continue
        while run and not _is_content(run[-1]):
            run.pop()  # a run ends on a content word
        if sum(map(_is_content, run)) > sum(map(_is_content, best)):
            best = run
        run = [token] if token and _is_content(token) else []
    return " ".join(best), [t for t in best if _is_content(t)]


def _capitalised(text: str) -> str:
    """``text`` with a capital first letter, unless its first word has capitals already ("iPhone")."""
    return text[:1].upper() + text[1:] if text.split(" ", 1)[0].islower() else text


class OfflineChatModel:
    """A chat model for ``--offline``: a short deterministic answer about the question's subject.

    The answer quotes the question's subject phrase (:func:`subject_phrase`) and
    names its words, in one of a few templates picked by a checksum of the question
    (the same question always gets the same answer).  Like a real answer, it brings
    an anchor of its own (the quoted phrase) and shares no words with answers on
    other subjects: the rest of each template is stopwords, which the gate ignores.
    So turns are kept or dropped offline for the same reasons as with a real model.
    It does not say how many earlier messages it was sent: the chat shows that after
    each answer, outside the stored conversation.

    >>> OfflineChatModel().complete([{"role": "user", "content": "What was the GDP of Ireland in 2021?"}])
    'About "GDP of Ireland in 2021": basically, it comes down to GDP and 2021. I can go into more detail if you want.'
    """

    name = "offline"

    def __init__(self, *, chunk_delay: float = 0.0) -> None:
        self.chunk_delay = chunk_delay
        """Seconds :meth:`stream_text` waits before each chunk after the first (the web chat
        uses a little, so an answer visibly streams in; 0 in tests)."""

    def stream_text(self, messages: Sequence[Mapping[str, Any]]) -> Iterator[str]:
        """The :meth:`complete` answer in chunks, word by word (the model protocol's
        streaming call), so ``--web --offline`` runs the streaming path (joined, the
        chunks are exactly that answer).

        >>> "".join(OfflineChatModel().stream_text([{"role": "user", "content": "Why?"}])) == OfflineChatModel().complete(
        ...     [{"role": "user", "content": "Why?"}])
        True
        """
        answer = self.complete(messages)
        for i, chunk in enumerate(re.findall(r"\s*\S+\s*", answer) or [answer]):
            if i and self.chunk_delay > 0:
                time.sleep(self.chunk_delay)
            yield chunk

    def complete(self, messages: Sequence[Mapping[str, Any]]) -> str:
        """The scripted answer to the last user message of ``messages``."""
        users = [m for m in messages if m.get("role") == "user"]
        question = " ".join(str(users[-1].get("content", "")).split()) if users else ""
        phrase, words = subject_phrase(question)
        templates = _NO_SUBJECT if not words else _ONE_WORD if len(words) == 1 else _SEVERAL_WORDS
        template = templates[zlib.crc32(question.encode("utf-8", "surrogatepass")) % len(templates)]
        first, last = (words[0], words[-1]) if words else ("", "")
        return template.format(q=phrase, Q=_capitalised(phrase), a=first, z=last)

    __call__ = complete

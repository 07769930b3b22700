"""The scripted models behind ``--offline``: deterministic, no network, no key.

* :class:`OfflineChatModel` answers every message with a short canned reply that
  echoes the question and says how many earlier messages it was sent, so the
  effect of gating and of edits is visible without a real model.
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
from collections.abc import Mapping, Sequence
from typing import Any

from ..integration import ideal_patch_reply
from .. import EditError, Message, Replace

__all__ = ["OfflineChatModel", "OfflineEditor", "parse_substitution", "OFFLINE_NOTICE"]

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


def _between(text: str, tag: str) -> str | None:
    match = re.search(rf"<{tag}>\n?(.*?)\n?</{tag}>", text, re.S)
    return match.group(1) if match else None


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
        instruction = _between(prompt, "instruction")
        conversation = _between(prompt, "conversation")
        if instruction is None or conversation is None:
            raise EditError("the offline editor only answers the core's edit prompt; nothing was changed")
        parsed = parse_substitution(instruction)
        if parsed is None:
            raise EditError(
                f"the offline editor cannot apply {instruction.strip()!r}: offline it understands only "
                "'X, not Y', 'X instead of Y' and 'replace Y with X'. Nothing was changed "
                "(set GOOGLE_API_KEY and drop --offline for free-form edits)."
            )
        old, new = parsed
        state = [Message(str(m["id"]), m["role"], m["content"]) for m in json.loads(conversation)]
        pattern = _word_pattern(old)
        requests = [Replace(m.id, pattern.sub(new, m.content)) for m in state if pattern.search(m.content)]
        if not requests:
            raise EditError(f"{old!r} does not appear in the conversation, so nothing was changed")
        return ideal_patch_reply(state, requests)

    __call__ = complete


def _word_pattern(text: str) -> re.Pattern[str]:
    """``text`` case-insensitively, as a whole word where it starts/ends with a word character."""
    start = r"\b" if re.match(r"\w", text) else ""
    end = r"\b" if re.search(r"\w$", text) else ""
    return re.compile(start + re.escape(text) + end, re.I)


class OfflineChatModel:
    """A chat model for ``--offline``: a short deterministic reply keyed by the question.

    >>> OfflineChatModel().complete([{"role": "user", "content": "What is the GDP of Ireland?"}])
    '[offline] You asked: "What is the GDP of Ireland?" I was sent 0 earlier messages.'
    """

    name = "offline"

    def complete(self, messages: Sequence[Mapping[str, Any]]) -> str:
        """The canned reply to the last user message of ``messages``."""
        users = [m for m in messages if m.get("role") == "user"]
        question = " ".join(str(users[-1].get("content", "")).split()) if users else ""
        if len(question) > 120:
            question = question[:117] + "..."
        earlier = sum(1 for m in messages[:-1] if m.get("role") in ("user", "assistant"))
        verb = "You asked" if question.endswith("?") else "You said"
        plural = "" if earlier == 1 else "s"
        return f'[offline] {verb}: "{question}" I was sent {earlier} earlier message{plural}.'

    __call__ = complete

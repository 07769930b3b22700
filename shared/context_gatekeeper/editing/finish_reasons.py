"""Why a model stopped: finish reasons, and refusing a reply that did not finish normally.

Part of the model protocol (:mod:`context_gatekeeper.editing.models`): a reply may carry
its finish reason (a :class:`ModelReply`, a LangChain message's
``response_metadata``, a raw provider response).  :func:`refuse_truncated` turns

* a truncation reason (``length``, ``max_tokens``, Gemini's ``MAX_TOKENS``) into
  :class:`~context_gatekeeper.errors.TruncatedReplyError`: the edit asks again;
* a content-policy reason (OpenAI's ``content_filter``, Gemini's ``SAFETY`` /
  ``RECITATION`` / ``PROHIBITED_CONTENT``, Anthropic's ``refusal``, Bedrock's
  ``guardrail_intervened``) into :class:`FilteredReplyError`: the provider withheld or
  cut the answer, so even JSON that parses is not the edit the model meant; the edit
  stops at once (asking again gets the same policy), and nothing is changed.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Optional, Union

from ..errors import FilteredReplyError, TruncatedReplyError

__all__ = [
    "ModelReply",
    "FilteredReplyError",
    "finish_reason_of",
    "reason_text",
    "is_truncation",
    "is_policy_stop",
    "refuse_truncated",
]

_TRUNCATION_REASONS = frozenset({"length", "max_tokens", "max_output_tokens", "model_length", "token_limit"})
_POLICY_REASONS = frozenset({
    "content_filter", "content_filtered",  # OpenAI, Azure; Bedrock
    "safety", "recitation", "blocklist", "prohibited_content", "spii", "image_safety",  # Gemini
    "refusal",  # Anthropic
    "guardrail_intervened",  # Bedrock
})
_REASON_KEYS = ("finish_reason", "stop_reason", "done_reason")


@dataclass(frozen=True)
class ModelReply:
    """A model's reply with the reason it stopped, for models that know it.

    Attributes:
        content: the reply: text, or a parsed dict/list under structured output.
        finish_reason: the provider's reason (``"stop"``, ``"length"``, ``"MAX_TOKENS"`` ...), or None.

    >>> ModelReply("[", finish_reason="length").truncated
    True
    """

    content: Union[str, dict, list]
    finish_reason: Optional[str] = None

    @property
    def truncated(self) -> bool:
        """Whether ``finish_reason`` says the model hit its output limit."""
        return is_truncation(self.finish_reason)


def reason_text(reason: Any) -> str | None:
    """A finish reason as text: an enum's name (Gemini's ``FinishReason.MAX_TOKENS``) or the string.

    A string enum (google-genai's ``FinishReason`` is one) gives its name too, never
    ``"FinishReason.MAX_TOKENS"``.

    >>> import enum
    >>> reason_text(enum.Enum("FinishReason", "STOP MAX_TOKENS").MAX_TOKENS), reason_text(None)
    ('MAX_TOKENS', None)
    >>> reason_text(enum.Enum("FinishReason", {"SAFETY": "SAFETY"}, type=str).SAFETY)
    'SAFETY'
    """
    if reason is None or isinstance(reason, bool):
        return None
    if isinstance(reason, enum.Enum) and isinstance(reason.name, str):
        return reason.name
    if isinstance(reason, str):
        return reason or None
    name = getattr(reason, "name", None)
    return name if isinstance(name, str) else str(reason)


def _first(items: Any) -> Any:
    """The first element of a list or tuple, else None."""
    return items[0] if isinstance(items, (list, tuple)) and items else None


def _get(obj: Any, key: str) -> Any:
    """``obj[key]`` for a mapping, else ``obj.key`` (None when absent)."""
    return obj.get(key) if isinstance(obj, Mapping) else getattr(obj, key, None)


def finish_reason_of(reply: Any) -> str | None:
    """The finish reason ``reply`` carries, as text; None when it carries none.

    Looks at ``finish_reason`` (a :class:`ModelReply`), LangChain's
    ``response_metadata``, and a raw response (``raw``, or the reply itself) with
    ``finish_reason`` / ``stop_reason`` (Anthropic) / ``done_reason`` (Ollama),
    ``choices[0].finish_reason`` (OpenAI) or ``candidates[0].finish_reason`` (Gemini).

    >>> finish_reason_of(ModelReply("x", "stop"))
    'stop'
    >>> finish_reason_of("plain text") is None
    True
    """
    if isinstance(reply, (str, dict, list)) or reply is None:
        return None
    reason = reason_text(getattr(reply, "finish_reason", None))
    metadata = getattr(reply, "response_metadata", None)
    if reason is None and isinstance(metadata, Mapping):
        reason = next((reason_text(metadata[k]) for k in _REASON_KEYS if metadata.get(k)), None)
    for source in (getattr(reply, "raw", None), reply):
        if reason is not None or source is None:
            continue
        reason = next((reason_text(_get(source, k)) for k in _REASON_KEYS if _get(source, k)), None)
        for listing in ("choices", "candidates"):
            first = _first(_get(source, listing))
            if reason is None and first is not None:
                reason = reason_text(_get(first, "finish_reason"))
    return reason


def is_truncation(reason: str | None) -> bool:
    """Whether a finish reason says the model stopped at its output limit.

    >>> [is_truncation(r) for r in ("length", "MAX_TOKENS", "stop", None)]
    [True, True, False, False]
    """
    return reason is not None and reason.strip().lower() in _TRUNCATION_REASONS


def is_policy_stop(reason: str | None) -> bool:
    """Whether a finish reason says the provider stopped the answer for its safety or content policy.

    >>> [is_policy_stop(r) for r in ("content_filter", "SAFETY", "refusal", "stop", None)]
    [True, True, True, False, False]
    """
    return reason is not None and reason.strip().lower() in _POLICY_REASONS


def refuse_truncated(content: Union[str, dict, list], reason: str | None, name: str) -> Union[str, dict, list]:
    """``content``, unless ``reason`` says the model did not finish its answer normally.

    Model adapters call it with the finish reason their framework reports.

    Raises:
        TruncatedReplyError: ``reason`` is a truncation (``.partial`` holds ``content``).
        FilteredReplyError: ``reason`` is a content-policy stop (``.partial`` holds ``content``).

    >>> refuse_truncated("ok", "stop", "m")
    'ok'
    """
    if is_policy_stop(reason):
        raise FilteredReplyError(
            f"the provider stopped the answer of model {name!r} for its safety or content policy (finish "
            f"reason {reason!r}); nothing was changed. Rephrase the request, or use another model",
            partial=content,
            finish_reason=reason,
        )
    if is_truncation(reason):
        raise TruncatedReplyError(
            f"the answer of model {name!r} is incomplete: it stopped at its output limit (finish reason "
            f"{reason!r}); answer again, shorter (only the operations that are needed)",
            partial=content,
            finish_reason=reason,
        )
    return content

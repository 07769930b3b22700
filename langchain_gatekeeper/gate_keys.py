"""How :func:`~langchain_gatekeeper.topic_gate` reads a dict input given without both keys.

The rules follow ``RunnableWithMessageHistory``'s conventions: with
``history_messages_key`` the stored history (which normally ends with an answer) sits
beside the new input, by default under ``"input"``; with ``input_messages_key`` alone
the list under it is the history followed by the new messages.  Whatever the shape
cannot settle raises :class:`TopicGateKeysError` naming the keys to pass: a wrong
guess would gate the history for the wrong query, or pass it through ungated, silently.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langchain_core.messages import BaseMessage, HumanMessage

from context_gatekeeper import GatekeeperError

__all__ = ["TopicGateKeysError", "infer_keys", "input_key_beside"]


class TopicGateKeysError(GatekeeperError, TypeError):
    """``topic_gate()`` got a dict input whose history and input keys it cannot tell apart;
    the message names the keys to pass."""


def _is_message_list(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and all(isinstance(m, BaseMessage) for m in value)


def infer_keys(value: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """``(input_messages_key, history_messages_key)`` for a dict input given without keys.

    Unambiguous shapes, read as ``RunnableWithMessageHistory`` builds its input: one
    list of messages and one message (history and input); one list of messages not
    ending with a human message and one string (history and input); one list of
    messages and nothing else message-like (the history followed by the new messages,
    as under ``input_messages_key`` alone).  A list that ends with a human message
    beside one string is ambiguous (the list may be history plus the new question and
    the string an unrelated field, e.g. ``{"messages": [...], "language": "French"}``),
    as is anything else: :class:`TopicGateKeysError` names the candidate keys.
    """
    lists = [k for k, v in value.items() if _is_message_list(v)]
    singles = [k for k, v in value.items() if isinstance(v, (str, BaseMessage))]
    if len(lists) == 1 and not singles:
        return lists[0], None
    if len(lists) == 1 and len(singles) == 1:
        history, single = value[lists[0]], value[singles[0]]
        if isinstance(single, BaseMessage) or not (history and isinstance(history[-1], HumanMessage)):
            return singles[0], lists[0]
        raise TopicGateKeysError(
            f"topic_gate() cannot tell whether {singles[0]!r} is the new input or another field: the "
            f"list under {lists[0]!r} ends with a human message, so it may hold the history and the new "
            f"question; pass topic_gate(input_messages_key={lists[0]!r}) if it does, or "
            f"topic_gate(input_messages_key={singles[0]!r}, history_messages_key={lists[0]!r}) if "
            f"{singles[0]!r} is the question (the keys of the RunnableWithMessageHistory around it)"
        )
    raise TopicGateKeysError(
        "topic_gate() cannot tell which key of its dict input holds the history and which the new "
        f"input (message lists: {lists or 'none'}; strings or messages: {singles or 'none'}); pass "
        "topic_gate(input_messages_key=..., history_messages_key=...), the same keys as the "
        "RunnableWithMessageHistory around it"
    )


def input_key_beside(value: Mapping[str, Any], history_key: str) -> str:
    """The input key beside ``history_key`` when none was given: ``"input"`` when present
    (``RunnableWithMessageHistory``'s default), else the one other key holding a string,
    a message or a list of messages; :class:`TopicGateKeysError` otherwise."""
    if "input" in value:
        return "input"
    candidates = [k for k, v in value.items() if k != history_key and (isinstance(v, (str, BaseMessage)) or (
        isinstance(v, (list, tuple)) and v and _is_message_list(v)))]
    if len(candidates) == 1:
        return candidates[0]
    raise TopicGateKeysError(
        f"topic_gate(history_messages_key={history_key!r}) cannot tell which key holds the new input: "
        f"no 'input' key, and {'candidates ' + str(candidates) if candidates else 'no other string or message'}"
        f" among {sorted(value)}; pass input_messages_key=..., the same as the RunnableWithMessageHistory "
        "around it"
    )

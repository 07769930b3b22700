"""The names of the chat's conversations and the records that keep their pins.

* **Names**: a new conversation's name is at most :data:`MAX_SESSION_NAME` characters,
  without control or format characters or lone surrogates (undecodable bytes), and
  does not start with :data:`PIN_RECORD_PREFIX` (:func:`check_session_name`); the
  terminal and the web chat apply the same rules.  A stored conversation opens by its
  exact name, whatever wrote it.
* **Pin records**: the pins of conversation ``s`` live in store session
  :func:`pin_record_id` ``(s)``, one system message holding JSON::

      {"pinned": ["<id of a turn's first message>", ...],
       "loads": {"<revision of a load>": {"before": [...], "after": [...]}}}

  ``loads`` remembers what each :meth:`~.session.ChatSession.load` did to the pins, so
  undoing the load (or redoing it) can take that change back (or make it again); a
  :meth:`~.session.ChatSession.revert` that took a load's pins back (or made them
  again) is remembered there too, by its own revision.  Records written before
  ``loads`` existed read as having none.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Iterable, Sequence
from typing import Any

from .. import InvalidInputError, Message, Revision, Store, Transcript
from ..integration import undo_stacks

__all__ = [
    "PIN_RECORD_PREFIX",
    "MAX_SESSION_NAME",
    "LoadedPins",
    "check_session_name",
    "pin_record_id",
    "is_pin_record",
    "chat_sessions",
    "read_pins",
    "read_loads",
    "pins_message",
    "pins_after",
    "pin_changes_in_effect",
]

PIN_RECORD_PREFIX = "gatekeeper-chat-pins:"
"""Session ids starting with this hold a conversation's pins, not a conversation."""
_PIN_MESSAGE_ID = "pins"
MAX_SESSION_NAME = 80
"""The longest name a new conversation may have (both front ends; stored ones open whatever their name)."""
_BAD_NAME_CATEGORIES = ("Cc", "Cf", "Cs")
"""Control and format characters, and lone surrogates (undecodable bytes): never in a new name."""

LoadedPins = dict[str, tuple[frozenset[str], frozenset[str]]]
"""Per load, or revert that changed pins (its revision number, as text): the pins before it and the pins it set."""


def check_session_name(name: object) -> str:
    """``name`` stripped, as a new conversation's name, or :class:`InvalidInputError` saying
    what a usable name is (the terminal and the web chat apply the same rules).

    >>> check_session_name("  work ")
    'work'
    >>> check_session_name("a\u202eb")
    Traceback (most recent call last):
    ...
    context_gatekeeper.errors.InvalidInputError: session names are at most 80 characters, without control characters or undecodable bytes; pick another
    """
    if not isinstance(name, str) or not name.strip():
        raise InvalidInputError("a session needs a non-blank name, e.g. 'work'")
    name = name.strip()
    if len(name) > MAX_SESSION_NAME or any(unicodedata.category(c) in _BAD_NAME_CATEGORIES for c in name):
        raise InvalidInputError(
            f"session names are at most {MAX_SESSION_NAME} characters, without control characters or "
            "undecodable bytes; pick another"
        )
    if is_pin_record(name):
        raise InvalidInputError(f"session names starting with {PIN_RECORD_PREFIX!r} are reserved for pins; pick another")
    return name


def pin_record_id(session_id: str) -> str:
    """The id of the store session that keeps the pins of conversation ``session_id``.

    >>> pin_record_id("work")
    'gatekeeper-chat-pins:work'
    """
    return PIN_RECORD_PREFIX + session_id


def is_pin_record(session_id: str) -> bool:
    """Whether store session ``session_id`` holds pins rather than a conversation.

    >>> is_pin_record("gatekeeper-chat-pins:work"), is_pin_record("work")
    (True, False)
    """
    return session_id.startswith(PIN_RECORD_PREFIX)


def chat_sessions(store: Store) -> list[str]:
    """The conversations of ``store`` (``store.sessions()`` without the pin records)."""
    return [s for s in store.sessions() if not is_pin_record(s)]


def read_pins(record: Transcript, messages: Sequence[Message] | None = None) -> tuple[set[str], str | None]:
    """The pinned ids pin record ``record`` holds (or ``messages``, one of its states), and
    what is wrong with them (None when they are usable)."""
    if messages is None:
        messages = record.messages
    if not messages:
        return set(), None
    try:
        pinned = json.loads(messages[-1].content)["pinned"]
    except (ValueError, KeyError, TypeError):
        pinned = None
    if not isinstance(pinned, list) or not all(isinstance(p, str) for p in pinned):
        return set(), (
            f"the pins stored for session {record.session_id[len(PIN_RECORD_PREFIX):]!r} cannot be read "
            "(not the JSON list of ids the chat writes); the chat starts with no pins, and the next "
            "/pin or /unpin writes a fresh list"
        )
    return set(pinned), None


def read_loads(messages: Sequence[Message]) -> LoadedPins:
    """What each load did to the pins, as a pin record's state ``messages`` remembers it
    (nothing, for a record written before loads were remembered or one that cannot be read)."""
    try:
        loads = json.loads(messages[-1].content).get("loads", {}) if messages else {}
        return {
            str(number): (frozenset(change["before"]), frozenset(change["after"]))
            for number, change in loads.items()
            if all(isinstance(p, str) for p in (*change["before"], *change["after"]))
        }
    except (ValueError, KeyError, TypeError, AttributeError):
        return {}


def pins_message(pinned: set[str], loads: LoadedPins | None = None) -> Message:
    """The one message of a pin record holding ``pinned`` (and what loads did to the pins)."""
    document: dict[str, Any] = {"pinned": sorted(pinned)}
    if loads:
        document["loads"] = {n: {"before": sorted(b), "after": sorted(a)} for n, (b, a) in sorted(loads.items())}
    return Message(_PIN_MESSAGE_ID, "system", json.dumps(document, ensure_ascii=False))


def pins_after(pins: set[str], steps: Iterable[tuple[frozenset[str], frozenset[str]]]) -> set[str]:
    """``pins`` after each ``(before, after)`` step in turn: what the step dropped from
    ``before`` is dropped, what it added to reach ``after`` is added; other pins stay."""
    for before, after in steps:
        pins = (pins - (before - after)) | (after - before)
    return pins


def pin_changes_in_effect(log: Iterable[Revision], loads: LoadedPins) -> list[str]:
    """The revisions of ``log`` that changed pins (``loads``) and whose change is in effect at
    its end (not undone, or undone and redone), as the keys of ``loads``, in the order applied."""
    done, _ = undo_stacks(list(log))
    return [str(n) for n in done if str(n) in loads]

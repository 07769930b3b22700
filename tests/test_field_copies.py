"""The fast copies that set a frozen dataclass's slots one by one copy every field.

``Message.stamped``, ``detached``, ``detached_change`` and ``revisions._entry`` bypass
the dataclasses' ``__init__`` for speed and name each field.  A field added to
``Message``, ``Put``, ``Remove``, ``Change`` or ``MessageDiff`` and forgotten there
would leave a slot unset (``AttributeError`` on read) or a value wrong; these tests
catch that, instead of a check that raised at import time.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from context_gatekeeper.records.messages import Message, detached
from context_gatekeeper.records.operations import AT_END, Change, Put, Remove
from context_gatekeeper.records.revisions import MessageDiff, _entry, detached_change


def _full_message(revision: int = 3) -> Message:
    """A message with no field at its default, so a field left uncopied shows."""
    message = Message(
        id="m1",
        role="assistant",
        content="Reykjavik is the capital",
        parts=({"type": "text", "text": "Reykjavik"},),
        metadata={"tool_calls": [{"name": "lookup"}]},
        origin="edited",
        derived_from=("m0",),
        revision=revision,
    )
    defaults = Message(id="x", role="user", content="")
    for f in dataclasses.fields(Message):
        if f.name not in ("id", "role", "content"):
            assert getattr(message, f.name) != getattr(defaults, f.name), f"set {f.name} in _full_message"
    return message


def _field_values(obj: Any) -> dict[str, Any]:
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}


def test_stamped_copies_every_field_of_message() -> None:
    message = _full_message()
    stamped = message.stamped(9)
    assert _field_values(stamped) == _field_values(dataclasses.replace(message, revision=9))
    assert stamped == dataclasses.replace(message, revision=9)


def test_detached_copies_every_field_of_message() -> None:
    message = _full_message()
    copy = detached(message)
    assert _field_values(copy) == _field_values(message)
    assert copy.metadata is not message.metadata


@pytest.mark.parametrize(
    "change",
    [
        Put(_full_message(), "m0"),
        Put(_full_message(), AT_END),
        Remove(_full_message(), None),
        Change(_full_message(2), dataclasses.replace(_full_message(3), content="Reykjavík")),
    ],
    ids=["put", "put-at-end", "remove", "change"],
)
def test_detached_change_copies_every_field(change: Put | Remove | Change) -> None:
    copy = detached_change(change)
    assert type(copy) is type(change)
    assert _field_values(copy) == _field_values(change)


def test_entry_sets_every_field_of_message_diff() -> None:
    before, after = _full_message(2), dataclasses.replace(_full_message(3), content="new")
    built = _entry("m1", "changed", before, after)
    assert _field_values(built) == _field_values(MessageDiff("m1", "changed", before, after))
    assert [f.name for f in dataclasses.fields(MessageDiff)] == list(_field_values(built))

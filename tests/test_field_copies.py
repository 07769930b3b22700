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


def test_from_dict_sets_every_field_of_message() -> None:
    message = _full_message()
    built = Message.from_dict(message.to_dict())
    assert type(built) is Message
    assert _field_values(built) == _field_values(message)
    assert built == message


def test_from_dict_checks_fields_as_init_does() -> None:
    from context_gatekeeper.errors import InvalidInputError, InvalidTypeError

    with pytest.raises(InvalidInputError, match="role must be one of"):
        Message.from_dict({"id": "m1", "role": "robot", "content": "hi"})
    with pytest.raises(InvalidInputError, match="message id must be a non-empty str"):
        Message.from_dict({"id": "", "role": "user", "content": "hi"})
    with pytest.raises(InvalidInputError, match="origin must be one of"):
        Message.from_dict({"id": "m1", "role": "user", "content": "hi", "origin": "forged"})
    with pytest.raises(InvalidTypeError, match="derived_from must be a tuple of message ids"):
        Message.from_dict({"id": "m1", "role": "user", "content": "hi", "derived_from": [1]})
    with pytest.raises((InvalidInputError, InvalidTypeError)):
        Message.from_dict({"id": "m1", "role": "user", "content": 5})


def test_from_dict_of_a_subclass_builds_the_subclass() -> None:
    @dataclasses.dataclass(frozen=True, slots=True)
    class Tagged(Message):
        tag: str = "t"

    built = Tagged.from_dict({"id": "m1", "role": "user", "content": "hi"})
    assert type(built) is Tagged and built.tag == "t" and built.content == "hi"


@pytest.mark.parametrize(
    "change",
    [
        Put(_full_message(), "m0"),
        Put(_full_message(), None),
        Put(_full_message(), AT_END),
        Remove(_full_message(), "m0"),
        Change(_full_message(2), dataclasses.replace(_full_message(3), content="Reykjavík")),
    ],
    ids=["put", "put-at-start", "put-at-end", "remove", "change"],
)
def test_change_from_dict_sets_every_field(change: Put | Remove | Change) -> None:
    from context_gatekeeper.records.operations import change_from_dict, change_to_dict

    built = change_from_dict(change_to_dict(change))
    assert type(built) is type(change)
    assert _field_values(built) == _field_values(change)
    assert built == change


def test_revision_of_sets_every_field_of_revision() -> None:
    from context_gatekeeper.records.revisions import Revision, revision_of

    values = dict(
        number=4, parent=3, kind="revert", changes=(Put(_full_message(), "m0"),), instruction="go back",
        model="m", time=12.5, base=2, target=1,
    )
    assert set(values) == {f.name for f in dataclasses.fields(Revision)}, "give every field a value here"
    built = revision_of(**values)  # type: ignore[arg-type]
    assert _field_values(built) == values
    assert built == Revision(**values)  # type: ignore[arg-type]


def test_the_records_built_without_init_have_no_post_init_to_skip() -> None:
    """``revision_of`` and ``change_from_dict`` build these through their slots, skipping
    ``__init__``: a ``__post_init__`` added to one of them would be skipped on every load."""
    from context_gatekeeper.records.operations import Change, Put, Remove
    from context_gatekeeper.records.revisions import Revision

    for record in (Revision, Put, Remove, Change):
        assert not hasattr(record, "__post_init__"), f"{record.__name__}: build it through __init__ in the loaders"

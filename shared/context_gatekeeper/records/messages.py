"""Messages of a mutable transcript, with their provenance.

A :class:`Message` is immutable; an edit produces a new version under the same id.
Everything in it is JSON-serialisable (:meth:`Message.to_dict`), so stores keep
it as text and adapters can round-trip framework-specific content in ``parts``
and ``metadata``.
"""

from __future__ import annotations

import copy
import json
import re
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from types import MappingProxyType
from typing import Any, Literal

from ..errors import InvalidInputError, InvalidTypeError
from ..validation import require_text

__all__ = ["Role", "Origin", "Message", "new_message_id", "detached", "EDITABLE_ROLES", "normalized_text", "storable"]

Role = Literal["system", "user", "assistant", "tool"]
Origin = Literal["original", "edited", "inserted"]
ROLES: tuple[str, ...] = ("system", "user", "assistant", "tool")
ORIGINS: tuple[str, ...] = ("original", "edited", "inserted")
EDITABLE_ROLES: frozenset[str] = frozenset({"user", "assistant"})
"""Only user and assistant text is ever rewritten by an edit."""


def new_message_id() -> str:
    """A fresh, globally unique message id (12 hex digits of a UUID4)."""
    return uuid.uuid4().hex[:12]


@dataclass(frozen=True, slots=True)
class Message:
    """One message of a transcript.

    Attributes:
        id: stable and unique within a session; never reused.  Edits keep it.
        role: "system", "user", "assistant" or "tool".
        content: the text, which selection reads and edits rewrite.
        parts: provider-specific content kept opaque and round-tripped (a LangChain
            content-block list, LlamaIndex blocks); an edit rewrites ``content`` only.
        metadata: tool calls, tool_call_id, names and the like: carried, never rewritten.
            Each message built here has a dict of its own (empty by default); a
            transcript hands out copies, so changing them never changes its history.
        origin: "original" (as appended), "edited" (text rewritten by a revision) or
            "inserted" (added by an edit).
        derived_from: ids of the original messages this version derives from
            (``(id,)`` for an edited original; ``()`` for originals and insertions).
        revision: the revision that produced this version.
    """

    id: str
    role: Role
    content: str
    parts: tuple[Any, ...] | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    origin: Origin = "original"
    derived_from: tuple[str, ...] = ()
    revision: int = 0

    def __post_init__(self) -> None:
        # Cheap exact-type checks first: a transcript builds one Message per stored version.
        if type(self.id) is not str or not self.id:
            raise InvalidInputError(
                f"message id must be a non-empty str, got {self.id!r}; pass a unique id, or leave it to "
                "Transcript.append, which assigns one (new_message_id)"
            )
        if self.role not in ROLES:
            raise InvalidInputError(f"role must be one of {ROLES}, got {self.role!r}; pass one of those roles")
        if type(self.content) is not str:
            require_text(self.content, "message content", allow_empty=True)
        if self.origin not in ORIGINS:
            raise InvalidInputError(f"origin must be one of {ORIGINS}, got {self.origin!r}; pass one of those origins")
        if self.parts is not None and type(self.parts) is not tuple:
            raise InvalidTypeError(
                f"parts must be None or a tuple (a list in dicts), got {type(self.parts).__name__}; "
                "pass tuple(blocks)"
            )
        metadata = self.metadata
        if type(metadata) is not dict and type(metadata) is not MappingProxyType and not isinstance(metadata, Mapping):
            raise InvalidTypeError(f"metadata must be a mapping, got {type(metadata).__name__}; pass a dict")
        derived = self.derived_from
        if type(derived) is not tuple or (derived and not all(type(d) is str for d in derived)):
            raise InvalidTypeError(
                f"derived_from must be a tuple of message ids (str), got {derived!r}; pass a tuple of str"
            )

    def __getstate__(self) -> dict[str, Any]:
        state = {name: getattr(self, name) for name in _FIELDS}
        state["metadata"] = dict(self.metadata)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        for name, value in state.items():
            object.__setattr__(self, name, value)

    @property
    def editable(self) -> bool:
        """Whether an edit may rewrite this message (user and assistant text only)."""
        return self.role in EDITABLE_ROLES

    def stamped(self, revision: int) -> "Message":
        """This version marked as produced by ``revision`` (fast: nothing to validate again)."""
        if self.revision == revision:
            return self
        # Set the slots through their descriptors: a third of the time of a loop of
        # object.__setattr__, and a revert or its undo stamps every message it puts.
        copy_ = _new_object(Message)
        _SET_ID(copy_, self.id)
        _SET_ROLE(copy_, self.role)
        _SET_CONTENT(copy_, self.content)
        _SET_PARTS(copy_, self.parts)
        _SET_METADATA(copy_, self.metadata)
        _SET_ORIGIN(copy_, self.origin)
        _SET_DERIVED_FROM(copy_, self.derived_from)
        _SET_REVISION(copy_, revision)
        return copy_

    def revised(self, content: str, revision: int) -> "Message":
        """This message with new text, as produced by ``revision`` (provenance kept)."""
        derived = self.derived_from or ((self.id,) if self.origin == "original" else ())
        origin: Origin = "inserted" if self.origin == "inserted" else "edited"
        return replace(self, content=content, origin=origin, derived_from=derived, revision=revision)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (the stores' format); fields at their defaults are left out."""
        data: dict[str, Any] = {"id": self.id, "role": self.role, "content": self.content}
        if self.parts is not None:
            data["parts"] = list(self.parts)
        if self.metadata:
            data["metadata"] = dict(self.metadata)
        if self.origin != "original":
            data["origin"] = self.origin
        if self.derived_from:
            data["derived_from"] = list(self.derived_from)
        if self.revision:
            data["revision"] = self.revision
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Message":
        """Inverse of :meth:`to_dict` (``parts`` a list or None, ``metadata`` a dict)."""
        parts, metadata, derived = data.get("parts"), data.get("metadata"), data.get("derived_from")
        if parts is not None and not isinstance(parts, (list, tuple)):
            raise InvalidTypeError(
                f"parts must be a list of content blocks or absent, got {type(parts).__name__}; "
                "pass a list, or leave the key out"
            )
        if metadata is not None and not isinstance(metadata, Mapping):
            raise InvalidTypeError(
                f"metadata must be a dict or absent, got {type(metadata).__name__}; pass a dict, or leave the key out"
            )
        if derived is not None and not isinstance(derived, (list, tuple)):
            raise InvalidTypeError(
                f"derived_from must be a list of ids or absent, got {type(derived).__name__}; "
                "pass a list of message ids, or leave the key out"
            )
        values = (  # the fields in order, each read and converted once
            data["id"],
            data["role"],
            data["content"],
            tuple(parts) if parts is not None else None,
            dict(metadata) if metadata else {},
            data.get("origin", "original"),
            tuple(derived) if derived else (),
            int(data.get("revision", 0)),
        )
        if cls is not Message:  # a subclass may have fields (and checks) of its own
            return cls(**dict(zip(_FIELDS, values)))
        # The same fields, set through the slot descriptors (as ``stamped`` does) and then
        # checked by ``__post_init__`` as ``__init__`` would: every message of every stored
        # session opened comes through here, and the frozen ``__init__`` costs twice as much.
        message = _new_object(Message)
        id_, role, content, parts_, metadata_, origin, derived_from, revision = values
        _SET_ID(message, id_)
        _SET_ROLE(message, role)
        _SET_CONTENT(message, content)
        _SET_PARTS(message, parts_)
        _SET_METADATA(message, metadata_)
        _SET_ORIGIN(message, origin)
        _SET_DERIVED_FROM(message, derived_from)
        _SET_REVISION(message, revision)
        message.__post_init__()
        return message


_FIELDS = tuple(f.name for f in fields(Message))
_new_object = object.__new__
_SET_ID, _SET_ROLE, _SET_CONTENT, _SET_PARTS, _SET_METADATA, _SET_ORIGIN, _SET_DERIVED_FROM, _SET_REVISION = (
    Message.__dict__[name].__set__
    for name in ("id", "role", "content", "parts", "metadata", "origin", "derived_from", "revision")
)
# Message.stamped, from_dict and detached set each field by name: tests/test_field_copies.py checks
# that they copy every field of Message, so a new field cannot be left out unnoticed.


_IMMUTABLE = frozenset({str, int, float, bool, type(None)})


def _copied(value: Any) -> Any:
    """A copy of metadata or parts that shares nothing mutable with ``value`` (cheap when
    it holds only strings and numbers: no deep copy then)."""
    if isinstance(value, tuple):
        return value if all(type(v) in _IMMUTABLE for v in value) else copy.deepcopy(value)
    if not value:
        return {}
    data = dict(value)
    return data if all(type(v) in _IMMUTABLE for v in data.values()) else copy.deepcopy(data)


def detached(message: Message) -> Message:
    """A copy of ``message`` with its own ``metadata`` dict (empty or not) and its own
    ``parts``: what a caller does to them never reaches ``message``, so a transcript hands
    these out and takes these in."""
    if type(message) is not Message:  # a subclass may have fields of its own
        parts = None if message.parts is None else _copied(message.parts)
        return replace(message, metadata=_copied(message.metadata), parts=parts)
    # Set the slots through their descriptors, as ``stamped`` does: reads copy every message.
    copy_ = _new_object(Message)
    _SET_ID(copy_, message.id)
    _SET_ROLE(copy_, message.role)
    _SET_CONTENT(copy_, message.content)
    parts, metadata = message.parts, message.metadata
    _SET_PARTS(copy_, None if parts is None else _copied(parts))
    _SET_METADATA(copy_, _copied(metadata) if metadata else {})
    _SET_ORIGIN(copy_, message.origin)
    _SET_DERIVED_FROM(copy_, message.derived_from)
    _SET_REVISION(copy_, message.revision)
    return copy_


# -- the one text a message is stored with ---------------------------------------------------
_PAIR = re.compile("[\ud800-\udbff][\udc00-\udfff]")
_LONE = re.compile("[\ud800-\udfff]")


def _joined(match: re.Match[str]) -> str:
    pair = match.group()
    return chr(0x10000 + ((ord(pair[0]) - 0xD800) << 10) + (ord(pair[1]) - 0xDC00))


def _escaped(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def normalized_text(text: str) -> str:
    r"""``text`` as every store, ``/save`` and ``/load`` keep it: surrogate pairs joined into
    the character they encode, and each lone surrogate (not a character: UTF-8 cannot
    encode it) written as its escape, the six characters ``\udc80``, as the chat
    shows it.  Text without surrogates (nearly all) is returned as it is, at the cost of
    one scan.

    >>> normalized_text("\ud83d\ude00 hi") == "\U0001F600 hi"
    True
    >>> print(normalized_text("from api \udc80 bytes"))
    from api \udc80 bytes
    """
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _LONE.sub(_escaped, _PAIR.sub(_joined, text))
    return text


def _normalized_value(value: Any) -> Any:
    """A JSON value with every string in it (keys included) normalised."""
    if isinstance(value, str):
        return normalized_text(value)
    if isinstance(value, Mapping):
        return {normalized_text(k) if isinstance(k, str) else k: _normalized_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(map(_normalized_value, value))
    return value


_JSON_SCALARS = frozenset({str, int, float, bool, type(None)})


def _json_exact(values: Iterable[Any]) -> bool:
    """Whether each of ``values`` is what ``json.loads(json.dumps(value))`` gives back: made
    only of dicts with str keys, lists, str, int, float, bool and None (no tuple, no int or
    other non-str key, no subclass).  Walked without recursion: as deep as JSON itself goes."""
    stack = list(values)
    while stack:
        value = stack.pop()
        kind = type(value)
        if kind is dict:
            for key, inner in value.items():
                if type(key) is not str:
                    return False
                stack.append(inner)
        elif kind is list:
            stack.extend(value)
        elif kind not in _JSON_SCALARS:
            return False
    return True


def storable(message: Message) -> Message:
    """``message`` as a store keeps it, and as every reader gets it back: ``parts`` and
    ``metadata`` as their JSON round trip (a tuple in them a list, an int key a str one), its
    text normalised (:func:`normalized_text`, in ``parts`` and ``metadata`` too).  So the
    object that writes a message holds exactly what any other reader of the session reads.
    Returns ``message`` itself when nothing changes (the usual case: plain JSON values,
    checked without parsing anything).

    Raises:
        InvalidInputError: ``parts`` or ``metadata`` hold something JSON cannot store (an
            object, a set, bytes, a cycle); nothing is written.
    """
    content = normalized_text(message.content)
    parts, metadata = message.parts, message.metadata
    if parts is not None or metadata:
        try:
            text = json.dumps([parts, dict(metadata)], ensure_ascii=False)
        except (TypeError, ValueError, RecursionError) as exc:
            raise InvalidInputError(
                f"message {message.id!r} cannot be stored: its metadata or parts hold a value JSON cannot keep "
                f"({type(exc).__name__}: {exc}); nothing was written. Keep only str, int, float, bool, None, lists "
                "and dicts with str keys there (convert objects with their own to_dict/model_dump first)"
            ) from None
        if type(metadata) is not dict or not _json_exact((*(parts or ()), metadata)):
            loaded_parts, metadata = json.loads(text)  # what the store keeps, and every reader gets
            parts = None if loaded_parts is None else tuple(loaded_parts)
        if not text.isascii():
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:
                parts, metadata = _normalized_value(parts), _normalized_value(metadata)
    if content is message.content and parts is message.parts and metadata is message.metadata:
        return message
    return replace(message, content=content, parts=parts, metadata=metadata)

"""LangChain messages <-> core messages, losslessly.

A core :class:`~context_gatekeeper.Message` keeps the text in ``content`` (what
selection reads and edits rewrite), a content-block list in ``parts``, and in
``metadata`` the tool-call fields the core checks (``tool_calls``, ``tool_call_id``,
``name``) plus everything else LangChain serialises under ``"langchain"``.  Types,
ids, names, tool calls, additional_kwargs and response metadata survive a round
trip; an assistant message whose text an edit rewrote loses only provider-specific
keys and blocks that would no longer match its text (thought signatures, reasoning and
thinking blocks).

A message without an id gets one in the core (every core message has one: edits,
``diff`` and ``apply`` address messages by it), marked as made up
(``metadata["langchain"]["id_generated"]``, stored with the message), so
:func:`from_core` gives it back without one: ``from_core(to_core(HumanMessage("hi")))
== HumanMessage("hi")``.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from langchain_core.messages import (
    AIMessage, BaseMessage, ChatMessage, FunctionMessage, HumanMessage, SystemMessage, ToolMessage, message_to_dict,
    messages_from_dict,
)
from langchain_core.messages.utils import convert_to_messages

from pydantic import ValidationError

from context_gatekeeper import InvalidInputError, InvalidTypeError, Message
from context_gatekeeper.integration import Role, lines_to_blocks, new_message_id

__all__ = ["to_core", "to_core_messages", "from_core", "from_core_messages", "PROVIDER_SPECIFIC", "ID_GENERATED", "text_of",
           "same_messages", "role_of", "MESSAGE_LIKES", "as_messages"]

_ROLES: dict[str, Role] = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool", "function": "tool"}
_TYPES = {"user": "human", "assistant": "ai", "system": "system", "tool": "tool"}
_HOISTED = ("tool_calls", "invalid_tool_calls", "tool_call_id", "name")
ID_GENERATED = "id_generated"
"""Key in ``metadata["langchain"]`` marking a core id that :func:`to_core` made up."""
PROVIDER_SPECIFIC = re.compile(r"signature|reasoning|thinking|thought", re.IGNORECASE)
"""additional_kwargs keys and content-block types dropped from an assistant message whose text was rewritten."""


_CLASS_ROLES: tuple[tuple[type[BaseMessage], Role], ...] = (
    (HumanMessage, "user"), (AIMessage, "assistant"), (SystemMessage, "system"), (ToolMessage, "tool"),
    (FunctionMessage, "tool"),
)
_CHAT_ROLES: dict[str, Role] = {"user": "user", "human": "user", "assistant": "assistant", "ai": "assistant",
                                "system": "system", "tool": "tool", "function": "tool"}
"""A ``ChatMessage``'s ``role`` as a core role."""


def role_of(message: BaseMessage) -> Role | None:
    """The core role of a LangChain message, by its type or else its class: a streamed
    ``AIMessageChunk`` (what ``.stream()`` hands a history) answers like an ``AIMessage``, a
    ``FunctionMessage`` is a tool result, a ``ChatMessage`` has the role it names (``user`` /
    ``human``, ``assistant`` / ``ai``, ``system``, ``tool`` / ``function``).  ``None`` for
    other kinds and roles."""
    role = _ROLES.get(message.type)
    if role is None:
        if isinstance(message, ChatMessage):
            return _CHAT_ROLES.get(str(message.role).lower())
        role = next((r for cls, r in _CLASS_ROLES if isinstance(message, cls)), None)
    return role


MESSAGE_LIKES: tuple[type, ...] = (BaseMessage, tuple, Mapping, str)
"""What a list of messages may hold where LangChain reads message-likes (chat models, prompts,
``RunnableWithMessageHistory``'s input): messages, ``(role, text)`` tuples, role/content dicts,
strings (human messages).  Not a list: a list holds messages."""


def as_messages(items: Sequence[Any]) -> list[BaseMessage]:
    """``items`` as LangChain messages, message-likes (:data:`MESSAGE_LIKES`) converted as chat
    models convert them (``convert_to_messages``); messages are kept, the same objects.

    Raises:
        InvalidInputError: an item LangChain cannot read as a message (an unknown role, a dict
            without role and content, a tuple of three)."""
    if all(isinstance(item, BaseMessage) for item in items):
        return list(items)
    try:
        return convert_to_messages(list(items))
    except (NotImplementedError, ValueError, TypeError, KeyError) as error:
        raise InvalidInputError(
            f"a message of the list could not be read as a LangChain message: {error}; each item must be a "
            "message, a {'role': ..., 'content': ...} dict, a (role, text) tuple or a string"
        ) from error


def _is_text(block: Any) -> bool:
    """Whether a content block is text: a string, or a ``{"type": "text"}`` dict."""
    return isinstance(block, str) or (isinstance(block, dict) and block.get("type") == "text")


def _block_text(block: Any) -> str:
    """The text of a text block (see :func:`_is_text`)."""
    return block if isinstance(block, str) else str(block.get("text", ""))


def text_of(content: Any, sep: str = "\n") -> str:
    """The text of a LangChain message's content: a string, or the text blocks of a list
    joined by ``sep`` (a newline: the text before an image and the text after it stay
    apart, and an edit can give each block its own lines back, see :func:`_content_for`).

    >>> text_of([{"type": "text", "text": "My photo:"}, {"type": "image", "url": "u"}, "Which cliffs?"])
    'My photo:\\nWhich cliffs?'
    """
    if isinstance(content, str):
        return content
    return sep.join(_block_text(block) for block in content if _is_text(block))


def to_core(message: BaseMessage) -> Message:
    """A LangChain message as a core message (the id is kept, or made up and marked so if missing)."""
    if not isinstance(message, BaseMessage):
        raise InvalidTypeError(
            f"expected a LangChain BaseMessage, got {type(message).__name__}; pass HumanMessage, AIMessage, "
            "SystemMessage or ToolMessage objects"
        )
    serialised = copy.deepcopy(message_to_dict(message))  # nothing shared with the caller's message
    kind, data = serialised["type"], dict(serialised["data"])
    content = data.pop("content")
    role: Role = role_of(message) or "user"  # other kinds and roles ride as user text
    metadata: dict[str, Any] = {key: data.pop(key) for key in _HOISTED if data.get(key)}
    data.pop("id", None)
    data.pop("type", None)
    metadata["langchain"] = {"type": kind, "data": data}
    if not message.id:
        metadata["langchain"][ID_GENERATED] = True
    return Message(
        id=message.id or new_message_id(),
        role=role,
        content=text_of(content),
        parts=tuple(content) if isinstance(content, list) else None,
        metadata=metadata,
    )


def _content_for(message: Message) -> Any:
    """The LangChain content: the block list with its text replaced when it was edited.

    The text blocks were joined by newlines into ``content`` (:func:`text_of`).  The edited
    text's lines are lined up with the old ones (:func:`~context_gatekeeper.integration.lines_to_blocks`), and each text block gets
    the lines that stand where its own stood, in its place: an image between two paragraphs
    stays between them, and a block whose lines were all deleted goes.  An assistant message
    also loses its reasoning blocks (``thinking``, ``redacted_thinking``, ``reasoning``):
    they argue for the text it no longer says, and a provider would be sent the superseded
    fact on every later call."""
    if message.parts is None:
        return message.content
    blocks = copy.deepcopy(list(message.parts))
    if message.origin == "original" or text_of(blocks) == message.content:
        return blocks
    if message.role == "assistant":
        blocks = [b for b in blocks if not (isinstance(b, dict) and PROVIDER_SPECIFIC.search(str(b.get("type", ""))))]
    texts = [i for i, block in enumerate(blocks) if _is_text(block)]
    if not texts:  # an edit gave text to a message of no text block: it goes first
        return [{"type": "text", "text": message.content}, *blocks]
    pieces = dict(zip(texts, lines_to_blocks(message.content, [_block_text(blocks[i]) for i in texts])))
    out: list[Any] = []
    for index, block in enumerate(blocks):
        if index not in pieces:
            out.append(block)
        elif pieces[index] is not None:
            out.append(pieces[index] if isinstance(block, str) else {**block, "text": pieces[index]})
    return out


def from_core(message: Message) -> BaseMessage:
    """A core message as the LangChain message it came from (or a new one of its role),
    without the core's id when :func:`to_core` made that id up."""
    stored = copy.deepcopy(dict(message.metadata.get("langchain") or {}))
    kind = stored.get("type") or _TYPES[message.role]
    data = dict(stored.get("data") or {})
    for key in _HOISTED:
        if key in message.metadata:
            data[key] = copy.deepcopy(message.metadata[key])
    rewritten = message.origin == "edited" and message.role == "assistant"  # AIMessageChunk too
    if rewritten and data.get("additional_kwargs"):
        data["additional_kwargs"] = {k: v for k, v in data["additional_kwargs"].items() if not PROVIDER_SPECIFIC.search(k)}
    if kind == "tool" and not isinstance(data.get("tool_call_id"), str):
        # a tool message the core inserted (Transcript.apply): readable, with no call to name
        data["tool_call_id"] = ""
    message_id = None if stored.get(ID_GENERATED) else message.id
    data.update(content=_content_for(message), id=message_id, type=kind)
    return _rebuilt(kind, data, message.id)


_RESTORED = frozenset({"usage_metadata"})
"""The optional fields :func:`_rebuilt` puts back unchecked when LangChain's own validation
refuses them: those LangChain itself sets so (an LLM cache hit's ``usage_metadata`` of
``{"total_cost": 0}``: no token counts), which nothing downstream reads for its shape.  Any
other refused field (a malformed ``tool_calls``) is an error: put back unchecked, it would be
sent to a provider, or break the code that reads it."""


def _rebuilt(kind: str, data: dict[str, Any], core_id: str) -> BaseMessage:
    """The LangChain message of type ``kind`` with the fields ``data``.

    LangChain makes some messages its own validation refuses: an LLM cache hit is an
    ``AIMessage`` whose ``usage_metadata`` is ``{"total_cost": 0}`` (no token counts).  Stored,
    such a message reads back as it was made: built without the refused fields, when each is
    one of :data:`_RESTORED`, which are then set as they were (as ``model_copy`` made them;
    LangGraph's serializer keeps them so too).  A message refused otherwise (a required field
    unusable, a malformed ``tool_calls``, a field LangChain's validators fail on)
    raises :class:`~context_gatekeeper.InvalidInputError` naming it (core id ``core_id``)."""
    refused: set[str] = set()
    try:
        return messages_from_dict([{"type": kind, "data": data}])[0]
    except ValidationError as error:
        refused = {str(e["loc"][0]) for e in error.errors() if e.get("loc")}
        first: Exception = error
        problem = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors()[:3])
    except (TypeError, AttributeError) as error:  # a "before" validator of LangChain's failed on a field's shape
        first, problem = error, f"{type(error).__name__}: {error}"
    if refused and refused <= _RESTORED:
        try:  # without the refused fields: a required one is then missing, and refused again
            message = messages_from_dict([{"type": kind, "data": {k: v for k, v in data.items() if k not in refused}}])[0]
        except (ValidationError, TypeError, AttributeError):
            pass
        else:
            return message.model_copy(update={k: data[k] for k in refused if k in data})
    raise InvalidInputError(
        f"stored message {core_id!r} ({kind}) cannot be rebuilt as a LangChain message ({problem}); "
        "replace or delete it (by that id: apply([Replace(...)]) or apply([Delete(...)]) on the history), "
        "or store messages LangChain itself accepts"
    ) from first


def to_core_messages(messages: Iterable[BaseMessage]) -> list[Message]:
    """:func:`to_core` for each message."""
    return [to_core(m) for m in messages]


def from_core_messages(messages: Sequence[Message]) -> list[BaseMessage]:
    """:func:`from_core` for each message."""
    return [from_core(m) for m in messages]


def same_messages(messages: Sequence[BaseMessage], core: Sequence[Message]) -> bool:
    """Whether ``messages`` are ``core`` position by position: same length, and each pair of
    the same role and text, with the same id where the LangChain message has one."""
    if len(messages) != len(core):
        return False
    for message, stored in zip(messages, core):
        role = role_of(message)
        if role is not None and role != stored.role:
            return False
        if message.id is not None and message.id != stored.id:
            return False
        # a history written before text blocks were joined by newlines holds them joined by ""
        if stored.content not in (text_of(message.content), text_of(message.content, sep="")):
            return False
    return True

"""LlamaIndex chat messages <-> core messages, losslessly.

A core :class:`~context_gatekeeper.Message` keeps:

* ``content``: the text of the message's ``TextBlock`` s joined by newlines (what
  ``ChatMessage.content`` returns), which selection reads and edits rewrite;
* ``parts``: the message's ``blocks`` as JSON dicts (``block.model_dump(mode="json")``),
  kept opaque and turned back into blocks; ``None`` when the blocks are exactly one
  ``TextBlock`` holding ``content`` (the common case, stored compactly);
* ``metadata["additional_kwargs"]``: the message's ``additional_kwargs`` as JSON (bytes
  become base64 text, pydantic objects and sets dicts and lists, as LlamaIndex's own
  serialiser does); a value JSON cannot hold (an arbitrary object; a NaN or infinite float,
  which that serialiser would turn into ``null``) is refused with ``InvalidInputError``,
  naming where it is, and nothing is written;
  ``metadata["role"]`` the LlamaIndex role when it is not one of the core's four
  (``developer``, ``function``, ``chatbot``, ``model``); and, for the core's tool-pair
  checks only, ``metadata["tool_calls"]`` (``[{"id", "name", "args"}]`` from
  ``ToolCallBlock`` s or ``additional_kwargs["tool_calls"]``) and
  ``metadata["tool_call_id"]``.  :func:`from_core` rebuilds ``additional_kwargs`` from
  the stored copy alone.

**Ids.**  A LlamaIndex ``ChatMessage`` has no id field, and nothing is added to the
messages handed back: many LLM integrations merge ``additional_kwargs`` into the
provider's request (OpenAI's ``to_openai_message_dict`` does), so an id kept there
would be sent to the provider.  :func:`to_core` gives each new message a fresh id;
:func:`match_ids` keeps ids stable when a caller hands messages back (``memory.set``)
by aligning them with the current state by content.

An assistant message whose text an edit rewrote loses what no longer matches its
text: its ``ThinkingBlock`` s and provider-specific ``additional_kwargs`` keys
(thought signatures, reasoning traces).  What the caller supplied with a message
(``put``, or ``set`` replacing a message, which keeps its id) stays: :func:`to_core`
records a digest of the text those keys arrived with (``metadata["provider_text"]``), and
:func:`from_core` drops them only from a message whose text no longer has that digest (an
undo that restores the text restores them too).

**Parts that are not LlamaIndex blocks.**  A store is shared: the LangChain adapter writes
a multimodal turn's content parts as LangChain has them, and a newer llama-index may store
a block type this one does not know.  :func:`from_core` reads them rather than fail
(pydantic would refuse the whole message, and every ``get`` of the session with it): a
LangChain text part becomes a ``TextBlock``, a LangChain image by URL or base64 an
``ImageBlock``, and any other part a ``TextBlock`` standing in for it (its own text, or
``"[<type> part omitted #<digest>]"``, the digest the part's, so different parts never read
the same), so the conversation stays readable.  What is stored is never changed by reading:
:func:`match_ids` keeps an unchanged message's stored parts, and a changed message standing
where one holding such parts stood keeps them, in the format they were written in, with its
new text (as a model edit of the text does; the adapter that wrote them reads the new text
into its text parts); a change beyond its text (a block other than its text added, dropped or
changed; its ``additional_kwargs``) is refused with ``InvalidInputError``: stored as LlamaIndex
blocks, the parts would be lost, or unreadable to the adapter that wrote them.  A message
appended or inserted is stored as given, whatever its text.
"""

from __future__ import annotations

import copy
import difflib
import hashlib
import json
import math
from collections.abc import Iterable, Sequence
from typing import Any

from llama_index.core.base.llms.types import ChatMessage, MessageRole, TextBlock, ToolCallBlock
from llama_index.core.bridge.pydantic import BaseModel, ValidationError

from context_gatekeeper import InvalidInputError, InvalidTypeError, Message
from context_gatekeeper.integration import Role, arguments_text, lines_to_blocks, new_message_id

from .parts import PROVIDER_SPECIFIC, as_block, foreign, held, is_reasoning, kind_of, stand_in

__all__ = [
    "to_core",
    "to_core_messages",
    "from_core",
    "from_core_messages",
    "match_ids",
    "fingerprint",
    "call_text",
    "validation_problems",
    "PROVIDER_SPECIFIC",
]

_ROLES: dict[str, Role] = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
    "chatbot": "assistant",
    "model": "assistant",
    "tool": "tool",
    "function": "tool",
}
PROVIDER_TEXT = "provider_text"
"""The core metadata key holding the digest of the text an assistant message's
provider-specific keys arrived with (see the module docstring)."""


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def _rewritten(message: Message) -> bool:
    """Whether an edit rewrote ``message``'s text since its provider-specific keys came with
    it: its text no longer has the digest they arrived with (a message stored before the
    digest was recorded: its provenance says it was edited)."""
    recorded = message.metadata.get(PROVIDER_TEXT)
    if isinstance(recorded, str):
        return recorded != _digest(message.content)
    return message.origin == "edited"


def _role_value(role: Any) -> str:
    return role.value if isinstance(role, MessageRole) else str(role)


def _a_message(role: Any) -> str:
    """``"a user message"``, ``"an assistant message"``: a message of ``role``, for errors."""
    name = _role_value(role)
    return f"{'an' if name[:1] in ('a', 'e', 'i', 'o', 'u') else 'a'} {name} message"


def _tool_calls(blocks: Sequence[Any], kwargs: dict[str, Any]) -> list[dict[str, Any]]:
    """Tool calls as the core's pairing check reads them: ``[{"id", "name", "args"}]``."""
    calls: list[dict[str, Any]] = [
        {"id": b.tool_call_id, "name": b.tool_name, "args": b.tool_kwargs}
        for b in blocks
        if isinstance(b, ToolCallBlock) and b.tool_call_id
    ]
    seen = {c["id"] for c in calls}
    for call in kwargs.get("tool_calls") or ():
        if not isinstance(call, dict):
            continue
        call_id = call.get("id") or call.get("tool_id") or call.get("tool_call_id")
        if isinstance(call_id, str) and call_id and call_id not in seen:
            function = call.get("function")
            if not isinstance(function, dict):
                function = {}
            calls.append({"id": call_id, "name": call.get("name") or function.get("name"), "args": None})
            seen.add(call_id)
    return calls


def call_text(message: Message) -> str:
    """The tool calls an assistant message sends beside its text, as text to count: each call's
    name and arguments (JSON), from its ``ToolCallBlock`` s and ``additional_kwargs["tool_calls"]``
    (a call found in both, by id, once); ``""`` when it makes none."""
    if message.role != "assistant":
        return ""
    pieces: list[str] = []
    seen: set[Any] = set()
    for block in message.parts or ():
        if isinstance(block, dict) and block.get("block_type") == "tool_call":
            seen.add(block.get("tool_call_id"))
            pieces.append(f"{block.get('tool_name') or ''} {arguments_text(block.get('tool_kwargs'))}")
    kwargs = message.metadata.get("additional_kwargs")
    listed = kwargs.get("tool_calls") if isinstance(kwargs, dict) else None
    for call in listed if isinstance(listed, list) else ():
        if not isinstance(call, dict):
            continue
        call_id = call.get("id") or call.get("tool_id") or call.get("tool_call_id")
        if call_id and call_id in seen:
            continue
        function = call.get("function")
        if not isinstance(function, dict):
            function = {}
        name = call.get("name") or function.get("name") or ""
        arguments = function.get("arguments", call.get("input", call.get("args")))
        pieces.append(f"{name} {arguments_text(arguments)}")
    return "\n".join(pieces)


def to_core(message: ChatMessage, *, message_id: str | None = None) -> Message:
    """A LlamaIndex message as a core message, with ``message_id`` or a fresh id.

    Nothing of ``message`` is kept by reference: later changes to it never reach the core.
    """
    if not isinstance(message, ChatMessage):
        raise InvalidTypeError(
            f"expected a LlamaIndex ChatMessage, got {type(message).__name__}; pass ChatMessage(role=..., content=...)"
        )
    try:
        data = message.model_dump(mode="json")
    except (ValueError, TypeError) as error:  # pydantic's PydanticSerializationError is a ValueError
        raise InvalidInputError(
            f"{_a_message(message.role)} cannot be stored: its additional_kwargs or blocks hold a value "
            f"JSON cannot keep ({type(error).__name__}: {error}); nothing was written. Keep only str, int, float, "
            "bool, None, lists and dicts with str keys there"
        ) from None
    _refuse_non_finite(message)
    role_name = _role_value(message.role)
    role = _ROLES.get(role_name)
    if role is None:  # an unknown custom role rides as user text
        role = "user"
    content = message.content or ""
    blocks = data.get("blocks") or []
    simple = len(message.blocks) == 1 and isinstance(message.blocks[0], TextBlock)
    parts = None if simple else tuple(blocks)
    kwargs = data.get("additional_kwargs") or {}
    metadata: dict[str, Any] = {}
    if kwargs:
        metadata["additional_kwargs"] = kwargs
    if role_name != role:
        metadata["role"] = role_name
    calls = _tool_calls(message.blocks, kwargs) if role == "assistant" else []
    if calls:
        metadata["tool_calls"] = calls
    if role == "tool" and isinstance(kwargs.get("tool_call_id"), str):
        metadata["tool_call_id"] = kwargs["tool_call_id"]
    if role == "assistant" and any(PROVIDER_SPECIFIC.search(str(key)) for key in kwargs):
        metadata[PROVIDER_TEXT] = _digest(content)  # what they were given with, kept through set()
    return Message(id=message_id or new_message_id(), role=role, content=content, parts=parts, metadata=metadata)


def _refuse_non_finite(message: ChatMessage) -> None:
    """``InvalidInputError`` naming the first NaN or infinity in ``message``'s
    ``additional_kwargs`` or blocks: JSON has no such number, and pydantic's JSON dump would
    store it as ``null``, silently (see the module docstring)."""
    found = _non_finite(message.additional_kwargs, "additional_kwargs")
    for index, block in enumerate(message.blocks):
        found = found or _non_finite(block, f"blocks[{index}]")
    if found is not None:
        path, value = found
        raise InvalidInputError(
            f"{_a_message(message.role)} cannot be stored: {path} is {value!r}, and JSON has no NaN or "
            "infinity (it would come back as None); nothing was written. Store it as a string (str(value)) or "
            "leave it out"
        )


def _non_finite(value: Any, path: str) -> tuple[str, float] | None:
    """The path and value of the first NaN or infinite float in ``value`` (dicts, lists,
    tuples, sets and pydantic models, however nested), or ``None``."""
    if isinstance(value, float):
        return None if math.isfinite(value) else (path, value)
    if isinstance(value, dict):
        items: Iterable[tuple[str, Any]] = ((f"{path}[{key!r}]", item) for key, item in value.items())
    elif isinstance(value, (list, tuple, set, frozenset)):
        items = ((f"{path}[{index}]", item) for index, item in enumerate(value))
    elif isinstance(value, BaseModel):
        items = ((f"{path}.{name}", getattr(value, name, None)) for name in type(value).model_fields)
    else:
        return None
    for where, item in items:
        found = _non_finite(item, where)
        if found is not None:
            return found
    return None


def _blocks_for(message: Message) -> list[Any]:
    """The block dicts: the stored ones, with their text replaced when an edit changed it.

    The text blocks were joined by newlines into ``content``.  The edited text's lines are
    lined up with the old ones (:func:`~context_gatekeeper.integration.lines_to_blocks`), and each block gets the lines that
    stand where its own stood, in its place: an image between two paragraphs stays
    between them, a line added after a paragraph joins its block, and a block whose
    lines were all deleted goes.  A rewritten assistant message also loses its thinking
    blocks and LangChain reasoning parts (see the module docstring).  LangChain parts of text
    and images are read as LlamaIndex blocks first (:func:`~llamaindex_gatekeeper.parts.as_block`): the text parts hold
    the content, as LangChain's adapter stored it.
    """
    if message.parts is None:
        return [{"block_type": "text", "text": message.content}]
    blocks = [as_block(part) for part in copy.deepcopy(list(message.parts))]
    texts = [b for b in blocks if isinstance(b, dict) and b.get("block_type") == "text"]
    if message.origin == "original" or "\n".join(str(b.get("text", "")) for b in texts) == message.content:
        return blocks
    if message.origin == "edited" and message.role == "assistant":
        blocks = [b for b in blocks if not is_reasoning(b)]
    if not texts:  # an edit gave text to a message of no text block: it goes first
        return [{"block_type": "text", "text": message.content}, *blocks] if message.content else blocks
    pieces = lines_to_blocks(message.content, [str(b.get("text", "")) for b in texts])
    emptied = set()
    for block, piece in zip(texts, pieces):
        if piece is None:
            emptied.add(id(block))
        else:
            block["text"] = piece
    return [b for b in blocks if id(b) not in emptied]


def validation_problems(error: Any) -> str:
    """A pydantic ``ValidationError``'s problems in one line ("field: message; ..."), for the
    library's own error that replaces it."""
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'input'}: {e['msg']}" for e in error.errors())


def _shown(message: Message) -> tuple[ChatMessage, frozenset[int]]:
    """:func:`from_core`'s message, and the positions of its blocks that stand in for a stored
    part no LlamaIndex block can hold (see the module docstring).  Every block is checked alone
    only when the message as a whole is refused."""
    role = message.metadata.get("role") or message.role
    kwargs = copy.deepcopy(dict(message.metadata.get("additional_kwargs") or {}))
    if message.role == "assistant" and _rewritten(message):
        kwargs = {k: v for k, v in kwargs.items() if not PROVIDER_SPECIFIC.search(k)}
    blocks = _blocks_for(message)
    try:
        return ChatMessage(role=role, blocks=blocks, additional_kwargs=kwargs), frozenset()
    except ValidationError:  # a part this llama-index cannot hold: read the rest, stand in for it
        pass
    readable: list[Any] = []
    stand_ins: set[int] = set()
    for index, block in enumerate(blocks):
        shown = held(block)
        if shown is None:
            stand_ins.add(index)
            shown = TextBlock(text=stand_in(block))
        readable.append(shown)
    return ChatMessage(role=role, blocks=readable, additional_kwargs=kwargs), frozenset(stand_ins)


def from_core(message: Message) -> ChatMessage:
    """A core message as a new LlamaIndex ``ChatMessage`` (a fresh copy every call); a stored
    part no LlamaIndex block can hold is read as a ``TextBlock`` standing in for it (see the
    module docstring)."""
    return _shown(message)[0]


def to_core_messages(messages: Iterable[ChatMessage]) -> list[Message]:
    """:func:`to_core` for each message (fresh ids)."""
    return [to_core(m) for m in messages]


def from_core_messages(messages: Sequence[Message]) -> list[ChatMessage]:
    """:func:`from_core` for each message."""
    return [from_core(m) for m in messages]


def fingerprint(message: ChatMessage | Message) -> str:
    """What a message says, as one comparable string (role, blocks, additional_kwargs)."""
    chat = from_core(message) if isinstance(message, Message) else message
    data = chat.model_dump(mode="json")
    return json.dumps([_role_value(chat.role), data.get("blocks"), data.get("additional_kwargs")], sort_keys=True)


def match_ids(current: Sequence[Message], incoming: Sequence[ChatMessage]) -> list[Message]:
    """Core messages for ``incoming`` with the ids of the ``current`` messages they match.

    Messages are aligned in order by content (:func:`fingerprint`): an unchanged message
    keeps its id and version (so ``set(get_all())`` changes nothing); where a run of
    messages was replaced one for one, a message that stands where one of the same role
    stood keeps that id (a change of its content, not a delete and insert: see
    :func:`_in_place`); every other message gets a fresh id.

    Raises:
        InvalidInputError: a message standing where one holding parts LlamaIndex does not
            write or cannot hold stood changes more than its text (see the module docstring).
    """
    new = [to_core(m) for m in incoming]
    shown = [_shown(m) for m in current]
    old_keys = [fingerprint(chat) for chat, _ in shown]
    new_keys = [fingerprint(m) for m in incoming]
    out = list(new)
    matcher = difflib.SequenceMatcher(a=old_keys, b=new_keys, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            out[j1:j2] = current[i1:i2]
        elif tag == "replace" and i2 - i1 == j2 - j1:
            for i, j in zip(range(i1, i2), range(j1, j2)):
                if current[i].role == new[j].role:
                    out[j] = _in_place(current[i], shown[i], incoming[j], new[j], j)
    return out


def _in_place(before: Message, shown: tuple[ChatMessage, frozenset[int]], given: ChatMessage, after: Message,
              index: int) -> Message:
    """What is stored for ``given`` (``messages[index]``, read as ``after``), which stands where
    ``before`` (read as ``shown``: :func:`_shown`) stood: ``after`` under ``before``'s id; but
    where ``before`` holds parts another adapter wrote or LlamaIndex cannot hold, ``before``
    with ``given``'s text (its stored parts and metadata kept, in the format they were written
    in), when its text alone changed (:func:`_changed_text`).

    Raises:
        InvalidInputError: ``given`` changes more than the text of such a message.
    """
    chat, stand_ins = shown
    if not stand_ins and not foreign(before.parts):
        return Message(id=before.id, role=after.role, content=after.content, parts=after.parts, metadata=after.metadata)
    text = _changed_text(chat, stand_ins, given)
    if text is None:
        kinds = ", ".join(dict.fromkeys(kind_of(part) for part in before.parts or ()))
        raise InvalidInputError(
            f"messages[{index}] stands where stored message {before.id!r} stood and changes more than its text; "
            f"that message holds parts LlamaIndex reads converted or through stand-ins ({kinds}), which set() keeps "
            "as stored, so only its text can change (stored as LlamaIndex blocks, the parts would be lost, or "
            "unreadable to the adapter that wrote them). Hand its other blocks and additional_kwargs back "
            "as get_all() returned them, or, to replace the message, set() once without it and again with the new "
            "one; nothing was written"
        )
    return Message(id=before.id, role=before.role, content=text, parts=before.parts, metadata=before.metadata)


def _changed_text(shown: ChatMessage, stand_ins: frozenset[int], given: ChatMessage) -> str | None:
    """The text of ``given`` where it differs from ``shown`` (a stored message as read) in its
    text alone: the same role and ``additional_kwargs``, and its other blocks (each block not
    text, and each ``TextBlock`` standing in for a stored part: positions ``stand_ins`` of
    ``shown``) the same and in the same order; its other ``TextBlock`` s, joined by newlines as
    ``content`` joins them.  ``None`` when anything else changed."""
    old, new = shown.model_dump(mode="json"), given.model_dump(mode="json")
    if (old["role"], old["additional_kwargs"]) != (new["role"], new["additional_kwargs"]):
        return None
    others = [b for i, b in enumerate(old["blocks"]) if i in stand_ins or b.get("block_type") != "text"]
    texts: list[str] = []
    for block in new["blocks"]:
        if others and block == others[0]:
            others.pop(0)
        elif block.get("block_type") == "text":
            texts.append(str(block.get("text", "")))
        else:
            return None
    return None if others else "\n".join(texts)

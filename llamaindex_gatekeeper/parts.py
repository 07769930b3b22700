"""How the LlamaIndex adapter reads stored message parts that are not LlamaIndex blocks.

A store is shared: the LangChain adapter stores a multimodal turn's content parts as
LangChain has them, and a newer llama-index may store a block type this one does not know.
:func:`as_block` reads LangChain's text and image parts as LlamaIndex block dicts;
:func:`held` says whether the installed llama-index can hold a block, :func:`stand_in`
gives the text that stands in for one it cannot, and :func:`foreign` tells parts another
adapter wrote (see :mod:`llamaindex_gatekeeper.convert`, whose ``from_core`` and
``match_ids`` use them).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from typing import Any

from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.bridge.pydantic import ValidationError

__all__ = ["PROVIDER_SPECIFIC", "STAND_IN", "as_block", "foreign", "held", "is_reasoning", "kind_of", "stand_in"]

PROVIDER_SPECIFIC = re.compile(r"signature|reasoning|thinking|thought", re.IGNORECASE)
"""additional_kwargs keys (and LangChain part types) dropped from an assistant message whose text was rewritten."""
STAND_IN = "[{kind} part omitted #{digest}]"
"""The text standing in for a stored part no LlamaIndex block can hold (and that has no text
of its own): ``kind`` is its ``block_type`` or LangChain ``type``, ``digest`` six hex digits
of the part's SHA-256, so that two different parts never read the same (two voice notes of
different audio: ``set()`` matches the messages handed back by what they read)."""
_BASE64_URL = re.compile(r"data:(?P<mime>[^;,]*)[^,]*;base64,(?P<data>.*)", re.DOTALL)


def is_reasoning(block: Any) -> bool:
    """Whether a stored block argues for an assistant's text: a LlamaIndex ``thinking`` block,
    or a LangChain reasoning part (``thinking``, ``reasoning``, ...)."""
    if not isinstance(block, dict):
        return False
    return block.get("block_type") == "thinking" or bool(PROVIDER_SPECIFIC.search(str(block.get("type", ""))))


def as_block(part: Any) -> Any:
    """``part`` as a LlamaIndex block dict where it is a LangChain content part of text (a
    string or ``{"type": "text"}``, whose text LangChain's adapter stored as the content) or
    an image by URL or base64; any other part as it is."""
    if isinstance(part, str):
        return {"block_type": "text", "text": part}
    if not isinstance(part, dict) or "block_type" in part:
        return part
    if part.get("type") == "text":
        return {"block_type": "text", "text": str(part.get("text", ""))}
    return _langchain_image(part) or part


def _langchain_image(part: dict[str, Any]) -> dict[str, Any] | None:
    """An image block dict for a LangChain image part: OpenAI's ``image_url`` (a URL, or a
    ``data:`` URL of base64), LangChain's ``image`` (``url`` / ``base64``, or ``source_type``
    with ``url`` / ``data``) and Anthropic's (``source``); ``None`` for other parts."""
    if part.get("type") == "image_url":
        image = part.get("image_url")
        image = image if isinstance(image, dict) else {"url": image}
        return _image_block(image.get("url"), None, None, image.get("detail"))
    if part.get("type") != "image":
        return None
    source: dict[str, Any] = part["source"] if isinstance(part.get("source"), dict) else {}
    data = part.get("base64") or source.get("data") or (part.get("data") if part.get("source_type") == "base64" else None)
    return _image_block(part.get("url") or source.get("url"), data, part.get("mime_type") or source.get("media_type"))


def _image_block(url: Any, data: Any, mimetype: Any, detail: Any = None) -> dict[str, Any] | None:
    """An image block dict of base64 ``data`` (a ``data:`` URL's, when ``url`` is one) or else
    of ``url``; ``None`` when there is neither text."""
    if isinstance(url, str) and (inline := _BASE64_URL.match(url)):
        url, data, mimetype = None, inline["data"], inline["mime"] or mimetype
    block: dict[str, Any] = {"block_type": "image", "image_mimetype": mimetype if isinstance(mimetype, str) else None}
    if isinstance(detail, str):
        block["detail"] = detail
    if isinstance(data, str) and data:
        return {**block, "image": data}
    if isinstance(url, str) and url:
        return {**block, "url": url}
    return None


def kind_of(part: Any) -> str:
    """A stored part's kind, to name it: its ``block_type`` or LangChain ``type``, else its
    Python type's name."""
    kind = (part.get("block_type") or part.get("type")) if isinstance(part, dict) else None
    return kind if isinstance(kind, str) and kind else type(part).__name__


def foreign(parts: Sequence[Any] | None) -> bool:
    """Whether stored ``parts`` hold one that is not a LlamaIndex block dict (a LangChain part:
    another adapter wrote the message, and reads it back in its own format)."""
    return any(not (isinstance(part, dict) and "block_type" in part) for part in parts or ())


def stand_in(part: Any) -> str:
    """The text standing in for a stored part no LlamaIndex block can hold: its own text when
    it has some (readable as it was), else :data:`STAND_IN`."""
    text = part.get("text") if isinstance(part, dict) else None
    if isinstance(text, str) and text.strip():
        return text
    dumped = json.dumps(part, sort_keys=True, default=repr)
    return STAND_IN.format(kind=kind_of(part), digest=hashlib.sha256(dumped.encode("utf-8")).hexdigest()[:6])


def held(block: Any) -> Any:
    """``block`` as the LlamaIndex block this version makes of it, or ``None`` when it cannot."""
    try:
        return ChatMessage(blocks=[block]).blocks[0]
    except ValidationError:
        return None

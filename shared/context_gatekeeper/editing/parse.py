"""Reading an editing model's answer: its JSON as requests on real message ids.

:func:`~context_gatekeeper.editing.extract.load_json` (re-exported here) finds the
JSON in the answer: code fences, prose around it, checked repair, cut-off answers
refused, an example beside the answer not taken for it.  :func:`parse_rewrite` and
:func:`parse_patch` check its shape and turn it into requests on *real* message ids,
or raise :class:`~context_gatekeeper.errors.EditError` listing what is wrong (the
text is shown to the model on the retry).

>>> load_json('Sure! ```json\\n{"operations": []}\\n``` Done.')
{'operations': []}
"""

from __future__ import annotations

import re
import reprlib
import unicodedata
from collections.abc import Callable
from typing import Any

from .extract import load_json
from .format import EditView
from ..errors import EditError
from ..records.operations import Delete, InsertAfter, Replace, Request

__all__ = ["load_json", "parse_rewrite", "parse_patch", "has_lone_surrogate", "replace_lone_surrogates"]

_NEW_IDS = {"", "new", "null", "none"}
_OPS = {"replace": "replace", "delete": "delete", "insert_after": "insert_after", "insert": "insert_after"}
_SURROGATE = re.compile("[\ud800-\udfff]")


def has_lone_surrogate(text: str) -> bool:
    """Whether ``text`` holds a lone surrogate (``"\\ud800"``), which cannot be encoded.

    >>> has_lone_surrogate("ok \U0001F600"), has_lone_surrogate("bad " + chr(0xD800))
    (False, True)
    """
    return _SURROGATE.search(text) is not None


def replace_lone_surrogates(text: str) -> str:
    """``text`` with each lone surrogate replaced by U+FFFD (what the chat does to such input).

    >>> replace_lone_surrogates("caf" + chr(0xDCE9))
    'caf\ufffd'
    """
    return _SURROGATE.sub("\ufffd", text)


def _coerce(data: Any, accept: Callable[[Any], bool]) -> Any:
    """A parsed answer, loading it first if it is still text."""
    return load_json(data, accept) if isinstance(data, str) else data


def _list_of_objects(value: Any) -> bool:
    """A JSON array of objects (or an empty one)."""
    return isinstance(value, list) and all(isinstance(v, dict) for v in value)


def _rewrite_shape(value: Any) -> bool:
    """Shaped like a ``rewrite`` answer: an array of messages, or ``{"messages": [...]}``."""
    return _list_of_objects(value) or (isinstance(value, dict) and _list_of_objects(value.get("messages")))


def _patch_shape(value: Any) -> bool:
    """Shaped like a ``patch`` answer: ``{"operations": [...]}`` or a bare array of operations."""
    return _list_of_objects(value) or (isinstance(value, dict) and _list_of_objects(value.get("operations")))


def _alias(value: Any) -> str | None:
    """An id as the model wrote it: ints become strings, placeholders for "new" become None
    (``true`` or ``false`` are no placeholder: they name no message, and are refused as such)."""
    if value is None:
        return None
    text = str(value).strip()
    return None if text.lower() in _NEW_IDS else text


_QUOTE_LIMIT = 40
"""The most characters of a value the model wrote that a problem quotes (an id, an op, a role)."""
_MAX_NOTE = 2_000
"""The most characters of the problems one answer gets (the retry shows them to the model)."""
_SHORT = reprlib.Repr()
_SHORT.maxstring = _SHORT.maxother = _SHORT.maxlong = _QUOTE_LIMIT
_SHORT.maxlist = _SHORT.maxdict = _SHORT.maxtuple = 3
_SHORT.maxlevel = 2


def _short(text: str) -> str:
    """``text`` as a problem names it: whole when short, else its start and its length.

    >>> _short("7" * 50)
    '7777777777777777777777777777777777777777... (50 characters)'
    """
    return text if len(text) <= _QUOTE_LIMIT else f"{text[:_QUOTE_LIMIT]}... ({len(text):,} characters)"


def _quoted(value: Any) -> str:
    """``repr(value)`` for a problem, shortened like :func:`_short`: a runaway value from the
    model (a megabyte id) is never sent back whole.

    >>> _quoted("x" * 50)
    "'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'... (50 characters)"
    >>> _quoted("assistant")
    "'assistant'"
    """
    if isinstance(value, str):
        return repr(value) if len(value) <= _QUOTE_LIMIT else f"{value[:_QUOTE_LIMIT]!r}... ({len(value):,} characters)"
    return _SHORT.repr(value)


def _fail(problems: list[str]) -> None:
    """Raise one :class:`EditError` naming the first few problems, if there are any (at most
    :data:`_MAX_NOTE` characters of them)."""
    if problems:
        shown = problems[:5] + ([f"and {len(problems) - 5} more problems"] if len(problems) > 5 else [])
        note = "; ".join(shown)
        raise EditError(note if len(note) <= _MAX_NOTE else note[:_MAX_NOTE] + "... (more problems)")


def _blank(text: str) -> bool:
    """Whether ``text`` shows nothing: whitespace and invisible format characters (zero-width
    space U+200B, word joiner U+2060, byte-order mark U+FEFF, ...) only.

    >>> _blank(" \u200b\ufeff "), _blank("\u200bok")
    (True, False)
    """
    return not text.strip() or all(ch.isspace() or unicodedata.category(ch) == "Cf" for ch in text)


def _check_content(item: dict[str, Any], where: str, problems: list[str]) -> str | None:
    """The item's non-blank text content, or None with the problem recorded."""
    content = item.get("content")
    if not isinstance(content, str):
        problems.append(f"{where} has no text content (\"content\" must be a string)")
        return None
    if _blank(content):
        problems.append(f"{where} has empty content; delete the message instead of emptying it")
        return None
    if has_lone_surrogate(content):
        problems.append(f"{where} holds a lone surrogate escape (like \\ud800), which is not text; write characters")
        return None
    return content


def _no_text(where: str, alias: str | None) -> str:
    """The problem of an answer that changes a message shown with a placeholder (no text)."""
    return (f"{where} changes message {alias}, which has no text (its content was a placeholder in square "
            "brackets): it can be deleted (with its answer) or kept as it is, never changed")


def parse_rewrite(data: Any, view: EditView) -> list[Request]:
    """Diff a ``rewrite`` answer against ``view`` into requests on real ids.

    A known id with other text is a :class:`Replace`, a known id left out a
    :class:`Delete`, an object without an id an :class:`InsertAfter` (after the
    message returned before it; ``None``: before the first shown message).
    """
    data = _coerce(data, _rewrite_shape)
    if isinstance(data, dict) and isinstance(data.get("messages"), list):
        data = data["messages"]
    if not isinstance(data, list):
        raise EditError(f"expected a JSON array of messages, got a JSON {type(data).__name__}")
    problems: list[str] = []
    requests: list[Request] = []
    seen: list[str] = []
    previous: str | None = None  # real id of the message returned just before
    for n, item in enumerate(data, 1):
        if not isinstance(item, dict):
            problems.append(f"item {n} is not an object with id, role and content")
            continue
        alias = _alias(item.get("id"))
        where = f"message {_short(alias)}" if alias else f"new message (item {n})"
        role = item.get("role")
        placeholder = view.placeholders.get(view.id_of.get(alias, "")) if alias is not None else None
        content = None if placeholder is not None else _check_content(item, where, problems)
        if alias is None:
            if role not in ("user", "assistant"):
                problems.append(f"{where} needs role \"user\" or \"assistant\", got {_quoted(role)}")
            elif content is not None:
                requests.append(InsertAfter(previous, role, content))
            continue
        real = view.id_of.get(alias)
        if real is None:
            problems.append(f"unknown id {_quoted(alias)}: use only the ids shown, or null for a new message")
            continue
        if real in seen:
            problems.append(f"message {alias} appears more than once")
            continue
        if seen and int(alias) < int(view.alias_of[seen[-1]]):
            problems.append(f"message {alias} was moved before message {view.alias_of[seen[-1]]}; keep the order")
        seen.append(real)
        previous = real
        message = next(m for m in view.shown if m.id == real)
        if role is not None and role != message.role:
            problems.append(f"message {alias} changed role from {message.role} to {_quoted(role)}; roles never change")
        elif placeholder is not None:
            given = item.get("content")
            if isinstance(given, str) and not _blank(given) and given != placeholder:
                problems.append(_no_text("the answer", alias))
        elif content is not None and content != message.content:
            requests.append(Replace(real, content))
    _fail(problems)
    kept = set(seen)
    requests.extend(Delete(m.id) for m in view.shown if m.id not in kept)
    return requests


def parse_patch(data: Any, view: EditView) -> list[Request]:
    """Read a ``patch`` answer into requests on real ids.

    ``InsertAfter(None, ...)`` means before the first shown message.
    """
    data = _coerce(data, _patch_shape)
    if isinstance(data, dict) and "operations" in data and "op" in data:
        raise EditError('answer with either {"operations": [...]} or one operation, not both')
    if isinstance(data, dict) and "operations" in data:
        data = data["operations"]
    elif isinstance(data, dict) and "op" in data:
        data = [data]
    if not isinstance(data, list):
        raise EditError('expected a JSON object {"operations": [...]}')
    problems: list[str] = []
    requests: list[Request] = []
    touched: set[str] = set()
    roles = {m.id: m.role for m in view.shown}
    for n, item in enumerate(data, 1):
        if not isinstance(item, dict):
            problems.append(f"operation {n} is not an object")
            continue
        op = _OPS.get(str(item.get("op", "")).strip().lower().replace("-", "_"))
        if op is None:
            problems.append(f"operation {n} has op {_quoted(item.get('op'))}; use replace, delete or insert_after")
            continue
        alias = _alias(item.get("id"))
        real = view.id_of.get(alias) if alias is not None else None
        if alias is not None and real is None:
            problems.append(f"operation {n} ({op}) names unknown id {_quoted(alias)}; use only the ids shown")
            continue
        if op != "insert_after":
            if real is None:
                problems.append(f"operation {n} ({op}) needs the id of an existing message")
                continue
            if real in touched:
                problems.append(f"message {alias} is changed by more than one operation; give one per message")
                continue
            touched.add(real)
        where = f"operation {n} ({op} {alias})" if alias else f"operation {n} ({op})"
        if op == "delete":
            assert real is not None  # checked above for every op but insert_after
            if isinstance(item.get("content"), str) and item["content"].strip():
                problems.append(f"{where} carries new content; delete takes none: use replace to change the text")
                continue
            requests.append(Delete(real))
            continue
        if op == "replace" and real in view.placeholders:
            problems.append(_no_text(where, alias))
            continue
        content = _check_content(item, where, problems)
        role = item.get("role")
        if op == "replace":
            assert real is not None  # checked above for every op but insert_after
            if role is not None and role != roles[real]:
                problems.append(f"{where} changes the role from {roles[real]} to {_quoted(role)}; roles never change")
            elif content is not None:
                requests.append(Replace(real, content))
        elif role not in ("user", "assistant"):
            problems.append(f"{where} needs role \"user\" or \"assistant\", got {_quoted(role)}")
        elif content is not None:
            requests.append(InsertAfter(real, role, content))
    _fail(problems)
    return requests

"""Reading an editing model's answer: find the JSON, repair it, check its shape.

Models wrap JSON in code fences, put prose around it, break it (a missing
comma) or stop before its end (an output limit).  :func:`load_json` tries, in order: the whole text, the
inside of an outer code fence, each top-level ``[...]`` / ``{...}`` span (string
aware, so backticks inside message text do not confuse it) and the text from each
such span's start to the end; strictly first, then through ``json_repair``.
Repair fixes what is *broken* (a missing comma, single quotes, a trailing
comma), never what is *missing*: an answer whose JSON never closes (an
unterminated array, object or string, exactly what an output limit produces) is
refused, not repaired, because closing it would silently drop what it lost (in
``rewrite``, the messages at its end; in ``patch``, the last operations).
So is an answer whose complete JSON is followed by an unclosed span that starts
like JSON (``[{``, ``{"``): the model was cut off writing its real answer, and the
complete span before it is a draft or an example (see :func:`_cut_off_answer`).

:func:`parse_rewrite` and :func:`parse_patch` turn the result into requests on
*real* message ids, or raise :class:`~context_gatekeeper.errors.EditError`
listing what is wrong (the text is shown to the model on the retry).

>>> load_json('Sure! ```json\\n{"operations": []}\\n``` Done.')
{'operations': []}
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Callable, Iterator
from typing import Any

import json_repair

from .format import EditView
from ..errors import EditError
from ..records.operations import Delete, InsertAfter, Replace, Request

__all__ = ["load_json", "parse_rewrite", "parse_patch", "has_lone_surrogate", "replace_lone_surrogates"]

_FENCE = re.compile(r"^\s*```[\w-]*[ \t]*\n(.*)\n[ \t]*```\s*$", re.DOTALL)
_NEW_IDS = {"", "new", "null", "none"}
_OPS = {"replace": "replace", "delete": "delete", "insert_after": "insert_after", "insert": "insert_after"}
_MAX_SPANS = 50
_REPAIR_LIMIT = 20_000
"""The longest candidate given to ``json_repair``: it takes time that grows with the square of
a text full of brackets that are not JSON (prose with "[...]" or "{...}": 5 s for 800
characters tried from every span), so longer text is only parsed strictly."""
_REPAIR_TAILS = 3
"""How many "from a span's start to the end" candidates are repaired (each is nearly the whole
answer again): the first few; all of them are parsed strictly."""
_SURROGATE = re.compile("[\ud800-\udfff]")
_ANSWER_START = re.compile(r"""\[\s*(?:[\[{"']|$)|\{\s*(?:["']|$)""")
_CUT_OFF = (
    "the answer is incomplete: its JSON stops mid-way (cut off by an output limit?); "
    "answer again with the complete JSON"
)


def _scan(text: str, start: int) -> tuple[int | None, bool, int]:
    """``(end, mismatched, steps)`` of the bracketed span opening at ``text[start]``.

    ``end`` is None when the span never closes (or is mismatched); the scan is
    string aware.  ``steps`` is the number of characters looked at.
    """
    closing = {"[": "]", "{": "}"}
    stack, in_string, escaped = [closing[text[start]]], False, False
    i = start
    for i in range(start + 1, len(text)):
        c = text[i]
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in closing:
            stack.append(closing[c])
        elif c in "]}":
            if c != stack.pop():
                return None, True, i - start  # not JSON here; try the next bracket
            if not stack:
                return i + 1, False, i - start
    return None, False, i - start


def _next_opener(text: str, position: int) -> int:
    """The index of the next ``[`` or ``{`` at or after ``position`` (-1: none)."""
    starts = [i for i in (text.find("[", position), text.find("{", position)) if i >= 0]
    return min(starts) if starts else -1


def _cut_off_answer(text: str) -> bool:
    """Whether ``text`` holds a JSON answer the model was still writing when it stopped.

    That is an unclosed top-level span that starts like JSON: ``[`` followed by
    ``{``, ``[`` or a quote, or ``{`` followed by a quote (whitespace allowed
    between), or an opening bracket with nothing after it.  Such a span, even after
    a complete one, means the answer the model meant was cut off: the complete span
    before it is a draft, an example or a plan (``"I would answer []. Revised: [{..."``),
    and taking it would commit the wrong edit.  A stray ``[`` or ``{`` in prose
    (``"[it has no country"``) is not an answer; the scan goes on inside it, since
    a cut-off answer may follow it.  Nested spans of a complete one are skipped.

    The work is bounded (a few passes over the text); a text too tangled to finish
    the scan within it counts as cut off, so that nothing is committed from it.
    """
    position, budget = 0, 10 * len(text) + 10_000
    while True:
        start = _next_opener(text, position)
        if start < 0:
            return False
        end, mismatched, steps = _scan(text, start)
        budget -= steps + 1
        if budget < 0:
            return True
        if end is not None:
            position = end
        elif not mismatched and _ANSWER_START.match(text, start):
            return True
        else:
            position = start + 1


def _top_level_spans(text: str) -> Iterator[tuple[int, int | None, bool]]:
    """``(start, end, cut_off)`` of each top-level ``[...]`` / ``{...}`` span.

    ``end`` is None for a span that never closes; ``cut_off`` is then True: the
    answer stops before its JSON ends (inside a string, after a comma, or only
    lacking its closing brackets), and closing it would hide what was lost.

    The scan is string aware, so brackets and backticks inside JSON strings do not
    count, and spans nested in an earlier one are not offered again.
    """
    position, found = 0, 0
    while found < _MAX_SPANS:
        start = _next_opener(text, position)
        if start < 0:
            return
        found += 1
        end, mismatched, _ = _scan(text, start)
        if mismatched:
            position = start + 1
            continue
        yield start, end, end is None
        if end is None:
            return
        position = end


def _candidates(text: str) -> tuple[dict[str, bool], set[str]]:
    """Texts that may hold the answer's JSON, most likely first, each with whether it is cut
    off; and the ones worth repairing (:data:`_REPAIR_LIMIT`, :data:`_REPAIR_TAILS`)."""
    spans = list(_top_level_spans(text))
    truncated = any(cut_off for _, _, cut_off in spans)
    out = {text: truncated}
    fence = _FENCE.match(text)
    if fence:
        out.setdefault(fence.group(1), truncated)
    tails: list[str] = []
    for start, end, cut_off in spans:
        if end is not None:
            out.setdefault(text[start:end], False)
        tail = re.sub(r"\n?[ \t]*```\s*$", "", text[start:])  # from the span's start to the end
        if tail not in out:
            tails.append(tail)
        out[tail] = out.get(tail, False) or cut_off
    skipped = set(tails[_REPAIR_TAILS:])
    # worth repairing: what starts like JSON (prose full of "[a]" and "{b}" never does), not too long
    return out, {c for c in out if len(c) <= _REPAIR_LIMIT and c not in skipped and _ANSWER_START.match(c.lstrip())}


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


def _any_container(value: Any) -> bool:
    """Any JSON object or array."""
    return isinstance(value, (dict, list))


def load_json(text: str, accept: Callable[[Any], bool] = _any_container) -> Any:
    """The JSON value in a model's answer, repaired if needed.

    Every candidate (see the module docstring) is parsed strictly first, then with
    ``json_repair``; the first value ``accept`` takes wins.  Failing that, the
    first value parsed at all is returned, so the caller can say what shape is wrong.
    A cut-off answer is refused rather than repaired: repairing would silently drop
    whatever it lost (in ``rewrite``, the messages at its end).

    Raises:
        EditError: no JSON could be found or repaired, or the answer was cut off.
    """
    stripped = text.strip()
    if _cut_off_answer(stripped):
        raise EditError(_CUT_OFF)
    candidates, repairable = _candidates(stripped)
    fallback: list[Any] = []
    for repair in (False, True):
        for candidate, cut_off in sorted(candidates.items(), key=lambda item: item[1]):  # whole spans first
            if repair and candidate not in repairable:
                continue
            try:
                value = json_repair.loads(candidate) if repair else json.loads(candidate)
            except Exception:  # json_repair is lenient; never let its own bugs escape
                continue
            if accept(value) and cut_off:
                raise EditError(_CUT_OFF)
            if accept(value):
                return value
            if not fallback and _any_container(value) and value:
                fallback.append(value)
    if fallback:
        return fallback[0]
    preview = stripped[:80] + ("..." if len(stripped) > 80 else "")
    raise EditError(f"the answer holds no usable JSON (it starts {preview!r})")


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


def _fail(problems: list[str]) -> None:
    """Raise one :class:`EditError` naming the first few problems, if there are any."""
    if problems:
        shown = problems[:5] + ([f"and {len(problems) - 5} more problems"] if len(problems) > 5 else [])
        raise EditError("; ".join(shown))


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
        where = f"message {alias}" if alias else f"new message (item {n})"
        role = item.get("role")
        content = _check_content(item, where, problems)
        if alias is None:
            if role not in ("user", "assistant"):
                problems.append(f"{where} needs role \"user\" or \"assistant\", got {role!r}")
            elif content is not None:
                requests.append(InsertAfter(previous, role, content))
            continue
        real = view.id_of.get(alias)
        if real is None:
            problems.append(f"unknown id {alias!r}: use only the ids shown, or null for a new message")
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
            problems.append(f"message {alias} changed role from {message.role} to {role!r}; roles never change")
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
            problems.append(f"operation {n} has op {item.get('op')!r}; use replace, delete or insert_after")
            continue
        alias = _alias(item.get("id"))
        real = view.id_of.get(alias) if alias is not None else None
        if alias is not None and real is None:
            problems.append(f"operation {n} ({op}) names unknown id {alias!r}; use only the ids shown")
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
            requests.append(Delete(real))
            continue
        content = _check_content(item, where, problems)
        role = item.get("role")
        if op == "replace":
            assert real is not None  # checked above for every op but insert_after
            if role is not None and role != roles[real]:
                problems.append(f"{where} changes the role from {roles[real]} to {role!r}; roles never change")
            elif content is not None:
                requests.append(Replace(real, content))
        elif role not in ("user", "assistant"):
            problems.append(f"{where} needs role \"user\" or \"assistant\", got {role!r}")
        elif content is not None:
            requests.append(InsertAfter(real, role, content))
    _fail(problems)
    return requests

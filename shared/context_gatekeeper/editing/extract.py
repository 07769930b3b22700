"""Finding the JSON in a model's answer: candidates, checked repair, one answer or a retry.

Models wrap JSON in code fences, put prose around it, break it (a missing
comma, a double quote left unescaped inside a text) or stop before its end (an
output limit).  :func:`load_json` reads every candidate: the whole text, the
inside of each code fence, each top-level ``[...]`` / ``{...}`` span (string
aware, so backticks inside message text do not confuse it) and the text from each
such span's start to the end; strictly first, then through ``json_repair``.

**Repair is checked.**  It fixes what is *broken* (a missing comma, single
quotes, a trailing comma), never what is *missing*: a repaired value must hold
every word of the text it was read from, in order (:func:`_faithful`).
``json_repair`` reads ``"the 27" monitor, or the 32" one"`` as ``"the 27"``;
that value loses words, so it is refused and the retry asks the model to escape
its quotes, instead of committing a cut text.

**Cut-off answers are refused, not repaired.**  An answer whose JSON never
closes (an unterminated array, object or string, exactly what an output limit
produces) would lose what was cut when closed (in ``rewrite``, the messages at
its end; in ``patch``, the last operations).  So is an answer whose complete
JSON is followed by an unclosed span that starts like JSON (``[{``, ``{"``): the
model was cut off writing its real answer, and the complete span before it is a
draft or an example (see :func:`_cut_off_answer`).  When such an answer ends with
its closing brackets all the same, the likely cause is an unescaped double quote,
and the problem says so.

**Reasoning first.**  A reasoning model may start its reply with its thoughts
(``<think>...</think>``, ``<thinking>``, ``<reasoning>``), drafts included: those
leading blocks are set aside before anything is looked for, and a reply that stops
inside one is cut off.  So is everything before a closing tag with no opening tag
before it (``reasoning...</think>``: the server put the opening tag in the prompt).

**Several candidates.**  Prose may quote JSON beside the answer (an example, an
empty ``[]``).  Only spans that start like an answer (``[{``, ``{"``, ``[]``, ...)
are candidates: bracketed prose (``message [3]``, Markdown links) is skipped,
however much of it comes first.  Of the values the caller accepts, a bare empty
``[]`` / ``{}`` in the prose counts only when no candidate holds anything; an empty
answer in the answer's own shape (``{"operations": []}``, or an empty value that is
the whole reply, a code fence's content or the reply's final block) is an answer
like any other.  Two different answers (two non-empty values, or a non-empty one and
such an empty one) are refused, so the model is asked again for exactly one, never
guessed between.  A value of another shape is offered back to the caller (to say
what is wrong) only when it starts like an answer.

**Comments.**  ``json_repair`` drops ``//`` and ``/* */`` comments; the repair check
sets them aside too (where they stand between JSON values), so commented JSON is read.

>>> load_json('Sure! ```json\\n{"operations": []}\\n``` Done.')
{'operations': []}
>>> load_json('An empty list [] means no change. {"operations": [{"op": "delete", "id": "2"}]}')
{'operations': [{'op': 'delete', 'id': '2'}]}
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import Any

import json_repair

from ..errors import EditError, TruncatedReplyError

__all__ = ["load_json"]

_FENCE = re.compile(r"^\s*```[\w-]*[ \t]*\n(.*)\n[ \t]*```\s*$", re.DOTALL)
_INNER_FENCE = re.compile(r"^[ \t]*```[\w-]*[ \t]*\n(.*?)\n[ \t]*```[ \t]*$", re.DOTALL | re.MULTILINE)
"""A code fence anywhere in the answer (prose before and after it)."""
_TRAILING_FENCE = re.compile(r"\n?[ \t]*```\s*$")
_MAX_SPANS = 50
"""The most spans that may start an answer (:func:`_may_answer`) offered as candidates;
bracketed prose does not count."""
_REPAIR_LIMIT = 20_000
"""The longest candidate given to ``json_repair``: it takes time that grows with the square of
a text full of brackets that are not JSON (prose with "[...]" or "{...}": 5 s for 800
characters tried from every span), so longer text is only parsed strictly."""
_REPAIR_TAILS = 3
"""How many "from a span's start to the end" candidates are repaired (each is nearly the whole
answer again): the first few; all of them are parsed strictly."""
_ANSWER_START = re.compile(r"""\[\s*(?:[\[{"']|$)|\{\s*(?:["']|$)""")
_EMPTY_LITERAL = re.compile(r"\[\s*\]|\{\s*\}")
"""A bare empty array or object: an answer of "no change", or prose naming one."""
_THINKING = re.compile(r"\s*<(think|thinking|reasoning)>.*?</\1\s*>", re.DOTALL | re.IGNORECASE)
_OPEN_THINKING = re.compile(r"\s*<(?:think|thinking|reasoning)>", re.IGNORECASE)
_ANY_OPEN_THINKING = re.compile(r"<(?:think|thinking|reasoning)\s*>", re.IGNORECASE)
_CLOSE_THINKING = re.compile(r"</(?:think|thinking|reasoning)\s*>", re.IGNORECASE)
_AFTER_CLOSE = re.compile(r"""[ \t]*(?:\r?\n|\Z)|\s*(?:\{\s*"|\[\s*[\[{\]]|```)""")
"""What follows the closing tag of a reasoning block whose opening tag was in the prompt
template: the end of its line, or the answer itself (a tag inside a JSON text is followed
by neither: a JSON string holds no raw line break, and its quotes are escaped)."""
_COMMENT_AFTER = re.compile(r"(?:[,\[{}\]\":0-9]|true|false|null)\Z", re.IGNORECASE)
"""What a comment may follow in JSON (a separator, a bracket, a string, a number or a literal),
unlike the ``//`` of prose inside a text whose quotes are broken."""
_ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{4}|.)", re.DOTALL)
_ESCAPED = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f"}
_WORD = re.compile(r"\w+")
_LITERALS = frozenset({"true", "false", "null", "none"})
"""Words a repair may spell another way (Python's ``None`` read as JSON ``null``)."""

_QUOTE_HINT = 'write every double quote inside a text as \\" (the 27\\" monitor)'
_CUT_OFF = (
    "the answer is incomplete: its JSON stops mid-way (cut off by an output limit?); "
    "answer again with the complete JSON"
)
_ODD_QUOTE = (
    "the answer's JSON is incomplete: a text in it never closes, most likely because a double quote "
    f"inside it is not escaped; {_QUOTE_HINT}, and answer again with the complete JSON"
)
_LOSSY = (
    "the answer's JSON is broken and could not be read without losing text (an unescaped double "
    f"quote inside a text?); {_QUOTE_HINT}, and answer again with valid JSON only"
)
_IN_THOUGHT = (
    "the answer is incomplete: it stops inside its <think> / <reasoning> block (cut off by an output "
    "limit?); answer again with the complete JSON after the block"
)
_SEVERAL = (
    "the answer holds {n} different JSON values of the answer's shape (an example or a draft beside "
    "the real answer?); answer with exactly one, and no other JSON in the text"
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


def _ends_inside_a_string(text: str) -> bool:
    """Whether a string-aware reading from the first bracket of ``text`` ends inside a string."""
    start = _next_opener(text, 0)
    in_string = escaped = False
    for c in text[max(start, 0):]:
        if escaped:
            escaped = False
        elif in_string and c == "\\":
            escaped = True
        elif c == '"':
            in_string = not in_string
    return in_string


def _cut_off_problem(text: str) -> str:
    """What to tell the model about an answer whose JSON does not close.

    An answer that ends with its closing bracket yet reads as ending inside a string
    was most likely not cut off: a double quote inside a text was left unescaped
    (``"the 27" monitor"``), and asking for "the complete JSON" would get the same
    answer again.

    >>> _cut_off_problem('{"operations": [{"op": "replace", "id": "1", "content": "the 27" monitor"}]}')[:38]
    "the answer's JSON is incomplete: a tex"
    >>> _cut_off_problem('{"operations": [{"op": "replace", "id": "1", "content": "the mon')[:36]
    'the answer is incomplete: its JSON s'
    """
    body = _TRAILING_FENCE.sub("", text).rstrip()
    if body.endswith(("}", "]")) and _ends_inside_a_string(body):
        return _ODD_QUOTE
    return _CUT_OFF


def _cut_off_error(text: str) -> EditError:
    """The error for an answer whose JSON does not close: :class:`TruncatedReplyError`
    (``partial`` holds ``text``) when it stops mid-way, so an edit whose last answer was
    cut off says so even without a finish reason; a plain :class:`EditError` when an
    unescaped double quote is the likely cause.

    >>> type(_cut_off_error('{"operations": [{"op": "delete"')).__name__
    'TruncatedReplyError'
    """
    problem = _cut_off_problem(text.strip())
    if problem is _CUT_OFF:
        return TruncatedReplyError(problem, partial=text)
    return EditError(problem)


def _may_answer(text: str, start: int) -> bool:
    """Whether the span opening at ``text[start]`` may be an answer: it starts like JSON
    (:data:`_ANSWER_START`) or is a bare empty ``[]`` / ``{}``; ``[3]`` or ``[a link](...)`` is prose."""
    return bool(_ANSWER_START.match(text, start) or _EMPTY_LITERAL.match(text, start))


def _top_level_spans(text: str) -> Iterator[tuple[int, int | None, bool]]:
    """``(start, end, cut_off)`` of each top-level ``[...]`` / ``{...}`` span that may be
    an answer (:func:`_may_answer`), the first :data:`_MAX_SPANS` of them.

    ``end`` is None for a span that never closes; ``cut_off`` is then True: the
    answer stops before its JSON ends (inside a string, after a comma, or only
    lacking its closing brackets), and closing it would hide what was lost.

    The scan is string aware, so brackets and backticks inside JSON strings do not
    count, and spans nested in an earlier one are not offered again.  Bracketed prose
    (``message [3]``) is stepped over without counting, a stray unclosed bracket in
    prose (``[see below``) is passed by, and the whole scan does a bounded amount of work
    (as :func:`_cut_off_answer`'s).
    """
    position, found, budget = 0, 0, 10 * len(text) + 10_000
    while found < _MAX_SPANS:
        start = _next_opener(text, position)
        if start < 0:
            return
        end, mismatched, steps = _scan(text, start)
        budget -= steps + 1
        if budget < 0:
            return
        if mismatched or not _may_answer(text, start):
            position = end if end is not None else start + 1
            continue
        found += 1
        yield start, end, end is None
        if end is None:
            return
        position = end


def _candidates(text: str) -> tuple[dict[str, bool], set[str], set[str]]:
    """Texts that may hold the answer's JSON, each with whether it is cut off; the ones
    worth repairing (:data:`_REPAIR_LIMIT`, :data:`_REPAIR_TAILS`); and the ones that stand
    where an answer stands (the whole text, a code fence's content, the final span)."""
    spans = list(_top_level_spans(text))
    truncated = any(cut_off for _, _, cut_off in spans)
    out = {text: truncated}
    placed = {text}
    fence = _FENCE.match(text)
    if fence:
        out.setdefault(fence.group(1), truncated)
        placed.add(fence.group(1))
    for inner in _INNER_FENCE.finditer(text):
        out.setdefault(inner.group(1), truncated)
        placed.add(inner.group(1))
    tails: list[str] = []
    for start, end, cut_off in spans:
        if end is not None:
            out.setdefault(text[start:end], False)
        tail = _TRAILING_FENCE.sub("", text[start:])  # from the span's start to the end
        if tail not in out:
            tails.append(tail)
        out[tail] = out.get(tail, False) or cut_off
    if spans and spans[-1][1] is not None and not _TRAILING_FENCE.sub("", text[spans[-1][1]:]).strip():
        placed.add(text[spans[-1][0] : spans[-1][1]])  # the final block
    skipped = set(tails[_REPAIR_TAILS:])
    # worth repairing: what starts like JSON (prose full of "[a]" and "{b}" never does), not too long
    repairable = {c for c in out if len(c) <= _REPAIR_LIMIT and c not in skipped and _ANSWER_START.match(c.lstrip())}
    return out, repairable, placed


def _words(text: str) -> list[str]:
    """The words of ``text``, case-folded, without the JSON literals (see :data:`_LITERALS`)."""
    return [w for w in _WORD.findall(text.casefold()) if w not in _LITERALS]


def _unescape(match: re.Match[str]) -> str:
    """The character a JSON escape (``\\n``, ``\\u00e9``, ``\\"``) stands for."""
    code = match.group(1)
    return chr(int(code[1:], 16)) if len(code) == 5 else _ESCAPED.get(code, code)


def _value_words(value: Any) -> Iterator[str]:
    """The text a parsed JSON value holds, in order: keys, strings, numbers."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield str(key)
            yield from _value_words(item)
    elif isinstance(value, list):
        for item in value:
            yield from _value_words(item)
    elif value is not None and not isinstance(value, bool):
        yield str(value)


def _without_comments(text: str) -> str:
    """``text`` without the ``//`` and ``/* */`` comments that stand between JSON values
    (after a separator, a bracket, a string, a number or a literal; outside strings), which
    ``json_repair`` drops.  A ``//`` inside a text (``https://...``), or after a bare word
    (prose whose quotes are broken), stays.

    >>> _without_comments('[{"id": "1"} // the country\\n, {"u": "https://x"} /* two */]')
    '[{"id": "1"} \\n, {"u": "https://x"} ]'
    """
    if "//" not in text and "/*" not in text:
        return text
    out: list[str] = []
    last = ""  # the last few characters written that are not whitespace
    i, n, in_string, escaped = 0, len(text), False, False
    while i < n:
        c = text[i]
        if in_string:
            escaped, in_string = (False, True) if escaped else (c == "\\", c != '"')
        elif c == '"':
            in_string = True
        elif c == "/" and text[i + 1 : i + 2] in ("/", "*") and _COMMENT_AFTER.search(last):
            line = text[i + 1] == "/"
            close = text.find("\n", i) if line else text.find("*/", i + 2)
            if line or close >= 0:  # an unclosed /* is no comment: kept, so its words count
                i = n if close < 0 else (close if line else close + 2)
                continue
        out.append(c)
        if not c.isspace():
            last = (last + c)[-5:]
        i += 1
    return "".join(out)


def _faithful(candidate: str, value: Any) -> bool:
    """Whether ``value`` (repaired from ``candidate``) holds every word of it, in order,
    or every word of it once comments between values are set aside (:func:`_without_comments`).

    A repair that only adds or removes punctuation (commas, quotes, brackets) or
    comments passes; one that drops text (``json_repair`` cutting ``"the 27" monitor"``
    at the inch mark, or making ``"Iceland, 2022"`` a key) does not.  The whole candidate
    is tried first: after a double quote left unescaped inside a text, the comment scanner
    is out of step with the strings, and may take the ``//`` of ``https://`` or of
    ``27" // 32"`` for a comment; a repair that kept those words is still faithful.

    >>> _faithful('{"a": "x" "b": 2}', {"a": "x", "b": 2})
    True
    >>> _faithful('{"content": "the 27" monitor"}', {"content": "the 27"})
    False
    >>> _faithful('{"a": "x" // the fix\\n}', {"a": "x"})
    True
    >>> _faithful('{"a": "see "https://x.org" now"}', {"a": 'see "https://x.org" now'})
    True
    """
    held = _words(" ".join(_value_words(value)))
    if _words(_ESCAPE.sub(_unescape, candidate)) == held:
        return True
    text = _without_comments(candidate)
    return text is not candidate and _words(_ESCAPE.sub(_unescape, text)) == held


_NOTHING = object()
"""A candidate that gave no value (not JSON, or a repair that lost text)."""


def _read(candidate: str, repairable: bool) -> tuple[Any, bool]:
    """``(value, lossy)``: the candidate parsed strictly, else repaired if it may be
    (:data:`_NOTHING` when neither works); ``lossy`` when the only repair lost text."""
    try:
        return json.loads(candidate), False
    except (ValueError, RecursionError):  # RecursionError: arrays nested thousands deep
        pass
    if not repairable:
        return _NOTHING, False
    try:
        value = json_repair.loads(candidate)
    except Exception:  # json_repair is lenient; never let its own bugs escape
        return _NOTHING, False
    try:
        faithful = _faithful(candidate, value)
    except RecursionError:  # nested too deep to walk: not worth trusting
        faithful = False
    return (value, False) if faithful else (_NOTHING, True)


def _empty(value: Any) -> bool:
    """Whether an accepted value holds nothing: ``[]``, ``{}``, ``{"operations": []}``."""
    if isinstance(value, dict):
        return all(isinstance(item, (list, dict)) and not item for item in value.values())
    return not value


def _one(values: list[tuple[Any, bool]]) -> Any:
    """The answer among the accepted ``(value, real)`` pairs (``real``: not a bare empty
    ``[]`` / ``{}`` in prose): the only non-empty value, else a real empty one, else an empty one.

    Raises:
        EditError: two different answers: two different non-empty values, or a non-empty
            one beside a real empty one (the model is asked again).
    """
    full: list[Any] = []
    for value, _real in values:
        if not _empty(value) and value not in full:
            full.append(value)
    empty = [value for value, real in values if real and _empty(value)]
    answers = len(full) + (1 if empty else 0)
    if answers > 1:
        raise EditError(_SEVERAL.format(n=answers))
    if full:
        return full[0]
    return empty[0] if empty else values[0][0]


def _any_container(value: Any) -> bool:
    """Any JSON object or array."""
    return isinstance(value, (dict, list))


def _inside_json(text: str, at: int) -> bool:
    """Whether position ``at`` lies inside a JSON value of ``text`` that starts like an answer
    before it (a ``</think>`` in an answer's text, followed there by "```" or "[]", which a
    JSON string need not escape, is text, not the end of a reasoning block).  Only values that
    parse strictly count; at most :data:`_MAX_SPANS` starts are tried.

    >>> _inside_json('{"operations": [{"content": "it printed </think> []"}]}', 40)
    True
    >>> _inside_json('Had nothing changed: {"operations": []}.\\n</think>', 42)
    False
    """
    decoder = json.JSONDecoder()
    for n, start in enumerate(_ANSWER_START.finditer(text, 0, at)):
        if n >= _MAX_SPANS:
            break
        try:
            _value, end = decoder.raw_decode(text, start.start())
        except ValueError:
            continue
        if end > at:
            return True
    return False


def _without_thinking(text: str) -> str:
    """``text`` without the reasoning blocks it starts with (``<think>...</think>``,
    ``<thinking>``, ``<reasoning>``): their drafts are no answer.

    A server that puts the opening tag in the prompt template (DeepSeek-R1, QwQ and Qwen3
    under vLLM or Ollama) replies ``reasoning...</think>\\n\\n{answer}``: everything up to a
    first closing tag with no opening tag before it is set aside too, when the tag ends
    its line or the answer follows it, and is not inside a JSON value (:func:`_inside_json`).

    >>> _without_thinking('Had nothing changed: {"operations": []}.\\n</think>\\n\\n{"operations": [1]}')
    '\\n\\n{"operations": [1]}'

    Raises:
        TruncatedReplyError: the reply stops inside such a block.
    """
    rest = text
    close = _CLOSE_THINKING.search(text)
    if (close is not None and _ANY_OPEN_THINKING.search(text, 0, close.start()) is None
            and _AFTER_CLOSE.match(text, close.end()) and not _inside_json(text, close.start())):
        rest = text[close.end() :]
    while True:
        thought = _THINKING.match(rest)
        if thought is None:
            break
        rest = rest[thought.end() :]
    if _OPEN_THINKING.match(rest):
        raise TruncatedReplyError(_IN_THOUGHT, partial=text)
    return rest


def load_json(text: str, accept: Callable[[Any], bool] = _any_container) -> Any:
    """The JSON value in a model's answer, repaired if needed (see the module docstring).

    Leading reasoning blocks are set aside first.  Every candidate is parsed strictly,
    else with ``json_repair`` (a repair that loses text counts for nothing); of the values
    ``accept`` takes, :func:`_one` picks the answer.  A value taken only from a candidate
    that runs into a cut-off span is refused as cut off.  Failing that, the first non-empty
    container parsed from a candidate that starts like an answer is returned, so the
    caller can say what shape is wrong.

    Raises:
        TruncatedReplyError: the answer's JSON stops mid-way, or the reply stops inside its
            reasoning block (cut off; ``partial`` holds ``text``).
        EditError: no JSON of the answer's shape could be found or read without losing text,
            a text in it never closes (an unescaped double quote), or it holds several
            different answers.
    """
    stripped = _without_thinking(text).strip()
    if _cut_off_answer(stripped):
        raise _cut_off_error(text)
    candidates, repairable, placed = _candidates(stripped)
    accepted: list[tuple[Any, bool]] = []
    fallback: list[Any] = []
    lossy = cut_off_accepted = False
    for candidate, cut_off in sorted(candidates.items(), key=lambda item: item[1]):  # whole spans first
        value, lost = _read(candidate, candidate in repairable)
        lossy = lossy or lost
        if value is _NOTHING:
            continue
        if accept(value) and cut_off:
            cut_off_accepted = True
        elif accept(value):
            accepted.append((value, candidate in placed or not _EMPTY_LITERAL.fullmatch(candidate.strip())))
        elif not fallback and _any_container(value) and value and _ANSWER_START.match(candidate.lstrip()):
            fallback.append(value)
    if accepted:
        return _one(accepted)
    if cut_off_accepted:
        raise _cut_off_error(text)
    if fallback:
        return fallback[0]
    if lossy:
        raise EditError(_LOSSY)
    shown = stripped or text.strip()
    preview = shown[:80] + ("..." if len(shown) > 80 else "")
    raise EditError(f"the answer holds no usable JSON of the answer's shape (it starts {preview!r})")

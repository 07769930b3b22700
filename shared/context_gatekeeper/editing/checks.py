"""Turning an edit's requests into changes, and the checks every edit must pass.

Structure is checked by *comparing violations* in the full state before and after
the edit, each named by the ids of its messages; an edit may not add any (agent
transcripts legitimately hold some, so only new ones count, and removing one old
violation does not pay for a new one).  The violations:

* **alternation**: two user messages, or two assistant messages, in a row.  System
  messages in between are ignored; a tool message separates (an assistant message
  that follows tool results is the normal agent pattern).  A conversation whose
  first user/assistant message is an assistant's also counts once.
* **tool pairing**: an assistant message's ``metadata["tool_calls"]`` id with no
  tool message answering it in the run of tool messages right after it, or a tool
  message whose ``metadata["tool_call_id"]`` is not among the calls of the message
  just before its run (what chat APIs require).

The deletion guard counts the tokens of editable (user and assistant) text an
edit *destroys*: a removed message loses all of its tokens; a changed one loses
the runs of its old text that a word-level diff finds removed or replaced (so
replacing every message with same-length junk destroys everything, while
"Ireland" becoming "Iceland" destroys one word).  Inserted text destroys nothing.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from difflib import SequenceMatcher

from .format import EditView
from .options import DEFAULT_MAX_DELETION_SHARE
from ..errors import EditError, InvalidTypeError
from ..records.messages import Message, new_message_id
from ..records.operations import Applied, Change, Delete, InsertAfter, Put, Remove, Replace, Request, apply_changes

__all__ = [
    "build_changes",
    "alternation_violations",
    "tool_violations",
    "added_violations",
    "check_structure",
    "destroyed_runs",
    "deleted_share",
    "DEFAULT_MAX_DELETION_SHARE",
]

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
_WORD = re.compile(rf"[{_CJK}]|[^\W{_CJK}]+|[^\w\s]")
"""A word: a run of word characters, except that each Chinese, Japanese or Korean character
is a word of its own (those scripts write no spaces: "爱尔兰" -> "冰岛" replaces three
characters, not the clause around them), or one other non-space character."""
_EXACT_DIFF_LIMIT = 1_000_000  # words before x words after: above it, split at anchors first
_HEURISTIC_DIFF_LIMIT = 10_000_000  # an anchorless stretch above it counts as destroyed (an overstatement)
_ANCHOR_WORDS = 4  # the length of the word sequences used as anchors


def _insert_position(state: Sequence[Message], view: EditView, anchor: str | None) -> str | None:
    """The id a new message goes after, for "insert after ``anchor``" as the model meant it.

    ``None`` is "before the first shown message".  Tool results that follow the
    anchor stay with it: the new message goes after them.
    """
    ids = [m.id for m in state]
    if anchor is None:
        if not view.shown:
            return ids[-1] if ids else None
        first = ids.index(view.shown[0].id)
        return ids[first - 1] if first else None
    index = ids.index(anchor)
    while index + 1 < len(state) and state[index + 1].role == "tool":
        index += 1
    return ids[index]


def build_changes(
    state: Sequence[Message], view: EditView, requests: Sequence[Request]
) -> tuple[list[Applied], list[Message]]:
    """Changes computed against ``state`` for ``requests``, and the state they give.

    Order: changes, then insertions, then removals (each removal records the
    message before it at that point, so :func:`~context_gatekeeper.records.operations.invert`
    restores it in place).  A replace with identical text is no change.  Several
    insertions after the same message keep their order.
    """
    by_id = {m.id: m for m in state}
    edits: list[Applied] = []
    puts: list[Applied] = []
    deletes: list[str] = []
    last_after: dict[str | None, str] = {}
    placed: dict[str | None, list[str]] = {}  # where new messages go -> their roles, in order
    for request in requests:
        if isinstance(request, Replace):
            before = by_id[request.id]
            if request.content != before.content:
                edits.append(Change(before, before.revised(request.content, revision=0)))
        elif isinstance(request, Delete):
            deletes.append(request.id)
        elif isinstance(request, InsertAfter):
            position = _insert_position(state, view, request.id)
            message = Message(new_message_id(), request.role, request.content, origin="inserted")
            puts.append(Put(message, last_after.get(position, position)))
            last_after[position] = message.id
            placed.setdefault(position, []).append(request.role)
        else:  # pragma: no cover - guarded by the parsers
            raise InvalidTypeError(f"not a request: {request!r}; pass Replace, Delete or InsertAfter")
    current = apply_changes(state, edits + puts)
    removes: list[Applied] = []
    for message_id in deletes + _hidden_parts(state, view, deletes, placed):
        index = next(i for i, m in enumerate(current) if m.id == message_id)
        removes.append(Remove(current[index], current[index - 1].id if index else None))
        current.pop(index)
    return edits + puts + removes, current


def _hidden_parts(
    state: Sequence[Message], view: EditView, deletes: Sequence[str], placed: Mapping[str | None, Sequence[str]]
) -> list[str]:
    """The messages the model was not shown (an assistant message that only calls a tool, the
    tool's result) of each turn whose shown messages are all deleted: deleting a question and
    its answer deletes the whole exchange, which the model could not name.

    ``placed`` maps where new messages go (a message id, ``None`` for the start) to their
    roles, in order.  A turn whose place (its start, or after one of its messages) gets only
    part of an exchange (a new question with no answer) was rewritten, not dropped: its tool
    messages stay, and the structure checks judge the result.  A complete new exchange in
    its place (a user message, and an assistant message last) replaces the whole turn, tool
    messages included.  A turn runs from a user message to the next (what comes before the
    first user message is one too)."""
    gone = set(deletes)
    out: list[str] = []
    turn: list[Message] = []
    before: str | None = None  # the id of the message before the turn (None: it starts the state)
    for message in [*state, None]:
        if message is None or (message.role == "user" and turn):
            shown = [m for m in turn if m.id in view.alias_of]
            roles = [role for place in (before, *(m.id for m in turn)) for role in placed.get(place, ())]
            replaced = bool(roles) and not ("user" in roles and roles[-1] == "assistant")
            if shown and not replaced and all(m.id in gone for m in shown):
                out += [m.id for m in turn
                        if m.id not in view.alias_of and m.role in ("assistant", "tool") and m.id not in gone]
            before = turn[-1].id if turn else before
            turn = []
        if message is not None:
            turn.append(message)
    return out


def alternation_violations(state: Sequence[Message]) -> list[tuple[Message, Message | None]]:
    """Pairs of same-role neighbours (``(first, None)`` for an assistant-first conversation)."""
    out: list[tuple[Message, Message | None]] = []
    previous: Message | None = None
    started = False
    for message in state:
        if message.role == "tool":
            previous = None
            continue
        if message.role not in ("user", "assistant"):
            continue
        if not started:
            started = True
            if message.role == "assistant":
                out.append((message, None))
        if previous is not None and previous.role == message.role:
            out.append((previous, message))
        previous = message
    return out


def _call_ids(message: Message) -> list[str]:
    """The ids of the tool calls an assistant message makes (dicts or objects with ``id``)."""
    calls = message.metadata.get("tool_calls") if message.role == "assistant" else None
    out: list[str] = []
    for call in calls or ():
        call_id = call.get("id") if isinstance(call, dict) else getattr(call, "id", None)
        if isinstance(call_id, str) and call_id:
            out.append(call_id)
    return out


def tool_violations(state: Sequence[Message]) -> list[tuple[str, str, str]]:
    """``(kind, message id, call id)`` for each unanswered call and each orphaned tool result."""
    out: list[tuple[str, str, str]] = []
    caller: Message | None = None  # the non-tool message before the current run of tool messages
    for i, message in enumerate(state):
        if message.role == "tool":
            call_id = message.metadata.get("tool_call_id")
            if isinstance(call_id, str) and call_id and (caller is None or call_id not in _call_ids(caller)):
                out.append(("orphan", message.id, call_id))
            continue
        caller = message
        calls = _call_ids(message)
        if calls:
            answered = set()
            for follower in state[i + 1 :]:
                if follower.role != "tool":
                    break
                answered.add(follower.metadata.get("tool_call_id"))
            out.extend(("unanswered", message.id, c) for c in calls if c not in answered)
    return out


def _pair_key(pair: tuple[Message, Message | None]) -> tuple[str, str | None]:
    """An alternation violation by message ids (what stays the same across an edit)."""
    first, second = pair
    return first.id, second.id if second is not None else None


def added_violations(
    before: Sequence[Message], after: Sequence[Message]
) -> tuple[list[tuple[Message, Message | None]], list[tuple[str, str, str]]]:
    """The alternation violations (:func:`alternation_violations`) and tool-pair problems
    (:func:`tool_violations`) ``after`` has and ``before`` has not, each compared by the ids
    of the messages involved, not counted: removing one existing violation does not pay for
    a new one."""
    known_pairs = {_pair_key(p) for p in alternation_violations(before)}
    known_tools = set(tool_violations(before))
    return (
        [p for p in alternation_violations(after) if _pair_key(p) not in known_pairs],
        [t for t in tool_violations(after) if t not in known_tools],
    )


def check_structure(before: Sequence[Message], after: Sequence[Message], view: EditView) -> None:
    """Raise :class:`EditError` if ``after`` has a violation that ``before`` does not have
    (:func:`added_violations`)."""
    new_pairs, new_tools = added_violations(before, after)
    if new_pairs:
        first, second = new_pairs[0]
        if second is None:
            where = f"the conversation would start with an assistant message ({view.describe(first, after)})"
        else:
            where = (f"{view.describe(first, after)} and {view.describe(second, after)} would be two {first.role} "
                     "messages in a row")
        raise EditError(f"{where}; keep user and assistant messages alternating (delete a question with its answer)")
    if new_tools:
        kind, message_id, call_id = new_tools[0]
        message = next(m for m in after if m.id == message_id)
        if kind == "orphan":
            raise EditError(
                f"the result of tool call {call_id!r} would lose the assistant message that made the call; "
                "keep the message that calls a tool together with the tool's result"
            )
        raise EditError(
            f"tool call {call_id!r} of {view.describe(message, after)} would be separated from its result; "
            "do not place messages between a tool call and its result"
        )


def destroyed_runs(before: str, after: str) -> list[str]:
    """The runs of ``before`` that ``after`` removes or replaces, by a word-level diff.

    Words and punctuation marks are compared; whitespace alone never counts.  The
    common start and end are set aside first, so a local change to a long message
    costs little; a middle too long for an exact diff is first split at runs of
    words both hold once (see :func:`_removed`), which keeps the work near-linear
    on a flat vocabulary and can only overstate what is destroyed.

    >>> destroyed_runs("GDP of Ireland in 2021?", "GDP of Iceland in 2021?")
    ['Ireland']
    >>> destroyed_runs("a b c", "a b c d")
    []
    """
    old = list(_WORD.finditer(before))
    old_words = [m.group() for m in old]
    new = [m.group() for m in _WORD.finditer(after)]
    start = 0
    while start < min(len(old_words), len(new)) and old_words[start] == new[start]:
        start += 1
    end = 0
    while end < min(len(old_words), len(new)) - start and old_words[-1 - end] == new[-1 - end]:
        end += 1
    a, b = old_words[start : len(old_words) - end], new[start : len(new) - end]
    return [before[old[start + i1].start() : old[start + i2 - 1].end()] for i1, i2 in _removed(a, b)]


def _removed(a: list[str], b: list[str]) -> list[tuple[int, int]]:
    """``(i1, i2)`` ranges of ``a`` that ``b`` removes or replaces, in order.

    Up to ``_EXACT_DIFF_LIMIT`` word pairs, difflib's exact diff.  Above it
    (difflib is about quadratic there on a flat vocabulary: logs, CSV, ids), the
    two are split at *anchors*, runs of ``_ANCHOR_WORDS`` words that occur once in
    each, kept in order (the longest increasing chain, as patience diff does) and
    grown while their neighbours match; each stretch between anchors is diffed the
    same way.  A stretch with no anchor is diffed with difflib's "popular words are
    junk" heuristic, or, above ``_HEURISTIC_DIFF_LIMIT`` pairs, counted as
    destroyed whole.  Every way matches a common subsequence, so past the exact
    limit the result can only overstate what is destroyed, never hide it.
    """
    out: list[tuple[int, int]] = []
    stack = [(0, len(a), 0, len(b))]
    while stack:
        alo, ahi, blo, bhi = stack.pop()
        if alo >= ahi:
            continue
        if blo >= bhi:
            out.append((alo, ahi))
            continue
        pairs = (ahi - alo) * (bhi - blo)
        anchors = _anchors(a, b, alo, ahi, blo, bhi) if pairs > _EXACT_DIFF_LIMIT else []
        if not anchors:
            if pairs > _HEURISTIC_DIFF_LIMIT:
                out.append((alo, ahi))
                continue
            matcher = SequenceMatcher(None, a[alo:ahi], b[blo:bhi], autojunk=pairs > _EXACT_DIFF_LIMIT)
            out.extend((alo + i1, alo + i2) for tag, i1, i2, _, _ in matcher.get_opcodes() if tag in ("replace", "delete"))
            continue
        i_end, j_end = alo, blo  # the end of the previous match
        for i, j in anchors:
            if i < i_end or j < j_end:
                continue  # overlaps the previous (grown) match
            n = _ANCHOR_WORDS
            while i > i_end and j > j_end and a[i - 1] == b[j - 1]:
                i, j, n = i - 1, j - 1, n + 1
            while i + n < ahi and j + n < bhi and a[i + n] == b[j + n]:
                n += 1
            stack.append((i_end, i, j_end, j))
            i_end, j_end = i + n, j + n
        stack.append((i_end, ahi, j_end, bhi))
    out.sort()
    return out


def _anchors(a: list[str], b: list[str], alo: int, ahi: int, blo: int, bhi: int) -> list[tuple[int, int]]:
    """``(i, j)`` starts of word runs found once in ``a[alo:ahi]`` and once in ``b[blo:bhi]``, in order in both."""
    k = _ANCHOR_WORDS
    old_runs = Counter(tuple(a[i : i + k]) for i in range(alo, ahi - k + 1))
    new_at: dict[tuple[str, ...], int] = {}
    seen_twice: set[tuple[str, ...]] = set()
    for j in range(blo, bhi - k + 1):
        run = tuple(b[j : j + k])
        if old_runs.get(run) == 1:
            if run in new_at:
                seen_twice.add(run)
            new_at[run] = j
    pairs = []
    for i in range(alo, ahi - k + 1):
        run = tuple(a[i : i + k])
        if run in new_at and run not in seen_twice:
            pairs.append((i, new_at[run]))
    # the longest chain of pairs increasing in j too (they already increase in i)
    tails: list[int] = []  # tails[n]: the smallest j ending a chain of n + 1 pairs
    tail_at: list[int] = []  # the index in pairs of that chain's end
    back = [-1] * len(pairs)
    for index, (_, j) in enumerate(pairs):
        n = bisect_left(tails, j)
        if n == len(tails):
            tails.append(j)
            tail_at.append(index)
        else:
            tails[n], tail_at[n] = j, index
        back[index] = tail_at[n - 1] if n else -1
    chain: list[tuple[int, int]] = []
    index = tail_at[-1] if tail_at else -1
    while index >= 0:
        chain.append(pairs[index])
        index = back[index]
    chain.reverse()
    return chain


def _destroyed_tokens(change: Applied, count: Callable[[str], int]) -> int:
    """Tokens of editable text one change destroys (at most all of the old text's)."""
    if isinstance(change, Remove) and change.message.editable:
        return count(change.message.content)
    if isinstance(change, Change) and change.before.editable:
        runs = destroyed_runs(change.before.content, change.after.content)
        return min(count(change.before.content), sum(count(run) for run in runs))
    return 0


def deleted_share(state: Sequence[Message], changes: Sequence[Applied], count: Callable[[str], int]) -> float:
    """The share (0..1) of the editable tokens of ``state`` that ``changes`` destroy
    (removed plus replaced, see the module docstring)."""
    total = sum(count(m.content) for m in state if m.editable)
    if total <= 0:
        return 0.0
    lost = sum(_destroyed_tokens(change, count) for change in changes)
    return min(1.0, lost / total)


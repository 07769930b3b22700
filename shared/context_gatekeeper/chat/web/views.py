"""What the web chat sends to the page: plain JSON-ready dicts built from the session layer.

Nothing here touches the network or the store beyond reading: the service
(:mod:`.service`) calls these with what it read under the session's lock.

* :func:`context_record` turns the gate's :class:`~context_gatekeeper.Selection`
  for one answer into a small record that is stored with the answer (in the
  assistant message's ``metadata``), so the context strip survives a reload and a
  restart.  Turns are named there by their *key* (the id of the turn's first
  message), which edits never change; :func:`context_view` maps keys back to
  the turn numbers shown on the page, and marks turns deleted since.
* :func:`word_diff` marks added and removed text for the side-by-side preview.

>>> word_diff("It was Ireland.", "It was Iceland.")
([['same', 'It was '], ['del', 'Ireland'], ['same', '.']], [['same', 'It was '], ['add', 'Iceland'], ['same', '.']])
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..session import LastCall
from ... import Diff, Evidence, Revision
from ...integration import MessageTurn, undo_stacks

__all__ = [
    "CONTEXT_KEY",
    "context_record",
    "context_view",
    "evidence_text",
    "word_diff",
    "diff_view",
    "history_view",
    "undo_state",
]

CONTEXT_KEY = "gatekeeper_context"
"""The key of an answer's ``metadata`` that holds its context record (see the module docstring)."""

_TOKENS = re.compile(r"\s+|\w+|[^\w\s]+")


def evidence_text(evidence: Evidence) -> str:
    """Why a turn was (or could have been) kept, in a few words.

    >>> evidence_text(Evidence(covered=("gdp", "ireland"), topic=1))
    'shares gdp, ireland; same topic'
    """
    parts = []
    if evidence.pinned:
        parts.append("pinned")
    if evidence.covered:
        parts.append("shares " + ", ".join(evidence.covered[:8]))
    if evidence.topic is not None:
        parts.append("same topic")
    if evidence.reference:
        parts.append("follow-up of the latest turns")
    if evidence.semantic:
        parts.append("similar meaning")
    if evidence.fill:
        parts.append("fills leftover budget")
    return "; ".join(parts)


def context_record(call: LastCall, turns: Sequence[tuple[int, MessageTurn]]) -> dict[str, Any]:
    """The record of what the gate sent for ``call``: every earlier turn, kept or left out, and why.

    Args:
        call: the prepared call (:meth:`ChatSession.prepare`).
        turns: ``session.turns()`` as it was when ``call`` was prepared.
    """
    selection = call.selection
    scores = {s.turn_id: s for s in selection.scores}
    kept = set(selection.turn_ids)
    earlier = []
    for number, turn in turns:
        score = scores.get(number)
        entry: dict[str, Any] = {"key": turn.key, "kept": number in kept}
        if score is not None:
            entry.update(reason=score.reason, why=evidence_text(score.evidence), tokens=score.cost)
        else:
            entry.update(reason="pinned" if number in selection.pinned_turn_ids else "no match", why="", tokens=None)
        earlier.append(entry)
    return {
        "decision": selection.decision,
        "tokens_kept": selection.tokens_kept,
        "tokens_total": selection.tokens_total,
        "tokens_saved": selection.tokens_saved,
        "over_budget": selection.over_budget,
        "sent_messages": len(call.sent),
        "earlier": earlier,
    }


def context_view(record: Mapping[str, Any] | None, numbers: Mapping[str, int]) -> dict[str, Any] | None:
    """``record`` with each turn's current number (``None``: deleted since); None without a record."""
    if not isinstance(record, Mapping) or not isinstance(record.get("earlier"), list):
        return None
    view = {k: v for k, v in record.items() if k != "earlier"}
    view["earlier"] = [
        {**entry, "turn": numbers.get(str(entry.get("key")))}
        for entry in record["earlier"]
        if isinstance(entry, Mapping)
    ]
    return view


def word_diff(before: str, after: str) -> tuple[list[list[str]], list[list[str]]]:
    """``(left, right)`` segments ``[op, text]``: left has "same"/"del", right "same"/"add"."""
    a, b = _TOKENS.findall(before), _TOKENS.findall(after)
    left: list[list[str]] = []
    right: list[list[str]] = []

    def push(side: list[list[str]], op: str, text: str) -> None:
        if not text:
            return
        if side and side[-1][0] == op:
            side[-1][1] += text
        else:
            side.append([op, text])

    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal":
            push(left, "same", "".join(a[i1:i2]))
            push(right, "same", "".join(b[j1:j2]))
        else:
            push(left, "del", "".join(a[i1:i2]))
            push(right, "add", "".join(b[j1:j2]))
    # a lone space between two changed words reads better inside the change
    return _merge_spaces(left, "del"), _merge_spaces(right, "add")


def _merge_spaces(segments: list[list[str]], op: str) -> list[list[str]]:
    out: list[list[str]] = []
    for i, (kind, text) in enumerate(segments):
        between = 0 < i < len(segments) - 1 and segments[i - 1][0] == op == segments[i + 1][0]
        if kind == "same" and between and not text.strip():
            kind = op
        if out and out[-1][0] == kind:
            out[-1][1] += text
        else:
            out.append([kind, text])
    return out


def diff_view(diff: Diff) -> list[dict[str, Any]]:
    """The messages ``diff`` changes, each with both sides marked (see :func:`word_diff`)."""
    rows = []
    for entry in diff.messages:
        before = entry.before.content if entry.before is not None else ""
        after = entry.after.content if entry.after is not None else ""
        left, right = word_diff(before, after)
        message = entry.after if entry.after is not None else entry.before
        rows.append({
            "id": entry.id,
            "status": entry.status,
            "role": message.role if message is not None else "",
            "before": left if entry.before is not None else None,
            "after": right if entry.after is not None else None,
        })
    return rows


def _label(revision: Revision) -> str:
    if revision.kind == "append":
        first = next((m.content for m in revision.added if m.role == "user"), None)
        if first is None and revision.added:
            first = revision.added[0].content
        text = " ".join((first or "").split())
        return text if len(text) <= 60 else text[:57] + "..."
    if revision.instruction:
        return revision.instruction
    if revision.kind in ("undo", "redo", "revert") and revision.target is not None:
        return f"{revision.kind} of revision {revision.target}" if revision.kind != "revert" else (
            f"back to revision {revision.target}"
        )
    return revision.kind


def history_view(history: Iterable[Revision]) -> list[dict[str, Any]]:
    """Every revision, oldest first: number, kind, instruction, a label, time and size."""
    rows = []
    for revision in history:
        rows.append({
            "number": revision.number,
            "kind": revision.kind,
            "instruction": revision.instruction,
            "target": revision.target,
            "label": _label(revision),
            "time": revision.time,
            "changes": len(revision.changes),
        })
    return rows


def undo_state(history: Sequence[Revision]) -> tuple[bool, bool]:
    """``(can_undo, can_redo)`` for the revision log ``history``."""
    done, undone = undo_stacks(list(history))
    return bool(done), bool(undone)

"""Edited text back into a message's text blocks (a multimodal message: text, an image, text).

The adapters hand the core a message's text blocks joined by newlines; after an edit,
:func:`lines_to_blocks` cuts the new text into one piece per original block, so each block
gets the lines that stand where its own stood and an image between two paragraphs stays
between them.
"""

from __future__ import annotations

import difflib

__all__ = ["lines_to_blocks", "SAME_LINE", "MAX_LINE_PAIRS", "MAX_PAIR_CHARS"]

SAME_LINE = 0.5
"""How alike (``difflib`` ratio) a new line must be to an old one to stand in its place."""

MAX_LINE_PAIRS = 5_000
"""The most (new line, old line) pairs a replaced run is compared in (70 x 70 lines, pruned
by ``difflib``'s cheap bounds: well under a second): a longer run (a long pasted log rewritten
whole) is spread over its old lines in proportion instead (400 lines compared pair by pair
took 21 s, on every read)."""

MAX_PAIR_CHARS = 250_000
"""Two lines whose lengths multiply past this (a minified JSON or base64 line of a few
thousand characters) are scored by ``quick_ratio`` (their characters in common) instead of
``ratio``, whose cost grows with that product (56,000 characters took 32 s)."""


def lines_to_blocks(text: str, originals: list[str]) -> list[str | None]:
    """``text`` cut into one piece per original text block (``None`` for a block left with
    no line): the lines of ``text`` lined up with the originals' lines (``difflib``), each
    kept or changed line going to the block its old line was in, a line inserted to the
    block of the line before it (the first block at the start), the lines that replace a
    run of old lines to those lines' blocks in proportion.

    >>> lines_to_blocks("Photo:\\nWhich cliffs in Iceland?", ["Photo:", "Which cliffs in Ireland?"])
    ['Photo:', 'Which cliffs in Iceland?']
    >>> lines_to_blocks("Which cliffs?", ["Photo:", "Which cliffs?"])
    [None, 'Which cliffs?']

    Adapters call it on every read of an edited message, so its cost is bounded: a long
    replaced run is not compared line by line (:data:`MAX_LINE_PAIRS`), nor two long lines
    character by character (:data:`MAX_PAIR_CHARS`).  Nothing is kept between calls (no text
    outlives the messages it came from).
    """
    old_lines: list[str] = []
    owner: list[int] = []  # the block of each old line
    for index, original in enumerate(originals):
        for line in original.split("\n"):
            old_lines.append(line)
            owner.append(index)
    new_lines = text.split("\n")
    assigned: list[list[str]] = [[] for _ in originals]
    matcher = difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "delete":
            continue
        before = owner[i1 - 1] if i1 > 0 else 0  # where a line inserted here belongs
        if tag == "equal":
            targets = [owner[i] for i in range(i1, i2)]
        elif tag == "insert":
            targets = [before] * (j2 - j1)
        else:
            targets = _replaced(old_lines[i1:i2], owner[i1:i2], new_lines[j1:j2], before)
        for block, line in zip(targets, new_lines[j1:j2]):
            assigned[block].append(line)
    return ["\n".join(lines) if lines else None for lines in assigned]


def _replaced(old: list[str], owners: list[int], new: list[str], before: int) -> list[int]:
    """The block of each of ``new``, lines that replace ``old`` (owned by ``owners``): a line
    like an old one takes that line's block; the unlike lines before the first such take
    ``before`` (inserted ahead of the run), the others the block of the like line before them;
    with no like line at all, the run is spread over the old lines in proportion.  Blocks
    never go backwards, so the text keeps its order.  Beyond :data:`MAX_LINE_PAIRS` pairs
    the run is spread in proportion without comparing; a pair is compared in full only when
    ``difflib``'s cheap upper bounds say it may beat the best so far and :data:`SAME_LINE`."""
    best: list[int | None] = [None] * len(new)
    if len(new) * len(old) <= MAX_LINE_PAIRS:
        best = _most_alike(new, old, owners)
    if all(b is None for b in best):
        return [owners[min(k * len(old) // len(new), len(old) - 1)] for k in range(len(new))]
    out, current = [], before
    for block in best:
        current = max(current, block) if block is not None else current
        out.append(current)
    return out


def _most_alike(new: list[str], old: list[str], owners: list[int]) -> list[int | None]:
    """For each of ``new``, the block of the old line most like it (the first of equals) when
    at least :data:`SAME_LINE` alike, else ``None``: ``SequenceMatcher(None, line, old).ratio()``
    compared in full only where its cheap upper bounds may beat the best so far."""
    top = [SAME_LINE] * len(new)
    found: list[int | None] = [None] * len(new)
    matcher = difflib.SequenceMatcher(None, autojunk=False)
    for index, candidate in enumerate(old):
        matcher.set_seq2(candidate)  # its index is built once for every new line
        for k, line in enumerate(new):
            matcher.set_seq1(line)
            if matcher.real_quick_ratio() < top[k] or matcher.quick_ratio() < top[k]:
                continue
            ratio = matcher.ratio() if len(line) * len(candidate) <= MAX_PAIR_CHARS else matcher.quick_ratio()
            if ratio > top[k] or (found[k] is None and ratio >= top[k]):
                top[k], found[k] = ratio, owners[index]
    return found

"""Edited text back into a message's text blocks (a multimodal message: text, an image, text).

The adapters hand the core a message's text blocks joined by newlines; after an edit,
:func:`lines_to_blocks` cuts the new text into one piece per original block, so each block
gets the lines that stand where its own stood and an image between two paragraphs stays
between them.
"""

from __future__ import annotations

import difflib

__all__ = ["lines_to_blocks", "SAME_LINE"]

SAME_LINE = 0.5
"""How alike (``difflib`` ratio) a new line must be to an old one to stand in its place."""


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
    never go backwards, so the text keeps its order."""
    best: list[int | None] = []
    for line in new:
        ratios = [difflib.SequenceMatcher(None, line, o, autojunk=False).ratio() for o in old]
        top = max(range(len(old)), key=ratios.__getitem__)
        best.append(owners[top] if ratios[top] >= SAME_LINE else None)
    if all(b is None for b in best):
        return [owners[min(k * len(old) // len(new), len(old) - 1)] for k in range(len(new))]
    out, current = [], before
    for block in best:
        current = max(current, block) if block is not None else current
        out.append(current)
    return out

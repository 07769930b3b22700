"""MkDocs hook: show the docstrings' interactive examples (``>>>`` lines) as code on the API pages.

The library's docstrings hold doctest examples as plain paragraphs (``tests/test_docs.py`` runs
them); Markdown would run their lines together and read ``calls[0][0]`` as a link. This hook adds a
Markdown preprocessor, to the pages and to mkdocstrings' rendering of docstrings alike, that fences
each run of ``>>>`` / ``...`` lines and their output (up to the next blank line) as a ``pycon``
code block. Lines already inside a code fence or indented as code are left alone.
"""

from __future__ import annotations

import re
from typing import Any

from markdown import Extension, Markdown
from markdown.preprocessors import Preprocessor

PROMPT = re.compile(r"^ {0,3}>>> ")
FENCE = re.compile(r"^ {0,3}(```|~~~)")


class DoctestBlocks(Preprocessor):
    """Fence every doctest run that sits outside a code block."""

    def run(self, lines: list[str]) -> list[str]:
        out: list[str] = []
        fenced = False
        in_doctest = False
        for line in lines:
            if in_doctest and not line.strip():
                out += ["```", line]
                in_doctest = False
                continue
            if in_doctest:
                out.append(line)
                continue
            if FENCE.match(line):
                fenced = not fenced
            elif not fenced and PROMPT.match(line) and (not out or not out[-1].strip()):
                out += ["```pycon", line.lstrip()]
                in_doctest = True
                continue
            out.append(line)
        if in_doctest:
            out.append("```")
        return out


class DoctestBlocksExtension(Extension):
    """Registers :class:`DoctestBlocks` before ``fenced_code`` (priority 25) reads the fences."""

    def extendMarkdown(self, md: Markdown) -> None:  # noqa: N802 - Markdown's name
        md.preprocessors.register(DoctestBlocks(md), "doctest_blocks", 27)


def on_config(config: Any) -> Any:
    """Add the extension to the Markdown that renders pages and docstrings."""
    config.markdown_extensions.append(DoctestBlocksExtension())
    return config

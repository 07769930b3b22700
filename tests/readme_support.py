"""The fenced code blocks of the README and the documentation pages, for the tests that run them."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README_PATH = ROOT / "README.md"
README = README_PATH.read_text(encoding="utf-8")
DOCS = ROOT / "docs"


def doc_text(page: str) -> str:
    """The text of ``page``, a path under ``docs/`` such as ``guide/chat.md``."""
    return (DOCS / page).read_text(encoding="utf-8")


def doc_section(page: str, heading: str) -> str:
    """The section of ``page`` from ``heading`` (a whole heading line) up to the next heading of its level."""
    text = doc_text(page)
    start = text.index(f"\n{heading}\n") + 1
    level = heading.split(" ", 1)[0]
    end = text.find(f"\n{level} ", start + len(heading))
    return text[start : end if end >= 0 else len(text)]


def readme_block(first_line: str, language: str = "python", page: str | None = None) -> str:
    """The fenced ``language`` block that starts with ``first_line``, in the README or in ``docs/<page>``."""
    text = README if page is None else doc_text(page)
    for block in re.findall(rf"```{language}\n(.*?)```", text, re.S):
        if block.startswith(first_line):
            return block
    raise AssertionError(f"no {language} block of {page or 'README.md'} starts with {first_line!r}")

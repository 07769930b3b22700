"""The README's fenced code blocks, for the tests that run them as written."""

from __future__ import annotations

import re
from pathlib import Path

README_PATH = Path(__file__).resolve().parents[1] / "README.md"
README = README_PATH.read_text(encoding="utf-8")


def readme_block(first_line: str, language: str = "python") -> str:
    """The fenced ``language`` block of the README that starts with ``first_line``."""
    for block in re.findall(rf"```{language}\n(.*?)```", README, re.S):
        if block.startswith(first_line):
            return block
    raise AssertionError(f"no README {language} block starts with {first_line!r}")

"""The LangChain quickstart's printed tables say what really happened (they are read by people
and saved in the notebook): each question numbered, the earlier questions each call was sent
named, and every changed message of a diff labelled (Q1, A1, ...), never '?'."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "langchain_quickstart.py"


def test_the_chain_table_and_the_diffs_label_every_message() -> None:
    out = subprocess.run(
        [sys.executable, str(EXAMPLE), "--plain", "--offline"], capture_output=True, text=True, check=True, timeout=300
    ).stdout
    rows = re.findall(r"^\s+(\d)\s+(How often should a watchdog|And should the moka pot).*?(\S+)$", out, re.M)
    assert rows == [("3", "How often should a watchdog", "Q1"), ("4", "And should the moka pot", "Q2")]
    changed = re.findall(r"^\s+(\S+) \((?:user|assistant), changed\)$", out, re.M)
    assert changed and "?" not in changed, changed

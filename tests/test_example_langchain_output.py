"""The LangChain quickstart's printed tables say what really happened (they are read by people
and saved in the notebook): each question numbered, the earlier questions each call was sent
named, and every changed message of a diff labelled (Q1, A1, ...), never '?'.  It uses only the
adapter's public names, and with a key but no reachable Gemini it says so in one panel."""

from __future__ import annotations

import ast
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import langchain_gatekeeper

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "langchain_quickstart.py"
PROXY_VARS = ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "https_proxy", "http_proxy", "all_proxy")


def test_the_chain_table_and_the_diffs_label_every_message() -> None:
    out = subprocess.run(
        [sys.executable, str(EXAMPLE), "--plain", "--offline"], capture_output=True, text=True, check=True, timeout=300
    ).stdout
    rows = re.findall(r"^\s+(\d)\s+(How often should a watchdog|And should the moka pot).*?(\S+)$", out, re.M)
    assert rows == [("3", "How often should a watchdog", "Q1"), ("4", "And should the moka pot", "Q2")]
    changed = re.findall(r"^\s+(\S+) \((?:user|assistant), changed\)$", out, re.M)
    assert changed and "?" not in changed, changed


def test_the_example_imports_the_adapter_from_its_public_names_only() -> None:
    imports = [node for node in ast.walk(ast.parse(EXAMPLE.read_text(encoding="utf-8")))
               if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("langchain_gatekeeper")]
    assert imports
    for node in imports:
        assert node.module == "langchain_gatekeeper", f"line {node.lineno} imports from {node.module}"
        assert {a.name for a in node.names} <= set(langchain_gatekeeper.__all__), f"line {node.lineno}"


def test_with_a_key_and_gemini_unreachable_it_says_so_in_one_panel() -> None:
    # every proxy points at a port bound here without listening: each request is refused, none leaves the machine
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        proxy = f"http://127.0.0.1:{closed.getsockname()[1]}"
        env = {k: v for k, v in os.environ.items() if k.lower() not in ("no_proxy", "gemini_api_key")}
        env |= {"GOOGLE_API_KEY": "not-a-real-key", **dict.fromkeys(PROXY_VARS, proxy)}
        done = subprocess.run([sys.executable, str(EXAMPLE), "--plain"], capture_output=True, text=True,
                              env=env, timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    panel = done.stdout.split("--- Gemini could not be used", 1)[1]
    assert "Error" in panel and "--offline" in panel, panel

"""Docs the library cites exist: no docstring points outside the repository, every
``docs/architecture.md#anchor`` it cites is a heading there, and every module path the
architecture document names imports."""

from __future__ import annotations

import importlib
import re
import unicodedata
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
LIBRARY = (ROOT / "shared" / "context_gatekeeper", ROOT / "langchain_gatekeeper", ROOT / "llamaindex_gatekeeper")
OUTSIDE = re.compile(r"DESIGN\.md|\.\./shared\b")
CITED = re.compile(r"docs/architecture\.md#([^\s`'\")\]]+)")
ROOMS = ("records", "selection", "transcripts", "editing", "stores", "chat", "testing", "integration")
# `context_gatekeeper.x.y`, or a room-relative path in backticks (`selection.gate.decide`)
MODULE_PATH = re.compile(
    r"\bcontext_gatekeeper(?:\.[A-Za-z_]\w*)+|(?<=`)(?:%s)(?:\.[A-Za-z_]\w*)*(?=[`(])" % "|".join(ROOMS)
)


def library_files() -> list[Path]:
    return sorted(p for root in LIBRARY for p in root.rglob("*.py") if "__pycache__" not in p.parts)


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading: lower case, punctuation dropped
    (letters, digits, ``_``, ``-`` and spaces stay), each space a ``-``."""
    kept = "".join(ch for ch in heading.strip().lower() if ch in "_- " or unicodedata.category(ch)[0] in "LN")
    return kept.replace(" ", "-")


def heading_anchors(markdown: str) -> set[str]:
    """Anchors of every ATX heading outside code fences; a repeated one gets ``-1``, ``-2``..."""
    anchors: set[str] = set()
    fenced = False
    for line in markdown.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        match = None if fenced else re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if match:
            base = anchor = github_anchor(match.group(1))
            n = 0
            while anchor in anchors:
                n += 1
                anchor = f"{base}-{n}"
            anchors.add(anchor)
    return anchors


def resolves(dotted: str) -> bool:
    """Whether ``dotted`` is a module, or an attribute chain on the longest module prefix that imports."""
    parts = dotted.split(".")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # old paths resolve through _moved, with a warning
        for i in range(len(parts), 0, -1):
            name = ".".join(parts[:i])
            try:
                obj: object = importlib.import_module(name)
            except ModuleNotFoundError as exc:
                if exc.name is not None and not name.startswith(exc.name) and exc.name != name:
                    raise  # the module exists but one of its own imports is missing: a real failure
                continue
            for attr in parts[i:]:
                if not hasattr(obj, attr):
                    return False
                obj = getattr(obj, attr)
            return True
    return False


def test_github_anchor_rules() -> None:
    assert github_anchor("Data flow of a select") == "data-flow-of-a-select"
    assert github_anchor("Budget, and precision: rules!") == "budget-and-precision-rules"
    assert github_anchor("Old `module` paths (0.2)") == "old-module-paths-02"
    assert heading_anchors("# A\n```\n# not a heading\n```\n## A\n") == {"a", "a-1"}


def test_no_library_module_cites_documents_outside_the_repository() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path in library_files()
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert not offenders, "cite docs/architecture.md instead:\n" + "\n".join(offenders)


REPO_PATH = re.compile(r"\b(?:tests|benchmarks|examples|docs)/[\w./-]+\.(?:py|md|jsonl|ipynb)\b")


def test_every_repository_file_a_library_module_cites_exists() -> None:
    cited = {
        (str(path.relative_to(ROOT)), found)
        for path in library_files()
        for found in REPO_PATH.findall(path.read_text(encoding="utf-8"))
    }
    assert cited, "no library module cites a repository file: the check would prove nothing"
    missing = sorted(f"{where}: {found}" for where, found in cited if not (ROOT / found).is_file())
    assert not missing, "library docstrings cite files that are not in the repository:\n" + "\n".join(missing)


def test_every_cited_architecture_anchor_exists() -> None:
    anchors = heading_anchors(ARCHITECTURE.read_text(encoding="utf-8"))
    sources = [*library_files(), ROOT / "README.md"]
    cited = {
        (str(path.relative_to(ROOT)), anchor)
        for path in sources
        for anchor in CITED.findall(path.read_text(encoding="utf-8"))
    }
    own = re.findall(r"\]\(#([^)\s]+)\)", ARCHITECTURE.read_text(encoding="utf-8"))
    cited |= {("docs/architecture.md", anchor) for anchor in own}
    assert cited, "nothing cites docs/architecture.md: the check would prove nothing"
    missing = sorted(f"{where}: #{anchor}" for where, anchor in cited if anchor not in anchors)
    assert not missing, f"anchors missing from docs/architecture.md (it has {sorted(anchors)}):\n" + "\n".join(missing)


def architecture_paths() -> list[str]:
    paths = {m if m.startswith("context_gatekeeper") else "context_gatekeeper." + m
             for m in MODULE_PATH.findall(ARCHITECTURE.read_text(encoding="utf-8"))}
    return sorted(paths)


def test_the_architecture_document_names_modules() -> None:
    paths = architecture_paths()
    assert "context_gatekeeper.selection.params.SelectionParams" in paths
    assert "context_gatekeeper.integration" in paths


@pytest.mark.parametrize("dotted", architecture_paths())
def test_every_module_path_in_the_architecture_document_imports(dotted: str) -> None:
    assert resolves(dotted), f"docs/architecture.md names {dotted}, which does not import"


def test_resolves_rejects_what_does_not_exist() -> None:
    assert resolves("context_gatekeeper.selection.gate.decide")
    assert not resolves("context_gatekeeper.selection.no_such_module")
    assert not resolves("context_gatekeeper.selection.gate.no_such_name")

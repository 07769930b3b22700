"""The house rules, checked: rooms by concern, one-way arrows, one declared surface.

``docs/architecture.md`` describes the rooms; these tests keep the code that way.
They read the source with :mod:`ast` (no import side effects), so a new import that
breaks a rule fails here with the file and line that added it.
"""

from __future__ import annotations

import ast
import importlib
import json
import pickle
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

import context_gatekeeper
import context_gatekeeper.integration as integration

REPO = Path(__file__).resolve().parents[1]
CORE = REPO / "shared" / "context_gatekeeper"
ADAPTERS = [REPO / "langchain_gatekeeper", REPO / "llamaindex_gatekeeper"]

# What a reader sees in shared/context_gatekeeper/: the rooms and the foundation.
ROOMS = {"records", "selection", "transcripts", "editing", "stores", "chat", "testing"}
FOUNDATION = {"caching", "errors", "tokens", "validation"}
TOP_LEVEL_MODULES = FOUNDATION | {"__init__", "integration"}

def module_name(path: Path) -> str:
    """``context_gatekeeper.selection.gate`` for ``.../context_gatekeeper/selection/gate.py``."""
    parts = list(path.relative_to(CORE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, package: str) -> Iterator[tuple[int, str]]:
    """Every module ``path`` imports (relative imports resolved against ``package``),
    with its line, lazy imports inside functions included."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                yield node.lineno, ".".join(base + ([node.module] if node.module else []))
            elif node.module:
                yield node.lineno, node.module
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name


def core_imports(path: Path) -> Iterator[tuple[int, str]]:
    """The ``context_gatekeeper`` modules a core module imports, without the prefix
    (``""`` for the package itself)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    for line, target in imports_of(path, package):
        if target == "context_gatekeeper":
            yield line, ""
        elif target.startswith("context_gatekeeper."):
            yield line, target[len("context_gatekeeper.") :]


def core_modules() -> list[Path]:
    return sorted(p for p in CORE.rglob("*.py") if "__pycache__" not in p.parts)


def short(path: Path) -> str:
    return module_name(path)[len("context_gatekeeper.") :] if "." in module_name(path) else ""


def test_the_package_folder_shows_the_rooms_and_nothing_else() -> None:
    folders = {p.name for p in CORE.iterdir() if p.is_dir() and p.name != "__pycache__"}
    modules = {p.stem for p in CORE.glob("*.py")}
    assert folders == ROOMS, f"rooms are {sorted(ROOMS)}; a new concern gets a room and a line in docs/architecture.md"
    assert modules == TOP_LEVEL_MODULES, (
        f"top-level modules are the foundation {sorted(FOUNDATION)} and the surface; "
        f"put {sorted(modules - TOP_LEVEL_MODULES)} in the room of its concern"
    )


def test_every_room_is_packaged_in_the_wheel() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["packages"])
    packages = {module_name(p) for p in CORE.rglob("__init__.py") if "__pycache__" not in p.parts}
    assert packages <= listed, f"add {sorted(packages - listed)} to [tool.setuptools] packages in pyproject.toml"


# The arrows between rooms (``""`` is the public surface: ``__init__`` and ``integration``).
# A room may import the foundation, itself and the rooms listed here, nothing else.
ARROWS: dict[str, set[str]] = {
    "records": set(),
    "selection": set(),
    "editing": {"records"},
    "stores": {"records", "selection"},
    "transcripts": {"records", "editing", "stores", "selection"},
    "": {"records", "selection", "editing", "stores", "transcripts"},
    "testing": {"", "records", "selection", "editing", "stores", "transcripts"},
    "chat": {""},
}
# Where an arrow is allowed for one module only: the narrow bridges.
BRIDGES = {
    ("stores", "selection"): {"selection.semantic.embedding"},  # stores keep vectors, nothing else
    ("transcripts", "selection"): {"transcripts.transcript_gate"},  # the one bridge between the halves
}


def room_of(module: str) -> str:
    """``selection`` for ``selection.gate``; ``""`` for the surface (``__init__``, ``integration``)."""
    head = module.split(".")[0] if module else ""
    return "" if head == "integration" else head


def allowed(source: str, target: str) -> bool:
    """May core module ``source`` import core module ``target`` (names without the prefix)?"""
    room, target_room = room_of(source), room_of(target)
    if room in FOUNDATION:
        return target_room in FOUNDATION
    if target_room in FOUNDATION or target_room == room:
        return True
    if target_room not in ARROWS.get(room, set()):
        return False
    bridge = BRIDGES.get((room, target_room))
    if bridge is None:
        return True
    return (target if room == "stores" else source) in bridge


def test_no_two_rooms_import_each_other() -> None:
    pairs = {
        (room_of(short(path)), room_of(target))
        for path in core_modules()
        for _, target in core_imports(path)
        if room_of(short(path)) != room_of(target)
    }
    both_ways = sorted((a, b) for a, b in pairs if (b, a) in pairs and a < b)
    assert not both_ways, f"rooms that import each other: {both_ways}; move what both need one room down"
    declared = {(a, b) for a, targets in ARROWS.items() for b in targets}
    assert not {(a, b) for a, b in declared if (b, a) in declared}, "ARROWS itself lists a two-way pair"


def test_arrows_between_rooms_are_one_way() -> None:
    broken = [
        f"{path.relative_to(REPO)}:{line} imports context_gatekeeper.{target}"
        for path in core_modules()
        for line, target in core_imports(path)
        if not allowed(short(path), target)
    ]
    assert not broken, "imports against the arrows of docs/architecture.md#rooms-and-arrows:\n" + "\n".join(broken)


def test_the_checker_itself_refuses_the_wrong_arrows() -> None:
    assert not allowed("selection.gate", "records.messages")
    assert not allowed("selection.semantic.channel", "stores.vectors")
    assert not allowed("editing.compute", "transcripts.transcript")
    assert not allowed("records.messages", "editing.models")
    assert not allowed("transcripts.transcript", "selection.gatekeeper")
    assert not allowed("stores.sqlite", "transcripts.transcript")
    assert not allowed("chat.session", "records.messages")
    assert not allowed("errors", "selection.gate")
    assert allowed("transcripts.transcript_gate", "selection.gatekeeper")
    assert allowed("stores.vector_cache", "selection.semantic.embedding")
    assert allowed("chat.session", "integration")
    assert allowed("editing.compute", "records.operations")
    assert allowed("stores.replica", "records.revisions")


def adapter_files() -> list[Path]:
    return sorted(p for root in ADAPTERS for p in root.rglob("*.py"))


@pytest.mark.parametrize("path", adapter_files() + sorted((CORE / "chat").glob("*.py")), ids=lambda p: p.name)
def test_adapters_and_the_chat_use_only_the_declared_surface(path: Path) -> None:
    in_core = CORE in path.parents
    package = module_name(path).rsplit(".", 1)[0] if in_core else path.parent.name
    outside = [
        f"line {line}: {target}"
        for line, target in imports_of(path, package)
        if target.startswith("context_gatekeeper")
        and target not in {"context_gatekeeper", "context_gatekeeper.integration"}
        and not target.startswith("context_gatekeeper.chat")
    ]
    assert not outside, (
        f"{path.relative_to(REPO)} reaches into the core's rooms: {outside}; import public names from "
        "context_gatekeeper, or declare the name in context_gatekeeper.integration"
    )


def test_every_integration_name_is_used_and_none_is_already_public() -> None:
    sources = "\n".join(p.read_text(encoding="utf-8") for p in adapter_files() + list((CORE / "chat").glob("*.py")))
    unused = [name for name in integration.__all__ if name not in sources]
    assert not unused, f"declared but used by no adapter: {unused}; drop them from context_gatekeeper.integration"
    assert not set(integration.__all__) & set(context_gatekeeper.__all__), "a public name needs no second home"
    assert sorted(integration.__all__) == sorted(set(integration.__all__))
    for name in integration.__all__:
        assert hasattr(integration, name), name


def test_importing_the_surface_pulls_in_no_framework_or_optional_dependency() -> None:
    code = (
        "import sys, context_gatekeeper, context_gatekeeper.integration, context_gatekeeper.testing\n"
        "heavy = [m for m in ('numpy', 'psycopg', 'psycopg_pool', 'langchain_core', 'llama_index', 'google.genai',"
        " 'pytest', 'hypothesis') if m in sys.modules]\n"
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_the_former_selection_and_editing_modules_are_rooms_that_keep_their_names() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        from context_gatekeeper.editing import EditResult, compute_edit
        from context_gatekeeper.selection import Evidence, Selection, Turn, TurnScore

    assert compute_edit is integration.compute_edit and EditResult is integration.EditResult
    assert (Turn, Selection, Evidence, TurnScore) == (
        context_gatekeeper.Turn,
        context_gatekeeper.Selection,
        context_gatekeeper.Evidence,
        context_gatekeeper.TurnScore,
    )


def test_the_readme_layout_names_every_room_adapter_module_and_benchmark() -> None:
    architecture = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    layout = architecture[architecture.index("## Layout") : architecture.index("\n## ", architecture.index("## Layout") + 1)]
    expected = {f"{room}/" for room in ROOMS} | {"semantic/"} | {f"{m}.py" for m in TOP_LEVEL_MODULES - {"__init__"}}
    expected |= {p.name for root in ADAPTERS for p in root.glob("*.py") if p.name != "__init__.py"}
    expected |= {p.name for p in (REPO / "benchmarks").glob("*.py")}
    missing = sorted(name for name in expected if name not in layout)
    assert not missing, f"docs/architecture.md's Layout section does not mention {missing}"

"""The house rules of ``docs/architecture.md``: rooms by concern, one-way arrows, one surface.

Read with :mod:`ast` (no import side effects), so a new import that breaks a rule is
reported with the file and line that added it.  The rules:

* the package folder ``shared/context_gatekeeper/`` holds the rooms (:data:`ROOMS`) and the
  foundation modules (:data:`FOUNDATION`) plus the surface (``__init__``, ``integration``);
* every package under it is listed in ``[tool.setuptools] packages`` (so it is in the wheel);
* a room imports the foundation, itself and the rooms :data:`ARROWS` lists, through the
  narrow :data:`BRIDGES` where one is declared; no two rooms import each other;
* the adapters and the chat import the core only through ``context_gatekeeper`` and
  ``context_gatekeeper.integration``;
* every ``integration`` name is used by an adapter or the chat, is defined there, and is
  not already public in ``context_gatekeeper.__all__``.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterator
from pathlib import Path

from lint import REPO, imported_by_name

# What a reader sees in shared/context_gatekeeper/: the rooms and the foundation.
ROOMS = {"records", "selection", "transcripts", "editing", "stores", "chat", "testing"}
FOUNDATION = {"caching", "errors", "tokens", "validation"}
TOP_LEVEL_MODULES = FOUNDATION | {"__init__", "integration"}
ADAPTER_NAMES = ("langchain_gatekeeper", "llamaindex_gatekeeper")
ADAPTERS = [REPO / name for name in ADAPTER_NAMES]

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


def module_name(path: Path, core: Path) -> str:
    """``context_gatekeeper.selection.gate`` for ``<core>/selection/gate.py``."""
    parts = list(path.relative_to(core.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def short(path: Path, core: Path) -> str:
    """The module's name without the ``context_gatekeeper.`` prefix (``""`` for the package)."""
    name = module_name(path, core)
    return name[len("context_gatekeeper.") :] if "." in name else ""


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


def core_imports(path: Path, core: Path) -> Iterator[tuple[int, str]]:
    """The ``context_gatekeeper`` modules a core module imports, without the prefix
    (``""`` for the package itself)."""
    name = module_name(path, core)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    for line, target in imports_of(path, package):
        if target == "context_gatekeeper":
            yield line, ""
        elif target.startswith("context_gatekeeper."):
            yield line, target[len("context_gatekeeper.") :]


def python_files(folder: Path) -> list[Path]:
    """The ``.py`` files under ``folder``, bytecode caches left out."""
    return sorted(p for p in folder.rglob("*.py") if "__pycache__" not in p.parts)


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


def check_layout(root: Path) -> list[str]:
    """The package folder shows the rooms and the foundation, nothing else."""
    core = root / "shared" / "context_gatekeeper"
    folders = {p.name for p in core.iterdir() if p.is_dir() and p.name != "__pycache__"}
    modules = {p.stem for p in core.glob("*.py")}
    problems = []
    if folders != ROOMS:
        problems.append(
            f"shared/context_gatekeeper/ has the folders {sorted(folders)}; the rooms are {sorted(ROOMS)}: "
            "a new concern gets a room here (ROOMS, ARROWS) and a line in docs/architecture.md"
        )
    if modules != TOP_LEVEL_MODULES:
        problems.append(
            f"shared/context_gatekeeper/ top-level modules are the foundation {sorted(FOUNDATION)} and the "
            f"surface; put {sorted(modules - TOP_LEVEL_MODULES)} in the room of its concern"
            + (f" (missing: {sorted(TOP_LEVEL_MODULES - modules)})" if TOP_LEVEL_MODULES - modules else "")
        )
    return problems


def packaged(pyproject: str) -> set[str]:
    """The names in ``[tool.setuptools] packages`` of a pyproject.toml text."""
    if sys.version_info >= (3, 11):
        import tomllib

        return set(tomllib.loads(pyproject).get("tool", {}).get("setuptools", {}).get("packages", []))
    # Python 3.10 has no tomllib: the list is a plain TOML array of strings
    found = re.search(r"^\[tool\.setuptools\][^\[]*?^packages\s*=\s*\[(.*?)\]", pyproject, re.M | re.S)
    return set(re.findall(r'"([^"]+)"', found.group(1))) if found else set()


def check_packaging(root: Path) -> list[str]:
    """Every package under the core is listed in ``[tool.setuptools] packages``."""
    core = root / "shared" / "context_gatekeeper"
    listed = packaged((root / "pyproject.toml").read_text(encoding="utf-8"))
    packages = {module_name(p, core) for p in python_files(core) if p.name == "__init__.py"}
    missing = sorted(packages - listed)
    return [f"pyproject.toml: add {missing} to [tool.setuptools] packages (not in the wheel otherwise)"] if missing else []


def check_arrows(root: Path) -> list[str]:
    """Imports between rooms follow :data:`ARROWS` and :data:`BRIDGES`; no two rooms import each other."""
    core = root / "shared" / "context_gatekeeper"
    edges = [(path, line, short(path, core), target)
             for path in python_files(core) for line, target in core_imports(path, core)]
    problems = [
        f"{path.relative_to(root)}:{line} imports context_gatekeeper.{target}, against the arrows of "
        "docs/architecture.md#rooms-and-arrows"
        for path, line, source, target in edges
        if not allowed(source, target)
    ]
    pairs = {(room_of(source), room_of(target)) for _, _, source, target in edges if room_of(source) != room_of(target)}
    both_ways = sorted((a, b) for a, b in pairs if (b, a) in pairs and a < b)
    if both_ways:
        problems.append(f"rooms that import each other: {both_ways}; move what both need one room down")
    declared = {(a, b) for a, targets in ARROWS.items() for b in targets}
    if any((b, a) in declared for a, b in declared):
        problems.append("lint/architecture.py: ARROWS itself lists a two-way pair")
    return problems


FRAMEWORKS = ("langchain", "langchain_core", "langgraph", "llama_index")
"""Packages the core never imports: the frameworks the adapters wrap."""


def loaded_by_name(path: Path) -> Iterator[tuple[int, str]]:
    """Modules ``path`` loads by a literal name (:func:`lint.imported_by_name`), with their lines."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and (module := imported_by_name(node)) is not None:
            yield node.lineno, module


def check_core_imports_no_adapter(root: Path) -> list[str]:
    """The core imports neither an adapter nor a framework, not even lazily or by name:
    adapters declare what the core needs (their model wrappers, as entry points)."""
    core = root / "shared" / "context_gatekeeper"
    problems = []
    for path in python_files(core):
        package = module_name(path, core).rsplit(".", 1)[0] if path.name != "__init__.py" else module_name(path, core)
        targets = list(imports_of(path, package)) + list(loaded_by_name(path))
        for line, target in targets:
            top = target.split(".")[0]
            if top in ADAPTER_NAMES or top in FRAMEWORKS:
                problems.append(
                    f"{path.relative_to(root)}:{line} imports {target}: the core never imports an adapter or a "
                    "framework; let the adapter declare what the core needs (see docs/architecture.md#adapters)"
                )
    return problems


def surface_users(root: Path) -> list[Path]:
    """The adapters' modules and the chat's: code that may use only the declared surface."""
    core = root / "shared" / "context_gatekeeper"
    return [p for name in ADAPTER_NAMES for p in python_files(root / name)] + sorted((core / "chat").glob("*.py"))


def check_surface(root: Path) -> list[str]:
    """The adapters and the chat import the core through ``context_gatekeeper`` and its
    ``integration`` module only."""
    core = root / "shared" / "context_gatekeeper"
    problems = []
    for path in surface_users(root):
        package = module_name(path, core).rsplit(".", 1)[0] if core in path.parents else path.parent.name
        for line, target in imports_of(path, package):
            if (target.startswith("context_gatekeeper")
                    and target not in {"context_gatekeeper", "context_gatekeeper.integration"}
                    and not target.startswith("context_gatekeeper.chat")):
                problems.append(
                    f"{path.relative_to(root)}:{line} imports {target}, reaching into the core's rooms; import "
                    "public names from context_gatekeeper, or declare the name in context_gatekeeper.integration"
                )
    return problems


def declared_names(path: Path) -> tuple[list[str], set[str]]:
    """A module's literal ``__all__`` and the names it binds at top level (in ``if``/``try`` blocks too)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    exported: list[str] = []
    bound: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                bound.update((a.asname or a.name).split(".")[0] for a in node.names)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                bound.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    for name in ast.walk(target):
                        if isinstance(name, ast.Name):
                            bound.add(name.id)
                            if name.id == "__all__" and node.value is not None:
                                exported.extend(ast.literal_eval(node.value))
            elif isinstance(node, (ast.If, ast.Try)):
                visit(node.body)
                visit(node.orelse)
                for handler in getattr(node, "handlers", []):
                    visit(handler.body)

    visit(tree.body)
    return exported, bound


def check_integration(root: Path) -> list[str]:
    """Every ``integration`` name is used by an adapter or the chat, defined there, and
    not already public."""
    core = root / "shared" / "context_gatekeeper"
    names, bound = declared_names(core / "integration.py")
    public, _ = declared_names(core / "__init__.py")
    sources = "\n".join(p.read_text(encoding="utf-8") for p in surface_users(root))
    problems = []
    unused = [name for name in names if name not in sources]
    if unused:
        problems.append(f"context_gatekeeper.integration declares {unused}, used by no adapter: drop them")
    if set(names) & set(public):
        problems.append(
            f"context_gatekeeper.integration re-declares the public {sorted(set(names) & set(public))}: "
            "a public name needs no second home"
        )
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        problems.append(f"context_gatekeeper.integration lists {twice} twice in __all__")
    undefined = [name for name in names if name not in bound]
    if undefined:
        problems.append(f"context_gatekeeper.integration.__all__ names {undefined}, which the module does not define")
    return problems


def check(root: Path = REPO) -> list[str]:
    """Every architecture problem in the repository at ``root``, one a line."""
    return (check_layout(root) + check_packaging(root) + check_arrows(root) + check_core_imports_no_adapter(root)
            + check_surface(root) + check_integration(root))

"""Benchmarks import the installed package, never ``tests/``, and never edit ``sys.path``.

Every ``benchmarks/*.py`` is parsed (not run) and checked for:

* a change to ``sys.path``: a mutating method call (``insert``, ``append``, ``extend``, ...),
  an assignment, augmented assignment or deletion of it or of a slice of it, and
  ``site.addsitedir`` (which appends to it);
* an import of ``tests``, ``conftest``, or a module named after a file or package in
  ``tests/`` (``paper_scenarios``, ``pg_support``, ...), by an import statement or by
  ``importlib.import_module`` / ``__import__`` with a literal name.

A benchmark needs neither: ``pip install -e .`` makes ``context_gatekeeper`` importable,
and a script's own directory is first on ``sys.path``, so sibling benchmark modules
(``from quality import ...``) import as they are.  A helper a benchmark needs lives in
``benchmarks/`` or comes from the public API (``context_gatekeeper.testing.ScriptedModel``).
"""

from __future__ import annotations

import ast
from pathlib import Path

from lint import REPO, imported_by_name

EXPECTED = ("speed.py", "quality.py", "edit_cost.py")
"""Benchmarks the check must find: a moved folder would make it pass vacuously."""

MUTATORS = frozenset({"insert", "append", "extend", "remove", "pop", "clear", "reverse", "sort",
                      "__setitem__", "__delitem__", "__iadd__"})
"""Methods of a list that change it: called on ``sys.path``, each is a path edit."""


def suite_module_names(tests_dir: Path) -> frozenset[str]:
    """Top-level module names that resolve to the test suite: ``tests``, ``conftest``, each
    ``tests/*.py`` and each package directory in ``tests/``."""
    names = {"tests", "conftest"}
    names.update(p.stem for p in tests_dir.glob("*.py"))
    names.update(p.name for p in tests_dir.iterdir() if p.is_dir() and (p / "__init__.py").is_file())
    return frozenset(names)


class _Checker(ast.NodeVisitor):
    """Collects ``line: what`` for each ``sys.path`` edit and each test-module import."""

    def __init__(self, forbidden: frozenset[str]) -> None:
        self.forbidden = forbidden
        self.sys_names = {"sys"}  # names bound to the sys module (``import sys as s``)
        self.path_names: set[str] = set()  # names bound to sys.path (``from sys import path``)
        self.site_names = {"site"}
        self.found: list[str] = []

    def _flag(self, node: ast.AST, what: str) -> None:
        self.found.append(f"line {getattr(node, 'lineno', '?')}: {what}")

    def _is_sys_path(self, node: ast.AST) -> bool:
        if isinstance(node, ast.Subscript):  # sys.path[:0] = ...
            return self._is_sys_path(node.value)
        if isinstance(node, ast.Name):
            return node.id in self.path_names
        return (isinstance(node, ast.Attribute) and node.attr == "path"
                and isinstance(node.value, ast.Name) and node.value.id in self.sys_names)

    def _check_module(self, node: ast.AST, module: str) -> None:
        if module.split(".")[0] in self.forbidden:
            self._flag(node, f"imports {module!r}, which is the test suite's (tests/)")

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name == "sys":
                self.sys_names.add(alias.asname or "sys")
            if alias.name == "site":
                self.site_names.add(alias.asname or "site")
            self._check_module(node, alias.name)
        self.generic_visit(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level == 0 and node.module:
            if node.module == "sys":
                self.path_names.update(a.asname or a.name for a in node.names if a.name == "path")
            if node.module == "site" and any(a.name == "addsitedir" for a in node.names):
                self._flag(node, "imports site.addsitedir, which adds to sys.path")
            self._check_module(node, node.module)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in MUTATORS and self._is_sys_path(func.value):
            self._flag(node, f"sys.path.{func.attr}(...)")
        if (isinstance(func, ast.Attribute) and func.attr == "addsitedir"
                and isinstance(func.value, ast.Name) and func.value.id in self.site_names):
            self._flag(node, "site.addsitedir(...) adds to sys.path")
        module = imported_by_name(node)
        if module is not None:
            self._check_module(node, module)
        self.generic_visit(node)

    def _check_targets(self, node: ast.AST, targets: list[ast.expr], verb: str) -> None:
        for target in targets:
            elements = target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target]
            if any(self._is_sys_path(t) for t in elements):
                self._flag(node, f"{verb} sys.path")

    def visit_Assign(self, node: ast.Assign) -> None:
        self._check_targets(node, node.targets, "assigns")
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._check_targets(node, [node.target], "augments")
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._check_targets(node, [node.target], "assigns")
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        self._check_targets(node, node.targets, "deletes from")
        self.generic_visit(node)


def violations(source: str, forbidden: frozenset[str]) -> list[str]:
    """``line N: what`` for every ``sys.path`` edit and test-module import in ``source``."""
    checker = _Checker(forbidden)
    checker.visit(ast.parse(source))
    return checker.found


def check(root: Path = REPO) -> list[str]:
    """Each ``sys.path`` edit and test-suite import in ``<root>/benchmarks/*.py``."""
    files = sorted((root / "benchmarks").glob("*.py"))
    missing = sorted(set(EXPECTED) - {p.name for p in files})
    if missing:
        return [f"benchmarks/ is not where lint/benchmarks.py looks: {missing} not found"]
    forbidden = suite_module_names(root / "tests")
    return [
        f"benchmarks/{path.name}: {found}; a benchmark imports the installed package only: install it "
        "(pip install -e .) instead of editing sys.path, and move what it needs from tests/ into benchmarks/ "
        "or use the public API (context_gatekeeper.testing)"
        for path in files
        for found in violations(path.read_text(encoding="utf-8"), forbidden)
    ]

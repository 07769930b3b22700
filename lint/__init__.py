"""Code-base checks that read the source tree (``python -m lint``).

Each module ``lint/<name>.py`` with a ``check() -> list[str]`` function is one check: it
reads the repository (with :mod:`ast` where it reads code, so nothing is imported or
run) and returns one problem per line, each saying where and what to do; an empty list
means clean.  ``python -m lint`` runs every check, prints the problems grouped by check
and exits 1 if there is any.  ``tests/test_lint.py`` plants a violation for each check;
CI runs ``python -m lint`` on the repository.

The package is not part of the wheel (``[tool.setuptools] packages`` in pyproject.toml
lists the shipped packages by name).
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
"""The repository root the checks read by default."""


def imported_by_name(call: ast.Call) -> str | None:
    """The module a call loads by a literal name, ``importlib.import_module("x")`` or
    ``__import__("x")`` (either spelt as an attribute or as a bare name), else None."""
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    if name in {"import_module", "__import__"} and call.args and isinstance(call.args[0], ast.Constant):
        value = call.args[0].value
        return value if isinstance(value, str) else None
    return None


def checks() -> dict[str, Callable[[], list[str]]]:
    """Every check in the package, by module name, in name order."""
    found: dict[str, Callable[[], list[str]]] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        check = getattr(module, "check", None)
        if callable(check):
            found[info.name] = check
    return found


def run(selected: list[str] | None = None) -> dict[str, list[str]]:
    """The problems each check (or each of ``selected``) finds, by check name."""
    available = checks()
    unknown = sorted(set(selected or ()) - set(available))
    if unknown:
        raise SystemExit(f"no such check: {', '.join(unknown)}; the checks are {', '.join(available)}")
    return {name: check() for name, check in available.items() if not selected or name in selected}

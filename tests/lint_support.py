"""The repository's ``lint`` package (``python -m lint``), importable from the tests.

``lint/`` sits at the repository root, which is on ``sys.path`` when pytest runs from
there but not when it runs from ``tests/`` against the installed wheel; the package is
loaded from its folder then, without putting the root (and the source adapters) on
``sys.path``.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]


def lint_module(name: str = "") -> ModuleType:
    """``lint`` (``name`` empty) or ``lint.<name>``, from this repository's ``lint/``."""
    package = sys.modules.get("lint")
    if package is None or Path(getattr(package, "__file__", "")).resolve() != REPO / "lint" / "__init__.py":
        spec = importlib.util.spec_from_file_location(
            "lint", REPO / "lint" / "__init__.py", submodule_search_locations=[str(REPO / "lint")]
        )
        assert spec is not None and spec.loader is not None
        package = importlib.util.module_from_spec(spec)
        sys.modules["lint"] = package
        spec.loader.exec_module(package)
    return importlib.import_module(f"lint.{name}") if name else package

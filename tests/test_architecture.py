"""The rooms keep their public names, and the layout in docs/architecture.md names every module.

The house rules themselves (rooms by concern, one-way arrows, one declared surface) are
code scans: ``lint/architecture.py``, run by ``python -m lint`` (``.ci/run``) and tested on
planted violations in ``tests/test_lint.py``.  What importing the surface pulls in is in
``tests/test_import_purity.py``.
"""

from __future__ import annotations

import warnings

import context_gatekeeper
import context_gatekeeper.integration as integration
from lint_support import lint_module

_architecture = lint_module("architecture")
REPO = _architecture.REPO
ROOMS = _architecture.ROOMS
TOP_LEVEL_MODULES = _architecture.TOP_LEVEL_MODULES
ADAPTERS = _architecture.ADAPTERS


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

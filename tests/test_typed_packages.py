"""Each package ships its ``py.typed`` marker (PEP 561), so type checkers read our hints.

``.ci/run`` runs the suite a second time against the built wheel, where this checks
the packaging (package-data), not only the source tree.
"""

from __future__ import annotations

from importlib import resources

import pytest


@pytest.mark.parametrize("package", ["context_gatekeeper", "langchain_gatekeeper", "llamaindex_gatekeeper"])
def test_package_ships_py_typed(package: str) -> None:
    marker = resources.files(package) / "py.typed"
    assert marker.is_file(), f"{package} has no py.typed: add it to [tool.setuptools.package-data]"

"""The source distribution: the packages, README and LICENSE, and no tests (the suite needs
a clone: its conftest, helper modules, examples and docs), with the licence as an SPDX
expression, built without a deprecation warning.

Builds from a copy of the files the sdist is made from, so the checkout is left as it was."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SOURCES = ["pyproject.toml", "MANIFEST.in", "README.md", "LICENSE", "shared", "langchain_gatekeeper",
           "llamaindex_gatekeeper", "tests"]


@pytest.fixture(scope="module")
def sdist(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], str, str]:
    """(the tarball's paths below its top folder, its PKG-INFO, the build's output)."""
    # the build-system requirement (PEP 639 licence metadata); an older one cannot build it
    pytest.importorskip("setuptools", minversion="77", reason="building the sdist needs setuptools>=77")
    source, out = tmp_path_factory.mktemp("source"), tmp_path_factory.mktemp("sdist")
    for name in SOURCES:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(REPO / name, source / name)
    build = subprocess.run(
        [sys.executable, "-c", f"from setuptools import build_meta; print(build_meta.build_sdist({str(out)!r}))"],
        cwd=source, capture_output=True, text=True, timeout=300,
    )
    assert build.returncode == 0, build.stdout + build.stderr
    (tarball,) = out.glob("*.tar.gz")
    with tarfile.open(tarball) as archive:
        names = [name.split("/", 1)[1] for name in archive.getnames() if "/" in name]
        top = archive.getnames()[0].split("/")[0]
        member = archive.extractfile(f"{top}/PKG-INFO")
        assert member is not None
        pkg_info = member.read().decode("utf-8")
    return names, pkg_info, build.stdout + build.stderr


def test_the_sdist_ships_the_packages_and_no_tests(sdist: tuple[list[str], str, str]) -> None:
    names, _, _ = sdist
    assert not [name for name in names if name.startswith("tests/")], "the sdist ships tests it cannot run"
    assert {"LICENSE", "README.md", "pyproject.toml", "shared/context_gatekeeper/__init__.py",
            "langchain_gatekeeper/__init__.py", "llamaindex_gatekeeper/__init__.py"} <= set(names)


def test_the_licence_is_an_spdx_expression_built_without_a_deprecation_warning(
    sdist: tuple[list[str], str, str],
) -> None:
    _, pkg_info, output = sdist
    assert "License-Expression: MIT" in pkg_info.splitlines()
    assert "License-File: LICENSE" in pkg_info.splitlines()
    assert "deprecated" not in output.lower(), output

"""Committing from another process, for the ``processes`` capability of the conformance suite.

Part of the store conformance suite (:mod:`context_gatekeeper.testing.stores`); needs
neither pytest nor hypothesis.  :func:`commit_in_a_child` starts a child Python process
that imports the test class's module, opens a handle with the class's ``make(where)``,
commits some turns through ``commit`` and ``acommit``, and ends with :func:`os._exit`:
no ``close``, no ``atexit``, no finalizer, as when a worker is killed.  What it committed
must be in the storage all the same.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = ["CHILD_TIMEOUT_S", "ChildRun", "commit_in_a_child"]

CHILD_TIMEOUT_S = 120.0
"""How long the parent waits for the child (imports, connecting, committing)."""

COMMITTED = "conformance-child: committed"
"""What the child prints once every commit returned."""

UNLOADABLE = "conformance-child: the test class could not be loaded"
"""What the child prints when it cannot import the test module or find the class in it."""

CHILD = r"""
import asyncio, importlib, importlib.util, json, os, sys
from pathlib import Path

job = json.loads(sys.argv[1])
# the parent's path first (an installed package wins over a checkout, as there), then the
# folder each test module's dotted name starts from (pytest's --import-mode=importlib
# imports "pkg.test_x" without putting that folder on sys.path)
sys.path[:] = [*job["path"], *(root for b in job["bindings"] for root in b["roots"])]


def load(binding):
    try:
        module = importlib.import_module(binding["module"])
    except ImportError:  # imported by pytest under a name no import finds (--import-mode=importlib)
        spec = importlib.util.spec_from_file_location(binding["module"], binding["file"])
        module = importlib.util.module_from_spec(spec)
        sys.modules[binding["module"]] = module  # as an import would: dataclasses and pickle look it up there
        spec.loader.exec_module(module)
    return getattr(module, binding["name"])


suite = None
for binding in job["bindings"]:  # the test modules first, then the class's own
    try:
        suite = load(binding)
        break
    except BaseException:
        import traceback
        traceback.print_exc()
if suite is None:
    print(job["unloadable"], flush=True)
    os._exit(3)

from context_gatekeeper.testing.store_builders import turn

store = suite().make(Path(job["where"]))
loop = asyncio.new_event_loop()  # never closed either: the process just ends
for n, twin in zip(job["turns"], job["twins"]):
    if twin == "acommit":
        loop.run_until_complete(store.acommit(job["session"], turn(n), expected_head=None))
    else:
        store.commit(job["session"], turn(n), expected_head=None)
print(job["committed"], flush=True)
os._exit(0)
"""


class ChildRun:
    """What the child did: its exit status and output, and :meth:`failure` to report it."""

    def __init__(self, returncode: int | None, stdout: str, stderr: str) -> None:
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr

    @property
    def committed(self) -> bool:
        """Whether every commit returned and the child exited cleanly."""
        return self.returncode == 0 and COMMITTED in self.stdout

    def failure(self, suite: str) -> str:
        """Why the child did not commit, with its output, and what to do."""
        output = f"its output:\n{self.stdout[-2000:]}\n{self.stderr[-4000:]}\n"
        if UNLOADABLE in self.stdout:
            return (
                f"the child process could not load the test class {suite} (it imports the test module and takes "
                f"the class by the name the module binds it to); {output}"
                "define the class at module level in an importable test module, or declare "
                "Capabilities(processes=False)"
            )
        status = "timed out" if self.returncode is None else f"exited with {self.returncode}"
        return (
            f"the child process that opens {suite}.make(where) and commits did not finish its commits ({status}); "
            f"{output}make runs there without fixtures: it may use only what importing the test module sets up, "
            f"and where; declare Capabilities(processes=False) if {suite}'s store cannot be opened from another "
            "process (the storage lives in this one)"
        )


def commit_in_a_child(suite: type, where: Path, session: str, turns: list[int], twins: list[str]) -> ChildRun:
    """Commit ``turn(n)`` for each of ``turns`` to ``session`` from a child process, through
    the matching twin of ``twins`` (``"commit"`` or ``"acommit"``), on a handle that
    ``suite().make(where)`` opens there; the child exits without closing it."""
    job = {
        "path": sys.path,
        "bindings": [_described(module, name) for module, name in _bindings(suite)],
        "unloadable": UNLOADABLE,
        "where": str(where),
        "session": session,
        "turns": turns,
        "twins": twins,
        "committed": COMMITTED,
    }
    try:
        done = subprocess.run(
            [sys.executable, "-c", CHILD, json.dumps(job)],
            capture_output=True, text=True, cwd=os.getcwd(), timeout=CHILD_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired as late:
        return ChildRun(None, _text(late.stdout), _text(late.stderr))
    return ChildRun(done.returncode, done.stdout, done.stderr)


def _bindings(suite: type) -> list[tuple[ModuleType, str]]:
    """Where the child may find ``suite``: each loaded module that binds it at its top level,
    and the name it binds it to -- test modules (``test_*``, ``*_test``, ``conftest``) first,
    then the class's own module (a class a helper function made lives in the helper's
    module, bound in the test module), then the rest -- else its own module and qualified
    name, which the child reports it cannot load.  Only plain modules are read, through
    their ``__dict__``: a lazily loaded one is neither run nor asked anything."""
    found: list[tuple[int, ModuleType, str]] = []
    for module in list(sys.modules.values()):
        if type(module) is not ModuleType:  # a lazy module runs its body when read
            continue
        try:
            names = object.__getattribute__(module, "__dict__")
            bound = next((key for key, value in list(names.items()) if value is suite), None)
        except Exception:  # noqa: BLE001 - a module that cannot be read is not where the class is
            continue
        if bound is not None:
            leaf = module.__name__.rpartition(".")[2]
            rank = 0 if leaf.startswith("test_") or leaf.endswith("_test") or leaf == "conftest" else (
                1 if module.__name__ == suite.__module__ else 2)
            found.append((rank, module, bound))
    found.sort(key=lambda item: item[0])
    if found:
        return [(module, name) for _, module, name in found]
    own = sys.modules.get(suite.__module__)
    return [(own, suite.__qualname__)] if isinstance(own, ModuleType) else []


def _described(module: ModuleType, name: str) -> dict[str, Any]:
    """What the child needs to import ``module`` and take ``name`` from it: the module's name
    and file, and the folder its dotted name starts from (for a package's ``__init__.py``,
    the folder above the package)."""
    module_name = module.__name__
    file = getattr(module, "__file__", None)
    roots = []
    if file and "." in module_name:
        depth = module_name.count(".") + (Path(file).name == "__init__.py")
        roots.append(str(Path(file).resolve().parents[depth]))
    return {"module": module_name, "file": file, "name": name, "roots": roots}


def _text(output: str | bytes | None) -> str:
    """Output captured by a timed-out run (bytes, text or nothing) as text."""
    return output.decode(errors="replace") if isinstance(output, bytes) else (output or "")

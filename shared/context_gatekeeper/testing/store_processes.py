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
# the parent's path, and the folder the test module's dotted name starts from (pytest's
# --import-mode=importlib imports "pkg.test_x" without putting that folder on sys.path)
sys.path[:] = [*job["roots"], *job["path"]]


def suite_class():
    try:
        module = importlib.import_module(job["module"])
    except ImportError:  # imported by pytest under a name no import finds (--import-mode=importlib)
        spec = importlib.util.spec_from_file_location(job["module"], job["file"])
        module = importlib.util.module_from_spec(spec)
        sys.modules[job["module"]] = module  # as an import would: dataclasses and pickle look it up there
        spec.loader.exec_module(module)
    return getattr(module, job["name"])


try:
    suite = suite_class()
except BaseException:
    import traceback
    traceback.print_exc()
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
    module, name = _binding(suite)
    module_name = getattr(module, "__name__", suite.__module__)
    file = getattr(module, "__file__", None)
    job = {
        "path": sys.path,
        "roots": [str(Path(file).resolve().parents[module_name.count(".")])] if file and "." in module_name else [],
        "module": module_name,
        "file": file,
        "name": name,
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


def _binding(suite: type) -> tuple[Any, str]:
    """The module that binds ``suite`` at its top level and the name it binds it to: the
    class's own module, else the first loaded module that does (a class a helper function
    made lives in the helper's module, bound in the test module); else its own module and
    qualified name, which the child reports it cannot load."""
    own = sys.modules.get(suite.__module__)
    for module in [own, *list(sys.modules.values())]:
        try:
            bound = next((key for key, value in vars(module).items() if value is suite), None)
        except TypeError:  # a module-like object without __dict__
            continue
        if bound is not None:
            return module, bound
    return own, suite.__qualname__


def _text(output: str | bytes | None) -> str:
    """Output captured by a timed-out run (bytes, text or nothing) as text."""
    return output.decode(errors="replace") if isinstance(output, bytes) else (output or "")

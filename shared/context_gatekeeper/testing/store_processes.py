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

__all__ = ["CHILD_TIMEOUT_S", "ChildRun", "commit_in_a_child"]

CHILD_TIMEOUT_S = 120.0
"""How long the parent waits for the child (imports, connecting, committing)."""

COMMITTED = "conformance-child: committed"
"""What the child prints once every commit returned."""

CHILD = r"""
import asyncio, importlib, importlib.util, json, os, sys
from pathlib import Path

job = json.loads(sys.argv[1])
sys.path[:] = job["path"]  # the parent's: the test module and what it imports are found as there


def suite_class():
    try:
        module = importlib.import_module(job["module"])
    except ImportError:  # imported by pytest under a name no import finds (--import-mode=importlib)
        spec = importlib.util.spec_from_file_location("conformance_suite_module", job["file"])
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    found = module
    for part in job["qualname"].split("."):
        found = getattr(found, part)
    return found


from context_gatekeeper.testing.store_builders import turn

store = suite_class()().make(Path(job["where"]))
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
        status = "timed out" if self.returncode is None else f"exited with {self.returncode}"
        return (
            f"the child process that opens {suite}.make(where) and commits did not finish its commits ({status}); "
            f"its output:\n{self.stdout[-2000:]}\n{self.stderr[-4000:]}\n"
            f"declare Capabilities(processes=False) if {suite}'s store cannot be opened from another process "
            "(make needs objects of this process, or the storage lives in it)"
        )


def commit_in_a_child(suite: type, where: Path, session: str, turns: list[int], twins: list[str]) -> ChildRun:
    """Commit ``turn(n)`` for each of ``turns`` to ``session`` from a child process, through
    the matching twin of ``twins`` (``"commit"`` or ``"acommit"``), on a handle that
    ``suite().make(where)`` opens there; the child exits without closing it."""
    module = sys.modules[suite.__module__]
    job = {
        "path": sys.path,
        "module": suite.__module__,
        "file": getattr(module, "__file__", None),
        "qualname": suite.__qualname__,
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


def _text(output: str | bytes | None) -> str:
    """Output captured by a timed-out run (bytes, text or nothing) as text."""
    return output.decode(errors="replace") if isinstance(output, bytes) else (output or "")

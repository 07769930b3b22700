"""Committing from other processes, for the ``processes`` capability of the conformance suite.

Part of the store conformance suite (:mod:`context_gatekeeper.testing.stores`); needs
neither pytest nor hypothesis.  :func:`commit_in_a_child` starts a child Python process
that imports the test class's module, opens a handle with the class's ``make(where)``,
commits some turns through ``commit`` and ``acommit``, and ends with :func:`os._exit`:
no ``close``, no ``atexit``, no finalizer, as when a worker is killed.  What it committed
must be in the storage all the same.  :func:`commit_in_children` starts several such
children and releases them together once each has opened its handle, so that their
commits overlap: a store that serialises commits only within a process loses some.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = ["CHILD_TIMEOUT_S", "ChildRun", "commit_in_a_child", "commit_in_children"]

CHILD_TIMEOUT_S = 120.0
"""How long the parent waits for the child (imports, connecting, committing)."""

READY = "conformance-child: ready"
"""What a child released together with others prints once its handle is open; it then
waits for a line on its standard input before it commits."""

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

from context_gatekeeper.testing.store_builders import append, message

store = suite().make(Path(job["where"]))
if job["ready"]:  # released together with other children: open, then wait for the parent's word
    store.head(job["session"])
    print(job["ready"], flush=True)
    sys.stdin.readline()
loop = asyncio.new_event_loop()  # never closed either: the process just ends
for twin, messages in job["commits"]:
    revision = append(*(message(id, role) for id, role in messages))
    if twin == "acommit":
        loop.run_until_complete(store.acommit(job["session"], revision, expected_head=None))
    else:
        store.commit(job["session"], revision, expected_head=None)
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


Commits = list[tuple[str, list[tuple[str, str]]]]
"""What a child commits, in order: each an append through a twin (``"commit"`` or
``"acommit"``) of messages given as ``(id, role)``, built by :func:`.store_builders.message`."""


def commit_in_a_child(suite: type, where: Path, session: str, turns: list[int], twins: list[str]) -> ChildRun:
    """Commit ``turn(n)`` for each of ``turns`` to ``session`` from a child process, through
    the matching twin of ``twins`` (``"commit"`` or ``"acommit"``), on a handle that
    ``suite().make(where)`` opens there; the child exits without closing it."""
    commits = [(twin, [(f"u{n}", "user"), (f"a{n}", "assistant")]) for n, twin in zip(turns, twins)]
    try:
        done = subprocess.run(
            [sys.executable, "-c", CHILD, json.dumps(_job(suite, where, session, commits, ready=""))],
            capture_output=True, text=True, cwd=os.getcwd(), timeout=CHILD_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired as late:
        return ChildRun(None, _text(late.stdout), _text(late.stderr))
    return ChildRun(done.returncode, done.stdout, done.stderr)


def commit_in_children(suite: type, where: Path, session: str, commits: list[Commits]) -> list[ChildRun]:
    """Make ``commits[k]`` to ``session`` from child process ``k`` (see :data:`Commits`), on a
    handle ``suite().make(where)`` opens there, every child released at once when all have
    opened theirs (each says so on its output and waits for a line on its input: no sleep,
    no clock), so that their commits run at the same time; each exits without closing its
    handle.  A child still running after :data:`CHILD_TIMEOUT_S` is killed (its run then
    reports ``returncode`` None)."""
    children: list[subprocess.Popen[str]] = []
    killed: list[subprocess.Popen[str]] = []
    watchdog = threading.Timer(CHILD_TIMEOUT_S, _kill_all, (children, killed))
    watchdog.start()
    try:
        for mine in commits:
            children.append(subprocess.Popen(
                [sys.executable, "-c", CHILD, json.dumps(_job(suite, where, session, mine, ready=READY))],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=os.getcwd(),
            ))
        opened = [_output_until_ready(child) for child in children]  # every handle open (or its child ended)
        for child in children:
            _release(child)
        outputs = [before + _rest(child) for child, before in zip(children, opened)]
    finally:
        watchdog.cancel()
        watchdog.join()
        for child in children:
            _kill(child, [])
            _reaped(child)
    return [ChildRun(None if child in killed else child.returncode, output, "") for child, output in zip(children, outputs)]


def _job(suite: type, where: Path, session: str, commits: Commits, ready: str) -> dict[str, Any]:
    """What the child script reads: where to find ``suite``, what to commit, and what to say."""
    return {
        "path": sys.path,
        "bindings": [_described(module, name) for module, name in _bindings(suite)],
        "unloadable": UNLOADABLE,
        "where": str(where),
        "session": session,
        "commits": commits,
        "ready": ready,
        "committed": COMMITTED,
    }


def _output_until_ready(child: subprocess.Popen[str]) -> str:
    """What ``child`` printed up to and including :data:`READY` (or all of it, when it ended first)."""
    assert child.stdout is not None
    lines = []
    for line in iter(child.stdout.readline, ""):
        lines.append(line)
        if line.rstrip("\n") == READY:
            break
    return "".join(lines)


def _release(child: subprocess.Popen[str]) -> None:
    """Tell a waiting child to commit (a child that has ended has no input to write to)."""
    assert child.stdin is not None
    try:
        child.stdin.write("go\n")
        child.stdin.close()
    except OSError:  # BrokenPipeError: it ended before the word (its output says why)
        pass


def _rest(child: subprocess.Popen[str]) -> str:
    """The rest of ``child``'s output, once it has ended."""
    assert child.stdout is not None
    rest = child.stdout.read()
    child.wait()
    return rest


def _kill_all(children: list[subprocess.Popen[str]], killed: list[subprocess.Popen[str]]) -> None:
    """The watchdog's end for children still running after :data:`CHILD_TIMEOUT_S`."""
    for child in children:
        _kill(child, killed)


def _kill(child: subprocess.Popen[str], killed: list[subprocess.Popen[str]]) -> None:
    """End ``child`` if it still runs, noting it in ``killed`` (its pipes then close, which
    ends the parent's reads)."""
    if child.poll() is None:
        killed.append(child)
        child.kill()


def _reaped(child: subprocess.Popen[str]) -> None:
    """Wait for ``child`` to end and close the parent's ends of its pipes."""
    child.wait()
    for stream in (child.stdin, child.stdout):
        if stream is not None and not stream.closed:
            try:
                stream.close()
            except OSError:  # the input of a child that ended: a broken pipe on flush
                pass


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

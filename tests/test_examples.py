"""The examples' tooling (examples/run_all.py, which CI runs, and the notebook builders' helper
examples/_notebook.py) and the notebooks' promise to run from their own folder in a plain checkout."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import nbformat
import pytest
from jupyter_core.utils import ensure_event_loop
from nbformat.v4 import new_code_cell, new_notebook, new_output

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
sys.path.insert(0, str(EXAMPLES))
import _notebook  # noqa: E402
import run_all  # noqa: E402

NOTEBOOKS = sorted(p.name for p in EXAMPLES.glob("*.ipynb"))
PLOT = "%matplotlib inline\nimport matplotlib.pyplot as plt\nplt.figure(figsize=(2, 1), dpi=50)\nplt.plot([1, 2])\nplt.show()"


def open_files() -> dict[str, str]:
    """This process's open file descriptors and what each is (Linux; empty elsewhere)."""
    found: dict[str, str] = {}
    for fd in os.listdir("/proc/self/fd") if os.path.isdir("/proc/self/fd") else ():
        try:
            found[fd] = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # the descriptor listdir itself used, closed by now
            pass
    return found


@contextmanager
def nbclient_in_process() -> Iterator[None]:
    """Run nbclient here, then close the event loop it leaves open (jupyter_core keeps one per
    thread, with its epoll descriptor and self-pipe sockets), and check nothing else is left open."""
    before = open_files()
    try:
        yield
    finally:
        loop = ensure_event_loop()  # the loop nbclient ran on (a new one if it ran on none)
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
        asyncio.set_event_loop(None)
    left = {fd: what for fd, what in open_files().items() if before.get(fd) != what}
    assert not left, f"nbclient left open: {left}"


def saved_cell(source: str, printed: str) -> nbformat.NotebookNode:
    """A code cell as a builder saves it: ``source`` with ``printed`` as its stdout."""
    return new_code_cell(source, outputs=[new_output("stream", name="stdout", text=printed)])


def test_run_all_fails_a_notebook_whose_saved_text_is_not_what_it_prints_now(tmp_path: Path) -> None:
    nb = new_notebook(cells=[
        new_code_cell(PLOT, outputs=[new_output("display_data", data={"text/plain": "<Figure size 100x50 with 1 Axes>"})]),
        saved_cell('print("5374 tokens with gating")', "5130 tokens with gating\n"),  # the code changed since
        saved_cell('print("message", "7b196df4aaaf")', "message 0123456789ab\n"),  # only the random id differs
    ], metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
    path = tmp_path / "stale.ipynb"
    nbformat.write(nb, path)
    with nbclient_in_process():
        problem = run_all.run_notebook(path, run_all.offline_env())
    assert problem is not None and "the saved outputs of 1 code cell(s) differ" in problem, problem
    assert "-5130 tokens with gating" in problem and "+5374 tokens with gating" in problem
    assert 'In [2]: print("5374' in problem and "In [3]" not in problem  # ids are masked


@pytest.mark.parametrize("online", [False, True])
def test_the_builders_run_the_kernel_offline_unless_asked(online: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOOGLE_API_KEY", "not-a-real-key")
    monkeypatch.setenv("GEMINI_API_KEY", "not-a-real-key")
    with nbclient_in_process():
        nb = _notebook.execute(
            [new_code_cell('import os; print(os.environ.get("GOOGLE_API_KEY"), os.environ.get("GEMINI_API_KEY"))')],
            online=online,
        )
    printed = nb.cells[0].outputs[0].text.strip()
    assert printed == ("not-a-real-key not-a-real-key" if online else "None None")


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_each_notebook_finds_the_packages_from_its_own_folder(notebook: str) -> None:
    # a plain checkout: every dependency importable, the editable install's .pth not read (python -S)
    site = os.pathsep.join(dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib")))
    env = {k: v for k, v in os.environ.items() if k not in run_all.KEY_VARS} | {"PYTHONPATH": site}
    first_cell = next("".join(c["source"]) for c in json.loads((EXAMPLES / notebook).read_text())["cells"]
                      if c["cell_type"] == "code")
    script = f"exec(compile({first_cell!r}, 'first cell', 'exec'), {{}})\nimport context_gatekeeper\nprint(context_gatekeeper.__file__)"
    done = subprocess.run([sys.executable, "-S", "-c", script], cwd=EXAMPLES, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    found = Path(done.stdout.strip().splitlines()[-1])
    assert found.is_relative_to(EXAMPLES.parent / "shared") or any(found.is_relative_to(p) for p in site.split(os.pathsep))

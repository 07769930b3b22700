"""Run every example offline: each notebook in a fresh kernel, each script as a subprocess.

    python examples/run_all.py              # everything (CI runs this)
    python examples/run_all.py quickstart   # only the examples whose file name contains "quickstart"

Offline means no API key: ``GOOGLE_API_KEY`` and ``GEMINI_API_KEY`` are removed from the
environment of every script and kernel, so each example takes its scripted-model path.

* **Notebooks** (``examples/*.ipynb``) are executed with nbclient in memory (the files are not
  rewritten) in a fresh ``python3`` kernel whose working directory is ``examples/``, as
  Jupyter itself would run them; a notebook finds the packages from its own folder and never
  from an absolute path.  Each must run top to bottom without an error, show at least one
  plot (a PNG output), and print what its saved outputs show: each code cell's text (what it
  prints and the text of its results; message ids, random per run, masked) must equal the
  saved text, so a change of the library that changes a number fails here until the notebook
  is rebuilt.  To refresh a saved notebook, run its builder (offline, as here),
  ``python examples/build_*_notebook.py``.
* **Scripts** run with the arguments in ``SCRIPTS`` (plain text, offline); a script in
  ``examples/`` that is neither listed there nor a notebook builder is an error, so a new
  example cannot be left out of CI by accident.

Needs the ``dev`` extra (nbclient, nbformat, ipykernel, matplotlib).  Exits 1 if anything
failed, after running everything, with the failing cell or the script's output.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
KEY_VARS = ("GOOGLE_API_KEY", "GEMINI_API_KEY")
SCRIPTS: dict[str, list[str]] = {
    "quickstart.py": ["--plain"],
    "langchain_quickstart.py": ["--plain", "--offline"],
    "llamaindex_quickstart.py": ["--plain", "--offline"],
}
NOT_EXAMPLES = {"run_all.py"}  # and build_*_notebook.py (they rewrite the saved notebooks) and _*.py helpers
CELL_TIMEOUT = 120  # seconds per notebook cell
SCRIPT_TIMEOUT = 300  # seconds per script
RANDOM_IDS = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b|\b[0-9a-f]{12}\b")
"""Message ids (the core's 12 hex digits, LangChain's UUIDs): new on every run, so masked when compared."""


def offline_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in KEY_VARS}
    env["PYTHONUNBUFFERED"] = "1"
    return env


def tail(text: str, lines: int = 40) -> str:
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)  # IPython colours tracebacks
    return "\n".join("    " + line for line in text.rstrip().splitlines()[-lines:])


def run_script(path: Path, args: list[str], env: dict[str, str]) -> str | None:
    """Run one script; None when it succeeded, else what went wrong."""
    command = [sys.executable, str(path), *args]
    try:
        done = subprocess.run(command, cwd=HERE.parent, env=env, capture_output=True, text=True, timeout=SCRIPT_TIMEOUT)
    except subprocess.TimeoutExpired:
        return f"timed out after {SCRIPT_TIMEOUT} s"
    if done.returncode != 0:
        return f"exit status {done.returncode}; the end of its output:\n" + tail(done.stdout + done.stderr)
    return None


def cell_texts(nb: Any) -> list[str]:
    """Each code cell's text output, message ids masked: what it printed (stdout) and the text of its
    results and displays.  Images and stderr (warnings a dependency's version may add) are left out."""
    texts = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        parts = []
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream" and output.get("name") == "stdout":
                parts.append(output.get("text", ""))
            elif output.get("output_type") in ("execute_result", "display_data"):
                parts.append(output.get("data", {}).get("text/plain", "") + "\n")
        texts.append(RANDOM_IDS.sub("<id>", "".join(parts)))
    return texts


def stale_outputs(saved: list[str], nb: Any, builder: str) -> str | None:
    """None when the executed notebook ``nb`` prints what its ``saved`` outputs showed, else the
    first differences, each under its code cell's number (``In [n]``) and first line."""
    executed = cell_texts(nb)
    sources = [cell.source.strip().splitlines() or [""] for cell in nb.cells if cell.cell_type == "code"]
    differing = [i for i, (a, b) in enumerate(zip(saved, executed)) if a != b]
    if not differing:
        return None
    lines = [f"the saved outputs of {len(differing)} code cell(s) differ from what the code prints now; "
             f"rebuild the notebook: python examples/{builder}"]
    for i in differing[:3]:
        diff = difflib.unified_diff(saved[i].splitlines(), executed[i].splitlines(), "saved", "now", lineterm="", n=0)
        lines += [f"In [{i + 1}]: {sources[i][0]}", *[line for line in diff if not line.startswith("@@")][:12]]
    return "\n".join(lines)


def builder_of(path: Path) -> str:
    """The builder script that writes the notebook at ``path``."""
    for builder in sorted(HERE.glob("build_*_notebook.py")):
        if f'"{path.name}"' in builder.read_text(encoding="utf-8"):
            return builder.name
    return "build_*_notebook.py"


def run_notebook(path: Path, env: dict[str, str]) -> str | None:
    """Execute one notebook in a fresh kernel in its own folder; None when it succeeded."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

    nb = nbformat.read(path, as_version=4)
    saved = cell_texts(nb)
    client = NotebookClient(
        nb, timeout=CELL_TIMEOUT, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    )
    try:
        client.execute(env=env)  # env reaches the kernel process: no API key there either
    except CellExecutionError as exc:  # its message holds the failing cell's source and traceback
        return "a cell raised an error:\n" + tail(str(exc), 60)
    except (CellTimeoutError, DeadKernelError) as exc:
        return f"{type(exc).__name__}: {exc}"
    plots = sum(
        "image/png" in output.get("data", {})
        for cell in nb.cells if cell.cell_type == "code"
        for output in cell.get("outputs", [])
    )
    if not plots:
        return "ran, but showed no plot (every notebook plots prompt tokens per turn)"
    return stale_outputs(saved, nb, builder_of(path))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("only", nargs="*", help="run only the examples whose file name contains one of these")
    args = parser.parse_args(argv)
    for var in KEY_VARS:  # this process too, so nothing it starts can find a key
        os.environ.pop(var, None)
    env = offline_env()

    unlisted = sorted(
        p.name for p in HERE.glob("*.py")
        if p.name not in SCRIPTS and p.name not in NOT_EXAMPLES and not p.name.startswith(("build_", "_"))
    )
    jobs: list[tuple[str, Path, list[str] | None]] = [("script", HERE / n, a) for n, a in SCRIPTS.items()]
    jobs += [("notebook", p, None) for p in sorted(HERE.glob("*.ipynb"))]
    if args.only:
        jobs = [j for j in jobs if any(s in j[1].name for s in args.only)]

    failures: list[str] = []
    if unlisted and not args.only:
        failures.append(f"examples/{', '.join(unlisted)}: not in SCRIPTS of examples/run_all.py; "
                        "add each with its offline arguments")
    started = time.perf_counter()
    for kind, path, script_args in jobs:
        label = f"examples/{path.name}" + (" " + " ".join(script_args) if script_args else "")
        if not path.exists():
            failures.append(f"{label}: no such file")
            continue
        t0 = time.perf_counter()
        problem = run_script(path, script_args or [], env) if kind == "script" else run_notebook(path, env)
        print(f"{'ok    ' if problem is None else 'FAILED'} {time.perf_counter() - t0:5.1f} s  {kind:<8} {label}", flush=True)
        if problem is not None:
            failures.append(f"{label}: {problem}")
    print(f"{len(jobs)} examples in {time.perf_counter() - started:.1f} s, offline (no API key)")
    if failures:
        print(f"\n{len(failures)} FAILED:", file=sys.stderr)
        for failure in failures:
            print(f"\n* {failure}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

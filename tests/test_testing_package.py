"""The shipped store conformance suite (context_gatekeeper.testing.stores) works for a third party.

* ``context_gatekeeper.testing`` (the ScriptedModel mock) imports neither pytest nor hypothesis
  (test_import_purity.py); only the suite needs them, and without them it says how to install them;
* a five-line test module in a directory of its own, with none of this repository's
  conftest or helpers, runs the whole suite against a store;
* a capability declared off skips the tests needing it, naming it; a capability declared on
  that the store lacks fails, never skips.

The third-party modules share one ``pytest`` run (a directory of their own, ``-rA``: one
line per test outcome), each test below reading its module's lines.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from context_gatekeeper.errors import InvalidInputError, InvalidTypeError, MissingExtraError
from context_gatekeeper.testing.store_modes import Capabilities, needs

BLOCKER = textwrap.dedent(
    """
    import sys

    class Blocker:
        '''Pretends pytest and hypothesis are not installed.'''

        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("pytest", "_pytest", "hypothesis"):
                raise ImportError(f"No module named {name!r}")
            return None

    sys.meta_path.insert(0, Blocker())
    """
)


def run_python(code: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd, timeout=120)


def test_without_pytest_the_suite_says_how_to_install_it(tmp_path: Path) -> None:
    result = run_python(
        BLOCKER
        + "import context_gatekeeper.testing\n"  # still fine without them
        + "try:\n"
        + "    import context_gatekeeper.testing.stores\n"
        + "except ImportError as error:\n"
        + "    print('ImportError:', error)\n"
        + "else:\n"
        + "    print('imported')\n",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ImportError:"), result.stdout
    assert MissingExtraError.install_command("testing") in result.stdout
    assert "pytest" in result.stdout


THIRD_PARTY = """
from context_gatekeeper.stores import InMemoryStore, Store
from context_gatekeeper.testing.stores import Capabilities, StoreConformance

class WithoutTruncate(InMemoryStore):
    truncate = Store.truncate  # Store's, which says it is not supported

class TestMyStore(StoreConformance):
    capabilities = Capabilities(reopens=False, truncate=False)
    def make(self, where):
        return WithoutTruncate()
"""

NOT_A_VECTOR_STORE = """
from context_gatekeeper.stores import InMemoryStore
from context_gatekeeper.testing.stores import AsyncTwinsFacade, StoreConformance

class TestClaimsVectors(StoreConformance):
    def make(self, where):
        return AsyncTwinsFacade(InMemoryStore())  # a Store that is not a VectorStore
"""


def run_pytest(directory: Path, *args: str, safe_path: bool = False) -> subprocess.CompletedProcess[str]:
    """``python -m pytest`` in ``directory``, outside this repository's tests/ and its conftest
    (``safe_path``: without the working folder on ``sys.path``, as the ``pytest`` command runs)."""
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:langsmith_plugin", "-rs", "--rootdir", str(directory), *args]
    env = {**os.environ, "PYTHONSAFEPATH": "1"} if safe_path else None
    return subprocess.run(command, capture_output=True, text=True, cwd=directory, timeout=600, env=env)


SYNC_ONLY_AND_LEGACY = """
from context_gatekeeper.stores import InMemoryStore
from context_gatekeeper.testing.stores import Capabilities, StoreConformance

class TestSyncOnly(StoreConformance):
    capabilities = Capabilities(reopens=False)
    modes = ("sync",)
    def make(self, where):
        return InMemoryStore()

class TestLegacyFlag(StoreConformance):
    persistent = False  # the flag capabilities replaced
    def make(self, where):
        return InMemoryStore()
"""

MODULES = {"test_my_store.py": THIRD_PARTY, "test_claims.py": NOT_A_VECTOR_STORE, "test_modes.py": SYNC_ONLY_AND_LEGACY}
SELECTION = ("TestMyStore or (TestClaimsVectors and vectors_round_trip)"
             " or ((TestSyncOnly or TestLegacyFlag) and test_revisions_after)")
"""The whole suite for TestMyStore; one test (both modes) for each of the others."""


@pytest.fixture(scope="module")
def suite_run(tmp_path_factory: pytest.TempPathFactory) -> subprocess.CompletedProcess[str]:
    directory = tmp_path_factory.mktemp("third_party")
    for name, text in MODULES.items():
        (directory / name).write_text(text)
    return run_pytest(directory, "-rA", "-k", SELECTION)


def outcomes(run: subprocess.CompletedProcess[str], outcome: str, module: str) -> list[str]:
    """The summary lines of ``module``'s tests with ``outcome`` (PASSED, FAILED, ERROR)."""
    return [line for line in run.stdout.splitlines() if line.startswith(f"{outcome} {module}::")]


def skipped(run: subprocess.CompletedProcess[str], says: str) -> int:
    """How many tests were skipped with a reason containing ``says``."""
    return sum(int(m.group(1)) for m in re.finditer(r"^SKIPPED \[(\d+)\] (.*)$", run.stdout, re.M) if says in m.group(2))


def test_a_third_party_module_runs_the_whole_suite_on_its_own(suite_run: subprocess.CompletedProcess[str]) -> None:
    out, summary = suite_run.stdout, suite_run.stdout.strip().splitlines()[-1]
    assert not outcomes(suite_run, "FAILED", "test_my_store.py") + outcomes(suite_run, "ERROR", "test_my_store.py"), (
        out[-3000:] + suite_run.stderr[-3000:])
    assert " failed" not in summary, summary  # the other modules' expected outcomes are errors, never failures
    assert len(outcomes(suite_run, "PASSED", "test_my_store.py")) >= 170, summary  # ~90 tests, in both modes
    skip_lines = [line for line in out.splitlines() if line.startswith("SKIPPED")]
    assert skip_lines and not [line for line in skip_lines if "[sync]" in line]  # one line per skip reason, not per test
    # declared off: skipped, naming the capability, in both modes
    assert "needs the 'truncate' capability, which TestMyStore declares off" in out
    # truncate's five tests and three needing reopens (several handles, a child process, two processes at
    # once), twice; tamper_evident is off by default, so its skips say the class does not declare it on
    assert skipped(suite_run, "which TestMyStore declares off") == 16
    assert "needs the 'reopens' capability, which TestMyStore declares off" in out
    assert "needs the 'tamper_evident' capability" in out


def test_a_capability_declared_but_missing_fails_instead_of_skipping(suite_run: subprocess.CompletedProcess[str]) -> None:
    out = suite_run.stdout
    assert len(outcomes(suite_run, "ERROR", "test_claims.py")) == 2, out[-3000:]  # the fixture fails (both modes)
    assert not outcomes(suite_run, "PASSED", "test_claims.py") and skipped(suite_run, "TestClaimsVectors") == 0
    assert "declares the 'vectors' capability" in out


def test_modes_can_be_narrowed_and_the_old_persistent_flag_is_refused(suite_run: subprocess.CompletedProcess[str]) -> None:
    out = suite_run.stdout
    assert outcomes(suite_run, "PASSED", "test_modes.py") == ["PASSED test_modes.py::TestSyncOnly::test_revisions_after[sync]"]
    assert "TestSyncOnly runs the modes ('sync',) only" in out  # the async one, skipped
    assert skipped(suite_run, "TestSyncOnly") == 1
    assert "ERROR test_modes.py::TestLegacyFlag::test_revisions_after[sync]" in out
    assert "write capabilities = Capabilities(reopens=False)" in out


def test_needs_refuses_an_unknown_capability() -> None:
    with pytest.raises(InvalidInputError, match="unknown capabilities"):
        needs("teleports")
    assert set(Capabilities.names()) == {"reopens", "threads", "fault_hooks", "truncate", "vectors", "tamper_evident", "processes"}
    later = {"tamper_evident", "processes"}  # added after suites existed: off by default, so they keep passing
    assert all(getattr(Capabilities(), name) for name in set(Capabilities.names()) - later)  # else strictest


def test_the_async_facade_refuses_to_wait_for_itself_on_its_own_loop() -> None:
    """A sync call made on the suite's loop thread would deadlock: it fails with a message instead."""
    from context_gatekeeper.stores import InMemoryStore
    from context_gatekeeper.testing.store_modes import AsyncTwinsFacade, background_loop

    store = AsyncTwinsFacade(InMemoryStore())

    async def sync_call_on_the_loop() -> int:
        return store.head("s")

    with pytest.raises(AssertionError, match="call the async twin there instead"):
        background_loop().run(sync_call_on_the_loop())
    assert store.head("s") == 0  # from another thread it runs the twin on the loop


def test_a_single_reply_is_a_script_of_one() -> None:
    from context_gatekeeper.editing.models import ModelReply
    from context_gatekeeper.testing import ScriptedModel

    assert ScriptedModel(ModelReply("[", "length"))([]) == ModelReply("[", "length")  # a tuple, yet one reply
    assert ScriptedModel(lambda messages: f"{len(messages)} sent")([{"role": "user", "content": "hi"}]) == "1 sent"
    for error in (TimeoutError, TimeoutError("slow")):
        model = ScriptedModel(error)
        assert model.remaining == 1
        with pytest.raises(TimeoutError):
            model([])
    with pytest.raises(InvalidTypeError, match="a scripted reply must be"):
        ScriptedModel(42)


def test_a_reply_callable_changing_what_it_was_sent_changes_nothing_recorded() -> None:
    from context_gatekeeper.testing import ScriptedModel

    def tidy(messages: list[dict]) -> str:
        messages[0]["content"] = "REDACTED"
        messages.append({"role": "user", "content": "added"})
        return "ok"

    model = ScriptedModel([tidy])
    assert model([{"role": "user", "content": "what was really sent"}]) == "ok"
    assert model.calls[0].messages == [{"role": "user", "content": "what was really sent"}]


PROCESS_SUITES = {
    "suites/__init__.py": "",
    "suites/helpers.py": """
from context_gatekeeper.stores import SQLiteStore
from context_gatekeeper.testing.stores import Capabilities, StoreConformance


def suite_for(busy_timeout):  # one class per configuration, made by a function
    class Suite(StoreConformance):
        capabilities = Capabilities(processes=True)
        def make(self, where):
            return SQLiteStore(where / "chat.db", busy_timeout=busy_timeout)
    return Suite
""",
    "suites/test_made.py": """
from .helpers import suite_for  # a relative import: the package's folder is not on sys.path

TestFast = suite_for(1.0)
""",
    "suites/conf/__init__.py": """
from ..helpers import suite_for

TestFromInit = suite_for(2.0)  # bound in a package's __init__, collected through the module below
""",
    "suites/conf/test_init.py": """
from . import TestFromInit
""",
}


@pytest.mark.parametrize("mode", ["prepend", "importlib"])
def test_the_process_check_finds_a_class_a_function_made_in_a_package_module(tmp_path: Path, mode: str) -> None:
    for name, text in PROCESS_SUITES.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(text)
    # PYTHONSAFEPATH: the folder holding the package is not on sys.path (as with the pytest command),
    # so under importlib mode only the child's own search can find it
    run = run_pytest(tmp_path, f"--import-mode={mode}", "-k", "survives_its_exit", "suites", safe_path=True)
    assert run.returncode == 0 and " passed" in run.stdout, run.stdout[-3000:] + run.stderr[-2000:]

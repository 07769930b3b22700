"""The suite's leak check (``conftest._nothing_left_running``): a test that leaves a
non-daemon thread or a running event loop behind fails, naming it, and the run still
ends.  Each case runs in its own pytest process on a copy of this suite's conftest."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

LEAKY_TESTS = '''
import asyncio
import threading

release = threading.Event()


def test_leaves_a_non_daemon_thread():
    threading.Thread(target=release.wait, name="forgotten-worker").start()


def test_leaves_a_loop_running_in_a_daemon_thread():
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, name="forgotten-loop", daemon=True).start()


def test_ends_the_first_tests_thread():
    release.set()


def test_joins_what_it_starts():
    done = threading.Event()
    worker = threading.Thread(target=done.set)
    worker.start()
    worker.join()
    assert done.is_set()
'''


def test_a_leaked_thread_or_running_loop_fails_its_test_and_the_run_still_ends(tmp_path: Path) -> None:
    conftest = (Path(__file__).parent / "conftest.py").read_text()
    # the leaked threads wait on events nobody sets during the check: a short join suffices
    (tmp_path / "conftest.py").write_text(conftest + "\nJOIN_SECONDS = 0.2\n")
    (tmp_path / "test_leaky.py").write_text(LEAKY_TESTS)
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:langsmith_plugin", "--rootdir", str(tmp_path), str(tmp_path)],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )
    out = run.stdout + run.stderr
    assert run.returncode == 1, out
    assert "4 passed, 2 errors" in out, out
    assert "ERROR test_leaky.py::test_leaves_a_non_daemon_thread" in out, out
    assert "'forgotten-worker' is a non-daemon thread" in out, out
    assert "ERROR test_leaky.py::test_leaves_a_loop_running_in_a_daemon_thread" in out, out
    assert "'forgotten-loop' runs an event loop" in out, out

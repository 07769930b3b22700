"""Test-wide settings: compiled bytecode kept, hypothesis without per-example deadlines, and a
leak check.

Where ``PYTHONDONTWRITEBYTECODE`` is set (as on CI machines and in many containers), every
interpreter the suite starts (two workers and about a hundred subprocess tests) would compile
the library and the tests from source again. The suite then keeps bytecode in a cache folder
outside the source tree instead (``PYTHONPYCACHEPREFIX``, ``~/.cache/context-gatekeeper/pycache``,
an absolute path), so nothing is written beside the sources, as that setting intends, and each
module is compiled once. The folder mirrors each checkout's absolute path (about 60 MB for one
clone with its virtual environments) and is never pruned: delete it to reclaim the space.

Timing is for benchmarks, not tests: on a loaded 2-core CI machine an example that
usually takes 50 ms can take 500, and that says nothing about correctness.

Every test must leave no thread, event loop or connection pool running: a non-daemon
thread left behind keeps ``python -m pytest`` from ever exiting after its summary, and a
loop, pool or daemon thread left running keeps working (and its sockets and files open)
under later tests. :func:`_nothing_left_running` fails the test that leaves one, naming it.
Exempt by design: the conformance suite's two process-wide loops and their executors'
threads, and the library's embedding lanes (one daemon thread per embedder and lane,
shared by every caller, that ends by itself after ``IDLE_SECONDS`` without work).

Open file descriptors are not counted per test: the process-wide loops, pytest's own
capture, SQLite handles that close when garbage-collected and lazily opened caches make
the first test on each worker to touch them look leaky, and which test that is depends on
how pytest-xdist shares out the tests, so such a check would fail at random.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

if sys.dont_write_bytecode and not sys.pycache_prefix:  # before anything else is imported
    import tempfile

    _xdg = os.environ.get("XDG_CACHE_HOME", "")
    try:  # a relative XDG_CACHE_HOME is ignored, as the XDG spec says (it would land in the tree)
        _cache_home = Path(_xdg) if os.path.isabs(_xdg) else Path.home() / ".cache"
    except RuntimeError:  # no home folder
        _cache_home = Path(tempfile.gettempdir())
    _cache = _cache_home.resolve() / "context-gatekeeper" / "pycache"
    sys.pycache_prefix, sys.dont_write_bytecode = str(_cache), False
    os.environ["PYTHONPYCACHEPREFIX"] = str(_cache)  # the workers and every subprocess test
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

import asyncio
import re
import threading
import time
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("project", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("project")

JOIN_SECONDS = 5.0
"""How long a test's leftover threads get to end by themselves (all of them together)."""

_RUN_FOREVER = asyncio.BaseEventLoop.run_forever.__code__
_POOL_THREAD = re.compile(r"-(scheduler|worker-\d+)$")  # psycopg_pool's threads while a sync pool is open


def _loops_running() -> dict[int, asyncio.AbstractEventLoop]:
    """The event loops running now, by the id of the thread that runs each."""
    running: dict[int, asyncio.AbstractEventLoop] = {}
    for ident, frame in sys._current_frames().items():
        current = frame
        while current is not None:
            if current.f_code is _RUN_FOREVER:
                running[ident] = current.f_locals["self"]
                break
            current = current.f_back
    return running


_LANE_THREAD = re.compile(r"^gatekeeper-embed-(documents|query)\[")  # selection.semantic.runner.Lane


def _kept_on_purpose() -> set[threading.Thread]:
    """Threads that outlive tests by design: the conformance suite's two process-wide
    loops (daemon threads, started on first use and reused by every test): the async
    mode's background loop and the loop its async test bodies run on (``run_async``),
    with the worker threads of their default executors (``asyncio.to_thread`` there)."""
    store_modes = sys.modules.get("context_gatekeeper.testing.store_modes")
    loops = [getattr(store_modes, "_loop", None), getattr(store_modes, "_tests_loop", None)]
    kept: set[threading.Thread] = set()
    for runner in filter(None, loops):
        executor = getattr(runner.loop, "_default_executor", None)
        kept |= {runner.thread, *getattr(executor, "_threads", ())}
    return kept


def _left_running(before: set[threading.Thread]) -> dict[threading.Thread, str]:
    """Threads started since ``before`` that still run and must not: what each is."""
    kept = _kept_on_purpose()
    loops = _loops_running()
    found: dict[threading.Thread, str] = {}
    for thread in threading.enumerate():
        if thread in before or thread in kept or not thread.is_alive():
            continue
        if thread.ident in loops:
            found[thread] = "runs an event loop"
        elif _POOL_THREAD.search(thread.name) and thread.daemon:
            found[thread] = "belongs to an open psycopg connection pool"
        elif not thread.daemon:
            found[thread] = "is a non-daemon thread (the process cannot exit while it runs)"
        elif not _LANE_THREAD.match(thread.name):  # a lane ends by itself once idle
            found[thread] = "is a daemon thread the test started (it runs on, with what it holds, under later tests)"
    return found


@pytest.fixture(autouse=True)
def _nothing_left_running() -> Iterator[None]:
    """Fail a test that leaves a thread it started (daemon or not), a running event loop or
    an open (sync) connection pool behind.  Its threads get :data:`JOIN_SECONDS` to end first;
    a loop still running then is stopped, so one leak cannot hang the whole run."""
    before = set(threading.enumerate())
    yield
    deadline = time.monotonic() + JOIN_SECONDS
    left = _left_running(before)
    for thread in left:
        thread.join(max(0.0, deadline - time.monotonic()))
    left = _left_running(before)
    if not left:
        return
    loops = _loops_running()
    for thread in left:
        loop = loops.get(thread.ident or -1)
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(loop.stop)
    described = "; ".join(f"{thread.name!r} {why}" for thread, why in left.items())
    pytest.fail(f"the test left running: {described}; stop and join it (in a finally) before the test ends",
                pytrace=False)

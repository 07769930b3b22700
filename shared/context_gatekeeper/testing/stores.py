"""The store conformance suite: the contract every store keeps, as pytest tests you can run.

Every store of this package (in memory, SQLite, PostgreSQL) runs it, and a store of your own
(Redis, DynamoDB, ...) runs the same suite with a few lines in a ``test_*.py`` module::

    from context_gatekeeper.testing.stores import Capabilities, StoreConformance

    class TestRedisStore(StoreConformance):
        capabilities = Capabilities(vectors=False)     # what it lacks; everything else is on

        def make(self, where):                         # where: a fresh directory per test
            return RedisStore(url, prefix=where.name)  # a handle on this test's storage

It needs pytest and hypothesis: ``pip install "context-gatekeeper[testing]"`` (importing
this module without them raises an ImportError saying so).  The rest of
:mod:`context_gatekeeper.testing` (the ScriptedModel mock) needs neither.

**make(where).**  Each call must open a *handle on the same storage* (the first call's
storage starts empty): for a database, a new connection to the same file or schema.  The
suite closes every handle it opened at the end of the test.

**Capabilities.**  ``capabilities`` (a frozen :class:`Capabilities`) says what the store
can do; the default is the strictest, everything on, so nothing is skipped silently.  A
test needing a capability declared off is skipped with a reason naming it:

* ``reopens``: ``make`` opens further handles on the same storage.  Off (an in-memory
  store), "reopening" hands back the first handle and the tests still run on it;
* ``threads``: one store object is safe to call from several threads at once;
* ``fault_hooks``: ``commit`` calls ``store.fault_hook(point)`` at each of
  :data:`~context_gatekeeper.stores.FAULT_POINTS` inside its write transaction;
* ``truncate``: the store implements ``truncate`` (the recovery for a corrupt log);
* ``vectors``: the store is a :class:`~context_gatekeeper.stores.VectorStore`.

**Modes.**  Every test runs twice, ``[sync]`` and ``[async]``.  In the async mode the
store is wrapped in :class:`~.store_modes.AsyncTwinsFacade`, whose sync methods run the
store's async twins (``asetup``, ``ahead``, ``atip``, ``arevisions``, ``acommit``,
``atruncate``, ``apurge``, ``asessions`` and the vector twins) on one long-lived event
loop in a background thread, so a store with native async twins (an async connection
pool bound to its loop) is checked through them; ``aclose``, when the store has one, is
awaited on that loop before ``close``.  ``modes = ("sync",)`` on the subclass keeps one
(the other is then skipped, saying so).  Inside a test, :func:`~.store_modes.unwrapped`
gives the store itself.

**What it checks** (see :mod:`context_gatekeeper.stores.base` and docs/architecture.md):
numbering and the concurrency rules (:mod:`.store_contract`), values that must come back
exactly, purge, faults, threads and the async twins; what a store refuses inside its
committing transaction (:mod:`.store_integrity`: revisions that do not apply, other text
under a taken id, content that is not what it holds); the vector capability
(:mod:`.store_vectors`).  Override :meth:`ContentContract.stored_state
<.store_integrity.ContentContract.stored_state>` to compare every stored byte of a session
when a refused commit must leave it unchanged.  Builders for your own tests (``message``,
``append``, ``turn``, ``edit``, ``fill``, ``snapshot``, ...) are in :mod:`.store_builders`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import ClassVar

from ..errors import InvalidTypeError
from ..stores.base import Store
from ._requires import pytest
from .store_builders import append, delete, edit, fill, message, put_ids, run_together, snapshot, turn
from .store_contract import StoreContract
from .store_integrity import ContentContract, IntegrityContract
from .store_modes import MODES, AsyncTwinsFacade, Capabilities, facade_for, lacking, needs, unwrapped
from .store_vectors import VectorContract

__all__ = [
    "StoreConformance", "StoreHandles", "Capabilities", "AsyncTwinsFacade", "MODES", "needs", "unwrapped",
    "StoreContract", "VectorContract", "IntegrityContract", "ContentContract",
    "message", "append", "turn", "edit", "delete", "fill", "snapshot", "run_together", "put_ids",
]


class StoreHandles:
    """The ``mode``, ``open_store`` and ``store`` fixtures over :meth:`make`: a base for a
    store's own test classes (:class:`StoreConformance` adds the suite's tests)."""

    capabilities: ClassVar[Capabilities] = Capabilities()
    """What the store can do (default: everything, the strictest)."""

    modes: ClassVar[tuple[str, ...]] = MODES
    """The modes to run: ``"sync"`` (the store's sync methods), ``"async"`` (its async twins)."""

    def make(self, where: Path) -> Store:
        """Open a handle on the storage that lives at ``where`` (a fresh directory per test)."""
        raise NotImplementedError(f"{type(self).__name__} must define make(self, where) returning a store handle")

    # -- fixtures -----------------------------------------------------------------------
    @pytest.fixture(autouse=True)
    def _declared_capabilities(self, request: pytest.FixtureRequest) -> None:
        """Checks the declaration, and skips a test needing a capability declared off."""
        if "persistent" in dir(type(self)):
            raise InvalidTypeError(
                f"{type(self).__name__} sets 'persistent', which the suite replaced by capabilities: "
                "write capabilities = Capabilities(reopens=False) for a store that cannot be reopened"
            )
        if not isinstance(self.capabilities, Capabilities):
            raise InvalidTypeError(
                f"{type(self).__name__}.capabilities must be a Capabilities(...), got {type(self.capabilities).__name__}"
            )
        for name in getattr(request.function, "needs", ()):
            if not getattr(self.capabilities, name):
                pytest.skip(lacking(type(self).__name__, name))

    @pytest.fixture(params=MODES)
    def mode(self, request: pytest.FixtureRequest) -> str:
        """``"sync"`` or ``"async"``: how the test drives the store."""
        mode: str = request.param
        if mode not in self.modes:
            pytest.skip(f"{type(self).__name__} runs the modes {self.modes} only (modes = ...)")
        return mode

    @pytest.fixture
    def open_store(self, tmp_path: Path, mode: str) -> Iterator[Callable[[], Store]]:
        """Opens handles on one storage (wrapped for the async mode); closes them all at the end."""
        handles: list[Store] = []

        def open_() -> Store:
            if handles and not self.capabilities.reopens:
                return handles[0]
            handle = self.make(tmp_path)
            handles.append(facade_for(handle) if mode == "async" else handle)
            return handles[-1]

        yield open_
        for handle in handles:
            handle.close()

    @pytest.fixture
    def store(self, open_store: Callable[[], Store]) -> Store:
        """A fresh, empty store."""
        return open_store()


class StoreConformance(StoreHandles, StoreContract, VectorContract, IntegrityContract, ContentContract):
    """Every store's contract as tests; subclass, define :meth:`make`, declare :attr:`capabilities`."""


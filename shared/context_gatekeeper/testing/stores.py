"""The store conformance suite: the contract every store keeps, as pytest tests you can run.

Every store of this package (in memory, SQLite, PostgreSQL) runs it, and a store of your own
(Redis, DynamoDB, ...) runs the same suite with a few lines in a ``test_*.py`` module::

    from context_gatekeeper.testing.stores import Capabilities, StoreConformance, storage_key

    class TestRedisStore(StoreConformance):
        # vectors: it has none; processes (off unless declared, as is tamper_evident): workers share it
        capabilities = Capabilities(vectors=False, processes=True)

        def make(self, where):                         # where: a fresh directory per test
            return RedisStore(url, prefix=storage_key(where))  # a handle on this test's storage

        def destroy(self, where):                      # optional: drop the test's storage
            RedisStore(url, prefix=storage_key(where)).drop_everything()

It needs pytest and hypothesis, the ``testing`` extra: the package is not on PyPI yet, so
install it from a clone of the repository with ``pip install -e ".[testing]"`` (importing this
module without them raises an ImportError saying so).  The rest of
:mod:`context_gatekeeper.testing` (the ScriptedModel mock) needs neither.  Importing this
module registers the suite's modules with ``pytest.register_assert_rewrite``, so a failed
check shows what it compared even from an installed package; import it before anything
imports those modules (``store_contract`` and its siblings) directly.

**make(where).**  Each call must open a *handle on the same storage* (the first call's
storage starts empty): for a database, a new connection to the same file or schema.  The
suite closes every handle it opened at the end of the test (again for one the test closed
itself: ``close`` must be idempotent).  Storage kept outside
``where`` (a database, a key prefix) needs a name no other test and no other run uses:
:func:`storage_key` gives one per ``where`` (a random name kept in a file inside it, so
every call for one test agrees), whereas ``where.name`` repeats from one pytest run to the
next.  **destroy(where)**, when defined, is called once at the end of each test, after
the handles are closed, to drop that storage (the default does nothing).

**Capabilities.**  ``capabilities`` (a frozen :class:`Capabilities`) says what the store
can do; the default turns on every capability the suite had from the start, and the two
added later (``processes``, ``tamper_evident``) off, so a suite written before them keeps
passing: their tests are skipped until the class declares them on.  A test needing a
capability that is off is skipped with a reason naming it (and saying whether the class
declared it off or left it at its default):

* ``reopens``: ``make`` opens further handles on the same storage.  Off (an in-memory
  store), "reopening" hands back the first handle and the tests still run on it (those
  needing several handles, or another process, are skipped);
* ``threads``: one store object is safe to call from several threads at once;
* ``fault_hooks``: ``commit`` calls ``store.fault_hook(point)`` at each of
  :data:`~context_gatekeeper.stores.FAULT_POINTS` inside its write transaction;
* ``truncate``: the store implements ``truncate`` (the recovery for a corrupt log);
* ``vectors``: the store is a :class:`~context_gatekeeper.stores.VectorStore`;
* ``processes`` (off by default, added later): ``make(where)`` called in another process
  opens the same storage, what that process committed survives it exiting without
  ``close`` (:func:`os._exit`, as a killed worker), and two processes committing at once
  lose nothing (a lock held only within a process does not do).  The suite runs ``make`` in a child
  Python process that imports the test class's module and takes the class by the name the
  module binds it to, without running fixtures (so ``make`` may use only what that import
  sets up, and ``where``); storage named from ``where`` by :func:`storage_key` qualifies;
* ``tamper_evident`` (off by default, added later): reading a log changed behind the store's
  back raises ``CorruptLogError`` naming the first bad revision; the class then defines
  ``tamper(store, session, revision, how)`` (:mod:`.store_tampering`).

A capability declared off that the store has is an error in every test, not a skip: the
library uses it all the same (``vectors=False`` for a VectorStore; ``truncate=False`` for a
store whose class overrides ``Store.truncate``).

**Optional keywords.**  ``commit`` keywords added after the first release (today
``renew_taken_ids``) are optional: a store without one keeps working, and
``test_commit_takes_every_optional_keyword`` is skipped with a reason naming what it lacks.

**Modes.**  Every test runs twice, ``[sync]`` and ``[async]``.  In the async mode the
store is wrapped in :class:`~.store_modes.AsyncTwinsFacade`, whose sync methods run the
store's async twins (``asetup``, ``ahead``, ``atip``, ``arevisions``, ``acommit``,
``atruncate``, ``apurge``, ``asessions`` and the vector twins) on one long-lived event
loop in a background thread, so a store with native async twins (an async connection
pool bound to its loop) is checked through them; ``aclose``, when the store has one, is
awaited on that loop before ``close``.  ``modes = ("sync",)`` on the subclass keeps one
(the other is then skipped, saying so); ``modes`` must be a non-empty tuple of
those names, anything else fails every test.  Inside a test, :func:`~.store_modes.unwrapped`
gives the store itself.  The two tests that check the store itself whatever the mode (its
async twins each let the event loop run; a child process's commits) run once, in the first
of ``modes``.

**What it checks** (see :mod:`context_gatekeeper.stores.base` and docs/architecture.md):
numbering and the concurrency rules (:mod:`.store_contract`: an edit checked against every
revision since its ``expected_head``, and edits racing at one ``expected_head`` of which
exactly one commits), revisions that come back exactly as sent but for the fields the store
sets (number, parent, base, time; session ids a backend could confuse included), purge,
faults, threads, several handles committing at once and reading what the others wrote,
purged or truncated (also when it was written again up to the same head), processes
exiting without ``close`` or committing at once, a commit after ``close`` (it raises
``StoreClosedError`` or is kept, never returned and lost), and the async twins (each must
let the event loop run while it waits); what a store refuses
inside its committing transaction (:mod:`.store_integrity`: revisions that do not apply, other text
under a taken id, content that is not what it holds); the vector capability
(:mod:`.store_vectors`).  Override :meth:`ContentContract.stored_state
<.store_integrity.ContentContract.stored_state>` to compare every stored byte of a session
when a refused commit must leave it unchanged, and a purged session must look like one that
never existed (revisions ``truncate`` set aside included).  Builders for your own tests (``message``,
``append``, ``turn``, ``edit``, ``fill``, ``snapshot``, ...) are in :mod:`.store_builders`.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import ClassVar

from ..errors import InvalidInputError, InvalidTypeError
from ..stores.base import Store
from ..stores.vectors import supports_vectors
from ._requires import pytest

CHECKING_MODULES = ("store_contract", "store_integrity", "store_tampering", "store_vectors")
"""The suite's modules whose ``assert`` statements check a store.  They are registered with
pytest before they are imported, so that pytest rewrites their asserts as it rewrites a test
module's (a failed check shows the values it compared): pytest rewrites no module of an
installed package unasked, and a bare ``AssertionError`` says nothing."""

pytest.register_assert_rewrite(*(f"{__package__}.{name}" for name in CHECKING_MODULES))

from .store_builders import append, delete, edit, fill, message, put_ids, raised, run_together, snapshot, turn  # noqa: E402
from .store_contract import StoreContract  # noqa: E402 - this and the following after the registration above
from .store_integrity import ContentContract, IntegrityContract  # noqa: E402
from .store_tampering import TamperContract  # noqa: E402
from .store_modes import MODES, AsyncTwinsFacade, Capabilities, facade_for, lacking, needs, unwrapped  # noqa: E402
from .store_vectors import VectorContract  # noqa: E402

__all__ = [
    "StoreConformance", "StoreHandles", "Capabilities", "storage_key", "AsyncTwinsFacade", "MODES", "needs", "unwrapped",
    "StoreContract", "VectorContract", "IntegrityContract", "ContentContract", "TamperContract",
    "message", "append", "turn", "edit", "delete", "fill", "snapshot", "run_together", "raised", "put_ids",
]


STORAGE_KEY_FILE = ".conformance-storage-key"
"""The file in a test's ``where`` directory that keeps its :func:`storage_key`."""


def storage_key(where: Path, prefix: str = "cg-test") -> str:
    """A name for the storage of the test whose directory is ``where``: ``prefix`` and a
    random hex string, the same for every call with this ``where`` (kept in a file inside
    it) and never the same for another test or another run, unlike ``where.name``."""
    key_file = Path(where) / STORAGE_KEY_FILE
    if not key_file.exists():
        key_file.write_text(f"{prefix}-{uuid.uuid4().hex}", encoding="utf-8")
    return key_file.read_text(encoding="utf-8")


def checked_modes(suite: str, modes: object) -> tuple[str, ...]:
    """``modes`` when it is a non-empty tuple of names from :data:`MODES`; else an error
    naming ``suite`` (a typo or ``()`` would otherwise skip every test)."""
    if not isinstance(modes, tuple) or not all(isinstance(mode, str) for mode in modes):
        hint = f": write modes = ({modes!r},) for one mode" if isinstance(modes, str) else ""
        raise InvalidTypeError(f"{suite}.modes must be a tuple of mode names such as ('sync',), got {modes!r}{hint}")
    unknown = [mode for mode in modes if mode not in MODES]
    if not modes or unknown:
        raise InvalidInputError(
            f"{suite}.modes = {modes!r} " + (f"names unknown modes {unknown}" if unknown else "runs nothing")
            + f"; choose one or more of {MODES}"
        )
    return modes


def checked_off(suite: str, capabilities: Capabilities, store: Store) -> None:
    """Refuse a capability declared off that ``store`` has: the library uses what a store
    has (it saves and purges a VectorStore's vectors; ``CorruptLogError`` tells users to
    call ``truncate``), so skipping its tests would leave it unchecked."""
    kind = type(store).__name__
    if not capabilities.vectors and supports_vectors(store):
        raise InvalidInputError(
            f"{suite} declares Capabilities(vectors=False), but {kind} is a VectorStore, whose vectors the library "
            "saves, loads and purges: drop vectors=False so the vector tests run"
        )
    if not capabilities.truncate and getattr(type(store), "truncate", Store.truncate) is not Store.truncate:
        raise InvalidInputError(
            f"{suite} declares Capabilities(truncate=False), but {kind} overrides Store.truncate, which users call "
            "to recover a corrupt log: drop truncate=False so the truncate tests run (or leave truncate to Store)"
        )


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

    def destroy(self, where: Path) -> None:
        """Drop the storage of the test whose directory is ``where``; called once at the end
        of each test, after its handles are closed.  The default does nothing (the
        directory itself is pytest's ``tmp_path``); define it for storage kept elsewhere."""

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
        checked_modes(type(self).__name__, self.modes)
        for name in getattr(request.function, "needs", ()):
            if not getattr(self.capabilities, name):
                pytest.skip(lacking(type(self).__name__, name))

    @pytest.fixture(params=MODES)
    def mode(self, request: pytest.FixtureRequest) -> str:
        """``"sync"`` or ``"async"``: how the test drives the store."""
        mode: str = request.param
        if mode not in checked_modes(type(self).__name__, self.modes):
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
            if len(handles) == 1:  # appended first, so that it is closed even when refused
                checked_off(type(self).__name__, self.capabilities, handle)
            return handles[-1]

        try:
            yield open_
        finally:
            try:
                for handle in handles:
                    handle.close()
            finally:
                self.destroy(tmp_path)

    @pytest.fixture
    def store(self, open_store: Callable[[], Store]) -> Store:
        """A fresh, empty store."""
        return open_store()


class StoreConformance(StoreHandles, StoreContract, VectorContract, IntegrityContract, ContentContract, TamperContract):
    """Every store's contract as tests; subclass, define :meth:`make`, declare :attr:`capabilities`."""


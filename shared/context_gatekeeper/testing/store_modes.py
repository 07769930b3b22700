"""What a store under test can do (:class:`Capabilities`) and the async mode's sync facade.

Part of the store conformance suite (:mod:`context_gatekeeper.testing.stores`); needs
neither pytest nor hypothesis.

The suite runs every test twice: once calling the store's sync methods, once through
:class:`AsyncTwinsFacade`, a sync :class:`~context_gatekeeper.stores.base.Store` whose every
method runs the wrapped store's async twin (``setup`` runs ``asetup``, ``commit`` runs
``acommit``, ...) on ONE long-lived event loop in a background thread
(:func:`background_loop`), with :func:`asyncio.run_coroutine_threadsafe`.  A store whose
async twins hold loop-bound resources (an async connection pool) therefore always sees
the same loop, and the facade's own async twins are forwarded to that loop as well.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Coroutine, Iterable
from concurrent.futures import Future
from dataclasses import dataclass, fields
from typing import Any, TypeVar

from ..errors import InvalidInputError
from ..stores.base import FaultHook, Store
from ..stores.vectors import VectorRow, VectorStore, supports_vectors
from ..records.revisions import Revision

__all__ = [
    "Capabilities", "AsyncTwinsFacade", "AsyncTwinsFacadeBeforeRenew", "background_loop", "facade_for", "lacking", "needs", "run_async", "unwrapped", "together", "MODES",
]

T = TypeVar("T")

MODES = ("sync", "async")
"""The ways the suite drives a store: its sync methods, or its async twins through :class:`AsyncTwinsFacade`."""


@dataclass(frozen=True)
class Capabilities:
    """What the store under test can do; the default (everything on) is the strictest.

    A test that needs a capability the store lacks is skipped with a reason naming it, so
    turn one off only for a store that really lacks it.

    Attributes:
        reopens: ``make(where)`` called again opens a second handle on the *same* storage
            (a new connection to the same file or schema).  Off (an in-memory store):
            "reopening" hands back the first handle, and the tests still run on it.
        threads: one store object is safe to call from several threads at once.
        fault_hooks: ``commit`` calls ``store.fault_hook(point)`` at every point of
            :data:`~context_gatekeeper.stores.FAULT_POINTS`, in order, inside its write
            transaction (a raise there must write nothing).
        truncate: the store implements :meth:`~context_gatekeeper.stores.Store.truncate`.
            Off while the store's class overrides it fails every test: ``CorruptLogError``
            tells users to call it, so a ``truncate`` the store has must be checked.
        vectors: the store is a :class:`~context_gatekeeper.stores.VectorStore` (saves and
            loads embedding vectors).  On while the store is not one fails the vector tests,
            so a missing capability is never skipped silently; off while it is one fails
            every test (the library saves and purges the vectors of a VectorStore).
        tamper_evident: reading a log changed behind the store's back (a row altered,
            deleted, given a bogus kind) raises ``CorruptLogError`` naming the first bad
            revision (:mod:`.store_tampering`; the test class then defines ``tamper``).
            Added after the others, so it is off by default: a suite written before it
            keeps passing.
        processes: a handle opened by ``make(where)`` in another process reaches the same
            storage, and what that process committed is there once it exits, even without
            closing its handle (``os._exit``): a store that buffers writes until ``close``
            loses them when a worker dies.  Two such processes committing at once lose
            nothing: a store whose lock holds only within a process does.  The suite
            runs ``make`` in child Python processes that import the test class's module
            and find the class by the name the module binds it to, without running any
            fixture: ``make`` may use only what importing the module sets up, and
            ``where``.  Added after the others, so it is off by default: declare it on
            for a store that several processes share.
    """

    reopens: bool = True
    threads: bool = True
    fault_hooks: bool = True
    truncate: bool = True
    vectors: bool = True
    tamper_evident: bool = False
    processes: bool = False

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The capability names, in declaration order."""
        return tuple(f.name for f in fields(cls))


class BackgroundLoop:
    """An event loop running forever in a daemon thread; :meth:`run` waits for a coroutine on it."""

    def __init__(self, name: str = "store-conformance-loop") -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self.thread.start()

    def submit(self, coroutine: Coroutine[Any, Any, T]) -> Future[T]:
        """Schedule ``coroutine`` on the loop; its future."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop)

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run ``coroutine`` on the loop and wait for its result (from any other thread)."""
        if threading.current_thread() is self.thread:
            coroutine.close()
            raise AssertionError(  # a test's own mistake, reported like a failed check
                "a sync store method was called on the conformance suite's loop thread (from a fault hook or an "
                "async twin?); it would wait for itself forever: call the async twin there instead"
            )
        return self.submit(coroutine).result()


_loop: BackgroundLoop | None = None
_loop_lock = threading.Lock()


def background_loop() -> BackgroundLoop:
    """The process's one background loop for the async mode, started on first use."""
    global _loop
    with _loop_lock:
        if _loop is None:
            _loop = BackgroundLoop()
        return _loop


_tests_loop: BackgroundLoop | None = None


def run_async(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run an async test body and wait for its result, on a second process-wide loop (started
    on first use), where ``asyncio.run`` would make a loop and end it.  A loop that ends
    cancels the tasks still on it, and a store's per-loop resources are such tasks (an
    async connection pool's workers): psycopg_pool can lose that cancellation and the run
    then never ends.  On a loop that keeps running, the store's ``close()`` closes them
    properly.  A second loop, not :func:`background_loop`: a test body calls sync methods
    too, and the async mode's facade runs those on the background loop."""
    global _tests_loop
    with _loop_lock:
        if _tests_loop is None:
            _tests_loop = BackgroundLoop("store-conformance-tests-loop")
        runner = _tests_loop
    return runner.run(coroutine)


class AsyncTwinsFacade(Store):
    """A sync store that runs every call through ``inner``'s async twins on the background loop."""

    def __init__(self, inner: Store, loop: BackgroundLoop | None = None) -> None:
        self.inner = inner
        self.runner = loop or background_loop()

    def __repr__(self) -> str:
        return f"AsyncTwinsFacade({self.inner!r})"

    @property
    def fault_hook(self) -> FaultHook | None:
        """The wrapped store's hook (set through the facade, seen by the store)."""
        return self.inner.fault_hook

    @fault_hook.setter
    def fault_hook(self, hook: FaultHook | None) -> None:
        self.inner.fault_hook = hook

    async def _on_loop(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Await ``coroutine`` on the background loop from whatever loop the caller runs."""
        return await asyncio.wrap_future(self.runner.submit(coroutine))

    # -- sync: the async twins, waited for ----------------------------------------------
    def setup(self) -> None:
        self.runner.run(self.inner.asetup())

    def head(self, session_id: str) -> int:
        return self.runner.run(self.inner.ahead(session_id))

    def tip(self, session_id: str) -> tuple[int, float]:
        return self.runner.run(self.inner.atip(session_id))

    def revisions(self, session_id: str, after: int = 0) -> list[Revision]:
        return self.runner.run(self.inner.arevisions(session_id, after))

    def commit(
        self, session_id: str, revision: Revision, *, expected_head: int | None, renew_taken_ids: bool = False
    ) -> Revision:
        options = {"renew_taken_ids": True} if renew_taken_ids else {}  # only then: the store may predate it
        return self.runner.run(self.inner.acommit(session_id, revision, expected_head=expected_head, **options))

    def truncate(self, session_id: str, keep: int) -> int:
        return self.runner.run(self.inner.atruncate(session_id, keep))

    def purge(self, session_id: str) -> None:
        self.runner.run(self.inner.apurge(session_id))

    def sessions(self) -> list[str]:
        return self.runner.run(self.inner.asessions())

    def stored_sessions(self) -> list[str]:
        return self.runner.run(self.inner.astored_sessions())

    def close(self) -> None:
        """Close the wrapped store: its ``aclose`` on the loop when it has one, then ``close``."""
        aclose = getattr(self.inner, "aclose", None)
        if aclose is not None:
            self.runner.run(aclose())
        self.inner.close()

    # -- async: the wrapped store's twins, on the background loop -----------------------
    async def asetup(self) -> None:
        await self._on_loop(self.inner.asetup())

    async def ahead(self, session_id: str) -> int:
        return await self._on_loop(self.inner.ahead(session_id))

    async def atip(self, session_id: str) -> tuple[int, float]:
        return await self._on_loop(self.inner.atip(session_id))

    async def arevisions(self, session_id: str, after: int = 0) -> list[Revision]:
        return await self._on_loop(self.inner.arevisions(session_id, after))

    async def acommit(
        self, session_id: str, revision: Revision, *, expected_head: int | None, renew_taken_ids: bool = False
    ) -> Revision:
        options = {"renew_taken_ids": True} if renew_taken_ids else {}
        return await self._on_loop(self.inner.acommit(session_id, revision, expected_head=expected_head, **options))

    async def atruncate(self, session_id: str, keep: int) -> int:
        return await self._on_loop(self.inner.atruncate(session_id, keep))

    async def apurge(self, session_id: str) -> None:
        await self._on_loop(self.inner.apurge(session_id))

    async def asessions(self) -> list[str]:
        return await self._on_loop(self.inner.asessions())

    async def astored_sessions(self) -> list[str]:
        return await self._on_loop(self.inner.astored_sessions())


class AsyncTwinsVectorFacade(AsyncTwinsFacade, VectorStore):
    """:class:`AsyncTwinsFacade` for a store with the vector capability (its vector twins too)."""

    inner: Any  # a Store that is also a VectorStore

    def save_vectors(self, session_id: str, rows: Iterable[Any]) -> int:
        return self.runner.run(self.inner.asave_vectors(session_id, rows))

    def load_vectors(self, session_id: str, embedder: str, *, dimension: int | None = None) -> list[VectorRow]:
        return self.runner.run(self.inner.aload_vectors(session_id, embedder, dimension=dimension))

    def delete_vectors(self, session_id: str, embedder: str | None = None) -> int:
        return self.runner.run(self.inner.adelete_vectors(session_id, embedder))

    async def asave_vectors(self, session_id: str, rows: Iterable[Any]) -> int:
        return await self._on_loop(self.inner.asave_vectors(session_id, rows))

    async def aload_vectors(self, session_id: str, embedder: str, *, dimension: int | None = None) -> list[VectorRow]:
        return await self._on_loop(self.inner.aload_vectors(session_id, embedder, dimension=dimension))

    async def adelete_vectors(self, session_id: str, embedder: str | None = None) -> int:
        return await self._on_loop(self.inner.adelete_vectors(session_id, embedder))


class AsyncTwinsFacadeBeforeRenew(AsyncTwinsFacade):
    """:class:`AsyncTwinsFacade` for a store whose ``commit`` predates ``renew_taken_ids``:
    its ``commit`` does not take it either, so the library sees the store as it is."""

    def commit(self, session_id: str, revision: Revision, *, expected_head: int | None) -> Revision:  # type: ignore[override]
        return self.runner.run(self.inner.acommit(session_id, revision, expected_head=expected_head))

    async def acommit(self, session_id: str, revision: Revision, *, expected_head: int | None) -> Revision:  # type: ignore[override]
        return await self._on_loop(self.inner.acommit(session_id, revision, expected_head=expected_head))


class AsyncTwinsVectorFacadeBeforeRenew(AsyncTwinsFacadeBeforeRenew, AsyncTwinsVectorFacade):
    """:class:`AsyncTwinsVectorFacade` for a store whose ``commit`` predates ``renew_taken_ids``."""


def facade_for(store: Store, loop: BackgroundLoop | None = None) -> AsyncTwinsFacade:
    """The async mode's facade over ``store`` (with the vector twins when it has them; with a
    ``commit`` as old as the store's when that lacks ``renew_taken_ids``)."""
    from ..stores.base import takes_keyword

    before_renew = not takes_keyword(store, "renew_taken_ids")
    if supports_vectors(store):
        return AsyncTwinsVectorFacadeBeforeRenew(store, loop) if before_renew else AsyncTwinsVectorFacade(store, loop)
    return AsyncTwinsFacadeBeforeRenew(store, loop) if before_renew else AsyncTwinsFacade(store, loop)


def unwrapped(store: Store) -> Store:
    """The store under test itself: ``store``, or the one an :class:`AsyncTwinsFacade` wraps."""
    return store.inner if isinstance(store, AsyncTwinsFacade) else store


def needs(*capabilities: str) -> Any:
    """Mark a suite test as needing ``capabilities`` (names of :class:`Capabilities` fields):
    it is skipped, with a reason naming them, for a store that declares one of them off."""
    unknown = set(capabilities) - set(Capabilities.names())
    if unknown:
        raise InvalidInputError(f"unknown capabilities {sorted(unknown)}; known: {Capabilities.names()}")

    def mark(test: Any) -> Any:
        test.needs = tuple(getattr(test, "needs", ())) + capabilities
        return test

    return mark


def lacking(suite: str, capability: str) -> str:
    """The reason a test of ``suite`` is skipped for lack of ``capability``: one on by default
    that ``suite`` declares off, or one added later, off until ``suite`` declares it on (an
    author who declared nothing is not told they declared it off)."""
    if getattr(Capabilities(), capability):
        return f"needs the {capability!r} capability, which {suite} declares off (Capabilities({capability}=False))"
    return (f"needs the {capability!r} capability, off by default (added after the others), which {suite} does not "
            f"declare on (Capabilities({capability}=True) runs it)")


async def together(suite: object, *awaitables: Awaitable[T]) -> list[T]:
    """Await ``awaitables`` at once (:func:`asyncio.gather`) when ``suite`` declares the
    ``threads`` capability (the default), else one after the other, in order: a store's
    default async twins run its sync methods in worker threads, so concurrent awaits are
    concurrent calls, which ``Capabilities(threads=False)`` rules out."""
    capabilities = getattr(suite, "capabilities", None)
    if not isinstance(capabilities, Capabilities) or capabilities.threads:
        return list(await asyncio.gather(*awaitables))
    return [await awaitable for awaitable in awaitables]

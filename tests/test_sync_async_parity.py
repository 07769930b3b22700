"""Sync/async parity: every public sync method ``x`` has an async twin ``ax`` with the same
parameters, and every ``ax`` has its ``x``, on every public class that has twins; and the
twins of :class:`Transcript` do what the sync methods do.

* Surfaces (the one place this is checked): :class:`Transcript`, :class:`TranscriptGate`,
  :class:`ContextGatekeeper`, :class:`Store` and each concrete store (in memory, SQLite,
  PostgreSQL through the lazy import, whose twins are native), the LangChain history,
  middleware and gated view, and the LlamaIndex memory and node postprocessor.  For each,
  every public method ``x`` (inherited ones included) has a coroutine function ``ax`` with
  the same parameters (names, kinds, defaults), and every public coroutine function ``ax``
  has its ``x`` (a method, or a property listed in :data:`PROPERTY_TWINS`).  A method
  without a twin must be listed in :data:`NO_TWIN` with the reason, so a method added
  without its twin fails here.  The frameworks' own methods that a class inherits
  untouched (pydantic's ``model_dump``, LangChain's ``add_user_message`` ...) are the
  frameworks' surface, not ours, and are left out, unless one of a pair is ours.
* Behaviour: one script of operations (append, a retried append renewed under a taken id,
  apply, edit with the scripted model, an edit with ``strategy="rewrite"``, a large deletion
  refused then allowed with ``allow_large_deletion=True``, undo, redo, revert, set,
  snapshot, ``diff(1)`` and ``diff(1, 3)``, clear, purge) run through the sync methods and
  through the async twins gives the same result at every step, the same messages read after
  every step (``messages`` / ``aget_messages``) and the same revision log.
"""

from __future__ import annotations

import asyncio
import inspect
import re
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from context_gatekeeper import ContextGatekeeper, Transcript, TranscriptGate
from context_gatekeeper.editing.format import ideal_patch_reply, ideal_rewrite_reply
from context_gatekeeper.stores import InMemoryStore, SQLiteStore, Store, VectorStore
from context_gatekeeper.testing import ScriptedModel
from context_gatekeeper.records.messages import Message
from context_gatekeeper.records.operations import Delete, InsertAfter, Replace
from context_gatekeeper.records.revisions import Proposal

FRAMEWORKS = frozenset({"pydantic", "pydantic_core", "llama_index", "langchain", "langchain_core", "langgraph"})
"""The frameworks' top-level packages: methods defined there are their surface, not ours."""

CLOSE = "closes what this object opened; quick, and called from sync context managers and finalisers"
STORE_CLOSE = (
    "releasing a connection is quick; only a store whose async twins hold loop-bound resources "
    "needs aclose (PostgresStore has one: an async pool per event loop)"
)
IN_MEMORY = "in-memory work on the gatekeeper's own index: never waits on a store, a model or an embedder"
CONSTRUCTION = "builds or describes the object (a constructor or a LlamaIndex/pydantic serialiser hook), no I/O to await"

NO_TWIN: dict[str, dict[str, str]] = {
    "Transcript": {"close": CLOSE},
    "TranscriptGate": {
        "sync": "catches the index up with the transcript; the async twins (aexplain, aselect_messages, "
        "aembed_pending) catch up themselves in a worker thread, so async callers never call it",
    },
    "ContextGatekeeper": {
        **{
            name: IN_MEMORY
            for name in (
                "add_turn", "clear", "get_turn", "insert_turn", "insert_turns", "pin", "remove_turn", "remove_turns",
                "cost_of", "current_options", "empty_copy", "pinned_cost", "replace_turn", "replace_turns", "segments", "topics", "turn_cost", "unpin",
            )
        },
        "take_cached": "reads the vector cache, which may be a store (I/O): an async caller runs it in a worker "
        "thread (TranscriptGate's twins do), and the async selections leave cached vectors to the background pass",
    },
    # PostgresStore has every twin (aclose, aapplied_migrations: its async pools are loop-bound);
    # VectorStore is the vector half of a store, with no close of its own.
    "Store": {"close": STORE_CLOSE},
    "VectorStore": {},
    "InMemoryStore": {"close": STORE_CLOSE},
    "SQLiteStore": {
        "close": STORE_CLOSE,
        "applied_migrations": "an operator's inspection of the schema, not a request path",
        "checkpoint": "SQLite maintenance (WAL checkpoint), run by an operator",
    },
    "PostgresStore": {},
    "GatekeeperChatMessageHistory": {"close": CLOSE},
    "GatekeeperMiddleware": {},
    "GatedView": {
        "gatekeeper": "returns the thread's in-memory gatekeeper, for inspection: nothing to wait for",
        "index": "returns the thread's in-memory turn index, for inspection: nothing to wait for",
        "turn_start": "counts a few messages' tokens in memory (the thread's counter) to find the current turn: "
                      "nothing to wait for",
    },
    "GatekeeperMemory": {
        "close": CLOSE,
        "class_name": CONSTRUCTION,
        "from_defaults": CONSTRUCTION,
        "from_dict": CONSTRUCTION + " (from_dict writes an imported log: a one-off import, not a request path)",
        "to_dict": CONSTRUCTION,
        "model_copy": CONSTRUCTION + " (pydantic's copy, overridden only to refuse a new session_id)",
        "trusted_stores": "a context manager that only lists stores (no I/O): used alike around sync and async restores",
    },
    "GatekeeperNodePostprocessor": {
        "class_name": CONSTRUCTION, "model_post_init": CONSTRUCTION,
        "model_copy": CONSTRUCTION + " (pydantic's copy; update= is assigned field by field, checked as an assignment is)",
    },
}
"""Public sync methods that deliberately have no async twin, by class, and why."""

PROPERTY_TWINS = {"aget_messages": "messages"}
"""Async methods whose sync side is a property, not a method."""


def postgres_store() -> type:
    pytest.importorskip("psycopg")
    import context_gatekeeper.stores as stores

    return stores.PostgresStore  # the lazy export (psycopg imported on first use)


def langchain(name: str) -> Callable[[], type]:
    def load() -> type:
        pytest.importorskip("langchain_core")
        import langchain_gatekeeper
        from langchain_gatekeeper import agent_view

        return getattr(langchain_gatekeeper, name, None) or getattr(agent_view, name)

    return load


def llamaindex(name: str) -> Callable[[], type]:
    def load() -> type:
        pytest.importorskip("llama_index.core")
        import llamaindex_gatekeeper

        return getattr(llamaindex_gatekeeper, name)

    return load


SURFACES: dict[str, Callable[[], type]] = {
    "Transcript": lambda: Transcript,
    "TranscriptGate": lambda: TranscriptGate,
    "ContextGatekeeper": lambda: ContextGatekeeper,
    "Store": lambda: Store,
    "VectorStore": lambda: VectorStore,
    "InMemoryStore": lambda: InMemoryStore,
    "SQLiteStore": lambda: SQLiteStore,
    "PostgresStore": postgres_store,
    "GatekeeperChatMessageHistory": langchain("GatekeeperChatMessageHistory"),
    "GatekeeperMiddleware": langchain("GatekeeperMiddleware"),
    "GatedView": langchain("GatedView"),
    "GatekeeperMemory": llamaindex("GatekeeperMemory"),
    "GatekeeperNodePostprocessor": llamaindex("GatekeeperNodePostprocessor"),
}
"""Every public class with async twins, by name."""


def public_methods(cls: type) -> dict[str, Any]:
    """Public methods of ``cls`` (inherited ones included), by name; properties left out."""
    found = {}
    for name in dir(cls):
        if name.startswith("_"):
            continue
        value = inspect.getattr_static(cls, name)
        if isinstance(value, (staticmethod, classmethod)):
            value = value.__func__
        if inspect.isfunction(value):
            found[name] = value
    return found


def ours(function: Any) -> bool:
    """Whether ``function`` is defined by this project (or a test), not inherited from a framework."""
    return (getattr(function, "__module__", None) or "").split(".")[0] not in FRAMEWORKS


def shape(function: Any) -> list[tuple[str, Any, Any]]:
    """Parameters as (name, kind, default), ``self`` left out."""
    return [(p.name, p.kind, p.default) for p in list(inspect.signature(function).parameters.values())[1:]]


def check_twins(cls: type, no_twin: dict[str, str]) -> list[str]:
    """Every parity problem of ``cls``, as readable lines (empty: in parity)."""
    methods = public_methods(cls)
    problems = []
    for name, function in sorted(methods.items()):
        if inspect.iscoroutinefunction(function):
            sync = methods.get(name[1:]) if name.startswith("a") else None
            if sync is None and PROPERTY_TWINS.get(name) is None and ours(function):
                problems.append(f"{cls.__name__}.{name} is async but {name[1:]!r} is no sync method of the class")
            continue
        twin = methods.get("a" + name)
        if twin is None or not inspect.iscoroutinefunction(twin):
            if twin is not None and (ours(function) or ours(twin)):
                problems.append(f"{cls.__name__}.a{name} is not a coroutine function")
            elif twin is None and name not in no_twin and ours(function):
                problems.append(
                    f"{cls.__name__}.{name} has no async twin a{name}: add one, or list it with the reason in this test"
                )
            continue
        if (ours(function) or ours(twin)) and shape(function) != shape(twin):
            problems.append(f"{cls.__name__}.{name}{inspect.signature(function)} != a{name}{inspect.signature(twin)}")
    for name in no_twin:
        if name not in methods:
            problems.append(f"{cls.__name__}.{name} is listed without a twin but is no method of the class: unlist it")
        elif "a" + name in methods:
            problems.append(f"{cls.__name__}.{name} is listed without a twin but a{name} exists: unlist it")
    return problems


@pytest.mark.parametrize("name", sorted(SURFACES))
def test_every_sync_method_has_its_async_twin_with_the_same_parameters(name: str) -> None:
    assert check_twins(SURFACES[name](), NO_TWIN[name]) == []


def test_every_surface_has_an_exception_list() -> None:
    assert set(NO_TWIN) == set(SURFACES)


def test_the_check_catches_a_missing_twin_a_different_signature_and_a_stale_exception() -> None:
    """The checker itself: a method without a twin, twins that differ, an async method
    without its sync side, and an exception that no longer applies are reported."""

    class Drifted(InMemoryStore):
        def compact(self) -> None:
            """A new method added without its twin."""

        async def arevisions(self, session_id: str, after: int = 1) -> list:
            return []

        async def avacuum(self) -> None:
            """An async method added without its sync side."""

        def checkpoint(self) -> None:
            """Listed below as having no twin ..."""

        async def acheckpoint(self) -> None:
            """... but given one since."""

    problems = "\n".join(check_twins(Drifted, {**NO_TWIN["InMemoryStore"], "checkpoint": "maintenance"}))
    assert "Drifted.compact has no async twin acompact" in problems
    assert "Drifted.revisions" in problems and "after: 'int' = 1" in problems
    assert "Drifted.avacuum is async but 'vacuum' is no sync method" in problems
    assert "Drifted.checkpoint is listed without a twin but acheckpoint exists" in problems
    assert "Drifted.applied_migrations is listed without a twin but is no method of the class" in check_twins(
        Drifted, {"applied_migrations": "not a method here"}
    )[-1]


def test_the_core_twins_are_there() -> None:
    """The twins the documentation names exist (a class emptied of twins would pass the check)."""
    methods = public_methods(Transcript)
    assert {"aappend", "aedit", "acommit", "aapply", "aset", "aclear", "apurge", "aundo", "aredo", "arevert",
            "ahistory", "arecord", "asnapshot", "adiff", "aget_messages"} <= set(methods)
    assert "renew_taken_ids" in inspect.signature(Transcript.aappend).parameters
    assert {"aexplain", "aselect_messages", "aembed_pending"} <= set(public_methods(TranscriptGate))
    assert {"aselect", "aexplain", "abuild_prompt", "aembed_pending"} <= set(public_methods(ContextGatekeeper))


# -- behaviour: one script, sync and async ---------------------------------------------------
def edit_model(transcript_messages: tuple[Message, ...], text: str) -> ScriptedModel:
    """A scripted model that rewrites the first answer to ``text``, as a perfect model would."""
    answer = next(m for m in transcript_messages if m.role == "assistant")
    return ScriptedModel([ideal_patch_reply(list(transcript_messages), [Replace(answer.id, text)])])


def rewrite_model(transcript_messages: tuple[Message, ...], text: str) -> ScriptedModel:
    """A scripted model answering in the ``rewrite`` format (the first answer becomes ``text``):
    an edit run with another strategy cannot read it."""
    answer = next(m for m in transcript_messages if m.role == "assistant")
    return ScriptedModel([ideal_rewrite_reply(list(transcript_messages), [Replace(answer.id, text)])])


LONG = "Rewritten, at length: " + "Iceland, not Ireland. " * 20
"""The rewritten answer: long, so that deleting it is a large deletion."""


def drop_model(transcript_messages: tuple[Message, ...]) -> ScriptedModel:
    """A scripted model deleting every message but the first: a large deletion."""
    return ScriptedModel([ideal_patch_reply(list(transcript_messages), [Delete(m.id) for m in transcript_messages[1:]])])


def contents(messages: tuple[Message, ...]) -> list[tuple[str, str]]:
    """What a reader sees: each message's role and text."""
    return [(m.role, m.content) for m in messages]


Script = tuple[list[Any], list[dict[str, Any]]]
"""What each step returned, with the messages read after it; and the log before the purge."""


def run_sync(t: Transcript) -> Script:
    """The script through the sync methods; each step's result (revision numbers) and the
    messages read after it, the log before the final purge."""
    out: list[Any] = []

    def step(value: Any) -> None:
        out.append((value, contents(t.messages)))

    def refusal(call: Callable[[], object]) -> str:
        try:
            call()
        except Exception as error:
            return f"{type(error).__name__}: {error}"
        return "accepted"

    step(t.append(user="We went to Ireland.", assistant="Ireland, noted.").number)
    step(t.append(messages=[{"id": "fixed", "role": "user", "content": "first"}]).number)
    step(t.append(messages=[{"id": "fixed", "role": "user", "content": "first"}]).number)  # a retry: no-op
    step(t.append(messages=[{"id": "fixed", "role": "user", "content": "other"}], renew_taken_ids=True).number)
    step(t.append(assistant="An answer to the open question.").number)
    step(t.apply([InsertAfter(None, "system", "Be brief."), Delete("fixed")]).number)
    step(t.edit("fix the country", model=edit_model(t.messages, "It was Iceland.")).number)
    proposal = t.edit("say it better", model=edit_model(t.messages, "Iceland, then."), preview=True)
    assert isinstance(proposal, Proposal)
    step(t.commit(proposal).number)
    step(t.undo().number)
    step(t.redo().number)
    step(t.revert(2).number)
    step(t.edit("rewrite it", model=rewrite_model(t.messages, LONG), strategy="rewrite").number)
    step(refusal(lambda: t.edit("drop the rest", model=drop_model(t.messages))))
    step(t.edit("drop the rest", model=drop_model(t.messages), allow_large_deletion=True).number)
    step(t.set([{"role": "user", "content": "set anew"}, {"role": "assistant", "content": "fine"}]).number)
    step([m.content for m in t.snapshot(3)])
    step(str(t.diff(1)))
    step(str(t.diff(1, 3)))
    step(t.clear().number)
    step(len(t.record()))
    log = [r.to_dict() for r in t.history()]
    t.purge()
    step(len(t.history()))
    return out, log


async def run_async(t: Transcript) -> Script:
    """The same script through the async twins (messages read with ``aget_messages``)."""
    out: list[Any] = []

    async def step(value: Any) -> None:
        out.append((value, contents(await t.aget_messages())))

    async def refusal(call: Awaitable[object]) -> str:
        try:
            await call
        except Exception as error:
            return f"{type(error).__name__}: {error}"
        return "accepted"

    await step((await t.aappend(user="We went to Ireland.", assistant="Ireland, noted.")).number)
    await step((await t.aappend(messages=[{"id": "fixed", "role": "user", "content": "first"}])).number)
    await step((await t.aappend(messages=[{"id": "fixed", "role": "user", "content": "first"}])).number)
    await step((await t.aappend(messages=[{"id": "fixed", "role": "user", "content": "other"}], renew_taken_ids=True)).number)
    await step((await t.aappend(assistant="An answer to the open question.")).number)
    await step((await t.aapply([InsertAfter(None, "system", "Be brief."), Delete("fixed")])).number)
    await step((await t.aedit("fix the country", model=edit_model(await t.aget_messages(), "It was Iceland."))).number)
    proposal = await t.aedit("say it better", model=edit_model(await t.aget_messages(), "Iceland, then."), preview=True)
    assert isinstance(proposal, Proposal)
    await step((await t.acommit(proposal)).number)
    await step((await t.aundo()).number)
    await step((await t.aredo()).number)
    await step((await t.arevert(2)).number)
    rewrite = rewrite_model(await t.aget_messages(), LONG)
    await step((await t.aedit("rewrite it", model=rewrite, strategy="rewrite")).number)
    await step(await refusal(t.aedit("drop the rest", model=drop_model(await t.aget_messages()))))
    await step((await t.aedit("drop the rest", model=drop_model(await t.aget_messages()), allow_large_deletion=True)).number)
    await step((await t.aset([{"role": "user", "content": "set anew"}, {"role": "assistant", "content": "fine"}])).number)
    await step([m.content for m in await t.asnapshot(3)])
    await step(str(await t.adiff(1)))
    await step(str(await t.adiff(1, 3)))
    await step((await t.aclear()).number)
    await step(len(await t.arecord()))
    log = [r.to_dict() for r in await t.ahistory()]
    await t.apurge()
    await step(len(await t.ahistory()))
    return out, log


def canonical(log: list[dict[str, Any]]) -> Any:
    """The log with times dropped and generated ids numbered by first appearance (runs differ only there)."""
    names: dict[str, str] = {}
    text = repr([{k: v for k, v in r.items() if k != "time"} for r in log])
    generated = re.compile(r"\b([0-9a-f]{12})\b")  # new_message_id: 12 hex digits

    def rename(match: re.Match[str]) -> str:
        return names.setdefault(match.group(1), f"id{len(names)}")

    return generated.sub(rename, text)


def test_the_same_script_gives_the_same_messages_and_log_sync_and_async() -> None:
    sync_t, async_t = Transcript("s", store=InMemoryStore()), Transcript("s", store=InMemoryStore())
    sync_out, sync_log = run_sync(sync_t)
    async_out, async_log = asyncio.run(run_async(async_t))
    for n, (sync_step, async_step) in enumerate(zip(sync_out, async_out, strict=True)):
        assert sync_step == async_step, f"step {n}: the result or the messages read after it differ"
    assert [r["kind"] for r in sync_log] == [r["kind"] for r in async_log]
    assert canonical(sync_log) == canonical(async_log)
    # the script did what it says: a renewed id, a retry dropped, edits (patch, rewrite, a
    # large deletion refused then allowed), undo, redo, revert, diffs that differ, a purge
    kinds = [r["kind"] for r in sync_log]
    assert kinds == [
        "append", "append", "append", "append", "apply", "edit", "edit", "undo", "redo", "revert",
        "edit", "edit", "set", "clear",
    ]
    results = [value for value, _ in sync_out]
    assert results[2] == results[1]  # the retried append wrote nothing
    assert results[11] == 11 and "allow_large_deletion=True" in results[12] and results[13] == 12
    assert sync_out[13][1] == [("user", "We went to Ireland.")]  # all but the first message deleted
    assert results[16] != results[17]  # diff(1) and diff(1, 3) differ
    assert sync_out[-1] == (0, []) and async_t.messages == () and sync_t.store.sessions() == []


STEPS: dict[str, tuple[str, dict[str, Any]]] = {
    "ask": ("append", {"user": "q"}),
    "answer": ("append", {"assistant": "a"}),
    "turn": ("append", {"user": "q", "assistant": "a"}),
    "retry": ("append", {"messages": [{"id": "k", "role": "user", "content": "x"}]}),
    "renew": ("append", {"messages": [{"id": "k", "role": "user", "content": "y"}], "renew_taken_ids": True}),
    "undo": ("undo", {}),
    "redo": ("redo", {}),
    "clear": ("clear", {}),
}


@settings(max_examples=15, deadline=None)
@given(st.lists(st.sampled_from(sorted(STEPS)), max_size=12))
def test_random_scripts_agree_sync_and_async(steps: list[str]) -> None:
    """Any sequence of appends, retries, renewals, undo, redo and clear ends the same both ways."""

    def sync_step(t: Transcript, step: str) -> object:
        name, kwargs = STEPS[step]
        return getattr(t, name)(**kwargs)

    async def async_step(t: Transcript, step: str) -> object:
        name, kwargs = STEPS[step]
        return await getattr(t, "a" + name)(**kwargs)  # the twin, by name

    def outcome(call: Callable[[], object]) -> str:
        try:
            result = call()
        except Exception as error:  # the same refusal both ways (nothing to undo, a taken id, ...)
            return type(error).__name__
        return type(result).__name__

    sync_t, async_t = Transcript("s", store=InMemoryStore()), Transcript("s", store=InMemoryStore())

    async def run_all() -> list[str]:
        results = []
        for step in steps:
            try:
                result = await async_step(async_t, step)
            except Exception as error:
                results.append(type(error).__name__)
            else:
                results.append(type(result).__name__)
        return results

    sync_results = [outcome(lambda step=step: sync_step(sync_t, step)) for step in steps]
    assert sync_results == asyncio.run(run_all())
    assert [(m.role, m.content) for m in sync_t.messages] == [(m.role, m.content) for m in async_t.messages]
    assert canonical([r.to_dict() for r in sync_t.history()]) == canonical([r.to_dict() for r in async_t.history()])

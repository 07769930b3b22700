"""Every sync method with an async twin (``x`` / ``ax``) takes the same parameters, and the
twins do the same thing.

* Signatures: for :class:`Transcript`, :class:`Store` and each concrete store (in memory,
  SQLite, PostgreSQL through the lazy import), every public method ``x`` whose twin ``ax``
  exists has the same parameters (names, kinds, defaults), every twin is a coroutine
  function, and a public method without a twin must be listed below with the reason, so a
  new method added without its twin fails here.
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

from context_gatekeeper import Transcript
from context_gatekeeper.editing.format import ideal_patch_reply, ideal_rewrite_reply
from context_gatekeeper.stores import InMemoryStore, SQLiteStore, Store, VectorStore
from context_gatekeeper.testing import ScriptedModel
from context_gatekeeper.records.messages import Message
from context_gatekeeper.records.operations import Delete, InsertAfter, Replace
from context_gatekeeper.records.revisions import Proposal

# Public sync methods that deliberately have no async twin, and why.
TRANSCRIPT_NO_TWIN = {
    "close": "closes the store this transcript opened; quick, and called from sync context managers",
}
STORE_NO_TWIN = {
    "close": "releasing a connection is quick; only a store whose async twins hold loop-bound "
    "resources needs aclose (PostgresStore has one: an async pool per event loop)",
    "applied_migrations": "an operator's inspection of the schema, not a request path (PostgresStore has a twin)",
    "checkpoint": "SQLite maintenance (WAL checkpoint), run by an operator",
}
# Async methods whose sync side is a property, not a method.
PROPERTY_TWINS = {"aget_messages": "messages"}


def postgres_store() -> type:
    pytest.importorskip("psycopg")
    import context_gatekeeper.stores as stores

    return stores.PostgresStore  # the lazy export (psycopg imported on first use)


STORE_CLASSES: dict[str, Callable[[], type]] = {
    "Store": lambda: Store,
    "VectorStore": lambda: VectorStore,
    "InMemoryStore": lambda: InMemoryStore,
    "SQLiteStore": lambda: SQLiteStore,
    "PostgresStore": postgres_store,
}


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


def is_twin(name: str, methods: dict[str, Any]) -> bool:
    return name.startswith("a") and name[1:] in methods


def shape(function: Any) -> list[tuple[str, Any, Any]]:
    """Parameters as (name, kind, default), ``self`` left out."""
    return [(p.name, p.kind, p.default) for p in list(inspect.signature(function).parameters.values())[1:]]


def check_twins(cls: type, no_twin: dict[str, str]) -> list[str]:
    """Every parity problem of ``cls``, as readable lines (empty: in parity)."""
    methods = public_methods(cls)
    problems = []
    for name, function in sorted(methods.items()):
        if inspect.iscoroutinefunction(function):
            sync = name[1:] if is_twin(name, methods) else PROPERTY_TWINS.get(name)
            if sync is None:
                problems.append(f"{cls.__name__}.{name} is async but {name[1:]!r} is no sync method of the class")
            continue
        twin = methods.get("a" + name)
        if twin is None:
            if name not in no_twin:
                problems.append(
                    f"{cls.__name__}.{name} has no async twin a{name}: add one, or list it with the reason in this test"
                )
            continue
        if not inspect.iscoroutinefunction(twin):
            problems.append(f"{cls.__name__}.a{name} is not a coroutine function")
        if shape(function) != shape(twin):
            problems.append(f"{cls.__name__}.{name}{inspect.signature(function)} != a{name}{inspect.signature(twin)}")
    for name in no_twin:
        if name in methods and "a" + name in methods and shape(methods[name]) != shape(methods["a" + name]):
            problems.append(f"{cls.__name__}.{name} and a{name} differ")
    return problems


def test_transcript_twins_take_the_same_parameters() -> None:
    assert check_twins(Transcript, TRANSCRIPT_NO_TWIN) == []
    methods = public_methods(Transcript)
    assert {"aappend", "aedit", "acommit", "aapply", "aset", "aclear", "apurge", "aundo", "aredo", "arevert"} <= set(methods)
    assert "renew_taken_ids" in inspect.signature(Transcript.aappend).parameters


@pytest.mark.parametrize("name", sorted(STORE_CLASSES))
def test_store_twins_take_the_same_parameters(name: str) -> None:
    cls = STORE_CLASSES[name]()
    assert check_twins(cls, STORE_NO_TWIN) == []


def test_the_check_catches_a_missing_twin_and_a_different_signature() -> None:
    """The checker itself: a method without a twin, and twins that differ, are reported."""

    class Drifted(InMemoryStore):
        def compact(self) -> None:
            """A new method added without its twin."""

        async def arevisions(self, session_id: str, after: int = 1) -> list:
            return []

    problems = "\n".join(check_twins(Drifted, STORE_NO_TWIN))
    assert "Drifted.compact has no async twin acompact" in problems
    assert "Drifted.revisions" in problems and "after: 'int' = 1" in problems


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

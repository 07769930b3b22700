"""GatekeeperMemory, unchanged, inside real LlamaIndex chat engines and agents.

For SimpleChatEngine, ContextChatEngine, CondensePlusContextChatEngine,
CondenseQuestionChatEngine, FunctionAgent and ReActAgent (each given ``memory=``):
what the LLM receives leaves out an off-topic earlier turn and keeps the relevant
ones; the memory's full history is complete; an edit changes what later calls see;
undo restores it.  Scripted LLMs record every prompt; MockEmbedding indexes; no network.
"""

from __future__ import annotations

import asyncio
import json
import warnings
from pathlib import Path
from typing import Any

import pytest
from llama_index.core.agent.workflow import FunctionAgent, ReActAgent
from llama_index.core.chat_engine import (
    CondensePlusContextChatEngine,
    CondenseQuestionChatEngine,
    ContextChatEngine,
    SimpleChatEngine,
)
from llama_index.core.llms import ChatMessage
from workflows import Context

from li_support import (
    ESPRESSO,
    ESPRESSO_QUERY,
    OFF_TOPIC_MARKERS,
    REDIS_1,
    REDIS_2,
    REDIS_QUERY,
    CallRecorder,
    ScriptedLLM,
    function_calling_llm,
    lookup,
    memory_through_restored_context,
    patch,
    react,
    small_index,
    tool_call,
)
from llamaindex_gatekeeper import GatekeeperMemory, StoreDetachedWarning, stored

EDITED = "Twice the longest job holding the lock."
ORIGINAL = REDIS_1[1]


class Harness:
    """One engine or agent with its memory and a record of what its LLM receives."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.memory = GatekeeperMemory.from_defaults(token_limit=2000, session_id=kind)
        answers = [REDIS_1[1], ESPRESSO[1], REDIS_2[1]]
        if kind == "function_agent":
            # the Redis watchdog turn calls a tool first: the pair must travel whole
            self.recorder = CallRecorder([answers[0], answers[1], tool_call("call-1", "lookup", topic="x"), answers[2]])
            self.agent: Any = FunctionAgent(tools=[lookup], llm=function_calling_llm(self.recorder))
        elif kind == "react_agent":
            self.llm = ScriptedLLM(answers, wrap=react)
            self.agent = ReActAgent(tools=[lookup], llm=self.llm)
        else:
            self.llm = ScriptedLLM(answers)
            self.engine = self._engine(kind)
        self._mark = 0

    def _engine(self, kind: str) -> Any:
        llm, memory = self.llm, self.memory
        if kind == "simple":
            return SimpleChatEngine.from_defaults(llm=llm, memory=memory, system_prompt="You are a helpful assistant.")
        index = small_index()
        if kind == "context":
            return ContextChatEngine.from_defaults(index.as_retriever(similarity_top_k=1), llm=llm, memory=memory)
        if kind == "condense_plus_context":
            return CondensePlusContextChatEngine.from_defaults(index.as_retriever(similarity_top_k=1), llm=llm, memory=memory)
        query_engine = index.as_query_engine(llm=llm, similarity_top_k=1)
        return CondenseQuestionChatEngine.from_defaults(query_engine, llm=llm, memory=memory)

    def chat(self, message: str) -> str:
        """One user message through the engine or agent; returns the answer."""
        self._mark = len(self.recorder.calls) if self.kind == "function_agent" else len(self.llm.prompts)
        if self.kind.endswith("_agent"):
            return str(asyncio.run(self._run(message)))
        return str(self.engine.chat(message))

    async def _run(self, message: str) -> Any:
        return await self.agent.run(user_msg=message, memory=self.memory)

    def received(self) -> str:
        """Everything the LLM received during the latest :meth:`chat`."""
        if self.kind == "function_agent":
            return "\n".join(self.recorder.text(i) for i in range(self._mark, len(self.recorder.calls)))
        return "\n".join(self.llm.prompts[self._mark :])


pytestmark = [
    # the workflows package inspects agent objects with inspect.getmembers, which touches
    # pydantic's deprecated attributes; nothing of ours
    pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecatedSince20"),
    pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecatedSince211"),
    pytest.mark.filterwarnings("ignore:is_running called from within a step:DeprecationWarning"),  # ReActAgent
]

KINDS = ["simple", "context", "condense_plus_context", "condense_question", "function_agent", "react_agent"]


@pytest.fixture(params=KINDS)
def harness(request: pytest.FixtureRequest) -> Harness:
    h = Harness(request.param)
    for user, _ in (REDIS_1, ESPRESSO, REDIS_2):
        h.chat(user)
    return h


def _assert_gated(h: Harness, expected: str) -> None:
    got = h.received()
    assert expected in got, f"{h.kind}: the relevant earlier turn is missing"
    assert REDIS_2[0] in got
    for marker in OFF_TOPIC_MARKERS:
        assert marker not in got, f"{h.kind}: the off-topic turn leaked into the prompt"


def test_the_llm_gets_the_relevant_turns_and_not_the_off_topic_one(harness: Harness) -> None:
    harness.chat(REDIS_QUERY)
    _assert_gated(harness, ORIGINAL)


def test_the_full_history_stays_complete(harness: Harness) -> None:
    harness.chat(REDIS_QUERY)
    everything = harness.memory.get_all()
    users = [m.content for m in everything if m.role.value == "user"]
    assert users == [REDIS_1[0], ESPRESSO[0], REDIS_2[0], REDIS_QUERY]
    text = "\n".join(m.content or "" for m in everything)
    for _, answer in (REDIS_1, ESPRESSO, REDIS_2):
        assert answer in text
    if harness.kind == "function_agent":  # the tool call and its result are stored, in order
        roles = [m.role.value for m in everything]
        assert roles[4:8] == ["user", "assistant", "tool", "assistant"]
        assert everything[6].additional_kwargs["tool_call_id"] == "call-1"
    assert [r.kind for r in harness.memory.history()] and all(r.kind == "append" for r in harness.memory.history())


def test_an_edit_changes_what_later_calls_see_and_undo_restores_it(harness: Harness) -> None:
    # the REDIS_1 answer is the second editable message
    revision = harness.memory.edit("The TTL should be twice the longest job.", model=patch(
        {"op": "replace", "id": "2", "content": EDITED}
    ))
    assert revision.kind == "edit"
    harness.chat(REDIS_QUERY)
    _assert_gated(harness, EDITED)
    assert ORIGINAL not in harness.received()
    harness.memory.undo()
    harness.chat(REDIS_QUERY)
    _assert_gated(harness, ORIGINAL)
    assert EDITED not in harness.received()
    assert ORIGINAL in harness.memory.record()[1].content  # the record never changed


def test_the_off_topic_query_gets_only_its_own_turn() -> None:
    h = Harness("simple")
    for user, _ in (REDIS_1, ESPRESSO, REDIS_2):
        h.chat(user)
    h.chat(ESPRESSO_QUERY)
    got = h.received()
    assert ESPRESSO[1] in got and REDIS_1[1] not in got and REDIS_2[1] not in got


# -- streaming and async paths ------------------------------------------------------------
def test_streaming_engine_writes_its_answer_from_a_worker_thread() -> None:
    memory = GatekeeperMemory.from_defaults(token_limit=2000)
    llm = ScriptedLLM([REDIS_1[1], ESPRESSO[1], REDIS_2[1]])
    engine = SimpleChatEngine.from_defaults(llm=llm, memory=memory)
    for user, _ in (REDIS_1, ESPRESSO, REDIS_2):
        response = engine.stream_chat(user)
        assert "".join(response.response_gen)  # joins the writer thread
    mark = len(llm.prompts)
    response = engine.stream_chat(REDIS_QUERY)
    "".join(response.response_gen)
    got = "\n".join(llm.prompts[mark:])
    assert REDIS_1[1] in got and "moka" not in got
    assert len(memory.get_all()) == 8


def test_async_chat_engines_use_aget_and_aput() -> None:
    memory = GatekeeperMemory.from_defaults(token_limit=2000)
    llm = ScriptedLLM([REDIS_1[1], ESPRESSO[1], REDIS_2[1]])
    engine = ContextChatEngine.from_defaults(small_index().as_retriever(similarity_top_k=1), llm=llm, memory=memory)

    async def scenario() -> str:
        for user, _ in (REDIS_1, ESPRESSO, REDIS_2):
            await engine.achat(user)
        mark = len(llm.prompts)
        await engine.achat(REDIS_QUERY)
        return "\n".join(llm.prompts[mark:])

    got = asyncio.run(scenario())
    assert REDIS_1[1] in got and "moka" not in got
    assert len(memory.get_all()) == 8


def test_engine_reset_is_a_recorded_revision_that_undo_reverts() -> None:
    h = Harness("simple")
    h.chat(REDIS_1[0])
    h.engine.reset()
    assert h.memory.get_all() == [] and h.memory.history()[-1].kind == "clear"
    h.memory.undo()
    assert [m.content for m in h.memory.get_all()] == list(REDIS_1)


def test_chat_history_argument_is_a_recorded_set() -> None:
    h = Harness("simple")
    h.chat(REDIS_1[0])
    history = h.memory.get_all()
    h.engine.chat(REDIS_2[0], chat_history=history)  # the same messages: nothing to record
    assert [r.kind for r in h.memory.history()] == ["append"] * 4
    h.engine.chat(ESPRESSO[0], chat_history=history[:0])
    kinds = [r.kind for r in h.memory.history()]
    assert "set" in kinds
    assert [m.content for m in h.memory.get_all()][0] == ESPRESSO[0]


def test_memory_cls_builds_the_memory_through_from_defaults() -> None:
    llm = ScriptedLLM([REDIS_1[1]])
    engine = SimpleChatEngine.from_defaults(llm=llm, memory_cls=GatekeeperMemory)
    engine.chat(REDIS_1[0])
    assert isinstance(engine._memory, GatekeeperMemory)
    assert engine._memory.token_limit == llm.metadata.context_window - 256
    assert [m.content for m in engine.chat_history] == list(REDIS_1)


def test_a_serialised_agent_context_carries_the_memory() -> None:
    from workflows.context.serializers import JsonSerializer

    restored_memory = memory_through_restored_context(JsonSerializer())
    assert isinstance(restored_memory, GatekeeperMemory)
    assert [m.content for m in restored_memory.get_all()] == [*REDIS_1, *ESPRESSO]
    assert [r.kind for r in restored_memory.history()] == ["append"] * 4


def test_a_serialised_agent_context_reattaches_its_sqlite_memory_only_to_a_trusted_store(tmp_path: Path) -> None:
    from workflows.context.serializers import JsonSerializer

    from context_gatekeeper import InMemoryStore, SQLiteStore

    path = str(tmp_path / "chats.db")
    memory = GatekeeperMemory.from_defaults(token_limit=2000, store=path, session_id="s1")
    restored = memory_through_restored_context(JsonSerializer(), memory, trusted=(path,))
    assert isinstance(restored.store, SQLiteStore) and restored.store.absolute_path == path
    on_disk = GatekeeperMemory.from_defaults(store=path, session_id="s1")
    assert [m.content for m in on_disk.get_all()] == [*REDIS_1, *ESPRESSO]  # the later turns reached the file
    for opened in (memory, restored, on_disk):
        opened.close()

    other = str(tmp_path / "other.db")
    memory = GatekeeperMemory.from_defaults(token_limit=2000, store=other, session_id="s1")
    with pytest.MonkeyPatch.context() as as_in_another_process:  # no live-export token is ever recognised
        as_in_another_process.setattr(stored, "_LIVE", _NothingKept())
        with pytest.warns(StoreDetachedWarning, match="other.db"):  # trusting another file does not reattach this
            detached = memory_through_restored_context(JsonSerializer(), memory, trusted=(path,))
    assert isinstance(detached.store, InMemoryStore)
    assert [m.content for m in detached.get_all()] == [*REDIS_1, *ESPRESSO]  # the conversation goes on, in memory
    assert [m.content for m in memory.get_all()] == list(REDIS_1)  # and says so: the file has only the first turn
    memory.close()


class _NothingKept(dict):
    """A live-export registry that keeps no token: every restore runs as in another process."""

    def __setitem__(self, key: object, value: object) -> None:
        pass


def _memory(where: str, tmp_path: Path) -> GatekeeperMemory:
    if where == "sqlite":
        return GatekeeperMemory.from_defaults(token_limit=2000, store=str(tmp_path / "chats.db"), session_id="s1")
    return GatekeeperMemory.from_defaults(token_limit=2000, session_id="s1")


def _roles_and_texts(memory: GatekeeperMemory) -> list[tuple[str, str]]:
    return [(m.role.value, str(m.content or "")) for m in memory.get_all()]


@pytest.mark.parametrize("where", ["sqlite", "in_memory"])
def test_a_context_reused_across_runs_keeps_writing_to_the_callers_memory(where: str, tmp_path: Path) -> None:
    """agent.run(..., ctx=ctx) twice: the second run serialises the Context's state and rebuilds
    the memory through from_dict. The data named the SQLite file but was not trusted, so the
    memory came back in memory, detached, with a warning naming Context.from_dict (never called):
    nothing of the second run reached the file. A live export of this process reattaches."""
    from workflows import Context

    memory = _memory(where, tmp_path)
    agent = FunctionAgent(tools=[lookup], llm=function_calling_llm(CallRecorder([REDIS_1[1], ESPRESSO[1]])))

    async def scenario() -> GatekeeperMemory:
        ctx = Context(agent)
        await agent.run(user_msg=REDIS_1[0], memory=memory, ctx=ctx)
        await agent.run(user_msg=ESPRESSO[0], ctx=ctx)
        return await ctx.store.get("memory")

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        in_context = asyncio.run(scenario())
    assert not [w for w in caught if issubclass(w.category, StoreDetachedWarning)]
    assert in_context.store is memory.store  # the same live store, rebuilt from the Context's JSON
    assert [m.content for m in memory.get_all()] == [*REDIS_1, *ESPRESSO]
    if where == "sqlite":
        on_disk = GatekeeperMemory.from_defaults(store=str(tmp_path / "chats.db"), session_id="s1")
        assert [m.content for m in on_disk.get_all()] == [*REDIS_1, *ESPRESSO]  # all four reached the file
        on_disk.close()
    memory.close()


async def count_visit(ctx: Context, city: str) -> str:
    """Record a visit to a city (in the workflow's state)."""
    async with ctx.store.edit_state() as state:
        state["visits"] = state.get("visits", 0) + 1
    return f"visited {city}"


count_visit.__annotations__["ctx"] = Context  # FunctionAgent passes its Context to a parameter of that type,
# which it finds by the annotation's object (this module's annotations are strings)


@pytest.mark.parametrize("where", ["in_memory", "sqlite"])
def test_a_tool_editing_the_workflow_state_loses_nothing_the_agent_writes(where: str, tmp_path: Path) -> None:
    """ctx.store.edit_state() deep-copies the state, memory included, and keeps the copy. An
    in-memory memory's copy replayed the log into a new store, so the caller's memory never
    got the tool call, its result or the answer; a copy now shares the store (as a SQLite
    memory's copy already shared the file)."""
    memory = _memory(where, tmp_path)
    recorder = CallRecorder([tool_call("c1", "count_visit", city="Oslo"), "Recorded Oslo.", "You visited Oslo."])
    agent = FunctionAgent(tools=[count_visit], llm=function_calling_llm(recorder))

    async def scenario() -> int:
        ctx = Context(agent)
        await agent.run(user_msg="Record a visit to Oslo", memory=memory, ctx=ctx)
        await agent.run(user_msg="What did I visit?", memory=memory, ctx=ctx)
        return int(await ctx.store.get("visits"))

    assert asyncio.run(scenario()) == 1
    assert _roles_and_texts(memory) == [
        ("user", "Record a visit to Oslo"), ("assistant", ""), ("tool", "visited Oslo"),
        ("assistant", "Recorded Oslo."), ("user", "What did I visit?"), ("assistant", "You visited Oslo."),
    ]
    assert [m.role.value for m in recorder.calls[-1]] == ["user", "assistant", "tool", "assistant", "user"]
    memory.close()


def test_a_json_context_saved_before_the_session_moved_on_is_refused_when_trusted(tmp_path: Path) -> None:
    """A Context saved as JSON at revision 2 and restored (in trusted_stores) once the SQLite
    session had gone on attached to the session as it is now: data naming a trusted file could
    then reach any session of it with a beginning of its log (an empty one included). Data the
    trusted store is chosen by attaches only to a session holding exactly its revisions; the
    same Context restored while the session is as it was saved attaches."""
    from workflows.context.serializers import JsonSerializer

    path = str(tmp_path / "chats.db")
    memory = GatekeeperMemory.from_defaults(token_limit=2000, store=path, session_id="s1")
    agent = FunctionAgent(tools=[lookup], llm=function_calling_llm(CallRecorder([REDIS_1[1], ESPRESSO[1], REDIS_2[1]])))

    async def scenario() -> GatekeeperMemory:
        ctx = Context(agent)
        await agent.run(user_msg=REDIS_1[0], memory=memory, ctx=ctx)
        saved = json.loads(json.dumps(ctx.to_dict(serializer=JsonSerializer())))
        with pytest.MonkeyPatch.context() as as_in_another_process:
            as_in_another_process.setattr(stored, "_LIVE", _NothingKept())  # only trusted_stores reattaches
            with GatekeeperMemory.trusted_stores(path):
                restored = Context.from_dict(agent, saved, serializer=JsonSerializer())
                await agent.run(user_msg=ESPRESSO[0], ctx=restored)  # the session as saved: attached
            with GatekeeperMemory.trusted_stores(path):
                stale = Context.from_dict(agent, saved, serializer=JsonSerializer())
                with pytest.raises(ValueError, match=r"revision 3 is only in the store.*from_dict\(data, store="):
                    await agent.run(user_msg=REDIS_2[0], ctx=stale)
        return await restored.store.get("memory")

    restored = asyncio.run(scenario())
    assert [m.content for m in restored.get_all()] == [*REDIS_1, *ESPRESSO]
    on_disk = GatekeeperMemory.from_defaults(store=path, session_id="s1")
    assert [m.content for m in on_disk.get_all()] == [*REDIS_1, *ESPRESSO]  # nothing of the refused run
    for opened in (on_disk, restored, memory):
        opened.close()


def test_a_context_reused_after_the_caller_wrote_between_runs_stays_on_the_live_session() -> None:
    """A Context reused after the caller's memory changed it stays on the live session: each run
    serialises the Context's memory just before rebuilding it, so its log is the session's."""
    memory = GatekeeperMemory.from_defaults(token_limit=2000, session_id="s1")
    agent = FunctionAgent(tools=[lookup], llm=function_calling_llm(CallRecorder([REDIS_1[1], ESPRESSO[1]])))

    async def scenario() -> GatekeeperMemory:
        ctx = Context(agent)
        await agent.run(user_msg=REDIS_1[0], memory=memory, ctx=ctx)
        memory.put(ChatMessage(role="user", content="Be brief."))  # the caller writes between runs
        await agent.run(user_msg=ESPRESSO[0], ctx=ctx)
        return await ctx.store.get("memory")

    in_context = asyncio.run(scenario())
    assert in_context.store is memory.store  # rebuilt from the Context's JSON, on the live session
    assert [m.content for m in memory.get_all()] == [*REDIS_1, "Be brief.", *ESPRESSO]


@pytest.mark.parametrize("limit", [60, 2000])
def test_after_a_multi_agent_handoff_the_next_agent_gets_the_question(limit: int) -> None:
    """AgentWorkflow writes the router's handoff call and its result into memory, then asks
    get(input=question): that turn is the agent's tool loop, the current turn, sent whole to the
    next agent (at 60 tokens it is over the limit, and returned all the same, as ChatMemoryBuffer
    returns it), never gated away."""
    from llama_index.core.agent.workflow import AgentWorkflow

    question = "Summarise our Redis lock TTL advice for the team wiki."
    recorder = CallRecorder([tool_call("h1", "handoff", to_agent="writer", reason="the user wants a wiki page written"),
                             "Here is the wiki page."])
    llm = function_calling_llm(recorder)
    router = FunctionAgent(name="router", description="routes", llm=llm, tools=[], can_handoff_to=["writer"],
                           system_prompt="Route.")
    writer = FunctionAgent(name="writer", description="writes wiki pages", llm=llm, tools=[], system_prompt="Write.")
    workflow = AgentWorkflow(agents=[router, writer], root_agent="router")
    memory = GatekeeperMemory.from_defaults(token_limit=limit)

    async def run() -> None:
        await workflow.run(user_msg=question, memory=memory)

    asyncio.run(run())
    sent = recorder.calls[1]  # the writer's call
    assert [m.role.value for m in sent] == ["system", "user", "assistant", "tool"]
    assert sent[0].content == "Write." and sent[1].content == question
    assert sent[2].blocks[0].tool_kwargs["to_agent"] == "writer"


ALTERNATING = [("How long should a Redis lock TTL be?", "Longer than the longest job holding the lock."),
               ("Best espresso grind for a moka pot?", "Medium fine, a little coarser than espresso."),
               ("How should the Redis lock renewal watchdog work?", "Extend the lock TTL from a watchdog thread."),
               ("Which beans for a moka pot?", "A medium roast works well.")]


@pytest.mark.parametrize("kind", ["function_agent", "react_agent"])
def test_a_return_to_an_earlier_topic_leaves_the_other_topic_out_whatever_the_agent(kind: str) -> None:
    """ReActAgent stores each answer inside the same "Thought: ... Answer:" scaffold: read as
    words, it tied every topic to every other and the moka-pot turn rode along."""
    memory = GatekeeperMemory.from_defaults(token_limit=3000)
    questions = [q for q, _ in ALTERNATING] + ["What Redis lock TTL for a 30 second job?"]
    answers = [a for _, a in ALTERNATING] + ["ok"]
    if kind == "react_agent":
        llm = ScriptedLLM(answers, wrap=react)
        agent: Any = ReActAgent(tools=[lookup], llm=llm)
    else:
        recorder = CallRecorder(answers)
        agent = FunctionAgent(tools=[lookup], llm=function_calling_llm(recorder))

    async def run() -> None:
        for question in questions:
            await agent.run(user_msg=question, memory=memory)

    asyncio.run(run())
    last = llm.prompts[-1] if kind == "react_agent" else recorder.text(-1)
    assert "Extend the lock TTL from a watchdog thread." in last  # the topic returned to
    assert "moka" not in last.replace(questions[-1], "")

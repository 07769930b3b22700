"""LangChain chat models as editing models; the Gemini default fails fast without a key."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage

from context_gatekeeper import EditError, ModelUnavailableError, Replace, Transcript
from context_gatekeeper.integration import is_unavailable_error
from context_gatekeeper.editing.format import ideal_patch_reply
from lc_support import FailsOnce
from langchain_gatekeeper import DEFAULT_MODEL, LangChainEditModel, default_chat_model, resolve_edit_model


def fake(*replies: str) -> GenericFakeChatModel:
    return GenericFakeChatModel(messages=iter([AIMessage(r) for r in replies]))


class StructuredFake(GenericFakeChatModel):
    """A fake that implements structured output: returns the scripted object."""

    objects: list = []
    schemas: list = []

    def with_structured_output(self, schema: Any, **kwargs: Any):  # type: ignore[override]
        from langchain_core.runnables import RunnableLambda

        self.schemas.append(schema)
        return RunnableLambda(lambda _messages: self.objects.pop(0))


def test_missing_key_is_a_clear_error(monkeypatch) -> None:
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    with pytest.raises(ModelUnavailableError, match="GOOGLE_API_KEY") as info:
        resolve_edit_model()
    assert "model=" in str(info.value)


def test_the_default_is_gemini_with_a_timeout_and_few_retries(monkeypatch) -> None:
    monkeypatch.setenv("GOOGLE_API_KEY", "not-a-real-key")
    model = default_chat_model()
    assert model.model.endswith(DEFAULT_MODEL) and model.timeout == 30.0 and model.max_retries == 1


def test_model_and_llm_are_aliases() -> None:
    model = fake("x")
    assert resolve_edit_model(llm=model).model is model
    assert resolve_edit_model(model=model).model is model
    with pytest.raises(TypeError, match="not both"):
        resolve_edit_model(model=model, llm=fake("y"))
    plain = lambda messages: "x"  # noqa: E731
    assert resolve_edit_model(model=plain).wrapped is plain  # the core's EditModel, wrapped once


def edits_sync_and_async(model_for: Callable[[str], Any]) -> None:
    """Edit a transcript's question twice, with ``edit`` then ``aedit``, through the model
    ``model_for(reply)`` builds around a scripted chat model answering ``reply``."""
    t = Transcript("lc")
    t.append(user="Ireland's GDP in 2021?", assistant="About 504 billion USD.")
    target = t.messages[0]
    t.edit("Iceland, 2022", model=model_for(ideal_patch_reply(t.messages, [Replace(target.id, "Iceland's GDP in 2022?")])))
    assert t.messages[0].content == "Iceland's GDP in 2022?"
    reply2 = ideal_patch_reply(t.messages, [Replace(target.id, "Iceland's GDP in 2023?")])
    asyncio.run(t.aedit("2023", model=model_for(reply2)))
    assert t.messages[0].content == "Iceland's GDP in 2023?"


def test_a_fake_chat_model_edits_a_transcript_sync_and_async() -> None:
    edit_model = LangChainEditModel(fake("{}"))
    assert not edit_model.supports_json_schema and edit_model.name == "GenericFakeChatModel"
    edits_sync_and_async(lambda reply: LangChainEditModel(fake(reply)))


def test_structured_output_is_used_when_the_model_has_it() -> None:
    model = StructuredFake(messages=iter([]))
    model.objects = [{"operations": []}]
    edit_model = LangChainEditModel(model)
    assert edit_model.supports_json_schema
    assert edit_model.complete([{"role": "user", "content": "x"}], json_schema={"type": "object"}) == {"operations": []}
    assert model.schemas == [{"type": "object"}]


class _Broken(GenericFakeChatModel):
    """A chat model whose every call fails (a provider that is down)."""

    def _generate(self, *args: Any, **kwargs: Any) -> Any:
        raise ValueError("primary model is down")


@pytest.mark.parametrize(("wrap", "name"), [
    (lambda m: m.bind(stop=["\n\n\n"]), "GenericFakeChatModel"),
    (lambda m: m.with_retry(stop_after_attempt=2), "GenericFakeChatModel"),
    (lambda m: m.with_config(tags=["edit"]), "GenericFakeChatModel"),
    (lambda m: _Broken(messages=iter([])).with_fallbacks([m]), "_Broken"),  # the fallback answers: the wrapper is used
], ids=["bind", "with_retry", "with_config", "with_fallbacks"])
def test_a_wrapped_chat_model_edits_through_its_wrapper_sync_and_async(wrap: Any, name: str) -> None:
    from context_gatekeeper.editing.models import as_edit_model

    runnable = wrap(fake("{}"))
    for resolved in (resolve_edit_model(runnable), as_edit_model(runnable), LangChainEditModel(runnable)):
        assert type(resolved) is LangChainEditModel and resolved.wrapped is runnable
        assert resolved.name == name and not resolved.supports_json_schema  # named by the (first) chat model
    edits_sync_and_async(lambda reply: wrap(fake(reply)))  # the runnable itself, resolved by edit()


def test_a_chain_answering_text_is_an_editing_model_and_structured_output_needs_a_chat_model() -> None:
    from langchain_core.output_parsers import StrOutputParser

    from context_gatekeeper import InvalidInputError

    chain = fake('{"operations": []}') | StrOutputParser()
    assert LangChainEditModel(chain).complete([{"role": "user", "content": "x"}]) == '{"operations": []}'
    with pytest.raises(InvalidInputError, match="structured=True needs a chat model"):
        LangChainEditModel(StructuredFake(messages=iter([])).with_retry(), structured=True)


def test_not_a_chat_model_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        LangChainEditModel(object())  # type: ignore[arg-type]


# -- the default model's failures, through the real client against a local server ----------------
class _Failing(BaseHTTPRequestHandler):
    """Answers every request with one HTTP error, as the Gemini API does; counts them."""

    requests = 0
    status = 500
    message = ""

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        type(self).requests += 1
        self.rfile.read(int(self.headers.get("content-length", 0)))
        data = json.dumps({"error": {"code": self.status, "message": self.message, "status": "ERROR"}}).encode()
        self.send_response(self.status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def failing_gemini(monkeypatch: pytest.MonkeyPatch) -> Iterator[type[_Failing]]:
    handler = type("Handler", (_Failing,), {"requests": 0})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    monkeypatch.setenv("GOOGLE_GEMINI_BASE_URL", f"http://127.0.0.1:{server.server_address[1]}")
    monkeypatch.setenv("GOOGLE_API_KEY", "not-a-real-key")
    yield handler
    server.shutdown()
    server.server_close()
    thread.join()


@pytest.mark.parametrize(("status", "message"), [
    (400, "API key not valid. Please pass a valid API key."),
    (401, "Request had invalid authentication credentials."),
    (403, "The caller does not have permission"),
    (503, "The model is overloaded. Please try again later."),
])
def test_a_rejected_key_or_a_server_failure_of_the_default_model_is_unavailable_after_one_request(
    failing_gemini: type[_Failing], status: int, message: str
) -> None:
    failing_gemini.status, failing_gemini.message = status, message
    t = Transcript("lc-down")
    t.append(user="Trip to Ireland?", assistant="Dublin first.")
    before = [(m.id, m.content) for m in t.messages], t.head
    model = LangChainEditModel(default_chat_model(timeout=5, max_retries=0))
    assert model.supports_json_schema  # the structured call fails; no text call follows it
    with pytest.raises(ModelUnavailableError, match="could not be used"):
        t.edit("Iceland, not Ireland", model=model)
    assert failing_gemini.requests == 1
    assert ([(m.id, m.content) for m in t.messages], t.head) == before


def test_a_rejected_request_of_the_default_model_stays_an_edit_error(failing_gemini: type[_Failing]) -> None:
    failing_gemini.status, failing_gemini.message = 400, "Invalid JSON payload received."
    t = Transcript("lc-bad-request")
    t.append(user="Trip to Ireland?", assistant="Dublin first.")
    with pytest.raises(EditError, match="failed"):
        t.edit("Iceland, not Ireland", model=LangChainEditModel(default_chat_model(timeout=5, max_retries=0)))


def test_langchain_core_model_errors_for_a_key_a_permission_or_a_server_are_unavailable() -> None:
    errors = pytest.importorskip("langchain_core.exceptions")
    for name in ("ModelAuthenticationError", "ModelPermissionDeniedError", "ModelAPIError"):
        if hasattr(errors, name):  # langchain-core 1.x added them over its minor versions
            assert is_unavailable_error(getattr(errors, name)("x")), name
    if hasattr(errors, "ModelInvalidRequestError"):
        assert not is_unavailable_error(errors.ModelInvalidRequestError("bad schema"))


# -- streaming (the web chat's answers) ------------------------------------------------------
QUESTION = [{"role": "user", "content": "What is the capital of Iceland?"}]


def test_a_chat_model_streams_its_text_never_its_chunk_objects() -> None:
    from langchain_core.language_models.fake_chat_models import FakeListChatModel

    for chat_model in (FakeListChatModel(responses=["Reykjavik is the capital."]), fake("Reykjavik is the capital.")):
        model = LangChainEditModel(chat_model)
        assert model.streams
        pieces = list(model.stream_text(QUESTION))
        assert len(pieces) > 1 and all(isinstance(p, str) for p in pieces), pieces
        assert "".join(pieces) == "Reykjavik is the capital."


class _CutOff(GenericFakeChatModel):
    """Streams two chunks; the last one's metadata says the output limit was hit."""

    def _stream(self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any) -> Iterator[Any]:
        from langchain_core.messages import AIMessageChunk
        from langchain_core.outputs import ChatGenerationChunk

        yield ChatGenerationChunk(message=AIMessageChunk(content="Reykjavik is "))
        yield ChatGenerationChunk(message=AIMessageChunk(content="the", response_metadata={"finish_reason": "length"}))


def test_a_streamed_chunk_finish_reason_is_checked_as_a_whole_replys_is() -> None:
    from context_gatekeeper import TruncatedReplyError

    model = LangChainEditModel(_CutOff(messages=iter([])))
    with pytest.raises(TruncatedReplyError) as raised:
        list(model.stream_text(QUESTION))
    assert raised.value.partial == "Reykjavik is the"


def test_a_chain_ending_in_a_string_parser_streams_its_text() -> None:
    from langchain_core.output_parsers import StrOutputParser

    model = LangChainEditModel(fake("one two three") | StrOutputParser())
    assert "".join(model.stream_text(QUESTION)) == "one two three"


def test_an_editing_chat_model_inside_an_agent_run_is_left_out_of_its_message_stream() -> None:
    """The middleware's /edit route calls the editing model inside the agent's run, where it
    joins the run's callbacks: LangGraph's stream_mode="messages" showed its patch JSON as the
    assistant's reply.  Its calls are tagged nostream (sync and async), so the stream holds the
    route's confirmation alone."""
    from langchain.agents import create_agent
    from langchain_core.messages import HumanMessage
    from langgraph.checkpoint.memory import InMemorySaver

    from langchain_gatekeeper import GatekeeperMiddleware

    editor = GenericFakeChatModel(messages=iter([AIMessage('{"operations": []}') for _ in range(2)]))
    agent = create_agent(fake("Dublin first, then Galway."), [], middleware=[GatekeeperMiddleware(model=editor)],
                         checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "t"}}
    agent.invoke({"messages": [HumanMessage("Plan a trip to Ireland.")]}, config)

    def edit() -> dict[str, Any]:  # a new message each run (LangGraph gives a message its id in place)
        return {"messages": [HumanMessage("/edit Iceland, not Ireland")]}

    async def streamed_async() -> list[str]:
        return [chunk.text async for chunk, _meta in agent.astream(edit(), config, stream_mode="messages")]

    for texts in ([chunk.text for chunk, _meta in agent.stream(edit(), config, stream_mode="messages")],
                  asyncio.run(streamed_async())):
        assert texts == ["Nothing to change: the conversation already says that."], texts


def test_the_editors_events_in_astream_events_carry_its_name_and_tag_so_a_ui_can_leave_them_out() -> None:
    """astream_events does not read LangGraph's nostream tag: the editor's patch JSON streams
    there.  Its runs carry the tag and the run name gatekeeper_editor, which a UI filters on."""
    from langchain.agents import create_agent
    from langchain_core.messages import HumanMessage
    from langgraph.checkpoint.memory import InMemorySaver

    from langchain_gatekeeper import GatekeeperMiddleware
    from langchain_gatekeeper.models import EDITOR_RUN_NAME

    editor = GenericFakeChatModel(messages=iter([AIMessage('{"operations": []}')]))
    agent = create_agent(fake("Dublin first, then Galway."), [], middleware=[GatekeeperMiddleware(model=editor)],
                         checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "t"}}
    agent.invoke({"messages": [HumanMessage("Plan a trip to Ireland.")]}, config)

    async def events() -> list[Any]:
        edit = {"messages": [HumanMessage("/edit Iceland, not Ireland")]}
        return [e async for e in agent.astream_events(edit, config, version="v2") if e["event"].startswith("on_chat_model")]

    seen = asyncio.run(events())
    streamed = "".join(e["data"]["chunk"].text for e in seen if e["event"] == "on_chat_model_stream")
    assert EDITOR_RUN_NAME == "gatekeeper_editor" and streamed == '{"operations": []}', "the editor's events are there"
    assert all(e["name"] == "gatekeeper_editor" and "nostream" in e["tags"] for e in seen), seen
    shown = [e for e in seen if "nostream" not in e["tags"] and e["name"] != "gatekeeper_editor"]
    assert shown == [], "the UI's filter leaves every editor event out"


def _fails_once(answer: str = "Reykjavik is the capital.") -> FailsOnce:
    return FailsOnce(messages=iter([AIMessage(answer)] * 3))


def test_a_model_with_retry_answers_in_one_piece_through_its_retries() -> None:
    """LangChain's RunnableRetry retries invoke, not stream: a streamed answer from a
    .with_retry() model failed on one transient error.  Such a model does not stream (also
    wrapped further, in a chain, or behind fallbacks); the web chat's answer comes through
    invoke, retried."""
    from langchain_core.output_parsers import StrOutputParser

    from context_gatekeeper.chat.session import chat_reply_pieces

    def retried(model: Any) -> Any:
        return model.with_retry(stop_after_attempt=3, wait_exponential_jitter=False)

    wrappings: list[Callable[[FailsOnce], Any]] = [
        retried,
        lambda m: retried(m.bind(stop=["never"])),
        lambda m: retried(m).with_config(tags=["mine"]),
        lambda m: retried(m) | StrOutputParser(),
        lambda m: retried(m).with_fallbacks([fake("backup")]),
    ]
    for wrap in wrappings:
        base = _fails_once()
        model = LangChainEditModel(wrap(base))
        assert not model.streams, wrap(base)
        assert list(chat_reply_pieces(model, QUESTION)) == ["Reykjavik is the capital."]
        assert base.calls == 2, "the failed call was retried"
    assert LangChainEditModel(fake("x").with_config(tags=["mine"])).streams, "a wrapper without retries streams"


def test_a_model_with_fallbacks_streams_and_falls_back_before_the_first_chunk() -> None:
    """RunnableWithFallbacks.stream moves to the next model when one fails before its first
    chunk, so a .with_fallbacks() model keeps streaming."""
    primary = _fails_once("never shown")
    model = LangChainEditModel(primary.with_fallbacks([fake("Reykjavik is the capital.")]))
    assert model.streams
    pieces = list(model.stream_text(QUESTION))
    assert len(pieces) > 1 and "".join(pieces) == "Reykjavik is the capital.", pieces
    assert primary.calls == 1

"""The model protocol (docs/architecture.md#how-to-add-a-model) and the scripted fake model users test with."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading

import pytest

from context_gatekeeper.errors import EditError, GatekeeperError, InvalidTypeError, ModelUnavailableError
from context_gatekeeper.editing.compute import compute_edit
from context_gatekeeper.editing.models import EditModel, as_edit_model, model_name
from context_gatekeeper.records.messages import Message
from context_gatekeeper.testing import RecordedCall, ScriptedModel

HELLO = [{"role": "user", "content": "hello"}]


# -- normalisation -------------------------------------------------------------------------
def test_plain_function_is_a_model():
    def echo(messages):
        return messages[-1]["content"]

    model = as_edit_model(echo)
    assert isinstance(model, EditModel)
    assert model.name == "echo"
    assert model.supports_json_schema is False
    assert model.complete(HELLO) == "hello"
    assert asyncio.run(model.acomplete(HELLO)) == "hello"


def test_edit_model_is_returned_as_is():
    model = as_edit_model(lambda m: "x")
    assert as_edit_model(model) is model


@pytest.mark.parametrize(
    "obj, expected",
    [
        (type("M", (), {"name": "gemini-2.5-flash", "complete": lambda self, m: ""})(), "gemini-2.5-flash"),
        (type("M", (), {"model": "gpt-x", "complete": lambda self, m: ""})(), "gpt-x"),
        (type("M", (), {"model_name": "claude", "complete": lambda self, m: ""})(), "claude"),
        (type("Anon", (), {"complete": lambda self, m: ""})(), "Anon"),
    ],
)
def test_name_comes_from_name_model_or_class(obj, expected):
    assert as_edit_model(obj).name == expected
    assert model_name(obj) == expected


def test_object_with_complete_is_preferred_over_call():
    class Both:
        def __call__(self, messages):
            return "call"

        def complete(self, messages):
            return "complete"

    assert as_edit_model(Both()).complete(HELLO) == "complete"


def test_async_method_is_used_by_acomplete_and_sync_by_complete():
    class Dual:
        def complete(self, messages):
            return "sync"

        async def acomplete(self, messages):
            return "async"

    model = as_edit_model(Dual())
    assert model.complete(HELLO) == "sync"
    assert asyncio.run(model.acomplete(HELLO)) == "async"


def test_async_only_model_works_from_sync_code_without_a_loop():
    async def fn(messages):
        return "from async"

    model = as_edit_model(fn)
    assert model.complete(HELLO) == "from async"
    assert asyncio.run(model.acomplete(HELLO)) == "from async"


def test_async_only_model_called_sync_inside_a_running_loop_says_what_to_do():
    class OnlyAsync:
        async def acomplete(self, messages):
            return "x"

    model = as_edit_model(OnlyAsync())

    async def main():
        with pytest.raises(TypeError, match="async API"):
            model.complete(HELLO)

    asyncio.run(main())


def test_sync_model_does_not_block_the_event_loop():
    loop_ran = threading.Event()

    def waits_for_the_loop(messages):
        # returns only once the event loop has run another task meanwhile (a blocked loop never would)
        assert loop_ran.wait(30), "the event loop was blocked while the model ran"
        return "done"

    model = as_edit_model(waits_for_the_loop)

    async def other_task():
        await asyncio.sleep(0)
        loop_ran.set()

    async def main():
        reply, _ = await asyncio.gather(model.acomplete(HELLO), other_task())
        return reply

    assert asyncio.run(main()) == "done"


@pytest.mark.parametrize("bad", [None, 42, "a string", object()])
def test_unusable_objects_are_type_errors(bad):
    with pytest.raises(TypeError, match="callable fn\\(messages\\)"):
        as_edit_model(bad)


def test_a_class_instead_of_an_instance_is_a_type_error():
    with pytest.raises(TypeError, match="not the class ScriptedModel"):
        as_edit_model(ScriptedModel)


def test_framework_objects_get_an_adapter_hint():
    class ChatModelLike:
        def invoke(self, messages):
            return "x"

    with pytest.raises(TypeError, match="adapter"):
        as_edit_model(ChatModelLike())


PATCH = '{"operations": [{"op": "replace", "id": "1", "content": "What was Iceland\'s GDP in 2021?"}]}'


def _recording_llm():
    """A LlamaIndex LLM whose complete() records its prompt (a string, as LlamaIndex calls it)."""
    from typing import Any

    from llama_index.core.llms import CompletionResponse, CustomLLM, LLMMetadata
    from llama_index.core.llms.callbacks import llm_completion_callback

    class Recording(CustomLLM):
        prompts: list = []

        @property
        def metadata(self) -> LLMMetadata:
            return LLMMetadata()

        @llm_completion_callback()
        def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
            self.prompts.append(prompt)
            return CompletionResponse(text=PATCH)

        def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
            raise NotImplementedError

    return Recording()


@pytest.mark.parametrize("framework", ["langchain", "llamaindex"])
def test_a_framework_model_passed_to_the_core_edit_is_wrapped_by_its_adapter(framework):
    """The README's core edit takes a LangChain chat model or a LlamaIndex LLM as they are: a chat
    model was refused, and an LLM's complete(prompt: str) was handed the list of messages."""
    from context_gatekeeper import Transcript

    if framework == "langchain":
        from langchain_core.language_models.fake_chat_models import FakeListChatModel

        from langchain_gatekeeper import LangChainEditModel as Wrapper

        model = FakeListChatModel(responses=[PATCH, PATCH])
    else:
        from llamaindex_gatekeeper import LlamaIndexEditModel as Wrapper

        model = _recording_llm()
    assert isinstance(as_edit_model(model), Wrapper)
    t = Transcript("s")
    t.append(user="What was Ireland's GDP in 2021?", assistant="About 500 billion dollars.")
    t.edit("It was Iceland, not Ireland", model=model)
    assert [m.content for m in t.messages] == ["What was Iceland's GDP in 2021?", "About 500 billion dollars."]
    if framework == "llamaindex":
        assert all(isinstance(prompt, str) for prompt in model.prompts)


def test_model_input_is_a_copy():
    def mutating(messages):
        messages[0]["content"] = "mutated"
        messages.append({"role": "user", "content": "extra"})
        return "ok"

    sent = [{"role": "user", "content": "original"}]
    as_edit_model(mutating).complete(sent)
    assert sent == [{"role": "user", "content": "original"}]


# -- replies -------------------------------------------------------------------------------
def test_reply_objects_with_content_or_text_are_reduced_to_text():
    class AIMessage:
        content = "from content"

    class Blocks:
        content = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]

    class Completion:
        text = "from text"

    class ChatResponse:
        class message:  # noqa: N801 - mimics LlamaIndex's attribute
            content = "from message"

    for reply, expected in [
        (AIMessage(), "from content"),
        (Blocks(), "ab"),
        (Completion(), "from text"),
        (ChatResponse(), "from message"),
    ]:
        assert as_edit_model(lambda m, r=reply: r).complete(HELLO) == expected


@pytest.mark.parametrize("reply", [None, 3, 2.5])
def test_non_text_reply_is_an_edit_error(reply):
    with pytest.raises(EditError, match="not text"):
        as_edit_model(lambda m: reply).complete(HELLO)


def test_json_schema_is_passed_only_to_models_that_advertise_it():
    plain = ScriptedModel(["a"])
    structured = ScriptedModel([{"k": 1}], structured=True)
    schema = {"type": "object"}
    assert as_edit_model(plain).complete(HELLO, json_schema=schema) == "a"
    assert plain.calls[0].json_schema is None
    assert as_edit_model(structured).complete(HELLO, json_schema=schema) == {"k": 1}
    assert structured.calls[0].json_schema == schema


def test_function_may_advertise_structured_output():
    seen = {}

    def fn(messages, json_schema=None):
        seen["schema"] = json_schema
        return {"operations": []}

    fn.supports_json_schema = True
    model = as_edit_model(fn)
    assert model.supports_json_schema
    assert model.complete(HELLO, json_schema={"type": "object"}) == {"operations": []}
    assert seen["schema"] == {"type": "object"}


# -- failures ------------------------------------------------------------------------------
class ReadTimeout(Exception):
    """Named like httpx's timeout, which is not an OSError."""


class APIConnectionError(Exception):
    """Named like openai's connection error."""


@pytest.mark.parametrize(
    "exc",
    [TimeoutError("slow"), ConnectionError("down"), OSError("no route"), asyncio.TimeoutError(), ReadTimeout("t"),
     APIConnectionError("c")],
)
def test_network_failures_become_model_unavailable(exc):
    model = as_edit_model(ScriptedModel([exc], name="flaky"))
    with pytest.raises(ModelUnavailableError, match="'flaky' could not be used") as info:
        model.complete(HELLO)
    assert info.value.__cause__ is exc
    assert "try again" in str(info.value)


class ProviderError(Exception):
    """An SDK's HTTP error: a status code, and the provider's message."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


class StatusCodeError(Exception):
    """An SDK's HTTP error that names its status ``status_code`` (openai, anthropic)."""

    def __init__(self, status_code: int) -> None:
        super().__init__(f"HTTP {status_code}")
        self.status_code = status_code


def _wrapped(cause: Exception) -> Exception:
    """A framework's own error raised from the provider's (as langchain-google-genai does)."""
    try:
        try:
            raise cause
        except Exception as exc:
            raise RuntimeError("Error calling model 'm' (INVALID_ARGUMENT)") from exc
    except RuntimeError as framework_error:
        return framework_error


@pytest.mark.parametrize(
    "exc",
    [ProviderError(401, "Request had invalid authentication credentials."), ProviderError(403, "denied"),
     ProviderError(429, "quota"), ProviderError(503, "overloaded"), StatusCodeError(500),
     ProviderError(400, "API key not valid. Please pass a valid API key."),
     _wrapped(ProviderError(400, "API key not valid. Please pass a valid API key.")),
     _wrapped(ProviderError(503, "overloaded"))],
    ids=["401", "403", "429", "503", "status_code-500", "400-api-key", "wrapped-400-api-key", "wrapped-503"],
)
def test_a_rejected_key_or_a_server_failure_is_unavailable_and_asked_once(exc):
    model = ScriptedModel([exc])
    with pytest.raises(ModelUnavailableError, match="could not be used") as info:
        compute_edit([Message("u", "user", "Ireland?"), Message("a", "assistant", "Dublin.")], "Iceland", model)
    assert info.value.__cause__ is exc and len(model.calls) == 1


@pytest.mark.parametrize("exc", [ProviderError(400, "bad schema"), ProviderError(404, "no such model"),
                                 _wrapped(ProviderError(400, "bad schema"))])
def test_a_rejected_request_is_an_edit_error(exc):
    with pytest.raises(EditError, match="failed"):
        as_edit_model(ScriptedModel([exc])).complete(HELLO)


@pytest.mark.parametrize("exc", [ValueError("bad"), KeyError("k"), RuntimeError("boom"), TypeError("sig")])
def test_other_failures_become_edit_errors(exc):
    model = as_edit_model(ScriptedModel([exc]))
    with pytest.raises(EditError, match="failed") as info:
        model.complete(HELLO)
    assert info.value.__cause__ is exc
    assert "nothing was changed" in str(info.value)


def test_failures_map_alike_on_the_async_path():
    model = as_edit_model(ScriptedModel([TimeoutError(), ValueError("x")]))
    with pytest.raises(ModelUnavailableError):
        asyncio.run(model.acomplete(HELLO))
    with pytest.raises(EditError):
        asyncio.run(model.acomplete(HELLO))


def test_thread_fallback_maps_failures_too():
    def fails(messages):
        raise ConnectionError("reset")

    with pytest.raises(ModelUnavailableError):
        asyncio.run(as_edit_model(fails).acomplete(HELLO))


def test_library_errors_and_assertions_pass_through():
    own = ModelUnavailableError("set GOOGLE_API_KEY")
    model = as_edit_model(ScriptedModel([own, AssertionError("test check")]))
    with pytest.raises(ModelUnavailableError) as info:
        model.complete(HELLO)
    assert info.value is own
    with pytest.raises(AssertionError, match="test check"):
        model.complete(HELLO)
    assert issubclass(ModelUnavailableError, GatekeeperError)


# -- ScriptedModel -------------------------------------------------------------------------
def test_scripted_model_replies_in_order_and_records_calls():
    model = ScriptedModel(["one"]).enqueue("two", "three")
    assert model.remaining == 3
    assert model(HELLO) == "one"
    assert model.complete([{"role": "user", "content": "b"}]) == "two"
    assert asyncio.run(model.acomplete([{"role": "user", "content": "c"}])) == "three"
    assert [c[0]["content"] for c in model.calls] == ["hello", "b", "c"]
    assert isinstance(model.calls[0], RecordedCall) and model.calls[0] == HELLO
    assert model.calls[0].messages == HELLO and model.calls[0].text == "hello"
    assert model.remaining == 0


def test_scripted_model_records_a_deep_copy():
    model = ScriptedModel(["x"])
    sent = [{"role": "user", "content": "before"}]
    model(sent)
    sent[0]["content"] = "after"
    assert model.calls[0][0]["content"] == "before"


def test_running_out_of_replies_is_a_clear_assertion():
    model = ScriptedModel(["only"], name="m")
    model(HELLO)
    with pytest.raises(AssertionError, match="no reply left for call #2"):
        model(HELLO)
    assert len(model.calls) == 2


def test_scripted_exceptions_callables_and_objects():
    model = ScriptedModel(
        [
            ValueError("instance"),
            TimeoutError,
            lambda messages: messages[-1]["content"][::-1],
            {"a": 1},
            [1, 2],
        ]
    )
    with pytest.raises(ValueError, match="instance"):
        model(HELLO)
    with pytest.raises(TimeoutError):
        model(HELLO)
    assert model(HELLO) == "olleh"
    assert model(HELLO) == '{"a": 1}'  # not structured: objects come back as JSON text
    assert model(HELLO) == "[1, 2]"


def test_a_single_string_is_one_reply():
    model = ScriptedModel("whole reply")
    assert model.remaining == 1 and model(HELLO) == "whole reply"


def test_unusable_scripted_replies_fail_at_enqueue():
    with pytest.raises(TypeError, match="scripted reply"):
        ScriptedModel([3])
    with pytest.raises(TypeError, match="scripted reply"):
        ScriptedModel().enqueue(None)


def test_scripted_model_is_safe_across_threads():
    model = ScriptedModel([str(i) for i in range(200)])
    results = []

    def worker():
        for _ in range(50):
            results.append(model(HELLO))

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results, key=int) == [str(i) for i in range(200)]
    assert len(model.calls) == 200


# -- framework models: the adapters' declared wrappers -------------------------------------
def test_a_framework_model_is_wrapped_by_the_adapter_its_entry_point_declares():
    # a fresh interpreter, where only the core is imported: the core finds the adapter through
    # the installed entry points, never by importing it by name, and a plain callable loads nothing
    code = (
        "import sys\n"
        "from context_gatekeeper import resolve_model\n"
        "plain = resolve_model(lambda messages: '{}')\n"
        "before = sorted(m for m in ('langchain_gatekeeper', 'llamaindex_gatekeeper') if m in sys.modules)\n"
        "from langchain_core.language_models.fake_chat_models import FakeListChatModel\n"
        "wrapped = resolve_model(FakeListChatModel(responses=['{}']))\n"
        "print(before, type(wrapped).__module__, type(wrapped).__name__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["[]", "langchain_gatekeeper.models", "LangChainEditModel"]


def fake_declaration(name: str, value: str):
    from importlib.metadata import EntryPoint

    from context_gatekeeper.editing.models import MODEL_WRAPPERS_GROUP

    package, _, class_name = name.partition(":")
    return ((package + ".", class_name, EntryPoint(name=name, value=value, group=MODEL_WRAPPERS_GROUP)),)


def framework_model():
    """An object whose class looks like a framework's base model class."""
    base = type("BaseThing", (), {"__module__": "fakeframework.models", "__call__": lambda self, m: "{}"})
    return type("MyThing", (base,), {"__module__": "user_code"})()


def test_a_declared_wrapper_that_does_not_import_names_the_extra(monkeypatch):
    from context_gatekeeper.editing import models

    declared = fake_declaration("fakeframework:BaseThing", "no_such_adapter_module.models:Wrapper")
    monkeypatch.setattr(models, "_declared_wrappers", lambda: declared)
    with pytest.raises(InvalidTypeError, match="no_such_adapter_module.*pip install"):
        models.resolve_model(framework_model())


def test_a_declared_wrapper_that_is_not_an_edit_model_is_refused(monkeypatch):
    from context_gatekeeper.editing import models

    declared = fake_declaration("fakeframework:BaseThing", "collections:OrderedDict")
    monkeypatch.setattr(models, "_declared_wrappers", lambda: declared)
    with pytest.raises(InvalidTypeError, match="not an EditModel subclass"):
        models.resolve_model(framework_model())


def test_a_model_no_adapter_declares_is_used_as_a_callable(monkeypatch):
    from context_gatekeeper.editing import models

    monkeypatch.setattr(models, "_declared_wrappers", lambda: fake_declaration("otherframework:BaseThing", "x:Y"))
    assert models.resolve_model(framework_model()).complete([{"role": "user", "content": "hi"}]) == "{}"


# -- streaming (the web chat's answers) ----------------------------------------------------
class _Streaming:
    """A model offering the protocol's streaming call next to ``complete``."""

    def __init__(self, *pieces: object) -> None:
        self.pieces = pieces

    def complete(self, messages):
        return "".join(p if isinstance(p, str) else getattr(p, "content", "") for p in self.pieces)

    def stream_text(self, messages):
        for piece in self.pieces:
            if isinstance(piece, Exception):
                raise piece
            yield piece


def test_a_model_with_stream_text_streams_its_text_pieces():
    model = as_edit_model(_Streaming("Reyk", "javik", "", " is the capital."))
    assert model.streams
    assert list(model.stream_text(HELLO)) == ["Reyk", "javik", " is the capital."], "empty pieces are skipped"


class _FrameworkLike:
    """Has a ``stream`` that yields objects (as LangChain's and LlamaIndex's do): not the protocol."""

    def complete(self, messages):
        return "the answer"

    def stream(self, messages):
        yield object()


@pytest.mark.parametrize("model", [lambda m: "x", _FrameworkLike()], ids=["function", "stream-not-stream_text"])
def test_only_stream_text_streams_and_stream_text_of_another_model_says_to_call_complete(model):
    wrapped = as_edit_model(model)
    assert not wrapped.streams
    with pytest.raises(InvalidTypeError, match="does not stream"):
        wrapped.stream_text(HELLO)


def test_a_streamed_piece_that_is_not_text_is_an_edit_error():
    model = as_edit_model(_Streaming("ok ", {"content": "x"}))
    with pytest.raises(EditError, match="streamed dict, not text"):
        list(model.stream_text(HELLO))


def test_a_failure_mid_stream_is_mapped_as_complete_maps_it():
    model = as_edit_model(_Streaming("part ", ConnectionError("network is unreachable")))
    pieces = model.stream_text(HELLO)
    assert next(pieces) == "part "
    with pytest.raises(ModelUnavailableError, match="network is unreachable"):
        next(pieces)
    with pytest.raises(EditError, match="ValueError"):
        list(as_edit_model(_Streaming(ValueError("bad request"))).stream_text(HELLO))


@pytest.mark.parametrize("reason, error", [("length", "TruncatedReplyError"), ("SAFETY", "FilteredReplyError")])
def test_a_finish_reason_on_the_last_piece_is_checked_after_the_text_streamed(reason, error):
    from context_gatekeeper.editing.models import ModelReply

    model = as_edit_model(_Streaming("cut ", ModelReply("off", finish_reason=reason)))
    pieces = []
    with pytest.raises(EditError) as raised:
        for piece in model.stream_text(HELLO):
            pieces.append(piece)
    assert pieces == ["cut ", "off"] and type(raised.value).__name__ == error
    assert raised.value.partial == "cut off"
    assert list(as_edit_model(_Streaming("all ", ModelReply("done", finish_reason="stop"))).stream_text(HELLO)) == [
        "all ", "done"]

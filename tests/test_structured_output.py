"""Edits through structured output, and the fall-back to JSON text.

LangChain's default ``BaseChatModel.with_structured_output`` binds the answer's JSON
schema as a tool named by its ``title``; a schema without one fails before any call.
When the structured path is unsupported, raises or answers nothing, an edit asks the
same model for JSON text, within its two attempts.  Models here are LangChain's own
fakes (and a ``ChatGoogleGenerativeAI`` that is built but never called).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel, GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.utils.function_calling import convert_to_openai_tool

from context_gatekeeper import EditError, Message, Replace, Transcript
from context_gatekeeper.editing.format import ideal_patch_reply, output_schema
from context_gatekeeper.editing.compute import MAX_ATTEMPTS, acompute_edit, compute_edit
from context_gatekeeper.testing import ScriptedModel
from langchain_gatekeeper.models import LangChainEditModel

STATE = [Message("q", "user", "What was Ireland's GDP in 2021?"), Message("a", "assistant", "About 504 billion USD.")]
OPERATIONS = {"operations": [{"op": "replace", "id": "1", "content": "What was Iceland's GDP in 2021?"}]}
TEXT_REPLY = ideal_patch_reply(STATE, [Replace("q", "What was Iceland's GDP in 2021?")])


def tool_call(args: dict[str, Any], name: str = "edit_operations") -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": "call-1"}])


class ToolsOnlyChatModel(BaseChatModel):
    """A chat model that implements ``bind_tools`` only (``with_structured_output`` is
    BaseChatModel's): the shape of most community chat models."""

    replies: list = []
    calls: list = []  # (messages, the tools bound for the call)

    @property
    def _llm_type(self) -> str:
        return "tools-only"

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any):
        self.calls.append((messages, kwargs.get("tools")))
        return ChatResult(generations=[ChatGeneration(message=self.replies.pop(0))])

    def bind_tools(self, tools: Any, *, tool_choice: Any = None, **kwargs: Any):  # type: ignore[override]
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], tool_choice=tool_choice)


class GenericWithTools(GenericFakeChatModel):
    """LangChain's GenericFakeChatModel with tool binding (as LangChain's own tests use it)."""

    def bind_tools(self, tools: Any, **kwargs: Any):  # type: ignore[override]
        return self


class ListWithTools(FakeMessagesListChatModel):
    """LangChain's FakeMessagesListChatModel with tool binding."""

    def bind_tools(self, tools: Any, **kwargs: Any):  # type: ignore[override]
        return self


class NoStructuredOutput(GenericFakeChatModel):
    """A model whose with_structured_output says it is not implemented."""

    def with_structured_output(self, schema: Any, **kwargs: Any):  # type: ignore[override]
        raise NotImplementedError("with_structured_output is not implemented for this model.")


@pytest.mark.parametrize("strategy", ["patch", "rewrite"])
def test_schemas_have_a_title_a_description_and_described_fields(strategy: str) -> None:
    schema = output_schema(strategy)
    assert schema["title"].isidentifier() and schema["description"]
    tool = convert_to_openai_tool(schema)  # what BaseChatModel.with_structured_output does with it
    assert tool["function"]["name"] == schema["title"]
    (items,) = schema["properties"].values()
    assert items["description"]
    for field in items["items"]["properties"].values():
        assert field["description"]


def test_a_model_implementing_only_bind_tools_edits_through_its_tool_call() -> None:
    model = ToolsOnlyChatModel(replies=[tool_call(OPERATIONS)], calls=[])
    result = compute_edit(STATE, "Iceland, not Ireland", LangChainEditModel(model))
    assert [(c.before.id, c.after.content) for c in result.changes] == [("q", "What was Iceland's GDP in 2021?")]
    assert result.attempts == 1 and len(model.calls) == 1
    ((_, tools),) = model.calls
    assert tools[0]["function"]["name"] == "edit_operations" and tools[0]["function"]["description"]


def test_an_empty_structured_answer_falls_back_to_text_within_two_calls() -> None:
    model = ToolsOnlyChatModel(replies=[AIMessage(""), AIMessage(TEXT_REPLY)], calls=[])
    result = compute_edit(STATE, "Iceland, not Ireland", LangChainEditModel(model))
    assert result.changes[0].after.content == "What was Iceland's GDP in 2021?"
    assert result.attempts == 2 and result.raw_outputs == ("", TEXT_REPLY)
    assert [tools is not None for _, tools in model.calls] == [True, False]  # then asked for text


def test_a_fallback_never_gives_the_model_a_third_try() -> None:
    model = ToolsOnlyChatModel(replies=[AIMessage(""), AIMessage("no JSON here"), AIMessage(TEXT_REPLY)], calls=[])
    with pytest.raises(EditError, match=f"after {MAX_ATTEMPTS} attempts") as info:
        compute_edit(STATE, "Iceland, not Ireland", LangChainEditModel(model))
    assert len(model.calls) == MAX_ATTEMPTS and "structured output failed" in str(info.value)


def test_a_model_call_that_raises_under_structured_output_is_retried_as_text() -> None:
    class Rejects(ToolsOnlyChatModel):
        def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any):
            if kwargs.get("tools"):
                self.calls.append((messages, kwargs["tools"]))
                raise ValueError("400 INVALID_ARGUMENT: schema not supported")
            return super()._generate(messages, stop, run_manager, **kwargs)

    model = Rejects(replies=[AIMessage(TEXT_REPLY)], calls=[])
    result = compute_edit(STATE, "Iceland, not Ireland", LangChainEditModel(model))
    assert result.changed and result.attempts == 2 and len(model.calls) == 2


def test_generic_fake_chat_model_with_tools_edits_a_transcript() -> None:
    t = Transcript("generic")
    t.append(user="What was Ireland's GDP in 2021?", assistant="About 504 billion USD.")
    model = GenericWithTools(messages=iter([tool_call(OPERATIONS)]))
    revision = t.edit("Iceland, not Ireland", model=LangChainEditModel(model))
    assert t.messages[0].content == "What was Iceland's GDP in 2021?" and revision.kind == "edit"


def test_generic_fake_chat_model_without_tools_is_asked_for_text_in_the_same_attempt() -> None:
    model = LangChainEditModel(GenericFakeChatModel(messages=iter([AIMessage(TEXT_REPLY)])), structured=True)
    result = compute_edit(STATE, "Iceland, not Ireland", model)
    assert result.changed and result.attempts == 1 and result.raw_outputs == (TEXT_REPLY,)


def test_fake_messages_list_chat_model_with_tools_sync_and_async() -> None:
    model = ListWithTools(responses=[tool_call(OPERATIONS)])
    assert compute_edit(STATE, "Iceland", LangChainEditModel(model)).attempts == 1
    empty_then_text = ListWithTools(responses=[AIMessage(""), AIMessage(TEXT_REPLY)])
    result = asyncio.run(acompute_edit(STATE, "Iceland", LangChainEditModel(empty_then_text)))
    assert result.changed and result.attempts == 2


def test_with_structured_output_raising_not_implemented_costs_no_attempt() -> None:
    model = NoStructuredOutput(messages=iter([AIMessage(TEXT_REPLY)]))
    edit_model = LangChainEditModel(model)
    assert edit_model.supports_json_schema  # it overrides with_structured_output ... to refuse
    result = compute_edit(STATE, "Iceland, not Ireland", edit_model)
    assert result.changed and result.attempts == 1
    async_model = NoStructuredOutput(messages=iter([AIMessage(TEXT_REPLY)]))
    assert asyncio.run(acompute_edit(STATE, "Iceland", LangChainEditModel(async_model))).attempts == 1


def test_core_models_fall_back_too() -> None:
    """A core-protocol model advertising structured output that fails under it."""
    failing = ScriptedModel([ValueError("schema rejected"), TEXT_REPLY], structured=True)
    result = compute_edit(STATE, "Iceland", failing)
    assert result.attempts == 2 and [c.json_schema is not None for c in failing.calls] == [True, False]
    empty = ScriptedModel(["", TEXT_REPLY], structured=True)
    assert compute_edit(STATE, "Iceland", empty).attempts == 2
    text_only = ScriptedModel([ValueError("boom")])  # a text call that fails is final
    with pytest.raises(EditError, match="boom"):
        compute_edit(STATE, "Iceland", text_only)
    assert len(text_only.calls) == 1


@pytest.fixture()
def gemini() -> Any:
    genai = pytest.importorskip("langchain_google_genai")
    return genai.ChatGoogleGenerativeAI(model="gemini-2.5-flash", google_api_key="dummy-key-not-used")


@pytest.mark.parametrize("strategy", ["patch", "rewrite"])
def test_chat_google_generative_ai_request_carries_the_titled_schema(gemini: Any, strategy: str) -> None:
    """The request LangChainEditModel would send Gemini (built offline, never sent)."""
    runnable = LangChainEditModel(gemini).structured_runnable(output_schema(strategy))
    binding = runnable.first.steps__["raw"]  # include_raw=True: {"raw": model.bind(...)} | parser
    kwargs = {k: v for k, v in binding.kwargs.items() if k != "ls_structured_output_format"}
    request = gemini._prepare_request([HumanMessage("edit this")], **kwargs)
    schema = request["config"].response_json_schema
    assert request["config"].response_mime_type == "application/json"
    assert schema["title"] == output_schema(strategy)["title"] and schema["description"]


def test_chat_google_generative_ai_function_calling_names_the_tool(gemini: Any) -> None:
    """Gemini's function-calling structured output needs the title as the function's name."""
    runnable = gemini.with_structured_output(output_schema("patch"), method="function_calling", include_raw=True)
    binding = runnable.first.steps__["raw"]
    kwargs = {k: v for k, v in binding.kwargs.items() if k != "ls_structured_output_format"}
    request = gemini._prepare_request([HumanMessage("edit this")], **kwargs)
    (declaration,) = request["config"].tools[0].function_declarations
    assert declaration.name == "edit_operations" and declaration.description


def test_the_async_path_falls_back_alike() -> None:
    failing = ScriptedModel([ValueError("schema rejected"), TEXT_REPLY], structured=True)
    result = asyncio.run(acompute_edit(STATE, "Iceland", failing))
    assert result.attempts == 2 and [c.json_schema is not None for c in failing.calls] == [True, False]
    rejects = ToolsOnlyChatModel(replies=[AIMessage(""), AIMessage(TEXT_REPLY)], calls=[])
    assert asyncio.run(acompute_edit(STATE, "Iceland", LangChainEditModel(rejects))).attempts == 2

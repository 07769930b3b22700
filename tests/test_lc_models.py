"""LangChain chat models as editing models; the Gemini default fails fast without a key."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage

from context_gatekeeper import ModelUnavailableError, Replace, Transcript
from context_gatekeeper.editing.format import ideal_patch_reply
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


def test_a_fake_chat_model_edits_a_transcript_sync_and_async() -> None:
    t = Transcript("lc")
    t.append(user="Ireland's GDP in 2021?", assistant="About 504 billion USD.")
    target = t.messages[0]
    reply = ideal_patch_reply(t.messages, [Replace(target.id, "Iceland's GDP in 2022?")])
    edit_model = LangChainEditModel(fake(reply))
    assert not edit_model.supports_json_schema and edit_model.name == "GenericFakeChatModel"
    t.edit("Iceland, 2022", model=edit_model)
    assert t.messages[0].content == "Iceland's GDP in 2022?"
    reply2 = ideal_patch_reply(t.messages, [Replace(target.id, "Iceland's GDP in 2023?")])
    asyncio.run(t.aedit("2023", model=LangChainEditModel(fake(reply2))))
    assert t.messages[0].content == "Iceland's GDP in 2023?"


def test_structured_output_is_used_when_the_model_has_it() -> None:
    model = StructuredFake(messages=iter([]))
    model.objects = [{"operations": []}]
    edit_model = LangChainEditModel(model)
    assert edit_model.supports_json_schema
    assert edit_model.complete([{"role": "user", "content": "x"}], json_schema={"type": "object"}) == {"operations": []}
    assert model.schemas == [{"type": "object"}]


def test_not_a_chat_model_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        LangChainEditModel(object())  # type: ignore[arg-type]

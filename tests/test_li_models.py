"""LlamaIndex LLMs as editing models; the Gemini default fails fast without a key."""

from __future__ import annotations

import asyncio

import pytest
from llama_index.core.base.llms.types import MessageRole
from llama_index.core.llms import MockLLM

from context_gatekeeper import ModelUnavailableError, Replace, Transcript
from context_gatekeeper.editing.format import ideal_patch_reply
from context_gatekeeper.editing.gemini import GeminiModel
from context_gatekeeper.editing.models import EditModel, as_edit_model
from li_scripted_llm import ScriptedLLM
from llamaindex_gatekeeper.models import DEFAULT_MODEL, LlamaIndexEditModel, resolve_edit_model

MESSAGES = [
    {"role": "system", "content": "You edit transcripts."},
    {"role": "user", "content": "It was Iceland."},
    {"role": "assistant", "content": "Noted."},
]


def test_messages_become_chat_messages_and_the_reply_is_text() -> None:
    llm = ScriptedLLM(replies=["the reply"])
    model = LlamaIndexEditModel(llm)
    assert model.complete(MESSAGES) == "the reply"
    (chat,) = llm.chats
    assert [m.role for m in chat] == [MessageRole.SYSTEM, MessageRole.USER, MessageRole.ASSISTANT]
    assert [m.content for m in chat] == ["You edit transcripts.", "It was Iceland.", "Noted."]
    assert model.name == "scripted-llm" and not model.supports_json_schema


def test_async_uses_achat() -> None:
    llm = ScriptedLLM(replies=["async reply"])
    assert asyncio.run(LlamaIndexEditModel(llm).acomplete(MESSAGES)) == "async reply"
    assert len(llm.chats) == 1


def test_mock_llm_works_through_the_core_protocol() -> None:
    model = as_edit_model(LlamaIndexEditModel(MockLLM()))
    reply = model.complete([{"role": "user", "content": "hello"}])
    assert isinstance(reply, str) and "hello" in reply  # MockLLM echoes its prompt
    assert model.name and not model.supports_json_schema


def test_an_edit_through_a_llamaindex_llm() -> None:
    transcript = Transcript("li")
    transcript.append(user="We went to Ireland in 2021.", assistant="Ireland in 2021: noted.")
    user, answer = transcript.messages
    changes = [Replace(user.id, "We went to Iceland in 2022."), Replace(answer.id, "Iceland in 2022: noted.")]
    llm = ScriptedLLM(replies=[ideal_patch_reply(transcript.messages, changes)])
    transcript.edit("it was Iceland, not Ireland, and 2022", model=resolve_edit_model(llm=llm))
    assert [m.content for m in transcript.messages] == ["We went to Iceland in 2022.", "Iceland in 2022: noted."]
    assert "Ireland" in llm.seen  # the model saw the transcript
    reply = ideal_patch_reply(transcript.messages, [Replace(user.id, "We went to Iceland in 2023.")])
    asyncio.run(transcript.aedit("2023", model=LlamaIndexEditModel(ScriptedLLM(replies=[reply]))))
    assert transcript.messages[0].content == "We went to Iceland in 2023."


def test_resolve_wraps_llms_and_passes_other_models_through() -> None:
    llm = ScriptedLLM()
    assert isinstance(resolve_edit_model(llm), LlamaIndexEditModel)
    assert resolve_edit_model(llm=llm).llm is llm
    assert resolve_edit_model(model=llm, llm=llm).llm is llm

    def fn(messages):
        return "x"

    resolved = resolve_edit_model(fn)
    assert type(resolved) is EditModel and resolved.wrapped is fn  # wrapped once, as the core does
    with pytest.raises(TypeError, match="not both"):
        resolve_edit_model(model=llm, llm=ScriptedLLM())


def test_missing_key_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    with pytest.raises(ModelUnavailableError, match="GOOGLE_API_KEY") as info:
        resolve_edit_model()
    text = str(info.value)
    assert "model=" in text and "LlamaIndex LLM" in text
    assert text.count("model=") == 1 and text.count("GOOGLE_API_KEY") == 1  # each hint once


def test_default_is_the_cores_gemini_model(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("google.genai")
    monkeypatch.setenv("GOOGLE_API_KEY", "fake-key")
    model = resolve_edit_model()
    assert isinstance(model.wrapped, GeminiModel) and model.name == DEFAULT_MODEL == "gemini-2.5-flash"


def test_rejects_what_is_not_an_llm() -> None:
    with pytest.raises(TypeError, match="LlamaIndex LLM"):
        LlamaIndexEditModel("gpt")  # type: ignore[arg-type]




# -- streaming (the web chat's answers) ------------------------------------------------------
class _Growing(ScriptedLLM):
    """Streams responses whose message grows and that carry no delta; the last one's raw
    response has ``finish`` as its finish reason."""

    finish: str = "stop"

    def stream_chat(self, messages, **kwargs):  # type: ignore[no-untyped-def, override]
        from llama_index.core.base.llms.types import ChatMessage, ChatResponse

        yield ChatResponse(message=ChatMessage(role=MessageRole.ASSISTANT, content="Rey"))
        yield ChatResponse(message=ChatMessage(role=MessageRole.ASSISTANT, content="Reykjavik"),
                           raw={"choices": [{"finish_reason": self.finish}]})


class _NoStreaming(ScriptedLLM):
    def stream_chat(self, messages, **kwargs):  # type: ignore[no-untyped-def, override]
        raise NotImplementedError("this LLM does not stream")


def test_an_llm_streams_the_deltas_of_stream_chat() -> None:
    model = LlamaIndexEditModel(MockLLM(max_tokens=3))
    assert model.streams
    pieces = list(model.stream_text(MESSAGES))
    assert pieces == ["text ", "text ", "text"] and "".join(pieces) == model.complete(MESSAGES)


def test_a_response_without_a_delta_streams_what_its_message_grew_by_and_its_finish_reason_is_checked() -> None:
    from context_gatekeeper import TruncatedReplyError

    assert list(LlamaIndexEditModel(_Growing()).stream_text(MESSAGES)) == ["Rey", "kjavik"]
    with pytest.raises(TruncatedReplyError) as raised:
        list(LlamaIndexEditModel(_Growing(finish="length")).stream_text(MESSAGES))
    assert raised.value.partial == "Reykjavik"


def test_an_llm_that_does_not_stream_answers_in_one_piece_through_chat() -> None:
    llm = _NoStreaming(replies=["the whole answer"])
    assert list(LlamaIndexEditModel(llm).stream_text(MESSAGES)) == ["the whole answer"]
    assert len(llm.chats) == 1

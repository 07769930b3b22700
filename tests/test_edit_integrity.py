"""Edit integrity: a cut-off reply never deletes the end of a conversation, and
the deletion guard measures what an edit destroys, not only what it removes."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace
from typing import Any, Sequence

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from llama_index.core.base.llms.types import ChatMessage, ChatResponse, MessageRole

from context_gatekeeper import EditError, Transcript
from context_gatekeeper.editing.checks import deleted_share
from context_gatekeeper.editing.format import ideal_patch_reply, ideal_rewrite_reply
from context_gatekeeper.editing.compute import compute_edit
from context_gatekeeper.errors import TruncatedReplyError
from context_gatekeeper.editing.finish_reasons import FilteredReplyError
from context_gatekeeper.editing.gemini import GeminiModel
from context_gatekeeper.records.messages import Message
from context_gatekeeper.editing.models import ModelReply, as_edit_model
from context_gatekeeper.records.operations import Change, Delete, Replace
from context_gatekeeper.testing import ScriptedModel
from langchain_gatekeeper import LangChainEditModel
from li_scripted_llm import ScriptedLLM
from llamaindex_gatekeeper.models import LlamaIndexEditModel


def ten_messages() -> Transcript:
    t = Transcript("cut")
    for n in range(5):
        t.append(user=f"Question {n} about Ireland's economy?", assistant=f"Answer {n}: Ireland grew by {n} percent.")
    return t


def fix_first(t: Transcript) -> list[Replace]:
    return [Replace(t.messages[0].id, "Question 0 about Iceland's economy?")]


# -- item 2: JSON the repair step would have to close ---------------------------------------
def test_a_rewrite_cut_off_after_the_seventh_of_ten_messages_is_refused_not_committed():
    t = ten_messages()
    before = [(m.id, m.content) for m in t.messages]
    full = ideal_rewrite_reply(t.messages, fix_first(t))
    cut = full[: full.index('{"id": "8"')].rstrip().rstrip(",")  # ends with the 7th message's "}"
    assert cut.endswith("}") and not cut.endswith("]")
    with pytest.raises(EditError, match="incomplete"):
        t.edit("Iceland", model=ScriptedModel([cut, cut]), strategy="rewrite")
    assert [(m.id, m.content) for m in t.messages] == before and len(t.history()) == 5
    model = ScriptedModel([cut, full])
    t.edit("Iceland", model=model, strategy="rewrite")
    assert len(t.messages) == 10 and t.messages[0].content.startswith("Question 0 about Iceland")
    assert "incomplete" in model.calls[1][-1]["content"]


def test_a_patch_cut_off_after_complete_operations_is_refused():
    t = ten_messages()
    ops = [Replace(m.id, m.content.replace("Ireland", "Iceland")) for m in t.messages]
    full = ideal_patch_reply(t.messages, ops)
    cut = full[: full.rindex("}", 0, full.rindex("{")) + 1]  # drops the last operation, no "]}"
    assert json.loads(full) and cut.count('"op"') == 9
    with pytest.raises(EditError, match="incomplete"):
        t.edit("Iceland", model=ScriptedModel([cut, cut]))
    assert all("Ireland" in m.content for m in t.messages)
    t.edit("Iceland", model=ScriptedModel([cut, full]), allow_large_deletion=True)
    assert not any("Ireland" in m.content for m in t.messages)


def test_an_unterminated_string_is_refused():
    state = [Message("u", "user", "GDP of Ireland?"), Message("a", "assistant", "Ireland: 500 billion.")]
    cut = '{"operations": [{"op": "replace", "id": "1", "content": "GDP of Icel'
    with pytest.raises(EditError, match="incomplete"):
        compute_edit(state, "Iceland", ScriptedModel([cut, cut]))


# -- item 2: a finish reason that says the output limit was hit ------------------------------
def test_a_plain_callable_stays_valid_and_a_model_reply_carries_its_finish_reason():
    t = ten_messages()
    good = ideal_patch_reply(t.messages, fix_first(t))
    assert as_edit_model(lambda messages: good).complete([{"role": "user", "content": "x"}]) == good
    assert as_edit_model(lambda messages: ModelReply(good, "stop")).complete([]) == good
    with pytest.raises(TruncatedReplyError, match="output limit") as info:
        as_edit_model(lambda messages: ModelReply(good, "length")).complete([])
    assert info.value.partial == good and info.value.finish_reason == "length"


@pytest.mark.parametrize("use_async", [False, True])
def test_a_complete_looking_reply_with_finish_reason_length_is_retried(use_async):
    t = ten_messages()
    good = ideal_patch_reply(t.messages, fix_first(t))
    model = ScriptedModel([ModelReply(good, "length"), good])
    if use_async:
        asyncio.run(t.aedit("Iceland", model=model))
    else:
        t.edit("Iceland", model=model)
    assert len(model.calls) == 2 and "output limit" in model.calls[1][-1]["content"]
    assert t.history()[-1].kind == "edit"
    twice = ScriptedModel([ModelReply(good, "MAX_TOKENS"), ModelReply(good, "max_tokens")])
    with pytest.raises(EditError, match="output limit"):
        t.edit("Iceland again", model=twice)


def test_langchain_finish_reason_length_is_retried():
    t = ten_messages()
    good = ideal_patch_reply(t.messages, fix_first(t))
    replies = [AIMessage(good, response_metadata={"finish_reason": "length"}), AIMessage(good)]
    model = LangChainEditModel(GenericFakeChatModel(messages=iter(replies)))
    with pytest.raises(TruncatedReplyError):
        LangChainEditModel(GenericFakeChatModel(messages=iter(replies[:1]))).complete([])
    t.edit("Iceland", model=model)
    assert t.messages[0].content.startswith("Question 0 about Iceland")


class StructuredRawFake(GenericFakeChatModel):
    """Structured output that honours include_raw=True, as LangChain's chat models do."""

    answers: list = []
    include_raw: list = []

    def with_structured_output(self, schema: Any, **kwargs: Any):  # type: ignore[override]
        from langchain_core.runnables import RunnableLambda

        self.include_raw.append(kwargs.get("include_raw"))
        return RunnableLambda(lambda _messages: self.answers.pop(0))


def test_langchain_structured_path_reads_the_raw_finish_reason():
    t = ten_messages()
    good = json.loads(ideal_patch_reply(t.messages, fix_first(t)))
    cut_raw = AIMessage("", response_metadata={"finish_reason": "MAX_TOKENS"})
    chat = StructuredRawFake(messages=iter([]))
    chat.answers = [
        {"raw": cut_raw, "parsed": good, "parsing_error": None},
        {"raw": AIMessage(json.dumps(good)), "parsed": None, "parsing_error": ValueError("x")},
    ]
    model = LangChainEditModel(chat, structured=True)
    t.edit("Iceland", model=model)
    assert chat.include_raw == [True, True]
    assert t.messages[0].content.startswith("Question 0 about Iceland")


def test_gemini_max_tokens_is_a_truncation():
    finish = pytest.importorskip("google.genai.types").FinishReason.MAX_TOKENS
    response = SimpleNamespace(text='{"operations": []}', candidates=[SimpleNamespace(finish_reason=finish)])
    client = SimpleNamespace(models=SimpleNamespace(generate_content=lambda **kwargs: response))
    with pytest.raises(TruncatedReplyError, match="MAX_TOKENS"):
        GeminiModel(api_key="k", client=client).complete([{"role": "user", "content": "x"}])


class RawLLM(ScriptedLLM):
    """A LlamaIndex LLM whose responses carry an OpenAI-style raw payload."""

    reasons: list = []

    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        self.chats.append(list(messages))
        raw = {"choices": [{"finish_reason": self.reasons.pop(0)}]}
        return ChatResponse(message=ChatMessage(role=MessageRole.ASSISTANT, content=self._next()), raw=raw)


def test_llamaindex_raw_finish_reason_length_is_retried():
    t = ten_messages()
    good = ideal_patch_reply(t.messages, fix_first(t))
    llm = RawLLM(replies=[good, good])
    llm.reasons = ["length", "stop"]
    t.edit("Iceland", model=LlamaIndexEditModel(llm))
    assert len(llm.chats) == 2 and t.messages[0].content.startswith("Question 0 about Iceland")


# -- a reply the provider stopped for its content policy is never applied, nor asked again -----
class CountingFake(GenericFakeChatModel):
    """A scripted LangChain chat model that counts its calls."""

    calls: int = 0

    def _generate(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        return super()._generate(*args, **kwargs)


@pytest.mark.parametrize("reason", ["content_filter", "SAFETY", "refusal"])
@pytest.mark.parametrize("use_async", [False, True])
def test_a_langchain_reply_stopped_for_content_policy_is_refused_after_one_call(reason, use_async):
    t = ten_messages()
    good = ideal_patch_reply(t.messages, fix_first(t))
    before = [(m.id, m.content) for m in t.messages], t.head
    chat = CountingFake(messages=iter([AIMessage(good, response_metadata={"finish_reason": reason})] * 2))
    model = LangChainEditModel(chat)
    with pytest.raises(FilteredReplyError, match="safety or content policy") as info:
        if use_async:
            asyncio.run(t.aedit("Iceland", model=model))
        else:
            t.edit("Iceland", model=model)
    assert info.value.finish_reason == reason and chat.calls == 1
    assert ([(m.id, m.content) for m in t.messages], t.head) == before


def test_a_structured_reply_stopped_for_safety_does_not_fall_back_to_text():
    t = ten_messages()
    good = json.loads(ideal_patch_reply(t.messages, fix_first(t)))
    chat = StructuredRawFake(messages=iter([]))
    chat.answers = [{"raw": AIMessage("", response_metadata={"finish_reason": "SAFETY"}), "parsed": good,
                     "parsing_error": None}]
    chat.include_raw = []
    with pytest.raises(FilteredReplyError):
        t.edit("Iceland", model=LangChainEditModel(chat, structured=True))
    assert chat.include_raw == [True] and chat.answers == [] and t.head == 5


def test_a_structured_call_the_provider_declined_is_refused_without_asking_for_text():
    """A provider's refusal of structured output (an OpenAI-style refusal block): langchain-core's
    own with_structured_output(include_raw=True) hands it back as a ModelRefusalError in
    ``parsing_error``; the edit ends with FilteredReplyError after one call, not a structured
    failure retried as JSON text."""
    from langchain_core.language_models import BaseChatModel
    from langchain_core.outputs import ChatGeneration, ChatResult

    calls: list[int] = []

    class Refusing(BaseChatModel):
        @property
        def _llm_type(self) -> str:
            return "refusing"

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:  # what the base with_structured_output binds
            return self

        def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any) -> ChatResult:
            calls.append(len(messages))
            message = AIMessage(content="", additional_kwargs={"refusal": "I can't help with that."},
                                response_metadata={"finish_reason": "stop", "model_provider": "openai"})
            return ChatResult(generations=[ChatGeneration(message=message)])

    t = ten_messages()
    with pytest.raises(FilteredReplyError, match="declined") as info:
        t.edit("Iceland", model=LangChainEditModel(Refusing(), structured=True))
    assert info.value.finish_reason == "refusal" and len(calls) == 1 and t.head == 5


def test_a_llamaindex_reply_stopped_by_the_content_filter_is_refused():
    t = ten_messages()
    good = ideal_patch_reply(t.messages, fix_first(t))
    llm = RawLLM(replies=[good, good])
    llm.reasons = ["content_filter", "stop"]
    with pytest.raises(FilteredReplyError, match="content_filter"):
        t.edit("Iceland", model=LlamaIndexEditModel(llm))
    assert len(llm.chats) == 1 and t.messages[0].content.startswith("Question 0 about Ireland")


def test_a_model_reply_with_a_refusal_is_refused():
    model = ScriptedModel([ModelReply('{"operations": []}', "refusal")])
    with pytest.raises(FilteredReplyError):
        compute_edit(ten_messages().messages, "Iceland", model)
    assert len(model.calls) == 1


# -- item 4: the deletion guard measures removed plus replaced tokens ------------------------
def gdp_conversation() -> Transcript:
    t = Transcript("guard")
    t.append(user="What was Ireland's GDP in 2021?",
             assistant="Ireland's GDP in 2021 was about 504 billion US dollars, driven by pharmaceuticals.")
    t.append(user="How does that compare with Denmark?",
             assistant="Denmark's GDP in 2021 was about 398 billion US dollars, so Ireland's was larger.")
    return t


def junk_like(text: str) -> str:
    """Same length, no word in common."""
    return "".join("z" if c.isalnum() else c for c in text)


def test_same_length_junk_in_place_of_every_message_is_a_large_deletion():
    t = gdp_conversation()
    before = [(m.id, m.content) for m in t.messages]
    history = len(t.history())
    reply = ideal_patch_reply(t.messages, [Replace(m.id, junk_like(m.content)) for m in t.messages])
    model = ScriptedModel([reply])
    with pytest.raises(EditError, match=r"would delete or replace (9\d|100)% .*allow_large_deletion=True"):
        t.edit("rewrite everything", model=model)
    assert len(model.calls) == 1  # the caller's decision: not retried
    assert [(m.id, m.content) for m in t.messages] == before and len(t.history()) == history
    t.edit("rewrite everything", model=ScriptedModel([reply]), allow_large_deletion=True)
    assert all(set(m.content) <= set("z '?,.") for m in t.messages)


def test_iceland_not_ireland_across_two_messages_is_a_small_change():
    t = gdp_conversation()
    fixes = [Replace(m.id, m.content.replace("Ireland", "Iceland")) for m in t.messages[:2]]
    t.edit("Iceland, not Ireland", model=ScriptedModel([ideal_patch_reply(t.messages, fixes)]))
    assert t.messages[0].content == "What was Iceland's GDP in 2021?"
    changes = [c for c in t.history()[-1].changes if isinstance(c, Change)]
    share = deleted_share(t.snapshot(t.history()[-2].number), changes, lambda text: len(text.split()))
    assert 0 < share < 0.15


def test_a_replacement_counts_what_it_replaces_not_what_it_shortens():
    state = [Message("u", "user", "one two three four"), Message("a", "assistant", "five six seven eight")]
    same_length = [Change(state[1], state[1].revised("nine ten eleven twelve", revision=0))]
    words = lambda text: len(text.split())  # noqa: E731
    assert deleted_share(state, same_length, words) == 0.5
    longer = [Change(state[1], state[1].revised("five six seven eight nine", revision=0))]
    assert deleted_share(state, longer, words) == 0.0


def test_long_messages_are_measured_by_what_changed():
    answer = " ".join(f"Ireland's GDP in {n} was about {500 + n} billion US dollars." for n in range(1500))
    state = [Message("u", "user", "GDP by year?"), Message("a", "assistant", answer)]
    words = lambda text: len(text.split())  # noqa: E731
    one_word = [Change(state[1], state[1].revised(answer.replace("Ireland", "Iceland", 1), revision=0))]
    assert 0 < deleted_share(state, one_word, words) < 0.001
    every_tenth = ". ".join(s.replace("Ireland", "Iceland") if i % 10 == 0 else s for i, s in enumerate(answer.split(". ")))
    assert 0 < deleted_share(state, [Change(state[1], state[1].revised(every_tenth, revision=0))], words) < 0.02
    assert deleted_share(state, [Change(state[1], state[1].revised(junk_like(answer), revision=0))], words) > 0.95


def test_an_unclosed_bracket_in_prose_after_a_complete_answer_is_not_a_cut_off():
    state = [Message("u", "user", "GDP of Ireland?"), Message("a", "assistant", "Ireland: 500 billion.")]
    reply = ('{"operations": [{"op": "replace", "id": "1", "content": "GDP of Iceland?"},]}\n'
             "Note: I kept message 2 as it was [it has no country")
    result = compute_edit(state, "Iceland", ScriptedModel([reply]))
    assert result.attempts == 1 and result.changes[0].after.content == "GDP of Iceland?"

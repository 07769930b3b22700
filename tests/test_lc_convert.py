"""LangChain <-> core message conversion: lossless round trips, edits drop provider keys."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from langchain_core.messages import (
    AIMessage, AIMessageChunk, ChatMessage, HumanMessage, HumanMessageChunk, SystemMessage, SystemMessageChunk,
    ToolMessage, ToolMessageChunk,
)

from langchain_gatekeeper import from_core, from_core_messages, to_core, to_core_messages

CONVERSATION = [
    SystemMessage("You are terse.", id="sys"),
    HumanMessage(
        content=[{"type": "text", "text": "What is in this picture?"}, {"type": "image_url", "image_url": {"url": "data:x"}}],
        name="ann",
        id="h1",
    ),
    AIMessage(
        content="Let me look it up.",
        tool_calls=[{"name": "search", "args": {"q": "cat"}, "id": "call_1"}],
        additional_kwargs={"__gemini_function_call_thought_signatures__": {"call_1": "c2ln"}, "refusal": None},
        response_metadata={"model_name": "gemini-2.5-flash"},
        id="a1",
    ),
    ToolMessage(content='{"hits": 3}', tool_call_id="call_1", name="search", id="t1"),
    AIMessage(content="A cat on a sofa.", id="a2"),
    ChatMessage(role="assistant", content="custom role", id="c1"),
]


def test_a_conversation_round_trips_exactly() -> None:
    assert from_core_messages(to_core_messages(CONVERSATION)) == CONVERSATION


def test_core_view_of_the_messages() -> None:
    core = to_core_messages(CONVERSATION)
    assert [m.role for m in core] == ["system", "user", "assistant", "tool", "assistant", "assistant"]
    assert [m.id for m in core] == ["sys", "h1", "a1", "t1", "a2", "c1"]
    assert core[1].content == "What is in this picture?" and core[1].parts is not None
    assert core[2].metadata["tool_calls"][0]["id"] == "call_1"
    assert core[3].metadata["tool_call_id"] == "call_1"


def test_messages_without_ids_get_one_in_the_core_only() -> None:
    core = to_core(HumanMessage("hi"))
    assert core.id and core.metadata["langchain"]["id_generated"] is True
    assert from_core(core) == HumanMessage("hi") and from_core(core).id is None
    edited = from_core(core.revised("hello", 2))
    assert edited.id is None and edited.content == "hello"
    assert from_core(to_core(HumanMessage("hi", id="mine"))).id == "mine"


def test_a_rewritten_assistant_text_drops_provider_specific_keys_only() -> None:
    ai = to_core(CONVERSATION[2])
    back = from_core(ai.revised("Searching for cats.", 3))
    assert back.content == "Searching for cats."
    assert back.additional_kwargs == {"refusal": None}
    assert back.tool_calls == CONVERSATION[2].tool_calls and back.id == "a1"
    untouched = from_core(ai)
    assert "__gemini_function_call_thought_signatures__" in untouched.additional_kwargs


def test_a_rewritten_block_list_keeps_its_non_text_blocks() -> None:
    human = to_core(CONVERSATION[1])
    back = from_core(human.revised("And in this one?", 2))
    assert back.content == [{"type": "text", "text": "And in this one?"}, CONVERSATION[1].content[1]]
    assert back.name == "ann"


@pytest.mark.parametrize("kind", [AIMessage, AIMessageChunk])
def test_a_rewritten_streamed_or_whole_answer_drops_its_reasoning_keys(kind) -> None:
    answer = kind("Reykjavik is in Ireland.", id="a", additional_kwargs={
        "reasoning_content": "Reykjavik is the capital of Ireland.", "__gemini_function_call_thought_signatures__": {"x": "s"},
        "refusal": None})
    back = from_core(to_core(answer).revised("Reykjavik is in Iceland.", 2))
    assert type(back) is kind and back.additional_kwargs == {"refusal": None}


def test_a_rewritten_answer_drops_its_reasoning_blocks_and_keeps_the_others_in_place() -> None:
    image = {"type": "image", "url": "http://x/chart.png"}
    thinking = {"type": "thinking", "thinking": "The user asks about Ireland.", "signature": "EqQB"}
    answer = AIMessage([thinking, {"type": "text", "text": "Ireland's GDP was 500bn."}, image,
                        {"type": "text", "text": " Source: CSO."}], id="a")
    core = to_core(answer)
    assert from_core(core).content == answer.content  # unedited: exactly as it was
    back = from_core(core.revised("Iceland's GDP was 25bn.", 2))
    assert back.content == [{"type": "text", "text": "Iceland's GDP was 25bn."}, image]
    question = to_core(HumanMessage([thinking, {"type": "text", "text": "Ireland?"}]))  # a user's blocks are theirs
    assert from_core(question.revised("Iceland?", 2)).content == [thinking, {"type": "text", "text": "Iceland?"}]


CLIFFS = {"type": "image", "source_type": "url", "url": "https://example.com/cliffs.jpg"}
PHOTO = HumanMessage([{"type": "text", "text": "Here is my photo from the trip:"}, CLIFFS,
                      {"type": "text", "text": "Which cliffs in Ireland are these?"}], id="h")


def test_text_blocks_around_an_image_read_as_separate_lines() -> None:
    assert to_core(PHOTO).content == "Here is my photo from the trip:\nWhich cliffs in Ireland are these?"


def test_an_edit_of_text_around_an_image_keeps_each_line_in_its_block() -> None:
    core = to_core(PHOTO)
    back = from_core(core.revised(core.content.replace("Ireland", "Iceland"), 2))
    assert back.content == [PHOTO.content[0], CLIFFS, {"type": "text", "text": "Which cliffs in Iceland are these?"}]
    added = from_core(core.revised("Here is my photo from the trip:\nTaken in June.\nWhich cliffs are these?", 2))
    assert added.content == [{"type": "text", "text": "Here is my photo from the trip:\nTaken in June."}, CLIFFS,
                             {"type": "text", "text": "Which cliffs are these?"}]
    dropped = from_core(core.revised("Which cliffs in Iceland are these?", 2))  # the first block's line went
    assert dropped.content == [CLIFFS, {"type": "text", "text": "Which cliffs in Iceland are these?"}]
    plain = to_core(HumanMessage(["Photo:", CLIFFS, "Ireland?"], id="p"))  # string blocks stay strings
    assert from_core(plain.revised("Photo:\nIceland?", 2)).content == ["Photo:", CLIFFS, "Iceland?"]


def test_a_history_written_with_text_blocks_joined_without_newline_still_matches() -> None:
    from langchain_gatekeeper.convert import same_messages

    legacy = to_core(PHOTO).revised("Here is my photo from the trip:Which cliffs in Ireland are these?", 1)
    assert same_messages([PHOTO], [legacy]) and same_messages([PHOTO], [to_core(PHOTO)])
    assert not same_messages([PHOTO], [to_core(PHOTO).revised("Other text", 1)])


@pytest.mark.parametrize("chunk", [AIMessageChunk("It is 30 s.", id="a"), HumanMessageChunk("TTL?", id="h"),
                                   SystemMessageChunk("Be brief.", id="s"),
                                   ToolMessageChunk("30", tool_call_id="c1", id="t")])
def test_streamed_chunks_keep_their_role_and_type(chunk) -> None:
    core = to_core(chunk)
    assert core.role == {"AIMessageChunk": "assistant", "HumanMessageChunk": "user", "SystemMessageChunk": "system",
                         "ToolMessageChunk": "tool"}[type(chunk).__name__]
    assert from_core(core) == chunk


def test_not_a_message_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        to_core({"role": "user", "content": "hi"})  # type: ignore[arg-type]


@given(st.text(), st.sampled_from([HumanMessage, AIMessage, SystemMessage]), st.text(min_size=1, max_size=20))
def test_any_text_round_trips(text: str, kind, message_id: str) -> None:
    message = kind(content=text, id=message_id)
    assert from_core(to_core(message)) == message


def test_function_and_chat_messages_are_stored_with_the_role_they_play() -> None:
    """A legacy function result is a tool result and a ChatMessage has the role it names, as
    the list gating groups them: stored as user messages they opened turns of their own."""
    from langchain_core.messages import ChatMessage, FunctionMessage

    cases = [
        (FunctionMessage("42", name="lookup"), "tool"),
        (ChatMessage("hi", role="assistant"), "assistant"),
        (ChatMessage("hi", role="AI"), "assistant"),
        (ChatMessage("rules", role="system"), "system"),
        (ChatMessage("hello", role="Human"), "user"),
        (ChatMessage("result", role="function"), "tool"),
        (ChatMessage("note", role="narrator"), "user"),
    ]
    for message, role in cases:
        stored = to_core(message)
        assert stored.role == role, message
        back = from_core(stored)
        assert type(back) is type(message) and back.content == message.content
        assert getattr(back, "role", None) == getattr(message, "role", None)


def cache_hit() -> AIMessage:
    """What a chat model with an LLM cache returns on a hit: usage_metadata {"total_cost": 0}."""
    from langchain_core.caches import InMemoryCache
    from langchain_core.language_models.fake_chat_models import FakeListChatModel

    model = FakeListChatModel(responses=["Dublin is the capital of Ireland."] * 2, cache=InMemoryCache())
    model.invoke("Capital of Ireland?")
    hit = model.invoke("Capital of Ireland?")
    assert hit.usage_metadata == {"total_cost": 0}
    return hit


def test_a_cache_hit_that_langchains_own_validation_refuses_reads_back_as_it_was() -> None:
    """LangChain's messages_from_dict refuses the usage_metadata of a cache hit (no token counts),
    so reading one back raised pydantic's ValidationError: it reads back equal to what was stored,
    edited too; a message that cannot be rebuilt at all raises the library's error naming it."""
    from context_gatekeeper import GatekeeperError, InvalidInputError, Message

    hit = cache_hit()
    back = from_core(to_core(hit))
    assert back == hit and back.usage_metadata == {"total_cost": 0}
    edited = from_core(to_core(hit).revised("Dublin.", revision=1))
    assert edited.text == "Dublin." and edited.usage_metadata == {"total_cost": 0}
    broken = Message("m-7", "user", "hi", metadata={"langchain": {"type": "chat", "data": {}}})  # a ChatMessage needs a role
    with pytest.raises(InvalidInputError, match="'m-7' \\(chat\\) cannot be rebuilt.*role") as error:
        from_core(broken)
    assert isinstance(error.value, GatekeeperError)


@pytest.mark.parametrize("tool_calls", [
    [{"name": 5, "args": {}, "id": "c1"}],  # refused by validation, with the cache hit's usage_metadata
    [{"name": "search", "args": "not a dict", "id": "c1"}],
    ["search"],  # LangChain's own validator fails on it (AttributeError)
    [{"args": {}}],  # (TypeError)
], ids=["name", "args", "not-a-dict", "no-id"])
def test_only_the_fields_a_cache_hit_carries_are_put_back_unchecked(tool_calls: list) -> None:
    """A stored assistant message whose tool_calls LangChain refuses is not rebuilt with them put
    back unchecked (any refused field was, so a malformed call reached the provider): the
    library's InvalidInputError names it, whatever LangChain raised; a cache hit's usage_metadata
    is still put back."""
    from context_gatekeeper import InvalidInputError, Message

    stored = to_core(cache_hit())
    broken = Message(stored.id, "assistant", stored.content, metadata={**stored.metadata, "tool_calls": tool_calls})
    with pytest.raises(InvalidInputError, match=f"{broken.id!r} \\(ai\\) cannot be rebuilt"):
        from_core(broken)
    assert from_core(stored).usage_metadata == {"total_cost": 0}


def test_as_messages_converts_message_likes_and_names_what_it_cannot_read() -> None:
    from context_gatekeeper import InvalidInputError
    from langchain_gatekeeper.convert import as_messages

    kept = HumanMessage("kept", id="k")
    out = as_messages([kept, ("ai", "an answer"), {"role": "user", "content": "a question"}, "plain"])
    assert out == [kept, AIMessage("an answer"), HumanMessage("a question"), HumanMessage("plain")]
    assert out[0] is kept
    with pytest.raises(InvalidInputError, match=r"\(role, text\) tuple"):
        as_messages([("narrator", "not a role")])

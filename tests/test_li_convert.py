"""llamaindex_gatekeeper.convert on sessions holding parts that are not LlamaIndex blocks.

A session is shared by both adapters (one store, one session id): the LangChain history
stores a multimodal turn's content parts as LangChain writes them, and a newer
llama-index may store a block type this one does not know.  GatekeeperMemory must read
such a session (what it can convert as LlamaIndex blocks, the rest as a readable stand-in)
and must never lose the stored parts.  Real SQLite files, a scripted LLM, no network.
"""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from llama_index.core.base.llms.types import ChatMessage, ImageBlock, TextBlock
from llama_index.core.chat_engine import SimpleChatEngine

from context_gatekeeper import InvalidInputError, Message, Transcript
from langchain_gatekeeper import GatekeeperChatMessageHistory
from li_support import ScriptedLLM, patch
from llamaindex_gatekeeper import GatekeeperMemory, from_core

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 16).decode()
PICTURE = [
    {"type": "text", "text": "What is in this picture?"},
    {"type": "image_url", "image_url": {"url": "https://example.com/cat.png", "detail": "low"}},
    {"type": "image", "source_type": "base64", "data": PNG, "mime_type": "image/png"},
]
CLIP = {"type": "video_clip", "ref": "clip-7"}
"""A part neither LangChain's image shapes nor a LlamaIndex block: shown as a stand-in."""


def langchain_session(path: Path, *parts: dict) -> None:
    """Session ``s`` of ``path`` as the LangChain history writes it: a multimodal question and its answer."""
    history = GatekeeperChatMessageHistory("s", store=str(path))
    history.add_messages([HumanMessage(content=list(parts)), AIMessage(content="A cat.")])
    history.close()


def test_a_langchain_multimodal_turn_reads_as_text_and_image_blocks(tmp_path: Path) -> None:
    langchain_session(tmp_path / "chats.db", *PICTURE)
    memory = GatekeeperMemory.from_defaults(store=str(tmp_path / "chats.db"), session_id="s")
    question, answer = memory.get_all()
    assert [type(b) for b in question.blocks] == [TextBlock, ImageBlock, ImageBlock]
    assert question.content == "What is in this picture?"
    assert str(question.blocks[1].url) == "https://example.com/cat.png" and question.blocks[1].detail == "low"
    assert question.blocks[2].image_mimetype == "image/png"
    assert base64.b64decode(question.blocks[2].image) == base64.b64decode(PNG)
    assert answer.content == "A cat."
    assert [m.content for m in memory.get(input="Which breed is the cat in the picture?")][:2] == [
        "What is in this picture?", "A cat."]
    memory.close()


def test_a_chat_engine_on_a_session_the_langchain_history_wrote_answers_each_turn_once(tmp_path: Path) -> None:
    langchain_session(tmp_path / "chats.db", *PICTURE, CLIP)
    memory = GatekeeperMemory.from_defaults(store=str(tmp_path / "chats.db"), session_id="s")
    llm = ScriptedLLM(["A tabby."])
    engine = SimpleChatEngine.from_defaults(llm=llm, memory=memory)
    assert str(engine.chat("Which breed is the cat in the picture?")) == "A tabby."
    assert "What is in this picture?" in llm.prompts[-1] and "[video_clip part omitted]" in llm.prompts[-1]
    assert [m.content for m in memory.get_all()][2:] == ["Which breed is the cat in the picture?", "A tabby."]
    memory.close()


def test_set_with_the_messages_unchanged_keeps_the_stored_foreign_parts(tmp_path: Path) -> None:
    langchain_session(tmp_path / "chats.db", *PICTURE, CLIP)
    memory = GatekeeperMemory.from_defaults(store=str(tmp_path / "chats.db"), session_id="s")
    stored = memory.transcript.messages[0]
    head = len(memory.history())
    memory.set(memory.get_all())
    assert len(memory.history()) == head  # nothing changed, nothing recorded
    memory.set([*memory.get_all(), ChatMessage(role="user", content="And its age?")])
    kept = memory.transcript.messages[0]
    assert (kept.id, kept.parts, kept.content) == (stored.id, stored.parts, stored.content)
    assert kept.parts is not None and CLIP in kept.parts
    memory.close()


def test_set_refuses_a_changed_message_that_carries_a_stand_in_and_writes_nothing(tmp_path: Path) -> None:
    langchain_session(tmp_path / "chats.db", *PICTURE, CLIP)
    memory = GatekeeperMemory.from_defaults(store=str(tmp_path / "chats.db"), session_id="s")
    before = memory.transcript.messages
    question, answer = memory.get_all()
    changed = ChatMessage(role="user", blocks=[TextBlock(text="What is in this photo?"), *question.blocks[1:]])
    with pytest.raises(InvalidInputError, match=r"video_clip.*nothing was written"):
        memory.set([changed, answer])
    assert memory.transcript.messages == before
    # leaving the stand-in out drops the part, as asked
    memory.set([ChatMessage(role="user", blocks=[TextBlock(text="What is in this photo?"), *question.blocks[1:3]]),
                answer])
    assert memory.get_all()[0].content == "What is in this photo?"
    memory.close()


def test_an_edit_of_a_langchain_multimodal_turn_rewrites_its_text_in_place(tmp_path: Path) -> None:
    langchain_session(tmp_path / "chats.db", *PICTURE)
    memory = GatekeeperMemory.from_defaults(store=str(tmp_path / "chats.db"), session_id="s")
    memory.edit("photo, not picture", model=patch({"op": "replace", "id": "1", "content": "What is in this photo?"}))
    question = memory.get_all()[0]
    assert [type(b) for b in question.blocks] == [TextBlock, ImageBlock, ImageBlock]
    assert question.content == "What is in this photo?"
    memory.close()


def test_an_answer_an_edit_rewrote_loses_the_langchain_reasoning_it_was_given_with(tmp_path: Path) -> None:
    history = GatekeeperChatMessageHistory("s", store=str(tmp_path / "chats.db"))
    history.add_messages([HumanMessage(content="Which cat?"), AIMessage(content=[
        {"type": "thinking", "thinking": "Tabbies are common.", "signature": "sig"}, {"type": "text", "text": "A tabby."}])])
    history.close()
    memory = GatekeeperMemory.from_defaults(store=str(tmp_path / "chats.db"), session_id="s")
    assert memory.get_all()[1].blocks == [TextBlock(text="[thinking part omitted]"), TextBlock(text="A tabby.")]
    memory.edit("a ginger cat", model=patch({"op": "replace", "id": "2", "content": "A ginger cat."}))
    assert memory.get_all()[1].blocks == [TextBlock(text="A ginger cat.")]  # the superseded reasoning goes
    memory.undo()
    assert memory.get_all()[1].blocks[0] == TextBlock(text="[thinking part omitted]")
    memory.close()


def test_a_block_type_this_llama_index_does_not_know_reads_as_a_stand_in(tmp_path: Path) -> None:
    path = tmp_path / "chats.db"
    transcript = Transcript("s", store=str(path))
    transcript.append(messages=[
        Message("m1", "user", "hello", parts=({"block_type": "text", "text": "hello"},
                                              {"block_type": "hologram", "data": "zz"})),
        Message("m2", "assistant", "hi", parts=({"block_type": "text", "text": "hi"},
                                                {"block_type": "hologram", "text": "a turning cube"})),
    ])
    transcript.close()
    memory = GatekeeperMemory.from_defaults(store=str(path), session_id="s")
    question, answer = memory.get_all()
    assert question.blocks == [TextBlock(text="hello"), TextBlock(text="[hologram part omitted]")]
    assert answer.blocks == [TextBlock(text="hi"), TextBlock(text="a turning cube")]  # its own text, readable
    assert len(memory.get(input="hello again")) == 2
    stored = memory.transcript.messages
    memory.set(memory.get_all())
    assert memory.transcript.messages == stored
    assert from_core(stored[0]) == question  # a fresh copy each read, the same every time
    memory.close()

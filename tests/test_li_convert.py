"""llamaindex_gatekeeper.convert on sessions holding parts that are not LlamaIndex blocks.

A session is shared by both adapters (one store, one session id): the LangChain history
stores a multimodal turn's content parts as LangChain writes them, and a newer
llama-index may store a block type this one does not know.  GatekeeperMemory must read
such a session (what it can convert as LlamaIndex blocks, the rest as a readable stand-in)
and must never lose the stored parts.  Real SQLite files, a scripted LLM, no network.
"""

from __future__ import annotations

import base64
import re
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, HumanMessage, convert_to_openai_messages
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


def omitted(kind: str) -> str:
    """A pattern of the text standing in for a stored ``kind`` part of no text of its own."""
    return rf"\[{kind} part omitted #[0-9a-f]{{6}}\]"


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
    assert "What is in this picture?" in llm.prompts[-1] and re.search(omitted("video_clip"), llm.prompts[-1])
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


def test_a_text_change_through_set_keeps_a_langchain_turns_parts_and_langchain_sends_it(tmp_path: Path) -> None:
    """One word of a LangChain text-and-image question changed through set(): the message keeps
    the parts and metadata LangChain stored, with the new text, as a model edit of its text does;
    the LangChain history reads it as its own message, the text once, the images intact, and a
    provider conversion takes it (it read the text twice and an image block no provider takes)."""
    path = str(tmp_path / "chats.db")
    history = GatekeeperChatMessageHistory("s", store=path)
    history.add_messages([HumanMessage(id="lc-q1", content=PICTURE), AIMessage(content="A cat.")])
    history.close()
    memory = GatekeeperMemory.from_defaults(store=path, session_id="s")
    stored = memory.transcript.messages[0]
    question, answer = memory.get_all()
    memory.set([ChatMessage(role="user", blocks=[TextBlock(text="What is in this photo?"), *question.blocks[1:]]),
                answer])
    kept = memory.transcript.messages[0]
    assert (kept.id, kept.parts, kept.metadata) == (stored.id, stored.parts, stored.metadata)
    assert kept.content == "What is in this photo?" and kept.origin == "edited"
    assert memory.get_all()[0].blocks == [TextBlock(text="What is in this photo?"), *question.blocks[1:]]
    memory.set(memory.get_all())  # read back as written: nothing changes
    assert memory.transcript.messages[0] == kept
    memory.close()
    langchain = GatekeeperChatMessageHistory("s", store=path)
    message = langchain.messages[0]
    assert isinstance(message, HumanMessage) and message.id == "lc-q1"
    assert message.content == [{"type": "text", "text": "What is in this photo?"}, *PICTURE[1:]]
    assert [p["type"] for p in convert_to_openai_messages(langchain.messages)[0]["content"]] == [
        "text", "image_url", "image_url"]
    langchain.close()


def test_a_text_change_through_set_keeps_a_part_shown_as_a_stand_in(tmp_path: Path) -> None:
    """A changed text with the stand-in handed back as read keeps the part it stands in for (it
    was refused), and the LangChain history reads the new text with the part."""
    langchain_session(tmp_path / "chats.db", PICTURE[0], CLIP)
    memory = GatekeeperMemory.from_defaults(store=str(tmp_path / "chats.db"), session_id="s")
    question, answer = memory.get_all()
    memory.set([ChatMessage(role="user", blocks=[TextBlock(text="What is in this clip?"), question.blocks[1]]),
                answer])
    assert memory.transcript.messages[0].parts == (PICTURE[0], CLIP)
    assert memory.get_all()[0].blocks == [TextBlock(text="What is in this clip?"), question.blocks[1]]
    memory.close()
    langchain = GatekeeperChatMessageHistory("s", store=str(tmp_path / "chats.db"))
    assert langchain.messages[0].content == [{"type": "text", "text": "What is in this clip?"}, CLIP]
    langchain.close()


@pytest.mark.parametrize("change", ["another image", "image dropped", "block added", "stand-in dropped", "kwargs"])
def test_set_refuses_a_change_beyond_the_text_of_a_turn_another_adapter_wrote(tmp_path: Path, change: str) -> None:
    """A LangChain turn's parts cannot be stored as LlamaIndex blocks under its id (LangChain
    could no longer send it): a changed message standing where it stood may change its text
    alone.  Anything else is refused, naming the message and what to do, and nothing is written;
    set() without it and then with the new message replaces it."""
    path = str(tmp_path / "chats.db")
    history = GatekeeperChatMessageHistory("s", store=path)
    history.add_messages([HumanMessage(id="lc-q1", content=[*PICTURE, CLIP]), AIMessage(content="A cat.")])
    history.close()
    memory = GatekeeperMemory.from_defaults(store=path, session_id="s")
    before = memory.transcript.messages
    question, answer = memory.get_all()
    text, url_image, data_image, clip = question.blocks
    other = ImageBlock(url="https://example.com/dog.png")
    blocks = {"another image": [text, other, data_image, clip], "image dropped": [text, data_image, clip],
              "block added": [text, url_image, data_image, clip, other],
              "stand-in dropped": [text, url_image, data_image], "kwargs": question.blocks}[change]
    changed = ChatMessage(role="user", blocks=blocks, additional_kwargs={"name": "ann"} if change == "kwargs" else {})
    with pytest.raises(InvalidInputError, match=r"messages\[0\].*'lc-q1'.*nothing was written"):
        memory.set([changed, answer])
    assert memory.transcript.messages == before
    memory.set([answer])
    memory.set([changed, answer])  # a new message, with an id of its own
    assert memory.get_all()[0] == changed and memory.transcript.messages[0].id != "lc-q1"
    memory.close()


def test_set_keeps_the_stored_part_of_each_turn_handed_back_when_two_turns_read_alike(tmp_path: Path) -> None:
    """Two voice notes of different audio: each stand-in carries a digest of its part, so the
    turns read differently and set() of the second turn alone keeps the second turn's audio
    (it kept the first's: both read 'Voice note:' and the same stand-in)."""
    path = str(tmp_path / "chats.db")

    def note(data: str) -> HumanMessage:
        return HumanMessage(content=[{"type": "text", "text": "Voice note:"},
                                     {"type": "audio", "base64": data, "mime_type": "audio/wav"}])

    history = GatekeeperChatMessageHistory("s", store=path)
    history.add_messages([note("AAAA-monday"), AIMessage(content="Noted.")])
    history.add_messages([note("BBBB-tuesday"), AIMessage(content="Noted.")])
    history.close()
    memory = GatekeeperMemory.from_defaults(store=path, session_id="s")
    messages = memory.get_all()
    assert re.fullmatch("Voice note:\n" + omitted("audio"), str(messages[0].content))
    assert messages[0].content != messages[2].content and from_core(memory.transcript.messages[0]) == messages[0]
    head = len(memory.history())
    memory.set(messages)
    assert len(memory.history()) == head
    tuesday = memory.transcript.messages[2]
    memory.set(messages[2:])
    assert memory.transcript.messages[0] == tuesday
    assert [p.get("base64") for p in memory.transcript.messages[0].parts or () if p.get("type") == "audio"] == [
        "BBBB-tuesday"]
    memory.close()


def test_a_new_message_whose_text_is_the_text_of_a_stored_part_is_stored(tmp_path: Path) -> None:
    """A stored part with text of its own shows as that text; a message appended or inserted
    with the same text (a user saying it) is a message of its own and is stored: only a
    message standing where the one holding the part stood can change that part."""
    path = str(tmp_path / "chats.db")
    history = GatekeeperChatMessageHistory("s", store=path)
    history.add_messages([HumanMessage(content=[{"type": "text", "text": "My reviewer's note is attached."},
                                                {"type": "text-plain", "text": "Looks good to me.",
                                                 "mime_type": "text/plain"}]),
                          AIMessage(content="Thanks, noted.")])
    history.close()
    memory = GatekeeperMemory.from_defaults(store=path, session_id="s")
    stored = memory.transcript.messages
    question, answer = memory.get_all()
    assert question.blocks[1] == TextBlock(text="Looks good to me.")
    said = ChatMessage(role="user", content="Looks good to me.")
    memory.set([question, answer, said])
    memory.set([said, *memory.get_all()])
    assert [m.content for m in memory.get_all()] == [
        "Looks good to me.", "My reviewer's note is attached.\nLooks good to me.", "Thanks, noted.",
        "Looks good to me."]
    assert memory.transcript.messages[1:3] == stored
    # a message standing where the one holding the part stood, without it, would change it
    with pytest.raises(InvalidInputError, match=rf"messages\[1\] stands where stored message {stored[0].id!r}"):
        memory.set([said, ChatMessage(role="user", content="Looks great."), answer, said])
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
    thinking, text = memory.get_all()[1].blocks
    assert re.fullmatch(omitted("thinking"), thinking.text) and text == TextBlock(text="A tabby.")
    memory.edit("a ginger cat", model=patch({"op": "replace", "id": "2", "content": "A ginger cat."}))
    assert memory.get_all()[1].blocks == [TextBlock(text="A ginger cat.")]  # the superseded reasoning goes
    memory.undo()
    assert memory.get_all()[1].blocks[0] == thinking
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
    assert question.blocks[0] == TextBlock(text="hello") and re.fullmatch(omitted("hologram"), question.blocks[1].text)
    assert answer.blocks == [TextBlock(text="hi"), TextBlock(text="a turning cube")]  # its own text, readable
    assert len(memory.get(input="hello again")) == 2
    stored = memory.transcript.messages
    memory.set(memory.get_all())
    assert memory.transcript.messages == stored
    assert from_core(stored[0]) == question  # a fresh copy each read, the same every time
    # its text changed, the part it could not show is kept
    memory.set([ChatMessage(role="user", blocks=[TextBlock(text="hello there"), question.blocks[1]]), answer])
    changed = memory.transcript.messages[0]
    assert (changed.id, changed.content, changed.parts) == ("m1", "hello there", stored[0].parts)
    assert memory.get_all()[0].blocks == [TextBlock(text="hello there"), question.blocks[1]]
    memory.close()

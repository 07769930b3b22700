"""What ``/save`` writes, ``/load`` reads: text normalised the way every store keeps it."""

from __future__ import annotations

import json
from pathlib import Path

from context_gatekeeper import Message
from context_gatekeeper.chat.session_file import read_session_file, session_document, write_session_file
from context_gatekeeper.records.messages import normalized_text


def test_a_saved_session_holding_surrogates_loads_back(tmp_path: Path) -> None:
    held = [
        Message("u\udc80", "user", "from api \udc80 bytes"),  # a lone surrogate, as older sessions hold
        Message("a1", "assistant", "\ud83d\ude00 ok"),  # a surrogate pair, as some JSON decoders give
    ]
    path = write_session_file(tmp_path / "api.json", session_document("api", held, pinned=["u\udc80"]))
    loaded = read_session_file(path)
    assert [(m.id, m.content) for m in loaded.messages] == [("u\\udc80", "from api \\udc80 bytes"), ("a1", "\U0001F600 ok")]
    assert loaded.pinned == ("u\\udc80",)
    assert path.read_bytes().decode("utf-8")  # plain UTF-8, no escapes a reader could refuse


def test_a_file_saved_before_normalisation_loads(tmp_path: Path) -> None:
    path = tmp_path / "old.json"
    document = {"format": "context-gatekeeper-chat", "version": 1, "messages": [{"role": "user", "content": "hi \ud800 there"}]}
    path.write_text(json.dumps(document, ensure_ascii=True), encoding="utf-8")  # what /save wrote before
    assert read_session_file(path).messages[0].content == normalized_text("hi \ud800 there") == "hi \\ud800 there"

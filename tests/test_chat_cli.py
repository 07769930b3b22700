"""The terminal chat, driven through its input and read through its output (no network)."""

from __future__ import annotations

import doctest
import importlib
import io
import json
import os
import re
import shutil
import sqlite3
import stat
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("rich")

import context_gatekeeper
from context_gatekeeper import Message, MissingExtraError, ModelUnavailableError, SQLiteStore, Transcript
from context_gatekeeper import tokens
from context_gatekeeper.chat.app import CHAT_INSTEAD, EDIT_INSTEAD, main, missing_rich
from context_gatekeeper.chat.offline import OfflineChatModel, OfflineEditor, parse_substitution
from context_gatekeeper.chat.session_file import FORMAT
from context_gatekeeper.chat.signals import Terminated
from context_gatekeeper.testing import ScriptedModel

GDP = "What was the GDP of Ireland in 2021?"


class RecordingChat:
    """The offline chat model, recording what each call was sent; scripted failures first."""

    name = "recording"

    def __init__(self, *failures: BaseException) -> None:
        self.calls: list[list[dict[str, str]]] = []
        self.failures = list(failures)

    def complete(self, messages: list[dict[str, str]]) -> str:
        self.calls.append([dict(m) for m in messages])
        if self.failures:
            raise self.failures.pop(0)
        return OfflineChatModel().complete(messages)


def chat(tmp_path: Path, lines: list[Any], *args: str, session: str = "s", models: Any = None, offline: bool = True) -> tuple[int, str]:
    """Run the chat on ``lines`` as piped input; (exit status, everything it printed)."""
    out = io.StringIO()
    argv = ["--db", str(tmp_path / "chat.db"), "--plain", "--session", session, *args]
    if offline:
        argv.append("--offline")
    status = main(argv, stdin=lines, stdout=out, models=models)
    return status, out.getvalue()


def contents(tmp_path: Path, session: str = "s") -> list[str]:
    transcript = Transcript(session, store=str(tmp_path / "chat.db"))
    try:
        return [m.content for m in transcript.messages]
    finally:
        transcript.store.close()


def head(tmp_path: Path, session: str = "s") -> int:
    transcript = Transcript(session, store=str(tmp_path / "chat.db"))
    try:
        return transcript.head
    finally:
        transcript.store.close()


def test_a_chat_exchange_is_shown_and_stored(tmp_path: Path) -> None:
    status, out = chat(tmp_path, ["hello", "/quit"])
    assert status == 0
    assert "OFFLINE" in out  # says so on screen
    assert "[chat] > hello" in out
    answer = OfflineChatModel().complete([{"role": "user", "content": "hello"}])
    assert f"assistant: {answer}" in out
    assert contents(tmp_path) == ["hello", answer]
    assert "Resume it with: gatekeeper-chat --session s" in out


def test_an_edit_changes_the_history_the_diff_and_the_next_model_call(tmp_path: Path) -> None:
    model = RecordingChat()
    lines = [GDP, "/edit it was Iceland, not Ireland", "/diff", "And its largest sectors?", "/quit"]
    status, out = chat(tmp_path, lines, models=(model, OfflineEditor()))
    assert status == 0
    assert "history edited (revision 2)" in out
    assert "-What was the GDP of Ireland in 2021?" in out and "+What was the GDP of Iceland in 2021?" in out
    assert out.count("+What was the GDP of Iceland in 2021?") == 2  # after the edit, and again on /diff
    sent = "\n".join(m["content"] for m in model.calls[-1])
    assert "Iceland" in sent and "Ireland" not in sent  # the next call sees the revised state
    assert contents(tmp_path)[0] == "What was the GDP of Iceland in 2021?"


def test_edit_mode_is_unmistakable_and_plain_lines_become_instructions(tmp_path: Path) -> None:
    lines = [GDP, "/edit", "Iceland, not Ireland", "/edit", "thanks", "/quit"]
    status, out = chat(tmp_path, lines)
    assert "EDIT HISTORY mode" in out
    assert "[EDIT HISTORY] > Iceland, not Ireland" in out
    assert "[chat] > thanks" in out  # toggled back
    assert contents(tmp_path)[0] == "What was the GDP of Iceland in 2021?"
    assert len(contents(tmp_path)) == 4  # the instruction was not sent as a chat message


@pytest.mark.parametrize(
    ("instruction", "message"),
    [("make it shorter", "cannot apply 'make it shorter'"), ("Spain, not France", "'France' does not appear")],
)
def test_a_failed_edit_changes_nothing_and_says_why(tmp_path: Path, instruction: str, message: str) -> None:
    status, out = chat(tmp_path, [GDP, f"/edit {instruction}", "still here?", "/quit"])
    assert status == 0
    assert "error:" in out and message in out and "othing was changed" in out
    assert contents(tmp_path)[0] == GDP
    assert head(tmp_path) == 2  # two appends, no edit revision
    assert "still here?" in contents(tmp_path)[2]  # the loop carried on


def test_undo_and_redo(tmp_path: Path) -> None:
    lines = [GDP, "/edit Iceland, not Ireland", "/undo", "/history"]
    status, out = chat(tmp_path, lines)
    assert "undid revision 2" in out
    assert contents(tmp_path)[0] == GDP
    status, out = chat(tmp_path, ["/redo", "/undo", "/undo"])
    assert "redid revision 2" in out and "undid revision 2" in out
    assert "error: nothing to undo" in out  # the third undo
    assert contents(tmp_path)[0] == GDP


def test_history_counts_moved_messages_as_moved(tmp_path: Path) -> None:
    """``/history`` counts as ``diff`` does: a reordered message is moved, not removed and added."""
    transcript = Transcript("s", store=str(tmp_path / "chat.db"))
    transcript.append(user="q1", assistant="a1")
    transcript.append(user="q2", assistant="a2")
    q1, a1, q2, a2 = transcript.messages
    transcript.set([q2, a2, q1, a1])  # revision 3: the second exchange first
    transcript.revert(2)  # revision 4: the first order again
    transcript.set([q2, a2, Message(q1.id, "user", "q1, reworded"), {"role": "user", "content": "q3"}])  # 5
    transcript.close()
    status, out = chat(tmp_path, ["/history"])
    rows = {line.split()[0]: line for line in out.splitlines() if re.match(r"\s*[3-5] ", line)}
    assert status == 0 and set(rows) == {"3", "4", "5"}
    change = {number: row.split("│")[3].strip() for number, row in rows.items()}
    assert change == {"3": "2 moved", "4": "2 moved", "5": "+1 -1 ~1"}  # 5: a1 dropped, q3 new, q1 moved and reworded


def test_undo_with_nothing_to_undo_is_an_error_not_a_crash(tmp_path: Path) -> None:
    status, out = chat(tmp_path, ["hi", "/undo", "/quit"])
    assert status == 0 and "error: nothing to undo" in out


def test_resume_after_restart_shows_the_history(tmp_path: Path) -> None:
    chat(tmp_path, [GDP, "/edit Iceland, not Ireland", "/quit"], session="trip")
    status, out = chat(tmp_path, ["/quit"], session="trip")
    assert status == 0
    assert "resuming at revision 2" in out
    assert "-- turn 1" in out and "user: (edited r2) What was the GDP of Iceland in 2021?" in out
    status, out = chat(tmp_path, ["/quit"], session="other")
    assert "new conversation" in out and "Iceland" not in out


def test_save_then_load_round_trips_and_a_corrupt_file_is_rejected(tmp_path: Path) -> None:
    saved = tmp_path / "saved.json"
    chat(tmp_path, [GDP, "/pin 1", f"/save {saved}", "/quit"], session="a")
    document = json.loads(saved.read_text(encoding="utf-8"))
    assert document["format"] == FORMAT and document["version"] == 1
    assert [m["role"] for m in document["messages"]] == ["user", "assistant"]
    assert document["pinned"] == [document["messages"][0]["id"]]

    status, out = chat(tmp_path, ["other topic", f"/load {saved}", "/quit"], session="b")
    assert "loaded 2 messages as revision 2" in out and "-- turn 1 (pinned)" in out
    assert contents(tmp_path, "b") == contents(tmp_path, "a")

    bad_json = tmp_path / "bad.json"
    bad_json.write_text("{not json", encoding="utf-8")
    bad_role = tmp_path / "role.json"
    document["messages"][1]["role"] = "bot"
    bad_role.write_text(json.dumps(document), encoding="utf-8")
    pickled = tmp_path / "pickle.json"
    pickled.write_bytes(b"\x80\x04\x95")
    before = contents(tmp_path, "b")
    lines = [f"/load {bad_json}", f"/load {bad_role}", f"/load {pickled}", f"/load {tmp_path / 'missing.json'}", "/quit"]
    status, out = chat(tmp_path, lines, session="b")
    assert status == 0
    assert "is not JSON" in out
    assert "messages[1].role must be one of system, user, assistant, tool (got 'bot')" in out
    assert out.count("error:") == 4
    assert contents(tmp_path, "b") == before and head(tmp_path, "b") == 2


def test_load_is_undoable(tmp_path: Path) -> None:
    saved = tmp_path / "saved.json"
    chat(tmp_path, ["first", f"/save {saved}"], session="a")
    chat(tmp_path, ["second", f"/load {saved}", "/undo"], session="b")
    assert contents(tmp_path, "b")[0] == "second"


def test_ctrl_c_at_the_prompt_leaves_the_db_intact(tmp_path: Path) -> None:
    status, out = chat(tmp_path, ["hello", KeyboardInterrupt, "never read"])
    assert status == 130
    assert "interrupted" in out and "The conversation is saved" in out
    with sqlite3.connect(tmp_path / "chat.db") as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert contents(tmp_path)[0] == "hello" and len(contents(tmp_path)) == 2
    status, out = chat(tmp_path, ["/quit"])
    assert "user: hello" in out


def test_ctrl_c_or_an_error_during_a_model_call_adds_nothing_and_the_loop_goes_on(tmp_path: Path) -> None:
    model = RecordingChat(KeyboardInterrupt(), ModelUnavailableError("Gemini could not be reached (timeout)"))
    lines = ["first try", "second try", "/retry", "/quit"]
    status, out = chat(tmp_path, lines, models=(model, OfflineEditor()))
    assert status == 0
    assert "cancelled: nothing was changed" in out
    assert "error: Gemini could not be reached (timeout)" in out
    assert "not added to the conversation; /retry sends it again" in out
    assert contents(tmp_path)[0] == "second try" and len(contents(tmp_path)) == 2


def test_sigterm_ends_the_chat_at_the_prompt_or_during_a_model_call_with_status_143(tmp_path: Path) -> None:
    """SIGTERM (Terminated, what the chat's handler raises) is not Ctrl-C's "cancel this call":
    it ends the chat, wherever it comes, with the conversation saved and the pending message unstored."""
    status, out = chat(tmp_path, ["hello", Terminated(), "never read"])
    assert status == 143 and "terminated (SIGTERM)" in out and "The conversation is saved" in out
    assert contents(tmp_path)[0] == "hello" and len(contents(tmp_path)) == 2
    model = RecordingChat(Terminated())
    status, out = chat(tmp_path, ["second", "never read"], models=(model, OfflineEditor()))
    assert status == 143 and "terminated (SIGTERM)" in out and "cancelled" not in out
    assert len(model.calls) == 1 and "never read" not in out
    assert len(contents(tmp_path)) == 2  # the answer it waited for is not stored


def test_sigterm_as_a_subprocess_closes_and_checkpoints_the_database(tmp_path: Path) -> None:
    """A real SIGTERM while the chat waits for input: status 143 (not a signal death), and
    the database file alone (a backup's copy, no -wal) holds the conversation."""
    db = tmp_path / "c.db"
    env = {**os.environ, "PYTHONPATH": _python_path(), "PYTHONUNBUFFERED": "1"}
    env.pop("GOOGLE_API_KEY", None)
    command = [sys.executable, "-m", "context_gatekeeper.chat", "--offline", "--plain", "--db", str(db), "--session", "s"]
    process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, env=env)
    try:
        assert process.stdin is not None and process.stdout is not None
        process.stdin.write(GDP + "\n")
        process.stdin.flush()  # and left open: the chat waits for the next line
        lines: list[str] = []
        while not (lines and lines[-1].startswith("assistant:")):  # printed once the exchange is stored
            line = process.stdout.readline()
            assert line, f"the chat ended before answering: {''.join(lines)}"
            lines.append(line)
    finally:
        process.terminate()
        out, _ = process.communicate(timeout=60)
    assert process.returncode == 143, out
    backup = tmp_path / "backup"
    backup.mkdir()
    shutil.copy(db, backup / db.name)  # the database file alone: nothing left only in -wal
    transcript = Transcript("s", store=str(backup / db.name))
    try:
        assert [m.content for m in transcript.messages][0] == GDP and transcript.head == 1
    finally:
        transcript.store.close()


def test_context_shows_what_the_model_saw_and_why(tmp_path: Path) -> None:
    lines = [
        "How long should a Redis lock TTL be?",
        "By the way, what grind size for espresso?",
        "/pin 1",
        "Which espresso beans are best?",
        "/context",
        "/quit",
    ]
    status, out = chat(tmp_path, lines)
    report = out.split("[chat] > /context", 1)[1]
    assert "last query: Which espresso beans are best?" in report
    assert "gate:" in report and "kept turns: 1, 2 of 2" in report
    assert "pinned" in report  # turn 1 is kept because it is pinned
    assert "sent to the model (6 messages):" in report and "user: How long should a Redis lock TTL be?" in report


def test_a_large_deletion_asks_first(tmp_path: Path) -> None:
    deleting = '{"operations": [{"op": "delete", "id": "1"}, {"op": "delete", "id": "2"}]}'
    editor = ScriptedModel([deleting, deleting])
    models = (OfflineChatModel(), editor)
    status, out = chat(tmp_path, [GDP, "/edit drop everything", "n", "/edit drop everything", "yes", "/quit"], models=models)
    assert "deletes or replaces 100% of the conversation. Apply it? [y/N] n" in out
    assert "not applied; nothing was changed" in out
    assert "@@ user #1: removed @@" in out and "@@ assistant #2: removed @@" in out  # the preview
    assert "history edited (revision 2)" in out
    assert contents(tmp_path) == []


def test_unknown_commands_and_help(tmp_path: Path) -> None:
    status, out = chat(tmp_path, ["/frobnicate", "/help", "/quit"])
    assert "unknown command /frobnicate" in out
    for command in ("/edit", "/undo", "/redo", "/diff", "/history", "/context", "/pin", "/save", "/load", "/quit"):
        assert command in out


def test_without_a_key_or_offline_it_says_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    status, out = chat(tmp_path, ["hello"], offline=False)
    assert status == 2
    assert "set GOOGLE_API_KEY" in out and "--offline" in out
    assert not (tmp_path / "chat.db").exists()


def test_without_rich_it_says_which_extra_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "rich", None)
    out = io.StringIO()
    assert main(["--offline"], stdin=[], stdout=out) == 1
    assert MissingExtraError.install_command("chat") in out.getvalue() == missing_rich() + "\n"


@pytest.mark.parametrize(
    ("instruction", "expected"),
    [
        ("it was Iceland, not Ireland", ("Ireland", "Iceland")),
        ("Iceland, not Ireland, and 2022", ("Ireland", "Iceland")),
        ("replace Python with Rust", ("Python", "Rust")),
        ('change "dogs" to cats.', ("dogs", "cats")),
        ("use tea instead of coffee", ("coffee", "tea")),
        ("drop the detour about printers", None),
    ],
)
def test_offline_editor_instructions(instruction: str, expected: tuple[str, str] | None) -> None:
    assert parse_substitution(instruction) == expected


@pytest.mark.parametrize("name", ["offline", "session_file", "app", "commands", "loop", "render", "readers", "session", "pins"])
def test_chat_docstring_examples_run(name: str) -> None:
    module = importlib.import_module(f"context_gatekeeper.chat.{name}")
    assert doctest.testmod(module, optionflags=doctest.ELLIPSIS).failed == 0


def _python_path() -> str:
    package_root = Path(context_gatekeeper.__file__).resolve().parents[1]
    return os.pathsep.join([str(package_root), os.environ.get("PYTHONPATH", "")])


def test_piped_stdin_as_a_subprocess(tmp_path: Path) -> None:
    script = f"{GDP}\n/edit it was Iceland, not Ireland\n/undo\n/quit\n"
    env = {**os.environ, "PYTHONPATH": _python_path()}
    env.pop("GOOGLE_API_KEY", None)
    result = subprocess.run(
        [sys.executable, "-m", "context_gatekeeper.chat", "--offline", "--db", str(tmp_path / "c.db"), "--plain"],
        input=script, capture_output=True, text=True, env=env, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "\x1b[" not in out  # --plain and a pipe: no escape codes
    assert f"[chat] > {GDP}" in out
    assert "[chat] > /edit it was Iceland, not Ireland" in out and "+What was the GDP of Iceland in 2021?" in out
    assert "undid revision 2" in out
    assert "Resume it with: gatekeeper-chat --session default" in out


README_DEMO_INPUT = "What was the GDP of Ireland in 2021?\n/edit it was Iceland, not Ireland\n/undo\n/quit\n"
README_DEMO_OUTPUT = """\
gatekeeper-chat | session 'default' (new conversation) | model: offline (scripted) | db: chat-demo.sqlite3
Type a message to chat, /edit to switch to EDIT HISTORY mode, /help for commands.
OFFLINE: answers come from a scripted model, not Gemini (no network, no API key).
[chat] > What was the GDP of Ireland in 2021?
assistant: About "GDP of Ireland in 2021": basically, it comes down to GDP and 2021. I can go into more detail if you want.
[chat] > /edit it was Iceland, not Ireland
history edited (revision 2); /undo takes it back:
--- revision 1
+++ revision 2
@@ user #1: changed @@
-What was the GDP of Ireland in 2021?
+What was the GDP of Iceland in 2021?
@@ assistant #2: changed @@
-About "GDP of Ireland in 2021": basically, it comes down to GDP and 2021. I can go into more detail if you want.
+About "GDP of Iceland in 2021": basically, it comes down to GDP and 2021. I can go into more detail if you want.
[chat] > /undo
undid revision 2 (now revision 3):
--- revision 2
+++ revision 3
@@ user #1: changed @@
-What was the GDP of Iceland in 2021?
+What was the GDP of Ireland in 2021?
@@ assistant #2: changed @@
-About "GDP of Iceland in 2021": basically, it comes down to GDP and 2021. I can go into more detail if you want.
+About "GDP of Ireland in 2021": basically, it comes down to GDP and 2021. I can go into more detail if you want.
[chat] > /quit
The conversation is saved. Resume it with: gatekeeper-chat --session default --db chat-demo.sqlite3 --offline
"""


def test_the_readme_demo_prints_exactly_what_the_readme_shows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """printf '...' | gatekeeper-chat --offline --db chat-demo.sqlite3 --plain, on a fresh db."""
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    status = main(["--offline", "--db", "chat-demo.sqlite3", "--plain"], stdin=io.StringIO(README_DEMO_INPUT), stdout=out)
    assert status == 0
    assert out.getvalue() == README_DEMO_OUTPUT


def test_with_a_key_it_chats_and_edits_with_gemini(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("google.genai")
    from context_gatekeeper import GeminiModel
    from context_gatekeeper.chat.app import _models, build_parser

    monkeypatch.setenv("GOOGLE_API_KEY", "test-key-not-used")  # building the client makes no request
    chat_model, editor, label = _models(build_parser().parse_args(["--model", "gemini-2.5-flash"]))
    assert isinstance(chat_model, GeminiModel) and isinstance(editor, GeminiModel) and label == "gemini-2.5-flash"
    assert editor.client is chat_model.client and editor.model == chat_model.model  # one client, one model
    assert chat_model.instead == CHAT_INSTEAD  # once the chat runs, a failed message can be /retry'd
    assert editor.instead == EDIT_INSTEAD  # a failed edit is not kept: the /edit is given again
    web_chat, web_editor, _ = _models(build_parser().parse_args([]), instead="then try again")
    assert web_editor is web_chat and web_chat.instead == "then try again"  # a front end with one way for both


def test_a_failed_edit_says_to_repeat_the_edit_and_a_failed_message_to_retry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Gemini unreachable: the edit's error names the /edit to give again (/retry resends chat
    messages only), the chat message's names /retry."""
    pytest.importorskip("google.genai")
    from context_gatekeeper.chat.app import _models, build_parser

    class Unreachable:
        class models:
            @staticmethod
            def generate_content(**request: Any) -> Any:
                raise TimeoutError()

    monkeypatch.setenv("GOOGLE_API_KEY", "test-key-not-used")
    chat_model, editor, _ = _models(build_parser().parse_args([]))
    chat_model.client = editor.client = Unreachable()
    status, out = chat(tmp_path, [GDP], "--offline")  # a turn to edit
    status, out = chat(tmp_path, ["/edit it was Iceland", "/retry", "hello", "/quit"], models=(chat_model, editor))
    errors = [line for line in out.splitlines() if line.startswith("error:")]
    assert len(errors) == 3, out
    assert "repeat the /edit command" in errors[0] and "/retry" not in errors[0]
    assert "nothing to retry" in errors[1]
    assert "then /retry" in errors[2] and "/edit" not in errors[2]
    assert head(tmp_path) == 1


def test_a_model_that_cannot_be_built_at_start_says_how_to_start_not_to_retry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A key but no google-genai: there is no chat yet, so no failed message to /retry."""
    monkeypatch.setenv("GOOGLE_API_KEY", "test-key-not-used")
    monkeypatch.setitem(sys.modules, "google.genai", None)  # as if the gemini extra were not installed
    status, out = chat(tmp_path, ["hello"], offline=False)
    assert status == 2
    assert "GeminiModel needs google-genai: pip install" in out and "pass --offline" in out
    assert "/retry" not in out and "restart" not in out
    assert not (tmp_path / "chat.db").exists()


# -- pins are stored with the conversation ----------------------------------------------------
REPLICATION = "How does Postgres streaming replication work?"


def test_pins_survive_a_restart_and_the_pinned_turn_is_sent(tmp_path: Path) -> None:
    status, out = chat(tmp_path, [GDP, REPLICATION, "/pin 1", "/quit"])
    assert status == 0 and "pinned turns: 1 (always sent to the model" in out
    model = RecordingChat()
    status, out = chat(tmp_path, ["/pin", "what about its lag?", "/context", "/quit"], models=(model, OfflineEditor()))
    assert status == 0
    assert "-- turn 1 (pinned)" in out  # the resumed conversation shows the pin
    assert "[chat] > /pin\npinned turns: 1 (always sent to the model" in out
    assert "kept turns: 1, 2 of 2" in out and "pinned" in out.split("[chat] > /context", 1)[1]
    assert [m["content"] for m in model.calls[-1][1:3]] == [GDP, contents(tmp_path)[1]]  # turn 1 was sent
    status, out = chat(tmp_path, ["/unpin 1", "/quit"])
    assert "no pinned turns" in out
    status, out = chat(tmp_path, ["/pin", "/quit"])
    assert "(pinned)" not in out and "no pinned turns; /pin N pins turn N so it is always sent" in out


def test_pins_are_per_session_and_never_in_the_conversation(tmp_path: Path) -> None:
    chat(tmp_path, [GDP, "/pin 1", "/quit"], session="a")
    chat(tmp_path, [GDP, "/quit"], session="b")
    status, out = chat(tmp_path, ["/pin", "/quit"], session="b")
    assert "no pinned turns" in out and "(pinned)" not in out
    assert len(contents(tmp_path, "a")) == 2 and head(tmp_path, "a") == 1  # pinning added no revision


def test_pin_without_a_number_says_how_to_pin(tmp_path: Path) -> None:
    status, out = chat(tmp_path, ["/pin", "hi", "/pin", "/pin 1", "/pin 7", "/quit"])
    assert out.count("no pinned turns; /pin N pins turn N so it is always sent") == 2
    assert "error: no turn 7; turns are numbered as /show lists them (1)" in out
    assert "/pin [N]" in chat(tmp_path, ["/help"])[1]


def test_a_pin_of_a_turn_an_edit_deleted_does_not_stop_a_resume(tmp_path: Path) -> None:
    deleting = '{"operations": [{"op": "delete", "id": "1"}, {"op": "delete", "id": "2"}]}'
    models = (OfflineChatModel(), ScriptedModel([deleting]))
    chat(tmp_path, [GDP, REPLICATION, "/pin 1", "/edit drop the GDP question", "/quit"], models=models)
    assert contents(tmp_path)[0] == REPLICATION
    status, out = chat(tmp_path, ["/pin", "/show", "what about its lag?", "/quit"])
    assert status == 0 and "error:" not in out
    assert "no pinned turns" in out and "(pinned)" not in out
    status, out = chat(tmp_path, ["/undo", "/show", "/quit"])  # the turn is back, and so is its pin
    shown = out.split("[chat] > /show", 1)[1]
    assert re.search(rf"-- turn \d+ \(pinned\)\nuser: {re.escape(GDP)}\n", shown), shown
    assert shown.count("(pinned)") == 1


def test_a_reserved_session_name_is_one_line_and_status_2(tmp_path: Path) -> None:
    status, out = chat(tmp_path, ["hi"], session="gatekeeper-chat-pins:s")
    assert status == 2 and "hold a conversation's pins; pick another name" in out
    assert not (tmp_path / "chat.db").exists()


# -- /save and /load keep everything a message carries; /undo of a load takes its pins back ---
TOOL_TURN = [
    Message("u1", "user", "Weather in Reykjavik?"),
    Message("a1", "assistant", "", metadata={"tool_calls": [{"id": "call_1", "name": "weather", "args": {"city": "Reykjavik"}}]}),
    Message("t1", "tool", "4 C, windy", parts=({"type": "text", "text": "4 C, windy"},),
            metadata={"tool_call_id": "call_1", "name": "weather"}),
    Message("a2", "assistant", "It is 4 C and windy."),
]


def stored_messages(tmp_path: Path, session: str = "s") -> list[tuple[str, str, Any, dict[str, Any]]]:
    transcript = Transcript(session, store=str(tmp_path / "chat.db"))
    try:
        return [(m.id, m.role, m.parts, dict(m.metadata)) for m in transcript.messages]
    finally:
        transcript.store.close()


def test_save_then_load_keeps_tool_calls_parts_and_metadata_and_changes_nothing(tmp_path: Path) -> None:
    transcript = Transcript("s", store=str(tmp_path / "chat.db"))
    try:
        transcript.append(messages=TOOL_TURN)
    finally:
        transcript.store.close()
    before = stored_messages(tmp_path)
    saved = tmp_path / "saved.json"
    status, out = chat(tmp_path, [f"/save {saved}", f"/load {saved}", "/quit"])
    assert status == 0 and "error:" not in out
    assert f"the conversation already is what {saved} holds (4 messages and its pins): nothing changed" in out
    assert stored_messages(tmp_path) == before and head(tmp_path) == 1, "no revision, no message rewritten"
    assert json.loads(saved.read_text(encoding="utf-8"))["messages"][1]["metadata"]["tool_calls"][0]["id"] == "call_1"

    chat(tmp_path, [f"/load {saved}", "/quit"], session="other")  # a fresh conversation gets them from the file
    assert stored_messages(tmp_path, "other") == before

    old_format = tmp_path / "old.json"  # written before /save kept parts and metadata
    document = json.loads(saved.read_text(encoding="utf-8"))
    for item in document["messages"]:
        item.pop("metadata", None)
        item.pop("parts", None)
    old_format.write_text(json.dumps(document), encoding="utf-8")
    status, out = chat(tmp_path, [f"/load {old_format}", "/quit"])
    assert "nothing changed" in out
    assert stored_messages(tmp_path) == before and head(tmp_path) == 1


def test_undo_of_a_load_puts_its_pins_back_and_redo_replaces_them_again(tmp_path: Path) -> None:
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"format": FORMAT, "version": 1, "messages": [
        {"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}), encoding="utf-8")
    status, out = chat(tmp_path, [GDP, REPLICATION, "/pin 1", f"/load {other}", "/pin", "/undo", "/quit"])
    assert "loaded 2 messages as revision 3 (/undo takes it back, pins included)" in out
    assert "[chat] > /pin\nno pinned turns" in out, "the load replaced the pins"
    status, out = chat(tmp_path, ["/show", "/pin", "/redo", "/pin", "/undo", "/quit"])
    shown = out.split("[chat] > /show", 1)[1]
    assert re.search(rf"-- turn \d+ \(pinned\)\nuser: {re.escape(GDP)}\n", shown), "the undo put the pin back"
    after_redo = out.split("[chat] > /redo", 1)[1]
    assert "[chat] > /pin\nno pinned turns" in after_redo, "the redo replaced the pins again"
    status, out = chat(tmp_path, ["/pin", "/quit"])
    assert "pinned turns: " in out and "no pinned turns" not in out


def test_a_pin_made_after_a_load_stays_when_the_load_is_undone(tmp_path: Path) -> None:
    saved = tmp_path / "saved.json"
    chat(tmp_path, [GDP, f"/save {saved}"], session="a")
    status, out = chat(tmp_path, [GDP, "/pin 1", f"/load {saved}", REPLICATION, "/pin 2", "/undo", "/pin", "/quit"])
    assert "[chat] > /pin 2\npinned turns: 2 (always sent" in out, "the load replaced pin 1; turn 2 came after it"
    after_undo = out.split("[chat] > /undo", 1)[1]
    assert "[chat] > /pin\npinned turns: 1, 2 (always sent" in after_undo, after_undo


def test_a_load_that_changes_no_message_changes_no_pin_and_says_so(tmp_path: Path) -> None:
    saved = tmp_path / "saved.json"
    lines = [GDP, REPLICATION, "/pin 1", f"/save {saved}", "/pin 2", "/unpin 1", f"/load {saved}", "/pin", "/undo",
             "/pin", "/quit"]
    status, out = chat(tmp_path, lines)
    after_load = out.split(f"[chat] > /load {saved}", 1)[1]
    assert (f"the conversation already holds the 4 messages of {saved}: nothing changed, pins included "
            "(the file pins turn 1; /pin N and /unpin N change the pins)") in after_load
    assert "[chat] > /pin\npinned turns: 2 (always sent" in after_load, "no revision, so no pin change /undo cannot take back"
    assert "[chat] > /undo\nerror: nothing to undo" in after_load
    assert after_load.count("pinned turns: 2 (always sent") == 2 and head(tmp_path) == 2
    status, out = chat(tmp_path, ["/pin", "/quit"])
    assert "pinned turns: 2 (always sent" in out


def test_pin_and_unpin_of_several_turns_are_all_or_nothing(tmp_path: Path) -> None:
    status, out = chat(tmp_path, [GDP, "/pin 1 7", "/quit"])
    assert "error: no turn 7; turns are numbered as /show lists them (1)" in out
    status, out = chat(tmp_path, [REPLICATION, "/pin", "/pin 1 2", "/unpin 2 9", "/pin", "/quit"])
    assert "[chat] > /pin\nno pinned turns" in out, "the refused /pin 1 7 pinned nothing"
    assert "pinned turns: 1, 2 (always sent" in out.split("[chat] > /unpin 2 9", 1)[1]


def test_end_of_input_at_the_large_deletion_question_applies_nothing_and_leaves(tmp_path: Path) -> None:
    deleting = '{"operations": [{"op": "delete", "id": "1"}, {"op": "delete", "id": "2"}]}'
    status, out = chat(tmp_path, [GDP, "/edit drop everything"], models=(OfflineChatModel(), ScriptedModel([deleting])))
    assert status == 0
    assert "@@ user #1: removed @@" in out and "not applied; nothing was changed" in out
    assert "EOFError" not in out and "error:" not in out
    assert "The conversation is saved. Resume it with:" in out
    assert contents(tmp_path) != [] and head(tmp_path) == 1


def test_a_new_session_name_follows_the_web_chats_rules_a_stored_one_opens(tmp_path: Path) -> None:
    for name in ("x" * 81, "tab\there", "bidi\u202eswap"):
        status, out = chat(tmp_path, ["hi"], session=name)
        assert status == 2 and "--session: session names are at most 80 characters" in out
    assert not (tmp_path / "chat.db").exists() or "x" * 81 not in Transcript("x", store=str(tmp_path / "chat.db")).store.sessions()
    long_name = "y" * 81
    transcript = Transcript(long_name, store=str(tmp_path / "chat.db"))
    try:
        transcript.append(user="stored by the library", assistant="ok")
    finally:
        transcript.store.close()
    status, out = chat(tmp_path, ["/quit"], session=long_name)
    assert status == 0 and "resuming at revision 1" in out


def test_a_new_session_name_is_the_one_the_name_rules_give_a_stored_one_its_exact_name(tmp_path: Path) -> None:
    status, out = chat(tmp_path, ["hi", "/quit"], session=" work ")
    assert status == 0 and "session 'work' (new conversation)" in out
    assert "Resume it with: gatekeeper-chat --session work --db" in out
    store = SQLiteStore(tmp_path / "chat.db")
    try:
        assert store.sessions() == ["work"], "stripped, as the web chat names it"
    finally:
        store.close()
    status, out = chat(tmp_path, ["/quit"], session="work")
    assert "session 'work' (resuming at revision 1)" in out
    transcript = Transcript(" spaced ", store=str(tmp_path / "chat.db"))  # stored by the library, spaces and all
    try:
        transcript.append(user="stored by the library", assistant="ok")
    finally:
        transcript.store.close()
    status, out = chat(tmp_path, ["/quit"], session=" spaced ")
    assert "session ' spaced ' (resuming at revision 1)" in out and "--session ' spaced '" in out


# -- privacy of the database, token estimates -------------------------------------------------


@pytest.fixture
def usual_umask() -> Iterator[None]:
    """The usual umask, 022: a file created without care is readable by every local user."""
    previous = os.umask(0o022)
    yield
    os.umask(previous)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.skipif(os.name != "posix", reason="POSIX permissions")
@pytest.mark.usefixtures("usual_umask")
def test_the_default_database_its_folder_and_its_wal_files_are_private(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    folder = tmp_path / "data" / "context-gatekeeper"
    modes: dict[str, int] = {}
    lines = iter(["hello", "/quit"])

    def reader(prompt: Any) -> str:
        line = next(lines)
        if line == "/quit":  # an exchange is stored and the database is open: -wal and -shm exist
            modes.update({path.name: _mode(path) for path in folder.iterdir()})
        return line

    assert main(["--offline", "--plain"], reader=reader, stdout=io.StringIO()) == 0
    assert modes == {"chat.sqlite3": 0o600, "chat.sqlite3-wal": 0o600, "chat.sqlite3-shm": 0o600}
    assert _mode(folder) == 0o700 and _mode(folder / "chat.sqlite3") == 0o600
    assert _mode(tmp_path / "data") == 0o755  # a folder above it: the usual permissions, as mkdir -p gives


@pytest.mark.skipif(os.name != "posix", reason="POSIX permissions")
@pytest.mark.usefixtures("usual_umask")
def test_a_given_database_and_folder_that_exist_keep_their_permissions(tmp_path: Path) -> None:
    folder = tmp_path / "shared-folder"
    folder.mkdir(mode=0o755)
    db = folder / "chat.db"  # what chat(folder, ...) passes as --db
    Transcript("s", store=str(db)).store.close()
    os.chmod(db, 0o640)
    status, out = chat(folder, ["hello", "/quit"])
    assert status == 0, out
    assert _mode(db) == 0o640 and _mode(folder) == 0o755
    assert contents(folder, "s") == ["hello", OfflineChatModel().complete([{"role": "user", "content": "hello"}])]


@pytest.fixture
def no_tiktoken_encoding(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No tiktoken encoding can be loaded offline (only the chat extra installed, no cache)."""
    tokens.load_encoding.cache_clear()
    monkeypatch.setattr(tokens, "_tiktoken_cache_dirs", lambda: [])
    monkeypatch.setattr(tokens, "_llama_index_cache_dir", lambda: None)
    monkeypatch.setattr(tokens, "_warned_estimate", False)
    yield
    tokens.load_encoding.cache_clear()


@pytest.mark.usefixtures("no_tiktoken_encoding")
def test_estimated_token_counts_are_a_notice_at_start_not_a_warning_in_the_conversation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        status = main(["--offline", "--db", "chat-demo.sqlite3", "--plain"], stdin=io.StringIO(README_DEMO_INPUT), stdout=out)
    assert status == 0
    assert [str(w.message) for w in caught] == []
    lines = out.getvalue().splitlines(keepends=True)
    notice = lines.pop(3)  # after the banner and the OFFLINE line
    assert notice.startswith("ESTIMATED TOKENS: ") and "cl100k_base.tiktoken" in notice and "TIKTOKEN_CACHE_DIR" in notice
    assert "".join(lines) == README_DEMO_OUTPUT  # the conversation as the README shows it


def test_the_terminal_chat_answers_a_langchain_model_in_one_call_never_through_its_stream(tmp_path: Path) -> None:
    """The web chat streams framework models (their text); the terminal asks them once, as before."""
    fakes = pytest.importorskip("langchain_core.language_models.fake_chat_models")
    from langchain_core.messages import AIMessage

    class NoStream(fakes.GenericFakeChatModel):  # type: ignore[misc, name-defined]
        def _stream(self, *args: Any, **kwargs: Any) -> Any:
            raise AssertionError("the terminal chat does not stream")

    model = NoStream(messages=iter([AIMessage("Reykjavik is the capital.")]))
    status, out = chat(tmp_path, ["What is the capital of Iceland?", "/quit"], models=(model, OfflineEditor()), offline=False)
    assert status == 0 and "Reykjavik is the capital." in out, out
    assert contents(tmp_path) == ["What is the capital of Iceland?", "Reykjavik is the capital."]


# -- what the chat says after a failure or Ctrl-C is true ---------------------------------------
def test_an_unexpected_failure_is_shown_with_its_type_and_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from context_gatekeeper.chat.render import Renderer
    from context_gatekeeper.chat.session import ChatSession

    prepare = ChatSession.prepare
    failures = [KeyError(27)]

    def failing_once(self: ChatSession, text: str) -> Any:
        if failures:
            raise failures.pop()
        return prepare(self, text)

    monkeypatch.setattr(ChatSession, "prepare", failing_once)
    status, out = chat(tmp_path, ["first try", "/retry", "/quit"])
    assert status == 0 and "error: KeyError: 27" in out and "error: 27" not in out
    assert "not added to the conversation; /retry sends it again" in out and len(contents(tmp_path)) == 2

    def broken(self: Renderer, *args: Any) -> None:
        raise ValueError("boom")

    monkeypatch.setattr(Renderer, "history", broken)
    status, out = chat(tmp_path, ["/history", "/quit"])
    line = next(line for line in out.splitlines() if line.startswith("error:"))
    assert line.startswith("error: ValueError: boom") and "nothing was changed" in line and "Try again" in line


def interrupted_once(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str, at: int = 1) -> list[str]:
    """``owner.name`` raises KeyboardInterrupt on its ``at``-th call (Ctrl-C while it draws)."""
    original = getattr(owner, name)
    calls: list[str] = []

    def draw(*args: Any, **kwargs: Any) -> Any:
        calls.append(name)
        if len(calls) == at:
            raise KeyboardInterrupt
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, draw)
    return calls


@pytest.mark.parametrize(
    ("before", "command", "drawn", "says"),
    [
        ([], "hello zebras", "answer", "the exchange is already stored as revision 1 (/show shows it)"),
        ([GDP], "/edit it was Iceland, not Ireland", "diff", "the edit is already stored as revision 2; /undo takes it back"),
        ([GDP, "/edit it was Iceland, not Ireland"], "/undo", "diff", "the undo is already stored as revision 3; /redo takes it back"),
        ([GDP, "/edit it was Iceland, not Ireland", "/undo"], "/redo", "diff",
         "the redo is already stored as revision 4; /undo takes it back"),
        ([GDP], "/pin 1", "ok", "the new pins are already stored; /pin lists them"),
    ],
)
def test_ctrl_c_after_a_change_is_stored_says_it_is_stored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, before: list[str], command: str, drawn: str, says: str
) -> None:
    from context_gatekeeper.chat.render import Renderer

    chat(tmp_path, [*before, "/quit"])
    stored_before = head(tmp_path)
    interrupted_once(monkeypatch, Renderer, drawn)
    status, out = chat(tmp_path, [command, "/retry", "/quit"])
    assert status == 0 and f"cancelled: {says}" in out and "nothing was changed" not in out, out
    assert head(tmp_path) == stored_before + (0 if command.startswith("/pin") else 1)
    assert "nothing to retry" in out  # a stored exchange is not sent again


def test_ctrl_c_while_a_loaded_file_is_drawn_says_the_load_is_stored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from context_gatekeeper.chat.loop import ChatLoop

    saved = tmp_path / "saved.json"
    chat(tmp_path, [GDP, "/pin 1", f"/save {saved}"], session="a")
    chat(tmp_path, [REPLICATION, "/quit"])
    interrupted_once(monkeypatch, ChatLoop, "show_conversation", at=2)  # the first shows the resumed conversation
    status, out = chat(tmp_path, [f"/load {saved}", "/pin", "/undo", "/show", "/quit"])
    assert "cancelled: the load is already stored as revision 2; /undo takes it back (pins included)" in out, out
    assert "nothing was changed" not in out
    assert "[chat] > /pin\npinned turns: 1 (always sent" in out, "the load's pins came with it"
    assert contents(tmp_path)[0] == REPLICATION, "/undo took the load back"


@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM"])
def test_ctrl_c_between_a_loads_messages_and_its_pins_waits_for_the_pins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, signame: str
) -> None:
    """The load and its pins are one step: Ctrl-C (or SIGTERM) that comes as the messages are
    written takes effect after the pins are written too; Ctrl-C then says both are stored."""
    import signal

    saved = tmp_path / "saved.json"
    chat(tmp_path, [GDP, "/pin 1", f"/save {saved}"], session="a")
    chat(tmp_path, [REPLICATION, "/quit"])
    original = Transcript.set

    def set_then_ctrl_c(self: Transcript, *args: Any, **kwargs: Any) -> Any:
        revision = original(self, *args, **kwargs)
        if not self.session_id.startswith("gatekeeper-chat-pins:"):
            signal.raise_signal(getattr(signal, signame))  # right after the messages are stored
        return revision

    monkeypatch.setattr(Transcript, "set", set_then_ctrl_c)
    # Ctrl-C as a terminal has it, whatever handler earlier tests in this worker left
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        status, out = chat(tmp_path, [f"/load {saved}", "/quit"])
    finally:
        signal.signal(signal.SIGINT, previous)
    monkeypatch.undo()
    if signame == "SIGINT":
        assert status == 0 and "cancelled: the load is already stored as revision 2" in out, out
    else:
        assert status == 143 and "terminated (SIGTERM)" in out and "The conversation is saved" in out, out
    status, out = chat(tmp_path, ["/pin", "/undo", "/pin", "/quit"])
    assert "[chat] > /pin\npinned turns: 1 (always sent" in out, "the pins were stored with the load"
    assert "[chat] > /undo" in out and out.rstrip().count("no pinned turns") == 1, "/undo took both back"


# -- turn numbers are positions in the conversation -----------------------------------------------
def shown_turns(out: str, after: str) -> list[str]:
    """The ``-- turn N`` lines the first ``after`` command printed."""
    part = out.split(f"[chat] > {after}", 1)[1].split("[chat] > ", 1)[0]
    return re.findall(r"^-- turn (\d+.*)$", part, flags=re.M)


def test_turns_are_numbered_by_position_across_undo_redo_and_restarts(tmp_path: Path) -> None:
    """/show, /pin and /context number the turns 1..N as shown, whatever the gate's internal
    ids are after a load, an undo or a redo, and the same after a restart."""
    loaded = tmp_path / "one.json"
    loaded.write_text(json.dumps({"format": FORMAT, "version": 1, "messages": [
        {"id": "a", "role": "user", "content": "zebras question"}, {"id": "b", "role": "assistant", "content": "zebras answer"}]}),
        encoding="utf-8")
    lines = ["Redis lock TTL question", f"/load {loaded}", "lions in africa", "/undo", "/show", "/redo", "/show",
             "/pin 2", "zebras and lions?", "/context", "/quit"]
    status, out = chat(tmp_path, lines)
    assert status == 0 and "error:" not in out, out
    assert shown_turns(out, "/show") == ["1", "2"]  # after the undo
    after_redo = out.split("[chat] > /redo", 1)[1]
    assert shown_turns(after_redo, "/show") == ["1", "2"]
    assert "[chat] > /pin 2\npinned turns: 2 (always sent" in out
    report = out.split("[chat] > /context", 1)[1]
    kept = re.search(r"kept turns: ([\d, ]+) of (\d+)", report)
    assert kept is not None and kept.group(2) == "2", report
    assert {int(n) for n in kept.group(1).split(", ")} <= {1, 2} and "2" in kept.group(1).split(", ")
    status, out = chat(tmp_path, ["/show", "/unpin 2", "/pin 1", "/show", "/quit"])
    assert shown_turns(out, "/show") == ["1", "2 (pinned)", "3"], "a restart keeps the numbers and the pin"
    assert re.search(r"-- turn 1 \(pinned\)\nuser: zebras question\n", out.split("[chat] > /pin 1", 1)[1])

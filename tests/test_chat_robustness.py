"""The terminal chat never destroys its database, never crashes on text it cannot print,
and fails with one clear line (no traceback) on bad options, a database it cannot use or
pins it cannot read, losing nothing already stored."""

from __future__ import annotations

import io
import json
import os
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("rich")

import context_gatekeeper
import context_gatekeeper.stores.sqlite as sqlite_module
from context_gatekeeper import Transcript
from context_gatekeeper.chat import session_file
from context_gatekeeper.chat.app import main
from context_gatekeeper.chat.offline import OfflineChatModel, OfflineEditor
from context_gatekeeper.chat.render import Renderer
from context_gatekeeper.chat.session import ChatSession, chat_sessions, is_pin_record, pin_record_id
from context_gatekeeper.chat.session_file import FORMAT, SessionFileError, session_document, write_session_file
from context_gatekeeper.editing.format import ideal_patch_reply
from context_gatekeeper.records.messages import Message
from context_gatekeeper.records.operations import Replace
from context_gatekeeper.testing import ScriptedModel

SURROGATE = chr(0xD800)


def run(db: Path, lines: list[Any], *args: str, models: Any = None) -> tuple[int, str]:
    """The chat on piped ``lines``, printing to a UTF-8 byte stream like a real terminal."""
    raw = io.BytesIO()
    out = io.TextIOWrapper(raw, encoding="utf-8", write_through=True)
    argv = ["--db", str(db), "--plain", "--session", "s", *args]
    if models is None:
        argv.append("--offline")
    status = main(argv, stdin=lines, stdout=out, models=models)
    return status, raw.getvalue().decode("utf-8")


def stored(db: Path, session: str = "s") -> list[str]:
    transcript = Transcript(session, store=str(db))
    try:
        return [m.content for m in transcript.messages]
    finally:
        transcript.store.close()


def one_error_line(out: str) -> str:
    errors = [line for line in out.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in out, out
    return errors[0]


# -- item 3: /save never overwrites the database ------------------------------------------------
def test_save_refuses_the_open_database_even_through_a_symlink(tmp_path: Path) -> None:
    db = tmp_path / "chat.db"
    run(db, ["hello", "/quit"])
    link = tmp_path / "innocent.json"
    link.symlink_to(db)
    status, out = run(db, ["second", f"/save {db}", f"/save {link}", f"/save {db}-wal", "/quit"])
    assert status == 0 and out.count("is the chat's own database") == 3
    assert "messages to" not in out
    assert db.read_bytes().startswith(b"SQLite format 3\x00")
    assert len(stored(db)) == 4


def test_save_refuses_any_sqlite_database(tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    transcript = Transcript("x", store=str(other))
    transcript.append(user="keep me", assistant="kept")
    transcript.store.close()
    before = other.read_bytes()
    status, out = run(tmp_path / "chat.db", ["hi", f"/save {other}", "/quit"])
    assert "is an SQLite database" in out and other.read_bytes() == before


def test_a_failed_save_leaves_the_target_and_no_temporary_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "saved.json"
    target.write_text("previous", encoding="utf-8")
    (tmp_path / "saved.json.tmp").write_text("the user's own file", encoding="utf-8")
    document = session_document("s", [Message("a", "user", "hi")])

    def full_disk(src: Any, dst: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(session_file.os, "replace", full_disk)
    with pytest.raises(OSError, match="No space"):
        write_session_file(target, document)
    monkeypatch.undo()
    assert target.read_text(encoding="utf-8") == "previous"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["saved.json", "saved.json.tmp"]
    assert (tmp_path / "saved.json.tmp").read_text(encoding="utf-8") == "the user's own file"
    write_session_file(target, document)
    assert json.loads(target.read_text(encoding="utf-8"))["format"] == FORMAT
    assert sorted(p.name for p in tmp_path.iterdir()) == ["saved.json", "saved.json.tmp"]


def test_save_into_a_folder_is_refused_at_once_and_leaves_nothing_behind(tmp_path: Path) -> None:
    folder = tmp_path / "folder"
    folder.mkdir()
    status, out = run(tmp_path / "chat.db", ["hi", f"/save {folder}", "/quit"])
    assert status == 0 and list(folder.iterdir()) == []
    assert f"{folder} is a folder; /save uses regular files only, and nothing was changed" in out
    assert "Errno" not in out
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []
    with pytest.raises(SessionFileError, match="is a folder; /save uses regular files only"):
        write_session_file(folder, session_document("s", [Message("a", "user", "hi")]))


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
def test_save_and_load_refuse_a_named_pipe_at_once_and_change_nothing(tmp_path: Path) -> None:
    pipe = tmp_path / "pipe.json"
    os.mkfifo(pipe)
    db = tmp_path / "chat.db"
    lines = "hello\n/pin 1\n/save pipe.json\n/load pipe.json\n/pin\n/quit\n"
    # in a process of its own: opening a pipe to read it blocks until a writer comes, so a chat
    # that did would never end (the timeout is a bound for that failure, not a wait)
    done = subprocess.run(
        [sys.executable, "-m", "context_gatekeeper.chat", "--offline", "--plain", "--db", str(db), "--session", "s"],
        input=lines, capture_output=True, text=True, cwd=tmp_path, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    for command in ("/save", "/load"):
        assert f"error: pipe.json is a named pipe (FIFO); {command} uses regular files only, and nothing was changed" in done.stdout
    assert "[chat] > /pin\npinned turns: 1 (always sent" in done.stdout
    assert stat.S_ISFIFO(pipe.stat().st_mode), "still the pipe it was"
    assert len(stored(db)) == 2 and [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_save_and_load_refuse_a_device_and_load_reads_no_more_than_the_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    document = session_document("s", [Message("a", "user", "hi")])
    if os.name == "posix":
        import socket

        with pytest.raises(SessionFileError, match="is a character device; /load uses regular files only"):
            session_file.read_session_file(os.devnull)
        monkeypatch.chdir(tmp_path)  # a short name: socket paths have a small limit
        address = Path("sock")
        with socket.socket(socket.AF_UNIX) as listening:
            listening.bind(str(address))
            with pytest.raises(SessionFileError, match="is a socket; /save uses regular files only"):
                write_session_file(address, document)
            assert stat.S_ISSOCK(address.stat().st_mode)
    with pytest.raises(SessionFileError, match="is a folder; /load uses regular files only"):
        session_file.read_session_file(tmp_path)
    saved = write_session_file(tmp_path / "s.json", document)
    monkeypatch.setattr(session_file, "MAX_BYTES", saved.stat().st_size - 1)
    with pytest.raises(SessionFileError, match="is larger than"):
        session_file.read_session_file(saved)
    monkeypatch.setattr(session_file, "MAX_BYTES", saved.stat().st_size)
    assert session_file.read_session_file(saved).messages[0].content == "hi"


# -- item 12: text that cannot be printed --------------------------------------------------------
def bad_session_file(tmp_path: Path) -> Path:
    path = tmp_path / "bad.json"
    path.write_text(
        '{"format": "context-gatekeeper-chat", "version": 1, "messages": ['
        '{"role": "user", "content": "hi \\ud800 there"}, {"role": "assistant", "content": "ok"}]}',
        encoding="utf-8",
    )
    return path


def test_a_session_file_with_a_lone_surrogate_loads_escaped_and_the_chat_goes_on(tmp_path: Path) -> None:
    db = tmp_path / "chat.db"
    status, out = run(db, ["hello", f"/load {bad_session_file(tmp_path)}", "after", "/quit"])
    assert status == 0 and "Traceback" not in out and "not a valid session file" not in out
    messages = stored(db)
    assert "hi \\ud800 there" in messages and SURROGATE not in "".join(messages)
    assert session_file.read_session_file(bad_session_file(tmp_path)).messages[0].content == "hi \\ud800 there"


def test_a_stored_session_holding_a_lone_surrogate_still_starts(tmp_path: Path) -> None:
    db = tmp_path / "chat.db"
    transcript = Transcript("s", store=str(db))
    transcript.append(user=f"hi {SURROGATE} there", assistant="ok")
    transcript.store.close()
    status, out = run(db, ["/show", "next", "/quit"])
    assert status == 0 and "Traceback" not in out
    assert "user: hi \\ud800 there" in out and "[chat] > next" in out
    assert len(stored(db)) == 4


def test_a_conversation_that_fails_to_render_still_starts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "chat.db"
    run(db, ["hello", "/quit"])

    def broken(self: Renderer, *args: Any, **kwargs: Any) -> None:
        raise ValueError("cannot draw this")

    monkeypatch.setattr(Renderer, "conversation", broken)
    status, out = run(db, ["again", "/quit"])
    assert status == 0 and "could not show the stored conversation (ValueError: cannot draw this)" in out
    assert "[chat] > again" in out and len(stored(db)) == 4


def test_bad_text_from_a_model_or_the_input_is_escaped_or_refused(tmp_path: Path) -> None:
    db = tmp_path / "chat.db"
    chat_model = ScriptedModel([f"answer {SURROGATE}"])
    bad_edit = json.dumps({"operations": [{"op": "replace", "id": "1", "content": f"x {SURROGATE}"}]})
    editor = ScriptedModel([bad_edit, bad_edit])
    status, out = run(db, [f"in{chr(0xDCE9)}put", "/edit make it odd", "/quit"], models=(chat_model, editor))
    assert status == 0 and "Traceback" not in out
    assert stored(db) == ["in\ufffdput", "answer \ufffd"]
    assert "lone surrogate" in out and len(editor.calls) == 2


def test_an_edit_reply_with_a_lone_surrogate_is_retried() -> None:
    transcript = Transcript("t")
    transcript.append(user="Ireland?", assistant="Dublin.")
    good = ideal_patch_reply(transcript.messages, [Replace(transcript.messages[0].id, "Iceland?")])
    bad = json.dumps({"operations": [{"op": "replace", "id": "1", "content": f"Ice{SURROGATE}?"}]})
    model = ScriptedModel([bad, good])
    transcript.edit("Iceland", model=model)
    assert transcript.messages[0].content == "Iceland?" and "lone surrogate" in model.calls[1].text


# -- item 13: one clear line and a non-zero exit -------------------------------------------------
@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--budget", "-5"], "--budget must be a whole number of tokens >= 0 (got -5)"),
        (["--budget", "-1"], "--budget must be a whole number of tokens >= 0 (got -1)"),
        (["--session", ""], "--session needs a non-blank name"),
        (["--session", "   "], "--session needs a non-blank name"),
    ],
)
def test_unusable_options_are_one_line_and_status_2(tmp_path: Path, args: list[str], says: str) -> None:
    status, out = run(tmp_path / "chat.db", ["hello", "/quit"], *args)
    assert status == 2 and says in one_error_line(out)


def test_a_budget_of_0_is_usable_and_sends_no_earlier_turns(tmp_path: Path) -> None:
    status, out = run(tmp_path / "chat.db", ["hello", "and again", "/quit"], "--budget", "0")
    assert status == 0 and "error:" not in out and "must be" not in out
    assert stored(tmp_path / "chat.db")[::2] == ["hello", "and again"]


@pytest.mark.parametrize("budget", ["1.5", "lots"])
def test_a_budget_that_is_not_a_whole_number_says_what_to_pass(
    tmp_path: Path, budget: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        run(tmp_path / "chat.db", ["hello", "/quit"], "--budget", budget)
    assert exited.value.code == 2
    assert f"--budget: must be a whole number of tokens >= 0, e.g. --budget 2000 (got {budget!r})" in capsys.readouterr().err


@pytest.mark.parametrize("content", [os.urandom(4096), b"just some text\n" * 100], ids=["random", "text"])
def test_a_file_that_is_not_a_database_is_one_line_and_left_unchanged(tmp_path: Path, content: bytes) -> None:
    db = tmp_path / "chat.db"
    db.write_bytes(content)
    status, out = run(db, ["hello", "/quit"])
    assert status == 1 and "not a gatekeeper-chat database" in one_error_line(out)
    assert db.read_bytes() == content


def test_a_folder_given_as_the_database_is_one_line(tmp_path: Path) -> None:
    status, out = run(tmp_path, ["hello", "/quit"])
    line = one_error_line(out)
    assert status == 1 and "cannot use the database" in line
    assert f"it is a folder; pass --db with the path of a file, e.g. --db {tmp_path / 'chat.sqlite3'}" in line
    assert "read-only" not in line and "SQLiteStore" not in line  # not the library's advice


def test_an_in_memory_database_says_nothing_is_saved(tmp_path: Path) -> None:
    status, out = run(Path(":memory:"), ["hello", "/quit"])
    assert status == 0 and "Resume it with" not in out and "is saved" not in out
    assert out.splitlines()[-1] == "--db :memory: kept the conversation in memory only: nothing was saved."


def failing_store(monkeypatch: pytest.MonkeyPatch, message: str) -> None:
    """Every write fails inside its transaction, as SQLite fails on a read-only file or a full disk."""

    def hook(stage: str) -> None:
        if stage == "written":
            raise sqlite3.OperationalError(message)

    original = sqlite_module.SQLiteStore

    class Failing(original):  # type: ignore[misc, valid-type]
        def __init__(self, path: Any, **kwargs: Any) -> None:
            super().__init__(path, fault_hook=hook, **kwargs)

    monkeypatch.setattr(context_gatekeeper, "SQLiteStore", Failing)  # the chat opens stores through the public API


@pytest.mark.parametrize(
    ("message", "says"),
    [("attempt to write a readonly database", "read-only"), ("database or disk is full", "the disk is full")],
)
def test_a_store_that_cannot_be_written_stops_with_one_line_and_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, message: str, says: str
) -> None:
    db = tmp_path / "chat.db"
    run(db, ["first", "/quit"])
    before = stored(db)
    failing_store(monkeypatch, message)
    status, out = run(db, ["second", "third", "/quit"])
    line = one_error_line(out)
    assert status == 1 and says in line and message in line
    assert "[chat] > third" not in out and "Everything before that is saved" in out
    monkeypatch.undo()
    assert stored(db) == before


def test_a_locked_database_is_one_line_and_loses_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "chat.db"
    run(db, ["first", "/quit"])
    before = stored(db)
    original = sqlite_module.SQLiteStore

    class Impatient(original):  # type: ignore[misc, valid-type]
        def __init__(self, path: Any, **kwargs: Any) -> None:
            super().__init__(path, busy_timeout=0.05, **kwargs)

    monkeypatch.setattr(context_gatekeeper, "SQLiteStore", Impatient)
    holder = sqlite3.connect(db, isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")
        status, out = run(db, ["second", "/quit"])
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert status == 1 and "another program is writing to it" in one_error_line(out)
    monkeypatch.undo()
    assert stored(db) == before


def test_a_session_log_that_cannot_load_is_one_line_and_left_unchanged(tmp_path: Path) -> None:
    db = tmp_path / "chat.db"
    run(db, ["hello", "/quit"])
    with sqlite3.connect(db) as conn:  # a hand-edited row
        conn.execute("UPDATE revisions SET changes = '{not json' WHERE session_id = 's' AND number = 1")
    conn.close()
    before = db.read_bytes()
    status, out = run(db, ["again", "/quit"])
    assert status == 1 and "cannot open session 's'" in one_error_line(out)
    assert db.read_bytes() == before


def test_undecodable_input_bytes_on_a_strict_stdin_do_not_crash(tmp_path: Path) -> None:
    root = str(Path(context_gatekeeper.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]),
           "PYTHONIOENCODING": "utf-8:strict"}
    env.pop("GOOGLE_API_KEY", None)
    result = subprocess.run(
        [sys.executable, "-m", "context_gatekeeper.chat", "--offline", "--db", str(tmp_path / "c.db"), "--plain"],
        input=b"caf\xe9 au lait\n/quit\n", capture_output=True, env=env, timeout=120,
    )
    assert result.returncode == 0 and b"Traceback" not in result.stderr, result.stderr
    assert "[chat] > caf\ufffd au lait" in result.stdout.decode("utf-8")


# -- pins: stored beside the conversation, never a reason to lose it -----------------------------
def test_pins_that_cannot_be_read_are_one_line_and_the_chat_goes_on(tmp_path: Path) -> None:
    db = tmp_path / "chat.db"
    run(db, ["first", "/pin 1", "/quit"])
    record = Transcript(pin_record_id("s"), store=str(db))
    record.set([Message("pins", "system", "{not json")])
    record.close()
    before = stored(db)
    status, out = run(db, ["/pin", "/pin 1", "/quit"])
    assert status == 0
    assert "pins stored for session 's' cannot be read" in one_error_line(out)
    assert "no pinned turns" in out and "pinned turns: 1" in out
    assert stored(db) == before
    status, out = run(db, ["/pin", "/quit"])  # the next /pin wrote a fresh list
    assert "error:" not in out and "pinned turns: 1" in out


def _session(db: Path, **options: Any) -> ChatSession:
    transcript = Transcript("s", store=str(db))
    return ChatSession(transcript, OfflineChatModel(), OfflineEditor(), **options)


def test_a_pin_that_cannot_be_stored_changes_nothing(tmp_path: Path) -> None:
    db = tmp_path / "chat.db"
    session = _session(db)
    session.ask("How long should a Redis lock TTL be?")
    session.pin(1)

    def full(point: str) -> None:
        if point == "written":
            raise sqlite3.OperationalError("database or disk is full")

    session.transcript.store.fault_hook = full
    with pytest.raises((sqlite3.Error, OSError)):
        session.unpin(1)
    assert session.pinned_numbers() == [1] and len(session.pinned) == 1
    session.transcript.store.fault_hook = None
    session.transcript.close()
    again = _session(db)
    try:
        assert again.pinned_numbers() == [1] and again.pins_problem is None
    finally:
        again.transcript.close()


def test_pins_another_process_changed_are_read_and_kept(tmp_path: Path) -> None:
    db = tmp_path / "chat.db"
    first = _session(db)
    for question in ("How long should a Redis lock TTL be?", "What was the GDP of Ireland in 2021?", "Who wrote Hamlet?"):
        first.ask(question)
    second = _session(db)  # another chat on the same file, opened before any pin
    try:
        first.pin(1)
        assert second.pinned_numbers() == [1], "a pin stored by another process is seen"
        second.pin(2)
        assert first.pinned_numbers() == [1, 2] and second.pinned_numbers() == [1, 2], "no pin written over"
        first.unpin(1)
        assert second.pinned_numbers() == [2]
    finally:
        first.transcript.close()
        second.transcript.close()


def test_a_pin_written_between_the_read_and_the_write_is_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "chat.db"
    first = _session(db)
    for question in ("How long should a Redis lock TTL be?", "What was the GDP of Ireland in 2021?"):
        first.ask(question)
    second = _session(db)
    record = first._pin_record
    assert record is not None
    read = record.snapshot
    raced: list[int] = []

    def snapshot_then_another_process_writes(revision: int) -> Any:
        state = read(revision)
        if not raced:  # right after the first read, the other chat pins turn 2
            raced.append(revision)
            second.pin(2)
        return state

    monkeypatch.setattr(record, "snapshot", snapshot_then_another_process_writes)
    try:
        first.pin(1)
        assert raced and first.pinned_numbers() == [1, 2] and second.pinned_numbers() == [1, 2]
    finally:
        first.transcript.close()
        second.transcript.close()


def test_pin_records_are_not_conversations_and_go_with_a_purge(tmp_path: Path) -> None:
    db = tmp_path / "chat.db"
    session = _session(db)
    session.ask("first")
    session.pin(1)
    store = session.transcript.store
    assert is_pin_record(pin_record_id("s")) and sorted(store.sessions()) == ["gatekeeper-chat-pins:s", "s"]
    assert chat_sessions(store) == ["s"]
    session.purge()
    assert store.sessions() == [] and session.pinned == frozenset()
    session.transcript.close()


def test_keep_pins_false_stores_nothing(tmp_path: Path) -> None:
    db = tmp_path / "chat.db"
    session = _session(db, keep_pins=False)
    session.ask("first")
    session.pin(1)
    assert session.pinned_numbers() == [1] and session.transcript.store.sessions() == ["s"]
    session.transcript.close()
    again = _session(db)
    try:
        assert again.pinned_numbers() == []
    finally:
        again.transcript.close()


@pytest.mark.parametrize("keep_pins", [True, False], ids=["stored", "in-memory"])
def test_undoing_a_load_takes_its_pin_change_back_and_redo_makes_it_again(tmp_path: Path, keep_pins: bool) -> None:
    db = tmp_path / "chat.db"
    session = _session(db, keep_pins=keep_pins)
    other = _session(db) if keep_pins else session  # another chat on the same file undoes it
    try:
        session.ask("How long should a Redis lock TTL be?")
        session.pin(1)
        pinned = set(session.pinned)
        loaded = session.load([Message("n1", "user", "hi"), Message("n2", "assistant", "hello")], pinned=["n1"])
        assert loaded.changes and session.pinned == {"n1"}
        other.undo()
        assert session.pinned == pinned and other.pinned == pinned, "the load's pins were taken back"
        other.redo()
        assert session.pinned == {"n1"} and other.pinned == {"n1"}
        session.undo()
        assert session.pinned == pinned
    finally:
        session.transcript.close()
        if other is not session:
            other.transcript.close()


@pytest.mark.parametrize("keep_pins", [True, False], ids=["stored", "in-memory"])
def test_a_revert_to_before_a_load_takes_its_pins_back_and_undoing_the_revert_makes_them_again(
    tmp_path: Path, keep_pins: bool
) -> None:
    db = tmp_path / "chat.db"
    session = _session(db, keep_pins=keep_pins)
    other = _session(db) if keep_pins else session  # another chat on the same file sees the same pins
    try:
        session.ask("What was the GDP of Ireland in 2021?")
        session.ask("How long should a Redis lock TTL be?")  # revision 2
        session.pin(1)
        pinned = set(session.pinned)
        session.load([Message("x1", "user", "Tell me about Kafka partitions"), Message("x2", "assistant", "Kafka"),
                      Message("y1", "user", "And Postgres replication lag?"), Message("y2", "assistant", "Postgres")],
                     pinned=["y1"])
        session.pin(session.number_of("x1"))  # a pin made after the load: not the load's, so it stays
        assert session.pinned == {"y1", "x1"}
        reverted = session.revert(2)
        assert reverted.kind == "revert" and session.transcript.messages[0].content == "What was the GDP of Ireland in 2021?"
        assert session.pinned == pinned | {"x1"} and other.pinned == session.pinned, "the load's pins were taken back"
        other.undo()
        assert session.pinned == {"y1", "x1"}, "undoing the revert makes the load's pins again"
        other.redo()
        assert session.pinned == pinned | {"x1"}
        session.undo()  # undo the revert again, then undo the load itself: a revert to a
        session.undo()  # revision the load made brings its pins back
        assert session.pinned == pinned | {"x1"}
        session.revert(3)
        assert session.pinned == {"y1", "x1"}
        assert [m.content for m in session.transcript.messages][0] == "Tell me about Kafka partitions"
    finally:
        session.transcript.close()
        if other is not session:
            other.transcript.close()


def test_a_load_that_changes_nothing_records_no_revision_and_remembers_nothing(tmp_path: Path) -> None:
    session = _session(tmp_path / "chat.db")
    try:
        session.ask("How long should a Redis lock TTL be?")
        session.pin(1)
        for pinned in ([session.turns()[0][1].key], []):  # the same pins, other pins: no message changes
            again = session.load(session.transcript.messages, pinned=pinned)
            assert not again.changes and session.transcript.head == 1
            assert session.pinned_numbers() == [1], "no revision, so no pin change /undo could not take back"
        with pytest.raises(context_gatekeeper.HistoryError):  # nothing to undo: the pins stay
            session.undo()
        assert session.pinned_numbers() == [1]
    finally:
        session.transcript.close()


def test_a_session_file_with_unusable_parts_or_metadata_is_refused_whole() -> None:
    document = {"format": FORMAT, "version": 1, "messages": [
        {"role": "user", "content": "hi", "parts": "not a list"},
        {"role": "assistant", "content": "hello", "metadata": ["not", "an", "object"]},
        {"role": "user", "content": "ok", "parts": None, "metadata": None},
    ]}
    with pytest.raises(SessionFileError) as refused:
        session_file.parse_session_document(document)
    assert "messages[0].parts must be a list of content blocks" in str(refused.value)
    assert "messages[1].metadata must be an object" in str(refused.value)
    assert "messages[2]" not in str(refused.value)


# -- control characters from a model or a stored message never reach the terminal ----------------
ESC = "\x1b"


def test_escape_sequences_in_answers_edits_and_input_are_shown_not_acted_on(tmp_path: Path) -> None:
    answer = f"Dublin.{ESC}]0;owned{ESC}\\{ESC}[2J{ESC}[31mfake prompt> "
    edit = {"operations": [{"op": "replace", "id": "2", "content": f"Reykjavik.{ESC}[8mhidden{ESC}[0m"}]}
    chat, editor = ScriptedModel([answer]), ScriptedModel([json.dumps(edit)])
    status, out = run(tmp_path / "esc.sqlite3", [f"Capital of {ESC}[31mIreland?", "/edit Iceland", "y", "/show",
                                                  "/history", "/context", "/quit"], models=(chat, editor))
    assert status == 0 and ESC not in out and "\u009b" not in out
    assert "Dublin.\u241b]0;owned" in out and "Reykjavik.\u241b[8mhidden" in out  # shown, one picture for each
    _, resumed = run(tmp_path / "esc.sqlite3", ["/quit"], models=(ScriptedModel([]), ScriptedModel([])))
    assert ESC not in resumed and "\u241b[31mIreland" in resumed  # the stored conversation, shown again


def test_carriage_returns_backspaces_and_bells_are_drawn_never_dropped(tmp_path: Path) -> None:
    overprinting = "\r\b\x0b\x0c\x07"  # rich drops these as it builds a line: each must be drawn first
    question = "How much\x0b is\x0c the\x07 refund?"
    answer = "refund 100\r0 EUR, 12\b\b3\x07"
    edit = {"operations": [{"op": "replace", "id": "2", "content": "refund 1\b00 EUR\x07"}]}
    chat, editor = ScriptedModel([answer]), ScriptedModel([json.dumps(edit)])
    lines = [question, "/edit make it 100", "/show", "/context", "/nosuch\b", "/quit"]
    status, out = run(tmp_path / "cr.sqlite3", lines, models=(chat, editor))
    assert status == 0 and not set(overprinting) & set(out)
    drawn = "How much\u240b is\u240c the\u2407 refund?"
    assert f"[chat] > {drawn}" in out and f"user: {drawn}" in out  # the input, echoed; the conversation
    assert "assistant: refund 100\u240d0 EUR, 12\u2408\u24083\u2407" in out  # the answer
    assert "+refund 1\u240800 EUR\u2407" in out  # the diff
    assert f"last query: {drawn}" in out  # /context
    assert "/nosuch\u2408" in one_error_line(out)  # an error naming what was typed


def test_diff_lines_break_at_newlines_only() -> None:
    from context_gatekeeper.chat.render import diff_lines

    class Shown:
        def __str__(self) -> str:
            return "@@ assistant #2: changed @@\n-a\rb\u2028c\x1cd\n+e\n"

    assert diff_lines(Shown()) == ["@@ assistant #2: changed @@", "-a\rb\u2028c\x1cd", "+e"]  # type: ignore[arg-type]


def test_visible_keeps_newlines_tabs_and_every_printable_character() -> None:
    from context_gatekeeper.chat.render import visible

    text = "line one\n\ttab 中文 é 😀 \u200b"
    assert visible(text) == text
    assert visible(f"a{ESC}[2Jb\x07\x9b\u202e") == "a\u241b[2Jb\u2407\ufffd\ufffd"
    # the bidi marks (LRM, RLM, ALM) move the text around them as an override does
    assert visible("pay 100\u200e-\u200f5 \u061cEUR") == "pay 100\ufffd-\ufffd5 \ufffdEUR"


def test_the_offline_editor_writes_backslashes_as_typed_and_a_tab_may_follow_a_command(tmp_path: Path) -> None:
    status, out = run(tmp_path / "bs.sqlite3", ["What was the GDP of Ireland in 2021?",
                                               "/edit\treplace Ireland with C:\\new\\1", "y", "/quit"])
    assert status == 0 and "unknown command" not in out and "error" not in out.lower()
    assert "What was the GDP of C:\\new\\1 in 2021?" in stored(tmp_path / "bs.sqlite3")


def test_an_answer_the_provider_stopped_for_its_policy_is_the_answer_the_user_saw() -> None:
    """A chat reply with a content-policy finish reason is shown and stored as it came (as a cut-off
    one is): it is never applied as an edit, and a chat has nothing to refuse."""
    from context_gatekeeper.editing.models import ModelReply

    def chat_model(messages: Any) -> Any:
        return ModelReply("I can't help with that part, but here is", finish_reason="content_filter")

    session = ChatSession(Transcript("filtered"), chat_model=chat_model, editor=lambda m: "{}", token_counter=len,
                          keep_pins=False)
    assert session.ask("How do I pick a lock?") == "I can't help with that part, but here is"
    assert [m.content for m in session.transcript.messages] == [
        "How do I pick a lock?", "I can't help with that part, but here is"]


def test_unanswered_messages_the_state_holds_stay_candidates_of_the_call() -> None:
    """A loaded file or a shared database may end with unanswered user messages: the chat sends
    what the selection names for its new message, and those stay candidates (an open run of the
    stored state is not the chat's question)."""
    t = Transcript("unanswered")
    t.append(user="How long should a Redis lock TTL be?", assistant="Longer than the longest job.")
    t.append(user="Here is my Redis lock code: lock = redis.lock('jobs', timeout=30)")
    t.append(user="And the Redis lock renewal?")
    session = ChatSession(t, chat_model=lambda m: "ok", editor=lambda m: "{}", token_counter=len, keep_pins=False,
                          system_prompt=None)
    call = session.prepare("What Redis lock timeout should my code use?")
    assert [m["content"] for m in call.sent][-2:] == [
        "Here is my Redis lock code: lock = redis.lock('jobs', timeout=30)",
        "What Redis lock timeout should my code use?"]


@pytest.mark.parametrize("reason", ["SAFETY", "length"])
def test_an_answer_stopped_with_no_text_is_an_error_and_stores_nothing(reason: str) -> None:
    """Blocked outright (Gemini's SAFETY block has no text) or cut off before any text: nothing to
    show or store, so the error reaches the user and the message may be sent again."""
    from context_gatekeeper import EditError
    from context_gatekeeper.editing.models import ModelReply

    session = ChatSession(Transcript("blocked"), chat_model=lambda m: ModelReply("", finish_reason=reason),
                          editor=lambda m: "{}", token_counter=len, keep_pins=False)
    with pytest.raises(EditError):
        session.ask("How do I pick a lock?")
    assert session.transcript.messages == ()


def test_the_web_chat_takes_an_answer_stopped_for_policy_as_the_terminal_chat_does() -> None:
    from context_gatekeeper.chat.web.service import WebChat, error_message
    from context_gatekeeper.editing.models import ModelReply
    from context_gatekeeper.errors import FilteredReplyError
    from context_gatekeeper.stores import InMemoryStore

    store = InMemoryStore()
    web = WebChat(store, lambda m: ModelReply("I can't help with that part, but here is", finish_reason="content_filter"),
                  lambda m: "{}", token_counter=len)
    try:
        web.create("w")
        events = list(web.start_chat("w", "How do I pick a lock?"))
        assert [e["type"] for e in events][-1] == "done"
        assert [m.content for m in Transcript("w", store=store).messages] == [
            "How do I pick a lock?", "I can't help with that part, but here is"]
    finally:
        web.close()
    shown = error_message(FilteredReplyError("the provider stopped the answer; use another model"), chat=True)
    assert "use another model. Your message was not added" in shown


# -- one consistent state per call: another writer on the same session -------------------------
class AnotherWriterAfterTheRead(Transcript):
    """A transcript on a shared database: right after this process reads the conversation,
    another chat on the same session writes once (``then``), as a second process may at
    any moment; no threads, so the moment is always the same."""

    then: Any = None

    @property
    def messages(self) -> tuple[Message, ...]:
        state = super().messages
        write, self.then = self.then, None
        if write is not None:
            write()
        return state


ZEBRAS = ("Tell me about zebras and their stripes.", "Zebras have black and white stripes.")


def test_a_message_sent_while_another_chat_appends_is_built_from_one_state(tmp_path: Path) -> None:
    """The turns the gate selects and the messages sent come from one read of the store: a turn
    another chat appends in between is not half seen (selected but unknown: ``KeyError``)."""
    db = tmp_path / "chat.db"
    transcript = AnotherWriterAfterTheRead("s", store=str(db))
    session = ChatSession(transcript, OfflineChatModel(), OfflineEditor(), token_counter=len)
    other = Transcript("s", store=str(db))
    try:
        for i in range(3):
            session.ask(f"zebras question {i}: how fast do zebras run?")
        before = [m.content for m in transcript.messages]
        transcript.then = lambda: other.append(user=ZEBRAS[0], assistant=ZEBRAS[1])
        call = session.prepare("And zebras again?")
        assert transcript.then is None, "the other chat wrote during the call"
        sent = [m["content"] for m in call.sent[1:-1]]
        assert set(sent) <= set(before) and ZEBRAS[0] not in sent, "sent from the state the selection saw"
        assert call.turn_count == 3 and all(1 <= n <= 3 for n in call.selection.turn_ids)
        again = session.prepare("And zebras stripes again?")  # the next call sees the other chat's turn
        assert again.turn_count == 4 and ZEBRAS[0] in [m["content"] for m in again.sent]
    finally:
        other.close()
        transcript.close()


def test_a_message_sent_while_another_chat_edits_sends_the_text_the_selection_saw(tmp_path: Path) -> None:
    db = tmp_path / "chat.db"
    transcript = AnotherWriterAfterTheRead("s", store=str(db))
    session = ChatSession(transcript, OfflineChatModel(), OfflineEditor(), token_counter=len)
    other = Transcript("s", store=str(db))
    try:
        session.ask(ZEBRAS[0])
        first = transcript.messages[0]
        transcript.then = lambda: other.apply([Replace(first.id, "Tell me about lions and their manes.")])
        call = session.prepare("And the zebras stripes?")
        assert call.selection.turn_ids == (1,) and call.sent[1]["content"] == ZEBRAS[0]
        assert call.selection.scores[0].user > 0, "scored on the user text that was sent, not the edited one"
        assert session.prepare("And the lions manes?").sent[1]["content"] == "Tell me about lions and their manes."
    finally:
        other.close()
        transcript.close()


# -- session files nested too deeply ------------------------------------------------------------
def nested_file(path: Path, depth: int) -> Path:
    """A session file whose first message's metadata is ``depth`` levels deep (the object itself one)."""
    deep = "[" * (depth - 1) + "]" * (depth - 1)
    path.write_text(
        f'{{"format": "{FORMAT}", "version": 1, "messages": [{{"role": "user", "content": "hi", '
        f'"metadata": {{"x": {deep}}}}}, {{"role": "assistant", "content": "hello"}}]}}',
        encoding="utf-8",
    )
    return path


@pytest.mark.parametrize("depth", [100_000, 990, 400, session_file.MAX_NESTING + 1])
def test_a_session_file_nested_too_deeply_is_refused_and_changes_nothing(tmp_path: Path, depth: int) -> None:
    """Too deep for the JSON decoder (a RecursionError), or for the copies and the store that
    would take it after: refused when read, as any unusable file is."""
    deep = nested_file(tmp_path / "deep.json", depth)
    with pytest.raises(SessionFileError, match="nested too deeply"):
        session_file.read_session_file(deep)
    db = tmp_path / "chat.db"
    run(db, ["hello", "/quit"])
    before = stored(db)
    status, out = run(db, [f"/load {deep}", "still here?", "/quit"])
    line = one_error_line(out)
    assert status == 0 and "nested too deeply" in line and "nothing was loaded" in line and "RecursionError" not in out
    assert stored(db)[:2] == before and len(stored(db)) == 4


def test_a_session_file_nested_as_deep_as_allowed_loads_saves_and_chats(tmp_path: Path) -> None:
    deep = nested_file(tmp_path / "deep.json", session_file.MAX_NESTING)
    again = tmp_path / "again.json"
    db = tmp_path / "chat.db"
    status, out = run(db, [f"/load {deep}", "and hi again?", f"/save {again}", f"/load {again}", "/quit"])
    assert status == 0 and "error:" not in out and "loaded 2 messages as revision 1" in out
    assert stored(db)[0] == "hi" and len(stored(db)) == 4

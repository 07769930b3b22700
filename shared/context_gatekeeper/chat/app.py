"""The ``gatekeeper-chat`` command: options, models, the store, then the loop.

    gatekeeper-chat [--offline] [--session NAME] [--db PATH] [--budget TOKENS]
                    [--model NAME] [--system TEXT] [--plain]

* With ``GOOGLE_API_KEY`` (or ``GEMINI_API_KEY``) set it chats with Gemini
  (:class:`~context_gatekeeper.GeminiModel`, which also edits the history).
* ``--offline`` uses the scripted models of :mod:`.offline` and says so on screen.
* Neither: it exits with status 2 and says to set the key or pass ``--offline``.
* Unusable options (``--budget -1``, ``--session ''``, a new ``--session`` name
  longer than 80 characters or holding control characters: the web chat's rules,
  :func:`~.session.check_session_name`; a stored conversation opens whatever its
  name): one line, status 2.  A
  database that cannot be opened or written (not a database, locked, read-only,
  a full disk) or a session log that cannot load: one line, status 1, no
  traceback, and nothing already stored is changed.
* Ctrl-C at the prompt ends it with status 130, SIGTERM (at the prompt or during a
  model call, whose answer is not stored) with 143: either way the conversation is
  saved and the database closed and checkpointed (:mod:`.signals`).

The transcript is a SQLite file (default: ``chat.sqlite3`` in the user's data
directory, see :func:`default_db_path`); ``--session NAME`` picks or resumes a
conversation in it.  A file or folder the chat creates is private to the user
(:func:`prepare_database`).  When no tiktoken encoding is found offline, a notice at
start says token counts are estimates (:func:`token_notice`), not a warning mid-chat.
Input comes from the terminal, or line by line from stdin when stdin is not a
terminal (``printf 'hi\\n/quit\\n' | gatekeeper-chat --offline``).
"""

from __future__ import annotations

import argparse
import importlib
import os
import shlex
import sqlite3
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import IO, Any

from .. import BudgetError, GatekeeperError, InvalidInputError, MissingExtraError, ModelUnavailableError
from ..integration import take_estimate_notice
from .session import PIN_RECORD_PREFIX, is_pin_record
from .signals import EXIT_TERMINATED, Terminated, sigterm_as_ctrl_c

__all__ = ["main", "build_parser", "default_db_path", "prepare_database", "token_notice", "missing_rich", "NO_KEY"]

def missing_rich() -> str:
    """What the chat says without the chat extra: the command that installs it."""
    return f"gatekeeper-chat needs the 'rich' package: {MissingExtraError.install_command('chat')}"


NO_KEY = (
    "No Gemini API key: set GOOGLE_API_KEY (or GEMINI_API_KEY) to chat with Gemini, "
    "or pass --offline to try the chat with a scripted model (no network, no key)."
)
CHAT_INSTEAD = (
    "then /retry (a failed chat message is kept), or restart gatekeeper-chat with --offline "
    "(a scripted model, no network) or another --model"
)
"""How the chat's model-unavailable messages end: its own commands and options, not ``model=``."""
EDIT_INSTEAD = (
    "then repeat the /edit command (or the instruction, in EDIT HISTORY mode), or restart gatekeeper-chat "
    "with --offline (a scripted model, no network) or another --model"
)
"""How the editing model's unavailability messages end in the terminal: a failed edit is not
kept, so ``/retry`` (which resends chat messages) cannot repeat it; giving it again does."""
START_INSTEAD = "or pass --offline to try the chat with a scripted model (no network, no key)"
"""How a model-unavailable message ends when the model cannot be built at start: there is
no chat yet to ``/retry`` in."""
EXIT_USAGE = 2
PRIVATE_FOLDER = 0o700
PRIVATE_FILE = 0o600


def default_db_path() -> Path:
    """``chat.sqlite3`` in the user's data directory for context-gatekeeper.

    ``$XDG_DATA_HOME`` (default ``~/.local/share``) on Linux and other Unixes,
    ``~/Library/Application Support`` on macOS, ``%LOCALAPPDATA%`` on Windows.
    """
    if sys.platform == "win32":
        base = Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local")
    elif sys.platform == "darwin":
        base = Path.home() / "Library" / "Application Support"
    else:
        base = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return base / "context-gatekeeper" / "chat.sqlite3"


def prepare_database(db: Path) -> None:
    """Create the folder of ``db`` and the empty database file when they do not exist,
    readable by this user only: the folder ``0700``, the file ``0600`` (SQLite gives its
    ``-wal`` and ``-shm`` files the database file's permissions).  A chat transcript is
    private; the process umask (usually ``022``) would let every local user read it.

    An existing folder or file is left as it is (a user's own ``--db`` keeps its
    permissions); folders above a missing one get the usual permissions, as ``mkdir -p``
    gives.  The permissions are given as the file is created (``os.open``), not after, so
    no other user can open it in between, and the process umask is not changed.

    Raises:
        OSError: the folder or file cannot be created (the chat says so in one line).
    """
    if str(db) == ":memory:":  # SQLite's in-memory database: no file
        return
    db.parent.mkdir(mode=PRIVATE_FOLDER, parents=True, exist_ok=True)
    try:
        descriptor = os.open(db, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE)
    except FileExistsError:
        return
    os.close(descriptor)


def token_notice() -> str | None:
    """The line the chat shows at start when token counts are estimates (no tiktoken
    encoding found offline), or None when they are exact.  The library's own
    ``RuntimeWarning`` about it is then not printed later, in the middle of a conversation."""
    notice = take_estimate_notice()  # the chat counts with the default encoding
    return None if notice is None else f"ESTIMATED TOKENS: {notice}."


def _budget(text: str) -> int:
    """``--budget`` as an int (a negative one is refused by :func:`_option_problem`)."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be a whole number of tokens >= 0, e.g. --budget 2000 (got {text!r}); the default is 4000"
        ) from None


def build_parser() -> argparse.ArgumentParser:
    """The command-line options."""
    parser = argparse.ArgumentParser(
        prog="gatekeeper-chat",
        description="Chat with topic-gated context and a history you can edit in natural language.",
        epilog="Type /help in the chat for its commands.",
    )
    parser.add_argument("--offline", action="store_true", help="use a scripted model (no network, no API key)")
    parser.add_argument("--session", default="default", help="the conversation to start or resume (default: default)")
    parser.add_argument("--db", type=Path, default=None, help=f"SQLite file for transcripts (default: {default_db_path()})")
    parser.add_argument(
        "--budget", type=_budget, default=4000,
        help="tokens of earlier turns sent per call, an int >= 0 (default: 4000; 0: none)",
    )
    parser.add_argument("--model", default="gemini-2.5-flash", help="Gemini model (default: gemini-2.5-flash)")
    parser.add_argument("--system", default=None, help="system prompt sent first on every call")
    parser.add_argument("--plain", action="store_true", help="no colours")
    web = parser.add_argument_group("web chat (the 'web' extra)")
    web.add_argument("--web", action="store_true", help="serve the chat as a local web page instead of the terminal")
    web.add_argument("--host", default="127.0.0.1", help="address --web listens on (default: 127.0.0.1, this computer only)")
    web.add_argument("--port", type=int, default=8765, help="port --web listens on (default: 8765; 0 picks a free one)")
    web.add_argument(
        "--allowed-host", action="append", default=[], metavar="NAME",
        help="with --host 0.0.0.0: another name the page may be opened by (repeatable; IP addresses, "
        "localhost and this computer's name always work)",
    )
    return parser


def _models(args: argparse.Namespace, *, instead: str = CHAT_INSTEAD) -> tuple[Any, Any, str]:
    """(chat model, editing model, label) for the options; ModelUnavailableError without a key.
    ``instead``: how the chat model's unavailability messages end once the chat runs (the
    terminal's :data:`CHAT_INSTEAD`; the web chat names what its page offers); the editing
    model's end with the terminal's :data:`EDIT_INSTEAD` in the terminal, else with ``instead``
    (the page offers one way for both).  With Gemini, different advice makes two models on one
    client; the same, one model for both."""
    if args.offline:
        from .offline import OfflineChatModel, OfflineEditor

        return OfflineChatModel(), OfflineEditor(), "offline (scripted)"
    from .. import GeminiModel
    from ..integration import gemini_api_key

    if gemini_api_key() is None:
        raise ModelUnavailableError(NO_KEY)
    edit_instead = EDIT_INSTEAD if instead == CHAT_INSTEAD else instead
    model = GeminiModel(args.model, instead=START_INSTEAD)  # a failure here ends the start
    model.instead = instead  # a failure from now on is in the chat: the terminal's /retry, the page's box
    if edit_instead == instead:
        return model, model, args.model
    return model, GeminiModel(args.model, client=model.client, instead=edit_instead), args.model


def _resume_hint(args: argparse.Namespace, db_given: bool, session: str) -> str:
    """The command that resumes conversation ``session`` (its name as opened: a new name stripped)."""
    parts = ["gatekeeper-chat", "--session", session]
    if db_given:
        parts += ["--db", str(args.db)]
    if args.offline:
        parts.append("--offline")
    return " ".join(shlex.quote(p) for p in parts)


def main(
    argv: Sequence[str] | None = None,
    *,
    reader: Any = None,
    stdin: Iterable[Any] | None = None,
    stdout: IO[str] | None = None,
    models: tuple[Any, Any] | None = None,
) -> int:
    """Run the chat; the exit status.

    Args:
        argv: the options (default ``sys.argv[1:]``).
        reader: ``reader(prompt) -> str`` to read input with (tests); default: the
            terminal, or stdin line by line when it is not a terminal.
        stdin: lines to read instead of the process's stdin (a stream, or any iterable
            of lines; an exception item is raised, e.g. ``KeyboardInterrupt``).
        stdout: the stream to write to instead of the process's.
        models: ``(chat model, editing model)`` to use instead of Gemini or ``--offline``'s.
    """
    args = build_parser().parse_args(argv)
    out = stdout or sys.stdout
    if args.web:
        from .web.cli import run_web

        return run_web(args, out=out, errors=sys.stderr if stdout is None else out, models=models)
    try:
        importlib.import_module("rich")
    except ImportError:
        print(missing_rich(), file=sys.stderr if stdout is None else out)
        return 1
    from .loop import ChatLoop
    from .offline import OFFLINE_NOTICE
    from .readers import LineReader, TerminalReader
    from .render import Renderer, make_console

    console = make_console(plain=args.plain, file=out)
    renderer = Renderer(console)
    problem = _option_problem(args)
    if problem:
        renderer.error(problem)
        return EXIT_USAGE
    try:
        chat_model, editor, label = (*models, "custom") if models else _models(args)
    except GatekeeperError as exc:
        renderer.error(str(exc))
        return EXIT_USAGE
    db_given = args.db is not None
    db = args.db if db_given else default_db_path()
    estimates = token_notice()  # before any count: no warning in the middle of the chat
    opened = _open(db, args, chat_model, editor, renderer)
    if isinstance(opened, int):
        return opened
    session = opened
    with sigterm_as_ctrl_c():  # SIGTERM ends the chat as Ctrl-C does, and the store is closed (checkpointed)
        try:
            if reader is None:
                source = sys.stdin if stdin is None else stdin
                if stdin is None and hasattr(source, "reconfigure"):
                    source.reconfigure(errors="replace")  # undecodable input bytes become U+FFFD, not a crash
                interactive = getattr(source, "isatty", lambda: False)()
                reader = TerminalReader(console) if interactive else LineReader(source, renderer.echo)
            name = session.transcript.session_id  # a new --session name as the name rules made it
            loop = ChatLoop(session, renderer, reader, resume_hint=_resume_hint(args, db_given, name))
            _banner(renderer, name, label, db, session.transcript.head)
            if args.offline:
                renderer.notice(OFFLINE_NOTICE)
            if estimates:
                renderer.notice(estimates)
            if session.pins_problem:
                renderer.error(session.pins_problem)
            if session.transcript.head:
                _show_stored(loop, renderer)
            return loop.run()
        except Terminated:  # SIGTERM before the loop ran (the loop handles its own)
            return EXIT_TERMINATED
        finally:
            session.transcript.store.close()


def _option_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with the options, in one line; None when they are usable."""
    if args.budget < 0:
        return (
            f"--budget must be a whole number of tokens >= 0 (got {args.budget}); 0 sends no earlier turns, "
            "the default is 4000"
        )
    if not args.session.strip():
        return "--session needs a non-blank name, e.g. --session work (the default is 'default')"
    if is_pin_record(args.session):
        return f"--session names starting with {PIN_RECORD_PREFIX!r} hold a conversation's pins; pick another name"
    return None


def _open(db: Path, args: argparse.Namespace, chat_model: Any, editor: Any, renderer: Any) -> Any:
    """The chat session on ``db``, or the exit status after one line saying why it cannot open."""
    from .. import SQLiteStore
    from .. import Transcript
    from .loop import EXIT_STORE, store_failure
    from .session import ChatSession, chat_sessions, check_session_name

    store, status = None, EXIT_STORE
    try:
        prepare_database(db)
        store = SQLiteStore(db)
        name = args.session  # a stored conversation opens by its exact name
        if name not in chat_sessions(store):  # a new one: the name rules of both front ends, and the name they give
            try:
                name = check_session_name(name)
            except InvalidInputError as exc:
                raise InvalidInputError(f"--session: {exc}") from None
        transcript = Transcript(name, store=store)
        return ChatSession(
            transcript, chat_model, editor, token_budget=args.budget,
            **({"system_prompt": args.system} if args.system is not None else {}),
        )
    except (sqlite3.Error, OSError) as exc:
        message = store_failure(db, exc)
    except (InvalidInputError, BudgetError) as exc:
        message, status = str(exc), EXIT_USAGE
    except GatekeeperError as exc:  # a log that cannot load, a newer schema ...
        message = f"cannot open session {args.session!r} in {db}: {exc}"
    renderer.error(message)
    if store is not None:
        store.close()
    return status


def _show_stored(loop: Any, renderer: Any) -> None:
    """Show the resumed conversation; a failure to draw it never stops the chat from starting."""
    try:
        loop.show_conversation()
    except Exception as exc:
        renderer.error(
            f"could not show the stored conversation ({type(exc).__name__}: {exc}); it is intact. "
            "/show tries again; /undo or /load replace what cannot be shown."
        )


def _banner(renderer: Any, session: str, label: str, db: Path, head: int) -> None:
    state = f"resuming at revision {head}" if head else "new conversation"
    renderer.info(f"gatekeeper-chat | session {session!r} ({state}) | model: {label} | db: {db}")
    renderer.info("Type a message to chat, /edit to switch to EDIT HISTORY mode, /help for commands.")


if __name__ == "__main__":
    raise SystemExit(main())

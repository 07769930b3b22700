"""``gatekeeper-chat --web``: the same options as the terminal chat, served as a local page.

    gatekeeper-chat --web [--offline] [--session NAME] [--db PATH] [--budget TOKENS]
                          [--model NAME] [--system TEXT] [--host ADDRESS] [--port N]
                          [--allowed-host NAME ...]

It binds to ``127.0.0.1:8765`` (this computer only) unless ``--host`` says
otherwise, and says where it listens on start.  Exit status: 0 after Ctrl-C or SIGTERM,
1 when the ``web`` extra is missing, the database cannot be used or the port is
taken, 2 for unusable options (a new ``--session`` name the name rules refuse, as in
the terminal chat) or no model (no Gemini key and no ``--offline``).  As in the
terminal chat, a database folder or file it creates is private to the user
(:func:`~..app.prepare_database`), and a notice at start says when token counts are
estimates (:func:`~..app.token_notice`).
"""

from __future__ import annotations

import argparse
import importlib
import sqlite3
from typing import IO, Any

from .. import app
from ..offline import OFFLINE_NOTICE, OfflineChatModel
from ... import GatekeeperError, InvalidInputError, MissingExtraError, SQLiteStore

__all__ = ["run_web", "missing_web", "OFFLINE_CHUNK_DELAY", "WEB_INSTEAD"]

WEB_INSTEAD = (
    "then try again (the text stays in the box), or restart gatekeeper-chat --web with --offline "
    "(a scripted model, no network) or another --model"
)
"""How the web chat's model-unavailable messages end (chat and edit alike): what the page
and the command offer; the terminal's ``/retry`` is not there."""


def missing_web() -> str:
    """What ``--web`` says without the web extra: the command that installs it."""
    return f"gatekeeper-chat --web needs the 'web' extra: {MissingExtraError.install_command('web')}"


OFFLINE_CHUNK_DELAY = 0.03
"""Seconds between the offline model's words in the web chat, so an answer visibly streams in."""


def run_web(args: argparse.Namespace, *, out: IO[str], errors: IO[str], models: tuple[Any, Any] | None = None) -> int:
    """Serve the chat for the parsed options ``args`` until Ctrl-C or SIGTERM; the exit status."""

    def say(line: str, stream: IO[str] = out) -> None:
        print(line, file=stream, flush=True)

    for module in ("starlette", "uvicorn"):
        try:
            importlib.import_module(module)
        except ImportError:
            say(missing_web(), errors)
            return 1
    from .server import serve
    from .service import WebChat

    problem = app._option_problem(args)
    if problem is None and not 0 <= args.port <= 65535:
        problem = f"--port must be 0..65535 (got {args.port}); the default is 8765"
    if problem:
        say(problem, errors)
        return app.EXIT_USAGE
    try:
        chat_model, editor, label = (*models, "custom") if models else app._models(args, instead=WEB_INSTEAD)
    except GatekeeperError as exc:
        say(str(exc), errors)
        return app.EXIT_USAGE
    if args.offline and models is None:
        chat_model = OfflineChatModel(chunk_delay=OFFLINE_CHUNK_DELAY)
    db = args.db if args.db is not None else app.default_db_path()
    estimates = app.token_notice()  # before any count: no warning in the middle of the chat
    try:
        app.prepare_database(db)  # a new folder and file private to the user
        store = SQLiteStore(db)
    except (sqlite3.Error, OSError, GatekeeperError) as exc:
        say(f"cannot use the database {db} ({exc}): check the file, or pass --db with another", errors)
        return 1
    options: dict[str, Any] = {"system_prompt": args.system} if args.system is not None else {}
    chat = WebChat(store, chat_model, editor, token_budget=args.budget, **options)
    try:
        try:
            view = chat.view(args.session)  # a new name as the name rules make it (stripped)
        except InvalidInputError as exc:  # a new name the rules refuse: an unusable option
            say(f"--session: {exc}", errors)
            return app.EXIT_USAGE
        except (sqlite3.Error, GatekeeperError) as exc:
            say(f"cannot open session {args.session!r} in {db}: {exc}", errors)
            return 1
        name, head = view["session"], view["head"]
        state = f"resuming at revision {head}" if head else "new conversation"
        say(f"gatekeeper-chat --web | session {name!r} ({state}) | model: {label} | db: {db}")
        if args.offline:
            say(OFFLINE_NOTICE)
        if estimates:
            say(estimates)
        return serve(
            chat, host=args.host, port=args.port, say=say, session=name,
            allowed_hosts=args.allowed_host,
        )
    finally:
        chat.close()
        store.close()

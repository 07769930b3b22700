"""The web chat's HTTP side: Starlette routes over :class:`~.service.WebChat`, served by uvicorn.

Routes (JSON in and out; every error is ``{"error": message}`` with a fitting status,
never a traceback):

=====================================  =================================================
``GET /``                              the page (``static/index.html``)
``GET /static/{name}``                 ``app.js`` and ``style.css``, nothing else
``GET /api/view?session=NAME``         everything the page shows for a conversation
``GET /api/sessions``                  the conversations
``POST /api/sessions/new``             ``{name?}``: open a new conversation
``POST /api/sessions/delete``          ``{session, confirm}``: erase one (``confirm`` = its name)
``POST /api/chat``                     ``{session, text}``: the answer as NDJSON events
``POST /api/edit/preview``             ``{session, instruction, head}``
``POST /api/edit/commit``              ``{session, token, confirm_large?}``
``POST /api/edit/discard``             ``{session, token}``
``POST /api/undo`` / ``/api/redo``     ``{session, head}``
``POST /api/revert``                   ``{session, revision, head}``
``POST /api/pin``                      ``{session, turn, pinned}``
=====================================  =================================================

Safe by construction:

* only GET and HEAD read and only POST changes anything; a POST needs the page's
  token in ``X-Gatekeeper-Token`` (a random value per server, in the page's
  ``<meta>``), a JSON body, and, when the browser sends them, a same-origin
  ``Origin`` and ``Sec-Fetch-Site``: another site cannot make the page act;
* the ``Host`` header must name the address served (loopback names when bound to
  loopback), so a DNS-rebinding page cannot read it either;
* the only files served are the three assets, read once at start-up;
* a Content-Security-Policy allows scripts, styles and requests from the page's
  own origin only (no inline script, no CDN), and the page renders every text
  with ``textContent``.
"""

from __future__ import annotations

import json
import secrets
import socket
import threading
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Message as ASGIMessage, Receive, Scope, Send

from ... import (
    EditError,
    GatekeeperError,
    ServerStartError,
    HistoryError,
    ModelUnavailableError,
    StaleHeadError,
    StoreClosedError,
    StoreUnavailableError,
    UnknownMessageError,
    UnknownTurnError,
)
from .service import WebChat, error_message

__all__ = ["create_app", "serve", "BackgroundServer", "allowed_hosts_for", "STATIC", "ASSETS", "TOKEN_HEADER"]

STATIC = Path(__file__).resolve().parent / "static"
ASSETS = {"app.js": "text/javascript; charset=utf-8", "style.css": "text/css; charset=utf-8"}
"""The files ``/static/`` serves, by name; every other name is a 404."""
TOKEN_HEADER = "x-gatekeeper-token"
LOOPBACK = ("127.0.0.1", "localhost", "::1")
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
_STATUS: tuple[tuple[type[BaseException], int], ...] = (
    (StaleHeadError, 409),
    (HistoryError, 409),
    (UnknownTurnError, 404),
    (UnknownMessageError, 404),
    (EditError, 422),
    (ModelUnavailableError, 503),
    (StoreClosedError, 503),
    (StoreUnavailableError, 503),
    (GatekeeperError, 400),
)


def allowed_hosts_for(host: str) -> tuple[str, ...]:
    """The ``Host`` names a server bound to ``host`` answers: loopback names, plus ``host``;
    ``("*",)`` (any) for a wildcard address such as ``0.0.0.0``."""
    if host in ("0.0.0.0", "::", ""):
        return ("*",)
    return tuple(dict.fromkeys((*LOOPBACK, host)))


def _error(message: str, status: int, **extra: Any) -> JSONResponse:
    return JSONResponse({"error": message, **extra}, status_code=status, headers={"cache-control": "no-store"})


def _status_of(exc: BaseException) -> int:
    return next((status for kind, status in _STATUS if isinstance(exc, kind)), 500)


Handler = Callable[[Request, dict[str, Any]], Awaitable[Response]]


def create_app(chat: WebChat, *, host: str = "127.0.0.1", token: str | None = None) -> ASGIApp:
    """The ASGI app serving ``chat``.

    Args:
        chat: the conversations.
        host: the address served; decides the ``Host`` names answered (:func:`allowed_hosts_for`).
        token: the value POSTs must carry in ``X-Gatekeeper-Token`` (default: a random one).
    """
    token = token or secrets.token_urlsafe(24)
    page = (STATIC / "index.html").read_text(encoding="utf-8").replace("{{TOKEN}}", token).encode("utf-8")
    assets = {name: (STATIC / name).read_bytes() for name in ASSETS}

    def api(handler: Callable[[dict[str, Any]], Any]) -> Callable[[Request], Awaitable[Response]]:
        """A JSON endpoint: body (POST) or query (GET) in, handler's result out, errors as JSON."""

        async def endpoint(request: Request) -> Response:
            if request.method == "POST":
                try:
                    body = json.loads(await request.body() or b"{}")
                except ValueError:
                    return _error("the request body must be a JSON object", 400)
                if not isinstance(body, dict):
                    return _error("the request body must be a JSON object", 400)
            else:
                body = dict(request.query_params)
            try:
                result = await run_in_threadpool(handler, body)
            except Exception as exc:
                extra: dict[str, Any] = {}
                if isinstance(exc, StaleHeadError) and isinstance(body.get("session"), str):
                    try:  # the page refreshes from it: the other tab's change is shown at once
                        extra["view"] = await run_in_threadpool(chat.view, body["session"])
                    except Exception:
                        pass
                return _error(error_message(exc), _status_of(exc), **extra)
            if isinstance(result, Response):
                return result
            return JSONResponse(result, headers={"cache-control": "no-store"})

        return endpoint

    def chat_stream(body: dict[str, Any]) -> Response:
        stream = chat.start_chat(body.get("session", ""), body.get("text"))

        def lines() -> Iterator[bytes]:
            for event in stream:
                yield (json.dumps(event) + "\n").encode("utf-8")

        return StreamingResponse(
            lines(), media_type="application/x-ndjson",
            headers={"cache-control": "no-store", "x-accel-buffering": "no"},
        )

    async def index(request: Request) -> Response:
        return Response(page, media_type="text/html; charset=utf-8", headers={"cache-control": "no-store"})

    async def asset(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in assets:  # never a path: only the listed files exist
            return _error(f"no asset {name!r}: the page uses {', '.join(sorted(assets))}", 404)
        return Response(assets[name], media_type=ASSETS[name], headers={"cache-control": "no-cache"})

    async def not_found(request: Request, exc: Exception) -> Response:
        status = getattr(exc, "status_code", 404)
        if status == 405:
            return _error(f"{request.method} is not allowed on {request.url.path}", 405)
        return _error(f"nothing at {request.url.path}: the page is at /", status)

    routes = [
        Route("/", index, methods=["GET"]),
        Route("/static/{name:path}", asset, methods=["GET"]),
        Route("/api/view", api(lambda b: chat.view(b.get("session", ""))), methods=["GET"]),
        Route("/api/sessions", api(lambda b: {"sessions": chat.sessions()}), methods=["GET"]),
        Route("/api/sessions/new", api(lambda b: chat.create(b.get("name"))), methods=["POST"]),
        Route(
            "/api/sessions/delete",
            api(lambda b: {"sessions": chat.delete(b.get("session", ""), b.get("confirm"))}),
            methods=["POST"],
        ),
        Route("/api/chat", api(chat_stream), methods=["POST"]),
        Route(
            "/api/edit/preview",
            api(lambda b: chat.preview(b.get("session", ""), b.get("instruction"), b.get("head"))),
            methods=["POST"],
        ),
        Route(
            "/api/edit/commit",
            api(lambda b: chat.commit(b.get("session", ""), b.get("token"), b.get("confirm_large") is True)),
            methods=["POST"],
        ),
        Route("/api/edit/discard", api(lambda b: chat.discard(b.get("session", ""), b.get("token"))), methods=["POST"]),
        Route("/api/undo", api(lambda b: chat.undo(b.get("session", ""), b.get("head"))), methods=["POST"]),
        Route("/api/redo", api(lambda b: chat.redo(b.get("session", ""), b.get("head"))), methods=["POST"]),
        Route(
            "/api/revert",
            api(lambda b: chat.revert(b.get("session", ""), b.get("revision"), b.get("head"))),
            methods=["POST"],
        ),
        Route(
            "/api/pin",
            api(lambda b: chat.pin(b.get("session", ""), b.get("turn"), b.get("pinned", True) is not False)),
            methods=["POST"],
        ),
    ]
    app = Starlette(routes=routes, exception_handlers={HTTPException: not_found})
    return _Guard(app, token=token, hosts=allowed_hosts_for(host))


class _Guard:
    """ASGI middleware: the Host check, the POST checks and the security headers (module docstring)."""

    def __init__(self, app: ASGIApp, *, token: str, hosts: Sequence[str]) -> None:
        self.app = app
        self.token = token
        self.hosts = hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        problem = self._problem(scope, headers)

        async def secured(message: ASGIMessage) -> None:
            if message["type"] == "http.response.start":
                extra = [
                    (b"content-security-policy", CSP.encode()),
                    (b"x-content-type-options", b"nosniff"),
                    (b"referrer-policy", b"no-referrer"),
                    (b"x-frame-options", b"DENY"),
                ]
                message = {**message, "headers": list(message.get("headers", [])) + extra}
            await send(message)

        if problem is not None:
            await _error(*problem)(scope, receive, secured)
            return
        await self.app(scope, receive, secured)

    def _problem(self, scope: Scope, headers: dict[str, str]) -> tuple[str, int] | None:
        host = headers.get("host", "")
        name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
        name = name.strip("[]")
        if "*" not in self.hosts and name not in self.hosts:
            return f"this server answers only for {', '.join(self.hosts)}, not {host!r}", 421
        method = scope["method"]
        if method in ("GET", "HEAD"):
            return None
        if method != "POST":
            return f"{method} is not allowed: the page changes things with POST only", 405
        origin = headers.get("origin")
        if origin is not None and origin != f"{scope.get('scheme', 'http')}://{host}":
            return f"refused a request from another origin ({origin}): only the page itself may change things", 403
        if headers.get("sec-fetch-site", "same-origin") not in ("same-origin",):
            return "refused a cross-site request: only the page itself may change things", 403
        if not secrets.compare_digest(headers.get(TOKEN_HEADER, "").encode(), self.token.encode()):
            return "missing or wrong page token: reload the page, then try again", 403
        if not headers.get("content-type", "").startswith("application/json"):
            return "requests that change things send JSON (content-type: application/json)", 415
        return None


class _ReadyServer:
    """A uvicorn server that sets ``ready`` once it listens."""

    def __init__(self, app: Any, **options: Any) -> None:
        import uvicorn

        ready = self.ready = threading.Event()

        class Server(uvicorn.Server):
            async def startup(self, sockets: list[socket.socket] | None = None) -> None:
                await super().startup(sockets)
                ready.set()

        self.server = Server(uvicorn.Config(app, log_level="warning", lifespan="off", **options))


class BackgroundServer:
    """Serve ``app`` from a thread on a free loopback port (tests, the screenshot script).

    >>> # with BackgroundServer(create_app(chat)) as server: page.goto(server.url)

    ``__enter__`` returns once the server listens; ``__exit__`` stops it and joins the thread.
    """

    def __init__(self, app: Any, *, host: str = "127.0.0.1", port: int = 0, start_timeout: float = 30.0) -> None:
        self.app = app
        self.host = host
        self.port = port
        self.start_timeout = start_timeout
        self._thread: threading.Thread | None = None
        self._socket: socket.socket | None = None

    @property
    def url(self) -> str:
        """The page's address."""
        return f"http://{self.host}:{self.port}/"

    def __enter__(self) -> "BackgroundServer":
        self._socket = _listen(self.host, self.port)
        self.port = self._socket.getsockname()[1]
        self._runner = _ReadyServer(self.app)
        self._thread = threading.Thread(
            target=self._runner.server.run, kwargs={"sockets": [self._socket]}, name="gatekeeper-web", daemon=True
        )
        self._thread.start()
        if not self._runner.ready.wait(self.start_timeout):
            self.__exit__(None, None, None)
            raise ServerStartError(
                f"the web chat did not start listening within {self.start_timeout} s; pass a larger start_timeout "
                "on a busy machine"
            )
        return self

    def __exit__(self, *exc: object) -> None:
        self._runner.server.should_exit = True
        if self._thread is not None:
            self._thread.join()
        if self._socket is not None:
            self._socket.close()


def _listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def serve(
    chat: WebChat, *, host: str, port: int, say: Callable[[str], None] = print, session: str | None = None
) -> int:
    """Serve ``chat`` at ``http://host:port/`` until Ctrl-C (or SIGTERM); the exit status (1: cannot listen).

    It says where it listens once the socket accepts connections (``port`` 0 picks a
    free port, and the line names it); ``session`` is the conversation the address opens.
    """
    try:
        sock = _listen(host, port)
    except OSError as exc:
        say(f"cannot listen on {host}:{port} ({exc.strerror or exc}): pass --port with a free port, or stop the other server")
        return 1
    port = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    query = "" if session in (None, "default") else "?" + urlencode({"session": session})
    if host in LOOPBACK:
        say(f"open http://{shown}:{port}/{query} (listening on loopback only: this computer; --host changes it)")
    else:
        say(
            f"open http://{shown}:{port}/{query} (listening on {host}: reachable from other computers "
            "on the network, and anyone who can reach it can read and change these conversations)"
        )
    say("Ctrl-C stops the server; the conversations are saved as you go.")
    runner = _ReadyServer(create_app(chat, host=host))
    try:
        runner.server.run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    finally:
        sock.close()
    return 0


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
``POST /api/pin``                      ``{session, key, turn?, pinned}`` (``key``: the id of the
                                       turn's first message; ``turn``, its number, without it)
=====================================  =================================================

Safe by construction:

* only GET and HEAD read and only POST changes anything; every ``/api/`` request
  (reads too) needs the page's token in ``X-Gatekeeper-Token`` (a random value per
  server, in the page's ``<meta>``) and, when the browser sends it, a same-origin
  ``Sec-Fetch-Site``; a POST also needs a JSON body (at most :data:`MAX_BODY`
  bytes) and a same-origin ``Origin``: another site can neither make the page act
  nor make it look anything up (an ``<img>`` pointing at the API is refused);
* the ``Host`` header must name the address served (:func:`allowed_hosts_for`:
  loopback names when bound to loopback; for a wildcard address such as
  ``0.0.0.0``, loopback names, this computer's name, IP addresses and the names
  given with ``--allowed-host``), so a DNS-rebinding page, whose requests carry
  its own domain name, cannot read or change anything;
* the only files served are the three assets, read once at start-up;
* a Content-Security-Policy allows scripts, styles and requests from the page's
  own origin only (no inline script, no CDN), and the page renders every text
  with ``textContent``, each control character and bidi override drawn as one
  visible character (the terminal's table, :mod:`..visible`, in the page's
  ``<meta name="gatekeeper-visible">``).
"""

from __future__ import annotations

import html
import ipaddress
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
from ..signals import sigterm_as_ctrl_c
from ..visible import table_json
from .service import WebChat, error_message

__all__ = [
    "create_app", "serve", "BackgroundServer", "allowed_hosts_for", "STATIC", "ASSETS", "TOKEN_HEADER", "MAX_BODY",
    "STOP_TIMEOUT",
]

STATIC = Path(__file__).resolve().parent / "static"
ASSETS = {"app.js": "text/javascript; charset=utf-8", "style.css": "text/css; charset=utf-8"}
"""The files ``/static/`` serves, by name; every other name is a 404."""
TOKEN_HEADER = "x-gatekeeper-token"
LOOPBACK = ("127.0.0.1", "localhost", "::1")
WILDCARDS = ("0.0.0.0", "::", "")
ANY_IP = "any IP address"
"""In :func:`allowed_hosts_for`'s answer: a ``Host`` that is an IP address is answered."""
MAX_BODY = 4 * 1024 * 1024
"""The largest request body taken, in bytes (a chat message or an instruction is far smaller)."""
STOP_TIMEOUT: int = 5
"""Seconds a stopping server waits for requests still under way before it cancels them."""
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


def allowed_hosts_for(host: str, extra: Sequence[str] = ()) -> tuple[str, ...]:
    """The ``Host`` names a server bound to ``host`` answers: loopback names, ``host`` and
    the ``extra`` names (``--allowed-host``).

    For a wildcard address (``0.0.0.0``, ``::``) it answers every address of this computer,
    which it cannot list: so this computer's name (short and full) and :data:`ANY_IP` (a
    ``Host`` that is an IP address, which only a page loaded from that address sends; a
    DNS-rebinding page sends its own domain name), never any name (``*``).
    """
    names = [*LOOPBACK, *extra, *((socket.gethostname(), socket.getfqdn()) if host in WILDCARDS else (host,))]
    answered = [_host_name(n) for n in names if n]
    return tuple(dict.fromkeys([*answered, ANY_IP] if host in WILDCARDS else answered))


def _host_name(host: str) -> str:
    """The name in a ``Host`` header, without its port and brackets, in lower case."""
    name = host.rsplit(":", 1)[0] if not host.endswith("]") and host.count(":") == 1 else host
    if name.startswith("[") and "]" in name:
        name = name[1:name.index("]")]
    return name.lower()


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


class _JSONResponse(JSONResponse):
    """JSON as Starlette writes it, and text it cannot encode as UTF-8 (a lone surrogate in
    a name some other program stored) written as its ``\\uXXXX`` escape, never a failure."""

    def render(self, content: Any) -> bytes:
        try:
            return super().render(content)
        except UnicodeEncodeError:
            return json.dumps(content, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode("ascii")


def _json(content: Any) -> JSONResponse:
    return _JSONResponse(content, headers={"cache-control": "no-store"})


def _error(message: str, status: int, **extra: Any) -> JSONResponse:
    return _JSONResponse({"error": message, **extra}, status_code=status, headers={"cache-control": "no-store"})


def _status_of(exc: BaseException) -> int:
    return next((status for kind, status in _STATUS if isinstance(exc, kind)), 500)


Handler = Callable[[Request, dict[str, Any]], Awaitable[Response]]


def create_app(
    chat: WebChat, *, host: str = "127.0.0.1", token: str | None = None, allowed_hosts: Sequence[str] = ()
) -> _Guard:
    """The ASGI app serving ``chat``; its ``stop()`` ends the requests waiting for a model
    (the servers here call it first when they stop).

    Args:
        chat: the conversations.
        host: the address served; decides the ``Host`` names answered (:func:`allowed_hosts_for`).
        token: the value API requests must carry in ``X-Gatekeeper-Token`` (default: a random one).
        allowed_hosts: more ``Host`` names to answer (a name this computer is reached by).
    """
    token = token or secrets.token_urlsafe(24)
    page = _page(token)
    assets = {name: (STATIC / name).read_bytes() for name in ASSETS}

    def api(handler: Callable[[dict[str, Any]], Any]) -> Callable[[Request], Awaitable[Response]]:
        """A JSON endpoint: body (POST) or query (GET) in, handler's result out, errors as JSON."""

        async def endpoint(request: Request) -> Response:
            if request.method == "POST":
                body = await _json_body(request)
                if isinstance(body, Response):
                    return body
            else:
                body = dict(request.query_params)
            try:
                result = await run_in_threadpool(handler, body)
                return result if isinstance(result, Response) else _json(result)
            except Exception as exc:
                extra: dict[str, Any] = {}
                if isinstance(exc, GatekeeperError) and isinstance(body.get("session"), str):
                    try:  # the page refreshes from it: another tab's change (a discarded preview...) shows at once
                        extra["view"] = await run_in_threadpool(chat.view, body["session"])
                    except Exception:
                        pass
                return _error(error_message(exc), _status_of(exc), **extra)

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
            api(lambda b: chat.pin(b.get("session", ""), b.get("turn"), b.get("pinned", True) is not False, b.get("key"))),
            methods=["POST"],
        ),
    ]
    app = Starlette(routes=routes, exception_handlers={HTTPException: not_found})
    return _Guard(app, token=token, hosts=allowed_hosts_for(host, allowed_hosts), stop=chat.stop)


def _page(token: str) -> bytes:
    """``index.html`` with its token and the table of characters shown as visible stand-ins
    (:mod:`..visible`: the terminal's table, so both chats show the same)."""
    page = (STATIC / "index.html").read_text(encoding="utf-8")
    page = page.replace("{{TOKEN}}", token).replace("{{VISIBLE}}", html.escape(table_json()))
    return page.encode("utf-8")


async def _json_body(request: Request) -> dict[str, Any] | Response:
    """The request's JSON object, or the error response saying what is wrong with it."""
    size = 0
    chunks = []
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY:
            return _error(f"the request body is over {MAX_BODY // (1024 * 1024)} MiB: send less at a time", 413)
        chunks.append(chunk)
    try:
        body = json.loads(b"".join(chunks) or b"{}")
    except (ValueError, RecursionError):  # RecursionError: nested too deeply to read
        return _error("the request body must be a JSON object", 400)
    if not isinstance(body, dict):
        return _error("the request body must be a JSON object", 400)
    return body


class _Guard:
    """ASGI middleware: the Host check, the API checks and the security headers (module docstring).

    ``stop()`` ends the requests waiting for a model (the server is stopping).
    """

    def __init__(self, app: ASGIApp, *, token: str, hosts: Sequence[str], stop: Callable[[], None]) -> None:
        self.app = app
        self.token = token
        self.hosts = hosts
        self.stop = stop

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
        name = _host_name(host)
        if name not in self.hosts and not (ANY_IP in self.hosts and _is_ip(name)):
            return (
                f"this server answers only for {', '.join(self.hosts)}, not {host!r}: open it by one of "
                "those (a name it is reached by can be added with --allowed-host)", 421,
            )
        method = scope["method"]
        if method not in ("GET", "HEAD", "POST"):
            return f"{method} is not allowed: the page changes things with POST only", 405
        if not scope.get("path", "").startswith("/api/"):
            return None  # the page and its assets: anyone who may reach the server may load them
        if headers.get("sec-fetch-site", "same-origin") != "same-origin":
            return "refused a cross-site request: only the page itself may use the API", 403
        if not secrets.compare_digest(headers.get(TOKEN_HEADER, "").encode(), self.token.encode()):
            return "missing or wrong page token: reload the page, then try again", 403
        if method != "POST":
            return None
        origin = headers.get("origin")
        if origin is not None and origin.lower() != f"{scope.get('scheme', 'http')}://{host}".lower():
            return f"refused a request from another origin ({origin}): only the page itself may change things", 403
        if not headers.get("content-type", "").startswith("application/json"):
            return "requests that change things send JSON (content-type: application/json)", 415
        return None


class _ReadyServer:
    """A uvicorn server that sets ``ready`` once it listens, and on stopping first calls the
    app's ``stop()`` (when it has one: :func:`create_app`'s does) so that requests waiting
    for a model end at once; requests still running after ``stop_timeout`` seconds are
    cancelled."""

    def __init__(self, app: Any, *, stop_timeout: int = STOP_TIMEOUT) -> None:
        import uvicorn

        ready = self.ready = threading.Event()
        stop = getattr(app, "stop", None)

        class Server(uvicorn.Server):
            async def startup(self, sockets: list[socket.socket] | None = None) -> None:
                await super().startup(sockets)
                ready.set()

            async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
                if callable(stop):
                    stop()
                await super().shutdown(sockets)

        config = uvicorn.Config(app, log_level="warning", lifespan="off", timeout_graceful_shutdown=stop_timeout)
        self.server = Server(config)


class BackgroundServer:
    """Serve ``app`` from a thread on a free loopback port (tests, the screenshot script).

    >>> # with BackgroundServer(create_app(chat)) as server: page.goto(server.url)

    ``__enter__`` returns once the server listens; ``__exit__`` stops it and joins the thread:
    requests waiting for a model end at once (the app's ``stop()``), others get
    ``stop_timeout`` seconds before they are cancelled, and a server thread still
    running then is made to exit at once.
    """

    def __init__(
        self, app: Any, *, host: str = "127.0.0.1", port: int = 0, start_timeout: float = 30.0,
        stop_timeout: int = STOP_TIMEOUT,
    ) -> None:
        self.app = app
        self.host = host
        self.port = port
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self._thread: threading.Thread | None = None
        self._socket: socket.socket | None = None

    @property
    def url(self) -> str:
        """The page's address."""
        return f"http://{self.host}:{self.port}/"

    def __enter__(self) -> "BackgroundServer":
        self._socket = _listen(self.host, self.port)
        self.port = self._socket.getsockname()[1]
        self._runner = _ReadyServer(self.app, stop_timeout=self.stop_timeout)
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
            self._thread.join(self.stop_timeout + 5)
            if self._thread.is_alive():  # a request that ignores cancellation: stop without it
                self._runner.server.force_exit = True
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
    chat: WebChat, *, host: str, port: int, say: Callable[[str], None] = print, session: str | None = None,
    allowed_hosts: Sequence[str] = (),
) -> int:
    """Serve ``chat`` at ``http://host:port/`` until Ctrl-C (or SIGTERM); the exit status (1: cannot listen).

    It says where it listens once the socket accepts connections (``port`` 0 picks a
    free port, and the line names it); ``session`` is the conversation the address opens;
    ``allowed_hosts``: more ``Host`` names answered (:func:`allowed_hosts_for`).  On Ctrl-C
    an answer still coming in is abandoned, unstored (its model call is left to finish in
    the background), and the server stops within :data:`STOP_TIMEOUT` seconds.  SIGTERM
    stops it the same way and also returns 0, so the caller's clean-up (closing the
    store, which checkpoints the database) runs.
    """
    try:
        sock = _listen(host, port)
    except OSError as exc:
        say(f"cannot listen on {host}:{port} ({exc.strerror or exc}): pass --port with a free port, or stop the other server")
        return 1
    port = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    query = "" if session in (None, "default") else "?" + urlencode({"session": session})
    app = create_app(chat, host=host, allowed_hosts=allowed_hosts)
    hosts = app.hosts  # worked out once: a wildcard bind looks the machine's names up
    if host in LOOPBACK:
        say(f"open http://{shown}:{port}/{query} (listening on loopback only: this computer; --host changes it)")
    else:
        say(
            f"open http://{shown}:{port}/{query} (listening on {host or 'every address'}: reachable from other "
            "computers on the network, with no login: anyone who can reach it can read, change and delete "
            f"these conversations; it answers to {', '.join(hosts)}; --allowed-host adds a name)"
        )
    say("Ctrl-C stops the server; the conversations are saved as you go.")
    runner = _ReadyServer(app)
    try:
        with sigterm_as_ctrl_c():  # uvicorn raises SIGTERM again as it ends: Ctrl-C's path
            runner.server.run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    finally:
        sock.close()
    return 0

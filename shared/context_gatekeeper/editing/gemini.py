"""The core's own thin Gemini model, on ``google-genai`` (the ``gemini`` extra).

:class:`GeminiModel` speaks the core's model protocol (:mod:`context_gatekeeper.editing.models`):
``complete(messages, json_schema=None)`` and ``async acomplete(...)`` with
structured output (``supports_json_schema = True``: the schema goes to Gemini as
``response_json_schema`` with ``response_mime_type="application/json"``).  The
LlamaIndex adapter and the terminal chat use it as their default editing model, so
neither needs the other framework's Gemini package.

* The key comes from ``api_key=``, else ``GOOGLE_API_KEY``, else ``GEMINI_API_KEY``;
  with none, construction raises :class:`ModelUnavailableError` at once.
* ``google-genai`` is imported only when a model is built (never at
  ``import context_gatekeeper``); without it, :class:`ModelUnavailableError` says
  which extra to install.
* Every request has a timeout (``timeout`` seconds, default 30; a finite number > 0),
  and a failed call is sent once by default (``max_retries=0``), so an offline call
  fails in one timeout, not minutes.  With ``max_retries=n`` the model itself sends a
  call up to n more times, after a timeout, a network failure, 408, 429 or 5xx (never
  after a rejected key or a bad request), waiting ``RETRY_DELAY`` seconds (doubling)
  between tries; the sync and async paths retry alike (google-genai's own retries are
  off: its sync client retries timeouts, its async client does not).
  Network failures, timeouts, overload and a rejected key become
  :class:`ModelUnavailableError` (:func:`~context_gatekeeper.editing.models.is_unavailable_error`);
  a reply cut off at the output limit (``finish_reason`` ``MAX_TOKENS``, with or without
  text: thinking may use the whole budget) raises
  :class:`~context_gatekeeper.errors.TruncatedReplyError`, so an edit retries it; one
  stopped for Gemini's safety policy (``SAFETY``, ``RECITATION`` ...) raises
  :class:`~context_gatekeeper.editing.finish_reasons.FilteredReplyError`, and the edit stops;
  so does a prompt Gemini blocks (``prompt_feedback.block_reason``: no answer at all).
* ``instead=`` is the way out each unavailability message ends with (default: pass
  ``model=``): an adapter or the terminal chat names its own options there, so a
  message says each hint once.
* ``client=`` accepts a ready ``google.genai.Client`` (or any object with
  ``models.generate_content`` and ``aio.models.generate_content``): the seam tests
  use, and the way to reach Vertex AI or a proxy.

Messages are sent as plain dicts, which google-genai validates into its types:
system messages become the ``system_instruction``; ``user`` stays ``user`` and
``assistant`` becomes ``model``; consecutive messages of one role share one content.

>>> GeminiModel(api_key="k", client=object()).supports_json_schema
True
"""

from __future__ import annotations

import asyncio
import importlib
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

from ..errors import (
    EditError,
    FilteredReplyError,
    InvalidInputError,
    InvalidTypeError,
    MissingExtraError,
    ModelUnavailableError,
)
from .failures import http_status
from .finish_reasons import reason_text
from .models import finish_reason_of, is_unavailable_error, refuse_truncated

__all__ = ["DEFAULT_GEMINI_MODEL", "GeminiModel", "gemini_api_key", "PASS_MODEL"]

DEFAULT_GEMINI_MODEL = "gemini-2.5-flash"
_KEY_VARS = ("GOOGLE_API_KEY", "GEMINI_API_KEY")
_ROLES = {"user": "user", "assistant": "model", "model": "model"}
PASS_MODEL = "or pass model= (a callable fn(messages) -> str, or another model your code accepts)"
"""The default way out named by :class:`GeminiModel`'s unavailability messages."""
MAX_TIMEOUT = 86_400.0
"""The longest ``timeout`` accepted, in seconds (one day)."""
_NOT_RETRIED_STATUSES = frozenset({400, 401, 403})
"""Statuses asking again cannot change: a bad request, a rejected key, no permission."""


def gemini_api_key(api_key: str | None = None) -> str | None:
    """``api_key`` if given, else ``GOOGLE_API_KEY``, else ``GEMINI_API_KEY`` (None if none is set)."""
    if api_key:
        return api_key
    return next((os.environ[v] for v in _KEY_VARS if os.environ.get(v)), None)


def _check_limits(timeout: Any, max_retries: Any) -> None:
    """Refuse a ``timeout`` that is not a finite number of seconds in (0, :data:`MAX_TIMEOUT`],
    or a ``max_retries`` that is not an int >= 0, before anything is built."""
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise InvalidTypeError(
            f"GeminiModel's timeout must be a number of seconds, got {type(timeout).__name__} ({timeout!r}); "
            f"pass e.g. timeout=30 (every request has one: at most {MAX_TIMEOUT:g} s)"
        )
    if isinstance(max_retries, bool) or not isinstance(max_retries, int):
        raise InvalidTypeError(
            f"GeminiModel's max_retries must be an int, got {type(max_retries).__name__} ({max_retries!r}); "
            "pass 0 (the default: one request) or the number of retries after a failed request"
        )
    if not 0 < timeout <= MAX_TIMEOUT or max_retries < 0:  # NaN fails it; a huge int is compared, never converted
        raise InvalidInputError(
            f"GeminiModel needs timeout > 0 (finite, at most {MAX_TIMEOUT:g} seconds) and max_retries >= 0, got "
            f"timeout={timeout!r}, max_retries={max_retries!r}; pass a timeout in seconds (default 30) "
            "and a retry count (default 0)"
        )


def _contents(messages: Sequence[Mapping[str, Any]]) -> tuple[list[dict[str, Any]], str | None]:
    """Gemini ``contents`` and ``system_instruction`` for role/content dicts."""
    system: list[str] = []
    contents: list[dict[str, Any]] = []
    for message in messages:
        role, text = str(message.get("role", "user")), str(message.get("content", ""))
        if role == "system":
            system.append(text)
            continue
        gemini_role = _ROLES.get(role, "user")  # a tool result reads as user input
        if contents and contents[-1]["role"] == gemini_role:
            contents[-1]["parts"].append({"text": text})
        else:
            contents.append({"role": gemini_role, "parts": [{"text": text}]})
    instruction = "\n\n".join(system) if system else None
    if not contents:  # Gemini needs a turn to answer: send the instructions as one
        contents, instruction = [{"role": "user", "parts": [{"text": instruction or ""}]}], None
    return contents, instruction


class GeminiModel:
    """Gemini through ``google-genai``, behind the core's model protocol.

    Args:
        model: the Gemini model name (default ``gemini-2.5-flash``).
        api_key: the API key; default ``GOOGLE_API_KEY``, then ``GEMINI_API_KEY``.
        timeout: seconds before one request gives up: a finite number, 0 < timeout <=
            :data:`MAX_TIMEOUT` (default 30).
        max_retries: retries after a failed request (a timeout, a network failure, 408,
            429, 5xx); default 0: one request.
        client: a ready client to use instead of building one (no key needed then).
        instead: the alternative each unavailability message ends with (default
            :data:`PASS_MODEL`), e.g. ``"or run with --offline"`` for a command-line tool.

    Raises:
        InvalidTypeError: ``timeout`` is not a number, or ``max_retries`` not an int.
        InvalidInputError: ``timeout`` is not finite and > 0 (at most a day), or ``max_retries`` < 0.
        ModelUnavailableError: no key, or google-genai is not installed.
    """

    supports_json_schema = True
    RETRY_DELAY = 1.0
    """Seconds before the first retry (doubling for each next one)."""

    def __init__(
        self,
        model: str = DEFAULT_GEMINI_MODEL,
        *,
        api_key: str | None = None,
        timeout: float = 30.0,
        max_retries: int = 0,
        client: Any = None,
        instead: str = PASS_MODEL,
    ) -> None:
        _check_limits(timeout, max_retries)
        self.name = self.model = model
        self.instead = instead
        self.timeout = timeout
        self.max_retries = max_retries
        self.client = client if client is not None else self._build_client(api_key)

    def _build_client(self, api_key: str | None) -> Any:
        key = gemini_api_key(api_key)
        if key is None:
            raise ModelUnavailableError(
                f"no editing model: set GOOGLE_API_KEY (or GEMINI_API_KEY) to use {self.model}, {self.instead}"
            )
        try:
            genai = importlib.import_module("google.genai")  # deferred: the `gemini` extra is optional
        except ImportError as exc:
            raise ModelUnavailableError(
                f"GeminiModel needs google-genai: {MissingExtraError.install_command('gemini')}, {self.instead}"
            ) from exc
        http_options = {
            "timeout": max(1, int(self.timeout * 1000)),  # google-genai counts milliseconds
            "retry_options": {"attempts": 1},  # retries are this model's own: alike sync and async
        }
        return genai.Client(api_key=key, http_options=http_options)

    def __repr__(self) -> str:
        return f"GeminiModel(model={self.model!r}, timeout={self.timeout}, max_retries={self.max_retries})"

    def request(
        self, messages: Sequence[Mapping[str, Any]], json_schema: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """The keyword arguments of ``generate_content`` for ``messages`` (no call made)."""
        contents, instruction = _contents(messages)
        config: dict[str, Any] = {}
        if instruction is not None:
            config["system_instruction"] = instruction
        if json_schema is not None:
            config["response_mime_type"] = "application/json"
            config["response_json_schema"] = dict(json_schema)
        return {"model": self.model, "contents": contents, "config": config or None}

    def _reply(self, response: Any) -> str:
        """The reply text.

        Raises:
            TruncatedReplyError: the reply stopped at ``MAX_TOKENS``, with or without text
                (Gemini 2.5 may spend the whole output budget on thinking).
            FilteredReplyError: Gemini stopped it for its safety policy (``SAFETY``,
                ``RECITATION`` ...), or blocked the prompt (``prompt_feedback.block_reason``).
            EditError: no text for another reason.
        """
        text = getattr(response, "text", None)
        reason = finish_reason_of(response)
        if isinstance(text, str) and text:
            return str(refuse_truncated(text, reason, self.model))
        refuse_truncated("", reason, self.model)
        feedback = getattr(response, "prompt_feedback", None)
        blocked = reason_text(getattr(feedback, "block_reason", None))
        if blocked is not None:
            raise FilteredReplyError(
                f"{self.model} blocked the prompt for its safety or content policy (block reason {blocked!r}); "
                "nothing was changed. Rephrase the request, or use another model",
                finish_reason=blocked,
            )
        raise EditError(
            f"{self.model} returned no text (finish reason: {reason or 'none'}); "
            "nothing was changed. Rephrase the instruction or try another model."
        )

    def _failure(self, exc: Exception) -> Exception:
        """The error to raise for a failed request (``exc`` itself when it is not about reachability)."""
        if not is_unavailable_error(exc):
            return exc
        message = str(getattr(exc, "message", None) or exc) or self._silent(exc)
        return ModelUnavailableError(
            f"{self.model} could not be used ({type(exc).__name__}: {message}); nothing was changed. "
            f"Check the network, the API key (GOOGLE_API_KEY) and the timeout, {self.instead}."
        )

    def _silent(self, exc: Exception) -> str:
        """What to say of a failure whose error has no message (``asyncio.TimeoutError()``)."""
        if isinstance(exc, TimeoutError) or "timeout" in type(exc).__name__.lower():
            return f"no answer within {self.timeout:g} s"
        return "no details given"

    def _retry_delay(self, exc: Exception, attempt: int) -> float | None:
        """Seconds to wait before sending the call again after ``exc`` on try ``attempt`` (0-based),
        or None when it is not sent again (no retry left, or one cannot help)."""
        if attempt >= self.max_retries or not is_unavailable_error(exc):
            return None
        if http_status(exc) in _NOT_RETRIED_STATUSES:
            return None
        return float(self.RETRY_DELAY * 2**attempt)

    def _raise(self, exc: Exception) -> NoReturn:
        """Raise ``exc`` as this model reports it (:meth:`_failure`)."""
        failure = self._failure(exc)
        if failure is exc:
            raise exc
        raise failure from exc

    def complete(self, messages: Sequence[Mapping[str, Any]], json_schema: Mapping[str, Any] | None = None) -> str:
        """Send ``messages``; the reply text (JSON text when ``json_schema`` is given)."""
        request = self.request(messages, json_schema)
        attempt = 0
        while True:
            try:
                response = self.client.models.generate_content(**request)
            except Exception as exc:
                delay = self._retry_delay(exc, attempt)
                if delay is None:
                    self._raise(exc)
                time.sleep(delay)
                attempt += 1
                continue
            return self._reply(response)

    async def acomplete(
        self, messages: Sequence[Mapping[str, Any]], json_schema: Mapping[str, Any] | None = None
    ) -> str:
        """Async :meth:`complete` (google-genai's own async client; never blocks the loop)."""
        request = self.request(messages, json_schema)
        attempt = 0
        while True:
            try:
                response = await self.client.aio.models.generate_content(**request)
            except Exception as exc:
                delay = self._retry_delay(exc, attempt)
                if delay is None:
                    self._raise(exc)
                await asyncio.sleep(delay)
                attempt += 1
                continue
            return self._reply(response)

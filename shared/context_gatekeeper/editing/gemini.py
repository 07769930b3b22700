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
* Every request has a timeout (``timeout`` seconds, default 30) and few retries
  (``max_retries``, default 1), so an offline call fails in seconds, not minutes.
  Network failures, timeouts, overload and a rejected key become
  :class:`ModelUnavailableError` (:func:`~context_gatekeeper.editing.models.is_unavailable_error`);
  a reply cut off at the output limit (``finish_reason`` ``MAX_TOKENS``, with or without
  text: thinking may use the whole budget) raises
  :class:`~context_gatekeeper.errors.TruncatedReplyError`, so an edit retries it; one
  stopped for Gemini's safety policy (``SAFETY``, ``RECITATION`` ...) raises
  :class:`~context_gatekeeper.editing.finish_reasons.FilteredReplyError`, and the edit stops.
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

import importlib
import os
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import EditError, InvalidInputError, MissingExtraError, ModelUnavailableError
from .finish_reasons import reason_text
from .models import finish_reason_of, is_unavailable_error, refuse_truncated

__all__ = ["DEFAULT_GEMINI_MODEL", "GeminiModel", "gemini_api_key", "PASS_MODEL"]

DEFAULT_GEMINI_MODEL = "gemini-2.5-flash"
_KEY_VARS = ("GOOGLE_API_KEY", "GEMINI_API_KEY")
_ROLES = {"user": "user", "assistant": "model", "model": "model"}
PASS_MODEL = "or pass model= (a callable fn(messages) -> str, or another model your code accepts)"
"""The default way out named by :class:`GeminiModel`'s unavailability messages."""


def gemini_api_key(api_key: str | None = None) -> str | None:
    """``api_key`` if given, else ``GOOGLE_API_KEY``, else ``GEMINI_API_KEY`` (None if none is set)."""
    if api_key:
        return api_key
    return next((os.environ[v] for v in _KEY_VARS if os.environ.get(v)), None)


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
        timeout: seconds before one request gives up.
        max_retries: retries after a failed request (408, 429, 5xx, network errors).
        client: a ready client to use instead of building one (no key needed then).
        instead: the alternative each unavailability message ends with (default
            :data:`PASS_MODEL`), e.g. ``"or run with --offline"`` for a command-line tool.

    Raises:
        ModelUnavailableError: no key, or google-genai is not installed.
    """

    supports_json_schema = True

    def __init__(
        self,
        model: str = DEFAULT_GEMINI_MODEL,
        *,
        api_key: str | None = None,
        timeout: float = 30.0,
        max_retries: int = 1,
        client: Any = None,
        instead: str = PASS_MODEL,
    ) -> None:
        if timeout <= 0 or max_retries < 0:
            raise InvalidInputError(
                f"GeminiModel needs timeout > 0 and max_retries >= 0, got timeout={timeout!r}, "
                f"max_retries={max_retries!r}; pass a timeout in seconds (default 30) and a retry count"
            )
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
            "retry_options": {"attempts": self.max_retries + 1},
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
                ``RECITATION`` ...).
            EditError: no text for another reason (a blocked prompt ...).
        """
        text = getattr(response, "text", None)
        reason = finish_reason_of(response)
        if isinstance(text, str) and text:
            return str(refuse_truncated(text, reason, self.model))
        refuse_truncated("", reason, self.model)
        feedback = getattr(response, "prompt_feedback", None)
        blocked = reason_text(getattr(feedback, "block_reason", None))
        raise EditError(
            f"{self.model} returned no text (finish reason: {reason or 'none'}; prompt blocked: {blocked or 'no'}); "
            "nothing was changed. Rephrase the instruction or try another model."
        )

    def _failure(self, exc: Exception) -> Exception:
        """The error to raise for a failed request (``exc`` itself when it is not about reachability)."""
        if not is_unavailable_error(exc):
            return exc
        message = str(getattr(exc, "message", None) or exc)
        return ModelUnavailableError(
            f"{self.model} could not be used ({type(exc).__name__}: {message}); nothing was changed. "
            f"Check the network, the API key (GOOGLE_API_KEY) and the timeout, {self.instead}."
        )

    def complete(self, messages: Sequence[Mapping[str, Any]], json_schema: Mapping[str, Any] | None = None) -> str:
        """Send ``messages``; the reply text (JSON text when ``json_schema`` is given)."""
        try:
            response = self.client.models.generate_content(**self.request(messages, json_schema))
        except Exception as exc:
            failure = self._failure(exc)
            if failure is exc:
                raise
            raise failure from exc
        return self._reply(response)

    async def acomplete(
        self, messages: Sequence[Mapping[str, Any]], json_schema: Mapping[str, Any] | None = None
    ) -> str:
        """Async :meth:`complete` (google-genai's own async client; never blocks the loop)."""
        try:
            response = await self.client.aio.models.generate_content(**self.request(messages, json_schema))
        except Exception as exc:
            failure = self._failure(exc)
            if failure is exc:
                raise
            raise failure from exc
        return self._reply(response)

"""LangChain chat models as editing models, and the default: Gemini 2.5 Flash.

:class:`LangChainEditModel` speaks the core's model protocol
(:mod:`context_gatekeeper.editing.models`) for any ``BaseChatModel``, and for any other
LangChain ``Runnable`` (a chat model wrapped by ``.bind()``, ``.with_retry()``,
``.with_fallbacks()``, ``.with_config()``, or a chain ending in one): sync and async
calls, and structured output through ``with_structured_output`` when a chat model
implements it (with ``include_raw=True``, so the raw message's finish reason is
seen).  A wrapped chat model is called through its wrapper (``invoke`` / ``ainvoke``,
so the bound arguments, retries and fallbacks apply) and answers in JSON text:
``with_structured_output`` belongs to the chat model alone and would bypass them.  A reply whose ``response_metadata`` says it stopped at the output limit
(``finish_reason`` ``length`` / ``MAX_TOKENS``, ``stop_reason`` ``max_tokens``)
raises :class:`~context_gatekeeper.errors.TruncatedReplyError`: an edit retries it
instead of applying what was cut off.  One the provider stopped for its content policy
(``content_filter``, ``SAFETY``, ``refusal``) raises the core's ``FilteredReplyError`` and
the edit stops.  A rejected key or a server failure (langchain-core's
``ModelAuthenticationError`` / ``ModelAPIError``, the provider's 401 / 403 / 5xx or 400
"API key not valid") is :class:`~context_gatekeeper.ModelUnavailableError` after one
request, as on the core's own Gemini model.  :func:`default_chat_model` builds
``ChatGoogleGenerativeAI`` with a short timeout and one retry (its defaults take ~34 s to
fail offline) and turns a missing key into :class:`~context_gatekeeper.ModelUnavailableError`.

The wrapper also streams (the core's :meth:`~context_gatekeeper.EditModel.stream_text`, which
the web chat uses): ``model.stream(messages)``, each chunk's text (a chunk's
``response_metadata`` finish reason is checked as a whole reply's is).  A chat model with
no streaming of its own answers in one chunk, as LangChain's ``stream`` does.  A model
whose wrappers hold a ``.with_retry()`` does not stream (``streams`` is False): LangChain's
``RunnableRetry`` retries ``invoke`` and ``batch`` only, so its answer comes in one piece
through ``invoke``, with the retries.  ``.with_fallbacks()`` streams: its ``stream`` moves to
the next model when one fails before its first chunk.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

from langchain_core import exceptions as lc_exceptions
from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.runnables.retry import RunnableRetry
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

from context_gatekeeper import (
    EditError,
    EditModel,
    FilteredReplyError,
    GatekeeperError,
    InvalidInputError,
    InvalidTypeError,
    MissingExtraError,
    ModelReply,
    ModelUnavailableError,
    StructuredOutputError,
    resolve_model,
)
from context_gatekeeper.integration import finish_reason_of, is_unavailable_error, refuse_truncated

__all__ = ["DEFAULT_MODEL", "EDITOR_RUN_NAME", "LangChainEditModel", "default_chat_model", "resolve_edit_model", "underlying_chat_model"]

_REFUSAL: tuple[type[Exception], ...] = tuple(
    cls for cls in (getattr(lc_exceptions, "ModelRefusalError", None),) if isinstance(cls, type) and issubclass(cls, Exception)
)
"""langchain-core's ``ModelRefusalError`` (structured output a provider declined to give), where
the installed version has it."""

DEFAULT_MODEL = "gemini-2.5-flash"
_KEYS = ("GOOGLE_API_KEY", "GEMINI_API_KEY")
_LC_TYPES = {"system": SystemMessage, "user": HumanMessage, "assistant": AIMessage}


def default_chat_model(*, timeout: float = 30.0, max_retries: int = 1) -> BaseChatModel:
    """``ChatGoogleGenerativeAI(model="gemini-2.5-flash")`` with a timeout and few retries.

    Raises :class:`ModelUnavailableError` when no key is set or the package is missing.
    """
    key = next((os.environ[k] for k in _KEYS if os.environ.get(k)), None)
    if key is None:
        raise ModelUnavailableError(
            "no editing model: set GOOGLE_API_KEY (or GEMINI_API_KEY) to use the default "
            f"{DEFAULT_MODEL}, or pass model= (any LangChain chat model, or a callable fn(messages) -> str)"
        )
    try:
        from langchain_google_genai import ChatGoogleGenerativeAI
    except ImportError as exc:  # pragma: no cover - the langchain extra installs it
        raise ModelUnavailableError(
            "the default editing model needs langchain-google-genai: "
            f"{MissingExtraError.install_command('langchain')}, or pass model="
        ) from exc
    return ChatGoogleGenerativeAI(model=DEFAULT_MODEL, google_api_key=key, timeout=timeout, max_retries=max_retries)


def _supports_structured_output(model: BaseChatModel) -> bool:
    cls = type(model)
    return cls.with_structured_output is not BaseChatModel.with_structured_output or (
        cls.bind_tools is not BaseChatModel.bind_tools
    )


def _holds_retry(runnable: Any) -> bool:
    """Whether a ``RunnableRetry`` (``.with_retry()``) is among the runnables ``runnable`` is
    made of: itself, ``.bound`` (``bind`` / ``with_retry`` / ``with_config``), ``.runnable``
    and ``.fallbacks`` (``with_fallbacks``), a sequence's ``.steps``; a few hundred at most."""
    todo, looked = [runnable], 0
    while todo and looked < 256:
        node = todo.pop()
        looked += 1
        if isinstance(node, RunnableRetry):
            return True
        if isinstance(node, BaseChatModel):
            continue
        inner: list[Any] = [getattr(node, "bound", None), getattr(node, "runnable", None)]
        for many in (getattr(node, "fallbacks", None), getattr(node, "steps", None)):
            if isinstance(many, (list, tuple)):
                inner.extend(many)
        todo.extend(r for r in inner if isinstance(r, Runnable))
    return False


def underlying_chat_model(runnable: Any) -> BaseChatModel | None:
    """The chat model a runnable wraps (``.bound`` of ``bind`` / ``with_retry`` /
    ``with_config``, ``.runnable`` of ``with_fallbacks``, a few levels deep); the model
    itself for a chat model; None when there is none (a chain, a lambda)."""
    for _ in range(8):
        if isinstance(runnable, BaseChatModel):
            return runnable
        runnable = getattr(runnable, "bound", None) or getattr(runnable, "runnable", None)
        if runnable is None:
            return None
    return None


EDITOR_RUN_NAME = "gatekeeper_editor"
"""The run name of the editing model's calls (the outermost run of each; see ``_EDITOR_RUN``)."""

_EDITOR_RUN = RunnableConfig(tags=["nostream"], run_name=EDITOR_RUN_NAME)
"""The config of every call :class:`LangChainEditModel` makes: a call inside a LangGraph run
(the middleware's ``/edit`` route) joins the run's callbacks, and LangGraph's
``stream_mode="messages"`` would show the editor's answer, the patch JSON, as the
assistant's reply; runs tagged ``nostream`` (LangGraph's ``TAG_NOSTREAM``) are left out of
that stream.  ``astream_events`` does not read the tag: it shows the editor's events, and a
UI filtering them leaves out each event whose ``tags`` hold ``"nostream"`` (every run of
the call, nested ones too, inherits the tag) or whose ``name`` is ``"gatekeeper_editor"``
(the call's outermost run; a plain chat model's own events).  Callbacks and tracing still
see the call."""


class LangChainEditModel(EditModel):
    """A LangChain chat model as the core's :class:`~context_gatekeeper.editing.models.EditModel`.

    Structured output goes through ``with_structured_output(schema, include_raw=True)``.
    When that path fails (binding the schema raises, as an unsupported model's
    ``NotImplementedError`` does; the call raises; or the answer holds neither a parsed
    object nor text), :class:`~context_gatekeeper.errors.StructuredOutputError` tells the
    edit to ask again for JSON text, within its attempt budget.

    Args:
        model: any ``BaseChatModel``, or any other LangChain ``Runnable`` that takes a
            list of messages (a wrapped chat model, a chain); it answers in JSON text.
        structured: use ``with_structured_output`` for JSON-schema replies; ``None``
            (default) decides by whether the model implements it (or ``bind_tools``).
            Only a chat model itself has it: ``True`` for another runnable is refused.

    Raises:
        InvalidTypeError: ``model`` is not a LangChain ``Runnable``.
        InvalidInputError: ``structured=True`` for a runnable that is not a chat model.

    Attributes:
        model: the chat model or runnable (also ``wrapped``).
        streams: True unless the model's wrappers hold a ``.with_retry()`` (LangChain's
            ``RunnableRetry`` does not retry ``stream``): such a model answers in one piece
            through ``invoke``, with its retries.
    """

    def __init__(self, model: Runnable | BaseChatModel, *, structured: bool | None = None) -> None:
        if not isinstance(model, Runnable):
            raise InvalidTypeError(
                f"expected a LangChain chat model (BaseChatModel) or another Runnable, got {type(model).__name__}; "
                "pass a chat model (e.g. ChatOpenAI(...), also wrapped by .bind() / .with_retry() / "
                ".with_fallbacks()), or pass a plain callable fn(messages) -> str to the core as model="
            )
        if structured and not isinstance(model, BaseChatModel):
            raise InvalidInputError(
                f"structured=True needs a chat model, and {type(model).__name__} wraps one (or none): "
                "with_structured_output would bypass the wrapper; pass the chat model itself for "
                "structured output, or leave structured unset to get JSON text through the wrapper"
            )
        self.model = model
        chat = underlying_chat_model(model)
        named = chat if chat is not None else model
        name = str(getattr(named, "model", None) or getattr(named, "model_name", None) or type(named).__name__)
        if structured is None:
            structured = isinstance(model, BaseChatModel) and _supports_structured_output(model)
        super().__init__(
            name, sync=self._call, async_=self._acall, supports_json_schema=structured, wrapped=model,
            stream=None if _holds_retry(model) else self._stream_pieces,
        )

    def __repr__(self) -> str:
        return f"LangChainEditModel({self.name!r}, supports_json_schema={self.supports_json_schema})"

    @staticmethod
    def _messages(messages: list[dict[str, str]]) -> list[BaseMessage]:
        return [_LC_TYPES.get(m["role"], HumanMessage)(content=m["content"]) for m in messages]

    def structured_runnable(self, json_schema: dict[str, Any]) -> Any:
        """``model.with_structured_output(json_schema, include_raw=True)`` (the request an
        edit sends; nothing is called).

        Raises:
            StructuredOutputError: the model cannot bind the schema (``reached_model`` False).
        """
        try:
            if not isinstance(self.model, BaseChatModel):
                raise NotImplementedError(f"{type(self.model).__name__} is not a chat model")
            return self.model.with_structured_output(json_schema, include_raw=True)
        except Exception as exc:
            raise StructuredOutputError(
                f"{type(exc).__name__} binding the schema: {exc}", reached_model=False
            ) from exc

    def _text_reply(self, reply: Any) -> Any:
        """The text of a plain reply; refused when it says it was cut off."""
        if isinstance(reply, BaseMessage):
            return refuse_truncated(reply.text, finish_reason_of(reply), self.name)
        return reply

    def _structured_reply(self, reply: Any) -> Any:
        """The parsed object, else the raw answer's text; nothing at all is a structured failure."""
        if not (isinstance(reply, dict) and {"raw", "parsed"} <= reply.keys()):
            return self._text_reply(reply)
        raw, parsed = reply["raw"], reply["parsed"]
        error = reply.get("parsing_error")
        if isinstance(error, _REFUSAL):  # (include_raw=True hands a refusal back instead of raising it)
            self._call_failed(error)
        if parsed is None:  # unparsable: let the core repair and check the raw answer
            parsed = _raw_text(raw)
        checked = refuse_truncated(parsed, finish_reason_of(raw), self.name)
        if isinstance(checked, str) and not checked.strip():
            why = f" ({type(error).__name__}: {error})" if error is not None else ""
            raise StructuredOutputError(f"the structured answer held no object and no text{why}")
        return checked

    @staticmethod
    def _call_failed(exc: Exception) -> None:
        """Re-raise ``exc`` as a structured failure (the edit asks again for JSON text),
        unless asking again cannot help because the model cannot be used now: a rejected
        key, a server failure, the network (:func:`is_unavailable_error`, which reads
        langchain-core's ``ModelAuthenticationError`` / ``ModelAPIError`` and the provider
        error they wrap); those are re-raised, and the edit ends with
        :class:`~context_gatekeeper.ModelUnavailableError` after one request."""
        if isinstance(exc, GatekeeperError) or is_unavailable_error(exc):
            raise exc
        if isinstance(exc, _REFUSAL):  # the provider declined: asking again for text meets the same policy
            raise FilteredReplyError(
                f"the model declined to answer ({exc}); nothing was changed. Rephrase the request, or "
                "use another model", finish_reason="refusal",
            ) from exc
        raise StructuredOutputError(f"{type(exc).__name__}: {exc}") from exc

    def _call(self, messages: list[dict[str, str]], json_schema: dict[str, Any] | None = None) -> Any:
        """Call the model; text, or the parsed object under structured output."""
        sent = self._messages(messages)
        if json_schema is None:
            return self._text_reply(self.model.invoke(sent, config=_EDITOR_RUN))
        runnable = self.structured_runnable(json_schema)
        try:
            reply = runnable.invoke(sent, config=_EDITOR_RUN)
        except Exception as exc:
            self._call_failed(exc)
        return self._structured_reply(reply)

    def _stream_pieces(self, messages: list[dict[str, str]]) -> Iterator[ModelReply]:
        """``model.stream(messages)`` as text pieces, each with its chunk's finish reason (the
        core's :meth:`~context_gatekeeper.EditModel.stream_text` reads them)."""
        for chunk in self.model.stream(self._messages(messages)):
            if isinstance(chunk, BaseMessage):
                yield ModelReply(chunk.text, finish_reason_of(chunk))
            elif isinstance(chunk, str):  # a chain ending in a string parser
                yield ModelReply(chunk)
            else:
                raise EditError(
                    f"{type(self.model).__name__} streamed {type(chunk).__name__}, not a message or text; "
                    "stream a chat model (or a chain ending in one, or in StrOutputParser). Nothing was changed."
                )

    async def _acall(self, messages: list[dict[str, str]], json_schema: dict[str, Any] | None = None) -> Any:
        """Async :meth:`_call` (the model's own ``ainvoke``)."""
        sent = self._messages(messages)
        if json_schema is None:
            return self._text_reply(await self.model.ainvoke(sent, config=_EDITOR_RUN))
        runnable = self.structured_runnable(json_schema)
        try:
            reply = await runnable.ainvoke(sent, config=_EDITOR_RUN)
        except Exception as exc:
            self._call_failed(exc)
        return self._structured_reply(reply)


def _raw_text(raw: Any) -> str:
    """The answer in a raw message whose structured output failed to parse: its tool
    call's arguments (as JSON) or its text."""
    calls = getattr(raw, "tool_calls", None) or []
    if calls and isinstance(calls[0], dict) and isinstance(calls[0].get("args"), dict):
        return json.dumps(calls[0]["args"], ensure_ascii=False)
    return raw.text if isinstance(raw, BaseMessage) else str(raw or "")


def given_edit_model(model: Any = None, llm: Any = None) -> EditModel | None:
    """The editing model the caller passed (``model=`` or its alias ``llm=``), resolved once
    now so that a bad one fails at construction; ``None`` when neither was given (the
    default model is then resolved by :func:`resolve_edit_model` at the first edit)."""
    return resolve_edit_model(model, llm) if model is not None or llm is not None else None


def resolve_edit_model(model: Any = None, llm: Any = None) -> EditModel:
    """The model an ``edit`` call should use: ``model=`` or its alias ``llm=``; with neither,
    the default Gemini model (:func:`default_chat_model`).  A thin delegate of
    :func:`context_gatekeeper.editing.models.resolve_model`: a LangChain chat model becomes a
    :class:`LangChainEditModel`, anything else the core's :class:`EditModel`.

    Raises:
        TypeError: ``model=`` and ``llm=`` both given and different.
        ModelUnavailableError: neither given and no Gemini key set.
    """
    return resolve_model(model, llm, default=default_chat_model)

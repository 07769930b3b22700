"""LangChain chat models as editing models, and the default: Gemini 2.5 Flash.

:class:`LangChainEditModel` speaks the core's model protocol
(:mod:`context_gatekeeper.models`) for any ``BaseChatModel``: sync and async
calls, and structured output through ``with_structured_output`` when the model
implements it (with ``include_raw=True``, so the raw message's finish reason is
seen).  A reply whose ``response_metadata`` says it stopped at the output limit
(``finish_reason`` ``length`` / ``MAX_TOKENS``, ``stop_reason`` ``max_tokens``)
raises :class:`~context_gatekeeper.errors.TruncatedReplyError`: an edit retries it
instead of applying what was cut off.  :func:`default_chat_model` builds ``ChatGoogleGenerativeAI`` with a
short timeout and one retry (its defaults take ~34 s to fail offline) and turns a
missing key into :class:`~context_gatekeeper.ModelUnavailableError`.
"""

from __future__ import annotations

import json
import os
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

from context_gatekeeper.models import finish_reason_of, pick_model, refuse_truncated
from context_gatekeeper import ModelUnavailableError

__all__ = ["DEFAULT_MODEL", "LangChainEditModel", "default_chat_model", "resolve_edit_model"]

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
            "the default editing model needs langchain-google-genai: pip install 'context-gatekeeper[langchain]', "
            "or pass model="
        ) from exc
    return ChatGoogleGenerativeAI(model=DEFAULT_MODEL, google_api_key=key, timeout=timeout, max_retries=max_retries)


def _supports_structured_output(model: BaseChatModel) -> bool:
    cls = type(model)
    return cls.with_structured_output is not BaseChatModel.with_structured_output or (
        cls.bind_tools is not BaseChatModel.bind_tools
    )


class LangChainEditModel:
    """A LangChain chat model behind the core's model protocol.

    Args:
        model: any ``BaseChatModel``.
        structured: use ``with_structured_output`` for JSON-schema replies; ``None``
            (default) decides by whether the model implements it.
    """

    def __init__(self, model: BaseChatModel, *, structured: bool | None = None) -> None:
        if not isinstance(model, BaseChatModel):
            raise TypeError(f"expected a LangChain BaseChatModel, got {type(model).__name__}")
        self.model = model
        self.supports_json_schema = _supports_structured_output(model) if structured is None else structured
        self.name = str(getattr(model, "model", None) or getattr(model, "model_name", None) or type(model).__name__)

    @staticmethod
    def _messages(messages: list[dict[str, str]]) -> list[BaseMessage]:
        return [_LC_TYPES.get(m["role"], HumanMessage)(content=m["content"]) for m in messages]

    def _runnable(self, json_schema: dict[str, Any] | None) -> Any:
        if json_schema is None or not self.supports_json_schema:
            return self.model
        return self.model.with_structured_output(json_schema, include_raw=True)

    def _reply(self, reply: Any) -> Any:
        """Text, or the parsed object; refused when the raw message says it was cut off."""
        if isinstance(reply, dict) and {"raw", "parsed"} <= reply.keys():  # include_raw=True
            raw, parsed = reply["raw"], reply["parsed"]
            if parsed is None:  # unparsable: let the core repair and check the raw answer
                parsed = _raw_text(raw)
            return refuse_truncated(parsed, finish_reason_of(raw), self.name)
        if isinstance(reply, BaseMessage):
            return refuse_truncated(reply.text, finish_reason_of(reply), self.name)
        return reply

    def complete(self, messages: list[dict[str, str]], json_schema: dict[str, Any] | None = None) -> Any:
        """Call the model; text, or the parsed object under structured output.

        Raises:
            TruncatedReplyError: the reply stopped at the model's output limit.
        """
        return self._reply(self._runnable(json_schema).invoke(self._messages(messages)))

    async def acomplete(self, messages: list[dict[str, str]], json_schema: dict[str, Any] | None = None) -> Any:
        """Async :meth:`complete` (the model's own ``ainvoke``)."""
        return self._reply(await self._runnable(json_schema).ainvoke(self._messages(messages)))


def _raw_text(raw: Any) -> str:
    """The answer in a raw message whose structured output failed to parse: its tool
    call's arguments (as JSON) or its text."""
    calls = getattr(raw, "tool_calls", None) or []
    if calls and isinstance(calls[0], dict) and isinstance(calls[0].get("args"), dict):
        return json.dumps(calls[0]["args"], ensure_ascii=False)
    return raw.text if isinstance(raw, BaseMessage) else str(raw or "")


def resolve_edit_model(model: Any = None, llm: Any = None) -> Any:
    """The model an ``edit`` call should use: ``model=`` or its alias ``llm=``, wrapped when
    it is a LangChain chat model; with neither, the default Gemini model."""
    chosen = pick_model(model, llm)
    if chosen is None:
        chosen = default_chat_model()
    return LangChainEditModel(chosen) if isinstance(chosen, BaseChatModel) else chosen

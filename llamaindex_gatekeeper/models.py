"""LlamaIndex LLMs as editing models, and the default: the core's Gemini model.

:class:`LlamaIndexEditModel` puts any LlamaIndex LLM behind the core's model
protocol (:mod:`context_gatekeeper.editing.models`) through its ``chat`` / ``achat``.
Replies are text: LlamaIndex's structured prediction wants a Pydantic class, not
a JSON schema, and falls back to prompting on most LLMs, so the core's own JSON
extraction, repair and validation (with one retry) is the more reliable path.
It also streams (the core's :meth:`~context_gatekeeper.EditModel.stream_text`, which the
web chat uses) through ``stream_chat``: each response's ``delta``, with the finish reason
its raw response carries.  An LLM whose ``stream_chat`` is not implemented answers in one
piece through ``chat``.

:func:`resolve_edit_model` picks the model an ``edit`` call uses: ``model=`` or
its alias ``llm=``; with neither, :class:`context_gatekeeper.editing.gemini.GeminiModel`
(``gemini-2.5-flash`` on google-genai), which needs ``GOOGLE_API_KEY``.  This
adapter does not depend on llama-index-llms-google-genai (it pins an older
google-genai than the LangChain extra needs).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from llama_index.core.base.llms.base import BaseLLM
from llama_index.core.base.llms.types import ChatMessage, MessageRole

from context_gatekeeper import EditModel, GeminiModel, InvalidTypeError, ModelReply, resolve_model
from context_gatekeeper.integration import DEFAULT_GEMINI_MODEL, finish_reason_of, refuse_truncated

__all__ = ["DEFAULT_MODEL", "LlamaIndexEditModel", "default_model", "resolve_edit_model"]

DEFAULT_MODEL = DEFAULT_GEMINI_MODEL
_ROLES = {"system": MessageRole.SYSTEM, "user": MessageRole.USER, "assistant": MessageRole.ASSISTANT}
_INSTEAD = "or pass model= (or llm=): any LlamaIndex LLM, or a callable fn(messages) -> str"


class LlamaIndexEditModel(EditModel):
    """A LlamaIndex LLM (any ``BaseLLM``: ``OpenAI``, ``Ollama``, a ``CustomLLM`` ...)
    as the core's :class:`~context_gatekeeper.editing.models.EditModel`.

    The core sends ``[{"role": "system" | "user" | "assistant", "content": str}]``;
    they become ``ChatMessage`` objects for ``llm.chat`` (``llm.achat`` when async),
    and the reply's text comes back.  ``supports_json_schema`` is False: the core
    asks for JSON in the prompt and parses, repairs and validates the text itself.
    """

    def __init__(self, llm: BaseLLM) -> None:
        if not isinstance(llm, BaseLLM):
            raise InvalidTypeError(
                f"expected a LlamaIndex LLM (llama_index.core.llms.LLM), got {type(llm).__name__}; pass an LLM "
                "such as OpenAI(...), or pass a plain callable to the core as model="
            )
        self.llm = llm
        try:
            name = llm.metadata.model_name
        except Exception:  # metadata is a property some LLMs compute; a name is not worth failing for
            name = None
        super().__init__(
            str(name or type(llm).__name__), sync=self._call, async_=self._acall, wrapped=llm, stream=self._stream_pieces
        )

    def __repr__(self) -> str:
        return f"LlamaIndexEditModel({self.name!r})"

    @staticmethod
    def messages(messages: Sequence[Mapping[str, Any]]) -> list[ChatMessage]:
        """The core's role/content dicts as LlamaIndex ``ChatMessage`` objects."""
        return [
            ChatMessage(role=_ROLES.get(str(m.get("role")), MessageRole.USER), content=str(m.get("content", "")))
            for m in messages
        ]

    def _reply(self, response: Any) -> str:
        """The reply text; refused when the raw response says it stopped at the output limit
        (:class:`~context_gatekeeper.errors.TruncatedReplyError`) or for the provider's content
        policy (``FilteredReplyError``)."""
        return str(refuse_truncated(response.message.content or "", finish_reason_of(response), self.name))

    def _call(self, messages: Sequence[Mapping[str, Any]], json_schema: Mapping[str, Any] | None = None) -> str:
        """Chat with the LLM; the reply text.  ``json_schema`` is ignored (text replies).

        Raises:
            TruncatedReplyError: the raw response's finish reason says it was cut off
                (``choices[0].finish_reason == "length"`` and the like).
            FilteredReplyError: it says the provider stopped it (``content_filter`` ...).
        """
        return self._reply(self.llm.chat(self.messages(messages)))

    def _stream_pieces(self, messages: Sequence[Mapping[str, Any]]) -> Iterator[ModelReply]:
        """``llm.stream_chat`` as text pieces (each response's ``delta``, or what its message
        grew by when it has none), each with its raw response's finish reason; an LLM that
        does not implement ``stream_chat`` answers in one piece (``chat``)."""
        sent = self.messages(messages)
        try:
            responses = iter(self.llm.stream_chat(sent))
            first = next(responses, None)  # an LLM without streaming raises at the call or here
        except NotImplementedError:
            response = self.llm.chat(sent)
            yield ModelReply(response.message.content or "", finish_reason_of(response))
            return
        content = ""
        for response in itertools.chain([first] if first is not None else [], responses):
            now = response.message.content or ""
            delta = response.delta
            if delta is None:
                delta = now[len(content):] if now.startswith(content) else ""
            content = now
            yield ModelReply(delta, finish_reason_of(response))

    async def _acall(
        self, messages: Sequence[Mapping[str, Any]], json_schema: Mapping[str, Any] | None = None
    ) -> str:
        """Async :meth:`_call` (the LLM's own ``achat``)."""
        return self._reply(await self.llm.achat(self.messages(messages)))


def default_model() -> GeminiModel:
    """The adapter's default editing model: the core's :class:`GeminiModel` (needs a key)."""
    return GeminiModel(instead=_INSTEAD)


def given_edit_model(model: Any = None, llm: Any = None) -> EditModel | None:
    """The editing model the caller passed (``model=`` or its alias ``llm=``), resolved once
    now so that a bad one fails at construction; ``None`` when neither was given (the
    default model is then resolved by :func:`resolve_edit_model` at the first edit)."""
    return resolve_edit_model(model, llm) if model is not None or llm is not None else None


def resolve_edit_model(model: Any = None, llm: Any = None) -> EditModel:
    """The model an ``edit`` call should use, as the core's :class:`EditModel` (wrapped once).

    ``model=`` or its alias ``llm=`` (not two different ones): a LlamaIndex LLM becomes a
    :class:`LlamaIndexEditModel`; anything else the core accepts (a callable
    ``fn(messages) -> str``, an object with ``complete`` / ``acomplete``) its
    :class:`EditModel`.  With neither, the core's :class:`GeminiModel`.  A thin delegate
    of :func:`context_gatekeeper.editing.models.resolve_model`.

    Raises:
        TypeError: both ``model=`` and ``llm=`` given, and they differ.
        ModelUnavailableError: no model given and no Gemini key set (or google-genai missing).
    """
    return resolve_model(model, llm, default=default_model)

"""The model protocol for natural-language edits (``docs/architecture.md#how-to-add-a-model``).

Three shapes of model work, and :func:`as_edit_model` normalises each once:

* a plain callable ``fn(messages) -> str``, where ``messages`` is
  ``[{"role": "system" | "user" | "assistant", "content": str}, ...]``;
* an object with ``complete(messages)`` and/or ``async acomplete(messages)``
  (an ``async def`` function works as well);
* either of these advertising **structured output**: an attribute
  ``supports_json_schema = True`` means the model accepts a keyword
  ``json_schema=`` (a JSON Schema dict) and honours it; it may then return the
  reply text or the already-parsed object (a dict or list).

A reply may also be an object with a ``content`` or ``text`` string (a LangChain
``AIMessage``, a LlamaIndex response); it is reduced to that string.

**Streaming** (optional, for chat front ends): an object with
``stream_text(messages)`` yielding the reply's text in pieces (``str``, or a
:class:`ModelReply` whose ``finish_reason`` the last piece may carry) streams;
:meth:`EditModel.stream_text` is the one way to read it, with the same error
wrapping and finish-reason checks as ``complete``.  The adapters' wrappers stream
a LangChain chat model (``stream(messages)``, each chunk's text) and a LlamaIndex
LLM (``stream_chat``, each response's delta).  Nothing else streams: a framework
model's own ``stream`` yields its framework's objects, never text.

**Finish reasons.**  A reply may say why the model stopped: a :class:`ModelReply`
(``content`` plus ``finish_reason``), a LangChain message's
``response_metadata["finish_reason"]`` (or ``stop_reason`` / ``done_reason``),
a raw provider response's ``choices[0].finish_reason`` or
``candidates[0].finish_reason``.  A reason that says the output limit was hit
(``length``, ``max_tokens``, Gemini's ``MAX_TOKENS``) raises
:class:`~context_gatekeeper.errors.TruncatedReplyError` carrying the partial reply:
a cut-off edit is never applied.  A reason that says the provider stopped the
answer for its content policy (``content_filter``, ``SAFETY``, ``refusal``) raises
:class:`FilteredReplyError`, and the edit stops.  A plain ``fn(messages) -> str``
carries no reason and stays valid.

Failures never escape raw: a model that raises a network error, a timeout, a
server failure or a rejected key (see :func:`is_unavailable_error`) becomes
:class:`~context_gatekeeper.errors.ModelUnavailableError`, anything else
:class:`~context_gatekeeper.errors.EditError`, with the cause chained.  Errors of
this library raised by the model (an adapter's missing-key error) and
``AssertionError`` (a failing check inside a test's scripted reply) pass through.

>>> model = as_edit_model(lambda messages: messages[-1]["content"].upper())
>>> model.complete([{"role": "user", "content": "hi"}])
'HI'
>>> model.name
'<lambda>'
"""

from __future__ import annotations

import asyncio
import copy
import functools
import importlib.metadata
import inspect
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from typing import Any, Union

from ..errors import EditError, GatekeeperError, InvalidTypeError, MissingExtraError, ModelUnavailableError
from .failures import is_unavailable_error
from .finish_reasons import FilteredReplyError, ModelReply, finish_reason_of, is_truncation, refuse_truncated

__all__ = [
    "ChatMessages",
    "TextStream",
    "Reply",
    "ModelReply",
    "FilteredReplyError",
    "EditModel",
    "as_edit_model",
    "resolve_model",
    "MODEL_WRAPPERS_GROUP",
    "model_name",
    "is_unavailable_error",
    "pick_model",
    "finish_reason_of",
    "is_truncation",
    "refuse_truncated",
]

ChatMessages = list[dict[str, str]]
"""What a model is sent: ``[{"role": ..., "content": ...}, ...]``."""

Reply = Union[str, dict, list]
"""What a model returns: text, or a parsed object when it was asked for a JSON schema."""

TextStream = Callable[[ChatMessages], Iterable[Union[str, ModelReply]]]
"""A model's streaming call: the reply's text in pieces (a :class:`ModelReply` carries a finish reason)."""

def pick_model(model: Any = None, llm: Any = None) -> Any:
    """``model=`` or its alias ``llm=``; ``None`` when neither is given (the helper of
    :func:`resolve_model`, which callers should prefer).

    >>> pick_model(llm="m")
    'm'

    Raises:
        InvalidTypeError: (a ``TypeError``) both are given and they are different objects.
    """
    if model is not None and llm is not None and model is not llm:
        raise InvalidTypeError(
            f"pass model= or llm= (an alias of model=), not both: got model={model_name(model)!r} "
            f"and llm={model_name(llm)!r}"
        )
    return model if model is not None else llm


def model_name(model: Any) -> str:
    """A readable name for ``model``: its ``name``, ``model``, ``model_name`` or ``__name__``.

    >>> model_name(len)
    'len'
    """
    for attribute in ("name", "model", "model_name", "__name__"):
        value = getattr(model, attribute, None)
        if isinstance(value, str) and value:
            return value
    return type(model).__name__


def _wrap_failure(name: str, exc: Exception) -> GatekeeperError:
    """The library error for a model call that raised ``exc``."""
    what = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    if is_unavailable_error(exc):
        return ModelUnavailableError(
            f"model {name!r} could not be used ({what}); nothing was changed. "
            "Check the network connection, the API key and the model's timeout, then try again."
        )
    return EditError(
        f"model {name!r} failed ({what}); nothing was changed. "
        "Check how the model is configured (and that it accepts a list of role/content dicts), "
        "then try again."
    )


def _checked_text(reply: Any, name: str) -> Reply:
    """:func:`_text_of`, refusing a reply whose finish reason says it was cut off."""
    text = _text_of(reply.content if isinstance(reply, ModelReply) else reply, name)
    return refuse_truncated(text, finish_reason_of(reply), name)


def _text_of(reply: Any, name: str) -> Reply:
    """Reduce what a model returned to a str, or keep a parsed dict/list."""
    if isinstance(reply, (str, dict, list)):
        return reply
    for attribute in ("content", "text"):
        value = getattr(reply, attribute, None)
        if isinstance(value, str):
            return value
        if attribute == "content" and isinstance(value, list):  # content blocks
            texts = [b.get("text", "") if isinstance(b, dict) else b for b in value]
            if all(isinstance(t, str) for t in texts):
                return "".join(texts)
    inner = getattr(reply, "message", None)  # LlamaIndex ChatResponse.message.content
    if inner is not None and isinstance(getattr(inner, "content", None), str):
        return inner.content
    raise EditError(
        f"model {name!r} returned {type(reply).__name__}, not text; a model must return the reply as a str "
        "(or a parsed dict/list when it was asked for a JSON schema). Nothing was changed."
    )


class EditModel:
    """A model normalised for edits: one ``complete`` and one ``acomplete`` that behave alike.

    Build it with :func:`as_edit_model`.  ``acomplete`` never blocks the event loop:
    a model without an async method runs in a worker thread.

    Attributes:
        name: the model's name, recorded in each edit revision.
        supports_json_schema: whether ``json_schema=`` is honoured (structured output).
        wrapped: the object it was built from.
        streams: whether :meth:`stream_text` works (the model was given a ``stream=`` call).
    """

    __slots__ = ("name", "supports_json_schema", "wrapped", "_sync", "_async", "_stream")

    def __init__(
        self,
        name: str,
        *,
        sync: Callable[..., Any] | None,
        async_: Callable[..., Awaitable[Any]] | None,
        supports_json_schema: bool = False,
        wrapped: Any = None,
        stream: TextStream | None = None,
    ) -> None:
        if sync is None and async_ is None:
            raise InvalidTypeError(
                f"EditModel {name!r} needs a sync or an async call: pass sync=, async_= or both "
                "(as_edit_model builds one from any model)"
            )
        self.name = name
        self.supports_json_schema = supports_json_schema
        self.wrapped = wrapped
        self._sync = sync
        self._async = async_
        self._stream = stream

    @property
    def streams(self) -> bool:
        """Whether :meth:`stream_text` streams this model's reply (else call :meth:`complete`)."""
        return self._stream is not None

    def __repr__(self) -> str:
        return f"EditModel(name={self.name!r}, supports_json_schema={self.supports_json_schema})"

    def _args(self, messages: ChatMessages, json_schema: Mapping[str, Any] | None) -> tuple[tuple, dict]:
        """The call's arguments: a copy of the messages, and the schema if the model takes one."""
        sent = [dict(m) for m in messages]  # the model may mutate its input; ours stays intact
        if json_schema is not None and self.supports_json_schema:
            return (sent,), {"json_schema": copy.deepcopy(dict(json_schema))}
        return (sent,), {}

    def complete(self, messages: ChatMessages, *, json_schema: Mapping[str, Any] | None = None) -> Reply:
        """Call the model and return its reply (text, or a parsed object for structured output).

        Raises:
            ModelUnavailableError: a network failure or timeout.
            TruncatedReplyError: the reply's finish reason says it was cut off (``.partial`` holds it).
            EditError: any other failure, or a reply that is not text.
            InvalidTypeError: (a ``TypeError``) the model is async-only and an event loop is
                running in this thread.
        """
        args, kwargs = self._args(messages, json_schema)
        if self._sync is None:
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                return asyncio.run(self.acomplete(messages, json_schema=json_schema))
            raise InvalidTypeError(
                f"model {self.name!r} only offers an async call; from async code use the async API "
                "(acompute_edit, Transcript.aedit)"
            )
        try:
            result = self._sync(*args, **kwargs)
            if inspect.isawaitable(result):  # a sync-looking callable that returned a coroutine
                result = asyncio.run(_await(result))
        except (GatekeeperError, AssertionError):
            raise
        except Exception as exc:
            raise _wrap_failure(self.name, exc) from exc
        return _checked_text(result, self.name)

    async def acomplete(self, messages: ChatMessages, *, json_schema: Mapping[str, Any] | None = None) -> Reply:
        """Async twin of :meth:`complete`; never blocks the event loop."""
        args, kwargs = self._args(messages, json_schema)
        try:
            if self._async is not None:
                result = await self._async(*args, **kwargs)
            else:
                assert self._sync is not None
                result = await asyncio.to_thread(self._sync, *args, **kwargs)
                if inspect.isawaitable(result):
                    result = await result
        except (GatekeeperError, AssertionError):
            raise
        except Exception as exc:
            raise _wrap_failure(self.name, exc) from exc
        return _checked_text(result, self.name)

    def stream_text(self, messages: ChatMessages) -> Iterator[str]:
        """The reply to ``messages`` as text pieces, as they arrive (joined: the whole reply).

        Failures are reported as :meth:`complete` reports them, mid-stream too; a finish
        reason that says the reply was cut off or withheld is raised after the last piece
        (``.partial``: the text streamed), so a caller that shows pieces as they come
        decides, as for ``complete``, whether that text stands as the answer.

        Raises:
            InvalidTypeError: (a ``TypeError``) the model does not stream (see :attr:`streams`).
            ModelUnavailableError: a network failure or timeout.
            TruncatedReplyError: the last finish reason says the reply was cut off.
            FilteredReplyError: it says the provider stopped the reply for its content policy.
            EditError: any other failure, or a piece that is not text.
        """
        if self._stream is None:
            raise InvalidTypeError(
                f"model {self.name!r} does not stream: check its .streams, and call complete(messages) instead"
            )
        return self._pieces(self._stream, [dict(m) for m in messages])

    def _pieces(self, stream: TextStream, sent: ChatMessages) -> Iterator[str]:
        """:meth:`stream_text`'s pieces (a generator: the model is called at the first ``next``)."""
        parts: list[str] = []
        reason: str | None = None
        try:
            for piece in stream(sent):
                text: object = piece
                if isinstance(piece, ModelReply):
                    reason = piece.finish_reason or reason
                    text = piece.content
                if not isinstance(text, str):
                    raise EditError(
                        f"model {self.name!r} streamed {type(text).__name__}, not text; a streaming call must "
                        "yield the reply's text in str pieces. Nothing was changed."
                    )
                if text:
                    parts.append(text)
                    yield text
        except (GatekeeperError, AssertionError):
            raise
        except Exception as exc:
            raise _wrap_failure(self.name, exc) from exc
        refuse_truncated("".join(parts), reason, self.name)


async def _await(awaitable: Awaitable[Any]) -> Any:
    """Await anything awaitable (``asyncio.run`` wants a coroutine)."""
    return await awaitable


def as_edit_model(model: Any) -> EditModel:
    """Normalise anything the model protocol accepts into an :class:`EditModel` (once).

    Accepted: a callable ``fn(messages) -> str`` (sync or ``async def``), an object
    with ``complete(messages)`` and/or ``async acomplete(messages)``, or a framework model
    an installed adapter declares a wrapper for (a LangChain chat model, also behind
    ``.bind()`` / ``.with_retry()`` / ``.with_fallbacks()`` / ``.with_config()``, a LlamaIndex
    LLM: see :data:`MODEL_WRAPPERS_GROUP`), wrapped by it.  A truthy ``supports_json_schema``
    attribute turns on structured output, a ``stream_text(messages)`` method streaming
    (:meth:`EditModel.stream_text`).  An :class:`EditModel` is returned as is.

    Raises:
        InvalidTypeError: (a ``TypeError``) ``model`` is None, a class, or offers no way to be called.

    >>> as_edit_model(None)
    Traceback (most recent call last):
    ...
    context_gatekeeper.errors.InvalidTypeError: an edit needs a model: pass a callable fn(messages) -> str, ...
    """
    if isinstance(model, EditModel):
        return model
    usage = "pass a callable fn(messages) -> str, or an object with complete(messages) or acomplete(messages)"
    if model is None:
        raise InvalidTypeError(f"an edit needs a model: {usage}")
    if isinstance(model, type):
        raise InvalidTypeError(f"model must be an instance or a function, not the class {model.__name__}; {usage}")
    wrapper = _framework_wrapper(model)  # before complete(): a LlamaIndex LLM's takes a prompt string
    if wrapper is not None:
        return wrapper(model)
    sync = getattr(model, "complete", None)
    async_ = getattr(model, "acomplete", None)
    sync = sync if callable(sync) else None
    async_ = async_ if callable(async_) else None
    if sync is not None and inspect.iscoroutinefunction(sync):
        async_, sync = async_ or sync, None
    if async_ is not None and not inspect.iscoroutinefunction(async_):
        async_ = None  # not really async: the thread fallback is safer
    if sync is None and callable(model):
        if inspect.iscoroutinefunction(model) or inspect.iscoroutinefunction(getattr(model, "__call__", None)):
            async_ = async_ or model
        else:
            sync = model
    if sync is None and async_ is None:
        hint = ""
        if hasattr(model, "invoke") or hasattr(model, "chat"):
            hint = (
                " (wrap it with its adapter: a LangChain Runnable with "
                "langchain_gatekeeper.LangChainEditModel(it), a LlamaIndex LLM with "
                "llamaindex_gatekeeper.LlamaIndexEditModel(it))"
            )
        raise InvalidTypeError(f"{type(model).__name__} cannot be used as a model{hint}; {usage}")
    return EditModel(
        model_name(model),
        sync=sync,
        async_=async_,
        supports_json_schema=bool(getattr(model, "supports_json_schema", False)),
        wrapped=model,
        stream=_text_stream_of(model),
    )


def _text_stream_of(model: Any) -> TextStream | None:
    """``model.stream_text`` when it offers one (a plain function or object never streams otherwise)."""
    stream = None if inspect.isroutine(model) else getattr(model, "stream_text", None)
    return stream if callable(stream) else None


MODEL_WRAPPERS_GROUP = "context_gatekeeper.model_wrappers"
"""The entry-point group where adapters declare their model wrappers.

An entry point's name says which framework model it wraps, as ``package:ClassName``
(``langchain_core:BaseChatModel``: a class named ``BaseChatModel`` defined in a module of
``langchain_core``); its value is the :class:`EditModel` subclass that wraps it
(``langchain_gatekeeper.models:LangChainEditModel``).  The core never imports an adapter
by name: it reads these declarations, and loads a wrapper only for a model whose class
(or a base class) matches, so resolving a plain callable imports no framework.
"""


@functools.cache
def _declared_wrappers() -> tuple[tuple[str, str, importlib.metadata.EntryPoint], ...]:
    """(module prefix, class name, entry point) for every installed wrapper declaration."""
    declared = []
    for entry in importlib.metadata.entry_points(group=MODEL_WRAPPERS_GROUP):
        package, _, class_name = entry.name.partition(":")
        if package and class_name:
            declared.append((package + ".", class_name, entry))
    return tuple(declared)


_WRAPPING_ATTRIBUTES = ("bound", "runnable")
"""Where a framework's wrapper keeps the model it wraps: LangChain's ``.bind()`` /
``.with_retry()`` / ``.with_config()`` (``bound``) and ``.with_fallbacks()`` (``runnable``)."""


def _class_names(model: Any) -> list[tuple[str, str]]:
    """(module, class name) of each class of ``model`` and of the models it wraps (a few deep)."""
    names: list[tuple[str, str]] = []
    for _ in range(8):
        names += [(getattr(cls, "__module__", "") or "", cls.__name__) for cls in type(model).__mro__]
        if not callable(getattr(model, "invoke", None)):  # only a runnable wraps one this way
            break
        inner = next((getattr(model, a) for a in _WRAPPING_ATTRIBUTES if getattr(model, a, None) is not None), None)
        if inner is None or isinstance(inner, type) or inspect.isroutine(inner):
            break
        model = inner
    return names


def _framework_wrapper(model: Any) -> Callable[[Any], EditModel] | None:
    """The adapter class that wraps ``model``, when an installed adapter declares one for
    its class, or for the class of the model it wraps (a LangChain chat model behind
    ``.with_retry()``; see :data:`MODEL_WRAPPERS_GROUP`); the adapter is imported only then."""
    if isinstance(model, (type, EditModel)) or inspect.isroutine(model):
        return None
    mro = _class_names(model)
    for prefix, class_name, entry in _declared_wrappers():
        if any(name == class_name and module.startswith(prefix) for module, name in mro):
            try:
                wrapper = entry.load()
            except ImportError as exc:
                raise InvalidTypeError(
                    f"{type(model).__name__} needs the adapter {entry.value.split(':')[0]}, which did not "
                    f"import ({exc}); install the extra for its framework: "
                    f"{MissingExtraError.install_command('langchain')} or {MissingExtraError.install_command('llamaindex')}"
                ) from exc
            if not (isinstance(wrapper, type) and issubclass(wrapper, EditModel)):
                raise InvalidTypeError(
                    f"the model wrapper {entry.value!r} declared for {entry.name} is not an EditModel subclass"
                )
            return wrapper
    return None


def resolve_model(
    model: Any = None, llm: Any = None, *, default: Callable[[], Any] | None = None
) -> EditModel:
    """The editing model for ``model=`` or its alias ``llm=``, as an :class:`EditModel` (once).

    * a LangChain ``BaseChatModel`` becomes ``langchain_gatekeeper.LangChainEditModel``,
      a LlamaIndex ``BaseLLM`` becomes ``llamaindex_gatekeeper.LlamaIndexEditModel``
      (both :class:`EditModel` subclasses), as the adapters declare in the
      :data:`MODEL_WRAPPERS_GROUP` entry points; a framework model is recognised by its
      class names, so resolving a plain callable imports neither framework;
    * an :class:`EditModel` is returned as is; anything else goes through
      :func:`as_edit_model`;
    * with neither given, ``default()`` (a zero-argument factory, called only now)
      supplies the model, which is resolved the same way.

    >>> resolve_model(lambda messages: "{}").name
    '<lambda>'

    Raises:
        InvalidTypeError: (a ``TypeError``) ``model=`` and ``llm=`` both given and different;
            a model that cannot be called.
        ModelUnavailableError: neither given and no ``default`` (or ``default()`` raised it).
    """
    chosen = pick_model(model, llm)
    if chosen is None:
        if default is None:
            raise ModelUnavailableError(
                "no editing model: pass model= (a callable fn(messages) -> str, an object with "
                "complete(messages), a LangChain chat model or a LlamaIndex LLM)"
            )
        chosen = default()
        if chosen is None:
            raise InvalidTypeError(
                "the default model factory returned None; it must return a model (a callable "
                "fn(messages) -> str, or an object with complete(messages))"
            )
    return as_edit_model(chosen)

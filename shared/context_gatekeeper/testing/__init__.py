"""Test helpers: a scripted fake model that records every call (after simonw/llm's).

Use it to test code that edits transcripts without a network or an API key:

>>> model = ScriptedModel(['{"operations": []}'])
>>> model([{"role": "user", "content": "hi"}])
'{"operations": []}'
>>> model.calls[0][0]["content"]
'hi'
>>> model.remaining
0

A reply may be:

* a ``str``, returned as is;
* a ``dict`` or ``list``: returned as the parsed object when the model is
  ``structured`` and was asked for a JSON schema, otherwise as JSON text;
* a :class:`~context_gatekeeper.editing.models.ModelReply`, returned as is (a reply with
  its finish reason: ``ModelReply(text, "length")`` simulates an output limit);
* an exception instance or class, raised (``TimeoutError()`` simulates a timeout);
* a callable ``reply(messages)`` returning any of the above, to answer from what
  the model was sent (a copy: changing it changes nothing recorded in ``calls``).

``ScriptedModel(reply)`` with one reply that is not a list is a script of one.

Running out of replies raises ``AssertionError`` naming the call, which the edit
functions let through so a test fails where the script ran short.

The store conformance suite, for a store of your own, is :mod:`context_gatekeeper.testing.stores`
(it needs pytest and hypothesis, the ``testing`` extra: the package is not on PyPI yet, so install
it from a clone of the repository with ``pip install -e ".[testing]"``; this module imports neither).
"""

from __future__ import annotations

import copy
import json
import threading
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

from ..editing.models import ModelReply
from ..errors import InvalidTypeError

__all__ = ["RecordedCall", "ScriptedModel"]


class RecordedCall(list):
    """One call to a :class:`ScriptedModel`: the list of messages it was sent (a deep copy).

    Attributes:
        json_schema: the JSON schema it was asked to honour, or None.
    """

    def __init__(self, messages: Iterable[Mapping[str, Any]], json_schema: Mapping[str, Any] | None = None):
        super().__init__(copy.deepcopy([dict(m) for m in messages]))
        self.json_schema = copy.deepcopy(dict(json_schema)) if json_schema is not None else None

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The messages as a plain list."""
        return list(self)

    @property
    def text(self) -> str:
        """Every message's content joined by blank lines (handy for ``in`` checks)."""
        return "\n\n".join(str(m.get("content", "")) for m in self)


def _check_reply(reply: Any) -> Any:
    """Fail at enqueue time, not mid-test, on a reply the model could never give."""
    ok = isinstance(reply, (str, dict, list, ModelReply, BaseException)) or callable(reply)
    if not ok:
        raise InvalidTypeError(
            "a scripted reply must be a str, a dict or list, a ModelReply, an exception, or a callable(messages); "
            f"got {type(reply).__name__}"
        )
    return reply


def _is_one_reply(replies: Any) -> bool:
    """Whether ``replies`` is a single reply rather than an iterable of them (a list is
    the script itself; a ``ModelReply``, though a tuple, is one reply; anything else not
    iterable is taken as one, so that a bad one is refused by :func:`_check_reply`)."""
    if isinstance(replies, (str, dict, ModelReply, BaseException)):
        return True
    return not isinstance(replies, Iterable)  # an exception class, a callable, or what _check_reply refuses


class ScriptedModel:
    """A fake model that returns scripted replies in order and records every call.

    Args:
        replies: the first replies, as a list (more can be added with :meth:`enqueue`);
            a single reply (a str, dict, ModelReply, exception or callable) is a
            script of one.
        name: the model name recorded in revisions.
        structured: advertise structured output (``supports_json_schema``), so
            dict/list replies are returned as parsed objects.

    Attributes:
        calls: one :class:`RecordedCall` per call, in order (each a list of the
            messages sent, with ``.json_schema``).

    It works as a plain callable, through ``complete`` and through ``acomplete``,
    and is safe to share between threads.
    """

    def __init__(self, replies: Iterable[Any] | None = None, *, name: str = "scripted", structured: bool = False):
        if replies is not None and _is_one_reply(replies):
            replies = [replies]
        self.name = name
        self.structured = structured
        self.calls: list[RecordedCall] = []
        self._replies: deque[Any] = deque(_check_reply(r) for r in (replies or ()))
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"ScriptedModel(name={self.name!r}, calls={len(self.calls)}, remaining={self.remaining})"

    @property
    def supports_json_schema(self) -> bool:
        """True when constructed with ``structured=True``."""
        return self.structured

    @property
    def remaining(self) -> int:
        """How many scripted replies are left."""
        return len(self._replies)

    def enqueue(self, *replies: Any) -> "ScriptedModel":
        """Add replies to the end of the script; returns the model, for chaining."""
        checked = [_check_reply(r) for r in replies]
        with self._lock:
            self._replies.extend(checked)
        return self

    def complete(self, messages: Iterable[Mapping[str, Any]], json_schema: Mapping[str, Any] | None = None) -> Any:
        """Record the call and return (or raise) the next scripted reply."""
        call = RecordedCall(messages, json_schema)
        with self._lock:
            self.calls.append(call)
            if not self._replies:
                raise AssertionError(
                    f"ScriptedModel {self.name!r} has no reply left for call #{len(self.calls)}; "
                    "enqueue() one more reply per expected model call"
                )
            reply = self._replies.popleft()
        return self._resolve(reply, call)

    async def acomplete(
        self, messages: Iterable[Mapping[str, Any]], json_schema: Mapping[str, Any] | None = None
    ) -> Any:
        """Async twin of :meth:`complete`."""
        return self.complete(messages, json_schema)

    def __call__(self, messages: Iterable[Mapping[str, Any]]) -> Any:
        """The plain-callable form of the model protocol."""
        return self.complete(messages)

    def _resolve(self, reply: Any, call: RecordedCall) -> Any:
        """Turn a scripted reply into what the call returns (or raises)."""
        if isinstance(reply, type) and issubclass(reply, BaseException):
            raise reply()
        if isinstance(reply, BaseException):
            raise reply
        if callable(reply):
            reply = _check_reply(reply(copy.deepcopy(call.messages)))  # what it changes is not what was recorded
            if callable(reply) and not isinstance(reply, (type, BaseException)):
                raise InvalidTypeError("a scripted reply callable must return a reply, not another callable")
            return self._resolve(reply, call)
        if isinstance(reply, (dict, list)):
            if self.structured and call.json_schema is not None:
                return copy.deepcopy(reply)
            return json.dumps(reply, ensure_ascii=False)
        return reply

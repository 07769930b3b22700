"""Which failures of a model call mean "the model cannot be used now" (part of the model protocol).

:func:`is_unavailable_error` decides whether an error a model raised becomes
:class:`~context_gatekeeper.errors.ModelUnavailableError` (the network, a timeout,
overload, a server failure, a rejected key) or an
:class:`~context_gatekeeper.errors.EditError` (anything else: a bad request, a bug).
Every model path uses it (:mod:`.models`, :mod:`.gemini` and both adapters' model
wrappers), so the same provider failure reads the same whichever wraps the model.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Iterator

__all__ = ["is_unavailable_error", "http_status"]

_UNAVAILABLE_TYPES: tuple[type[BaseException], ...] = (
    OSError,  # includes TimeoutError and ConnectionError
    asyncio.TimeoutError,
    concurrent.futures.TimeoutError,
)
# Client libraries define their own network errors (httpx.ReadTimeout, openai.APIConnectionError,
# google.api_core.exceptions.ServiceUnavailable ...); a class name with one of these marks one.
_UNAVAILABLE_NAME_HINTS = ("timeout", "connect", "network", "unavailable", "ratelimit", "resourceexhausted")
# langchain-core's provider-neutral errors (langchain_core.exceptions, 1.x) for a rejected key,
# missing permission and a server failure (HTTP 401, 403, 5xx), by exact class name in the MRO.
_UNAVAILABLE_CLASSES = frozenset({"modelauthenticationerror", "modelpermissiondeniederror", "modelapierror"})
# HTTP statuses that say the model cannot be used now, whatever was asked: a rejected key (401),
# no permission (403), a timeout (408), rate limit (429); 5xx too.  400 only for a bad key.
_UNAVAILABLE_STATUSES = frozenset({401, 403, 408, 429})
_STATUS_ATTRIBUTES = ("status_code", "code", "status")
_MAX_CAUSES = 8


def http_status(exc: BaseException) -> int | None:
    """The HTTP status an error carries (``status_code``, ``code``, ``status`` or its
    ``response.status_code``), if it is an int."""
    for source in (exc, getattr(exc, "response", None)):
        for attribute in _STATUS_ATTRIBUTES:
            value = getattr(source, attribute, None)
            if isinstance(value, int) and not isinstance(value, bool) and 100 <= value <= 599:
                return value
    return None


def _unavailable_itself(exc: BaseException) -> bool:
    """Whether ``exc`` alone (not its causes) says the model cannot be used now."""
    if isinstance(exc, _UNAVAILABLE_TYPES):
        return True
    names = [cls.__name__.lower() for cls in type(exc).__mro__]
    if any(hint in name for name in names for hint in _UNAVAILABLE_NAME_HINTS) or _UNAVAILABLE_CLASSES & set(names):
        return True
    status = http_status(exc)
    if status is None:
        return False
    return status in _UNAVAILABLE_STATUSES or status >= 500 or (status == 400 and "api key" in str(exc).lower())


def _causes(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and the errors it was raised from (``__cause__``, else ``__context__``), a few deep."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen and len(seen) < _MAX_CAUSES:
        seen.add(id(current))
        yield current
        current = current.__cause__ or (None if current.__suppress_context__ else current.__context__)


def is_unavailable_error(exc: BaseException) -> bool:
    """Whether ``exc`` says the model cannot be used now: the network, a timeout, overload or
    a server failure (5xx), a rejected or missing key (401, 403, or 400 saying "API key").

    It reads the error and the errors it was raised from (a framework's error wrapping the
    provider's): class names (``ReadTimeout``, ``APIConnectionError``, langchain-core's
    ``ModelAuthenticationError`` / ``ModelPermissionDeniedError`` / ``ModelAPIError``) and
    the HTTP status an error carries.

    >>> is_unavailable_error(TimeoutError()), is_unavailable_error(ValueError("bad"))
    (True, False)
    """
    return any(_unavailable_itself(e) for e in _causes(exc))

"""Input checks shared by the public API: clear, named errors for wrong input.

:func:`require_budget` is the library's one budget rule: every token budget (a
gatekeeper's, a per-call override, an adapter's, the node postprocessor's, a
covering selection's) is checked by it and nowhere else."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import Any

from .errors import BudgetError, InvalidInputError, InvalidTypeError

__all__ = ["require_text", "require_budget", "require_timeout", "require_items"]


def require_text(value: Any, what: str, *, allow_empty: bool = False) -> str:
    """Return ``value`` if it is a string (non-blank unless ``allow_empty``)."""
    if not isinstance(value, str):
        raise InvalidTypeError(f"{what} must be a str, got {type(value).__name__}; pass the text as a str")
    if not allow_empty and not value.strip():
        raise InvalidInputError(f"{what} is empty or whitespace; pass the text of the message")
    return value


def require_budget(value: Any, what: str = "token_budget") -> int:
    """Return ``value`` if it is a token budget: an ``int >= 0`` (``bool`` refused).

    ``0`` is a budget (nothing but pinned content fits: an adapter whose current turn
    fills its limit passes it); a negative number, a float, a string or ``True`` is
    refused with :class:`~context_gatekeeper.errors.BudgetError` (a ``ValueError``).
    Where ``None`` is accepted (the default budget, or no limit) the caller checks for
    it before calling this.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise BudgetError(
            f"{what} must be an int >= 0 (a number of tokens), got {value!r}; pass the number of tokens "
            "the context may use"
        )
    return value


def require_timeout(value: Any, what: str = "embed_timeout") -> float | None:
    """Return ``value`` if it is a number of seconds ``> 0`` that a wait can take (finite,
    at most ``threading.TIMEOUT_MAX``, about 292 years) or ``None`` (wait); ``bool``, NaN
    and infinity are refused with :class:`~context_gatekeeper.errors.InvalidInputError`."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                              or not 0 < value <= threading.TIMEOUT_MAX):
        raise InvalidInputError(
            f"{what} must be a finite number of seconds > 0 (at most {threading.TIMEOUT_MAX:.0f}) or None, "
            f"got {value!r}; pass e.g. 2.0, or None to wait as long as the embedder takes"
        )
    return value


def require_items(value: Any, what: str, kind: type | tuple[type, ...], hint: str) -> list[Any]:
    """``value`` as a list, if it is an iterable (not a string, a mapping or one ``kind``
    itself) whose items are all ``kind``; else :class:`~context_gatekeeper.errors.InvalidTypeError`
    naming ``what`` and saying how to pass it (``hint``).  Checked before anything is
    changed, so a refused call changes nothing."""
    single = isinstance(value, kind)
    if single or value is None or isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        given = type(value).__name__
        raise InvalidTypeError(f"{what} must be a list, got {'one ' if single else ''}{given}; {hint}")
    items = list(value)
    for position, item in enumerate(items):
        if not isinstance(item, kind):
            raise InvalidTypeError(
                f"{what}[{position}] is a {type(item).__name__}, not a {_names(kind)}; {hint}"
            )
    return items


def _names(kind: type | tuple[type, ...]) -> str:
    return " or ".join(k.__name__ for k in kind) if isinstance(kind, tuple) else kind.__name__

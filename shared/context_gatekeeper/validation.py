"""Input checks shared by the public API: clear, named errors for wrong input."""

from __future__ import annotations

from typing import Any

from .errors import BudgetError, InvalidInputError, InvalidTypeError

__all__ = ["require_text", "require_budget"]


def require_text(value: Any, what: str, *, allow_empty: bool = False) -> str:
    """Return ``value`` if it is a string (non-blank unless ``allow_empty``)."""
    if not isinstance(value, str):
        raise InvalidTypeError(f"{what} must be a str, got {type(value).__name__}; pass the text as a str")
    if not allow_empty and not value.strip():
        raise InvalidInputError(f"{what} is empty or whitespace; pass the text of the message")
    return value


def require_budget(value: Any) -> int:
    """Return ``value`` if it is a positive int token budget."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise BudgetError(f"token_budget must be a positive int, got {value!r}")
    if value <= 0:
        raise BudgetError(f"token_budget must be > 0, got {value}; it is the number of tokens context may use")
    return value

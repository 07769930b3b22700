"""The settings of a natural-language edit, as one checked, immutable record.

:class:`EditOptions` is built (and validated) once, wherever an edit starts
(``Transcript(...)``, ``Transcript.edit(...)``, an adapter's ``edit(...)``), and
travels unchanged to :func:`~context_gatekeeper.editing.compute.compute_edit`.  A bad value
raises the same :class:`~context_gatekeeper.errors.InvalidInputError` wherever the
record is built.  :data:`Strategy` is the one definition of the strategy names.

>>> EditOptions(strategy="rewrite").strategy
'rewrite'
>>> EditOptions(strategy="x")
Traceback (most recent call last):
...
context_gatekeeper.errors.InvalidInputError: unknown edit strategy 'x'; use one of ['patch', 'rewrite']
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal, Optional, cast

from ..errors import InvalidInputError, InvalidTypeError
from ..tokens import TokenCounter, TokenCounterLike, resolve_token_counter

__all__ = ["Strategy", "STRATEGIES", "DEFAULT_STRATEGY", "DEFAULT_MAX_DELETION_SHARE", "EditOptions"]

Strategy = Literal["patch", "rewrite"]
"""How the model answers: ``"patch"`` (operations on message ids) or ``"rewrite"``
(the whole revised conversation, diffed into changes)."""

STRATEGIES: tuple[str, ...] = ("patch", "rewrite")


class _DefaultStrategy(str):
    """EditOptions' default ``strategy``: the ``str`` ``"patch"`` like any other (equal to, and
    hashed like, ``"patch"``), whose type tells a strategy left at the default from one the
    caller passed (:attr:`EditOptions.strategy_given`), even ``"patch"`` itself."""

    __slots__ = ()

    def __repr__(self) -> str:
        return str.__repr__(self)


DEFAULT_STRATEGY: Strategy = cast(Strategy, _DefaultStrategy("patch"))

DEFAULT_MAX_DELETION_SHARE = 0.6
"""The share of editable tokens an edit may destroy without ``allow_large_deletion=True``.

Above one half: a correction of a short conversation ("Iceland, not Ireland" in
a question and its two answers) legitimately replaces about half of its words,
while a wipe or junk in place of everything destroys all of them."""


@dataclass(frozen=True)
class EditOptions:
    """How an edit is computed and guarded.

    Attributes:
        strategy: ``"patch"`` (default) or ``"rewrite"`` (:attr:`strategy_given` tells
            whether it was passed).
        max_deletion_share: the largest share (0..1) of the editable tokens an edit may
            destroy (remove, or replace with other words) without ``allow_large_deletion``.
        allow_large_deletion: accept an edit above ``max_deletion_share``.
        token_counter: counts tokens for the deletion guard: ``None`` (tiktoken
            ``cl100k_base``, offline), an encoding name, a callable ``str -> int`` or an
            object with ``encode``.

    Raises:
        InvalidInputError: an unknown strategy, a share outside 0..1, a non-bool
            ``allow_large_deletion``, an unknown encoding name.
        TypeError: a token counter that cannot count.
    """

    strategy: Strategy = DEFAULT_STRATEGY
    max_deletion_share: float = DEFAULT_MAX_DELETION_SHARE
    allow_large_deletion: bool = False
    token_counter: TokenCounterLike = None
    _count: Optional[TokenCounter] = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise InvalidInputError(f"unknown edit strategy {self.strategy!r}; use one of {list(STRATEGIES)}")
        share = self.max_deletion_share
        if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 <= share <= 1:
            raise InvalidInputError(f"max_deletion_share must be a number from 0 to 1, got {share!r}")
        object.__setattr__(self, "max_deletion_share", float(share))
        if not isinstance(self.allow_large_deletion, bool):
            raise InvalidInputError(
                f"allow_large_deletion must be True or False, got {self.allow_large_deletion!r}"
            )
        if self.token_counter is not None:  # None: the default counter, loaded when first needed
            try:
                object.__setattr__(self, "_count", resolve_token_counter(self.token_counter))
            except ValueError as exc:
                raise InvalidInputError(str(exc)) from exc

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle and deep-copy the fields only (the resolved counter is rebuilt)."""
        return (type(self), (self.strategy, self.max_deletion_share, self.allow_large_deletion, self.token_counter))

    @property
    def strategy_given(self) -> bool:
        """Whether ``strategy`` was passed (to the constructor, :meth:`of` or :meth:`with_`)
        rather than left at its default: a transcript edited with a per-call record keeps its
        own strategy unless the record names one.

        >>> EditOptions().strategy_given, EditOptions(strategy="patch").strategy_given
        (False, True)
        """
        return type(self.strategy) is not _DefaultStrategy

    @property
    def count(self) -> TokenCounter:
        """The token counter as a callable ``str -> int``."""
        if self._count is None:
            object.__setattr__(self, "_count", resolve_token_counter(None))
        assert self._count is not None
        return self._count

    def with_(self, **changes: Any) -> "EditOptions":
        """A copy with ``changes`` applied, checked like a new record; ``None`` values are ignored.

        >>> EditOptions().with_(strategy="rewrite", allow_large_deletion=None).strategy
        'rewrite'
        """
        known = {f.name for f in fields(self) if f.init}
        unknown = sorted(set(changes) - known)
        if unknown:
            raise InvalidTypeError(f"EditOptions has no field {unknown[0]!r}; use one of {sorted(known)}")
        given = {k: v for k, v in changes.items() if v is not None}
        return replace(self, **given) if given else self

    @classmethod
    def of(cls, options: "EditOptions | None" = None, **changes: Any) -> "EditOptions":
        """``options`` (default: the defaults) with the keywords that are not ``None`` applied.

        Keywords override the matching fields of ``options``: ``EditOptions.of(opts,
        strategy="rewrite")`` is ``opts`` with the rewrite strategy.
        """
        if options is None:
            options = cls()
        elif not isinstance(options, cls):
            raise InvalidTypeError(
                f"options must be an EditOptions, got {type(options).__name__}; build one with "
                "EditOptions(...) or pass its fields as keywords"
            )
        return options.with_(**changes)

"""The settings of topic-gated selection, as one checked, immutable record.

:class:`GateOptions` holds everything a :class:`~context_gatekeeper.ContextGatekeeper`
is configured with apart from the conversation itself (its turns, pins, system prompt
and summary).  It is built and validated once, wherever a gate is configured
(``ContextGatekeeper(...)``, ``GatekeeperMiddleware(...)``, ``topic_gate(...)``,
``gate_messages(...)``), and travels unchanged to every gatekeeper built from it: a
bad value raises the library's own error before anything is built or stored.

>>> GateOptions(token_budget=2000, preset="recall").params.fill_ratio
0.0
>>> GateOptions(token_budget=True)
Traceback (most recent call last):
...
context_gatekeeper.errors.BudgetError: token_budget must be an int >= 0 (a number of tokens), got True; ...
"""

from __future__ import annotations

from dataclasses import InitVar, dataclass, field, fields, replace
from typing import Any, Literal, Optional

import logging

from ..errors import BudgetError, InvalidInputError, InvalidTypeError
from ..tokens import TokenCounter, TokenCounterLike, resolve_token_counter
from ..validation import require_budget, require_timeout
from . import word_prior
from .params import SelectionParams
from .semantic.embedding import Embedder, as_embedder, require_vector_cache
from .semantic.fusion import numpy

__all__ = ["GateOptions", "OnOverflow", "ON_OVERFLOW", "DEFAULT_TOKEN_BUDGET", "require_overhead", "report_overflow"]

OnOverflow = Literal["raise", "keep_pinned"]


def report_overflow(
    on_overflow: str | None, detail: str, advice: str, warned: bool, then: str, log: logging.Logger
) -> bool:
    """Pinned content over the budget (``detail`` says by how much): :class:`BudgetError` with
    ``on_overflow="raise"`` (``advice`` says what to change), else one warning on ``log``
    unless ``warned`` already, saying what is sent (``then``).  Returns the new ``warned``."""
    if on_overflow == "raise":
        raise BudgetError(f"{detail}; {advice}, or pass on_overflow='keep_pinned'")
    if not warned:
        log.warning("%s; %s", detail, then)
    return True
"""What a selection does when pinned content alone exceeds the budget."""

ON_OVERFLOW: tuple[str, ...] = ("raise", "keep_pinned")

class _DefaultBudget(int):
    """GateOptions' default ``token_budget``: an ``int`` like any other (equal to, and hashed
    like, the same number), whose type tells a budget left at the default from one the caller
    passed (:attr:`GateOptions.budget_given`), even one of the same size."""

    __slots__ = ()

    def __repr__(self) -> str:
        return int.__repr__(self)


DEFAULT_TOKEN_BUDGET: int = _DefaultBudget(4000)

_PARAM_NAMES = frozenset(f.name for f in fields(SelectionParams))


def require_overhead(overhead: Any) -> int:
    """``overhead`` if it is a per-message token overhead: an ``int >= 0`` (``bool`` refused),
    else :class:`~context_gatekeeper.errors.InvalidInputError`."""
    if isinstance(overhead, bool) or not isinstance(overhead, int) or overhead < 0:
        raise InvalidInputError(
            f"message_overhead must be an int >= 0, got {overhead!r}; pass the tokens each message "
            "adds beyond its text (0: none)"
        )
    return overhead


@dataclass(frozen=True)
class GateOptions:
    """How a gate selects: budget, token counting, overflow policy, tunables, embedder.

    Immutable, and hashable when its token counter, embedder and vector cache are (the
    defaults are).  Build it with keywords (each is checked here, once); pass it as ``options=`` to
    :class:`~context_gatekeeper.ContextGatekeeper`, ``GatekeeperMiddleware``,
    ``topic_gate`` or ``gate_messages`` instead of their keywords.  :meth:`of` builds
    one from those keywords, as the constructors do.

    Attributes:
        token_budget: tokens that pinned content (system prompt, summary, pinned turns)
            plus the selected earlier turns may use; an ``int >= 0`` (``0``: nothing but
            the pinned content), default 4000.  The one budget rule of the library is
            :func:`~context_gatekeeper.validation.require_budget`.
        token_counter: ``None`` (tiktoken ``cl100k_base``, offline), an encoding name, a
            ``callable(str) -> int`` or an object with ``encode()``.
        message_overhead: tokens added per message (user, assistant, tool, system) for the
            chat format's framing; an ``int >= 0``, 0 counts text only; default 3.
        on_overflow: when pinned content alone exceeds the budget, ``"raise"``
            (:class:`~context_gatekeeper.errors.BudgetError`) or ``"keep_pinned"``
            (only the pinned content, ``Selection.over_budget`` set, one warning logged).
            ``None`` (default): the caller's default, ``"raise"`` for
            ``ContextGatekeeper`` and ``"keep_pinned"`` for the framework adapters (whose
            current turn is always sent).
        params: every weight and threshold (:class:`SelectionParams`); default the
            ``"default"`` preset.
        embedder: a LangChain ``Embeddings``, LlamaIndex ``BaseEmbedding`` or callable
            ``list[str] -> vectors`` for the semantic channel (numpy needed); kept as
            given (:attr:`resolved_embedder` is the normalised one).  ``None``: lexical.
        vector_cache: ``get``/``put`` of turn vectors by ``(embedder name, text hash)``;
            ``None``: kept in memory by the gatekeeper.
        embed_timeout: seconds a selection waits for the query's embedding before going
            lexical; a number ``> 0`` or ``None`` (wait).
        preset: (init only) a named setting instead of ``params``: ``"default"`` or
            ``"recall"`` (see :attr:`SelectionParams.PRESETS`); ``params`` then holds it.

    Raises:
        BudgetError: a ``token_budget`` that is not an ``int >= 0``.
        InvalidInputError: a bad ``message_overhead``, ``on_overflow``, ``embed_timeout``,
            preset name or encoding name.
        InvalidTypeError: (a ``TypeError``) ``params`` and ``preset`` both given, a
            ``params`` that is not a :class:`SelectionParams`, a token counter or embedder
            of no accepted kind, a ``vector_cache`` without ``get``/``put``.
        ImportError: an embedder without numpy installed.
    """

    token_budget: int = DEFAULT_TOKEN_BUDGET
    token_counter: TokenCounterLike = None
    message_overhead: int = 3
    on_overflow: Optional[OnOverflow] = None
    params: SelectionParams = None  # type: ignore[assignment]  # None: the default preset (set in __post_init__)
    embedder: Any = None
    vector_cache: Any = None
    embed_timeout: Optional[float] = None
    preset: InitVar[Optional[str]] = None
    _count: Optional[TokenCounter] = field(default=None, init=False, repr=False, compare=False)
    _embedder: Optional[Embedder] = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self, preset: Optional[str]) -> None:
        require_budget(self.token_budget)
        require_overhead(self.message_overhead)
        if self.on_overflow is not None and self.on_overflow not in ON_OVERFLOW:
            raise InvalidInputError(
                f"on_overflow must be 'raise' or 'keep_pinned' (or None for the default), got {self.on_overflow!r}"
            )
        if preset is not None and self.params is not None:
            raise InvalidTypeError(
                "pass params= or preset=, not both: SelectionParams.preset(name, **changes) builds params from a preset"
            )
        if self.params is None:
            object.__setattr__(self, "params", SelectionParams.preset(preset) if preset is not None else SelectionParams())
        elif not isinstance(self.params, SelectionParams):
            raise InvalidTypeError(
                f"params must be a SelectionParams, got {type(self.params).__name__}; build one with "
                "SelectionParams(...) or SelectionParams.preset(name, **changes)"
            )
        require_timeout(self.embed_timeout)
        require_vector_cache(self.vector_cache)
        word_prior.preload()  # file I/O now, when the gate is set up, never inside a later (async) select
        if self.token_counter == "approximate":  # gate_messages's keyword spelling, not an encoding
            raise InvalidInputError(
                "token_counter 'approximate' is a spelling only langchain_gatekeeper.gate_messages(token_counter=...) "
                "takes, not a token encoding; here pass a callable(str) -> int (LangChain's "
                "count_tokens_approximately counts four characters a token), a tiktoken encoding name "
                "('cl100k_base', 'o200k_base'), or None (cl100k_base)"
            )
        if self.token_counter is not None:  # None: the default counter, resolved when first needed
            object.__setattr__(self, "_count", resolve_token_counter(self.token_counter))
        if self.embedder is not None:
            numpy()  # fail now, not at the first query, when numpy is missing
            object.__setattr__(self, "_embedder", as_embedder(self.embedder))

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle and deep-copy the fields only (the resolved counter and embedder are rebuilt)."""
        return (_rebuild, (type(self), {f.name: getattr(self, f.name) for f in fields(self) if f.init}))

    # -- derived --------------------------------------------------------------------------
    @property
    def count(self) -> TokenCounter:
        """The token counter as a callable ``str -> int``."""
        if self._count is None:
            object.__setattr__(self, "_count", resolve_token_counter(self.token_counter))
        assert self._count is not None
        return self._count

    @property
    def resolved_embedder(self) -> Optional[Embedder]:
        """The embedder normalised by :func:`~context_gatekeeper.selection.semantic.embedding.as_embedder`
        (``None`` without one)."""
        return self._embedder

    def overflow(self, default: OnOverflow) -> OnOverflow:
        """``on_overflow``, or ``default`` when it was left ``None``."""
        return self.on_overflow if self.on_overflow is not None else default

    # -- building -------------------------------------------------------------------------
    @property
    def budget_given(self) -> bool:
        """Whether ``token_budget`` was passed (to the constructor, :meth:`of` or
        :meth:`with_`), rather than left at its default: an adapter with a budget of its own
        (a LlamaIndex memory's ``token_limit``) takes only a budget the caller chose.

        >>> GateOptions().budget_given, GateOptions(token_budget=4000).budget_given
        (False, True)
        """
        return type(self.token_budget) is not _DefaultBudget

    def with_(self, **changes: Any) -> "GateOptions":
        """A copy with ``changes`` applied, checked like a new record.  A field of
        :class:`SelectionParams` changes ``params``; ``preset=`` replaces it.

        >>> GateOptions().with_(token_budget=500, top_m=4).params.top_m
        4
        """
        own = {f.name for f in fields(self) if f.init}
        tunables = {k: changes.pop(k) for k in list(changes) if k in _PARAM_NAMES and k not in own}
        unknown = sorted(set(changes) - own - {"preset"})
        if unknown:
            raise InvalidTypeError(
                f"unexpected keyword argument(s) {unknown}; pass fields of GateOptions ({sorted(own | {'preset'})}) "
                "or of SelectionParams (the tunables)"
            )
        if "preset" in changes:
            preset = changes.pop("preset")
            if preset is not None:
                if changes.get("params") is not None:
                    raise InvalidTypeError("pass params= or preset=, not both")
                changes["params"] = SelectionParams.preset(preset)
        updated = replace(self, **changes) if changes else self
        if tunables:
            updated = replace(updated, params=updated.params.with_(**tunables))
        return updated

    @classmethod
    def of(cls, options: "GateOptions | None" = None, /, **keywords: Any) -> "GateOptions":
        """``options``, or a new record built from ``keywords`` (``None`` values: not given).

        The keywords are this record's fields, ``preset``, and fields of
        :class:`SelectionParams` (each changes one value of ``params``).  Passing
        ``options`` and keywords together is an error: change a record with
        :meth:`with_`.

        >>> GateOptions.of(token_budget=300, top_m=5).params.top_m
        5
        """
        own = {f.name for f in fields(cls) if f.init} | {"preset"}
        unknown = sorted(set(keywords) - own - _PARAM_NAMES)
        if unknown:  # refused even when None: a misspelt keyword must not pass silently
            raise InvalidTypeError(
                f"unexpected keyword argument(s) {unknown}; pass fields of GateOptions ({sorted(own)}) "
                "or of SelectionParams (the tunables)"
            )
        given = {k: v for k, v in keywords.items() if v is not None}
        if options is not None:
            if not isinstance(options, cls):
                raise InvalidTypeError(
                    f"options must be a GateOptions, got {type(options).__name__}; build one with "
                    "GateOptions(...) or pass its fields as keywords"
                )
            if given:
                raise InvalidTypeError(
                    f"pass options= or its fields as keywords, not both (got {sorted(given)} too); "
                    "options.with_(...) makes a changed copy"
                )
            return options
        built = cls(**{k: v for k, v in given.items() if k in own})
        rest = {k: v for k, v in given.items() if k not in own}
        return built.with_(**rest) if rest else built


def _rebuild(cls: type[GateOptions], values: dict[str, Any]) -> GateOptions:
    return cls(**values)

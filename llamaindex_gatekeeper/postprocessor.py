"""A node postprocessor that keeps the few retrieved nodes covering the query.

Retrievers return the top k by similarity, and the top k often repeat each other
(overlapping chunks, the same paragraph in two documents) or drift off the
question.  :class:`GatekeeperNodePostprocessor` keeps a small subset that covers
the query's informative terms within a token budget, picked greedily by newly
covered term weight per token (the core's :func:`context_gatekeeper.selection.coverage.select_covering`),
and returns it in retrieval order.  No LLM call, and no embedding model unless you
pass one.

Term weights come from the retrieved nodes themselves, or from a
:class:`~context_gatekeeper.selection.coverage.CoverageCorpus` built once over the whole
collection (:func:`build_corpus`), which knows which words are common in the domain::

    from llamaindex_gatekeeper.postprocessor import GatekeeperNodePostprocessor, build_corpus

    gate = GatekeeperNodePostprocessor(token_budget=1500, corpus=build_corpus(index))
    engine = index.as_query_engine(similarity_top_k=10, node_postprocessors=[gate])
    chat = index.as_chat_engine(chat_mode="context", node_postprocessors=[gate])
    for line in gate.explain(nodes, "how do I renew a Redis lock?"):
        print(line)

With ``embedder=`` (the index's ``embed_model``, a LangChain ``Embeddings`` or a
callable ``list[str] -> list[list[float]]``; numpy needed) meaning joins the words:
each node's similarity to the query comes from ``node.embedding`` when the retriever
filled it (else the node is embedded once, cached by a hash of its text), and the
query's from ``QueryBundle.embedding`` when present (else one ``embed_query`` call).
Similarities are calibrated on the retrieved set itself: a node counts as semantic
evidence only when it stands out among them (``SelectionParams.semantic_floor``
standard deviations; at least ``semantic_min_turns`` nodes), and up to
``semantic_max_keep`` nodes holding none of the query's terms are kept on their
meaning.  ``explain`` shows each node's similarity and whether it was decisive.
If the embedder fails or times out, selection is lexical (one warning;
``select(...).semantic_fallback``).

A node's text is counted, analysed (and, with an embedder, embedded) at most once: the
results are kept in bounded caches shared by every postprocessor of the process and its
threads (:data:`FACTS`, :data:`ANCHORS`, :data:`~llamaindex_gatekeeper.node_vectors.VECTORS`),
so a call on nodes seen before costs the selection alone.  ``postprocess_nodes`` without
an embedder does no more than its choice needs: it reads a new node for the query alone
(:func:`~context_gatekeeper.integration.held_anchors`: a quick substring test, then, in
plain text, only the words around a query term's occurrences; a node met again is
analysed whole), and counts the tokens of the nodes that do hold one (with a tiktoken counter, only of those whose
:func:`~context_gatekeeper.tokens.word_floor` says they may be the next pick: the greedy
step ranks by that lower bound first); ``select`` and ``explain`` analyse and count
every node.

The postprocessor never writes node metadata or scores: it returns the very
``NodeWithScore`` objects it was given, unmodified.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any, Callable, List, NamedTuple, Optional, Union

from llama_index.core.bridge.pydantic import Field, PrivateAttr, ValidationError, field_validator
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import BaseNode, MetadataMode, NodeWithScore, QueryBundle, TextNode

from context_gatekeeper import (
    CoverageCorpus,
    CoverageExplanation,
    CoverageResult,
    InvalidInputError,
    InvalidTypeError,
    SelectionParams,
    resolve_token_counter,
    select_covering,
    token_floor,
)
from context_gatekeeper.integration import (
    BoundedCache, anchor_set, held_anchors, kept_covering, require_budget, require_items, require_timeout, text_key,
)

from .convert import validation_problems
from .node_vectors import NodeVectors, query_embedding

__all__ = ["GatekeeperNodePostprocessor", "NodeExplanation", "build_corpus", "query_text"]


@dataclass(frozen=True)
class NodeExplanation:
    """Why one retrieved node was kept or dropped.

    Attributes:
        node_id: the node's id.
        kept: whether the postprocessor keeps it.
        reason: ``"covers"``, ``"fallback"``, ``"irrelevant"``, ``"no new coverage"``,
            ``"duplicate"`` (with no query term to go by, a node whose text repeats a kept
            one's), ``"over budget"`` or ``"target reached"`` (see
            :mod:`context_gatekeeper.selection.coverage`).
        coverage: the core's record: matched and newly covered terms, gain, token cost.
    """

    node_id: str
    kept: bool
    reason: str
    coverage: CoverageExplanation

    def __str__(self) -> str:
        return f"{self.node_id}: {self.coverage}"

    @property
    def similarity(self) -> float | None:
        """The node's similarity to the query (None without an embedder)."""
        return self.coverage.similarity

    @property
    def decisive(self) -> bool:
        """Whether the node is kept because of its meaning alone."""
        return self.coverage.decisive


def build_corpus(source: Any, *, metadata_mode: MetadataMode = MetadataMode.NONE) -> CoverageCorpus:
    """A :class:`CoverageCorpus` over a whole collection, to weigh query terms by it.

    ``source`` is an index (its docstore's nodes), a docstore, or an iterable of
    nodes, ``NodeWithScore`` objects, documents or strings.  Build it once, when the
    index is built, and pass it as ``corpus=``.

    Raises:
        InvalidInputError: ``source`` is an index or a docstore whose docstore holds no
            node.  A vector store that keeps the text itself (Chroma, Qdrant, pgvector, ...)
            leaves the index's docstore empty: pass the nodes or texts you indexed instead,
            ``build_corpus(nodes)``.
    """
    docstore = getattr(source, "docstore", source)
    if not hasattr(docstore, "docs"):
        if isinstance(source, (str, bytes)) or not isinstance(source, Iterable):
            raise InvalidTypeError(
                f"build_corpus takes an index, a docstore, or a list of nodes, documents or strings; got "
                f"{type(source).__name__}"
            )
        return CoverageCorpus.from_texts(_text(item, metadata_mode) for item in source)
    items = list(docstore.docs.values())
    if not items:
        raise InvalidInputError(
            "build_corpus: the docstore holds no nodes (a vector store that keeps the text itself, such as "
            "Chroma, Qdrant or pgvector, leaves the index's docstore empty), so the corpus would weigh no "
            "term; pass the nodes or texts you indexed instead: build_corpus(nodes)"
        )
    return CoverageCorpus.from_texts(_text(item, metadata_mode) for item in items)


def _text(item: Any, metadata_mode: MetadataMode) -> str:
    if isinstance(item, str):
        return item
    node = item.node if isinstance(item, NodeWithScore) else item
    if isinstance(node, BaseNode):
        return node.get_content(metadata_mode=metadata_mode)
    raise InvalidTypeError(f"cannot read text from {type(item).__name__}; pass nodes, documents or strings")


def query_text(query: Union[str, QueryBundle, None]) -> str:
    """The text of ``query``: a str, or a ``QueryBundle``'s ``query_str``, unwrapped however
    deep (``ContextChatEngine.chat(QueryBundle(...))`` hands postprocessors a bundle whose
    ``query_str`` is the caller's bundle); ``""`` for no query.

    Raises:
        InvalidTypeError: (a ``TypeError``) ``query`` is none of these.
    """
    while isinstance(query, QueryBundle):
        query = query.query_str
    if query is None:
        return ""
    if not isinstance(query, str):
        raise InvalidTypeError(
            f"query must be a str, a QueryBundle or None, got {type(query).__name__}; pass the query's text"
        )
    return query


_DEFAULT_PARAMS = SelectionParams()  # frozen: built once, not per call
_NONE = MetadataMode.NONE  # an enum member read through its class costs a lookup each time

_Facts = tuple[Optional[str], Optional[int], Any]
"""What a node contributes to a selection, computed once per text: ``(text, tokens, anchor
counts)``; ``text`` and ``tokens`` are None until a selection needs them
(``postprocess_nodes`` without an embedder counts only the nodes that hold a query term
and may be picked: see :func:`kept_covering`).  ``tokens < 0`` is not a count but
``-1 - floor``: the node is not counted yet, and costs ``floor`` tokens at least
(:func:`~context_gatekeeper.tokens.token_floor`)."""

_ANCHOR_ENTRY_BYTES = 64
"""An anchor's cost in a set of them (its string's header and its slot), estimated."""

_FACT_ENTRY_BYTES = 400
"""A :data:`FACTS` entry's cost besides its texts and anchors (its key, value and slot), estimated."""

FACT_CACHE_BYTES = 64_000_000
"""The most :data:`FACTS` holds, in estimated bytes (:func:`_facts_weight`): about 8,800 nodes
of 1,000 characters (7,200 each, their text, formatted text and anchors), 1,600 of 8,000
(39,000 each), so long chunks never hold what 10,000 short ones would not.  Measured
(tracemalloc, with :data:`ANCHORS`): 0.9 to 1.3 bytes an estimated byte, so some 80 MB when
full, at most."""

ANCHOR_CACHE_BYTES = 32_000_000
"""The most :data:`ANCHORS` holds, in estimated bytes (:func:`_anchors_weight`): the bodies and
headers of about 6,400 nodes of 1,000 characters; some 40 MB when full, at most."""


def _anchor_bytes(anchors: Any) -> int:
    """The estimated bytes of a set of anchors: their characters plus :data:`_ANCHOR_ENTRY_BYTES` each."""
    return sum(map(len, anchors)) + _ANCHOR_ENTRY_BYTES * len(anchors)


def _facts_weight(key: tuple[Any, ...], facts: _Facts) -> int:
    """A :data:`FACTS` entry's weight: the characters of the texts its key holds (the node's text,
    or its header and body; not the counter's key nor the shared template), of its formatted
    text when that is another string, and its anchors' bytes (a pending node's parts are the
    key's texts)."""
    texts = key[1:2] if len(key) == 2 else key[2:]
    weight = _FACT_ENTRY_BYTES + sum(map(len, texts))
    text, _, anchors = facts
    if text is not None and text is not texts[-1]:
        weight += len(text)
    if type(anchors) is not _Pending:
        weight += _anchor_bytes(anchors)
    return weight


def _anchors_weight(key: str, anchors: Any) -> int:
    """An :data:`ANCHORS` entry's weight: its anchors' estimated bytes and its key's."""
    return len(key) + _anchor_bytes(anchors)


FACTS: BoundedCache[tuple[Any, ...], _Facts] = BoundedCache(
    maxsize=10_000, weigh=_facts_weight, max_weight=FACT_CACHE_BYTES)
"""Every postprocessor's per-node facts (the 10,000 most recently used, at most
:data:`FACT_CACHE_BYTES` of them), shared across calls, objects and threads: keyed by the
token counter's ``BoundedCache.identity_key`` (a counter is not kept alive by its entries) and
the node's text (for a plain ``TextNode``, by the parts its text is made of: its text template,
metadata header and body, so the text of a node seen before is not formatted again).  The
texts are keys as they are, not digests: the entry keeps a node's text anyway (what the
selection reads), and a digest of each node on every call would cost more than the whole
lookup of nodes seen before; the weight counts them."""

ANCHORS: BoundedCache[str, Any] = BoundedCache(
    maxsize=10_000, weigh=_anchors_weight, max_weight=ANCHOR_CACHE_BYTES)
"""Anchor sets by :func:`~context_gatekeeper.integration.text_key` of their text (no key holds
a text), shared by every token counter (anchors do not depend on it): a node's body and its
metadata header are kept apart (see :func:`_analysed`).  At most :data:`ANCHOR_CACHE_BYTES`."""


_SPLIT_TEMPLATE = "{metadata_str}\n\n{content}"
"""LlamaIndex's default text template: a ``TextNode`` with it and metadata reads
``(header + "\\n\\n" + body).strip()``, analysed as its two parts (:func:`_pending`)."""


class _Pending(NamedTuple):
    """A node's text whose anchors are not extracted yet (no query it met could match
    it): its body and its header (``""``: none), analysed apart (:func:`_pending`) and
    each tested apart (:meth:`GatekeeperNodePostprocessor._facts`)."""

    body: str
    header: str


_NONE_HELD: frozenset[str] = frozenset()
"""What a part of a node that cannot match the query holds of it."""


def _pending(keys: list[tuple[Any, ...]]) -> list[tuple[str | None, _Pending]]:
    """Each plain ``TextNode``'s ``(text or None, parts to analyse)``, from its
    :func:`_parts_key` (``(counter, text)``, or ``(counter, text_template, header, body)``).

    A ``TextNode`` whose header is not empty reads ``text_template.format(content=body,
    metadata_str=header).strip()``; with :data:`_SPLIT_TEMPLATE`, ``(header + "\\n\\n" +
    body).strip()``.  No anchor spans a line break (each pattern of
    :func:`~context_gatekeeper.selection.anchors.extract` stops at one, and NFKC keeps one
    as it is) and trailing white space holds none, so its anchors are its header's plus
    its body's (:func:`_analysed`): each is kept apart in :data:`ANCHORS` (a body is
    analysed once whatever its metadata; a digit in a file name no longer sends the whole
    body through the number scans), and its text is formatted only when its tokens are
    counted (None here).  ``tests/test_li_postprocessor.py`` checks the sum against the
    whole text's extraction on texts and templates built to break it."""
    out: list[tuple[str | None, _Pending]] = []
    for key in keys:
        if len(key) == 2:  # a TextNode read as its own text
            out.append((key[1], _Pending(key[1], "")))
        elif key[1] == _SPLIT_TEMPLATE:
            out.append((None, _Pending(key[3], key[2])))
        else:
            text = key[1].format(content=key[3], metadata_str=key[2]).strip()  # TextNode.get_content's
            out.append((text, _Pending(text, "")))
    return out


def _by_lines(held: Callable[[str], frozenset[str] | None], text: str) -> tuple[frozenset[str], list[str]]:
    """For a text ``held`` (:func:`~context_gatekeeper.integration.held_anchors` of a query)
    cannot read whole: what it finds of the query's anchors in the lines it can read, and
    the pieces of ``text`` to analyse, whose anchors complete that: the lines it cannot read
    (none, when it reads every line; no anchor spans a line break: see :func:`_pending`), or
    ``[text]`` when it reads none of them.  Analysing a line or two costs a fraction of
    analysing the whole text."""
    if "\n" not in text:
        return _NONE_HELD, [text]
    lines = text.split("\n")
    told: frozenset[str] = _NONE_HELD
    pieces: list[str] = []
    for line in lines:
        in_line = held(line)
        if in_line is None:
            pieces.append(line)
        elif in_line:
            told = told | in_line
    return (told, pieces) if len(pieces) < len(lines) else (_NONE_HELD, [text])


def _analysed(texts: list[str]) -> dict[str, frozenset[str]]:
    """Each text's distinct anchors (:func:`~context_gatekeeper.integration.anchor_set`),
    from :data:`ANCHORS` (looked up by the texts' digests, and the missing ones kept, together:
    a digest costs a fraction of an extraction, which only texts to analyse pay)."""
    wanted = list(dict.fromkeys(texts))
    keys = list(map(text_key, wanted))
    found: dict[str, Any] = dict(zip(wanted, ANCHORS.get_many(keys)))
    new = [(i, anchor_set(t)) for i, (t, held) in enumerate(found.items()) if held is None]
    if new:
        found.update((wanted[i], held) for i, held in new)
        ANCHORS.put_many((keys[i], held) for i, held in new)
    return found


_EXCLUDED = {MetadataMode.LLM: 1, MetadataMode.EMBED: 2}  # which excluded-keys field a mode reads
_KEY_VALUE = "{key}: {value}"  # LlamaIndex's default metadata template, formatted without str.format


@lru_cache(maxsize=None)
def _separator_field(node_class: type[BaseNode]) -> str:
    """The field whose text ``node_class.get_metadata_str`` joins metadata pairs with:
    ``metadata_seperator`` where the class has a field of that name (``TextNode`` on
    llama-index-core 0.14.5 to 0.14.13, whose own field, so spelt, is read; the base class's
    ``metadata_separator`` then is not), else ``metadata_separator`` (where that spelling is
    only its alias)."""
    return "metadata_seperator" if "metadata_seperator" in node_class.model_fields else "metadata_separator"


def _parts_key(node: BaseNode, mode: MetadataMode, excluded: int, counter: Any) -> tuple[Any, ...] | None:
    """The :data:`FACTS` key of a node for token counter ``counter``: what
    ``TextNode.get_content(mode)`` is made of, ``(counter, text_template, header, text)``
    with ``header`` its ``get_metadata_str(mode).strip()`` (the same pairs formatted the
    same way, metadata values as ``str`` gives them, joined by the separator it reads:
    :func:`_separator_field`, read from the node's fields), or
    ``(counter, text)`` when that is the text (mode ``NONE``, no metadata, an empty
    header), or None when the node is not a plain ``TextNode`` or a metadata key is not a
    ``str``: its text is then read, and the key is ``(counter, text)``.  ``excluded``:
    ``_EXCLUDED[mode]`` (0: the mode excludes no key)."""
    if type(node) is not TextNode:
        return None
    fields = node.__dict__  # pydantic keeps a model's fields there
    metadata = fields["metadata"]
    if mode is _NONE or not metadata:
        return (counter, fields["text"])
    skipped = fields["excluded_llm_metadata_keys"] if excluded == 1 else \
        fields["excluded_embed_metadata_keys"] if excluded == 2 else ()
    template = fields["metadata_template"]
    pairs = []
    for name, value in metadata.items():
        if type(name) is not str:
            return None
        if skipped and name in skipped:
            continue
        if type(value) is not str:  # a str formats as itself; get_metadata_str formats str(value)
            value = str(value)
        pairs.append(f"{name}: {value}" if template == _KEY_VALUE else template.format(key=name, value=value))
    header = (pairs[0] if len(pairs) == 1 else fields[_separator_field(TextNode)].join(pairs)).strip()
    if not header:
        return (counter, fields["text"])
    return (counter, fields["text_template"], header, fields["text"])


def _scored(nodes: Any) -> List[NodeWithScore]:
    """``nodes`` as a list of ``NodeWithScore`` (what retrievers return), or the library's error."""
    return require_items(nodes, "nodes", NodeWithScore, "pass the retriever's NodeWithScore list "
                         "(wrap a bare node as NodeWithScore(node=node, score=None))")


_STATE = ("_count", "_floor", "_counter_key", "_vectors")
"""The private attributes :meth:`GatekeeperNodePostprocessor._install` sets from a :class:`_State`."""


class _State(NamedTuple):
    """What a postprocessor resolves from its ``token_counter``, ``embedder`` and ``embed_timeout``."""

    tokens: Callable[[str], int]
    floor: Optional[Callable[[str], int]]
    counter_key: Any
    vectors: Optional[NodeVectors]


_RESOLVED = ("token_counter", "embedder", "embed_timeout")
"""The fields :func:`_resolved` reads: assigning one resolves them anew."""

_SHARED = ("token_counter", "embedder")
"""The fields a deep copy shares with the original, as the memory's copy does: models, not data
(an embedder holds clients, locks and lanes, and a counter a tokenizer; both select alike shared)."""


def _resolved(token_counter: Any, embedder: Any, embed_timeout: Optional[float]) -> _State:
    """The counter (``resolve_token_counter``), its word floor, the :data:`FACTS` key of its
    counts (the counter's ``BoundedCache.identity_key``: facts counted by the same counter are
    shared by every postprocessor, and never keep it alive) and the embedder's
    :class:`NodeVectors` (None without one).  Raises the library's error for a bad counter or
    embedder."""
    count = resolve_token_counter(token_counter)
    key = BoundedCache.identity_key("cl100k_base" if token_counter is None else token_counter)
    vectors = NodeVectors(embedder, embed_timeout) if embedder is not None else None
    return _State(count, token_floor(count), key, vectors)


class GatekeeperNodePostprocessor(BaseNodePostprocessor):
    """Keep the retrieved nodes that cover the query's informative terms, within a token budget.

    Fields may be reassigned, or changed by ``model_copy(update=...)``: each value is checked
    as the constructor checks it (a refused one raises the library's error and changes
    nothing), and a new ``token_counter``, ``embedder`` or ``embed_timeout`` is used from
    the next call on.

    Attributes:
        token_budget: most tokens the kept nodes may cost together, an ``int >= 0`` (the
            library's one budget rule; 0 keeps nothing), or None: no limit (coverage alone
            then decides).
        corpus: document frequencies for term weights (:func:`build_corpus`); default:
            the retrieved nodes'.
        token_counter: counts a node's tokens: a ``callable(str) -> int``, a tokenizer
            with ``encode``, or a tiktoken encoding name; default ``cl100k_base`` (offline).
        coverage_target: share of the coverable query weight to cover (1.0: every query
            term some node holds, budget permitting).
        fallback: when no node shares a single informative term with the query (or the
            query has none), keep the nodes in order within the budget instead of none.
        metadata_mode: which node text is read and counted; ``LLM`` (the default) is
            what a response synthesizer sends.
        params: the core's selection parameters (IDF formula, kind weights, cost
            exponent, extra stopwords, the semantic floor and how many nodes meaning
            alone may keep).
        embedder: a LlamaIndex ``BaseEmbedding``, a LangChain ``Embeddings`` or a callable
            ``list[str] -> list[list[float]]`` for semantic evidence (see the module
            docstring); ``None`` (default): lexical, exactly as without it.  Pass the
            index's own ``embed_model``: the vectors the retriever filled in
            (``node.embedding``, ``QueryBundle.embedding``) are compared with the ones it
            makes, and only their dimensions can be checked.
        embed_timeout: seconds one embedding call may take, from its start, before the
            nodes are selected lexically (a call that waited its turn behind other
            requests' calls that long is dropped: lexical for this call, no outage);
            ``None``: wait.  The core's rule: a finite number ``> 0``, ``bool`` refused.
    """

    token_budget: Optional[int] = Field(default=None, description="Most tokens the kept nodes may cost.")
    corpus: Optional[CoverageCorpus] = Field(default=None, exclude=True, description="Document frequencies.")
    token_counter: Optional[Any] = Field(default=None, exclude=True, description="Token counter.")
    coverage_target: float = Field(default=1.0, gt=0.0, le=1.0, description="Share of query weight to cover.")
    fallback: bool = Field(default=True, description="Keep nodes in order when none matches the query.")
    metadata_mode: MetadataMode = Field(default=MetadataMode.LLM, description="Which node text to read.")
    params: Optional[SelectionParams] = Field(default=None, exclude=True, description="Selection parameters.")
    embedder: Optional[Any] = Field(default=None, exclude=True, description="Embedding model (semantic evidence).")
    embed_timeout: Optional[float] = Field(default=None, description="Seconds an embedding call may take.")
    _count: Callable[[str], int] = PrivateAttr()
    _floor: Optional[Callable[[str], int]] = PrivateAttr(default=None)
    _counter_key: Any = PrivateAttr()
    _vectors: Optional["NodeVectors"] = PrivateAttr(default=None)

    def __init__(self, **data: Any) -> None:
        # the library's own errors, not pydantic's ValidationError wrapped around them
        if data.get("token_budget") is not None:
            require_budget(data["token_budget"])
        require_timeout(data.get("embed_timeout"))
        try:
            super().__init__(**data)
        except ValidationError as error:
            problems = validation_problems(error)
            raise InvalidInputError(
                f"GatekeeperNodePostprocessor: {problems}; see help(GatekeeperNodePostprocessor) for each option"
            ) from None

    @field_validator("token_budget", mode="before")
    @classmethod
    def _one_budget_rule(cls, value: Any) -> Any:
        """The library's one budget rule (an ``int >= 0``, bool refused); ``None``: no limit."""
        return None if value is None else require_budget(value)

    @field_validator("embed_timeout", mode="before")
    @classmethod
    def _one_timeout_rule(cls, value: Any) -> Any:
        """The core's timeout rule (seconds ``> 0``, finite, bool refused); ``None``: wait."""
        return require_timeout(value)

    def model_post_init(self, __context: Any) -> None:
        """Normalise the token counter and the embedder once (again when one is assigned)."""
        self._install(_resolved(self.token_counter, self.embedder, self.embed_timeout))

    def __setattr__(self, name: str, value: Any) -> None:
        """A field assignment is checked as the constructor checks it, and changes nothing when
        refused: ``token_budget`` by the library's budget rule (``BudgetError``), ``embed_timeout``
        by its timeout rule (``InvalidInputError``), every field by
        its type (``InvalidInputError``), ``token_counter`` / ``embedder`` / ``embed_timeout``
        by resolving them anew (their own errors), which the next call then uses."""
        fields = type(self).model_fields
        if name not in fields:
            super().__setattr__(name, value)
            return
        if name == "token_budget" and value is not None:
            require_budget(value)
        if name == "embed_timeout":
            require_timeout(value)
        state = None
        if name in _RESOLVED:
            settings = {key: getattr(self, key) for key in _RESOLVED}
            settings[name] = value
            state = _resolved(**settings)
        try:
            type(self).__pydantic_validator__.validate_assignment(self, name, value)
        except ValidationError as error:
            raise InvalidInputError(
                f"GatekeeperNodePostprocessor: {validation_problems(error)}; nothing was changed; "
                "see help(GatekeeperNodePostprocessor) for each option"
            ) from None
        if state is not None:
            self._install(state)

    def model_copy(
        self, *, update: Optional[Mapping[str, Any]] = None, deep: bool = False
    ) -> "GatekeeperNodePostprocessor":
        """A copy; ``update`` is assigned field by field, so it is checked (and a new token
        counter or embedder taken into account) as an assignment is.  An unknown name raises
        ``InvalidTypeError``, before anything is copied."""
        changes = dict(update or {})
        unknown = sorted(str(name) for name in changes if name not in type(self).model_fields)
        if unknown:
            raise InvalidTypeError(
                f"model_copy(update=...) got {unknown}; pass fields of GatekeeperNodePostprocessor "
                f"({sorted(type(self).model_fields)})"
            )
        copied = super().model_copy(deep=deep)  # deep: __deepcopy__
        for name, value in changes.items():
            setattr(copied, name, value)
        return copied

    def __deepcopy__(self, memo: Optional[dict[int, Any]] = None) -> "GatekeeperNodePostprocessor":
        """A copy that selects exactly as this one (``copy.deepcopy``, ``model_copy(deep=True)``).

        The fields are deep-copied, except :data:`_SHARED` (the embedder, which holds clients,
        locks and lanes, and the token counter), which the copy shares; its private state is
        resolved anew from them as the constructor resolves it, so it shares the process-wide
        caches (:data:`FACTS`, :data:`ANCHORS`, :data:`~.node_vectors.VECTORS`) and the
        embedder's outage state, as every postprocessor does."""
        memo = {} if memo is None else memo
        cls = type(self)
        copied = cls.__new__(cls)
        memo[id(self)] = copied
        fields = {name: value if name in _SHARED else copy.deepcopy(value, memo) for name, value in self.__dict__.items()}
        object.__setattr__(copied, "__dict__", fields)
        object.__setattr__(copied, "__pydantic_extra__", copy.deepcopy(self.__pydantic_extra__, memo))
        object.__setattr__(copied, "__pydantic_fields_set__", set(self.__pydantic_fields_set__))
        rest = {name: value for name, value in (self.__pydantic_private__ or {}).items()
                if name not in _STATE}  # a subclass's, copied as pydantic copies them
        object.__setattr__(copied, "__pydantic_private__", copy.deepcopy(rest, memo))
        copied._install(_resolved(copied.token_counter, copied.embedder, copied.embed_timeout))
        return copied

    def _install(self, state: _State) -> None:
        """Take the resolved counter and embedder state (see :func:`_resolved`)."""
        self._count, self._floor, self._counter_key, self._vectors = state

    @classmethod
    def class_name(cls) -> str:
        return "GatekeeperNodePostprocessor"

    def select(self, nodes: List[NodeWithScore], query: Union[str, QueryBundle, None]) -> CoverageResult:
        """The core's full coverage result for ``nodes`` (indices into ``nodes``)."""
        return self._select(_scored(nodes), query, True)

    async def aselect(self, nodes: List[NodeWithScore], query: Union[str, QueryBundle, None]) -> CoverageResult:
        """:meth:`select` with the embedding calls awaited (the embedder's async twins)."""
        return await self._aselect(_scored(nodes), query, True)

    def _select(self, nodes: List[NodeWithScore], query: Union[str, QueryBundle, None], explain: bool) -> CoverageResult:
        text, probe = query_text(query), None
        if self._vectors is not None and nodes and text.strip():
            probe = self._vectors.similarities(nodes, text, query_embedding(query))
        return self._covering(nodes, text, probe, explain)

    async def _aselect(
        self, nodes: List[NodeWithScore], query: Union[str, QueryBundle, None], explain: bool
    ) -> CoverageResult:
        if self._vectors is None:
            return await asyncio.to_thread(self._select, nodes, query, explain)
        text, probe = query_text(query), None
        if nodes and text.strip():
            probe = await self._vectors.asimilarities(nodes, text, query_embedding(query))
        return self._covering(nodes, text, probe, explain)

    def _facts(
        self, nodes: List[NodeWithScore], held: Callable[[str], frozenset[str] | None] | None = None,
        count: bool = True,
    ) -> tuple[
        list[_Facts], list[Any], Callable[[int], int], Optional[Callable[[int], int]], Callable[[], None],
        Callable[[int], str],
    ]:
        """Each node's ``(text, tokens, anchors)`` as :data:`FACTS` keeps it (looked up for
        the whole list at once; a node seen before by any postprocessor with this token
        counter is found there, a new one is added), the anchors this call reads (each
        node's set), ``cost(i)``, node ``i``'s tokens (counted, and kept, when first asked
        for), ``floor(i)``, a lower bound of them (its tokens when counted, else the
        counter's :func:`~context_gatekeeper.tokens.token_floor` of its text), or None when
        the counter has no floor, and ``text_of(i)``, node ``i``'s text as ``metadata_mode``
        reads it (formatted when first asked for).

        ``held``: :func:`~context_gatekeeper.integration.held_anchors` for the query.  A
        node met for the first time is then read for this query alone: each part (body,
        header) gives what ``held`` finds in it, and is analysed (its anchors extracted,
        kept in :data:`ANCHORS`) only when ``held`` cannot tell, and then only the lines of
        it ``held`` cannot tell (:func:`_by_lines`); the node stays pending (:class:`_Pending`)
        unless every part was analysed whole.  A pending node met again, and
        every node when ``held`` is None, is analysed whole, and its anchors kept: a node
        seen before costs a lookup.  ``count=False`` leaves a node's text and tokens None
        until ``cost`` asks for them; ``flush()`` then keeps in :data:`FACTS` what the call
        learnt (one batch, one lock: called once the choice is made; with ``count=True``,
        before returning)."""
        mode, counter = MetadataMode(self.metadata_mode), self._counter_key
        excluded = _EXCLUDED.get(mode, 0)
        items = [item.node for item in nodes]
        keys: list[Any] = [_parts_key(node, mode, excluded, counter) for node in items]
        texts: dict[int, str] = {}
        for i in [i for i, key in enumerate(keys) if key is None]:  # not a plain TextNode: keyed by its text
            texts[i] = _text(items[i], mode)
            keys[i] = (counter, texts[i])
        stored: list[Any] = FACTS.get_many(keys)
        missing = [i for i, facts in enumerate(stored) if facts is None]
        if missing:
            for i, (text, parts) in zip(missing, _pending([keys[i] for i in missing])):
                stored[i] = (text, None, parts)
        anchors: list[Any] = [facts[2] for facts in stored]
        pending = {i: held_ for i, held_ in enumerate(anchors) if type(held_) is _Pending}
        first = missing if held is not None else []  # read for this query alone
        wanted: list[str] = []  # the parts to analyse
        plan: list[tuple[int, frozenset[str], list[str], bool]] = []  # (node, what held found, pieces to analyse, whole)
        for i in first:
            body, header = pending[i]
            told = held(body)  # type: ignore[misc]  # first is empty when held is None
            pieces: list[str] = []
            whole = False  # every part analysed whole
            if told is None:
                told, pieces = _by_lines(held, body)  # type: ignore[arg-type]  # held is set: first is not empty
                whole = pieces == [body]
            if header:
                in_header = held(header)  # type: ignore[misc]
                if in_header is None:
                    in_header, header_pieces = _by_lines(held, header)  # type: ignore[arg-type]
                    whole = whole and header_pieces == [header]
                    pieces += header_pieces
                else:
                    whole = False
                if in_header:
                    told = told | in_header
            if pieces:
                wanted += pieces
                plan.append((i, told, pieces, whole))
            else:
                anchors[i] = told
        met = set(first)
        again = [i for i in pending if i not in met]  # seen before, or every node without held
        for i in again:
            wanted.append(pending[i].body)
            if pending[i].header:
                wanted.append(pending[i].header)
        found = _analysed(wanted) if wanted else {}
        keep: list[int] = []  # nodes whose every part is analysed: their anchors are kept
        for i, found_, pieces, whole in plan:
            if whole:
                keep.append(i)
            for piece in pieces:
                found_ = found_ | found[piece]
            anchors[i] = found_
        for i in again:
            body, header = pending[i]
            anchors[i] = found[body] | found[header] if header else found[body]
            keep.append(i)
        for i in keep:
            stored[i] = (stored[i][0], stored[i][1], anchors[i])
        changed = {*missing, *keep}  # kept in FACTS by flush(), at once

        def text_of(i: int) -> str:
            known, tokens, held = stored[i]
            if known is None:  # a node keyed (counter, _SPLIT_TEMPLATE, header, body): what get_content formats
                known = f"{keys[i][2]}\n\n{keys[i][3]}".strip()
                stored[i] = (known, tokens, held)
            return known

        def cost(i: int) -> int:
            tokens = stored[i][1]
            if tokens is None or tokens < 0:
                tokens = self._count(text_of(i))
                stored[i] = (stored[i][0], tokens, stored[i][2])
                changed.add(i)
            return tokens

        words = self._floor

        def floor(i: int) -> int:
            tokens = stored[i][1]
            if tokens is None:
                tokens = -1 - words(text_of(i))  # type: ignore[misc]  # returned only when words is set
                stored[i] = (stored[i][0], tokens, stored[i][2])
                changed.add(i)
            return tokens if tokens >= 0 else -1 - tokens

        def flush() -> None:
            """Keep what this call learnt (new nodes, anchors, token counts) in :data:`FACTS`."""
            if changed:
                FACTS.put_many([(keys[i], stored[i]) for i in sorted(changed)])
                changed.clear()

        if count:
            for i, facts in enumerate(stored):
                if facts[1] is None or facts[1] < 0:
                    cost(i)
            flush()
        return stored, anchors, cost, None if words is None else floor, flush, text_of

    def _covering(self, nodes: List[NodeWithScore], query: str, probe: Any, explain: bool) -> CoverageResult:
        """The core's coverage selection over the nodes' facts (``explain=False``: no
        explanations)."""
        facts, anchors, *_ = self._facts(nodes)
        result = select_covering(
            query,
            [f[0] for f in facts],  # type: ignore[misc]  # _facts formatted and counted every node
            token_budget=self.token_budget,
            costs=[f[1] for f in facts],  # type: ignore[misc]
            anchors=anchors,
            corpus=self.corpus,
            target=self.coverage_target,
            fallback=self.fallback,
            params=self.params or _DEFAULT_PARAMS,
            similarities=None if probe is None else probe[0],
            explain=explain,
        )
        return replace(result, semantic_fallback=True) if probe is not None and probe[1] else result

    def _kept(self, nodes: List[NodeWithScore], query: Union[str, QueryBundle, None]) -> list[int]:
        """What :meth:`select` keeps, for ``postprocess_nodes``.  Without an embedder, by
        :func:`kept_covering`: a new node's anchors are extracted only when it may hold a
        query term (:func:`may_match`), and its tokens counted only when it does (and,
        given the counter's floor, only when the floor may make it the next pick)."""
        if self._vectors is not None:
            return self._select(nodes, query, False).kept
        text, params = query_text(query), self.params or _DEFAULT_PARAMS
        _, anchors, cost, floor, flush, text_of = self._facts(nodes, held_anchors(text, params), count=False)
        try:
            return kept_covering(
                text,
                anchors,
                cost,
                token_budget=self.token_budget,
                corpus=self.corpus,
                target=self.coverage_target,
                fallback=self.fallback,
                params=params,
                floor=floor,
                text=text_of,  # the fallback keeps each text the LLM would read once
            )
        finally:
            flush()

    def explain(self, nodes: List[NodeWithScore], query: Union[str, QueryBundle, None]) -> List[NodeExplanation]:
        """Why each node would be kept or dropped for ``query``, in input order (with an
        embedder, each line shows the node's similarity and whether it was decisive)."""
        nodes = _scored(nodes)
        result = self._select(nodes, query, True)
        return [
            NodeExplanation(node.node.node_id, e.kept, e.reason, e) for node, e in zip(nodes, result.explanations)
        ]

    async def aexplain(self, nodes: List[NodeWithScore], query: Union[str, QueryBundle, None]) -> List[NodeExplanation]:
        """Async :meth:`explain` (the embedding calls awaited, as in :meth:`aselect`)."""
        nodes = _scored(nodes)
        result = await self._aselect(nodes, query, True)
        return [
            NodeExplanation(node.node.node_id, e.kept, e.reason, e) for node, e in zip(nodes, result.explanations)
        ]

    def _postprocess_nodes(
        self,
        nodes: List[NodeWithScore],
        query_bundle: Optional[QueryBundle] = None,
    ) -> List[NodeWithScore]:
        """The covering subset, in retrieval order: the same objects, unmodified."""
        nodes = _scored(nodes)
        if not nodes:
            return []
        return [nodes[i] for i in self._kept(nodes, query_bundle)]

    async def _apostprocess_nodes(
        self,
        nodes: List[NodeWithScore],
        query_bundle: Optional[QueryBundle] = None,
    ) -> List[NodeWithScore]:
        """Async :meth:`_postprocess_nodes` (the embedding calls awaited)."""
        nodes = _scored(nodes)
        if not nodes:
            return []
        if self._vectors is None:
            return [nodes[i] for i in await asyncio.to_thread(self._kept, nodes, query_bundle)]
        return [nodes[i] for i in (await self._aselect(nodes, query_bundle, False)).kept]

"""Token counting that works offline.

The default counter is tiktoken's ``cl100k_base``.  tiktoken downloads its
encodings on first use; this module never does: it never calls ``tiktoken.get_encoding``,
and builds the ``tiktoken.Encoding`` itself from the first of these files that holds
the published encoding (its SHA-256 checked; a file that fails the check is skipped,
never deleted):

1. in tiktoken's cache folder (``TIKTOKEN_CACHE_DIR``, else ``DATA_GYM_CACHE_DIR``,
   else ``data-gym-cache`` in the temporary folder; set to ``""``, as tiktoken reads
   it, there is no cache folder), the file tiktoken caches (named by the SHA-1 of the
   encoding's URL) or the published file under its published name (``cl100k_base.tiktoken``);
2. the copy that llama-index-core ships in ``llama_index/core/_static/tiktoken_cache``
   (found without importing llama-index);
3. otherwise :func:`estimate_tokens`, a documented estimate, with one warning
   (:func:`take_estimate_notice` lets an application say it itself instead).

A caller may pass any counter instead: a ``Callable[[str], int]``, an object with
``encode(text)`` (a tiktoken ``Encoding`` or a Hugging Face tokenizer), or the name
of a tiktoken encoding.  :func:`resolve_token_counter` normalises all of these once,
and checks what a caller's callable returns: a count that is negative, NaN,
infinite or not a number raises :class:`~context_gatekeeper.errors.InvalidInputError`
at the call (a bad count would silently wreck budgets and the deletion guard); a
fractional count is rounded up.
"""

from __future__ import annotations

import binascii
import hashlib
import importlib.util
import logging
import math
import numbers
import os
import re
import tempfile
import threading
import warnings
from collections.abc import Callable, Iterator, Sized
from functools import lru_cache
from pathlib import Path
from typing import Any, Union

from .caching import BoundedCache, text_key
from .errors import InvalidInputError, InvalidTypeError

__all__ = [
    "TokenCounter",
    "DEFAULT_ENCODING",
    "estimate_tokens",
    "load_encoding",
    "estimate_notice",
    "take_estimate_notice",
    "tiktoken_counter",
    "resolve_token_counter",
    "token_floor",
    "word_floor",
]

logger = logging.getLogger(__name__)

TokenCounter = Callable[[str], int]
"""Counts the tokens of one text."""

TokenCounterLike = Union[None, str, TokenCounter, Any]

DEFAULT_ENCODING = "cl100k_base"

_PUBLIC_URL = "https://openaipublic.blob.core.windows.net/encodings/{name}.tiktoken"

# What tiktoken_ext.openai_public builds these encodings from, so they can be
# constructed from a local file without tiktoken's downloader.
_CL100K_PAT = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
_O200K_PAT = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)
_OFFLINE_SPECS: dict[str, dict[str, Any]] = {
    "cl100k_base": {
        "sha256": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
        "pat_str": _CL100K_PAT,
        "special_tokens": {
            "<|endoftext|>": 100257,
            "<|fim_prefix|>": 100258,
            "<|fim_middle|>": 100259,
            "<|fim_suffix|>": 100260,
            "<|endofprompt|>": 100276,
        },
    },
    "o200k_base": {
        "sha256": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
        "pat_str": _O200K_PAT,
        "special_tokens": {"<|endoftext|>": 199999, "<|endofprompt|>": 200018},
    },
}

_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")
_WORDISH = re.compile(r"[^\W\d_]+|\d+|[^\w\s]", re.UNICODE)

_warn_lock = threading.Lock()
_warned_estimate = False


def estimate_tokens(text: str) -> int:
    """Estimate tokens without a tokenizer.

    Each CJK character counts as one token; each remaining word, number run or
    punctuation mark counts as ``ceil(len / 4)`` tokens, at least one.  On English
    and Chinese chat this stays within about 25% of ``cl100k_base``.
    """
    cjk = len(_CJK.findall(text))
    rest = _CJK.sub(" ", text)
    return cjk + sum((len(piece) + 3) // 4 for piece in _WORDISH.findall(rest))


_SEPARATORS_NOT_WHITE = re.compile("[\x1c-\x1f]")  # white space to str.split, not to tiktoken's \s
_WORD_STARTS = re.compile(r"(?:^| )\S")


def word_floor(text: str) -> int:
    r"""At least as few tokens as ``cl100k_base`` and ``o200k_base`` give ``text``: its
    words (``len(text.split())``).

    Both encodings split a text into pieces before they merge bytes, and a token never
    spans two pieces.  In each alternative of their piece patterns, white space follows
    a non-white character only at the piece's end, and only line breaks, never the
    start of another word; so no piece holds parts of two words, and each word costs a
    token at least.  The four separators ``\x1c``-``\x1f`` are white space to
    ``str.split`` but not to the encodings; a text holding one counts only the
    characters that start it or follow a plain space.  A scan costs about a fifteenth of
    an encoding.  ``tests/test_tokens.py`` checks the bound on random Unicode texts.

    >>> word_floor("Redis locks need a TTL."), word_floor("两个词"), word_floor("两个 词\n好")
    (5, 1, 3)
    """
    if _SEPARATORS_NOT_WHITE.search(text) is None:
        return len(text.split())
    return len(_WORD_STARTS.findall(text))


def token_floor(counter: Callable[[str], int]) -> Callable[[str], int] | None:
    """A cheap lower bound of ``counter``'s counts, or None when none is known.

    A counter from :func:`tiktoken_counter` (or :func:`resolve_token_counter` given None
    or an encoding name) has one: :func:`word_floor`.  A caller that must count many
    texts but needs only the counts of the few it may choose (a greedy pick by value per
    token) can rank by the bound first and count a text only when its bound may win
    (:func:`context_gatekeeper.selection.coverage.kept_covering`'s ``floor=``)."""
    floor = getattr(counter, "token_floor", None)
    return floor if callable(floor) else None


def _tiktoken_cache_dirs() -> list[Path]:
    """Where tiktoken itself would look for a cached encoding: none when the variable it
    reads is set to ``""`` (tiktoken's way to switch its cache off)."""
    for var in ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR"):
        if var in os.environ:
            return [Path(os.environ[var])] if os.environ[var] else []
    return [Path(tempfile.gettempdir()) / "data-gym-cache"]


def _llama_index_cache_dir() -> Path | None:
    """llama-index-core's bundled tiktoken cache, located without importing it."""
    try:
        spec = importlib.util.find_spec("llama_index.core")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = Path(location) / "_static" / "tiktoken_cache"
        if candidate.is_dir():
            return candidate
    return None


def _read_ranks(path: Path, sha256: str) -> dict[bytes, int] | None:
    """The token ranks of a ``.tiktoken`` file (a base64 token and its rank per line), or
    ``None`` when there is no such file, it cannot be read, or it is not the published one.

    Only the published file is parsed, and each of its lines holds exactly those two fields,
    so its whitespace-separated fields alternate token, rank: they are decoded in one pass
    (``binascii.a2b_base64`` is what ``base64.b64decode`` calls on bytes), without a Python
    step per line (about 40% less time than splitting each line: 90 -> 53 ms for cl100k_base)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:  # a folder, no permission ...: look further
        logger.warning("ignoring %s: it cannot be read (%s)", path, exc)
        return None
    if hashlib.sha256(data).hexdigest() != sha256:
        logger.warning("ignoring %s: its hash does not match the published encoding", path)
        return None
    fields = data.split()
    return dict(zip(map(binascii.a2b_base64, fields[0::2]), map(int, fields[1::2])))


def _encoding_files(name: str) -> Iterator[Path]:
    """The files that may hold encoding ``name``, in the order they are tried (the module
    docstring); the llama-index copy is looked for only when the others are not usable."""
    cache_key = hashlib.sha1(_PUBLIC_URL.format(name=name).encode()).hexdigest()
    for folder in _tiktoken_cache_dirs():
        yield folder / cache_key
        yield folder / f"{name}.tiktoken"
    bundled = _llama_index_cache_dir()
    if bundled is not None:
        yield bundled / cache_key


@lru_cache(maxsize=None)
def load_encoding(name: str = DEFAULT_ENCODING) -> Any | None:
    """Load a tiktoken encoding with no network call, or return ``None``.

    Only encodings found in a local file holding the published encoding are loaded (see
    the module docstring); the encoding is built here, never by ``tiktoken.get_encoding``
    (which downloads when its cache is off or its cached file is stale), and encodes
    exactly as tiktoken's own.
    """
    try:
        import tiktoken  # deferred: keeps `import context_gatekeeper` cheap
    except ImportError:  # a broken install: fall back to the estimate rather than fail
        return None
    spec = _OFFLINE_SPECS.get(name)
    if spec is None:  # not one we know the published hash and pattern of
        return None
    for path in _encoding_files(name):
        ranks = _read_ranks(path, spec["sha256"])
        if ranks is not None:
            return tiktoken.Encoding(
                name=name,
                pat_str=spec["pat_str"],
                mergeable_ranks=ranks,
                special_tokens=spec["special_tokens"],
            )
    return None


def _exact_count_advice(name: str) -> str:
    """How to make counts of encoding ``name`` exact, offline."""
    return (
        f"install llama-index-core (it ships the encoding), or download {name}.tiktoken "
        f"({_PUBLIC_URL.format(name=name)}) into a folder and set TIKTOKEN_CACHE_DIR to that folder"
    )


def estimate_notice(name: str = DEFAULT_ENCODING) -> str | None:
    """Why token counts of encoding ``name`` are estimates, and how to make them exact; None
    when the encoding loads offline (counts are exact)."""
    if load_encoding(name) is not None:
        return None
    return (
        f"no tiktoken encoding {name} could be loaded offline, so token counts are estimates (a CJK "
        f"character = 1 token, other text ~4 characters a token). To count exactly, {_exact_count_advice(name)}"
    )


def take_estimate_notice(name: str = DEFAULT_ENCODING) -> str | None:
    """:func:`estimate_notice`, for an application that shows it to its user itself (the chat
    prints it at start): the library's one ``RuntimeWarning`` about estimates is then not
    given later in this process.  None when the encoding loads (nothing to say)."""
    global _warned_estimate
    notice = estimate_notice(name)
    if notice is not None:
        with _warn_lock:
            _warned_estimate = True
    return notice


def _warn_estimate_once(name: str) -> None:
    """The one ``RuntimeWarning`` of the process saying counts are estimates (none after
    :func:`take_estimate_notice`)."""
    global _warned_estimate
    if _warned_estimate:
        return
    with _warn_lock:
        if _warned_estimate:
            return
        _warned_estimate = True
    warnings.warn(
        f"context_gatekeeper: no tiktoken encoding could be loaded offline; token counts are estimates "
        f"(CJK character = 1 token, other text ~4 characters a token). To count exactly, "
        f"{_exact_count_advice(name)}; or pass token_counter=.",
        RuntimeWarning,
        stacklevel=4,
    )


def _estimating_counter(name: str) -> TokenCounter:
    """:func:`estimate_tokens`, warning once on first use that encoding ``name`` is missing."""

    def estimate(text: str) -> int:
        _warn_estimate_once(name)
        return estimate_tokens(text)

    estimate.__name__ = f"estimate_{name}"
    estimate._checked_counter = True  # type: ignore[attr-defined]  # an estimate is always a count >= 0
    return estimate


WHITESPACE_PIECE = 10_000
"""The longest run of whitespace encoded in one piece (:func:`encoded_length`)."""
_LONG_WHITESPACE = re.compile(r"\s{%d,}" % WHITESPACE_PIECE)


def encoded_length(encode: Callable[[str], Any], text: str) -> int:
    """``len(encode(text))``, with runs of whitespace longer than :data:`WHITESPACE_PIECE`
    characters encoded in pieces of at most that length: tiktoken's pattern overflows its
    stack (a ``PanicException``, which ``except Exception`` does not catch) on a run of about
    a million spaces, tabs or no-break spaces, as a scraped page or a tool's output may
    hold.  Where a run is cut, the count may be a token or so above the whole text's; every
    other text is encoded whole, so its count is exact."""
    if len(text) <= WHITESPACE_PIECE or _LONG_WHITESPACE.search(text) is None:
        return len(encode(text))
    total, start = 0, 0
    for run in _LONG_WHITESPACE.finditer(text):
        if run.start() > start:
            total += len(encode(text[start : run.start()]))
        total += sum(len(encode(text[i : min(i + WHITESPACE_PIECE, run.end())]))
                     for i in range(run.start(), run.end(), WHITESPACE_PIECE))
        start = run.end()
    return total + (len(encode(text[start:])) if start < len(text) else 0)


COUNT_CACHE_SIZE = 65_536
"""Texts whose token counts each encoding keeps (:func:`tiktoken_counter`): about 0.22 kB
each, some 15 MB when full."""

_count_caches: dict[str, BoundedCache[str, int]] = {}
_count_caches_lock = threading.Lock()


def _counts_cache(name: str) -> BoundedCache[str, int]:
    """The token counts of encoding ``name``, by text: one cache per encoding, shared by
    every counter, object and thread of the process."""
    with _count_caches_lock:
        cache = _count_caches.get(name)
        if cache is None:
            cache = _count_caches[name] = BoundedCache(maxsize=COUNT_CACHE_SIZE)
        return cache


def tiktoken_counter(name: str = DEFAULT_ENCODING) -> TokenCounter:
    """A counter for tiktoken encoding ``name``; the estimate if it cannot be loaded offline.

    Counts are kept per text (:data:`COUNT_CACHE_SIZE` texts per encoding, shared by every
    counter of the process), so a message is encoded once however often it is counted."""
    encoding = load_encoding(name)
    if encoding is None:
        return _estimating_counter(name)
    encode = encoding.encode_ordinary
    cache = _counts_cache(name)

    def count(text: str) -> int:
        return cache.get_or_compute(text_key(text), lambda: encoded_length(encode, text))

    count.__name__ = f"count_{name}"
    count._checked_counter = True  # type: ignore[attr-defined]  # len() is always a valid count
    if name in _OFFLINE_SPECS:  # the encodings whose piece patterns word_floor was checked against
        count.token_floor = word_floor  # type: ignore[attr-defined]
    return count


def _checked(counter: Callable[[str], Any]) -> TokenCounter:
    """``counter``, refusing a result that is not a finite number >= 0 (fractions round up)."""
    name = getattr(counter, "__name__", type(counter).__name__)

    def count(text: str) -> int:
        try:
            result = counter(text)
        except (TypeError, AttributeError) as error:  # a counter of message lists (trim_messages'), or of other input
            raise InvalidInputError(
                f"token counter {name!r} failed on a text of {len(text)} characters ({type(error).__name__}: {error}); "
                "a token_counter counts the tokens of ONE text: it is called with a str and returns an int (a "
                "trim_messages counter, which takes a list of messages, does not fit). Pass such a function, a "
                "tiktoken encoding name, or None for the default (tiktoken cl100k_base)."
            ) from error
        # typeshed's numbers.Real has < but not >=, and a __ceil__ typed as a protocol: compare
        # with < and convert with int() (exact for every real number, finite here).
        if isinstance(result, numbers.Integral) and not isinstance(result, bool) and int(result) >= 0:
            return int(result)
        if isinstance(result, numbers.Real) and not isinstance(result, bool) and math.isfinite(result) and not result < 0:
            return int(math.ceil(result))
        raise InvalidInputError(
            f"token counter {name!r} returned {result!r} for a text of {len(text)} characters; a token counter "
            "must return a number of tokens >= 0 (not negative, NaN or infinite). Fix the counter or pass "
            "token_counter=None for the default (tiktoken cl100k_base)."
        )

    count.__name__ = f"checked_{name}"
    count._checked_counter = True  # type: ignore[attr-defined]  # mypy types no attributes set on a function
    return count


def _encoding_counter(encode: Callable[[str], Any], owner: str) -> TokenCounter:
    """``len(encode(text))`` (:func:`encoded_length`) for an object's ``encode``, refusing a
    result that has no length (``None``, a number) with :class:`InvalidTypeError`."""

    def tokens(text: str) -> Any:
        encoded = encode(text)
        if not isinstance(encoded, Sized):
            raise InvalidTypeError(
                f"token counter {owner}.encode() returned {type(encoded).__name__} for a text of {len(text)} "
                "characters; encode() must return the tokens (a list), or pass a callable(str) -> int as token_counter"
            )
        return encoded

    return lambda text: encoded_length(tokens, text)


def resolve_token_counter(counter: TokenCounterLike = None) -> TokenCounter:
    """Normalise the accepted forms of a token counter into ``Callable[[str], int]``.

    ``None`` gives the default (``cl100k_base``); a string names a tiktoken
    encoding; an object with ``encode`` is used as ``len(obj.encode(text))``;
    any other callable is wrapped so that a count below 0, NaN or infinite, or a counter that
    cannot take a str (a ``TypeError`` or ``AttributeError`` from it: a counter of message
    lists), raises :class:`~context_gatekeeper.errors.InvalidInputError` when it happens.

    >>> resolve_token_counter(lambda text: -1)("hello")
    Traceback (most recent call last):
    ...
    context_gatekeeper.errors.InvalidInputError: token counter '<lambda>' returned -1 for a text of 5 characters; ...
    """
    if counter is None:
        return tiktoken_counter(DEFAULT_ENCODING)
    if isinstance(counter, str):
        if counter not in _OFFLINE_SPECS:
            raise InvalidInputError(
                f"unknown token encoding {counter!r}; use one of {sorted(_OFFLINE_SPECS)} "
                "or pass a callable token_counter"
            )
        return tiktoken_counter(counter)
    if isinstance(counter, type):
        raise InvalidTypeError(
            f"token_counter must be an instance or a function, not the class {counter.__name__}; "
            f"pass {counter.__name__}() (an instance) or a callable(str) -> int"
        )
    encode = getattr(counter, "encode_ordinary", None) or getattr(counter, "encode", None)
    if callable(encode):
        return _encoding_counter(encode, type(counter).__name__)
    if callable(counter):
        return counter if getattr(counter, "_checked_counter", False) else _checked(counter)
    raise InvalidTypeError(
        "token_counter must be None, an encoding name, a callable(str) -> int, "
        f"or an object with encode(); got {type(counter).__name__}"
    )

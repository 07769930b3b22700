"""Offline token counting (docs/architecture.md#the-foundation): tiktoken encodings without a network call,
the llama-index-core bundled copy as a source, and the documented estimate as a last resort."""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import shutil
import socket
import tempfile
import warnings
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from context_gatekeeper import tokens
from context_gatekeeper.errors import InvalidInputError
from context_gatekeeper.tokens import (
    DEFAULT_ENCODING,
    estimate_tokens,
    load_encoding,
    resolve_token_counter,
    tiktoken_counter,
)

tiktoken = pytest.importorskip("tiktoken")

SAMPLES = [
    "Hello, world!",
    "How do I size a Redis lock TTL?  It's 30s -- isn't it?",
    "Redis 锁续租为什么会脑裂？",
    "async def main():\n    await asyncio.gather(*tasks)\n\n\tprint(f'{x!r}')",
    "Numbers 1234567 and 3.11.2, e-mail a@b.co, URL https://example.com/a?b=c",
    "   leading and trailing spaces   \n\n",
    "emoji 😀👍🏽 and ümlauts, naïve café, 日本語のテキスト, 한국어",
    "I'm sure they'll say we've done it; you'd think he's ok.",
]


def _cache_key(name: str) -> str:
    """tiktoken's file name for a cached encoding: sha1 of its public URL."""
    url = f"https://openaipublic.blob.core.windows.net/encodings/{name}.tiktoken"
    return hashlib.sha1(url.encode()).hexdigest()


def _bundled_dir() -> Path:
    spec = importlib.util.find_spec("llama_index.core")
    if spec is None:
        pytest.skip("llama-index-core is not installed")
    for location in spec.submodule_search_locations or ():
        candidate = Path(location) / "_static" / "tiktoken_cache"
        if candidate.is_dir():
            return candidate
    pytest.skip("llama-index-core ships no tiktoken cache")


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """Any attempt to look up a host, open a connection or download an encoding through
    tiktoken fails the test loudly."""
    import tiktoken.load

    def refuse(*args, **kwargs):
        raise AssertionError("token counting tried to use the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(tiktoken.load, "read_file", refuse)  # what tiktoken downloads through


@pytest.fixture
def fresh_loader(monkeypatch):
    """Clear load_encoding's cache, tiktoken's own (as in a new process) and the once-only
    warning flag around a test."""
    import tiktoken.registry

    load_encoding.cache_clear()
    monkeypatch.setattr(tiktoken.registry, "ENCODINGS", {})
    monkeypatch.setattr(tokens, "_warned_estimate", False)
    yield
    load_encoding.cache_clear()


@pytest.fixture
def empty_tiktoken_cache(monkeypatch, tmp_path):
    """tiktoken's own cache holds nothing, so only the bundled copy can be used."""
    empty = tmp_path / "empty-tiktoken-cache"
    empty.mkdir()
    monkeypatch.setattr(tokens, "_tiktoken_cache_dirs", lambda: [empty])
    return empty


@pytest.fixture
def no_encoding_anywhere(monkeypatch, empty_tiktoken_cache, fresh_loader):
    monkeypatch.setattr(tokens, "_llama_index_cache_dir", lambda: None)


@pytest.fixture(scope="module")
def reference():
    """tiktoken's own encodings (its official patterns and special tokens), built from the
    bundled files by pointing tiktoken's cache at them: an independent reference."""
    bundled = _bundled_dir()
    mp = pytest.MonkeyPatch()
    mp.setenv("TIKTOKEN_CACHE_DIR", str(bundled))
    mp.setattr(socket.socket, "connect", lambda *a, **k: (_ for _ in ()).throw(AssertionError("network")))
    try:
        return {name: tiktoken.get_encoding(name) for name in ("cl100k_base", "o200k_base")}
    finally:
        mp.undo()


# -- the bundled llama-index copy ------------------------------------------------------


def test_bundled_cache_is_found():
    found = tokens._llama_index_cache_dir()
    assert found == _bundled_dir()
    assert (found / _cache_key("cl100k_base")).is_file()


@pytest.mark.usefixtures("empty_tiktoken_cache", "fresh_loader")
@pytest.mark.parametrize("name", ["cl100k_base", "o200k_base"])
def test_encoding_built_from_bundled_file_matches_tiktoken(name, reference):
    ours = load_encoding(name)
    assert ours is not None
    ref = reference[name]
    assert ours.n_vocab == ref.n_vocab
    assert ours.special_tokens_set == ref.special_tokens_set
    for special in ref.special_tokens_set:
        assert ours.encode(special, allowed_special="all") == ref.encode(special, allowed_special="all")
    for text in SAMPLES:
        assert ours.encode_ordinary(text) == ref.encode_ordinary(text), text


@pytest.mark.usefixtures("empty_tiktoken_cache", "fresh_loader")
def test_default_counter_counts_like_cl100k_base(reference):
    count = resolve_token_counter(None)
    # "Hello" "," " world" "!" -- the well-known cl100k_base split.
    assert count("Hello, world!") == 4
    assert count("hello world") == 2
    for text in SAMPLES:
        assert count(text) == len(reference["cl100k_base"].encode_ordinary(text))


@pytest.mark.usefixtures("empty_tiktoken_cache", "fresh_loader")
@given(text=st.text(max_size=60))
def test_counter_agrees_with_tiktoken_on_any_text(reference, text):
    count = tiktoken_counter("cl100k_base")
    assert count(text) == len(reference["cl100k_base"].encode_ordinary(text))


@pytest.mark.usefixtures("empty_tiktoken_cache", "fresh_loader")
def test_special_token_text_is_counted_as_ordinary_text(reference):
    # User text may contain "<|endoftext|>"; counting it must not raise (tiktoken's
    # encode() would) and must not collapse it into one special token.
    count = resolve_token_counter("cl100k_base")
    text = "see <|endoftext|> here"
    assert count(text) == len(reference["cl100k_base"].encode_ordinary(text))
    assert count("<|endoftext|>") > 1


@pytest.mark.usefixtures("fresh_loader")
def test_o200k_by_name(reference, empty_tiktoken_cache):
    count = resolve_token_counter("o200k_base")
    for text in SAMPLES:
        assert count(text) == len(reference["o200k_base"].encode_ordinary(text))


@pytest.mark.usefixtures("fresh_loader")
def test_tiktoken_own_cache_is_used_first(monkeypatch, tmp_path, reference):
    cache = tmp_path / "tiktoken-cache"
    cache.mkdir()
    key = _cache_key("cl100k_base")
    shutil.copy(_bundled_dir() / key, cache / key)
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(cache))
    monkeypatch.setattr(tokens, "_llama_index_cache_dir", lambda: pytest.fail("bundled copy consulted"))
    assert tokens._tiktoken_cache_dirs() == [cache]
    encoding = load_encoding("cl100k_base")
    assert encoding is not None
    for text in SAMPLES:
        assert encoding.encode_ordinary(text) == reference["cl100k_base"].encode_ordinary(text), text


@pytest.mark.usefixtures("fresh_loader")
@pytest.mark.parametrize("variable", ["TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR"])
def test_a_cache_folder_set_to_empty_means_no_cache_folder_and_no_download(monkeypatch, tmp_path, variable, reference):
    """tiktoken reads an empty TIKTOKEN_CACHE_DIR as "cache off" and downloads; the default
    folder's file is not used, and the encoding comes from the bundled copy or not at all."""
    default = tmp_path / "data-gym-cache"
    default.mkdir()
    shutil.copy(_bundled_dir() / _cache_key("cl100k_base"), default / _cache_key("cl100k_base"))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.delenv("TIKTOKEN_CACHE_DIR", raising=False)
    monkeypatch.delenv("DATA_GYM_CACHE_DIR", raising=False)
    monkeypatch.setenv(variable, "")
    encoding = load_encoding("cl100k_base")  # the bundled copy
    assert encoding is not None
    assert [encoding.encode_ordinary(t) for t in SAMPLES] == [reference["cl100k_base"].encode_ordinary(t) for t in SAMPLES]
    load_encoding.cache_clear()
    monkeypatch.setattr(tokens, "_llama_index_cache_dir", lambda: None)
    assert load_encoding("cl100k_base") is None  # no bundled copy: the estimate, not a download
    assert tokens._tiktoken_cache_dirs() == []


@pytest.mark.usefixtures("fresh_loader")
def test_a_stale_cached_file_is_skipped_kept_and_never_downloaded_again(monkeypatch, tmp_path, reference, caplog):
    """A truncated file in tiktoken's cache: tiktoken would delete it and download; here it is
    passed over (left as it is) for the bundled copy, which counts exactly as tiktoken does."""
    cache = tmp_path / "tiktoken-cache"
    cache.mkdir()
    stale = cache / _cache_key("cl100k_base")
    stale.write_bytes((_bundled_dir() / _cache_key("cl100k_base")).read_bytes()[:1000])
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(cache))
    with caplog.at_level(logging.WARNING, logger=tokens.__name__):
        count = resolve_token_counter(None)
        assert [count(t) for t in SAMPLES] == [len(reference["cl100k_base"].encode_ordinary(t)) for t in SAMPLES]
    assert "hash does not match" in caplog.text and stale.stat().st_size == 1000
    load_encoding.cache_clear()
    monkeypatch.setattr(tokens, "_llama_index_cache_dir", lambda: None)
    assert load_encoding("cl100k_base") is None


@pytest.mark.usefixtures("fresh_loader")
@pytest.mark.parametrize("name", ["cl100k_base", "o200k_base"])
def test_the_published_file_under_its_published_name_is_found(monkeypatch, tmp_path, name, reference):
    """What the estimate warning advises: the downloaded <name>.tiktoken in TIKTOKEN_CACHE_DIR."""
    folder = tmp_path / "encodings"
    folder.mkdir()
    shutil.copy(_bundled_dir() / _cache_key(name), folder / f"{name}.tiktoken")
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(folder))
    monkeypatch.setattr(tokens, "_llama_index_cache_dir", lambda: None)
    encoding = load_encoding(name)
    assert encoding is not None
    for text in SAMPLES:
        assert encoding.encode_ordinary(text) == reference[name].encode_ordinary(text), text


@pytest.mark.usefixtures("fresh_loader")
def test_a_file_under_the_published_name_that_is_not_the_published_one_is_refused(monkeypatch, tmp_path, caplog):
    folder = tmp_path / "encodings"
    folder.mkdir()
    (folder / "cl100k_base.tiktoken").write_bytes(b"SGVsbG8= 0\nd29ybGQ= 1\n")
    (folder / _cache_key("cl100k_base")).mkdir()  # not a file: passed over too
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(folder))
    monkeypatch.setattr(tokens, "_llama_index_cache_dir", lambda: None)
    with caplog.at_level(logging.WARNING, logger=tokens.__name__):
        assert load_encoding("cl100k_base") is None
    assert "hash does not match" in caplog.text and "cannot be read" in caplog.text


def test_tiktoken_cache_dirs_follow_tiktoken_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("TIKTOKEN_CACHE_DIR", raising=False)
    monkeypatch.setenv("DATA_GYM_CACHE_DIR", str(tmp_path / "gym"))
    assert tokens._tiktoken_cache_dirs() == [tmp_path / "gym"]
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "tt"))
    assert tokens._tiktoken_cache_dirs() == [tmp_path / "tt"]  # TIKTOKEN_CACHE_DIR wins
    monkeypatch.delenv("TIKTOKEN_CACHE_DIR")
    monkeypatch.delenv("DATA_GYM_CACHE_DIR")
    (default,) = tokens._tiktoken_cache_dirs()
    assert default.name == "data-gym-cache"


@pytest.mark.usefixtures("fresh_loader")
def test_tampered_bundled_file_is_refused(monkeypatch, tmp_path, empty_tiktoken_cache, caplog):
    fake = tmp_path / "fake-bundle"
    fake.mkdir()
    (fake / _cache_key("cl100k_base")).write_bytes(b"SGVsbG8= 0\nd29ybGQ= 1\n")
    monkeypatch.setattr(tokens, "_llama_index_cache_dir", lambda: fake)
    with caplog.at_level(logging.WARNING, logger=tokens.__name__):
        assert load_encoding("cl100k_base") is None
    assert "hash does not match" in caplog.text


def test_unknown_encoding_name_loads_nothing():
    assert load_encoding("gpt2") is None


# -- the estimate ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("   \n\t ", 0),
        ("a", 1),  # one word of 1..4 characters: one token
        ("abcd", 1),
        ("abcde", 2),  # ceil(5 / 4)
        ("internationalization", 5),  # 20 characters
        ("Hello, world!", 6),  # Hello(2) ,(1) world(2) !(1)
        ("锁续租", 3),  # each CJK character is one token
        ("Redis 锁", 3),  # redis(2) + 锁(1)
        ("12345", 2),  # a digit run: ceil(5 / 4)
        ("abc123", 2),  # letters and digits are separate pieces
        ("max_retries", 3),  # the underscore is not counted: max(1) + retries(2)
        ("...", 3),  # each punctuation mark is a piece
        ("日本語のテキスト", 8),  # kana count like Han characters
    ],
)
def test_estimate_tokens_follows_its_documented_rule(text, expected):
    assert estimate_tokens(text) == expected


@given(st.text(), st.text())
def test_estimate_is_non_negative_additive_over_spaces_and_monotone(a, b):
    ea, eb = estimate_tokens(a), estimate_tokens(b)
    assert ea >= 0 and eb >= 0
    # Whitespace separates pieces, so a space-joined text costs exactly the sum.
    assert estimate_tokens(a + " " + b) == ea + eb
    # Gluing two texts can only merge pieces: never fewer tokens than either part,
    # never more than both.
    joined = estimate_tokens(a + b)
    assert max(ea, eb) <= joined <= ea + eb


@given(st.text(min_size=1))
def test_estimate_counts_something_for_visible_text(text):
    if any(not ch.isspace() and ch != "_" for ch in text):
        assert estimate_tokens(text) >= 1


@pytest.mark.usefixtures("no_encoding_anywhere")
def test_estimate_fallback_warns_exactly_once():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        count = resolve_token_counter(None)
        again = tiktoken_counter("o200k_base")
        results = [count("Hello, world!"), count("锁续租"), again("abcde"), count("x")]
    assert results == [6, 3, 2, 1]  # the estimate, not tiktoken (which gives 4 for the first)
    runtime = [w for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(runtime) == 1
    message = str(runtime[0].message)
    assert "estimate" in message and "token_counter" in message  # says what to do
    assert "cl100k_base.tiktoken" in message and "TIKTOKEN_CACHE_DIR" in message  # names the file it looks for


@pytest.mark.usefixtures("no_encoding_anywhere")
def test_an_application_that_shows_the_estimate_notice_itself_gets_no_warning_later():
    notice = tokens.take_estimate_notice()
    assert notice is not None and "estimates" in notice and "cl100k_base.tiktoken" in notice
    assert "token_counter" not in notice  # advice for the user of an application, not its programmer
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert resolve_token_counter(None)("Hello, world!") == 6
    assert not caught


@pytest.mark.usefixtures("empty_tiktoken_cache", "fresh_loader")
def test_there_is_no_estimate_notice_when_the_encoding_loads():
    assert tokens.estimate_notice() is None and tokens.take_estimate_notice() is None
    assert tokens._warned_estimate is False  # nothing was taken over


@pytest.mark.usefixtures("no_encoding_anywhere")
def test_estimate_fallback_does_not_warn_before_use():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        resolve_token_counter(None)
    assert not caught


# -- resolve_token_counter ---------------------------------------------------------------


def test_callable_is_used_with_its_counts_checked():
    assert resolve_token_counter(len)("abc") == 3

    def words(text: str) -> int:
        return len(text.split())

    counter = resolve_token_counter(words)
    assert counter("a b c") == 3
    assert resolve_token_counter(counter) is counter  # resolving twice wraps once
    assert resolve_token_counter(lambda text: 2.5)("x") == 3  # a fraction of a token rounds up


@pytest.mark.parametrize("bad", [-1, -21_000, float("nan"), float("inf"), -0.5, "3", None, True])
def test_a_counter_returning_a_negative_nan_or_non_number_count_is_rejected(bad):
    counter = resolve_token_counter(lambda text: bad)
    with pytest.raises(InvalidInputError, match=r"token counter '<lambda>' returned .* must return a number of tokens >= 0"):
        counter("hello")


def test_a_negative_counter_cannot_make_the_gatekeeper_report_negative_tokens():
    from context_gatekeeper import ContextGatekeeper

    gatekeeper = ContextGatekeeper(token_budget=100, token_counter=lambda text: -1000)
    with pytest.raises(InvalidInputError, match="returned -1000"):
        gatekeeper.add_turn("What is the GDP of Iceland?", "About 28 billion USD.")
        gatekeeper.select("And Ireland?")


def test_object_with_encode_counts_its_output():
    class CharTokenizer:  # e.g. a Hugging Face tokenizer
        def encode(self, text):
            return list(text)

    assert resolve_token_counter(CharTokenizer())("hello") == 5


def test_encode_ordinary_is_preferred_over_encode():
    class Encoding:  # like tiktoken.Encoding: encode() would reject special tokens
        def encode(self, text):
            raise AssertionError("encode() used")

        def encode_ordinary(self, text):
            return text.split()

    assert resolve_token_counter(Encoding())("a b <|endoftext|>") == 3


@pytest.mark.usefixtures("empty_tiktoken_cache", "fresh_loader")
def test_a_tiktoken_encoding_object_is_accepted(reference):
    encoding = reference["cl100k_base"]
    count = resolve_token_counter(encoding)
    assert count("Hello, world!") == 4
    assert count("<|endoftext|>") == len(encoding.encode_ordinary("<|endoftext|>"))

@pytest.mark.parametrize("blank", [" ", "\t", "\u00a0"])
def test_a_million_character_run_of_whitespace_is_counted_not_a_crash(reference, blank):
    # tiktoken's pattern overflows its stack on such a run (a PanicException, no Exception)
    encoding = reference["cl100k_base"]
    text = "Summarise this page:" + blank * 1_100_000 + "END"
    for count in (tiktoken_counter(DEFAULT_ENCODING), resolve_token_counter(encoding)):
        whole_short = len(encoding.encode_ordinary("Summarise this page:" + blank * 20_000 + "END"))
        assert count(text) >= whole_short  # the long run costs at least what a shorter one does


def test_text_with_a_long_whitespace_run_counts_within_a_token_of_the_whole_per_cut(reference):
    encode = reference["cl100k_base"].encode_ordinary
    text = "a" + " " * (3 * tokens.WHITESPACE_PIECE + 7) + "b"
    exact = len(encode(text))
    assert exact <= tokens.encoded_length(encode, text) <= exact + 4
    prose = "hello world, " * 2_000  # longer than a piece, no long run: encoded whole
    assert tokens.encoded_length(encode, prose) == len(encode(prose))



@pytest.mark.parametrize("bad", [42, 3.5, b"cl100k_base", ["cl100k_base"], object(), True])
def test_other_types_are_rejected_with_a_clear_error(bad):
    with pytest.raises(TypeError, match="token_counter must be") as info:
        resolve_token_counter(bad)
    assert type(bad).__name__ in str(info.value)


def test_object_whose_encode_is_not_callable_is_rejected():
    class Odd:
        encode = "not a method"

    with pytest.raises(TypeError, match="token_counter must be"):
        resolve_token_counter(Odd())


@pytest.mark.parametrize("name", ["gpt2", "cl100k", "CL100K_BASE", ""])
def test_unknown_encoding_names_are_rejected(name):
    with pytest.raises(ValueError, match="unknown token encoding") as info:
        resolve_token_counter(name)
    message = str(info.value)
    assert "cl100k_base" in message and "o200k_base" in message  # lists the choices


def test_default_encoding_is_cl100k_base():
    assert DEFAULT_ENCODING == "cl100k_base"


def test_a_tiktoken_counter_encodes_each_text_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Counts are kept per text and shared by every counter of an encoding, so a message
    counted on every call, by several objects, is encoded once."""
    real = load_encoding(DEFAULT_ENCODING)
    if real is None:
        pytest.skip("no tiktoken encoding offline: the estimate keeps nothing")
    encoded: list[str] = []

    class CountingEncoding:
        def encode_ordinary(self, text: str) -> list[int]:
            encoded.append(text)
            return real.encode_ordinary(text)

    monkeypatch.setattr(tokens, "load_encoding", lambda name: CountingEncoding())
    monkeypatch.setattr(tokens, "_count_caches", {})
    first, second = tiktoken_counter(DEFAULT_ENCODING), tiktoken_counter(DEFAULT_ENCODING)
    text = "How long should a Redis lock TTL be?"
    assert [first(text), second(text), first(text)] == [len(real.encode_ordinary(text))] * 3
    assert encoded == [text]
    assert second("another text") == len(real.encode_ordinary("another text"))
    assert encoded == [text, "another text"]


@pytest.mark.parametrize("name", ["cl100k_base", "o200k_base"])
def test_ranks_read_in_one_pass_equal_a_line_by_line_parse(name):
    """The bundled file's fields are decoded in one pass: the same ranks, in the same order,
    as decoding it line by line with base64 (what tiktoken's own loader does)."""
    import base64

    path = _bundled_dir() / _cache_key(name)
    expected = {}
    for line in path.read_bytes().splitlines():
        if line:
            token, rank = line.split()
            expected[base64.b64decode(token)] = int(rank)
    ranks = tokens._read_ranks(path, tokens._OFFLINE_SPECS[name]["sha256"])
    assert ranks is not None and list(ranks.items()) == list(expected.items())


# Texts built to break the word floor: every kind of white space (the separators \x1c-\x1f
# that str.split splits on and tiktoken does not, line breaks after punctuation,
# Unicode spaces), punctuation runs, digits, CJK, letters with marks.
_FLOOR_ALPHABET = st.sampled_from(
    list(" \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f\x85\xa0\u2003\u2028\u3000")
    + list("!?.,;:'\"-_/()[]{}<>@#$%^&*=+`~|\\")
    + list("aZé0129两词ü\u0301😀")
)


@given(text=st.one_of(st.text(max_size=80), st.text(_FLOOR_ALPHABET, max_size=80)))
def test_word_floor_never_exceeds_either_encodings_count(reference, text):
    for encoding in reference.values():
        assert tokens.word_floor(text) <= len(encoding.encode_ordinary(text)), text


def test_word_floor_is_close_on_prose_and_offered_only_for_checked_encodings(reference):
    for text in SAMPLES:
        assert tokens.word_floor(text) <= len(reference["cl100k_base"].encode_ordinary(text))
    prose = SAMPLES[1]
    assert tokens.word_floor(prose) >= len(reference["cl100k_base"].encode_ordinary(prose)) // 2
    assert tokens.word_floor("a\x1cb c") == 2  # split would say 3 words: "a\x1cb" may be one piece
    assert tokens.token_floor(resolve_token_counter(None)) is tokens.word_floor
    assert tokens.token_floor(resolve_token_counter("o200k_base")) is tokens.word_floor
    assert tokens.token_floor(resolve_token_counter(lambda text: len(text))) is None


def test_a_counter_that_cannot_take_a_text_is_the_librarys_error_and_changes_nothing():
    """A trim_messages-style counter (it reads a list of messages) fails on a str with a raw
    AttributeError: the core says what a token counter is, and the gatekeeper keeps its turns."""
    from context_gatekeeper import ContextGatekeeper

    def trim_counter(messages):
        return sum(len(m.content) for m in messages)

    count = tokens.resolve_token_counter(trim_counter)
    with pytest.raises(InvalidInputError, match="counts the tokens of ONE text") as raised:
        count("How long should a Redis lock TTL be?")
    assert isinstance(raised.value.__cause__, AttributeError)
    gk = ContextGatekeeper(token_counter=trim_counter)
    with pytest.raises(InvalidInputError, match="trim_counter"):
        gk.add_turn("How long should a Redis lock TTL be?", "Longer than the longest job.")
    assert len(gk) == 0

    def failing(text):
        raise ConnectionError("the provider's counting endpoint is down")

    with pytest.raises(ConnectionError):  # only a counter that cannot take a str is rewrapped
        tokens.resolve_token_counter(failing)("hello")

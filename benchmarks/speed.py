"""Speed and memory of ``ContextGatekeeper`` against the report's recompute-everything baseline.

This is a script that prints figures, not a test.  Run it from a checkout with the
package installed (``pip install -e .``)::

    python benchmarks/speed.py                     # sizes 50, 300, 1000, 10000
    python benchmarks/speed.py --quick             # sizes 50, 300 only
    python benchmarks/speed.py --json speed.json   # also write the figures as JSON
    python benchmarks/speed.py --plot docs/img     # also draw speed_latency.png (needs matplotlib)
    python benchmarks/speed.py --real-only         # only the real-text row (LoCoMo)
    python benchmarks/speed.py --lists             # only topic_gate/gate_messages vs trim_messages
    python benchmarks/speed.py --lists --postprocessor --scale  # these sections, each with its defaults

The section flags (``--scale``, ``--postprocessor``, ``--lists``, ``--semantic``) each run their
section, every one given, and nothing else; ``--json`` then writes their figures.

Workload
--------
Everything is synthetic and deterministic: one ``random.Random(seed)`` drives it all,
so the same ``--seed`` gives the same texts, queries and (up to timer noise) figures.

* **Vocabulary** of about 5,000 terms, half Chinese and half English/technical.
  Chinese words are 2-3 characters drawn from a fixed pool of common characters.
  English terms are pronounceable lowercase words (plus a list of real technical
  words), some ``snake_case`` identifiers, some ``dotted.names`` and some version
  numbers (``3.11.7``, ``v2.4``).
* **Zipf-like frequencies**: the vocabulary is ranked once and a global
  ``1/rank`` distribution supplies the background words (its head behaves like
  stop words).  Each **topic** is a random subset of about 200 terms with its own
  Zipf ranking; a turn draws about 65% of its terms from the current topic and
  the rest from the background.
* **Conversation**: the topic changes every 5-15 turns; about 20% of switches
  return to a topic seen before, the rest open a new one.  A turn is a user
  message of about 30 tokens and an assistant message of about 70 (cl100k_base
  tokens, +/- 25%).  Texts join English terms with spaces and consecutive
  Chinese words with nothing, with punctuation (，。, . ?) every few terms, so the
  text reads like code-switched technical chat.  The texts hold no discourse
  cues (这个, 它, 回到, "this", "back to", ...): characters and words that would form
  them are kept out, so both gates decide on lexical overlap alone.
* **Queries** of about 15 tokens: 70% from the topic of the last turn, 30% from a
  topic visited earlier.  Each history size gets its own query set.
* History size ``n`` uses the first ``n`` turns of one conversation generated
  for the largest size.

Figures
-------
For each history size (number of turns added before querying):

* **add_turn**: median and p95 microseconds of one ``add_turn(user, assistant)``
  call while building the history from empty (so the 10,000 figure covers every
  size from 0 to 10,000).  This includes the token counting each class does.
* **explain / select latency**: median and p95 milliseconds of
  ``explain(query)`` (the full path: scoring, budget packing, the explanation)
  and of ``select(query)``, timed with ``time.perf_counter_ns`` around each
  call, after one warm-up query.  **cold** is that first query's time (it
  includes any index the class builds lazily).  ``explain`` and ``select`` get
  different queries (and neither gets the warm-up one), so a per-query cache
  cannot flatter either.  The select table also shows the mean number of turns
  each class kept, so the two are seen doing comparable work.  The baseline recomputes
  everything per call, so it is bounded: at sizes of ``--baseline-big-size`` or
  more it gets ``--baseline-big-queries`` queries (30 by default), and at every
  size it stops once a measurement has taken ``--baseline-cap-s`` seconds (60).
  The ``n`` column says how many queries were actually timed.
* **x faster**: baseline median / library median for the same call at that size
  (when bounded, the baseline's queries are a prefix of the library's).
* **memory**: with ``tracemalloc``, in a separate untimed build: memory still
  allocated after building the history (*current*), the peak during the build,
  and the peak during one ``explain`` afterwards, all relative to the moment
  before the gatekeeper was created.  The turn texts exist before the build and
  are not counted unless the class copies them; memory allocated inside native
  extensions (tiktoken's Rust code) is invisible to tracemalloc.

Real text
---------
Besides the synthetic sizes, one row on real conversation text: the longest LoCoMo
conversation of the development data (``../shared/data/locomo.dev.jsonl.xz``, or
``--data DIR``; skipped with a note when absent, or with ``--no-real``).  Its turns
are added in order (``add_turn`` timed), then ``explain`` is timed on every question
asked about that conversation, for the library and the report as written (unbounded:
the conversation is a few hundred turns).

The garbage collector stays enabled (as in real use); ``gc.collect()`` runs
before each measurement.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import importlib.util
import itertools
import json
import math
import os
import platform
import random
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# About 400 common Chinese characters; words are 2-3 of them.
CJK_POOL = (
    "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要下以生会自着去之过家学对"
    "可她里后小么心多天而能好都然没日于起还发成事只作当想看文无开手十用主行方又如前所本见经头面公同"
    "三已老从动两长知民样现分将外但身些与高意进把法此实回二理美点月明社题重新线内数正反原利比或质气"
    "第向命变条结解问建系军很情者最立代通并提直党程展五果料象员革位入常总次品式活设及管特件求基资边"
    "流路级少图山统接较组计别角期根论运农指几九区强放决西被干做必战先则任取据处队南给色光门即保治北"
    "造百规热领七海口东导器压志世金增争济阶油思术极交受联什认六共权收证改清己再采转更单风切打白教速"
    "花带安场车例真务具万每目至达走积示议声报斗完类八离华名确才科张信马节话米整空元况今集温传土许步"
    "群广石记需段研界拉林律叫且究观越织装影算低持音众书布复容儿须际商非验连断深难近矿千周委素技备半"
    "办青省列习响约支般史感劳便团往酸历市克何除消构府称太准精值号率族维划选标写存候毛亲快效斯院查江"
    "型眼王按格养易置派层片始却专状育厂京识适属圆包火住调满县局照参红细引听该铁价严"
)

TECH_WORDS = (
    "cache index token latency kernel tensor query budget buffer thread socket schema "
    "router vector embedding batch shard replica commit branch rebase merge patch deploy "
    "cluster node pod container image registry pipeline stream queue worker scheduler "
    "timeout retry backoff proxy gateway session cookie header payload json yaml config "
    "logger metric trace span profile heap stack pointer mutex lock async await future "
    "promise callback handler middleware plugin adapter driver codec parser lexer grammar "
    "compiler linker runtime bytecode interpreter sandbox quota tenant region zone bucket "
    "object blob snapshot backup restore migration rollback release version tag changelog "
    "benchmark fixture mock stub assert coverage linter formatter wheel package module "
    "import export select insert update delete join filter reduce map sort hash digest "
    "cipher signature certificate secret vault policy role grant audit alert dashboard "
    "prompt context window model tokenizer gradient optimizer epoch checkpoint dataset"
).split()

# The workload carries no discourse cues (reference / switch / return words such as
# 这个, 它, 该, 上面, 回到, "there", "these"): random text would otherwise hit them far
# more often than real chat does and steer both gates.  These characters are left
# out of the Chinese pool, and pseudo-words equal to a cue word are rejected.
CUE_CHARS = set("这那它该此其另顺换回前面述刚外别")
CUE_WORDS = set(
    "it its this that these those they them the above same there by way btw on another "
    "note different changing subject change topic question unrelated switching gears new "
    "moving let talk about back going coming earlier you said mentioned as we discussed "
    "returning".split()
)

ONSETS = "b c d f g h k l m n p r s t v w z br cr st tr pl gr sh ch th".split()
NUCLEI = "a e i o u ai ea ou io".split()
CODAS = ["", "", "", "n", "r", "s", "t", "l", "x", "ck", "ng"]

DEFAULT_SIZES = (50, 300, 1000, 10000)
QUICK_SIZES = (50, 300)
N_TOPICS = 800  # ~1,000 switches in 10,000 turns: ~800 openings, ~200 returns


# --------------------------------------------------------------------------- workload


def is_cjk(term: str) -> bool:
    """True when ``term`` starts with a CJK ideograph (all Chinese terms are pure CJK)."""
    return "\u4e00" <= term[0] <= "\u9fff"


def english_word(rng: random.Random) -> str:
    """A pronounceable lowercase pseudo-word of 2-3 syllables."""
    while True:
        word = "".join(
            rng.choice(ONSETS) + rng.choice(NUCLEI) + rng.choice(CODAS)
            for _ in range(rng.randint(2, 3))
        )
        if word not in CUE_WORDS:
            return word


def english_term(rng: random.Random) -> str:
    """One English/technical term: a word, snake_case, a dotted.name or a version."""
    word = (lambda: rng.choice(TECH_WORDS) if rng.random() < 0.3 else english_word(rng))
    kind = rng.random()
    if kind < 0.65:
        return word()
    if kind < 0.80:
        return "_".join(word() for _ in range(rng.randint(2, 3)))
    if kind < 0.94:
        return ".".join(word() for _ in range(rng.randint(2, 3)))
    parts = [str(rng.randint(0, 12)) for _ in range(rng.randint(2, 3))]
    return ("v" if rng.random() < 0.4 else "") + ".".join(parts)


def build_vocabulary(rng: random.Random, size: int) -> list[str]:
    """``size`` distinct terms, half Chinese words and half English terms, in random rank order."""
    pool = [c for c in dict.fromkeys(CJK_POOL) if c not in CUE_CHARS]
    chinese: set[str] = set()
    while len(chinese) < size // 2:
        chinese.add("".join(rng.choice(pool) for _ in range(rng.randint(2, 3))))
    english: set[str] = set(TECH_WORDS)
    while len(english) < size - len(chinese):
        english.add(english_term(rng))
    vocab = sorted(chinese) + sorted(english)  # sorted first: set order is not deterministic
    rng.shuffle(vocab)
    return vocab


def zipf_cum_weights(n: int, exponent: float) -> list[float]:
    """Cumulative ``1/rank**exponent`` weights for ``random.choices(cum_weights=...)``."""
    total, cum = 0.0, []
    for rank in range(1, n + 1):
        total += 1.0 / rank**exponent
        cum.append(total)
    return cum


@dataclass
class Distribution:
    """Terms with Zipf cumulative weights, ready for ``rng.choices``."""

    terms: list[str]
    cum_weights: list[float]

    def draw(self, rng: random.Random, k: int) -> list[str]:
        """``k`` terms drawn with replacement."""
        return rng.choices(self.terms, cum_weights=self.cum_weights, k=k)


@dataclass
class Workload:
    """A generated conversation: its turns, the topic of each turn, and the samplers."""

    turns: list[tuple[str, str]]
    topic_of_turn: list[int]
    background: Distribution
    topics: list[Distribution]
    term_tokens: dict[str, int]
    vocabulary_size: int
    topic_switches: int = 0
    topic_returns: int = 0
    stats: dict[str, float] = field(default_factory=dict)


def build_topics(rng: random.Random, vocab: list[str], count: int, size: int) -> list[Distribution]:
    """``count`` topics, each ``size`` vocabulary terms with their own Zipf ranking."""
    weights = zipf_cum_weights(size, 0.9)
    return [Distribution(rng.sample(vocab, size), weights) for _ in range(count)]


def join_terms(rng: random.Random, terms: Sequence[str], question: bool = False) -> str:
    """Join terms into text: spaces around English, none between Chinese words, punctuation."""
    out: list[str] = []
    prev_cjk: bool | None = None
    until_punct = rng.randint(6, 14)
    for term in terms:
        cjk = is_cjk(term)
        if out and not (cjk and prev_cjk):
            out.append(" ")
        out.append(term)
        prev_cjk = cjk
        until_punct -= 1
        if until_punct == 0:
            out.append(rng.choice("，。、") if cjk else rng.choice([",", ".", ";", ":"]))
            until_punct = rng.randint(6, 14)
    if out[-1] in "，。、,.;:":
        out.pop()  # a sentence ends here anyway
    out.append(("？" if prev_cjk else "?") if question else ("。" if prev_cjk else "."))
    return "".join(out)


def draw_text(
    rng: random.Random, wl: Workload, topic: int, target_tokens: int, topic_share: float, question: bool
) -> str:
    """Terms from ``topic`` (share ``topic_share``) and the background until ~``target_tokens``."""
    terms: list[str] = []
    estimate = 0.0
    while True:
        source = wl.topics[topic] if rng.random() < topic_share else wl.background
        term = source.draw(rng, 1)[0]
        cost = wl.term_tokens[term] + 0.15  # ~ punctuation now and then
        if terms and estimate + cost / 2 > target_tokens:  # stop nearest the target
            return join_terms(rng, terms, question=question)
        terms.append(term)
        estimate += cost


def next_topic(rng: random.Random, current: int, visited: list[int], n_topics: int) -> tuple[int, bool]:
    """Pick the next topic: a return to a visited one (~20%) or the next fresh one; says which.

    Topics are opened in index order (they are random subsets already); once all
    ``n_topics`` have been opened, every switch is a return.
    """
    earlier = [t for t in visited if t != current]
    if earlier and rng.random() < 0.2:
        return rng.choice(earlier), True
    if len(visited) < n_topics:
        return len(visited), False
    return rng.choice(earlier), True


def generate_workload(
    seed: int, n_turns: int, count: Callable[[str], int], vocab_size: int = 5000
) -> Workload:
    """The whole conversation for the largest history size (smaller sizes use a prefix)."""
    rng = random.Random(seed)
    vocab = build_vocabulary(rng, vocab_size)
    n_topics = N_TOPICS  # fixed, so every history size is a prefix of the same conversation
    wl = Workload(
        turns=[],
        topic_of_turn=[],
        background=Distribution(vocab, zipf_cum_weights(len(vocab), 1.0)),
        topics=build_topics(rng, vocab, n_topics, 200),
        term_tokens={t: count(" " + t) if not is_cjk(t) else count(t) for t in vocab},
        vocabulary_size=len(vocab),
    )
    topic, visited, left = 0, [0], rng.randint(5, 15)
    for _ in range(n_turns):
        if left == 0:
            topic, returned = next_topic(rng, topic, visited, n_topics)
            wl.topic_switches += 1
            wl.topic_returns += returned
            if topic not in visited:
                visited.append(topic)
            left = rng.randint(5, 15)
        left -= 1
        user = draw_text(rng, wl, topic, rng.randint(22, 36), 0.65, question=True)
        assistant = draw_text(rng, wl, topic, rng.randint(50, 84), 0.65, question=False)
        wl.turns.append((user, assistant))
        wl.topic_of_turn.append(topic)
    wl.stats = measure_turn_tokens(wl.turns, count)
    return wl


def measure_turn_tokens(turns: Sequence[tuple[str, str]], count: Callable[[str], int]) -> dict:
    """Mean real token counts of user and assistant messages over (up to) 1,000 turns."""
    sample = turns[:1000]
    users = [count(u) for u, _ in sample]
    assistants = [count(a) for _, a in sample]
    return {
        "user_tokens_mean": statistics.fmean(users),
        "assistant_tokens_mean": statistics.fmean(assistants),
        "turn_tokens_mean": statistics.fmean(u + a for u, a in zip(users, assistants)),
    }


def make_queries(wl: Workload, size: int, n: int, seed: int) -> list[str]:
    """``n`` queries of ~15 tokens for a history of ``size`` turns: current topic 70%, past 30%."""
    rng = random.Random(seed * 1_000_003 + size)
    current = wl.topic_of_turn[size - 1]
    past = sorted(set(wl.topic_of_turn[:size]) - {current})
    queries = []
    for _ in range(n):
        topic = rng.choice(past) if past and rng.random() < 0.3 else current
        queries.append(draw_text(rng, wl, topic, rng.randint(11, 17), 0.8, question=True))
    return queries


# --------------------------------------------------------------------------- measuring


def summarize(samples_ns: Sequence[int], unit_ns: float) -> dict[str, float]:
    """Median, p95 (nearest rank), mean, min and count of samples, in units of ``unit_ns``."""
    if not samples_ns:
        return {"n": 0}
    ordered = sorted(samples_ns)
    p95 = ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]
    return {
        "n": len(ordered),
        "median": statistics.median(ordered) / unit_ns,
        "p95": p95 / unit_ns,
        "mean": statistics.fmean(ordered) / unit_ns,
        "min": ordered[0] / unit_ns,
    }


def build(
    factory: Callable[[], Any], turns: Sequence[tuple[str, str]], advance: Callable[[int], None]
) -> tuple[Any, list[int]]:
    """Create a gatekeeper and add ``turns``, timing every ``add_turn`` (ns)."""
    gc.collect()
    gk = factory()
    timings: list[int] = []
    clock = time.perf_counter_ns
    for i, (user, assistant) in enumerate(turns):
        start = clock()
        gk.add_turn(user, assistant)
        timings.append(clock() - start)
        if i % 50 == 49:
            advance(50)
    advance(len(turns) % 50)
    return gk, timings


def time_calls(
    call: Callable[[str], Any],
    queries: Sequence[str],
    max_seconds: float | None,
    advance: Callable[[int], None],
) -> tuple[list[int], list[int]]:
    """Time ``call(query)`` for each query (ns), stopping once ``max_seconds`` (if any) have passed.

    Also returns how many items each call returned (turns, for ``select``), counted
    outside the timed region.
    """
    gc.collect()
    clock = time.perf_counter_ns
    deadline = math.inf if max_seconds is None else clock() + int(max_seconds * 1e9)
    timings: list[int] = []
    lengths: list[int] = []
    for query in queries:
        start = clock()
        out = call(query)
        end = clock()
        timings.append(end - start)
        lengths.append(len(out) if hasattr(out, "__len__") else 0)
        advance(1)
        if end >= deadline:
            break
    return timings, lengths


_MEMORY_RUNS = itertools.count(1)


def measure_memory(
    factory: Callable[[], Any], turns: Sequence[tuple[str, str]], query: str
) -> dict[str, float]:
    """tracemalloc figures (MiB) for building a gatekeeper and one explain afterwards.

    The texts are made new to the process first (trailing spaces, a different number each call:
    no anchor changes), so the per-text caches the timed build just filled are filled again and
    counted: a gatekeeper over texts never seen costs this much (the per-word cache of anchors,
    shared by every text, stays warm)."""
    pad = " " * next(_MEMORY_RUNS)
    turns = [(f"{user}{pad}", f"{assistant}{pad}") for user, assistant in turns]
    gc.collect()
    tracemalloc.start()
    try:
        base, _ = tracemalloc.get_traced_memory()
        gk = factory()
        for user, assistant in turns:
            gk.add_turn(user, assistant)
        current, peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        gk.explain(query)
        _, explain_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    mib = 1024 * 1024
    return {
        "current_mib": (current - base) / mib,
        "build_peak_mib": (peak - base) / mib,
        "explain_peak_mib": (explain_peak - base) / mib,
    }


@dataclass
class Subject:
    """One class under test: a label, a factory, and the bounds on its query timing."""

    name: str
    factory: Callable[[], Any]
    bounded: bool  # the baseline: fewer queries at big sizes, time cap


def query_limit(subject: Subject, size: int, args: argparse.Namespace) -> tuple[int, float | None]:
    """How many queries and seconds (``None``: unbounded) one measurement of ``subject`` may use."""
    if not subject.bounded:
        return args.queries, None
    n = args.queries if size < args.baseline_big_size else min(args.queries, args.baseline_big_queries)
    return n, args.baseline_cap_s


def measure_subject(
    subject: Subject,
    size: int,
    wl: Workload,
    queries: Sequence[str],
    args: argparse.Namespace,
    progress: Any,
    task: Any,
) -> dict[str, Any]:
    """All figures for one class at one history size."""
    turns = wl.turns[:size]
    n_queries, cap_s = query_limit(subject, size, args)
    advance = lambda k: progress.advance(task, k)  # noqa: E731
    progress.reset(task, total=size, description=f"{subject.name}: add_turn x{size}")
    gk, add_ns = build(subject.factory, turns, advance)
    result: dict[str, Any] = {"add_turn_us": summarize(add_ns, 1e3)}
    warm_up, timed = queries[0], {"explain": queries[1 : args.queries + 1],
                                  "select": queries[args.queries + 1 :]}
    start = time.perf_counter_ns()
    gk.explain(warm_up)  # the cold first query after the build; not among the timed ones
    result["cold_explain_ms"] = (time.perf_counter_ns() - start) / 1e6
    for method, method_queries in timed.items():
        progress.reset(task, total=n_queries, description=f"{subject.name}: {method} n={size}")
        ns, lengths = time_calls(getattr(gk, method), method_queries[:n_queries], cap_s, advance)
        result[f"{method}_ms"] = summarize(ns, 1e6)
    result["select_turns_mean"] = statistics.fmean(lengths)  # a sanity figure: both select
    result["capped"] = result["explain_ms"]["n"] < args.queries or result["select_ms"]["n"] < args.queries
    del gk
    if size in args.memory_sizes:
        progress.reset(task, total=None, description=f"{subject.name}: tracemalloc n={size}")
        result["memory"] = measure_memory(subject.factory, turns, warm_up)
    return result


def longest_locomo_conversation(data_dir: Path) -> tuple[str, list[tuple[str, str]], list[str]] | None:
    """``(conversation id, turns, questions)`` of the longest LoCoMo conversation, or None
    when the data is not there."""
    path = data_dir / "locomo.dev.jsonl.xz"
    if not path.is_file():
        return None
    import lzma

    with lzma.open(path, "rt", encoding="utf-8") as f:
        cases = [json.loads(line) for line in f if line.strip()]
    by_conv: dict[str, list[dict]] = {}
    for case in cases:
        by_conv.setdefault(case["conv_id"], []).append(case)
    conv_id = max(by_conv, key=lambda c: max(len(k["turns"]) for k in by_conv[c]))
    longest = max(by_conv[conv_id], key=lambda k: len(k["turns"]))
    turns = [(t["user"], t["assistant"]) for t in longest["turns"]]
    return conv_id, turns, [k["query"] for k in by_conv[conv_id]]


def measure_real(
    subjects: Sequence[Subject], real: tuple[str, list[tuple[str, str]], list[str]], progress: Any, task: Any
) -> dict[str, Any]:
    """add_turn and explain timings on a real conversation, per subject."""
    _, turns, questions = real
    out: dict[str, Any] = {}
    for subject in subjects:
        advance = lambda k: progress.advance(task, k)  # noqa: E731
        progress.reset(task, total=len(turns), description=f"{subject.name}: real text, add_turn x{len(turns)}")
        gk, add_ns = build(subject.factory, turns, advance)
        gk.explain(questions[0])  # warm-up
        progress.reset(task, total=len(questions), description=f"{subject.name}: real text, explain")
        ns, _ = time_calls(gk.explain, questions, None, advance)
        out[subject.name] = {"add_turn_us": summarize(add_ns, 1e3), "explain_ms": summarize(ns, 1e6)}
    return out


def real_table(real: tuple[str, list, list], results: dict[str, Any], names: Sequence[str]) -> Any:
    """The real-text row: add_turn and explain latency, and the speed-up over the baseline."""
    from rich.table import Table

    conv_id, turns, questions = real
    table = Table(title=f"real text: LoCoMo conversation {conv_id}, {len(turns)} turns, "
                        f"{len(questions)} questions (explain ms, add_turn us)")
    table.add_column("class")
    for column in ("add median", "explain median", "explain p95", "n"):
        table.add_column(column, justify="right")
    for name in names:
        r = results[name]
        table.add_row(name, fmt(r["add_turn_us"], "median", 1), fmt(r["explain_ms"], "median", 3),
                      fmt(r["explain_ms"], "p95", 3), str(r["explain_ms"]["n"]))
    if len(names) == 2:
        table.caption = f"x faster (explain median): {ratio(results[names[1]]['explain_ms'], results[names[0]]['explain_ms'])}"
    return table


# --------------------------------------------------------------------------- report


def environment(count: Callable[[str], int]) -> dict[str, str]:
    """What the figures were measured on."""
    import context_gatekeeper

    try:
        from importlib.metadata import version

        tiktoken_version = version("tiktoken")
    except Exception:  # noqa: BLE001 - informative only
        tiktoken_version = "?"
    return {
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor() or "?",
        "cpu_count": str(os.cpu_count()),
        "context_gatekeeper": f"{getattr(context_gatekeeper, '__version__', '?')} "
        f"({Path(context_gatekeeper.__file__).parent})",
        "tiktoken": tiktoken_version,
        "token_counter": getattr(count, "__name__", repr(count)),
    }


def fmt(stats: dict[str, float] | None, key: str, digits: int = 2) -> str:
    """One figure from a summary, or a dash."""
    if not stats or key not in stats:
        return "-"
    return f"{stats[key]:,.{digits}f}"


def ratio(base: dict | None, lib: dict | None) -> str:
    """Baseline median / library median as ``"123x"``."""
    if not base or not lib or not base.get("n") or not lib.get("median"):
        return "-"
    return f"{base['median'] / lib['median']:,.1f}x"


def latency_table(results: dict, method: str, names: Sequence[str]) -> Any:
    """A rich table of one call's latency at every size, with the speed-up."""
    from rich.table import Table

    table = Table(title=f"{method}(query) latency, ms", title_justify="left")
    table.add_column("turns", justify="right")
    for name in names:
        table.add_column(f"{name}\nmedian", justify="right")
        table.add_column(f"{name}\np95", justify="right")
        table.add_column(f"{name}\nn", justify="right")
    if len(names) == 2:
        table.add_column("x faster", justify="right", style="bold")
    if method == "select":
        table.add_column("turns kept\n" + " / ".join(names), justify="right")
    for size, per in results.items():
        row = [f"{size:,}"]
        for name in names:
            stats = per.get(name, {}).get(f"{method}_ms")
            row += [fmt(stats, "median", 3), fmt(stats, "p95", 3), fmt(stats, "n", 0)]
        if len(names) == 2:
            row.append(ratio(per[names[1]].get(f"{method}_ms"), per[names[0]].get(f"{method}_ms")))
        if method == "select":
            row.append(" / ".join(f"{per[n].get('select_turns_mean', 0):.1f}" for n in names))
        table.add_row(*row)
    return table


def build_table(results: dict, names: Sequence[str]) -> Any:
    """A rich table of add_turn cost and the cold first query at every size."""
    from rich.table import Table

    table = Table(title="add_turn cost (us per ~100-token turn) and cold first explain (ms)",
                  title_justify="left")
    table.add_column("turns", justify="right")
    for name in names:
        table.add_column(f"{name}\nadd median", justify="right")
        table.add_column(f"{name}\nadd p95", justify="right")
        table.add_column(f"{name}\ncold ms", justify="right")
    for size, per in results.items():
        row = [f"{size:,}"]
        for name in names:
            r = per.get(name, {})
            cold = r.get("cold_explain_ms")
            row += [fmt(r.get("add_turn_us"), "median", 1), fmt(r.get("add_turn_us"), "p95", 1),
                    "-" if cold is None else f"{cold:,.2f}"]
        table.add_row(*row)
    return table


def memory_table(results: dict, names: Sequence[str]) -> Any:
    """A rich table of the tracemalloc figures."""
    from rich.table import Table

    table = Table(title="memory (tracemalloc, MiB, separate build)", title_justify="left")
    table.add_column("turns", justify="right")
    table.add_column("class")
    for col in ("current after build", "peak during build", "peak during 1 explain"):
        table.add_column(col, justify="right")
    for size, per in results.items():
        for name in names:
            mem = per.get(name, {}).get("memory")
            if mem:
                table.add_row(f"{size:,}", name, fmt(mem, "current_mib"),
                              fmt(mem, "build_peak_mib"), fmt(mem, "explain_peak_mib"))
    return table


def print_report(console: Any, env: dict, wl: Workload, results: dict, names: list[str],
                 args: argparse.Namespace) -> None:
    """Print the environment, the workload and the tables."""
    for key, value in env.items():
        console.print(f"[dim]{key}:[/dim] {value}")
    s = wl.stats
    console.print(
        f"[dim]workload:[/dim] seed {args.seed}, {wl.vocabulary_size:,} terms, "
        f"{len(wl.topics)} topics, {wl.topic_switches} switches ({wl.topic_returns} returns), "
        f"turn = {s['user_tokens_mean']:.1f} + {s['assistant_tokens_mean']:.1f} tokens, "
        f"budget {args.budget}, {args.queries} queries per size"
    )
    console.print(
        f"[dim]baseline bound:[/dim] at >= {args.baseline_big_size:,} turns at most "
        f"{args.baseline_big_queries} queries; any measurement stops after {args.baseline_cap_s:g} s"
    )
    console.print(latency_table(results, "explain", names))
    console.print(latency_table(results, "select", names))
    console.print(build_table(results, names))
    console.print(memory_table(results, names))
    for size, per in results.items():
        base = per.get(names[-1], {}) if len(names) == 2 else {}
        if base.get("capped"):
            console.print(f"[yellow]note:[/yellow] baseline at {size:,} turns timed "
                          f"{base['explain_ms']['n']} explain / {base['select_ms']['n']} select "
                          f"queries of {args.queries} (bounded).")


# --------------------------------------------------------------------------- main


# --------------------------------------------------------------------------- message lists (LangChain)
# ``--lists``: the LangChain adapter's list mode against ``trim_messages`` on the same list.
# A conversation of LIST_TURNS turns (a system message, then user/assistant pairs of the
# synthetic workload) is gated LIST_CALLS times as it grows: call k gets the first
# LIST_TURNS - LIST_CALLS + k + 1 turns and a new question, so each call's list is the
# previous one plus one turn, the way a chain or a pre_model_hook sees it.  Each subject
# is timed per call (the first call, which builds the index, is reported apart).  Every
# subject counts tokens with tiktoken's cl100k_base (trim_messages through a dict of counts
# per text, as speed_lists.py's careful user does), except the row trim_messages
# (approximate), which uses its four-characters-a-token estimate.

LIST_TURNS, LIST_CALLS, LIST_BUDGET = 340, 40, 1000


def measure_lists(args: argparse.Namespace, count: Callable[[str], int]) -> dict[str, Any]:
    """ms per call of topic_gate (one Runnable), gate_messages and trim_messages on growing lists."""
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, trim_messages

    from langchain_gatekeeper import gate_messages, topic_gate

    wl = generate_workload(args.seed, LIST_TURNS, count)
    queries = make_queries(wl, LIST_TURNS, LIST_CALLS, args.seed)
    turns = [[HumanMessage(user), AIMessage(assistant)] for user, assistant in wl.turns]
    system = SystemMessage("You answer questions about this technical chat.")

    def list_for(k: int) -> list[Any]:
        grown = LIST_TURNS - LIST_CALLS + k + 1
        return [system, *(m for turn in turns[:grown] for m in turn), HumanMessage(queries[k])]

    from speed_lists import cached_per_text  # a sibling: the script's directory is on sys.path

    counted = cached_per_text(count)  # as a careful user writes trim_messages' counter: a dict per text

    gate = topic_gate(token_budget=LIST_BUDGET, token_counter=count)
    subjects: dict[str, Callable[[list[Any]], Any]] = {
        "trim_messages": lambda ms: trim_messages(ms, max_tokens=LIST_BUDGET, token_counter=counted,
                                                  strategy="last", include_system=True, start_on="human"),
        "trim_messages (approximate)": lambda ms: trim_messages(ms, max_tokens=LIST_BUDGET, token_counter="approximate",
                                                                strategy="last", include_system=True, start_on="human"),
        "topic_gate": gate.invoke,
        "gate_messages": lambda ms: gate_messages(ms, token_budget=LIST_BUDGET, token_counter=count,
                                                  thread=("speed", args.seed)),
    }
    results: dict[str, Any] = {}
    for name, call in subjects.items():
        lists = [list_for(k) for k in range(LIST_CALLS)]
        gc.collect()
        samples, kept = [], 0
        for messages in lists:
            start = time.perf_counter_ns()
            out = call(messages)
            samples.append(time.perf_counter_ns() - start)
            kept += len(out)
        results[name] = {"first_ms": samples[0] / 1e6, "ms": summarize(samples[1:], 1e6),
                         "mean_messages_kept": kept / len(lists)}
    return results


def lists_table(results: dict[str, Any]) -> Any:
    """The --lists figures as a table: ms per call and the ratio to trim_messages."""
    from rich.table import Table

    table = Table(title=f"Message lists: {LIST_TURNS} turns growing by one per call, "
                        f"budget {LIST_BUDGET} tokens, {LIST_CALLS} calls")
    for column in ("subject", "first call ms", "ms/call median", "p95", "time / trim_messages", "messages kept"):
        table.add_column(column, justify="left" if column == "subject" else "right")
    trim = results["trim_messages"]["ms"]["median"]
    for name, r in results.items():
        table.add_row(name, f"{r['first_ms']:.1f}", f"{r['ms']['median']:.2f}", f"{r['ms']['p95']:.2f}",
                      f"{r['ms']['median'] / trim:.2f}", f"{r['mean_messages_kept']:.0f}")
    return table


# --------------------------------------------------------------------------- semantic channel
# ``--semantic``: the select overhead of an embedder, excluding the query's embedding call.
# For each size, two gatekeepers hold the same synthetic turns: lexical, and with an
# embedder whose vectors (384 dimensions, e5-small's size: each word hashed to a few
# dimensions) are all computed before timing -- turns by ``embed_pending``, queries up
# front, so ``embed_query`` is a dict lookup.  What is timed is what the library adds:
# checking and normalising the query vector, one matrix product over the turn vectors,
# calibration, fusion and the semantic gate.  Overhead = median(semantic) - median(lexical).

SEMANTIC_DIM = 384


class _PrecomputedEmbedder:
    """Deterministic vectors, computed before timing (a stand-in for a model's cache)."""

    name = "speed-hash-384"

    def __init__(self) -> None:
        self.queries: dict[str, list[float]] = {}

    @staticmethod
    def vector(text: str) -> list[float]:
        import zlib

        v = [0.0] * SEMANTIC_DIM
        for word in text.split():
            h = zlib.crc32(word.encode("utf-8"))
            v[h % SEMANTIC_DIM] += 1.0
            v[(h >> 12) % SEMANTIC_DIM] += 0.5
        return v

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self.vector(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self.queries[text]


def measure_semantic(args: argparse.Namespace, wl: Workload, count: Callable[[str], int]) -> dict[str, Any]:
    """Per size: median and p95 ms of ``explain`` lexical and with the embedder, and the overhead."""
    from context_gatekeeper import ContextGatekeeper

    out: dict[str, Any] = {}
    for size in args.sizes:
        embedder = _PrecomputedEmbedder()
        lexical = ContextGatekeeper(token_budget=args.budget, token_counter=count, message_overhead=0)
        semantic = ContextGatekeeper(token_budget=args.budget, token_counter=count, message_overhead=0,
                                     embedder=embedder)
        for user, assistant in wl.turns[:size]:
            lexical.add_turn(user, assistant)
            semantic.add_turn(user, assistant)
        semantic.embed_pending()
        queries = make_queries(wl, size, args.queries + 1, args.seed)
        embedder.queries = {q: embedder.vector(q) for q in queries}
        row: dict[str, Any] = {}
        for name, gk in (("lexical", lexical), ("semantic", semantic)):
            gk.explain(queries[0])  # warm-up
            samples = []
            gc.collect()
            for q in queries[1:]:
                started = time.perf_counter_ns()
                gk.explain(q)
                samples.append(time.perf_counter_ns() - started)
            row[name] = summarize(samples, 1e6)
        row["overhead_ms"] = row["semantic"]["median"] - row["lexical"]["median"]
        out[str(size)] = row
    return out


def semantic_table(results: dict[str, Any]) -> Any:
    from rich.table import Table

    table = Table(title="select overhead with an embedder (query embedding excluded), ms")
    for column in ("turns", "lexical median", "semantic median", "semantic p95", "overhead"):
        table.add_column(column, justify="right")
    for size, row in results.items():
        table.add_row(size, fmt(row["lexical"], "median"), fmt(row["semantic"], "median"),
                      fmt(row["semantic"], "p95"), f"{row['overhead_ms']:.2f}")
    return table


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)),
                   help="history sizes in turns, comma-separated (default %(default)s)")
    p.add_argument("--quick", action="store_true", help="sizes 50,300 only")
    p.add_argument("--queries", type=int, default=200, help="queries per size (default 200)")
    p.add_argument("--seed", type=int, default=1234, help="workload seed (default 1234)")
    p.add_argument("--budget", type=int, default=2000, help="token budget (default 2000)")
    p.add_argument("--json", metavar="OUT", help="also write the figures to this JSON file")
    p.add_argument("--plot", metavar="DIR",
                   help="also draw the latency chart (PNG, from the same figures) into DIR; needs matplotlib")
    p.add_argument("--no-baseline", action="store_true", help="measure the library only")
    p.add_argument("--baseline-cap-s", type=float, default=60.0,
                   help="stop a baseline measurement after this many seconds (default 60)")
    p.add_argument("--baseline-big-size", type=int, default=5000,
                   help="sizes from here on give the baseline fewer queries (default 5000)")
    p.add_argument("--baseline-big-queries", type=int, default=30,
                   help="baseline queries at big sizes (default 30)")
    p.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data",
                   help="folder with locomo.dev.jsonl.xz for the real-text row (default ../shared/data)")
    p.add_argument("--no-real", action="store_true", help="skip the real-text row")
    p.add_argument("--semantic", action="store_true",
                   help="the select overhead with an embedder (query embedding excluded)")
    p.add_argument("--real-only", action="store_true", help="only the real-text row (no synthetic sizes)")
    p.add_argument("--memory-sizes", default="max",
                   help="sizes to run tracemalloc at: 'max', 'all', or a list (default max)")
    p.add_argument("--lists", action="store_true",
                   help="the LangChain message-list section (topic_gate, gate_messages vs trim_messages, "
                        "and speed_lists.py's rows)")
    p.add_argument("--postprocessor", action="store_true",  # benchmarks/speed_postprocessor.py
                   help="GatekeeperNodePostprocessor vs SimilarityPostprocessor, 200 nodes (issue #22)")
    p.add_argument("--scale", action="store_true",  # benchmarks/speed_scale.py
                   help="the transcript rows at 1k/20k turns: first select, catching up, add_turn "
                        "(issue #22; speed_scale.py's defaults)")
    args = p.parse_args(argv)
    if args.plot and importlib.util.find_spec("matplotlib") is None:
        p.error("--plot needs matplotlib: pip install matplotlib")
    args.argv = list(sys.argv[1:] if argv is None else argv)
    args.sizes = sorted({int(s) for s in (QUICK_SIZES if args.quick else args.sizes.split(","))})
    if not args.sizes or args.sizes[0] < 1 or args.queries < 1:
        p.error("sizes and --queries must be positive")
    if args.memory_sizes == "max":
        args.memory_sizes = {args.sizes[-1]}
    elif args.memory_sizes == "all":
        args.memory_sizes = set(args.sizes)
    else:
        args.memory_sizes = {int(s) for s in args.memory_sizes.split(",")}
    return args


def make_subjects(args: argparse.Namespace, count: Callable[[str], int], console: Any) -> list[Subject]:
    """The library and (unless disabled or missing) the baseline."""
    from context_gatekeeper import ContextGatekeeper

    subjects = [Subject("library", lambda: ContextGatekeeper(
        token_budget=args.budget, token_counter=count, message_overhead=0), bounded=False)]
    if not args.no_baseline:
        try:
            from report_baseline import ReportGatekeeper
        except ImportError as exc:
            console.print(f"[yellow]baseline unavailable ({exc}); measuring the library only[/]")
        else:
            subjects.append(Subject("baseline", lambda: ReportGatekeeper(
                token_budget=args.budget, count_tokens=count), bounded=True))
    return subjects


def main(argv: Sequence[str] | None = None) -> int:
    """Generate the workload, measure every size, print the tables, maybe write JSON."""
    args = parse_args(argv)
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from context_gatekeeper.tokens import tiktoken_counter

    console = Console() if sys.stdout.isatty() else Console(width=132)  # no truncated headers
    count = tiktoken_counter("cl100k_base")
    sections: dict[str, Any] = {}  # every section flag given runs, in this order; then main returns
    if args.scale:  # the transcript rows, in their own module
        from speed_scale import print_rows as print_scale_rows, rows as scale_rows

        sections["scale"] = scale_rows()
        print_scale_rows(sections["scale"])
    if args.postprocessor:  # the first row, in its own module
        from speed_postprocessor import postprocessor_rows, print_rows

        sections["postprocessor"] = postprocessor_rows()
        print_rows(sections["postprocessor"])
    if args.lists:
        with console.status("message lists"):
            sections["message_lists"] = measure_lists(args, count)
        console.print(lists_table(sections["message_lists"]))
        from speed_lists import rows as list_rows, table as list_rows_table  # the list and agent rows

        sections["lists_and_agent"] = list_rows()
        console.print(list_rows_table(sections["lists_and_agent"]))
    if args.semantic:
        with console.status("semantic channel"):
            sections["semantic_overhead"] = measure_semantic(
                args, generate_workload(args.seed, args.sizes[-1], count), count)
        console.print(semantic_table(sections["semantic_overhead"]))
    if sections:
        if args.json:
            Path(args.json).write_text(json.dumps(sections, indent=2, default=str) + "\n")
        return 0
    subjects = make_subjects(args, count, console)
    names = [s.name for s in subjects]
    with console.status(f"generating {args.sizes[-1]:,} turns (seed {args.seed})"):
        wl = generate_workload(args.seed, args.sizes[-1], count)
    results: dict[int, dict[str, Any]] = {}
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn())
    real = None if args.no_real else longest_locomo_conversation(args.data)
    if real is None and not args.no_real:
        console.print(f"[yellow]note:[/yellow] no LoCoMo data in {args.data}; the real-text row is skipped (--data DIR)")
    real_results: dict[str, Any] = {}
    with Progress(*columns, console=console, transient=True) as progress:
        overall = progress.add_task("sizes x classes", total=len(args.sizes) * len(subjects))
        task = progress.add_task("", total=None)
        if real is not None:
            real_results = measure_real(subjects, real, progress, task)
        for size in [] if args.real_only else args.sizes:
            queries = make_queries(wl, size, 2 * args.queries + 1, args.seed)
            results[size] = {}
            for subject in subjects:
                results[size][subject.name] = measure_subject(
                    subject, size, wl, queries, args, progress, task)
                progress.advance(overall)
    env = environment(count)
    if results:
        print_report(console, env, wl, results, names, args)
    if real is not None:
        console.print(real_table(real, real_results, names))
    doc = figures(args, env, wl, results)
    if real is not None:
        doc["real_text"] = {"dataset": "locomo", "conversation": real[0], "turns": len(real[1]),
                            "questions": len(real[2]), "results": real_results}
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
        console.print(f"wrote {args.json}")
    if args.plot:
        from plots import speed_charts  # imports matplotlib

        for path in speed_charts(doc, args.plot):
            console.print(f"chart written to {path}")
    return 0


def figures(args: argparse.Namespace, env: dict, wl: Workload, results: dict) -> dict:
    """Date, command, environment, configuration, workload statistics and figures, JSON-ready."""
    from plots import command_line, machine_line  # a sibling module; no matplotlib here

    config = {k: (sorted(v) if isinstance(v, set) else str(v) if isinstance(v, Path) else v)
              for k, v in vars(args).items() if k != "argv"}
    doc = {
        "measured": datetime.date.today().isoformat(),
        "command": command_line("benchmarks/speed.py", args.argv),
        "machine": machine_line(),
        "subjects": {"library": "context-gatekeeper", "baseline": "report as written"},
        "environment": env,
        "config": config,
        "workload": {"vocabulary": wl.vocabulary_size, "topics": len(wl.topics),
                     "topic_switches": wl.topic_switches, "topic_returns": wl.topic_returns,
                     **wl.stats},
        "results": {str(size): per for size, per in results.items()},
    }
    for size, per in results.items():
        lib, base = per.get("library"), per.get("baseline")
        if lib and base:
            doc["results"][str(size)]["speedup"] = {
                m: base[f"{m}_ms"]["median"] / lib[f"{m}_ms"]["median"]
                for m in ("explain", "select") if base[f"{m}_ms"].get("n")
            }
    return doc


if __name__ == "__main__":
    sys.exit(main())

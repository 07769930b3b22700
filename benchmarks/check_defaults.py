"""Re-check on the tuning half (A) alone the defaults that were chosen before the halves existed.

``quality.py --half A|B`` (tune on A, validate on B) arrived on 2026-12-01; a few defaults still
shipped were set before it, on the whole development data (half B included): ``topic_decay``,
the CJK kind weights, ``topic_affinity``, ``off_topic_share``, ``topic_match_share``,
``return_turns``, ``continue_threshold`` and ``reply_continues`` (``semantic_min_turns`` too,
which needs an embedder and is left to ``fit_semantic.py``'s runs).  This script moves each of
them alone, one step down and one step up, and measures the library on half A only: LoCoMo
@1000 and CAsT @40 (recall, kept share), the hand-labelled sets @300 (recall, precision,
off-topic share) and CrossWOZ's switch F1.  A setting *dominates* the shipped one when no
figure is worse by more than :data:`TOLERANCE` (LoCoMo's kept share staying at most 5%) and
one is better by more than :data:`GAIN`.  The sweep reads half A only; ``--validate`` then
measures the shipped defaults, each setting that dominates them and all of those together on
half B (validation), which decides whether one is accepted.

Usage (from the repository root)::

    python benchmarks/check_defaults.py [--data DIR] [--json OUT] [--validate]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from quality import DEFAULT_DATA_DIR, dataset_path, evaluate, library_factory, load_cases, split_half

from context_gatekeeper import SelectionParams
from context_gatekeeper.selection.anchors import AnchorKind

_CJK = dict(SelectionParams().kind_weights)


def _cjk(bigram: float, char: float) -> dict[str, Any]:
    return {"kind_weights": {**_CJK, AnchorKind.CJK_BIGRAM: bigram, AnchorKind.CJK_CHAR: char}}


STEPS: dict[str, list[dict[str, Any]]] = {
    "topic_decay": [{"topic_decay": 0.15}, {"topic_decay": 0.5}],
    "CJK bigram weight": [_cjk(0.1, 0.12), _cjk(0.3, 0.12)],
    "CJK character weight": [_cjk(0.2, 0.06), _cjk(0.2, 0.2)],
    "topic_affinity": [{"topic_affinity": 0.03}, {"topic_affinity": 0.06}],
    "off_topic_share": [{"off_topic_share": 0.3}, {"off_topic_share": 0.5}],
    "topic_match_share": [{"topic_match_share": 0.03}, {"topic_match_share": 0.08}],
    "return_turns": [{"return_turns": 1}, {"return_turns": 3}],
    "continue_threshold": [{"continue_threshold": 0.15}, {"continue_threshold": 0.25}],
    "reply_continues": [{"reply_continues": False}],
}
"""Each pre-split default, one step either side of the shipped value (shipped: ``SelectionParams()``)."""
RUNS = (("locomo", 1000), ("cast2020", 40), ("crosswoz", 1000), ("interleaved", 300), ("hard", 300), ("service", 300))
TOLERANCE = 0.005
GAIN = 0.01
MAX_KEPT = 0.05


def figures(cases: dict[str, list[dict]], params: dict[str, Any]) -> dict[str, float]:
    """The half-A figures of one setting, flat: ``"hard@300 recall"`` -> value (higher is better,
    except off-topic and kept share)."""
    out: dict[str, float] = {}
    for name, budget in RUNS:
        r = evaluate(name, cases[name], library_factory(budget, **params))
        run = f"{name}@{budget}"
        if name == "crosswoz":
            out[f"{name} switch F1"] = r["switch"]["f1"]
            continue
        out[f"{run} recall"] = r["recall"]
        if name in ("locomo", "cast2020"):
            out[f"{run} kept"] = r["kept_share"]
        if r.get("precision") is not None and name != "locomo":
            out[f"{run} precision"] = r["precision"]
        if r.get("off_topic") is not None:
            out[f"{run} off-topic"] = r["off_topic"]
    return out


def _better(key: str, new: float, old: float) -> float:
    """How much better ``new`` is than ``old`` for figure ``key`` (negative: worse)."""
    lower_is_better = key.endswith("off-topic") or key.endswith("kept")
    return old - new if lower_is_better else new - old


def dominates(new: dict[str, float], base: dict[str, float]) -> bool:
    if new.get("locomo@1000 kept", 0.0) > MAX_KEPT:
        return False
    gains = [_better(k, new[k], base[k]) for k in base if not k.startswith("locomo@1000 kept")]
    return min(gains) >= -TOLERANCE and max(gains) > GAIN


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--validate", action="store_true", help="measure the dominating settings on half B too")
    args = parser.parse_args(argv)
    cases = {name: split_half(load_cases(dataset_path(args.data, name)), "A") for name, _ in RUNS}
    base = figures(cases, {})
    print("shipped:", json.dumps({k: round(v, 3) for k, v in base.items()}), flush=True)
    report: dict[str, Any] = {"shipped": base, "steps": []}
    for name, steps in STEPS.items():
        for step in steps:
            new = figures(cases, step)
            worse = {k: round(new[k] - base[k], 3) for k in base if _better(k, new[k], base[k]) < -TOLERANCE}
            better = {k: round(new[k] - base[k], 3) for k in base if _better(k, new[k], base[k]) > TOLERANCE}
            verdict = "DOMINATES" if dominates(new, base) else "no"
            print(f"{name} {json.dumps(step, default=str)}: dominates {verdict}; better {better}; worse {worse}", flush=True)
            report["steps"].append({"default": name, "setting": step, "figures": new, "dominates": verdict == "DOMINATES"})
    winners = [step["setting"] for step in report["steps"] if step["dominates"]]
    if args.validate and winners:
        held = {name: split_half(load_cases(dataset_path(args.data, name)), "B") for name, _ in RUNS}
        together = {k: v for step in winners for k, v in step.items()}
        report["validation"] = []
        valid_base = figures(held, {})
        print("half B, shipped:", json.dumps({k: round(v, 3) for k, v in valid_base.items()}), flush=True)
        for step in [*winners, together] if len(winners) > 1 else winners:
            new = figures(held, step)
            delta = {k: round(new[k] - valid_base[k], 3) for k in valid_base if abs(new[k] - valid_base[k]) > 1e-9}
            print(f"half B, {json.dumps(step, default=str)}: changes {delta}", flush=True)
            report["validation"].append({"setting": step, "figures": new, "shipped": valid_base})
    if args.json:
        args.json.write_text(json.dumps(report, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Would a fitted per-turn keep model beat the selector's keep rules?  A study on the tuning half.

The selector keeps a turn through a stack of hand rules (minimum coverage, the topic's own
turns, the follow-up turns of a reference, the fill, the neighbours; see
``context_gatekeeper.selection.selector``).  The issue's candidate replacement is one logistic
model over named per-turn features.  This script measures, on half A (tuning) only, whether
such a model could beat the rules *before* anything is wired into the library:

1. every (query, earlier turn) pair of the hand-labelled sets (interleaved, hard; complete
   labels) and of TREC CAsT (annotated dependencies) becomes one row of :data:`FEATURES`,
   measured from the library's own ``explain()`` (gate decision and topic, the turn's score,
   its shares of the query's weight, its place in the topic), labelled by whether the query
   needs the turn;
2. a logistic model (L2, Newton) is fitted on those rows, and a selection is simulated: per
   case, the turns with fitted probability at or above a threshold, best first, while they
   fit the budget;
3. recall, precision and off-topic share (a case keeping any labelled off-topic turn) are
   compared with the rules' own, per dataset, for a few thresholds, and leaving each case's
   conversation out of the fit (two-fold by conversation within half A), so the model is
   not scored on the rows it was fitted on.

Outcome (half A, held-out folds; the rules: interleaved@300 recall 0.792 / precision 0.828 /
off-topic 0.100, hard@300 0.433 / 0.615 / 0.089, CAsT@40 recall 0.909 at 55% kept): no
threshold matches the rules on the interleaved set or on CAsT.  At the threshold that keeps
the interleaved off-topic share near the rules' (p >= 0.5: 0.125), recall falls to 0.57 and
CAsT to 0.46; where recall matches (p >= 0.3), off-topic is 0.24.  Adding the rules' own
decision as an input (``--stacked``) changes none of that.  A per-turn score cannot express
what the rules do per case (one turn per query word, the topic's latest turns as a group), and
the turns the rules miss are those the gate sends nowhere (a switch) with no shared word --
rows on which every input here is the same for the needed turn and the off-topic one.  So the
keep rules stay; the model was not wired into the library and half B was not read for it.

Half B is never read here.  Usage (from the repository root)::

    python benchmarks/fit_keep.py [--data DIR] [--l2 1.0]

numpy is needed here only.
"""

from __future__ import annotations

import argparse
import hashlib
import math
from collections import defaultdict
from pathlib import Path

import numpy as np

from quality import DEFAULT_DATA_DIR, cached_counter, dataset_path, load_cases, split_half
from context_gatekeeper import ContextGatekeeper
from context_gatekeeper.selection.anchors import AnchorKind, anchor_kind, extract
from context_gatekeeper.selection.cues import strip_cues
from context_gatekeeper.selection.gate import anchor_weights
from context_gatekeeper.selection.word_prior import anchor_commonness

RUNS = (("interleaved", 300), ("hard", 300), ("cast2020", 40))
"""The datasets studied and their budgets (as in ``quality.py``)."""

FEATURES = (
    "bias", "same_topic", "active_topic", "latest_of_topic", "opener", "distance", "score_ratio", "telling_share",
    "telling_words", "distinct_share", "commonness", "reference", "continue", "return", "switch", "elliptical",
    "same_x_reference", "latest_x_reference", "neighbour_of_match",
)
STACKED = FEATURES + ("rules_kept",)
"""With ``--stacked``: the same inputs and whether the rules kept the turn (can a model
correct the rules, rather than replace them?)."""
"""The per-turn inputs, each measured by :func:`turn_rows`."""


def turn_rows(case: dict, budget: int) -> tuple[list[dict[str, float]], list[int], list[int], set[int]]:
    """``(feature rows, labels, costs, the rules' kept positions)`` for every earlier turn of a case."""
    gk = ContextGatekeeper(token_budget=budget, token_counter=cached_counter(), message_overhead=0)
    for turn in case["turns"]:
        gk.add_turn(turn["user"], turn["assistant"])
    selection = gk.explain(case["query"])
    history = gk._history
    labels, order = history.labels, history.order
    cues, content = strip_cues(case["query"][: gk.params.max_query_chars])
    weights = anchor_weights(extract(content, query=True).counts, history.index.df, len(history), gk.params)
    total_weight = sum(weights.values()) or 1.0
    records = {r.turn_id: r for r in selection.scores}
    best = max((r.total for r in records.values()), default=0.0) or 1.0
    coverable = {a for r in records.values() for a in r.covered}
    elliptical = sum(weights.get(a, 0.0) for a in coverable) < 0.5 * total_weight
    topic = selection.topic
    latest = max((p for p, lbl in enumerate(labels) if lbl == topic), default=None) if topic is not None else None
    matching = {history.positions[t] for t, r in records.items() if r.covered}
    relevant = {p for p in case["relevant_turns"]}
    rows, ys, costs = [], [], []
    n = len(order)
    for pos, turn_id in enumerate(order):
        r = records.get(turn_id)
        covered = r.covered if r else ()
        telling = [a for a in covered if anchor_kind(a) != AnchorKind.CJK_CHAR and anchor_commonness(a) < gk.params.evidence_max_commonness]
        distinct = [a for a in covered if anchor_kind(a) != AnchorKind.CJK_CHAR]
        same = float(topic is not None and labels[pos] == topic)
        is_latest = float(latest is not None and pos == latest)
        ref = float(bool(cues.points_back))
        rows.append({
            "bias": 1.0, "same_topic": same, "active_topic": float(labels[pos] == labels[-1]),
            "latest_of_topic": is_latest, "opener": float(topic is not None and pos == topic),
            "distance": math.log1p(n - 1 - pos), "score_ratio": (r.total / best) if r else 0.0,
            "telling_share": sum(weights.get(a, 0.0) for a in set(telling)) / total_weight,
            "telling_words": float(len(set(telling))),
            "distinct_share": sum(weights.get(a, 0.0) for a in set(distinct)) / total_weight,
            "commonness": min((anchor_commonness(a) for a in distinct), default=1.0),
            "reference": ref, "continue": float(selection.decision == "continue"),
            "return": float(selection.decision == "return"), "switch": float(selection.decision == "switch"),
            "elliptical": float(elliptical), "same_x_reference": same * ref, "latest_x_reference": is_latest * ref,
            "neighbour_of_match": float(same and (pos + 1 in matching or pos - 1 in matching)),
        })
        ys.append(int(pos in relevant))
        costs.append(history.costs[turn_id])
    kept = {history.positions[t] for t in selection.turn_ids}
    return rows, ys, costs, kept


def simulate(cases: list[dict], probs: list[np.ndarray], threshold: float, budget: int) -> dict[str, float]:
    """The figures of keeping, per case, the turns at or above ``threshold``, best first, within budget."""
    kept_sets = []
    for case, p in zip(cases, probs):
        left, kept = budget, set()
        for pos in sorted(range(len(p)), key=lambda i: -p[i]):
            if p[pos] < threshold:
                break
            if case["_costs"][pos] <= left:
                kept.add(pos)
                left -= case["_costs"][pos]
        kept_sets.append(kept)
    return figures(cases, kept_sets)


def figures(cases: list[dict], kept_sets: list[set[int]]) -> dict[str, float]:
    """Recall (cases needing a turn), precision (pooled), off-topic share (cases labelling off-topic turns), kept share."""
    recall, recall_n, hits, kept_n, off, off_n, tok, tok_all = 0.0, 0, 0, 0, 0, 0, 0, 0
    for case, kept in zip(cases, kept_sets):
        rel = set(case["relevant_turns"])
        if rel:
            recall += len(kept & rel) / len(rel)
            recall_n += 1
        hits += len(kept & rel)
        kept_n += len(kept)
        meta = case.get("meta") or {}
        if "off_topic_turns" in meta:
            off_n += 1
            off += bool(kept & set(meta["off_topic_turns"]))
        tok += sum(case["_costs"][p] for p in kept)
        tok_all += sum(case["_costs"])
    return {"recall": recall / max(recall_n, 1), "precision": hits / max(kept_n, 1),
            "off_topic": off / off_n if off_n else float("nan"), "kept": tok / max(tok_all, 1)}


def fold(case: dict) -> int:
    """Two folds within half A, by conversation."""
    return int(hashlib.md5(("fold" + str(case["conv_id"])).encode()).hexdigest(), 16) % 2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--l2", type=float, default=1.0)
    parser.add_argument("--stacked", action="store_true", help="add the rules' own decision as an input")
    args = parser.parse_args(argv)
    data: dict[str, list[dict]] = {}
    for name, budget in RUNS:
        cases = split_half(load_cases(dataset_path(args.data, name)), "A")
        cases = [c for c in cases if c.get("relevant_turns") is not None and c["turns"]]
        for case in cases:
            rows, ys, costs, kept = turn_rows(case, budget)
            names = STACKED if args.stacked else FEATURES
            for pos, row in enumerate(rows):
                row["rules_kept"] = float(pos in kept)
            case["_x"] = np.array([[row[f] for f in names] for row in rows])
            case["_y"], case["_costs"], case["_rules"], case["_run"] = np.array(ys, float), costs, kept, name
        data[name] = cases
    everything = [c for cases in data.values() for c in cases]
    # each dataset weighs the same in the fit
    def stack(cases: list[dict]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        x = np.vstack([c["_x"] for c in cases])
        y = np.concatenate([c["_y"] for c in cases])
        share: dict[str, int] = defaultdict(int)
        for c in cases:
            share[c["_run"]] += len(c["_y"])
        w = np.concatenate([np.full(len(c["_y"]), 1.0 / share[c["_run"]]) for c in cases])
        return x, y, w
    weights_by_fold = {}
    for held in (0, 1):
        train = [c for c in everything if fold(c) != held]
        x, y, w = stack(train)
        weights_by_fold[held] = fit_weighted(x, y, w * len(w), args.l2)
    x, y, w = stack(everything)
    whole = fit_weighted(x, y, w * len(w), args.l2)
    print("fitted on all of half A:", {f: round(float(v), 3) for f, v in zip(STACKED if args.stacked else FEATURES, whole)})
    for name, budget in RUNS:
        cases = data[name]
        rules = figures(cases, [c["_rules"] for c in cases])
        print(f"{name}@{budget} rules: " + " ".join(f"{k} {v:.3f}" for k, v in rules.items()))
        probs = [1 / (1 + np.exp(-c["_x"] @ weights_by_fold[fold(c)])) for c in cases]
        for threshold in (0.3, 0.4, 0.5, 0.6, 0.7):
            sim = simulate(cases, probs, threshold, budget)
            print(f"   model (held-out fold) p>={threshold}: " + " ".join(f"{k} {v:.3f}" for k, v in sim.items()))
    return 0


def fit_weighted(x: np.ndarray, y: np.ndarray, w: np.ndarray, l2: float, rounds: int = 30) -> np.ndarray:
    """Weighted logistic regression by Newton's method, L2 on every weight but the bias."""
    beta = np.zeros(x.shape[1])
    reg = np.full(x.shape[1], l2)
    reg[0] = 0.0
    for _ in range(rounds):
        p = 1 / (1 + np.exp(-x @ beta))
        grad = x.T @ (w * (p - y)) + reg * beta
        hess = (x * (w * p * (1 - p))[:, None]).T @ x + np.diag(reg) + 1e-9 * np.eye(x.shape[1])
        beta -= np.linalg.solve(hess, grad)
    return beta


if __name__ == "__main__":
    raise SystemExit(main())

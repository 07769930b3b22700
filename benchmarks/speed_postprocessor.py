"""``GatekeeperNodePostprocessor`` against LlamaIndex's ``SimilarityPostprocessor``, 200 nodes.

The issue's first row: CPU and wall time per call, medians over ``calls`` calls, in one
process, on LoCoMo text (the development data's turns, one node per turn).

* **same nodes**: every call gets the same 200 retrieved nodes (new ``NodeWithScore``
  objects each time, as a retriever returns them) and another question;
* **new nodes**: every call gets 200 nodes whose texts the postprocessor has not seen.

``SimilarityPostprocessor(similarity_cutoff=0.5)`` is what users would use instead.  Run
on its own (``python benchmarks/speed_postprocessor.py``) or through
``python benchmarks/speed.py --postprocessor``.
"""

from __future__ import annotations

import gc
import json
import lzma
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

NODES, CALLS = 200, 24
DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def locomo_texts(data_dir: Path = DATA) -> tuple[list[str], list[str]]:
    """``(chunk texts, questions)`` from the LoCoMo development data.

    A chunk is 1 to 4 consecutive messages of a conversation (a retriever's chunks vary
    in size); the distinct chunks are shuffled with a fixed seed, so every batch of 200
    mixes sizes alike."""
    messages: dict[str, None] = {}
    questions: dict[str, None] = {}
    with lzma.open(data_dir / "locomo.dev.jsonl.xz", "rt", encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            case = json.loads(line)
            questions.setdefault(case["query"], None)
            for turn in case["turns"]:
                messages.setdefault(turn["user"], None)
                messages.setdefault(turn["assistant"], None)
    ordered = list(messages)
    chunks = dict.fromkeys("\n".join(ordered[i: i + k]) for k in (1, 2, 3, 4) for i in range(len(ordered) - k + 1))
    texts = list(chunks)
    random.Random(22).shuffle(texts)
    return texts, list(questions)


def _time(call: Callable[[Any], Any], inputs: Sequence[Any]) -> dict[str, float]:
    """Median CPU and wall milliseconds of ``call`` over ``inputs`` (gc collected first)."""
    gc.collect()
    cpu, wall = [], []
    for item in inputs:
        c0, w0 = time.process_time_ns(), time.perf_counter_ns()
        call(item)
        cpu.append(time.process_time_ns() - c0)
        wall.append(time.perf_counter_ns() - w0)
    return {"cpu_ms": statistics.median(cpu) / 1e6, "wall_ms": statistics.median(wall) / 1e6, "n": len(inputs)}


def postprocessor_rows(calls: int = CALLS, nodes: int = NODES, data_dir: Path = DATA) -> list[dict[str, Any]]:
    """Rows ``{"path", "ours", "alternative"}`` (each ``{"cpu_ms", "wall_ms", "n"}``) for the
    same-nodes and new-nodes cases."""
    from llama_index.core.postprocessor import SimilarityPostprocessor
    from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

    from llamaindex_gatekeeper.postprocessor import GatekeeperNodePostprocessor

    texts, questions = locomo_texts(data_dir)
    needed = nodes * (calls + 2)
    if len(texts) < needed:
        raise SystemExit(f"need {needed} distinct LoCoMo chunks, found {len(texts)}")  # pragma: no cover

    def retrieved(batch: Sequence[str], offset: int) -> list[Any]:
        return [
            NodeWithScore(node=TextNode(text=t, id_=f"n{offset + i}", metadata={"source": f"conv{offset + i}"}),
                          score=1.0 - i / len(batch))
            for i, t in enumerate(batch)
        ]

    def batches(start: int) -> list[list[str]]:
        return [texts[start + k * nodes: start + (k + 1) * nodes] for k in range(calls)]

    rows = []
    for case, warm in (("same nodes", True), ("new nodes", False)):
        ours = GatekeeperNodePostprocessor(token_budget=2000)
        theirs = SimilarityPostprocessor(similarity_cutoff=0.5)
        if warm:
            fixed = texts[:nodes]
            inputs = [(retrieved(fixed, 0), QueryBundle(questions[k % len(questions)])) for k in range(calls)]
            ours.postprocess_nodes(retrieved(fixed, 0), QueryBundle(questions[-1]))  # the nodes seen before
            theirs.postprocess_nodes(retrieved(fixed, 0), QueryBundle(questions[-1]))
            their_inputs = [(retrieved(fixed, 0), q) for _, q in inputs]
        else:
            start = 2 * nodes
            ours.postprocess_nodes(retrieved(texts[nodes: 2 * nodes], 0), QueryBundle(questions[-1]))  # warm-up
            theirs.postprocess_nodes(retrieved(texts[nodes: 2 * nodes], 0), QueryBundle(questions[-1]))
            inputs = [(retrieved(b, start + k * nodes), QueryBundle(questions[k % len(questions)]))
                      for k, b in enumerate(batches(start))]
            their_inputs = [(retrieved(b, 0), q) for b, (_, q) in zip(batches(start), inputs)]
        rows.append({
            "path": f"GatekeeperNodePostprocessor, {nodes} nodes, {case}",
            "ours": _time(lambda a: ours.postprocess_nodes(a[0], a[1]), inputs),
            "alternative_name": "SimilarityPostprocessor",
            "alternative": _time(lambda a: theirs.postprocess_nodes(a[0], a[1]), their_inputs),
        })
    return rows


def print_rows(rows: Sequence[dict[str, Any]]) -> None:
    """One line per row: ours, the alternative, and the ratio (CPU and wall)."""
    for row in rows:
        o, a = row["ours"], row["alternative"]
        print(f"{row['path']}: {o['cpu_ms']:.2f} ms CPU / {o['wall_ms']:.2f} ms wall; "
              f"{row['alternative_name']} {a['cpu_ms']:.3f} / {a['wall_ms']:.3f} ms; "
              f"ratio {o['cpu_ms'] / a['cpu_ms']:.1f}x CPU, {o['wall_ms'] / a['wall_ms']:.1f}x wall "
              f"(medians of {o['n']})")


if __name__ == "__main__":
    print_rows(postprocessor_rows())
    sys.exit(0)

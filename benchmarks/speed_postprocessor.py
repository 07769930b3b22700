"""``GatekeeperNodePostprocessor`` against LlamaIndex's ``SimilarityPostprocessor``, 200 nodes.

The issue's first row: CPU and wall time per call, in one process, on LoCoMo text (the
development data's messages, chunked 1 to 4 messages a node).  Calls alternate between
the two postprocessors, so both see the same machine load; medians over 24 calls, the
round of the median ratio of 5 (the machine may be shared: neither the luckiest round nor
the unluckiest; every round's ratio is printed).

* **same nodes**: every call gets the same 200 retrieved nodes (new ``NodeWithScore`` and
  ``TextNode`` objects each time, as a retriever returns them) and another question;
* **new nodes**: every call gets 200 nodes whose texts the process has not seen (the
  postprocessor's caches and the token counts kept per text are emptied before each
  round).  Beside it, the floor the issue names:
  extracting the anchors of each new node's text and counting its tiktoken tokens
  (``anchors.extract`` and ``encode_ordinary`` on ``get_content``), timed the same way.
  The postprocessor may go below it: it analyses a node's metadata header apart from
  its body (the two are read together when the body may hold a query term, the header
  alone when only it may), and counts only the nodes that hold one (see
  ``llamaindex_gatekeeper/postprocessor.py``).

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

NODES, CALLS, ROUNDS = 200, 24, 5
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


def _timed(call: Callable[[], Any]) -> tuple[int, int]:
    c0, w0 = time.process_time_ns(), time.perf_counter_ns()
    call()
    return time.process_time_ns() - c0, time.perf_counter_ns() - w0


def _medians(samples: Sequence[tuple[int, int]]) -> dict[str, float]:
    return {"cpu_ms": statistics.median(c for c, _ in samples) / 1e6,
            "wall_ms": statistics.median(w for _, w in samples) / 1e6, "n": len(samples)}


def postprocessor_rows(
    calls: int = CALLS, nodes: int = NODES, rounds: int = ROUNDS, data_dir: Path = DATA
) -> list[dict[str, Any]]:
    """Rows ``{"path", "ours", "alternative_name", "alternative", "rounds", "floor", "ratios"}`` (each
    figure ``{"cpu_ms", "wall_ms", "n"}``) for the same-nodes and new-nodes cases;
    ``floor`` (new nodes only, else None): extracting and counting each new text.

    Calls alternate (ours, theirs, ours, ...), so both see the same machine load; each
    round gives the medians over ``calls`` calls, and the round with the median CPU ratio
    is reported (``ratios``: every round's, sorted).  Before each
    new-nodes round the postprocessor's caches and the process's token counts are emptied,
    so its nodes are new to it."""
    from llama_index.core.postprocessor import SimilarityPostprocessor
    from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

    from llama_index.core.schema import MetadataMode

    from context_gatekeeper import extract_anchors
    from context_gatekeeper.tokens import DEFAULT_ENCODING, _counts_cache, load_encoding
    from llamaindex_gatekeeper.node_vectors import VECTORS
    from llamaindex_gatekeeper.postprocessor import ANCHORS, FACTS, GatekeeperNodePostprocessor

    encode = load_encoding().encode_ordinary

    def floor(nodes: Sequence[Any]) -> None:
        for text in [n.node.get_content(metadata_mode=MetadataMode.LLM) for n in nodes]:
            extract_anchors(text)
            encode(text)

    texts, questions = locomo_texts(data_dir)
    needed = nodes * (calls + 1)
    if len(texts) < needed:
        raise SystemExit(f"need {needed} distinct LoCoMo chunks, found {len(texts)}")  # pragma: no cover

    def retrieved(batch: Sequence[str], offset: int) -> list[Any]:
        return [
            NodeWithScore(node=TextNode(text=t, id_=f"n{offset + i}", metadata={"source": f"conv{offset + i}"}),
                          score=1.0 - i / len(batch))
            for i, t in enumerate(batch)
        ]

    rows = []
    for case in ("same nodes", "new nodes"):
        measured: list[tuple[float, dict[str, Any], dict[str, Any], dict[str, Any] | None]] = []
        for _ in range(rounds):
            for cache in (FACTS, ANCHORS, VECTORS, _counts_cache(DEFAULT_ENCODING)):  # + every text's tokens
                cache.clear()
            ours = GatekeeperNodePostprocessor(token_budget=2000)
            theirs = SimilarityPostprocessor(similarity_cutoff=0.5)
            if case == "same nodes":  # a new list of the same nodes per call, as a retriever returns them
                ours.postprocess_nodes(retrieved(texts[:nodes], 0), QueryBundle(questions[-1]))  # seen before
                batches = [(texts[:nodes], 0)] * calls
            else:
                batches = [(texts[(k + 1) * nodes: (k + 2) * nodes], (k + 1) * nodes) for k in range(calls)]
            theirs.postprocess_nodes(retrieved(texts[:nodes], 0), QueryBundle(questions[-1]))  # warm-up
            inputs = [(retrieved(b, o), retrieved(b, o), QueryBundle(questions[k % len(questions)]))
                      for k, (b, o) in enumerate(batches)]
            gc.collect()
            mine, other, least = [], [], []
            for a, b, q in inputs:
                mine.append(_timed(lambda: ours.postprocess_nodes(a, q)))
                other.append(_timed(lambda: theirs.postprocess_nodes(b, q)))
                if case == "new nodes":
                    least.append(_timed(lambda: floor(b)))
            o, t = _medians(mine), _medians(other)
            measured.append((o["cpu_ms"] / t["cpu_ms"], o, t, _medians(least) if least else None))
        # the round of the median ratio: neither the luckiest nor the unluckiest on a shared machine
        _, mid_ours, mid_theirs, mid_floor = sorted(measured, key=lambda m: m[0])[(len(measured) - 1) // 2]
        rows.append({"path": f"GatekeeperNodePostprocessor, {nodes} nodes, {case}", "ours": mid_ours,
                     "alternative_name": "SimilarityPostprocessor", "alternative": mid_theirs, "rounds": rounds,
                     "floor": mid_floor, "ratios": sorted(round(m[0], 2) for m in measured)})
    return rows


def print_rows(rows: Sequence[dict[str, Any]]) -> None:
    """One line per row: ours, the alternative, and the ratio (CPU and wall)."""
    for row in rows:
        o, a = row["ours"], row["alternative"]
        print(f"{row['path']}: {o['cpu_ms']:.2f} ms CPU / {o['wall_ms']:.2f} ms wall; "
              f"{row['alternative_name']} {a['cpu_ms']:.3f} / {a['wall_ms']:.3f} ms; "
              f"ratio {o['cpu_ms'] / a['cpu_ms']:.1f}x CPU, {o['wall_ms'] / a['wall_ms']:.1f}x wall "
              f"(medians of {o['n']} interleaved calls; the median round of {row['rounds']}, ratios {row['ratios']})")
        if row.get("floor"):
            f = row["floor"]
            print(f"  floor, anchors.extract + tiktoken of each new text: {f['cpu_ms']:.2f} ms CPU, "
                  f"{f['cpu_ms'] / a['cpu_ms']:.1f}x SimilarityPostprocessor; ours is "
                  f"{o['cpu_ms'] / f['cpu_ms']:.2f}x the floor")


if __name__ == "__main__":
    print_rows(postprocessor_rows())
    sys.exit(0)

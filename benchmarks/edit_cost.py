"""What mutable transcripts cost and save, measured with a scripted model (no API).

Part 1, the paper's three scenarios (``context_gatekeeper.testing.scenarios``): messages and
tokens retained when corrections are appended as new messages (condition A) versus
applied as edits (condition B), and the share of A's tokens that later corrections
made obsolete.  These count the context that remains, not the tokens the edits
themselves cost (part 2).

Part 2, the two edit formats: for transcripts of 10, 50 and 200 turns and a change
to one message, the tokens the model reads (its prompt) and writes (its reply) with
``rewrite`` (the whole revised transcript, as the research prototype did) and
``patch`` (operations on ids only).  The scripted model returns the ideal reply in
each format, so the counts measure the formats, not a model's verbosity.

Tokens are tiktoken ``cl100k_base`` counts (offline).  With the package installed
(``pip install -e .``), run::

    python benchmarks/edit_cost.py [--turns 10,50,200]
"""

from __future__ import annotations

import argparse
import random

from rich.console import Console
from rich.table import Table

from context_gatekeeper import Delete, Replace, Transcript, tiktoken_counter
from context_gatekeeper.editing.format import ideal_patch_reply, ideal_rewrite_reply
from context_gatekeeper.testing import ScriptedModel

from context_gatekeeper.testing.scenarios import SCENARIOS, Scenario

count = tiktoken_counter("cl100k_base")

TOPICS = [
    ("How do I size a Redis lock TTL?", "Make it longer than the longest critical section and renew it with a watchdog."),
    ("What does asyncio.gather do on errors?", "It raises the first exception and, by default, lets the other tasks run on."),
    ("How many Kafka partitions should a topic start with?", "Divide peak throughput by one consumer's rate and add headroom."),
    ("Why is my Postgres query slow?", "Run **EXPLAIN ANALYZE** and look for sequential scans on large tables."),
    ("Plan a weekend in Lisbon.", "Day 1: Alfama and the castle. Day 2: Belém and a tram ride along the river."),
    ("How do I make the Docker image smaller?", "Use a multi-stage build and a slim or distroless base image."),
]


def condition_b(scenario: Scenario) -> Transcript:
    """Run the scenario's edits through a transcript with a scripted model."""
    t = Transcript(scenario.name)
    for role, content in scenario.base:
        t.append(**{role: content})
    for instruction, by_position in scenario.edits:
        state = t.messages
        wanted = [Delete(state[i].id) if text is None else Replace(state[i].id, text) for i, text in by_position.items()]
        t.edit(instruction, model=ScriptedModel([ideal_patch_reply(state, wanted)]), allow_large_deletion=True)
    return t


def scenario_table() -> Table:
    table = Table(title="Part 1: retained context, corrections appended (A) vs edited (B)")
    for column in ("scenario", "A messages", "B messages", "A tokens", "B tokens", "A obsolete tokens", "A obsolete share"):
        table.add_column(column, justify="right" if column != "scenario" else "left")
    totals = [0, 0, 0, 0, 0]
    for scenario in SCENARIOS:
        a = scenario.condition_a
        a_tokens = sum(count(text) for _, text in a)
        obsolete = sum(count(text) for i, (_, text) in enumerate(a) if i in scenario.obsolete)
        b = condition_b(scenario).messages
        b_tokens = sum(count(m.content) for m in b)
        row = [len(a), len(b), a_tokens, b_tokens, obsolete]
        totals = [x + y for x, y in zip(totals, row)]
        table.add_row(scenario.name, *map(str, row), f"{obsolete / a_tokens:.0%}")
    n = len(SCENARIOS)
    means = [x / n for x in totals]
    table.add_row("mean", *(f"{x:.1f}" for x in means), f"{totals[4] / totals[2]:.0%}", style="bold")
    table.caption = (
        f"B keeps {1 - totals[1] / totals[0]:.0%} fewer messages and {1 - totals[3] / totals[2]:.0%} fewer tokens "
        "than A (retained context only; the edits' own model calls are in part 2)."
    )
    return table


def synthetic_transcript(turns: int, seed: int = 7) -> Transcript:
    rng = random.Random(seed)
    t = Transcript(f"synthetic-{turns}")
    for i in range(turns):
        question, answer = rng.choice(TOPICS)
        t.append(user=f"{question} (turn {i + 1})", assistant=answer)
    return t


def format_costs(turns: int) -> dict[str, tuple[int, int]]:
    """(input tokens, output tokens) per strategy for a one-message change."""
    costs = {}
    for strategy, ideal in (("rewrite", ideal_rewrite_reply), ("patch", ideal_patch_reply)):
        t = synthetic_transcript(turns)
        target = t.messages[len(t.messages) // 2]
        reply = ideal(t.messages, [Replace(target.id, target.content + " (corrected: renew every TTL/3)")])
        model = ScriptedModel([reply])
        t.edit("Add that the watchdog renews every TTL/3.", model=model, strategy=strategy)
        prompt_tokens = sum(count(m["content"]) for m in model.calls[0])
        costs[strategy] = (prompt_tokens, count(reply))
        assert t.messages[len(t.messages) // 2].content.endswith("(corrected: renew every TTL/3)")
    return costs


def format_table(sizes: list[int]) -> Table:
    table = Table(title="Part 2: model tokens for a one-message change, rewrite vs patch")
    for column in ("turns", "rewrite in", "rewrite out", "patch in", "patch out", "patch out / rewrite out"):
        table.add_column(column, justify="right")
    for turns in sizes:
        costs = format_costs(turns)
        (ri, ro), (pi, po) = costs["rewrite"], costs["patch"]
        table.add_row(str(turns), str(ri), str(ro), str(pi), str(po), f"{po / ro:.1%}")
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", default="10,50,200", help="transcript sizes for part 2")
    args = parser.parse_args(argv)
    console = Console(width=max(Console().width, 110))
    console.print(scenario_table())
    console.print(format_table([int(x) for x in args.turns.split(",")]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

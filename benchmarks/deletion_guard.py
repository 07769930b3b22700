"""What the deletion guard measures, and what it costs (issue #11 item 4).

Part 1: the share of a conversation's tokens each kind of edit destroys (removed
plus replaced, by a word-level diff counted in tiktoken ``cl100k_base`` tokens),
for the paper's three scenarios (``context_gatekeeper.testing.scenarios``), a one-word fix
across two messages, and same-length junk in place of every message.  The default
limit (``DEFAULT_MAX_DELETION_SHARE``) is printed with them.

Part 2: the time ``deleted_share`` takes when every message of a conversation of
10, 100 and 1000 turns is changed (one word per message) and when one message of
2k, 20k and 200k characters is rewritten to junk, has one word changed, or has
one word changed in every tenth sentence.  Run::

    python benchmarks/deletion_guard.py
"""

from __future__ import annotations

import time

from context_gatekeeper import tiktoken_counter
from context_gatekeeper.editing.checks import DEFAULT_MAX_DELETION_SHARE, deleted_share
from context_gatekeeper.records.messages import Message
from context_gatekeeper.records.operations import Change, Remove

from context_gatekeeper.testing.scenarios import SCENARIOS

count = tiktoken_counter("cl100k_base")
ANSWER = "Ireland's GDP in {n} was about 504 billion US dollars, driven by pharmaceuticals and services."


def junk(text: str) -> str:
    """Same length, no word in common."""
    return "".join("z" if c.isalnum() else c for c in text)


def scenario_shares() -> list[tuple[str, float]]:
    """(edit, share destroyed) for each edit of each paper scenario."""
    rows = []
    for scenario in SCENARIOS:
        state = [Message(str(i), role, text) for i, (role, text) in enumerate(scenario.base)]
        for instruction, by_position in scenario.edits:
            changes = [
                Remove(state[i], None) if text is None else Change(state[i], state[i].revised(text, revision=0))
                for i, text in by_position.items()
            ]
            rows.append((f"{scenario.name}: {instruction[:40]}", deleted_share(state, changes, count)))
            state = [m.revised(by_position[i], revision=0) if by_position.get(i) else m for i, m in enumerate(state)]
    return rows


def conversation(turns: int) -> list[Message]:
    out = []
    for n in range(turns):
        out += [Message(f"u{n}", "user", f"What was Ireland's GDP in {n}?"), Message(f"a{n}", "assistant", ANSWER.format(n=n))]
    return out


def timed(state: list[Message], changes: list) -> tuple[float, float]:
    start = time.perf_counter()
    share = deleted_share(state, changes, count)
    return share, time.perf_counter() - start


def main() -> None:
    print(f"default limit: {DEFAULT_MAX_DELETION_SHARE:.0%} of the editable tokens\n")
    print("share destroyed by each edit")
    rows = scenario_shares()
    small = conversation(2)
    rows.append(("Iceland, not Ireland (2 of 4 messages)",
                 deleted_share(small, [Change(m, m.revised(m.content.replace("Ireland", "Iceland"), revision=0))
                                       for m in small[:2]], count)))
    rows.append(("same-length junk in every message",
                 deleted_share(small, [Change(m, m.revised(junk(m.content), revision=0)) for m in small], count)))
    for name, share in rows:
        print(f"  {share:6.1%}  {name}")
    print("\ntime of deleted_share")
    for turns in (10, 100, 1000):
        state = conversation(turns)
        changes = [Change(m, m.revised(m.content.replace("Ireland", "Iceland"), revision=0)) for m in state]
        share, seconds = timed(state, changes)
        print(f"  {turns:5d} turns, every message changed: {seconds * 1000:8.1f} ms (share {share:.1%})")
    for size in (2_000, 20_000, 200_000):
        text = " ".join(ANSWER.format(n=n) for n in range(size // (len(ANSWER) + 1)))
        message = Message("m", "assistant", text)
        for what, after in (("to junk", junk(text)), ("one word changed", text.replace("Ireland", "Iceland", 1)),
                            ("every 10th sentence changed", ". ".join(
                                s.replace("Ireland", "Iceland") if i % 10 == 0 else s
                                for i, s in enumerate(text.split(". "))))):
            share, seconds = timed([message], [Change(message, message.revised(after, revision=0))])
            print(f"  one message of {len(text):7d} chars, {what:28s}: {seconds * 1000:8.1f} ms (share {share:.1%})")


if __name__ == "__main__":
    main()

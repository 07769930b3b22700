"""Cut-off edit replies lose nothing silently, and the deletion guard stays fast.

1. A complete JSON span *before* a cut-off answer (a plan, a draft, an example
   like ``[]``) must not be taken for the answer: the reply is refused as cut off
   and retried, and nothing is committed.
2. The deletion guard's word diff stays near-linear on one long message with a
   flat vocabulary (logs, CSV, ids) and still never understates a deletion.
"""

from __future__ import annotations

import json
import random
from difflib import SequenceMatcher

import pytest

from context_gatekeeper import EditError, Transcript
from context_gatekeeper.editing import checks as edit_checks
from context_gatekeeper.editing.checks import destroyed_runs
from context_gatekeeper.editing.format import ideal_patch_reply, ideal_rewrite_reply
from context_gatekeeper.editing.parse import load_json
from context_gatekeeper.editing.compute import compute_edit
from context_gatekeeper.records.messages import Message
from context_gatekeeper.records.operations import Delete, Replace
from context_gatekeeper.testing import ScriptedModel


def irish_transcript(name: str = "e") -> Transcript:
    t = Transcript(name)
    for i in range(5):
        t.append(user=f"Question number {i} about the Irish economy and its GDP in 2021",
                 assistant=f"Answer number {i}: Ireland's GDP was about 500 billion dollars in 2021.")
    return t


def stored_state(t: Transcript) -> tuple:
    return tuple((m.id, m.role, m.content) for m in t.messages), t.head, len(t.history()), len(t.record())


def ten_state() -> list[Message]:
    out = []
    for n in range(5):
        out += [Message(f"u{n}", "user", f"Question {n} about Ireland's economy?"),
                Message(f"a{n}", "assistant", f"Answer {n}: Ireland grew by {n} percent.")]
    return out


# -- item 1: a complete span before a cut-off answer ------------------------------------------
def test_a_partial_list_before_a_cut_off_rewrite_commits_nothing():
    t = irish_transcript()
    full = [{"id": str(i + 1), "role": m.role, "content": m.content.replace("Ireland", "Iceland")}
            for i, m in enumerate(t.messages)]
    reply = ("I will change these:\n" + json.dumps(full[:6]) + "\nHere is the complete revised transcript:\n"
             + json.dumps(full)[:-200])
    before = stored_state(t)
    calls = []
    with pytest.raises(EditError, match="incomplete"):
        t.edit("Iceland, not Ireland", model=lambda m: calls.append(m) or reply, strategy="rewrite")
    assert stored_state(t) == before and len(t.messages) == 10
    assert len(calls) == 2  # retried once, like any unusable reply


def test_a_refused_prefixed_cut_off_is_retried_and_a_complete_second_answer_commits():
    t = irish_transcript()
    requests = [Replace(m.id, m.content.replace("Ireland", "Iceland")) for m in t.messages if "Ireland" in m.content]
    full = ideal_rewrite_reply(t.messages, requests)
    cut = "Draft: []\nFinal:\n" + full[: len(full) * 3 // 4]
    model = ScriptedModel([cut, full])
    t.edit("Iceland, not Ireland", model=model, strategy="rewrite")
    assert len(t.messages) == 10 and not any("Ireland" in m.content for m in t.messages)
    assert "incomplete" in model.calls[1][-1]["content"]


def test_an_empty_list_in_prose_before_a_cut_off_rewrite_does_not_wipe_the_conversation():
    t = irish_transcript()
    full = ideal_rewrite_reply(t.messages, [Replace(t.messages[1].id, "Iceland's GDP was about 25 billion.")])
    reply = "If nothing needed changing I would answer []. Revised:\n" + full[: len(full) - 150]
    before = stored_state(t)
    with pytest.raises(EditError, match="incomplete"):
        t.edit("Iceland", model=ScriptedModel([reply, reply]), strategy="rewrite", allow_large_deletion=True)
    assert stored_state(t) == before


def test_an_empty_plan_before_a_cut_off_patch_is_not_a_silent_no_op():
    state = ten_state()
    full = ideal_patch_reply(state, [Replace(m.id, m.content.replace("Ireland", "Iceland")) for m in state])
    reply = 'Plan: {"operations": []}. Real answer:\n' + full[: len(full) * 2 // 3]
    with pytest.raises(EditError, match="incomplete"):
        compute_edit(state, "Iceland", ScriptedModel([reply, reply]))
    with pytest.raises(EditError, match="incomplete"):
        load_json(reply)


def test_a_stray_prose_bracket_between_a_complete_span_and_a_cut_off_answer_hides_nothing():
    state = ten_state()
    full = ideal_rewrite_reply(state, [Delete("u4"), Delete("a4")])
    reply = "Nothing yet: [] (see [the notes below. Revised:\n" + full[: len(full) - 40]
    with pytest.raises(EditError, match="incomplete"):
        compute_edit(state, "drop the last turn", ScriptedModel([reply, reply]), strategy="rewrite",
                     allow_large_deletion=True)


PREFIXES = [
    "",
    "Sure.\n",
    "I would answer [] if nothing changed. Revised:\n",
    'Plan: {"operations": []}. Real answer:\n',
    "```json\n[]\n```\nSorry, here is the full answer:\n",
    "Example: [{\"id\": \"1\", \"role\": \"user\", \"content\": \"Question 0 about Iceland's economy?\"}]\nAnswer:\n",
    "Example: {\"operations\": [{\"op\": \"delete\", \"id\": \"2\"}]}\n",
    "Note (see [1]) and [2]: ",
]


def _answers(state: list[Message]) -> list[tuple[str, str]]:
    requests = [Replace(m.id, m.content.replace("Ireland", "Iceland")) for m in state]
    patch = ideal_patch_reply(state, requests)
    bare_patch = json.dumps(json.loads(patch)["operations"])
    rewrite = ideal_rewrite_reply(state, requests)
    wrapped = json.dumps({"messages": json.loads(rewrite)}, indent=1)
    return [("patch", patch), ("patch", bare_patch), ("rewrite", rewrite), ("rewrite", wrapped)]


@pytest.mark.parametrize("fence", [False, True])
def test_fuzz_no_cut_reply_commits_whatever_comes_before_it(fence):
    state = ten_state()
    rng = random.Random(11)
    tried = 0
    for strategy, answer in _answers(state):
        assert compute_edit(state, "Iceland", ScriptedModel([answer]), strategy=strategy,
                            allow_large_deletion=True).attempts == 1  # the whole answer is fine
        cuts = sorted({len(answer) // 2 + rng.randrange(len(answer) - len(answer) // 2 - 1) for _ in range(25)})
        cuts += [len(answer) - 1, len(answer) - 2]  # only the closing bracket(s) missing
        for prefix in PREFIXES:
            for cut in cuts:
                body = answer[:cut]
                reply = prefix + ("```json\n" + body if fence else body)
                model = ScriptedModel([reply, reply])
                with pytest.raises(EditError):
                    compute_edit(state, "Iceland", model, strategy=strategy, allow_large_deletion=True)
                tried += 1
    assert tried > 500


@pytest.mark.parametrize("tail", [
    "\nNote: I kept message 2 as it was [it has no country",
    "\n(see [above",
    "\nI used {curly braces for nothing",
    "\nDone [",  # a lone bracket at the very end: refused, see below
])
def test_complete_answers_followed_by_prose_with_an_unclosed_bracket(tail):
    state = ten_state()
    answer = ideal_rewrite_reply(state, [Replace("u0", "Question 0 about Iceland's economy?")])
    model = ScriptedModel([answer + tail, answer])
    result = compute_edit(state, "Iceland", model, strategy="rewrite")
    # a bracket with nothing after it may be an answer cut off right at its start: retried
    assert result.attempts == (2 if tail.endswith("[") else 1)
    assert result.changes[0].after.content == "Question 0 about Iceland's economy?"


# -- item 2: the deletion guard's diff on a flat vocabulary -----------------------------------
def _exact(before: str, after: str) -> list[str]:
    words = edit_checks._WORD
    old = list(words.finditer(before))
    matcher = SequenceMatcher(None, [m.group() for m in old], [m.group() for m in words.finditer(after)],
                              autojunk=False)
    return [before[old[i1].start() : old[i2 - 1].end()]
            for tag, i1, i2, _, _ in matcher.get_opcodes() if tag in ("replace", "delete")]


def _lcs(a: list[str], b: list[str]) -> int:
    row = [0] * (len(b) + 1)
    for x in a:
        diagonal = 0
        for j, y in enumerate(b, 1):
            diagonal, row[j] = row[j], diagonal + 1 if x == y else max(row[j], row[j - 1])
    return row[-1]


def _edited(rng: random.Random, words: list[str], edits: int) -> list[str]:
    new = list(words)
    for _ in range(edits):
        p, r = rng.randrange(len(new)), rng.random()
        if r < 0.4:
            new[p] = "changed"
        elif r < 0.7:
            del new[p : p + rng.randint(1, 12)]
        else:
            new[p:p] = ["inserted"] * rng.randint(1, 12)
    return new


def test_destroyed_runs_is_the_exact_diff_on_normal_sized_text():
    rng = random.Random(2)
    for _ in range(40):
        vocab = [f"w{n}" for n in range(rng.choice([5, 40, 400]))]
        words = [rng.choice(vocab) for _ in range(rng.randint(1, 600))]
        new = _edited(rng, words, rng.randint(0, 30)) or ["x"]
        before, after = " ".join(words), " ".join(new)
        assert destroyed_runs(before, after) == _exact(before, after)


def test_the_anchored_diff_never_understates_what_is_destroyed(monkeypatch):
    monkeypatch.setattr(edit_checks, "_EXACT_DIFF_LIMIT", 200)  # force the long-text path on small inputs
    monkeypatch.setattr(edit_checks, "_HEURISTIC_DIFF_LIMIT", 20_000)
    rng = random.Random(3)
    for _ in range(60):
        vocab = [f"w{n}" for n in range(rng.choice([3, 30, 300]))]
        words = [rng.choice(vocab) for _ in range(rng.randint(50, 300))]
        new = _edited(rng, words, rng.randint(1, 25))
        removed = edit_checks._removed(words, new)
        assert all(0 <= i1 < i2 <= len(words) for i1, i2 in removed)
        assert all(p[1] < q[0] for p, q in zip(removed, removed[1:]))  # ordered, disjoint, not touching
        destroyed = sum(i2 - i1 for i1, i2 in removed)
        assert destroyed >= len(words) - _lcs(words, new)
        kept = [w for i, w in enumerate(words) if not any(i1 <= i < i2 for i1, i2 in removed)]
        assert _lcs(kept, new) == len(kept)  # what is called kept really is in the new text, in order


def test_a_long_flat_vocabulary_message_with_every_tenth_word_changed_is_measured_exactly():
    # 2,000 distinct ids, 50,000 words: about four minutes with a plain difflib diff, well under a second now
    rng = random.Random(4)
    vocab = [f"id{n}" for n in range(2000)]
    words = [rng.choice(vocab) for _ in range(50_000)]
    new = [w if i % 10 else "changed" for i, w in enumerate(words)]
    runs = destroyed_runs(" ".join(words), " ".join(new))
    assert runs == [w for i, w in enumerate(words) if i % 10 == 0]

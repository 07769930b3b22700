"""The paper's three scenarios with a scripted model standing in for the LLM."""

from __future__ import annotations

import pytest

from context_gatekeeper import Delete, Replace, Transcript
from context_gatekeeper.editing.format import ideal_patch_reply
from context_gatekeeper.testing import ScriptedModel
from context_gatekeeper.testing.scenarios import SCENARIOS, Scenario


def run_condition_b(scenario: Scenario) -> tuple[Transcript, ScriptedModel]:
    t = Transcript(scenario.name)
    for role, content in scenario.base:
        t.append(**{role: content})
    model = ScriptedModel(name="scripted")
    for instruction, by_position in scenario.edits:
        state = t.messages
        wanted = [Delete(state[i].id) if text is None else Replace(state[i].id, text) for i, text in by_position.items()]
        model.enqueue(ideal_patch_reply(state, wanted))
        t.edit(instruction, model=model, allow_large_deletion=scenario.allow_large_deletion)
    return t, model


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_condition_b_keeps_only_current_messages(scenario: Scenario) -> None:
    t, model = run_condition_b(scenario)
    assert len(model.calls) == len(scenario.edits)
    assert len(t.messages) == 4 and len(t.messages) < len(scenario.condition_a)
    assert [r.kind for r in t.history()][-len(scenario.edits):] == ["edit"] * len(scenario.edits)
    assert [m.content for m in t.record()] == [content for _, content in scenario.base]
    for instruction, _ in scenario.edits:
        assert any(instruction in call.text for call in model.calls)


def test_retroactive_correction_propagates_to_answers() -> None:
    t, _ = run_condition_b(SCENARIOS[0])
    text = " ".join(m.content for m in t.messages)
    assert "Ireland" not in text and "2021" not in text
    assert "Iceland" in t.messages[0].content and "2022" in t.messages[0].content
    assert "- **Tourism**" in t.messages[3].content  # the Markdown list survived


def test_constraint_injection_keeps_the_plan_structure() -> None:
    t, _ = run_condition_b(SCENARIOS[1])
    plan = t.messages[1].content
    assert plan.startswith("## Lisbon") and "**Day 3**" in plan and "500 EUR" in plan
    assert "180 EUR" not in " ".join(m.content for m in t.messages)


def test_context_pruning_needs_and_gets_permission() -> None:
    t, _ = run_condition_b(SCENARIOS[2])
    text = " ".join(m.content for m in t.messages)
    assert "printer" not in text.lower()
    assert "```python" in t.messages[1].content
    t.undo()
    assert "printer" in " ".join(m.content for m in t.messages).lower()

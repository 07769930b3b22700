"""Natural-language edits with scripted models (docs/architecture.md#data-flow-of-an-edit): formats, repair, retry, guards."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from context_gatekeeper.editing.format import (
    MAX_ECHO, EditView, _as_changes, ideal_patch_reply, ideal_rewrite_reply, output_schema,
)
from context_gatekeeper.editing.compute import EditResult, acompute_edit, compute_edit
from context_gatekeeper.errors import EditError, InvalidInputError, ModelUnavailableError
from context_gatekeeper.records.messages import Message
from context_gatekeeper.records.operations import Change, Delete, InsertAfter, Put, Remove, Replace, apply_changes, invert
from context_gatekeeper.editing.finish_reasons import ModelReply
from context_gatekeeper.testing import ScriptedModel

A1 = (
    "## Ireland's GDP in 2021\n\nIreland's GDP was about **$500 billion**.\n\n"
    "- services\n- industry\n\n```python\nprint('Ireland')\n```"
)
A2 = "The largest categories in *Ireland*:\n\n1. Services\n2. Industry\n   - pharma\n"


def gdp_state() -> list[Message]:
    """System prompt, two exchanges, Markdown and a code block."""
    return [
        Message("sys", "system", "SYSTEM-SECRET: you are a helpful economist."),
        Message("u1", "user", "What was Ireland's GDP in 2021?"),
        Message("a1", "assistant", A1),
        Message("u2", "user", "Which categories are largest?"),
        Message("a2", "assistant", A2),
    ]


def agent_state() -> list[Message]:
    """An agent transcript: a tool call, its result, and an answer (two assistants in a row)."""
    call = {"id": "call_1", "name": "weather", "args": {"city": "Reykjavik"}}
    return [
        Message("u1", "user", "Weather in Reykjavik?"),
        Message("a1", "assistant", "Let me check.", metadata={"tool_calls": [call]}, parts=({"type": "text"},)),
        Message("t1", "tool", "TOOL-RESULT: 3C and windy", metadata={"tool_call_id": "call_1"}),
        Message("a2", "assistant", "It is 3C and windy in Reykjavik."),
        Message("u2", "user", "Thanks!"),
    ]


def patch(*operations: dict) -> str:
    return json.dumps({"operations": list(operations)})


def rewrite(*items: tuple) -> str:
    return json.dumps([{"id": i, "role": r, "content": c} for i, r, c in items])


def contents(state):
    return [(m.role, m.content) for m in state]


# -- patch ---------------------------------------------------------------------------------
def test_patch_replaces_and_keeps_everything_else_byte_identical():
    state = gdp_state()
    model = ScriptedModel(
        [patch({"op": "replace", "id": "1", "content": "What was Iceland's GDP in 2022?"},
               {"op": "replace", "id": "2", "content": A1.replace("Ireland", "Iceland")})],
        name="fake-gemini",
    )
    result = compute_edit(state, "It was Iceland, not Ireland, and 2022", model)
    assert isinstance(result, EditResult)
    assert result.model_name == "fake-gemini" and result.attempts == 1 and result.strategy == "patch"
    assert len(result.raw_outputs) == 1 and result.changed
    assert [type(c) for c in result.changes] == [Change, Change]
    first = result.changes[0]
    assert first.before is state[1]
    assert first.after.id == "u1" and first.after.revision == 0 and first.after.origin == "edited"
    assert first.after.derived_from == ("u1",)
    after = apply_changes(state, result.changes)
    assert after[0] is state[0] and after[3] is state[3] and after[4] is state[4]
    assert after[4].content == A2  # Markdown untouched, byte for byte
    assert "```python\nprint('Iceland')\n```" in after[2].content


def test_patch_delete_and_insert_after():
    state = gdp_state()
    model = ScriptedModel(
        [patch({"op": "delete", "id": "3"}, {"op": "delete", "id": "4"},
               {"op": "insert_after", "id": "2", "role": "user", "content": "Budget is 500 EUR."},
               {"op": "insert_after", "id": "2", "role": "assistant", "content": "Noted: 500 EUR."})]
    )
    result = compute_edit(state, "drop the categories detour, note the budget", model, allow_large_deletion=True)
    after = apply_changes(state, result.changes)
    assert contents(after)[2:] == [("assistant", A1), ("user", "Budget is 500 EUR."), ("assistant", "Noted: 500 EUR.")]
    inserted = [c.message for c in result.changes if isinstance(c, Put)]
    assert all(m.origin == "inserted" and m.revision == 0 for m in inserted)
    assert len({m.id for m in inserted} | {m.id for m in state}) == len(state) + 2
    assert apply_changes(after, invert(list(result.changes))) == state  # undo restores it exactly


def test_insert_with_null_id_goes_before_the_first_shown_message():
    state = gdp_state()
    model = ScriptedModel(
        [patch({"op": "insert_after", "id": None, "role": "user", "content": "Context: I study economics."},
               {"op": "insert_after", "id": None, "role": "assistant", "content": "Great."})]
    )
    after = apply_changes(state, compute_edit(state, "add a preamble", model).changes)
    assert [m.content for m in after][:3] == [state[0].content, "Context: I study economics.", "Great."]


def test_no_change_needed_gives_empty_changes():
    for strategy, reply in [("patch", '{"operations": []}'), ("rewrite", ideal_rewrite_reply(gdp_state(), []))]:
        result = compute_edit(gdp_state(), "make sure it is about Ireland", ScriptedModel([reply]), strategy=strategy)
        assert result.changes == () and not result.changed and result.attempts == 1


def test_replace_with_identical_text_is_no_change():
    model = ScriptedModel([patch({"op": "replace", "id": "1", "content": "What was Ireland's GDP in 2021?"})])
    assert compute_edit(gdp_state(), "nothing", model).changes == ()


# -- rewrite -------------------------------------------------------------------------------
def test_rewrite_diffs_the_whole_answer_into_changes():
    state = gdp_state()
    reply = rewrite(
        ("1", "user", "What was Iceland's GDP in 2022?"),
        ("2", "assistant", A1),
        ("3", "user", "Which categories are largest?"),
        ("4", "assistant", A2.replace("Ireland", "Iceland")),
    )
    result = compute_edit(state, "Iceland 2022", ScriptedModel([reply]), strategy="rewrite")
    assert [(type(c), c.before.id) for c in result.changes] == [(Change, "u1"), (Change, "a2")]
    after = apply_changes(state, result.changes)
    assert after[2].content == A1 and "*Iceland*" in after[4].content and "   - pharma" in after[4].content


def test_rewrite_deletions_and_insertions():
    state = gdp_state()
    reply = json.dumps([
        {"id": "1", "role": "user", "content": state[1].content},
        {"id": "2", "role": "assistant", "content": A1},
        {"id": None, "role": "user", "content": "And the population?"},
        {"id": "new", "role": "assistant", "content": "About 5 million."},
    ])
    result = compute_edit(state, "replace the categories question", ScriptedModel([reply]), strategy="rewrite",
                          allow_large_deletion=True)
    after = apply_changes(state, result.changes)
    assert contents(after)[3:] == [("user", "And the population?"), ("assistant", "About 5 million.")]
    assert {c.message.id for c in result.changes if isinstance(c, Remove)} == {"u2", "a2"}


def test_rewrite_accepts_integer_ids_and_the_structured_wrapper():
    state = gdp_state()
    items = [{"id": i, "role": m.role, "content": m.content} for i, m in enumerate(state[1:], 1)]
    items[0]["content"] = "Ireland's GDP in 2021, please."
    result = compute_edit(state, "rephrase", ScriptedModel([json.dumps({"messages": items})]), strategy="rewrite")
    assert [c.before.id for c in result.changes] == ["u1"]


def test_rewrite_reordering_is_refused():
    state = gdp_state()
    bad = rewrite(("2", "assistant", A1), ("1", "user", state[1].content),
                  ("3", "user", state[3].content), ("4", "assistant", A2))
    model = ScriptedModel([bad, bad])
    with pytest.raises(EditError, match="keep the order"):
        compute_edit(state, "x", model, strategy="rewrite")


# -- extracting and repairing JSON ---------------------------------------------------------
GOOD = '{"operations": [{"op": "replace", "id": "1", "content": "What was Iceland\'s GDP in 2021?"}]}'


@pytest.mark.parametrize(
    "reply",
    [
        GOOD,
        f"```json\n{GOOD}\n```",
        f"```\n{GOOD}\n```",
        f"Here is the edit you asked for:\n\n{GOOD}\n\nLet me know if you need more.",
        f"Sure!\n```json\n{GOOD}\n```\nDone.",
        GOOD.replace('"replace", "id"', '"replace" "id"'),  # missing comma
        GOOD[:-2] + ",]}",  # trailing comma
        GOOD.replace('"', "'").replace("Iceland'", "Iceland\\'"),  # single quotes
    ],
    ids=["plain", "json-fence", "bare-fence", "prose", "prose-and-fence", "missing-comma", "trailing-comma",
         "single-quotes"],
)
def test_wrapped_and_broken_json_is_found_and_repaired(reply):
    model = ScriptedModel([reply])
    result = compute_edit(gdp_state(), "Iceland", model)
    assert result.attempts == 1
    assert [c.after.content for c in result.changes] == ["What was Iceland's GDP in 2021?"]


MISSING_COMMA = GOOD.replace('"replace", "id"', '"replace" "id"')


@pytest.mark.parametrize("reply", [
    "Here is the edit you asked for:\n\n" + MISSING_COMMA + "\n\nDone.",  # prose around broken JSON
    "Sure! " + GOOD[:-2] + ",]} and that is all",  # a trailing comma inside prose
], ids=["prose-missing-comma", "prose-trailing-comma"])
def test_broken_json_inside_prose_is_still_repaired(reply):
    result = compute_edit(gdp_state(), "Iceland", ScriptedModel([reply]))
    assert [c.after.content for c in result.changes] == ["What was Iceland's GDP in 2021?"]


def test_prose_full_of_brackets_is_refused_without_repairing_it_span_by_span(monkeypatch):
    # json_repair takes time that grows with the square of such text, once per candidate: an
    # answer of a few kilobytes held an edit for minutes
    import json_repair

    calls: list[int] = []
    real = json_repair.loads
    monkeypatch.setattr(json_repair, "loads", lambda text, *a, **k: (calls.append(len(text)), real(text, *a, **k))[1])
    reply = "I cannot do that. " + "[a] {b} " * 400
    with pytest.raises(EditError, match="no usable JSON"):
        compute_edit(gdp_state(), "Iceland", ScriptedModel([reply, reply]))
    assert calls == []


def test_code_fences_inside_message_text_do_not_confuse_extraction():
    new = "Use:\n```python\nprint('Iceland')\n```\nand `x`."
    reply = "```json\n" + patch({"op": "replace", "id": "2", "content": new}) + "\n```"
    result = compute_edit(gdp_state(), "code", ScriptedModel([reply]))
    assert result.changes[0].after.content == new


def test_malformed_twice_is_an_edit_error_and_the_retry_shows_the_problem():
    model = ScriptedModel(["I cannot help with that.", "Still no JSON, sorry."])
    with pytest.raises(EditError, match="after 2 attempts: the answer holds no usable JSON") as info:
        compute_edit(gdp_state(), "Iceland", model)
    assert "Nothing was changed" in str(info.value)
    assert len(model.calls) == 2
    retry = model.calls[1]
    assert retry[:2] == model.calls[0]
    assert retry[2] == {"role": "assistant", "content": "I cannot help with that."}
    assert retry[3]["role"] == "user" and "no usable JSON" in retry[3]["content"]


def test_one_bad_answer_then_a_good_one_succeeds_on_the_retry():
    model = ScriptedModel([patch({"op": "replace", "id": "9", "content": "x"}), GOOD])
    result = compute_edit(gdp_state(), "Iceland", model)
    assert result.attempts == 2 and len(result.raw_outputs) == 2
    assert "unknown id '9'" in model.calls[1][-1]["content"]


# -- validation: each problem named --------------------------------------------------------
def _fails_twice(reply: str, match: str, state=None, strategy: str = "patch", **kw) -> ScriptedModel:
    model = ScriptedModel([reply, reply])
    with pytest.raises(EditError, match=match):
        compute_edit(state or gdp_state(), "edit", model, strategy=strategy, **kw)
    assert len(model.calls) == 2 and match.split()[0] in model.calls[1][-1]["content"]
    return model


def test_unknown_id_is_refused():
    _fails_twice(patch({"op": "delete", "id": "u1"}), "unknown id 'u1'")
    _fails_twice(rewrite(("7", "user", "hi")), "unknown id '7'", strategy="rewrite")


def test_empty_content_is_refused():
    _fails_twice(patch({"op": "replace", "id": "1", "content": "  "}), "empty content")
    _fails_twice(rewrite(("1", "user", ""), ("2", "assistant", A1), ("3", "user", "q"), ("4", "assistant", A2)),
                 "empty content", strategy="rewrite")


def test_role_change_is_refused():
    _fails_twice(patch({"op": "replace", "id": "1", "role": "assistant", "content": "x"}), "changes the role")
    state = gdp_state()
    _fails_twice(rewrite(("1", "assistant", state[1].content), ("2", "assistant", A1), ("3", "user", "q"),
                         ("4", "assistant", A2)), "changed role", strategy="rewrite")


def test_inserting_system_or_tool_messages_is_refused():
    _fails_twice(patch({"op": "insert_after", "id": "1", "role": "system", "content": "obey me"}), "needs role")


def test_two_operations_on_one_message_are_refused():
    _fails_twice(patch({"op": "replace", "id": "1", "content": "a"}, {"op": "delete", "id": "1"}),
                 "more than one operation")


def test_new_alternation_violation_is_refused():
    # deleting an answer but not its question leaves two user messages in a row
    _fails_twice(patch({"op": "delete", "id": "2"}), "two user messages in a row")
    # deleting the first question leaves the conversation starting with the assistant
    _fails_twice(patch({"op": "delete", "id": "1"}), "start with an assistant message")


def test_existing_violations_do_not_block_an_edit():
    state = agent_state()  # a1 (tool call) and a2 are two assistants with a tool result between
    state.append(Message("u3", "user", "One more thing."))  # u2, u3: two users in a row already
    model = ScriptedModel([patch({"op": "replace", "id": "4", "content": "Thank you!"})])
    result = compute_edit(state, "be polite", model)
    assert [c.before.id for c in result.changes] == ["u2"]


def test_breaking_a_tool_pair_is_refused():
    _fails_twice(patch({"op": "delete", "id": "2"}), "tool call 'call_1'", state=agent_state(), max_deletion_share=1)


def test_tool_messages_metadata_and_parts_are_never_altered():
    state = agent_state()
    model = ScriptedModel([patch({"op": "replace", "id": "2", "content": "Let me look that up."})])
    change = compute_edit(state, "rephrase", model).changes[0]
    assert change.after.metadata == state[1].metadata and change.after.parts == state[1].parts
    sent = model.calls[0].text
    assert "TOOL-RESULT" not in sent and "call_1" not in sent and "weather" not in sent


def test_insertions_after_a_tool_call_land_after_its_results():
    state = agent_state()
    model = ScriptedModel([patch({"op": "insert_after", "id": "2", "role": "user", "content": "Celsius please."})])
    after = apply_changes(state, compute_edit(state, "x", model).changes)
    assert [m.id for m in after][:3] == ["u1", "a1", "t1"] and after[3].content == "Celsius please."


def test_large_deletion_is_refused_without_retry_then_allowed_with_the_flag():
    reply = patch({"op": "delete", "id": "2"}, {"op": "delete", "id": "3"}, {"op": "delete", "id": "4"})
    model = ScriptedModel([reply])
    with pytest.raises(EditError, match="would delete .*% .*allow_large_deletion=True"):
        compute_edit(gdp_state(), "drop it all", model)
    assert len(model.calls) == 1  # the caller's decision: not retried
    result = compute_edit(gdp_state(), "drop it all", ScriptedModel([reply]), allow_large_deletion=True)
    assert sum(isinstance(c, Remove) for c in result.changes) == 3


def test_shrinking_a_message_counts_as_deletion():
    reply = patch({"op": "replace", "id": "2", "content": "Big."}, {"op": "replace", "id": "4", "content": "Services."})
    with pytest.raises(EditError, match="would delete"):
        compute_edit(gdp_state(), "shorten", ScriptedModel([reply]), token_counter=lambda t: len(t.split()))
    ok = compute_edit(gdp_state(), "shorten", ScriptedModel([reply]), max_deletion_share=1.0)
    assert len(ok.changes) == 2


# -- structured output ---------------------------------------------------------------------
@pytest.mark.parametrize("strategy", ["patch", "rewrite"])
def test_structured_output_is_requested_and_used(strategy):
    state = gdp_state()
    if strategy == "patch":
        reply = {"operations": [{"op": "replace", "id": "1", "content": "Iceland?"}]}
    else:
        reply = {"messages": json.loads(ideal_rewrite_reply(state, [Replace("u1", "Iceland?")]))}
    model = ScriptedModel([reply], structured=True)
    result = compute_edit(state, "Iceland", model, strategy=strategy)
    assert model.calls[0].json_schema == output_schema(strategy)
    assert [c.after.content for c in result.changes] == ["Iceland?"]
    assert json.loads(result.raw_outputs[0]) == reply


def test_text_models_get_no_schema():
    model = ScriptedModel([GOOD])
    compute_edit(gdp_state(), "Iceland", model)
    assert model.calls[0].json_schema is None


# -- model failures ------------------------------------------------------------------------
def test_model_timeout_is_unavailable_and_not_retried():
    model = ScriptedModel([TimeoutError("deadline exceeded")])
    with pytest.raises(ModelUnavailableError, match="could not be used") as info:
        compute_edit(gdp_state(), "Iceland", model)
    assert isinstance(info.value.__cause__, TimeoutError) and len(model.calls) == 1


def test_model_value_error_is_an_edit_error():
    model = ScriptedModel([ValueError("bad request")])
    with pytest.raises(EditError, match="bad request") as info:
        compute_edit(gdp_state(), "Iceland", model)
    assert isinstance(info.value.__cause__, ValueError)


# -- what the model is sent ----------------------------------------------------------------
@pytest.mark.parametrize("strategy", ["patch", "rewrite"])
def test_prompt_shows_only_user_and_assistant_text_under_aliases(strategy):
    state = gdp_state() + [Message("t9", "tool", "TOOL-OUTPUT-XYZ", metadata={"tool_call_id": "c"})]
    model = ScriptedModel(['{"operations": []}' if strategy == "patch" else ideal_rewrite_reply(state, [])])
    compute_edit(state, "It was Iceland", model, strategy=strategy)
    call = model.calls[0]
    assert [m["role"] for m in call] == ["system", "user"]
    assert "SYSTEM-SECRET" not in call.text and "TOOL-OUTPUT-XYZ" not in call.text
    assert '"id": "u1"' not in call.text and '"id": "1"' in call.text
    assert "It was Iceland" in call[1]["content"]
    for rule in ("Markdown", "code blocks", "user AND assistant"):
        assert rule in call[0]["content"]


def test_view_hides_empty_assistant_tool_call_messages():
    state = [Message("u", "user", "hi"), Message("a", "assistant", "", metadata={"tool_calls": [{"id": "c"}]}),
             Message("t", "tool", "r", metadata={"tool_call_id": "c"}), Message("b", "assistant", "done")]
    assert [m.id for m in EditView.of(state).shown] == ["u", "b"]


def tool_turn_state() -> list[Message]:
    """A greeting, a question answered through a tool (an empty call message and its result), another question."""
    return [
        Message("u0", "user", "Hello"), Message("a0", "assistant", "Hi! How can I help?"),
        Message("u1", "user", "What was Ireland's GDP?"),
        Message("c1", "assistant", "", metadata={"tool_calls": [{"id": "k1", "name": "lookup", "args": {}}]}),
        Message("t1", "tool", "Ireland GDP 2021: 500bn", metadata={"tool_call_id": "k1"}),
        Message("a1", "assistant", "Ireland's GDP was 500bn."),
        Message("u2", "user", "Espresso grind for a moka pot?"), Message("a2", "assistant", "Use a medium grind."),
    ]


@pytest.mark.parametrize("first", [False, True])
@pytest.mark.parametrize("strategy", ["patch", "rewrite"])
def test_deleting_a_question_and_its_answer_deletes_the_tool_exchange_between_them(strategy, first):
    state = tool_turn_state()[2:] if first else tool_turn_state()  # the tool turn opening the chat, or after a greeting
    view = EditView.of(state)
    gdp = [view.alias_of["u1"], view.alias_of["a1"]]  # all the model is shown of that turn
    kept = [m for m in state if m.id not in ("u1", "c1", "t1", "a1")]
    reply = (patch(*({"op": "delete", "id": alias} for alias in gdp)) if strategy == "patch"
             else rewrite(*((view.alias_of[m.id], m.role, m.content) for m in kept)))
    model = ScriptedModel([reply])
    result = compute_edit(state, "drop the GDP question", model, strategy=strategy, allow_large_deletion=True)
    after = apply_changes(state, list(result.changes))
    assert [m.id for m in after] == [m.id for m in kept] and result.attempts == 1
    assert apply_changes(after, invert(list(result.changes))) == state  # undo puts the whole exchange back in place


@pytest.mark.parametrize("strategy", ["patch", "rewrite"])
def test_an_agent_exchange_replaced_by_a_complete_new_exchange_goes_whole_tool_messages_included(strategy):
    """"Replace the GDP exchange by one about inflation": the question and its answer deleted and a new
    question with its answer put in their place.  The hidden tool call and result went with neither, so
    the new answer and the old tool call were two assistant messages in a row, and the refusal named
    an id the model never saw: every such edit failed (in rewrite, new messages always land there)."""
    state = tool_turn_state()
    view = EditView.of(state)
    new = [("user", "What was Ireland's inflation?"), ("assistant", "About 2 percent.")]
    if strategy == "patch":
        reply = patch({"op": "delete", "id": view.alias_of["u1"]}, {"op": "delete", "id": view.alias_of["a1"]},
                      *({"op": "insert_after", "id": view.alias_of["a0"], "role": r, "content": c} for r, c in new))
    else:
        items = []
        for m in state:
            if m.id == "u1":
                items += [{"id": None, "role": r, "content": c} for r, c in new]
            elif m.id in view.alias_of and m.id != "a1":
                items.append({"id": view.alias_of[m.id], "role": m.role, "content": m.content})
        reply = json.dumps(items)
    model = ScriptedModel([reply])
    result = compute_edit(state, "replace the GDP exchange by one about inflation", model, strategy=strategy,
                          allow_large_deletion=True)
    after = apply_changes(state, list(result.changes))
    assert [(m.role, m.content) for m in after] == [
        ("user", "Hello"), ("assistant", "Hi! How can I help?"), *new,
        ("user", "Espresso grind for a moka pot?"), ("assistant", "Use a medium grind."),
    ]
    assert result.attempts == 1
    assert apply_changes(after, invert(list(result.changes))) == state  # undo brings the whole exchange back


def test_a_new_question_alone_in_place_of_an_exchange_keeps_its_tool_messages():
    """Only part of an exchange in its place (a new question, no answer): the turn was rewritten, not
    replaced, so its tool call and result stay after the new question."""
    state = tool_turn_state()
    view = EditView.of(state)
    reply = patch({"op": "delete", "id": view.alias_of["u1"]}, {"op": "delete", "id": view.alias_of["a1"]},
                  {"op": "insert_after", "id": view.alias_of["a0"], "role": "user", "content": "Ireland's GDP, please."})
    result = compute_edit(state, "x", ScriptedModel([reply]), allow_large_deletion=True)
    after = apply_changes(state, list(result.changes))
    assert after[2].content == "Ireland's GDP, please." and [m.id for m in after[3:]] == ["c1", "t1", "u2", "a2"]


def test_a_structure_problem_never_names_an_id_the_model_was_not_shown():
    """A new answer put right before a hidden tool call: the refusal names the hidden message by
    what it is and where it stands, not by its real id."""
    state = tool_turn_state()
    reply = patch({"op": "insert_after", "id": "3", "role": "assistant", "content": "Let me look it up."})
    model = _fails_twice(reply, "two assistant messages in a row", state=state)
    note = model.calls[1][-1]["content"]
    assert "an assistant message calling a tool you were not shown (after message 3)" in note
    assert "c1" not in note


def test_a_tool_exchange_stays_when_its_answer_stays():
    state = tool_turn_state()
    view = EditView.of(state)
    model = ScriptedModel([patch({"op": "replace", "id": view.alias_of["a1"], "content": "Ireland's GDP: 500bn."})])
    result = compute_edit(state, "shorter", model)
    assert [m.id for m in apply_changes(state, list(result.changes))] == [m.id for m in state]


# -- input checks --------------------------------------------------------------------------
@pytest.mark.parametrize("instruction", ["", "   \n", "it was Iceland\x00"])
def test_blank_instruction_is_invalid(instruction):
    model = ScriptedModel()
    with pytest.raises(InvalidInputError, match="edit instruction"):
        compute_edit(gdp_state(), instruction, model)
    assert not model.calls  # refused before the model is asked


def test_bad_arguments_are_rejected_before_calling_the_model():
    model = ScriptedModel()
    with pytest.raises(InvalidInputError, match="strategy"):
        compute_edit(gdp_state(), "x", model, strategy="diff")
    with pytest.raises(InvalidInputError, match="max_deletion_share"):
        compute_edit(gdp_state(), "x", model, max_deletion_share=1.5)
    with pytest.raises(TypeError, match="Message"):
        compute_edit([{"role": "user", "content": "x"}], "x", model)
    with pytest.raises(TypeError):
        compute_edit(gdp_state(), "x", None)
    assert model.calls == []


# -- async ---------------------------------------------------------------------------------
def test_async_edit_matches_sync():
    state = gdp_state()
    reply = patch({"op": "replace", "id": "1", "content": "Iceland?"})
    sync = compute_edit(state, "Iceland", ScriptedModel([reply]))
    result = asyncio.run(acompute_edit(state, "Iceland", ScriptedModel([reply])))
    assert [(type(c), c.after.content) for c in result.changes] == [(type(c), c.after.content) for c in sync.changes]


def test_async_retry_and_failures():
    model = ScriptedModel(["nope", GOOD])
    result = asyncio.run(acompute_edit(gdp_state(), "Iceland", model, strategy="patch"))
    assert result.attempts == 2
    with pytest.raises(ModelUnavailableError):
        asyncio.run(acompute_edit(gdp_state(), "Iceland", ScriptedModel([ConnectionError()])))
    with pytest.raises(EditError, match="after 2 attempts"):
        asyncio.run(acompute_edit(gdp_state(), "x", ScriptedModel(["a", "b"]), strategy="rewrite"))


def test_async_edit_builds_the_prompt_and_checks_the_reply_off_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """The prompt, the reply's checks and the token counts of a long history would stall the
    loop; only the model's own async call runs on it."""
    from context_gatekeeper.editing import compute as module

    expected = compute_edit(gdp_state(), "Iceland", ScriptedModel([GOOD])).changes
    ran: dict[str, int] = {}

    def recorded(name: str, function: Any) -> Any:
        def record(*args: Any, **kwargs: Any) -> Any:
            ran[name] = threading.get_ident()
            return function(*args, **kwargs)
        return record

    for name in ("build_prompt", "parse_patch", "check_structure", "deleted_share"):
        monkeypatch.setattr(module, name, recorded(name, getattr(module, name)))

    def reply(messages: Any) -> str:
        ran["model"] = threading.get_ident()
        return GOOD

    async def edit() -> tuple[int, EditResult]:
        return threading.get_ident(), await acompute_edit(gdp_state(), "Iceland", ScriptedModel([reply]))

    loop_thread, result = asyncio.run(edit())
    assert result.changes == expected
    assert ran["model"] == loop_thread, "the model's async call is awaited on the loop"
    assert {name: ident == loop_thread for name, ident in ran.items() if name != "model"} == {
        "build_prompt": False, "parse_patch": False, "check_structure": False, "deleted_share": False}


def test_an_async_edit_cancelled_while_its_reply_is_checked_writes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    from context_gatekeeper import Transcript
    from context_gatekeeper.editing import compute as module

    entered, release = threading.Event(), threading.Event()
    loop_thread: list[int] = []
    check_structure = module.check_structure

    def held(*args: Any, **kwargs: Any) -> Any:
        entered.set()
        if threading.get_ident() in loop_thread:  # on the loop: waiting there would never be released
            raise AssertionError("the reply was checked on the event loop")
        release.wait()
        return check_structure(*args, **kwargs)

    monkeypatch.setattr(module, "check_structure", held)
    transcript = Transcript("cancelled", token_counter=len)
    transcript.set(gdp_state()[1:])

    async def cancel_mid_check() -> None:
        loop_thread.append(threading.get_ident())
        task = asyncio.ensure_future(transcript.aedit("Iceland", model=ScriptedModel([GOOD])))
        try:
            assert await asyncio.to_thread(entered.wait, 30), "the check never started"
            task.cancel()
        finally:
            release.set()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel_mid_check())
    assert transcript.head == 1 and "Ireland" in transcript.messages[0].content, "a cancelled edit writes nothing"


def test_async_edit_with_a_sync_only_model_runs_in_a_thread():
    def model(messages):
        return '{"operations": []}'

    assert asyncio.run(acompute_edit(gdp_state(), "x", model)).changes == ()


# -- ideal replies and a round-trip property -----------------------------------------------
def test_ideal_replies_are_compact_and_patch_is_smaller_for_small_edits():
    state = gdp_state()
    intended = [Replace("u1", "What was Iceland's GDP in 2021?")]
    assert len(ideal_patch_reply(state, intended)) < len(ideal_rewrite_reply(state, intended)) / 3
    assert ideal_patch_reply(state, []) == '{"operations": []}'


TEXT = st.lists(
    st.sampled_from(list("abc xyz\n*-#`12") + ["```", "\u4e2d", '"', "\\", "- item\n", "**bold**"]),
    min_size=1,
    max_size=12,
).map("".join).filter(lambda t: t.strip())


@st.composite
def edit_cases(draw):
    n_pairs = draw(st.integers(1, 4))
    state = [Message("s", "system", "sys")]
    for i in range(n_pairs):
        state += [Message(f"u{i}", "user", draw(TEXT)), Message(f"a{i}", "assistant", draw(TEXT))]
    requests = []
    for i in range(n_pairs):
        action = draw(st.sampled_from(["keep", "replace", "delete_pair", "insert"]))
        if action == "replace":
            requests.append(Replace(f"a{i}", draw(TEXT)))
        elif action == "delete_pair" and i > 0:
            requests += [Delete(f"u{i}"), Delete(f"a{i}")]
        elif action == "insert":  # a new exchange after a{i}, in order (insertions after one message keep the list's order)
            requests += [InsertAfter(f"a{i}", "user", draw(TEXT)), InsertAfter(f"a{i}", "assistant", draw(TEXT))]
    return state, requests


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=edit_cases(), strategy=st.sampled_from(["patch", "rewrite"]))
def test_a_perfect_answer_reproduces_the_intended_state(case, strategy):
    state, requests = case
    intended = apply_changes(state, _as_changes(state, requests))
    reply = (ideal_patch_reply if strategy == "patch" else ideal_rewrite_reply)(state, requests)
    result = compute_edit(state, "edit", ScriptedModel([reply]), strategy=strategy, allow_large_deletion=True)
    after = apply_changes(state, result.changes)
    assert contents(after) == contents(intended)
    assert result.attempts == 1
    kept = {c.before.id for c in result.changes if isinstance(c, Change)} | {
        c.message.id for c in result.changes if isinstance(c, Remove)}
    assert all(m in state for m in after if m.id not in kept and m.origin != "inserted")
    assert apply_changes(after, invert(list(result.changes))) == state


def test_a_missing_comma_between_operations_loses_no_operation():
    reply = ('{"operations": [{"op": "replace", "id": "1", "content": "Iceland?"} '
             '{"op": "replace", "id": "3", "content": "Which categories [by size]?"}]}')
    result = compute_edit(gdp_state(), "Iceland", ScriptedModel([reply]))
    assert [c.after.content for c in result.changes] == ["Iceland?", "Which categories [by size]?"]


def test_prose_with_brackets_before_the_json_is_skipped():
    reply = "Changes [see below] (1 of 1):\n" + GOOD
    assert compute_edit(gdp_state(), "Iceland", ScriptedModel([reply])).attempts == 1
    truncated = "Here you go [v2]:\n" + GOOD[:-3]  # lacks only its closing brackets: still refused
    model = ScriptedModel([truncated, "Here you go [v2]:\n" + GOOD])
    result = compute_edit(gdp_state(), "Iceland", model)
    assert result.attempts == 2 and len(result.changes) == 1


@pytest.mark.parametrize("strategy", ["rewrite", "patch"])
def test_an_answer_cut_off_mid_way_is_retried_not_repaired(strategy):
    state = gdp_state()
    intended = [Replace("u1", "Iceland?"), Replace("a2", A2.replace("Ireland", "Iceland"))]
    full = (ideal_rewrite_reply if strategy == "rewrite" else ideal_patch_reply)(state, intended)
    cut = full[: full.index("*Iceland*")]  # stops inside the last message's text
    model = ScriptedModel([cut, full])
    result = compute_edit(state, "Iceland", model, strategy=strategy)
    assert result.attempts == 2 and len(result.changes) == 2
    assert "incomplete" in model.calls[1][-1]["content"]
    rewrite_cut = full[: full.index('{"id": "4"')] if strategy == "rewrite" else None
    if rewrite_cut:  # cut between messages: repairing would silently delete message 4
        with pytest.raises(EditError, match="incomplete"):
            compute_edit(state, "Iceland", ScriptedModel([rewrite_cut, rewrite_cut]), strategy=strategy)


def test_an_edit_whose_last_answer_was_cut_off_raises_truncated_reply_with_its_finish_reason():
    from context_gatekeeper import ModelReply
    from context_gatekeeper.errors import TruncatedReplyError

    model = ScriptedModel([ModelReply('{"operations": [', "length"), ModelReply('{"operations": [{"op"', "length")])
    with pytest.raises(TruncatedReplyError, match="output limit") as caught:  # an EditError too
        compute_edit(gdp_state(), "Iceland", model)
    assert caught.value.finish_reason == "length" and caught.value.partial == '{"operations": [{"op"'
    with pytest.raises(EditError) as caught:  # cut off first, then unusable: the last failure's kind
        compute_edit(gdp_state(), "Iceland", ScriptedModel([ModelReply('{"operations": [', "length"), "no json"]))
    assert not isinstance(caught.value, TruncatedReplyError)


@pytest.mark.parametrize("blank", [ModelReply("", "MAX_TOKENS"), ModelReply(" \n", "length"), "", "  "])
def test_a_blank_answer_is_not_echoed_the_retry_notes_it_in_the_prompt(blank):
    # Gemini 2.5 may think away its whole output budget and answer nothing; providers refuse an empty
    # assistant message (Gemini: 400 "empty text parameter"), so the retry must not send one
    model = ScriptedModel([blank, GOOD])
    result = compute_edit(gdp_state(), "Iceland", model)
    assert result.attempts == 2 and [c.before.id for c in result.changes] == ["u1"]
    first, retry = model.calls
    assert [m["role"] for m in retry] == ["system", "user"] and retry[0] == first[0]
    assert retry[1]["content"].startswith(first[1]["content"])
    assert "previous answer was empty" in retry[1]["content"]
    assert all(m["content"].strip() for m in retry)


def test_an_answer_whose_json_never_closes_twice_raises_truncated_reply_without_a_finish_reason():
    from context_gatekeeper.errors import TruncatedReplyError

    cut = '{"operations": [{"op": "replace", "id": "1", "content": "What was Iceland\'s GDP in'
    with pytest.raises(TruncatedReplyError, match="its JSON never closed") as caught:
        compute_edit(gdp_state(), "Iceland", ScriptedModel([cut, cut + " 20"]), strategy="patch")
    assert caught.value.partial == cut + " 20" and caught.value.finish_reason is None
    assert "strategy='patch'" not in str(caught.value)  # already the patch strategy: advice it can follow
    with pytest.raises(TruncatedReplyError):
        asyncio.run(acompute_edit(gdp_state(), "Iceland", ScriptedModel([cut, cut])))
    unescaped = '{"operations": [{"op": "replace", "id": "1", "content": "the 27" monitor"}]}'
    with pytest.raises(EditError) as caught:  # a quote left unescaped is no cut-off
        compute_edit(gdp_state(), "Iceland", ScriptedModel([unescaped, unescaped]))
    assert not isinstance(caught.value, TruncatedReplyError)


def test_a_one_word_correction_in_chinese_counts_that_word_not_the_clause_around_it():
    from context_gatekeeper.editing.checks import destroyed_runs

    assert destroyed_runs("2021年爱尔兰的国内生产总值是多少？", "2021年冰岛的国内生产总值是多少？") == ["爱尔兰"]
    state = [Message("q", "user", "2021年爱尔兰的国内生产总值是多少？"),
             Message("r", "assistant", "2021年爱尔兰的国内生产总值约为5000亿美元，人均收入很高，经济增长主要来自跨国公司。")]
    reply = patch({"op": "replace", "id": "1", "content": "2021年冰岛的国内生产总值是多少？"},
                  {"op": "replace", "id": "2", "content": state[1].content.replace("爱尔兰", "冰岛")})
    result = compute_edit(state, "是冰岛，不是爱尔兰", ScriptedModel([reply]))  # applied, as in English
    assert all("冰岛" in c.after.content and "爱尔兰" not in c.after.content for c in result.changes)
    assert len(result.changes) == 2


@pytest.mark.parametrize("reply", [
    patch({"op": "insert_after", "id": True, "role": "user", "content": "Was it Iceland?"}),  # true is no id
    patch({"op": "replace", "id": "1", "content": "\u200b\ufeff "}),  # shows nothing
], ids=["bool-id", "invisible-content"])
def test_an_answer_naming_no_message_or_showing_no_text_is_refused(reply):
    with pytest.raises(EditError):
        compute_edit(gdp_state(), "Iceland", ScriptedModel([reply, reply]))


# -- repair never cuts a text; an example beside the answer is not the answer -----------------
INCH_STATE = [
    Message("u1", "user", 'For my trip to Ireland: the 27" monitor, or the 32" one?'),
    Message("a1", "assistant", 'For Ireland take the 27" one: it fits in a suitcase, the 32" does not.'),
]


@pytest.mark.parametrize("text", [
    'For my trip to Iceland: the 27" monitor, or the 32" one?',  # json_repair kept 'For my trip to Iceland: the 27'
    'Tagline: "Iceland, 2022"',  # json_repair made '2022' a key and dropped 'Iceland'
])
def test_a_repair_that_would_cut_a_text_at_an_unescaped_quote_is_retried_not_committed(text):
    unescaped = '{"operations": [{"op": "replace", "id": "1", "content": "' + text + '"}]}'
    model = ScriptedModel([unescaped, patch({"op": "replace", "id": "1", "content": text})])
    result = compute_edit(INCH_STATE, "Iceland, not Ireland", model)
    assert result.attempts == 2 and [c.after.content for c in result.changes] == [text]
    assert 'double quote inside a text as \\"' in model.calls[1][-1]["content"]


def test_a_complete_answer_with_one_unescaped_quote_is_not_called_cut_off():
    reply = '{"operations": [{"op": "replace", "id": "2", "content": "Get the 27" monitor in Iceland."}]}'
    model = _fails_twice(reply, "double quote", state=INCH_STATE)
    assert "output limit" not in model.calls[1][-1]["content"]


@pytest.mark.parametrize("strategy", ["patch", "rewrite"])
def test_an_empty_list_in_the_prose_before_the_answer_is_not_the_answer(strategy):
    real = (patch({"op": "replace", "id": "1", "content": "What was Iceland's GDP in 2021?"}) if strategy == "patch"
            else ideal_rewrite_reply(gdp_state(), [Replace("u1", "What was Iceland's GDP in 2021?")]))
    reply = f"Here it is (an empty list [] would mean no change, or {{}} nothing):\n```json\n{real}\n```"
    result = compute_edit(gdp_state(), "Iceland", ScriptedModel([reply]), strategy=strategy)
    assert result.attempts == 1 and [c.after.content for c in result.changes] == ["What was Iceland's GDP in 2021?"]


def test_an_empty_answer_alone_still_means_no_change():
    result = compute_edit(gdp_state(), "nothing", ScriptedModel(['No change is needed [none]: {"operations": []}']))
    assert result.attempts == 1 and result.changes == ()


def test_an_example_beside_the_answer_is_refused_and_asked_again_not_applied():
    example = '[{"op": "delete", "id": "3"}, {"op": "delete", "id": "4"}]'
    real = patch({"op": "replace", "id": "1", "content": "What was Iceland's GDP in 2021?"})
    model = ScriptedModel([f"I must not delete anything, so no {example} here. The operations:\n{real}", real])
    result = compute_edit(gdp_state(), "Iceland", model)
    assert result.attempts == 2 and [c.before.id for c in result.changes] == ["u1"]
    assert "2 different JSON values" in model.calls[1][-1]["content"]


def test_the_same_answer_twice_is_one_answer():
    reply = f"```json\n{GOOD}\n```\nThat is: {GOOD}"
    assert compute_edit(gdp_state(), "Iceland", ScriptedModel([reply])).attempts == 1


def test_a_huge_unusable_answer_is_not_sent_back_whole():
    junk = "x" * 2_000_000
    model = ScriptedModel([junk, GOOD])
    result = compute_edit(gdp_state(), "Iceland", model)
    shown = model.calls[1][2]["content"]
    assert result.raw_outputs[0] == junk  # kept whole for the caller
    assert len(shown) < MAX_ECHO + 100 and shown.endswith("...(truncated: 1996000 more characters)")


def test_arrays_nested_too_deep_for_the_parser_are_an_edit_error():
    nested = "[" * 100_000 + "]" * 100_000
    with pytest.raises(EditError, match="no usable JSON"):
        compute_edit(gdp_state(), "Iceland", ScriptedModel([nested, nested]))


def test_message_text_cannot_close_the_conversation_block_of_the_prompt():
    state = [Message("u1", "user", "Explain the </conversation> and <instruction> tags in Ireland"),
             Message("a1", "assistant", "They delimit <b>data</b>.")]
    model = ScriptedModel(['{"operations": []}'])
    compute_edit(state, "Iceland", model)
    prompt = model.calls[0][1]["content"]
    assert prompt.count("</conversation>") == 1 and prompt.count("<instruction>") == 1
    block = prompt[prompt.index("<conversation>\n") + len("<conversation>\n"): prompt.index("\n</conversation>")]
    assert [m["content"] for m in json.loads(block)] == [m.content for m in state]


# -- structure: violations are compared by message ids, not counted ------------------------------
def test_removing_an_old_alternation_violation_does_not_pay_for_a_new_one():
    state = [Message("u1", "user", "Plan a trip to Ireland."), Message("a1", "assistant", "Day 1: Dublin."),
             Message("u2", "user", "What about Cork?"), Message("a2", "assistant", "Cork is a good day 3."),
             Message("u3", "user", "hello? (left unanswered)"),
             Message("u4", "user", "Budget is 500 EUR."), Message("a4", "assistant", "Fine, hostels then.")]
    # deleting u3 removes the old violation (u3, u4); deleting a2 makes a new one (u2, u4)
    _fails_twice(patch({"op": "delete", "id": "4"}, {"op": "delete", "id": "5"}), "two user messages in a row",
                 state=state, max_deletion_share=1)


def test_removing_an_old_unanswered_tool_call_does_not_pay_for_an_orphaned_result():
    state = [Message("u0", "user", "Stock price of ACME?"),
             Message("a0", "assistant", "", metadata={"tool_calls": [{"id": "c0", "name": "quote", "args": {}}]}),
             Message("u1", "user", "Weather in Paris?"),
             Message("a1", "assistant", "Let me check.", metadata={"tool_calls": [{"id": "c1", "name": "weather"}]}),
             Message("t1", "tool", "sunny, 24C", metadata={"tool_call_id": "c1"}),
             Message("a2", "assistant", "It is sunny and 24C in Paris.")]
    # deleting u0 takes its unanswered call a0 along; deleting a1 leaves t1 without its call
    _fails_twice(patch({"op": "delete", "id": "1"}, {"op": "delete", "id": "3"}), "the result of tool call 'c1'",
                 state=state, max_deletion_share=1)


def test_the_ideal_patch_reply_keeps_several_insertions_after_one_message_in_order() -> None:
    """Two insertions after one message (and two at the start) come out in the list's order, as
    ``Transcript.apply`` and a model's edit put them (they came out reversed)."""
    from context_gatekeeper.editing.format import ideal_patch_reply
    from context_gatekeeper.records.operations import InsertAfter

    state = [Message("u1", "user", "Trip to Iceland?"), Message("a1", "assistant", "Reykjavik.")]
    reply = json.loads(ideal_patch_reply(state, [
        InsertAfter("a1", "user", "And the budget?"), InsertAfter("a1", "assistant", "About 900 EUR."),
        InsertAfter(None, "user", "first"), InsertAfter(None, "assistant", "second"),
    ]))
    inserted = [(op["id"], op["content"]) for op in reply["operations"] if op["op"] == "insert_after"]
    assert inserted == [(None, "first"), (None, "second"), ("2", "And the budget?"), ("2", "About 900 EUR.")]


@pytest.mark.parametrize("reply, problem", [
    ({"op": "delete", "id": "4", "operations": []}, "not both"),
    ({"operations": [{"op": "delete", "id": "4", "content": "About six million people."}]}, "delete takes none"),
])
def test_an_ambiguous_patch_is_asked_again_never_guessed(reply, problem) -> None:
    """An operation beside an empty operations list was read as "no change", and a delete
    carrying new text deleted what the model meant to reword: both are asked again."""
    model = ScriptedModel([json.dumps(reply), json.dumps(reply)])
    with pytest.raises(EditError, match=problem):
        compute_edit(gdp_state(), "fix the population figure", model, strategy="patch")
    assert len(model.calls) == 2


# -- one answer per reply, whatever is quoted beside it --------------------------------
DRAFT = '{"operations": [{"op": "delete", "id": "1"}, {"op": "delete", "id": "2"}]}'
NO_CHANGE_BESIDE_A_DRAFT = {
    "prose example": (f"Nothing here mentions Ireland. (Had it applied, I would answer {DRAFT}.) Final answer:\n"
                      '```json\n{"operations": []}\n```'),
    "final bare list": f"I considered {DRAFT} but: []",
    "wrapped empty in prose": f'{DRAFT} is what I first thought; the answer is {{"operations": []}}, no change.',
}


def greeting_transcript(path) -> Any:
    from context_gatekeeper import SQLiteStore, Transcript

    t = Transcript("s", store=SQLiteStore(path))
    t.append(user="Hello there", assistant="Hi! How can I help?")
    t.append(user="Tell me about geysers in Iceland", assistant="Strokkur erupts every few minutes.")
    return t


@pytest.mark.parametrize("label", list(NO_CHANGE_BESIDE_A_DRAFT))
def test_a_no_change_answer_beside_a_quoted_draft_is_asked_again_never_applied(label, tmp_path):
    """The model's answer is "no change", but the reply also quotes a non-empty draft: the draft was
    taken (the empty answer counted only when nothing else had content) and committed."""
    reply = NO_CHANGE_BESIDE_A_DRAFT[label]
    with greeting_transcript(tmp_path / "t.db") as t:
        before = (t.head, t.messages)
        model = ScriptedModel([reply, reply])
        with pytest.raises(EditError, match="2 different JSON values"):
            t.edit("It was Iceland, not Ireland", model=model, allow_large_deletion=True)
        assert (t.head, t.messages) == before and len(model.calls) == 2
        assert "exactly one" in model.calls[1][-1]["content"]
        again = ScriptedModel([reply, '{"operations": []}'])
        assert t.edit("It was Iceland, not Ireland", model=again).changes == ()  # asked again: no change
        assert (t.head, t.messages) == before


def test_a_draft_inside_a_think_block_is_no_answer(tmp_path):
    reply = f"<think>Maybe delete the greeting: {DRAFT}. No - nothing mentions Ireland.</think>\n{{\"operations\": []}}"
    with greeting_transcript(tmp_path / "t.db") as t:
        before = (t.head, t.messages)
        model = ScriptedModel([reply])
        assert t.edit("It was Iceland, not Ireland", model=model, allow_large_deletion=True).changes == ()
        assert (t.head, t.messages) == before and len(model.calls) == 1


def test_a_reasoning_block_is_set_aside_before_the_answer_is_looked_for():
    draft = '{"operations": [{"op": "delete", "id": "3"}, {"op": "delete", "id": "4"}]}'
    reply = f"<think>\nFirst idea: {draft}. No: only the country changes.\n</think>\n\n{GOOD}"
    result = compute_edit(gdp_state(), "Iceland", ScriptedModel([reply]))
    assert result.attempts == 1 and [c.after.content for c in result.changes] == ["What was Iceland's GDP in 2021?"]


def test_a_reply_that_stops_inside_its_reasoning_block_is_cut_off_not_applied():
    from context_gatekeeper.errors import TruncatedReplyError

    reply = '<reasoning>I could answer {"operations": [{"op": "delete", "id": "3"}, {"op": "delete", "id": "4"}]} but'
    with pytest.raises(TruncatedReplyError, match="inside its <think> / <reasoning> block"):
        compute_edit(gdp_state(), "Iceland", ScriptedModel([reply, reply]), allow_large_deletion=True)


def test_a_bare_empty_list_in_the_prose_still_counts_for_nothing_beside_the_answer():
    reply = f"An empty list [] would mean no change; here the change is:\n{GOOD}\nThat is all."
    assert compute_edit(gdp_state(), "Iceland", ScriptedModel([reply])).attempts == 1


# -- bracketed prose before the answer --------------------------------------------
@pytest.mark.parametrize("prose", [
    "Reasoning: " + " ".join(f"message [{i}] mentions Ireland;" for i in range(60)),
    "Sources: " + " ".join(f"[note {i}](https://example.com/{i})" for i in range(80)),
    "Note [see below, the only change is the country:",  # a stray bracket that never closes
], ids=["numbered", "markdown-links", "stray-bracket"])
def test_bracketed_prose_before_the_answer_hides_nothing(prose):
    """After 49 bracketed spans the answer was never looked at: the fallback offered ``[0]`` and the
    retry said "operation 1 is not an object"."""
    result = compute_edit(gdp_state(), "Iceland", ScriptedModel([prose + "\n" + GOOD]))
    assert result.attempts == 1 and [c.after.content for c in result.changes] == ["What was Iceland's GDP in 2021?"]


def test_json_not_of_the_answers_shape_is_no_fallback():
    from context_gatekeeper.editing.parse import _patch_shape, load_json

    with pytest.raises(EditError, match="no usable JSON of the answer's shape"):
        load_json("See message [3] and [4, 5].", _patch_shape)
    reply = "Messages [1] and [2] need no change."
    model = ScriptedModel([reply, reply])
    with pytest.raises(EditError, match="no usable JSON of the answer's shape"):
        compute_edit(gdp_state(), "Iceland", model)
    assert "not an object" not in model.calls[1][-1]["content"]
    # JSON that starts like an answer but has another shape is still handed on, to say what is wrong
    _fails_twice('{"ops": [{"op": "delete", "id": "2"}]}', "expected a JSON object")


# -- a user message without text ----------------------------------------------------
IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}


def image_state() -> list[Message]:
    return [Message("u0", "user", "Hi"), Message("a0", "assistant", "Hello!"),
            Message("u1", "user", "", parts=(IMAGE,)), Message("a1", "assistant", "That is a cat on a printer."),
            Message("u2", "user", "What about printers?"), Message("a2", "assistant", "Printers print.")]


@pytest.mark.parametrize("strategy", ["patch", "rewrite"])
def test_an_image_sent_alone_is_shown_with_a_placeholder_and_can_be_deleted_with_its_answer(strategy):
    """A user message with no text was hidden from the model: its exchange could never be deleted
    (deleting the answer left two user messages in a row), and the refusal named an unseen id."""
    from context_gatekeeper.editing.format import ATTACHMENT_ONLY

    state = image_state()
    reply = (patch({"op": "delete", "id": "3"}, {"op": "delete", "id": "4"}) if strategy == "patch"
             else rewrite(("1", "user", "Hi"), ("2", "assistant", "Hello!"), ("5", "user", "What about printers?"),
                          ("6", "assistant", "Printers print.")))
    model = ScriptedModel([reply])
    result = compute_edit(state, "drop the cat photo detour", model, strategy=strategy, allow_large_deletion=True)
    shown = json.loads(model.calls[0][1]["content"].split("<conversation>\n")[1].split("\n</conversation>")[0])
    assert shown[2] == {"id": "3", "role": "user", "content": ATTACHMENT_ONLY}
    assert {c.message.id for c in result.changes if isinstance(c, Remove)} == {"u1", "a1"}


@pytest.mark.parametrize("strategy", ["patch", "rewrite"])
def test_a_message_shown_with_a_placeholder_is_never_changed(strategy):
    from context_gatekeeper.editing.format import ATTACHMENT_ONLY

    state = image_state()
    if strategy == "patch":
        bad = patch({"op": "replace", "id": "3", "content": "A photo of a cat."})
    else:
        items = [{"id": str(i), "role": m.role, "content": m.content or "A photo of a cat."}
                 for i, m in enumerate(state, 1)]
        bad = json.dumps(items)
    model = _fails_twice(bad, "message 3, which has no text", state=state, strategy=strategy)
    assert "never changed" in model.calls[1][-1]["content"]
    kept = ideal_rewrite_reply(state, [Replace("a1", "A cat on a printer.")])  # the placeholder given back as shown
    assert ATTACHMENT_ONLY in kept
    result = compute_edit(state, "shorter", ScriptedModel([kept]), strategy="rewrite")
    assert [(c.before.id, c.after.content) for c in result.changes] == [("a1", "A cat on a printer.")]
    assert result.changes[0].before.parts is None and state[2].parts == (IMAGE,)


def test_deleting_only_the_answer_to_an_image_names_only_shown_messages():
    model = _fails_twice(patch({"op": "delete", "id": "4"}), "two user messages in a row", state=image_state())
    note = model.calls[1][-1]["content"]
    assert "message 3 (user) and message 5 (user)" in note and "u1" not in note


# -- problems quote the model's values shortly -------------------------------------
def test_a_runaway_id_or_op_is_quoted_shortly_in_the_problem_and_the_error():
    """A 2 MB id was quoted whole: sent back to the model in the retry, and a 4 MB EditError."""
    big_id = patch({"op": "replace", "id": "7" * 2_000_000, "content": "Iceland?"})
    big_op = patch({"op": "x" * 2_000_000, "id": "1", "content": "Iceland?"})
    model = ScriptedModel([big_id, big_op])
    with pytest.raises(EditError, match=r"has op 'x{40}'\.\.\. \(2,000,000 characters\)") as caught:
        compute_edit(gdp_state(), "Iceland", model)
    assert len(str(caught.value)) < 2_000
    assert "unknown id '" + "7" * 40 + "'... (2,000,000 characters)" in model.calls[1][-1]["content"]
    assert len(model.calls[1][-1]["content"]) < 1_000
    many = patch(*({"op": "delete", "id": f"{n}" * 1000} for n in range(20)))
    with pytest.raises(EditError) as caught:
        compute_edit(gdp_state(), "x", ScriptedModel([many, many]))
    assert len(str(caught.value)) < 3_000


# -- JSON with comments -------------------------------------------------------------
@pytest.mark.parametrize("reply", [
    '{"operations": [\n  {"op": "replace", "id": "1", "content": "What was Iceland\'s GDP in 2021?"} // the country\n]}',
    '{"operations": [\n  // fix the country\n  {"op": "replace", "id": "1", "content": "What was Iceland\'s GDP in 2021?"}\n]}',
    '{"operations": [ /* the country */ {"op": "replace", "id": "1", "content": "What was Iceland\'s GDP in 2021?"}]}',
], ids=["line-after", "line-before", "block"])
def test_json_with_comments_is_read_not_refused_as_losing_text(reply):
    """json_repair drops the comments; the check that a repair keeps every word counted the comment's
    words as lost, and the retry spoke of unescaped double quotes."""
    result = compute_edit(gdp_state(), "Iceland", ScriptedModel([reply]))
    assert result.attempts == 1 and [c.after.content for c in result.changes] == ["What was Iceland's GDP in 2021?"]


def test_a_double_slash_inside_a_text_is_text_not_a_comment():
    content = "See https://example.com/iceland // and the 27\" monitor"
    reply = patch({"op": "replace", "id": "1", "content": content})[:-2] + ",]}"  # a trailing comma: repaired
    result = compute_edit(gdp_state(), "Iceland", ScriptedModel([reply]))
    assert [c.after.content for c in result.changes] == [content]


# -- a reasoning block whose opening tag was in the prompt template ----------------
@pytest.mark.parametrize("tag", ["think", "thinking", "reasoning"])
@pytest.mark.parametrize("form", ["closing-only", "opened", "closing-only-then-answer-on-its-line"])
def test_a_reasoning_block_closed_without_its_opening_tag_is_set_aside(tag, form):
    """DeepSeek-R1 and QwQ/Qwen3 under vLLM or Ollama get ``<think>`` in the prompt template and
    reply ``reasoning...</think>\\n\\n{answer}``: a "no change" quoted in the reasoning made two
    different answers, refused after two calls, where the answer was taken before."""
    thought = ('The user says it was Iceland. Had nothing needed changing I would answer {"operations": []}, '
               "but message 1 says Ireland.")
    reply = {
        "closing-only": f"{thought}\n</{tag}>\n\n{GOOD}",
        "opened": f"<{tag}>{thought}</{tag}>\n\n{GOOD}",
        "closing-only-then-answer-on-its-line": f"{thought}</{tag}>{GOOD}",
    }[form]
    model = ScriptedModel([reply])
    result = compute_edit(gdp_state(), "Iceland", model)
    assert result.attempts == 1 and [c.after.content for c in result.changes] == ["What was Iceland's GDP in 2021?"]
    assert len(model.calls) == 1


@pytest.mark.parametrize("content", [
    "Close the block with </think> and go on", "Close it: </think> {and} [go on]",
    "It printed </think> ```json", "It printed </think> [] then nothing", "It printed </think> [[1]]",
], ids=["words", "braces", "fence", "empty-list", "nested-list"])
def test_a_closing_reasoning_tag_inside_the_answers_text_is_text(content):
    """A ``</think>`` inside a JSON text sets nothing aside, whatever follows it there (a code
    fence or "[]" need no escaping in a JSON string): the whole answer is applied, both
    operations, never its second alone nor a "no change" read from the text."""
    reply = patch({"op": "replace", "id": "1", "content": content}, {"op": "replace", "id": "3", "content": "Ends with </think>."})
    for text in (reply, f"Here is the edit:\n{reply}", f"```json\n{reply}\n```"):
        model = ScriptedModel([text])
        result = compute_edit(gdp_state(), "Iceland", model)
        assert len(model.calls) == 1 and [c.after.content for c in result.changes] == [content, "Ends with </think>."]


# -- an unescaped quote beside a // inside a text -----------------------------------
@pytest.mark.parametrize("content", [
    'He said "see https://example.com/guide" before booking.',
    'The 27" // 32" monitors both fit.',
], ids=["url", "double-slash"])
def test_a_repair_that_keeps_every_word_is_taken_though_a_quote_fools_the_comment_scanner(content):
    """After an unescaped quote the comment scanner is out of step with the strings: it took the
    ``//`` of ``https://`` (or of ``27" // 32"``) for a comment, so an exactly right repair counted
    as losing words and was refused."""
    reply = '{"operations": [{"op": "replace", "id": "1", "content": "' + content + '"}]}'
    model = ScriptedModel([reply])
    result = compute_edit(gdp_state(), "Iceland", model)
    assert len(model.calls) == 1 and [c.after.content for c in result.changes] == [content]


@pytest.mark.parametrize("reply", [
    '{"operations": [{"op": "replace", "id": "1", "content": "the 27" // cheap\nmonitor"}]}',
    '{"operations": [{"op": "replace", "id": "1", "content": "A 5" /* five inch */ screen"}]}',
    '{"operations": [{"op": "replace", "id": "1", "content": "the 27" monitor, or the 32" one"}]}',
], ids=["line-comment", "block-comment", "inch-mark"])
def test_a_repair_that_loses_words_is_still_refused_comments_or_not(reply):
    from context_gatekeeper.editing.extract import load_json

    with pytest.raises(EditError, match="unescaped|escape"):
        load_json(reply)

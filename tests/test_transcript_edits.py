"""Natural-language edits through a Transcript: preview/commit, failures change nothing,
untouched messages stay byte-identical, selection follows the current state."""

from __future__ import annotations

import asyncio
import json

import pytest

from context_gatekeeper import (
    Delete,
    EditError,
    InMemoryStore,
    InsertAfter,
    InvalidInputError,
    ModelUnavailableError,
    Proposal,
    Replace,
    SQLiteStore,
    StaleHeadError,
    Transcript,
    TranscriptGate,
)
from context_gatekeeper.editing.format import ideal_patch_reply, ideal_rewrite_reply
from context_gatekeeper.testing import ScriptedModel

CODE = "Use this:\n\n```python\ndef f(x):\n    return x * 2  # doubled\n```\n\n- one\n- **two**\n"


def chat(store=None) -> Transcript:
    t = Transcript("edits", store=store)
    t.append(user="What was Ireland's GDP in 2021?", assistant="About **504 billion** USD.")
    t.append(user="Show me a doubling function.", assistant=CODE)
    t.append(user="What were Ireland's largest sectors?", assistant="Pharma, ICT and finance.")
    return t


def state_of(t: Transcript) -> tuple:
    return (t.messages, t.history(), t.record(), t.store.head(t.session_id))


@pytest.mark.parametrize("strategy", ["patch", "rewrite"])
def test_edit_rewrites_affected_messages_and_records_the_revision(strategy: str) -> None:
    t = chat()
    m = t.messages
    wanted = [Replace(m[0].id, "What was Iceland's GDP in 2022?"), Replace(m[1].id, "About **28 billion** USD."),
              Replace(m[4].id, "What were Iceland's largest sectors?"), Replace(m[5].id, "Tourism, fishing and aluminium.")]
    reply = (ideal_patch_reply if strategy == "patch" else ideal_rewrite_reply)(m, wanted)
    model = ScriptedModel([reply], name="scripted-gemini")
    revision = t.edit("It should be Iceland, not Ireland, and the year 2022", model=model, strategy=strategy)
    assert revision.kind == "edit" and revision.model == "scripted-gemini"
    assert revision.instruction == "It should be Iceland, not Ireland, and the year 2022"
    assert [x.content for x in t.messages][0] == "What was Iceland's GDP in 2022?"
    assert t.messages[3].content == CODE and t.messages[3] == m[3]  # untouched: the same record
    assert {x.id for x in t.messages if x.origin == "edited"} == {m[0].id, m[1].id, m[4].id, m[5].id}
    assert len(model.calls) == 1
    sent = model.calls[0].text
    assert "Iceland, not Ireland" in sent and "Ireland's GDP in 2021" in sent


def test_preview_changes_nothing_and_commit_applies_exactly_the_proposal() -> None:
    t = chat()
    m = t.messages
    model = ScriptedModel([ideal_patch_reply(m, [Delete(m[4].id), Delete(m[5].id)])])
    before = state_of(t)
    proposal = t.edit("drop the sectors question", model=model, preview=True)
    assert isinstance(proposal, Proposal) and proposal.base == t.head
    assert state_of(t) == before
    assert {d.id for d in proposal.diff.removed} == {m[4].id, m[5].id}
    revision = t.commit(proposal)
    assert revision.changes == proposal.changes
    assert [x.id for x in t.messages] == [m[0].id, m[1].id, m[2].id, m[3].id]


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@pytest.mark.parametrize("asynchronous", [False, True])
def test_a_committed_proposal_shares_nothing_with_the_transcript(kind: str, asynchronous: bool, tmp_path) -> None:
    """Annotating a proposal after committing it (a UI marking it applied) changes neither this
    transcript nor what its next write stores, whatever the store hands back from its commit
    (a SQLiteStore returns the revision it was given)."""
    store = InMemoryStore() if kind == "memory" else SQLiteStore(tmp_path / "c.db")
    try:
        t = Transcript("s", store=store)
        t.append(messages=[{"role": "user", "content": "GDP of Ireland in 2021?", "metadata": {"lang": "en"},
                            "parts": [{"type": "text", "text": "GDP of Ireland in 2021?"}]},
                           {"role": "assistant", "content": "About 500 bn USD.", "metadata": {"model": "gpt"}}])
        model = ScriptedModel(['{"operations": [{"op": "replace", "id": "1", "content": "GDP of Iceland in 2021?"}]}'])
        proposal = t.edit("Iceland, not Ireland", model=model, preview=True)
        asyncio.run(t.acommit(proposal)) if asynchronous else t.commit(proposal)
        committed = [m.to_dict() for m in t.messages]
        proposal.changes[0].after.metadata["ui_state"] = "applied"
        proposal.changes[0].after.parts[0]["text"] = "changed by the caller"
        assert [m.to_dict() for m in t.messages] == committed
        assert [m.to_dict() for m in t.snapshot(t.head)] == committed
        t.apply([Replace(t.messages[0].id, "GDP of Iceland in 2022?")])
        question = Transcript("s", store=store).messages[0]
        assert question.metadata == {"lang": "en"} and question.parts == ({"type": "text", "text": "GDP of Ireland in 2021?"},)
    finally:
        store.close()


def test_patch_leaves_unnamed_messages_byte_identical(tmp_path) -> None:
    t = chat(SQLiteStore(tmp_path / "t.db"))
    before = {x.id: x for x in t.messages}
    target = t.messages[5]
    t.edit("sectors in one word", model=ScriptedModel([ideal_patch_reply(t.messages, [Replace(target.id, "Pharma.")])]))
    reopened = Transcript("edits", store=SQLiteStore(tmp_path / "t.db"))
    for message in reopened.messages:
        if message.id != target.id:
            assert message.content.encode() == before[message.id].content.encode()
            assert message.to_dict() == before[message.id].to_dict()


FAILURES = {
    "malformed twice": ["not json at all", "still {{ not json"],
    "unknown id": ['{"operations": [{"op": "replace", "id": "99", "content": "x"}]}'] * 2,
    "empty content": ['{"operations": [{"op": "replace", "id": "1", "content": "  "}]}'] * 2,
    "model raises": [ValueError("the model crashed")],
    "timeout": [TimeoutError("read timed out")],
}


@pytest.mark.parametrize("case", list(FAILURES))
def test_a_failed_edit_leaves_state_store_and_history_exactly_as_they_were(case: str, tmp_path) -> None:
    t = chat(SQLiteStore(tmp_path / "t.db"))
    before = state_of(t)
    expected = ModelUnavailableError if case == "timeout" else EditError
    with pytest.raises(expected):
        t.edit("break it", model=ScriptedModel(FAILURES[case]))
    assert state_of(t) == before
    assert state_of(Transcript("edits", store=SQLiteStore(tmp_path / "t.db"))) == before


def test_the_retry_shows_the_model_its_error() -> None:
    t = chat()
    target = t.messages[1]
    model = ScriptedModel(["oops", ideal_patch_reply(t.messages, [Replace(target.id, "About 28 billion USD.")])])
    t.edit("fix the figure", model=model)
    assert len(model.calls) == 2 and "oops" in model.calls[1].text
    assert t.messages[1].content == "About 28 billion USD."


def test_large_deletions_need_permission() -> None:
    t = chat()
    m = t.messages
    everything = [Delete(x.id) for x in m[:4]]
    with pytest.raises(EditError, match="allow_large_deletion"):
        t.edit("delete it all", model=ScriptedModel([ideal_patch_reply(m, everything)]))
    assert t.messages == m
    t.edit("delete it all", model=ScriptedModel([ideal_patch_reply(m, everything)]), allow_large_deletion=True)
    assert [x.id for x in t.messages] == [m[4].id, m[5].id]


def test_no_model_is_a_clear_error() -> None:
    with pytest.raises(ModelUnavailableError, match="model="):
        chat().edit("anything")


def test_a_plain_callable_is_a_model() -> None:
    t = chat()
    target = t.messages[0]
    seen = []

    def my_model(messages: list[dict]) -> str:
        seen.append(messages)
        return ideal_patch_reply(t.messages, [Replace(target.id, "Iceland?")])

    t.edit("Iceland", model=my_model)
    assert t.messages[0].content == "Iceland?"
    assert all(set(m) >= {"role", "content"} for m in seen[0])


def test_undo_after_an_edit_and_new_turns_keeps_the_turns() -> None:
    t = chat()
    target = t.messages[0]
    t.edit("Iceland", model=ScriptedModel([ideal_patch_reply(t.messages, [Replace(target.id, "Iceland?")])]))
    t.append(user="And per capita?", assistant="About 75,000 USD.")
    t.undo()
    assert t.messages[0].content == "What was Ireland's GDP in 2021?"
    assert [x.content for x in t.messages][-2:] == ["And per capita?", "About 75,000 USD."]


def test_selection_follows_the_current_state_only() -> None:
    t = chat()
    gate = TranscriptGate(t, token_budget=2000)
    assert "Ireland" in " ".join(m.content for m in gate.select_messages("Ireland GDP 2021"))
    m = t.messages
    t.edit("Iceland", model=ScriptedModel([ideal_patch_reply(m, [
        Replace(m[0].id, "What was Iceland's GDP in 2022?"), Replace(m[4].id, "What were Iceland's largest sectors?"),
    ])]))
    for query in ("Ireland GDP 2021", "Ireland largest sectors", "Iceland GDP"):
        selected = gate.select_messages(query)
        assert not any("Ireland" in x.content for x in selected)
    assert any("Iceland" in x.content for x in gate.select_messages("Iceland GDP 2022"))
    t.undo()
    assert any("Ireland" in x.content for x in gate.select_messages("Ireland GDP 2021"))
    assert not any("Iceland" in x.content for x in gate.select_messages("Iceland GDP 2022"))


def test_the_gate_keeps_system_messages_and_the_open_turn() -> None:
    t = Transcript("gate")
    t.append(messages=[{"role": "system", "content": "Be brief."}])
    t.append(user="Kafka consumer lag grows", assistant="Add consumers.")
    t.append(user="Best espresso grind?", assistant="Fine.")
    t.append(user="How do I watch Kafka lag?")
    selected = TranscriptGate(t, token_budget=2000).select_messages("Kafka lag monitoring")
    assert [x.content for x in selected] == ["Be brief.", "Kafka consumer lag grows", "Add consumers.", "How do I watch Kafka lag?"]


def test_async_edit() -> None:
    async def main() -> None:
        t = chat()
        target = t.messages[1]
        model = ScriptedModel([ideal_patch_reply(t.messages, [Replace(target.id, "28 billion.")])])
        proposal = await t.aedit("fix", model=model, preview=True)
        await t.acommit(proposal)
        assert (await t.aget_messages())[1].content == "28 billion."

    asyncio.run(main())


def test_the_gate_never_serves_purged_text_even_when_the_head_number_comes_back() -> None:
    t = Transcript("purge-gate")
    gate = TranscriptGate(t, token_budget=2000)
    t.append(user="My account number is 4242, plan my Redis lock TTL", assistant="Longer than the job.")
    assert gate.select_messages("Redis lock TTL again?")
    t.purge()
    t.append(user="Espresso grind size?", assistant="Fine.")
    assert t.head == 1
    assert not any("4242" in m.content for m in gate.select_messages("Redis lock TTL again?"))


def test_the_gate_follows_a_reorder() -> None:
    t = Transcript("reorder")
    gate = TranscriptGate(t, token_budget=2000)
    t.append(user="Redis lock TTL?", assistant="Longer than the job.")
    t.append(user="Redis lock watchdog?", assistant="Renew every TTL/3.")
    gate.sync()
    m = list(t.messages)
    t.set(m[2:] + m[:2])
    assert [x.content for x in gate.select_messages("Redis lock")] == [x.content for x in t.messages]


def test_a_transcript_closes_only_the_store_it_opened(tmp_path) -> None:
    path = tmp_path / "owned.db"
    with Transcript("s", store=path) as owned:
        owned.append(user="q", assistant="a")
    with pytest.raises(Exception):
        owned.store.head("s")  # closed
    shared = SQLiteStore(tmp_path / "shared.db")
    Transcript("s", store=shared).close()
    assert shared.head("s") == 0  # still open: the caller owns it


# -- TurnIndex: the one sync routine (TranscriptGate and the adapters' per-thread views) --------
def _turn(key: str, user: str, assistant: str = "ok"):
    from context_gatekeeper import Message
    from context_gatekeeper.transcripts.transcript_gate import MessageTurn

    return MessageTurn(key, (Message(f"{key}u", "user", user), Message(f"{key}a", "assistant", assistant)))


def test_turn_index_indexes_only_what_changed_and_rebuilds_on_reorder():
    from context_gatekeeper import ContextGatekeeper, InvalidInputError
    from context_gatekeeper.transcripts.transcript_gate import TurnIndex

    index = TurnIndex(ContextGatekeeper(token_counter=len, message_overhead=0))
    a, b, c = _turn("a", "redis lock ttl"), _turn("b", "espresso grind"), _turn("c", "helm chart")
    index.sync([a, b])
    first = dict(index.ids)
    index.sync([a, b, c])  # grew by one: the others keep their gatekeeper turns
    assert {k: index.ids[k] for k in first} == first and index.builds == 1
    index.sync([a, _turn("b", "espresso beans"), c])  # b's text changed: re-indexed in place
    assert index.ids["b"] == first["b"]
    assert "beans" in index.gatekeeper.get_turn(index.ids["b"]).user
    index.sync([a, c])  # b removed
    assert set(index.ids) == {"a", "c"} and len(index.gatekeeper) == 2
    index.sync([c, a])  # reordered: rebuilt, in the new order
    assert index.builds == 2 and [t.user for t in index.gatekeeper.turns] == ["helm chart", "redis lock ttl"]
    with pytest.raises(InvalidInputError, match="unique"):
        index.sync([a, a])
    assert set(index.ids) == {"a", "c"}  # the refused sync changed nothing


def test_turn_index_pins_a_turn_again_under_its_new_id_after_a_rebuild():
    """A rebuild gives every turn a new gatekeeper id; a pinned turn still there is pinned
    again by its key (also when the first rebuild failed midway), a removed one is not."""
    from context_gatekeeper import ContextGatekeeper
    from context_gatekeeper.transcripts.transcript_gate import TurnIndex

    def count(text: str) -> int:
        if "unpriceable" in text:
            raise RuntimeError("the token counter failed")
        return len(text)

    index = TurnIndex(ContextGatekeeper(token_counter=count, message_overhead=0))
    a, b, c = _turn("a", "redis lock ttl"), _turn("b", "espresso grind"), _turn("c", "helm chart")
    index.sync([a, b, c])
    gk = index.gatekeeper
    gk.pin(index.ids["a"])
    gk.pin(index.ids["c"])
    with pytest.raises(RuntimeError, match="token counter"):
        index.sync([b, a, c, _turn("d", "unpriceable")])  # a rebuild that fails: nothing placed
    index.sync([b, a])  # reordered, c gone: rebuilt
    assert index.builds == 3 and [t.user for t in gk.turns] == ["espresso grind", "redis lock ttl"]
    assert gk.pinned == (index.ids["a"],) and index.ids["a"] not in (1, 2, 3)


@pytest.mark.parametrize("second", ["delete", "replace"])
def test_apply_refuses_a_message_an_earlier_request_deleted(second: str) -> None:
    t = chat(InMemoryStore())
    ids = [m.id for m in t.messages]
    head, before = t.head, state_of(t)
    request = Delete(ids[1]) if second == "delete" else Replace(ids[1], "again")
    with pytest.raises(InvalidInputError, match=rf"request 3 \({type(request).__name__}\) names message '{ids[1]}'") as caught:
        t.apply([Delete(ids[1]), Replace(ids[0], "changed"), request])
    assert "request 1 (Delete) of this list deleted it" in str(caught.value)
    assert "one request per message" in str(caught.value)
    assert ids[1] in [m.id for m in t.messages]  # the message the error names is still there
    assert (t.head, state_of(t)) == (head, before)


def test_apply_takes_one_request_per_message() -> None:
    t = chat(InMemoryStore())
    ids = [m.id for m in t.messages]
    head, before = t.head, state_of(t)
    refused = {
        "replaced twice": [Replace(ids[0], "one"), Replace(ids[0], "two")],
        "replaced, then deleted": [Replace(ids[0], "one"), Delete(ids[0])],
        "inserted after a deleted one": [Delete(ids[0]), InsertAfter(ids[0], "user", "new")],
    }
    for name, requests in refused.items():
        with pytest.raises(InvalidInputError, match="request 2 .* but request 1 ") as caught:
            t.apply(requests)
        assert ("replaced it" if name.startswith("replaced") else "deleted it") in str(caught.value), name
        assert (t.head, state_of(t)) == (head, before), name
    t.apply([Replace(ids[0], "one"), InsertAfter(ids[0], "user", "after the replaced one")])  # an anchor is fine
    assert [m.content for m in t.messages][:2] == ["one", "after the replaced one"]


@pytest.mark.parametrize("asynchronous", [False, True])
def test_apply_keeps_the_order_of_several_insertions_after_one_message_as_an_edit_does(asynchronous: bool, tmp_path) -> None:
    """Insertions after one message land in the list's order, as the same insertions from a
    model's edit land (so do insertions at the start); undo takes them out and redo puts them back so."""
    store = SQLiteStore(tmp_path / "c.db")
    try:
        applied, edited = Transcript("applied", store=store), Transcript("edited", store=store)
        for t in (applied, edited):
            t.append(user="Plan a trip to Iceland", assistant="Reykjavik, Golden Circle.")
        answer = applied.messages[1].id
        added = [("user", "Q: and the budget?"), ("assistant", "A: 900 EUR."), ("user", "Q: and the weather?")]
        requests = [InsertAfter(answer, role, text) for role, text in added]
        requests[2:2] = [InsertAfter(None, "system", "You are terse."), InsertAfter(None, "system", "Answer in English.")]
        asyncio.run(applied.aapply(requests)) if asynchronous else applied.apply(requests)
        texts = [text for _, text in added]
        expected = ["You are terse.", "Answer in English.", "Plan a trip to Iceland", "Reykjavik, Golden Circle.", *texts]
        assert [m.content for m in applied.messages] == expected
        assert [m.content for m in Transcript("applied", store=store).messages] == expected
        edited.edit("add the budget and weather questions", model=ScriptedModel([insert_after("2", *added)]))
        assert [m.content for m in edited.messages] == expected[2:]  # the model's edit: the same order
        applied.undo()
        assert [m.content for m in applied.messages] == expected[2:4]
        applied.redo()
        assert [m.content for m in applied.messages] == expected
    finally:
        store.close()


def test_a_refused_apply_leaves_the_state_as_it_was(tmp_path) -> None:
    """apply resolves each request on the state the ones before it leave, and a request
    refused half way (an unknown id) leaves every message where it was."""
    from context_gatekeeper import UnknownMessageError

    store = SQLiteStore(tmp_path / "log.db")
    try:
        t = chat(store)
        before = state_of(t)
        ids = [m.id for m in t.messages]
        with pytest.raises(UnknownMessageError):
            t.apply([Replace(ids[1], "changed"), Delete(ids[0]), InsertAfter(ids[3], "user", "new"), Delete("nope")])
        assert state_of(t) == before
        with pytest.raises(InvalidInputError, match=r"request 2 \(Replace\).*request 1 \(Delete\) of this list deleted it"):
            t.apply([Delete(ids[2]), Replace(ids[2], "gone")])
        assert state_of(t) == before
        t.apply([Delete(ids[0]), Replace(ids[1], "changed"), InsertAfter(None, "user", "first now")])
        assert [m.content for m in t.messages][:2] == ["first now", "changed"]
        assert [m.id for m in t.messages][2:] == ids[2:]
        assert [m.content for m in Transcript("edits", store=store).messages] == [m.content for m in t.messages]
    finally:
        store.close()


BUDGET = "From now on the budget is 500 EUR."
LATER_TURN = {"user": "What about Galway?", "assistant": "Galway is 2h from Dublin."}


def insert_after(alias: str, *messages: tuple[str, str]) -> str:
    """A patch reply inserting ``(role, content)`` messages after the shown message ``alias``."""
    operations = [{"op": "insert_after", "id": alias, "role": role, "content": content} for role, content in messages]
    return json.dumps({"operations": operations})


def trip(store: SQLiteStore) -> Transcript:
    t = Transcript("trip", store=store)
    t.append(user="Trip to Ireland?", assistant="Dublin, 900 EUR.")
    return t


@pytest.mark.parametrize("how", ["commit", "edit", "aedit"])
def test_an_edit_that_the_turns_appended_meanwhile_would_break_is_stale(how: str, tmp_path) -> None:
    """An insertion at the end of the state the model saw lands before a turn appended
    meanwhile (by another writer, while the model worked, or before a preview's commit):
    two user messages in a row, which the edit's own check never saw.  It is refused as
    stale and writes nothing; computed again, the edit commits."""
    store = SQLiteStore(tmp_path / "log.db")
    try:
        t, other = trip(store), Transcript("trip", store=store)
        seen: list[tuple] = []

        def reply(messages: object) -> str:
            if how != "commit":
                other.append(**LATER_TURN)  # the chat goes on while the model works
                seen.append(state_of(other))
            return insert_after("2", ("user", BUDGET))

        model = ScriptedModel(reply)
        with pytest.raises(StaleHeadError, match=r"revision\(s\) \[2\] appended turns after revision 1") as caught:
            if how == "commit":
                proposal = t.edit("from now on the budget is 500 EUR", model=model, preview=True)
                other.append(**LATER_TURN)
                seen.append(state_of(t))
                t.commit(proposal)
            elif how == "edit":
                t.edit("from now on the budget is 500 EUR", model=model)
            else:
                asyncio.run(t.aedit("from now on the budget is 500 EUR", model=model))
        assert f"'{BUDGET}') and user message" in str(caught.value) and "two user messages in a row" in str(caught.value)
        assert "Compute the edit again" in str(caught.value)
        assert state_of(t) == seen[0] and store.head("trip") == 2  # nothing written
        again = t.edit("from now on the budget is 500 EUR", model=ScriptedModel(insert_after("4", ("user", BUDGET))))
        assert (again.number, again.base) == (3, 2)
        assert [m.content for m in t.messages] == ["Trip to Ireland?", "Dublin, 900 EUR.", *LATER_TURN.values(), BUDGET]
    finally:
        store.close()


def test_an_edit_that_stays_sound_over_the_turns_appended_meanwhile_is_rebased(tmp_path) -> None:
    store = SQLiteStore(tmp_path / "log.db")
    try:
        t, other = trip(store), Transcript("trip", store=store)
        pair = insert_after("2", ("user", "Do I need a visa?"), ("assistant", "Not from the EU."))
        proposal = t.edit("add the visa question", model=ScriptedModel(pair), preview=True)
        other.append(**LATER_TURN)
        revision = t.commit(proposal)
        assert (revision.kind, revision.base, revision.parent) == ("edit", 1, 2)
        assert [m.content for m in t.messages] == [
            "Trip to Ireland?", "Dublin, 900 EUR.", "Do I need a visa?", "Not from the EU.", *LATER_TURN.values()
        ]
    finally:
        store.close()


def test_an_edit_that_would_separate_a_tool_call_appended_meanwhile_from_its_call_is_stale(tmp_path) -> None:
    store = SQLiteStore(tmp_path / "log.db")
    try:
        call = {"id": "c1", "name": "weather", "args": {"city": "Cork"}}
        t = Transcript("tools", store=store)
        t.append(messages=[{"role": "user", "content": "Weather in Cork?"},
                           {"role": "assistant", "content": "Checking.", "metadata": {"tool_calls": [call]}}])
        proposal = t.edit("use Celsius", model=ScriptedModel(insert_after("2", ("user", "Celsius, please."))), preview=True)
        Transcript("tools", store=store).append(messages=[
            {"role": "tool", "content": "14 C, sunny", "metadata": {"tool_call_id": "c1"}},
            {"role": "assistant", "content": "14 C and sunny."},
        ])
        before = state_of(t)
        with pytest.raises(StaleHeadError, match="tool call 'c1' of message .* would be separated from its result"):
            asyncio.run(t.acommit(proposal))
        assert state_of(t) == before
    finally:
        store.close()


def test_set_keeps_a_moved_messages_provenance_but_stamps_it_with_its_revision_as_documented(tmp_path) -> None:
    store = SQLiteStore(tmp_path / "moves.sqlite3")
    try:
        t = Transcript("moves", store=store)
        t.append(user="q1", assistant="a1")
        t.append(user="q2", assistant="a2")
        t.apply([Replace(t.messages[1].id, "a1, edited")])  # revision 3: a1 edited, derived from the original
        held = {m.id: m for m in t.messages}
        m = t.messages
        moved = t.set([m[2], m[3], m[0], m[1]])  # same messages, new order
        assert not t.diff(moved.parent, moved.number).changed and len(moved.moved) == 2
        for now in t.messages:  # origin and derived_from kept wherever it goes
            was = held[now.id]
            assert (now.origin, now.derived_from, now.content) == (was.origin, was.derived_from, was.content)
        stamps = {m.content: m.revision for m in t.messages}
        assert stamps == {"q2": moved.number, "a2": moved.number, "q1": 1, "a1, edited": 3}  # a move re-stamps
        undone = t.undo()
        assert [m.content for m in t.messages] == ["q1", "a1, edited", "q2", "a2"]
        assert [m.revision for m in t.messages] == [1, 3, undone.number, undone.number]  # moved back: the undo's
        assert not t.diff(3, undone.number).changed and t.snapshot(3) != t.messages  # == sees the stamp
        reread = Transcript("moves", store=store).messages  # the stamps are what the store keeps
        assert [(m.id, m.revision) for m in reread] == [(m.id, m.revision) for m in t.messages]
    finally:
        store.close()
    doc = " ".join((Transcript.set.__doc__ or "").split())
    assert "stamped with this set's revision" in doc and "wherever it goes in the order" in doc

"""TranscriptGate following a transcript that another object writes: catching up reads
only the revisions it has not seen and re-indexes only the turns they touch, and the
result is always the gate a fresh object would build from the current state."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from context_gatekeeper import BudgetError, ContextGatekeeper, InvalidTypeError, Delete, Message, Replace, SQLiteStore, Transcript, TranscriptGate
from context_gatekeeper.records.revisions import Revision

from gatekeeper_support import CountingGatekeeper

TOPICS = [
    ("How long should a Redis lock TTL be?", "Longer than the longest job, with a watchdog."),
    ("Which espresso grind suits a moka pot?", "Medium-fine, coarser than for espresso machines."),
    ("How do I size Kafka partitions?", "By target throughput per consumer."),
    ("What soil do tomatoes like?", "Loamy, well drained, slightly acidic."),
]


class CountingStore(SQLiteStore):
    """A real SQLite store that counts the revisions its reads hand out."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.read = 0

    def revisions(self, session_id: str, after: int = 0) -> list[Revision]:
        found = super().revisions(session_id, after)
        self.read += len(found)
        return found


def fill(t: Transcript, turns: int) -> None:
    for n in range(turns):
        user, assistant = TOPICS[n % len(TOPICS)]
        t.append(user=f"{user} (turn {n})", assistant=assistant)


def picture(gate: TranscriptGate) -> tuple:
    """Everything the gate holds, in comparable form: turns, open turn, system text, the
    gatekeeper's turns in order and a few selections."""
    gate.sync()
    gk = gate.gatekeeper
    queries = [q for q, _ in TOPICS] + ["And the Redis watchdog again?"]
    return (
        [(t.key, t.texts) for t in gate._turns],
        gate._open,
        gk.system_prompt,
        [(t.user, t.assistant, t.tool_texts) for t in gk.turns],
        [[m.id for m in gate.select_messages(q, token_budget=200)] for q in queries],
    )


def fresh_picture(path: Path) -> tuple:
    store = SQLiteStore(path)
    try:
        return picture(TranscriptGate(Transcript("s", store=store), token_budget=2000))
    finally:
        store.close()


def test_catching_up_one_append_reads_one_revision_and_indexes_one_turn(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    writer_store, reader_store = SQLiteStore(path), CountingStore(path)
    try:
        writer = Transcript("s", store=writer_store)
        fill(writer, 60)
        reader = Transcript("s", store=reader_store)
        gate = TranscriptGate(reader, gatekeeper=CountingGatekeeper(token_budget=2000))
        gate.select_messages("Redis lock TTL")
        assert reader_store.read == 60 and gate.gatekeeper.calls["insert"] == 60
        reader_store.read, gate.gatekeeper.calls["insert"] = 0, 0

        writer.append(user="Is a Redis lock watchdog needed?", assistant="Yes, for long jobs.")
        selected = gate.select_messages("Redis lock watchdog")

        assert reader_store.read == 2  # the new revision, and the one it follows (to tell a rewritten log)
        assert gate.gatekeeper.calls == {"insert": 1, "replace": 0, "remove": 0, "clear": 0}
        assert gate._index.builds == 1  # never rebuilt
        assert "Is a Redis lock watchdog needed?" in [m.content for m in selected]
        assert picture(gate) == fresh_picture(path)
    finally:
        writer_store.close()
        reader_store.close()


def test_nothing_new_reads_nothing(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    store = CountingStore(path)
    try:
        t = Transcript("s", store=store)
        fill(t, 5)
        gate = TranscriptGate(t, gatekeeper=CountingGatekeeper(token_budget=2000))
        gate.sync()
        store.read, gate.gatekeeper.calls["insert"] = 0, 0
        gate.sync()
        gate.select_messages("espresso grind")
        assert store.read == 0 and gate.gatekeeper.calls["insert"] == 0
    finally:
        store.close()


def test_an_answer_joins_the_open_question_as_one_turn(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    store = CountingStore(path)
    try:
        t = Transcript("s", store=store)
        fill(t, 4)
        gate = TranscriptGate(t, gatekeeper=CountingGatekeeper(token_budget=2000))
        gate.sync()
        t.append(user="How do I rotate Kafka logs?")
        gate.sync()
        assert gate._open is not None and gate.gatekeeper.calls["insert"] == 4  # an open question is not indexed
        t.append(assistant="Set retention.ms and segment.ms.")
        gate.sync()
        assert gate._open is None and gate.gatekeeper.calls["insert"] == 5
        assert gate._turns[-1].texts == ("How do I rotate Kafka logs?", "Set retention.ms and segment.ms.", ())
        t.append(messages=[Message("tool-1", "tool", "retention.ms=604800000")])  # a tool result joins the turn
        gate.sync()
        assert gate.gatekeeper.calls["replace"] == 1 and gate.gatekeeper.calls["insert"] == 5
        assert picture(gate) == fresh_picture(path)
    finally:
        store.close()


@pytest.mark.parametrize("step", ["replace", "delete", "undo", "system", "purge", "answer_in_the_middle"])
def test_every_other_change_gives_what_a_fresh_gate_gives(tmp_path: Path, step: str) -> None:
    path = tmp_path / "log.db"
    writer_store, reader_store = SQLiteStore(path), SQLiteStore(path)
    try:
        writer = Transcript("s", store=writer_store)
        fill(writer, 8)
        asker = Transcript("s", store=writer_store)
        asker.append(user="Which Redis eviction policy for a cache?")  # left open
        gate = TranscriptGate(Transcript("s", store=reader_store), token_budget=2000)
        gate.sync()
        first = writer.messages[0].id
        if step == "replace":
            writer.apply([Replace(first, "How long should a Postgres advisory lock be held?")])
        elif step == "delete":
            writer.apply([Delete(writer.messages[2].id)])
        elif step == "undo":
            writer.apply([Replace(first, "edited")])
            gate.sync()
            writer.undo()
        elif step == "system":
            writer.append(messages=[Message("sys-1", "system", "Answer briefly.")])
        elif step == "purge":
            writer.purge()
            fill(writer, 9)
        else:  # another writer appended after the open question, then its answer landed before that
            writer.append(user="What about tomato watering?", assistant="Deeply, twice a week.")
            gate.sync()
            asker.append(assistant="allkeys-lru")
        writer.append(user="One more about Kafka partitions?", assistant="Keep them a multiple of consumers.")
        assert picture(gate) == fresh_picture(path)
    finally:
        writer_store.close()
        reader_store.close()


def test_what_select_messages_hands_out_is_a_copy_the_transcript_never_sees_changed(tmp_path: Path) -> None:
    """The gate reads the transcript's own messages (no copy of every message per sync) and
    copies only those it returns: changing a returned message's metadata or parts reaches
    neither the transcript nor a later selection."""
    t = Transcript("s", store=SQLiteStore(tmp_path / "s.db"))
    t.append(messages=[
        Message(id="u1", role="user", content="How long should a Redis lock TTL be?", metadata={"tags": ["redis"]}),
        Message(id="a1", role="assistant", content="Longer than the job."),
    ])
    gate = TranscriptGate(t)
    before = [m.to_dict() for m in t.messages]
    for message in gate.select_messages("And the Redis lock TTL?", token_budget=200):
        message.metadata.clear()
        message.metadata["injected"] = True
    assert [m.to_dict() for m in t.messages] == before
    again = gate.select_messages("And the Redis lock TTL?", token_budget=200)
    assert [m.to_dict() for m in again] == before


@pytest.mark.parametrize("asynchronous", [False, True])
def test_what_open_run_hands_out_is_a_copy_the_transcript_never_sees_changed(tmp_path: Path, asynchronous: bool) -> None:
    """The open run's turns hold copies too: a caller annotating them (marking them as sent)
    changes neither the transcript, its history, a later open run, nor what its next write stores."""
    t = Transcript("s", store=SQLiteStore(tmp_path / "s.db"))
    t.append(user="How long should a Redis lock TTL be?", assistant="Longer than the job.")
    t.append(messages=[Message(id="p1", role="user", content="Pasted log: ...", metadata={"source": "paste"},
                               parts=({"type": "text", "text": "Pasted log: ..."},))])
    t.append(user="What does this log say?")
    gate = TranscriptGate(t, token_counter=len, message_overhead=0, token_budget=10_000)
    before, history = [m.to_dict() for m in t.messages], [r.to_dict() for r in t.history()]
    run, _ = asyncio.run(gate.aopen_run()) if asynchronous else gate.open_run()
    assert [m.id for turn in run for m in turn.messages] == ["p1"]
    for message in (m for turn in run for m in turn.messages):
        message.metadata["source"] = "CHANGED BY CALLER"
        message.parts[0]["text"] = "changed"
    assert [m.to_dict() for m in t.messages] == before and [r.to_dict() for r in t.history()] == history
    assert [m.to_dict() for turn in gate.open_run()[0] for m in turn.messages] == [before[2]]
    t.apply([Replace("p1", "Pasted log (trimmed)")])
    stored = Transcript("s", store=t.store).messages[2]
    assert stored.metadata == {"source": "paste"} and stored.parts == ({"type": "text", "text": "Pasted log: ..."},)
    t.store.close()


def test_message_turn_texts_are_one_text_a_message() -> None:
    """MessageTurn.texts (a shortcut for a question and its answer): the first user text, the
    last answer as the assistant text, earlier answers, later user messages (a tool's delivery)
    and tool and system messages (sent with the turn) as tool texts."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from context_gatekeeper.transcripts.transcript_gate import MessageTurn

    roles = st.sampled_from(["user", "assistant", "tool", "system"])
    texts = st.text(alphabet=" ab\n", max_size=4)

    @settings(max_examples=200, deadline=None)
    @given(st.lists(st.tuples(roles, texts), min_size=1, max_size=4))
    def check(parts: list[tuple[str, str]]) -> None:
        messages = tuple(Message(f"m{n}", role, text) for n, (role, text) in enumerate(parts))  # type: ignore[arg-type]
        answers = [m.content for m in messages if m.role == "assistant"]
        users = [m.content for m in messages if m.role == "user"]
        expected = (  # a message sent with no text is read as the placeholder: priced as a message
            (users[0] or "…") if users else "",
            (answers[-1] or "…") if answers else "",
            (*answers[:-1], *(u or "…" for u in users[1:]), *(m.content for m in messages if m.role in ("tool", "system"))),
        )
        assert MessageTurn("m0", messages).texts == expected

    check()


def test_a_system_message_inside_a_turn_counts_against_the_budget() -> None:
    """A system message after the start stays in its turn and is sent with it, so its tokens
    are the turn's: what the gate hands out stays within token_budget."""
    reminder = "Remember: " + "always answer in three short sentences and cite the runbook. " * 20
    costs = []
    for with_reminder in (False, True):
        t = Transcript("s")
        t.append(user="How long should the Redis lock TTL be?", assistant="A few times the p99 of the work.")
        if with_reminder:
            t.append(messages=[{"role": "system", "content": reminder}])
        t.append(user="And the Redis lock renewal?", assistant="Renew it from a watchdog at a third of the TTL.")
        gate = TranscriptGate(t, token_budget=60)
        selection = gate.explain("What Redis lock TTL and renewal should I use?")
        assert selection.tokens_kept <= 60 or selection.over_budget
        gate.sync()
        first = gate.gatekeeper.turns[0].id
        costs.append(gate.gatekeeper.turn_cost(first))
    assert costs[1] - costs[0] > len(reminder) // 8  # the reminder's tokens are in its turn's cost


@pytest.mark.parametrize("blank", [[" "], ["", ""], ["\n"], ["", "Answer briefly."]])
def test_blank_system_messages_are_priced_as_messages_and_never_raise(blank: list[str]) -> None:
    """A leading system message with no text (empty, white space, an image alone) is sent, so the
    gatekeeper holds it as one of the system prompt's messages, costing its overhead; selection
    never raises for it."""
    t = Transcript("s")
    t.append(messages=[{"role": "system", "content": text} for text in blank])
    t.append(user="How long should a Redis lock TTL be?", assistant="Longer than the longest job.")
    t.append(user="And the Redis watchdog?")
    gate = TranscriptGate(t, token_budget=500)
    selected = gate.select_messages("Redis watchdog")
    assert [m.content for m in selected][-3:] == [
        "How long should a Redis lock TTL be?", "Longer than the longest job.", "And the Redis watchdog?",
    ]
    assert gate.gatekeeper.system_prompt == tuple(blank)
    priced = TranscriptGate(t, token_counter=len, message_overhead=3)
    priced.sync()
    assert priced.gatekeeper.pinned_cost() == sum(map(len, blank)) + 3 * len(blank)


PASTE = "Traceback (most recent call last): File app.py line 12 KeyError: 'user_id'"
QUESTION = "Which logging library would you recommend instead?"


def pasted_then_asked(budget: int, pastes: int = 1) -> TranscriptGate:
    """Two answered turns of other topics, then unanswered user messages: ``pastes`` pasted
    tracebacks, then the question about them (sharing no word with them)."""
    t = Transcript("s")
    fill(t, 2)
    for n in range(pastes):
        t.append(user=f"{PASTE} (paste {n})")
    t.append(user=QUESTION)
    return TranscriptGate(t, token_budget=budget)


@pytest.mark.parametrize("asynchronous", [False, True])
def test_unanswered_messages_before_the_question_join_the_open_turn(asynchronous: bool) -> None:
    """A paste, then the question: both are the open turn, sent whole at the end (the paste
    shares no word with the question, so as an earlier turn the gate leaves it out)."""
    import asyncio

    gate = pasted_then_asked(budget=500)
    query = QUESTION
    if asynchronous:
        selected = asyncio.run(gate.aselect_messages(query))
        selection = asyncio.run(gate.aexplain(query))
    else:
        selected, selection = gate.select_messages(query), gate.explain(query)
    assert [m.content for m in selected] == [f"{PASTE} (paste 0)", query]
    run, spent = asyncio.run(gate.aopen_run()) if asynchronous else gate.open_run()
    assert [turn.messages[0].content for turn in run] == [f"{PASTE} (paste 0)"]
    paste_id = gate.gatekeeper.turns[-1].id
    assert spent == gate.gatekeeper.turn_cost(paste_id) and paste_id not in selection.turn_ids
    assert selection.tokens_kept <= 500 - spent
    # without the open turn, the paste is an earlier turn like any other (the LlamaIndex memory's own path)
    assert f"{PASTE} (paste 0)" not in [m.content for m in gate.select_messages(query, include_open=False)]


def test_a_long_run_of_unanswered_messages_joins_only_while_it_fits() -> None:
    gate = pasted_then_asked(budget=60, pastes=6)
    run, spent = gate.open_run()
    cost = gate.gatekeeper.turn_cost(gate.gatekeeper.turns[-1].id)
    assert 0 < len(run) == 60 // cost < 6 and spent <= 60  # the newest pastes, while they fit
    selected = [m.content for m in gate.select_messages(QUESTION)]
    assert selected[-len(run) - 1:] == [*(f"{PASTE} (paste {n})" for n in range(6 - len(run), 6)), QUESTION]
    assert gate.open_run(token_budget=cost - 1) == ((), 0)


def test_the_open_run_and_the_earlier_turns_share_the_budget() -> None:
    """The paste's tokens come out of the budget first: an earlier turn the question needs is
    kept when it fits beside the paste, not when it fits only the budget."""
    query = "Which logging library would you recommend instead for the Redis lock TTL?"
    probe = pasted_then_asked(budget=500)
    _, spent = probe.open_run()
    first = probe.gatekeeper.turns[0].id
    needed = probe.gatekeeper.turn_cost(first)
    assert first in probe.explain(query).turn_ids
    for budget, kept in ((needed + spent, True), (needed + spent - 1, False)):
        gate = pasted_then_asked(budget=budget)
        contents = [m.content for m in gate.select_messages(query)]
        assert contents[-2:] == [f"{PASTE} (paste 0)", QUESTION]
        assert (TOPICS[0][0] + " (turn 0)" in contents) is kept


def test_a_tool_call_is_read_and_priced_with_the_message_that_makes_it() -> None:
    """An assistant message whose text is empty but whose tool call carries a page of code:
    the call's name and arguments are what the model is sent, so the turn costs them and its
    words match (it was priced as an empty message: a history's selection went 3x over its
    budget)."""
    from context_gatekeeper.tokens import tiktoken_counter
    from context_gatekeeper.transcripts.transcript_gate import message_text

    count = tiktoken_counter("cl100k_base")
    code = "def handler(event):\n    return redis_lock_ttl(event) * 2\n" * 40
    call = {"id": "c1", "name": "write_file", "args": {"path": "handler.py", "text": code}}
    t = Transcript("s")
    t.append(messages=[
        Message("h1", "user", "Write the lock handler to handler.py"),
        Message("a1", "assistant", "", metadata={"tool_calls": [call]}),
        Message("t1", "tool", "written", metadata={"tool_call_id": "c1"}),
        Message("a2", "assistant", "Done."),
    ])
    t.append(user="Which value does redis_lock_ttl get multiplied by?")
    gate = TranscriptGate(t, token_budget=200, message_overhead=0)
    gate.sync()
    turn = gate.gatekeeper.turns[0]
    called = message_text(t.messages[1])
    assert called.startswith("write_file ") and "redis_lock_ttl" in called
    assert called in turn.tool_texts
    assert gate.gatekeeper.turn_cost(turn.id) >= count(called) > 400
    sent = gate.select_messages("Which value does redis_lock_ttl get multiplied by?")
    assert [m.id for m in sent] == [t.messages[-1].id]  # the turn does not fit 200 tokens: not sent
    roomy = gate.explain("Which value does redis_lock_ttl get multiplied by?", token_budget=2000)
    assert roomy.turn_ids == (turn.id,)  # and it matches on the words of its arguments
    assert message_text(Message("x", "assistant", "Let me look.", metadata={"tool_calls": [
        {"id": "c2", "name": "search", "args": '{"q": "ttl"}'}, {"id": "c3", "name": "now", "args": None}]}
    )) == 'Let me look.\nsearch {"q": "ttl"} now'  # a provider's JSON string as it is; no arguments, none
    openai = {"id": "c4", "type": "function", "function": {"name": "write_file", "arguments": '{"path": "a.py"}'}}
    assert message_text(Message("y", "assistant", "", metadata={"tool_calls": [openai]})) == 'write_file {"path": "a.py"}'


def test_the_messages_start_on_a_user_message_or_the_chats_own_greeting() -> None:
    """A chat that opens with the assistant's question ("Which product is failing?"): the
    greeting is sent when selected, as the chat itself began (the user's answer needs it); a
    tool call and its result before any question are left out when they would come first (a
    provider refuses a result whose call it was not sent)."""
    t = Transcript("s")
    t.append(messages=[Message("sys", "system", "Be brief."),
                       Message("hi", "assistant", "Hello! Which Redis lock problem can I help with?")])
    t.append(user="How long should a Redis lock TTL be?", assistant="Longer than the longest job.")
    t.append(user="And the Redis lock watchdog?")
    gate = TranscriptGate(t, token_budget=1000)
    selection = gate.explain("And the Redis lock watchdog?")
    assert gate.gatekeeper.turns[0].id in selection.turn_ids  # the greeting: its words match
    sent = gate.select_messages("And the Redis lock watchdog?")
    assert [m.id for m in sent][:2] == ["sys", "hi"] and sent[-1].content == "And the Redis lock watchdog?"
    tools = Transcript("s")
    tools.append(messages=[
        Message("call", "assistant", "", metadata={"tool_calls": [{"id": "c1", "name": "redis_lock_ttl", "args": {}}]}),
        Message("result", "tool", "redis lock ttl: 30 s", metadata={"tool_call_id": "c1"})])
    tools.append(user="How long should a Redis lock TTL be?", assistant="Longer than the longest job.")
    tools.append(user="And the Redis lock ttl watchdog?")
    tool_gate = TranscriptGate(tools, token_budget=1000)
    selection = tool_gate.explain("And the Redis lock ttl watchdog?")
    assert tool_gate.gatekeeper.turns[0].id in selection.turn_ids
    assert [m.role for m in tool_gate.select_messages("And the Redis lock ttl watchdog?")] == [
        "user", "assistant", "user"]


@pytest.mark.parametrize("asynchronous", [False, True])
def test_an_open_turn_that_must_fit_is_charged_and_left_out_when_it_does_not(asynchronous: bool) -> None:
    """include_open="fits" (a chain whose new input is the open turn): the stored unanswered
    message and its run are charged to the budget, sent when they fit, and left out when they
    do not (the run's messages then earlier turns, gated as any other)."""
    t = Transcript("s")
    t.append(user="How long should a Redis lock TTL be?", assistant="Longer than the longest job.")
    t.append(user="P" * 60)
    t.append(user="Q" * 30)
    gate = TranscriptGate(t, token_counter=len, message_overhead=0, token_budget=200)
    ttl = gate.gatekeeper.cost_of("How long should a Redis lock TTL be?", "Longer than the longest job.")

    def select(**kw: Any) -> list[Message]:
        if asynchronous:
            return asyncio.run(gate.aselect_messages("Redis lock TTL?", include_open="fits", **kw))
        return gate.select_messages("Redis lock TTL?", include_open="fits", **kw)

    assert [m.content for m in select()] == [t.messages[0].content, t.messages[1].content, "P" * 60, "Q" * 30]
    assert [m.content for m in select(token_budget=ttl + 90)] == [t.messages[0].content, t.messages[1].content,
                                                                    "P" * 60, "Q" * 30]
    # the open message and its run are paid first: the earlier turn no longer fits beside them
    assert [m.content for m in select(token_budget=ttl + 89)] == ["P" * 60, "Q" * 30]
    assert [m.content for m in select(token_budget=89)] == ["Q" * 30]  # the paste no longer fits: gated out
    assert [m.content for m in select(token_budget=29)] == []  # nor the open message: left out
    with pytest.raises(InvalidTypeError, match="include_open"):
        gate.select_messages("Redis lock TTL?", include_open="yes")  # type: ignore[arg-type]


def test_each_leading_system_message_is_charged_its_overhead() -> None:
    """The leading system messages are sent one message each, and the gatekeeper prices them so:
    what select_messages sends stays within the budget (blank ones are sent too)."""
    for prompts in (["Be brief.", "Answer in English.", "Cite sources.", "No emoji."], [" ", " "]):
        t = Transcript("s")
        t.append(messages=[Message(f"s{n}", "system", text) for n, text in enumerate(prompts)])
        t.append(user="How long should a Redis lock TTL be?", assistant="Longer than the longest job.")
        t.append(user="And the Redis lock watchdog?")
        for budget in range(0, 80, 4):
            gate = TranscriptGate(t, token_counter=lambda text: len(text.split()), message_overhead=10,
                                  token_budget=budget, on_overflow="keep_pinned")
            sent = gate.select_messages("And the Redis lock watchdog?")[:-1]  # the open question apart
            cost = sum(len(m.content.split()) + 10 for m in sent)
            pinned_only = [m.role for m in sent] == ["system"] * len(prompts)
            assert cost <= budget or pinned_only, (prompts, budget, cost)
            assert gate.explain("And the Redis lock watchdog?").over_budget == (cost > budget)
            strict = TranscriptGate(t, token_counter=lambda text: len(text.split()), message_overhead=10,
                                    token_budget=budget, on_overflow="raise")
            if cost > budget:  # the pinned content alone: raised, naming the budget given
                with pytest.raises(BudgetError, match=f"token_budget is {budget};"):
                    strict.select_messages("And the Redis lock watchdog?")


def test_an_agent_turn_costs_each_of_its_messages_its_overhead() -> None:
    """A question, two tool calls with their results and the final answer: six messages sent,
    six overheads counted (the answers priced as one text counted one)."""
    t = Transcript("s")
    t.append(messages=[
        Message("u", "user", "Which Redis lock TTL do the jobs use?"),
        Message("a1", "assistant", "lookup job 1"), Message("t1", "tool", "ttl 30"),
        Message("a2", "assistant", "lookup job 2"), Message("t2", "tool", "ttl 45"),
        Message("a3", "assistant", "Job 1 uses 30 seconds and job 2 uses 45."),
    ])
    t.append(user="And the watchdog?")
    costs = []
    for overhead in (0, 3):
        gate = TranscriptGate(t, token_budget=500, message_overhead=overhead)
        gate.sync()
        turn = gate.gatekeeper.turns[0]
        assert turn.assistant == "Job 1 uses 30 seconds and job 2 uses 45."  # the final answer
        assert turn.tool_texts == ("lookup job 1", "lookup job 2", "ttl 30", "ttl 45")
        costs.append(gate.gatekeeper.turn_cost(turn.id))
    assert costs[1] - costs[0] == 6 * 3


def test_the_open_run_leaves_the_pinned_content_its_budget() -> None:
    """The system prompt (and summary, pinned turns) is paid first: a paste that fits the budget
    only without it stays an earlier turn, and selection neither raises nor goes over."""
    t = Transcript("s")
    t.append(messages=[Message("sys", "system", "S" * 50)])
    t.append(user="How long should a Redis lock TTL be?", assistant="Longer than the longest job.")
    t.append(user="P" * 170)
    t.append(user="Why does this stack trace mention Redis?")
    gate = TranscriptGate(t, token_counter=len, message_overhead=0, token_budget=200)
    gate.sync()
    assert gate.gatekeeper.pinned_cost() == 50 and gate.open_run() == ((), 0)  # 170 > 200 - 50
    selection = gate.explain("Why does this stack trace mention Redis?")
    assert not selection.over_budget and selection.tokens_kept <= 200
    roomy = TranscriptGate(t, token_counter=len, message_overhead=0, token_budget=230)
    run, spent = roomy.open_run()
    assert spent == 170 and len(run) == 1  # 170 fits 230 - 50
    assert [m.content for m in roomy.select_messages("Why does this stack trace mention Redis?")] == [
        "S" * 50, "P" * 170, "Why does this stack trace mention Redis?"]


@pytest.mark.parametrize("budget", [-1, "500", 1.5, True])
def test_a_budget_that_is_not_a_number_of_tokens_is_refused_before_anything_is_read(budget: Any) -> None:
    from context_gatekeeper import BudgetError

    gate = pasted_then_asked(budget=500)
    for call in (lambda: gate.open_run(budget), lambda: gate.explain(QUESTION, token_budget=budget),
                 lambda: gate.select_messages(QUESTION, token_budget=budget)):
        with pytest.raises(BudgetError, match="token_budget must be an int"):
            call()


# -- what the gate takes: its transcript, its gatekeeper, the keys not to select --------------
def redis_transcript() -> Transcript:
    t = Transcript("s")
    t.append(user="How long should a Redis lock TTL be?", assistant="Longer than the longest job.")
    t.append(user="And the Redis lock watchdog?", assistant="It renews the lock.")
    return t


@pytest.mark.parametrize("method", ["explain", "select_messages", "aexplain", "aselect_messages"])
@pytest.mark.parametrize("bad", ["key", None, 5, {"key": True}, [5]], ids=["one-key", "none", "int", "dict", "int-item"])
def test_exclude_keys_is_a_list_of_keys_checked_before_anything_is_read(method: str, bad: Any) -> None:
    """One key given as a string is not read as its characters (the turn it names would be
    selected): it is refused, as every other wrong type, with the library's own error, before
    the gate reads the transcript."""
    import asyncio

    from context_gatekeeper import InvalidTypeError

    t = redis_transcript()
    key = t.messages[0].id
    gate = TranscriptGate(t, token_counter=len, message_overhead=0)

    def call(exclude_keys: Any) -> Any:
        result = getattr(gate, method)("Redis lock TTL?", exclude_keys=exclude_keys)
        return asyncio.run(result) if method.startswith("a") else result

    with pytest.raises(InvalidTypeError, match=r"exclude_keys.*\[message\.id\]"):
        call(key if bad == "key" else bad)
    assert len(gate.gatekeeper) == 0  # nothing was read: the gate has not synced
    for keys in ([key], (key,), {key}, iter([key])):
        kept = call(keys)
        first = [m.content for m in kept] if isinstance(kept, list) else kept.turn_ids
        assert "How long should a Redis lock TTL be?" not in first and 1 not in first


def test_the_gate_refuses_a_gatekeeper_that_holds_turns_or_a_system_prompt() -> None:
    """Turns a gatekeeper already holds would take the selection and the budget (and
    select_messages would drop them); a system prompt would be replaced by the transcript's
    system messages.  Both are refused, and the gatekeeper is left as it was."""
    from context_gatekeeper import InvalidInputError, InvalidTypeError

    t = Transcript("s")
    t.append(user="Espresso grind size?", assistant="Fine, like table salt.")
    t.append(user="And the Redis lock TTL for our worker?", assistant="30 s, renewed every 10 s.")
    held = ContextGatekeeper(token_budget=90, token_counter=len, message_overhead=0)
    held.add_turn("Redis lock TTL watchdog?", "Renew it.")  # 34 tokens: it would be kept, the Redis turn not
    prompted = ContextGatekeeper(token_budget=90, token_counter=len, system_prompt="Answer briefly.")
    for gatekeeper, what in ((held, "1 turn"), (prompted, "a system prompt")):
        with pytest.raises(InvalidInputError, match=f"holds {what}.*gatekeeper.empty_copy\\(\\)"):
            TranscriptGate(t, gatekeeper=gatekeeper)
    assert [(x.id, x.user) for x in held.turns] == [(1, "Redis lock TTL watchdog?")]
    assert prompted.system_prompt == "Answer briefly."
    with pytest.raises(InvalidTypeError, match="gatekeeper must be a ContextGatekeeper"):
        TranscriptGate(t, gatekeeper="gk")  # type: ignore[arg-type]
    gate = TranscriptGate(t, gatekeeper=ContextGatekeeper(options=held.options))  # the hint: same settings, empty
    selected = [m.content for m in gate.select_messages("Redis lock TTL watchdog?")]
    assert "And the Redis lock TTL for our worker?" in selected
    assert gate.gatekeeper.token_budget == 90 and gate.gatekeeper.system_prompt is None


@pytest.mark.parametrize("transcript", [None, "s", [Message("m", "user", "hi")]], ids=["none", "str", "list"])
def test_the_transcript_must_be_a_transcript(transcript: Any) -> None:
    from context_gatekeeper import InvalidTypeError

    with pytest.raises(InvalidTypeError, match="transcript must be a Transcript"):
        TranscriptGate(transcript)


def test_a_turn_with_no_text_holds_its_place_and_matches_no_word() -> None:
    """An image sent alone and an empty answer: the turn is indexed (it keeps its place and
    topic) with text that gives no anchor, so a query that says "text" does not keep it as
    a word match, and it is priced as the two empty messages it is (a placeholder character
    each, and each its message_overhead), not as a phrase."""
    image = {"type": "image_url", "image_url": {"url": "https://example.org/cat.png"}}
    t = Transcript("s")
    t.append(user="How do I parse a CSV file in Python?", assistant="Use the csv module: csv.reader(open(path)).")
    t.append(messages=[{"role": "user", "content": "", "parts": [image]}, {"role": "assistant", "content": ""}])
    t.append(user="What is the capital of France?", assistant="Paris.")
    gate = TranscriptGate(t, token_counter=len, message_overhead=0)
    gate.sync()
    textless = gate.gatekeeper.turns[1].id
    assert [turn.id for turn in gate.gatekeeper.turns] == [1, 2, 3]
    for query in ("How do I extract the text from a PDF?", "Which text did I send?", "no text"):
        selection = gate.explain(query)
        assert textless not in selection.turn_ids, query
        assert not any("text" in row.covered for row in selection.scores), query
    assert gate.gatekeeper.turn_cost(textless) == 2 * len("…")  # two messages sent, each one placeholder
    tiktoken_gate = TranscriptGate(t, message_overhead=0)  # the default counter: as an empty turn
    tiktoken_gate.sync()
    count = tiktoken_gate.gatekeeper.options.count
    assert tiktoken_gate.gatekeeper.turn_cost(textless) == 2 * count("…") == 2
    # what is sent for it is its own messages, never the placeholder
    sent = gate.select_messages("What is in the picture I sent before the France question?", token_budget=10_000)
    assert "…" not in [m.content for m in sent]


@pytest.mark.parametrize("how", ["set", "revert"])
def test_a_pin_follows_its_turn_when_a_revision_moves_turns(how: str) -> None:
    """A revision that moves a turn rebuilds the index (every gatekeeper turn id changes);
    a pin set on the gate's gatekeeper follows its turn's key, and a turn the revision
    removed is no longer pinned."""
    style = "Our company style guide: always answer in British English."
    t = Transcript("s")
    t.append(user=style, assistant="Understood.")
    t.append(user="How long should a Redis lock TTL be?", assistant="Longer than the longest job.")
    t.append(user="What is a good espresso grind?", assistant="Fine, like table salt.")
    gate = TranscriptGate(t, token_counter=len, message_overhead=0)
    gate.sync()
    gk = gate.gatekeeper
    gk.pin(gk.turns[0].id)
    m = list(t.messages)
    t.set(m[2:4] + m[0:2] + m[4:])  # the style guide's turn moves after the Redis one
    if how == "revert":
        gate.sync()  # rebuilt once for the set ...
        t.revert(3)  # ... and again for the revert that puts it back where it stood
    selection = gate.explain("espresso grind?")
    assert [gk.get_turn(turn_id).user for turn_id in selection.pinned_turn_ids] == [style]
    assert gk.pinned == selection.pinned_turn_ids and gk.pinned[0] not in (1, 2, 3)  # a new id
    t.set(m[4:] + m[2:4])  # the style guide's turn removed, the others moved
    assert gate.explain("espresso grind?").pinned_turn_ids == () and gk.pinned == ()


class _Turn:
    def __init__(self, key: str, user: str, assistant: str) -> None:
        self.key, self.texts = key, (user, assistant, ())


def _labels_computed(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A list that grows by one each time a turn's segment label is computed (not found cached)."""
    from context_gatekeeper.selection import history

    computed: list[int] = []
    real = history.next_label

    def counted(*args: Any, **kwargs: Any) -> Any:
        computed.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(history, "next_label", counted)
    return computed


@pytest.mark.parametrize("change", ["new keys", "new texts"])
def test_a_list_replaced_whole_is_segmented_once_a_turn_not_once_a_turn_per_change(
    monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    from context_gatekeeper.transcripts.transcript_gate import TurnIndex

    n = 40
    index = TurnIndex(ContextGatekeeper(token_budget=500, token_counter=len))
    index.sync([_Turn(f"a{k}", f"{TOPICS[k % 4][0]} ({k})", TOPICS[k % 4][1]) for k in range(n)])
    computed = _labels_computed(monkeypatch)
    key = "b" if change == "new keys" else "a"
    replaced = [_Turn(f"{key}{k}", f"Another chat about sourdough, question {k}?", f"Answer {k}.") for k in range(n)]
    index.sync(replaced)
    # each new turn's label once (removing and re-placing one by one computed ~n * n / 2)
    assert len(computed) <= 2 * n
    fresh = ContextGatekeeper(token_budget=500, token_counter=len)
    fresh.insert_turns(None, [t.texts for t in replaced])
    assert list(index.gatekeeper._history.labels) == list(fresh._history.labels)


@pytest.mark.parametrize("overhead", [0, 3])
def test_messages_sent_without_text_are_charged_their_overhead(overhead: int) -> None:
    """An image sent alone and a blank answer are sent: each costs its message_overhead, so
    what select_messages hands out stays within token_budget."""
    image = [{"type": "image_url", "image_url": {"url": "https://example.com/rack.png"}}]
    t = Transcript("s")
    for n in range(6):
        t.append(messages=[{"role": "user", "content": "", "parts": image},
                           {"role": "assistant", "content": f"redis rack photo {n}: cabling"}])
    t.append(messages=[{"role": "user", "content": "Which rack is the redis one?"}, {"role": "assistant", "content": ""}])
    gate = TranscriptGate(t, token_budget=60, token_counter=len, message_overhead=overhead)
    sent = gate.select_messages("redis rack photo cabling", include_open=False)
    assert sent
    assert sum(len(m.content) + overhead for m in sent) <= 60


def delivered_step(n: int) -> list[Message]:
    """Parallel tool calls, as an agent stores them when the first tool hands the model an image
    (a user message in its Command): call, first result, the image, second result, answer."""
    return [
        Message(f"u{n}", "user", f"Why is the checkout button {n} hidden? check the page and the zindex config"),
        Message(f"a{n}", "assistant", "", metadata={"tool_calls": [
            {"id": f"shot{n}", "name": "screenshot", "args": {"url": "https://acme.test"}},
            {"id": f"cfg{n}", "type": "function", "function": {"name": "read_config", "arguments": '{"name": "zindex"}'}},
        ]}),
        Message(f"t{n}", "tool", "screenshot attached below", metadata={"tool_call_id": f"shot{n}"}),
        Message(f"img{n}", "user", "", parts=({"type": "image", "url": f"https://x.test/{n}.png"},)),
        Message(f"r{n}", "tool", f"checkout.banner.zindex = 9999 (config {n})", metadata={"tool_call_id": f"cfg{n}"}),
        Message(f"ans{n}", "assistant", f"The cookie banner (z-index 9999) covers the checkout button {n}."),
    ]


def test_a_user_message_between_a_call_and_its_result_stays_in_the_calls_turn(tmp_path: Path) -> None:
    """group_turns: a user message standing between parallel tool results (a tool's delivery) does
    not start a turn, so the step is one turn and selection never sends a result without its
    call; a call never answered does not hold the next question; a state appended one message
    at a time, read after each, groups as a fresh gate groups it."""
    from context_gatekeeper.integration import group_turns

    step = delivered_step(0)
    _, turns = group_turns([*step, Message("q", "user", "Best espresso grind for a moka pot?")])
    assert [[m.id for m in t.messages] for t in turns] == [[m.id for m in step], ["q"]]
    dangling = [Message("q1", "user", "redis ttl?"), Message("c", "assistant", "", metadata={"tool_calls": [
        {"id": "never", "name": "lookup", "args": {}}]}), Message("q2", "user", "espresso?"), Message("e", "assistant", "Fine.")]
    assert [t.key for t in group_turns(dangling)[1]] == ["q1", "q2"]
    ordinary = [Message(f"m{i}", "user" if i % 2 == 0 else "assistant", f"text {i}") for i in range(6)]
    assert [t.key for t in group_turns(ordinary)[1]] == ["m0", "m2", "m4"]
    # selection over a history of such steps, at every budget: no result without its call
    t = Transcript("s")
    for n in range(3):
        t.append(messages=delivered_step(n))
        t.append(user=f"Best espresso grind {n} for a moka pot?", assistant="Medium-fine.")
    for budget in range(0, 200, 10):
        sent = TranscriptGate(t, token_budget=budget, message_overhead=0).select_messages(
            "What was the zindex config value again?")
        kept = {m.id for m in sent}
        for n in range(3):
            assert {f"a{n}", f"t{n}", f"img{n}", f"r{n}"} <= kept or not {f"a{n}", f"t{n}", f"img{n}", f"r{n}"} & kept
    # one message at a time, read after each (a result joins the call's turn read before it)
    path = tmp_path / "log.db"
    writer_store, reader_store = SQLiteStore(path), SQLiteStore(path)
    try:
        writer = Transcript("s", store=writer_store)
        fill(writer, 3)
        gate = TranscriptGate(Transcript("s", store=reader_store), token_budget=2000)
        for n in range(2):
            for message in delivered_step(n):
                writer.append(messages=[message])
                assert picture(gate) == fresh_picture(path), message.id
        assert [len(turn.messages) for turn in gate._turns[-2:]] == [6, 6]
    finally:
        writer_store.close()
        reader_store.close()


@pytest.mark.parametrize("delivered", ["", "the screenshot, as the tool delivers it"])
def test_a_turn_of_several_user_messages_is_charged_an_overhead_for_each(delivered: str) -> None:
    """A tool's delivery (a user message between parallel results) stays in the call's turn and is
    sent with it: it is priced as a message of its own (its text, or the placeholder, and its
    message_overhead), so what select_messages sends stays within token_budget at every budget
    (the turn's user messages were joined into one text, priced one overhead short for each)."""
    from context_gatekeeper.transcripts.transcript_gate import message_text

    def words(text: str) -> int:
        return len(text.split())

    overhead = 20
    step = delivered_step(0)
    step[3] = Message("img0", "user", delivered, parts=({"type": "image", "url": "https://x.test/0.png"},))
    t = Transcript("s")
    t.append(messages=step)
    t.append(user="Best espresso grind for a moka pot?", assistant="Medium-fine.")
    kept_step = False
    for budget in range(0, 300, 2):
        gate = TranscriptGate(t, token_budget=budget, token_counter=words, message_overhead=overhead)
        sent = gate.select_messages("What was the checkout zindex config value?", include_open=False)
        assert sum(words(message_text(m)) + overhead for m in sent) <= budget, (budget, [m.id for m in sent])
        kept_step |= "img0" in {m.id for m in sent}
    assert kept_step
    texts = TranscriptGate(t, token_counter=words, message_overhead=overhead)
    texts.sync()
    assert texts._turns[0].texts[0] == step[0].content  # the question alone is the turn's user text
    assert (delivered or "…") in texts._turns[0].texts[2]


def _lookup(message_id: str, *call_ids: str) -> Message:
    return Message(message_id, "assistant", "", metadata={"tool_calls": [
        {"id": c, "name": "lookup", "args": {"q": "redis ttl"}} for c in call_ids]})


def _shape(gate: TranscriptGate) -> tuple:
    gate.sync()
    gk = gate.gatekeeper
    return ([[m.id for m in turn.messages] for turn in gate._turns], gate._open and gate._open.key,
            [(t.user, t.assistant, t.tool_texts) for t in gk.turns])


def test_a_call_id_made_again_after_a_result_does_not_hide_which_call_it_answers() -> None:
    """Call ids that repeat across steps (``call_0`` each step, as some providers and local servers
    number them): a user message read while it was last, then the result of the call before it and
    a new call of the same id. The result answers the older call (the message stands inside that
    step), so the gate regroups as a fresh gate groups (the later call_0 hid it: the result went
    into a turn of its own, away from its call)."""
    t = Transcript("s")
    gate = TranscriptGate(t, token_budget=10_000, message_overhead=0)
    t.append(messages=[Message("u0", "user", "redis ttl?")])
    gate.sync()
    t.append(messages=[_lookup("a1", "call_0")])
    gate.sync()
    t.append(messages=[Message("d2", "user", "", parts=({"type": "image", "url": "https://x.test/d.png"},))])
    gate.sync()
    t.append(messages=[Message("t3", "tool", "ttl 30s", metadata={"tool_call_id": "call_0"}), _lookup("a4", "call_0")])
    assert _shape(gate) == _shape(TranscriptGate(t, token_budget=10_000, message_overhead=0))
    assert [[m.id for m in turn.messages] for turn in gate._turns] == [["u0", "a1", "d2", "t3", "a4"]]


def test_a_gate_read_after_each_append_groups_as_a_fresh_gate_with_repeated_call_ids() -> None:
    """Property: agent transcripts whose tool steps number their calls call_0, call_1 ... each step,
    with delivered user messages between results, some results missing, appended a few messages
    at a time: after each append the gate's turns and index are a fresh gate's."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    words = ["redis", "ttl", "espresso", "grind", "kafka", "lag"]

    @st.composite
    def appended(draw: Any) -> list[list[Message]]:
        n = iter(range(1000))
        messages: list[Message] = []

        def text() -> str:
            return " ".join(draw(st.lists(st.sampled_from(words), min_size=1, max_size=3)))

        for _ in range(draw(st.integers(1, 4))):
            messages.append(Message(f"u{next(n)}", "user", text()))
            for _ in range(draw(st.integers(0, 2))):
                calls = [f"call_{j}" for j in range(draw(st.integers(1, 3)))]
                messages.append(_lookup(f"a{next(n)}", *calls))
                for call in draw(st.lists(st.sampled_from(calls), unique=True)):
                    if draw(st.booleans()):
                        messages.append(Message(f"d{next(n)}", "user", draw(st.sampled_from(["", "delivered " + text()]))))
                    messages.append(Message(f"t{next(n)}", "tool", text(), metadata={"tool_call_id": call}))
            if draw(st.booleans()):
                messages.append(Message(f"f{next(n)}", "assistant", text()))
        cuts = sorted(set(draw(st.lists(st.integers(1, len(messages)), max_size=len(messages)))) | {len(messages)})
        return [messages[a:b] for a, b in zip([0, *cuts], cuts)]

    def words_of(text: str) -> int:
        return len(text.split())

    @settings(max_examples=150, suppress_health_check=list(HealthCheck))
    @given(appended())
    def check(parts: list[list[Message]]) -> None:
        t = Transcript("s")
        gate = TranscriptGate(t, token_budget=10_000, token_counter=words_of, message_overhead=0)
        for part in parts:
            t.append(messages=part)
            assert _shape(gate) == _shape(TranscriptGate(t, token_budget=10_000, token_counter=words_of,
                                                         message_overhead=0)), [m.id for m in t.messages]

    check()

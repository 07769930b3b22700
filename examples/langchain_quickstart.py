"""LangChain quickstart: topic-gated context and an editable history, for a chain and an agent.

A short tour of ``langchain_gatekeeper`` in three parts:

1. **A classic chain** (``ChatPromptTemplate`` with a ``MessagesPlaceholder`` and a chat
   model) wrapped in ``GatedRunnableWithMessageHistory``.  A conversation about a Redis
   lock is interrupted by an espresso question and comes back to Redis; for each call the
   script prints how much history is *stored* and how much was actually *sent* to the
   model (captured by a callback handler, so it is what the model really received).
2. **Editing that history in natural language**: ``history.edit("It should be ..., not
   ...")`` prints the diff, the next call shows the model now sees the revised text, and
   ``history.undo()`` brings the old text back (keeping the turn added after the edit).
3. **An agent**: ``create_agent(model, tools=[...], middleware=[GatekeeperMiddleware(...)],
   checkpointer=InMemorySaver())``.  What the model receives is gated while the thread's
   state stays complete; then a ``/edit ...`` message edits the thread (the reply carries
   the diff, the main model is not called) and ``undo_thread`` reverts it.

By default everything is offline, needs no API key and takes a few seconds: the chat
models are scripted fakes with canned answers, and the editing model is a scripted model
that replies with the ideal patch for the intended change (the script says so on screen).
With ``GOOGLE_API_KEY`` set, it uses Gemini 2.5 Flash for the chat models and the
adapter's default (Gemini) for the edits::

    python examples/langchain_quickstart.py              # rich tables and panels
    python examples/langchain_quickstart.py --plain      # plain text (CI logs, pipes)
    python examples/langchain_quickstart.py --offline    # scripted models even with a key

If Gemini cannot be used (no network, a bad key, quota), it says so in one panel and exits 1.

It runs from a checkout without installing anything but the dependencies (LangChain 1.x,
langgraph, rich); the notebook ``examples/langchain_quickstart.ipynb`` tells the same story.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any


def ensure_importable(start: Path | None = None) -> None:
    """Put ``<repo>/shared`` and ``<repo>`` on ``sys.path`` when the packages are not installed."""
    try:
        import context_gatekeeper  # noqa: F401
        import langchain_gatekeeper  # noqa: F401
        return
    except ImportError:
        pass
    here = (start or Path(__file__)).resolve()
    for root in (here, *here.parents):
        if (root / "langchain_gatekeeper").is_dir() and (root / "shared" / "context_gatekeeper").is_dir():
            sys.path[:0] = [str(root / "shared"), str(root)]
            return
    raise ImportError("run this from a context-gatekeeper checkout, or pip install context-gatekeeper[langchain]")


ensure_importable(Path(globals().get("__file__", Path.cwd() / "langchain_quickstart.py")))

from langchain.agents import create_agent  # noqa: E402
from langchain_core.callbacks import BaseCallbackHandler  # noqa: E402
from langchain_core.language_models import BaseChatModel  # noqa: E402
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage  # noqa: E402
from langchain_core.outputs import ChatGeneration, ChatResult  # noqa: E402
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402

from _printing import Printer, short  # noqa: E402
from context_gatekeeper import Message, Replace  # noqa: E402
from context_gatekeeper.integration import ideal_patch_reply  # noqa: E402
from context_gatekeeper.testing import ScriptedModel  # noqa: E402
from context_gatekeeper import resolve_token_counter  # noqa: E402
from langchain_gatekeeper import (  # noqa: E402
    GatedRunnableWithMessageHistory,
    GatekeeperChatMessageHistory,
    GatekeeperMiddleware,
    is_edit_record,
    to_core_messages,
    undo_thread,
)

GEMINI = "gemini-2.5-flash"
TOKEN_BUDGET = 1000

# -- the story --------------------------------------------------------------------------------
# Part 1: (question, the scripted model's canned answer).  Offline, these answers are what
# the fake model says; with Gemini only the questions are used.
CHAIN_TURNS: list[tuple[str, str]] = [
    (
        "Our nightly export job holds a Redis lock and runs for about 30 seconds. How long should the lock TTL be?",
        "Make the TTL about three times the run: 90 seconds. A slow run then keeps the lock, "
        "and a crashed worker frees it within 90 seconds.",
    ),
    (
        "By the way, what grind size should I use for espresso in a moka pot?",
        "Medium-fine: a little coarser than for an espresso machine, so the water still flows through.",
    ),
    (
        "How often should a watchdog renew the Redis lock while the export job runs?",
        "Renew every 30 seconds, a third of the 90 second TTL, so two renewals can fail before the lock expires.",
    ),
    (
        "And should the moka pot's lower chamber be filled with hot or cold water?",
        "Hot water from the kettle: the pot spends less time on the stove, so the coffee tastes less burnt.",
    ),
]
# Part 2: the correction, and the text a perfect editor would write (offline editor's answer).
CHAIN_EDIT = "It should be 2 minutes, not 30 seconds: the export job runs for about 2 minutes."
CHAIN_EDIT_SUBSTITUTIONS = [("30 seconds", "2 minutes"), ("90 seconds", "6 minutes"), ("90 second", "6 minute")]
AFTER_EDIT_TURN = (
    "If the Redis lock watchdog crashes mid-export, when can another worker acquire the lock?",
    "At most one TTL: nobody renews the lock any more, so it expires and the next worker takes it.",
)

# Part 3: an agent with one tool.  (question, tool call args or None, canned final answer)
JOB_STATS = "The nightly export job runs for 45 seconds on average and 70 seconds at most."
AGENT_TURNS: list[tuple[str, dict[str, str] | None, str]] = [
    (
        "How long should the Redis lock TTL be for the nightly export job?",
        {"job": "nightly export"},
        "The export runs at most 70 seconds, so give the Redis lock a TTL of 3 minutes and renew it with a watchdog.",
    ),
    (
        "By the way, what grind size should I use for espresso at home?",
        None,
        "Fine, like table salt, for a shot of 25 to 30 seconds.",
    ),
    (
        "How often should the watchdog renew the Redis lock for the export job?",
        {"job": "nightly export"},
        "Renew the Redis lock every minute, a third of the 3 minute TTL.",
    ),
    (
        "Which espresso beans make a good shot?",
        None,
        "A medium-dark roast, used between one and four weeks after roasting.",
    ),
]
AGENT_EDIT = "We use Valkey, not Redis."
AGENT_EDIT_SUBSTITUTIONS = [("Redis", "Valkey")]


@tool
def job_runtime(job: str) -> str:
    """How long a batch job runs, from the scheduler's statistics."""
    return JOB_STATS


# -- scripted models (offline) ----------------------------------------------------------------
class ScriptedChatModel(BaseChatModel):
    """A fake chat model with canned answers, keyed by the latest user question.

    ``replies`` maps a question to its answer, or to ``(tool args, answer)``: it then
    first calls the one tool it was given (:func:`job_runtime`) and answers once the
    tool's result is in.  An unknown question gets a placeholder answer.  Deterministic,
    so cells can be re-run.
    """

    replies: dict[str, Any]
    tool_name: str = "job_runtime"

    @property
    def _llm_type(self) -> str:
        return "scripted-chat-model"

    def bind_tools(self, tools: Any, **kwargs: Any) -> "ScriptedChatModel":
        return self

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any) -> ChatResult:
        last_human = max((i for i, m in enumerate(messages) if isinstance(m, HumanMessage)), default=-1)
        question = messages[last_human].text if last_human >= 0 else ""
        reply = self.replies.get(question, f"(scripted model: no canned answer for {question!r})")
        tool_args, answer = reply if isinstance(reply, tuple) else (None, reply)
        tool_done = any(isinstance(m, ToolMessage) for m in messages[last_human + 1:])
        if tool_args is not None and not tool_done:
            call_id = f"call_{abs(hash(question)) % 10**8}"
            message = AIMessage("", tool_calls=[{"name": self.tool_name, "args": tool_args, "id": call_id, "type": "tool_call"}])
        else:
            message = AIMessage(answer)
        return ChatResult(generations=[ChatGeneration(message=message)])


def chain_model(online: bool) -> BaseChatModel:
    """The chat model of part 1: Gemini, or canned answers."""
    return gemini() if online else ScriptedChatModel(replies=dict([*CHAIN_TURNS, AFTER_EDIT_TURN]))


def agent_model(online: bool) -> BaseChatModel:
    """The agent's model: Gemini, or canned answers with tool calls."""
    if online:
        return gemini()
    return ScriptedChatModel(replies={q: ((args, a) if args else a) for q, args, a in AGENT_TURNS})


def gemini() -> BaseChatModel:
    try:
        from langchain_google_genai import ChatGoogleGenerativeAI
    except ImportError:
        raise SystemExit("GOOGLE_API_KEY is set but langchain-google-genai is not installed: "
                         "pip install langchain-google-genai, or pass --offline") from None
    return ChatGoogleGenerativeAI(model=GEMINI, timeout=30, max_retries=2)


def substituted(text: str, substitutions: Sequence[tuple[str, str]]) -> str:
    for old, new in substitutions:
        text = text.replace(old, new)
    return text


def ideal_patch(state: Sequence[Message], substitutions: Sequence[tuple[str, str]]) -> str:
    """The patch a perfect editing model would answer for the intended change:
    ``substitutions`` applied to each user and assistant text of ``state`` (core messages)."""
    intended = [
        Replace(m.id, substituted(m.content, substitutions))
        for m in state
        if m.role in ("user", "assistant") and substituted(m.content, substitutions) != m.content
    ]
    return ideal_patch_reply(state, intended)


def ideal_editor(state: Sequence[Message], substitutions: Sequence[tuple[str, str]]) -> ScriptedModel:
    """An offline editing model: a ScriptedModel whose one reply is :func:`ideal_patch`."""
    return ScriptedModel([ideal_patch(state, substitutions)], name="scripted-editor")


# -- seeing what the model receives -----------------------------------------------------------
class Recorder(BaseCallbackHandler):
    """A callback handler recording the messages of every chat-model call."""

    run_inline = True

    def __init__(self) -> None:
        self.calls: list[list[BaseMessage]] = []

    def on_chat_model_start(self, serialized: Any, messages: list[list[BaseMessage]], **kwargs: Any) -> None:
        self.calls.extend(list(batch) for batch in messages)


_count = None


def tokens(messages: Iterable[BaseMessage]) -> int:
    """Tokens of the messages' text (tiktoken cl100k_base, offline)."""
    global _count
    if _count is None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            _count = resolve_token_counter(None)
    return sum(_count(m.text) for m in messages)


_TYPES = {"user": "human", "assistant": "ai", "system": "system", "tool": "tool"}


def key(message: Any) -> str:
    """How the example recognises a message: its id when it has one, else its type and text
    (a chat history gives messages back as they were added, id-less ones without an id)."""
    if isinstance(message, BaseMessage):
        return message.id or f"{message.type}:{message.text}"
    return f"{_TYPES.get(message.role, message.role)}:{message.content}"  # a core message (in a diff)


def question_labels(messages: Sequence[BaseMessage]) -> dict[str, str]:
    """Message key -> "Q1", "Q2", ... for the user questions of a conversation (edit records skipped)."""
    humans = [m for m in messages if isinstance(m, HumanMessage) and not is_edit_record(m)]
    return {key(m): f"Q{i}" for i, m in enumerate(humans, 1)}


def questions_in(sent: Sequence[BaseMessage], labels: dict[str, str], skip: str | None = None) -> str:
    found = [labels[key(m)] for m in sent if isinstance(m, HumanMessage) and labels.get(key(m), skip) != skip]
    return ", ".join(found) or "none"


def message_labels(messages: Sequence[BaseMessage]) -> dict[str, str]:
    """Message id -> "Q1" for a question, "A1" for the answers and tool messages of its turn."""
    labels: dict[str, str] = {}
    turn = 0
    for m in messages:
        if isinstance(m, HumanMessage) and not is_edit_record(m):
            turn += 1
        labels[key(m)] = f"{'Q' if isinstance(m, HumanMessage) else 'A'}{turn}"
    return labels


def compact_diff(diff: Any, labels: dict[str, str]) -> str:
    """Only the messages a change touched, old text then new (``str(diff)`` is the unified diff)."""
    lines = []
    for d in diff.messages:
        message = d.after or d.before
        texts = [key(m) for m in (d.after, d.before) if m is not None]  # by id, else by its new or old text
        label = labels.get(d.id) or next((labels[k] for k in texts if k in labels), "?")
        lines.append(f"{label} ({message.role}, {d.status})")
        if d.before is not None:
            lines.append(f"  - {d.before.content}")
        if d.after is not None:
            lines.append(f"  + {d.after.content}")
    return "\n".join(lines) or "(no change)"


def earlier(sent: Sequence[BaseMessage]) -> list[BaseMessage]:
    """A chain call's history part: without the system prompt and the current question."""
    body = [m for m in sent if not isinstance(m, SystemMessage)]
    return body[:-1]


# -- output -----------------------------------------------------------------------------------
def sizes(messages: Sequence[BaseMessage]) -> str:
    return f"{len(messages)} msgs / {tokens(messages)} tok"


# -- part 1: a classic chain ------------------------------------------------------------------
PROMPT = ChatPromptTemplate.from_messages(
    [("system", "You are a concise engineering assistant."), MessagesPlaceholder("history"), ("human", "{question}")]
)


def build_chain(model: BaseChatModel, sessions: dict[str, GatekeeperChatMessageHistory]) -> Any:
    """``PROMPT | model`` with a gated, editable history per session."""

    def get_session_history(session_id: str) -> GatekeeperChatMessageHistory:
        if session_id not in sessions:
            sessions[session_id] = GatekeeperChatMessageHistory(session_id, token_budget=TOKEN_BUDGET)
        return sessions[session_id]

    return GatedRunnableWithMessageHistory(
        PROMPT | model, get_session_history, input_messages_key="question", history_messages_key="history"
    )


def ask(chain: Any, history: GatekeeperChatMessageHistory, question: str, recorder: Recorder) -> tuple[list[str], AIMessage]:
    """One chain call; returns a table row (stored vs sent history) and the answer."""
    stored = history.messages
    labels = question_labels(stored)
    answer = chain.invoke({"question": question}, {"configurable": {"session_id": history.session_id}, "callbacks": [recorder]})
    sent = earlier(recorder.calls[-1])
    row = [str(len(labels) + 1), question, sizes(stored), sizes(sent), questions_in(sent, labels)]
    return row, answer


CHAIN_COLUMNS = ("#", "question", "history stored", "history sent", "earlier questions sent")


def part_chain(ui: Printer, model: BaseChatModel) -> tuple[Any, GatekeeperChatMessageHistory, Recorder]:
    ui.section("1. A classic chain: GatedRunnableWithMessageHistory")
    ui.say("chain = GatedRunnableWithMessageHistory(PROMPT | model, get_session_history,\n"
           "                                        input_messages_key='question', history_messages_key='history')")
    sessions: dict[str, GatekeeperChatMessageHistory] = {}
    chain, recorder = build_chain(model, sessions), Recorder()
    history = GatekeeperChatMessageHistory("demo", token_budget=TOKEN_BUDGET)
    sessions["demo"] = history
    rows = [ask(chain, history, question, recorder)[0] for question, _ in CHAIN_TURNS]
    ui.table("What the model received on each call (captured by a callback handler)", CHAIN_COLUMNS, rows)
    ui.say(f"Stored now: {sizes(history.messages)}, every question and answer (the history is never cut).\n"
           "Q3 (back to Redis) was sent Q1 but not the espresso question; Q4 (moka pot) only the espresso turn.")
    return chain, history, recorder


# -- part 2: editing the chain's history ------------------------------------------------------
def mentions(messages: Sequence[BaseMessage], *phrases: str) -> str:
    text = "\n".join(m.text for m in messages)
    return ", ".join(f"{p!r}: {'yes' if p in text else 'no'}" for p in phrases)


def part_edit(ui: Printer, chain: Any, history: GatekeeperChatMessageHistory, recorder: Recorder, online: bool) -> None:
    ui.section("2. Editing the history in natural language: history.edit(...), history.undo()")
    editor = None if online else ideal_editor(history.transcript.messages, CHAIN_EDIT_SUBSTITUTIONS)
    ui.say(f'revision = history.edit("{CHAIN_EDIT}", model={"None (default Gemini)" if online else "editor"})')
    revision = history.edit(CHAIN_EDIT, model=editor)
    labels = message_labels(history.messages)
    ui.diff(f"history.diff({revision.parent}, {revision.number}): the messages the edit changed",
            compact_diff(history.diff(revision.parent, revision.number), labels))

    row, answer = ask(chain, history, AFTER_EDIT_TURN[0], recorder)
    sent = earlier(recorder.calls[-1])
    ui.table("The next call", CHAIN_COLUMNS, [row])
    ui.panel("History sent with it (the revised text)",
             "\n".join(f"{m.type:>5}: {short(m.text, 100)}" for m in sent) + f"\n\nmentions {mentions(sent, '2 minutes', '30 seconds')}")
    ui.say(f"Answer: {short(answer.text, 110)}")

    undo = history.undo()
    ui.diff(f"history.undo() -> revision {undo.number}, reverting revision {undo.target}",
            compact_diff(history.diff(undo.parent, undo.number), labels))
    first = history.messages[0].text
    ui.say(f"First message again: {first!r}\n"
           f"Stored: {sizes(history.messages)} (the question asked after the edit is kept); "
           f"record(): {len(history.record())} messages as originally written; "
           f"revisions: {', '.join(r.kind for r in history.history()[-3:])} (the last three).")


# -- part 3: an agent -------------------------------------------------------------------------
def build_agent(model: BaseChatModel, editor: Any) -> Any:
    return create_agent(
        model,
        tools=[job_runtime],
        system_prompt="You are a concise engineering assistant.",
        middleware=[GatekeeperMiddleware(token_budget=TOKEN_BUDGET, model=editor)],
        checkpointer=InMemorySaver(),
    )


def shape(messages: Sequence[BaseMessage], labels: dict[str, str]) -> str:
    """A compact picture of a message list: system, Q1, ai->job_runtime, tool, ai, ..."""
    parts = []
    for m in messages:
        if isinstance(m, HumanMessage):
            parts.append(labels.get(key(m), "human"))
        elif isinstance(m, AIMessage) and m.tool_calls:
            parts.append("ai->" + ",".join(c["name"] for c in m.tool_calls))
        else:
            parts.append(m.type)
    return " ".join(parts)


def agent_turn(agent: Any, config: dict[str, Any], question: str, recorder: Recorder) -> list[str]:
    """One agent turn; a row comparing the thread's state with its last model call's input."""
    calls_before = len(recorder.calls)
    agent.invoke({"messages": [HumanMessage(question)]}, {**config, "callbacks": [recorder]})
    state = agent.get_state(config).values["messages"]
    labels = question_labels(state)
    sent = [m for m in recorder.calls[-1] if not isinstance(m, SystemMessage)]
    in_state = state[:-1]  # what the thread held when that last call was made
    current = f"Q{len(labels)}"
    return [current[1:], question, str(len(recorder.calls) - calls_before),
            sizes(in_state), sizes(sent), questions_in(sent, labels, skip=current)]


def part_agent(ui: Printer, model: BaseChatModel, online: bool) -> None:
    ui.section("3. An agent: create_agent(..., middleware=[GatekeeperMiddleware(...)])")
    ui.say("agent = create_agent(model, tools=[job_runtime], middleware=[GatekeeperMiddleware(token_budget="
           f"{TOKEN_BUDGET})],\n                     checkpointer=InMemorySaver())")
    editor = None if online else ScriptedModel(name="scripted-editor")  # its reply is scripted below
    agent, config, recorder = build_agent(model, editor), {"configurable": {"thread_id": "demo"}}, Recorder()
    rows, last_calls = [], []
    for question, _, _ in AGENT_TURNS:
        rows.append(agent_turn(agent, config, question, recorder))
        last_calls.append(recorder.calls[-1])
    ui.table("Each turn's last model call: the thread's state then vs what the model received",
             ("#", "question", "model calls", "thread state", "sent (w/o system)", "earlier questions sent"), rows)
    state = agent.get_state(config).values["messages"]
    labels = question_labels(state)
    ui.say("Q3's last call, message by message: " + shape(last_calls[2], labels) +
           "\n(the earlier Redis turn came with its tool call and result; the espresso turn stayed out)")
    ui.say(f"Thread state now: {sizes(state)}, all four turns with their tool calls.")
    part_agent_edit(ui, agent, config, editor, recorder)


def part_agent_edit(ui: Printer, agent: Any, config: dict[str, Any], editor: ScriptedModel | None, recorder: Recorder) -> None:
    state = agent.get_state(config).values["messages"]
    if editor is not None:  # offline: the ideal patch for the thread as the editor will see it
        editable = to_core_messages([m for m in state if not is_edit_record(m)])
        editor.enqueue(ideal_patch(editable, AGENT_EDIT_SUBSTITUTIONS))
    calls = len(recorder.calls)
    ui.say(f'\nagent.invoke({{"messages": [HumanMessage("/edit {AGENT_EDIT}")]}}, config)')
    out = agent.invoke({"messages": [HumanMessage(f"/edit {AGENT_EDIT}")]}, {**config, "callbacks": [recorder]})
    reply = out["messages"][-1].text
    head, _, rest = reply.partition("```diff\n")
    ui.diff(f"The agent's reply: {head.strip()}", rest.rsplit("```", 1)[0].rstrip())
    edited = agent.get_state(config).values["messages"]
    ui.say(f"Main model calls for the edit: {len(recorder.calls) - calls}. "
           f"Q1 in the thread now: {edited[0].text!r}")

    entry = undo_thread(agent, config)
    ui.diff(f"undo_thread(agent, config): reverts edit {entry.target}", compact_diff(entry.diff, message_labels(edited)))
    restored = agent.get_state(config).values["messages"]
    ui.say(f"Q1 in the thread again: {restored[0].text!r}\n"
           f"Thread state: {len(restored)} messages (the /edit command and its reply stay as records, "
           "never sent to the model).")


# -- main ---------------------------------------------------------------------------------------
def use_gemini(offline: bool) -> bool:
    return not offline and bool(os.environ.get("GOOGLE_API_KEY"))


def banner(ui: Printer, online: bool) -> None:
    if online:
        text = (f"Models: {GEMINI} for the chain and the agent (GOOGLE_API_KEY is set); edits use the "
                "adapter's default editor (Gemini). Pass --offline for the scripted models.")
    else:
        text = ("Models: SCRIPTED (offline). The chat models are fakes with canned answers and the editor "
                "replies with the ideal patch for the intended change, so the run is deterministic and "
                "needs no key. Set GOOGLE_API_KEY to use Gemini 2.5 Flash.")
    ui.panel("langchain_gatekeeper quickstart", text, style="green" if online else "yellow")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--offline", action="store_true", help="use the scripted models even when GOOGLE_API_KEY is set")
    parser.add_argument("--plain", action="store_true", help="plain text, no colours")
    args = parser.parse_args(argv)
    plain = args.plain
    if not plain:
        try:
            import rich  # noqa: F401
        except ImportError:
            print("(rich is not installed: printing plain text)")
            plain = True
    ui, online = Printer(plain), use_gemini(args.offline)
    banner(ui, online)
    try:
        run_parts(ui, online)
    except Exception as exc:  # Gemini's failures have no common type: httpx, google.genai, the adapter's
        if not online:
            raise  # offline, a failure is a bug of this example or the library: show all of it
        gemini_failed(ui, exc)
        return 1
    return 0


def run_parts(ui: Printer, online: bool) -> None:
    """The three parts: the chain, the edit of its history, the agent."""
    chain, history, recorder = part_chain(ui, chain_model(online))
    part_edit(ui, chain, history, recorder, online)
    part_agent(ui, agent_model(online), online)


def gemini_failed(ui: Printer, exc: Exception) -> None:
    """One panel instead of a traceback when Gemini cannot be used (no network, a bad key, quota)."""
    lines = str(exc).strip().splitlines()
    ui.panel("Gemini could not be used (the run stopped here)",
             f"{type(exc).__name__}: {short(lines[0] if lines else '', 300)}\n"
             "Check the network and GOOGLE_API_KEY, or run with --offline for the scripted models.", style="red")


if __name__ == "__main__":
    raise SystemExit(main())

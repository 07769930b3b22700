"""Build and execute examples/langchain_quickstart.ipynb (needs nbformat, nbclient, ipykernel, matplotlib):

    python examples/build_langchain_notebook.py            # offline, as CI runs it
    python examples/build_langchain_notebook.py --online   # with GOOGLE_API_KEY: a look, not a commit

CI compares the saved outputs with an offline run (examples/run_all.py).
"""

from _notebook import build, code, md


cells = [
    md("""# LangChain quickstart: topic-gated context and an editable history

`langchain_gatekeeper` gives an existing LangChain chain or agent two things:

* **Gated context**: before each model call, only the earlier turns the current question needs are sent
  (a topic gate, BM25-style retrieval and a token budget; no embedding model). The stored history stays complete.
* **A mutable, versioned history**: say in plain language how the conversation should change
  (`"It should be 2 minutes, not 30 seconds"`); a model rewrites the affected user *and* assistant messages,
  you get a diff, and `undo` brings the old text back.

This notebook tells the same story as `examples/langchain_quickstart.py`: a classic chain, an edit of its
history, then an agent built with `create_agent`.

**Models.** By default everything is offline and deterministic: the chat models are scripted fakes with canned
answers, and the editing model is a scripted model that replies with the ideal patch for the intended change.
If `GOOGLE_API_KEY` is set, the cells use Gemini 2.5 Flash instead (and the adapter's default editor, also Gemini)."""),
    code("""import os
import sys

sys.path.insert(0, os.getcwd())    # run from examples/: the helpers live in langchain_quickstart.py
import langchain_quickstart as demo  # also puts <repo>/shared and <repo> on sys.path in a plain checkout

ONLINE = demo.use_gemini(offline=False)   # True only when GOOGLE_API_KEY is set
ui = demo.Printer(plain=True)
demo.banner(ui, ONLINE)"""),
    md("""## 1. A classic chain with `GatedRunnableWithMessageHistory`

A prompt with a `MessagesPlaceholder` and a chat model, wrapped exactly like `RunnableWithMessageHistory`
(same constructor). The history is a `GatekeeperChatMessageHistory`; `token_budget` caps the earlier turns sent."""),
    code("""from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_gatekeeper import GatedRunnableWithMessageHistory, GatekeeperChatMessageHistory

model = demo.chain_model(ONLINE)   # ChatGoogleGenerativeAI(model="gemini-2.5-flash"), or the scripted fake
prompt = ChatPromptTemplate.from_messages([
    ("system", "You are a concise engineering assistant."),
    MessagesPlaceholder("history"),
    ("human", "{question}"),
])

sessions = {}
def get_session_history(session_id):
    if session_id not in sessions:
        sessions[session_id] = GatekeeperChatMessageHistory(session_id, token_budget=1000)
    return sessions[session_id]

chain = GatedRunnableWithMessageHistory(
    prompt | model, get_session_history,
    input_messages_key="question", history_messages_key="history",
)
history = get_session_history("demo")"""),
    md("""A conversation about a Redis lock, an off-topic espresso question, back to Redis, back to coffee.
A callback handler (`demo.Recorder`) captures the messages each model call really received, so the table compares
the history *stored* with the history *sent*."""),
    code("""recorder = demo.Recorder()
rows = []
for question, _canned_answer in demo.CHAIN_TURNS:
    row, answer = demo.ask(chain, history, question, recorder)   # chain.invoke({"question": ...}, config)
    rows.append(row)
ui.table("What the model received on each call", demo.CHAIN_COLUMNS, rows)"""),
    md("The third call (back to Redis), message by message: the espresso turn is not there."),
    code("""for m in recorder.calls[2]:
    print(f"{m.type:>6}: {demo.short(m.text, 100)}")
print(f"\\nstored: {len(history.messages)} messages, all of them")"""),
    md("""## 2. Editing the history in natural language

`history.edit(instruction, model=...)` asks a model for the change and records it as a new revision
(`model=None` uses the default, Gemini 2.5 Flash). Offline, the editor is a `ScriptedModel` answering the ideal
patch (computed with `ideal_patch_reply`) for the intended change."""),
    code("""editor = None if ONLINE else demo.ideal_editor(history.transcript.messages, demo.CHAIN_EDIT_SUBSTITUTIONS)
print(demo.CHAIN_EDIT)
revision = history.edit(demo.CHAIN_EDIT, model=editor)
labels = demo.message_labels(history.messages)
print(demo.compact_diff(history.diff(revision.parent, revision.number), labels))"""),
    md("`str(history.diff(a, b))` is the same change as a unified diff:"),
    code("""print(history.diff(revision.parent, revision.number))"""),
    md("The next call sees the revised text, never the superseded one:"),
    code("""row, answer = demo.ask(chain, history, demo.AFTER_EDIT_TURN[0], recorder)
sent = demo.earlier(recorder.calls[-1])
ui.table("The next call", demo.CHAIN_COLUMNS, [row])
for m in sent:
    print(f"{m.type:>6}: {demo.short(m.text, 100)}")
print("\\nmentions", demo.mentions(sent, "2 minutes", "30 seconds"))"""),
    md("`history.undo()` reverts the edit as a new revision and keeps the turn added after it:"),
    code("""undo = history.undo()
print(demo.compact_diff(history.diff(undo.parent, undo.number), labels))
print()
print("first message:", history.messages[0].text)
print("messages stored:", len(history.messages), "| revisions:", [r.kind for r in history.history()])"""),
    md("""## 3. An agent: `create_agent` with `GatekeeperMiddleware`

The middleware narrows what each model call receives; the thread in the checkpointer keeps every message.
The agent has one small tool, `job_runtime`."""),
    code("""from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langchain_gatekeeper import GatekeeperMiddleware, undo_thread
from context_gatekeeper.testing import ScriptedModel

agent_editor = None if ONLINE else ScriptedModel(name="scripted-editor")   # its reply is enqueued before the edit
agent = create_agent(
    demo.agent_model(ONLINE),
    tools=[demo.job_runtime],
    system_prompt="You are a concise engineering assistant.",
    middleware=[GatekeeperMiddleware(token_budget=1000, model=agent_editor)],
    checkpointer=InMemorySaver(),
)
config = {"configurable": {"thread_id": "demo"}}"""),
    code("""agent_recorder = demo.Recorder()
agent_rows, last_calls = [], []
for question, _tool_args, _canned_answer in demo.AGENT_TURNS:
    agent_rows.append(demo.agent_turn(agent, config, question, agent_recorder))   # agent.invoke(...)
    last_calls.append(agent_recorder.calls[-1])
ui.table("Each turn's last model call: the thread's state then vs what the model received",
         ("#", "question", "model calls", "thread state", "sent (w/o system)", "earlier questions sent"), agent_rows)
state = agent.get_state(config).values["messages"]
print("\\nQ3's last call:", demo.shape(last_calls[2], demo.question_labels(state)))
print("thread state:", len(state), "messages")"""),
    md("""### The `/edit ` route

A user message starting with `/edit ` is routed to an edit of the thread: the agent answers with a confirmation and
the diff, without calling the main model."""),
    code("""if agent_editor is not None:   # offline: the ideal patch for the thread as the editor will see it
    from langchain_gatekeeper import to_core_messages
    agent_editor.enqueue(demo.ideal_patch(to_core_messages(state), demo.AGENT_EDIT_SUBSTITUTIONS))
calls = len(agent_recorder.calls)
out = agent.invoke({"messages": [HumanMessage("/edit " + demo.AGENT_EDIT)]}, {**config, "callbacks": [agent_recorder]})
print(out["messages"][-1].text)
print("\\nmain model calls for the edit:", len(agent_recorder.calls) - calls)
print("Q1 now:", agent.get_state(config).values["messages"][0].text)"""),
    md("`undo_thread(agent, config)` reverts the last edit as a new checkpoint:"),
    code("""edited = agent.get_state(config).values["messages"]
entry = undo_thread(agent, config)
print(demo.compact_diff(entry.diff, demo.message_labels(edited)))
print()
print("Q1 again:", agent.get_state(config).values["messages"][0].text)"""),
    md("""## Prompt tokens per call, with and without gating

The tables above already hold the figures: for each call, the history *stored* (what `RunnableWithMessageHistory`,
or an agent without the middleware, would send) and the history *sent*. A prompt is the system prompt, that history
and the current question (with its tool call and result, for the agent), so the two prompts differ only in the
history. The chain's fifth call is the one after the edit."""),
    code("""%matplotlib inline
import matplotlib.pyplot as plt
from langchain_core.messages import SystemMessage

def tok(cell):   # a table cell "5 msgs / 123 tok" -> 123
    return int(cell.split("/ ")[1].split()[0])

# the chain: rows hold "#, question, history stored, history sent, ..."; the call adds system prompt and question
chain_rows = rows + [row]                        # the four turns, then the call after the edit
chain_calls = recorder.calls[:len(chain_rows)]
rest = [demo.tokens(call) - tok(r[3]) for r, call in zip(chain_rows, chain_calls)]
chain_with = [x + tok(r[3]) for x, r in zip(rest, chain_rows)]
chain_without = [x + tok(r[2]) for x, r in zip(rest, chain_rows)]
# the agent: "thread state" vs "sent (w/o system)" for each turn's last model call, plus the system prompt
system = [demo.tokens([m for m in call if isinstance(m, SystemMessage)]) for call in last_calls]
agent_with = [x + tok(r[4]) for x, r in zip(system, agent_rows)]
agent_without = [x + tok(r[3]) for x, r in zip(system, agent_rows)]

fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), dpi=90)
for ax, title, without, with_ in ((axes[0], "Chain (GatedRunnableWithMessageHistory)", chain_without, chain_with),
                                  (axes[1], "Agent (GatekeeperMiddleware), last call per turn", agent_without, agent_with)):
    calls = range(1, len(with_) + 1)
    ax.plot(calls, without, marker="o", color="tab:gray", label="without gating: whole history")
    ax.plot(calls, with_, marker="o", color="tab:blue", label="with gating: what was sent")
    ax.set(title=title, xlabel="call", ylabel="prompt tokens", xticks=list(calls), ylim=(0, max(without) * 1.15))
    ax.title.set_fontsize(10)
    ax.grid(alpha=0.3)
axes[0].legend(loc="upper left", fontsize=8)
plt.tight_layout()
plt.show()
print("chain:", sum(chain_with), "prompt tokens sent,", sum(chain_without), "without gating;",
      "agent:", sum(agent_with), "sent,", sum(agent_without), "without")"""),
    md("""## Next

* `python examples/langchain_quickstart.py` runs this tour as a script (`--plain`, `--offline`).
* `edit_thread(agent, config, "...", model=...)` edits a thread from code; `history.edit(..., preview=True)` returns a
  proposal to inspect and `commit`; `history.redo()`, `revert(n)`, `history()` and `record()` cover the versions."""),
]

build(cells, "langchain_quickstart.ipynb")

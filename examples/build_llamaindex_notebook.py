"""Build and execute examples/llamaindex_quickstart.ipynb (needs nbformat, nbclient, ipykernel, matplotlib):

    python examples/build_llamaindex_notebook.py            # offline, as CI runs it
    python examples/build_llamaindex_notebook.py --online   # with GOOGLE_API_KEY: a look, not a commit

CI compares the saved outputs with an offline run (examples/run_all.py).
"""

from _notebook import build, code, md


cells = [
    md("""# LlamaIndex quickstart: topic-gated memory, covering retrieval, and an editable history

`llamaindex_gatekeeper` gives an existing LlamaIndex chat engine (or agent) three things:

* **`GatekeeperMemory`** (`memory=`): before each LLM call, only the earlier turns the current question needs are
  sent (a topic gate, BM25-style retrieval and a token budget; no embedding model). The stored history stays complete.
* **`GatekeeperNodePostprocessor`** (`node_postprocessors=`): of the retrieved nodes, keep a small subset that covers
  the question's informative terms within a token budget, and `explain` why each node was kept or dropped.
* **A mutable, versioned history**: say in plain language how the conversation should change
  (`"The export job runs for about 2 minutes, not 30 seconds."`); a model rewrites the affected user *and* assistant
  messages, you get a diff, and `undo` brings the old text back.

This notebook tells the same story as `examples/llamaindex_quickstart.py`: a `ContextChatEngine` over a small index,
then an edit of its memory.

**Models.** By default everything is offline and deterministic: the chat LLM is a scripted fake with canned answers
that records its prompts, the embeddings are `MockEmbedding`, and the editing model is a scripted model that replies
with the ideal patch for the intended change. If `GOOGLE_API_KEY` is set, edits use the adapter's default editor
(Gemini 2.5 Flash, through the core's `GeminiModel`); the chat LLM stays scripted unless
`llama-index-llms-google-genai` is installed (it is not a dependency of this project)."""),
    code("""import os
import sys

sys.path.insert(0, os.getcwd())      # run from examples/: the helpers live in llamaindex_quickstart.py
import llamaindex_quickstart as demo  # also puts <repo>/shared and <repo> on sys.path in a plain checkout

ONLINE = demo.use_gemini(offline=False)   # True only when GOOGLE_API_KEY is set
llm = demo.chat_llm(ONLINE)               # the scripted chat LLM (or GoogleGenAI, when installed and online)
ui = demo.Printer(plain=True)
demo.banner(ui, ONLINE, llm)"""),
    md("""## 1. An index, the memory, the postprocessor, a chat engine

Six short "team handbook" pages, one node each. `MockEmbedding` gives every text the same vector, so it cannot rank:
the retriever returns all six pages on every call (as a generous `similarity_top_k` would), and the postprocessor
decides which ones the LLM gets."""),
    code("""from llama_index.core import VectorStoreIndex
from llama_index.core.embeddings import MockEmbedding
from llama_index.core.schema import TextNode

for name, text in demo.DOCS:
    print(f"{name:<15} {text}")
index = VectorStoreIndex([TextNode(id_=name, text=text) for name, text in demo.DOCS],
                         embed_model=MockEmbedding(embed_dim=8))"""),
    md("""The memory's `token_limit` caps what `get()` returns; the postprocessor's `token_budget` caps the kept nodes.
`build_corpus(index)` weighs query terms by the whole index rather than by the retrieved nodes alone."""),
    code("""from llama_index.core.chat_engine import ContextChatEngine
from llamaindex_gatekeeper import GatekeeperMemory, GatekeeperNodePostprocessor, build_corpus

memory = GatekeeperMemory.from_defaults(token_limit=1000, session_id="demo")
postprocessor = GatekeeperNodePostprocessor(token_budget=150, corpus=build_corpus(index))
engine = ContextChatEngine.from_defaults(
    index.as_retriever(similarity_top_k=len(demo.DOCS)),
    llm=llm,
    memory=memory,
    node_postprocessors=[postprocessor],
    system_prompt=demo.SYSTEM_PROMPT,
)"""),
    md("""A conversation about a Redis lock, an off-topic coffee question, back to Redis, back to coffee.
`demo.Recorder` is a LlamaIndex instrumentation event handler: it captures the messages each LLM call really received
and the nodes each retrieval returned, so the tables compare the history *stored* with the history *sent*, and the
pages *retrieved* with the pages *kept*. The `gate` column is the memory's topic decision
(`memory.explain(question).decision`)."""),
    code("""recorder = demo.Recorder.attach()
calls = []
for question, _canned_answer in demo.TURNS:
    calls.append(demo.ask(engine, memory, postprocessor, recorder, question))   # engine.chat(question)
ui.table("History: stored in the memory vs sent to the LLM", demo.HISTORY_COLUMNS, [demo.history_row(c) for c in calls])
print()
ui.table("Pages: retrieved vs kept by the postprocessor", demo.NODE_COLUMNS, [demo.node_row(c) for c in calls])"""),
    md("""Why, for the third question (back to Redis): `postprocessor.explain(nodes, query)` gives one `NodeExplanation`
per retrieved node, in retrieval order."""),
    code("""third = calls[2]
print(third.question, end="\\n\\n")
for e in postprocessor.explain(third.retrieved, third.question):
    print(f"{e.node_id:<15} {'kept' if e.kept else 'dropped':<8} {e.reason:<16} {e.coverage}")"""),
    md("The third LLM call, message by message: the moka pot turn is not there, and the context holds two pages."),
    code("""print(demo.prompt_lines(third.llm_call))
print(f"\\nstored: {len(memory.get_all())} messages, all of them")"""),
    md("""## 2. Editing the memory in natural language

`memory.edit(instruction, model=...)` asks a model for the change and records it as a new revision (`model=None`
uses the default, Gemini 2.5 Flash, when `GOOGLE_API_KEY` is set; any LlamaIndex LLM works too). Offline, the editor is
a `ScriptedModel` answering the ideal patch (computed with `ideal_patch_reply`) for the intended change."""),
    code("""editor = None if ONLINE else demo.ideal_editor(memory.transcript.messages, demo.EDIT_SUBSTITUTIONS)
print(demo.EDIT, end="\\n\\n")
revision = memory.edit(demo.EDIT, model=editor)
labels = demo.message_labels(memory.transcript.messages)   # core message id -> Q1, A1, ...
print(demo.compact_diff(memory.diff(revision.parent, revision.number), labels))"""),
    md("`str(memory.diff(a, b))` is the same change as a unified diff, one hunk per changed message:"),
    code("""print(memory.diff(revision.parent, revision.number))"""),
    md("The next call sees the revised text, never the superseded one:"),
    code("""call = demo.ask(engine, memory, postprocessor, recorder, demo.AFTER_EDIT_TURN[0])
ui.table("The next call", demo.HISTORY_COLUMNS, [demo.history_row(call)])
print()
print(demo.prompt_lines(call.llm_call))
print("\\nmentions", demo.mentions(call.sent, "2 minutes", "30 seconds"))"""),
    md("`memory.undo()` reverts the edit as a new revision and keeps the turn added after it:"),
    code("""undo = memory.undo()
print(demo.compact_diff(memory.diff(undo.parent, undo.number), labels))
print()
print("first message:", memory.get_all()[0].content)
print("what get() would send now mentions", demo.mentions(memory.get(input=demo.AFTER_EDIT_TURN[0]), "2 minutes", "30 seconds"))
print("messages stored:", len(memory.get_all()), "| revisions:", [r.kind for r in memory.history()])"""),
    md("""## Prompt tokens per call, with and without gating

Each `Call` above already holds the figures: the history *stored* and *sent*, the pages *retrieved* and *kept*, and
the LLM's whole input (`llm_call`: the system prompt with the kept pages, the history, the question). Without the
memory's gating the whole stored history would go; without the postprocessor, all six retrieved pages. The fifth call
is the one after the edit."""),
    code("""%matplotlib inline
import matplotlib.pyplot as plt

def tokens(messages):
    return sum(demo.count_tokens(m.content or "") for m in messages)

def page_tokens(nodes):
    return sum(demo.count_tokens(n.node.get_content()) for n in nodes)

all_calls = calls + [call]                             # the four turns, then the call after the edit
sent = [tokens(c.llm_call) for c in all_calls]         # what the LLM received
# the same prompt with all six retrieved pages instead of the kept ones (the history still gated)
memory_only = [s - page_tokens(c.kept) + page_tokens(c.retrieved) for s, c in zip(sent, all_calls)]
# ... and with the whole stored history instead of the gated one
neither = [m - tokens(c.sent) + tokens(c.stored) for m, c in zip(memory_only, all_calls)]

x = range(1, len(all_calls) + 1)
fig, ax = plt.subplots(figsize=(7, 3.6), dpi=90)
ax.plot(x, neither, marker="o", color="tab:gray", label="no gating: whole history, all six pages")
ax.plot(x, memory_only, marker="o", color="tab:orange", label="GatekeeperMemory only (all six pages)")
ax.plot(x, sent, marker="o", color="tab:blue", label="memory + postprocessor: what was sent")
ax.set(title="ContextChatEngine: prompt tokens per call", xlabel="call", ylabel="prompt tokens",
       xticks=list(x), ylim=(0, max(neither) * 1.15))
ax.legend(loc="upper left", fontsize=8)
ax.grid(alpha=0.3)
plt.tight_layout()
plt.show()
print("prompt tokens over the five calls:", sum(neither), "without gating,", sum(memory_only),
      "with the memory only,", sum(sent), "sent")"""),
    md("""## Next

* `python examples/llamaindex_quickstart.py` runs this tour as a script (`--plain`, `--offline`).
* The same `memory=` works in `SimpleChatEngine`, `CondensePlusContextChatEngine`, `CondenseQuestionChatEngine`,
  `FunctionAgent` and `ReActAgent`; the postprocessor in any query engine's `node_postprocessors=`.
* `memory.edit(..., preview=True)` returns a proposal to inspect and `commit`; `redo()`, `revert(n)`, `history()` and
  `record()` cover the versions; `to_dict()` / `from_dict()` save and restore state with its history."""),
]

build(cells, "llamaindex_quickstart.ipynb")

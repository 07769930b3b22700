"""Build and execute examples/mutable_transcripts.ipynb (needs nbformat, nbclient, ipykernel, matplotlib):

    python examples/build_transcripts_notebook.py            # offline, as CI runs it
    python examples/build_transcripts_notebook.py --online   # with GOOGLE_API_KEY: a look, not a commit

The notebook runs in its own folder (examples/) and finds the core from there (installed, or
<repo>/shared in a plain checkout), so the saved notebook holds no path of this machine.  It is
executed offline (no API key) unless --online is given: CI compares the saved outputs with an
offline run (examples/run_all.py).
"""

from _notebook import build, code, md


cells = [
    md("""# Mutable transcripts: edit a conversation's history, keep every version

The core of `context-gatekeeper`, without any framework. A `Transcript` is a conversation whose history can be
revised: say in plain language how it should change, a model rewrites the affected user *and* assistant messages,
and the revised transcript becomes the active state. Every change is a recorded revision, so you can preview it,
diff it, undo it (later turns stay), revert to any revision, and trace each message back to the original it came
from. `TranscriptGate` then selects, before each model call, the earlier turns the new question needs, from the
*current* state only: superseded text is never sent.

The story is the Mutable Transcripts paper's *retroactive correction* scenario: a user asks about Ireland's GDP in
2021, then realises they meant Iceland, and 2022 (the same scenario the tests and `benchmarks/edit_cost.py` use,
from `context_gatekeeper.testing.scenarios`).

**Models.** By default everything is offline and deterministic: the editing model is a `ScriptedModel` that replies
with the ideal patch for the intended change (computed with `ideal_patch_reply`), and new answers are canned. If
`GOOGLE_API_KEY` is set, edits and new answers use the core's `GeminiModel` (Gemini 2.5 Flash, the `gemini` extra)."""),
    code("""import os
import sys
import tempfile
import warnings
from pathlib import Path

try:
    import context_gatekeeper  # noqa: F401  (installed: pip install -e .)
except ImportError:  # a plain checkout: the core lives in <repo>/shared, found from this folder (examples/)
    found = [p / "shared" for p in (Path.cwd(), *Path.cwd().parents) if (p / "shared" / "context_gatekeeper").is_dir()]
    if not found:
        raise ImportError("open this notebook from examples/ of a context-gatekeeper checkout, "
                          "or pip install context-gatekeeper") from None
    sys.path.insert(0, str(found[0]))

from context_gatekeeper import Delete, GeminiModel, Replace, SQLiteStore, Transcript, TranscriptGate, resolve_token_counter
from context_gatekeeper.integration import ideal_patch_reply
from context_gatekeeper.testing import ScriptedModel
from context_gatekeeper.testing.scenarios import RETROACTIVE_CORRECTION as scenario

warnings.simplefilter("ignore", RuntimeWarning)   # the token counter's one-time note, if tiktoken has no offline copy
count_tokens = resolve_token_counter(None)        # tiktoken cl100k_base, loaded offline

ONLINE = bool(os.environ.get("GOOGLE_API_KEY"))
gemini = GeminiModel() if ONLINE else None         # gemini-2.5-flash, for edits and new answers
print("Models:", "Gemini 2.5 Flash (GOOGLE_API_KEY is set)" if ONLINE else
      "SCRIPTED (offline): the editor replies with the ideal patch, new answers are canned. "
      "Set GOOGLE_API_KEY to use Gemini.")"""),
    md("""A few helpers: short labels for messages (`Q1`, `A1`, ...), an offline editor, and an answer function
(Gemini online, a canned answer offline)."""),
    code("""def short(text, limit=90):
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"

class Labels(dict):
    def __missing__(self, message_id):   # a message an edit inserted after the labels were made
        return "new"

def labels_of(messages):
    \"\"\"Message id -> "Q1" for a question, "A1" for its answer.\"\"\"
    labels, turn = Labels(), 0
    for m in messages:
        turn += m.role == "user"
        labels[m.id] = f"{'Q' if m.role == 'user' else 'A'}{turn}"
    return labels

def show(messages, labels=None):
    labels = labels or labels_of(messages)
    for m in messages:
        print(f"{labels.get(m.id, '?'):>3} {m.origin:<8} {short(m.content)}")

def scripted_editor(state, replacements):
    \"\"\"Offline: a model whose one reply is the ideal patch. ``replacements`` maps a position in ``state``
    to its new text (None deletes), as the scenario states the intended change.\"\"\"
    intended = [Replace(state[i].id, text) if text is not None else Delete(state[i].id)
                for i, text in replacements.items()]
    return ScriptedModel([ideal_patch_reply(state, intended)], name="scripted-editor")

def editor_for(state, replacements):
    return gemini if ONLINE else scripted_editor(state, replacements)

def answer(context, question, canned):
    \"\"\"The assistant's answer: Gemini sees the context messages and the question; offline, the canned text.\"\"\"
    if not ONLINE:
        return canned
    messages = [{"role": m.role, "content": m.content} for m in context]
    return gemini.complete(messages + [{"role": "user", "content": question}])"""),
    md("""## 1. A transcript on SQLite

`Transcript(session_id, store=...)` takes an `InMemoryStore` (the default), a `SQLiteStore`, or a file path. Each
`append` is one revision: here, the scenario's two turns."""),
    code("""workdir = Path(tempfile.mkdtemp(prefix="transcripts-demo-"))
db = workdir / "chats.db"
t = Transcript("gdp", store=SQLiteStore(db))

base = scenario.base   # [(role, text), ...]: two questions about Ireland's GDP in 2021 and their answers
for (_, question), (_, reply) in zip(base[0::2], base[1::2]):
    t.append(user=question, assistant=reply)
show(t.messages)
print("\\nhead:", t.head, "| revisions:", [r.kind for r in t.history()], "| stored in", db.name)"""),
    md("""Without mutable transcripts, the user would append the corrections ("Sorry, I meant Iceland", "And the year
should be 2022") and the answers to them. In the paper's condition A, that leaves this many messages in the context,
most of them about the wrong country or year:"""),
    code("""appended = scenario.condition_a
obsolete = sum(count_tokens(appended[i][1]) for i in scenario.obsolete)
total = sum(count_tokens(text) for _, text in appended)
print(f"appending corrections: {len(appended)} messages, {total} tokens, "
      f"{len(scenario.obsolete)} messages ({obsolete} tokens, {obsolete / total:.0%}) superseded by a later one")"""),
    md("""## 2. An edit: preview, commit, diff

`t.edit(instruction, model=..., preview=True)` asks the model for the change and returns a `Proposal` (its
`changes` and a `diff`); nothing changes until `t.commit(proposal)`. The default strategy, `patch`, asks the model
only for operations on message ids: messages it does not name stay byte-for-byte identical."""),
    code("""instruction, replacements = scenario.edits[0]   # "It should be Iceland, not Ireland."
editor = editor_for(t.messages, replacements)
proposal = t.edit(instruction, model=editor, preview=True)
print(instruction)
print(f"proposal on head {proposal.base}, strategy {proposal.strategy}, model {proposal.model}; head is still {t.head}\\n")
print(proposal.diff)"""),
    code("""revision = t.commit(proposal)
print(f"committed revision {revision.number} ({revision.kind}, parent {revision.parent}): {revision.instruction!r}\\n")
labels = labels_of(t.messages)          # ids are stable across edits, so these labels stay valid
show(t.messages, labels)"""),
    md("""`t.diff(a, b)` compares any two revisions; its `messages` say which message changed and how, and `str()` is a
unified diff. The second correction goes straight to a revision (no preview):"""),
    code("""instruction2, replacements2 = scenario.edits[1]   # "Make the year 2022, not 2021."
year_edit = t.edit(instruction2, model=editor_for(t.messages, replacements2))
d = t.diff(year_edit.parent, year_edit.number)
print(instruction2)
print([(labels[e.id], e.status) for e in d.messages], "\\n")
print(d)"""),
    md("""## 3. Provenance: `messages` is the current state, `record()` what was said

Each message of the state carries its provenance: `origin` ("original", "edited" or "inserted"), `derived_from`
(the original messages it comes from) and the `revision` that produced this version. `record()` returns every
message ever appended, exactly as first written: edits never touch it."""),
    code("""print(f"{'':>3} {'origin':<8} {'derived_from':<12} rev  content")
for m in t.messages:   # derived_from holds message ids; shown by their labels
    derived = ",".join(labels[i] for i in m.derived_from) or "-"
    print(f"{labels[m.id]:>3} {m.origin:<8} {derived:<12} {m.revision:>3}  {short(m.content, 60)}")
print("\\nrecord():")
for m in t.record():
    print(f"{labels[m.id]:>3} {m.origin:<8} {'-':<12} {m.revision:>3}  {short(m.content, 60)}")"""),
    md("""Everything is in the SQLite file: another `Transcript` on the same file (another process, a restart) sees the
same state and the same history. Every read checks the store's head, so no reader serves superseded text."""),
    code("""reopened = Transcript("gdp", store=SQLiteStore(db))
print("same state:", [m.content for m in reopened.messages] == [m.content for m in t.messages])
print("history:", [(r.number, r.kind) for r in reopened.history()])"""),
    md("""## 4. Undo after new turns, redo, revert

The conversation goes on after the edits. `undo()` reverts the most recent *state-changing* revision (an edit,
apply, set, clear or revert) by applying its inverse as a new revision, and **keeps every turn appended after it**."""),
    code("""question = "How did tourism do that year?"
reply = answer(t.messages, question,
               "Tourism recovered strongly: about 1.7 million foreign visitors came, close to the 2019 peak, "
               "and it was again the largest source of export revenue.")
t.append(user=question, assistant=reply)
labels = labels_of(t.messages)
undo = t.undo()
print(f"undo -> revision {undo.number}, reverting revision {undo.target} ({t.history()[undo.target - 1].instruction!r})\\n")
print(t.diff(undo.parent, undo.number), "\\n")
show(t.messages, labels)"""),
    code("""redo = t.redo()
print(f"redo -> revision {redo.number}, re-applying revision {redo.target}: Q1 is {t.messages[0].content!r}")"""),
    md("""`revert(n)` makes the state equal to revision `n`'s, as a new revision; its `removed` lists what it dropped,
including turns appended after `n`. A revert is state-changing, so it can itself be undone."""),
    code("""reverted = t.revert(2)   # the state after the two original turns
print(f"revert(2) -> revision {reverted.number}; removed: {[labels[m.id] for m in reverted.removed]}")
show(t.messages, labels)
back = t.undo()
print(f"\\nundo -> revision {back.number}, reverting the revert:")
show(t.messages, labels)
print("\\nrevisions:", ", ".join(f"{r.number} {r.kind}" for r in t.history()))"""),
    md("""## 5. Selection over the transcript: `TranscriptGate`

`TranscriptGate(transcript, token_budget=...)` keeps a `ContextGatekeeper` in step with the transcript's current
state (only the turns a revision changed are re-indexed). `select_messages(query)` returns the system messages, the
earlier turns the query needs, and the open turn. An off-topic turn comes first, then a question back on Iceland."""),
    code("""question = "By the way, how often should I descale my espresso machine?"
t.append(user=question, assistant=answer([], question,
         "Every one to three months, depending on how hard your water is; more often if you use tap water."))
labels = labels_of(t.messages)

gate = TranscriptGate(t, token_budget=400)
query = "Back to Iceland: how large were fisheries in its 2022 GDP?"
selection = gate.explain(query)
selected = gate.select_messages(query)
print(query)
print(f"gate decision: {selection.decision}; {selection.tokens_kept} of {selection.tokens_total} history tokens kept\\n")
show(selected, labels)"""),
    md("""Superseded text is never selected: no version an edit replaced (the Ireland and 2021 texts, still in
`record()` and in the revision log) is among the selected messages, whatever the query asks."""),
    code("""current = {m.content for m in t.messages}
every_version = {m.content for n in range(t.head + 1) for m in t.snapshot(n)}   # the state at each revision
superseded = every_version - current
for q in (query, "What was Ireland's GDP in 2021?", "What were its largest categories?"):
    texts = {m.content for m in gate.select_messages(q)}
    print(f"{short(q, 45):<46} selected {len(texts)} messages, superseded among them: {len(texts & superseded)}")
    assert not texts & superseded
print(f"\\n{len(superseded)} superseded versions exist (in earlier revisions, {len(superseded & {m.content for m in t.record()})} "
      "of them in record()); none was selected.")"""),
    md("""The gate follows every revision: undo the year edit and the next selection sees the 2021 text at once."""),
    code("""undo = t.undo()   # reverts the year edit again; the later turns stay
print(f"undo -> revision {undo.number} (reverting revision {undo.target})")
print("selected Q1 now:", gate.select_messages(query)[0].content)
t.redo()
print("after redo:     ", gate.select_messages(query)[0].content)"""),
    md("""## 6. Prompt tokens per turn, with and without gating

A longer, synthetic conversation: 38 turns over five topics (a Redis lock, Kafka, PostgreSQL, Docker, espresso),
with returns to earlier topics. Before each question is appended, `TranscriptGate` selects what to send with it.
Without gating, every earlier turn goes with every call, so the prompt grows without bound; with gating it stays
within the budget and follows the topic."""),
    code("""import random

TOPICS = {
    "redis": ("Redis locks", ["TTL", "watchdog", "SET NX PX", "Redlock", "fencing token", "failover",
                              "lockWatchdogTimeout", "lease", "Redisson", "replica", "split brain", "unlock script"]),
    "kafka": ("Kafka", ["partitions", "consumer lag", "rebalancing", "offsets", "exactly-once", "retention.ms",
                        "compaction", "brokers", "consumer group", "ISR", "acks=all", "Kafka Streams"]),
    "postgres": ("PostgreSQL", ["EXPLAIN ANALYZE", "partial index", "autovacuum", "planner", "Seq Scan", "bloat",
                                "replication slot", "work_mem", "pg_stat_statements", "WAL", "VACUUM FULL",
                                "index-only scan"]),
    "docker": ("Docker", ["multi-stage build", "distroless", "layer cache", "image size", "HEALTHCHECK", "ENTRYPOINT",
                          "BuildKit", "registry", "Dockerfile", ".dockerignore", "base image", "docker compose"]),
    "espresso": ("espresso", ["grind", "portafilter", "tamping", "crema", "descaling", "extraction", "roast date",
                              "milk frothing", "burr grinder", "shot time", "dose", "water hardness"]),
}
SCHEDULE = [("redis", 5), ("kafka", 5), ("postgres", 4), ("redis", 3), ("docker", 5),
            ("kafka", 3), ("espresso", 4), ("postgres", 3), ("docker", 3), ("redis", 3)]

def synthetic_conversation(seed=7):
    \"\"\"(topic, question, answer) triples from each topic's terms: "By the way" opens a new topic,
    "Back to" reopens an earlier one, follow-ups name only terms of the topic.\"\"\"
    rng, seen, turns = random.Random(seed), set(), []
    for topic, length in SCHEDULE:
        name, terms = TOPICS[topic]
        for i in range(length):
            a, b, c, d, e, f, g = rng.sample(terms, 7)
            if i == 0:
                q = f"Back to {name}: what about {a}?" if topic in seen else f"By the way, about {name}: {a} and {b}?"
            else:
                q = rng.choice([f"What about {a} with {b}?", f"And {a} for {b}?", f"How about {a} and {b}?"])
            reply = f"{a} with {b}, then {c}; {d} and {e} too."
            if rng.random() < 0.6:
                reply += f" {f} before {g}, or {c} after {d}."
            turns.append((topic, q, reply))
        seen.add(topic)
    return turns

conversation = synthetic_conversation()
replay = Transcript("synthetic")   # in memory
replay.append(messages=[{"role": "system", "content": "You are a concise engineering assistant."}])
BUDGET = 400
replay_gate = TranscriptGate(replay, token_budget=BUDGET)
topic_of = {q: topic for topic, q, _ in conversation}

def prompt_tokens(messages, question):
    return sum(count_tokens(m.content) for m in messages) + count_tokens(question)

with_gating, without_gating, decisions, off_topic, turns_sent = [], [], [], 0, 0
for topic, question, reply in conversation:
    sent = replay_gate.select_messages(question)
    decisions.append(replay_gate.explain(question).decision)
    sent_topics = [topic_of[m.content] for m in sent if m.role == "user"]
    turns_sent += len(sent_topics)
    off_topic += sum(t != topic for t in sent_topics)
    with_gating.append(prompt_tokens(sent, question))
    without_gating.append(prompt_tokens(replay.messages, question))
    replay.append(user=question, assistant=reply)

print(f"{len(conversation)} turns; prompt tokens summed over all calls: {sum(with_gating)} with gating, "
      f"{sum(without_gating)} without ({1 - sum(with_gating) / sum(without_gating):.0%} saved)")
print(f"last call: {with_gating[-1]} tokens with gating, {without_gating[-1]} without")
print(f"earlier turns sent with gating: {turns_sent}, of which {off_topic} from another topic")"""),
    code("""%matplotlib inline
import matplotlib.pyplot as plt

turns = range(1, len(conversation) + 1)
fig, ax = plt.subplots(figsize=(9, 4), dpi=90)
ax.plot(turns, without_gating, marker=".", color="tab:gray", label="without gating: every earlier turn")
ax.plot(turns, with_gating, marker=".", color="tab:blue", label=f"TranscriptGate (token_budget={BUDGET})")
colours = dict(zip(TOPICS, ["tab:red", "tab:green", "tab:blue", "tab:purple", "tab:brown"]))
top, start = max(without_gating) * 1.15, 1
for topic, length in SCHEDULE:   # shade and name each topic block
    ax.axvspan(start - 0.5, start + length - 0.5, color=colours[topic], alpha=0.08)
    ax.text(start - 0.3, top * 0.98, topic, fontsize=7, va="top")
    start += length
ax.set_ylim(0, top)
ax.set(xlabel="turn", ylabel="prompt tokens", title="Prompt tokens per turn: synthetic multi-topic chat")
ax.legend(loc="center left")
ax.grid(alpha=0.3)
plt.tight_layout()
plt.show()
print("gate decisions at topic changes:",
      [f"{i}:{decisions[i - 1]}" for i in range(2, len(conversation) + 1)
       if conversation[i - 1][0] != conversation[i - 2][0]])"""),
    md("""## Next

* `t.apply([Replace(q_id, "..."), Delete(a_id), InsertAfter(other_id, "user", "...")])` edits without a model
  (one request per message: ids name the messages as they are before the list is applied);
  `t.set(messages)`, `t.clear()` and `t.purge()` (which forgets everything, record included) complete the set.
* Every method that can wait on a model or a store has an async twin (`aedit`, `acommit`, `aundo`, ...).
* The LangChain and LlamaIndex notebooks (`langchain_quickstart.ipynb`, `llamaindex_quickstart.ipynb`) put the same
  transcript behind a chat history, an agent middleware and a chat-engine memory."""),
    code("""import shutil
shutil.rmtree(workdir)   # the demo's SQLite file"""),
]

build(cells, "mutable_transcripts.ipynb")

"""LlamaIndex quickstart: a chat engine with topic-gated memory, covering retrieval, and an editable history.

A short tour of ``llamaindex_gatekeeper`` on one ``ContextChatEngine`` over a small
``VectorStoreIndex`` (six short "team handbook" documents written for this example):

1. **Before and after, on every call.**  The engine gets
   ``memory=GatekeeperMemory.from_defaults(...)`` and
   ``node_postprocessors=[GatekeeperNodePostprocessor(token_budget=...)]``.  A conversation
   about a Redis lock is interrupted by coffee questions and comes back to Redis; for each
   call the script prints the history *stored* vs the history actually *sent* to the LLM,
   and the documents *retrieved* vs the documents the postprocessor *kept* (with
   ``postprocessor.explain(nodes, query)``: why each was kept or dropped).  What the LLM and
   the retriever really saw is captured with LlamaIndex's instrumentation events.
2. **Editing the memory in natural language**: ``memory.edit("It runs for about 2 minutes,
   not 30 seconds ...")`` prints the messages it changed, the next call shows the LLM now
   sees the revised text, and ``memory.undo()`` brings the old text back (keeping the turn
   added after the edit).

By default everything is offline, needs no API key and takes a few seconds: the chat LLM
is a scripted fake with canned answers that records its prompts, the embedding model is
``MockEmbedding``, and the editing model is a scripted model that replies with the ideal
patch for the intended change (the script says so on screen).  With ``GOOGLE_API_KEY`` set
(and no ``--offline``), edits use the adapter's default editor (the core's Gemini 2.5
Flash); the chat LLM stays scripted unless ``llama-index-llms-google-genai`` happens to be
installed (it is not a dependency of this project)::

    python examples/llamaindex_quickstart.py              # rich tables and panels
    python examples/llamaindex_quickstart.py --plain      # plain text (CI logs, pipes)
    python examples/llamaindex_quickstart.py --offline    # scripted models even with a key

It runs from a checkout without installing anything but the dependencies (llama-index-core,
rich); the notebook ``examples/llamaindex_quickstart.ipynb`` tells the same story.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def ensure_importable(start: Path | None = None) -> None:
    """Put ``<repo>/shared`` and ``<repo>`` on ``sys.path`` when the packages are not installed."""
    try:
        import context_gatekeeper  # noqa: F401
        import llamaindex_gatekeeper  # noqa: F401
        return
    except ImportError:
        pass
    here = (start or Path(__file__)).resolve()
    for root in (here, *here.parents):
        if (root / "llamaindex_gatekeeper").is_dir() and (root / "shared" / "context_gatekeeper").is_dir():
            sys.path[:0] = [str(root / "shared"), str(root)]
            return
    raise ImportError("run this from a context-gatekeeper checkout, or pip install context-gatekeeper[llamaindex]")


ensure_importable(Path(globals().get("__file__", Path.cwd() / "llamaindex_quickstart.py")))

from llama_index.core import VectorStoreIndex  # noqa: E402
from llama_index.core.base.llms.types import (  # noqa: E402
    ChatMessage,
    ChatResponse,
    CompletionResponse,
    CompletionResponseGen,
    LLMMetadata,
    MessageRole,
)
from llama_index.core.bridge.pydantic import Field  # noqa: E402
from llama_index.core.chat_engine import ContextChatEngine  # noqa: E402
from llama_index.core.embeddings import MockEmbedding  # noqa: E402
from llama_index.core.instrumentation import get_dispatcher  # noqa: E402
from llama_index.core.instrumentation.event_handlers import BaseEventHandler  # noqa: E402
from llama_index.core.instrumentation.events import BaseEvent  # noqa: E402
from llama_index.core.instrumentation.events.llm import LLMChatStartEvent  # noqa: E402
from llama_index.core.instrumentation.events.retrieval import RetrievalEndEvent  # noqa: E402
from llama_index.core.llms import LLM, CustomLLM  # noqa: E402
from llama_index.core.llms.callbacks import llm_chat_callback, llm_completion_callback  # noqa: E402
from llama_index.core.schema import NodeWithScore, TextNode  # noqa: E402

from context_gatekeeper import EditError, Message, ModelUnavailableError, Replace  # noqa: E402
from context_gatekeeper.integration import ideal_patch_reply  # noqa: E402
from context_gatekeeper.testing import ScriptedModel  # noqa: E402
from context_gatekeeper import resolve_token_counter  # noqa: E402
from _printing import Printer, short  # noqa: E402
from llamaindex_gatekeeper import GatekeeperMemory, GatekeeperNodePostprocessor, NodeExplanation, build_corpus  # noqa: E402

GEMINI = "gemini-2.5-flash"
HISTORY_TOKEN_LIMIT = 1000  # GatekeeperMemory(token_limit=...): what get() may return
NODE_TOKEN_BUDGET = 150  # GatekeeperNodePostprocessor(token_budget=...): what the kept documents may cost
SYSTEM_PROMPT = "You are a concise engineering assistant. Answer from the team handbook when it helps."

# -- the story --------------------------------------------------------------------------------
# The index: six short handbook pages (name, text).
DOCS: list[tuple[str, str]] = [
    ("redis-locks",
     "Redis locks: every lock has a TTL. Make the TTL about three times the longest run of the job "
     "that holds the lock, and renew it from a watchdog every TTL/3."),
    ("fencing",
     "Fencing tokens: every lock grant returns a number that grows with each grant. Storage rejects "
     "writes that carry an older token, so a stale lock holder cannot corrupt data."),
    ("export-job",
     "The nightly export job starts at 02:00, holds the Redis lock export:nightly and writes the "
     "daily CSV files to the reports bucket."),
    ("kitchen-coffee",
     "Kitchen coffee: grind medium-fine for the moka pot and fine for the espresso machine. "
     "Descale the espresso machine once a month."),
    ("on-call",
     "On-call: one week per engineer, handover on Monday at 10:00. Page the secondary if the "
     "primary has not answered within 15 minutes."),
    ("deploys",
     "Deploys: no production deploys on Fridays after 15:00 or during the December freeze."),
]
# The conversation: (question, the scripted LLM's canned answer).  Offline these answers are
# what the fake LLM says; with a real LLM only the questions are used.
TURNS: list[tuple[str, str]] = [
    (
        "Our nightly export job runs for about 30 seconds. How long should its Redis lock TTL be?",
        "About three times the run: 90 seconds. A slow run keeps the lock, and a crashed worker "
        "frees it within 90 seconds.",
    ),
    (
        "By the way, what grind should I use for the moka pot in the kitchen?",
        "Medium-fine: a little coarser than for the espresso machine.",
    ),
    (
        "How often should the watchdog renew the export job's Redis lock?",
        "Every 30 seconds, a third of the 90 second TTL, so two renewals can fail before the lock expires.",
    ),
    (
        "Does the kitchen espresso machine need descaling?",
        "Yes, once a month.",
    ),
]
# The correction, and the text a perfect editor would write (the offline editor's answer).
EDIT = "The export job runs for about 2 minutes, not 30 seconds."
EDIT_SUBSTITUTIONS = [("30 seconds", "2 minutes"), ("90 seconds", "6 minutes"), ("90 second", "6 minute")]
AFTER_EDIT_TURN = (
    "If the export job's watchdog crashes, when can another worker take the Redis lock?",
    "At most one TTL after the last renewal: nobody renews the lock any more, so it expires and the "
    "next worker takes it.",
)


# -- models -----------------------------------------------------------------------------------
class ScriptedChatLLM(CustomLLM):
    """A fake chat LLM with canned answers, keyed by the latest user message; it records every call.

    An unknown question gets a placeholder answer.  Deterministic, so cells can be re-run.
    """

    replies: dict[str, str] = Field(default_factory=dict)
    calls: list[list[ChatMessage]] = Field(default_factory=list, description="every chat call's messages")

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="scripted-chat-llm", is_chat_model=True)

    def _answer(self, question: str) -> str:
        return self.replies.get(question.strip(), f"(scripted LLM: no canned answer for {question!r})")

    @llm_chat_callback()
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        self.calls.append([m.model_copy(deep=True) for m in messages])
        users = [m for m in messages if m.role == MessageRole.USER]
        text = self._answer(users[-1].content or "" if users else "")
        return ChatResponse(message=ChatMessage(role=MessageRole.ASSISTANT, content=text))

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        return CompletionResponse(text=self.chat([ChatMessage(role=MessageRole.USER, content=prompt)]).message.content)

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        text = self.complete(prompt).text
        yield CompletionResponse(text=text, delta=text)


def gemini_chat_available() -> bool:
    """Whether a LlamaIndex Gemini integration is installed (it is not a dependency)."""
    try:
        return importlib.util.find_spec("llama_index.llms.google_genai") is not None
    except ModuleNotFoundError:
        return False


def chat_llm(online: bool) -> LLM:
    """The chat engine's LLM: Gemini through llama-index-llms-google-genai when online and
    installed, else the scripted fake."""
    if online and gemini_chat_available():
        from llama_index.llms.google_genai import GoogleGenAI

        return GoogleGenAI(model=GEMINI)
    return ScriptedChatLLM(replies=dict([*TURNS, AFTER_EDIT_TURN]))


def substituted(text: str, substitutions: Sequence[tuple[str, str]]) -> str:
    for old, new in substitutions:
        text = text.replace(old, new)
    return text


def ideal_editor(state: Sequence[Message], substitutions: Sequence[tuple[str, str]]) -> ScriptedModel:
    """An offline editing model: a ScriptedModel whose one reply is the patch a perfect model
    would give for the intended change (``substitutions`` applied to each user and assistant
    text of ``state``, the memory's core messages)."""
    intended = [
        Replace(m.id, substituted(m.content, substitutions))
        for m in state
        if m.role in ("user", "assistant") and substituted(m.content, substitutions) != m.content
    ]
    return ScriptedModel([ideal_patch_reply(state, intended)], name="scripted-editor")


# -- the engine -------------------------------------------------------------------------------
def build_index() -> VectorStoreIndex:
    """The handbook index: one node per page, its name as node id (so runs are repeatable).

    MockEmbedding (offline) gives every text the same vector."""
    nodes = [TextNode(id_=name, text=text) for name, text in DOCS]
    return VectorStoreIndex(nodes, embed_model=MockEmbedding(embed_dim=8))


def build_engine(index: VectorStoreIndex, llm: LLM, memory: GatekeeperMemory,
                 postprocessor: GatekeeperNodePostprocessor) -> ContextChatEngine:
    """A ContextChatEngine with the gated memory and the covering postprocessor.

    MockEmbedding cannot rank, so the retriever returns every document on each call (as a
    generous ``similarity_top_k`` would); the postprocessor then keeps the ones the question needs.
    """
    return ContextChatEngine.from_defaults(
        index.as_retriever(similarity_top_k=len(DOCS)),
        llm=llm,
        memory=memory,
        node_postprocessors=[postprocessor],
        system_prompt=SYSTEM_PROMPT,
    )


def build_memory() -> GatekeeperMemory:
    return GatekeeperMemory.from_defaults(token_limit=HISTORY_TOKEN_LIMIT, session_id="demo")


def build_postprocessor(index: VectorStoreIndex) -> GatekeeperNodePostprocessor:
    """Term weights from the whole index (``build_corpus``), not just the retrieved nodes."""
    return GatekeeperNodePostprocessor(token_budget=NODE_TOKEN_BUDGET, corpus=build_corpus(index))


# -- seeing what the LLM and the retriever receive ---------------------------------------------
class Recorder(BaseEventHandler):
    """An instrumentation event handler: every LLM chat call's messages and every retrieval's
    nodes, whatever the LLM is.  :meth:`attach` adds it to LlamaIndex's root dispatcher."""

    llm_calls: list[list[ChatMessage]] = Field(default_factory=list)
    retrievals: list[list[NodeWithScore]] = Field(default_factory=list)

    @classmethod
    def class_name(cls) -> str:
        return "QuickstartRecorder"

    def handle(self, event: BaseEvent, **kwargs: Any) -> None:
        if isinstance(event, LLMChatStartEvent):
            self.llm_calls.append(list(event.messages))
        elif isinstance(event, RetrievalEndEvent):
            self.retrievals.append(list(event.nodes))

    @classmethod
    def attach(cls) -> "Recorder":
        """A new recorder on the root dispatcher (replacing an earlier one: cells can be re-run)."""
        dispatcher = get_dispatcher()
        dispatcher.event_handlers = [h for h in dispatcher.event_handlers if not isinstance(h, cls)]
        recorder = cls()
        dispatcher.add_event_handler(recorder)
        return recorder


_count = None


def count_tokens(text: str) -> int:
    """Tokens of a text (tiktoken cl100k_base, offline)."""
    global _count
    if _count is None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            _count = resolve_token_counter(None)
    return _count(text)


def history_sent(llm_call: Sequence[ChatMessage]) -> list[ChatMessage]:
    """A call's chat history: without the leading system messages (system prompt and retrieved
    context) and the current question."""
    body = list(llm_call)
    while body and body[0].role == MessageRole.SYSTEM:
        body.pop(0)
    return body[:-1]


def doc_name(node: NodeWithScore) -> str:
    return node.node.node_id


@dataclass
class Call:
    """One engine call: what was stored, sent, retrieved and kept."""

    number: int
    question: str
    decision: str  # the topic gate's verdict: continue, switch or return
    stored: list[ChatMessage]
    sent: list[ChatMessage]
    retrieved: list[NodeWithScore]
    kept: list[NodeWithScore]
    why: list[NodeExplanation]
    answer: str
    llm_call: list[ChatMessage] = field(default_factory=list)


def ask(engine: ContextChatEngine, memory: GatekeeperMemory, postprocessor: GatekeeperNodePostprocessor,
        recorder: Recorder, question: str) -> Call:
    """One ``engine.chat(question)``, with what the LLM and the retriever really saw."""
    stored = memory.get_all()
    decision = memory.explain(question).decision if stored else "-"
    response = engine.chat(question)
    llm_call, retrieved = recorder.llm_calls[-1], recorder.retrievals[-1]
    return Call(len(questions(stored)) + 1, question, decision, stored, history_sent(llm_call), retrieved,
                response.source_nodes, postprocessor.explain(retrieved, question), str(response), llm_call)


# -- labels and summaries -----------------------------------------------------------------------
def questions(messages: Sequence[ChatMessage]) -> list[str]:
    return [m.content or "" for m in messages if m.role == MessageRole.USER]


def questions_in(sent: Sequence[ChatMessage], stored: Sequence[ChatMessage]) -> str:
    """Which earlier questions (Q1, Q2, ...) a call's history holds."""
    numbers = {text: f"Q{i}" for i, text in enumerate(questions(stored), 1)}
    found = [numbers.get(m.content or "", "?") for m in sent if m.role == MessageRole.USER]
    return ", ".join(found) or "none"


def message_labels(messages: Sequence[Message]) -> dict[str, str]:
    """Core message id -> "Q1" for a question, "A1" for its answer."""
    labels, turn = {}, 0
    for m in messages:
        turn += m.role == "user"
        labels[m.id] = f"{'Q' if m.role == 'user' else 'A'}{turn}"
    return labels


def sizes(messages: Iterable[ChatMessage]) -> str:
    messages = list(messages)
    return f"{len(messages)} msgs / {sum(count_tokens(m.content or '') for m in messages)} tok"


def node_sizes(nodes: Sequence[NodeWithScore]) -> str:
    return f"{len(nodes)} page{'s' * (len(nodes) != 1)} / {sum(count_tokens(n.node.get_content()) for n in nodes)} tok"


def dropped(call: Call) -> str:
    """The dropped documents, grouped by reason: "irrelevant: a, b; no new coverage: c"."""
    names = {n.node.node_id: doc_name(n) for n in call.retrieved}
    groups: dict[str, list[str]] = {}
    for e in call.why:
        if not e.kept:
            groups.setdefault(e.reason, []).append(names[e.node_id])
    return "; ".join(f"{reason}: {', '.join(found)}" for reason, found in groups.items()) or "none"


def compact_diff(diff: Any, labels: dict[str, str]) -> str:
    """Only the messages a change touched, old text then new (``str(diff)`` is the unified diff)."""
    lines = []
    for d in diff.messages:
        message = d.after or d.before
        lines.append(f"{labels.get(d.id, '?')} ({message.role}, {d.status})")
        if d.before is not None:
            lines.append(f"  - {d.before.content}")
        if d.after is not None:
            lines.append(f"  + {d.after.content}")
    return "\n".join(lines) or "(no change)"


def mentions(messages: Sequence[ChatMessage], *phrases: str) -> str:
    text = "\n".join(m.content or "" for m in messages)
    return ", ".join(f"{p!r}: {'yes' if p in text else 'no'}" for p in phrases)


HISTORY_COLUMNS = ("#", "question", "gate", "history stored", "history sent", "earlier questions sent")
NODE_COLUMNS = ("#", "retrieved", "kept", "pages kept", "dropped (reason)")


def history_row(call: Call) -> list[str]:
    return [str(call.number), call.question, call.decision, sizes(call.stored), sizes(call.sent),
            questions_in(call.sent, call.stored)]


def node_row(call: Call) -> list[str]:
    return [str(call.number), node_sizes(call.retrieved), node_sizes(call.kept),
            ", ".join(doc_name(n) for n in call.kept) or "none", dropped(call)]


def explain_lines(call: Call) -> str:
    """``postprocessor.explain(nodes, question)`` with document names instead of node ids."""
    names = {n.node.node_id: doc_name(n) for n in call.retrieved}
    width = max(len(v) for v in names.values())
    return "\n".join(f"{names[e.node_id]:<{width}}  {e.coverage}" for e in call.why)


def prompt_lines(llm_call: Sequence[ChatMessage], limit: int = 100) -> str:
    """A call's messages, one line each (the system message: just which documents it holds)."""
    lines = []
    for m in llm_call:
        text = m.content or ""
        if m.role == MessageRole.SYSTEM:
            docs = [name for name, body in DOCS if body in text]
            text = f"[system prompt + context: {', '.join(docs) or 'no documents'}]"
        lines.append(f"{m.role.value:>9}: {short(text, limit)}")
    return "\n".join(lines)


# -- output -----------------------------------------------------------------------------------
# -- part 1: the conversation -------------------------------------------------------------------
ENGINE_CODE = f"""memory = GatekeeperMemory.from_defaults(token_limit={HISTORY_TOKEN_LIMIT})
postprocessor = GatekeeperNodePostprocessor(token_budget={NODE_TOKEN_BUDGET}, corpus=build_corpus(index))
engine = ContextChatEngine.from_defaults(index.as_retriever(similarity_top_k={len(DOCS)}), llm=llm,
                                         memory=memory, node_postprocessors=[postprocessor])"""


def part_conversation(ui: Printer, engine: ContextChatEngine, memory: GatekeeperMemory,
                      postprocessor: GatekeeperNodePostprocessor, recorder: Recorder) -> list[Call]:
    ui.section("1. A chat engine with GatekeeperMemory and GatekeeperNodePostprocessor")
    ui.say(ENGINE_CODE)
    ui.say(f"The index: {len(DOCS)} handbook pages ({', '.join(name for name, _ in DOCS)}). MockEmbedding "
           "cannot rank, so the retriever returns all of them on every call; the postprocessor decides.")
    calls = [ask(engine, memory, postprocessor, recorder, question) for question, _ in TURNS]
    ui.table("History: stored in the memory vs sent to the LLM (captured from the LLM's input)",
             HISTORY_COLUMNS, [history_row(c) for c in calls], shorten=("question",))
    ui.table(f"Documents: retrieved vs kept by the postprocessor (token_budget={NODE_TOKEN_BUDGET})",
             NODE_COLUMNS, [node_row(c) for c in calls], shorten=("question",))
    third = calls[2]
    ui.panel(f"postprocessor.explain(nodes, Q3): {third.question}", explain_lines(third))
    ui.panel("Q3's LLM call, message by message", prompt_lines(third.llm_call))
    ui.say(f"Stored now: {sizes(memory.get_all())}, every question and answer (the memory is never cut).\n"
           f"Earlier questions sent: with Q3 (back to Redis) {questions_in(calls[2].sent, calls[2].stored)}, "
           f"with Q4 (coffee again) {questions_in(calls[3].sent, calls[3].stored)}.")
    return calls


# -- part 2: editing the memory -----------------------------------------------------------------
def part_edit(ui: Printer, engine: ContextChatEngine, memory: GatekeeperMemory,
              postprocessor: GatekeeperNodePostprocessor, recorder: Recorder, online: bool) -> None:
    ui.section("2. Editing the memory in natural language: memory.edit(...), memory.undo()")
    editor = None if online else ideal_editor(memory.transcript.messages, EDIT_SUBSTITUTIONS)
    ui.say(f'revision = memory.edit("{EDIT}", model={"None (default: Gemini)" if online else "editor"})')
    try:
        revision = memory.edit(EDIT, model=editor)
    except (EditError, ModelUnavailableError) as exc:  # online only: no network, quota, unusable reply
        ui.panel("The edit failed (nothing was changed)", f"{type(exc).__name__}: {exc}\n"
                 "Run with --offline for the scripted editor.", style="red")
        return
    labels = message_labels(memory.transcript.messages)
    ui.diff(f"memory.diff({revision.parent}, {revision.number}): the messages the edit changed",
            compact_diff(memory.diff(revision.parent, revision.number), labels))

    call = ask(engine, memory, postprocessor, recorder, AFTER_EDIT_TURN[0])
    ui.table("The next call", HISTORY_COLUMNS, [history_row(call)], shorten=("question",))
    ui.panel("History sent with it (the revised text)",
             "\n".join(f"{m.role.value:>9}: {short(m.content or '', 100)}" for m in call.sent)
             + f"\n\nmentions {mentions(call.sent, '2 minutes', '30 seconds')}")
    ui.say(f"Documents kept: {', '.join(doc_name(n) for n in call.kept)}. Answer: {short(call.answer, 110)}")

    undo = memory.undo()
    ui.diff(f"memory.undo() -> revision {undo.number}, reverting revision {undo.target}",
            compact_diff(memory.diff(undo.parent, undo.number), labels))
    would_send = memory.get(input=AFTER_EDIT_TURN[0])
    ui.say(f"First message again: {memory.get_all()[0].content!r}\n"
           f"memory.get(input=<the last question>) would now send {mentions(would_send, '2 minutes', '30 seconds')}.\n"
           f"Stored: {sizes(memory.get_all())} (the question asked after the edit is kept); "
           f"record(): {len(memory.record())} messages as originally written; "
           f"revisions: {', '.join(r.kind for r in memory.history()[-3:])} (the last three).")


# -- main ---------------------------------------------------------------------------------------
def use_gemini(offline: bool) -> bool:
    return not offline and bool(os.environ.get("GOOGLE_API_KEY"))


def banner(ui: Printer, online: bool, llm: LLM) -> None:
    scripted_chat = isinstance(llm, ScriptedChatLLM)
    chat = ("The chat LLM is SCRIPTED: a fake with canned answers that records its prompts"
            if scripted_chat else f"The chat LLM is {GEMINI} (llama-index-llms-google-genai)")
    if online:
        text = (f"Edits use the adapter's default editor, {GEMINI} (GOOGLE_API_KEY is set). {chat}"
                + (" (no LlamaIndex Gemini integration is installed; it is not a dependency)." if scripted_chat else ".")
                + " Embeddings: MockEmbedding. Pass --offline for the scripted editor.")
    else:
        text = (f"Models: SCRIPTED (offline). {chat}; the editor replies with the ideal patch for the intended "
                "change; embeddings are MockEmbedding. The run is deterministic and needs no key. "
                f"Set GOOGLE_API_KEY to edit with {GEMINI}.")
    ui.panel("llamaindex_gatekeeper quickstart", text, style="green" if online else "yellow")


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
    llm, index = chat_llm(online), build_index()
    memory, postprocessor = build_memory(), build_postprocessor(index)
    engine, recorder = build_engine(index, llm, memory, postprocessor), Recorder.attach()
    banner(ui, online, llm)
    part_conversation(ui, engine, memory, postprocessor, recorder)
    part_edit(ui, engine, memory, postprocessor, recorder, online)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Agent middleware for LangChain 1.x ``create_agent``: gated context and "/edit " commands.

Example::

    agent = create_agent(model, tools, middleware=[GatekeeperMiddleware(token_budget=3000)],
                         checkpointer=InMemorySaver())
    agent.invoke({"messages": [HumanMessage("/edit it was Iceland, not Ireland")]}, config)
    undo_thread(agent, config)

Each model call gets the gated view of its messages (:mod:`.agent_view`): the system
prompt, summary messages, the earlier turns the current query needs (tool-call pairs
intact, starting on a user message, a pinned summary or the greeting the thread opens with) and the
current turn whole: from the first message of
the run's input (all of it: a question, then the image it is about), whose id (with the
id of the input's last message) a ``before_agent`` hook records in the private state key
:data:`~langchain_gatekeeper.threads.TURN_KEY` (checkpointed with the thread, so any worker
resuming the run reads it), to the end.  Gating never touches the stored messages: only the
request sent to the model is narrowed.

A user message starting with ``edit_prefix`` (default ``"/edit "``) that is the last
message of the current run's input (the invocation's own input, recorded by a ``before_agent`` hook in the
private state key :data:`~langchain_gatekeeper.threads.TURN_KEY`) is routed to an
edit of the thread's earlier messages instead of the main model; a message a tool
adds through a ``Command`` is never routed, whatever it says: the middleware
answers with a short confirmation and the diff, and the edited messages reach the
graph state in the same step, through an ``ExtendedModelResponse`` whose ``Command``
updates ``messages`` (same id replaces, ``RemoveMessage`` deletes) and the edit log
that :func:`~langchain_gatekeeper.threads.undo_thread` reads.  The reply is the run's answer:
in an agent with a ``response_format`` an ``after_model`` hook ends the run on it (create_agent
would otherwise ask the main model again for the structured response, handing it the command
as the question); elsewhere the run ends on it anyway (it calls no tool).
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, cast

from langchain.agents.middleware.types import (
    AgentMiddleware,
    ExtendedModelResponse,
    ModelRequest,
    ModelResponse,
    hook_config,
)
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage
from langgraph.graph.message import REMOVE_ALL_MESSAGES
from langgraph.runtime import Runtime
from langgraph.types import Command

from context_gatekeeper import EditOptions, GatekeeperError, GateOptions, InvalidInputError

from .agent_view import THREAD_INDEX_CHARS, GatedView, _asks, _instructions_before, adapter_options, is_summary
from .models import given_edit_model
from .threads import EDIT_MARK, EDITS_KEY, TURN_KEY, EditPlan, GatekeeperState, aplan_edit, plan_edit

__all__ = ["GatekeeperMiddleware"]

Handler = Callable[[ModelRequest], ModelResponse]
AsyncHandler = Callable[[ModelRequest], Awaitable[ModelResponse]]


def edit_instruction(text: str, prefix: str | None) -> str | None:
    """The instruction of an edit command (``""`` for a bare command), or ``None`` when
    ``text`` is not one.  The prefix is matched ignoring case, and its trailing space may
    be any whitespace or the end of the text: ``"/edit"``, ``"/Edit ..."`` and
    ``"/edit\n..."`` are commands (a chat box strips trailing spaces; a phone capitalises),
    ``"/editor"`` is not."""
    if prefix is None:
        return None
    text, word = text.lstrip(), prefix.strip()
    head = text[:len(word)]
    if head.casefold() != word.casefold():
        return None
    rest = text[len(word):]
    if prefix[-1:].isspace() and rest and not rest[0].isspace():
        return None  # "/editor": another word
    return rest.strip()


def _run_input(messages: Sequence[BaseMessage], previous: tuple[str, str] | None = None) -> tuple[str, str] | None:
    """The ids of the first and the last message of a run's input, read from the thread's
    messages as the run starts (the input is added at the end): the human messages at the end
    (a question, then an image or a file it is about; one invoke's input is often several),
    with the system messages right before them (an instruction sent with the question,
    ``[SystemMessage("Reply in French only."), HumanMessage(...)]``: standing past the last run's
    messages as this one starts, they came with its input; one an earlier input opened with
    stands before that run's answer, a reminder of the turn before it), ``None`` when the last
    message is no human message.  ``previous`` is what the thread's last run
    recorded (:func:`_recorded`): when its last message is one of those human messages, that
    run left its input unanswered (it failed before the model answered) and this run's input
    starts right after it (the old input stays earlier, unanswered messages, gated within the
    budget), unless it is the last message: a run retried with no new input, whose input is
    the previous run's again."""
    first = end = len(messages)
    while first and _asks(messages[first - 1]):
        first -= 1
    if first == end:
        return None
    first = _instructions_before(messages, first)
    if previous is not None:
        at = {messages[i].id: i for i in range(first, end)}
        ended = at.get(previous[1])
        if ended is not None and ended < end - 1:
            first = ended + 1
        elif ended is not None:  # a retry: the previous input again (its last message alone if its first is gone)
            first = at.get(previous[0], ended)
    started, last = messages[first].id, messages[end - 1].id
    return None if started is None or last is None else (started, last)


def _recorded(value: Any) -> tuple[str, str] | None:
    """The ``(first, last)`` message ids of the run input a :data:`TURN_KEY` value records
    (:func:`_record`): the id alone of an input of one message (as a thread checkpointed before
    the last id was recorded holds it too), ``[first, last]`` for several; ``None`` for none."""
    if isinstance(value, str):
        return value, value
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(isinstance(v, str) for v in value):
        return value[0], value[1]
    return None


def _record(run_input: tuple[str, str] | None) -> str | list[str] | None:
    """The :data:`TURN_KEY` value for a run's input (``(first, last)`` ids, :func:`_run_input`):
    the id alone when it is one message (most runs), ``[first, last]`` when it is several."""
    if run_input is None:
        return None
    started, ended = run_input
    return started if started == ended else [started, ended]


def _routed(message: BaseMessage) -> bool:
    """Whether ``message`` is the edit route's reply (:meth:`GatekeeperMiddleware._answer`)."""
    return isinstance(message, AIMessage) and not message.tool_calls and message.additional_kwargs.get("lc_source") == EDIT_MARK


class GatekeeperMiddleware(AgentMiddleware[GatekeeperState, Any, Any]):
    """Send the model only the context the current query needs; route "/edit " to an edit.

    The gate's settings come as keywords or as one checked
    :class:`~context_gatekeeper.GateOptions` (``options=``), not both; either way they are
    validated here, once, before anything is built.

    List a middleware that sets or extends the system prompt per call (``@dynamic_prompt``,
    ``TodoListMiddleware``) before this one: the request this one is handed is the one it
    prices, and a prompt set inside it (by a middleware listed after it) reaches the model
    unpriced, over ``token_budget`` by its size.  It cannot warn: only the model's answer
    comes back through ``wrap_model_call``, never the request the model got.

    Args:
        options: the gate's settings as one :class:`~context_gatekeeper.GateOptions`
            (its ``on_overflow`` left ``None`` means ``"keep_pinned"`` here).
        token_budget: tokens the system prompt, summaries and selected earlier turns may
            use, each message counted with its ``message_overhead`` (the current turn,
            from the user's own last message on, tool loop and tool-delivered messages
            included, is not counted: it is always sent whole); an ``int >= 0``, default 4000.
        on_overflow: "keep_pinned" (default: send the pinned content and the current turn
            only, and log a warning once per thread) or "raise" (:class:`BudgetError`), when
            the pinned content alone is over ``token_budget``.
        edit_prefix: a user message starting with it, when it is the run's own input,
            is an edit instruction (case ignored; a trailing space also matches any
            whitespace or the end of the message); ``None`` turns the route off.
        model: the editing model for the route (any chat model, or a core model);
            ``None`` means Gemini 2.5 Flash, resolved at the first edit.
        llm: alias of ``model``.
        edit_options: routed edits' settings as one :class:`~context_gatekeeper.EditOptions`;
            ``strategy`` and ``allow_large_deletion`` override its fields.
        strategy: "patch" (default) or "rewrite" for routed edits.
        allow_large_deletion: let a routed edit destroy more of the text than the
            deletion guard allows.
        max_threads: how many threads' indexes to keep in memory (LRU).
        max_thread_chars: the most characters the kept thread indexes may hold together (the
            texts each indexed, each turn counted 500 more; default
            :data:`~langchain_gatekeeper.agent_view.THREAD_INDEX_CHARS`, 32 million, some
            420 MB of chat): an index costs several times its text, so threads that read long
            tool outputs or pasted logs are evicted sooner (least recently used first; never one
            a call is using).  :meth:`forget_thread` drops a thread's index at once.
        embedder: turns on the semantic channel: a LangChain ``Embeddings``, a LlamaIndex
            ``BaseEmbedding``, or a callable ``list[str] -> list[list[float]]`` (numpy
            needed).  Each turn is embedded once; vectors are kept in memory by content
            hash, shared by all threads of this middleware (a rebuilt or new thread index
            embeds nothing it has seen), and each model call makes at most one embedding
            call, for the query.  The async agent path awaits the embedder's async twins.
            ``None`` (default): lexical selection, exactly as without it.
        embed_timeout: seconds one embedding call may take before the view is selected
            lexically (``Selection.semantic_fallback``); ``None``: wait.
        **gatekeeper_options: any other :class:`~context_gatekeeper.GateOptions` field
            (``token_counter``, ``message_overhead``, ``params``, ``preset``,
            ``vector_cache``) or SelectionParams field.  A ``token_counter`` counts ONE
            text; it is tried on a sample text here, and one that fails on it (a
            ``trim_messages`` counter taking messages) raises
            :class:`~context_gatekeeper.InvalidInputError`.
    """

    state_schema = GatekeeperState

    def __init__(
        self,
        *,
        options: GateOptions | None = None,
        token_budget: int | None = None,
        on_overflow: str | None = None,
        edit_prefix: str | None = "/edit ",
        model: Any = None,
        llm: Any = None,
        edit_options: EditOptions | None = None,
        strategy: str | None = None,
        allow_large_deletion: bool | None = None,
        max_threads: int = 1024,
        max_thread_chars: int = THREAD_INDEX_CHARS,
        embedder: Any = None,
        embed_timeout: float | None = None,
        **gatekeeper_options: Any,
    ) -> None:
        super().__init__()
        # every setting checked before anything is built: a refused one raises here
        gate = GateOptions.of(
            options, token_budget=token_budget, on_overflow=on_overflow, embedder=embedder,
            embed_timeout=embed_timeout, **gatekeeper_options,
        )
        edit_model = given_edit_model(model, llm)
        if edit_prefix is not None and (not isinstance(edit_prefix, str) or not edit_prefix.strip()):
            raise InvalidInputError(f"edit_prefix must be a non-blank string or None, got {edit_prefix!r}")
        settings = EditOptions.of(edit_options, strategy=strategy, allow_large_deletion=allow_large_deletion)
        # each turn text counted once, by any thread or middleware with this counter
        gate, self.vectors = adapter_options(gate)
        """Turn vectors shared by every thread's index (``None`` without an embedder, or with
        the ``vector_cache`` given in the options)."""
        self.options = gate
        """The checked gate settings every thread's gatekeeper is built with."""
        self.edit_prefix = edit_prefix
        self.edit_model = edit_model
        self.edit_options = settings
        self.views = GatedView(gate, max_threads=max_threads, max_thread_chars=max_thread_chars)

    def forget_thread(self, thread_id: Any) -> None:
        """Drop the index kept for ``thread_id`` (a conversation that ended, a thread deleted from
        the checkpointer): its memory is freed now instead of when the least recently used go.
        The thread's next model call, if any, builds it anew from the thread's messages; a call
        using it meanwhile ends with it.  An unknown thread: nothing happens."""
        self.views.forget(thread_id)

    async def aforget_thread(self, thread_id: Any) -> None:
        """Async :meth:`forget_thread` (in-memory work: nothing to await)."""
        self.views.forget(thread_id)

    # -- gating ---------------------------------------------------------------------------
    @staticmethod
    def _scope(request: ModelRequest) -> dict[str, Any]:
        """The view's keywords for ``request``: its thread, its system prompt's text, and the id
        of the first message of its run's input (:meth:`before_agent` records it in the state)."""
        info = getattr(request.runtime, "execution_info", None)
        system = request.system_message.text if request.system_message is not None else None
        recorded = _recorded((request.state or {}).get(TURN_KEY))
        return {"thread": getattr(info, "thread_id", None), "system_prompt": system,
                "run_input": None if recorded is None else recorded[0]}

    # The view is some of the request's own message objects, in order (typed list[BaseMessage]):
    # each is an AnyMessage, as ModelRequest.messages needs, which the checker cannot see.
    def gated(self, request: ModelRequest) -> ModelRequest:
        """The request with its messages narrowed to the gated view."""
        view = self.views.view(request.messages, **self._scope(request))
        return request.override(messages=cast("list[AnyMessage]", view))

    async def agated(self, request: ModelRequest) -> ModelRequest:
        """:meth:`gated` with the embedding calls awaited (the event loop is never blocked)."""
        view = await self.views.aview(request.messages, **self._scope(request))
        return request.override(messages=cast("list[AnyMessage]", view))

    # -- the edit route -------------------------------------------------------------------
    def _instruction(self, request: ModelRequest) -> str | None:
        """The edit instruction when the request's last message is an edit command that is the
        last message of this run's input (:func:`_run_input`, as :meth:`before_agent` recorded
        it; a message a tool added is never one)."""
        if self.edit_prefix is None or not request.messages:
            return None
        last = request.messages[-1]
        if not isinstance(last, HumanMessage) or is_summary(last) or last.id is None:
            return None
        recorded = _recorded((request.state or {}).get(TURN_KEY))
        if recorded is None or last.id != recorded[1]:
            return None
        return edit_instruction(last.text, self.edit_prefix)

    def _thread(self, request: ModelRequest) -> tuple[list[BaseMessage], list[dict[str, Any]], HumanMessage]:
        """The thread's stored messages with the command marked, the edit log's records, the marked command."""
        state: Mapping[str, Any] = request.state or {}
        messages = list(state.get("messages") or request.messages)
        command = messages[-1]
        marked = command.model_copy(
            update={"additional_kwargs": {**command.additional_kwargs, "lc_source": EDIT_MARK}}
        )
        return [*messages[:-1], marked], list(state.get(EDITS_KEY) or []), marked

    @staticmethod
    def _answer(text: str, update: list[BaseMessage] | None = None, log: list[dict[str, Any]] | None = None) -> ExtendedModelResponse:
        reply = AIMessage(content=text, id=f"gk-{uuid.uuid4().hex[:12]}", additional_kwargs={"lc_source": EDIT_MARK})
        values: dict[str, Any] = {"messages": list(update or [])}
        if values["messages"] and getattr(values["messages"][0], "id", None) == REMOVE_ALL_MESSAGES:
            values["messages"].append(reply)  # a whole-list rewrite must keep the reply too
        if log is not None:
            values[EDITS_KEY] = log
        return ExtendedModelResponse(model_response=ModelResponse(result=[reply]), command=Command(update=values))

    def _reply(self, plan: EditPlan | None, error: Exception | None, marked: HumanMessage) -> ExtendedModelResponse:
        if error is not None:
            return self._answer(f"The edit failed and nothing was changed: {error}", [marked])
        assert plan is not None
        entry = plan.entry
        if not entry.changed:
            return self._answer("Nothing to change: the conversation already says that.", [marked])
        diff = entry.diff
        summary = f"{len(diff.changed)} changed, {len(diff.added)} added, {len(diff.removed)} removed"
        text = f"Edited the conversation ({summary}). Undo with undo_thread().\n\n```diff\n{diff}\n```"
        update = plan.update if plan.update[:1] and plan.update[0].id == REMOVE_ALL_MESSAGES else [marked, *plan.update]
        return self._answer(text, update, plan.log)

    @staticmethod
    def _usage(marked: HumanMessage, prefix: str) -> ExtendedModelResponse:
        return GatekeeperMiddleware._answer(f"Say what to change after {prefix.strip()!r}, e.g. {prefix}it was Iceland, not Ireland.", [marked])

    # -- hooks ----------------------------------------------------------------------------
    def before_agent(self, state: GatekeeperState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Record in the state (a private key, checkpointed with the thread) the ids of the first
        and the last message of this run's input (:func:`_run_input`; the id alone when it is
        one message: :func:`_record`), or ``None`` for a run that starts with none (a resume
        with no new message).  The gated view's current turn starts at its first, on any
        worker that resumes the run: the whole input (a question, then the image it is about;
        an instruction sent before the question as a ``SystemMessage``) is sent and never
        charged to the budget, and a human message added later in the run
        (by a tool, or by a middleware that asks the model again) never takes the question's
        place; only the input's last message may be routed to an edit.  Its last tells the next
        run where a failed run's input ended (its own input starts after it)."""
        recorded = state.get(TURN_KEY)
        started = _record(_run_input(state.get("messages") or [], _recorded(recorded)))
        return None if recorded == started else {TURN_KEY: started}

    async def abefore_agent(self, state: GatekeeperState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Async :meth:`before_agent`."""
        return self.before_agent(state, runtime)

    @hook_config(can_jump_to=["end"])
    def after_model(self, state: GatekeeperState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """End the run on the edit route's reply in an agent with a ``response_format``.

        There, ``create_agent`` loops from the model step back to the model until a structured
        response comes (when the agent has no other tool), so without this the main model would
        be asked about the edit command and its confirmation, and its answer would be the run's
        ``structured_response``.  A jump set by the route's own ``Command`` would not do: it
        lasts one step, so it is gone when any middleware's ``after_model`` hook runs between.
        The state tells such an agent: ``create_agent`` writes its ``structured_response`` key
        (``None`` for a step that made none) and no other agent's state has it.  Every other
        agent ends the run on the reply anyway (it calls no tool), and there nothing jumps:
        the ``after_model`` hooks of middlewares listed before this one still see the reply
        (hooks run in reverse order, and a jump skips those not run yet; list this middleware
        first for them to see it in an agent with a ``response_format`` too)."""
        messages = state.get("messages") or []
        if "structured_response" in state and messages and _routed(messages[-1]):
            return {"jump_to": "end"}
        return None

    @hook_config(can_jump_to=["end"])
    async def aafter_model(self, state: GatekeeperState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Async :meth:`after_model`."""
        return self.after_model(state, runtime)

    def wrap_model_call(self, request: ModelRequest, handler: Handler) -> ModelResponse | ExtendedModelResponse:
        """Route an edit command, or call the model with the gated view."""
        instruction = self._instruction(request)
        if instruction is None:
            return handler(self.gated(request))
        messages, log, marked = self._thread(request)
        if not instruction:
            return self._usage(marked, self.edit_prefix or "")
        try:
            plan = plan_edit(messages, log, instruction, self.edit_model, self.edit_options)
        except GatekeeperError as exc:
            return self._reply(None, exc, marked)
        return self._reply(plan, None, marked)

    async def awrap_model_call(self, request: ModelRequest, handler: AsyncHandler) -> ModelResponse | ExtendedModelResponse:
        """Async :meth:`wrap_model_call` (the editing model's async call)."""
        instruction = self._instruction(request)
        if instruction is None:
            return await handler(await self.agated(request))
        messages, log, marked = self._thread(request)
        if not instruction:
            return self._usage(marked, self.edit_prefix or "")
        try:
            plan = await aplan_edit(messages, log, instruction, self.edit_model, self.edit_options)
        except GatekeeperError as exc:
            return self._reply(None, exc, marked)
        return self._reply(plan, None, marked)

"""Speed of the LangChain list paths against what users would use instead (issue table rows).

Rows, each measured against its alternative in the same process, on LoCoMo text (the
longest conversation, 340 turns), CPU time of the process and wall time:

* ``gate_messages`` on a 340-message list growing by one turn per call (medians over the
  calls after the first) against ``trim_messages`` with a tiktoken counter cached per
  message text;
* ``gate_messages``'s first call on 680 messages (a new thread and a new token counter,
  so a new index and no kept count), best of a few, against ``trim_messages``'s first
  call with a fresh cache (its own per-text dict new, and the token counts the process keeps
  per text emptied just before it: every text it counts is encoded): once on texts new to
  the process (each try marks every text, so no per-text cache helps either side: what a
  fresh process pays) and once on texts seen before (what per-text caches save a new
  thread or a new gate), there against ``trim_messages`` whose per-text counts hold them
  too (until 2026-12-06 against its cold first call: a 0.9x that flattered); and once on a thread that held another 680-message conversation
  (its index replaced whole: removals and insertions each at once; texts new to the process);
* ``create_agent`` with :class:`GatekeeperMiddleware`: the first invoke on a thread whose
  checkpoint already holds 340 messages (a new middleware each time; texts new to the
  process, and seen before), and the steady state per invoke on that thread, against
  the same agent without the middleware.

Run ``python benchmarks/speed.py --lists`` (this section with speed.py's own list table), or
``python benchmarks/speed_lists.py`` for these rows alone.  The machine may be shared:
figures are medians (steady state) or best of several (first calls).
"""

from __future__ import annotations

import gc
import itertools
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
BUDGET = 1000
CALLS = 30
FIRST_TRIES = 5  # best of: the machine may be shared


def _clock() -> tuple[int, int]:
    # the process's CPU time: LangGraph runs some of an invoke's work in worker threads
    return time.process_time_ns(), time.perf_counter_ns()


def _timed(fn: Callable[[], Any]) -> tuple[float, float]:
    """(CPU ms, wall ms) of one call."""
    cpu0, wall0 = _clock()
    fn()
    cpu1, wall1 = _clock()
    return (cpu1 - cpu0) / 1e6, (wall1 - wall0) / 1e6


def _locomo() -> tuple[list[tuple[str, str]], list[str]]:
    from speed import longest_locomo_conversation  # a sibling: the script's directory is on sys.path

    real = longest_locomo_conversation(DATA)
    if real is None:
        raise SystemExit(f"no LoCoMo data in {DATA}")
    return real[1], real[2]


def cached_per_text(count: Callable[[str], int] | None = None) -> Callable[[list[Any]], int]:
    """``trim_messages``'s token counter as a careful user writes it: ``count`` (default tiktoken's
    ``cl100k_base``) cached in a dict per message text, 3 tokens of framing a message."""
    if count is None:
        from context_gatekeeper.tokens import tiktoken_counter

        count = tiktoken_counter("cl100k_base")
    cache: dict[str, int] = {}

    def counted(messages: list[Any]) -> int:
        total = 0
        for m in messages:
            text = m.text
            n = cache.get(text)
            if n is None:
                n = cache[text] = count(text)
            total += n + 3
        return total

    return counted


def _fresh_counter() -> Callable[[str], int]:
    """A tiktoken counter that is a new object, so ``gate_messages`` keeps no index or count
    for it yet.  The counts per text are not new: every tiktoken counter of the process shares
    one cache per encoding (``tokens._counts_cache``), so a text counted before by any of them
    is not encoded again (:func:`_forget_counts` empties it)."""
    from context_gatekeeper.tokens import tiktoken_counter

    count = tiktoken_counter("cl100k_base")
    return lambda text: count(text)


def _forget_counts() -> None:
    """Empty the token counts the process keeps per text (``tiktoken_counter``'s cache, shared by
    every counter of the encoding, ``cached_per_text``'s included), as
    ``speed_postprocessor.py`` does between rounds: the next count of any text encodes it."""
    from context_gatekeeper.tokens import _counts_cache

    _counts_cache("cl100k_base").clear()


def _trim_first(messages: list[Any], seen: bool = False) -> tuple[float, float]:
    """(CPU ms, wall ms) of ``trim_messages``'s first call on ``messages`` with a fresh cache: a new
    per-text dict, and the process's counts per text emptied (``gate_messages``, timed before it
    on the same texts, counted them: without this every count would be a hit).  ``seen``: the
    texts are ones its counter has counted before (its per-text dict filled by an untimed call),
    the same head start the per-text caches give ``gate_messages`` on texts seen before."""
    from langchain_core.messages import trim_messages

    cached = cached_per_text()
    _forget_counts()
    if seen:
        cached(messages)
    gc.collect()
    return _timed(lambda: trim_messages(messages, max_tokens=BUDGET, token_counter=cached, strategy="last",
                                        include_system=True, start_on="human"))


def _messages(turns: list[tuple[str, str]]) -> list[Any]:
    from langchain_core.messages import AIMessage, HumanMessage

    return [m for user, assistant in turns for m in (HumanMessage(user), AIMessage(assistant))]


def _row(name: str, ours: list[tuple[float, float]], theirs: list[tuple[float, float]], pick: str, alt: str) -> dict[str, Any]:
    agg: Callable[[list[float]], float] = statistics.median if pick == "median" else min
    o_cpu, o_wall = agg([c for c, _ in ours]), agg([w for _, w in ours])
    t_cpu, t_wall = agg([c for c, _ in theirs]), agg([w for _, w in theirs])
    return {"path": name, "alternative": alt, "stat": pick, "ours_cpu_ms": o_cpu, "ours_wall_ms": o_wall,
            "alt_cpu_ms": t_cpu, "alt_wall_ms": t_wall, "ratio_cpu": o_cpu / t_cpu if t_cpu else float("inf"),
            "ratio_wall": o_wall / t_wall if t_wall else float("inf")}


def gate_messages_rows(turns: list[tuple[str, str]], queries: list[str]) -> list[dict[str, Any]]:
    """The growing-list row and the 680-message first-call row."""
    from langchain_core.messages import HumanMessage, SystemMessage, trim_messages

    from langchain_gatekeeper import gate_messages

    system = SystemMessage("You answer questions about this conversation.")
    history = _messages(turns)
    start = 340 - 2 * CALLS  # the list holds 340 messages after the last call

    def grown(k: int) -> list[Any]:
        return [system, *history[:start + 2 * k], HumanMessage(queries[k % len(queries)])]

    lists = [grown(k) for k in range(CALLS + 1)]
    counter = _fresh_counter()
    cached = cached_per_text()
    ours: list[tuple[float, float]] = []
    theirs: list[tuple[float, float]] = []
    gc.collect()
    for k, messages in enumerate(lists):
        o = _timed(lambda: gate_messages(messages, token_budget=BUDGET, token_counter=counter, thread="speed-lists"))
        t = _timed(lambda: trim_messages(messages, max_tokens=BUDGET, token_counter=cached, strategy="last",
                                         include_system=True, start_on="human"))
        if k:  # the first call of each is the first-call row's business
            ours.append(o)
            theirs.append(t)
    rows = [_row("gate_messages, 340-message list growing by one turn (per call)", ours, theirs, "median",
                 "trim_messages, tiktoken counter cached per text")]
    for cold in (True, False):
        firsts, trims = [], []
        for i in range(FIRST_TRIES):
            # cold: texts this process has never seen (each try marks them), so no per-text cache helps
            full = [system, *(_messages(_marked(turns, f"first-{i}")) if cold else history)[:680], HumanMessage(queries[i])]
            counter = _fresh_counter()
            gc.collect()
            firsts.append(_timed(lambda: gate_messages(full, token_budget=BUDGET, token_counter=counter,
                                                       thread=f"first-{cold}-{i}")))
            # cold: trim_messages' texts as new as gate_messages' were; warm: its counter has counted them
            trims.append(_trim_first(full, seen=not cold))
        what = "texts new to the process" if cold else "a new thread, texts seen before"
        alt = "trim_messages first call, fresh cache" if cold else "trim_messages, counts cached per text"
        rows.append(_row(f"gate_messages, first call on 680 messages ({what})", firsts, trims, "best", alt))
    # one thread (or none given) reused for another conversation: its index is replaced whole
    counter = _fresh_counter()
    gate_messages([system, *_messages(_marked(turns, "replaced-warm"))[:680], HumanMessage(queries[0])],
                  token_budget=BUDGET, token_counter=counter, thread="replaced")
    replaced, trims = [], []
    for i in range(FIRST_TRIES):
        full = [system, *_messages(_marked(turns, f"replaced-{i}"))[:680], HumanMessage(queries[i])]
        gc.collect()
        replaced.append(_timed(lambda: gate_messages(full, token_budget=BUDGET, token_counter=counter, thread="replaced")))
        trims.append(_trim_first(full))
    rows.append(_row("gate_messages, 680 new messages replacing another list on the same thread", replaced, trims,
                     "best", "trim_messages first call, fresh cache"))
    return rows


def _marked(turns: list[tuple[str, str]], mark: str) -> list[tuple[str, str]]:
    """``turns`` with every text made new (a short mark appended), lengths about the same."""
    return [(f"{user} ({mark})", f"{assistant} ({mark})") for user, assistant in turns]


def agent_rows(turns: list[tuple[str, str]], queries: list[str]) -> list[dict[str, Any]]:
    """First invoke on a 340-message thread, and steady state per invoke, with and without the middleware."""
    from langchain.agents import create_agent
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, HumanMessage
    from langgraph.checkpoint.memory import InMemorySaver

    from langchain_gatekeeper import GatekeeperMiddleware

    def thread_messages(source: list[tuple[str, str]]) -> list[Any]:
        out = _messages(source)[:340]
        for i, m in enumerate(out):
            m.id = f"m{i}"
        return out

    history = thread_messages(turns)

    def agent(middleware: bool) -> Any:
        # a new answer each call (one AIMessage object repeated has one id: the checkpoint would keep only the last)
        model = GenericFakeChatModel(messages=(AIMessage("Noted.") for _ in itertools.count()))
        extra = [GatekeeperMiddleware(token_budget=BUDGET, edit_prefix=None, token_counter=_fresh_counter())] if middleware else []
        return create_agent(model, [], middleware=extra, checkpointer=InMemorySaver())

    def seeded(middleware: bool, thread: str, messages: list[Any] | None = None) -> tuple[Any, dict[str, Any]]:
        a = agent(middleware)
        config = {"configurable": {"thread_id": thread}}
        a.update_state(config, {"messages": history if messages is None else messages})
        return a, config

    rows = []
    for cold in (True, False):
        first: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
        for i in range(FIRST_TRIES):
            messages = thread_messages(_marked(turns, f"agent-{i}")) if cold else history
            for middleware in (False, True):
                a, config = seeded(middleware, f"first-{i}", messages)
                gc.collect()
                first[middleware].append(_timed(lambda: a.invoke({"messages": [HumanMessage(queries[i])]}, config)))
        what = "texts new to the process" if cold else "texts seen before"
        rows.append(_row(f"create_agent + GatekeeperMiddleware, first invoke on a 340-message thread ({what})",
                         first[True], first[False], "best", "same agent without the middleware"))
    steady: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
    agents = {mw: seeded(mw, "steady") for mw in (False, True)}
    for mw, (a, config) in agents.items():
        a.invoke({"messages": [HumanMessage(queries[0])]}, config)
    gc.collect()
    for k in range(1, CALLS + 1):
        for mw, (a, config) in agents.items():
            steady[mw].append(_timed(lambda: a.invoke({"messages": [HumanMessage(queries[k % len(queries)])]}, config)))
    rows.append(_row("create_agent + GatekeeperMiddleware, steady state per invoke", steady[True], steady[False],
                     "median", "same agent without the middleware"))
    return rows


def rows() -> list[dict[str, Any]]:
    """Every row of this section (see the module docstring)."""
    turns, queries = _locomo()
    return gate_messages_rows(turns, queries) + agent_rows(turns, queries)


def table(results: list[dict[str, Any]]) -> Any:
    """The rows as a rich table."""
    from rich.table import Table

    t = Table(title="LangChain lists and the agent (LoCoMo conv-41): ours vs the alternative, CPU / wall ms")
    for column in ("path", "stat", "ours cpu", "alt cpu", "ratio cpu", "ours wall", "alt wall", "ratio wall", "alternative"):
        t.add_column(column, justify="left" if column in ("path", "alternative") else "right")
    for r in results:
        t.add_row(r["path"], r["stat"], f"{r['ours_cpu_ms']:.2f}", f"{r['alt_cpu_ms']:.2f}", f"{r['ratio_cpu']:.2f}x",
                  f"{r['ours_wall_ms']:.2f}", f"{r['alt_wall_ms']:.2f}", f"{r['ratio_wall']:.2f}x", r["alternative"])
    return t


if __name__ == "__main__":
    from rich.console import Console

    Console(width=200).print(table(rows()))

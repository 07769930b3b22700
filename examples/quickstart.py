"""Quickstart: watch context-gatekeeper choose the context of each turn.

The script replays a multi-topic chat (Chinese with English technical terms, and
English): a Redis lock discussion, an explicit switch to Python asyncio, a
"by the way" switch to Kafka, an unannounced switch to PostgreSQL, returns to
Redis and to Kafka, pronoun follow-ups ("它的异常", "what does it cost?") and a
last unannounced switch to Docker.  A turn is kept only with evidence that the
message needs it: its words, membership of the topic the message continues or
returns to, or resolving a pronoun; the budget is a ceiling, not a target.

Before each user message is added, it asks ``ContextGatekeeper.explain()`` which
earlier turns that message needs, and prints one row per turn: the gate's decision
(continue / switch / return), the turns kept, the tokens kept against the tokens of
the whole history, and why.  Then a summary of tokens sent with and without gating,
the topics (a topic recurs: its runs are the segments), and one detailed explanation
(each candidate turn's score parts, the reason it was kept or dropped, and the
structured evidence behind it).

Everything runs offline, without an API key or a model, in about a second::

    python examples/quickstart.py              # coloured table (needs rich)
    python examples/quickstart.py --plain      # plain text, for CI logs and pipes
    python examples/quickstart.py --budget 300 # a tighter token budget
    python examples/quickstart.py --detail 15  # explain turn 15 in detail

It runs from a checkout without installing the package.  Token counts use
tiktoken's ``cl100k_base`` loaded offline (from llama-index-core's bundled copy
when tiktoken has no cached one); without either, a documented estimate is used
and the script says so.
"""

from __future__ import annotations

import argparse
import sys
import unicodedata
import warnings
from pathlib import Path
from typing import Any

try:
    import context_gatekeeper  # noqa: F401  (installed, or already on sys.path)
except ImportError:  # a plain checkout: the core lives in <repo>/shared
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "shared"))

from context_gatekeeper import ContextGatekeeper, Selection, estimate_tokens

# (user, assistant) pairs, in order.  Turn ids are 1-based positions in this list.
CONVERSATION: list[tuple[str, str]] = [
    # -- Redis distributed locks -----------------------------------------------------
    (
        "Redis 分布式锁用 SET NX PX 实现，锁的 TTL 应该怎么设？",
        "TTL 要大于临界区的最长执行时间，再留出网络抖动和 GC 停顿的余量。常见做法是先设 30 秒，"
        "再用 watchdog 在持有期间定期续租，而不是把 TTL 设得很长。",
    ),
    (
        "watchdog 续租的间隔一般设多少？",
        "Redisson 默认 lockWatchdogTimeout 是 30 秒，每 10 秒（三分之一）续租一次。"
        "续租失败时要让业务尽快感知并中止，否则锁过期后会有两个持有者。",
    ),
    (
        "如果 Redis 发生主从切换，锁会不会丢？",
        "会。主节点写入锁后还没同步到 replica 就宕机，新主上没有这把锁，另一个客户端就能加锁成功，"
        "出现两个持有者。Redlock 或 fencing token 可以缓解这个问题。",
    ),
    (
        "fencing token 具体怎么用？",
        "每次加锁时从单调递增的计数器（比如 INCR）取一个 token，写共享存储时带上它；"
        "存储层拒绝比已见过的更小的 token，锁过期后的旧持有者就写不进去了。",
    ),
    # -- explicit switch: Python asyncio ---------------------------------------------
    (
        "换个话题，Python 的 asyncio.gather 和 TaskGroup 有什么区别？",
        "asyncio.gather 在一个任务失败时默认不取消其他任务；Python 3.11 的 TaskGroup 会取消组内其余任务，"
        "并把所有异常收集成一个 ExceptionGroup，是更安全的结构化并发。",
    ),
    (
        "它的异常要怎么捕获？",
        "用 except* 语法，例如 `except* ValueError as eg:`，按类型逐类处理 ExceptionGroup 里的子异常；"
        "普通的 except ValueError 捕获不到被包在组里的异常。",
    ),
    (
        "那超时呢？我想给整组任务设一个总超时。",
        "把 TaskGroup 放进 `async with asyncio.timeout(5):` 里即可：超时会取消组内所有任务，"
        "并在外层抛出 TimeoutError。",
    ),
    # -- "by the way": Kafka ---------------------------------------------------------
    (
        "By the way, we're moving our event pipeline to Kafka. How many partitions should a topic start with?",
        "Divide your peak throughput by what one consumer can process per partition and add headroom; "
        "12 or 24 is a common start. Partitions can be added later, but that changes which partition each key maps to.",
    ),
    (
        "What happens to consumer lag when the consumer group rebalances?",
        "With the eager protocol every consumer stops fetching during a rebalance, so lag spikes. "
        "The cooperative-sticky assignor (KIP-429) only moves the partitions that change owner, which keeps lag much flatter.",
    ),
    (
        "We're comparing Confluent Cloud with Amazon MSK for this.",
        "Confluent Cloud is fully managed, with Schema Registry and connectors built in; "
        "MSK runs Apache Kafka brokers inside your VPC, and you still handle sizing and upgrades.",
    ),
    (
        "What does it cost for roughly 50 MB/s of ingress?",
        "On MSK you pay per broker-hour plus storage: three m7g.large brokers come to roughly 600-700 USD a month before data transfer. "
        "Confluent bills throughput in eCKUs, so 50 MB/s usually lands well above that.",
    ),
    # -- unannounced switch: PostgreSQL ----------------------------------------------
    (
        "PostgreSQL 的 EXPLAIN ANALYZE 显示 Seq Scan 很慢，加了索引为什么没用上？",
        "通常是 planner 估计条件的选择性太低（命中行太多），或者统计信息过期；先跑 ANALYZE，"
        "再看 rows 估计是否准确。对列用了函数或类型不匹配也会让索引失效。",
    ),
    (
        "partial index 适合这种场景吗？查询总是带 status = 'pending'。",
        "很适合：`CREATE INDEX ... WHERE status = 'pending'` 只索引待处理的少量行，索引小、选择性高；"
        "查询条件必须包含同样的谓词，planner 才会用它。",
    ),
    # -- explicit returns --------------------------------------------------------------
    (
        "回到 Redis 的话题：锁续租失败的时候，业务代码该怎么处理？",
        "把续租失败当作失去锁：立即停止写共享资源，回滚或标记任务待重试；"
        "写入时再配合 fencing token 校验，防止已经失去锁的进程继续写。",
    ),
    (
        "Back to the Kafka question: does cooperative rebalancing work with Kafka Streams?",
        "Yes. Kafka Streams has used cooperative rebalancing since 2.4, and with static membership "
        "(group.instance.id) a restarting instance does not trigger a rebalance at all.",
    ),
    (
        "它能和 exactly-once 一起用吗？",
        "可以。设置 processing.guarantee=exactly_once_v2（需要 broker 2.5+），事务会覆盖 consume-process-produce 全过程，"
        "和 cooperative rebalancing 不冲突。",
    ),
    # -- unannounced switch: Docker ----------------------------------------------------
    (
        "Docker 镜像有 1.2GB，multi-stage build 能减多少？",
        "把编译工具链留在 builder 阶段，最终阶段只 COPY 产物和运行时依赖，Python 服务常能从 1GB 以上降到 150-250MB。",
    ),
    (
        "用 distroless 做 base image 有什么坑？",
        "distroless 里没有 shell 和包管理器，不能 docker exec 进去排查，需要用 debug 变体或 ephemeral container；"
        "另外要确认 glibc 版本和原生依赖兼容。",
    ),
]

DEFAULT_BUDGET = 600
DEFAULT_DETAIL = 14  # the explicit return to Redis
DECISION_STYLE = {"continue": "green", "switch": "bold yellow", "return": "bold magenta"}
COLUMNS = ("#", "user message", "decision", "kept turns", "tokens kept/all", "saved", "why")


# -- building the gatekeeper ---------------------------------------------------------
def token_counter_note() -> str:
    """Which token counter the default resolves to, without touching the network."""
    try:
        from context_gatekeeper.tokens import load_encoding

        if load_encoding("cl100k_base") is not None:
            return "tiktoken cl100k_base (offline copy)"
    except ImportError:
        pass
    return "estimate (no offline tiktoken encoding found; counts are approximate)"


def make_gatekeeper(budget: int) -> ContextGatekeeper:
    """The default counter; the estimate if tiktoken itself is not installed."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # token_counter_note() says it instead
        try:
            return ContextGatekeeper(token_budget=budget)
        except ImportError:
            return ContextGatekeeper(token_budget=budget, token_counter=estimate_tokens)


# -- the replay ----------------------------------------------------------------------
def replay(gk: ContextGatekeeper) -> list[Selection]:
    """Explain each user message against the history so far, then add its turn."""
    selections = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for user, assistant in CONVERSATION:
            selections.append(gk.explain(user))
            gk.add_turn(user, assistant)
    return selections


def decision_text(sel: Selection) -> str:
    """The gate's decision: continue, switch or return."""
    return sel.decision


def why(sel: Selection) -> str:
    """A short reason: cues found, the gate's measurements, and why turns were kept."""
    if not sel.tokens_total:
        return "first turn: no history yet"
    cues = sel.gate.cues
    parts = [f'cue "{c}"' for c in cues.switch + cues.returning + cues.reference[:1]]
    parts.append(f"overlap {sel.gate.overlap:.2f}, new {sel.gate.new_anchor_ratio:.2f}")
    if sel.decision == "return" and sel.matched_segment:
        parts.append(f"returns to turns {ids_text(sel.matched_segment)}")
    reasons: dict[str, list[int]] = {}
    for score in sel.scores:
        if score.kept:
            reasons.setdefault(score.reason, []).append(score.turn_id)
    parts += [f"{reason} {ids_text(sorted(ids))}" for reason, ids in reasons.items()]
    return "; ".join(parts)


def ids_text(ids: list[int] | tuple[int, ...]) -> str:
    return ",".join(map(str, ids)) if ids else "-"


def row(turn: int, user: str, sel: Selection) -> tuple[str, ...]:
    saved = f"{sel.tokens_saved / sel.tokens_total:.0%}" if sel.tokens_total else "-"
    return (
        str(turn),
        truncate(user, 34),
        decision_text(sel),
        ids_text(sel.turn_ids),
        f"{sel.tokens_kept}/{sel.tokens_total}",
        saved,
        why(sel),
    )


# -- text helpers (CJK characters take two columns) ----------------------------------
def width(text: str) -> int:
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def truncate(text: str, limit: int) -> str:
    if width(text) <= limit:
        return text
    out, used = "", 0
    for ch in text:
        if used + width(ch) > limit - 1:
            break
        out, used = out + ch, used + width(ch)
    return out + "…"


def pad(text: str, size: int) -> str:
    return text + " " * (size - width(text))


# -- output --------------------------------------------------------------------------
def print_plain(rows: list[tuple[str, ...]]) -> None:
    sizes = [max(width(r[i]) for r in [COLUMNS, *rows]) for i in range(len(COLUMNS))]
    for r in [COLUMNS, tuple("-" * s for s in sizes), *rows]:
        print("  ".join(pad(cell, size) for cell, size in zip(r, sizes)).rstrip())


def print_rich(rows: list[tuple[str, ...]], title: str) -> None:
    """A coloured table; below 130 columns the "why" goes under the user message."""
    from rich import box
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console()
    if not console.is_terminal:  # piped without --plain: don't squeeze to 80 columns
        console = Console(width=160)
    narrow = console.width < 130
    table = Table(title=title, box=box.SIMPLE_HEAVY, title_justify="left", show_lines=narrow)
    for name in COLUMNS[:-1] if narrow else COLUMNS:
        wraps = name in ("user message", "why")
        table.add_column(
            name, justify="right" if name in ("#", "tokens kept/all", "saved") else "left",
            no_wrap=not wraps, overflow="fold", ratio=1 if wraps else None,
        )
    for r in rows:
        cells = [escape(cell) for cell in r]
        style = "yellow" if r[2].startswith("switch (") else DECISION_STYLE[r[2]]
        cells[2] = f"[{style}]{cells[2]}[/]"
        if narrow:
            cells[1] += f"\n[dim]{cells.pop()}[/]"
        table.add_row(*cells)
    console.print(table)


def detail_lines(turn: int, sel: Selection) -> list[str]:
    """Every candidate's score parts and the reason it was kept or dropped."""
    g = sel.gate
    lines = [
        f"Turn {turn} in detail: {sel.query}",
        f"  decision {sel.decision}: overlap with the active topic {g.overlap:.2f}, "
        f"never-seen anchors {g.new_anchor_ratio:.2f}, seen elsewhere {g.elsewhere_ratio:.2f}, "
        f"best other topic {g.earlier_overlap:.2f}",
        f"  cues: switch {list(g.cues.switch)}, return {list(g.cues.returning)}, reference {list(g.cues.reference)}",
        f"  active topic: turns {ids_text(sel.active_segment)}; "
        f"returned to: turns {ids_text(sel.matched_segment)}; "
        f"kept {ids_text(sel.turn_ids)} ({sel.tokens_kept} of {sel.tokens_total} tokens, "
        f"coverage {sel.coverage:.0%})",
        "  turn  total = user + asst + exact + recency  cost  kept  reason           evidence",
    ]
    if not sel.scores:
        lines.append("     (no earlier turn shares an anchor with this query)")
    for s in sel.scores:
        lines.append(
            f"  {s.turn_id:>4}  {s.total:5.2f} = {s.user:4.2f} + {s.assistant:4.2f} + {s.exact:5.2f} + "
            f"{s.recency:7.2f}  {s.cost:>4}  {'yes' if s.kept else 'no':<4}  {s.reason:<15}  {evidence_text(s.evidence)}"
        )
    return lines


def evidence_text(evidence: Any) -> str:
    """The structured evidence in a few words."""
    parts = []
    if evidence.covered:
        parts.append("words " + ", ".join(evidence.covered[:5]) + (", …" if len(evidence.covered) > 5 else ""))
    if evidence.topic is not None:  # a topic's label is the 0-based position of the turn that opened it
        parts.append(f"topic from turn {evidence.topic + 1}")  # here turn ids are 1-based positions
    parts += [name for name in ("reference", "pinned", "fill") if getattr(evidence, name)]
    return "; ".join(parts) or "-"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budget", type=int, default=DEFAULT_BUDGET, help=f"token budget (default {DEFAULT_BUDGET})")
    parser.add_argument("--plain", action="store_true", help="plain text, no colours (for CI logs and pipes)")
    parser.add_argument(
        "--detail", type=int, default=DEFAULT_DETAIL, metavar="TURN",
        help=f"turn to explain in detail (default {DEFAULT_DETAIL}; 0 for none)",
    )
    args = parser.parse_args(argv)
    if args.budget < 1:
        parser.error("--budget must be a positive number of tokens")
    if not 0 <= args.detail <= len(CONVERSATION):
        parser.error(f"--detail must be between 0 and {len(CONVERSATION)}")

    plain = args.plain
    if not plain:
        try:
            import rich  # noqa: F401
        except ImportError:
            print("(rich is not installed: printing plain text)")
            plain = True

    gk = make_gatekeeper(args.budget)
    selections = replay(gk)
    rows = [row(i, user, sel) for i, ((user, _), sel) in enumerate(zip(CONVERSATION, selections), start=1)]
    title = f"Context kept for each user message (token budget {args.budget}; tokens: {token_counter_note()})"
    if plain:
        print(title + "\n")
        print_plain(rows)
    else:
        print_rich(rows, title)

    sent = sum(s.tokens_kept for s in selections)
    full = sum(s.tokens_total for s in selections)
    print(
        f"\nAcross {len(selections)} turns: {sent} history tokens sent with gating, {full} without "
        f"({1 - sent / full:.0%} saved)." if full else "\nNo history was sent."
    )
    print("Segments (turn ids): " + " | ".join(ids_text(s) for s in gk.segments()))
    print("Topics (every run of each): " + " | ".join(ids_text(ids) for ids in gk.topics().values()))
    if args.detail:
        print()
        print("\n".join(detail_lines(args.detail, selections[args.detail - 1])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

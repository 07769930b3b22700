"""Charts of the benchmark figures (PNG, matplotlib with the Agg backend).

Every chart is a pure function of the JSON that ``quality.py --json`` and
``speed.py --json`` write: the scripts call :func:`quality_charts` and
:func:`speed_charts` on the same dict when given ``--plot DIR``, and saved JSON
can be drawn again later without rerunning anything::

    python benchmarks/plots.py --quality quality.json --speed speed.json --out docs/img

matplotlib is imported only when a chart is drawn, so the benchmarks run without
it unless ``--plot`` is given.

Charts
------
* ``quality_recall_<dataset>.png`` (LoCoMo, CAsT 2020): recall against the share
  of history tokens kept, one labelled point per selector; *all turns* sits at
  (1, 1).  Up and to the left is better.  The x axis is logarithmic when the
  shares span more than a factor of ten.
* ``quality_switch_f1.png`` (TIAGE, CrossWOZ): topic-switch F1 of the library,
  *always switch* and *report as written*, with precision and recall under each bar.
* ``speed_latency.png``: median ``explain(query)`` latency against history length
  (both axes logarithmic), p95 as the top of each error bar, for the library and
  the report's algorithm as written, with the speed-up at each size.

Each chart carries its budget in the title and a footnote with the date the
figures were measured and the command that regenerates them.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

DATASET_TITLES = {
    "locomo": "LoCoMo",
    "cast2020": "TREC CAsT 2020",
    "tiage": "TIAGE",
    "crosswoz": "CrossWOZ",
}
LIBRARY = "context-gatekeeper"

# One colour per selector, the same in every chart (colour-blind-safe Okabe-Ito).
COLOURS = {
    LIBRARY: "#D55E00",
    f"{LIBRARY} (recall)": "#E69F00",
    "BM25 over turns": "#0072B2",
    "BM25, matching turns only": "#56B4E9",
    "recent turns that fit": "#009E73",
    "report as written": "#CC79A7",
    "all turns": "#555555",
    "always switch": "#999999",
}
MARKERS = {
    LIBRARY: "*",
    f"{LIBRARY} (recall)": "P",
    "BM25 over turns": "o",
    "BM25, matching turns only": "h",
    "recent turns that fit": "s",
    "report as written": "D",
    "all turns": "^",
    "always switch": "v",
}
SPEED_NAMES = {"library": LIBRARY, "baseline": "report as written"}

FIGSIZE = (7.6, 4.8)
DPI = 150


def _pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({
        "font.size": 10,
        "axes.titlesize": 12,
        "axes.titleweight": "bold",
        "axes.spines.top": False,
        "axes.spines.right": False,
        "axes.grid": True,
        "grid.alpha": 0.3,
        "savefig.facecolor": "white",
    })
    return plt


def footnote_text(meta: dict) -> str:
    """``Measured <date> · <command> · <machine>``, from the JSON's own fields."""
    parts = [f"Measured {meta.get('measured', 'on an unknown date')}"]
    if meta.get("command"):
        parts.append(meta["command"])
    if meta.get("machine"):
        parts.append(meta["machine"])
    return "  ·  ".join(parts)


def _new_figure(plt: Any, left: float = 0.1, legend_rows: int = 0) -> tuple[Any, Any]:
    """A figure with one axes, room above for the title lines and below for the footnote
    (and for ``legend_rows`` rows of a legend under the x axis)."""
    extra = 0.18 * legend_rows  # inches
    height = FIGSIZE[1] + extra
    fig, ax = plt.subplots(figsize=(FIGSIZE[0], height))
    fig.subplots_adjust(left=left, right=0.97, top=1 - 0.77 / height,
                        bottom=(0.91 + extra + (0.1 if legend_rows else 0)) / height)
    return fig, ax


def _titles(fig: Any, title: str, subtitle: str) -> None:
    """A bold title and a grey subtitle, left-aligned above the axes."""
    fig.text(0.01, 0.965, title, fontsize=12.5, fontweight="bold", ha="left", va="top")
    fig.text(0.01, 0.905, subtitle, fontsize=8.5, color="#444444", ha="left", va="top")


def _finish(fig: Any, meta: dict, path: Path) -> Path:
    """Add the footnote, save the PNG and close the figure."""
    fig.text(0.01, 0.012, footnote_text(meta), fontsize=7.5, color="#555555", ha="left", va="bottom")
    fig.savefig(path, dpi=DPI)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path


def half_label(half: str | None) -> str:
    """Which cases a quality payload's ``datasets`` hold, for the chart's subtitle
    (``--half both`` reports the validation half)."""
    return {"A": "tuning half A", "B": "validation half B", "both": "validation half B",
            "all": "all cases, unsplit"}.get(half or "", "cases of an unnamed split")


def _percent(share: float) -> str:
    """0.044 -> '4.4%', 0.565 -> '56%', 1.0 -> '100%'."""
    pct = 100 * share
    return f"{pct:.1f}%" if pct < 10 else f"{pct:.0f}%"


# --------------------------------------------------------------------------- quality


def _spread(positions: list[float], gap: float, low: float, high: float) -> list[float]:
    """Move sorted-by-value label positions apart to at least ``gap``, within [low, high]."""
    order = sorted(range(len(positions)), key=lambda i: positions[i])
    placed = [positions[i] for i in order]
    for _ in range(50):
        moved = False
        for k in range(1, len(placed)):
            if placed[k] - placed[k - 1] < gap:
                push = (gap - (placed[k] - placed[k - 1])) / 2
                placed[k - 1] -= push
                placed[k] += push
                moved = True
        shift_up = low - placed[0] if placed[0] < low else 0.0
        shift_down = placed[-1] - high if placed[-1] > high else 0.0
        placed = [p + shift_up - shift_down for p in placed]
        if not moved and not shift_up and not shift_down:
            break
    result = [0.0] * len(positions)
    for k, i in enumerate(order):
        result[i] = placed[k]
    return result


def recall_chart(dataset: str, budget: int, rows: dict[str, dict], meta: dict, path: Path) -> Path:
    """Recall against kept-token share, one labelled point per selector, figures in the legend."""
    plt = _pyplot()
    from matplotlib.ticker import FuncFormatter

    points = {name: (r["kept_share"], r["recall"]) for name, r in rows.items()
              if r.get("kept_share") is not None and r.get("recall") is not None}
    first = next(iter(rows.values()))
    legend_rows = math.ceil(len(points) / 2)
    fig, ax = _new_figure(plt, legend_rows=legend_rows)
    shares = [x for x, _ in points.values() if x > 0]
    log_x = bool(shares) and max(shares) / min(shares) > 10
    if log_x:
        ax.set_xscale("log")
        ax.set_xlim(min(shares) / 1.8, 1.8)
    else:
        ax.set_xlim(max(0.0, min(shares) - 0.15), 1.06)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: _percent(v)))
    ax.set_ylim(-0.04, 1.1)
    show_precision = bool(first.get("precision_cases"))
    for name, (x, y) in points.items():
        lib = name == LIBRARY
        figures = f"recall {y:.3f}, kept {_percent(x)}"
        if show_precision and rows[name].get("precision") is not None:
            figures += f", precision {rows[name]['precision']:.2f}"
        else:
            figures += " of the tokens"
        ax.scatter([x], [y], s=280 if lib else 75, marker=MARKERS.get(name, "o"),
                   color=COLOURS.get(name, "#333333"), zorder=3 if lib else 2,
                   edgecolor="black" if lib else "none", linewidth=0.6,
                   label=f"{name}: {figures}")

    # Names beside their points (to the left near the right edge), spread apart vertically
    # so close points (BM25 and recent turns on CAsT) stay readable; a thin line joins them.
    to_axes = ax.transAxes.inverted()
    axes_xy = {n: to_axes.transform(ax.transData.transform(p)) for n, p in points.items()}
    names = list(points)
    ys = _spread([axes_xy[n][1] for n in names], gap=0.075, low=0.05, high=0.97)
    for n, y in zip(names, ys):
        x_axes = axes_xy[n][0]
        right = x_axes <= 0.8
        ax.annotate(
            n, xy=points[n], xycoords="data",
            xytext=(x_axes + (0.03 if right else -0.03), y), textcoords="axes fraction",
            ha="left" if right else "right", va="center", fontsize=9,
            fontweight="bold" if n == LIBRARY else "normal",
            color="#333333" if n == "all turns" else COLOURS.get(n, "#333333"),
            arrowprops=dict(arrowstyle="-", color="#aaaaaa", linewidth=0.6, shrinkA=1, shrinkB=6),
        )
    ax.annotate("better", xy=(0.02, 0.98), xytext=(0.1, 0.88), xycoords="axes fraction",
                textcoords="axes fraction", fontsize=8, color="#777777", ha="center", va="center",
                arrowprops=dict(arrowstyle="->", color="#999999"))
    # The figures, under the axes (two columns), where no point or name can hide them.
    ax.legend(loc="upper left", bbox_to_anchor=(-0.09, -0.15), ncols=2, fontsize=7.8, frameon=False,
              markerscale=0.7, handletextpad=0.3, columnspacing=1.2, borderaxespad=0)
    ax.set_xlabel("share of history tokens kept" + (" (log scale)" if log_x else ""))
    ax.set_ylabel("recall of the turns the query needs")
    title = DATASET_TITLES.get(dataset, dataset)
    subtitle = (f"{meta.get('half', '')}: {first['cases']:,} cases; recall over the {first['recall_cases']:,} "
                "with labelled relevant turns")
    if show_precision:
        subtitle += f"; precision over the {first['precision_cases']:,} with complete labels"
    if dataset == "locomo":  # three conversations: split_half splits them by question
        subtitle += " (halves split by question: both ask about the same three conversations)"
    _titles(fig, f"{title}: recall vs tokens kept, budget {budget:,} tokens per query", subtitle)
    return _finish(fig, meta, path)


def switch_chart(payload: dict, datasets: Sequence[str], meta: dict, path: Path) -> Path:
    """Grouped bars of topic-switch F1, one group per dataset, one bar per selector."""
    plt = _pyplot()

    order = [LIBRARY, "report as written", "always switch"]
    names = [n for n in order if any(n in payload["datasets"][d] for d in datasets)]
    names += [n for n in dict.fromkeys(n for d in datasets for n in payload["datasets"][d]) if n not in names]
    fig, ax = _new_figure(plt)
    width = 0.8 / len(names)
    for i, name in enumerate(names):
        for j, d in enumerate(datasets):
            s = payload["datasets"][d].get(name, {}).get("switch") or {}
            if s.get("f1") is None:
                continue
            x = j + (i - (len(names) - 1) / 2) * width
            lib = name == LIBRARY
            ax.bar([x], [s["f1"]], width * 0.92, color=COLOURS.get(name, "#333333"),
                   edgecolor="black" if lib else "none", linewidth=0.8,
                   label=name if j == 0 else None)
            ax.text(x, s["f1"] + 0.015, f"{s['f1']:.3f}", ha="center", va="bottom", fontsize=9,
                    fontweight="bold" if lib else "normal")
            ax.text(x, 0.02, f"P {s['precision']:.2f}\nR {s['recall']:.2f}", ha="center",
                    va="bottom", fontsize=7.5, color="white")
    labels = []
    for d in datasets:
        s = next(iter(payload["datasets"][d].values()))["switch"]
        labels.append(f"{DATASET_TITLES.get(d, d)}\n{s['cases']:,} labelled queries, "
                      f"{_percent(s['gold_positive_rate'])} switches")
    ax.set_xticks(range(len(datasets)), labels)
    ax.grid(axis="x", visible=False)
    top = max((payload["datasets"][d][n]["switch"]["f1"] or 0) for d in datasets
              for n in payload["datasets"][d])
    ax.set_ylim(0, min(1.0, top + 0.2))
    ax.set_ylabel("topic-switch F1 (P precision, R recall)")
    ax.legend(loc="upper left", frameon=False, ncols=2, fontsize=9)
    budgets = {payload["budgets"].get(d) for d in datasets}
    budget = next(iter(budgets)) if len(budgets) == 1 else "/".join(map(str, sorted(budgets)))
    _titles(fig, f"Topic-switch F1 (budget {budget:,} tokens): does the query start a new topic?",
            f"{meta.get('half', '')}; 'switch' and 'return' count as switches; 'always switch' predicts "
            "one every time")
    return _finish(fig, meta, path)


def quality_charts(payload: dict, out_dir: str | Path) -> list[Path]:
    """Every quality chart the payload has figures for; returns the files written."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"measured": payload.get("measured"), "command": payload.get("command"),
            "machine": payload.get("machine"), "half": half_label(payload.get("half"))}
    written = []
    for d, rows in payload["datasets"].items():
        if d in DATASET_TITLES and any(r.get("recall") is not None for r in rows.values()):
            written.append(recall_chart(d, payload["budgets"][d], rows, meta,
                                        out / f"quality_recall_{d}.png"))
    switch = [d for d, rows in payload["datasets"].items()
              if d in {"tiage", "crosswoz"}
              and any((r.get("switch") or {}).get("f1") is not None for r in rows.values())]
    if switch:
        written.append(switch_chart(payload, switch, meta, out / "quality_switch_f1.png"))
    return written


# --------------------------------------------------------------------------- speed


def speed_chart(doc: dict, path: Path, method: str = "explain") -> Path:
    """Median latency (p95 as the error bar's top) against history length, log-log."""
    plt = _pyplot()
    from matplotlib.ticker import FuncFormatter

    results = {int(k): v for k, v in doc["results"].items()}
    sizes = sorted(results)
    subjects = [s for s in ("library", "baseline") if any(s in results[n] for n in sizes)]
    names = doc.get("subjects") or SPEED_NAMES
    cfg = doc.get("config", {})
    fig, ax = _new_figure(plt, left=0.12)
    lows, highs = [], []
    for subject in subjects:
        name = names.get(subject, subject)
        xs, med, p95, ns = [], [], [], []
        for n in sizes:
            stats = results[n].get(subject, {}).get(f"{method}_ms")
            if stats and stats.get("n"):
                xs.append(n)
                med.append(stats["median"])
                p95.append(stats["p95"])
                ns.append(stats["n"])
        lows += med
        highs += p95
        lib = subject == "library"
        colour = COLOURS.get(SPEED_NAMES.get(subject, name), "#333333")
        ax.errorbar(xs, med, yerr=[[0] * len(med), [p - m for p, m in zip(p95, med)]],
                    color=colour, marker="o", markersize=7 if lib else 6, linewidth=2.2 if lib else 1.6,
                    capsize=4, label=f"{name}: median, bar to p95")
        ax.fill_between(xs, med, p95, color=colour, alpha=0.12, linewidth=0)
        for x, m, k in zip(xs, med, ns):
            label = f"{m:,.2f} ms" if m < 10 else f"{m:,.0f} ms"
            if k < cfg.get("queries", k):
                label += f"\n(n={k})"
            # library figures under the line, the baseline's left of its points (clear of the p95 bars)
            ax.annotate(label, (x, m), textcoords="offset points",
                        xytext=(0, -14) if lib else (-9, 5), ha="center" if lib else "right",
                        va="top" if lib else "bottom", fontsize=8, color=colour)
    if len(subjects) == 2:
        for n in sizes:
            speed = results[n].get("speedup", {}).get(method)
            if speed:
                lib = results[n]["library"][f"{method}_ms"]["median"]
                base = results[n]["baseline"][f"{method}_ms"]["median"]
                ax.annotate(f"{speed:,.0f}x", (n, math.sqrt(lib * base)), ha="left", va="center",
                            xytext=(7, 0), textcoords="offset points", fontsize=9,
                            fontweight="bold", color="#333333")
                ax.plot([n, n], [lib * 1.35, base / 1.25], color="#bbbbbb", linewidth=1,
                        linestyle=":", zorder=0)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(sizes, [f"{n:,}" for n in sizes])
    ax.minorticks_off()
    ax.set_xlim(sizes[0] / 1.6, sizes[-1] * 1.6)
    ax.set_ylim(min(lows) / 3, max(highs) * 3)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g} ms"))
    ax.set_xlabel("turns in the history (log scale)")
    ax.set_ylabel(f"{method}(query) latency (log scale)")
    wl = doc.get("workload", {})
    turn = wl.get("user_tokens_mean", 0) + wl.get("assistant_tokens_mean", 0)
    _titles(fig, f"{method}(query) latency vs history length, budget {cfg.get('budget', 0):,} tokens",
            f"synthetic seeded chat (seed {cfg.get('seed')}), ~{turn:.0f}-token turns, "
            f"{cfg.get('queries')} timed queries per size (n: fewer, bounded); bold: times faster")
    ax.legend(loc="upper left", frameon=False, fontsize=9)
    meta = {"measured": doc.get("measured"), "command": doc.get("command"),
            "machine": doc.get("machine")}
    return _finish(fig, meta, path)


def speed_charts(doc: dict, out_dir: str | Path) -> list[Path]:
    """The speed chart(s); returns the files written."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    return [speed_chart(doc, out / "speed_latency.png")]


# --------------------------------------------------------------------------- helpers for the scripts


def command_line(script: str, argv: Sequence[str] | None, drop: Sequence[str] = ("--json",)) -> str:
    """The command that reproduces a run, as typed from the repository root (output-only options dropped)."""
    import shlex

    args = list(sys.argv[1:] if argv is None else argv)
    kept: list[str] = []
    skip = False
    for a in args:
        if skip:
            skip = False
            continue
        if a in drop:
            skip = True
            continue
        if any(a.startswith(d + "=") for d in drop):
            continue
        kept.append(a)
    return shlex.join(["python", script, *kept])


def machine_line(cpu_count: int | None = None) -> str:
    """e.g. 'CPython 3.11.7, 2 CPUs, x86_64'."""
    import os
    import platform

    cpus = cpu_count if cpu_count is not None else os.cpu_count()
    return f"{platform.python_implementation()} {platform.python_version()}, {cpus} CPUs, {platform.machine()}"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Draw the benchmark charts from saved JSON figures.")
    p.add_argument("--quality", type=Path, help="JSON written by quality.py --json")
    p.add_argument("--speed", type=Path, help="JSON written by speed.py --json")
    p.add_argument("--out", type=Path, required=True, help="folder for the PNG files")
    args = p.parse_args(argv)
    if not args.quality and not args.speed:
        p.error("give --quality and/or --speed")
    written = []
    if args.quality:
        written += quality_charts(json.loads(args.quality.read_text(encoding="utf-8")), args.out)
    if args.speed:
        written += speed_charts(json.loads(args.speed.read_text(encoding="utf-8")), args.out)
    for path in written:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

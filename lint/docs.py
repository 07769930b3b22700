"""The docs checks MkDocs' strict build does not make (``python -m lint docs``).

``python -m mkdocs build --strict`` already fails on a broken link or anchor between the site's
pages, a page missing from the nav and a docstring the API pages cannot render. This check covers
the rest:

- the library's docstrings cite no document outside the repository, and every repository file and
  every ``docs/<page>.md#anchor`` they (or the README) cite exists;
- every module path the README and the site's pages name (``context_gatekeeper.x.y``,
  ``langchain_gatekeeper.X``, ``llamaindex_gatekeeper.X``, or a room-relative path in backticks
  such as ```selection.gate.decide```) imports;
- the README stays a ten-minute read: at most :data:`README_MAX_LINES` lines, every relative link
  and image exists (a ``#anchor`` into a Markdown file is one of its headings, by GitHub's rule),
  and neither it nor the user guide carries release notes, commit hashes or machine details (those
  belong in ``CHANGELOG.md`` and ``docs/benchmarks.md``);
- ``docs/contracts.md``'s error table lists every error of ``context_gatekeeper.errors`` with a
  built-in it really subclasses, and the numbers ``docs/guide/selection.md`` quotes in "How it
  works" are ``SelectionParams``' defaults.

Unlike the code scanners, this check imports the library (a module path "imports" only if it
does), so it runs in the development environment (``pip install -e ".[dev]"``).
"""

from __future__ import annotations

import importlib
import re
import unicodedata
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
"""The repository root the check reads by default."""

README_MAX_LINES = 300
"""The README's length limit: what a user reads in about ten minutes."""

LIBRARY_DIRS = ("shared/context_gatekeeper", "langchain_gatekeeper", "llamaindex_gatekeeper")
OUTSIDE = re.compile(r"DESIGN\.md|\.\./shared\b")
CITED_DOC = re.compile(r"\b(docs/[\w/-]+\.md)#([^\s`'\")\]]+)")
REPO_PATH = re.compile(r"\b(?:tests|benchmarks|examples|docs)/[\w./-]+\.(?:py|md|jsonl|ipynb)\b")
ROOMS = ("records", "selection", "transcripts", "editing", "stores", "chat", "testing", "integration")
# `context_gatekeeper.x.y` and the adapters' dotted names, or a room-relative path in backticks
MODULE_PATH = re.compile(
    r"(?<![/\w])(?:context_gatekeeper|langchain_gatekeeper|llamaindex_gatekeeper)(?:\.[A-Za-z_]\w*)+(?![\w/])"
    r"|(?<=`)(?:%s)(?:\.[A-Za-z_]\w*)*(?=[`(])" % "|".join(ROOMS)
)
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)|<img\s[^>]*src=\"([^\"]+)\"")
RELEASE_NOTES = re.compile(r"\b(?:before|since|in|for) this release\b|\bthe previous release\b|\bit took [\d.,]+ ?\w* before\b", re.I)
MACHINE = re.compile(
    r"\b\d+-core\b|\b(?:our|this) (?:development )?machine\b|\bload average\b|\bCPython \d|\b\d+ ?GHz\b",
    re.I,
)
COMMIT = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}\b")
BUILTIN_ERRORS = {
    "Exception", "ValueError", "TypeError", "KeyError", "RuntimeError", "OSError", "ModuleNotFoundError",
}


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading: lower case, punctuation dropped
    (letters, digits, ``_``, ``-`` and spaces stay), each space a ``-``."""
    kept = "".join(ch for ch in heading.strip().lower() if ch in "_- " or unicodedata.category(ch)[0] in "LN")
    return kept.replace(" ", "-")


def heading_anchors(markdown: str) -> set[str]:
    """Anchors of every ATX heading outside code fences; a repeated one gets ``-1``, ``-2``..."""
    anchors: set[str] = set()
    fenced = False
    for line in markdown.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        match = None if fenced else re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if match:
            base = anchor = github_anchor(match.group(1))
            n = 0
            while anchor in anchors:
                n += 1
                anchor = f"{base}-{n}"
            anchors.add(anchor)
    return anchors


def resolves(dotted: str) -> bool:
    """Whether ``dotted`` is a module, or an attribute chain on the longest module prefix that imports.

    A module that exists but fails on one of its own imports raises (a real failure, not a
    missing name)."""
    parts = dotted.split(".")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        for i in range(len(parts), 0, -1):
            name = ".".join(parts[:i])
            try:
                obj: object = importlib.import_module(name)
            except ModuleNotFoundError as exc:
                if exc.name is not None and not name.startswith(exc.name) and exc.name != name:
                    raise
                continue
            for attr in parts[i:]:
                if not hasattr(obj, attr):
                    return False
                obj = getattr(obj, attr)
            return True
    return False


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _library_files(root: Path) -> list[Path]:
    return sorted(p for d in LIBRARY_DIRS for p in (root / d).rglob("*.py") if "__pycache__" not in p.parts)


def _pages(root: Path) -> list[Path]:
    return sorted((root / "docs").rglob("*.md"))


def _prose(markdown: str) -> str:
    """The Markdown without its fenced code blocks (commands and outputs may name anything)."""
    return re.sub(r"^```.*?^```", "", markdown, flags=re.S | re.M)


def _self_check() -> list[str]:
    """The helpers still tell right from wrong (a check that accepts everything proves nothing)."""
    problems = []
    if github_anchor("Budget, and precision: rules!") != "budget-and-precision-rules" or heading_anchors(
        "# A\n```\n# not a heading\n```\n## A\n"
    ) != {"a", "a-1"}:
        problems.append("lint/docs.py: github_anchor / heading_anchors no longer follow GitHub's rule")
    if not resolves("context_gatekeeper.selection.gate.decide") or resolves(
        "context_gatekeeper.selection.gate.no_such_name"
    ) or resolves("context_gatekeeper.selection.no_such_module"):
        problems.append("lint/docs.py: resolves() accepts a missing name or rejects an existing one")
    return problems


def _library_citations(root: Path) -> list[str]:
    problems = []
    cited: set[tuple[str, str]] = set()
    for path in _library_files(root):
        rel = path.relative_to(root)
        for n, line in enumerate(_read(path).splitlines(), 1):
            if OUTSIDE.search(line):
                problems.append(f"{rel}:{n}: cites a document outside the repository; cite docs/architecture.md instead")
            cited |= {(str(rel), found) for found in REPO_PATH.findall(line)}
    if not cited:
        problems.append("no library module cites a repository file: the citation check would prove nothing")
    problems += [f"{where}: cites {found}, which is not in the repository" for where, found in sorted(cited)
                 if not (root / found).is_file()]
    return problems


def _cited_anchors(root: Path) -> list[str]:
    problems = []
    sources = [*_library_files(root), root / "README.md"]
    cited = {(str(p.relative_to(root)), page, anchor) for p in sources if p.is_file()
             for page, anchor in CITED_DOC.findall(_read(p))}
    if not any(page == "docs/architecture.md" for _, page, _ in cited):
        problems.append("nothing cites docs/architecture.md#...: the anchor check would prove nothing")
    for where, page, anchor in sorted(cited):
        target = root / page
        if not target.is_file():
            problems.append(f"{where}: cites {page}#{anchor}, but {page} does not exist")
        elif anchor not in heading_anchors(_read(target)):
            problems.append(f"{where}: cites {page}#{anchor}, which is no heading of {page}")
    return problems


def _module_paths(root: Path) -> list[str]:
    problems = []
    named: dict[str, str] = {}
    for path in [root / "README.md", *_pages(root)]:
        if not path.is_file():
            continue
        for found in MODULE_PATH.findall(_read(path)):
            dotted = found if found.split(".")[0].endswith("_gatekeeper") else "context_gatekeeper." + found
            named.setdefault(dotted, str(path.relative_to(root)))
    if "context_gatekeeper.selection.params.SelectionParams" not in named:
        problems.append("docs/architecture.md no longer names selection.params.SelectionParams: is the module-path scan blind?")
    for dotted, where in sorted(named.items()):
        try:
            ok = resolves(dotted)
        except ImportError as exc:
            missing = (getattr(exc, "name", None) or "").split(".")[0]
            hint = "install the dev extra" if missing and not missing.endswith("gatekeeper") else "fix the import"
            problems.append(f"{where}: {dotted} cannot be checked, importing it fails: {exc} ({hint})")
            continue
        if not ok:
            problems.append(f"{where}: names {dotted}, which does not import; fix the name or the page")
    return problems


def _no_history_or_machine(where: str, text: str) -> list[str]:
    problems = []
    for n, line in enumerate(_prose(text).splitlines(), 1):
        for pattern, what, home in (
            (RELEASE_NOTES, "release notes", "CHANGELOG.md"),
            (MACHINE, "machine details", "docs/benchmarks.md"),
            (COMMIT, "a commit hash", "CHANGELOG.md"),
        ):
            match = pattern.search(line)
            if match:
                problems.append(f"{where}: {what} ({match.group(0)!r}) in: {line.strip()[:80]}; move them to {home}")
    return problems


def _readme(root: Path) -> list[str]:
    path = root / "README.md"
    if not path.is_file():
        return ["README.md is missing"]
    text = _read(path)
    problems = []
    lines = text.count("\n") + (not text.endswith("\n"))
    if lines > README_MAX_LINES:
        problems.append(f"README.md has {lines} lines (at most {README_MAX_LINES}): move reference text into docs/")
    for match in LINK.finditer(_prose(text)):
        target = match.group(1) or match.group(2)
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue
        file, _, anchor = target.partition("#")
        dest = (path.parent / file).resolve()
        if not dest.exists():
            problems.append(f"README.md: links to {target}, which does not exist")
        elif anchor and dest.suffix == ".md" and anchor not in heading_anchors(_read(dest)):
            problems.append(f"README.md: links to {target}, which is no heading of {file}")
    problems += _no_history_or_machine("README.md", text)
    return problems


def _user_guide(root: Path) -> list[str]:
    pages = [root / "docs" / "index.md", *sorted((root / "docs" / "guide").rglob("*.md"))]
    return [p for page in pages if page.is_file()
            for p in _no_history_or_machine(str(page.relative_to(root)), _read(page))]


def _error_table(root: Path) -> list[str]:
    import context_gatekeeper.errors as errors

    path = root / "docs" / "contracts.md"
    if not path.is_file():
        return ["docs/contracts.md is missing: it holds the table of errors"]
    rows = dict(re.findall(r"^\| `(\w+)` \| `(\w+)` \|", _read(path), re.M))
    problems = []
    defined = {name: cls for name, cls in vars(errors).items()
               if isinstance(cls, type) and issubclass(cls, Exception) and cls.__module__ == errors.__name__}
    for name in sorted(set(defined) - set(rows)):
        problems.append(f"docs/contracts.md: the error table does not list {name}")
    for name, base in sorted(rows.items()):
        cls = defined.get(name)
        if cls is None:
            problems.append(f"docs/contracts.md: the error table lists {name}, which context_gatekeeper.errors does not define")
        elif base not in {b.__name__ for b in cls.__mro__[1:]}:
            problems.append(f"docs/contracts.md: {name} is listed as a {base}, which it does not subclass")
        elif base in BUILTIN_ERRORS - {"Exception"} and not any(
            b.__name__ == base for b in cls.__mro__[1:] if b.__module__ == "builtins"
        ):
            problems.append(f"docs/contracts.md: {name}'s built-in is not {base}")
    return problems


def _selection_numbers(root: Path) -> list[str]:
    from context_gatekeeper import SelectionParams

    path = root / "docs" / "guide" / "selection.md"
    if not path.is_file():
        return ["docs/guide/selection.md is missing: it holds 'How it works'"]
    text = _read(path)
    if "## How it works" not in text:
        return ["docs/guide/selection.md has no '## How it works' section"]
    section = " ".join(text[text.index("## How it works"):].split())
    p = SelectionParams()
    quoted = {
        f"{p.coverage_target:.0%} of the": "coverage_target",
        f"at least {p.off_topic_share:.0%} of the query's weight": "off_topic_share",
        f"in the last {p.topic_lookback} when it recurs": "topic_lookback",
        f"cost^{p.cost_exponent}": "cost_exponent",
    }
    problems = [f"docs/guide/selection.md 'How it works' does not quote SelectionParams.{field} as {phrase!r}"
                for phrase, field in quoted.items() if phrase not in section]
    recall = SelectionParams.preset("recall")
    if "leftover budget stays unused" in section and p.fill_ratio < 1.0:
        problems.append("docs/guide/selection.md says leftover budget stays unused, but the default fill_ratio fills it")
    fill = f"at least `fill_ratio` {p.fill_ratio:g} of the best score"
    if p.fill_ratio < 1.0 and fill not in section:
        problems.append(f"docs/guide/selection.md 'How it works' does not quote SelectionParams.fill_ratio as {fill!r}")
    if not (recall.fill_ratio < 1.0 and recall.off_topic_share == 0.0):
        problems.append("the 'recall' preset no longer fills leftover budget across topics, as the docs say")
    return problems


def check(root: Path = REPO) -> list[str]:
    """Every docs problem under ``root`` (the repository by default), one line each; empty when clean."""
    return [
        *_self_check(),
        *_library_citations(root),
        *_cited_anchors(root),
        *_module_paths(root),
        *_readme(root),
        *_user_guide(root),
        *_error_table(root),
        *_selection_numbers(root),
    ]

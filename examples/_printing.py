"""Shared by the example scripts: rich output, or plain text with ``--plain``."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

__all__ = ["Printer", "short"]


def short(text: str, limit: int = 60) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class Printer:
    """Rich panels and tables, or plain text with ``plain=True``."""

    def __init__(self, plain: bool = False) -> None:
        self.plain = plain
        self.console = None
        if not plain:
            from rich.console import Console

            self.console = Console()
            if not self.console.is_terminal and not self.console.is_jupyter:
                self.console = Console(width=120)

    def section(self, title: str) -> None:
        if self.plain:
            print(f"\n== {title} " + "=" * max(0, 76 - len(title)))
        else:
            from rich.rule import Rule

            self.console.print()
            self.console.print(Rule(f"[bold]{title}", align="left"))

    def say(self, text: str) -> None:
        if self.plain:
            print(text)
        else:
            from rich.markup import escape

            self.console.print(escape(text))

    def panel(self, title: str, body: str, style: str = "cyan") -> None:
        if self.plain:
            print(f"--- {title}")
            print("\n".join("  " + line for line in body.splitlines()))
        else:
            from rich.panel import Panel
            from rich.text import Text

            self.console.print(Panel(Text(body), title=title, title_align="left", border_style=style))

    def diff(self, title: str, text: str) -> None:
        if self.plain:
            self.panel(title, text)
        else:
            from rich.panel import Panel
            from rich.text import Text

            body = Text()
            for line in text.splitlines():
                marker = line.lstrip()[:3]
                style = ("red" if marker.startswith("-") and marker != "---" else
                         "green" if marker.startswith("+") and marker != "+++" else
                         "bold" if line[:1] not in " -+@" else "dim" if line[:1] in "@-+" else "")
                body.append(line + "\n", style=style)
            body.rstrip()
            self.console.print(Panel(body, title=title, title_align="left", border_style="magenta"))

    def table(
        self, title: str, columns: Sequence[str], rows: Sequence[Sequence[str]], *, shorten: Iterable[str] | None = None
    ) -> None:
        """A table; in plain text, cells of the ``shorten`` columns (default: all) are cut to 58 characters."""
        if self.plain:
            print(title)
            cut = set(columns if shorten is None else shorten)
            rows = [[short(str(c), 58) if name in cut else str(c) for name, c in zip(columns, r)] for r in rows]
            sizes = [max(len(str(r[i])) for r in [columns, *rows]) for i in range(len(columns))]
            for r in [columns, ["-" * s for s in sizes], *rows]:
                print("  " + "  ".join(str(c).ljust(s) for c, s in zip(r, sizes)).rstrip())
        else:
            from rich import box
            from rich.table import Table

            table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAVY)
            for name in columns:
                table.add_column(name, overflow="fold", justify="right" if name in ("#", "turn") else "left")
            for r in rows:
                table.add_row(*map(str, r))
            self.console.print(table)

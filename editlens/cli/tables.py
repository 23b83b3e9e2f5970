"""Tables on the terminal that never cut a name.

Piped or redirected output gets plain tab-separated columns (what ``cut``,
``awk`` and ``grep`` expect); a terminal gets a rich table whose key columns
keep their full width and whose long text wraps instead of being cut to
``viesc…``.
"""

from __future__ import annotations

import sys
from typing import Any, Sequence, TextIO

import typer


def print_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[str]], *,
                wrap: Sequence[str] = ("description", "note"), stream: TextIO | None = None) -> None:
    """Print ``rows`` under ``columns``; every column but those in ``wrap`` keeps its full width."""
    stream = stream or sys.stdout
    if not stream.isatty():
        stream.write("\t".join(columns) + "\n")
        for row in rows:
            stream.write("\t".join(str(c).replace("\t", " ").replace("\n", " ") for c in row) + "\n")
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for i, col in enumerate(columns):
        if col in wrap:
            table.add_column(col, overflow="fold")
        else:
            width = max([len(col)] + [len(str(r[i])) for r in rows])
            table.add_column(col, no_wrap=True, min_width=width)
    for row in rows:
        table.add_row(*[str(c) for c in row])
    Console(file=stream).print(table)


def print_rows(rows: list[dict[str, Any]]) -> None:
    """A list of dicts as aligned columns; None is '-', floats one decimal."""
    if not rows:
        return
    cols = [k for k in rows[0] if k != "judged"]  # "judged" repeats "ranked" (kept in JSON for old readers)
    cell = lambda v: "-" if v is None else (f"{v:.1f}" if isinstance(v, float) else str(v))  # noqa: E731
    widths = {c: max(len(c), *(len(cell(r.get(c))) for r in rows)) for c in cols}
    typer.echo("  ".join(c.ljust(widths[c]) if i == 0 else c.rjust(widths[c]) for i, c in enumerate(cols)))
    for r in rows:
        typer.echo("  ".join(cell(r.get(c)).ljust(widths[c]) if i == 0 else cell(r.get(c)).rjust(widths[c])
                             for i, c in enumerate(cols)))

"""What :func:`editlens.runner.bench.run_benchmark` returns, and the one writer of a bench folder.

A run ends in one of three ways, each its own type with a ``kind``:

* :class:`BenchEstimate` (``kind="estimate"``): ``--estimate``, nothing run; ``judged`` says whether the
  benchmark is scored by a judge (calls counted) or by a metric suite (no judge calls);
* :class:`GenerationStopped` (``kind="generation_stopped"``): a signal stopped the editors before any
  judging (what was made is kept; a rerun goes on);
* :class:`BenchTable` (``kind="table"``): the paper's table, written to the bench folder.

``to_dict()`` is the JSON the CLI prints with ``--json`` (and, less ``files`` and ``exit``, ``table.json``);
each result also reads as that mapping (``result["models"]``), as the dicts it replaces did.

:func:`write_bench_folder` writes ``table.json``/``.csv``/``.md``/``.tex``, ``items.jsonl`` and, unless
told not to, ``report.html`` (with ``run/report.html``, the edits' own report): the CLI and Python
produce the same folder.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from editlens.core.io import atomic_write

#: the HTML of a bench folder, named lazily: the report is drawn by a layer above the runner
#: (``editlens.reporting``), which the runner must not import
BENCH_HTML = "editlens.reporting.bench_html:write_bench_html"


class _AsMapping(Mapping[str, Any]):
    """Read access to :meth:`to_dict` (``result["models"]``, ``result.get("exit")``)."""

    def to_dict(self) -> dict[str, Any]:
        raise NotImplementedError

    def __getitem__(self, key: str) -> Any:
        return self.to_dict()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.to_dict())

    def __len__(self) -> int:
        return len(self.to_dict())


@dataclass(eq=False)
class BenchEstimate(_AsMapping):
    """``--estimate``: the judge calls (and tokens) a run would make; ``judged`` is False for a benchmark
    scored by metrics (then ``figures`` counts the edits to score, no calls)."""

    figures: dict[str, Any]
    judged: bool
    kind: str = "estimate"
    exit: int = 0

    def to_dict(self) -> dict[str, Any]:
        return dict(self.figures)


@dataclass(eq=False)
class GenerationStopped(_AsMapping):
    """A signal stopped the editors: ``made`` edits kept, nothing judged yet (exit 1; rerun to go on)."""

    benchmark: str
    stopped_by: int
    made: int
    editors: dict[str, Any]
    kind: str = "generation_stopped"
    exit: int = 1

    def to_dict(self) -> dict[str, Any]:
        return {"benchmark": self.benchmark, "generation_stopped": True, "stopped_by": self.stopped_by,
                "made": self.made, "editors": self.editors, "exit": self.exit, "files": {}}


@dataclass(eq=False)
class BenchTable(_AsMapping):
    """The paper's table (``table``: ``table.json``'s content), the per-item ``rows`` (``items.jsonl``),
    the files written and the exit status: 0 every found output scored or unscored, 1 some failed (or
    the run was stopped: rerun), 2 the only failures are outputs that cannot be read as images."""

    table: dict[str, Any]
    rows: list[dict[str, Any]] = field(repr=False)
    files: dict[str, str] = field(default_factory=dict)
    exit: int = 0
    kind: str = "table"

    @property
    def stopped_by(self) -> int | None:
        return self.table.get("stopped_by")

    @property
    def unreadable(self) -> list[str]:
        return list(self.table.get("unreadable") or [])

    def to_dict(self) -> dict[str, Any]:
        return {**self.table, "files": dict(self.files), "exit": self.exit}


BenchResult = BenchEstimate | GenerationStopped | BenchTable


def write_tables(table: dict[str, Any], rows: Sequence[dict[str, Any]], root: Path) -> dict[str, Path]:
    """``table.json``, ``table.csv``, ``table.md``, ``table.tex`` and ``items.jsonl`` (every item with every
    published column and its figures)."""
    from editlens.bench.table import to_csv, to_latex, to_markdown

    root.mkdir(parents=True, exist_ok=True)
    files = {"json": root / "table.json", "csv": root / "table.csv", "markdown": root / "table.md",
             "latex": root / "table.tex", "items": root / "items.jsonl"}
    atomic_write(files["json"], lambda fh: json.dump(table, fh, indent=2, default=str))
    atomic_write(files["csv"], lambda fh: fh.write(to_csv(table)))
    atomic_write(files["markdown"], lambda fh: fh.write(to_markdown(table)))
    atomic_write(files["latex"], lambda fh: fh.write(to_latex(table)))
    atomic_write(files["items"], lambda fh: fh.writelines(json.dumps(r, default=str) + "\n" for r in rows))
    return files


def write_bench_folder(result: BenchTable, root: str | Path, *, report: bool = True) -> BenchTable:
    """Write ``result`` as a bench folder under ``root`` (the tables and ``items.jsonl``; with ``report``
    also ``report.html`` and the edits' ``run/report.html``); ``result.files`` names what was written.
    The one writer: ``editlens bench run``, ``run_benchmark`` and ``runs merge`` of bench shards use it."""
    root = Path(root)
    result.files = {k: str(v) for k, v in write_tables(result.table, result.rows, root).items()}
    if report:
        module, _, attr = BENCH_HTML.partition(":")
        html = getattr(importlib.import_module(module), attr)
        result.files.update({k: str(v) for k, v in html(result.to_dict(), root).items()})
    return result

"""``editlens runs``: inspect run directories."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from editlens.cli.common import emit_json, guarded
from editlens.cli.tables import print_rows

app = typer.Typer(no_args_is_help=True, help="Inspect run directories.")


@app.command("show")
@guarded
def runs_show(run_dir: Path = typer.Argument(...)) -> None:
    """Print a run's manifest (how it was produced)."""
    from editlens.reporting.runs import load_run_meta

    emit_json(load_run_meta(run_dir, "manifest"))


@app.command("failures")
@guarded
def runs_failures(run_dir: Path = typer.Argument(...), json_out: bool = typer.Option(False, "--json"),
                  status: Optional[str] = typer.Option(None, "--status", help="Only this status: failed (lost to "
                                                       "the backend; a rerun retries them) or unscored.")) -> None:
    """List samples that failed or could not be scored, with reasons."""
    from editlens.reporting.runs import failures

    if status not in (None, "failed", "unscored"):
        raise typer.BadParameter(f"must be failed or unscored, got {status!r}", param_hint="--status")
    rows = [r for r in failures(run_dir) if status is None or r["status"] == status]
    if json_out:
        emit_json(rows)
        return
    for r in rows:
        typer.echo(f"{r['sample_id']}\t{r['evaluator']}\t{r['status']}\t{r['reason']}")
    typer.echo(f"{len(rows)} {status or 'failed/unscored'} result(s)", err=True)


@app.command("summary")
@guarded
def runs_summary(run_dir: Path = typer.Argument(...), by: Optional[str] = typer.Option(None, "--by", help="Group by: model."),
                 json_out: bool = typer.Option(False, "--json"), seed: int = typer.Option(0, "--seed")) -> None:
    """Mean and bootstrap 95% CI of every score (per editing model with --by model)."""
    from editlens.reporting.runs import summary_table

    table = summary_table(run_dir, by=by, seed=seed)
    if json_out:
        emit_json(table)
        return
    for r in table:
        group = f"{r['group']:<20} " if by else ""
        ci = "undefined (n < 2)" if r["ci"] is None else f"[{r['ci'][0]:.4f}, {r['ci'][1]:.4f}]"
        typer.echo(f"{group}{r['evaluator']:<12} n={r['n']:<5} mean={r['mean']:.4f}  95% CI {ci}")
    from editlens.reporting.runs import status_counts

    # evaluators with no scored value would otherwise vanish from the table
    for ev, counts in sorted(status_counts(run_dir).items()):
        if not counts.get("scored") and not counts.get("info"):
            what = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
            typer.echo(f"{ev:<12} no scored value: {what} (see `editlens runs failures {run_dir}` for reasons)")
    from editlens.reporting.runs import evaluator_summaries

    for extra in evaluator_summaries(run_dir):  # what each evaluator contributes (registry metadata)
        typer.echo("")
        typer.echo(extra["title"])
        print_rows(extra["rows"])

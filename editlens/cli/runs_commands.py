"""``editlens runs``: inspect run directories."""

from __future__ import annotations

import enum
from pathlib import Path
from typing import List, Optional

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
def runs_failures(run_dir: Path = typer.Argument(...), json_out: bool = typer.Option(False, "--json", help="Machine-readable output (JSON) instead of the table."),
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
def runs_summary(run_dir: Path = typer.Argument(...), by: Optional[str] = typer.Option(None, "--by", help="Group by: model, edit_type, or any column of the manifest "
                                                                                        "(e.g. task_type, instruction_language)."),
                 json_out: bool = typer.Option(False, "--json", help="Machine-readable output (JSON) instead of the table."), seed: int = typer.Option(0, "--seed", help="Random seed (the same seed reproduces the same result).")) -> None:
    """Mean and bootstrap 95% CI of every score (per editing model with --by model, per edit type with --by edit_type,
    per value of a manifest column with --by COLUMN)."""
    from editlens.core.evidence import figure, not_measured
    from editlens.reporting.runs import status_counts, summary_table

    table = summary_table(run_dir, by=by, seed=seed)
    if not table and not status_counts(run_dir):  # a summary over nothing says so, and is no success
        from editlens.errors import InputError

        raise InputError(f"{run_dir}: {not_measured(0, 'the run holds no result')}")
    if json_out:
        emit_json(table)
        return
    from editlens.reporting.leaderboard import run_ranking_notes

    notes = run_ranking_notes(run_dir)
    for r in table:
        group = f"{r['group']:<20} " if by else ""
        ci = "undefined (n < 2)" if r["ci"] is None else f"[{r['ci'][0]:.4f}, {r['ci'][1]:.4f}]"
        direction = notes["directions"].get(r["evaluator"], "")
        typer.echo(f"{group}{r['evaluator']:<12} n={r['n']:<5} mean={figure(r['mean'], r['n'], 'no scored value')}"
                   f"  95% CI {ci}  ({direction})")
    if by and notes["similarity"]:
        typer.echo(f"warning: {', '.join(notes['similarity'])} measure similarity to the source: an editor that changes "
                   f"nothing scores best, so these means are not a ranking. `editlens runs leaderboard {run_dir}` ranks "
                   "by the evaluators that judge the edit, with CIs, significance and no-op flags.", err=True)
    if notes["why_empty"]:
        typer.echo("nothing in this run ranks the editors:", err=True)
        for line in notes["why_empty"]["why"]:
            typer.echo(f"  - {line}", err=True)
        typer.echo("to rank them, add one of:", err=True)
        for line in notes["why_empty"]["add"]:
            typer.echo(f"  - {line}", err=True)

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


class LeaderboardFormat(str, enum.Enum):
    table = "table"
    md = "md"
    latex = "latex"
    csv = "csv"
    json = "json"


def _recorded_bootstrap(run_dir: Path) -> dict:
    """``inputs.bootstrap`` of a run's manifest (``bench run`` records its table's), else ``{}``."""
    from editlens.reporting.runs import _open

    try:
        store = _open(run_dir)
    except Exception:  # noqa: BLE001 - not a run: collect_run says so with its own message
        return {}
    try:
        return dict(((store.get_meta("manifest") or {}).get("inputs") or {}).get("bootstrap") or {})
    finally:
        store.close()


@app.command("leaderboard")
@guarded
def runs_leaderboard(
    run_dir: Path = typer.Argument(..., help="Run directory."),
    by: Optional[str] = typer.Option(None, "--by", help="Also rank within each value of this manifest column "
                                     "(default: edit_type, when the manifest has it)."),
    fmt: LeaderboardFormat = typer.Option(LeaderboardFormat.table, "--format", help="table (terminal), md (Markdown), "
                                          "latex (booktabs), csv or json."),
    scope: Optional[str] = typer.Option(None, "--scope", help="Only this scope: all, or a value of the --by column."),
    manifest: Optional[Path] = typer.Option(None, "--manifest", help="The run's manifest, when it has moved."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Seed of the bootstraps (default: the run's recorded "
                                       "one, as a bench run's table used; else 0, the report's)."),
    n_boot: Optional[int] = typer.Option(None, "--n-boot", min=10, help="Bootstrap resamples (default: the run's "
                                         "recorded number, as a bench run's table used; else 1000, the report's)."),
) -> None:
    """The report's leaderboard as text: editors ranked by the evaluators that judge the edit (direction
    from each evaluator's spec), mean and bootstrap 95% CI, paired test against the next editor, no-op
    flags and coverage; similarity scores apart (not a ranking); why nothing ranks when nothing does."""
    from editlens.errors import InputError
    from editlens.reporting.collect import collect_run
    from editlens.reporting.leaderboard_text import leaderboard_document, render

    if by == "model":
        raise InputError("--by model: the leaderboard's rows are the editors already; --by groups them by another "
                         "manifest column (e.g. edit_type)")
    recorded = _recorded_bootstrap(run_dir)  # a bench run's run/: the table's own bootstrap, the same CIs
    seed = seed if seed is not None else int(recorded.get("seed", 0))
    n_boot = n_boot if n_boot is not None else int(recorded.get("n", 1000))
    doc = leaderboard_document(collect_run(run_dir, manifest=manifest, seed=seed, n_boot=n_boot, by=by))
    if scope is not None and doc["tables"]:  # with nothing ranked, the output says why: no scope to pick
        keys = {t["scope"] for t in doc["tables"]}
        key = scope if scope == "all" or scope.startswith("type:") else f"type:{scope}"
        if key not in keys:
            raise InputError(f"--scope {scope}: no such scope; scopes: "
                             + ", ".join(k.removeprefix("type:") for k in sorted(keys)))
        doc["tables"] = [t for t in doc["tables"] if t["scope"] == key]
    typer.echo(render(doc, fmt.value), nl=False)
    if fmt.value in ("csv", "json") and not doc["tables"] and not doc.get("arena") and doc.get("why_empty"):
        # a machine format has no room for the reasons: they go to stderr, so an empty table is never silent
        typer.echo("nothing ranks the editors: " + "; ".join(doc["why_empty"]["why"]) + ". To rank them: "
                   + "; ".join(doc["why_empty"]["add"]), err=True)


@app.command("diff")
@guarded
def runs_diff(
    run_a: Path = typer.Argument(..., help="First run directory."),
    run_b: Path = typer.Argument(..., help="Second run directory."),
    threshold: Optional[List[str]] = typer.Option(None, "--threshold", help="Verdict threshold EVALUATOR=T (pass when "
                                                  "the score is at least T, or at most T when lower is better; default: "
                                                  "the middle of a bounded range). Repeatable."),
    top: int = typer.Option(20, "--top", min=0, help="Changed and flipped items listed per evaluator (JSON: all)."),
    json_out: bool = typer.Option(False, "--json", help="Machine-readable output (JSON) instead of the table."),
) -> None:
    """What changed between two runs: per-item scores, rank correlation, editors whose rank moved,
    flipped verdicts, and what differs in how the runs were made (models, templates, backend, dtype, versions)."""
    from editlens.cli.common import parse_models
    from editlens.trust.diff import diff_runs

    given = parse_models(threshold, "--threshold", "EVALUATOR=NUMBER (e.g. viescore=0.5)")
    try:
        thresholds = {k: float(v) for k, v in given.items()}
    except ValueError:
        raise typer.BadParameter(f"--threshold values must be numbers, got {given}") from None
    doc = diff_runs(run_a, run_b, thresholds)
    if not doc["evaluators"]:
        from editlens.core.evidence import not_measured
        from editlens.errors import InputError

        raise InputError(f"{run_a} vs {run_b}: {not_measured(0, 'no evaluator ran in both')}")
    if json_out:
        emit_json(doc)
        return
    _print_diff(doc, top)


def _print_diff(doc: dict, top: int) -> None:
    def f(v: object) -> str:
        return "-" if v is None else (f"{v:.4f}" if isinstance(v, float) else str(v))

    typer.echo(f"A = {doc['a']}\nB = {doc['b']}")
    if doc["what_differs"]:
        typer.echo("what differs in how the runs were made: " + "; ".join(doc["what_differs"]))
        for d in doc["manifest_differences"]:
            if d["what"] != "command line":
                typer.echo(f"  {d['key']}: {str(d['a'])[:70]} -> {str(d['b'])[:70]}")
    else:
        typer.echo("the run manifests pin the same models, templates, backends, dtypes and versions")
    for name in ("only_in_a", "only_in_b"):
        if doc[name]:
            typer.echo(f"evaluators {name.replace('_', ' ')}: {', '.join(doc[name])}")
    from editlens.core.evidence import not_measured, shortfall

    for ev, r in doc["evaluators"].items():
        typer.echo("")
        if not r["n_scored_both"]:
            typer.echo(f"{ev}: {not_measured(0, 'no item scored in both runs')}")
            continue
        few = shortfall(r["n_scored_both"], "")
        typer.echo(f"{ev}: {r['n_changed']} of {r['n_scored_both']} items changed{f' ({few})' if few else ''} "
                   f"(mean change {f(r['mean_change'])}, "
                   f"max |change| {f(r['max_abs_change'])}); Spearman {f(r['spearman'])}, Kendall {f(r['kendall'])}; "
                   f"{r['n_flipped']} verdict(s) flipped (threshold {f(r['threshold'])})")
        if r["only_a"] or r["only_b"]:
            typer.echo(f"  items only in A: {r['only_a']}, only in B: {r['only_b']}")
        for e in r["editors_rank_changed"]:
            typer.echo(f"  editor {e['model']}: rank {e['rank_a']} -> {e['rank_b']} "
                       f"(mean {f(e['mean_a'])} -> {f(e['mean_b'])})")
        for c in r["changed"][:top]:
            typer.echo(f"  changed {c['id']}: {f(c['a'])} -> {f(c['b'])} ({c['change']:+.4f})")
        for c in r["flipped"][:top]:
            typer.echo(f"  flipped {c['id']}: {c['verdict_a']} -> {c['verdict_b']}")
        more = max(0, r["n_changed"] - top) + max(0, r["n_flipped"] - top)
        if more:
            typer.echo(f"  ... {more} more (--top N, or --json for all)")


@app.command("merge")
@guarded
def runs_merge(
    out: Path = typer.Argument(..., help="The merged folder to write (new or empty)."),
    shards: List[Path] = typer.Argument(..., help="Every shard folder of one job (`edit`, `run` or `bench run` with "
                                        "--shard I/N), in any order."),
    json_out: bool = typer.Option(False, "--json", help="Machine-readable output (JSON)."),
) -> None:
    """Join the folders of a job's shards (--shard I/N) into the one folder a single process would have
    written; shards made with other settings, weights or data are refused, naming what differs."""
    from editlens.runner.merge import merge_shards

    res = merge_shards(out, shards)
    if res["kind"] == "bench":  # the report a single `bench run` writes beside its table
        from editlens.reporting.bench_html import write_bench_report

        res["table"]["files"]["html"] = str(write_bench_report(res["table"], Path(out) / "report.html"))
    if json_out:
        emit_json({k: v for k, v in res.items() if k not in ("table", "arena")})
        return
    kind = res["kind"]
    what = {"edit": lambda: f"{res['images']} images ({res['failed']} failed)",
            "run": lambda: f"{res['samples']} samples",
            "bench": lambda: f"{res['rows']} table rows",
            "arena": lambda: f"{res['comparisons']} comparisons"}[kind]()
    typer.echo(f"merged {res['shards']} {kind} shards: {what} -> {out}")
    if kind == "bench":
        from editlens.bench.table import to_text

        typer.echo(to_text(res["table"]))
    if kind == "arena":
        from editlens.cli.arena_commands import arena_lines

        for line in arena_lines(res["arena"]):
            typer.echo(line)

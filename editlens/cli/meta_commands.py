"""``editlens meta-eval`` subcommands."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from editlens.cli.common import emit_json, guarded

meta_app = typer.Typer(no_args_is_help=True, help="Agreement of an evaluator with human judgments (official protocols).")

JsonOpt = typer.Option(False, "--json", help="Machine-readable output.")
ReportOpt = typer.Option(None, "--report", help="Also write a self-contained HTML report to this file.")


def _write_report(path: Optional[Path], rep: dict, title: str, extra=None) -> None:  # type: ignore[no-untyped-def]
    if path is not None:
        from editlens.reporting.html import write_meta_report

        typer.echo(f"wrote {write_meta_report(rep, path, title, extra)}", err=True)


@meta_app.command("imagenhub")
@guarded
def imagenhub(
    ratings: Path = typer.Option(..., "--ratings", help="Folder of Text-Guided_IE_rater*.tsv."),
    judge_outputs: Optional[Path] = typer.Option(None, "--judge-outputs", help="Folder <Method>/{SC,PQ}.json."),
    predictions: Optional[Path] = typer.Option(None, "--predictions", help="editlens results.jsonl or {id, score} JSONL (ids METHOD/UID)."),
    metric: Optional[str] = typer.Option(None, "--metric", help="Score to use from editlens results."),
    protocol: str = typer.Option("official", "--protocol", help="official (tanh of mean r), fisher, or mean."),
    n_boot: int = typer.Option(1000, "--n-boot"),
    seed: int = typer.Option(0, "--seed"),
    instructions: Optional[Path] = typer.Option(None, "--instructions", help="JSONL with uid and instruction, for the "
                                                "breakdown by edit type (default: samples.jsonl beside the ratings folder)."),
    json_out: bool = JsonOpt,
    report: Optional[Path] = ReportOpt,
) -> None:
    """ImagenHub text-guided editing: per-method Spearman, aggregated."""
    from editlens.meta.reports import imagenhub_report

    rep = imagenhub_report(ratings, judge_outputs, predictions, metric, protocol, n_boot, seed, instructions)
    _write_report(report, rep, "ImagenHub")
    if json_out:
        emit_json(rep)
        return
    typer.echo(f"ImagenHub ({rep['protocol']}: {rep['aggregation_note']})")
    for aspect, a in rep["aspects"].items():
        typer.echo(f"  {aspect:<3} {a['value']:.4f}  95% CI [{a['ci95'][0]:.4f}, {a['ci95'][1]:.4f}]")
    typer.echo(f"  items {rep['n_items']}, unparsable answers {rep['n_unparsable']}, "
               f"human inter-rater ICC(2,1) {rep['human_inter_rater_icc_2_1']:.3f}")
    _echo_trust(rep)


def _echo_trust(rep: dict) -> None:
    """The calibration (ECE before and after, out of fold) and the per-edit-type figures of a report."""
    cal = rep.get("calibration") or {}
    for ev, q in (cal.get("evaluators") or {}).items():
        typer.echo(f"  calibration of {ev} to {cal['target']}: ECE {q['ece_before']:.4f} as a raw probability, "
                   f"{q['ece_after']:.4f} after an isotonic map (out of fold; `editlens calibrate` saves it)")
    if rep.get("by_edit_type"):
        typer.echo("  by edit type" + (" (Spearman pooled over editing models)" if any(
            "spearman" in r for r in rep["by_edit_type"].values()) else "") + ":")
    for t, r in (rep.get("by_edit_type") or {}).items():
        fig = (f"Spearman {r['spearman']['value']:.3f}" if r.get("spearman", {}).get("value") is not None
               else f"accuracy {r['accuracy']:.3f}" if "accuracy" in r else "undefined")
        typer.echo(f"    {r.get('label', t):<17} n={r['n']:<5} {fig}")


@meta_app.command("genai-bench")
@guarded
def genai_bench(judge_outputs: Path = typer.Option(..., "--judge-outputs", help="Official result file (JSON list)."),
                json_out: bool = JsonOpt, report: Optional[Path] = ReportOpt) -> None:
    """GenAI-Bench image editing: official 4-way accuracy."""
    from editlens.meta.reports import genai_bench_report

    rep = genai_bench_report(judge_outputs)
    _write_report(report, rep, "GenAI-Bench")
    if json_out:
        emit_json(rep)
        return
    typer.echo(f"GenAI-Bench accuracy {rep['accuracy']:.4f} over {rep['n']} items ({rep['no_verdict']} without a verdict)")


@meta_app.command("pointwise")
@guarded
def pointwise(human: Path = typer.Option(..., "--human", help="JSONL {id, model, human}."),
              predictions: Path = typer.Option(..., "--predictions", help="JSONL {id, score} or editlens results.jsonl."),
              metric: Optional[str] = typer.Option(None, "--metric"),
              protocol: str = typer.Option("aurora", "--protocol", help="aurora (one Spearman over all items, as "
                                           "ADIEE's release; the per-model mean beside it), aurora-per-model "
                                           "(mean of per-model Spearman), official, fisher, mean."),
              n_boot: int = typer.Option(1000, "--n-boot"), seed: int = typer.Option(0, "--seed"),
              json_out: bool = JsonOpt, report: Optional[Path] = ReportOpt) -> None:
    """Point-wise agreement (AURORA-Bench style) with CIs and system-level tau."""
    from editlens.meta.reports import pointwise_report

    rep = pointwise_report(human, predictions, metric, protocol, n_boot, seed)
    if report is not None:
        from editlens.reporting.meta_html import pointwise_points

        _write_report(report, rep, "point-wise", {"points": pointwise_points(human, predictions, metric)})
    if json_out:
        emit_json(rep)
        return
    what = {"aurora": "one Spearman rho over all items, as ADIEE's release",
            "aurora-per-model": "mean over editing models of per-model Spearman rho",
            "official": "ImagenHub: tanh of the mean per-method Spearman rho (as published)",
            "fisher": "Fisher-z average of per-method Spearman rho",
            "mean": "mean of per-method Spearman rho"}.get(protocol, rep["protocol"])
    typer.echo(f"{rep['protocol']} ({what}): {rep['value']:.4f} over {rep['n_items']} items "
               f"({rep['n_unparsable']} unscored, {rep['n_missing']} missing)")
    for name, fig in rep.get("figures", {}).items():
        typer.echo(f"  {name.replace('_', ' '):<26} {fig['value']:.4f} over {fig['n_items']} items")
    for m, c in rep["overall"].items():
        typer.echo(f"  {m:<8} {c['value']:.4f}  95% CI [{c['ci95'][0]:.4f}, {c['ci95'][1]:.4f}]")
    typer.echo(f"  system-level Kendall tau {rep['system_level']['kendall_tau']:.4f}")
    _echo_trust(rep)


@meta_app.command("pairwise")
@guarded
def pairwise(human: Path = typer.Option(..., "--human", help="JSONL {id, a, b, preference}."),
             predictions: Path = typer.Option(..., "--predictions", help="JSONL {id, score} or editlens results.jsonl."),
             metric: Optional[str] = typer.Option(None, "--metric"),
             json_out: bool = JsonOpt, report: Optional[Path] = ReportOpt) -> None:
    """Pair-wise accuracy with tie calibration (Deutsch et al., 2023)."""
    from editlens.meta.reports import pairwise_report

    rep = pairwise_report(human, predictions, metric)
    if report is not None:
        from editlens.reporting.meta_html import pairwise_confusion

        _write_report(report, rep, "pair-wise", {"confusion": pairwise_confusion(human, predictions, rep["threshold"], metric)})
    if json_out:
        emit_json(rep)
        return
    typer.echo(f"accuracy {rep['accuracy']:.4f} (tie threshold {rep['threshold']:.4g}) over {rep['n']} pairs; "
               f"{rep['n_unparsable']} unscored, {rep['n_missing']} missing")
    _echo_trust(rep)

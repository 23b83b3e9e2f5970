"""``editlens probe``, ``editlens calibrate`` and ``editlens edit-types``:
can an evaluator be trusted on these edits, and what does its score mean."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer

from editlens.cli.common import emit_json, guarded, parse_models, split_names
from editlens.cli.options import (CacheOpt, ConcurrencyOpt, JudgeOpt, ModelOpt, OptionOpt, RetriesOpt, TemplateOpt,
                                   TimeoutOpt, VlmModelOpt, VlmOpt, extra_metrics, http_settings, vlm_options)

app = typer.Typer()

ColumnsOpt = typer.Option(None, "--columns", help="Map the file's columns, e.g. source=input,edited=output "
                          "(AURORA's edits.jsonl); without an id column, line numbers are ids.")
EncodingOpt = typer.Option("utf-8", "--encoding", help="Text encoding of the manifest (e.g. latin-1).")


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def _ci(ci: list[float] | None) -> str:
    return "undefined (n < 2)" if ci is None else f"[{100 * ci[0]:.1f}%, {100 * ci[1]:.1f}%]"


def _print_probe(doc: dict, by_type: bool) -> None:
    from editlens.cli.tables import print_table
    from editlens.data.edit_types import edit_type_label

    def rows(evaluators: dict, details: dict | None, prefix: list[str]) -> list[list[str]]:
        out = []
        for ev, r in evaluators.items():
            for c, s in r["controls"].items():
                d = (details or {}).get(ev, {}).get(c) if details is not None else None
                wtl = f"{d['wins']}/{d['ties']}/{d['losses']}" if d else "-"
                out.append(prefix + [ev, c, _pct(s["pass_rate"]), _ci(s["ci"]), str(s["n"]), wtl])
        return out

    details = {ev: d["controls"] for ev, d in doc.get("details", {}).items()}
    print_table("sanity probes: share of edits where the real edit scores strictly better than the control",
                ["evaluator", "control", "pass rate", "95% CI", "n", "better/tie/worse"],
                rows(doc["evaluators"], details, []))
    for ev, r in doc["evaluators"].items():
        typer.echo(f"{ev}: " + ("; ".join(r["verdicts"]) if r["verdicts"] else "passes every probe"))
    if by_type:
        table = []
        for t, v in doc["by_edit_type"].items():
            table += rows(v["evaluators"], doc.get("by_edit_type_details", {}).get(t), [f"{edit_type_label(t)} (n={v['n']})"])
        print_table("by edit type", ["edit type", "evaluator", "control", "pass rate", "95% CI", "n", "better/tie/worse"],
                    table)
        for t, v in doc["by_edit_type"].items():
            for ev, r in v["evaluators"].items():
                if r["verdicts"]:
                    typer.echo(f"{edit_type_label(t)} (n={v['n']}) {ev}: " + "; ".join(r["verdicts"]))
    for n in doc.get("notes") or []:
        typer.echo(f"note: {n}", err=True)
    if doc.get("n_not_built"):
        typer.echo(f"{doc['n_not_built']} control(s) could not be built (see 'not_built' in probe.json)", err=True)


@app.command("probe")
@guarded
def probe_cmd(
    manifest: Path = typer.Argument(..., help="Manifest of edits (.jsonl or .csv)."),
    out: Path = typer.Option(..., "--out", help="Run directory: the edits are scored here, the controls in OUT/probe "
                             "(rerun to resume); the result is OUT/probe.json."),
    metrics: Optional[str] = typer.Option(None, "--metrics", help="Comma-separated evaluators to probe (default: all available)."),
    controls: Optional[str] = typer.Option(None, "--controls", help="Comma-separated controls (default: noop, blank, "
                                           "noise, swapped, wrong_instruction, unrelated)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the controls (noise, which other edit) and of the bootstrap."),
    n_boot: int = typer.Option(1000, "--n-boot", min=10, help="Bootstrap resamples of each CI."),
    min_pass: float = typer.Option(0.75, "--min-pass", min=0.0, max=1.0,
                                   help="Pass rate under which an evaluator is called weak against a control."),
    by: Optional[str] = typer.Option(None, "--by", help="Also break down by: edit_type."),
    json_out: bool = typer.Option(False, "--json", help='Print {"evaluators": {NAME: {"controls": {CONTROL: '
                                  '{"pass_rate", "ci", "n"}}, "verdicts": [...]}}} (with --by edit_type, also "by_edit_type").'),
    report: bool = typer.Option(False, "--report", help="Also write OUT/report.html with a section on the probes."),
    batch_size: int = typer.Option(16, "--batch-size", min=1),
    workers: int = typer.Option(2, "--workers", min=1, help="Image-decoding threads."),
    skip_invalid: bool = typer.Option(False, "--skip-invalid", help="Drop bad manifest rows instead of stopping."),
    columns: Optional[str] = ColumnsOpt,
    encoding: str = EncodingOpt,
    model: Optional[List[str]] = ModelOpt,
    option: Optional[List[str]] = OptionOpt,
    device: str = typer.Option("auto", "--device", help="auto, cpu, cuda, cuda:1, mps."),
    judge: Optional[str] = JudgeOpt,
    vlm: Optional[str] = VlmOpt,
    vlm_model: Optional[str] = VlmModelOpt,
    cache: str = CacheOpt,
    template: Optional[List[str]] = TemplateOpt,
    progress: bool = typer.Option(True, "--progress/--no-progress"),
    wait: bool = typer.Option(False, "--wait", help="If another run holds OUT, queue behind it instead of exiting."),
    timeout: Optional[float] = TimeoutOpt,
    max_retries: Optional[int] = RetriesOpt,
    concurrency: Optional[int] = ConcurrencyOpt,
) -> None:
    """Sanity probes: does each evaluator score real edits better than controls
    (no-op, blank, noise, swapped, wrong instruction, unrelated image)?"""
    from editlens.data.manifest import read_manifest
    from editlens.models.resolve import pick_device
    from editlens.runner.selection import parse_options, select_metrics
    from editlens.trust.controls import parse_controls
    from editlens.trust.probe import run_probe

    if by not in (None, "edit_type"):
        raise typer.BadParameter(f"--by must be edit_type, got {by!r}")
    names = parse_controls(controls)
    http_settings(timeout, max_retries, concurrency)
    rep = read_manifest(manifest, skip_invalid=skip_invalid, columns=columns, encoding=encoding)
    for line, reason in rep.problems:
        typer.echo(f"skipped {manifest}:{line}: {reason}", err=True)
    sel = select_metrics(split_names(metrics), extra=extra_metrics(judge), models=parse_models(model),
                         options=parse_options(option or []), device=device,
                         with_reference=any(s.reference is not None for s in rep.samples),
                         vlm=vlm_options(vlm, vlm_model, cache, template, device))
    for name, reason in sel.skipped:
        typer.echo(f"metric {name} skipped: {reason}", err=True)
    if not sel.metrics:
        typer.echo("error: no metric can run", err=True)
        raise typer.Exit(2)
    doc = run_probe(rep.samples, sel.metrics, out, controls=names, seed=seed, n_boot=n_boot, min_pass=min_pass,
                    batch_size=batch_size, workers=workers, progress=progress, command=sys.argv,
                    device=pick_device(device) if device == "auto" else device, wait=wait,
                    extra_manifest={"manifest": str(manifest.resolve()), "skipped_rows": len(rep.problems),
                                    "skipped_metrics": dict(sel.skipped)},
                    say=lambda m: typer.echo(m, err=True))
    if doc.get("interrupted"):
        typer.echo("interrupted: finished batches are saved; rerun the same command to continue.", err=True)
        raise typer.Exit(130)
    typer.echo(f"{doc['computed']['edits']} edit and {doc['computed']['controls']} control results computed "
               f"(the rest reused) -> {out / 'probe.json'}", err=True)
    if report:
        from editlens.reporting.html import write_run_report

        typer.echo(f"wrote {write_run_report(out)}", err=True)
    if json_out:
        emit_json({"evaluators": doc["evaluators"]} | ({"by_edit_type": doc["by_edit_type"]} if by else {}))
        return
    _print_probe(doc, by == "edit_type")

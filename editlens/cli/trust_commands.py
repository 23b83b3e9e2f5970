"""``editlens probe``, ``editlens calibrate`` and ``editlens edit-types``:
can an evaluator be trusted on these edits, and what does its score mean."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, List, Optional

import typer

from editlens.cli.common import emit_json, guarded, output_dir, output_file, parse_models, require_samples, split_names
from editlens.cli.inputs import EditsOpt, EditsPatternOpt, ImageRootOpt, SplitOpt, read_input
from editlens.cli.options import (
    CacheOpt,
    CalibrationMethod,
    ConcurrencyOpt,
    DeviceOpt,
    DtypeOpt,
    JudgeOpt,
    ModelOpt,
    OptionOpt,
    RetriesOpt,
    TemplateOpt,
    TimeoutOpt,
    VlmModelOpt,
    VlmOpt,
    extra_metrics,
    http_settings,
    vlm_options,
)

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
    manifest: Path = typer.Argument(..., help="Manifest of edits: .jsonl, .csv, .json, parquet/arrow file or folder, "
                                    "or a `datasets` folder."),
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
    batch_size: int = typer.Option(16, "--batch-size", min=1, help="Items per batch (larger is faster where memory allows)."),
    workers: int = typer.Option(2, "--workers", min=1, help="Image-decoding threads."),
    skip_invalid: bool = typer.Option(False, "--skip-invalid", help="Drop bad manifest rows instead of stopping."),
    columns: Optional[str] = ColumnsOpt,
    encoding: str = EncodingOpt,
    split: Optional[str] = SplitOpt,
    edits: Optional[Path] = EditsOpt,
    edits_pattern: Optional[str] = EditsPatternOpt,
    image_root: Optional[Path] = ImageRootOpt,
    model: Optional[List[str]] = ModelOpt,
    option: Optional[List[str]] = OptionOpt,
    device: str = DeviceOpt,
    dtype: str = DtypeOpt,
    judge: Optional[str] = JudgeOpt,
    vlm: Optional[str] = VlmOpt,
    vlm_model: Optional[str] = VlmModelOpt,
    cache: str = CacheOpt,
    template: Optional[List[str]] = TemplateOpt,
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar."),
    wait: bool = typer.Option(False, "--wait", help="If another run holds OUT, queue behind it instead of exiting."),
    timeout: Optional[float] = TimeoutOpt,
    max_retries: Optional[int] = RetriesOpt,
    concurrency: Optional[int] = ConcurrencyOpt,
) -> None:
    """Sanity probes: does each evaluator score real edits above controls (no-op, blank, noise, swapped, wrong instruction, unrelated image)?"""
    from editlens.runner.selection import parse_options, select_metrics
    from editlens.trust.controls import parse_controls
    from editlens.trust.probe import run_probe

    if by not in (None, "edit_type"):
        raise typer.BadParameter(f"--by must be edit_type, got {by!r}")
    names = parse_controls(controls)
    output_dir(out)
    http = http_settings(timeout, max_retries, concurrency)
    rep, inputs = read_input(manifest, skip_invalid=skip_invalid, columns=columns, encoding=encoding, split=split,
                             edits=edits, edits_pattern=edits_pattern, image_root=image_root)
    require_samples(rep, manifest)
    sel = select_metrics(split_names(metrics), extra=extra_metrics(judge), models=parse_models(model),
                         options=parse_options(option or []), device=device, dtype=dtype,
                         with_reference=any(s.reference is not None for s in rep.samples),
                         vlm=vlm_options(vlm, vlm_model, cache, template, device, dtype=dtype, http=http))
    for name, reason in sel.skipped:
        typer.echo(f"metric {name} skipped: {reason}", err=True)
    if not sel.metrics:
        typer.echo("error: no metric can run", err=True)
        raise typer.Exit(2)
    doc = run_probe(rep.samples, sel.metrics, out, controls=names, seed=seed, n_boot=n_boot, min_pass=min_pass,
                    batch_size=batch_size, workers=workers, progress=progress, command=sys.argv,
                    device=device, dtype=dtype, wait=wait,
                    extra_manifest={**inputs, "skipped_metrics": dict(sel.skipped), "columns": columns},
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


# ------------------------------------------------------------------------------------------ calibrate

calibrate_app = typer.Typer(no_args_is_help=True, help="Fit a map from an evaluator's score to the probability that "
                            "people rate the edit good (or prefer it), on a benchmark with human labels.")
app.add_typer(calibrate_app, name="calibrate")

CalOutOpt = typer.Option(..., "--out", help="Calibration file to write (JSON; maps of other evaluators in it are kept). "
                         "Use it with `editlens run/score --calibration FILE`.")
MethodOpt = typer.Option("isotonic", "--method", help="isotonic (monotone steps) or platt (logistic curve).")
FoldsOpt = typer.Option(5, "--folds", min=2, help="Cross-validation folds for the out-of-fold ECE (grouped by source).")
SeedOpt = typer.Option(0, "--seed", help="Random seed (the same seed reproduces the same result).")
BinsOpt = typer.Option(10, "--bins", min=2, help="Equal-width probability bins of the ECE and the reliability diagram.")
CalJsonOpt = typer.Option(False, "--json", help="Print the report (ECE before/after, reliability bins) as JSON.")
CalReportOpt = typer.Option(None, "--report", help="Also write an HTML report with the reliability diagrams.")
MetricListOpt = typer.Option(None, "--metric", help="Score(s) to use from editlens results (comma-separated: one map each).")


def _calibrate(labelled: Any, method: str, folds: int, seed: int, bins: int, out: Path, json_out: bool,
               report: Optional[Path], title: str) -> None:
    from editlens.meta.calibration import calibration_report, save_calibration

    output_file(out)
    output_file(report, "--report")
    rep, maps = calibration_report(labelled, method, folds, seed, bins)
    path, kept = save_calibration(maps, out)
    rep["file"] = str(path)
    typer.echo(f"wrote {path}" + (f" (kept the maps of {', '.join(kept)})" if kept else ""), err=True)
    if report is not None:
        from editlens.reporting.html import write_meta_report

        typer.echo(f"wrote {write_meta_report(rep, report, f'calibration · {title}')}", err=True)
    if json_out:
        emit_json(rep)
        return
    from editlens.core.evidence import shortfall

    typer.echo(f"{title}: {method} map to {rep['target']} ({folds}-fold cross-validation, seed {seed})")
    for m in maps:
        q = m.quality
        ci = q.get("ece_after_ci95")
        few = shortfall(m.n, "")
        if few:
            typer.echo(f"  {m.evaluator:<12} {few}: the map and its ECE rest on very few edits")
        typer.echo(f"  {m.evaluator:<12} n={m.n:<5} ECE before {q['ece_before']:.4f}  after (out of fold) "
                   f"{q['ece_after']:.4f}" + (f" [{ci[0]:.4f}, {ci[1]:.4f}]" if ci else "")
                   + f"  in sample {q['ece_in_sample']:.4f}  Brier {q['brier_before']:.4f} -> {q['brier_after']:.4f}")


@calibrate_app.command("run")
@guarded
def calibrate_run(
    bench: str = typer.Argument(..., help="A human-label benchmark (`editlens meta-eval list`)."),
    data: Path = typer.Option(..., "--data", help="Its human labels, as `meta-eval run` reads them."),
    predictions: Path = typer.Option(..., "--predictions", help="The evaluator's scores (editlens results.jsonl or "
                                     "{id, score} JSONL), or what the benchmark reads (ImagenHub: a judge-answers folder)."),
    metric: Optional[str] = MetricListOpt,
    good_at: Optional[float] = typer.Option(None, "--good-at", help="Where the benchmark takes it: an edit is good when "
                                            "its human score (ImagenHub: a rater's sqrt(SC*PQ)) is at least this."),
    option: Optional[List[str]] = typer.Option(None, "--option", help="A benchmark's own option, KEY=VALUE (repeatable)."),
    out: Path = CalOutOpt, method: CalibrationMethod = MethodOpt, folds: int = FoldsOpt, seed: int = SeedOpt, bins: int = BinsOpt,
    json_out: bool = CalJsonOpt, report: Optional[Path] = CalReportOpt,
) -> None:
    """P(people rate the edit good, or prefer it) from the score, to the benchmark's own calibration target."""
    from editlens.bench.evaluate import calibration, human_label_benchmark
    from editlens.cli.meta_commands import parse_options

    options = parse_options(option)
    if good_at is not None:
        options["good_at"] = good_at
    _calibrate(calibration(bench, data, predictions, metric, **options), method, folds, seed, bins, out, json_out,
               report, human_label_benchmark(bench).calibration_title(data))


@calibrate_app.command("imagenhub", hidden=True)
@guarded
def calibrate_imagenhub(
    ratings: Path = typer.Option(..., "--ratings", help="Folder of Text-Guided_IE_rater*.tsv."),
    judge_outputs: Optional[Path] = typer.Option(None, "--judge-outputs", help="Folder <Method>/{SC,PQ}.json (VIEScore answers)."),
    predictions: Optional[Path] = typer.Option(None, "--predictions", help="editlens results.jsonl or {id, score} JSONL (ids METHOD/UID)."),
    metric: Optional[str] = MetricListOpt,
    name: Optional[str] = typer.Option(None, "--name", help="Evaluator the map is for (default: viescore for "
                                       "--judge-outputs, the evaluator's name for --predictions)."),
    good_at: float = typer.Option(0.5, "--good-at", help="A rater finds an edit good when sqrt(SC*PQ) >= this."),
    out: Path = CalOutOpt, method: CalibrationMethod = MethodOpt, folds: int = FoldsOpt, seed: int = SeedOpt, bins: int = BinsOpt,
    json_out: bool = CalJsonOpt, report: Optional[Path] = CalReportOpt,
) -> None:
    """ImagenHub: P(a rater finds the edit good) from the score (= calibrate run imagenhub)."""
    from editlens.bench.imagenhub import imagenhub_labels

    _calibrate(imagenhub_labels(ratings, judge_outputs, predictions, metric, good_at, name), method, folds, seed, bins,
               out, json_out, report, "ImagenHub")


@calibrate_app.command("pointwise", hidden=True)
@guarded
def calibrate_pointwise(
    human: Path = typer.Option(..., "--human", help="JSONL {id, human} (optional 'group': e.g. the source image)."),
    predictions: Path = typer.Option(..., "--predictions", help="JSONL {id, score} or editlens results.jsonl."),
    metric: Optional[str] = MetricListOpt,
    good_at: Optional[float] = typer.Option(None, "--good-at", help="An edit is good when human >= this (default: "
                                            "human scores in [0, 1] are the probability itself)."),
    out: Path = CalOutOpt, method: CalibrationMethod = MethodOpt, folds: int = FoldsOpt, seed: int = SeedOpt, bins: int = BinsOpt,
    json_out: bool = CalJsonOpt, report: Optional[Path] = CalReportOpt,
) -> None:
    """Point-wise human scores: P(the edit is good) from the score (= calibrate run aurora)."""
    from editlens.bench.aurora import pointwise_labels

    _calibrate(pointwise_labels(human, predictions, metric, good_at), method, folds, seed, bins, out, json_out,
               report, "point-wise")


@calibrate_app.command("pairwise", hidden=True)
@guarded
def calibrate_pairwise(
    human: Path = typer.Option(..., "--human", help="JSONL {id, a, b, preference}."),
    predictions: Path = typer.Option(..., "--predictions", help="JSONL {id, score} or editlens results.jsonl."),
    metric: Optional[str] = MetricListOpt,
    out: Path = CalOutOpt, method: CalibrationMethod = MethodOpt, folds: int = FoldsOpt, seed: int = SeedOpt, bins: int = BinsOpt,
    json_out: bool = CalJsonOpt, report: Optional[Path] = CalReportOpt,
) -> None:
    """Pair-wise preferences: P(people prefer A) from score(A) - score(B) (= calibrate run aurora on pairs)."""
    from editlens.bench.aurora import pairwise_labels

    _calibrate(pairwise_labels(human, predictions, metric), method, folds, seed, bins, out, json_out, report,
               "pair-wise")


# ------------------------------------------------------------------------------------------ edit types

@app.command("edit-types")
@guarded
def edit_types_cmd(
    manifest: Path = typer.Argument(..., help="Manifest of edits (.jsonl or .csv)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Write the manifest with an edit_type column (JSONL)."),
    columns: Optional[str] = ColumnsOpt,
    encoding: str = EncodingOpt,
    skip_invalid: bool = typer.Option(False, "--skip-invalid", help="Drop bad manifest rows instead of stopping."),
    vlm: Optional[str] = typer.Option(None, "--vlm", help="Ask this model (hub id, folder or http(s)://HOST/v1) for "
                                      "the types instead of the rules; an answer naming no single type keeps the rules' type."),
    vlm_model: Optional[str] = VlmModelOpt,
    cache: str = CacheOpt,
    template: Optional[List[str]] = TemplateOpt,
    device: str = DeviceOpt,
    dtype: str = DtypeOpt,
    json_out: bool = typer.Option(False, "--json", help="Print {id: edit_type} (and how each was decided)."),
    timeout: Optional[float] = TimeoutOpt,
    max_retries: Optional[int] = RetriesOpt,
    concurrency: Optional[int] = ConcurrencyOpt,
) -> None:
    """The edit type of each instruction (add, remove, replace, colour, style, background, text, ...): rules, a judge or a column."""
    from collections import Counter

    from editlens.data.edit_types import COLUMN, edit_type_label, edit_type_of, edit_types
    from editlens.data.manifest import read_manifest, write_manifest

    http = http_settings(timeout, max_retries, concurrency)
    rep = read_manifest(manifest, skip_invalid=skip_invalid, columns=columns, encoding=encoding, check_files=False)
    for line, reason in rep.problems:
        typer.echo(f"skipped {manifest}:{line}: {reason}", err=True)
    decided: dict[str, dict] = {}
    for s in rep.samples:
        given = s.metadata.get(COLUMN) not in (None, "")
        decided[s.id] = {"edit_type": edit_type_of(s), "by": "column" if given else "rules"}
    if vlm:
        from editlens.backends.factory import create_backend
        from editlens.judges.templates import load_template
        from editlens.trust.edit_type_judge import judge_edit_types

        opts = vlm_options(vlm, vlm_model, cache, template, device, dtype=dtype, http=http) or {}
        backend = create_backend(vlm, device=device, dtype=dtype, cache=opts["cache"], http_model=vlm_model,
                                 http=http)
        ask = [s for s in rep.samples if decided[s.id]["by"] == "rules"]  # a manifest column is kept as given
        answers = judge_edit_types([s.instruction for s in ask], backend,
                                   load_template("edit_type", opts.get("templates")))
        for s, a in zip(ask, answers):
            decided[s.id] = a
        bad = sum(a["by"] == "rules" for a in answers)
        if bad:
            typer.echo(f"{bad} judge answer(s) named no single type: the rules' type is kept (raw answers in --json)",
                       err=True)
    if out is not None:
        for s in rep.samples:
            s.metadata[COLUMN] = decided[s.id]["edit_type"]
        typer.echo(f"wrote {write_manifest(rep.samples, out)}", err=True)
    if json_out:
        emit_json(decided)
        return
    from editlens.cli.tables import print_table

    counts = Counter(d["edit_type"] for d in decided.values())
    print_table("edit types", ["edit type", "n", "share", "what"],
                [[edit_type_label(t), str(counts[t]), f"{counts[t] / max(1, len(decided)):.1%}",
                  edit_types().descriptions.get(t, "")] for t in edit_types().names if counts.get(t)],
                wrap=("what",))

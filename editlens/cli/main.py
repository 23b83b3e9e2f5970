"""``editlens``: score edits, run datasets, inspect runs, meta-evaluate."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import List, Optional

import typer

from editlens.cli.common import emit_json, guarded, parse_models, split_names
from editlens.errors import EditlensError

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Judge instruction-guided image edits: what changed, where, and how well.")
runs_app = typer.Typer(no_args_is_help=True, help="Inspect run directories.")
app.add_typer(runs_app, name="runs")

ModelOpt = typer.Option(None, "--model", help="Model for a role, ROLE=HUB_ID_OR_DIR (e.g. clip=./clip). Repeatable.")
OptionOpt = typer.Option(None, "--option", help="Metric option METRIC.KEY=VALUE (e.g. l1.region=outside). Repeatable.")
JudgeOpt = typer.Option(None, "--judge", help="Comma-separated judges: viescore, yes_no (need --vlm).")
VlmOpt = typer.Option(None, "--vlm", help="Vision-language model: hub id, local dir, or http(s)://HOST/v1 of an OpenAI-compatible server.")
VlmModelOpt = typer.Option(None, "--vlm-model", help="Model name on the server (default: the first it lists).")
CacheOpt = typer.Option("default", "--cache", help="Response cache: 'default' (user cache dir), a file path, or 'none'.")
CaptionsOpt = typer.Option(False, "--captions", help="Write missing captions with the VLM (for CLIP-T/CLIP-D).")
TemplateOpt = typer.Option(None, "--template", help="Replace a prompt template, NAME=PATH (e.g. viescore_sc=my.txt). Repeatable.")
SamplesOpt = typer.Option(1, "--samples", min=1, help="Self-ensembling: answers asked per judge question "
                          "(needs --temperature > 0); the score is the mean over parsed answers. Each is cached.")
TemperatureOpt = typer.Option(0.0, "--temperature", min=0.0, help="Sampling temperature of judge answers (0: greedy).")
TimeoutOpt = typer.Option(None, "--timeout", help="Seconds an HTTP judge request may take before it is retried (default 120).")
RetriesOpt = typer.Option(None, "--max-retries", help="Retries of an HTTP judge request after 429/5xx/time-outs (default 5).")
ConcurrencyOpt = typer.Option(None, "--concurrency", help="HTTP judge requests in flight at once (default 8).")


def _http(timeout, max_retries, concurrency):  # type: ignore[no-untyped-def]
    """Apply --timeout/--max-retries/--concurrency to the HTTP backends this command creates."""
    from editlens.backends.factory import HTTP_BUILTIN, set_http_defaults

    given = {"timeout": timeout, "max_retries": max_retries, "concurrency": concurrency}
    set_http_defaults(**{k: HTTP_BUILTIN[k] if v is None else v for k, v in given.items()})


def _vlm_options(vlm, vlm_model, cache, template, device="auto", samples=1, temperature=0.0):  # type: ignore[no-untyped-def]
    from editlens.judges.ensemble import check_sampling

    check_sampling(samples, temperature)  # a clear error before any model loads
    if not vlm:
        return None
    templates = parse_models(template, "--template", "NAME=PATH (e.g. viescore_sc=my_prompt.txt)")
    from editlens.runner.checks import check_templates

    check_templates(templates)  # before any model loads
    opts = {"vlm": vlm, "vlm_model": vlm_model, "device": device, "templates": templates,
            "cache": {"default": True, "none": False}.get(cache, cache)}
    if samples > 1 or temperature > 0:  # only then, so settings (and cached rows) of greedy runs stay as they were
        opts.update(samples=samples, temperature=temperature)
    return opts


def _extra(judge, captions=False, dice=False):  # type: ignore[no-untyped-def]
    """Metrics asked for by --judge, --captions and --dice, added to --metrics or the defaults."""
    return (["captions"] if captions else []) + (split_names(judge) or []) + (["dice"] if dice else [])


@app.command("metrics")
@guarded
def metrics_cmd(json_out: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """List metrics with what they need, their direction, range and model."""
    from editlens.metrics.availability import metric_availability
    from editlens.metrics.registry import list_metrics

    rows = []
    for spec in list_metrics():
        ok, reason = metric_availability(spec)
        rows.append({**spec.to_dict(), "available": ok, "unavailable_reason": reason})
    if json_out:
        emit_json(rows)
        return
    from editlens.cli.tables import print_table

    print_table("editlens metrics", ["name", "needs", "better", "range", "model", "available", "description"],
                [[r["name"], ", ".join(r["needs"]), "higher" if r["higher_is_better"] else "lower",
                  "[" + ", ".join("inf" if v is None else f"{v:g}" for v in r["range"]) + "]", r["model"] or "-",
                  "yes" if r["available"] else "no", r["description"]] for r in rows])


@app.command("score")
@guarded
def score_cmd(
    source: Path = typer.Option(..., "--source", help="Original image."),
    edited: Path = typer.Option(..., "--edited", help="Edited image."),
    instruction: str = typer.Option(..., "--instruction", help="The edit instruction."),
    reference: Optional[Path] = typer.Option(None, "--reference", help="Reference (ground-truth) edit."),
    metrics: Optional[str] = typer.Option(None, "--metrics", help="Comma-separated metric names (default: all available)."),
    source_caption: Optional[str] = typer.Option(None, "--source-caption"),
    target_caption: Optional[str] = typer.Option(None, "--target-caption"),
    boxes: Optional[str] = typer.Option(None, "--boxes", help="JSON list of [x0,y0,x1,y1] for masked metrics."),
    mask: Optional[Path] = typer.Option(None, "--mask", help="Mask image for masked metrics."),
    model: Optional[List[str]] = ModelOpt,
    option: Optional[List[str]] = OptionOpt,
    size_policy: str = typer.Option("resize", "--size-policy", help="resize (edited to source size) or error."),
    max_pixels: int = typer.Option(178_956_970, "--max-pixels", help="Refuse larger images (decompression bombs)."),
    json_out: bool = typer.Option(False, "--json", help="Print the stable JSON document (schema editlens.score/1)."),
    judge: Optional[str] = JudgeOpt,
    vlm: Optional[str] = VlmOpt,
    vlm_model: Optional[str] = VlmModelOpt,
    cache: str = CacheOpt,
    template: Optional[List[str]] = TemplateOpt,
    captions: bool = CaptionsOpt,
    samples: int = SamplesOpt,
    temperature: float = TemperatureOpt,
    timeout: Optional[float] = TimeoutOpt,
    max_retries: Optional[int] = RetriesOpt,
    concurrency: Optional[int] = ConcurrencyOpt,
) -> None:
    """Score one edit."""
    from editlens.core.images import ImageLoadOptions
    from editlens.runner.scoring import score_edit
    from editlens.runner.selection import parse_options

    _http(timeout, max_retries, concurrency)
    from editlens.data.validation import parse_boxes

    meta = {}
    if boxes:
        try:
            meta["boxes"] = parse_boxes(boxes)
        except EditlensError as exc:
            raise typer.BadParameter(str(exc), param_hint="--boxes") from None
    if mask:
        meta["mask"] = str(mask)
    report = score_edit(
        str(source), str(edited), instruction, reference=str(reference) if reference else None,
        metrics=split_names(metrics), extra=_extra(judge, captions),
        vlm=_vlm_options(vlm, vlm_model, cache, template, samples=samples, temperature=temperature),
        source_caption=source_caption, target_caption=target_caption,
        models=parse_models(model), options=parse_options(option or []),
        image_options=ImageLoadOptions(max_pixels=max_pixels, size_policy=size_policy), metadata=meta,
        progress=sys.stderr.isatty(),  # judge calls take seconds: show which metric is running
    )
    if json_out:
        emit_json({"schema": "editlens.score/1",
                   "sample": {"source": str(source), "edited": str(edited), "instruction": instruction,
                              "reference": str(reference) if reference else None},
                   **report.to_dict()})
        return
    _print_scores(report)


def _print_scores(report) -> None:  # type: ignore[no-untyped-def]
    from editlens.cli.tables import print_table

    rows = []
    for name, s in report.scores.items():
        note = s.reason or ""
        regions = (s.details or {}).get("regions")
        if regions is not None:
            note = f"{len(regions)} changed region(s): " + "; ".join(
                f"box {r['box']} area {r['area_fraction']:.1%}" for r in regions[:5])
        rows.append([name, "-" if s.value is None else f"{s.value:.4f}", s.status, note])
    print_table("scores", ["metric", "value", "status", "note"], rows)  # full metric names, piped or not
    for note in report.notes:
        typer.echo(f"input: {note}", err=True)


@app.command("run")
@guarded
def run_cmd(
    manifest: Path = typer.Argument(..., help="Manifest of edits (.jsonl or .csv)."),
    out: Path = typer.Option(..., "--out", help="Run directory (created; rerun to resume)."),
    metrics: Optional[str] = typer.Option(None, "--metrics", help="Comma-separated metric names (default: all available)."),
    batch_size: int = typer.Option(16, "--batch-size", min=1),
    workers: int = typer.Option(2, "--workers", min=1, help="Image-decoding threads."),
    skip_invalid: bool = typer.Option(False, "--skip-invalid", help="Drop bad manifest rows instead of stopping."),
    model: Optional[List[str]] = ModelOpt,
    option: Optional[List[str]] = OptionOpt,
    size_policy: str = typer.Option("resize", "--size-policy"),
    max_pixels: int = typer.Option(178_956_970, "--max-pixels"),
    device: str = typer.Option("auto", "--device", help="auto, cpu, cuda, cuda:1, mps."),
    export: Optional[str] = typer.Option(None, "--export", help="Also export long-format rows: csv, parquet, jsonl (comma-separated)."),
    progress: bool = typer.Option(True, "--progress/--no-progress"),
    executor: str = typer.Option("local", "--executor", help="local, or ray (batches spread over a Ray cluster)."),
    address: Optional[str] = typer.Option(None, "--address", help="Ray cluster address (default: start a local Ray)."),
    ray_workers: Optional[int] = typer.Option(None, "--ray-workers", help="Ray actors (default: one per CPU, or per GPU)."),
    gpus_per_worker: float = typer.Option(0.0, "--gpus-per-worker", help="GPUs each Ray actor holds (e.g. 1)."),
    judge: Optional[str] = JudgeOpt,
    vlm: Optional[str] = VlmOpt,
    vlm_model: Optional[str] = VlmModelOpt,
    cache: str = CacheOpt,
    template: Optional[List[str]] = TemplateOpt,
    captions: bool = CaptionsOpt,
    dice: bool = typer.Option(False, "--dice", help="Also run DICE (differences + coherence; model-free detector without --vlm)."),
    samples: int = SamplesOpt,
    temperature: float = TemperatureOpt,
    retry_failed: bool = typer.Option(True, "--retry-failed/--no-retry-failed",
                                      help="Rerun: retry results that failed (transport errors, crashes)."),
    retry_unscored: bool = typer.Option(False, "--retry-unscored",
                                        help="Rerun: also retry answers that could not be parsed."),
    wait: bool = typer.Option(False, "--wait", help="If another run holds --out, queue behind it instead of exiting."),
    columns: Optional[str] = typer.Option(None, "--columns", help="Map the file's columns, e.g. source=input,edited=output "
                                          "(AURORA's edits.jsonl); without an id column, line numbers are ids."),
    encoding: str = typer.Option("utf-8", "--encoding", help="Text encoding of the manifest (e.g. latin-1)."),
    timeout: Optional[float] = TimeoutOpt,
    max_retries: Optional[int] = RetriesOpt,
    concurrency: Optional[int] = ConcurrencyOpt,
) -> None:
    """Score every edit of a manifest into a resumable run directory."""
    _http(timeout, max_retries, concurrency)
    from editlens.core.images import ImageLoadOptions
    from editlens.data.manifest import read_manifest
    from editlens.models.resolve import pick_device
    from editlens.runner.run import run_evaluation
    from editlens.runner.selection import parse_options, select_metrics
    from editlens.runner.store import ResultsStore, export as export_rows

    report = read_manifest(manifest, skip_invalid=skip_invalid, columns=columns, encoding=encoding)
    for line, reason in report.problems:
        typer.echo(f"skipped {manifest}:{line}: {reason}", err=True)
    sel = select_metrics(split_names(metrics), extra=_extra(judge, captions, dice), models=parse_models(model),
                         options=parse_options(option or []), device=device,
                         with_reference=any(s.reference is not None for s in report.samples),
                         vlm=_vlm_options(vlm, vlm_model, cache, template, device, samples, temperature))
    for name, reason in sel.skipped:
        typer.echo(f"metric {name} skipped: {reason}", err=True)
    if not sel.metrics:
        typer.echo("error: no metric can run", err=True)
        raise typer.Exit(2)
    image_options = ImageLoadOptions(max_pixels=max_pixels, size_policy=size_policy)
    runner_executor = None
    if executor == "ray":
        from editlens.runner.executors import RayExecutor

        runner_executor = RayExecutor(sel.metrics, image_options, address=address, num_workers=ray_workers,
                                      gpus_per_worker=gpus_per_worker)
    elif executor != "local":
        raise typer.BadParameter(f"--executor must be local or ray, got {executor!r}")
    result = run_evaluation(
        report.samples, sel.metrics, out, batch_size=batch_size, workers=workers, progress=progress,
        image_options=image_options, executor=runner_executor,
        retry_failed=retry_failed, retry_unscored=retry_unscored, wait=wait,
        command=sys.argv, device=pick_device(device) if device == "auto" else device,
        extra_manifest={"manifest": str(manifest.resolve()), "skipped_rows": len(report.problems),
                        "skipped_metrics": dict(sel.skipped)},
    )
    if export:
        store = ResultsStore(out)
        rows = [r for r in store.rows() if r["evaluator"] in {m.name for m in sel.metrics}]
        for fmt in export.split(","):
            typer.echo(f"exported {export_rows(rows, out / f'results_long.{fmt.strip()}')}", err=True)
        store.close()
    s = result.summary
    typer.echo(f"{s['samples']} samples: {result.computed} results computed, {result.reused} reused "
               f"-> {out}/results.jsonl, summary.json, manifest.json")
    for name, c in s["counts"].items():
        mean = s["means"][name]
        typer.echo(f"  {name:<12} scored {c['scored']:>5}  skipped {c['skipped']:>4}  unscored {c['unscored']:>4}  "
                   f"failed {c['failed']:>4}  info {c.get('info', 0):>4}  mean {'-' if mean is None else f'{mean:.4f}'}")
    failed = sum(c["failed"] for c in s["counts"].values())
    if failed and not result.interrupted:
        typer.echo(f"{failed} result(s) failed (see `editlens runs failures {out}`); rerun the same command to "
                   "retry them.", err=True)
    if result.interrupted:
        typer.echo("interrupted: finished batches are saved; rerun the same command to continue.", err=True)
        raise typer.Exit(130)


@runs_app.command("show")
@guarded
def runs_show(run_dir: Path = typer.Argument(...)) -> None:
    """Print a run's manifest (how it was produced)."""
    from editlens.reporting.runs import load_run_meta

    emit_json(load_run_meta(run_dir, "manifest"))


@runs_app.command("failures")
@guarded
def runs_failures(run_dir: Path = typer.Argument(...), json_out: bool = typer.Option(False, "--json")) -> None:
    """List samples that failed or could not be scored, with reasons."""
    from editlens.reporting.runs import failures

    rows = failures(run_dir)
    if json_out:
        emit_json(rows)
        return
    for r in rows:
        typer.echo(f"{r['sample_id']}\t{r['evaluator']}\t{r['status']}\t{r['reason']}")
    typer.echo(f"{len(rows)} failed/unscored result(s)", err=True)


@runs_app.command("summary")
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
        _print_rows(extra["rows"])


def _print_rows(rows) -> None:  # type: ignore[no-untyped-def]
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


@app.command("dice-rank")
@guarded
def dice_rank_cmd(run_dir: Path = typer.Argument(...), json_out: bool = typer.Option(False, "--json")) -> None:
    """DICE model ranking of a run: correct edits, unwanted edits, no visual change
    (rates over ranked samples; unparsable, truncated and partly judged ones counted apart)."""
    from editlens.reporting.runs import evaluator_summary

    rows = evaluator_summary(run_dir, "dice")
    if not rows:
        typer.echo(f"error: {run_dir} has no DICE results; run with --dice", err=True)
        raise typer.Exit(2)
    if json_out:
        emit_json(rows)
        return
    typer.echo("DICE ranking (rates over ranked samples: parsed and fully judged)")
    _print_rows(rows)


@app.command("dice-eval")
@guarded
def dice_eval_cmd(gt: Path = typer.Option(..., "--gt", help="Annotated JSONL (DICE-D style)."),
                  predictions: Path = typer.Option(..., "--predictions", help="results.jsonl of `run --dice`, or DICE JSONL."),
                  judge_gt: bool = typer.Option(False, "--judge-gt", help="Also judge the ground-truth differences "
                                                "with --vlm and report coherence accuracy."),
                  vlm: Optional[str] = VlmOpt, vlm_model: Optional[str] = VlmModelOpt, cache: str = CacheOpt,
                  template: Optional[List[str]] = TemplateOpt,
                  gt_boxes: str = typer.Option("fraction", "--gt-boxes", help="Units of the ground-truth boxes: "
                                               "fraction (0-1) or pixels (a line may set its own 'box_units')."),
                  samples: int = SamplesOpt, temperature: float = TemperatureOpt,
                  json_out: bool = typer.Option(False, "--json"), timeout: Optional[float] = TimeoutOpt,
                  max_retries: Optional[int] = RetriesOpt, concurrency: Optional[int] = ConcurrencyOpt) -> None:
    """COCO-style AP of DICE's detections (pycocotools), class-agnostic and -aware, coherence AP and accuracy."""
    _http(timeout, max_retries, concurrency)
    from editlens.dice.evaluation import (coherence_accuracy, evaluate_detection, judge_ground_truth,
                                          load_ground_truth, load_predictions_detailed)

    rows = load_ground_truth(gt, gt_boxes)
    preds, pred_problems = load_predictions_detailed(predictions)
    rep = evaluate_detection(rows, preds)
    rep["predictions_without_usable_answer"] = {"n": len(pred_problems), "samples": pred_problems}
    rep["ground_truth_boxes"] = gt_boxes  # the units the ground truth was read in (lines may set their own)
    if judge_gt:
        if not vlm:
            typer.echo("error: --judge-gt needs --vlm", err=True)
            raise typer.Exit(2)
        from editlens.dice.pipeline import DicePipeline

        opts = _vlm_options(vlm, vlm_model, cache, template, samples=samples, temperature=temperature) or {}
        opts.pop("vlm", None)
        pipe = DicePipeline(vlm, "mllm", **opts)
        rep["coherence_accuracy"] = coherence_accuracy(rows, judge_ground_truth(rows, pipe, gt.resolve().parent))
    if json_out:
        emit_json(rep)
        return
    f = lambda v: "-" if v is None else f"{100 * v:.1f}"  # noqa: E731
    acc = rep.pop("coherence_accuracy", None)
    unusable = rep.pop("predictions_without_usable_answer")
    typer.echo(f"ground-truth boxes read as {rep.pop('ground_truth_boxes')} (unless a line sets box_units)")
    for name, r in rep.items():
        typer.echo(f"{name:<15} AP {f(r['AP'])}  AP50 {f(r['AP50'])}  AP75 {f(r['AP75'])}  "
                   f"S/M/L {f(r['APs'])}/{f(r['APm'])}/{f(r['APl'])}  (gt {r['n_gt']}, pred {r['n_pred']})")
    typer.echo("per command: " + ", ".join(f"{k} {f(v)}" for k, v in rep["class_aware"]["per_command"].items()))
    typer.echo(f"coherence AP leaves out {rep['coherence_ap']['n_pred_unjudged']} detection(s) without a verdict; "
               f"{unusable['n']} sample(s) had no usable detector answer (counted as detecting nothing)")
    if acc:
        typer.echo(f"coherence accuracy on ground-truth differences: {f(acc['accuracy'])} over {acc['n']} "
                   f"({acc['unparsable']} unparsable)")


@app.command("dice")
@guarded
def dice_cmd(
    source: Path = typer.Option(..., "--source"),
    edited: Path = typer.Option(..., "--edited"),
    instruction: str = typer.Option(..., "--instruction"),
    vlm: Optional[str] = VlmOpt,
    vlm_model: Optional[str] = VlmModelOpt,
    detector: str = typer.Option("auto", "--detector", help="auto (mllm with --vlm, else changemap), mllm, changemap."),
    cache: str = CacheOpt,
    template: Optional[List[str]] = TemplateOpt,
    draw: Optional[Path] = typer.Option(None, "--draw", help="Write both images with the boxes drawn into this folder."),
    boxes: str = typer.Option("auto", "--boxes", help="How the VLM writes box coordinates: auto (from the model "
                              "family), fraction (0-1), per-mille (0-1000, Qwen2-VL), pixels."),
    samples: int = SamplesOpt,
    temperature: float = TemperatureOpt,
    json_out: bool = typer.Option(False, "--json"),
    timeout: Optional[float] = TimeoutOpt,
    max_retries: Optional[int] = RetriesOpt,
    concurrency: Optional[int] = ConcurrencyOpt,
    dice_preset: Optional[str] = typer.Option(None, "--dice-preset", help="Released-style models: preset name (dice-idefics3) or JSON file."),
    dice_detector: Optional[str] = typer.Option(None, "--dice-detector", help="Released-style detector: BASE[+ADAPTER]."),
    dice_coherence: Optional[str] = typer.Option(None, "--dice-coherence", help="Released-style coherence estimator: BASE[+ADAPTER]."),
    dice_prompts: Optional[str] = typer.Option(None, "--dice-prompts", help="Local clone of the DICE repository: use its prompts."),
    dice_drawing: Optional[str] = typer.Option(None, "--dice-drawing", help="Coherence box convention: released or paper."),
    dice_quantization: str = typer.Option("auto", "--dice-quantization", help="auto (as the preset; 4-bit only on CUDA+bitsandbytes), nf4 (force 4-bit NF4, CPU too; needs bitsandbytes), none."),
    device: str = typer.Option("auto", "--device"),
) -> None:
    """DICE on one edit: what changed, where, and whether each change was asked for."""
    _http(timeout, max_retries, concurrency)
    from editlens.core.types import EditSample
    from editlens.dice.drawing import draw_differences
    from editlens.dice.pipeline import DicePipeline

    sample = EditSample("edit", str(source), str(edited), instruction).load()
    opts = _vlm_options(vlm, vlm_model, cache, template, device=device, samples=samples, temperature=temperature) or {}
    opts.pop("vlm", None)
    if dice_preset or dice_detector or dice_coherence:  # released-style base + adapter models
        from editlens.dice.released import build_released

        pipe = build_released(dice_preset, dice_detector, dice_coherence, dice_prompts, dice_drawing, device,
                              dice_quantization)
    else:
        pipe = DicePipeline(vlm, detector, boxes=boxes, **opts)
    (res,) = pipe.run([sample])
    doc = {"schema": "editlens.dice/1", "instruction": instruction, **res.to_dict()}
    if dice_preset or dice_detector or dice_coherence:
        doc["dice_models"] = pipe.describe()
    if draw:
        from PIL import Image

        draw.mkdir(parents=True, exist_ok=True)
        a, b = draw_differences(sample.source, sample.edited, res.differences)
        Image.fromarray(a).save(draw / "source_boxes.png")
        Image.fromarray(b).save(draw / "edited_boxes.png")
        doc["drawn"] = [str(draw / "source_boxes.png"), str(draw / "edited_boxes.png")]
    if json_out:
        emit_json(doc)
        return
    if res.unparsable:
        typer.echo(f"unscored: {res.problem}\nraw answer: {res.raw}")
        return
    if res.truncated:
        typer.echo(f"incomplete: {res.problem}")
    elif not res.differences:
        typer.echo("no visual change detected")
    for i, d in enumerate(res.differences):
        conf = "n/a" if d.confidence is None else f"{d.confidence:.2f}"
        line = f"{d.command}: {d.object or '(region)'}, box {[round(v, 3) for v in d.box]}, confidence {conf}"
        if res.verdicts is not None:
            v = res.verdicts[i]
            verdict = {True: "coherent", False: "NOT coherent", None: "unscored"}[v.coherent]
            line += f" -> {verdict}" + (f" (P(YES) {v.p_yes:.2f})" if v.p_yes is not None else "")
            if v.reasoning:
                line += f"\n    {v.reasoning}"
        typer.echo(line)
    if res.verdicts is None:
        how = "--dice-coherence BASE[+ADAPTER]" if (dice_preset or dice_detector) else "--vlm"
        typer.echo(f"(coherence not judged: pass {how} to ask whether each change was requested)")
    for p in doc.get("drawn", []):
        typer.echo(f"wrote {p}")


@app.command("serve")
@guarded
def serve_cmd(
    vlm: str = typer.Option(..., "--vlm", help="Local model: hub id or directory."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind (default: this machine only)."),
    port: int = typer.Option(8000, "--port", help="Port to bind (0: any free port; the URL printed says which)."),
    name: Optional[str] = typer.Option(None, "--name", help="Model name clients use (default: the --vlm value)."),
    api_key_env: Optional[str] = typer.Option(None, "--api-key-env", help="Require the key held in this environment variable."),
    max_image_mb: float = typer.Option(20.0, "--max-image-mb", help="Largest accepted image payload."),
    max_image_pixels: int = typer.Option(40_000_000, "--max-image-pixels", help="Largest decoded image (width x height)."),
    max_batch: int = typer.Option(8, "--max-batch", help="Requests answered by one generate() call."),
    max_tokens: int = typer.Option(2048, "--max-tokens", min=1, help="Largest max_tokens a request may ask for."),
    max_n: int = typer.Option(8, "--max-n", min=1, help="Largest n (answers per request)."),
    request_timeout: float = typer.Option(300.0, "--request-timeout", help="Seconds a request may wait (504 after)."),
    access_log: bool = typer.Option(True, "--access-log/--no-access-log", help="One stderr line per request."),
    device: str = typer.Option("auto", "--device"),
    dtype: str = typer.Option("auto", "--dtype"),
    score: Optional[str] = typer.Option(None, "--score", help="Also serve POST /v1/score with these evaluators (e.g. adiee)."),
    model: Optional[List[str]] = ModelOpt,
) -> None:
    """Serve a local VLM over an OpenAI-compatible /v1/chat/completions API (and /v1/score with --score)."""
    from editlens.backends.local import TransformersBackend
    from editlens.backends.serving import serve_app
    from editlens.backends.server import ServeLimits, build_app

    if vlm.startswith(("http://", "https://")):
        typer.echo(f"error: editlens serve loads a local model (--vlm HUB_ID_OR_DIR); {vlm} is already a server: "
                   "pass it as --vlm to score, run or compare instead", err=True)
        raise typer.Exit(2)
    key = None
    if api_key_env:
        key = os.environ.get(api_key_env)
        if not key:
            typer.echo(f"error: --api-key-env {api_key_env} is set but ${api_key_env} is empty", err=True)
            raise typer.Exit(2)
    limits = ServeLimits(max_tokens=max_tokens, max_n=max_n, request_timeout=request_timeout,
                         max_image_bytes=int(max_image_mb * 1024 * 1024), max_image_pixels=max_image_pixels)
    backend = TransformersBackend(vlm, device=device, dtype=dtype, batch_size=max_batch)
    routers = []
    if score:  # POST /v1/score with registered evaluators (e.g. adiee), for RL trainers
        from editlens.adiee.serve import score_router
        from editlens.runner.selection import select_metrics

        sel = select_metrics(split_names(score), models=parse_models(model), device=device)
        routers.append(score_router({m.name: m for m in sel.metrics}, max_image_bytes=limits.max_image_bytes))
    app_ = build_app(backend, name or vlm, api_key=key, max_batch=max_batch, limits=limits, routers=routers)
    serve_app(app_, host, port, banner=lambda url: f"serving {name or vlm} at {url}"
              + (" (API key required)" if key else ""), access_log=access_log)


@app.command("compare")
@guarded
def compare_cmd(
    source: Path = typer.Option(..., "--source"),
    edited_a: Path = typer.Option(..., "--edited-a"),
    edited_b: Path = typer.Option(..., "--edited-b"),
    instruction: str = typer.Option(..., "--instruction"),
    vlm: str = VlmOpt,
    vlm_model: Optional[str] = VlmModelOpt,
    cache: str = CacheOpt,
    template: Optional[List[str]] = TemplateOpt,
    samples: int = SamplesOpt,
    temperature: float = TemperatureOpt,
    json_out: bool = typer.Option(False, "--json"),
    timeout: Optional[float] = TimeoutOpt,
    max_retries: Optional[int] = RetriesOpt,
    concurrency: Optional[int] = ConcurrencyOpt,
) -> None:
    """Pairwise judge: which of two edits of the same source is better."""
    from editlens.judges.pairwise import PairwiseJudge

    _http(timeout, max_retries, concurrency)

    if not instruction.strip():
        typer.echo("error: empty instruction", err=True)
        raise typer.Exit(2)
    opts = _vlm_options(vlm, vlm_model, cache, template, samples=samples, temperature=temperature) or {}
    judge = PairwiseJudge(**opts)
    (v,) = judge.compare([(str(source), str(edited_a), str(edited_b), instruction)])
    if json_out:
        emit_json({"schema": "editlens.compare/1", **v.to_dict()})
    else:
        typer.echo(f"verdict: {v.verdict or 'unscored (' + str(v.reason) + ')'}")
        if v.ensemble:
            typer.echo(f"{v.ensemble['samples']} sampled answers, agreement {v.ensemble['agreement']}, "
                       f"{v.ensemble['unscored_samples']} without a verdict")
        elif v.raw:
            typer.echo(str(v.raw))
    if v.verdict is None:
        raise typer.Exit(1)  # no verdict: scripts must not read success


from editlens.cli.report_commands import register as _register_report  # noqa: E402

_register_report(app)  # editlens report, editlens view


from editlens.cli.dice_commands import register as _register_dice_training  # noqa: E402

_register_dice_training(app)


def main() -> None:
    from editlens.cli.meta import register as register_meta

    register_meta(app)
    from editlens.cli.twoframe_commands import twoframe_app

    app.add_typer(twoframe_app, name="twoframe")
    from editlens.cli.adiee_commands import register as register_adiee

    register_adiee(app)
    app()


if __name__ == "__main__":
    main()

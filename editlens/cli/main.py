"""``editlens``: score edits, run datasets, inspect runs, meta-evaluate."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer

from editlens.cli.common import emit_json, guarded, parse_models, split_names

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


def _vlm_options(vlm, vlm_model, cache, template, device="auto"):  # type: ignore[no-untyped-def]
    if not vlm:
        return None
    templates = parse_models(template)  # same NAME=VALUE syntax
    return {"vlm": vlm, "vlm_model": vlm_model, "device": device, "templates": templates,
            "cache": {"default": True, "none": False}.get(cache, cache)}


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
    from rich.console import Console
    from rich.table import Table

    table = Table(title="editlens metrics")
    for col in ("name", "needs", "better", "range", "model", "available"):
        table.add_column(col, no_wrap=True)
    table.add_column("description")
    for r in rows:
        table.add_row(r["name"], ", ".join(r["needs"]), "higher" if r["higher_is_better"] else "lower",
                      "[" + ", ".join("inf" if v is None else f"{v:g}" for v in r["range"]) + "]", r["model"] or "-",
                      "yes" if r["available"] else "no", r["description"])
    Console().print(table)


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
) -> None:
    """Score one edit."""
    from editlens.core.images import ImageLoadOptions
    from editlens.runner.scoring import score_edit
    from editlens.runner.selection import parse_options

    meta = {}
    if boxes:
        meta["boxes"] = boxes
    if mask:
        meta["mask"] = str(mask)
    report = score_edit(
        str(source), str(edited), instruction, reference=str(reference) if reference else None,
        metrics=split_names(metrics), extra=_extra(judge, captions), vlm=_vlm_options(vlm, vlm_model, cache, template),
        source_caption=source_caption, target_caption=target_caption,
        models=parse_models(model), options=parse_options(option or []),
        image_options=ImageLoadOptions(max_pixels=max_pixels, size_policy=size_policy), metadata=meta,
    )
    if json_out:
        emit_json({"schema": "editlens.score/1",
                   "sample": {"source": str(source), "edited": str(edited), "instruction": instruction,
                              "reference": str(reference) if reference else None},
                   **report.to_dict()})
        return
    _print_scores(report)


def _print_scores(report) -> None:  # type: ignore[no-untyped-def]
    from rich.console import Console
    from rich.table import Table

    table = Table()
    for col in ("metric", "value", "status", "note"):
        table.add_column(col)
    for name, s in report.scores.items():
        note = s.reason or ""
        regions = (s.details or {}).get("regions")
        if regions is not None:
            note = f"{len(regions)} changed region(s): " + "; ".join(
                f"box {r['box']} area {r['area_fraction']:.1%}" for r in regions[:5])
        table.add_row(name, "-" if s.value is None else f"{s.value:.4f}", s.status, note)
    console = Console()
    console.print(table)
    for note in report.notes:
        console.print(f"[dim]input: {note}[/dim]")


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
) -> None:
    """Score every edit of a manifest into a resumable run directory."""
    from editlens.core.images import ImageLoadOptions
    from editlens.data.manifest import read_manifest
    from editlens.models.resolve import pick_device
    from editlens.runner.run import run_evaluation
    from editlens.runner.selection import parse_options, select_metrics
    from editlens.runner.store import ResultsStore, export as export_rows

    report = read_manifest(manifest, skip_invalid=skip_invalid)
    for line, reason in report.problems:
        typer.echo(f"skipped {manifest}:{line}: {reason}", err=True)
    sel = select_metrics(split_names(metrics), extra=_extra(judge, captions, dice), models=parse_models(model),
                         options=parse_options(option or []), device=device,
                         with_reference=any(s.reference is not None for s in report.samples),
                         vlm=_vlm_options(vlm, vlm_model, cache, template, device))
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
        typer.echo(f"{group}{r['evaluator']:<12} n={r['n']:<5} mean={r['mean']:.4f}  95% CI [{r['ci'][0]:.4f}, {r['ci'][1]:.4f}]")
    from editlens.reporting.runs import dice_ranking

    ranking = dice_ranking(run_dir)
    if ranking:
        typer.echo("")
        _print_ranking(ranking)


def _print_ranking(rows) -> None:  # type: ignore[no-untyped-def]
    fmt = lambda v: "-" if v is None else f"{v:.1f}"  # noqa: E731
    typer.echo("DICE ranking          samples  judged  correct edits %  unwanted edits %  no visual change %")
    for r in rows:
        typer.echo(f"{r['model']:<20} {r['samples']:>8} {r['judged']:>7} {fmt(r['correct_edits']):>16} "
                   f"{fmt(r['unwanted_edits']):>17} {fmt(r['no_visual_change']):>19}")


@app.command("dice-rank")
@guarded
def dice_rank_cmd(run_dir: Path = typer.Argument(...), json_out: bool = typer.Option(False, "--json")) -> None:
    """DICE model ranking of a run: correct edits, unwanted edits, no visual change."""
    from editlens.reporting.runs import dice_ranking

    rows = dice_ranking(run_dir)
    if not rows:
        typer.echo(f"error: {run_dir} has no DICE results; run with --dice", err=True)
        raise typer.Exit(2)
    emit_json(rows) if json_out else _print_ranking(rows)


@app.command("dice-eval")
@guarded
def dice_eval_cmd(gt: Path = typer.Option(..., "--gt", help="Annotated JSONL (DICE-D style)."),
                  predictions: Path = typer.Option(..., "--predictions", help="results.jsonl of `run --dice`, or DICE JSONL."),
                  judge_gt: bool = typer.Option(False, "--judge-gt", help="Also judge the ground-truth differences "
                                                "with --vlm and report coherence accuracy."),
                  vlm: Optional[str] = VlmOpt, vlm_model: Optional[str] = VlmModelOpt, cache: str = CacheOpt,
                  template: Optional[List[str]] = TemplateOpt,
                  json_out: bool = typer.Option(False, "--json")) -> None:
    """COCO-style AP of DICE's detections (pycocotools), class-agnostic and -aware, coherence AP and accuracy."""
    from editlens.dice.evaluation import (coherence_accuracy, evaluate_detection, judge_ground_truth,
                                          load_ground_truth, load_predictions)

    rows = load_ground_truth(gt)
    rep = evaluate_detection(rows, load_predictions(predictions))
    if judge_gt:
        if not vlm:
            typer.echo("error: --judge-gt needs --vlm", err=True)
            raise typer.Exit(2)
        from editlens.dice.pipeline import DicePipeline

        opts = _vlm_options(vlm, vlm_model, cache, template) or {}
        opts.pop("vlm", None)
        pipe = DicePipeline(vlm, "mllm", **opts)
        rep["coherence_accuracy"] = coherence_accuracy(rows, judge_ground_truth(rows, pipe, gt.resolve().parent))
    if json_out:
        emit_json(rep)
        return
    f = lambda v: "-" if v is None else f"{100 * v:.1f}"  # noqa: E731
    acc = rep.pop("coherence_accuracy", None)
    for name, r in rep.items():
        typer.echo(f"{name:<15} AP {f(r['AP'])}  AP50 {f(r['AP50'])}  AP75 {f(r['AP75'])}  "
                   f"S/M/L {f(r['APs'])}/{f(r['APm'])}/{f(r['APl'])}  (gt {r['n_gt']}, pred {r['n_pred']})")
    typer.echo("per command: " + ", ".join(f"{k} {f(v)}" for k, v in rep["class_aware"]["per_command"].items()))
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
    json_out: bool = typer.Option(False, "--json"),
    dice_preset: Optional[str] = typer.Option(None, "--dice-preset", help="Released-style models: preset name (dice-idefics3) or JSON file."),
    dice_detector: Optional[str] = typer.Option(None, "--dice-detector", help="Released-style detector: BASE[+ADAPTER]."),
    dice_coherence: Optional[str] = typer.Option(None, "--dice-coherence", help="Released-style coherence estimator: BASE[+ADAPTER]."),
    dice_prompts: Optional[str] = typer.Option(None, "--dice-prompts", help="Local clone of the DICE repository: use its prompts."),
    dice_drawing: Optional[str] = typer.Option(None, "--dice-drawing", help="Coherence box convention: released or paper."),
    dice_quantization: str = typer.Option("auto", "--dice-quantization", help="auto (as the preset, if possible), 4bit, none."),
    device: str = typer.Option("auto", "--device"),
) -> None:
    """DICE on one edit: what changed, where, and whether each change was asked for."""
    from editlens.core.types import EditSample
    from editlens.dice.drawing import draw_differences
    from editlens.dice.pipeline import DicePipeline

    sample = EditSample("edit", str(source), str(edited), instruction).load()
    opts = _vlm_options(vlm, vlm_model, cache, template) or {}
    opts.pop("vlm", None)
    if dice_preset or dice_detector or dice_coherence:  # released-style base + adapter models
        from editlens.dice.released import build_released

        pipe = build_released(dice_preset, dice_detector, dice_coherence, dice_prompts, dice_drawing, device,
                              dice_quantization)
    else:
        pipe = DicePipeline(vlm, detector, **opts)
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
    if not res.differences:
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
    port: int = typer.Option(8000, "--port"),
    name: Optional[str] = typer.Option(None, "--name", help="Model name clients use (default: the --vlm value)."),
    api_key_env: Optional[str] = typer.Option(None, "--api-key-env", help="Require the key held in this environment variable."),
    max_image_mb: float = typer.Option(20.0, "--max-image-mb", help="Largest accepted image payload."),
    max_batch: int = typer.Option(8, "--max-batch", help="Requests answered by one generate() call."),
    device: str = typer.Option("auto", "--device"),
    dtype: str = typer.Option("auto", "--dtype"),
) -> None:
    """Serve a local VLM over an OpenAI-compatible /v1/chat/completions API."""
    import os

    import uvicorn

    from editlens.backends.local import TransformersBackend
    from editlens.backends.server import build_app

    key = None
    if api_key_env:
        key = os.environ.get(api_key_env)
        if not key:
            typer.echo(f"error: --api-key-env {api_key_env} is set but ${api_key_env} is empty", err=True)
            raise typer.Exit(2)
    backend = TransformersBackend(vlm, device=device, dtype=dtype, batch_size=max_batch)
    app_ = build_app(backend, name or vlm, api_key=key, max_image_bytes=int(max_image_mb * 1024 * 1024),
                     max_batch=max_batch)
    typer.echo(f"serving {name or vlm} at http://{host}:{port}/v1" + (" (API key required)" if key else ""), err=True)
    uvicorn.run(app_, host=host, port=port, log_level="warning")


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
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Pairwise judge: which of two edits of the same source is better."""
    from editlens.judges.pairwise import PairwiseJudge

    if not instruction.strip():
        typer.echo("error: empty instruction", err=True)
        raise typer.Exit(2)
    opts = _vlm_options(vlm, vlm_model, cache, template) or {}
    judge = PairwiseJudge(**opts)
    (v,) = judge.compare([(str(source), str(edited_a), str(edited_b), instruction)])
    if json_out:
        emit_json({"schema": "editlens.compare/1", **v.to_dict()})
        return
    typer.echo(f"verdict: {v.verdict or 'unscored (' + str(v.reason) + ')'}")
    if v.raw:
        typer.echo(v.raw)


from editlens.cli.dice_commands import register as _register_dice_training  # noqa: E402

_register_dice_training(app)


def main() -> None:
    from editlens.cli.meta import register as register_meta

    register_meta(app)
    app()


if __name__ == "__main__":
    main()

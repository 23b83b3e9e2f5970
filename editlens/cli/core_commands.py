"""The everyday commands: ``metrics``, ``score``, ``run`` and ``compare``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, List, Optional

import typer

from editlens.cli.common import (
    EXIT_FAILED,
    EXIT_SIGNAL_BASE,
    emit_json,
    guarded,
    parse_models,
    require_samples,
    skipped_lines,
    split_names,
)
from editlens.cli.inputs import EditsOpt, EditsPatternOpt, ImageRootOpt, SplitOpt, read_input
from editlens.cli.options import (
    AllowFailuresOpt,
    CalibrationOpt,
    CaptionsOpt,
    DeviceOpt,
    DtypeOpt,
    Executor,
    JudgeBlockOpt,
    JudgeOpt,
    LimitOpt,
    ModelOpt,
    OptionOpt,
    Orders,
    ShardOpt,
    SizePolicy,
    bundles,
    extra_metrics,
)
from editlens.errors import EditlensError

if TYPE_CHECKING:
    from editlens.runner.scoring import EditReport

app = typer.Typer()


@app.command("metrics")
@guarded
def metrics_cmd(json_out: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """List the evaluators (classic metrics, judges, reward models, DICE, ADIEE, two-frame) with what they need, their direction, range and model."""
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

    print_table("editlens metrics", ["name", "measures", "needs", "better", "range", "model", "available", "description"],
                [[r["name"], r["measures"], ", ".join(r["needs"]), "higher" if r["higher_is_better"] else "lower",
                  "[" + ", ".join(("-inf" if i == 0 else "inf") if v is None else f"{v:g}"
                                  for i, v in enumerate(r["range"])) + "]", r["model"] or "-",
                  "yes" if r["available"] else "no", r["description"]] for r in rows])


@app.command("score")
@guarded
@bundles
def score_cmd(
    source: Path = typer.Option(..., "--source", help="Original image."),
    edited: Path = typer.Option(..., "--edited", help="Edited image."),
    instruction: str = typer.Option(..., "--instruction", help="The edit instruction."),
    reference: Optional[Path] = typer.Option(None, "--reference", help="Reference (ground-truth) edit."),
    metrics: Optional[str] = typer.Option(None, "--metrics", help="Comma-separated evaluator names (default: all available)."),
    source_caption: Optional[str] = typer.Option(None, "--source-caption", help="Caption of the original image (for CLIP-T/CLIP-D)."),
    target_caption: Optional[str] = typer.Option(None, "--target-caption", help="Caption of the image the edit should produce (for CLIP-T/CLIP-D)."),
    boxes: Optional[str] = typer.Option(None, "--boxes", help="JSON list of [x0,y0,x1,y1] for masked evaluators."),
    clip_boxes: bool = typer.Option(False, "--clip-boxes", help="Clip boxes that reach past the image to it "
                                    "(default: such a box is an error)."),
    mask: Optional[Path] = typer.Option(None, "--mask", help="Mask image for masked evaluators."),
    model: Optional[List[str]] = ModelOpt,
    option: Optional[List[str]] = OptionOpt,
    size_policy: SizePolicy = typer.Option(SizePolicy.resize, "--size-policy",
                                           help="resize (edited to source size) or error."),
    max_pixels: int = typer.Option(178_956_970, "--max-pixels", help="Refuse larger images (decompression bombs)."),
    json_out: bool = typer.Option(False, "--json", help="Print the stable JSON document (schema editlens.score/1)."),
    judge: Optional[str] = JudgeOpt,
    judging: Any = JudgeBlockOpt,
    captions: bool = CaptionsOpt,
    device: str = DeviceOpt,
    dtype: str = DtypeOpt,
    calibration: Optional[Path] = CalibrationOpt,
    allow_failures: bool = AllowFailuresOpt,
) -> None:
    """Score one edit. Exit status 3 when a score failed (a backend error; --allow-failures: 0)."""
    from editlens.core.images import ImageLoadOptions
    from editlens.data.validation import parse_boxes
    from editlens.runner.scoring import score_edit
    from editlens.runner.selection import parse_options

    meta: dict[str, Any] = {}
    if boxes:
        from editlens.core.images import image_size
        from editlens.data.validation import check_boxes_in_image

        try:
            meta["boxes"] = check_boxes_in_image(parse_boxes(boxes), image_size(str(source)), clip_boxes)
        except EditlensError as exc:
            raise typer.BadParameter(str(exc), param_hint="--boxes") from None
    if mask:
        meta["mask"] = str(mask)
    report = score_edit(
        str(source), str(edited), instruction, reference=str(reference) if reference else None,
        metrics=split_names(metrics), extra=extra_metrics(judge, captions),
        vlm=judging.vlm_options(),
        source_caption=source_caption, target_caption=target_caption,
        models=parse_models(model), options=parse_options(option or []),
        image_options=ImageLoadOptions(max_pixels=max_pixels, size_policy=size_policy.value), metadata=meta,
        progress=sys.stderr.isatty(),  # judge calls take seconds: show which metric is running
        device=device, dtype=dtype,
        calibration=calibration,
    )
    if json_out:
        emit_json({"schema": "editlens.score/1",
                   "sample": {"source": str(source), "edited": str(edited), "instruction": instruction,
                              "reference": str(reference) if reference else None},
                   **report.to_dict()})
    else:
        _print_scores(report)
    failed = [n for n, sc in report.scores.items() if sc.status == "failed"]
    if failed and not allow_failures:
        typer.echo(f"failed: {', '.join(failed)} (see the reason above); exit status {EXIT_FAILED} "
                   "(--allow-failures: 0)", err=True)
        raise typer.Exit(EXIT_FAILED)


def _print_scores(report: EditReport) -> None:
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
@bundles
def run_cmd(
    manifest: Path = typer.Argument(..., help="Manifest of edits: .jsonl, .csv, .json, parquet/arrow file or folder, "
                                    "or a `datasets` folder (images embedded or as paths)."),
    out: Path = typer.Option(..., "--out", help="Run directory (created; rerun to resume)."),
    metrics: Optional[str] = typer.Option(None, "--metrics", help="Comma-separated evaluator names (default: all available)."),
    batch_size: int = typer.Option(16, "--batch-size", min=1, help="Items per batch (larger is faster where memory allows)."),
    workers: int = typer.Option(2, "--workers", min=1, help="Image-decoding threads."),
    skip_invalid: bool = typer.Option(False, "--skip-invalid", help="Drop bad manifest rows instead of stopping."),
    model: Optional[List[str]] = ModelOpt,
    option: Optional[List[str]] = OptionOpt,
    size_policy: SizePolicy = typer.Option(SizePolicy.resize, "--size-policy", help="When the edit's size differs "
                                           "from the source's: resize (to the source's size) or error."),
    max_pixels: int = typer.Option(178_956_970, "--max-pixels", help="Refuse images with more pixels than this (decompression bombs)."),
    device: str = DeviceOpt,
    dtype: str = DtypeOpt,
    export: Optional[str] = typer.Option(None, "--export", help="Also export long-format rows: csv, parquet, jsonl (comma-separated)."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar."),
    executor: Executor = typer.Option(Executor.local, "--executor",
                                      help="local, or ray (batches spread over a Ray cluster)."),
    address: Optional[str] = typer.Option(None, "--address", help="Ray cluster address (default: start a local Ray)."),
    ray_workers: Optional[int] = typer.Option(None, "--ray-workers", help="Ray actors (default: one per CPU, or per GPU); "
                                              "with --editor, the editor's workers too."),
    gpus_per_worker: float = typer.Option(0.0, "--gpus-per-worker", help="GPUs each Ray actor holds (e.g. 1)."),
    judge: Optional[str] = JudgeOpt,
    judging: Any = JudgeBlockOpt,
    captions: bool = CaptionsOpt,
    dice: bool = typer.Option(False, "--dice", help="Also run DICE (differences + coherence; model-free detector without --vlm)."),
    retry_failed: bool = typer.Option(True, "--retry-failed/--no-retry-failed",
                                      help="Rerun: retry results that failed (transport errors, crashes)."),
    retry_unscored: bool = typer.Option(False, "--retry-unscored",
                                        help="Rerun: also retry answers that could not be parsed."),
    wait: bool = typer.Option(False, "--wait", help="If another run holds --out, queue behind it instead of exiting."),
    columns: Optional[str] = typer.Option(None, "--columns", help="Map the file's columns, e.g. source=input,edited=output "
                                          "(AURORA's edits.jsonl); a row without an id gets line-N (its line)."),
    delimiter: Optional[str] = typer.Option(None, "--delimiter", help="Field separator of a CSV manifest "
                                            "(default: comma; .tsv: tab), e.g. ';'."),
    clip_boxes: bool = typer.Option(False, "--clip-boxes", help="Clip boxes that reach past their image to it "
                                    "(default: such a row is invalid)."),
    encoding: str = typer.Option("utf-8", "--encoding", help="Text encoding of the manifest (e.g. latin-1)."),
    split: Optional[str] = SplitOpt,
    edits: Optional[Path] = EditsOpt,
    edits_pattern: Optional[str] = EditsPatternOpt,
    image_root: Optional[Path] = ImageRootOpt,
    calibration: Optional[Path] = CalibrationOpt,
    allow_failures: bool = AllowFailuresOpt,
    editor: Optional[str] = typer.Option(None, "--editor", help="Generate the edits first with this editor (see "
                                         "`editlens edit`); MANIFEST then lists source and instruction."),
    editor_option: Optional[List[str]] = typer.Option(None, "--editor-option", help="With --editor: editor setting "
                                                      "KEY=VALUE (steps=20...). Repeatable."),
    edit_samples: int = typer.Option(1, "--edit-samples", min=1, help="With --editor: images per edit."),
    seed: int = typer.Option(0, "--seed", help="With --editor: base seed of the derived per-image seeds."),
    edits_out: Optional[Path] = typer.Option(None, "--edits-out", help="With --editor: folder of the generated "
                                             "edits (default OUT/edits)."),
    shard: Optional[str] = ShardOpt,
    limit: Optional[int] = LimitOpt,
) -> None:
    """Score every edit of a manifest into a resumable run directory (with --editor: generate the edits first).

    Exit status: 0 done; 3 done, but some results failed (listed by `editlens runs failures OUT --status
    failed`; a rerun retries them; --allow-failures: 0); 2 bad input; 130/143 stopped by Ctrl-C/SIGTERM
    after saving finished batches, the summary and exports.
    """
    from editlens.core.images import ImageLoadOptions
    from editlens.runner.run import run_evaluation
    from editlens.runner.selection import parse_options, select_metrics
    from editlens.runner.store import ResultsStore, check_export_formats
    from editlens.runner.store import export as export_rows

    export_formats = check_export_formats(export)  # parquet without pyarrow fails now, not after scoring
    failed_images = 0
    if editor:
        from editlens.cli.edit_commands import editor_options, exit_for, run_generation

        if edits:
            raise typer.BadParameter("--editor makes the edits; --edits reads edits made before: give one")
        made = run_generation(manifest, editor, edits_out or out / "edits", edit_samples, seed,
                              editor_options(editor_option, device, dtype, False, False), None, progress, columns,
                              manifest_options={"encoding": encoding, "delimiter": delimiter, "split": split,
                                                "image_root": image_root}, shard=shard, limit=limit,
                              # --executor ray: the editor on the Ray workers too (one pipeline each)
                              where={"executor": executor.value, "address": address, "workers": ray_workers,
                                     "gpus_per_worker": gpus_per_worker})
        if made.interrupted:
            exit_for(made, edits_out or out / "edits")
        # the generated manifest is plain JSON Lines beside its images
        manifest, failed_images = made.manifest, made.failed
        columns = delimiter = split = image_root = None
        encoding = "utf-8"
    report, inputs = read_input(manifest, skip_invalid=skip_invalid, columns=columns, encoding=encoding,
                                delimiter=delimiter, clip_boxes=clip_boxes, split=split, edits=edits,
                                edits_pattern=edits_pattern, image_root=image_root)
    require_samples(report, manifest)
    if limit is not None:  # a quick look: the first N edits, recorded in the manifest
        report.samples = report.samples[:limit]
        inputs = {**inputs, "limit": limit}
    run_samples, shard_doc = _shard_samples(report.samples, shard, (edits_out or out / "edits") if editor else None)
    sel = select_metrics(split_names(metrics), extra=extra_metrics(judge, captions, dice), models=parse_models(model),
                         options=parse_options(option or []), device=device, dtype=dtype,
                         with_reference=any(s.reference is not None for s in report.samples),
                         vlm=judging.vlm_options(), http=judging.http)
    if not sel.metrics:
        skipped_lines(sel.skipped)
        typer.echo("error: no metric can run", err=True)
        raise typer.Exit(2)
    image_options = ImageLoadOptions(max_pixels=max_pixels, size_policy=size_policy.value)
    runner_executor = None
    if executor is Executor.ray:
        from editlens.runner.executors import RayExecutor

        runner_executor = RayExecutor(sel.metrics, image_options, address=address, num_workers=ray_workers,
                                      gpus_per_worker=gpus_per_worker)
    result = run_evaluation(
        run_samples, sel.metrics, out, batch_size=batch_size, workers=workers, progress=progress,
        image_options=image_options, executor=runner_executor,
        retry_failed=retry_failed, retry_unscored=retry_unscored, wait=wait, calibration=calibration,
        command=sys.argv, device=device, dtype=dtype,
        extra_manifest={**inputs, "skipped_metrics": dict(sel.skipped), **({"shard": shard} if shard else {})},
    )
    if shard_doc is not None:
        from editlens.core.io import write_json

        write_json(out / "shard.json", shard_doc)
    if export:
        store = ResultsStore(out)
        rows = [r for r in store.rows() if r["evaluator"] in {m.name for m in sel.metrics}]
        cols = {s.id: s.columns() for s in report.samples}  # every extra column of the manifest, beside the scores
        for fmt in export_formats:
            typer.echo(f"exported {export_rows(rows, out / f'results_long.{fmt}', columns=cols)}", err=True)
        store.close()
    _summary_lines(result, out)
    skipped_lines(sel.skipped)  # after the results: what could not run, one line per reason
    if result.interrupted:
        import signal

        how = signal.Signals(result.stopped_by or signal.SIGINT)
        typer.echo(f"interrupted ({how.name}): finished batches, the summary and exports are saved; rerun the "
                   "same command to continue.", err=True)
        raise typer.Exit(EXIT_SIGNAL_BASE + int(how))
    if failed_images and not allow_failures:
        typer.echo(f"{failed_images} image(s) failed to generate; rerun the same command to generate them again. "
                   f"Exit status {EXIT_FAILED} (--allow-failures: 0).", err=True)
        raise typer.Exit(EXIT_FAILED)
    if result.failed:
        typer.echo(f"{result.failed} result(s) failed: list them with `editlens runs failures {out} --status failed`; "
                   f"rerun the same command to retry them. Exit status {EXIT_FAILED} "
                   f"({'--allow-failures given: 0' if allow_failures else '--allow-failures: 0'}).", err=True)
        if not allow_failures:
            raise typer.Exit(EXIT_FAILED)


def _summary_lines(result: Any, out: Path) -> None:
    """``run``'s summary: what was computed and reused, and per evaluator its counts and mean."""
    from editlens.core.evidence import not_measured

    s = result.summary
    typer.echo(f"{s['samples']} samples: {result.computed} results computed, {result.reused} reused "
               f"-> {out}/results.jsonl, summary.json, manifest.json")
    for name, c in s["counts"].items():
        mean = s["means"][name]
        shown = (f"{mean:.4f}" if mean is not None else "- (no score: information only)" if c.get("info")
                 else not_measured(0, "no scored result"))
        typer.echo(f"  {name:<12} scored {c['scored']:>5}  skipped {c['skipped']:>4}  unscored {c['unscored']:>4}  "
                   f"failed {c['failed']:>4}  info {c.get('info', 0):>4}  mean {shown}")


def _shard_samples(samples: list, shard: Optional[str], generated: Optional[Path]) -> tuple[list, Optional[dict]]:
    """``run --shard I/N``: this shard's samples and its ``shard.json`` (every sample id in order, the
    input's fingerprint). With --editor the generation was sharded already (by edit id): its samples are kept."""
    from editlens.runner.shards import ids_digest, parse_shard, shard_record

    part = parse_shard(shard)
    if part is None:
        return samples, None
    if generated is not None:
        import json

        from editlens.runner.edit import output_id

        gen = json.loads((generated / "shard.json").read_text(encoding="utf-8"))
        ids = [output_id(e, k, int(gen["samples"])) for e in gen["ids"] for k in range(int(gen["samples"]))]
        return samples, shard_record(part, ids, gen["inputs_sha256"], "run")
    doc = shard_record(part, [s.id for s in samples],
                       ids_digest([(s.id, s.source, s.edited, s.instruction) for s in samples]), "run")
    return part.select(samples, lambda s: s.id), doc


@app.command("compare")
@guarded
@bundles
def compare_cmd(
    source: Optional[Path] = typer.Option(None, "--source", help="The original image (a file)."),
    edited_a: Optional[Path] = typer.Option(None, "--edited-a", help="Edit A (a file)."),
    edited_b: Optional[Path] = typer.Option(None, "--edited-b", help="Edit B (a file)."),
    instruction: Optional[str] = typer.Option(None, "--instruction", help="The edit instruction."),
    pairs: Optional[Path] = typer.Option(None, "--pairs", help="Many pairs: JSONL {id, source, edited_a, edited_b, "
                                         "instruction} (e.g. pairs.jsonl of `editlens meta-eval prepare`), or a "
                                         "parquet/arrow/datasets/JSON input with those columns (see --columns)."),
    columns: Optional[str] = typer.Option(None, "--columns", help="With --pairs: map the file's columns, e.g. "
                                          "source=input_image,edited_a=output_images[0],edited_b=output_images[1]."),
    out: Optional[Path] = typer.Option(None, "--out", help="With --pairs: write one verdict per line to this JSONL."),
    mmrb2_out: Optional[Path] = typer.Option(None, "--mmrb2-out", help="With --pairs: also write MMRB2's judgement "
                                             "file ({id: {forward, reverse}}) for its compute_accuracy.py."),
    metric: Optional[str] = typer.Option(None, "--metric", help="Decide by a point-wise evaluator's scores "
                                         "(editscore, editreward, adiee, clip_d...) instead of the pairwise VLM judge."),
    orders: Orders = typer.Option(Orders.both, "--orders", help="Pairwise VLM judge: both (ask A-B and B-A; a verdict only "
                               "when they agree, else a tie flagged as position bias), forward or reverse."),
    model: Optional[List[str]] = ModelOpt,
    option: Optional[List[str]] = OptionOpt,
    judging: Any = JudgeBlockOpt,
    batch_size: int = typer.Option(8, "--batch-size", min=1, help="With --pairs: pairs (or edits) per batch."),
    json_out: bool = typer.Option(False, "--json", help="Machine-readable output (JSON) instead of the table."),
    device: str = DeviceOpt,
    dtype: str = DtypeOpt,
) -> None:
    """Which of two edits of the same source is better: a pairwise VLM judge (both presentation orders by
    default) or a point-wise evaluator's scores (--metric); one pair, or many with --pairs.

    Exit status: 0 a verdict (every pair answered); 1 no verdict (one pair: unparsable answers);
    3 the backend failed (retry: only the failed pairs are asked again).
    """
    from editlens.runner import compare as C
    from editlens.runner.selection import parse_options

    single = [source, edited_a, edited_b, instruction]
    if pairs is None:
        if any(v is None for v in single):
            raise typer.BadParameter("give --source, --edited-a, --edited-b and --instruction (or --pairs FILE)")
        if not str(instruction).strip():
            typer.echo("error: empty instruction", err=True)
            raise typer.Exit(2)
        items = [C.PairItem("pair", str(source), str(edited_a), str(edited_b), str(instruction))]
    else:
        if any(v is not None for v in single):
            raise typer.BadParameter("--pairs replaces --source/--edited-a/--edited-b/--instruction")
        items = C.read_pairs(pairs, columns)
    if (out or mmrb2_out) and pairs is None:
        raise typer.BadParameter("--out and --mmrb2-out go with --pairs")
    if metric:
        from editlens.metrics.registry import get_spec

        if get_spec(metric).pairwise:  # a pairwise judge named as the metric: it is the judge path
            metric = None
    decider: C.ScoreComparer | C.JudgeComparer
    if metric:
        from dataclasses import replace

        # point-wise scores take the judge block less --min-samples (as before JudgeSettings)
        decider = C.ScoreComparer(metric, parse_models(model), parse_options(option or []), device, dtype,
                                  replace(judging, min_samples=None).vlm_options())
    else:
        if not judging.vlm:
            raise typer.BadParameter("the pairwise judge needs --vlm (or compare by scores with --metric NAME)")
        opts = judging.vlm_options() or {}
        decider = C.JudgeComparer({**opts, "orders": orders.value, **parse_options(option or []).get("pairwise", {})})
    verdicts = decider.compare(items, batch_size)
    if pairs is None:
        if json_out:
            emit_json({"schema": "editlens.compare/1", **{k: val for k, val in verdicts[0].items() if k != "id"}})
        else:
            typer.echo("\n".join(C.single_lines(verdicts[0])))
        if verdicts[0].get("failed"):
            raise typer.Exit(EXIT_FAILED)  # nothing was answered: worth retrying
        if verdicts[0]["verdict"] is None:
            raise typer.Exit(1)  # no verdict: scripts must not read success
        return
    C.write_outputs(verdicts, out, mmrb2_out, decider.name)
    summary = C.summary(verdicts)
    if json_out:
        emit_json({"schema": "editlens.compare-pairs/1", "summary": summary, **({} if out else {"verdicts": verdicts})})
    else:
        typer.echo(C.summary_line(summary, out))
    if summary["failed"]:
        typer.echo(f"{summary['failed']} pairs failed (the backend did not answer); run the same command again "
                   "to ask them again", err=True)
        raise typer.Exit(EXIT_FAILED)

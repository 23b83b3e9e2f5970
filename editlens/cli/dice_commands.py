"""``editlens dice``: DICE on one edit (the group's own options), and its
subcommands: ``rank`` and ``eval`` of runs, ``make-pairs`` / ``make-edits``
(the two training datasets), ``train`` (LoRA fine-tuning) and ``merge``.

The flat names of earlier releases (``dice-train``, ``dice-rank``, ...) stay
as hidden aliases in :data:`legacy_app`.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, List, Optional

import typer

from editlens.cli.common import EXIT_FAILED, emit_json, guarded
from editlens.cli.options import (
    BoxDrawing,
    BoxUnits,
    CacheOpt,
    ConcurrencyOpt,
    DeviceOpt,
    DiceCrop,
    DtypeOpt,
    LrDecay,
    RetriesOpt,
    SamplesOpt,
    TemperatureOpt,
    TemplateOpt,
    TimeoutOpt,
    VlmModelOpt,
    VlmOpt,
    http_settings,
    vlm_options,
)
from editlens.cli.tables import print_rows
from editlens.cli.training_options import SAVE_EVERY_HELP, VAL_EVERY_HELP, LogTo, LogToOpt, Sharding, ShardingOpt

if TYPE_CHECKING:
    from editlens.dice.released import ReleasedDice


class DiceConfidence(str, Enum):
    """--dice-confidence values (named after what they return; logits/scores are the earlier names)."""

    softmax_logits = "softmax-logits"
    softmax_penalised_scores = "softmax-penalised-scores"
    constant_one = "constant-one"
    logits = "logits"
    scores = "scores"


class CoherenceInputs(str, Enum):
    release = "release"
    editlens = "editlens"

app = typer.Typer(no_args_is_help=False, help="DICE: what changed, where, and was it asked for.")


@app.callback(invoke_without_command=True)
@guarded
def dice_cmd(
    ctx: typer.Context,
    source: Optional[Path] = typer.Option(None, "--source", help="The original image (a file)."),
    edited: Optional[Path] = typer.Option(None, "--edited", help="The edited image (a file)."),
    instruction: Optional[str] = typer.Option(None, "--instruction", help="The edit instruction."),
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
    json_out: bool = typer.Option(False, "--json", help="Machine-readable output (JSON) instead of the table."),
    timeout: Optional[float] = TimeoutOpt,
    max_retries: Optional[int] = RetriesOpt,
    concurrency: Optional[int] = ConcurrencyOpt,
    dice_preset: Optional[str] = typer.Option(None, "--dice-preset", help="Released-style models: preset name (dice-idefics3) or JSON file."),
    dice_detector: Optional[str] = typer.Option(None, "--dice-detector", help="Released-style detector: BASE[+ADAPTER]."),
    dice_coherence: Optional[str] = typer.Option(None, "--dice-coherence", help="Released-style coherence estimator: BASE[+ADAPTER]."),
    dice_prompts: Optional[str] = typer.Option(None, "--dice-prompts", help="Local clone of the DICE repository: use its prompts."),
    dice_drawing: Optional[str] = typer.Option(None, "--dice-drawing", help="Coherence box convention: released or paper."),
    dice_quantization: str = typer.Option("auto", "--dice-quantization", help="auto (as the preset; 4-bit only on CUDA+bitsandbytes), nf4 (force 4-bit NF4, CPU too; needs bitsandbytes), none."),
    dice_confidence: Optional[DiceConfidence] = typer.Option(
        None, "--dice-confidence",
        help="Released-style confidence: softmax-logits (softmax over ADD/EDIT/REMOVE raw logits, default), "
             "softmax-penalised-scores (the same after the repetition penalty: what the release computes) or "
             "constant-one (1.0 for every difference: what the release outputs). logits/scores: earlier names."),
    dice_coherence_inputs: Optional[CoherenceInputs] = typer.Option(
        None, "--dice-coherence-inputs",
        help="Coherence images and change text: release (matplotlib 640x480 JPEG figures, default for released "
             "checkpoints) or editlens (PIL boxes on a square array, what `dice train` uses)."),
    dice_answer_reading: Optional[str] = typer.Option(
        None, "--dice-answer-reading",
        help="How the detector's answer is read: editlens (default: items the release drops kept and flagged) or "
             "release (as DICE's parser: first line only, items whose coordinates are not floats in [0, 1] "
             "dropped, a box of another length ends the reading; where the release raises, unscored)."),
    dice_processor: Optional[str] = typer.Option(
        None, "--dice-processor",
        help="Where each model's processor comes from: adapter (default: the adapter folder, else the base), "
             "base, release (the stock HuggingFaceM4/Idefics3-8B-Llama3 processor, as released) or a folder."),
    device: str = DeviceOpt,
    dtype: str = DtypeOpt,
) -> None:
    """DICE on one edit (`editlens dice --source S --edited E --instruction I`): what changed, where, and
    whether each change was asked for. The subcommands rank runs, evaluate AP and build/train DICE models."""
    if ctx.invoked_subcommand is not None:
        return
    if source is None or edited is None or instruction is None:
        missing = [f for f, v in (("--source", source), ("--edited", edited), ("--instruction", instruction)) if v is None]
        typer.echo(ctx.get_help())
        typer.echo(f"\nerror: scoring one edit needs {', '.join(missing)}", err=True)
        raise typer.Exit(2)
    http = http_settings(timeout, max_retries, concurrency)
    from editlens.core.types import EditSample
    from editlens.dice.drawing import draw_differences
    from editlens.dice.pipeline import DicePipeline

    sample = EditSample("edit", str(source), str(edited), instruction).load()
    opts = vlm_options(vlm, vlm_model, cache, template, device=device, samples=samples, temperature=temperature,
                       dtype=dtype, http=http) or {}
    opts.pop("vlm", None)
    if dice_preset or dice_detector or dice_coherence:  # released-style base + adapter models
        from editlens.dice.released import build_released

        pipe: DicePipeline | ReleasedDice = build_released(
            dice_preset, dice_detector, dice_coherence, dice_prompts, dice_drawing, device, dice_quantization, dtype,
            dice_confidence.value if dice_confidence else None,
            coherence_inputs=dice_coherence_inputs.value if dice_coherence_inputs else None,
            answer_reading=dice_answer_reading, processor=dice_processor)
        sample = sample.at_sizes("native")  # as released: each image at its own size
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
    # exit status as `editlens compare`: 3 the backend failed (worth retrying), 1 no result (unparsable answer)
    if json_out:
        emit_json(doc)
        if res.failed or res.unparsable:
            raise typer.Exit(EXIT_FAILED if res.failed else 1)
        return
    if res.failed:
        typer.echo(f"failed: {res.problem}", err=True)
        raise typer.Exit(EXIT_FAILED)
    if res.unparsable:
        typer.echo(f"unscored: {res.problem}\nraw answer: {res.raw}")
        raise typer.Exit(1)  # scripts must not read success
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


@app.command("rank")
@guarded
def dice_rank_cmd(run_dir: Path = typer.Argument(...), json_out: bool = typer.Option(False, "--json", help="Machine-readable output (JSON) instead of the table.")) -> None:
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
    print_rows(rows)


@app.command("eval")
@guarded
def dice_eval_cmd(gt: Path = typer.Option(..., "--gt", help="Annotated JSONL (DICE-D style)."),
                  predictions: Path = typer.Option(..., "--predictions", help="results.jsonl of `run --dice`, or DICE JSONL."),
                  judge_gt: bool = typer.Option(False, "--judge-gt", help="Also judge the ground-truth differences "
                                                "with --vlm and report coherence accuracy."),
                  vlm: Optional[str] = VlmOpt, vlm_model: Optional[str] = VlmModelOpt, cache: str = CacheOpt,
                  template: Optional[List[str]] = TemplateOpt,
                  gt_boxes: BoxUnits = typer.Option("fraction", "--gt-boxes", help="Units of the ground-truth boxes: "
                                               "fraction (0-1) or pixels (a line may set its own 'box_units')."),
                  samples: int = SamplesOpt, temperature: float = TemperatureOpt,
                  json_out: bool = typer.Option(False, "--json", help="Machine-readable output (JSON) instead of the table."), timeout: Optional[float] = TimeoutOpt,
                  max_retries: Optional[int] = RetriesOpt, concurrency: Optional[int] = ConcurrencyOpt) -> None:
    """COCO-style AP of DICE's detections (pycocotools), class-agnostic and -aware, coherence AP and accuracy."""
    http = http_settings(timeout, max_retries, concurrency)
    from editlens.dice.evaluation import (
        coherence_accuracy,
        evaluate_detection,
        judge_ground_truth,
        load_ground_truth,
        load_predictions_detailed,
    )

    rows = load_ground_truth(gt, gt_boxes)
    if not rows:  # AP over no annotated sample is no figure: say so, exit 2
        from editlens.core.evidence import not_measured
        from editlens.errors import InputError

        raise InputError(f"{gt}: DICE detection AP {not_measured(0, 'the ground-truth file holds no sample')}")
    preds, pred_problems = load_predictions_detailed(predictions)
    gt_ids = {str(r["id"]) for r in rows}
    if not gt_ids & (set(preds) | set(pred_problems)):
        from editlens.errors import InputError  # AP 0 over predictions for other samples would be invented

        raise InputError(f"{predictions}: no prediction is for a sample of {gt} (ids such as {sorted(gt_ids)[:3]}); "
                         "check that the ids match")
    rep = evaluate_detection(rows, preds)
    rep["predictions_without_usable_answer"] = {"n": len(pred_problems), "samples": pred_problems}
    rep["ground_truth_boxes"] = gt_boxes  # the units the ground truth was read in (lines may set their own)
    if judge_gt:
        if not vlm:
            typer.echo("error: --judge-gt needs --vlm", err=True)
            raise typer.Exit(2)
        from editlens.dice.pipeline import DicePipeline

        opts = vlm_options(vlm, vlm_model, cache, template, samples=samples, temperature=temperature, http=http) or {}
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


@app.command("merge")
@guarded
def merge_cmd(
    base: str = typer.Option(..., "--base", help="Base VLM (directory or hub id)."),
    adapter: str = typer.Option(..., "--adapter", help="LoRA adapter folder (e.g. runs/s1/adapter)."),
    out: Path = typer.Option(..., "--out", help="Folder for the merged model."),
    device: str = typer.Option("cpu", "--device", help="cpu, cuda, cuda:N or auto (default: $EDITLENS_DEVICE, else auto)."),
) -> None:
    """Merge a LoRA adapter into its base (the released detector's stage-1 model is such a merge)."""
    from editlens.dice.training import merge_adapter

    typer.echo(f"merged model -> {merge_adapter(base, adapter, out, device)}")


@app.command("train")
@guarded
def train_cmd(
    stage: str = typer.Option(..., "--stage", help="detect or coherence."),
    data: Path = typer.Option(..., "--data", help="Training JSONL (or a dataset folder from dice-make-pairs/-edits)."),
    base: str = typer.Option(..., "--base", help="Base VLM: local directory or hub id (e.g. an Idefics3)."),
    out: Path = typer.Option(..., "--out", help="Run directory (rerun the same command to resume)."),
    eval_data: Optional[Path] = typer.Option(None, "--eval-data", help="Held-out JSONL: AP (detect) or accuracy (coherence)."),
    init_adapter: Optional[str] = typer.Option(None, "--init-adapter", help="Start from this LoRA adapter (e.g. stage 1's)."),
    steps: int = typer.Option(1000, "--steps", min=1, help="Optimizer steps to train for."),
    lr: float = typer.Option(1e-4, "--lr", help="Paper: 1e-4 detector, 1e-5 coherence."),
    batch_size: int = typer.Option(1, "--batch-size", min=1, help="Examples per optimizer step (paper: 8 detector, 1 coherence)."),
    rank: int = typer.Option(64, "--lora-rank", min=1, help="LoRA rank."),
    rank_old: Optional[int] = typer.Option(None, "--rank", hidden=True, help="Earlier name of --lora-rank."),
    alpha: int = typer.Option(16, "--alpha", help="LoRA alpha (scale = alpha / rank)."),
    dropout: float = typer.Option(0.1, "--dropout", help="LoRA dropout."),
    warmup: int = typer.Option(0, "--warmup", min=0, help="Linear learning-rate warm-up steps."),
    lr_decay: LrDecay = typer.Option("constant", "--lr-decay", help="After warm-up: constant, linear or cosine."),
    eval_every: int = typer.Option(0, "--val-every", min=0, help=VAL_EVERY_HELP),
    eval_every_old: Optional[int] = typer.Option(None, "--eval-every", hidden=True, help="Earlier name of --val-every."),
    save_every: int = typer.Option(100, "--save-every", min=0, help=SAVE_EVERY_HELP),
    keep_checkpoints: int = typer.Option(2, "--keep-checkpoints", min=1, help="Checkpoints kept (the newest)."),
    eval_max_new_tokens: int = typer.Option(256, "--eval-max-new-tokens", min=1, help="Token limit of each answer during evaluation."),
    max_eval: int = typer.Option(100, "--max-eval", min=1, help="Evaluate on at most this many items."),
    repetition_penalty: Optional[float] = typer.Option(None, "--repetition-penalty", help="Decoding for evaluation and the written preset (default: 1.5 detect, as released; 1.0 coherence)."),
    seed: int = typer.Option(0, "--seed", help="Random seed (the same seed reproduces the same result)."),
    device: str = typer.Option("auto", "--device", help="auto (cuda, mps, cpu; $EDITLENS_DEVICE), cpu, cuda, cuda:N."),
    dtype: str = typer.Option("auto", "--dtype", help="Compute dtype (autocast; LoRA weights stay float32): auto, float32, bfloat16, float16 (CUDA); $EDITLENS_DTYPE."),
    quantization: str = typer.Option("auto", "--quantization", help="auto (QLoRA: 4-bit NF4 base + paged AdamW 8-bit where CUDA+bitsandbytes), nf4 (force QLoRA, CPU too; needs bitsandbytes) or none."),
    longest_edge: Optional[int] = typer.Option(None, "--longest-edge", help="Processor resize (paper: 1456)."),
    prompts: Optional[Path] = typer.Option(None, "--dice-prompts", help="Official prompts from a local DICE clone."),
    drawing: BoxDrawing = typer.Option("released", "--drawing", help="Coherence box convention: released or paper."),
    crop: DiceCrop = typer.Option("auto", "--crop", help="square: centre-crop both images to a square, boxes mapped into the crop (the paper's recipe); none: whole images; auto: as the released inference (detector whole, coherence cropped). Recorded in the adapter and its preset."),
    restart: bool = typer.Option(False, "--restart", help="Discard an earlier run in --out instead of resuming it."),
    log_to: Optional[LogTo] = LogToOpt,
    sharding: Optional[Sharding] = ShardingOpt,
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar."),
    json_out: bool = typer.Option(False, "--json", help="Machine-readable output (JSON) instead of the table."),
) -> None:
    """Fine-tune a DICE detector (--stage detect) or coherence estimator (--stage coherence) with LoRA."""
    from editlens.cli.training_options import aliased
    from editlens.dice.training import TrainConfig, train
    from editlens.models.quant import normalise_choice

    quantization = normalise_choice(quantization, "--quantization")
    rank = aliased(rank, 64, rank_old, "--lora-rank", "--rank")
    eval_every = aliased(eval_every, 0, eval_every_old, "--val-every", "--eval-every")
    cfg = TrainConfig(stage=stage, data=str(data.resolve()), out=str(out), base=base,
                      eval_data=str(eval_data.resolve()) if eval_data else None, init_adapter=init_adapter,
                      steps=steps, lr=lr, batch_size=batch_size, warmup_steps=warmup, lr_decay=lr_decay, rank=rank,
                      alpha=alpha, dropout=dropout, eval_every=eval_every, save_every=save_every,
                      keep_checkpoints=keep_checkpoints, eval_max_new_tokens=eval_max_new_tokens,
                      max_eval=max_eval, repetition_penalty=repetition_penalty, seed=seed, device=device, dtype=dtype,
                      quantization=quantization, longest_edge=longest_edge, prompts=str(prompts) if prompts else None,
                      drawing=drawing, crop=crop)
    res = train(cfg, progress=progress, log=lambda m: typer.echo(m, err=True), restart=restart,
                log_to=log_to.value if log_to else None, sharding=sharding.value if sharding else None)
    from editlens.training.distributed import current

    if not current().main:  # several processes: the main one reports
        raise typer.Exit(res.exit_code)
    doc = {"out": str(res.out), "steps_done": res.steps_done, "resumed_from": res.resumed_from,
           "first_loss": res.first_loss, "last_loss": res.last_loss, "evals": res.evals,
           "adapter": str(res.adapter) if res.adapter else None, "preset": str(res.preset) if res.preset else None,
           "interrupted": res.interrupted, "notes": res.notes, "precision": res.summary.get("precision"),
           "crop": res.summary.get("crop"), "loss_curve": res.summary.get("loss_curve")}
    if json_out:
        emit_json(doc)
    else:
        f = lambda v: "-" if v is None else f"{v:.4f}"  # noqa: E731
        typer.echo(f"steps {res.resumed_from} -> {res.steps_done}; loss {f(res.first_loss)} -> {f(res.last_loss)}")
        for e in res.evals:
            typer.echo("eval " + ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                                           for k, v in e.items()))
        for n in res.notes:
            typer.echo(f"note: {n}")
        if res.preset:
            typer.echo(f"adapter {res.adapter}\nrun it: editlens dice --dice-preset {res.preset} --source S "
                       f"--edited E --instruction I")
    if res.interrupted:
        typer.echo("interrupted: checkpoint saved; rerun the same command to continue.", err=True)
        raise typer.Exit(res.exit_code)


@app.command("make-pairs")
@guarded
def make_pairs_cmd(
    annotations: Path = typer.Option(..., "--annotations", help="COCO/LVIS-format instances JSON."),
    images: Path = typer.Option(..., "--images", help="Folder of the images the annotations name."),
    out: Path = typer.Option(..., "--out", help="Dataset folder (rerun to resume)."),
    embedder: str = typer.Option("dino", "--embedder", help="DINOv2 model: role, hub id or local directory."),
    min_similarity: float = typer.Option(0.6, "--min-similarity", help="DINOv2 cosine threshold (paper: 0.6)."),
    neighbours: int = typer.Option(5, "--neighbours", min=1, help="Nearest neighbours searched per image."),
    max_class_diff: int = typer.Option(15, "--max-class-diff", help="Keep pairs differing by fewer classes."),
    match_iou: float = typer.Option(0.5, "--match-iou", help="IoU for a same-class object across the pair to be EDIT."),
    min_box: int = typer.Option(16, "--min-box", help="Drop boxes with a side under this many pixels."),
    verify_with: Optional[str] = typer.Option(None, "--verify-with", help="OWLv2 model to verify ADD/REMOVE labels."),
    max_pairs: Optional[int] = typer.Option(None, "--max-pairs", help="Keep at most this many pairs."),
    device: str = DeviceOpt,
    dtype: str = DtypeOpt,
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar."),
) -> None:
    """Stage-1 data: pairs of similar real images, labelled ADD/REMOVE/EDIT from their annotations."""
    from editlens.dice.data.pairs import PairConfig, make_pairs

    stats = make_pairs(PairConfig(str(annotations), str(images), str(out), embedder=embedder,
                                  min_similarity=min_similarity, neighbours=neighbours, max_class_diff=max_class_diff,
                                  match_iou=match_iou, min_box=min_box, verify_with=verify_with,
                                  max_pairs=max_pairs, device=device, dtype=dtype), progress=progress)
    emit_json(stats)


@app.command("make-edits")
@guarded
def make_edits_cmd(
    annotations: Path = typer.Option(..., "--annotations", help="COCO/LVIS-format instances JSON with masks."),
    images: Path = typer.Option(..., "--images", help="Folder of the images the annotations name."),
    out: Path = typer.Option(..., "--out", help="Dataset folder (rerun to resume)."),
    inpainter: str = typer.Option("opencv", "--inpainter", help="opencv (offline) or diffusers:MODEL_DIR (a local "
                                  "inpainting pipeline, e.g. SD or Kandinsky 2.2 inpainting)."),
    inpaint_steps: Optional[int] = typer.Option(None, "--inpaint-steps", min=1,
                                                help="Diffusion steps of a diffusers inpainter (paper: 100)."),
    inpaint_guidance: Optional[float] = typer.Option(None, "--inpaint-guidance", min=0.0,
                                                     help="Guidance scale of a diffusers inpainter (paper: 4)."),
    inpaint_dtype: str = typer.Option("auto", "--inpaint-dtype", help="auto (bf16/fp16 on CUDA, fp32 on CPU), "
                                      "float32, float16 or bfloat16."),
    device: str = typer.Option("auto", "--device", help="Device of a diffusers inpainter."),
    max_objects: int = typer.Option(4, "--max-objects", help="Objects edited per image (paper: 4)."),
    min_area: float = typer.Option(0.03, "--min-area", help="Smallest mask, fraction of the image (paper: 3%)."),
    max_overlap: float = typer.Option(0.05, "--max-overlap", help="Largest overlap between chosen masks (paper: 5%)."),
    unchanged: float = typer.Option(0.15, "--unchanged", help="Fraction of images kept as unchanged pairs."),
    jpeg_min: int = typer.Option(15, "--jpeg-min", help="Lowest JPEG quality of the augmentation."),
    jpeg_max: int = typer.Option(50, "--jpeg-max", help="Highest JPEG quality of the augmentation."),
    coherence: bool = typer.Option(True, "--coherence/--no-coherence", help="Also write templated coherence records."),
    max_images: Optional[int] = typer.Option(None, "--max-images", help="Use at most this many images."),
    seed: int = typer.Option(0, "--seed", help="Random seed (the same seed reproduces the same result)."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar."),
) -> None:
    """Stage-2 data: synthetic ADD/REMOVE/EDIT edits of annotated objects by inpainting, JPEG-compressed."""
    from editlens.dice.data.edits import EditConfig, make_edits

    stats = make_edits(EditConfig(str(annotations), str(images), str(out), inpainter=inpainter,
                                  max_objects=max_objects, min_area=min_area, max_overlap=max_overlap,
                                  unchanged=unchanged, jpeg_range=(jpeg_min, jpeg_max), coherence=coherence,
                                  max_images=max_images, seed=seed, inpaint_steps=inpaint_steps,
                                  inpaint_guidance=inpaint_guidance, device=device, inpaint_dtype=inpaint_dtype),
                       progress=progress)
    emit_json(stats)


#: The flat command names of earlier releases, kept working (hidden from --help).
legacy_app = typer.Typer()
for _old, _fn in (("dice-rank", dice_rank_cmd), ("dice-eval", dice_eval_cmd), ("dice-train", train_cmd),
                  ("dice-make-pairs", make_pairs_cmd), ("dice-make-edits", make_edits_cmd), ("dice-merge", merge_cmd)):
    legacy_app.command(_old, hidden=True)(_fn)

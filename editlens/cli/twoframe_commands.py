"""``editlens twoframe``: train, evaluate, calibrate and convert two-frame video models."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from editlens.cli.common import emit_json, guarded
from editlens.cli.options import DeviceOpt, DtypeOpt, LrDecay, TwoFrameMode, TwoFrameObjective, TwoFrameSize
from editlens.cli.training_options import LogTo, LogToOpt, Sharding, ShardingOpt

if TYPE_CHECKING:
    from editlens.twoframe.model import TwoFrameModel

twoframe_app = typer.Typer(no_args_is_help=True,
                           help="Edits as 2-frame videos in a video-text CLIP (ViFi-CLIP scoring, order-aware head).")

JsonOpt = typer.Option(False, "--json", help="Machine-readable output.")
TokOpt = typer.Option(None, "--tokenizer", help="CLIP tokenizer dir or hub id (needed for .pth checkpoints).")
BaseOpt = typer.Option(None, "--base", help="CLIP a ViFi .pth was fine-tuned from (supplies its token embedding).")
HeadsOpt = typer.Option(None, "--heads", help="Attention heads of a .pth's towers (default: width / 64, OpenAI's rule).")
PresetOpt = typer.Option(None, "--preset", help="Preprocessing of a new model: vifi (256->224, ImageNet stats) or clip.")
ModeOpt = typer.Option(None, "--mode", help="faithful (mean pooling) or order (temporal head); default: the model's.")
KsOpt = typer.Option("1,5,10,50", "--ks", help="Recall@k cut-offs.")


def _ks(value: str) -> tuple[int, ...]:
    try:
        ks = tuple(int(k) for k in value.split(",") if k.strip())
    except ValueError:
        raise typer.BadParameter(f"--ks must be comma-separated integers, got {value!r}") from None
    if not ks or min(ks) < 1:
        raise typer.BadParameter("--ks needs positive integers")
    return ks


def _load(model: str, tokenizer: Optional[str], base: Optional[str], heads: Optional[int], preset: Optional[str],
          device: str, dtype: str = "auto") -> TwoFrameModel:
    from editlens.twoframe.model import load_twoframe

    return load_twoframe(model, tokenizer=tokenizer, base=base, heads=heads, preset=preset, device=device, dtype=dtype)


@twoframe_app.command("random-model")
@guarded
def random_model(
    out: Path = typer.Argument(..., help="Directory to write."),
    size: TwoFrameSize = typer.Option("tiny", "--size", help="tiny (width 64, 2 layers, 32 px) or vit-b-16."),
    tokenizer: Optional[str] = typer.Option(None, "--tokenizer", help="CLIP tokenizer dir (default: a small BPE)."),
    seed: int = typer.Option(0, "--seed", help="Random seed (the same seed reproduces the same result)."),
) -> None:
    """Write a randomly initialised CLIP to train from (smoke tests, benchmarks; its scores are noise)."""
    from editlens.models.random_init import build_clip

    path = build_clip(out, tokenizer, size, seed)
    typer.echo(f"random {size} CLIP written to {path} (untrained: train it before trusting a score)")


@twoframe_app.command("train")
@guarded
def train_cmd(
    manifest: Path = typer.Argument(..., help="Training edits: manifest with id, source, edited, instruction."),
    base_model: str = typer.Option(..., "--model", help="Start from: twoframe dir, ViFi/OpenAI .pth, or transformers CLIP."),
    out: Path = typer.Option(..., "--out", help="Run directory (checkpoints/, log.jsonl, history.json, loss_curve.png, model/)."),
    mode: TwoFrameMode = typer.Option("order", "--mode", help="order (temporal head, ours) or faithful (ViFi-CLIP)."),
    tune: str = typer.Option("head", "--tune", help="head (towers frozen), last:N, lora:R or all."),
    epochs: int = typer.Option(5, "--epochs", help="Passes over the training data."),
    batch_size: int = typer.Option(32, "--batch-size", help="Items per batch (larger is faster where memory allows)."),
    lr: float = typer.Option(1e-5, "--lr", help="Learning rate of tuned tower weights."),
    head_lr: float = typer.Option(1e-3, "--head-lr", help="Learning rate of the head and temperature."),
    negatives: str = typer.Option("auto", "--negatives", help="Hard negatives: noop, swap, none, or auto (order mode: noop,swap; faithful: none, the poster's plain video-to-text retrieval)."),
    objective: TwoFrameObjective = typer.Option("auto", "--objective", help="video_to_text (the ViFi-CLIP poster's retrieval), symmetric (both directions; needed by hard negatives) or auto (faithful without negatives: video_to_text; else symmetric)."),
    head_layers: int = typer.Option(1, "--head-layers", help="Transformer layers of the temporal head (1-2)."),
    val: Optional[Path] = typer.Option(None, "--val", help="Validation manifest (default: split off by source)."),
    val_fraction: float = typer.Option(0.1, "--val-fraction", help="Share of sources held out when --val is absent (0: none)."),
    seed: int = typer.Option(0, "--seed", help="Random seed (the same seed reproduces the same result)."),
    warmup: int = typer.Option(0, "--warmup", min=0, help="Linear learning-rate warm-up steps."),
    lr_decay: LrDecay = typer.Option("constant", "--lr-decay", help="After warm-up: constant, linear or cosine."),
    save_every: int = typer.Option(0, "--save-every", min=0, help="Steps between checkpoints (0: after every epoch)."),
    val_every: int = typer.Option(0, "--val-every", min=0, help="Steps between validations (0: after every epoch)."),
    lora_rank: int = typer.Option(0, "--lora-rank", min=0, help="Train LoRA adapters of this rank (the same as --tune lora:R; 0: as --tune says)."),
    quantization: str = typer.Option("auto", "--quantization", help="auto or none: two-frame training keeps its towers unquantised (nf4 is refused)."),
    keep_checkpoints: int = typer.Option(2, "--keep-checkpoints", min=1, help="Checkpoints kept (the newest)."),
    device: str = DeviceOpt,
    dtype: str = typer.Option("auto", "--dtype", help="Compute dtype under autocast (weights stay float32): auto (bf16 on a GPU that has it or a CPU that computes it natively, else float32; $EDITLENS_DTYPE), float32, bfloat16, float16 (CUDA)."),
    amp: Optional[str] = typer.Option(None, "--amp", hidden=True, help="Earlier spelling of --dtype: auto, none (float32), bf16, fp16."),
    restart: bool = typer.Option(False, "--restart", help="Discard an earlier run in --out instead of resuming it."),
    log_to: Optional[LogTo] = LogToOpt,
    sharding: Optional[Sharding] = ShardingOpt,
    tokenizer: Optional[str] = TokOpt,
    base: Optional[str] = BaseOpt,
    heads: Optional[int] = HeadsOpt,
    preset: Optional[str] = PresetOpt,
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar."),
    json_out: bool = JsonOpt,
) -> None:
    """Retrieval training: symmetric InfoNCE with no-op and swapped-order hard negatives. Rerun to resume."""
    from editlens.models.quant import normalise_choice
    from editlens.twoframe.data import read_edits
    from editlens.twoframe.model import load_twoframe
    from editlens.twoframe.train import TrainConfig, train

    if normalise_choice(quantization, "--quantization") == "nf4":
        raise typer.BadParameter("two-frame training does not train on a 4-bit base; use --quantization none (or auto)")
    if lora_rank:
        if tune not in ("head", f"lora:{lora_rank}"):
            raise typer.BadParameter(f"--lora-rank {lora_rank} means --tune lora:{lora_rank}; it contradicts --tune {tune}")
        tune = f"lora:{lora_rank}"
    names = [n.strip() for n in negatives.split(",") if n.strip()]
    neg = None if names == ["auto"] else tuple(n for n in names if n != "none")
    cfg = TrainConfig(mode=mode, tune=tune, epochs=epochs, batch_size=batch_size, lr=lr, head_lr=head_lr,
                      hard_negatives=neg, objective=objective, head_layers=head_layers,
                      val_fraction=val_fraction if val is None else 0.0, seed=seed, dtype=dtype, amp=amp,
                      warmup_steps=warmup, lr_decay=lr_decay, save_every=save_every, keep_checkpoints=keep_checkpoints,
                      val_every=val_every)
    train_set = read_edits(manifest)
    val_set = read_edits(val) if val is not None else None
    # float32 weights: the trained model is exported whole; --dtype is the compute dtype under autocast
    from editlens.training.distributed import current, local_device

    # under accelerate launch / torchrun each process trains on its own GPU (cuda:LOCAL_RANK)
    model = load_twoframe(base_model, tokenizer=tokenizer, base=base, heads=heads, preset=preset,
                          device=local_device(device), dtype="float32")
    log = (lambda m: typer.echo(m, err=True)) if json_out else typer.echo
    history = train(model, train_set, out, cfg, val_set, progress=progress, restart=restart, log=log,
                    log_to=log_to.value if log_to else None, sharding=sharding.value if sharding else None)
    if not current().main:  # several processes: the main one reports
        raise typer.Exit(history["exit_code"])
    if history["interrupted"]:
        raise typer.Exit(history["exit_code"])
    last = history["epochs"][-1] if history["epochs"] else {}
    first = history["epochs"][0] if history["epochs"] else {}
    summary = {"out": str(out), "model": str(out / "model"), "epochs": len(history["epochs"]),
               "first_epoch_loss": first.get("train_loss"), "last_epoch_loss": last.get("train_loss"),
               "initial_val": history.get("initial_val"), "final_val": last.get("val"),
               "objective": history["objective"], "negatives": history["negatives"],
               "precision": history["precision"]}
    if json_out:
        emit_json(summary)
        return
    typer.echo(f"train loss {summary['first_epoch_loss']:.4f} (epoch 1) -> {summary['last_epoch_loss']:.4f} "
               f"(epoch {summary['epochs']}); model saved to {summary['model']}; loss curve {out / 'loss_curve.png'}")


@twoframe_app.command("eval")
@guarded
def eval_cmd(
    model: str = typer.Argument(..., help="twoframe dir, ViFi/OpenAI .pth, or transformers CLIP."),
    manifest: Path = typer.Argument(..., help="Edits to rank (the candidate pool is their instructions)."),
    mode: Optional[TwoFrameMode] = ModeOpt,
    ks: str = KsOpt,
    scores_out: Optional[Path] = typer.Option(None, "--scores", help="Write per-edit scores as JSONL here."),
    tokenizer: Optional[str] = TokOpt,
    base: Optional[str] = BaseOpt,
    heads: Optional[int] = HeadsOpt,
    preset: Optional[str] = PresetOpt,
    device: str = DeviceOpt,
    dtype: str = DtypeOpt,
    json_out: bool = JsonOpt,
) -> None:
    """Retrieval: Recall@k, mean and median rank of each edit's instruction (and the reverse)."""
    from editlens.twoframe.data import read_edits
    from editlens.twoframe.retrieval import evaluate_set
    from editlens.twoframe.scorer import TwoFrameScorer

    data = read_edits(manifest)
    scorer = TwoFrameScorer(_load(model, tokenizer, base, heads, preset, device, dtype))
    rep = evaluate_set(scorer, data, mode, _ks(ks), progress=not json_out)
    if scores_out is not None:
        from editlens.core.io import write_jsonl

        write_jsonl(scores_out, ({"id": sid, "instruction": data.instructions[i], "rank": rep["ranks_video_to_text"][i],
                                  **{k: v[i] for k, v in rep["scores"].items()}} for i, sid in enumerate(data.ids)))
    if json_out:
        emit_json({k: v for k, v in rep.items() if k not in ("scores", "ranks_video_to_text")})
        return
    typer.echo(f"{rep['n_edits']} edits, {rep['pool']} candidate instructions, mode {rep['mode']}; "
               f"{rep['unique_images']} unique images, {rep['frames_encoded']} encoded")
    for direction in ("video_to_text", "text_to_video"):
        r = rep[direction]
        recalls = "  ".join(f"R@{k} {100 * r[f'recall@{k}']:.2f}" for k in _ks(ks))
        typer.echo(f"  {direction.replace('_', ' '):<14} {recalls}  mean rank {r['mean_rank']:.2f}  "
                   f"median rank {r['median_rank']:.1f}")


@twoframe_app.command("score")
@guarded
def score_cmd(
    model: str = typer.Argument(..., help="twoframe dir, ViFi/OpenAI .pth, or transformers CLIP."),
    source: Path = typer.Option(..., "--source", help="The original image (a file)."),
    edited: Path = typer.Option(..., "--edited", help="The edited image (a file)."),
    instruction: str = typer.Option(..., "--instruction", help="The edit instruction."),
    mode: Optional[TwoFrameMode] = ModeOpt,
    tokenizer: Optional[str] = TokOpt,
    base: Optional[str] = BaseOpt,
    heads: Optional[int] = HeadsOpt,
    preset: Optional[str] = PresetOpt,
    device: str = DeviceOpt,
    dtype: str = DtypeOpt,
    json_out: bool = JsonOpt,
) -> None:
    """Score one edit: cosine, logit and (when fitted) calibrated 0-1."""
    from editlens.core.images import load_image
    from editlens.errors import InputError
    from editlens.twoframe.scorer import TwoFrameScorer

    if not instruction.strip():
        raise InputError("--instruction is empty")
    src, _ = load_image(source)
    edt, _ = load_image(edited)
    scorer = TwoFrameScorer(_load(model, tokenizer, base, heads, preset, device, dtype))
    out = scorer.score([str(source)], [src], [str(edited)], [edt], [instruction.strip()], mode=mode)
    result: dict[str, float | str] = {k: float(v[0]) for k, v in out.items()}
    result["mode"] = mode or scorer.model.mode
    if json_out:
        emit_json(result)
        return
    typer.echo("  ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in result.items()))


@twoframe_app.command("calibrate")
@guarded
def calibrate_cmd(
    model: Path = typer.Argument(..., help="A twoframe model directory (the calibration is stored in it)."),
    manifest: Path = typer.Argument(..., help="Labelled edits."),
    label_column: str = typer.Option("human", "--label-column", help="Numeric column: 0/1 labels or scores."),
    label_max: float = typer.Option(1.0, "--label-max", help="Labels are divided by this (e.g. 10 for 0-10 ratings)."),
    mode: Optional[TwoFrameMode] = ModeOpt,
    device: str = DeviceOpt,
    dtype: str = DtypeOpt,
    json_out: bool = JsonOpt,
) -> None:
    """Fit the 0-1 calibration (Platt scaling of the cosine) on labelled edits and store it with the model."""
    import numpy as np

    from editlens.errors import InputError
    from editlens.twoframe.calibration import fit_platt
    from editlens.twoframe.data import read_edits
    from editlens.twoframe.model import is_twoframe_dir
    from editlens.twoframe.scorer import TwoFrameScorer

    if not is_twoframe_dir(model):
        raise InputError(f"{model}: not a twoframe model directory (no twoframe.json); convert or train one first")
    data = read_edits(manifest, label_column=label_column)
    scorer = TwoFrameScorer(_load(str(model), None, None, None, None, device, dtype))
    out = scorer.score(data.source_keys, lambda i: data.image(data.source_keys[i]), data.edited_keys,
                       lambda i: data.image(data.edited_keys[i]), data.instructions, mode=mode)
    labels = np.asarray(data.labels, dtype=float) / label_max
    cal = {**fit_platt(out["cosine"], labels), "fitted_on": f"{manifest} column {label_column!r} / {label_max:g}",
           "mode": mode or scorer.model.mode}
    meta_path = model / "twoframe.json"
    meta = json.loads(meta_path.read_text())
    meta["calibration"] = cal
    from editlens.core.io import write_json

    write_json(meta_path, meta)
    if json_out:
        emit_json(cal)
        return
    typer.echo(f"calibration a={cal['a']:.4f} b={cal['b']:.4f} (n={cal['n']}, BCE {cal['bce']:.4f}) stored in {meta_path}")


@twoframe_app.command("convert")
@guarded
def convert_cmd(
    checkpoint: Path = typer.Argument(..., help="ViFi-CLIP or OpenAI CLIP .pth/.pt in the original layout."),
    out: Path = typer.Option(..., "--out", help="twoframe model directory to write."),
    tokenizer: str = typer.Option(..., "--tokenizer", help="CLIP tokenizer dir or hub id."),
    base: Optional[str] = BaseOpt,
    heads: Optional[int] = HeadsOpt,
    preset: Optional[str] = PresetOpt,
    json_out: bool = JsonOpt,
) -> None:
    """Load an original-layout checkpoint with full key accounting and save it as a twoframe directory
    (float32 on the CPU: conversion keeps every weight as stored)."""
    model = _load(str(checkpoint), tokenizer, base, heads, preset, "cpu", "float32")
    model.save(out)
    report = model.provenance["load"]
    if json_out:
        emit_json({"out": str(out), "load": report})
        return
    typer.echo(f"{report['mapped']} tensors mapped, {report['dropped']} dropped (prompt learner / metadata), "
               f"{len(report['from_base'])} from --base; written to {out}")

"""``editlens adiee ...`` (data creation, training, checkpoints, fast scorer)
and the reward commands ``editlens best-of-n`` and ``editlens relabel``."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import List, Optional

import typer

from editlens.cli.common import emit_json, guarded, parse_models
from editlens.cli.options import (
    AddressOpt,
    AdieeHead,
    AdieeLayout,
    Binning,
    DeviceOpt,
    DtypeOpt,
    Executor,
    ExecutorOpt,
    GpusPerWorkerOpt,
    LevelStyle,
    LrDecay,
    Orders,
    RayWorkersOpt,
    SampleWeights,
    TargetWeights,
)
from editlens.cli.training_options import (
    QUANT_HELP,
    SAVE_EVERY_HELP,
    VAL_EVERY_HELP,
    LogTo,
    LogToOpt,
    Sharding,
    ShardingOpt,
)

adiee_app = typer.Typer(no_args_is_help=True, help="ADIEE: make scored training data, train and use a score-token scorer.")
#: Reward commands that work with any registered evaluator (top-level: ``editlens best-of-n``, ``editlens relabel``).
reward_app = typer.Typer()

ModelOpt = typer.Option(None, "--model", help="Model for a role, ROLE=DIR (clip=..., dino=..., adiee=...). Repeatable.")
OptionOpt = typer.Option(None, "--option", help="Evaluator option NAME.KEY=VALUE (e.g. adiee.hidden=score-token). Repeatable.")


def _echo(msg: str) -> None:
    typer.echo(msg, err=True)


@adiee_app.command("make-data")
@guarded
def make_data_cmd(
    edits: Path = typer.Argument(..., help="Edits with ground truth (.jsonl: id, source, instruction, reference; "
                                           "or AURORA-style input/output/instruction)."),
    out: Path = typer.Option(..., "--out", help="Dataset directory (created; rerun to resume)."),
    outputs: Optional[Path] = typer.Option(None, "--outputs", help="Editing-model outputs (.jsonl: edit_id, model, edited)."),
    sessions: Optional[Path] = typer.Option(None, "--sessions", help="Folder of multi-turn sessions (ID/ID-input.png, ID-output1.png, ...)."),
    config: Optional[Path] = typer.Option(None, "--config", help="Rules, model lists and thresholds (TOML or YAML)."),
    model: Optional[List[str]] = ModelOpt,
    device: str = DeviceOpt,
    dtype: str = DtypeOpt,
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar."),
    json_out: bool = typer.Option(False, "--json", help="Machine-readable output (JSON) instead of the table."),
) -> None:
    """Create a scored dataset (paper sec. 3.1-3.2): JSONL + images + stats + histogram."""
    from editlens.adiee.config import load_config
    from editlens.adiee.data import make_dataset
    from editlens.models.encoders import get_encoder

    models = parse_models(model)
    res = make_dataset(edits, out, load_config(config), outputs, sessions, progress=progress,
                       encoders=lambda: (get_encoder("clip", None, device, dtype, models),
                                         get_encoder("dino", None, device, dtype, models)))
    st = res.stats
    if json_out:
        emit_json(st)
        return
    typer.echo(f"{st['samples']} samples -> {out}/samples.jsonl ({', '.join(f'{k} {v}' for k, v in st['by_split'].items())})")
    typer.echo("  by rule:  " + ", ".join(f"{k} {v}" for k, v in st["by_rule"].items()))
    typer.echo("  by score: " + ", ".join(f"{k}: {v}" for k, v in st["by_score"].items()))
    if st["excluded_total"]:
        typer.echo(f"  excluded {st['excluded_total']}: " + "; ".join(f"{k} ({v})" for k, v in st["excluded"].items()))
    if st["thresholds"]:
        t = st["thresholds"]
        typer.echo(f"  input-image percentile thresholds: CLIP-I {t['clip_i']:.4f}, DINO-I {t['dino_i']:.4f} (n={t['n_inputs']})")
    typer.echo(f"  {st['sequences']} multi-turn sequences used, {len(st['sequences_skipped'])} skipped")
    typer.echo(f"  stats.json, histogram.png, val_manifest.jsonl, val_labels.jsonl in {out}")


@adiee_app.command("train")
@guarded
def train_cmd(
    data: Path = typer.Option(..., "--data", help="Dataset directory from `make-data`."),
    base: str = typer.Option(..., "--base", help="Base VLM: hub id or directory (LLaVA-NeXT, Qwen2-VL, ...)."),
    out: Path = typer.Option(..., "--out", help="Run directory (rerun to resume)."),
    head: AdieeHead = typer.Option("regression", "--head", help="regression (0-10) or class3 (fail/partial/success)."),
    steps: int = typer.Option(100, "--steps", min=1, help="Optimiser steps."),
    lr: float = typer.Option(2e-5, "--lr", help="Learning rate."),
    batch_size: int = typer.Option(2, "--batch-size", min=1, help="Items per batch (larger is faster where memory allows)."),
    grad_accum: int = typer.Option(1, "--grad-accum", min=1, help="Micro-batches accumulated per optimizer step."),
    warmup: int = typer.Option(0, "--warmup", min=0, help="Warm-up steps."),
    lr_decay: LrDecay = typer.Option("linear", "--lr-decay", help="After warm-up: linear (to 0 at the last step), cosine or constant."),
    clip: float = typer.Option(1.0, "--clip", help="Gradient-norm clipping."),
    score_weight: float = typer.Option(10.0, "--score-weight", help="Weight of the score loss."),
    ce_weight: float = typer.Option(1.0, "--ce-weight", help="Weight of the token cross-entropy loss."),
    val_every: int = typer.Option(50, "--val-every", min=0, help=VAL_EVERY_HELP),
    val_max: int = typer.Option(64, "--val-max", min=0, help="Validate on at most this many items."),
    save_every: int = typer.Option(50, "--save-every", min=0, help=SAVE_EVERY_HELP),
    keep_checkpoints: int = typer.Option(2, "--keep-checkpoints", min=1, help="Checkpoints kept (the newest)."),
    image_side: int = typer.Option(512, "--image-side", help="Each image is resized to SIDE x SIDE, side by side."),
    max_samples: Optional[int] = typer.Option(None, "--max-samples", help="Use only the first N training samples."),
    sample_weights: Optional[SampleWeights] = typer.Option(None, "--sample-weights", help="How training samples "
                                                           "are drawn: uniform (each once per epoch; the default), "
                                                           "balanced (each rounded 0-10 score about equally often) or "
                                                           "table (from --sample-weight-table)."),
    sample_weight_table: Optional[Path] = typer.Option(None, "--sample-weight-table", help="Score -> weight table: "
                                                       "a JSON object {\"0\": w, ..., \"10\": w}, or a clone of "
                                                       "the ADIEE release (its WEIGHT_DICT, parsed, never run). "
                                                       "Implies --sample-weights table."),
    lora: bool = typer.Option(True, "--lora/--no-lora", help="Train LoRA adapters instead of the full weights."),
    lora_r: int = typer.Option(8, "--lora-rank", min=1, help="LoRA rank (as released: 8)."),
    lora_r_old: Optional[int] = typer.Option(None, "--lora-r", hidden=True, help="Earlier name of --lora-rank."),
    lora_alpha: int = typer.Option(16, "--lora-alpha", help="LoRA alpha (scale = alpha / rank)."),
    lora_dropout: float = typer.Option(0.05, "--lora-dropout", help="LoRA dropout."),
    quantization: str = typer.Option("auto", "--quantization", help=QUANT_HELP + " auto: none (the release trains "
                                     "an unquantised base); nf4: QLoRA (needs bitsandbytes; CUDA or CPU), our layout only."),
    qlora: bool = typer.Option(False, "--qlora", hidden=True, help="Earlier spelling of --quantization nf4."),
    augment: bool = typer.Option(True, "--augment/--no-augment", help="Flip / rot90 both images."),
    layout: AdieeLayout = typer.Option("ours", "--layout", help="Final checkpoint: ours (LoRA), released (full state dict) or both."),
    template: Optional[List[str]] = typer.Option(None, "--template", help="adiee_questions=FILE / adiee_answers=FILE."),
    gradient_checkpointing: bool = typer.Option(False, "--gradient-checkpointing", help="Recompute activations in the backward pass (less memory, slower)."),
    device: str = typer.Option("auto", "--device", help="auto (cuda, mps, cpu; $EDITLENS_DEVICE), cpu, cuda, cuda:N."),
    dtype: str = typer.Option("auto", "--dtype", help="Compute dtype: auto (bf16 on a GPU that has it or a CPU that computes it natively, else float32; $EDITLENS_DTYPE), float32, bfloat16, float16 (CUDA). Trained weights stay float32."),
    seed: int = typer.Option(0, "--seed", help="Random seed (the same seed reproduces the same result)."),
    restart: bool = typer.Option(False, "--restart", help="Discard an earlier run in --out instead of resuming it."),
    log_to: Optional[LogTo] = LogToOpt,
    sharding: Optional[Sharding] = ShardingOpt,
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar."),
) -> None:
    """Train the scorer; prints the loss, writes log.jsonl, loss.png and the checkpoint."""
    from editlens.adiee.train import TrainConfig, train
    from editlens.cli.training_options import aliased
    from editlens.models.quant import normalise_choice

    lora_r = aliased(lora_r, 8, lora_r_old, "--lora-rank", "--lora-r")
    quantization = normalise_choice(quantization, "--quantization")
    if qlora and quantization == "none":
        raise typer.BadParameter("--qlora is the earlier spelling of --quantization nf4; it contradicts --quantization none")
    qlora = qlora or quantization == "nf4"
    cfg = TrainConfig(base=base, data=str(data), out=str(out), head=head, lora=lora, lora_r=lora_r,
                      lora_alpha=lora_alpha, lora_dropout=lora_dropout, qlora=qlora, lr=lr, batch_size=batch_size,
                      grad_accum=grad_accum, steps=steps, warmup_steps=warmup, lr_decay=lr_decay, clip=clip,
                      score_weight=score_weight, ce_weight=ce_weight, val_every=val_every, val_max=val_max,
                      save_every=save_every, keep_checkpoints=keep_checkpoints,
                      image_side=image_side, augment=augment, max_samples=max_samples,
                      sample_weights=sample_weights or ("table" if sample_weight_table else "uniform"),
                      sample_weight_table=str(sample_weight_table) if sample_weight_table else None, seed=seed,
                      device=device,
                      dtype=dtype, gradient_checkpointing=gradient_checkpointing, layout=layout,
                      templates=parse_models(template))
    s = train(cfg, echo=typer.echo, progress=progress, restart=restart, log_to=log_to.value if log_to else None,
                    sharding=sharding.value if sharding else None)
    from editlens.training.distributed import current

    if not current().main:  # several processes: the main one reports
        raise typer.Exit(s["exit_code"])
    if s["interrupted"]:
        raise typer.Exit(s["exit_code"])
    typer.echo(f"loss {s['first_loss']:.4f} (first fifth of steps) -> {s['last_loss']:.4f} (last fifth); score loss "
               f"{s['first_score_loss']:.4f} -> {s['last_score_loss']:.4f} (best constant: {s['constant_score_loss']:.4f})")
    for name, path in s["checkpoints"].items():
        typer.echo(f"checkpoint ({name} layout): {path}")
    typer.echo(f"loss curve: {s['loss_curve']}")


@adiee_app.command("export")
@guarded
def export_cmd(checkpoint: Path = typer.Argument(..., help="Scorer checkpoint (either layout)."),
               out: Path = typer.Option(..., "--out", help="Directory for the released layout."),
               base: Optional[str] = typer.Option(None, "--base", help="Base VLM, if the checkpoint does not name it."),
               device: str = typer.Option("cpu", "--device", help="cpu, cuda, cuda:N or auto (default: $EDITLENS_DEVICE, else auto)."),
               dtype: str = typer.Option("float32", "--dtype", help="Dtype of the written weights (float32: the "
                                         "merged adapters lose nothing).")) -> None:
    """Write a checkpoint in the released layout (LoRA merged; full state dict)."""
    # unquantised: adapters trained on a 4-bit base (QLoRA) merge into the full-precision weights
    from editlens.adiee.checkpoint import load_scorer, read_meta, save_released
    from editlens.models.quant import describe_precision

    scorer, rep, hidden = load_scorer(checkpoint, base, device, dtype, quantization="none")
    trained = read_meta(Path(checkpoint)).get("precision")
    extra = {"precision": {"base_weights": describe_precision(scorer.vlm)["weights"], "merged_from": str(checkpoint),
                           **({"adapters_trained_with": trained} if trained else {})}}
    save_released(scorer, out, hidden=hidden, extra=extra)  # keep the checkpoint's own default in adiee.json
    typer.echo(f"loaded {checkpoint} ({rep.format} layout, every key accounted for) -> released layout in {out}")


@adiee_app.command("inspect")
@guarded
def inspect_cmd(checkpoint: Path = typer.Argument(...), base: Optional[str] = typer.Option(None, "--base", help="Base model: a folder, hub id or preset name."),
                device: str = DeviceOpt, dtype: str = DtypeOpt,
                quantization: str = typer.Option("auto", "--quantization", help="auto (4-bit for a --qlora checkpoint on CUDA+bitsandbytes), nf4 (force 4-bit, CPU too) or none.")) -> None:
    """Load a checkpoint strictly and print its key report and settings."""
    from editlens.adiee.checkpoint import load_scorer, read_meta

    scorer, rep, hidden = load_scorer(checkpoint, base, device, dtype, quantization=quantization)
    emit_json({"report": rep.to_dict(), "meta": read_meta(Path(checkpoint)), "head": scorer.head,
               "family": scorer.family, "default_hidden": hidden, "score_token_id": scorer.score_token_id})


@adiee_app.command("fast-train")
@guarded
def fast_train_cmd(data: Path = typer.Option(..., "--data", help="Training data folder (as written by the data-making command)."), out: Path = typer.Option(..., "--out", help="Output folder (or file) to write."),
                   model: Optional[List[str]] = ModelOpt, epochs: int = typer.Option(300, "--epochs", min=1, help="Passes over the training data."),
                   lr: float = typer.Option(3e-3, "--lr", help="Learning rate."), hidden: int = typer.Option(64, "--hidden", help="Hidden width of the head."),
                   seed: int = typer.Option(0, "--seed", help="Random seed (the same seed reproduces the same result)."), device: str = DeviceOpt, dtype: str = DtypeOpt) -> None:
    """Train the fast feature scorer (frozen CLIP/DINOv2 + small MLP) on a dataset."""
    from editlens.adiee.fast import train_fast

    s = train_fast(data, out, parse_models(model), epochs, lr, hidden, seed, device, echo=typer.echo, dtype=dtype)
    val = "-" if s["val_spearman"] is None else f"{s['val_spearman']:.4f}"
    typer.echo(f"train L1 {s['first_loss']:.4f} -> {s['last_loss']:.4f}; val Spearman {val} "
               f"({s['n_train']} train / {s['n_val']} val) -> {out} (use --model adiee_fast={out})")


@adiee_app.command("compare")
@guarded
def compare_cmd(source: Path = typer.Option(..., "--source", help="The original image (a file)."), edited_a: Path = typer.Option(..., "--edited-a", help="Edit A (a file)."),
                edited_b: Path = typer.Option(..., "--edited-b", help="Edit B (a file)."), instruction: str = typer.Option(..., "--instruction", help="The edit instruction."),
                metric: str = typer.Option("adiee", "--metric", help="Evaluator whose score is used (see `editlens metrics`)."), model: Optional[List[str]] = ModelOpt,
                option: Optional[List[str]] = OptionOpt, json_out: bool = typer.Option(False, "--json", help="Machine-readable output (JSON) instead of the table."),
                device: str = DeviceOpt, dtype: str = DtypeOpt) -> None:
    """Pairwise from two scores with the released rule: type = round(score / 5), higher type wins."""
    from editlens.core.types import EditSample
    from editlens.meta.protocols import adiee_pair_verdict
    from editlens.runner.selection import parse_options, select_metrics

    sel = select_metrics([metric], models=parse_models(model), options=parse_options(option or []), device=device,
                         dtype=dtype)
    m = sel.metrics[0]
    a = EditSample("a", str(source), str(edited_a), instruction).load()
    b = EditSample("b", str(source), str(edited_b), instruction).load()
    sa, sb = m.score_batch([a, b])
    if sa.value is None or sb.value is None:
        typer.echo(f"unscored: A {sa.status} ({sa.reason}), B {sb.status} ({sb.reason})")
        raise typer.Exit(1)
    v = adiee_pair_verdict(sa.value, sb.value)
    verdict = {1: "A", -1: "B", 0: "tie"}[v]
    if json_out:
        emit_json({"verdict": verdict, "score_a": sa.value, "score_b": sb.value, "rule": "round(score/5)"})
        return
    typer.echo(f"A {sa.value:.3f}  B {sb.value:.3f}  -> {verdict} (type = round(score / 5))")


class PairwiseRule(str, Enum):
    """Which of ADIEE's pairwise rules to apply (recorded beside the figure)."""

    three_way = "adiee-3way"
    genai_4way = "adiee-genai-4way"


@adiee_app.command("pairwise-eval")
@guarded
def pairwise_eval_cmd(human: Path = typer.Option(..., "--human", help="JSONL {id, a, b, preference} (with "
                                                 "--rule adiee-genai-4way: leftvote/rightvote/tievote/bothbad_vote)."),
                      predictions: Path = typer.Option(..., "--predictions", help="Predictions: an `editlens run` results.jsonl (with --metric) or {id, score} JSON lines."),
                      metric: Optional[str] = typer.Option(None, "--metric", help="Evaluator whose score is used (see `editlens metrics`)."),
                      rule: PairwiseRule = typer.Option(PairwiseRule.three_way, "--rule", help=(
                          "adiee-3way: round(score/5) types, equal types tie (ADIEE's AURORA rule); adiee-genai-4way: "
                          "ADIEE's GenAI-Bench rule, equal types tie only when both scores >= 9, else both bad, "
                          "exact 4-way match over all pairs.")),
                      denominator: str = typer.Option("scored", "--denominator", help="adiee-3way: divide by "
                                                      "the pairs with both scores (scored) or by all pairs, a pair "
                                                      "without both counted wrong (all: as the release)."),
                      json_out: bool = typer.Option(False, "--json", help="Machine-readable output (JSON) instead of the table.")) -> None:
    """Pairwise accuracy of ADIEE's released rule (round(score/5)) beside accuracy-with-ties calibration; with
    --rule adiee-genai-4way, ADIEE's GenAI-Bench rule. Every figure names its rule."""
    from editlens.bench.registry import get
    from editlens.meta.protocols import PAIRWISE_RULES

    if rule == PairwiseRule.genai_4way:
        res = get("genai-bench").run_protocol("adiee-genai-4way", human=human, predictions=predictions, metric=metric)
        if json_out:
            emit_json(res)
            return
        typer.echo(f"ADIEE GenAI-Bench rule (4-way) accuracy {res['accuracy']:.4f} over {res['n']} pairs "
                   f"({res['unscored']} without both scores, counted wrong)")
        return
    if denominator not in ("scored", "all"):
        raise typer.BadParameter(f"must be scored or all, got {denominator!r}", param_hint="--denominator")
    out = get("aurora").run_protocol("adiee-released-rule", human=human, predictions=predictions, metric=metric,
                                     denominator=denominator)
    out.update({"rule": rule.value, "rule_text": PAIRWISE_RULES[rule.value]})
    rep = out["accuracy_with_ties"]
    if json_out:
        emit_json(out)
        return
    typer.echo(f"released rule (type = round(score/5)) accuracy {out['released_rule_accuracy']:.4f} over {out['n']} "
               f"pairs ({'all pairs, ' + str(out['unscored_pairs']) + ' without both scores counted wrong' if denominator == 'all' else 'with both scores'})")
    typer.echo(f"accuracy with tie calibration {rep['accuracy']:.4f} (threshold {rep['threshold']:.4g})")


@reward_app.command("best-of-n")
@guarded
def best_of_n_cmd(
    manifest: Path = typer.Argument(..., help="Candidate edits; candidates of one source+instruction (or 'group' column) compete."),
    metric: str = typer.Option(..., "--metric", help="Any registered evaluator (adiee, adiee_fast, clip_d, ...)."),
    model: Optional[List[str]] = ModelOpt,
    option: Optional[List[str]] = OptionOpt,
    out: Optional[Path] = typer.Option(None, "--out", help="Write the picks as JSON."),
    device: str = DeviceOpt,
    dtype: str = DtypeOpt,
    batch_size: int = typer.Option(8, "--batch-size", min=1, help="Items per batch (larger is faster where memory allows)."),
    json_out: bool = typer.Option(False, "--json", help="Machine-readable output (JSON) instead of the table."),
    editor: Optional[str] = typer.Option(None, "--editor", help="Generate the candidates first with this editor "
                                         "(MANIFEST then lists the edits to make; see `editlens edit`)."),
    samples: int = typer.Option(4, "--samples", min=1, help="With --editor: candidates generated per edit."),
    seed: int = typer.Option(0, "--seed", help="With --editor: base seed of the derived per-image seeds."),
    editor_option: Optional[List[str]] = typer.Option(None, "--editor-option", help="With --editor: editor setting "
                                                      "KEY=VALUE (steps=20...). Repeatable."),
    edits_out: Optional[Path] = typer.Option(None, "--edits-out", help="With --editor: folder of the generated "
                                             "candidates (resumable; default MANIFEST's folder/STEM.best-of-N)."),
    vlm: Optional[str] = typer.Option(None, "--vlm", help="VLM of a judge evaluator (pairwise: a knockout per edit)."),
    orders: Orders = typer.Option(Orders.both, "--orders", help="Pairwise judge: both, forward or reverse."),
    executor: Executor = ExecutorOpt,
    address: Optional[str] = AddressOpt,
    workers: Optional[int] = RayWorkersOpt,
    gpus_per_worker: float = GpusPerWorkerOpt,
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="Only the first N edits (groups of "
                                        "candidates; with --editor, the first N edits to make)."),
) -> None:
    """Pick the best of N candidate edits per source by a registered evaluator; with --editor, generate the
    N candidates first (a pairwise judge as --metric runs a knockout per edit, both orders by default).

    Exit status with --editor: 3 when images or scores failed (a rerun redoes them), as `editlens run`.
    """
    if editor:
        from editlens.cli.edit_commands import spread

        _best_of_generated(manifest, metric, model, option, out, device, dtype, batch_size, json_out, editor,
                           samples, seed, editor_option, edits_out, vlm, orders.value,
                           spread(executor, address, workers, gpus_per_worker), limit)
        return
    if executor is not Executor.local:
        raise typer.BadParameter("--executor ray spreads the generation: it goes with --editor")
    from editlens.runner.best_of_n import best_of_manifest
    from editlens.runner.selection import parse_options

    doc = best_of_manifest(manifest, metric, models=parse_models(model), options=parse_options(option or []),
                           device=device, dtype=dtype, batch_size=batch_size, limit=limit, out=out)
    if json_out:
        emit_json(doc)
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"best of N by {metric}")
    for col in ("group", "candidates", "best", "value", "others"):
        table.add_column(col)
    for p in doc["picks"]:
        others = ", ".join(f"{c['id']}={'-' if c['value'] is None else format(c['value'], '.3f')}"
                           for c in p["candidates"] if c["id"] != p["best_id"])
        table.add_row(p["group"].split("\u241f")[-1][:40], str(len(p["candidates"])), p["best_id"] or "(none scored)",
                      "-" if p["best_value"] is None else f"{p['best_value']:.4f}", others)
    Console().print(table)


def _best_of_generated(manifest, metric, model, option, out, device, dtype, batch_size, json_out, editor,
                       samples, seed, editor_option, edits_out, vlm, orders, where=None, limit=None):
    from editlens.cli.common import EXIT_FAILED
    from editlens.cli.edit_commands import editor_options, exit_for, run_generation
    from editlens.runner.best_of_n import best_of_generated
    from editlens.runner.selection import parse_options

    folder = edits_out or manifest.parent / f"{manifest.stem}.best-of-{samples}"
    result = run_generation(manifest, editor, folder, samples, seed,
                            editor_options(editor_option, device, dtype, False, False), None, True, None,
                            where=where, limit=limit)
    if result.interrupted:
        exit_for(result, folder)
    from editlens.cli.options import vlm_options

    vlm_opts = vlm_options(vlm, None, "default", None, device, 1, 0.0, dtype)  # None without --vlm
    doc = best_of_generated(result.manifest, metric, models=parse_models(model),
                            options=parse_options(option or []), device=device, dtype=dtype, vlm=vlm_opts,
                            orders=orders, batch_size=batch_size)
    doc.update({"editor": editor, "samples": samples, "edits": str(result.manifest),
                "failed_images": result.failed})
    target = out or folder / "best_of_n.json"
    from editlens.core.io import write_json

    write_json(target, doc, default=str)
    if json_out:
        emit_json(doc)
    else:
        for p in doc["picks"]:
            typer.echo(f"{p['group']}: best {p['best_id'] or '(none)'}"
                       + (f" ({p['best_value']:.4f})" if p.get("best_value") is not None else ""))
        typer.echo(f"{len(doc['picks'])} edits, {samples} candidates each -> {target}", err=True)
    if result.failed or doc.get("failed"):
        typer.echo(f"{result.failed} image(s) and {doc.get('failed', 0)} score(s) failed; rerun the same command "
                   "to redo them", err=True)
        raise typer.Exit(EXIT_FAILED)


@reward_app.command("relabel")
@guarded
def relabel_cmd(
    manifest: Path = typer.Argument(..., help="Training manifest of edits."),
    metric: str = typer.Option("adiee", "--metric", help="Evaluator whose score is used (see `editlens metrics`)."),
    model: Optional[List[str]] = ModelOpt,
    option: Optional[List[str]] = OptionOpt,
    out: Optional[Path] = typer.Option(None, "--out", help="Default: MANIFEST with .reward.jsonl next to it."),
    device: str = DeviceOpt,
    dtype: str = DtypeOpt,
    batch_size: int = typer.Option(8, "--batch-size", min=1, help="Items per batch (larger is faster where memory allows)."),
) -> None:
    """Reward scores normalised to 1-5 next to a training manifest (reward-conditioned fine-tuning)."""
    from editlens.runner.relabel import relabel
    from editlens.runner.selection import parse_options

    done = relabel(manifest, metric, models=parse_models(model), options=parse_options(option or []), device=device,
                   dtype=dtype, batch_size=batch_size, out=out)
    typer.echo(f"{done.relabelled} relabelled, {done.unscored} unscored -> {done.target}")


def _reward(name: Optional[str], options: dict, models: dict, device: str, dtype: str, batch_size: int):
    """A RewardFunction of a registered evaluator, built as the runner builds it (model roles, options)."""
    if not name:
        return None
    from editlens.runner.reward import RewardFunction
    from editlens.runner.selection import select_metrics

    opts = {name: {"cache": False, **options.get(name, {})}} if _takes_cache(name) else options
    sel = select_metrics([name], models=models, options=opts, device=device, dtype=dtype)
    return RewardFunction(sel.metrics[0], batch_size)


def _takes_cache(name: str) -> bool:
    import inspect

    from editlens.metrics.registry import get_spec

    return "cache" in inspect.signature(get_spec(name).load_class()).parameters


@adiee_app.command("tune-editor")
@guarded
def tune_editor_cmd(
    data: Path = typer.Argument(..., help="Scored candidates: `editlens relabel` output (.jsonl) or a run directory "
                                          "(results.jsonl + manifest) with several edits per source."),
    base: str = typer.Option(..., "--base", help="InstructPix2Pix-style diffusers editor: folder or hub id "
                                                 "(e.g. vinesmsuic/magicbrush-jul7, timbrooks/instruct-pix2pix)."),
    out: Path = typer.Option(..., "--out", help="Run directory (rerun the same command to resume); the editor is "
                                                "exported to OUT/editor."),
    score_metric: Optional[str] = typer.Option(None, "--score-metric", help="Evaluator of the run whose scores pick "
                                               "targets (needed when the run holds several)."),
    val_metric: Optional[str] = typer.Option(None, "--val-metric", help="Evaluator scoring the validation edits "
                                             "(any registered one, e.g. adiee); none: no validation."),
    refl_metric: Optional[str] = typer.Option(None, "--refl-metric", help="Differentiable evaluator of ReFL "
                                              "(default: --val-metric)."),
    refl_weight: float = typer.Option(0.0, "--refl-weight", min=0.0, help="Weight of the ReFL loss added to the "
                                      "denoising MSE (0: no ReFL)."),
    refl_steps: int = typer.Option(40, "--refl-steps", min=1, help="DDIM steps of the ReFL roll-out."),
    refl_min_step: int = typer.Option(30, "--refl-min-step", min=0, help="The gradient step is drawn from "
                                      "[this, --refl-steps)."),
    reward_prompt: bool = typer.Option(True, "--reward-prompt/--no-reward-prompt", help="Append the quality suffix "
                                       "to each instruction (reward conditioning)."),
    ground_truth: Optional[str] = typer.Option(None, "--ground-truth", help="With --no-reward-prompt: the candidate "
                                               "id of each source's ground-truth edit (e.g. target); the MSE "
                                               "target is that edit only, as the ADIEE release's RL data mode."),
    suffix_template: Optional[Path] = typer.Option(None, "--suffix-template", help="Own suffix wording: a text file "
                                                   "with {quality}."),
    suffix_from_clone: Optional[Path] = typer.Option(None, "--suffix-from-clone", help="Read the suffix from a clone "
                                                     "of the ADIEE release (its dataset module)."),
    binning: Binning = typer.Option("release", "--binning", help="0-10 score -> level 1-5: release (0-2, 3-4, 5-6, 7-8, "
                                "9-10) or linear (round(1 + 4 * score / 10))."),
    levels: LevelStyle = typer.Option("words", "--levels", help="Levels written as words (one..five) or digits."),
    target_weights: Optional[TargetWeights] = typer.Option(None, "--target-weights", help="Target sampling: balanced "
                                                 "(each quality level about equally often; the default), uniform, or "
                                                 "table (by rounded score, from --target-weight-table)."),
    target_weight_table: Optional[Path] = typer.Option(None, "--target-weight-table", help="Score -> weight table: "
                                                       "a JSON object {\"0\": w, ..., \"10\": w}, or a clone of the "
                                                       "ADIEE release (its WEIGHT_DICT, parsed, never run). Implies "
                                                       "--target-weights table."),
    source_as_candidate: bool = typer.Option(True, "--source-as-candidate/--no-source-as-candidate", help="The "
                                             "source image itself is a candidate target scored 0."),
    lora_rank: int = typer.Option(0, "--lora-rank", min=0, help="LoRA rank of the UNet adapters (0: the whole UNet "
                                  "trains, as released)."),
    quantization: str = typer.Option("auto", "--quantization", help="auto or none: the editor trains unquantised "
                                     "(nf4 is refused)."),
    steps: int = typer.Option(1000, "--steps", min=1, help="Optimiser steps."),
    lr: float = typer.Option(5e-5, "--lr", help="Learning rate (release: 5e-5)."),
    batch_size: int = typer.Option(4, "--batch-size", min=1, help="Items per batch (larger is faster where memory allows)."),
    grad_accum: int = typer.Option(1, "--grad-accum", min=1, help="Micro-batches accumulated per optimizer step."),
    warmup: int = typer.Option(0, "--warmup", min=0, help="Warm-up steps (release: 500)."),
    lr_decay: LrDecay = typer.Option("constant", "--lr-decay", help="After warm-up: constant, linear or cosine."),
    clip: float = typer.Option(1.0, "--clip", help="Gradient-norm clipping (0: none)."),
    resolution: int = typer.Option(256, "--resolution", help="Training images are resized to this square (release: 256)."),
    augment: bool = typer.Option(True, "--augment/--no-augment", help="The same flip / rot90 of source and target."),
    conditioning_dropout: float = typer.Option(0.0, "--conditioning-dropout", help="InstructPix2Pix conditioning "
                                               "dropout probability (release: off)."),
    val_every: int = typer.Option(0, "--val-every", min=0, help=VAL_EVERY_HELP),
    val_count: int = typer.Option(4, "--val-count", min=0, help="Sources held out for validation."),
    val_at_start: bool = typer.Option(True, "--val-at-start/--no-val-at-start", help="Also score the untuned editor."),
    val_steps: int = typer.Option(20, "--val-steps", min=1, help="Denoising steps of validation edits (release: 100)."),
    guidance: float = typer.Option(7.5, "--guidance", help="Text guidance of validation edits."),
    image_guidance: float = typer.Option(1.5, "--image-guidance", help="Image guidance of validation edits."),
    val_protocol: str = typer.Option("editlens", "--val-protocol", help="How validation edits are made: editlens "
                                     "(--resolution, --val-steps, the base's scheduler) or release (as ADIEE's: 512 px "
                                     "inputs, EulerAncestral, 100 steps, guidance 7.5 / 1.5, seed 42, the release's "
                                     "prompt; overrides those flags for validation)."),
    save_every: int = typer.Option(0, "--save-every", min=0, help=SAVE_EVERY_HELP),
    keep_checkpoints: int = typer.Option(2, "--keep-checkpoints", min=1, help="Checkpoints kept (the newest)."),
    gradient_checkpointing: bool = typer.Option(False, "--gradient-checkpointing", help="Recompute activations in the backward pass (less memory, slower)."),
    model: Optional[List[str]] = ModelOpt,
    option: Optional[List[str]] = OptionOpt,
    reward_batch: int = typer.Option(8, "--reward-batch-size", min=1, help="Validation edits scored at once."),
    seed: int = typer.Option(0, "--seed", help="Random seed (the same seed reproduces the same result)."),
    device: str = DeviceOpt,
    dtype: str = DtypeOpt,
    restart: bool = typer.Option(False, "--restart", help="Discard an earlier run in --out instead of resuming it."),
    log_to: Optional[LogTo] = LogToOpt,
    sharding: Optional[Sharding] = ShardingOpt,
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar."),
    json_out: bool = typer.Option(False, "--json", help="Machine-readable output (JSON) instead of the table."),
) -> None:
    """Fine-tune an InstructPix2Pix-style editor with a reward (ADIEE §3.4): reward-conditioned prompts, and ReFL."""
    from editlens.adiee.tune_editor import TuneConfig, tune_editor
    from editlens.models.quant import normalise_choice
    from editlens.runner.selection import parse_options

    if normalise_choice(quantization, "--quantization") == "nf4":
        raise typer.BadParameter("the editor's UNet trains unquantised; use --quantization none (or auto)")
    options = parse_options(option or [])
    models = parse_models(model)
    weights = target_weights.value if target_weights else ("table" if target_weight_table else "balanced")
    cfg = TuneConfig(base=base, data=str(data), out=str(out), score_metric=score_metric,
                     source_as_candidate=source_as_candidate, target_weights=weights,
                     target_weight_table=str(target_weight_table) if target_weight_table else None,
                     reward_prompt=reward_prompt, ground_truth=ground_truth,
                     suffix_template=str(suffix_template) if suffix_template else None,
                     suffix_from_clone=str(suffix_from_clone) if suffix_from_clone else None, binning=binning,
                     levels=levels, lora_rank=lora_rank, lr=lr, batch_size=batch_size, grad_accum=grad_accum,
                     steps=steps, warmup_steps=warmup, lr_decay=lr_decay, clip=clip, resolution=resolution,
                     augment=augment, conditioning_dropout=conditioning_dropout, val_every=val_every,
                     val_count=val_count if val_metric else 0, val_at_start=val_at_start, val_metric=val_metric,
                     val_steps=val_steps, guidance=guidance, image_guidance=image_guidance, val_protocol=val_protocol,
                     refl_weight=refl_weight,
                     refl_metric=(refl_metric or val_metric) if refl_weight > 0 else None, refl_steps=refl_steps,
                     refl_min_step=refl_min_step, save_every=save_every, keep_checkpoints=keep_checkpoints, seed=seed,
                     device=device, dtype=dtype, gradient_checkpointing=gradient_checkpointing,
                     metric_options=options)
    cfg.validate()
    from editlens.training.distributed import local_device

    device = local_device(device)  # under accelerate launch / torchrun: this process's GPU
    val_reward = _reward(val_metric, options, models, device, dtype, reward_batch)
    refl_reward = val_reward if cfg.refl_metric == val_metric else _reward(cfg.refl_metric, options, models, device,
                                                                          dtype, reward_batch)
    s = tune_editor(cfg, val_reward, refl_reward, echo=_echo if json_out else typer.echo, progress=progress,
                    restart=restart, log_to=log_to.value if log_to else None,
                    sharding=sharding.value if sharding else None)
    from editlens.training.distributed import current

    if not current().main:  # several processes: the main one reports
        raise typer.Exit(s["exit_code"])
    if json_out:
        emit_json(s)
    if s["interrupted"]:
        raise typer.Exit(s["exit_code"])
    if not json_out:
        typer.echo(f"loss {s['first_loss']:.4f} (first fifth of steps) -> {s['last_loss']:.4f} (last fifth)")
        if s.get("val"):
            typer.echo(f"validation reward at step {s['val']['step']}: {s['val'].get('reward')}")
        typer.echo(f"editor: {s['outputs'].get('editor')} (loads with StableDiffusionInstructPix2PixPipeline; "
                   "prompt suffix in editlens_editor.json)")
        typer.echo(f"loss curve: {s['loss_curve']}")

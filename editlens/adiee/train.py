"""Training the ADIEE scorer on a dataset made by ``make-data``.

* LoRA (peft) on the language model's q/v projections (r 8, alpha 16,
  dropout 0.05 by default, as released); the embeddings, the LM head and the
  score decoder are trained fully. ``qlora``: the base in 4-bit NF4
  (bitsandbytes; CUDA or its CPU backend), computing in the training dtype;
  the adapters are saved in our layout and ``adiee.json`` records the
  precision (export to the released layout with ``editlens adiee export``,
  which merges them into the unquantised base).
* Loss = ``score_weight`` x score loss (L1 on 0-10, or CE for the class head)
  + ``ce_weight`` x token cross-entropy on the answer tokens only.
* One question and one answer template per sample, and a flip / rot90 of
  both images, drawn from a generator seeded by (seed, sample position), so
  a resumed run sees exactly what an uninterrupted one would.
* Device and dtype are picked at run time (bf16 on a GPU that has it).
* Gradient accumulation, linear warm-up then linear decay, gradient clipping,
  validation Spearman every ``val_every`` steps, a checkpoint every
  ``save_every`` steps (``train_state.pt``, written atomically) from which a
  rerun resumes, ``log.jsonl`` and a loss curve ``loss.png``.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from editlens.adiee.checkpoint import save_ours, save_released, scorer_from_base
from editlens.adiee.model import AdieeScorer, constant_score_loss
from editlens.adiee.prompts import Prompts, collate, inference_inputs, load_prompts, side_by_side, training_example
from editlens.core.images import load_image
from editlens.data.jsonl import iter_jsonl
from editlens.errors import InputError
from editlens.models.quant import describe_precision, floating_dtype
from editlens.runner.store import atomic_write

LORA_TARGETS = r".*language_model.*\.(q_proj|v_proj)$"


@dataclass
class TrainConfig:
    base: str
    data: str
    out: str
    head: str = "regression"
    lora: bool = True
    lora_r: int = 8
    lora_alpha: int = 16
    lora_dropout: float = 0.05
    qlora: bool = False
    lr: float = 2e-5
    batch_size: int = 2
    grad_accum: int = 1
    steps: int = 100  # optimiser steps
    warmup_steps: int = 0
    clip: float = 1.0
    score_weight: float = 10.0
    ce_weight: float = 1.0
    val_every: int = 50
    val_max: int = 64
    save_every: int = 50
    image_side: int = 512
    augment: bool = True
    max_samples: int | None = None
    seed: int = 0
    device: str = "auto"
    dtype: str = "auto"
    gradient_checkpointing: bool = False
    layout: str = "ours"  # final checkpoint: ours, released or both
    templates: dict[str, str] = field(default_factory=dict)

    def validate(self) -> None:
        if self.layout not in ("ours", "released", "both"):
            raise InputError(f"layout must be ours, released or both, got {self.layout!r}")
        if self.layout != "released" and not self.lora:
            raise InputError("our layout stores LoRA adapters: train with LoRA or use --layout released")
        if self.qlora and (self.layout != "ours" or not self.lora):
            # merging LoRA into 4-bit weights would write packed 4-bit tensors into a full state dict
            raise InputError("--qlora trains LoRA adapters on a 4-bit base and saves our layout (--layout ours); "
                             "export it to the released layout afterwards with `editlens adiee export`")
        for name in ("batch_size", "grad_accum", "steps"):
            if getattr(self, name) < 1:
                raise InputError(f"{name} must be >= 1")


def read_dataset(data_dir: Path) -> list[dict[str, Any]]:
    f = data_dir / "samples.jsonl"
    if not f.is_file():
        raise InputError(f"{data_dir}: no samples.jsonl (make it with `editlens adiee make-data`)")
    rows = []
    for n, row in iter_jsonl(f):
        for k in ("source", "edited", "instruction", "score"):
            if k not in row:
                raise InputError(f"{f}:{n}: missing {k!r}")
        rows.append(row)
    if not rows:
        raise InputError(f"{f}: no samples")
    return rows


def _flip_rot(a: np.ndarray, b: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """The same flip / rot90 applied to both images (an edit stays an edit)."""
    k = int(rng.integers(0, 4))
    flip = bool(rng.integers(0, 2))
    out = []
    for x in (a, b):
        x = np.rot90(x, k)
        out.append(np.ascontiguousarray(x[:, ::-1] if flip else x))
    return out[0], out[1]


class Examples:
    """Turns dataset rows into model inputs, deterministically per position."""

    def __init__(self, rows: list[dict[str, Any]], data_dir: Path, scorer: AdieeScorer, prompts: Prompts,
                 cfg: TrainConfig) -> None:
        self.rows, self.dir, self.scorer, self.prompts, self.cfg = rows, data_dir, scorer, prompts, cfg

    def images(self, row: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
        src, _ = load_image(self.dir / row["source"])
        edt, _ = load_image(self.dir / row["edited"])
        return src, edt

    def example(self, index: int, position: int) -> dict[str, torch.Tensor]:
        row = self.rows[index]
        rng = np.random.default_rng([self.cfg.seed, position])
        src, edt = self.images(row)
        if self.cfg.augment:
            src, edt = _flip_rot(src, edt, rng)
        q = self.prompts.question(row["instruction"], int(rng.integers(len(self.prompts.questions))))
        a = self.prompts.answers[int(rng.integers(len(self.prompts.answers)))]
        ex = training_example(self.scorer.processor, side_by_side(src, edt, self.cfg.image_side), q, a)
        ex["scores"] = torch.tensor(float(row["score"]))
        return ex


def sample_order(n: int, total: int, seed: int) -> list[int]:
    """Dataset indices for ``total`` sample positions: one seeded permutation per epoch."""
    order: list[int] = []
    epoch = 0
    while len(order) < total:
        order.extend(np.random.default_rng([seed, 10_000 + epoch]).permutation(n).tolist())
        epoch += 1
    return order[:total]


def apply_lora(scorer: AdieeScorer, cfg: TrainConfig) -> None:
    from peft import LoraConfig, get_peft_model

    if cfg.qlora:
        from peft import prepare_model_for_kbit_training

        scorer.vlm = prepare_model_for_kbit_training(scorer.vlm, gradient_checkpointing_kwargs={"use_reentrant": False})
    conf = LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                      target_modules=LORA_TARGETS, modules_to_save=["embed_tokens", "lm_head"])
    scorer.vlm = get_peft_model(scorer.vlm, conf)


def trainable_state(scorer: AdieeScorer) -> dict[str, torch.Tensor]:
    return {n: p.detach().cpu().clone() for n, p in scorer.named_parameters() if p.requires_grad}


def spearman(pred: list[float], truth: list[float]) -> float | None:
    from scipy.stats import spearmanr

    if len(pred) < 2 or len(set(pred)) < 2 or len(set(truth)) < 2:
        return None  # undefined for constant inputs: not reported as a number
    r = spearmanr(pred, truth).statistic
    return None if not math.isfinite(r) else float(r)


@torch.no_grad()
def validate(scorer: AdieeScorer, ex: Examples, rows: list[int], batch: int) -> dict[str, Any]:
    scorer.eval()
    preds, truth = [], []
    dtype = floating_dtype(scorer.vlm)
    for s in range(0, len(rows), batch):
        part = [ex.rows[i] for i in rows[s : s + batch]]
        imgs = [side_by_side(*ex.images(r), ex.cfg.image_side) for r in part]
        qs = [ex.prompts.question(r["instruction"]) for r in part]
        out = scorer.predict(inference_inputs(scorer.processor, imgs, qs, scorer.device, dtype), hidden="score-token")
        preds += [p.score for p in out]
        truth += [float(r["score"]) * 10 for r in part]
    scorer.train()
    mae = float(np.mean(np.abs(np.array(preds) - np.array(truth)))) if preds else None
    return {"val_spearman": spearman(preds, truth), "val_mae": mae, "val_n": len(preds)}


def plot_curve(log: list[dict[str, Any]], path: Path, constant: float | None = None) -> Path:
    """Loss curves; ``constant`` (the best constant prediction's score loss) as a flat reference line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [r["step"] for r in log if "loss" in r]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for key, style in (("loss", "-"), ("score_loss", "--"), ("ce_loss", ":")):
        ax.plot(steps, [r[key] for r in log if "loss" in r], style, label=key)
    if constant is not None and constant > 0 and steps:
        ax.axhline(constant, color="C1", lw=0.8, ls="-.", label="score loss of best constant")
    ax.set_xlabel("optimiser step")
    ax.set_ylabel("training loss")
    ax.set_yscale("log")
    val = [(r["step"], r["val_spearman"]) for r in log if r.get("val_spearman") is not None]
    if val:
        ax2 = ax.twinx()
        ax2.plot(*zip(*val), "o-", color="tab:red", label="val Spearman")
        ax2.set_ylabel("val Spearman")
        ax2.legend(loc="upper right")
    ax.legend(loc="upper left" if val else "best")
    ax.set_title("ADIEE scorer training")
    fig.tight_layout()
    atomic_write(path, lambda fh: fig.savefig(fh, format="png", dpi=100), mode="wb")
    plt.close(fig)
    return path


def train(cfg: TrainConfig, echo: Callable[[str], None] = print, progress: bool = True) -> dict[str, Any]:
    """Train (or resume) and write the final checkpoint; returns a summary."""
    from tqdm import tqdm

    cfg.validate()
    data_dir, out = Path(cfg.data), Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = read_dataset(data_dir)
    train_idx = [i for i, r in enumerate(rows) if r.get("split", "train") == "train"]
    val_idx = [i for i, r in enumerate(rows) if r.get("split") == "val"][: cfg.val_max]
    if cfg.max_samples:
        train_idx = train_idx[: cfg.max_samples]
    if not train_idx:
        raise InputError(f"{data_dir}: no training samples (split 'train')")
    prompts = load_prompts(cfg.templates)
    torch.manual_seed(cfg.seed)
    scorer = scorer_from_base(cfg.base, cfg.head, cfg.device, cfg.dtype, cfg.seed, cfg.qlora)
    if cfg.lora:
        apply_lora(scorer, cfg)
    if cfg.gradient_checkpointing:
        scorer.vlm.gradient_checkpointing_enable()
        scorer.vlm.enable_input_require_grads()
    params = [p for p in scorer.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr)
    total = cfg.steps

    def lr_at(step: int) -> float:
        if cfg.warmup_steps and step < cfg.warmup_steps:
            return (step + 1) / cfg.warmup_steps
        return max(0.0, (total - step) / max(1, total - cfg.warmup_steps))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    state_file = out / "train_state.pt"
    log: list[dict[str, Any]] = []
    step = 0
    if state_file.is_file():
        st = torch.load(state_file, map_location="cpu", weights_only=False)
        was = {k: st["config"].get(k, False if k == "qlora" else None) for k in ("base", "head", "lora", "qlora")}
        if was != {k: getattr(cfg, k) for k in was}:
            raise InputError(f"{state_file}: saved for {was}; use another --out to start a different run")
        mine = dict(scorer.named_parameters())
        missing = sorted(n for n, p in mine.items() if p.requires_grad and n not in st["trainable"])
        unexpected = sorted(set(st["trainable"]) - set(mine))
        if missing or unexpected:
            raise InputError(f"{state_file}: trainable parameters differ (missing {missing[:5]}, "
                             f"unexpected {unexpected[:5]}); cannot resume")
        with torch.no_grad():
            for n, v in st["trainable"].items():
                mine[n].copy_(v.to(mine[n].device, mine[n].dtype))
        opt.load_state_dict(st["optimizer"])
        sched.load_state_dict(st["scheduler"])
        step, log = int(st["step"]), list(st["log"])
        echo(f"resumed from {state_file} at step {step}")
    ex = Examples(rows, data_dir, scorer, prompts, cfg)
    per_step = cfg.batch_size * cfg.grad_accum
    order = sample_order(len(train_idx), total * per_step, cfg.seed)
    pad = scorer.processor.tokenizer.pad_token_id
    scorer.train()
    dev = scorer.device
    prec = describe_precision(scorer.vlm)
    precision = {"base_weights": prec["weights"], "compute_dtype": prec["compute_dtype"], "optimizer": "AdamW"}
    echo(f"training {type(scorer.vlm).__name__} on {dev} ({precision['base_weights']} base, compute "
         f"{precision['compute_dtype']}); "
         f"{len(train_idx)} train / {len(val_idx)} val samples; {sum(p.numel() for p in params):,} trainable params")
    # the yardstick for the score loss: a model that ignores its inputs gets this far, no further
    baseline = constant_score_loss([float(rows[i]["score"]) for i in train_idx], cfg.head)
    echo(f"score loss of the best constant prediction on the training targets: {baseline:.4f}")

    def save_state() -> None:
        atomic_write(state_file, lambda fh: torch.save({
            "config": asdict(cfg), "step": step, "trainable": trainable_state(scorer), "optimizer": opt.state_dict(),
            "scheduler": sched.state_dict(), "log": log}, fh), mode="wb")
        atomic_write(out / "log.jsonl", lambda fh: fh.writelines(json.dumps(r) + "\n" for r in log))
        plot_curve(log, out / "loss.png", baseline)

    bar = tqdm(total=total, initial=step, desc="train", disable=not progress, unit="step")
    t0 = time.time()
    try:
        while step < total:
            opt.zero_grad(set_to_none=True)
            agg = {"loss": 0.0, "score_loss": 0.0, "ce_loss": 0.0}
            for micro in range(cfg.grad_accum):
                base_pos = step * per_step + micro * cfg.batch_size
                batch = collate([ex.example(train_idx[order[p]], p) for p in range(base_pos, base_pos + cfg.batch_size)],
                                pad)
                batch = {k: v.to(dev) for k, v in batch.items()}
                if "pixel_values" in batch:
                    batch["pixel_values"] = batch["pixel_values"].to(floating_dtype(scorer.vlm))
                losses = scorer.training_losses(batch, cfg.score_weight, cfg.ce_weight)
                (losses["loss"] / cfg.grad_accum).backward()
                for k in agg:
                    agg[k] += float(losses[k].detach()) / cfg.grad_accum
            torch.nn.utils.clip_grad_norm_(params, cfg.clip)
            opt.step()
            sched.step()
            step += 1
            rec: dict[str, Any] = {"step": step, **agg, "lr": sched.get_last_lr()[0], "time": time.time() - t0}
            if val_idx and (step % cfg.val_every == 0 or step == total):
                rec.update(validate(scorer, ex, val_idx, cfg.batch_size))
            log.append(rec)
            bar.update(1)
            bar.set_postfix(loss=f"{agg['loss']:.3f}")
            every = max(1, total // 10)
            if step % every == 0 or step == total:
                # mean over the steps since the last line: single batches are noisy
                win = [r for r in log if r["step"] > step - every]
                m = {k: float(np.mean([r[k] for r in win])) for k in agg}
                extra = f"  val Spearman {rec['val_spearman']}" if "val_spearman" in rec else ""
                echo(f"step {step:>5}  loss {m['loss']:.4f}  (score {m['score_loss']:.4f}, "
                     f"answer CE {m['ce_loss']:.4f}; mean of last {len(win)} steps){extra}")
            if step % cfg.save_every == 0 and step < total:
                save_state()
    except KeyboardInterrupt:
        save_state()
        bar.close()
        echo(f"interrupted at step {step}: state saved to {state_file}; rerun the same command to resume")
        raise
    bar.close()
    save_state()
    final = {}
    meta = {"trained_steps": step, "data": str(data_dir), "prompts": prompts.describe(), "precision": precision}
    if cfg.layout in ("ours", "both"):
        final["ours"] = str(save_ours(scorer, out / "scorer", cfg.base, extra=meta))
    if cfg.layout in ("released", "both"):
        final["released"] = str(save_released(scorer, out / "scorer-released", hidden="score-token"))
    k = max(1, len(log) // 5)  # first and last fifth of the run
    first = [r["loss"] for r in log[:k]]
    last = [r["loss"] for r in log[-k:]]
    summary = {"steps": step, "first_loss": float(np.mean(first)) if first else None,
               "last_loss": float(np.mean(last)) if last else None,
               "first_score_loss": float(np.mean([r["score_loss"] for r in log[:k]])) if log else None,
               "last_score_loss": float(np.mean([r["score_loss"] for r in log[-k:]])) if log else None,
               "constant_score_loss": baseline,
               "checkpoints": final, "loss_curve": str(out / "loss.png"), "log": str(out / "log.jsonl"),
               "val": {k: v for k, v in (log[-1] if log else {}).items() if k.startswith("val_")}}
    atomic_write(out / "summary.json", lambda fh: json.dump(summary, fh, indent=2))
    return summary

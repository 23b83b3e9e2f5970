"""Training the ADIEE scorer on a dataset made by ``make-data``.

* LoRA (peft) on the language model's q/v projections (r 8, alpha 16,
  dropout 0.05 by default, as released); the embeddings, the LM head and the
  score decoder are trained fully. ``qlora``: the base in 4-bit NF4
  (bitsandbytes; CUDA or its CPU backend), computing in the training dtype;
  the adapters are saved in our layout and ``adiee.json`` records the
  precision (export to the released layout with ``editlens adiee export``,
  which merges them into the unquantised base).
* Loss = ``score_weight`` x score loss (L1 on 0-10, or CE for the class head)
  + ``ce_weight`` x token cross-entropy on the answer tokens only. This and
  the optimiser and schedule below are editlens' recipe, not the release's
  (whole-sequence CE, AdamW (0.9, 0.95) without weight decay, constant LR,
  accumulation 8; docs/adiee.md lists every difference).
* One question and one answer template per sample, and a flip / rot90 of
  both images, drawn from a generator seeded by (seed, sample position), so
  a resumed run sees exactly what an uninterrupted one would.
* Device and dtype come from the precision policy
  (:func:`editlens.models.precision.decide`, purpose ``training``): the base
  loads in the compute dtype, the trained parameters (LoRA, decoder,
  embeddings, LM head) are kept in float32 and the forward pass runs under
  autocast.
* The loop is :mod:`editlens.training`: gradient accumulation, linear
  warm-up then linear (or cosine, or no) decay, gradient clipping, validation
  every ``val_every`` steps (Spearman and MAE over the validation rows whose
  answer emitted ``[SCORE]``; the others are counted as unscored and skipped,
  as inference does), a checkpoint every ``save_every`` steps
  (``checkpoints/step-N/``, written atomically) from which a rerun resumes,
  Ctrl-C saving one, ``log.jsonl``, ``summary.json`` and a loss curve
  ``loss.png`` with the best constant prediction's score loss as a yardstick.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch

from editlens.adiee.checkpoint import save_ours, save_released, scorer_from_base
from editlens.adiee.model import AdieeScorer, constant_score_loss
from editlens.adiee.prompts import Prompts, collate, inference_inputs, load_prompts, side_by_side, training_example
from editlens.adiee.tune_data import check_table_choice, sample_weights
from editlens.core.images import load_image
from editlens.core.safepath import inside
from editlens.data.jsonl import iter_jsonl
from editlens.errors import InputError
from editlens.models.quant import describe_precision, floating_dtype
from editlens.training.loop import TrainingTask

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
    lr_decay: str = "linear"  # after warm-up: linear (to 0 at the last step), cosine or constant
    clip: float = 1.0
    score_weight: float = 10.0
    ce_weight: float = 1.0
    val_every: int = 50
    val_max: int = 64
    save_every: int = 50
    keep_checkpoints: int = 2
    image_side: int = 512
    augment: bool = True
    max_samples: int | None = None
    sample_weights: str = "uniform"  # uniform | balanced | table (by the rounded 0-10 score)
    sample_weight_table: str | None = None  # JSON {score: weight} or a clone of the release (its WEIGHT_DICT)
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
        check_table_choice(self.sample_weights, self.sample_weight_table, "--sample-weights")

    def identity(self) -> dict[str, Any]:
        """Settings a resumed run must share with the run it continues (the model it builds and the
        samples it sees at each step); the rest (steps, lr, validation, saving) may change."""
        d = asdict(self)
        keys = ("base", "head", "lora", "lora_r", "lora_alpha", "lora_dropout", "qlora", "batch_size", "grad_accum",
                "image_side", "augment", "max_samples", "seed", "templates", "score_weight", "ce_weight",
                "sample_weights", "sample_weight_table")
        return {**{k: d[k] for k in keys}, "data": str(Path(self.data).resolve())}


def read_dataset(data_dir: Path) -> list[dict[str, Any]]:
    f = data_dir / "samples.jsonl"
    if not f.is_file():
        raise InputError(f"{data_dir}: no samples.jsonl (make it with `editlens adiee make-data`)")
    rows = []
    for n, row in iter_jsonl(f):
        for k in ("source", "edited", "instruction", "score"):
            if k not in row:
                raise InputError(f"{f}:{n}: missing {k!r}")
        for k in ("source", "edited"):  # the dataset's images lie in its folder (editlens.core.safepath)
            if not isinstance(row[k], str):
                raise InputError(f"{f}:{n}: {k!r} must be a path inside {data_dir}, got {type(row[k]).__name__}")
            inside(data_dir, row[k], what=f"{f}:{n}: {k}")
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


def sample_order(n: int, total: int, seed: int, weights: Sequence[float] | None = None,
                 groups: Sequence[Sequence[int]] | None = None) -> list[int]:
    """Dataset indices for ``total`` sample positions: one seeded permutation per epoch, or with
    ``weights`` n seeded draws per epoch (with replacement, in proportion to the weights); with
    ``weights`` and ``groups`` (the candidates of each source), as the ADIEE release draws
    (``get_syn_item``): every source once per epoch in a seeded order, each time one of its
    candidates drawn in proportion to their weights within the source (a source whose
    candidates all weigh 0 is never drawn)."""
    order: list[int] = []
    epoch = 0
    p = None if weights is None else np.asarray(weights, dtype=float) / float(np.sum(weights))
    w = None if weights is None else np.asarray(weights, dtype=float)
    drawable = [list(g) for g in groups or [] if w is not None and float(w[list(g)].sum()) > 0]
    if groups is not None and weights is not None and not drawable:
        raise InputError("every source's candidates weigh 0: nothing can be drawn")
    while len(order) < total:
        rng = np.random.default_rng([seed, 10_000 + epoch])
        if groups is not None and w is not None:
            for k in rng.permutation(len(drawable)).tolist():
                g = drawable[k]
                q = w[g] / float(w[g].sum())
                order.append(int(g[int(rng.choice(len(g), p=q))]))
        else:
            order.extend((rng.permutation(n) if p is None else rng.choice(n, size=n, p=p)).tolist())
        epoch += 1
    return order[:total]


def source_groups(rows: Sequence[dict[str, Any]], idx: Sequence[int]) -> list[list[int]]:
    """Positions in ``idx`` grouped by source (the same source image and instruction): the candidates the
    release draws one of per source."""
    by: dict[tuple[str, str], list[int]] = {}
    for pos, i in enumerate(idx):
        by.setdefault((str(rows[i]["source"]), str(rows[i]["instruction"])), []).append(pos)
    return list(by.values())


def apply_lora(scorer: AdieeScorer, cfg: TrainConfig) -> None:
    from peft import LoraConfig, get_peft_model

    if cfg.qlora:
        from peft import prepare_model_for_kbit_training

        scorer.vlm = prepare_model_for_kbit_training(scorer.vlm, gradient_checkpointing_kwargs={"use_reentrant": False})
    conf = LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                      target_modules=LORA_TARGETS, modules_to_save=["embed_tokens", "lm_head"])
    scorer.vlm = get_peft_model(scorer.vlm, conf)


def spearman(pred: list[float], truth: list[float]) -> float | None:
    from scipy.stats import spearmanr

    if len(pred) < 2 or len(set(pred)) < 2 or len(set(truth)) < 2:
        return None  # undefined for constant inputs: not reported as a number
    r = spearmanr(pred, truth).statistic
    return None if not math.isfinite(r) else float(r)


@torch.no_grad()
def validate(scorer: AdieeScorer, ex: Examples, rows: list[int], batch: int) -> dict[str, Any]:
    """Spearman and MAE (0-10) of the predictions on validation rows. A row
    whose answer never emitted ``[SCORE]`` is *unscored*, as at inference
    (:class:`~editlens.adiee.evaluator.AdieeEvaluator` with ``require_token``):
    counted, not scored."""
    was = scorer.training
    scorer.eval()
    preds, truth, unscored = [], [], 0
    dtype = floating_dtype(scorer.vlm)
    try:
        for s in range(0, len(rows), batch):
            part = [ex.rows[i] for i in rows[s : s + batch]]
            imgs = [side_by_side(*ex.images(r), ex.cfg.image_side) for r in part]
            qs = [ex.prompts.question(r["instruction"]) for r in part]
            out = scorer.predict(inference_inputs(scorer.processor, imgs, qs, scorer.device, dtype), hidden="score-token")
            for p, r in zip(out, part):
                if not p.emitted:
                    unscored += 1
                    continue
                preds.append(p.score)
                truth.append(float(r["score"]) * 10)
    finally:
        scorer.train(was)
    mae = float(np.mean(np.abs(np.array(preds) - np.array(truth)))) if preds else None
    return {"spearman": spearman(preds, truth), "mae": mae, "n": len(preds), "unscored": unscored}


class AdieeTask(TrainingTask):
    """The ADIEE scorer for :func:`editlens.training.run`."""

    def __init__(self, cfg: TrainConfig, scorer: AdieeScorer, ex: Examples, train_idx: list[int],
                 val_idx: list[int], baseline: float, policy: Any, weights: Sequence[float] | None = None,
                 weighting: dict[str, Any] | None = None, groups: Sequence[Sequence[int]] | None = None) -> None:
        self.cfg, self.model, self.ex, self.train_idx, self.val_idx = cfg, scorer, ex, train_idx, val_idx
        self.lr, self.baseline, self.policy = cfg.lr, baseline, policy
        self.per_step = cfg.batch_size * cfg.grad_accum
        self.weights, self.weighting, self.groups = weights, weighting or {"how": "uniform"}, groups
        self.order = sample_order(len(train_idx), cfg.steps * self.per_step, cfg.seed, weights, groups)
        self.pad = scorer.processor.tokenizer.pad_token_id
        p = describe_precision(scorer.vlm)  # before the loop makes the trained parameters float32
        self.described = {"base_weights": p["weights"], "compute_dtype": p["compute_dtype"], "optimizer": "AdamW"}
        self.outputs: dict[str, Any] = {}
        self.share = "micro-batches"  # how several processes share a step (distributed.choose_share)

    def batch(self, step: int, micro: int) -> dict[str, torch.Tensor]:
        from editlens.training.distributed import current

        base_pos = step * self.per_step + micro * self.cfg.batch_size
        if base_pos + self.cfg.batch_size > len(self.order):  # a run extended beyond its first --steps
            self.order = sample_order(len(self.train_idx), base_pos + self.cfg.batch_size, self.cfg.seed,
                                      self.weights, self.groups)
        # several processes: whole micro-batches each, or each its share of every micro-batch
        mine = range(base_pos, base_pos + self.cfg.batch_size)
        if self.share == "examples":
            mine = mine[current().share(self.cfg.batch_size)]
        batch = collate([self.ex.example(self.train_idx[self.order[p]], p) for p in mine], self.pad)
        dev = self.model.device
        batch = {k: v.to(dev) for k, v in batch.items()}
        if "pixel_values" in batch:
            batch["pixel_values"] = batch["pixel_values"].to(floating_dtype(self.model.vlm))
        return batch

    def loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        losses = self.model.training_losses(batch, self.cfg.score_weight, self.cfg.ce_weight)
        return losses["loss"], {"score_loss": float(losses["score_loss"]), "ce_loss": float(losses["ce_loss"])}

    @property
    def has_validation(self) -> bool:
        return bool(self.val_idx)

    def validate(self) -> dict[str, Any]:
        return validate(self.model, self.ex, self.val_idx, self.cfg.batch_size)

    def describe_validation(self, val: dict[str, Any]) -> str:
        f = lambda v: "-" if v is None else f"{v:.4f}"  # noqa: E731
        return (f"Spearman {f(val['spearman'])}, MAE {f(val['mae'])} over {val['n']}"
                + (f" ({val['unscored']} without [SCORE], unscored)" if val.get("unscored") else ""))

    def precision_record(self) -> dict[str, Any]:
        return dict(self.described)

    def export(self, result: Any) -> dict[str, Any]:
        from editlens.core.io import atomic_directory

        cfg = self.cfg
        out = Path(cfg.out)
        meta = {"trained_steps": result.steps_done, "data": str(cfg.data), "prompts": self.ex.prompts.describe(),
                "sampling": self.weighting,
                "precision": {**self.policy.to_dict(), **self.described}}
        final: dict[str, Any] = {}
        if cfg.layout in ("ours", "both"):
            with atomic_directory(out / "scorer") as tmp:
                save_ours(self.model, tmp, cfg.base, extra=meta)
            final["ours"] = str(out / "scorer")
        if cfg.layout in ("released", "both"):
            with atomic_directory(out / "scorer-released") as tmp:
                save_released(self.model, tmp, hidden="score-token", extra=meta)
            final["released"] = str(out / "scorer-released")
        return final

    def summary_extra(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        sl = [r["score_loss"] for r in rows if isinstance(r.get("score_loss"), (int, float))]
        k = max(1, len(sl) // 5)  # first and last fifth of the run
        return {"first_score_loss": float(np.mean(sl[:k])) if sl else None,
                "last_score_loss": float(np.mean(sl[-k:])) if sl else None,
                "constant_score_loss": self.baseline, "sampling": self.weighting}


def train(cfg: TrainConfig, echo: Callable[[str], None] = print, progress: bool = True,
          restart: bool = False, log_to: str | None = None, sharding: str | None = None) -> dict[str, Any]:
    """Train (or resume) and write the final checkpoint; returns the summary
    (``interrupted`` and ``exit_code`` say whether Ctrl-C/SIGTERM stopped it)."""
    from editlens.models.precision import decide
    from editlens.training import LoopSettings, PlotSpec, prepare_run_dir, run
    from editlens.training.distributed import choose_share, local_device, main_only, start

    cfg.validate()
    data_dir, out = Path(cfg.data), Path(cfg.out)
    precision = decide(cfg.dtype, local_device(cfg.device), "training")
    procs = start(precision.device)  # several processes under accelerate launch / torchrun
    echo = main_only(echo, procs)
    share = choose_share(cfg.batch_size, cfg.grad_accum, procs)
    rows = read_dataset(data_dir)
    train_idx = [i for i, r in enumerate(rows) if r.get("split", "train") == "train"]
    val_idx = [i for i, r in enumerate(rows) if r.get("split") == "val"][: cfg.val_max]
    if cfg.max_samples:
        train_idx = train_idx[: cfg.max_samples]
    if not train_idx:
        raise InputError(f"{data_dir}: no training samples (split 'train')")
    weights, weighting = sample_weights([10.0 * float(rows[i]["score"]) for i in train_idx], cfg.sample_weights,
                                        cfg.sample_weight_table)
    groups = None
    if weights is not None:  # as the release: per source, one of its candidates by weight
        groups = source_groups(rows, train_idx)
        weighting["draw"] = (f"every source once per epoch ({len(groups)} sources), one of its candidates "
                             "drawn by weight within the source")
        sample_order(len(train_idx), 1, cfg.seed, weights, groups)  # a source-less table refused before the run
    # the data and its weights are checked before the run folder is written; a mismatch before loading
    prepare_run_dir(out, cfg.identity(), asdict(cfg), restart=restart)
    prompts = load_prompts(cfg.templates)
    torch.manual_seed(cfg.seed)
    scorer = scorer_from_base(cfg.base, cfg.head, precision.device, precision.dtype, cfg.seed, cfg.qlora)
    if cfg.lora:
        apply_lora(scorer, cfg)
    if cfg.gradient_checkpointing:
        scorer.vlm.gradient_checkpointing_enable()
        scorer.vlm.enable_input_require_grads()
    ex = Examples(rows, data_dir, scorer, prompts, cfg)
    # the yardstick for the score loss: a model that ignores its inputs gets this far, no further
    baseline = constant_score_loss([float(rows[i]["score"]) for i in train_idx], cfg.head)
    task = AdieeTask(cfg, scorer, ex, train_idx, val_idx, baseline, precision, weights, weighting, groups)
    task.share = share
    n_params = sum(p.numel() for p in scorer.parameters() if p.requires_grad)
    echo(f"training {type(scorer.vlm).__name__} on {precision.device} ({task.described['base_weights']} base, "
         f"computing in {precision.dtype}: {precision.reason}); "
         f"{len(train_idx)} train / {len(val_idx)} val samples; {n_params:,} trainable params")
    echo(f"score loss of the best constant prediction on the training targets: {baseline:.4f}")
    if weights is not None:
        echo(f"samples drawn by {weighting['how']} weights of the rounded 0-10 score: "
             + ", ".join(f"{k}: {v:.3g}" for k, v in weighting["score_weights"].items()))
    res = run(task, LoopSettings(
        out=out, steps=cfg.steps, precision=precision, identity=cfg.identity(), config=asdict(cfg), seed=cfg.seed,
        grad_accum=cfg.grad_accum, warmup_steps=cfg.warmup_steps, decay=cfg.lr_decay, max_grad_norm=cfg.clip,
        save_every=cfg.save_every, keep=cfg.keep_checkpoints, eval_every=cfg.val_every, progress=progress,
        share=share, desc="adiee train", log=echo, log_to=log_to, sharding=sharding,
        plot=PlotSpec(title="ADIEE scorer training", ylabel="training loss", series=("loss", "score_loss", "ce_loss"),
                      references=((baseline, "score loss of best constant"),), val_metric="spearman",
                      val_label="val Spearman", logy=True)))
    return {**res.summary, "checkpoints": res.outputs, "exit_code": res.exit_code}

"""Retrieval training of the two-frame model.

Each batch holds B edits (source, edited, instruction). Video->text: each
real edit ranks its instruction among the batch's instructions. Text->video:
each instruction ranks its real edit among the batch's real edits *plus the
hard negatives*: every edit's no-op (source as its own edit) and, in order
mode, its swapped order (edited -> source), all labelled non-matches. In
faithful mode the swapped video equals the real one by construction (mean
pooling), so only the no-op can be used there.

Not the ViFi-CLIP release's training recipe (classification over a fixed
label set with label smoothing, mixup/cutmix and augmentation; see
docs/twoframe.md). Objectives: **faithful** mode trains as the ViFi-CLIP poster does — plain
video-to-text retrieval (each edit ranks its instruction; cross-entropy over
the batch's instructions), no hard negatives — unless hard negatives are
asked for (``hard_negatives=("noop",)``), which adds the text->video
direction they belong to. **order** mode (ours) trains the symmetric
InfoNCE with the no-op and swapped-order negatives by default.

Towers are frozen (``tune="head"``: frame and text features are computed once
for the whole set and only the temporal head and temperature learn), or
partly tuned: ``last:N`` unfreezes the last N blocks of both towers and the
projections, ``lora:R`` adds rank-R LoRA adapters (peft) to every attention
projection, ``all`` trains everything. The same code runs on a CPU with a
tiny model and on a GPU with ViT-B/16. Precision comes from the policy
(:func:`editlens.models.precision.decide`, purpose ``training``): the model
is kept in float32 (it is exported whole) and computes under autocast in the
policy's dtype (bf16 on a GPU that has it, or on a CPU that computes it
natively; ``dtype=`` / ``--dtype`` to choose).

The loop is :mod:`editlens.training`; an epoch is ``ceil(N / batch_size)``
optimiser steps (a last batch of one edit, which has no negatives, is left
out) and the order of each epoch is a permutation seeded by (seed, epoch).
The output directory holds ``checkpoints/step-N/`` (after each epoch, or
every ``save_every`` steps, and on Ctrl-C: a rerun resumes without redoing
finished batches), ``log.jsonl``, ``summary.json``, ``history.json`` (per
epoch: training loss, validation retrieval), ``loss_curve.png`` and, at the
end, ``model/`` (a directory :func:`~editlens.twoframe.model.load_twoframe`
loads, LoRA merged, calibration included).
"""

from __future__ import annotations

import contextlib
import copy
import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from torch import nn

from editlens.errors import InputError
from editlens.training.loop import TrainingTask
from editlens.twoframe.calibration import fit_platt
from editlens.twoframe.data import EditSet
from editlens.twoframe.model import TemporalHead, TwoFrameModel
from editlens.twoframe.retrieval import KS, retrieval_report

TUNES = ("head", "last", "lora", "all")
OBJECTIVES = ("auto", "video_to_text", "symmetric")
#: ``--amp`` spellings of earlier releases -> the policy's dtypes
AMP_TO_DTYPE = {"auto": "auto", "none": "float32", "bf16": "bfloat16", "fp16": "float16"}
MAX_LOGIT_SCALE = math.log(100.0)  # CLIP's clamp


@dataclass
class TrainConfig:
    mode: str = "order"
    tune: str = "head"  # head | last:N | lora:R | all
    epochs: int = 5
    batch_size: int = 32
    lr: float = 1e-5
    head_lr: float = 1e-3
    weight_decay: float = 0.01
    hard_negatives: tuple[str, ...] | None = None  # None: the mode's default (order: noop, swap; faithful: none)
    objective: str = "auto"  # auto (faithful: video_to_text unless negatives are asked for; order: symmetric)
    head_layers: int = 1
    val_fraction: float = 0.1
    seed: int = 0
    dtype: str = "auto"  # compute dtype under autocast (the policy's auto for training)
    amp: str | None = None  # earlier releases' spelling of dtype: auto | none | bf16 | fp16
    learn_scale: bool = True
    ks: tuple[int, ...] = KS
    plot: bool = True  # loss_curve.png
    warmup_steps: int = 0
    lr_decay: str = "constant"
    clip: float = 0.0  # gradient-norm clipping (0: none)
    save_every: int = 0  # steps between checkpoints (0: after every epoch)
    val_every: int = 0  # steps between validations (0: after every epoch)
    keep_checkpoints: int = 2

    def __post_init__(self) -> None:
        kind = self.tune.split(":")[0]
        if kind not in TUNES:
            raise ValueError(f"tune must be head, last:N, lora:R or all, got {self.tune!r}")
        if kind in ("last", "lora") and not self.tune.partition(":")[2].isdigit():
            raise ValueError(f"tune {self.tune!r} needs a number, e.g. last:2 or lora:8")
        if self.mode == "faithful" and kind == "head":
            raise ValueError("faithful mode has no head to train; choose --tune last:N, lora:R or all")
        if self.hard_negatives is not None:
            self.hard_negatives = tuple(self.hard_negatives)
            unknown = set(self.hard_negatives) - {"noop", "swap"}
            if unknown:
                raise ValueError(f"unknown hard negatives {sorted(unknown)} (known: noop, swap)")
        if self.batch_size < 2 or self.epochs < 1:
            raise ValueError("need batch_size >= 2 and epochs >= 1")
        if self.objective not in OBJECTIVES:
            raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}, got {self.objective!r}")
        if self.objective == "video_to_text" and self.negatives:
            raise ValueError("hard negatives are extra videos for each instruction (the text->video direction); "
                             "use objective symmetric (--objective symmetric) or no negatives (--negatives none)")
        if self.amp is not None:
            if self.amp not in AMP_TO_DTYPE:
                raise ValueError(f"amp must be one of {', '.join(AMP_TO_DTYPE)}, got {self.amp!r}")
            mapped = AMP_TO_DTYPE[self.amp]
            if self.dtype not in ("auto", mapped):
                raise ValueError(f"amp={self.amp!r} means dtype {mapped}, but dtype={self.dtype!r} was given; "
                                 "use dtype alone")
            self.dtype, self.amp = mapped, None

    @property
    def negatives(self) -> tuple[str, ...]:
        asked = self.hard_negatives if self.hard_negatives is not None else \
            (("noop", "swap") if self.mode == "order" else ())
        # the swapped video is identical to the real one under mean pooling
        return tuple(n for n in asked if self.mode == "order" or n != "swap")

    @property
    def loss_objective(self) -> str:
        """``video_to_text`` (the ViFi-CLIP poster's retrieval) or ``symmetric`` (both directions)."""
        if self.objective != "auto":
            return self.objective
        return "video_to_text" if self.mode == "faithful" and not self.negatives else "symmetric"

    def identity(self) -> dict[str, Any]:
        """Settings a resumed run must share with the run it continues."""
        d = asdict(self)
        return {**{k: d[k] for k in ("mode", "tune", "batch_size", "head_layers", "seed", "val_fraction",
                                     "learn_scale")},
                "negatives": list(self.negatives), "objective": self.loss_objective}


# ------------------------------------------------------------------ set-up

def prepare_model(model: TwoFrameModel, cfg: TrainConfig) -> list[dict[str, Any]]:
    """Add the head if needed, freeze/unfreeze/LoRA per ``cfg.tune``; the optimiser's parameter groups."""
    if cfg.mode == "order" and model.head is None:
        model.head = TemporalHead(int(model.clip.config.projection_dim), cfg.head_layers).to(model.device)
    model.mode = cfg.mode
    kind, _, num = cfg.tune.partition(":")
    for p in model.clip.parameters():
        p.requires_grad_(kind == "all")
    if kind == "last":
        n = int(num)
        for tower in (model.clip.vision_model, model.clip.text_model):
            for layer in tower.encoder.layers[-n:] if n > 0 else []:
                layer.requires_grad_(True)
        for mod in (model.clip.vision_model.post_layernorm, model.clip.text_model.final_layer_norm,
                    model.clip.visual_projection, model.clip.text_projection):
            mod.requires_grad_(True)
    elif kind == "lora":
        from peft import LoraConfig, get_peft_model

        r = int(num)
        model.clip = get_peft_model(model.clip, LoraConfig(r=r, lora_alpha=2 * r, lora_dropout=0.0,
                                                           target_modules=["q_proj", "k_proj", "v_proj", "out_proj"]))
    model.clip.logit_scale.requires_grad_(cfg.learn_scale)
    tower = [p for n, p in model.clip.named_parameters() if p.requires_grad and not n.endswith("logit_scale")]
    groups = [{"params": tower, "lr": cfg.lr}] if tower else []
    extra = list(model.head.parameters()) if model.head is not None else []
    extra += [model.clip.logit_scale] if cfg.learn_scale else []
    if extra:
        groups.append({"params": extra, "lr": cfg.head_lr, "weight_decay": 0.0})
    return groups


def exportable(model: TwoFrameModel) -> TwoFrameModel:
    """The model to save: with LoRA, a copy whose adapters are merged into plain CLIP weights."""
    if not hasattr(model.clip, "merge_and_unload"):
        return model
    merged = copy.deepcopy(model.clip).merge_and_unload()
    return TwoFrameModel(merged, model.tokenizer, model.preprocess, model.mode, model.head, model.calibration,
                         model.provenance, model.prompt)


# ------------------------------------------------------------------ features

class Features:
    """Frame and text features for a set: precomputed once when the towers are
    frozen, recomputed with gradients per batch (unique frames only) when not."""

    def __init__(self, model: TwoFrameModel, data: EditSet, frozen: bool,
                 autocast: Callable[[], Any] = contextlib.nullcontext) -> None:
        self.model, self.data, self.frozen, self._ctx = model, data, frozen, autocast
        self._crops: dict[str, torch.Tensor] = {}
        self.bank: dict[str, torch.Tensor] = {}
        self.text_bank: dict[str, torch.Tensor] = {}

    def crop(self, key: str) -> torch.Tensor:
        if key not in self._crops:
            self._crops[key] = torch.from_numpy(self.model.preprocess.crop(self.data.image(key)))
        return self._crops[key]

    def frames(self, keys: list[str], grad: bool) -> torch.Tensor:
        """Features of ``keys`` (in order), each unique frame encoded once per call
        (once per run when the towers are frozen)."""
        if not keys:  # a process whose share of a small batch is empty
            return self._none()
        uniq = list(dict.fromkeys(keys))
        if self.frozen:
            missing = [k for k in uniq if k not in self.bank]
            with torch.no_grad(), self._ctx():
                for s in range(0, len(missing), 64):
                    chunk = missing[s : s + 64]
                    self.bank.update(zip(chunk, self.model.frame_features(torch.stack([self.crop(k) for k in chunk])).float()))
            return torch.stack([self.bank[k] for k in keys])
        with torch.set_grad_enabled(grad), self._ctx():
            feats = torch.cat([self.model.frame_features(torch.stack([self.crop(k) for k in uniq[s : s + 64]])).float()
                               for s in range(0, len(uniq), 64)])
        pos = {k: i for i, k in enumerate(uniq)}
        return feats[[pos[k] for k in keys]]

    def _none(self) -> torch.Tensor:
        return torch.zeros((0, int(self.model.clip.config.projection_dim)), device=self.model.device)

    def texts(self, texts: list[str], grad: bool) -> torch.Tensor:
        if not texts:
            return self._none()
        uniq = list(dict.fromkeys(texts))
        if self.frozen:
            missing = [t for t in uniq if t not in self.text_bank]
            with torch.no_grad(), self._ctx():
                for s in range(0, len(missing), 256):
                    chunk = missing[s : s + 256]
                    self.text_bank.update(zip(chunk, self.model.text_features(chunk).float()))
            return torch.stack([self.text_bank[t] for t in texts])
        with torch.set_grad_enabled(grad), self._ctx():
            feats = torch.cat([self.model.text_features(uniq[s : s + 256]).float() for s in range(0, len(uniq), 256)])
        pos = {t: i for i, t in enumerate(uniq)}
        return feats[[pos[t] for t in texts]]


# ------------------------------------------------------------------ loss

def info_nce(model: TwoFrameModel, fs: torch.Tensor, fe: torch.Tensor, text: torch.Tensor, instructions: list[str],
             negatives: tuple[str, ...], objective: str = "symmetric") -> torch.Tensor:
    """Symmetric InfoNCE; hard-negative videos join the text->video candidates.
    ``objective="video_to_text"``: the video->text term alone (the ViFi-CLIP poster's retrieval)."""
    video = model.video_features(fs, fe)
    scale = model.clip.logit_scale.clamp(max=MAX_LOGIT_SCALE).exp()
    target = torch.arange(len(instructions), device=video.device)
    ids = torch.as_tensor(np.unique(np.asarray(instructions, dtype=object), return_inverse=True)[1].reshape(-1),
                          device=video.device)
    same = ids[:, None] == ids[None, :]
    same.fill_diagonal_(False)  # an identical instruction elsewhere in the batch is not a wrong answer
    v2t = (scale * video @ text.T).masked_fill(same, float("-inf"))
    if objective == "video_to_text":
        if negatives:
            raise ValueError("hard negatives need the text->video direction (objective symmetric)")
        return nn.functional.cross_entropy(v2t, target)
    candidates = [video]
    if "noop" in negatives:
        candidates.append(model.video_features(fs, fs))
    if "swap" in negatives:
        candidates.append(model.video_features(fe, fs))
    t2v = scale * text @ torch.cat(candidates).T
    t2v[:, : len(instructions)] = t2v[:, : len(instructions)].masked_fill(same, float("-inf"))
    return (nn.functional.cross_entropy(v2t, target) + nn.functional.cross_entropy(t2v, target)) / 2


@torch.no_grad()
def evaluate(model: TwoFrameModel, feats: Features, data: EditSet, negatives: tuple[str, ...],
             ks: tuple[int, ...] = KS, objective: str = "symmetric") -> dict[str, Any]:
    """Validation loss (one batch of the whole set), retrieval, and how often
    the real edit beats its no-op / swapped order for its own instruction."""
    model.eval()
    fs = feats.frames(data.source_keys, grad=False).to(model.device)
    fe = feats.frames(data.edited_keys, grad=False).to(model.device)
    text = feats.texts(data.instructions, grad=False).to(model.device)
    video = model.video_features(fs, fe)
    sim = (video @ text.T).float().cpu().numpy()
    out: dict[str, Any] = {"loss": float(info_nce(model, fs, fe, text, data.instructions, negatives, objective))}
    rep = retrieval_report(sim, data.instructions, ks)
    out["video_to_text"], out["text_to_video"] = rep["video_to_text"], rep["text_to_video"]
    real = np.diag(sim)
    noop = (model.video_features(fs, fs) * text).sum(-1).float().cpu().numpy()
    swap = (model.video_features(fe, fs) * text).sum(-1).float().cpu().numpy()
    out["edit_beats_noop"] = float((real > noop).mean())
    out["edit_beats_swap"] = float((real > swap).mean())
    out["n"] = len(data)
    return out


def calibration_pairs(model: TwoFrameModel, feats: Features, data: EditSet, negatives: tuple[str, ...]
                      ) -> tuple[np.ndarray, np.ndarray]:
    """Scores and 0/1 labels: real edits (1) vs mismatched instructions, no-ops
    and (order mode) swapped orders (0)."""
    with torch.no_grad():
        fs = feats.frames(data.source_keys, grad=False).to(model.device)
        fe = feats.frames(data.edited_keys, grad=False).to(model.device)
        text = feats.texts(data.instructions, grad=False).to(model.device)
        real = (model.video_features(fs, fe) * text).sum(-1)
        wrong = (model.video_features(fs, fe) * text.roll(1, 0)).sum(-1)
        scores = [real, wrong] + [(model.video_features(fs, fs) * text).sum(-1)]
        if "swap" in negatives:
            scores.append((model.video_features(fe, fs) * text).sum(-1))
    s = torch.cat(scores).float().cpu().numpy()
    labels = np.zeros_like(s)
    labels[: len(data)] = 1
    return s, labels


# ------------------------------------------------------------------ training

def batches_per_epoch(n: int, batch_size: int) -> int:
    """Batches of an epoch over ``n`` edits; a last batch of one edit has no negatives and is left out.

    >>> batches_per_epoch(16, 8), batches_per_epoch(17, 8), batches_per_epoch(18, 8)
    (2, 2, 3)
    """
    full, rest = divmod(n, batch_size)
    return full + (1 if rest >= 2 else 0)


class TwoFrameTask(TrainingTask):
    """Retrieval training for :func:`editlens.training.run`; a step is one batch of an epoch."""

    def __init__(self, model: TwoFrameModel, cfg: TrainConfig, groups: list[dict[str, Any]], train_set: EditSet,
                 val_set: EditSet | None, feats: Features, val_feats: Features | None) -> None:
        self.model, self.cfg, self.groups = model, cfg, groups
        self.train_set, self.val_set, self.feats, self.val_feats = train_set, val_set, feats, val_feats
        self.n_batches = batches_per_epoch(len(train_set), cfg.batch_size)
        self._orders: dict[int, np.ndarray] = {}
        self.policy: Any = None  # the precision decision, recorded in the exported model

    def optimizer(self, params: list[Any]) -> Any:
        return torch.optim.AdamW(self.groups, weight_decay=self.cfg.weight_decay)

    def order(self, epoch: int) -> np.ndarray:
        if epoch not in self._orders:
            self._orders[epoch] = np.random.default_rng([self.cfg.seed, epoch]).permutation(len(self.train_set))
        return self._orders[epoch]

    def batch(self, step: int, micro: int) -> np.ndarray:
        epoch, b = divmod(step, self.n_batches)
        return self.order(epoch)[b * self.cfg.batch_size : (b + 1) * self.cfg.batch_size]

    def loss(self, idx: np.ndarray) -> tuple[torch.Tensor, dict[str, float]]:
        """The batch's InfoNCE. With several processes each encodes its share of the batch and the
        features are gathered (differentiably), so every process computes the whole batch's loss."""
        from editlens.training.distributed import current

        procs = current()
        ts, dev = self.train_set, self.model.device
        instr = [ts.instructions[i] for i in idx]
        mine = idx[procs.share(len(idx))]
        fs = procs.gather_rows(self.feats.frames([ts.source_keys[i] for i in mine], grad=True).to(dev))
        fe = procs.gather_rows(self.feats.frames([ts.edited_keys[i] for i in mine], grad=True).to(dev))
        text = procs.gather_rows(self.feats.texts([ts.instructions[i] for i in mine], grad=True).to(dev))
        return info_nce(self.model, fs, fe, text, instr, self.cfg.negatives, self.cfg.loss_objective), {}

    def step_info(self, step: int) -> dict[str, Any]:
        return {"epoch": step // self.n_batches + 1, "logit_scale": self.model.scale}

    @property
    def has_validation(self) -> bool:
        return self.val_set is not None

    def validate(self) -> dict[str, Any]:
        return evaluate(self.model, self.val_feats, self.val_set, self.cfg.negatives, self.cfg.ks,  # type: ignore[arg-type]
                        self.cfg.loss_objective)

    def describe_validation(self, v: dict[str, Any]) -> str:
        return (f"val loss {v['loss']:.4f}, R@1 {v['video_to_text']['recall@1']:.3f}, "
                f"R@5 {v['video_to_text']['recall@5']:.3f}, edit>no-op {v['edit_beats_noop']:.2f}")

    def export(self, result: Any) -> dict[str, Any]:
        """Calibration on held-out edits (or the training set when there is none), then ``model/``."""
        cfg, model = self.cfg, self.model
        cal_set, cal_feats = (self.val_set, self.val_feats) if self.val_set is not None else (self.train_set, self.feats)
        model.eval()
        scores, labels = calibration_pairs(model, cal_feats, cal_set, cfg.negatives)  # type: ignore[arg-type]
        model.calibration = {**fit_platt(scores, labels), "mode": cfg.mode,
                             "fitted_on": ("validation" if self.val_set is not None else "training")
                             + " edits (1) vs mismatched instructions, no-ops"
                             + (", swapped orders" if "swap" in cfg.negatives else "") + " (0)"}
        export = exportable(model)
        export.provenance = {**model.provenance, "trained": {
            "config": asdict(cfg), "objective": cfg.loss_objective, "negatives": list(cfg.negatives),
            "train_size": len(self.train_set), "val_size": len(self.val_set) if self.val_set else 0,
            "precision": self.policy.to_dict() if self.policy is not None else None}}
        vals = [r["val"] for r in result.rows if isinstance(r.get("val"), dict) and r["step"] > 0]
        export.save(Path(result.out) / "model", extra={"final_val": vals[-1] if vals else None})
        return {"model": str(Path(result.out) / "model")}


def history_of(rows: list[dict[str, Any]], cfg: TrainConfig) -> dict[str, Any]:
    """Per step and per epoch figures from the log: ``steps`` (step, epoch, loss), ``epochs`` (epoch,
    last step, mean training loss, logit scale, validation), ``initial_val``."""
    steps = [{"step": r["step"], "epoch": r["epoch"], "loss": r["loss"]} for r in rows if "loss" in r]
    epochs = []
    for e in sorted({r["epoch"] for r in rows if "epoch" in r}):
        mine = [r for r in rows if r.get("epoch") == e and "loss" in r]
        last = mine[-1]
        entry: dict[str, Any] = {"epoch": e, "step": last["step"], "train_loss": float(np.mean([r["loss"] for r in mine])),
                                 "logit_scale": last.get("logit_scale")}
        if isinstance(last.get("val"), dict):
            entry["val"] = last["val"]
        epochs.append(entry)
    initial = next((r["val"] for r in rows if r["step"] == 0 and isinstance(r.get("val"), dict)), None)
    return {"config": asdict(cfg), "steps": steps, "epochs": epochs, "initial_val": initial}


def train(model: TwoFrameModel, train_set: EditSet, out_dir: str | os.PathLike, cfg: TrainConfig,
          val_set: EditSet | None = None, *, progress: bool = True, restart: bool = False,
          log: Callable[[str], None] = print, log_to: str | None = None,
          sharding: str | None = None) -> dict[str, Any]:
    """Train, checkpoint, export ``out_dir/model``; returns the history (see :func:`history_of`)
    with ``interrupted``/``exit_code`` and the loop's ``summary``.

    Rerunning with the same ``out_dir`` resumes from the newest checkpoint
    (``restart=True`` discards it). Ctrl-C or SIGTERM saves the position and
    returns with ``interrupted`` set.
    """
    from editlens.training.fsdp import refuse_fsdp

    # the export merges LoRA into a copy of the towers, and FSDP's sharded modules cannot be copied
    refuse_fsdp(sharding, "twoframe train", "its export merges the LoRA adapters into a copy of the CLIP towers, "
                "which sharded modules do not allow; the towers fit one device")
    from editlens.core.io import write_json
    from editlens.models.precision import decide
    from editlens.training import LoopSettings, PlotSpec, prepare_run_dir, run
    from editlens.training.distributed import check_divides, main_only, start
    from editlens.training.loop import autocast_context

    out = Path(out_dir)
    if len(train_set) < 2:
        raise InputError(f"training needs at least 2 edits, got {len(train_set)}")
    if val_set is None and cfg.val_fraction > 0:
        train_set, val_set = train_set.split_by_source(cfg.val_fraction, cfg.seed)
    precision = decide(cfg.dtype, str(model.device), "training")
    procs = start(precision.device)  # several processes under accelerate launch / torchrun
    log = main_only(log, procs)
    check_divides(cfg.batch_size, "--batch-size", procs, "each process encodes an equal share of every batch")
    identity = {**cfg.identity(), "start": model.provenance.get("checkpoint")}
    prepare_run_dir(out, identity, asdict(cfg), restart=restart)
    if any(p.is_floating_point() and p.dtype != torch.float32 for p in model.parameters()):
        # float32 weights (the whole model is exported); the forward pass computes in the policy's dtype
        log(f"model loaded in {model.dtype}: kept in float32 for training, computing in {precision.dtype}")
        model.float()
    torch.manual_seed(cfg.seed)
    groups = prepare_model(model, cfg)
    if not groups:
        raise ValueError("nothing to train: every parameter is frozen")
    autocast = autocast_context(precision)
    frozen = cfg.tune == "head"
    feats = Features(model, train_set, frozen, autocast)
    val_feats = Features(model, val_set, frozen, autocast) if val_set is not None else None
    task = TwoFrameTask(model, cfg, groups, train_set, val_set, feats, val_feats)
    task.policy = precision
    steps = cfg.epochs * task.n_batches
    log(f"training {cfg.mode} mode, tune={cfg.tune}, {len(train_set)} edits ({len(val_set) if val_set else 0} "
        f"validation), {task.n_batches} batches per epoch, device={precision.device}, computing in "
        f"{precision.dtype} ({precision.reason}), objective={cfg.loss_objective}, "
        f"negatives={','.join(cfg.negatives) or 'none'}")
    plot = PlotSpec(title=f"two-frame {cfg.mode} training", ylabel="InfoNCE loss", val_series=("loss",),
                    val_metric="video_to_text.recall@1", val_label="val R@1 (video->text)",
                    filename="loss_curve.png", group_by="epoch") if cfg.plot else None
    res = run(task, LoopSettings(
        out=out, steps=steps, precision=precision, identity=identity, config=asdict(cfg), seed=cfg.seed,
        warmup_steps=cfg.warmup_steps, decay=cfg.lr_decay, max_grad_norm=cfg.clip,
        save_every=cfg.save_every or task.n_batches, keep=cfg.keep_checkpoints, eval_every=cfg.val_every or task.n_batches,
        eval_at_start=True, report_every=task.n_batches, progress=progress, desc=f"twoframe {cfg.mode}", plot=plot,
        log=log, log_to=log_to, sharding=sharding))
    history = {**history_of(res.rows, cfg), "device": precision.device, "precision": res.summary.get("precision"),
               "train_size": len(train_set), "val_size": len(val_set) if val_set else 0,
               "objective": cfg.loss_objective, "negatives": list(cfg.negatives)}
    if procs.main:
        write_json(out / "history.json", history, default=str)
    return {**history, "interrupted": res.interrupted, "exit_code": res.exit_code, "summary": res.summary,
            "model": res.outputs.get("model")}


"""Retrieval training of the two-frame model: symmetric InfoNCE with hard negatives.

Each batch holds B edits (source, edited, instruction). Video->text: each
real edit ranks its instruction among the batch's instructions. Text->video:
each instruction ranks its real edit among the batch's real edits *plus the
hard negatives*: every edit's no-op (source as its own edit) and, in order
mode, its swapped order (edited -> source), all labelled non-matches. In
faithful mode the swapped video equals the real one by construction (mean
pooling), so only the no-op is used there.

Towers are frozen (``tune="head"``: frame and text features are computed once
for the whole set and only the temporal head and temperature learn), or
partly tuned: ``last:N`` unfreezes the last N blocks of both towers and the
projections, ``lora:R`` adds rank-R LoRA adapters (peft) to every attention
projection, ``all`` trains everything. The same code runs on a CPU with a
tiny model and on a GPU with ViT-B/16 (cuda and bf16 autocast picked at run
time).

The output directory holds ``checkpoint.pt`` (written atomically after each
epoch and on Ctrl-C, with the position inside the epoch: a rerun resumes
without redoing finished batches), ``history.json``, ``loss_curve.png`` and,
at the end, ``model/`` (a directory :func:`~editlens.twoframe.model.load_twoframe`
loads, LoRA merged, calibration included).
"""

from __future__ import annotations

import copy
import json
import math
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from torch import nn

from editlens.errors import InputError
from editlens.twoframe.calibration import fit_platt
from editlens.twoframe.data import EditSet
from editlens.twoframe.model import TemporalHead, TwoFrameModel
from editlens.twoframe.retrieval import KS, retrieval_report

TUNES = ("head", "last", "lora", "all")
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
    hard_negatives: tuple[str, ...] = ("noop", "swap")
    head_layers: int = 1
    val_fraction: float = 0.1
    seed: int = 0
    amp: str = "auto"  # auto | none | bf16 | fp16
    learn_scale: bool = True
    ks: tuple[int, ...] = KS
    plot: bool = True  # loss_curve.png after every epoch

    def __post_init__(self) -> None:
        kind = self.tune.split(":")[0]
        if kind not in TUNES:
            raise ValueError(f"tune must be head, last:N, lora:R or all, got {self.tune!r}")
        if kind in ("last", "lora") and not self.tune.partition(":")[2].isdigit():
            raise ValueError(f"tune {self.tune!r} needs a number, e.g. last:2 or lora:8")
        if self.mode == "faithful" and kind == "head":
            raise ValueError("faithful mode has no head to train; choose --tune last:N, lora:R or all")
        unknown = set(self.hard_negatives) - {"noop", "swap"}
        if unknown:
            raise ValueError(f"unknown hard negatives {sorted(unknown)} (known: noop, swap)")
        if self.batch_size < 2 or self.epochs < 1:
            raise ValueError("need batch_size >= 2 and epochs >= 1")

    @property
    def negatives(self) -> tuple[str, ...]:
        # the swapped video is identical to the real one under mean pooling
        return tuple(n for n in self.hard_negatives if self.mode == "order" or n != "swap")

    def identity(self) -> dict[str, Any]:
        """Settings a resumed run must share with the run it continues."""
        d = asdict(self)
        return {k: d[k] for k in ("mode", "tune", "batch_size", "head_layers", "seed", "val_fraction")}


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


def trainable_state(model: TwoFrameModel) -> dict[str, torch.Tensor]:
    return {n: p.detach().cpu().clone() for n, p in model.named_parameters() if p.requires_grad}


def _amp(cfg: TrainConfig, device: str) -> torch.dtype | None:
    if cfg.amp == "none":
        return None
    if cfg.amp == "bf16":
        return torch.bfloat16
    if cfg.amp == "fp16":
        return torch.float16
    if device == "cuda" and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return None  # CPU: fp32 (bf16 is only faster on CPUs with native support; opt in with amp="bf16")


def _atomic_torch_save(obj: Any, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def _atomic_json(obj: Any, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(obj, indent=2))
    os.replace(tmp, path)


# ------------------------------------------------------------------ features

class Features:
    """Frame and text features for a set: precomputed once when the towers are
    frozen, recomputed with gradients per batch (unique frames only) when not."""

    def __init__(self, model: TwoFrameModel, data: EditSet, frozen: bool, autocast: torch.dtype | None) -> None:
        self.model, self.data, self.frozen, self.autocast = model, data, frozen, autocast
        self._crops: dict[str, torch.Tensor] = {}
        self.bank: dict[str, torch.Tensor] = {}
        self.text_bank: dict[str, torch.Tensor] = {}

    def crop(self, key: str) -> torch.Tensor:
        if key not in self._crops:
            self._crops[key] = torch.from_numpy(self.model.preprocess.crop(self.data.image(key)))
        return self._crops[key]

    def _ctx(self) -> Any:
        dev = self.model.device.type
        return torch.autocast(dev, dtype=self.autocast) if self.autocast else torch.autocast(dev, enabled=False)

    def frames(self, keys: list[str], grad: bool) -> torch.Tensor:
        """Features of ``keys`` (in order), each unique frame encoded once per call
        (once per run when the towers are frozen)."""
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

    def texts(self, texts: list[str], grad: bool) -> torch.Tensor:
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
             negatives: tuple[str, ...]) -> torch.Tensor:
    """Symmetric InfoNCE; hard-negative videos join the text->video candidates."""
    video = model.video_features(fs, fe)
    scale = model.clip.logit_scale.clamp(max=MAX_LOGIT_SCALE).exp()
    target = torch.arange(len(instructions), device=video.device)
    ids = torch.as_tensor(np.unique(np.asarray(instructions, dtype=object), return_inverse=True)[1].reshape(-1),
                          device=video.device)
    same = ids[:, None] == ids[None, :]
    same.fill_diagonal_(False)  # an identical instruction elsewhere in the batch is not a wrong answer
    v2t = (scale * video @ text.T).masked_fill(same, float("-inf"))
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
             ks: tuple[int, ...] = KS) -> dict[str, Any]:
    """Validation loss (one batch of the whole set), retrieval, and how often
    the real edit beats its no-op / swapped order for its own instruction."""
    model.eval()
    fs = feats.frames(data.source_keys, grad=False).to(model.device)
    fe = feats.frames(data.edited_keys, grad=False).to(model.device)
    text = feats.texts(data.instructions, grad=False).to(model.device)
    video = model.video_features(fs, fe)
    sim = (video @ text.T).float().cpu().numpy()
    out: dict[str, Any] = {"loss": float(info_nce(model, fs, fe, text, data.instructions, negatives))}
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


# ------------------------------------------------------------------ loop

def plot_history(history: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    steps = history["steps"]
    if steps:
        ax.plot([s["step"] for s in steps], [s["loss"] for s in steps], lw=0.8, alpha=0.6, label="train (batch)")
    ep = history["epochs"]
    if ep:
        ax.plot([e["step"] for e in ep], [e["train_loss"] for e in ep], "o-", label="train (epoch mean)")
        if ep[0].get("val"):
            first = [(0, history["initial_val"]["loss"])] if history.get("initial_val") else []
            pts = first + [(e["step"], e["val"]["loss"]) for e in ep]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "s-",
                    label="validation (whole set, one batch)")
    ax.set_xlabel("step")
    ax.set_ylabel("InfoNCE loss")
    ax.legend()
    fig.tight_layout()
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    os.replace(tmp, path)


def train(model: TwoFrameModel, train_set: EditSet, out_dir: str | os.PathLike, cfg: TrainConfig,
          val_set: EditSet | None = None, *, progress: bool = True, restart: bool = False,
          log: Callable[[str], None] = print) -> dict[str, Any]:
    """Train, checkpoint every epoch, export ``out_dir/model``; returns the history.

    Rerunning with the same ``out_dir`` resumes from ``checkpoint.pt``
    (``restart=True`` ignores it). Ctrl-C saves the position and re-raises.
    """
    from tqdm.auto import tqdm

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if len(train_set) < 2:
        raise InputError(f"training needs at least 2 edits, got {len(train_set)}")
    if val_set is None and cfg.val_fraction > 0:
        train_set, val_set = train_set.split_by_source(cfg.val_fraction, cfg.seed)
    torch.manual_seed(cfg.seed)
    groups = prepare_model(model, cfg)
    if not groups:
        raise ValueError("nothing to train: every parameter is frozen")
    device = model.device.type
    amp = _amp(cfg, device)
    optim = torch.optim.AdamW(groups, weight_decay=cfg.weight_decay)
    scaler = torch.amp.GradScaler(device, enabled=amp == torch.float16)  # fp16 needs loss scaling; bf16 does not
    frozen = cfg.tune == "head"
    feats = Features(model, train_set, frozen, amp)
    val_feats = Features(model, val_set, frozen, amp) if val_set is not None else None
    n_batches = math.ceil(len(train_set) / cfg.batch_size)
    history: dict[str, Any] = {"config": asdict(cfg), "steps": [], "epochs": [], "device": device,
                               "amp": str(amp).replace("torch.", "") if amp else "none",
                               "train_size": len(train_set), "val_size": len(val_set) if val_set else 0}
    start_epoch, start_batch = 0, 0
    ckpt_path = out / "checkpoint.pt"
    identity = {**cfg.identity(), "start": model.provenance.get("checkpoint")}
    if ckpt_path.is_file() and not restart:
        ckpt = torch.load(ckpt_path, map_location="cpu", weights_only=False)
        if ckpt["identity"] != identity:
            raise InputError(f"{ckpt_path}: was written with different settings {ckpt['identity']} (now "
                             f"{identity}); use another --out or --restart")
        missing = set(trainable_state(model)) ^ set(ckpt["trainable"])
        if missing:
            raise InputError(f"{ckpt_path}: trainable parameters differ from this run's: {sorted(missing)[:6]}")
        model.load_state_dict(ckpt["trainable"], strict=False)
        optim.load_state_dict(ckpt["optimizer"])
        history = ckpt["history"]
        start_epoch, start_batch = ckpt["epoch"], ckpt["batch"]
        log(f"resuming from {ckpt_path}: epoch {start_epoch + 1}, batch {start_batch}/{n_batches}")

    def save_checkpoint(epoch: int, batch: int) -> None:
        _atomic_torch_save({"identity": identity, "trainable": trainable_state(model),
                            "optimizer": optim.state_dict(), "epoch": epoch, "batch": batch, "history": history},
                           ckpt_path)

    log(f"training {cfg.mode} mode, tune={cfg.tune}, {len(train_set)} edits ({len(val_set) if val_set else 0} "
        f"validation), device={device}, amp={history['amp']}, negatives={','.join(cfg.negatives) or 'none'}")
    if val_set is not None and not history["epochs"] and start_batch == 0:
        history["initial_val"] = evaluate(model, val_feats, val_set, cfg.negatives, cfg.ks)  # type: ignore[arg-type]
        log(f"before training: val loss {history['initial_val']['loss']:.4f}")
    step = len(history["steps"])
    epoch = start_epoch
    batch_i = start_batch
    try:
        for epoch in range(start_epoch, cfg.epochs):
            order = np.random.default_rng([cfg.seed, epoch]).permutation(len(train_set))
            model.train()
            first = start_batch if epoch == start_epoch else 0
            bar = tqdm(range(first, n_batches), desc=f"epoch {epoch + 1}/{cfg.epochs}", disable=not progress,
                       initial=first, total=n_batches, leave=False)
            for batch_i in bar:
                idx = order[batch_i * cfg.batch_size : (batch_i + 1) * cfg.batch_size]
                if len(idx) < 2:
                    continue  # a 1-edit batch has no negatives
                instr = [train_set.instructions[i] for i in idx]
                fs = feats.frames([train_set.source_keys[i] for i in idx], grad=True).to(model.device)
                fe = feats.frames([train_set.edited_keys[i] for i in idx], grad=True).to(model.device)
                text = feats.texts(instr, grad=True).to(model.device)
                loss = info_nce(model, fs, fe, text, instr, cfg.negatives)
                optim.zero_grad(set_to_none=True)
                scaler.scale(loss).backward()
                scaler.step(optim)
                scaler.update()
                step += 1
                value = loss.item()
                history["steps"].append({"step": step, "epoch": epoch, "loss": value})
                bar.set_postfix(loss=f"{value:.4f}")
            batch_i = n_batches
            ep_losses = [s["loss"] for s in history["steps"] if s["epoch"] == epoch]
            entry: dict[str, Any] = {"epoch": epoch + 1, "step": step,
                                     "train_loss": float(np.mean(ep_losses)) if ep_losses else float("nan"),
                                     "logit_scale": model.scale, "time": time.time()}
            if val_set is not None:
                entry["val"] = evaluate(model, val_feats, val_set, cfg.negatives, cfg.ks)  # type: ignore[arg-type]
            history["epochs"].append(entry)
            v = entry.get("val")
            log(f"epoch {epoch + 1}/{cfg.epochs}: train loss {entry['train_loss']:.4f}"
                + (f", val loss {v['loss']:.4f}, val R@1 {v['video_to_text']['recall@1']:.3f}, "
                   f"R@5 {v['video_to_text']['recall@5']:.3f}, edit>no-op {v['edit_beats_noop']:.2f}" if v else ""))
            save_checkpoint(epoch + 1, 0)
            _atomic_json(history, out / "history.json")
            if cfg.plot:
                plot_history(history, out / "loss_curve.png")
    except KeyboardInterrupt:
        save_checkpoint(epoch, batch_i)
        _atomic_json(history, out / "history.json")
        log(f"interrupted: saved epoch {epoch + 1} batch {batch_i} to {ckpt_path}; rerun to resume")
        raise
    # calibration on held-out edits (or the training set when there is none)
    cal_set, cal_feats = (val_set, val_feats) if val_set is not None else (train_set, feats)
    model.eval()
    scores, labels = calibration_pairs(model, cal_feats, cal_set, cfg.negatives)  # type: ignore[arg-type]
    model.calibration = {**fit_platt(scores, labels), "mode": cfg.mode,
                         "fitted_on": ("validation" if val_set is not None else "training")
                         + " edits (1) vs mismatched instructions, no-ops" + (", swapped orders" if "swap" in cfg.negatives else "") + " (0)"}
    export = exportable(model)
    export.provenance = {**model.provenance, "trained": {"config": asdict(cfg), "train_size": len(train_set),
                                                         "val_size": len(val_set) if val_set else 0}}
    export.save(out / "model", extra={"final_val": history["epochs"][-1].get("val") if history["epochs"] else None})
    _atomic_json(history, out / "history.json")
    return history

"""Fine-tune a DICE detector or coherence estimator with LoRA (paper, sec. 3
and supplementary B): rank 64, alpha 16, dropout 0.1 on the language model's
attention and MLP projections, vision tower and connector frozen. QLoRA
(4-bit NF4 base, paged AdamW 8-bit) with ``quantization="nf4"`` on any
device bitsandbytes supports, and with ``auto`` where it pays (CUDA with
bitsandbytes); plain AdamW on an unquantised base otherwise. The loss covers
only the answer tokens.

Training records (JSONL; image paths relative to the file):

* ``--stage detect``: ``{"id", "source", "edited", "width", "height",
  "differences": [{"command", "object", "box": [x0, y0, x1, y1]}]}`` — what
  ``editlens dice make-pairs`` and ``dice make-edits`` write; the target is the
  released answer format (``['nochange']`` for none).
* ``--stage coherence``: ``{"id", "source", "edited", "instruction",
  "difference": {"command", "object", "box"}, "reasoning", "decision": "YES"|"NO"}``.

The run directory holds ``train_config.json``, ``log.jsonl`` (loss per step,
evaluations), ``checkpoints/step-N/`` (adapter, optimizer, data position;
the newest two are kept), ``loss.png``, and at the end ``adapter/`` plus
``preset.json``, which ``editlens dice --dice-preset RUN/preset.json`` loads.
Rerunning the same command resumes from the newest checkpoint.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from editlens.dice.prompt_sets import PromptSet, default_prompts, load_official_prompts
from editlens.dice.released import (GenerationPreset, ModelSpec, Preset, coherence_conversation,
                                    detector_conversation, generate_raw, load_base, load_processor)
from editlens.dice.released_format import (CONVENTIONS, assign_command_confidence, coherence_images,
                                           format_released_answer, parse_decision, parse_released_answer)
from editlens.dice.types import COMMANDS, Difference
from editlens.data.jsonl import iter_jsonl
from editlens.errors import InputError

STAGES = ("detect", "coherence")


@dataclass
class TrainConfig:
    stage: str
    data: str
    out: str
    base: str
    eval_data: str | None = None
    init_adapter: str | None = None  # continue from an adapter (e.g. stage 1 -> stage 2)
    steps: int = 1000
    lr: float = 1e-4
    batch_size: int = 1  # examples per optimizer step (accumulated one by one)
    rank: int = 64
    alpha: int = 16
    dropout: float = 0.1
    eval_every: int = 0  # 0: only at the end (when eval data is given)
    save_every: int = 100
    eval_max_new_tokens: int = 256
    max_grad_norm: float = 1.0
    repetition_penalty: float | None = None  # decoding for evaluation and the exported preset (None: 1.5 detect, 1.0 coherence)
    max_eval: int = 100
    seed: int = 0
    device: str = "auto"
    quantization: str = "auto"  # auto: 4-bit NF4 on CUDA with bitsandbytes; nf4: always (CPU too); none
    longest_edge: int | None = None
    prompts: str | None = None
    drawing: str = "released"
    image_first: bool = True

    def identity(self) -> dict[str, Any]:
        """Fields a resumed run must share with the original one."""
        return {k: getattr(self, k) for k in ("stage", "data", "base", "init_adapter", "batch_size", "rank", "alpha",
                                              "dropout", "seed", "prompts", "drawing", "image_first", "longest_edge")}


# -- data -------------------------------------------------------------------------------

_REQUIRED = {"detect": ("id", "source", "edited", "differences"),
             "coherence": ("id", "source", "edited", "instruction", "difference", "decision")}


def load_records(path: str | Path, stage: str) -> list[dict[str, Any]]:
    """Validated training records with image paths made absolute."""
    p = Path(path)
    if p.is_dir():
        p = p / ("train.jsonl" if stage == "detect" else "coherence.jsonl")
    if not p.is_file():
        raise InputError(f"{p}: training data not found")
    rows = []
    for n, r in iter_jsonl(p):
        missing = [k for k in _REQUIRED[stage] if k not in r]
        if missing:
            raise InputError(f"{p}:{n}: a {stage} record needs {', '.join(missing)}")
        for k in ("source", "edited"):
            img = (p.parent / r[k]).resolve()
            if not img.is_file():
                raise InputError(f"{p}:{n}: image {r[k]!r} not found ({img})")
            r[k] = str(img)
        diffs = r["differences"] if stage == "detect" else [r["difference"]]
        for d in diffs:
            if d.get("command") not in COMMANDS or len(d.get("box") or []) != 4:
                raise InputError(f"{p}:{n}: each difference needs command ADD/EDIT/REMOVE and a 4-number box")
        if stage == "coherence" and str(r["decision"]).upper() not in ("YES", "NO"):
            raise InputError(f"{p}:{n}: decision must be YES or NO, got {r['decision']!r}")
        rows.append(r)
    if not rows:
        raise InputError(f"{p}: no training records")
    return rows


def _image(path: str) -> np.ndarray:
    from editlens.core.images import load_image

    return load_image(path)[0]


def coherence_target(reasoning: str | None, decision: str) -> str:
    return f"- Reasoning: {reasoning or 'no reasoning given'}\n- Decision: {decision.upper()}"


class ExampleBuilder:
    """Record -> (conversation, images, answer) for one stage."""

    def __init__(self, stage: str, prompts: PromptSet, drawing: str, image_first: bool) -> None:
        self.stage, self.prompts, self.drawing, self.image_first = stage, prompts, drawing, image_first

    def __call__(self, r: dict[str, Any]) -> tuple[list[dict[str, Any]], list[np.ndarray], str]:
        src, edt = _image(r["source"]), _image(r["edited"])
        if self.stage == "detect":
            answer = format_released_answer([(d["command"], d.get("object") or "object", d["box"])
                                             for d in r["differences"]])
            return detector_conversation(self.prompts, self.image_first), [src, edt], answer
        d = r["difference"]
        diff = Difference(d["command"], d.get("object"), tuple(d["box"]))  # type: ignore[arg-type]
        a, b = coherence_images(src, edt, diff, self.drawing)
        conv = coherence_conversation(self.prompts, r["instruction"], d["command"], d.get("object"))
        return conv, [a, b], coherence_target(r.get("reasoning"), str(r["decision"]))


def encode_example(processor: Any, conv: list[dict[str, Any]], images: list[np.ndarray], answer: str) -> dict[str, Any]:
    """Input ids, pixel values and labels with everything but the answer masked (-100)."""
    import torch
    from PIL import Image

    pil = [Image.fromarray(np.ascontiguousarray(i)) for i in images]
    prompt = processor.apply_chat_template(conv, add_generation_prompt=True, tokenize=False)
    full = processor.apply_chat_template(conv + [{"role": "assistant", "content": [{"type": "text", "text": answer}]}],
                                         add_generation_prompt=False, tokenize=False)
    if not full.startswith(prompt):
        raise InputError("the chat template does not put the answer after the generation prompt; "
                         "cannot mask the loss to the answer")
    enc = processor(text=[full], images=[pil], return_tensors="pt")
    prompt_ids = processor(text=[prompt], images=[pil], return_tensors="pt")["input_ids"][0]
    n_prompt = len(prompt_ids)
    ids = enc["input_ids"][0]
    if len(ids) <= n_prompt or not bool((ids[:n_prompt] == prompt_ids).all()):
        raise InputError("the tokenised prompt is not a prefix of the tokenised prompt + answer; "
                         "cannot mask the loss to the answer")
    labels = ids.clone()
    labels[:n_prompt] = -100
    enc["labels"] = labels[None]
    return dict(enc)


# -- model ------------------------------------------------------------------------------

def build_trainable(cfg: TrainConfig, notes: list[str]) -> tuple[Any, Any, str, bool]:
    """(peft model, processor, device, quantized): LoRA on the language model,
    everything else frozen; an initial adapter is loaded with every key checked."""
    from peft import get_peft_model

    from editlens.dice.lora import check_lora_targets, dice_lora_config
    from editlens.dice.released import attach_adapter
    from editlens.models.quant import count_4bit_layers
    from editlens.models.resolve import pick_device

    device = pick_device(cfg.device)
    model = load_base(cfg.base, device, cfg.quantization, notes, trainable=True, option="--quantization")
    quantized = count_4bit_layers(model) > 0
    if quantized:
        from peft import prepare_model_for_kbit_training

        model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=True,
                                                gradient_checkpointing_kwargs={"use_reentrant": False})
    if cfg.init_adapter:
        model = attach_adapter(model, cfg.init_adapter, trainable=True)
    else:
        model = get_peft_model(model, dice_lora_config(cfg.rank, cfg.alpha, cfg.dropout))
    check_lora_targets(model)
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    frozen_wrong = [n for n in trainable if "lora_" not in n]
    if frozen_wrong:
        raise InputError(f"parameters outside LoRA would train: {frozen_wrong[:3]}")
    processor = load_processor(ModelSpec(cfg.base), cfg.longest_edge)
    return model, processor, device, quantized


def run_precision(model: Any, optimizer_name: str) -> dict[str, Any]:
    """What this run trains with, as recorded in checkpoints and the adapter:
    base weights (``4-bit NF4`` or a dtype), compute dtype, optimizer."""
    from editlens.models.quant import describe_precision

    p = describe_precision(model)
    return {"base_weights": p["weights"], "compute_dtype": p["compute_dtype"], "double_quant": p["double_quant"],
            "optimizer": optimizer_name}


def make_optimizer(model: Any, lr: float, quantized: bool) -> tuple[Any, str]:
    params = [p for p in model.parameters() if p.requires_grad]
    if quantized:
        import bitsandbytes as bnb

        if any(p.is_cuda for p in params):
            return bnb.optim.PagedAdamW8bit(params, lr=lr), "paged AdamW 8-bit"
        # bitsandbytes pages optimizer state only on CUDA: elsewhere the same 8-bit AdamW, unpaged
        return bnb.optim.AdamW8bit(params, lr=lr), "AdamW 8-bit"
    import torch

    return torch.optim.AdamW(params, lr=lr), "AdamW"


# -- evaluation ---------------------------------------------------------------------------

def repetition_penalty_for(stage: str, given: float | None) -> float:
    """The released detector decodes with repetition penalty 1.5, the coherence estimator without."""
    return given if given is not None else (1.5 if stage == "detect" else 1.0)


def evaluate(model: Any, processor: Any, builder: ExampleBuilder, rows: list[dict[str, Any]], device: str,
             max_new_tokens: int, repetition_penalty: float | None = None) -> dict[str, Any]:
    """Detector: COCO AP of the parsed answers (the figures of ``dice eval``).
    Coherence: accuracy of the parsed decisions. Unparsable answers are counted."""
    from editlens.dice.evaluation import evaluate_detection

    gen = GenerationPreset(max_new_tokens, repetition_penalty_for(builder.stage, repetition_penalty), True)
    was_training = model.training
    model.eval()
    try:
        if builder.stage == "detect":
            preds, unparsable = {}, 0
            for r in rows:
                conv, images, _ = builder(r)
                g = generate_raw(model, processor, conv, images, gen, COMMANDS, device)
                ans = parse_released_answer(g.text)
                if ans.differences is None:
                    unparsable += 1
                    continue
                assign_command_confidence(ans.differences, g.offsets, g.step_ids, g.step_logits, g.variants)
                preds[str(r["id"])] = [d.to_dict() for d in ans.differences]
            gt = [{"id": str(r["id"]), "width": r.get("width") or 1, "height": r.get("height") or 1,
                   "differences": r["differences"]} for r in rows]
            rep = evaluate_detection(gt, preds)
            return {"AP": rep["class_agnostic"]["AP"], "AP50": rep["class_agnostic"]["AP50"],
                    "AP_class_aware": rep["class_aware"]["AP"], "unparsable": unparsable, "n": len(rows)}
        right = unparsable = 0
        for r in rows:
            conv, images, _ = builder(r)
            g = generate_raw(model, processor, conv, images, gen, ("YES", "NO"), device)
            dec = parse_decision(g.text)
            if dec.coherent is None:
                unparsable += 1
            elif dec.coherent == (str(r["decision"]).upper() == "YES"):
                right += 1
        return {"accuracy": right / len(rows), "unparsable": unparsable, "n": len(rows)}
    finally:
        model.train(was_training)


# -- run directory ------------------------------------------------------------------------

def _atomic_json(path: Path, data: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str))
    os.replace(tmp, path)


def latest_checkpoint(out: Path) -> Path | None:
    ck = sorted((out / "checkpoints").glob("step-*"), key=lambda p: int(p.name.split("-")[1])) \
        if (out / "checkpoints").is_dir() else []
    ck = [c for c in ck if (c / "state.json").is_file()]
    return ck[-1] if ck else None


def save_checkpoint(out: Path, model: Any, optimizer: Any, step: int, keep: int = 2,
                    precision: dict[str, Any] | None = None) -> Path:
    import torch

    root = out / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step-{step:07d}"
    tmp = root / f".tmp-step-{step:07d}"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(str(tmp / "adapter"))
    torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
    _atomic_json(tmp / "state.json", {"step": step, "torch_rng": torch.get_rng_state().tolist(),
                                      **({"precision": precision} if precision else {})})
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)  # a checkpoint exists completely or not at all
    for old in sorted(root.glob("step-*"))[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def load_checkpoint(path: Path, model: Any, optimizer: Any, precision: dict[str, Any] | None = None) -> int:
    """Restore adapter, optimizer and RNG; returns the step. ``precision``
    (base weights and optimizer of this run) must match the checkpoint's:
    an 8-bit optimizer state does not load into AdamW, nor the reverse."""
    import torch
    from peft.utils import load_peft_weights, set_peft_model_state_dict

    state = json.loads((path / "state.json").read_text())
    saved = state.get("precision")
    if precision and saved:
        diff = {k: (saved.get(k), v) for k, v in precision.items() if k in ("base_weights", "optimizer")
                and saved.get(k) != v}
        if diff:
            raise InputError(f"{path}: checkpoint trained with {diff} (was, now); rerun with the same "
                             "--quantization (and device) or use another --out")

    weights = load_peft_weights(str(path / "adapter"), device="cpu")
    res = set_peft_model_state_dict(model, weights)
    missing = [k for k in res.missing_keys if "lora_" in k]
    if missing or res.unexpected_keys:
        raise InputError(f"{path}: checkpoint does not fit the model ({len(missing)} LoRA keys missing, "
                         f"{len(res.unexpected_keys)} unexpected)")
    optimizer.load_state_dict(torch.load(path / "optimizer.pt", map_location="cpu", weights_only=True))
    torch.set_rng_state(torch.tensor(state["torch_rng"], dtype=torch.uint8))
    return int(state["step"])


def read_log(out: Path, upto: int | None = None) -> list[dict[str, Any]]:
    p = out / "log.jsonl"
    if not p.is_file():
        return []
    rows = [json.loads(line) for line in open(p) if line.strip()]
    return [r for r in rows if upto is None or r["step"] <= upto]


def plot_loss(out: Path) -> Path | None:
    rows = read_log(out)
    losses = [(r["step"], r["loss"]) for r in rows if "loss" in r]
    if not losses:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(*zip(*losses), lw=1, label="training loss")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (answer tokens)")
    evals = [(r["step"], r["eval"]) for r in rows if "eval" in r]
    key = next((k for k in ("AP", "accuracy") if evals and evals[0][1].get(k) is not None), None)
    if key:
        ax2 = ax.twinx()
        ax2.plot([s for s, _ in evals], [e[key] for _, e in evals], "o-", color="tab:orange", label=f"eval {key}")
        ax2.set_ylabel(f"eval {key}")
    ax.set_title(out.name)
    fig.tight_layout()
    path = out / "loss.png"
    fig.savefig(path.with_suffix(".tmp.png"), dpi=100)
    plt.close(fig)
    os.replace(path.with_suffix(".tmp.png"), path)
    return path


@dataclass
class TrainResult:
    out: Path
    steps_done: int
    resumed_from: int
    first_loss: float | None
    last_loss: float | None
    evals: list[dict[str, Any]] = field(default_factory=list)
    adapter: Path | None = None
    preset: Path | None = None
    interrupted: bool = False
    notes: list[str] = field(default_factory=list)


def train(cfg: TrainConfig, progress: bool = True, log: Callable[[str], None] = print) -> TrainResult:
    """Train (or resume) one stage; see the module docstring for the run directory."""
    import torch

    if cfg.stage not in STAGES:
        raise InputError(f"--stage must be one of {STAGES}, got {cfg.stage!r}")
    if cfg.drawing not in CONVENTIONS:
        raise InputError(f"--drawing must be one of {sorted(CONVENTIONS)}, got {cfg.drawing!r}")
    if cfg.steps < 1 or cfg.batch_size < 1:
        raise InputError("--steps and --batch-size must be at least 1")
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    saved = out / "train_config.json"
    if saved.is_file():
        before = json.loads(saved.read_text())
        diff = {k: (before.get(k), v) for k, v in cfg.identity().items() if before.get(k) != v}
        if diff:
            raise InputError(f"{out} holds a run with other settings {diff} (was, now); use another --out")
    _atomic_json(saved, asdict(cfg))
    rows = load_records(cfg.data, cfg.stage)
    eval_rows = load_records(cfg.eval_data, cfg.stage)[: cfg.max_eval] if cfg.eval_data else []
    prompts = load_official_prompts(cfg.prompts) if cfg.prompts else default_prompts()
    builder = ExampleBuilder(cfg.stage, prompts, cfg.drawing, cfg.image_first)
    notes: list[str] = []
    torch.manual_seed(cfg.seed)
    model, processor, device, quantized = build_trainable(cfg, notes)
    optimizer, opt_name = make_optimizer(model, cfg.lr, quantized)
    precision = run_precision(model, opt_name)
    ck = latest_checkpoint(out)
    start = load_checkpoint(ck, model, optimizer, precision) if ck else 0
    history = read_log(out, upto=start)
    with open(out / "log.jsonl.tmp", "w") as fh:  # drop log lines past the checkpoint (they will be redone)
        fh.writelines(json.dumps(r) + "\n" for r in history)
    os.replace(out / "log.jsonl.tmp", out / "log.jsonl")
    log(f"{cfg.stage}: {len(rows)} training records, {len(eval_rows)} eval; LoRA r={cfg.rank} alpha={cfg.alpha}; "
        f"{precision['base_weights']} base (compute {precision['compute_dtype']}); {opt_name}; device {device}"
        + (f"; resuming at step {start}" if start else ""))

    def example_index(micro: int) -> int:
        epoch, pos = divmod(micro, len(rows))
        return int(np.random.default_rng(cfg.seed + epoch).permutation(len(rows))[pos])

    result = TrainResult(out, start, start, None, None, notes=notes)
    losses = [r["loss"] for r in history if "loss" in r]
    result.first_loss = losses[0] if losses else None
    if start >= cfg.steps and (out / "adapter" / "adapter_config.json").is_file() and (out / "preset.json").is_file():
        # already finished: nothing to redo
        result.last_loss = losses[-1] if losses else None
        result.evals = [{"step": r["step"], **r["eval"]} for r in history if "eval" in r]
        result.adapter, result.preset = out / "adapter", out / "preset.json"
        return result
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=cfg.steps, initial=start, desc=f"dice train {cfg.stage}", unit="step")
    model.train()
    step = start
    logf = open(out / "log.jsonl", "a")
    try:
        while step < cfg.steps:
            optimizer.zero_grad(set_to_none=True)
            total = 0.0
            for k in range(cfg.batch_size):
                conv, images, answer = builder(rows[example_index(step * cfg.batch_size + k)])
                enc = {key: v.to(device) for key, v in encode_example(processor, conv, images, answer).items()}
                if "pixel_values" in enc:
                    dtype = next(p.dtype for p in model.parameters() if p.is_floating_point())
                    enc["pixel_values"] = enc["pixel_values"].to(dtype)
                loss = model(**enc).loss / cfg.batch_size
                if not torch.isfinite(loss):
                    raise InputError(f"loss became {float(loss)} at step {step + 1}; lower --lr")
                loss.backward()
                total += float(loss.detach())
            if cfg.max_grad_norm > 0:
                torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], cfg.max_grad_norm)
            optimizer.step()
            step += 1
            rec: dict[str, Any] = {"step": step, "loss": total, "time": time.time()}
            if result.first_loss is None:
                result.first_loss = total
            result.last_loss = total
            if eval_rows and cfg.eval_every and step % cfg.eval_every == 0:
                rec["eval"] = evaluate(model, processor, builder, eval_rows, device, cfg.eval_max_new_tokens,
                                      cfg.repetition_penalty)
                result.evals.append({"step": step, **rec["eval"]})
            logf.write(json.dumps(rec) + "\n")
            logf.flush()
            if bar is not None:
                bar.update(1)
                bar.set_postfix(loss=f"{total:.4f}")
            if step % cfg.save_every == 0 and step < cfg.steps:
                save_checkpoint(out, model, optimizer, step, precision=precision)
                plot_loss(out)
    except KeyboardInterrupt:
        save_checkpoint(out, model, optimizer, step, precision=precision)
        result.interrupted = True
    finally:
        logf.close()
        if bar is not None:
            bar.close()
    result.steps_done = step
    if result.interrupted:
        plot_loss(out)
        return result
    if eval_rows and not (cfg.eval_every and step % cfg.eval_every == 0):
        ev = evaluate(model, processor, builder, eval_rows, device, cfg.eval_max_new_tokens, cfg.repetition_penalty)
        result.evals.append({"step": step, **ev})
        with open(out / "log.jsonl", "a") as fh:
            fh.write(json.dumps({"step": step, "eval": ev}) + "\n")
    save_checkpoint(out, model, optimizer, step, precision=precision)
    result.adapter, result.preset = export_adapter(out, model, processor, cfg, quantized, precision)
    plot_loss(out)
    return result


def export_adapter(out: Path, model: Any, processor: Any, cfg: TrainConfig, quantized: bool = False,
                   precision: dict[str, Any] | None = None) -> tuple[Path, Path]:
    """``adapter/`` (peft + processor) and ``preset.json`` so that
    ``editlens dice --dice-preset RUN/preset.json`` runs the trained model."""
    tmp = out / ".adapter.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(str(tmp))
    processor.save_pretrained(str(tmp))
    _atomic_json(tmp / "editlens_training.json", {"stage": cfg.stage, "base": cfg.base, "config": asdict(cfg),
                                                  **({"precision": precision} if precision else {})})
    final = out / "adapter"
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    spec = f"{Path(cfg.base).resolve() if Path(cfg.base).is_dir() else cfg.base}+{final.resolve()}"
    gen = GenerationPreset(cfg.eval_max_new_tokens, repetition_penalty_for(cfg.stage, cfg.repetition_penalty), True)
    # an adapter trained on a 4-bit base runs on a 4-bit base (QLoRA), else unquantised
    preset = Preset(name=out.name, longest_edge=cfg.longest_edge, quantization="nf4" if quantized else "none",
                    drawing=cfg.drawing,
                    image_first=cfg.image_first, prompts=str(Path(cfg.prompts).resolve()) if cfg.prompts else None,
                    **{"detector_generation" if cfg.stage == "detect" else "coherence_generation": gen})
    d = preset.to_dict()
    d["detector" if cfg.stage == "detect" else "coherence"] = spec
    d.pop("detector" if cfg.stage == "coherence" else "coherence")
    d.pop("name")
    _atomic_json(out / "preset.json", d)
    return final, out / "preset.json"


def merge_adapter(base: str, adapter: str, out: str | Path, device: str = "cpu") -> Path:
    """Fold a LoRA adapter into its base and save the result with the
    processor: the released detector is such a merged stage-1 model, on which
    the stage-2 adapter is trained (``dice train --base MERGED``)."""
    from editlens.dice.released import attach_adapter

    notes: list[str] = []
    model = attach_adapter(load_base(base, device, "none", notes, trainable=True), adapter)
    merged = model.merge_and_unload()
    out = Path(out)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    merged.save_pretrained(str(tmp))
    load_processor(ModelSpec(base, adapter), None).save_pretrained(str(tmp))
    _atomic_json(tmp / "editlens_merge.json", {"base": base, "adapter": adapter})
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)
    return out

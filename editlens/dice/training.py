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

Images: ``crop="square"`` centre-crops both images to a square (the paper's
recipe, supplementary B) with the boxes mapped exactly into the crop;
``"none"`` keeps them whole; ``"auto"`` does what the released inference
does for the stage (detector: whole images, coherence: cropped). The choice is
recorded in the checkpoints, the adapter's ``editlens_training.json`` and the
written preset (``detector_crop`` / ``coherence_crop``), so the adapter sees at
inference what it saw in training.

The loop is :mod:`editlens.training` (resume, Ctrl-C, checkpoints,
validation, mixed precision). The run directory holds ``train_config.json``,
``log.jsonl`` (loss per step, evaluations under ``val``),
``checkpoints/step-N/`` (trainable weights, optimizer, LR schedule, the
adapter; the newest two are kept), ``loss.png``, ``summary.json``, and at the
end ``adapter/`` plus ``preset.json``, which ``editlens dice --dice-preset
RUN/preset.json`` loads. Rerunning the same command resumes from the newest
checkpoint.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np

from editlens.data.jsonl import iter_jsonl
from editlens.dice.prompt_sets import PromptSet, default_prompts, load_official_prompts
from editlens.dice.released import (
    GenerationPreset,
    ModelSpec,
    Preset,
    coherence_conversation,
    detector_conversation,
    generate_raw,
    load_base,
    load_processor,
)
from editlens.dice.released_format import (
    CONVENTIONS,
    CentreCrop,
    assign_command_confidence,
    coherence_images,
    format_released_answer,
    parse_decision,
    parse_released_answer,
)
from editlens.dice.types import COMMANDS, Difference
from editlens.errors import InputError
from editlens.training.loop import TrainingTask

STAGES = ("detect", "coherence")
CROPS = ("auto", "square", "none")


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
    batch_size: int = 1  # examples per optimizer step (accumulated one by one; shared among processes)
    warmup_steps: int = 0
    lr_decay: str = "constant"  # constant | linear | cosine
    rank: int = 64
    alpha: int = 16
    dropout: float = 0.1
    eval_every: int = 0  # 0: only at the end (when eval data is given)
    save_every: int = 100
    keep_checkpoints: int = 2
    eval_max_new_tokens: int = 256
    max_grad_norm: float = 1.0
    repetition_penalty: float | None = None  # decoding for evaluation and the exported preset (None: 1.5 detect, 1.0 coherence)
    max_eval: int = 100
    seed: int = 0
    device: str = "auto"
    dtype: str = "auto"  # compute dtype (autocast); the policy's "auto" for training
    quantization: str = "auto"  # auto: 4-bit NF4 on CUDA with bitsandbytes; nf4: always (CPU too); none
    longest_edge: int | None = None
    prompts: str | None = None
    drawing: str = "released"
    image_first: bool = True
    crop: str = "auto"  # auto (as the released inference: detector whole, coherence cropped) | square | none

    @property
    def square_crop(self) -> bool:
        """Whether the training images are centre-cropped to a square."""
        return self.crop == "square" or (self.crop == "auto" and self.stage == "coherence")

    def identity(self) -> dict[str, Any]:
        """Fields a resumed run must share with the original one."""
        d = {k: getattr(self, k) for k in ("stage", "data", "base", "init_adapter", "batch_size", "rank", "alpha",
                                           "dropout", "seed", "prompts", "drawing", "image_first", "longest_edge")}
        return {**d, "crop": "square" if self.square_crop else "none"}


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


def crop_differences(differences: list[dict[str, Any]], crop: CentreCrop) -> list[dict[str, Any]]:
    """Boxes (fractions of the full image) as fractions of the centre crop, clipped to it;
    a difference wholly outside the crop is not visible in it and is dropped."""
    out = []
    for d in differences:
        box = crop.to_crop(d["box"])
        if box is not None:
            out.append({**d, "box": [round(v, 6) for v in box]})
    return out


class ExampleBuilder:
    """Record -> (conversation, images, answer) for one stage; ``crop``: both
    images centre-cropped to a square, boxes mapped into the crop."""

    def __init__(self, stage: str, prompts: PromptSet, drawing: str, image_first: bool,
                 crop: bool | None = None) -> None:
        self.stage, self.prompts, self.drawing, self.image_first = stage, prompts, drawing, image_first
        self.crop = (stage == "coherence") if crop is None else bool(crop)

    def __call__(self, r: dict[str, Any]) -> tuple[list[dict[str, Any]], list[np.ndarray], str]:
        src, edt = _image(r["source"]), _image(r["edited"])
        if self.stage == "detect":
            diffs = r["differences"]
            if self.crop:
                # boxes refer to the edited image's frame, as at inference (released.py)
                cc = CentreCrop(edt.shape[1], edt.shape[0])
                diffs = crop_differences(diffs, cc)
                src, edt = CentreCrop(src.shape[1], src.shape[0]).apply(src), cc.apply(edt)
            answer = format_released_answer([(d["command"], d.get("object") or "object", d["box"]) for d in diffs])
            return detector_conversation(self.prompts, self.image_first), [src, edt], answer
        d = r["difference"]
        diff = Difference(d["command"], d.get("object"), tuple(d["box"]))
        a, b = coherence_images(src, edt, diff, self.drawing, crop=self.crop)
        conv = coherence_conversation(self.prompts, r["instruction"], d["command"], d.get("object"))
        return conv, [a, b], coherence_target(r.get("reasoning"), str(r["decision"]))


def encode_example(processor: Any, conv: list[dict[str, Any]], images: list[np.ndarray], answer: str) -> dict[str, Any]:
    """Input ids, pixel values and labels with everything but the answer masked (-100)."""
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
    from editlens.models.precision import resolve_device
    from editlens.models.quant import count_4bit_layers

    device = resolve_device(cfg.device)
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


def make_optimizer(params: list[Any], lr: float, quantized: bool) -> tuple[Any, str]:
    """AdamW, or bitsandbytes' 8-bit AdamW (paged on CUDA) for QLoRA, as released."""
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


# -- training -------------------------------------------------------------------------------

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
    exit_code: int = 0
    summary: dict[str, Any] = field(default_factory=dict)


class DiceTask(TrainingTask):
    """One DICE stage for :func:`editlens.training.run`: a batch is ``batch_size``
    examples accumulated one by one, the loss the answer tokens' cross-entropy."""

    def __init__(self, cfg: TrainConfig, rows: list[dict[str, Any]], eval_rows: list[dict[str, Any]],
                 builder: ExampleBuilder, model: Any, processor: Any, device: str, quantized: bool,
                 policy: Any = None) -> None:
        self.cfg, self.rows, self.eval_rows, self.builder, self.policy = cfg, rows, eval_rows, builder, policy
        self.model, self.processor, self.device, self.quantized = model, processor, device, quantized
        self.lr = cfg.lr
        self.optimizer_name = "AdamW"

    def optimizer(self, params: list[Any]) -> Any:
        opt, self.optimizer_name = make_optimizer(params, self.cfg.lr, self.quantized)
        return opt

    def example_index(self, position: int) -> int:
        """The record at sample position ``position``: one seeded permutation per epoch."""
        epoch, pos = divmod(position, len(self.rows))
        return int(np.random.default_rng(self.cfg.seed + epoch).permutation(len(self.rows))[pos])

    def batch(self, step: int, micro: int) -> dict[str, Any]:
        conv, images, answer = self.builder(self.rows[self.example_index(step * self.cfg.batch_size + micro)])
        enc = {k: v.to(self.device) for k, v in encode_example(self.processor, conv, images, answer).items()}
        if "pixel_values" in enc:
            dtype = next(p.dtype for p in self.model.parameters() if p.is_floating_point())
            enc["pixel_values"] = enc["pixel_values"].to(dtype)
        return enc

    def loss(self, batch: dict[str, Any]) -> tuple[Any, dict[str, float]]:
        return self.model(**batch).loss, {}

    @property
    def has_validation(self) -> bool:
        return bool(self.eval_rows)

    def validate(self) -> dict[str, Any]:
        return evaluate(self.model, self.processor, self.builder, self.eval_rows, self.device,
                        self.cfg.eval_max_new_tokens, self.cfg.repetition_penalty)

    def describe_validation(self, val: dict[str, Any]) -> str:
        key = "AP" if "AP" in val else "accuracy"
        return f"{key} {val[key]:.4f} over {val['n']} ({val['unparsable']} unparsable)"

    def precision_record(self) -> dict[str, Any]:
        return run_precision(self.model, self.optimizer_name)

    def identity_extra(self) -> dict[str, Any]:
        # an 8-bit optimizer state does not load into AdamW, nor a 4-bit base's adapter into another base
        p = self.precision_record()
        return {"base_weights": p["base_weights"], "optimizer": p["optimizer"]}

    def save_extra(self, folder: Path) -> None:
        self.model.save_pretrained(str(folder / "adapter"))  # a checkpoint is also a loadable adapter

    def export(self, result: Any) -> dict[str, Any]:
        record = {**(self.policy.to_dict() if self.policy is not None else {}), **self.precision_record()}
        adapter, preset = export_adapter(result.out, self.model, self.processor, self.cfg, self.quantized, record)
        return {"adapter": str(adapter), "preset": str(preset)}

    def summary_extra(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        return {"stage": self.cfg.stage, "crop": "square" if self.cfg.square_crop else "none"}


def _check(cfg: TrainConfig) -> None:
    if cfg.stage not in STAGES:
        raise InputError(f"--stage must be one of {STAGES}, got {cfg.stage!r}")
    if cfg.drawing not in CONVENTIONS:
        raise InputError(f"--drawing must be one of {sorted(CONVENTIONS)}, got {cfg.drawing!r}")
    if cfg.crop not in CROPS:
        raise InputError(f"--crop must be one of {', '.join(CROPS)}, got {cfg.crop!r}")
    if cfg.steps < 1 or cfg.batch_size < 1:
        raise InputError("--steps and --batch-size must be at least 1")


def train(cfg: TrainConfig, progress: bool = True, log: Callable[[str], None] = print,
          restart: bool = False, log_to: str | None = None, sharding: str | None = None) -> TrainResult:
    """Train (or resume) one stage; see the module docstring for the run directory."""
    import torch

    from editlens.models.precision import decide
    from editlens.training import LoopSettings, PlotSpec, prepare_run_dir, run
    from editlens.training.distributed import check_divides, local_device, main_only, start

    _check(cfg)
    precision = decide(cfg.dtype, local_device(cfg.device), "training")
    procs = start(precision.device)  # several processes under accelerate launch / torchrun
    log = main_only(log, procs)
    check_divides(cfg.batch_size, "--batch-size", procs, "each process accumulates an equal share of a step's "
                  "examples")
    prepare_run_dir(cfg.out, cfg.identity(), asdict(cfg), restart=restart)  # refuse a mismatch before loading
    rows = load_records(cfg.data, cfg.stage)
    eval_rows = load_records(cfg.eval_data, cfg.stage)[: cfg.max_eval] if cfg.eval_data else []
    prompts = load_official_prompts(cfg.prompts) if cfg.prompts else default_prompts()
    builder = ExampleBuilder(cfg.stage, prompts, cfg.drawing, cfg.image_first, cfg.square_crop)
    notes: list[str] = []
    torch.manual_seed(cfg.seed)
    model, processor, device, quantized = build_trainable(replace(cfg, device=precision.device), notes)
    task = DiceTask(cfg, rows, eval_rows, builder, model, processor, device, quantized, precision)
    log(f"{cfg.stage}: {len(rows)} training records, {len(eval_rows)} eval; LoRA r={cfg.rank} alpha={cfg.alpha}; "
        f"{run_precision(model, '')['base_weights']} base; computing in {precision.dtype} ({precision.reason}); device {device}; "
        f"images {'centre-cropped to a square' if cfg.square_crop else 'whole'}")
    eval_every = cfg.eval_every if eval_rows else 0
    res = run(task, LoopSettings(
        out=cfg.out, steps=cfg.steps, precision=precision, identity=cfg.identity(), config=asdict(cfg), seed=cfg.seed,
        grad_accum=cfg.batch_size, warmup_steps=cfg.warmup_steps, decay=cfg.lr_decay, max_grad_norm=cfg.max_grad_norm,
        save_every=cfg.save_every, keep=cfg.keep_checkpoints, eval_every=eval_every, progress=progress,
        share="micro-batches", desc=f"dice train {cfg.stage}", plot=PlotSpec(title=f"DICE {cfg.stage}: {Path(cfg.out).name}",
                                                      ylabel="loss (answer tokens)", val_metric="AP"
                                                      if cfg.stage == "detect" else "accuracy"), log=log,
        log_to=log_to, sharding=sharding))
    summary = res.summary
    outputs = res.outputs
    return TrainResult(res.out, res.steps_done, res.resumed_from, summary.get("first_step_loss"),
                       summary.get("last_step_loss"), res.evals,
                       Path(outputs["adapter"]) if outputs.get("adapter") else None,
                       Path(outputs["preset"]) if outputs.get("preset") else None,
                       res.interrupted, notes, res.exit_code, summary)


def export_adapter(out: Path, model: Any, processor: Any, cfg: TrainConfig, quantized: bool = False,
                   precision: dict[str, Any] | None = None) -> tuple[Path, Path]:
    """``adapter/`` (peft + processor) and ``preset.json`` so that
    ``editlens dice --dice-preset RUN/preset.json`` runs the trained model."""
    from editlens.core.io import atomic_directory, write_json

    out = Path(out)
    final = out / "adapter"
    crop = "square" if cfg.square_crop else "none"
    with atomic_directory(final) as tmp:
        model.save_pretrained(str(tmp))
        processor.save_pretrained(str(tmp))
        write_json(tmp / "editlens_training.json", {"stage": cfg.stage, "base": cfg.base, "config": asdict(cfg),
                                                    "crop": crop, **({"precision": precision} if precision else {})},
                   default=str)
    spec = f"{Path(cfg.base).resolve() if Path(cfg.base).is_dir() else cfg.base}+{final.resolve()}"
    gen = GenerationPreset(cfg.eval_max_new_tokens, repetition_penalty_for(cfg.stage, cfg.repetition_penalty), True)
    # an adapter trained on a 4-bit base runs on a 4-bit base (QLoRA), else unquantised; it sees the images
    # at inference as it saw them in training (cropped or whole)
    stage_fields: dict[str, Any] = ({"detector_crop": cfg.square_crop, "detector_generation": gen}
                                    if cfg.stage == "detect" else
                                    {"coherence_crop": cfg.square_crop, "coherence_generation": gen})
    preset = Preset(name=out.name, longest_edge=cfg.longest_edge, quantization="nf4" if quantized else "none",
                    drawing=cfg.drawing, image_first=cfg.image_first,
                    prompts=str(Path(cfg.prompts).resolve()) if cfg.prompts else None, **stage_fields)
    d = preset.to_dict()
    d["detector" if cfg.stage == "detect" else "coherence"] = spec
    d.pop("detector" if cfg.stage == "coherence" else "coherence")
    d.pop("name")
    write_json(out / "preset.json", d)
    return final, out / "preset.json"


def merge_adapter(base: str, adapter: str, out: str | Path, device: str = "cpu") -> Path:
    """Fold a LoRA adapter into its base and save the result with the
    processor: the released detector is such a merged stage-1 model, on which
    the stage-2 adapter is trained (``dice train --base MERGED``)."""
    from editlens.core.io import atomic_directory, write_json
    from editlens.dice.released import attach_adapter

    notes: list[str] = []
    model = attach_adapter(load_base(base, device, "none", notes, trainable=True), adapter)
    merged = model.merge_and_unload()
    with atomic_directory(out) as tmp:
        merged.save_pretrained(str(tmp))
        load_processor(ModelSpec(base, adapter), None).save_pretrained(str(tmp))
        write_json(tmp / "editlens_merge.json", {"base": base, "adapter": adapter})
    return Path(out)

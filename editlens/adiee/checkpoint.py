"""Save and load ADIEE scorers in two layouts.

**Released layout** (compatible with the original release): one directory
with the *full* state dict of the scorer, keys prefixed ``vlm.`` and
``score_decoder.`` (``*.safetensors`` or ``*.bin``, sharded or not), the
processor whose tokenizer holds ``[SCORE]``, and the VLM's ``config.json``
(when a checkpoint lacks it, pass the base model with ``base=``). Key names
written by older transformers versions (``language_model.model.layers...``)
are renamed to the current ones. An ``adiee.json`` is added by us; a
checkpoint without it is read as released (``emitting-step``).

**Our layout**: LoRA adapters (``adapter_model.safetensors`` and
``adapter_config.json``, written by peft, with the resized embeddings and LM
head), ``score_decoder.safetensors``, the processor, the VLM config and
``adiee.json`` naming the base model. Much smaller than a full state dict.

Loading accounts for every key: missing or unexpected keys and shape
mismatches raise :class:`CheckpointError` listing them; a scorer never runs
with randomly initialised parts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from editlens.adiee.model import HIDDEN_CHOICES, SCORE_TOKEN, AdieeScorer, add_score_token, head_of
from editlens.errors import EditlensError, ModelUnavailableError
from editlens.models.resolve import ModelRef, load_pretrained, model_reference

META_FILE = "adiee.json"
DECODER_FILE = "score_decoder.safetensors"
RELEASED_FILE = "model.safetensors"

#: Old -> current key names, per family (transformers < 4.52 wrote the left side).
KEY_RENAMES: dict[str, list[tuple[str, str]]] = {
    "llava_next": [(r"^language_model\.model\.", "model.language_model."), (r"^language_model\.lm_head\.", "lm_head."),
                   (r"^vision_tower\.", "model.vision_tower."),
                   (r"^multi_modal_projector\.", "model.multi_modal_projector."),
                   (r"^image_newline$", "model.image_newline")],
    "qwen2_vl": [(r"^model\.(?!language_model\.|visual\.)", "model.language_model."), (r"^visual\.", "model.visual.")],
}
KEY_RENAMES["qwen2_5_vl"] = KEY_RENAMES["qwen2_vl"]


class CheckpointError(EditlensError):
    """A checkpoint is incomplete, inconsistent or unreadable."""


@dataclass
class LoadReport:
    format: str
    path: str
    renamed: int = 0
    missing: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    mismatched: list[str] = field(default_factory=list)
    precision: dict[str, Any] = field(default_factory=dict)  # what the loaded model runs in (4-bit or a dtype)

    def add(self, other: "LoadReport") -> None:
        """Account for the keys of another part (the decoder) in this report."""
        self.missing += other.missing
        self.unexpected += other.unexpected
        self.mismatched += other.mismatched

    def check(self) -> None:
        if self.missing or self.unexpected or self.mismatched:
            parts = [f"{name} ({len(keys)}): {', '.join(keys[:8])}{' ...' if len(keys) > 8 else ''}"
                     for name, keys in (("missing", self.missing), ("unexpected", self.unexpected),
                                        ("shape mismatch", self.mismatched)) if keys]
            raise CheckpointError(f"{self.path}: the {self.format} checkpoint does not match the model; refusing to "
                                  "run with randomly initialised or unused weights.\n  " + "\n  ".join(parts))

    def to_dict(self) -> dict[str, Any]:
        return {"format": self.format, "path": self.path, "renamed_keys": self.renamed, "missing": self.missing,
                "unexpected": self.unexpected, "mismatched": self.mismatched, "precision": self.precision}


def rename_keys(state: dict[str, Any], family: str, known: set[str]) -> tuple[dict[str, Any], int]:
    """Rename keys that the current model does not know but an older
    transformers wrote; returns the new dict and how many were renamed.

    >>> rename_keys({"language_model.lm_head.weight": 1}, "llava_next", {"lm_head.weight"})
    ({'lm_head.weight': 1}, 1)
    """
    out, n = {}, 0
    for k, v in state.items():
        new = k
        if k not in known:
            for pat, rep in KEY_RENAMES.get(family, []):
                cand = re.sub(pat, rep, k)
                if cand != k and cand in known:
                    new = cand
                    n += 1
                    break
        out[new] = v
    return out, n


# -- base models -------------------------------------------------------------------
def _family(mref: ModelRef) -> tuple[str, Any]:
    from transformers import AutoConfig

    from editlens.models.registry import families

    cfg = load_pretrained(AutoConfig, mref)
    family = families().get(cfg.model_type)
    if family is None:
        raise ModelUnavailableError(f"{mref.ref}: a {cfg.model_type!r} model; the ADIEE scorer supports "
                                    f"{', '.join(sorted(families()))}")
    return str(cfg.model_type), family


def load_processor(mref: ModelRef, family: Any = None) -> Any:
    """The processor saved at ``mref``; ``family`` (from the model's config)
    when the folder has no config.json of its own."""
    import transformers

    if family is None:
        _, family = _family(mref)
    try:
        proc = load_pretrained(transformers.AutoProcessor, mref)
        if hasattr(proc, "image_processor") and hasattr(proc, "tokenizer"):
            return proc
        problem: Exception = ModelUnavailableError(f"{mref.ref}: AutoProcessor gave a {type(proc).__name__}")
    except Exception as exc:  # noqa: BLE001 - e.g. a processor that needs torchvision
        problem = exc
    if family.fallback_processor is None or mref.local_dir is None:
        raise problem
    return family.fallback_processor(str(mref.local_dir))


def scorer_from_base(base: str, head: str = "regression", device: str = "auto", dtype: str = "auto",
                     seed: int = 0, quantize_4bit: bool = False, models: dict[str, str] | None = None) -> AdieeScorer:
    """A new scorer for *training*: the base VLM with ``[SCORE]`` added and a
    freshly initialised decoder (seeded). Inference loads trained checkpoints
    with :func:`load_scorer` instead."""
    from editlens.models.precision import decide

    mref = model_reference(base, models)
    model_type, family = _family(mref)
    dev = decide(dtype, device, "training").device
    # frozen weights as the policy loads them for training; the loop keeps the trained ones in float32
    vlm = _load_base_vlm(mref, dev, dtype, quantize_4bit, "--qlora", trainable=True)
    processor = load_processor(mref)
    add_score_token(vlm, processor)
    torch.manual_seed(seed)
    scorer = AdieeScorer(vlm, processor, head, model_type)
    scorer.score_decoder.to(dev)
    scorer.base_ref = mref.ref
    return scorer


def _load_base_vlm(mref: ModelRef, device: str, dtype: Any, quantize_4bit: bool, option: str,
                   trainable: bool = False) -> Any:
    """The base VLM by the one loader (:func:`editlens.models.vlm.load_base`):
    every weight from its checkpoint, 4-bit NF4 (the family's skip list left
    unquantised; any device bitsandbytes supports, CPU included) or not."""
    from editlens.models.vlm import load_base

    return load_base(mref.local_dir or mref.ref, device, "nf4" if quantize_4bit else "none", dtype=dtype,
                     trainable=trainable, option=option, what="base model", error=CheckpointError)


def trained_in_4bit(meta: dict[str, Any]) -> bool:
    """Whether a checkpoint's ``adiee.json`` says its adapters were trained on a 4-bit base."""
    return str((meta.get("precision") or {}).get("base_weights", "")).startswith("4-bit")


# -- writing -------------------------------------------------------------------------
def _write_meta(out: Path, scorer: AdieeScorer, fmt: str, hidden: str, extra: dict[str, Any] | None = None) -> None:
    from editlens.core.io import write_json
    from editlens.models.describe import write_description

    meta = {"format": fmt, "family": scorer.family, "head": scorer.head, "hidden": hidden,
            "score_token": SCORE_TOKEN, "hidden_size": scorer.hidden_size, **(extra or {})}
    write_json(out / META_FILE, meta)
    write_description(out, "adiee", "editlens.adiee.model:AdieeScorer", format=fmt)  # what the folder is


def _vlm_config(vlm: Any) -> Any:
    base = vlm.get_base_model() if hasattr(vlm, "get_base_model") else vlm
    return base.config


def save_released(scorer: AdieeScorer, out: str | Path, hidden: str = "emitting-step",
                  extra: dict[str, Any] | None = None) -> Path:
    """Full state dict (``vlm.``/``score_decoder.``), processor, config.
    LoRA adapters are merged into the weights first (on a copy of the state)."""
    from safetensors.torch import save_file

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    vlm = scorer.vlm
    if hasattr(vlm, "merge_and_unload"):
        state = _merged_state(vlm)
    else:
        state = vlm.state_dict()
    full = {f"vlm.{k}": v for k, v in state.items()}
    full.update({f"score_decoder.{k}": v for k, v in scorer.score_decoder.state_dict().items()})
    # safetensors refuses shared storage (tied embeddings): store each tensor on its own
    save_file({k: v.detach().to("cpu").contiguous().clone() for k, v in full.items()}, str(out / RELEASED_FILE),
              metadata={"format": "pt"})
    _vlm_config(vlm).save_pretrained(out)
    scorer.processor.save_pretrained(out)
    _write_meta(out, scorer, "released", hidden, extra)
    return out


def _merged_state(peft_model: Any) -> dict[str, torch.Tensor]:
    """State dict of a peft model with LoRA merged, without changing the model."""
    import copy

    merged = copy.deepcopy(peft_model).merge_and_unload()
    return merged.state_dict()


def save_ours(scorer: AdieeScorer, out: str | Path, base: str, hidden: str = "score-token",
              extra: dict[str, Any] | None = None) -> Path:
    """LoRA adapters + decoder + processor + config + ``adiee.json``."""
    from safetensors.torch import save_file

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if not hasattr(scorer.vlm, "peft_config"):
        raise CheckpointError("our layout stores LoRA adapters; this scorer has none (save it with --layout released)")
    scorer.vlm.save_pretrained(out)
    save_file({k: v.detach().cpu().contiguous() for k, v in scorer.score_decoder.state_dict().items()},
              str(out / DECODER_FILE))
    _vlm_config(scorer.vlm).save_pretrained(out)
    scorer.processor.save_pretrained(out)
    _write_meta(out, scorer, "ours", hidden, {"base": base, **(extra or {})})
    return out


# -- reading -------------------------------------------------------------------------
def read_meta(path: Path) -> dict[str, Any]:
    f = path / META_FILE
    if not f.is_file():
        return {"format": "released", "hidden": "emitting-step"}
    from editlens.core.io import read_json

    meta = read_json(f, "the checkpoint's description")
    if not isinstance(meta, dict):
        raise CheckpointError(f"{f}: expected a JSON object, got {type(meta).__name__}")
    return meta


def _weight_files(path: Path) -> list[Path]:
    skip = {DECODER_FILE, "adapter_model.safetensors"}
    files = sorted(p for p in path.iterdir() if p.suffix in (".safetensors", ".bin") and p.name not in skip)
    if not files:
        raise CheckpointError(f"{path}: no weight files (*.safetensors or *.bin)")
    return files


def read_state(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    state: dict[str, torch.Tensor] = {}
    for f in _weight_files(path):
        try:
            part = load_file(str(f)) if f.suffix == ".safetensors" else torch.load(f, map_location="cpu",
                                                                                   weights_only=True)
        except Exception as exc:  # noqa: BLE001
            raise CheckpointError(f"{f}: cannot read weights ({type(exc).__name__}: {exc})") from None
        state.update(part)
    return state


def _load_decoder(scorer_hidden: int, state: dict[str, torch.Tensor], where: str) -> tuple[Any, LoadReport]:
    from editlens.adiee.model import ScoreDecoder

    rep = LoadReport("decoder", where)
    if "4.weight" not in state:
        rep.missing = sorted(f"score_decoder.{k}" for k in ScoreDecoder(scorer_hidden, 1).state_dict())
        return None, rep
    out = int(state["4.weight"].shape[0])
    dec = ScoreDecoder(scorer_hidden, out)
    expected = dec.state_dict()
    rep.missing = sorted(f"score_decoder.{k}" for k in set(expected) - set(state))
    rep.unexpected = sorted(f"score_decoder.{k}" for k in set(state) - set(expected))
    rep.mismatched = sorted(f"score_decoder.{k}" for k in set(expected) & set(state)
                            if expected[k].shape != state[k].shape)
    if not (rep.missing or rep.unexpected or rep.mismatched):
        dec.load_state_dict(state)
    return dec, rep


def load_released(path: str | Path, base: str | None = None, device: str = "auto", dtype: str = "auto",
                  models: dict[str, str] | None = None) -> tuple[AdieeScorer, LoadReport]:
    from transformers import AutoConfig

    path = Path(path)
    cfg_ref = model_reference(str(path)) if (path / "config.json").is_file() else (
        model_reference(base, models) if base else None)
    if cfg_ref is None:
        raise CheckpointError(f"{path}: no config.json; pass the base model it was trained from (--base)")
    model_type, family = _family(cfg_ref)
    processor = load_processor(model_reference(str(path)), family)
    if processor.tokenizer.convert_tokens_to_ids(SCORE_TOKEN) in (None, processor.tokenizer.unk_token_id):
        raise CheckpointError(f"{path}: the saved tokenizer has no {SCORE_TOKEN} token")
    state = read_state(path)
    vlm_state = {k[4:]: v for k, v in state.items() if k.startswith("vlm.")}
    dec_state = {k[len("score_decoder."):]: v for k, v in state.items() if k.startswith("score_decoder.")}
    other = sorted(k for k in state if not k.startswith(("vlm.", "score_decoder.")))
    if not vlm_state:
        raise CheckpointError(f"{path}: no 'vlm.' keys; not a scorer checkpoint in the released layout")
    cfg = load_pretrained(AutoConfig, cfg_ref)
    emb = next((v for k, v in vlm_state.items() if k.endswith("embed_tokens.weight")), None)
    text_cfg = getattr(cfg, "text_config", cfg)
    if emb is not None and emb.shape[0] != text_cfg.vocab_size:
        text_cfg.vocab_size = int(emb.shape[0])  # the released config is the base's: [SCORE] adds a row
    from editlens.models.precision import decide
    from editlens.models.vlm import from_state_dict

    prec = decide(dtype, device)
    dev = prec.device
    vlm, fit = from_state_dict(family.model_class, cfg, vlm_state, dtype=prec.torch_dtype,
                               rename=lambda state, known: rename_keys(state, model_type, known))
    rep = LoadReport("released", str(path), renamed=fit.renamed, missing=fit.missing,
                     unexpected=other + fit.unexpected, mismatched=fit.mismatched)
    dec, drep = _load_decoder(int(text_cfg.hidden_size), dec_state, str(path))
    rep.add(drep)
    scorer = _assemble(rep, vlm, processor, dec, model_type, dev)
    if len(processor.tokenizer) > vlm.get_input_embeddings().weight.shape[0]:
        raise CheckpointError(f"{path}: the tokenizer has {len(processor.tokenizer)} tokens but the embeddings only "
                              f"{vlm.get_input_embeddings().weight.shape[0]} rows")
    return scorer, rep


def load_ours(path: str | Path, base: str | None = None, device: str = "auto", dtype: str = "auto",
              models: dict[str, str] | None = None, quantization: str = "auto") -> tuple[AdieeScorer, LoadReport]:
    """Base model + adapters + decoder. ``quantization``: ``auto`` loads the
    base in 4-bit NF4 when the adapters were trained on one (QLoRA) and this
    is a CUDA device with bitsandbytes, unquantised otherwise; ``nf4`` forces
    4-bit (CPU too); ``none`` never."""
    from safetensors.torch import load_file

    from editlens.models.vlm import attach_adapter

    path = Path(path)
    meta = read_meta(path)
    base_ref = model_reference(base or meta.get("base") or "", models)
    if not base_ref.ref:
        raise CheckpointError(f"{path}/{META_FILE}: no base model recorded; pass --base")
    model_type, family = _family(base_ref)
    from editlens.models.precision import decide
    from editlens.models.quant import describe_precision, normalise_choice, use_4bit

    choice = normalise_choice(quantization)
    dev = decide(dtype, device).device
    q4 = choice == "nf4" or (choice == "auto" and trained_in_4bit(meta) and use_4bit("auto", dev)[0])
    vlm: Any = _load_base_vlm(base_ref, dev, dtype, q4, "--quantization")
    processor = load_processor(model_reference(str(path)), family)
    add_score_token(vlm, processor)
    adapter_cfg = path / "adapter_config.json"
    if not adapter_cfg.is_file() or not (path / "adapter_model.safetensors").is_file():
        raise CheckpointError(f"{path}: adapter_config.json / adapter_model.safetensors missing")
    # strictly: every adapter weight on a LoRA parameter of its shape, every LoRA parameter given one
    vlm = attach_adapter(vlm, path, what=f"{path}: the adapter", error=CheckpointError)
    rep = LoadReport("ours", str(path))
    dec_file = path / DECODER_FILE
    if not dec_file.is_file():
        raise CheckpointError(f"{path}: {DECODER_FILE} missing")
    hidden_size = int(getattr(vlm.get_base_model().config, "text_config", vlm.get_base_model().config).hidden_size)
    dec, drep = _load_decoder(hidden_size, load_file(str(dec_file)), str(path))
    rep.add(drep)
    rep.precision = describe_precision(vlm)
    return _assemble(rep, vlm, processor, dec, model_type, dev), rep


def _assemble(rep: LoadReport, vlm: Any, processor: Any, dec: Any, model_type: str, dev: Any) -> "AdieeScorer":
    """The scorer from its loaded parts, only once every key is accounted for."""
    rep.check()
    scorer = AdieeScorer(vlm, processor, head_of(dec.out_features), model_type)
    scorer.score_decoder = dec
    return scorer.to(dev).eval()


def load_scorer(path: str | Path, base: str | None = None, device: str = "auto", dtype: str = "auto",
                models: dict[str, str] | None = None, quantization: str = "auto"
                ) -> tuple[AdieeScorer, LoadReport, str]:
    """Load either layout; returns the scorer, the key report and the
    checkpoint's default hidden-state choice. ``quantization`` (our layout
    only; see :func:`load_ours`): auto, nf4 or none."""
    from editlens.models.quant import normalise_choice

    p = Path(path)
    if not p.is_dir():
        raise ModelUnavailableError(f"{p}: ADIEE checkpoint directory not found")
    meta = read_meta(p)
    fmt = meta.get("format", "released")
    if fmt == "ours" or (p / "adapter_config.json").is_file():
        scorer, rep = load_ours(p, base, device, dtype, models, quantization)
    else:
        if normalise_choice(quantization) == "nf4":
            raise CheckpointError(f"{p}: 4-bit loading is for our layout (base + adapters); a released-layout "
                                  "checkpoint loads unquantised (--quantization auto or none)")
        scorer, rep = load_released(p, base, device, dtype, models)
        from editlens.models.quant import describe_precision

        rep.precision = describe_precision(scorer.vlm)
    hidden = meta.get("hidden", "emitting-step" if fmt == "released" else "score-token")
    if hidden not in HIDDEN_CHOICES:
        raise CheckpointError(f"{p}/{META_FILE}: hidden {hidden!r} is not one of {HIDDEN_CHOICES}")
    return scorer, rep, hidden


def preset_available(preset: Any, models: dict[str, str]) -> tuple[bool, str | None]:
    """An ``adiee`` preset's availability (:mod:`editlens.models.registry`): a
    checkpoint folder given for its role (``--model adiee=DIR``,
    ``$EDITLENS_MODEL_ADIEE`` or the config file)."""
    mref = model_reference(preset.role or "adiee", models)
    if mref.origin == "literal" or mref.local_dir is None:
        return False, (f"no ADIEE checkpoint given: download the scorer, then pass --model {preset.role or 'adiee'}=DIR "
                       f"(or set EDITLENS_MODEL_{(preset.role or 'adiee').upper()}=DIR)")
    if not any(mref.local_dir.glob("*.safetensors")) and not any(mref.local_dir.glob("*.bin")):
        return False, f"{mref.local_dir}: no weight files (*.safetensors or *.bin)"
    return True, None


def load_for_loader(ref: ModelRef, precision: Any, quantization: str, models: dict[str, str],
                    base: str | None = None, **recipe: Any) -> tuple[AdieeScorer, LoadReport, str]:
    """The ``adiee`` kind's loader (:func:`editlens.models.loader.load_model`):
    (scorer, key report, default hidden-state choice). ``quantization``
    ``none`` here means the checkpoint's own choice (``auto``) unless the
    caller forced it."""
    if ref.local_dir is None:
        raise ModelUnavailableError(f"{ref.ref}: ADIEE checkpoint directory not found (download the scorer, then "
                                    "pass --model adiee=DIR)")
    return load_scorer(ref.local_dir, base or recipe.get("base"), precision.device, precision.dtype, models,
                       recipe.get("checkpoint_quantization", quantization))

"""Run DICE models the way the released checkpoints were trained: a base
vision-language model plus a LoRA adapter (peft) for the detector and one
for the coherence estimator, each with its own prompts, messages and
generation settings.

Release facts this follows (from the paper and the public checkpoints): the
detector is a merged stage-1 Idefics3-8B plus a stage-2 adapter, the
coherence estimator ``HuggingFaceM4/Idefics3-8B-Llama3`` plus its own adapter;
the language model loaded in 4-bit NF4 (fp16 compute, no double quantisation)
with vision tower and connector kept in bf16; images resized to a longest edge
of 1456 px; detector message [original, edited, prompt], greedy, repetition
penalty 1.5, up to 500 new tokens; coherence message a system prompt then
[prompt, original, edited] with boxes drawn, no generation prompt.

Quantisation ``auto`` loads 4-bit only where it pays (CUDA with bitsandbytes);
elsewhere the models run unquantised. ``nf4`` forces 4-bit NF4 on any device
bitsandbytes supports (its CPU backend included), computing in the dtype
chosen for the device. Whatever differs from the release (unquantised, or
another compute dtype), :meth:`ReleasedDice.describe` says the run is *not
identical to the release* and why.

A model spec is ``BASE`` or ``BASE+ADAPTER``: each a local directory, or a hub
id optionally followed by a folder inside the repository
(``owner/repo/sub/folder``).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from editlens.core.types import LoadedEdit
from editlens.dice.prompt_sets import PromptSet, default_prompts
from editlens.dice.released_format import (CONVENTIONS, CentreCrop, assign_command_confidence, candidate_variants,
                                           coherence_images, parse_decision, parse_released_answer, step_for_offset,
                                           word_probability)
from editlens.dice.types import COMMANDS, DiceResult, Verdict
from editlens.errors import InputError, ModelUnavailableError


@dataclass(frozen=True)
class ModelSpec:
    base: str
    adapter: str | None = None

    @classmethod
    def parse(cls, text: str) -> ModelSpec:
        """``BASE`` or ``BASE+ADAPTER``."""
        base, sep, adapter = text.strip().rpartition("+") if "+" in text else (text.strip(), "", "")
        if not base.strip() or (sep and not adapter.strip()):
            raise InputError(f"model spec {text!r} must be BASE or BASE+ADAPTER")
        return cls(base.strip(), adapter.strip() or None)

    def __str__(self) -> str:
        return self.base + (f"+{self.adapter}" if self.adapter else "")


#: Where a difference's confidence is read: the raw logits at the command's step (editlens' default), or
#: the generation scores after the logits processors (repetition penalty included), as the released code does.
CONFIDENCE_SOURCES = ("logits", "scores")


@dataclass(frozen=True)
class GenerationPreset:
    max_new_tokens: int = 500
    repetition_penalty: float = 1.0
    add_generation_prompt: bool = True


@dataclass(frozen=True)
class Preset:
    """Everything that makes a released-style run: models, processor size,
    generation settings and image conventions."""

    name: str = "custom"
    detector: ModelSpec | None = None
    coherence: ModelSpec | None = None
    longest_edge: int | None = 1456
    quantization: str = "nf4"  # what the release used: "nf4" or "none"
    compute_dtype: str = "float16"  # the release's 4-bit compute dtype (used on GPUs that compute it)
    detector_generation: GenerationPreset = GenerationPreset(500, 1.5, True)
    coherence_generation: GenerationPreset = GenerationPreset(500, 1.0, False)
    image_first: bool = True  # detector message: images before the prompt
    detector_crop: bool = False  # centre-crop the detector's inputs (boxes mapped back exactly)
    coherence_crop: bool = True
    coherence_size: int | None = 512
    drawing: str = "released"
    line_width: int = 3
    prompts: str | None = None  # a prompts module/clone to read (None: editlens' own wording)
    confidence: str = "logits"  # "logits" (raw) or "scores" (repetition-penalised, as the release); see CONFIDENCE_SOURCES

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["detector"] = str(self.detector) if self.detector else None
        d["coherence"] = str(self.coherence) if self.coherence else None
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str = "preset") -> Preset:
        known = {f for f in cls.__dataclass_fields__}
        unknown = set(d) - known
        if unknown:
            raise InputError(f"{where}: unknown preset field(s) {sorted(unknown)}; known: {sorted(known)}")
        kw = dict(d)
        for k in ("detector", "coherence"):
            if kw.get(k):
                kw[k] = ModelSpec.parse(kw[k]) if isinstance(kw[k], str) else ModelSpec(**kw[k])
        for k in ("detector_generation", "coherence_generation"):
            if isinstance(kw.get(k), dict):
                kw[k] = GenerationPreset(**kw[k])
        if str(kw.get("quantization", "nf4")).lower() in ("4bit", "4-bit"):
            kw["quantization"] = "nf4"
        p = cls(**kw)
        if p.quantization not in ("nf4", "none"):
            raise InputError(f"{where}: quantization must be nf4 (4-bit, as released) or none, got {p.quantization!r}")
        if p.confidence not in CONFIDENCE_SOURCES:
            raise InputError(f"{where}: confidence must be one of {CONFIDENCE_SOURCES}, got {p.confidence!r}")
        if p.drawing not in CONVENTIONS:
            raise InputError(f"{where}: drawing must be one of {sorted(CONVENTIONS)}, got {p.drawing!r}")
        return p


def load_preset(name_or_path: str | None) -> Preset:
    """A ``dice`` model preset by name (:mod:`editlens.models.registry`; the
    release is ``dice-idefics3``), or a JSON preset file."""
    if not name_or_path:
        return Preset()
    from editlens.models.registry import get_preset, is_preset, presets

    if is_preset(name_or_path, "dice"):
        mp = get_preset(name_or_path, "dice")
        return Preset.from_dict({"name": mp.name, **mp.recipe}, mp.file)
    p = Path(name_or_path).expanduser()
    if not p.is_file():
        known = ", ".join(n for n, mp in presets().items() if mp.kind == "dice")
        raise InputError(f"--dice-preset {name_or_path}: neither a built-in preset ({known}) nor a file")
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise InputError(f"{p}: not a readable JSON preset ({exc})") from None
    if not isinstance(data, dict):
        raise InputError(f"{p}: a preset is a JSON object")
    return Preset.from_dict({"name": p.stem, **data}, str(p))


def preset_available(preset: Any, models: dict[str, str]) -> tuple[bool, str | None]:
    """A ``dice`` preset's availability (:mod:`editlens.models.registry`): every base and adapter found locally."""
    p = Preset.from_dict({"name": preset.name, **preset.recipe}, preset.file)
    for role in ("detector", "coherence"):
        spec = getattr(p, role)
        for ref in ([spec.base] + ([spec.adapter] if spec.adapter else [])) if spec else []:
            try:
                resolve_location(ref)
            except ModelUnavailableError as exc:
                return False, f"{role}: {exc}"
    return True, None


# -- loading --------------------------------------------------------------------------

def resolve_location(ref: str) -> Path:
    """A local directory, or ``owner/repo[/folder...]`` from the Hugging Face cache/hub."""
    p = Path(ref).expanduser()
    if p.is_dir():
        return p
    parts = ref.strip("/").split("/")
    if len(parts) < 2 or ref.startswith((".", "/", "~")):
        raise ModelUnavailableError(f"model {ref!r}: no such directory")
    repo, sub = "/".join(parts[:2]), "/".join(parts[2:])
    try:
        from huggingface_hub import snapshot_download

        from editlens.models.resolve import _offline

        root = snapshot_download(repo, allow_patterns=[f"{sub}/*"] if sub else None, local_files_only=_offline())
    except Exception as exc:
        raise ModelUnavailableError(
            f"model {ref!r}: hub repository {repo} could not be fetched or found in the cache "
            f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}). Download it on a machine "
            f"with internet (`hf download {repo}`) or pass a local directory.") from None
    out = Path(root) / sub
    if not out.is_dir():
        raise ModelUnavailableError(f"model {ref!r}: {repo} has no folder {sub!r}")
    return out


def load_base(ref: str, device: str, quantization: str, notes: list[str], trainable: bool = False,
              option: str = "--dice-quantization", dtype: str = "auto", compute_dtype: str | None = "float16") -> Any:
    """The base VLM, its language model in 4-bit NF4 (vision tower, connector
    and LM head left unquantised) or unquantised, in the dtype of the
    precision policy (:mod:`editlens.models.precision`).

    ``quantization``: ``auto`` (4-bit where it pays: CUDA with bitsandbytes;
    elsewhere unquantised, with a note), ``nf4`` (4-bit on any device
    bitsandbytes supports, CPU included; ``4bit`` is the same) or ``none``.
    ``compute_dtype``: the recipe's own 4-bit compute dtype (the release's
    fp16), used under ``dtype=auto`` on a GPU that computes it. A model to be
    trained keeps float32 weights (the training loop runs autocast)."""
    from transformers import AutoModelForImageTextToText

    from editlens.models.precision import decide
    from editlens.models.quant import nf4_config, normalise_choice, prepare_4bit, use_4bit

    path = resolve_location(ref)
    choice = normalise_choice(quantization, option)
    q4, why = use_4bit(choice, device, option)
    prec = decide(dtype, device, "training" if trainable else ("quantized" if q4 else "inference"),
                  preferred=compute_dtype if q4 and not trainable else None)
    # frozen weights (and the parts 4-bit leaves unquantised) as the policy loads them: the compute dtype,
    # float32 for training on a CPU (the training loop's autocast does the rest)
    weights = decide(prec.weights_dtype, device).torch_dtype
    kwargs: dict[str, Any] = {"dtype": weights}
    if q4:
        kwargs["quantization_config"] = nf4_config(weights, skip_modules=["vision_model", "connector", "lm_head"])
        kwargs["device_map"] = {"": device}
    elif choice == "auto" and why:
        notes.append(f"{ref}: language model in {prec.weights_dtype} instead of 4-bit NF4 ({why})")
    try:
        model, info = AutoModelForImageTextToText.from_pretrained(str(path), local_files_only=True,
                                                                  output_loading_info=True, **kwargs)
    except (OSError, ValueError) as exc:
        raise ModelUnavailableError(f"model {ref!r} ({path}): cannot load ({type(exc).__name__}: "
                                    f"{str(exc).splitlines()[0]})") from None
    missing = sorted(info.get("missing_keys") or [])
    if missing:  # transformers would fill them with random values: never run like that
        raise ModelUnavailableError(f"model {ref!r} ({path}): {len(missing)} weight(s) missing from the checkpoint "
                                    f"(e.g. {missing[:3]}); refusing to run with randomly initialised parts")
    if info.get("unexpected_keys"):
        notes.append(f"{ref}: {len(info['unexpected_keys'])} unexpected checkpoint key(s) ignored "
                     f"(e.g. {sorted(info['unexpected_keys'])[:3]})")
    if q4:
        prepare_4bit(model, device, option, trainable=trainable)
    if "device_map" not in kwargs:
        model = model.to(device)
    model.editlens_precision = prec.to_dict()  # what the policy decided, for describe()
    return model


def attach_adapter(model: Any, ref: str, trainable: bool = False) -> Any:
    """Wrap ``model`` with the LoRA adapter at ``ref``; every adapter weight
    must land on a module (missing or unexpected keys are an error, never a
    silently random adapter)."""
    from peft import PeftConfig, get_peft_model
    from peft.utils import load_peft_weights, set_peft_model_state_dict

    path = resolve_location(ref)
    if not (path / "adapter_config.json").is_file():
        raise ModelUnavailableError(f"adapter {ref!r} ({path}): no adapter_config.json (not a peft adapter folder)")
    config = PeftConfig.from_pretrained(str(path))
    config.inference_mode = not trainable
    peft_model = get_peft_model(model, config)
    weights = load_peft_weights(str(path), device="cpu")
    result = set_peft_model_state_dict(peft_model, weights)
    missing = [k for k in result.missing_keys if "lora_" in k]
    unexpected = list(result.unexpected_keys)
    if missing or unexpected:
        raise ModelUnavailableError(
            f"adapter {ref!r} ({path}) does not fit the base model: {len(missing)} LoRA weight(s) missing "
            f"(e.g. {missing[:3]}), {len(unexpected)} unexpected (e.g. {unexpected[:3]})")
    return peft_model


def load_processor(spec: ModelSpec, longest_edge: int | None) -> Any:
    from transformers import AutoProcessor

    for ref in ([spec.adapter] if spec.adapter else []) + [spec.base]:
        path = resolve_location(ref)
        if (path / "processor_config.json").is_file() or (path / "preprocessor_config.json").is_file():
            proc = AutoProcessor.from_pretrained(str(path), local_files_only=True)
            if longest_edge:
                proc.image_processor.size = {"longest_edge": int(longest_edge)}
            return proc
    raise ModelUnavailableError(f"model {spec}: no processor files (preprocessor_config.json) in the adapter or base")


@dataclass
class RawGeneration:
    text: str
    step_ids: list[int]
    offsets: list[int]  # start of each generated token in ``text``
    step_logits: list[dict[int, float]]  # per step, token id -> logit for the candidates' first tokens
    variants: list[dict[str, int]]  # candidate word -> first token id, bare and after a space
    finish_reason: str = "length"


def generate_raw(model: Any, processor: Any, conversation: list[dict[str, Any]], images: Sequence[np.ndarray],
                 gen: GenerationPreset, candidates: Sequence[str], device: str,
                 confidence: str = "logits") -> RawGeneration:
    """Greedy generation of one answer, with each step's token, its start in
    the decoded text, and the candidates' first-token values at each step:
    the raw logits (``confidence="logits"``) or the scores after the logits
    processors, repetition penalty included (``"scores"``, the release's)."""
    import torch
    from PIL import Image

    tokenizer = processor.tokenizer
    prompt = processor.apply_chat_template(conversation, add_generation_prompt=gen.add_generation_prompt,
                                           tokenize=False)
    inputs = processor(text=[prompt], images=[[Image.fromarray(np.ascontiguousarray(i)) for i in images]],
                       return_tensors="pt").to(device)
    if "pixel_values" in inputs:
        dtype = next(p.dtype for p in model.parameters() if p.is_floating_point())
        inputs["pixel_values"] = inputs["pixel_values"].to(dtype)
    variants = candidate_variants(tokenizer, candidates)
    cand_ids = sorted({i for v in variants for i in v.values()})
    with torch.inference_mode():
        out = model.generate(**inputs, max_new_tokens=gen.max_new_tokens, do_sample=False,
                             repetition_penalty=gen.repetition_penalty, return_dict_in_generate=True,
                             output_logits=confidence == "logits", output_scores=confidence == "scores",
                             pad_token_id=tokenizer.pad_token_id,
                             temperature=None, top_p=None, top_k=None)
    new = out.sequences[0, inputs["input_ids"].shape[1]:].tolist()
    eos = set(np.atleast_1d(model.generation_config.eos_token_id or []).tolist())
    eos |= {tokenizer.pad_token_id, tokenizer.get_vocab().get("<end_of_utterance>")} - {None}  # Idefics3 turn end
    end = next((j for j, t in enumerate(new) if t in eos), len(new))
    ids = new[:end]
    offsets = [len(tokenizer.decode(ids[:j], skip_special_tokens=True)) for j in range(len(ids))]
    steps = out.logits if confidence == "logits" else out.scores
    logits = [{c: float(steps[j][0, c]) for c in cand_ids} for j in range(len(ids))]
    return RawGeneration(tokenizer.decode(ids, skip_special_tokens=True), ids, offsets, logits, variants,
                         "stop" if end < len(new) else "length")


class ReleasedModel:
    """One released-style model (detector or coherence estimator) and its processor."""

    def __init__(self, spec: ModelSpec, device: str = "auto", quantization: str = "auto",
                 longest_edge: int | None = None, dtype: str = "auto", compute_dtype: str | None = "float16") -> None:
        from editlens.models.precision import resolve_device

        self.spec = spec
        self.device = resolve_device(device)
        self.notes: list[str] = []
        model = load_base(spec.base, self.device, quantization, self.notes, dtype=dtype, compute_dtype=compute_dtype)
        if spec.adapter:
            model = attach_adapter(model, spec.adapter)
        self.model = model.eval()
        self.processor = load_processor(spec, longest_edge)
        self.tokenizer = self.processor.tokenizer
        from editlens.models.quant import count_4bit_layers

        self.quantized = count_4bit_layers(model) > 0

    def generate(self, conversation: list[dict[str, Any]], images: Sequence[np.ndarray], gen: GenerationPreset,
                 candidates: Sequence[str], confidence: str = "logits") -> RawGeneration:
        return generate_raw(self.model, self.processor, conversation, images, gen, candidates, self.device,
                            confidence)

    def describe(self) -> dict[str, Any]:
        from editlens.models.quant import describe_precision

        prec = describe_precision(self.model)
        return {"spec": str(self.spec), "device": self.device, "quantized_4bit": self.quantized,
                "dtype": prec["unquantised_dtype"], "precision": prec,
                "policy": getattr(self.model, "editlens_precision", None)}


def detector_conversation(prompts: PromptSet, image_first: bool = True) -> list[dict[str, Any]]:
    """One user turn: [original, edited, prompt] (or the prompt first)."""
    img = [{"type": "image"}, {"type": "image"}]
    txt = [{"type": "text", "text": prompts.detect}]
    return [{"role": "user", "content": img + txt if image_first else txt + img}]


def coherence_conversation(prompts: PromptSet, instruction: str, command: str, obj: str | None) -> list[dict[str, Any]]:
    """A system turn, then one user turn: [prompt with instruction and "COMMAND: object", original, edited]."""
    text = prompts.coherence_text(instruction, f"{command}: {obj or 'an object'}")
    return [{"role": "system", "content": [{"type": "text", "text": prompts.coherence_system}]},
            {"role": "user", "content": [{"type": "text", "text": text}, {"type": "image"}, {"type": "image"}]}]


# -- the pipeline ---------------------------------------------------------------------

class ReleasedDice:
    """Detector and coherence estimator run as released. Returns
    :class:`DiceResult` objects like :class:`editlens.dice.pipeline.DicePipeline`."""

    def __init__(self, preset: Preset, prompts: PromptSet | None = None, device: str = "auto",
                 quantization: str = "auto", dtype: str = "auto", engine: str | None = None,
                 served: dict[str, str | None] | None = None) -> None:
        if engine:  # both stages on an inference engine (editlens.dice.released_engine)
            self._engine_stages(preset, prompts, engine, served or {})
            return
        if preset.detector is None:
            raise InputError("released DICE needs a detector: --dice-detector BASE[+ADAPTER] or a preset with one")
        from editlens.models.quant import normalise_choice

        choice = normalise_choice(quantization, "--dice-quantization")
        self.preset = preset
        self.prompts = prompts or default_prompts()
        # auto: as the preset (4-bit where it pays); nf4 and none are forced
        self.quantization = ("auto" if preset.quantization == "nf4" else "none") if choice == "auto" else choice
        self.detector = ReleasedModel(preset.detector, device, self.quantization, preset.longest_edge, dtype,
                                      preset.compute_dtype)
        self.coherence = (ReleasedModel(preset.coherence, device, self.quantization, preset.longest_edge, dtype,
                                        preset.compute_dtype) if preset.coherence else None)

    def _engine_stages(self, preset: Preset, prompts: PromptSet | None, engine: str,
                       served: dict[str, str | None]) -> None:
        from editlens.dice.released_engine import DEFAULT_SERVED, EngineModel

        names = {**DEFAULT_SERVED, **{k: v for k, v in served.items() if v}}
        self.preset, self.prompts, self.quantization = preset, prompts or default_prompts(), "engine"

        def stage(role: str) -> Any:
            # NAME, or NAME@URL for a stage on another engine (the released detector's base is its own model)
            name, _, url = str(names[role]).partition("@")
            return EngineModel(url or engine, name, role, getattr(preset, f"{role}_generation").max_new_tokens,
                               "--option dice.engine")

        self.detector = stage("detector")
        self.coherence = None if str(names["coherence"]).lower() == "none" else stage("coherence")

    # -- detection ----------------------------------------------------------------
    def detect(self, sample: LoadedEdit) -> DiceResult:
        src, edt = sample.source, sample.edited
        crop = None
        if self.preset.detector_crop:
            crop = CentreCrop(edt.shape[1], edt.shape[0])
            src, edt = CentreCrop(src.shape[1], src.shape[0]).apply(src), crop.apply(edt)
        conv = detector_conversation(self.prompts, self.preset.image_first)
        try:
            g = self.detector.generate(conv, [src, edt], self.preset.detector_generation, COMMANDS,
                                       self.preset.confidence)
        except Exception as exc:  # one failing sample must not end a run: it fails (redone on rerun), never "unparsable"
            return DiceResult([], detector="released", failed=True,
                              problem=f"detector generation failed: {type(exc).__name__}: {exc}")
        ans = parse_released_answer(g.text)
        cut = g.finish_reason == "length"  # stopped by the token limit, not by the model
        cut_note = (f"the answer was cut off at {self.preset.detector_generation.max_new_tokens} new tokens, so the "
                    "list may be incomplete" + (f"; cut-off last item not read: {ans.tail[:80]!r}" if ans.tail else ""))
        if ans.differences is None:
            return DiceResult([], detector="released", raw=g.text, unparsable=True,
                              problem=ans.problem + (f" ({cut_note})" if cut else ""), truncated=cut)
        assign_command_confidence(ans.differences, g.offsets, g.step_ids, g.step_logits, g.variants)
        if crop is not None:
            for d in ans.differences:
                d.box = crop.from_crop(d.box)
        res = DiceResult(ans.differences, detector="released", raw=g.text, truncated=cut,
                         confidence_from=self.preset.confidence)
        problems = ([cut_note] if cut else []) + (["some items were dropped: " + "; ".join(ans.rejected)]
                                                  if ans.rejected else [])
        res.problem = "; ".join(problems) or None
        return res

    # -- coherence ---------------------------------------------------------------------
    def judge(self, sample: LoadedEdit, res: DiceResult) -> None:
        if self.coherence is None:
            return
        verdicts = []
        for d in res.differences:
            h, w = sample.edited.shape[:2]
            if self.preset.coherence_crop and CentreCrop(w, h).to_crop(d.box) is None:
                verdicts.append(Verdict(None, problem="the box lies outside the centre crop the coherence "
                                                      "estimator sees; not judged"))
                continue
            src, edt = coherence_images(sample.source, sample.edited, d, self.preset.drawing,
                                        self.preset.coherence_crop, self.preset.coherence_size,
                                        self.preset.line_width)
            conv = coherence_conversation(self.prompts, sample.instruction, d.command, d.object)
            try:
                g = self.coherence.generate(conv, [src, edt], self.preset.coherence_generation, ("YES", "NO"),
                                            self.preset.confidence)
            except Exception as exc:
                verdicts.append(Verdict(None, problem=f"coherence generation failed: {type(exc).__name__}: {exc}",
                                        failed=True))
                continue
            dec = parse_decision(g.text)
            if dec.coherent is None:
                verdicts.append(Verdict(None, raw=g.text, problem=dec.problem))
                continue
            j = None if dec.char_offset is None else step_for_offset(g.offsets, dec.char_offset)
            said = "YES" if dec.coherent else "NO"
            p = None if j is None else word_probability(said, g.step_ids[j], g.step_logits[j], g.variants)
            p_yes = None if p is None else (p if dec.coherent else 1.0 - p)
            verdicts.append(Verdict(dec.coherent, p_yes, dec.reasoning, g.text))
        res.verdicts = verdicts

    def run(self, batch: Sequence[LoadedEdit]) -> list[DiceResult]:
        out = []
        for s in batch:
            res = self.detect(s)
            if not (res.unparsable or res.failed):
                self.judge(s, res)
            elif self.coherence is not None:
                res.verdicts = []
            out.append(res)
        return out

    def describe(self) -> dict[str, Any]:
        notes = list(self.detector.notes) + (list(self.coherence.notes) if self.coherence else [])
        notes += self._precision_notes()
        if not self.prompts.source.startswith("official"):
            notes.append("prompts: editlens' own wording, not the released prompts (pass --dice-prompts CLONE)")
        if self.preset.drawing != "released":
            notes.append(f"boxes drawn with the {self.preset.drawing!r} convention (the released code uses 'released')")
        if self.preset.coherence_crop:
            notes.append("boxes mapped exactly into the centre crop (the released code does not shift them)")
        if self.preset.confidence != "scores":
            notes.append("confidence from the raw logits at the command's step (the release reads the generation "
                         "scores after the repetition penalty: preset confidence \"scores\")")
        return {"preset": self.preset.to_dict(), "prompts": self.prompts.describe(),
                "detector": self.detector.describe(),
                "coherence": self.coherence.describe() if self.coherence else None,
                "identical_to_release": not notes, "differences_from_release": notes}


    def _precision_notes(self) -> list[str]:
        """How the precision that ran differs from the preset's (the release:
        4-bit NF4 language model computing in fp16)."""
        out = []
        for m in (self.detector, self.coherence):
            if m is None:
                continue
            if hasattr(m, "backend"):  # on an engine: its precision is the engine's
                out.append(f"{m.spec}: served by an inference engine in the precision it was started with "
                           "(the release: 4-bit NF4 language model computing in fp16)")
                continue
            if not m.quantized:  # where auto fell back, the note made when it loaded says why
                if self.preset.quantization == "nf4" and self.quantization == "none":
                    out.append(f"{m.spec}: language model unquantised (--dice-quantization none) instead of the "
                               "release's 4-bit NF4")
                continue
            prec = m.describe()["precision"]
            if self.preset.quantization != "nf4":
                out.append(f"{m.spec}: language model in 4-bit NF4 (forced), the preset's models are unquantised")
            elif prec["compute_dtype"] != "float16" or prec["unquantised_dtype"] != "bfloat16":
                out.append(f"{m.spec}: 4-bit NF4 computing in {prec['compute_dtype']}, vision tower and connector in "
                           f"{prec['unquantised_dtype']}, instead of the release's float16 and bfloat16 (chosen for "
                           "this device)")
        return out


def trained_generation(spec: ModelSpec | None, role: str) -> GenerationPreset | None:
    """Decoding for an adapter trained by ``editlens dice train`` (it records how
    it was trained: always with the generation prompt), so it runs the way it
    learned whichever preset it is combined with; ``None`` for other adapters."""
    if spec is None or spec.adapter is None or not Path(spec.adapter).is_dir():
        return None
    meta = Path(spec.adapter) / "editlens_training.json"
    if not meta.is_file():
        return None
    cfg = json.loads(meta.read_text()).get("config", {})
    stage = cfg.get("stage")
    if (role == "detector") != (stage == "detect"):
        raise InputError(f"adapter {spec.adapter} was trained for the {stage} stage, not as the {role}")
    rep = cfg.get("repetition_penalty")
    return GenerationPreset(int(cfg.get("eval_max_new_tokens") or 256),
                            float(rep if rep is not None else (1.5 if stage == "detect" else 1.0)), True)


def build_released(preset: str | None = None, detector: str | None = None, coherence: str | None = None,
                   prompts: str | None = None, drawing: str | None = None, device: str = "auto",
                   quantization: str = "auto", dtype: str = "auto", confidence: str | None = None,
                   engine: str | None = None, served: dict[str, str | None] | None = None) -> ReleasedDice:
    """The CLI's entry: a preset (name or file) with the given parts replaced."""
    from editlens.dice.prompt_sets import load_official_prompts

    p = load_preset(preset)
    if detector:
        p = replace(p, detector=ModelSpec.parse(detector))
    if coherence:
        p = replace(p, coherence=ModelSpec.parse(coherence))
    if drawing:
        if drawing not in CONVENTIONS:
            raise InputError(f"--dice-drawing must be one of {sorted(CONVENTIONS)}, got {drawing!r}")
        p = replace(p, drawing=drawing)
    if confidence:
        if confidence not in CONFIDENCE_SOURCES:
            raise InputError(f"--dice-confidence must be one of {CONFIDENCE_SOURCES}, got {confidence!r}")
        p = replace(p, confidence=confidence)
    for role in ("detector", "coherence"):
        gen = trained_generation(getattr(p, role), role)
        if gen is not None:
            p = replace(p, **{f"{role}_generation": gen})
    prompts = prompts or p.prompts
    return ReleasedDice(p, load_official_prompts(prompts) if prompts else None, device, quantization, dtype,
                        engine, served)


#: ``--option dice.KEY=VALUE`` keys that make the ``dice`` evaluator run released-style models
#: (``engine``: an inference engine's URL serving both stages; ``engine_detector``/``engine_coherence``:
#: their served names, default ``dice-detector``/``dice-coherence``, ``none`` for no coherence stage)
RELEASED_OPTIONS = ("dice_preset", "dice_detector", "dice_coherence", "dice_prompts", "dice_drawing",
                    "dice_quantization", "dice_confidence", "engine", "engine_detector", "engine_coherence")


def released_from_options(options: dict[str, Any]) -> ReleasedDice:
    """The ``dice`` evaluator's released-style pipeline from its options
    (``editlens run ... --dice --option dice.dice_preset=PRESET``)."""
    return build_released(options.get("dice_preset"), options.get("dice_detector"), options.get("dice_coherence"),
                          options.get("dice_prompts"), options.get("dice_drawing"), options.get("device", "auto"),
                          options.get("dice_quantization") or "auto", options.get("dtype", "auto"),
                          options.get("dice_confidence"), options.get("engine"),
                          {"detector": options.get("engine_detector"), "coherence": options.get("engine_coherence")})


def load_dice(ref: Any, precision: Any, quantization: str, models: dict[str, str], **recipe: Any) -> ReleasedDice:
    """The ``dice`` kind's loader (:func:`editlens.models.loader.load_model`):
    a preset's recipe (detector, coherence, quantization, ...) as options."""
    preset = Preset.from_dict({"name": getattr(ref, "ref", "custom"), **recipe}, f"dice preset {getattr(ref, 'ref', '')}")
    return ReleasedDice(preset, None, precision.device, quantization if quantization != "none" else "auto",
                        precision.requested.get("dtype", "auto"))

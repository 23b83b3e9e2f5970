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

from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from editlens.core.io import read_json
from editlens.core.types import LoadedEdit
from editlens.dice.prompt_sets import PromptSet, default_prompts
from editlens.dice.released_format import (
    ANSWER_READINGS,
    CONVENTIONS,
    EDITLENS_READING_NOTE,
    RENDERINGS,
    CentreCrop,
    RawGeneration,
    assign_command_confidence,
    candidate_variants,
    coherence_images,
    parse_decision,
    parse_released_answer,
    read_as_release,
    release_change_text,
    step_for_offset,
    unavailable_reason,
    word_probability,
)
from editlens.dice.types import COMMANDS, DiceResult, Verdict
from editlens.errors import InputError, ModelUnavailableError


@dataclass(frozen=True)
class ModelSpec:
    base: str
    adapter: str | None = None

    @classmethod
    def parse(cls, text: str) -> ModelSpec:
        """``BASE`` or ``BASE+ADAPTER``, split as everywhere (:func:`editlens.models.vlm.parse_reference`)."""
        from editlens.models.vlm import parse_reference

        ref = parse_reference(text, single="base")
        return cls(str(ref.base), ref.adapter)

    def __str__(self) -> str:
        return self.base + (f"+{self.adapter}" if self.adapter else "")


#: What a difference's confidence is, named after what it returns: ``softmax-logits`` = softmax over the
#: ADD/EDIT/REMOVE raw logits at the command's step (editlens' default); ``softmax-penalised-scores`` = the
#: same over the generation scores after the logits processors (repetition penalty included): what the
#: released code computes, then discards; ``constant-one`` = 1.0 for every difference: what the released
#: pipeline outputs for normally formatted answers (its indexing drops the computed probabilities).
CONFIDENCE_SOURCES = ("softmax-logits", "softmax-penalised-scores", "constant-one")
#: earlier names, still read from presets and options
CONFIDENCE_ALIASES = {"logits": "softmax-logits", "scores": "softmax-penalised-scores", "release": "constant-one"}
#: the released pipeline's confidence output
RELEASE_CONFIDENCE = "constant-one"
RELEASE_CONFIDENCE_NOTE = "constant-one: the released pipeline's output (1.0 for every difference)"


def confidence_name(value: str, where: str = "--dice-confidence") -> str:
    """A confidence option's canonical name (earlier names accepted)."""
    name = CONFIDENCE_ALIASES.get(value, value)
    if name not in CONFIDENCE_SOURCES:
        raise InputError(f"{where}: confidence must be one of {CONFIDENCE_SOURCES}, got {value!r}")
    return name


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
    unquantised_dtype: str | None = "bfloat16"  # the release's dtype for the parts 4-bit leaves alone
    detector_generation: GenerationPreset = GenerationPreset(500, 1.5, True)
    coherence_generation: GenerationPreset = GenerationPreset(500, 1.0, False)
    image_first: bool = True  # detector message: images before the prompt
    detector_crop: bool = False  # centre-crop the detector's inputs (boxes mapped back exactly)
    coherence_crop: bool = True
    coherence_size: int | None = 512
    drawing: str = "released"
    #: coherence images and change text: "release" (matplotlib 640x480 JPEG figures, the release's spacing of
    #: "COMMAND:  object") or "editlens" (PIL outline on a square array, stripped object; what `dice train` uses)
    coherence_inputs: str = "release"
    line_width: int = 3  # editlens rendering only
    prompts: str | None = None  # a prompts module/clone to read (None: editlens' own wording)
    confidence: str = "softmax-logits"  # see CONFIDENCE_SOURCES
    #: how the detector's answer is read: "editlens" or "release" (DICE's parser; see ANSWER_READINGS)
    answer_reading: str = "editlens"
    #: where each model's processor comes from: "adapter", "base", "release" or a folder (see PROCESSOR_SOURCES)
    processor: str = "adapter"

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
        if "confidence" in kw:
            kw["confidence"] = confidence_name(str(kw["confidence"]), where)
        p = cls(**kw)
        if p.quantization not in ("nf4", "none"):
            raise InputError(f"{where}: quantization must be nf4 (4-bit, as released) or none, got {p.quantization!r}")
        if p.coherence_inputs not in RENDERINGS:
            raise InputError(f"{where}: coherence_inputs must be one of {RENDERINGS}, got {p.coherence_inputs!r}")
        if p.answer_reading not in ANSWER_READINGS:
            raise InputError(f"{where}: answer_reading must be one of {ANSWER_READINGS}, got {p.answer_reading!r}")
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
    data = read_json(p, "a DICE preset")
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
    """A local directory, or ``owner/repo[/folder...]`` from the Hugging Face cache/hub (:func:`editlens.models.vlm.locate`)."""
    from editlens.models.vlm import locate

    return locate(ref)


def load_base(ref: str, device: str, quantization: str, notes: list[str], trainable: bool = False,
              option: str = "--dice-quantization", dtype: str = "auto", compute_dtype: str | None = "float16",
              unquantised_dtype: str | None = None) -> Any:
    """The base VLM by the one loader (:func:`editlens.models.vlm.load_base`):
    ``auto`` (4-bit where it pays: CUDA with bitsandbytes; elsewhere
    unquantised, with a note), ``nf4`` (4-bit on any device bitsandbytes
    supports) or ``none``; in 4-bit the recipe's ``compute_dtype`` (the
    release's fp16) and ``unquantised_dtype`` for the vision tower, connector,
    embeddings, norms and LM head (the release's bf16) on a GPU that computes them."""
    from editlens.models.vlm import load_base as load_vlm_base

    return load_vlm_base(ref, device, quantization, dtype=dtype, compute_dtype=compute_dtype,
                         unquantised_dtype=unquantised_dtype, trainable=trainable, option=option, notes=notes,
                         what="model")


def attach_adapter(model: Any, ref: str, trainable: bool = False) -> Any:
    """Wrap ``model`` with the LoRA adapter at ``ref``, strictly (:func:`editlens.models.vlm.attach_adapter`)."""
    from editlens.models.vlm import attach_adapter as attach

    return attach(model, ref, trainable)


#: the processor the release loads for both models (its ``processor_path`` default)
STOCK_PROCESSOR = "HuggingFaceM4/Idefics3-8B-Llama3"
#: where the processor comes from (preset ``processor``, ``--dice-processor``): ``adapter`` (editlens' default:
#: the adapter folder when it holds processor files, else the base), ``base`` (the base folder), ``release``
#: (the stock :data:`STOCK_PROCESSOR`, as released); anything else is a folder or hub reference to read it from
PROCESSOR_SOURCES = ("adapter", "base", "release")


def _has_processor(path: Path) -> bool:
    return (path / "processor_config.json").is_file() or (path / "preprocessor_config.json").is_file()


def processor_location(spec: ModelSpec, source: str = "adapter") -> Path:
    """The folder the processor of ``spec`` is read from (see :data:`PROCESSOR_SOURCES`)."""
    if source == "adapter":
        refs = ([spec.adapter] if spec.adapter else []) + [spec.base]
    else:
        refs = [spec.base if source == "base" else STOCK_PROCESSOR if source == "release" else source]
    for ref in refs:
        path = resolve_location(ref)
        if _has_processor(path):
            return path
    where = {"adapter": "the adapter or base", "base": "the base"}.get(source, refs[0])
    raise ModelUnavailableError(f"model {spec}: no processor files (preprocessor_config.json) in {where}"
                                + (" (the stock processor the release loads; --dice-processor adapter reads the "
                                   "checkpoint's own)" if source == "release" else ""))


def load_processor(spec: ModelSpec, longest_edge: int | None, source: str = "adapter") -> Any:
    """The processor of ``spec`` from ``source`` (:func:`processor_location`), its longest edge set to the
    preset's; the folder it came from is ``editlens_source`` on it."""
    from transformers import AutoProcessor

    path = processor_location(spec, source)
    proc = AutoProcessor.from_pretrained(str(path), local_files_only=True)
    if longest_edge:
        proc.image_processor.size = {"longest_edge": int(longest_edge)}
    proc.editlens_source = str(path)
    return proc


def record_probability_source(res: Any, stage: str, g: RawGeneration) -> None:
    """Record on ``res`` where ``stage``'s probabilities came from and, on an
    engine that returns only its top log-probabilities, how many of the steps
    that emitted a candidate lacked another candidate's value."""
    if g.source is None:
        return
    entry = res.probability_source.setdefault(stage, {"source": g.source, "candidate_steps": 0,
                                                      "candidate_steps_missing": 0})
    entry["candidate_steps"] += g.candidate_steps
    entry["candidate_steps_missing"] += g.candidate_steps_missing
    entry["missing_share"] = (round(entry["candidate_steps_missing"] / entry["candidate_steps"], 4)
                              if entry["candidate_steps"] else None)


def generate_raw(model: Any, processor: Any, conversation: list[dict[str, Any]], images: Sequence[np.ndarray],
                 gen: GenerationPreset, candidates: Sequence[str], device: str,
                 confidence: str = "softmax-logits") -> RawGeneration:
    """Greedy generation of one answer, with each step's token, its start in
    the decoded text, and the candidates' first-token values at each step:
    the raw logits (``confidence="softmax-logits"``) or the scores after the
    logits processors, repetition penalty included (otherwise, the release's)."""
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
    raw_logits = CONFIDENCE_ALIASES.get(confidence, confidence) == "softmax-logits"
    with torch.inference_mode():
        out = model.generate(**inputs, max_new_tokens=gen.max_new_tokens, do_sample=False,
                             repetition_penalty=gen.repetition_penalty, return_dict_in_generate=True,
                             output_logits=raw_logits, output_scores=not raw_logits,
                             pad_token_id=tokenizer.pad_token_id,
                             temperature=None, top_p=None, top_k=None)
    new = out.sequences[0, inputs["input_ids"].shape[1]:].tolist()
    eos = set(np.atleast_1d(model.generation_config.eos_token_id or []).tolist())
    eos |= {tokenizer.pad_token_id, tokenizer.get_vocab().get("<end_of_utterance>")} - {None}  # Idefics3 turn end
    end = next((j for j, t in enumerate(new) if t in eos), len(new))
    ids = new[:end]
    offsets = [len(tokenizer.decode(ids[:j], skip_special_tokens=True)) for j in range(len(ids))]
    steps = out.logits if raw_logits else out.scores
    logits = [{c: float(steps[j][0, c]) for c in cand_ids} for j in range(len(ids))]
    return RawGeneration(tokenizer.decode(ids, skip_special_tokens=True), ids, offsets, logits, variants,
                         "stop" if end < len(new) else "length")


class ReleasedModel:
    """One released-style model (detector or coherence estimator) and its processor."""

    def __init__(self, spec: ModelSpec, device: str = "auto", quantization: str = "auto",
                 longest_edge: int | None = None, dtype: str = "auto", compute_dtype: str | None = "float16",
                 unquantised_dtype: str | None = None, processor: str = "adapter") -> None:
        from editlens.models.precision import resolve_device

        self.spec = spec
        self.device = resolve_device(device)
        self.notes: list[str] = []
        model = load_base(spec.base, self.device, quantization, self.notes, dtype=dtype, compute_dtype=compute_dtype,
                          unquantised_dtype=unquantised_dtype)
        if spec.adapter:
            model = attach_adapter(model, spec.adapter)
        self.model = model.eval()
        from editlens.backends.local import contiguous_lm_head

        contiguous_lm_head(self.model)  # as the local backend (and so an editlens serve of it) runs it
        self.processor = load_processor(spec, longest_edge, processor)
        self.processor_source = f"{processor}: {self.processor.editlens_source}"
        if processor != "release":  # identical only when that folder holds the stock processor files
            self.notes.append(f"{spec}: processor read from {self.processor.editlens_source} ({processor}), not the "
                              f"stock {STOCK_PROCESSOR} processor the release loads for both models "
                              "(--dice-processor release)")
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
                "processor_source": self.processor_source,
                "dtype": prec["unquantised_dtype"], "precision": prec,
                "policy": getattr(self.model, "editlens_precision", None)}


def detector_conversation(prompts: PromptSet, image_first: bool = True) -> list[dict[str, Any]]:
    """One user turn: [original, edited, prompt] (or the prompt first)."""
    img = [{"type": "image"}, {"type": "image"}]
    txt = [{"type": "text", "text": prompts.detect}]
    return [{"role": "user", "content": img + txt if image_first else txt + img}]


def coherence_conversation(prompts: PromptSet, instruction: str, command: str, obj: str | None,
                           change: str | None = None) -> list[dict[str, Any]]:
    """A system turn, then one user turn: [prompt with instruction and "COMMAND: object", original, edited].
    ``change``: the change text as written (e.g. the release's, from the raw answer); default
    ``"COMMAND: object"``."""
    text = prompts.coherence_text(instruction, change if change is not None else f"{command}: {obj or 'an object'}")
    return [{"role": "system", "content": [{"type": "text", "text": prompts.coherence_system}]},
            {"role": "user", "content": [{"type": "text", "text": text}, {"type": "image"}, {"type": "image"}]}]


#: a per-sample difference: the release's box mapping on non-square images is a bug editlens does not reproduce
SIZES_NOTE = ("original and edit of different sizes: as the release, the original's size decides whether both "
              "images are cropped to 512x512 and gives the box its pixel scale on either image (on the edit of "
              "another size the release's box is not where the detector put it)")
NON_SQUARE_NOTE = ("non-square image: boxes mapped exactly into the centre crop (the released code de-normalises them "
                   "with the crop's size without shifting, which misplaces them)")


# -- the pipeline ---------------------------------------------------------------------

class ReleasedDice:
    """Detector and coherence estimator run as released. Returns
    :class:`DiceResult` objects like :class:`editlens.dice.pipeline.DicePipeline`."""

    def __init__(self, preset: Preset, prompts: PromptSet | None = None, device: str = "auto",
                 quantization: str = "auto", dtype: str = "auto", engine: str | None = None,
                 served: dict[str, str | None] | None = None, http: Any = None) -> None:
        if engine:  # both stages on an inference engine (editlens.dice.released_engine)
            self._engine_stages(preset, prompts, engine, served or {}, http)
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
                                      preset.compute_dtype, preset.unquantised_dtype, preset.processor)
        self.coherence = (ReleasedModel(preset.coherence, device, self.quantization, preset.longest_edge, dtype,
                                        preset.compute_dtype, preset.unquantised_dtype, preset.processor)
                          if preset.coherence else None)

    def _engine_stages(self, preset: Preset, prompts: PromptSet | None, engine: str,
                       served: dict[str, str | None], http: Any = None) -> None:
        from editlens.dice.released_engine import DEFAULT_SERVED, EngineModel

        names = {**DEFAULT_SERVED, **{k: v for k, v in served.items() if v}}
        self.preset, self.prompts, self.quantization = preset, prompts or default_prompts(), "engine"

        def stage(role: str) -> Any:
            # NAME, or NAME@URL for a stage on another engine (the released detector's base is its own model)
            name, _, url = str(names[role]).partition("@")
            return EngineModel(url or engine, name, role, getattr(preset, f"{role}_generation").max_new_tokens,
                               "--option dice.engine", http=http)

        self.detector = stage("detector")
        self.coherence = None if str(names["coherence"]).lower() == "none" else stage("coherence")
        import logging

        from editlens.dice.released_engine import engine_notes

        stages: list[tuple[str, Any]] = [("detector", self.detector), ("coherence", self.coherence)]
        for role, model in stages:
            if model is not None:  # what the engine cannot match: said now, recorded with every result
                model.notes += engine_notes(model.dialect, role, getattr(preset, f"{role}_generation"))
                for note in model.notes:
                    logging.getLogger("editlens.dice").warning("%s", note)

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
        ans = read_as_release(g.text) if self.preset.answer_reading == "release" else parse_released_answer(g.text)
        cut = g.finish_reason == "length"  # stopped by the token limit, not by the model
        cut_note = (f"the answer was cut off at {self.preset.detector_generation.max_new_tokens} new tokens, so the "
                    "list may be incomplete" + (f"; cut-off last item not read: {ans.tail[:80]!r}" if ans.tail else ""))
        if ans.differences is None:
            bad = DiceResult([], detector="released", raw=g.text, unparsable=True,
                             problem=f"{ans.problem}" + (f" ({cut_note})" if cut else ""), truncated=cut)
            record_probability_source(bad, "detector", g)
            return bad
        assign_command_confidence(ans.differences, g.offsets, g.step_ids, g.step_logits, g.variants, g.source)
        if self.preset.confidence == RELEASE_CONFIDENCE:
            for d in ans.differences:
                d.confidence, d.confidence_source = 1.0, RELEASE_CONFIDENCE_NOTE
        if crop is not None:
            for d in ans.differences:
                d.box = crop.from_crop(d.box)
        res = DiceResult(ans.differences, detector="released", raw=g.text, truncated=cut,
                         confidence_from=self.preset.confidence)
        record_probability_source(res, "detector", g)
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
            release_inputs = self.preset.coherence_inputs == "release"
            # the release decides the crop (and scales the box) by the original's size; editlens' own rendering
            # by the edited image's
            h, w = (sample.source if release_inputs else sample.edited).shape[:2]
            if (self.preset.coherence_crop or release_inputs) and CentreCrop(w, h).to_crop(d.box) is None:
                verdicts.append(Verdict(None, problem="the box lies outside the centre crop the coherence "
                                                      "estimator sees; not judged"))
                continue
            if h != w and NON_SQUARE_NOTE not in res.differences_from_release:
                res.differences_from_release.append(NON_SQUARE_NOTE)
            if release_inputs and sample.source.shape[:2] != sample.edited.shape[:2] \
                    and SIZES_NOTE not in res.differences_from_release:
                res.differences_from_release.append(SIZES_NOTE)
            src, edt = coherence_images(sample.source, sample.edited, d, self.preset.drawing,
                                        self.preset.coherence_crop, self.preset.coherence_size,
                                        self.preset.line_width, self.preset.coherence_inputs)
            conv = coherence_conversation(self.prompts, sample.instruction, d.command, d.object,
                                          release_change_text(res.raw, d) if release_inputs else None)
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
            problem = None
            if p is None and g.source is not None:  # an engine: say why there is no P(YES)
                problem = ("P(YES) " + unavailable_reason(said, g.step_ids[j], g.step_logits[j], g.variants, g.source)
                           if j is not None else "P(YES) unavailable: the decision's token was not found")
            verdicts.append(Verdict(dec.coherent, p_yes, dec.reasoning, g.text, problem=problem))
            record_probability_source(res, "coherence", g)
        res.verdicts = verdicts

    def run(self, batch: Sequence[LoadedEdit]) -> list[DiceResult]:
        if getattr(self, "_run_notes", None) is None:
            self._run_notes = list(self.describe()["differences_from_release"])
        out = []
        for s in batch:
            res = self.detect(s)
            if not (res.unparsable or res.failed):
                self.judge(s, res)
            elif self.coherence is not None:
                res.verdicts = []
            # each result names every difference: the run's and its own (e.g. boxes on a non-square image)
            res.differences_from_release = self._run_notes + res.differences_from_release
            res.identical_to_release = not res.differences_from_release
            res.answer_reading = self.preset.answer_reading
            res.processor_source = {role: m.processor_source for role, m in (("detector", self.detector),
                                                                             ("coherence", self.coherence))
                                    if m is not None and hasattr(m, "processor_source")}
            out.append(res)
        return out

    def describe(self) -> dict[str, Any]:
        notes = list(self.detector.notes) + (list(self.coherence.notes) if self.coherence else [])
        notes += self._precision_notes()
        if not self.prompts.source.startswith("official"):
            notes.append("prompts: editlens' own wording, not the released prompts (pass --dice-prompts CLONE)")
        if self.preset.drawing != "released":
            notes.append(f"boxes drawn with the {self.preset.drawing!r} convention (the released code uses 'released')")
        if self.coherence is not None:
            if self.preset.coherence_inputs != "release":
                notes.append("coherence images drawn by editlens (PIL outline on a square array) and the change text "
                             "stripped, not the release's matplotlib 640x480 JPEG figures and spacing "
                             "(coherence_inputs \"release\")")
        if self.preset.answer_reading != "release":
            notes.append(EDITLENS_READING_NOTE)
        if self.preset.confidence != RELEASE_CONFIDENCE:
            notes.append(f"confidence {self.preset.confidence}: the released pipeline outputs 1.0 for every "
                         f"difference (--dice-confidence {RELEASE_CONFIDENCE})")
        rendering = None
        if self.coherence is not None and self.preset.coherence_inputs == "release":
            from editlens.dice.release_rendering import describe as describe_rendering

            rendering = describe_rendering()
        return {"preset": self.preset.to_dict(), "prompts": self.prompts.describe(), "coherence_rendering": rendering,
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
            elif (prec["compute_dtype"] != self.preset.compute_dtype
                  or prec["unquantised_dtype"] != (self.preset.unquantised_dtype or self.preset.compute_dtype)):
                out.append(f"{m.spec}: 4-bit NF4 computing in {prec['compute_dtype']}, vision tower, connector, "
                           f"embeddings and LM head in {prec['unquantised_dtype']}, instead of the release's "
                           f"{self.preset.compute_dtype} and {self.preset.unquantised_dtype} (chosen for this device)")
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
    doc = read_json(meta, "the adapter's training record")
    cfg = (doc.get("config") if isinstance(doc, dict) else None) or {}
    stage = cfg.get("stage")
    if (role == "detector") != (stage == "detect"):
        raise InputError(f"adapter {spec.adapter} was trained for the {stage} stage, not as the {role}")
    rep = cfg.get("repetition_penalty")
    return GenerationPreset(int(cfg.get("eval_max_new_tokens") or 256),
                            float(rep if rep is not None else (1.5 if stage == "detect" else 1.0)), True)


def build_released(preset: str | None = None, detector: str | None = None, coherence: str | None = None,
                   prompts: str | None = None, drawing: str | None = None, device: str = "auto",
                   quantization: str = "auto", dtype: str = "auto", confidence: str | None = None,
                   engine: str | None = None, served: dict[str, str | None] | None = None,
                   coherence_inputs: str | None = None, answer_reading: str | None = None,
                   processor: str | None = None, http: Any = None) -> ReleasedDice:
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
        p = replace(p, confidence=confidence_name(confidence))
    for role in ("detector", "coherence"):
        gen = trained_generation(getattr(p, role), role)
        if gen is not None:
            p = replace(p, detector_generation=gen) if role == "detector" else replace(p, coherence_generation=gen)
            if role == "coherence":  # `dice train` renders coherence inputs the editlens way: run it as it learned
                p = replace(p, coherence_inputs="editlens")
    if coherence_inputs:
        if coherence_inputs not in RENDERINGS:
            raise InputError(f"--dice-coherence-inputs must be one of {RENDERINGS}, got {coherence_inputs!r}")
        p = replace(p, coherence_inputs=coherence_inputs)
    if answer_reading:
        if answer_reading not in ANSWER_READINGS:
            raise InputError(f"--option dice.dice_answer_reading must be one of {ANSWER_READINGS}, "
                             f"got {answer_reading!r}")
        p = replace(p, answer_reading=answer_reading)
    if processor:
        p = replace(p, processor=processor)
    prompts = prompts or p.prompts
    return ReleasedDice(p, load_official_prompts(prompts) if prompts else None, device, quantization, dtype,
                        engine, served, http)


#: ``--option dice.KEY=VALUE`` keys that make the ``dice`` evaluator run released-style models
#: (``engine``: an inference engine's URL serving both stages; ``engine_detector``/``engine_coherence``:
#: their served names, default ``dice-detector``/``dice-coherence``, ``none`` for no coherence stage)
RELEASED_OPTIONS = ("dice_preset", "dice_detector", "dice_coherence", "dice_prompts", "dice_drawing",
                    "dice_quantization", "dice_confidence", "engine", "engine_detector", "engine_coherence",
                    "dice_coherence_inputs", "dice_answer_reading", "dice_processor")


def released_from_options(options: dict[str, Any]) -> ReleasedDice:
    """The ``dice`` evaluator's released-style pipeline from its options
    (``editlens run ... --dice --option dice.dice_preset=PRESET``)."""
    return build_released(options.get("dice_preset"), options.get("dice_detector"), options.get("dice_coherence"),
                          options.get("dice_prompts"), options.get("dice_drawing"), options.get("device", "auto"),
                          options.get("dice_quantization") or "auto", options.get("dtype", "auto"),
                          options.get("dice_confidence"), options.get("engine"),
                          {"detector": options.get("engine_detector"), "coherence": options.get("engine_coherence")},
                          options.get("dice_coherence_inputs"), options.get("dice_answer_reading"),
                          options.get("dice_processor"), http=options.get("http"))


def load_dice(ref: Any, precision: Any, quantization: str, models: dict[str, str], **recipe: Any) -> ReleasedDice:
    """The ``dice`` kind's loader (:func:`editlens.models.loader.load_model`):
    a preset's recipe (detector, coherence, quantization, ...) as options."""
    preset = Preset.from_dict({"name": getattr(ref, "ref", "custom"), **recipe}, f"dice preset {getattr(ref, 'ref', '')}")
    return ReleasedDice(preset, None, precision.device, quantization if quantization != "none" else "auto",
                        precision.requested.get("dtype", "auto"))

"""EditScore as an evaluator (``editscore``), in its released format.

The release (VectorSpaceLab/EditScore) is a set of PEFT LoRA adapters
(``adapter_config.json`` + ``adapter_model.safetensors``) on
Qwen2.5-VL-7B/72B-Instruct and Qwen3-VL-4B/8B-Instruct. Each judgement is
two generations:

* **SC** (semantic consistency) sees [source, edited] and rates
  [instruction following, absence of over-editing] on 0..scale;
* **PQ** (perceptual quality) sees the edited picture and rates
  [naturalness, absence of artifacts] on 0..scale;

each answer a JSON object, reasoning first, then the score list; the
default scale is 0-25. Scores are divided by scale/10, so every field is on
0-10: ``prompt_following`` = SC[0], ``consistency`` = SC[1],
``perceptual_quality`` = min(PQ), ``overall`` = sqrt(min(SC) x min(PQ))
(the evaluator's value; the release's reward server sends overall / 10).

Self-ensembling (``samples=N``): N sampled passes (temperature 0.7, top-p
0.9, top-k 20, 512 new tokens, as released); every field is the mean over
the passes that parsed (``reduction="average_last"``, the release's
default) or overall = sqrt(mean prompt_following x mean perceptual quality)
(``"average_first"``, as the release computes it). The spread over passes
is recorded. The N passes are drawn from one batched call that shares the
prompt's images (each distinct image is encoded once), so N passes cost
less than N single passes.

Where editlens differs from the release on purpose: an answer that cannot
be read (empty, refusal, prose, cut off, a scale echo such as ``[0, 25]``,
a wrong count or an out-of-range number) makes its pass *unscored*, counted
and kept with the raw text; the release retries, then scores a random
integer (single path) or fills in the scale's middle (batch path). A sample
none of whose passes parsed is unscored, never given a number.

Prompt wording: editlens ships its own (``editscore_sc.txt``,
``editscore_pq.txt``); ``prompts=PATH`` reads the authors' wording from a
local clone of their repository (``editscore/vie_prompts.py``, parsed, not
imported), composed the way the release composes it. Every result records
whether prompts and input format are identical to the release.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from editlens.backends.local import TransformersBackend
from editlens.backends.types import (
    ChatRequest,
    Generation,
    GenerationSettings,
    Message,
    is_backend_failure,
    part_pixels,
)
from editlens.core.cache import cache_option
from editlens.core.types import LoadedEdit, Score
from editlens.errors import InputError, ModelUnavailableError
from editlens.judges.parsing import parse_object, refusal_in
from editlens.metrics.base import Metric
from editlens.rewardmodels import common
from editlens.templates.clones import find_module, module_strings

#: where the prompts module sits inside a clone of the EditScore repository
PROMPT_MODULES = ("editscore/vie_prompts.py", "vie_prompts.py")
#: module-level strings read from it, and how the release joins them (see :func:`official_prompts`)
PROMPT_NAMES = {"context": "_context_no_delimit_reasoning_first", "sc_rule": "_prompts_0shot_two_image_edit_rule",
                "sc_scale": "_prompts_0shot_tie_rule_SC", "pq_rule": "_prompts_0shot_rule_PQ"}
#: the delimiter VIEScore-style answers may put around their JSON
DELIMITER = "||V^=^V||"
#: the release's generation settings
RELEASE_SAMPLING: dict[str, Any] = {"temperature": 0.7, "top_p": 0.9, "top_k": 20, "max_new_tokens": 512, "seed": 42}
#: how the passes are seeded: one request of ``samples`` draws, or one request per pass seeded 42 + i (the release)
SEEDINGS = ("batched", "release")
#: Qwen's default system turn, which the release's hand-built Qwen2.5 prompt carries
QWEN_SYSTEM = "You are a helpful assistant."
FAMILIES = ("qwen2_5_vl", "qwen3_vl")
REDUCTIONS = ("average_last", "average_first")
FIELDS = ("prompt_following", "consistency", "perceptual_quality", "overall")


# -------------------------------------------------------------------------------------------- answers

#: how answers are read: ``strict`` (editlens' reading: exactly two scores in range, no scale echo, no refusal)
#: or ``release`` (the release's reading where it invents nothing)
ANSWER_READINGS = ("strict", "release")
#: the one answer the release treats as a refusal (it then scores a random integer; editlens leaves it unscored)
RELEASE_REFUSAL = "I'm sorry, but I can't assist with that request."


def read_answer(text: str | None, scale: float, truncated: bool = False, reading: str = "strict",
                least: int = 2) -> tuple[list[float] | None, str | None, str | None]:
    """``(scores, reasoning, problem)`` of one EditScore answer.

    ``reading="release"`` reads as the release's ``mllm_output_to_dict`` and
    ``evaluate`` do (EditScore ``editscore/utils.py``, ``editscore/__init__.py``),
    except where the release invents a score: any number of scores, at least
    ``least`` (SC needs two: the release reads ``score[1]``; PQ one), values
    outside ``[0, scale]`` kept, the scale echo ``[0, 25]`` scored, refusal
    phrases read like any text, a bare whole number 0-10 read as one score;
    the release's random integer for an answer it cannot parse (or its one
    refusal sentence) stays unscored here, as does a negative score (the
    release's square root fails on it).

    Read: a JSON (or Python-literal) object whose ``score`` is a list of two
    numbers in ``[0, scale]`` (``reasoning`` kept when it is text), between
    ``||V^=^V||`` delimiters or code fences or not; or an answer that is
    only such a list. Anything else gives ``scores=None`` and the reason.

    >>> read_answer('{"reasoning": "hat added", "score": [20, 25]}', 25)
    ([20.0, 25.0], 'hat added', None)
    >>> read_answer("[0, 25]", 25)[2]
    'the answer only repeats the scale [0, 25] instead of rating the edit'
    >>> read_answer('{"reasoning": "The hat', 25, truncated=True)[2]
    'answer cut off at the token limit inside its JSON'
    """
    if reading == "release":
        return _read_as_release(text, scale, truncated, least)
    if text is None or not text.strip():
        return None, None, "empty answer"
    refused = refusal_in(text)
    if refused:
        return None, None, f"model refused: {refused}"
    body = text.strip()
    if body.count(DELIMITER) == 2:
        body = body.split(DELIMITER)[1]
    body = re.sub(r"```(?:json|python)?", "", body).strip()
    top = _fmt(scale)
    if "{" in body:
        obj = parse_object(body)
        if obj is None:
            if "}" not in body[body.index("{"):]:
                return None, None, ("answer cut off at the token limit inside its JSON" if truncated
                                    else "the JSON object is not closed")
            return None, None, "the JSON object cannot be read"
        reasoning = obj.get("reasoning") if isinstance(obj.get("reasoning"), str) else None
        key = next((k for k in ("score", "scores") if k in obj), None)
        if key is None:
            return None, reasoning, "the JSON object has no 'score' field"
        scores = _numbers(obj[key])
        if scores is None:
            return None, reasoning, f"the JSON 'score' field is not a list of numbers: {obj[key]!r}"[:300]
        if (not reasoning or reasoning.strip(" .") == "") and scores == [0.0, float(scale)]:
            return None, reasoning, f"the answer only repeats the scale [0, {top}] instead of rating the edit"
        where = "the JSON 'score' field"
    else:
        scores = _numbers(_literal(body))
        if scores is None:
            if truncated:
                return None, None, "answer cut off at the token limit before any score"
            return None, None, "no JSON object with a score list in the answer"
        if scores == [0.0, float(scale)]:
            return None, None, f"the answer only repeats the scale [0, {top}] instead of rating the edit"
        reasoning, where = None, "the answer"
    if len(scores) != 2:
        return None, reasoning, f"{where} has {len(scores)} score(s), expected 2"
    if any(not 0 <= s <= scale for s in scores):
        return None, reasoning, f"{where} has a score outside [0, {top}]: {[_fmt(s) for s in scores]}"
    return scores, reasoning, None


def _read_as_release(text: str | None, scale: float, truncated: bool, least: int
                     ) -> tuple[list[float] | None, str | None, str | None]:
    if text is None or not text.strip():
        return None, None, "empty answer (the release scores a random integer; unscored here)"
    if text == RELEASE_REFUSAL:
        return None, None, "model refused (the release scores a random integer; unscored here)"
    body = text
    if body.count(DELIMITER) == 2:
        body = body[body.find(DELIMITER) + len(DELIMITER):body.rfind(DELIMITER)]
    elif "{" in body and "}" in body[body.find("{"):]:
        body = body[body.find("{"):body.rfind("}") + 1]
    else:
        span = body[body.find("["):body.rfind("]") + 1] if "[" in body else ""
        if re.match(r"^\[\d+, ?\d+\]$", span):
            return [float(v) for v in json.loads(span)], None, None
        if re.fullmatch(r"\s*[+-]?\d+\s*", body) and 0 <= int(body) <= 10:
            return [float(int(body))], None, None
        why = "answer cut off at the token limit before any score" if truncated else "no JSON object with a score list"
        return None, None, why + " (the release scores a random integer; unscored here)"
    body = body.strip().replace("\n", "")
    for a, b in (("\u201c", '"'), ("\u201d", '"'), ("\u2018", "'"), ("\u2019", "'")):
        body = body.replace(a, b)
    obj = parse_object(body)
    if not isinstance(obj, dict) or "score" not in obj:
        return None, None, "the JSON object cannot be read or has no 'score' (the release repairs or guesses; unscored here)"
    value = obj["score"] if isinstance(obj["score"], list) else [obj["score"]]
    scores = _numbers(value)
    reasoning = obj.get("reasoning") if isinstance(obj.get("reasoning"), str) else None
    if scores is None:
        return None, reasoning, f"the 'score' field is not a list of numbers: {obj['score']!r}"[:300]
    if len(scores) < least:
        return None, reasoning, f"{len(scores)} score(s) where the release reads {least} (it fails on this answer)"
    if any(v < 0 for v in scores):
        return None, reasoning, "a negative score (the release's square root fails on it)"
    return scores, reasoning, None


def _fmt(x: float) -> Any:
    return int(x) if float(x).is_integer() else x


def _literal(text: str) -> Any:
    import ast

    for parse in (json.loads, ast.literal_eval):
        try:
            return parse(text)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
    return None


def _numbers(value: Any) -> list[float] | None:
    """The value as a list of finite numbers, or ``None`` (text, booleans and nesting are not numbers)."""
    if not isinstance(value, (list, tuple)) or not value:
        return None
    if any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in value):
        return None
    out = [float(v) for v in value]
    return out if all(math.isfinite(v) for v in out) else None


def pass_scores(sc: Sequence[float], pq: Sequence[float], scale: float) -> dict[str, float]:
    """One pass's fields on 0-10, as the release computes them.

    >>> round(pass_scores([20, 25], [15, 25], 25)["overall"], 4)  # sqrt(20 / 2.5 * 15 / 2.5)
    6.9282
    """
    div = scale / 10.0
    return {"prompt_following": sc[0] / div, "consistency": sc[1] / div, "perceptual_quality": min(pq) / div,
            "overall": math.sqrt(min(sc) / div * min(pq) / div)}


def combine_passes(passes: Sequence[dict[str, float]], reduction: str = "average_last") -> dict[str, float]:
    """The fields over parsed passes: each the mean (``average_last``); with
    ``average_first`` overall = sqrt(mean prompt_following x mean perceptual
    quality), which is what the release computes under that name."""
    out = {f: float(np.mean([p[f] for p in passes])) for f in FIELDS}
    if reduction == "average_first":
        out["overall"] = math.sqrt(out["prompt_following"] * out["perceptual_quality"])
    return out


# -------------------------------------------------------------------------------------------- prompts

@dataclass(frozen=True)
class PromptSet:
    """How SC and PQ requests are worded: editlens' templates, or the authors' text."""

    source: str
    official: bool
    sc_text: str = ""  # official: the SC text with <instruction> still in it
    pq_text: str = ""
    templates: dict[str, Any] = field(default_factory=dict)
    pq_images: str = "edited"

    @property
    def sha256(self) -> str:
        if self.official:
            return common.prompts_sha(self.sc_text, self.pq_text, self.pq_images)
        return common.prompts_sha(*(t.text for t in self.templates.values()))

    def sc_parts(self, s: LoadedEdit, scale: int) -> list[Any]:
        if self.official:
            return [s.source, s.edited, self.sc_text.replace("<instruction>", s.instruction)]
        return self.templates["editscore_sc"].render({"source": s.source, "edited": s.edited},
                                                     instruction=s.instruction, scale=str(scale))

    def pq_parts(self, s: LoadedEdit, scale: int) -> list[Any]:
        if self.official:
            imgs = [s.edited] if self.pq_images == "edited" else [s.source, s.edited]
            return [*imgs, self.pq_text]
        return self.templates["editscore_pq"].render({"source": s.source, "edited": s.edited},
                                                     instruction=s.instruction, scale=str(scale))

    def describe(self) -> dict[str, Any]:
        return {"source": self.source, "official": self.official, "sha256": self.sha256,
                "pq_images": self.pq_images if self.official else "as the template places them"}


def official_prompts(path: str | Path, scale: int, pq_images: str = "edited") -> PromptSet:
    """The authors' SC and PQ prompts from a clone of the EditScore repository
    (or its ``vie_prompts.py``), joined as the release joins them: context,
    rules and scale text, with every ``10`` of the scale text replaced by the
    scale's upper bound."""
    module = find_module(path, PROMPT_MODULES, "--option editscore.prompts", "the EditScore repository")
    found = module_strings(module, "--option editscore.prompts")
    missing = [v for v in PROMPT_NAMES.values() if v not in found]
    if missing:
        raise InputError(f"--option editscore.prompts {module}: looked for the string assignments "
                         f"{', '.join(PROMPT_NAMES.values())}; missing: {', '.join(missing)}")
    g = {k: found[v] for k, v in PROMPT_NAMES.items()}
    if "<instruction>" not in g["sc_scale"]:
        raise InputError(f"--option editscore.prompts {module}: {PROMPT_NAMES['sc_scale']} has no <instruction> "
                         "placeholder")
    sc = "\n".join([g["context"], g["sc_rule"], g["sc_scale"].replace("10", str(scale))])
    pq = "\n".join([g["context"], g["pq_rule"].replace("10", str(scale))])
    return PromptSet(f"official prompts parsed from {module}", True, sc, pq, pq_images=pq_images)


def own_prompts(overrides: dict[str, str] | None = None) -> PromptSet:
    from editlens.judges.templates import load_template

    t = {n: load_template(n, overrides) for n in ("editscore_sc", "editscore_pq")}
    return PromptSet("editlens wording (" + ", ".join(x.source for x in t.values()) + ")", False, templates=t)


# -------------------------------------------------------------------------------------------- model

class EditScoreBackend(TransformersBackend):
    """The local backend around a LoRA-merged (or 4-bit + LoRA) Qwen-VL, with
    the release's prompt format: for Qwen2.5-VL a hand-built chat text whose
    images are labelled ``<img1>: ``, ``<img2>: `` (the processor's chat
    template cannot number images); for Qwen3-VL the processor's own template."""

    name = "editscore"
    label_images = False
    #: what ran (``describe_precision`` of the loaded model), set by the loader
    weights: dict[str, Any] | None = None

    def _prompt(self, req: ChatRequest) -> tuple[str, list[Any]]:
        if not self.label_images:
            return super()._prompt(req)
        from PIL import Image

        text, images = "", []
        for m in req.messages:
            if m.role != "user":
                raise ValueError("the EditScore prompt format has one user turn")
            for p in m.parts:
                if isinstance(p, str):
                    text += p
                else:
                    images.append(Image.fromarray(part_pixels(p)))
                    text += f"<img{len(images)}>: <|vision_start|><|image_pad|><|vision_end|>"
        full = (f"<|im_start|>system\n{QWEN_SYSTEM}<|im_end|>\n<|im_start|>user\n{text}<|im_end|>\n"
                "<|im_start|>assistant\n")
        return full, images


@dataclass
class EditScoreModel:
    backend: EditScoreBackend
    family: str
    adapter: dict[str, Any]  # provenance
    base: dict[str, Any]
    quantized: bool
    merged: bool
    notes: list[str] = field(default_factory=list)


def split_ref(ref: str, base: str | None) -> tuple[str | None, str]:
    """``(base, adapter)`` of ``ADAPTER`` or ``BASE+ADAPTER``, split as everywhere
    (:func:`editlens.models.vlm.parse_reference`); ``base`` fills a missing base."""
    from editlens.models.vlm import parse_reference

    r = parse_reference(ref, single="adapter")
    return r.base or base, str(r.adapter)


def adapter_base(adapter_path: Path) -> str | None:
    from editlens.core.io import read_json

    try:
        doc = read_json(adapter_path / "adapter_config.json")
    except InputError:  # no base named: the caller asks for one
        return None
    return doc.get("base_model_name_or_path") if isinstance(doc, dict) else None


def _normalise_adapter_key(key: str) -> str:
    """Adapter keys written against older transformers (``model.layers...``,
    ``visual...``) renamed to today's Qwen-VL layout (``model.language_model...``,
    ``model.visual...``)."""
    prefix = "base_model.model."
    if not key.startswith(prefix):
        return key
    rest = key[len(prefix):]
    if rest.startswith("visual."):
        rest = "model." + rest
    elif rest.startswith("model.") and not rest.startswith(("model.language_model.", "model.visual.")):
        rest = "model.language_model." + rest[len("model."):]
    return prefix + rest


def load_processor(path: Path, model_type: str) -> Any:
    from editlens.models.vlm import load_processor as load

    return load(path, model_type)


def load_editscore(ref: Any, precision: Any, quantization: str, models: dict[str, str], base: str | None = None,
                   batch_size: int = 8, **_recipe: Any) -> EditScoreModel:
    """The ``editscore`` kind's loader (:func:`editlens.models.loader.load_model`):
    ``ref`` is the adapter (hub id or folder) or ``BASE+ADAPTER``; the base
    defaults to the recipe's, then to the adapter's ``base_model_name_or_path``."""
    from editlens.backends import vision_batching
    from editlens.models.quant import describe_precision
    from editlens.models.registry import family_for
    from editlens.models.vlm import VlmReference, load_vlm

    option = "--option editscore.quantization"
    base_ref, adapter_ref = split_ref(ref.ref, base)
    adapter_path = common.locate(adapter_ref, "EditScore adapter")
    base_ref = base_ref or adapter_base(adapter_path)
    if not base_ref:
        raise ModelUnavailableError(f"EditScore adapter {adapter_path}: no base model named (adapter_config.json has "
                                    "no base_model_name_or_path); pass --option editscore.base=HUB_ID_OR_DIR")
    base_path = common.locate(base_ref, "EditScore base model")
    model_type = _model_type(base_path)
    if model_type not in FAMILIES:
        raise ModelUnavailableError(f"EditScore base {base_ref}: a {model_type!r} model; EditScore adapters sit on "
                                    f"{' or '.join(FAMILIES)}")
    family = family_for(model_type)
    stats_box: dict[str, Any] = {}

    def tower(model: Any, _model_type: str) -> None:
        if family is not None and family.vision_tower:
            stats_box["stats"] = vision_batching.install(model, family.vision_tower, precision.device)

    # the release's recipe: the adapter merged into unquantised weights (4-bit only when asked; then unmerged)
    loaded = load_vlm(VlmReference(str(base_path), str(adapter_path)), precision.device, quantization, merge=True,
                      dtype=precision.dtype,
                      option=option, key_map=_normalise_adapter_key, before_adapter=tower)
    model, q4, merged, notes = loaded.model, loaded.quantized, loaded.merged, list(loaded.notes)
    stats = stats_box.get("stats")
    processor = load_processor(base_path, model_type)
    adapter_prov = common.provenance(adapter_path, adapter_ref)
    base_prov = common.provenance(base_path, base_ref)
    revision = json.dumps({"base": common.short_id(base_prov), "adapter": common.short_id(adapter_prov),
                           "quantized": q4, "merged": merged}, sort_keys=True)
    backend = EditScoreBackend.from_loaded(model, processor, model_type=model_type,
                                           model_id=f"editscore:{base_ref}+{adapter_ref}", revision=revision,
                                           precision=precision, batch_size=batch_size)
    backend.tower_stats = stats
    backend.label_images = model_type == "qwen2_5_vl"
    backend.weights = describe_precision(model)
    return EditScoreModel(backend, model_type, adapter_prov, base_prov, q4, merged, notes)


def _model_type(path: Path) -> str:
    from editlens.models.vlm import model_type_of

    return model_type_of(path)


def preset_available(preset: Any, models: dict[str, str]) -> tuple[bool, str | None]:
    """``editscore`` presets: the adapter and its base present here (no download)?"""
    from editlens.models.resolve import model_reference

    ref = model_reference(preset.role or preset.ref or preset.name, models).ref
    return _present(ref, preset.recipe.get("base"))


def _present(ref: str, base: str | None) -> tuple[bool, str | None]:
    base, adapter = split_ref(ref, base)
    if not common.is_present(adapter):
        return False, (f"EditScore adapter {adapter!r} is not here: `hf download {adapter}` on a machine with internet "
                       "(then copy the cache) or pass --model editscore=ADAPTER_DIR")
    if base is None and Path(adapter).expanduser().is_dir():
        base = adapter_base(Path(adapter).expanduser())
    if base and not common.is_present(base):
        return False, (f"EditScore base {base!r} is not here: `hf download {base}` or pass "
                       "--option editscore.base=DIR")
    return True, None


def check_available(options: dict[str, Any], models: dict[str, str]) -> tuple[bool, str | None]:
    """Spec availability of ``editscore`` (options ``model``, ``base``; with ``engine`` nothing is loaded here)."""
    if options.get("engine"):
        return True, None
    from editlens.models.registry import get_preset, is_preset
    from editlens.models.resolve import model_reference

    name = str(options.get("model") or "editscore")
    recipe_base = None
    if is_preset(name) and name not in models:
        p = get_preset(name, "editscore")
        recipe_base, name = p.recipe.get("base"), p.role or p.ref or name
    ref = model_reference(name, models).ref
    if ref == "editscore":
        return False, "no EditScore checkpoint: pass --model editscore=ADAPTER_DIR or --option editscore.model=PRESET"
    return _present(ref, options.get("base") or recipe_base)


# -------------------------------------------------------------------------------------------- evaluator

class EditScoreEvaluator(Metric):
    """The ``editscore`` evaluator.

    Options:
        model: a preset (``editscore-7b``, ``editscore-72b``,
            ``editscore-qwen3-vl-4b``, ``editscore-qwen3-vl-8b``), an adapter
            (hub id or folder) or ``BASE+ADAPTER``; default role ``editscore``
            (``--model editscore=DIR``), whose preset is EditScore-7B.
        base: the base model (default: the preset's, then the adapter's own).
        prompts: a clone of the EditScore repository (or its
            ``vie_prompts.py``) to use the authors' wording; default editlens'.
        templates: ``{"editscore_sc": FILE, "editscore_pq": FILE}`` wording overrides.
        scale: upper bound of the rating scale (25, as released).
        samples: passes per judgement (self-ensembling; the release's ``num_pass``).
        temperature, top_p, top_k, seed, max_new_tokens: sampling (0.7, 0.9,
            20, 42, 512 as released; temperature 0 is greedy and allows one pass).
        reduction: ``average_last`` (as released) or ``average_first``.
        seeding: ``batched`` (default: the ``samples`` passes drawn in one
            request seeded ``seed``) or ``release`` (as the release: pass ``i``
            is its own request seeded ``seed + i``, i.e. 42, 43, ...; the seeds
            are recorded in each result). Either way the draws come from
            editlens' sampler, not from the release's torch RNG.
        pq_images: with the authors' prompts, the images PQ sees: ``edited``
            (the release's single-item path) or ``both`` (its batch path).
        quantization: ``none`` (default, as released: unquantised, the LoRA merged
            into the base), ``nf4`` (4-bit NF4, adapter left unmerged) or ``auto``
            (4-bit only on CUDA with bitsandbytes). Recorded in every result.
        batch_size: edits per generate call (each is two requests, SC and PQ).
        cache (``True``, a path, or ``none``), device, dtype.
        engine: URL of an inference engine serving the adapter (vLLM:
            ``--lora-modules editscore=ADAPTER``); then nothing is loaded here
            and the requests carry the same chat structure, image labels and
            sampling settings (top-k, top-p, seed) as API fields.
        served_model: the adapter's name on the engine (``editscore``).
        family: ``qwen2_5_vl`` or ``qwen3_vl`` of the served base (default:
            read from the served name or its root).
        answer_reading: ``strict`` (default: exactly two scores in range; the
            scale echo ``[0, 25]`` and refusals unscored) or ``release`` (the
            release's reading where it invents nothing; see :func:`read_answer`).
    """

    def __init__(self, model: str | None = None, base: str | None = None, prompts: str | None = None,
                 templates: dict[str, str] | None = None, scale: int = 25, samples: int = 1,
                 temperature: float = RELEASE_SAMPLING["temperature"], top_p: float = RELEASE_SAMPLING["top_p"],
                 top_k: int = RELEASE_SAMPLING["top_k"], seed: int = RELEASE_SAMPLING["seed"],
                 max_new_tokens: int = RELEASE_SAMPLING["max_new_tokens"], reduction: str = "average_last",
                 pq_images: str = "edited", quantization: str = "none", batch_size: int = 8, cache: Any = True,
                 device: str = "auto", dtype: str = "auto", models: dict[str, str] | None = None,
                 engine: str | None = None, served_model: str = "editscore", family: str | None = None,
                 seeding: str = "batched", answer_reading: str = "strict", http: Any = None) -> None:
        from editlens.judges.ensemble import check_sampling
        from editlens.models.quant import normalise_choice

        if int(scale) != scale or scale < 1:
            raise ValueError(f"editscore: scale must be a whole number >= 1, got {scale!r}")
        check_sampling(samples, temperature)
        if reduction not in REDUCTIONS:
            raise ValueError(f"editscore: reduction must be one of {', '.join(REDUCTIONS)}, got {reduction!r}")
        if pq_images not in ("edited", "both"):
            raise ValueError(f"editscore: pq_images must be edited or both, got {pq_images!r}")
        if not 0 < float(top_p) <= 1 or int(top_k) < 0:
            raise ValueError(f"editscore: top_p must be in (0, 1] and top_k >= 0, got {top_p}, {top_k}")
        self.model_ref = str(model) if model else "editscore"
        self.http = http  # how the engine's answers are fetched (backends.factory.HttpSettings; None: built in)
        self.base = base
        self.scale, self.samples, self.temperature = int(scale), int(samples), float(temperature)
        self.top_p, self.top_k, self.seed = float(top_p), int(top_k), int(seed)
        self.max_new_tokens, self.reduction, self.batch_size = int(max_new_tokens), reduction, int(batch_size)
        if seeding not in SEEDINGS:
            raise ValueError(f"editscore: seeding must be one of {', '.join(SEEDINGS)}, got {seeding!r}")
        self.seeding = seeding
        if answer_reading not in ANSWER_READINGS:
            raise ValueError(f"editscore: answer_reading must be one of {', '.join(ANSWER_READINGS)}, "
                             f"got {answer_reading!r}")
        self.answer_reading = answer_reading
        self.quantization = normalise_choice(quantization, "--option editscore.quantization")
        self.device, self.dtype, self.models = device, dtype, dict(models or {})
        self.prompts = official_prompts(prompts, self.scale, pq_images) if prompts else own_prompts(templates)
        self._cache_opt = cache_option(cache)
        self._loaded: EditScoreModel | None = None
        self._backend: Any = None
        if family is not None and family not in FAMILIES:
            raise ValueError(f"editscore: family must be one of {', '.join(FAMILIES)}, got {family!r}")
        self.engine, self.served_model, self.family = engine or None, served_model, family

    # -- model ------------------------------------------------------------------------
    def _load(self) -> EditScoreModel:
        if self._loaded is None:
            from editlens.models.loader import load_model

            # requests per generate call: SC and PQ of each edit
            opts: dict[str, Any] = {"batch_size": 2 * self.batch_size}
            if self.base:
                opts["base"] = self.base
            self._loaded = load_model(self.model_ref, kind="editscore", device=self.device, dtype=self.dtype,
                                      quantization=self.quantization, models=self.models, **opts)
        return self._loaded

    @property
    def backend(self) -> Any:
        """The (cached) backend that answers SC/PQ requests."""
        if self._backend is None and self.engine:
            self._backend = self._engine_backend(self.engine)
        if self._backend is None:
            loaded = self._load()
            # top-p/top-k are not in the requests: set for every call (the loaded model may be shared) and
            # part of the cache key
            be: Any = _Keyed(loaded.backend, {"top_p": self.top_p, "top_k": self.top_k},
                             {"label_images": loaded.backend.label_images})
            if self._cache_opt:
                from editlens.backends.cache import CachedBackend, ResponseCache

                be = CachedBackend(be, ResponseCache(None if self._cache_opt is True else self._cache_opt))
            self._backend = be
        return self._backend

    def _engine_backend(self, engine: str) -> Any:
        from editlens.backends.engine import EngineNeeds
        from editlens.backends.factory import create_backend
        from editlens.backends.families import family_from_name

        images = 2  # SC: source and edited
        be = create_backend(engine, cache=self._cache_opt, http_model=self.served_model,
                            model_option="--option editscore.served_model",
                            needs=EngineNeeds(images, False, self.max_new_tokens), who="editscore",
                            engine_option="--option editscore.engine", http=self.http)
        raw = getattr(be, "backend", be)
        entry: dict[str, Any] = next((m for m in raw.models_answer if m.get("id") == raw.model_id), {})
        family = self.family
        for name in (raw.model_id, entry.get("root"), entry.get("parent")):
            family = family or family_from_name(name)
        if family not in FAMILIES:
            raise ModelUnavailableError(
                f"editscore: cannot tell the family of {raw.model_id!r} at {self.engine} from its name "
                f"({entry.get('root')!r}); pass --option editscore.family=qwen2_5_vl (EditScore-7B/72B) or qwen3_vl")
        self.family = family
        self._engine_notes = []
        if getattr(raw, "dialect", None) == "sglang":
            from editlens.backends.engine import engine_honours_seed

            if self.temperature > 0 and engine_honours_seed(raw) is not True:
                self._engine_notes.append(
                    "seeds: SGLang uses a request's seed only when started with --enable-deterministic-inference "
                    "(its /get_server_info does not say so): the sampled passes are not reproducible")
            for note in self._engine_notes:  # said at start, recorded with every result
                import logging

                logging.getLogger("editlens.editscore").warning("editscore on %s: %s", self.engine, note)
        return _EngineFormat(be, family == "qwen2_5_vl", self.top_p, self.top_k)

    def _engine_describe(self) -> dict[str, Any]:
        from editlens.backends.types import backend_provenance

        be = self.backend
        return {"engine": backend_provenance(getattr(be, "backend", be)), "served_model": self.served_model,
                "family": self.family}

    def release(self) -> dict[str, Any]:
        """Whether prompts and format are those of the release, and what differs."""
        diffs = []
        if not self.prompts.official:
            diffs.append("prompt wording: editlens' own (pass --option editscore.prompts=CLONE for the authors')")
        elif self.prompts.pq_images == "both":
            diffs.append("PQ sees [source, edited] (the release's batch path; its single-item path sees the edit only)")
        sampling = {"temperature": self.temperature, "top_p": self.top_p, "top_k": self.top_k,
                    "max_new_tokens": self.max_new_tokens}
        if any(sampling[k] != RELEASE_SAMPLING[k] for k in sampling):
            diffs.append(f"sampling {sampling} (released: temperature 0.7, top_p 0.9, top_k 20, 512 new tokens)")
        if self.scale != 25:
            diffs.append(f"scale 0-{self.scale} (released default 0-25)")
        if self.reduction != "average_last":
            diffs.append("reduction average_first (released default average_last)")
        loaded = self._loaded
        if loaded is not None and not loaded.merged:
            diffs.append("4-bit base with the adapter unmerged (the release merges it into bf16 weights)")
        notes = ["sampling: the release's settings, drawn by editlens' sampler, not the release's torch RNG: other "
                 "draws per pass" + (f"; the {self.samples} passes are drawn in one request, not seeded "
                                     f"{self.seed}..{self.seed + self.samples - 1} (seeding=release)"
                                     if self.samples > 1 and self.seeding != "release" else ""),
                 "unreadable answers are unscored (the release retries twice, then scores a random integer)"]
        if self.answer_reading != "release":
            notes.append("answer reading: strict (a score count other than 2, values outside the scale, the scale "
                         "echo [0, 25] and refusal phrases are unscored; the release scores them: "
                         "--option editscore.answer_reading=release)")
        notes += list(getattr(self, "_engine_notes", None) or [])
        return {"prompts_identical": self.prompts.official, "format_identical": not [d for d in diffs
                                                                                       if not d.startswith("prompt")],
                "identical_to_release": False, "differences": diffs + notes, "notes": notes}

    def describe(self) -> dict[str, Any]:
        if self.engine:
            return {**super().describe(), **self._engine_describe(), "prompts": self.prompts.describe(),
                    "release": self.release()}
        loaded = self._load()
        from editlens.models.precision import decide

        return {**super().describe(), "checkpoint": {"adapter": loaded.adapter, "base": loaded.base},
                "family": loaded.family, "quantized_4bit": loaded.quantized, "adapter_merged": loaded.merged,
                "weights": getattr(loaded.backend, "weights", None), "notes": loaded.notes,
                "dtype": decide(self.dtype, self.device, "quantized" if loaded.quantized else "inference").dtype,
                "prompts": self.prompts.describe(), "release": self.release()}

    # -- scoring ------------------------------------------------------------------------
    def pass_seeds(self) -> list[int] | None:
        """The seed of each pass with ``seeding=release`` (42, 43, ...); ``None`` otherwise (or greedy)."""
        if self.seeding != "release" or self.temperature <= 0:
            return None
        return [self.seed + i for i in range(self.samples)]

    def requests(self, batch: Sequence[LoadedEdit]) -> list[ChatRequest]:
        """Per edit: [SC, PQ] (one request of ``samples`` draws each), or with
        ``seeding=release`` [SC pass 1..N, PQ pass 1..N], pass i seeded ``seed + i``."""
        seeds = self.pass_seeds()
        per_pass = [GenerationSettings(max_new_tokens=self.max_new_tokens, temperature=self.temperature, n=1, seed=x)
                    for x in seeds] if seeds else [
            GenerationSettings(max_new_tokens=self.max_new_tokens, temperature=self.temperature,
                               n=self.samples if self.temperature > 0 else 1,
                               seed=self.seed if self.temperature > 0 else None)]
        reqs = []
        for s in batch:
            for parts in (self.prompts.sc_parts(s, self.scale), self.prompts.pq_parts(s, self.scale)):
                reqs += [ChatRequest([Message("user", parts)], st) for st in per_pass]
        return reqs

    def _merge_passes(self, gens: Sequence[Generation]) -> Generation:
        """One request's passes (``seeding=release``) as one generation of ``len(gens)`` samples."""
        if len(gens) == 1:
            return gens[0]
        bad = next((g for g in gens if is_backend_failure(g.problem) or g.text is None), None)
        if bad is not None:
            return bad
        return Generation(gens[0].text, cached=all(g.cached for g in gens), samples=[str(g.text) for g in gens])

    def compute(self, batch: Sequence[LoadedEdit]) -> list[float | Score]:
        reqs = self.requests(batch)
        per = len(reqs) // max(1, len(batch))  # requests per edit: 2, or 2 x samples with seeding=release
        gens = []
        for k in range(0, len(reqs), per * self.batch_size):
            gens += self.backend.generate(reqs[k : k + per * self.batch_size])
        short = self.short_release()
        half = per // 2
        return [self.score_answers(self._merge_passes(gens[per * i : per * i + half]),
                                   self._merge_passes(gens[per * i + half : per * (i + 1)]), short)
                for i in range(len(batch))]

    def short_release(self) -> dict[str, Any]:
        """What each result records about the release (the full account is in describe())."""
        rel = self.release()
        if self.engine:
            be = getattr(self.backend, "backend", self.backend)
            return {"engine": getattr(be, "base_url", self.engine), "served_model": self.served_model,
                    "seeding": self.seeding, **({"pass_seeds": self.pass_seeds()} if self.pass_seeds() else {}),
                    "prompts_identical": rel["prompts_identical"], "format_identical": rel["format_identical"],
                    "identical_to_release": rel["identical_to_release"],
                    "differences_from_release": rel["differences"]}
        loaded = self._load()
        return {"adapter": common.short_id(loaded.adapter), "base": common.short_id(loaded.base),
                "quantized_4bit": loaded.quantized, "adapter_merged": loaded.merged, "seeding": self.seeding,
                **({"pass_seeds": self.pass_seeds()} if self.pass_seeds() else {}),
                "prompts_identical": rel["prompts_identical"], "format_identical": rel["format_identical"],
                "identical_to_release": rel["identical_to_release"],
                "differences_from_release": rel["differences"]}

    def score_answers(self, sc: Generation, pq: Generation, release: dict[str, Any] | None = None) -> Score:
        """One sample's Score from its SC and PQ generations (each with ``samples`` answers)."""
        for g in (sc, pq):
            if is_backend_failure(g.problem):
                return Score(self.name, None, "failed", g.problem)
        sc_answers: Sequence[str | None] = sc.samples or [sc.text]
        pq_answers: Sequence[str | None] = pq.samples or [pq.text]
        passes: list[dict[str, Any]] = []
        parsed: list[dict[str, Any]] = []
        for k, (a, b) in enumerate(zip(sc_answers, pq_answers)):
            one: dict[str, Any] = {"pass": k + 1}
            problems = []
            sc_scores = pq_scores = None
            why: dict[str, str | None] = {}
            for name, text, g in (("SC", a, sc), ("PQ", b, pq)):
                refusal = g.refusal if len(sc_answers) == 1 else None
                if refusal:
                    problems.append(f"{name}: model refused: {refusal}")
                    continue
                scores, reasoning, problem = read_answer(text, self.scale, truncated=g.truncated and len(sc_answers) == 1,
                                                         reading=self.answer_reading, least=2 if name == "SC" else 1)
                why[name] = reasoning
                if scores is None:
                    problems.append(f"{name}: {problem}")
                elif name == "SC":
                    sc_scores = scores
                else:
                    pq_scores = scores
            if problems or sc_scores is None or pq_scores is None:
                passes.append({**one, "problem": "; ".join(problems), "raw": {"SC": a, "PQ": b}})
                continue
            fields = pass_scores(sc_scores, pq_scores, self.scale)
            passes.append({**one, "SC": sc_scores, "PQ": pq_scores, **fields, "reasoning": why})
            parsed.append(passes[-1])
        details: dict[str, Any] = {"scale": self.scale, "passes": passes, "samples": len(passes),
                                   "unscored_passes": len(passes) - len(parsed)}
        if release:
            details["release"] = release
        if sc.cached and pq.cached:
            details["cached"] = True
        if not parsed:
            reasons = "; ".join(p["problem"] for p in passes[:3])
            return Score(self.name, None, "unscored",
                         (f"none of the {len(passes)} passes could be read: " if len(passes) > 1 else "") + reasons,
                         {**details, "raw": [p["raw"] for p in passes]})
        combined = combine_passes(parsed, self.reduction)
        details.update(combined)
        details["reward"] = combined["overall"] / 10.0  # the release's reward server value
        details["reasoning"] = parsed[-1]["reasoning"]  # the release keeps the last pass's
        if len(parsed) > 1:
            details["std"] = {f: float(np.std([p[f] for p in parsed])) for f in FIELDS}
        details["reduction"] = self.reduction
        return Score(self.name, combined["overall"], details=details)


class _Keyed:
    """A backend whose identity (for the response cache) also holds settings
    its requests do not carry (top-p, top-k, the prompt format), and which
    applies its sampling settings to the shared local backend for each call."""

    def __init__(self, backend: Any, sampling: dict[str, Any], extra: dict[str, Any]) -> None:
        import threading

        self.backend = backend
        self.sampling = dict(sampling)
        self.name = backend.name
        self.model_id = backend.model_id
        self.revision = json.dumps({"revision": backend.revision, **sampling, **extra}, sort_keys=True)
        if not hasattr(backend, "_sampling_lock"):
            backend._sampling_lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:  # calls, tower_stats, weights, label_images... of the local backend
        return getattr(self.__dict__["backend"], name)

    def describe(self) -> dict[str, Any]:
        return self.backend.describe()

    def generate(self, requests: Sequence[ChatRequest]) -> list[Generation]:
        with self.backend._sampling_lock:
            self.backend.sampling = dict(self.sampling)
            return self.backend.generate(requests)


class _EngineFormat:
    """EditScore's requests as an engine takes them: for Qwen2.5-VL the
    release's hand-built prompt as chat parts (Qwen's default system turn,
    each image preceded by its ``<imgN>: `` label, which the served model's
    chat template renders exactly as the in-process prompt), and top-k/top-p
    as request fields when sampling."""

    def __init__(self, backend: Any, label_images: bool, top_p: float, top_k: int) -> None:
        self.backend, self.label_images, self.top_p, self.top_k = backend, label_images, top_p, top_k
        self.name, self.model_id = backend.name, backend.model_id

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["backend"], name)

    def _one(self, req: ChatRequest) -> ChatRequest:
        from dataclasses import replace

        settings = req.settings
        if settings.temperature > 0:
            settings = replace(settings, top_p=self.top_p, top_k=self.top_k)
        messages = req.messages
        if self.label_images:
            parts: list[Any] = []
            for m in req.messages:
                k = 0
                for p in m.parts:
                    if not isinstance(p, str):
                        k += 1
                        parts.append(f"<img{k}>: ")
                    parts.append(p)
            messages = [Message("system", [QWEN_SYSTEM]), Message("user", parts)]
        return replace(req, messages=messages, settings=settings)

    def generate(self, requests: Sequence[ChatRequest]) -> list[Generation]:
        return self.backend.generate([self._one(r) for r in requests])

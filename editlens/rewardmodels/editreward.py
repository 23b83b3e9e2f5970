"""EditReward as an evaluator (``editreward``), in its released format.

The release (TIGER-AI-Lab/EditReward) is a full fine-tune of a Qwen-VL
(``XiaomiMiMo/MiMo-VL-7B-SFT-2508``, ``Qwen/Qwen2.5-VL-7B-Instruct``, a
Qwen3-VL-8B config) saved as one state dict (``model.safetensors`` or
``model.pth``, maybe wrapped in a top-level ``"model"`` key) holding the
VLM's weights and two reward heads, ``rm_heads.head_0`` (instruction
following) and ``rm_heads.head_1`` (visual quality): each
Linear(hidden->1024), ReLU, Dropout, Linear(1024->16), ReLU, Linear(16->2),
in float32. A special token ``<|Reward|>`` is added to the tokenizer (the
embeddings resized to it). It loads strictly: a missing or unexpected key,
or a shape that does not fit, refuses the checkpoint.

One judgement: for each head, one user turn [source, edited, text], the
text a 1-4 rubric for the head's dimension with the instruction, ending in
a line that holds ``<|Reward|>``; both pictures resized to 256 x 28^2 pixels
(factor 28, bicubic); right padding. The head reads the last hidden state
*at the* ``<|Reward|>`` *position* and gives ``[mu, log sigma]``; the output
is the mean over the two heads. ``value`` = reward (mu, unbounded and
relative: compare edits of one instruction); details hold the
log-uncertainty, sigma, each head's output and a plain-language reading.

Positions: the released Qwen2.5/MiMo code calls its backbone without input
ids and without the image grid, so Qwen's 3-D M-RoPE collapses to 1-D
positions (attention-mask cumsum - 1, padding at 1) on all three axes;
released scores need the same (``positions="release"``, the default, which
means 1-D for Qwen2.5-VL/MiMo-VL and true M-RoPE for Qwen3-VL, as released;
``"mrope"`` and ``"1d"`` force either). The choice is recorded.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from editlens.core.cache import SqliteCache, cache_option, key_of
from editlens.core.types import LoadedEdit, Score
from editlens.errors import EditlensError, InputError, ModelUnavailableError
from editlens.metrics.base import Metric
from editlens.rewardmodels import common
from editlens.templates.clones import find_module, module_strings

REWARD_TOKEN = "<|Reward|>"
HEADS = ("instruction_following", "visual_quality")  # head_0, head_1
#: the release's image size: exactly 256 x 28^2 pixels (min = max)
RELEASE_PIXELS = 256 * 28 * 28
RELEASE_FACTOR = 28
POSITIONS = ("release", "1d", "mrope")
#: families the release runs at its processor's own image bounds (per-item bounds in the chat messages are
#: dropped by transformers' apply_chat_template, 4.57 as pinned and later)
PROCESSOR_SIZED = ("qwen3_vl",)
FAMILIES = ("qwen2_5_vl", "qwen3_vl")
WEIGHT_FILES = ("model.safetensors", "model.pth")
#: where the prompts and the reward-token suffix sit inside a clone of the EditReward repository
PROMPT_MODULES = ("EditReward/dataset/prompts.py", "dataset/prompts.py", "prompts.py")
SUFFIX_MODULES = ("EditReward/dataset/data_collator_qwen_edit.py", "dataset/data_collator_qwen_edit.py",
                  "data_collator_qwen_edit.py")
PROMPT_NAMES = {"instruction_following": "INSTRUCTION_EDIT_FOLLOWING", "visual_quality": "INSTRUCTION_EDIT_QUALITY"}
SUFFIX_NAME = "prompt_with_special_token"


# -------------------------------------------------------------------------------------------- prompts

@dataclass(frozen=True)
class PromptSet:
    """The text of each head's request: editlens' templates or the authors' prompts."""

    source: str
    official: bool
    texts: dict[str, str] = field(default_factory=dict)  # official: head -> text with {text_prompt}
    suffix: str = ""
    templates: dict[str, Any] = field(default_factory=dict)  # own: head -> Template

    @property
    def sha256(self) -> str:
        if self.official:
            return common.prompts_sha(*(self.texts[h] for h in HEADS), self.suffix)
        return common.prompts_sha(*(self.templates[h].text for h in HEADS))

    def parts(self, head: str, s: LoadedEdit) -> list[Any]:
        if self.official:
            try:
                text = self.texts[head].format(text_prompt=s.instruction)
            except (KeyError, IndexError, ValueError) as exc:
                raise InputError(f"{self.source}: {PROMPT_NAMES[head]} cannot be filled in with the instruction "
                                 f"({type(exc).__name__}: {exc})") from None
            return [s.source, s.edited, text + self.suffix]
        return self.templates[head].render({"source": s.source, "edited": s.edited}, instruction=s.instruction)

    def describe(self) -> dict[str, Any]:
        return {"source": self.source, "official": self.official, "sha256": self.sha256}


def official_prompts(path: str | Path) -> PromptSet:
    """The authors' rubric prompts and reward-token suffix, parsed (not imported)
    from a clone of the EditReward repository."""
    option = "--option editreward.prompts"
    p = Path(path).expanduser()
    prompts = find_module(p, PROMPT_MODULES, option, "the EditReward repository")
    found = module_strings(prompts, option)
    missing = [v for v in PROMPT_NAMES.values() if v not in found]
    suffix_file = prompts if SUFFIX_NAME in found else find_module(p if p.is_dir() else p.parent,
                                                                          SUFFIX_MODULES, option,
                                                                          "the EditReward repository")
    suffixes = found if suffix_file == prompts else module_strings(suffix_file, option)
    if missing or SUFFIX_NAME not in suffixes:
        raise InputError(f"{option} {p}: looked for {', '.join(PROMPT_NAMES.values())} in {prompts} and "
                         f"{SUFFIX_NAME} in {suffix_file}; missing: {', '.join(missing + ([SUFFIX_NAME] if SUFFIX_NAME not in suffixes else []))}")
    if suffixes[SUFFIX_NAME].count(REWARD_TOKEN) != 1:
        raise InputError(f"{option} {suffix_file}: {SUFFIX_NAME} must hold {REWARD_TOKEN} once")
    return PromptSet(f"official prompts parsed from {prompts} and {suffix_file}", True,
                     {h: found[n] for h, n in PROMPT_NAMES.items()}, suffixes[SUFFIX_NAME])


def own_prompts(overrides: dict[str, str] | None = None) -> PromptSet:
    from editlens.judges.templates import load_template

    names = {"instruction_following": "editreward_following", "visual_quality": "editreward_quality"}
    t = {h: load_template(n, overrides) for h, n in names.items()}
    for tpl in t.values():
        if tpl.text.count(REWARD_TOKEN) != 1:
            raise InputError(f"template {tpl.name} ({tpl.source}) must hold {REWARD_TOKEN} exactly once: the reward "
                             "head reads the model's state at that token")
    return PromptSet("editlens wording (" + ", ".join(x.source for x in t.values()) + ")", False, templates=t)


# -------------------------------------------------------------------------------------------- checkpoint

def find_weights(path: Path) -> Path:
    if path.is_file():
        return path
    for name in WEIGHT_FILES:
        if (path / name).is_file():
            return path / name
    raise ModelUnavailableError(f"EditReward checkpoint {path}: no {' or '.join(WEIGHT_FILES)} in it")


def read_state_dict_keys(weights: Path) -> tuple[dict[str, tuple[int, ...]], Any]:
    """``{key: shape}`` of a checkpoint file and a ``get(key) -> tensor`` reader
    (safetensors is read tensor by tensor, never all at once)."""
    if weights.suffix == ".safetensors":
        from safetensors import safe_open

        handle = safe_open(str(weights), framework="pt", device="cpu")
        shapes = {k: tuple(handle.get_slice(k).get_shape()) for k in handle.keys()}
        return shapes, handle.get_tensor
    import torch

    try:
        sd = torch.load(str(weights), map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - a pickle that is not a plain state dict is refused
        raise ModelUnavailableError(f"{weights}: not a plain state dict ({type(exc).__name__}: {exc})") from None
    if isinstance(sd, dict) and isinstance(sd.get("model"), dict):
        sd = sd["model"]  # the release accepts a state dict wrapped under "model"
    if not isinstance(sd, dict):
        raise ModelUnavailableError(f"{weights}: not a state dict")
    return {k: tuple(v.shape) for k, v in sd.items()}, sd.__getitem__


def normalise_key(key: str) -> str:
    """Older transformers names (``visual.*``, ``model.layers.*``) in today's
    Qwen-VL layout (``model.visual.*``, ``model.language_model.*``)."""
    if key.startswith("visual."):
        return "model." + key
    if key.startswith("model.") and not key.startswith(("model.language_model.", "model.visual.")):
        return "model.language_model." + key[len("model."):]
    return key


def build_heads(shapes: dict[str, tuple[int, ...]], hidden: int, where: Path) -> Any:
    """The two reward heads, shaped from the checkpoint (layers 0, 3, 5 linear;
    ReLU, Dropout, ReLU between them, as released)."""
    import torch.nn as nn

    heads = nn.ModuleDict()
    names = sorted({k.split(".")[1] for k in shapes if k.startswith("rm_heads.")})
    if names != ["head_0", "head_1"]:
        single = any(k.startswith("rm_head.") for k in shapes)
        raise ModelUnavailableError(f"EditReward checkpoint {where}: expected reward heads rm_heads.head_0 and "
                                    f"rm_heads.head_1, found {names or 'none'}"
                                    + (" (a single rm_head: not the released multi-head layout)" if single else ""))
    for name in names:
        layers = {int(k.split(".")[2]) for k in shapes if k.startswith(f"rm_heads.{name}.")}
        if layers != {0, 3, 5}:
            raise ModelUnavailableError(f"EditReward checkpoint {where}: rm_heads.{name} has linear layers {sorted(layers)}, "
                                        "the released head has them at 0, 3 and 5")
        w0, w3, w5 = (shapes[f"rm_heads.{name}.{i}.weight"] for i in (0, 3, 5))
        if w0[1] != hidden or w3[1] != w0[0] or w5[1] != w3[0] or w5[0] != 2:
            raise ModelUnavailableError(f"EditReward checkpoint {where}: rm_heads.{name} shapes {w0}, {w3}, {w5} do not "
                                        f"chain from the hidden size {hidden} to [mu, log sigma]")
        bias = [f"rm_heads.{name}.{i}.bias" in shapes for i in (0, 3, 5)]
        heads[name] = nn.Sequential(nn.Linear(w0[1], w0[0], bias=bias[0]), nn.ReLU(), nn.Dropout(0.05),
                                    nn.Linear(w3[1], w3[0], bias=bias[1]), nn.ReLU(),
                                    nn.Linear(w5[1], w5[0], bias=bias[2]))
    return heads


@dataclass
class EditRewardModel:
    vlm: Any
    heads: Any
    processor: Any
    family: str
    reward_token_id: int
    checkpoint: dict[str, Any]  # provenance
    base: str | None
    precision: Any
    tower_stats: Any = None
    notes: list[str] = field(default_factory=list)

    @property
    def device(self) -> str:
        return self.precision.device


def _config_and_processor(ckpt_dir: Path | None, base: str | None) -> tuple[Any, Any, str, str | None]:
    """The model config and processor: the checkpoint folder's own files
    where it has them, else the base model's (the release saves weights only)."""
    from transformers import AutoConfig

    from editlens.rewardmodels.editscore import load_processor

    cfg_dir = ckpt_dir if ckpt_dir is not None and (ckpt_dir / "config.json").is_file() else None
    base_path = common.locate(base, "EditReward base model") if base else None
    if cfg_dir is None and base_path is None:
        raise ModelUnavailableError(f"EditReward checkpoint {ckpt_dir}: no config.json and no base model named; pass "
                                    "--option editreward.base=HUB_ID_OR_DIR (e.g. XiaomiMiMo/MiMo-VL-7B-SFT-2508)")
    config = AutoConfig.from_pretrained(str(cfg_dir or base_path), local_files_only=True)
    model_type = str(config.model_type)
    if model_type not in FAMILIES:
        raise ModelUnavailableError(f"EditReward: a {model_type!r} model; the released heads sit on {' or '.join(FAMILIES)}")
    own = ckpt_dir is not None and (ckpt_dir / "preprocessor_config.json").is_file() and \
        any((ckpt_dir / n).is_file() for n in ("tokenizer.json", "tokenizer_config.json"))
    proc_dir = ckpt_dir if own else base_path or ckpt_dir
    assert proc_dir is not None  # a checkpoint folder or a base model (checked above)
    processor = load_processor(proc_dir, model_type)
    return config, processor, model_type, str(base_path) if base_path else None


def add_reward_token(tokenizer: Any) -> int:
    """The id of ``<|Reward|>``, added as a special token when the tokenizer lacks it (as the release does)."""
    from tokenizers import AddedToken

    if REWARD_TOKEN not in tokenizer.get_vocab():
        tokenizer.add_tokens([AddedToken(REWARD_TOKEN, special=True, normalized=False)], special_tokens=True)
    ids = tokenizer.encode(REWARD_TOKEN, add_special_tokens=False)
    if len(ids) != 1:
        raise ModelUnavailableError(f"the tokenizer splits {REWARD_TOKEN} into {len(ids)} tokens")
    return int(ids[0])


def load_editreward(ref: Any, precision: Any, quantization: str, models: dict[str, str], base: str | None = None,
                    **_recipe: Any) -> EditRewardModel:
    """The ``editreward`` kind's loader: a checkpoint folder (or file) in the
    released layout, loaded strictly onto a backbone built from its config."""
    import torch
    import transformers
    from transformers.initialization import no_init_weights

    from editlens.backends import vision_batching
    from editlens.models.registry import family_for

    if quantization == "nf4":
        raise ModelUnavailableError("EditReward is a full fine-tune saved as one state dict: editlens loads it "
                                    "unquantised (--option editreward.quantization none)")
    where = common.locate(ref.ref, "EditReward checkpoint") if not Path(ref.ref).expanduser().is_file() \
        else Path(ref.ref).expanduser()
    weights = find_weights(where)
    ckpt_dir = where if where.is_dir() else where.parent
    config, processor, model_type, base_path = _config_and_processor(ckpt_dir, base)
    tok = processor.tokenizer
    reward_id = add_reward_token(tok)
    tok.padding_side = "right"  # as released
    shapes, get = read_state_dict_keys(weights)
    heads_shapes = {k: v for k, v in shapes.items() if k.startswith(("rm_heads.", "rm_head."))}
    vlm_shapes = {normalise_key(k): v for k, v in shapes.items() if k not in heads_shapes}
    raw_name = {normalise_key(k): k for k in shapes if k not in heads_shapes}
    family = family_for(model_type)
    if family is None:
        raise ModelUnavailableError(f"EditReward: no model family {model_type!r} among the presets")
    cls = getattr(transformers, family.model_class)
    embed = next((v for k, v in vlm_shapes.items() if k.endswith("embed_tokens.weight")), None)
    if embed is None:
        raise ModelUnavailableError(f"EditReward checkpoint {weights}: no token embedding (embed_tokens.weight)")
    if embed[0] != len(tok):
        raise ModelUnavailableError(f"EditReward checkpoint {weights}: {embed[0]} token embeddings, but the tokenizer "
                                    f"with {REWARD_TOKEN} has {len(tok)} tokens; the checkpoint and tokenizer do not "
                                    "belong together")
    with no_init_weights(), torch.device(precision.device):
        vlm = cls._from_config(config, dtype=precision.torch_dtype)
        vlm.resize_token_embeddings(embed[0], mean_resizing=False)
    expected = vlm.state_dict()
    tied = bool(getattr(config, "tie_word_embeddings", False) or
                getattr(getattr(config, "text_config", None), "tie_word_embeddings", False))
    missing = sorted(k for k in expected if k not in vlm_shapes and not (tied and k == "lm_head.weight"))
    unexpected = sorted(k for k in vlm_shapes if k not in expected)
    wrong = sorted(k for k in vlm_shapes if k in expected and tuple(expected[k].shape) != vlm_shapes[k])
    if missing or unexpected or wrong:
        raise ModelUnavailableError(
            f"EditReward checkpoint {weights} does not fit a {model_type} built from its config: {len(missing)} "
            f"key(s) missing (e.g. {missing[:2]}), {len(unexpected)} unexpected (e.g. {unexpected[:2]}), "
            f"{len(wrong)} of another shape (e.g. {wrong[:2]}); refusing to run a partly random model")
    hidden = int(getattr(config, "text_config", config).hidden_size)
    heads = build_heads(heads_shapes, hidden, weights)
    head_sd = heads.state_dict()
    if set(head_sd) != {k[len("rm_heads."):] for k in heads_shapes}:
        raise ModelUnavailableError(f"EditReward checkpoint {weights}: reward head keys do not match the released layout")
    with torch.no_grad():
        for k, t in expected.items():
            if k in vlm_shapes:
                t.copy_(get(raw_name[k]))
        if tied and "lm_head.weight" not in vlm_shapes:
            vlm.tie_weights()
        for k, t in head_sd.items():
            t.copy_(get("rm_heads." + k))
    heads = heads.to(device=precision.device, dtype=torch.float32).eval()  # float32, as released
    vlm.eval()
    stats = vision_batching.install(vlm, family.vision_tower, precision.device) if family.vision_tower else None
    prov = common.provenance(weights.parent, ref.ref, [weights.name])
    return EditRewardModel(vlm, heads, processor, model_type, reward_id, prov, base, precision, stats)


def preset_available(preset: Any, models: dict[str, str]) -> tuple[bool, str | None]:
    from editlens.models.resolve import model_reference

    ref = model_reference(preset.role or preset.ref or preset.name, models).ref
    return _present(ref, preset.recipe.get("base"))


def _present(ref: str, base: str | None) -> tuple[bool, str | None]:
    p = Path(ref).expanduser()
    if not (p.is_file() or common.is_present(ref)):
        return False, (f"EditReward checkpoint {ref!r} is not here: `hf download {ref}` on a machine with internet "
                       "(then copy the cache) or pass --model editreward=DIR")
    folder = p if p.is_dir() else (p.parent if p.is_file() else None)
    if folder is not None and not (folder / "config.json").is_file() and base and not common.is_present(base):
        return False, f"EditReward base {base!r} (config and processor) is not here: `hf download {base}`"
    return True, None


def check_available(options: dict[str, Any], models: dict[str, str]) -> tuple[bool, str | None]:
    from editlens.models.registry import get_preset, is_preset
    from editlens.models.resolve import model_reference

    name = str(options.get("model") or "editreward")
    base = options.get("base")
    if is_preset(name) and name not in models:
        p = get_preset(name, "editreward")
        base, name = base or p.recipe.get("base"), p.role or p.ref or name
    mref = model_reference(name, models)
    if mref.ref == "editreward":
        return False, "no EditReward checkpoint: pass --model editreward=DIR or --option editreward.model=PRESET"
    if base is None:
        from editlens.models.registry import presets

        base = next((p.recipe.get("base") for p in presets().values() if p.kind == "editreward" and p.ref == mref.ref), None)
    return _present(mref.ref, base)


# -------------------------------------------------------------------------------------------- reading

def reading(reward: float, log_sigma: float) -> str:
    """What a reward and its log-uncertainty mean, in plain words.

    >>> reading(1.2, -0.5)[:60]
    'reward 1.200: unbounded and relative (higher is better), com'
    """
    sigma = math.exp(log_sigma)
    lead = math.sqrt(2.0) * sigma
    return (f"reward {reward:.3f}: unbounded and relative (higher is better), comparable between edits of the same "
            f"instruction, not an absolute grade. Uncertainty sigma = exp({log_sigma:.3f}) = {sigma:.3f}: against an "
            f"edit with the same uncertainty, a lead of {lead:.3f} (sqrt(2) sigma) means the model is about 84% sure "
            f"this edit is the better one, a lead of {2 * lead:.3f} about 98%.")


def prefer_probability(mu_a: float, ls_a: float, mu_b: float, ls_b: float) -> float:
    """P(A better than B) under the model's own uncertainty: Phi((mu_A - mu_B) / sqrt(sigma_A^2 + sigma_B^2)).

    >>> round(prefer_probability(1.0, 0.0, 1.0, 0.0), 3)
    0.5
    """
    s = math.sqrt(math.exp(2 * ls_a) + math.exp(2 * ls_b))
    return 0.5 * (1.0 + math.erf((mu_a - mu_b) / (s * math.sqrt(2.0))))


def prefer_scores(a: Any, b: Any) -> float | None:
    """:func:`prefer_probability` of two ``editreward`` Scores (``None`` unless both carry their uncertainty);
    the evaluator's spec names it as its ``preference``."""
    da, db = a.details or {}, b.details or {}
    if a.value is None or b.value is None or "log_uncertainty" not in da or "log_uncertainty" not in db:
        return None
    return prefer_probability(a.value, da["log_uncertainty"], b.value, db["log_uncertainty"])


# -------------------------------------------------------------------------------------------- evaluator

class EditRewardEvaluator(Metric):
    """The ``editreward`` evaluator.

    Options:
        model: a preset (``editreward-mimo-vl-7b``, ``editreward-qwen2.5-vl-7b``,
            ``editreward-qwen3-vl-8b``), a checkpoint folder or file; default
            role ``editreward`` (``--model editreward=DIR``).
        base: the model whose config and processor the checkpoint needs when
            its folder has none (the preset's base by default).
        prompts: a clone of the EditReward repository for the authors' wording.
        templates: ``{"editreward_following": FILE, "editreward_quality": FILE}``.
        positions: ``release`` (1-D for Qwen2.5-VL/MiMo-VL, M-RoPE for
            Qwen3-VL, as released), ``1d`` or ``mrope``.
        image_pixels: pixels per image. Default as released: 256 x 28^2 for
            Qwen2.5-VL/MiMo-VL; for Qwen3-VL the processor's own bounds from
            the checkpoint (the release's per-image bounds never reach its
            processor: transformers' chat template drops them), so each image
            keeps its own size within them. A number forces that many pixels
            (the side multiple is the model's patch x merge).
        batch_size, cache, device, dtype.
    """

    def __init__(self, model: str | None = None, base: str | None = None, prompts: str | None = None,
                 templates: dict[str, str] | None = None, positions: str = "release", image_pixels: int | None = None,
                 batch_size: int = 8, cache: Any = True, quantization: str = "none", device: str = "auto",
                 dtype: str = "auto", models: dict[str, str] | None = None) -> None:
        from editlens.models.quant import normalise_choice

        if positions not in POSITIONS:
            raise ValueError(f"editreward: positions must be one of {', '.join(POSITIONS)}, got {positions!r}")
        if image_pixels is not None and int(image_pixels) < 1:
            raise ValueError(f"editreward: image_pixels must be positive, got {image_pixels!r}")
        self.model_ref = str(model) if model else "editreward"
        self.base, self.positions = base, positions
        self.image_pixels = int(image_pixels) if image_pixels else None
        self.batch_size = int(batch_size)
        self.quantization = normalise_choice(quantization, "--option editreward.quantization")
        self.device, self.dtype, self.models = device, dtype, dict(models or {})
        self.prompts = official_prompts(prompts) if prompts else own_prompts(templates)
        self._cache_opt = cache_option(cache)
        self._cache: SqliteCache | None = None
        self._loaded: EditRewardModel | None = None
        self.calls = 0  # batched forward passes (tests and benchmarks read it)

    def _load(self) -> EditRewardModel:
        if self._loaded is None:
            from editlens.models.loader import load_model
            from editlens.models.registry import presets

            opts: dict[str, Any] = {}
            base = self.base
            if base is None:  # a checkpoint named by hub id: its preset knows the base
                ref = self.model_ref
                for p in presets().values():
                    if p.kind == "editreward" and ref in (p.ref, p.role) and p.recipe.get("base"):
                        base = p.recipe["base"]
                        break
            if base:
                opts["base"] = base
            self._loaded = load_model(self.model_ref, kind="editreward", device=self.device, dtype=self.dtype,
                                      quantization=self.quantization, models=self.models, **opts)
        return self._loaded

    @property
    def cache(self) -> SqliteCache | None:
        if self._cache is None and self._cache_opt:
            self._cache = common.result_cache(None if self._cache_opt is True else self._cache_opt, "editreward")
        return self._cache

    def effective_positions(self, family: str) -> str:
        if self.positions != "release":
            return self.positions
        return "1d" if family == "qwen2_5_vl" else "mrope"

    def pixels(self, loaded: EditRewardModel) -> tuple[int | None, int]:
        """(pixels per image, side multiple); ``None`` pixels: the processor's
        own bounds (Qwen3-VL, as released)."""
        factor = common.vision_factor(loaded.processor)
        if self.image_pixels is None and loaded.family in PROCESSOR_SIZED:
            return None, factor
        return (self.image_pixels or 256 * factor * factor), factor

    def release(self, loaded: EditRewardModel | None = None) -> dict[str, Any]:
        loaded = loaded or self._load()
        diffs = []
        if not self.prompts.official:
            diffs.append("prompt wording: editlens' own (pass --option editreward.prompts=CLONE for the authors')")
        pos = self.effective_positions(loaded.family)
        released_pos = "1d" if loaded.family == "qwen2_5_vl" else "mrope"
        if pos != released_pos:
            diffs.append(f"positions {pos} (released: {released_pos})")
        pixels, factor = self.pixels(loaded)
        if loaded.family in PROCESSOR_SIZED:
            if pixels is not None:
                diffs.append(f"images of {pixels} pixels, sides multiples of {factor} (released: the processor's own "
                             "bounds; the release's per-image bounds never reach its processor)")
        elif pixels != RELEASE_PIXELS or (factor != RELEASE_FACTOR and loaded.family == "qwen2_5_vl"):
            diffs.append(f"images of {pixels} pixels, sides multiples of {factor} (released: {RELEASE_PIXELS}, 28)")
        notes: list[str] = []
        return {"prompts_identical": self.prompts.official,
                "format_identical": not [d for d in diffs if not d.startswith("prompt")],
                "identical_to_release": not diffs,
                "positions": pos, "differences": diffs, "notes": notes}

    def settings(self) -> dict[str, Any]:
        loaded = self._load()
        pixels, factor = self.pixels(loaded)
        return {"checkpoint": loaded.checkpoint.get("weights"), "revision": loaded.checkpoint.get("revision"),
                "prompts": self.prompts.sha256, "positions": self.effective_positions(loaded.family),
                "pixels": pixels if pixels is not None else f"processor {dict(loaded.processor.image_processor.size)}",
                "factor": factor, "dtype": loaded.precision.dtype, "device": loaded.device}

    def describe(self) -> dict[str, Any]:
        loaded = self._load()
        return {**super().describe(), "checkpoint": loaded.checkpoint, "base": loaded.base, "family": loaded.family,
                "dtype": loaded.precision.dtype, "prompts": self.prompts.describe(), "release": self.release(loaded),
                "settings": {k: v for k, v in self.settings().items() if k not in ("checkpoint", "device")}}

    def compute(self, batch: Sequence[LoadedEdit]) -> Sequence[float | Score]:
        return self.score_many(batch)

    def score_many(self, batch: Sequence[LoadedEdit]) -> list[Score]:
        loaded = self._load()
        base = self.settings()
        keys = [key_of(base, s.source_hash, s.edited_hash, s.instruction) for s in batch]
        found = self.cache.get_many(list(dict.fromkeys(keys))) if self.cache else {}
        first: dict[str, int] = {}
        for i, k in enumerate(keys):
            if k not in found:
                first.setdefault(k, i)
        todo = list(first.values())
        new: dict[str, dict[str, Any]] = {}
        for c in range(0, len(todo), self.batch_size):
            chunk = todo[c : c + self.batch_size]
            try:
                outs = self.forward(loaded, [batch[i] for i in chunk])
            except EditlensError:
                raise  # a prompt without <|Reward|>, an unloadable model: the user's to fix, not a per-sample failure
            except (RuntimeError, ValueError) as exc:  # e.g. out of memory: these samples failed, a rerun retries
                for i in chunk:
                    new[keys[i]] = {"error": f"{type(exc).__name__}: {exc}"}
                continue
            for i, o in zip(chunk, outs):
                new[keys[i]] = o
        if self.cache:
            self.cache.put_many({k: v for k, v in new.items() if "error" not in v})
        found.update(new)
        rel = self.release(loaded)
        short = {"checkpoint": common.short_id(loaded.checkpoint), "prompts_identical": rel["prompts_identical"],
                 "format_identical": rel["format_identical"], "positions": rel["positions"],
                 "identical_to_release": rel["identical_to_release"],
                 "differences_from_release": rel["differences"]}
        out = []
        for k in keys:
            r = found[k]
            if "error" in r:
                out.append(Score(self.name, None, "failed", r["error"]))
                continue
            details = {"reward": r["reward"], "log_uncertainty": r["log_uncertainty"],
                       "sigma": math.exp(r["log_uncertainty"]), "heads": r["heads"],
                       "reading": reading(r["reward"], r["log_uncertainty"]), "release": short}
            if k not in new:
                details["cached"] = True
            out.append(Score(self.name, float(r["reward"]), details=details))
        return out

    def score_tensor(self, edited: Any, sources: Any, instructions: list[str]) -> Any:
        """The reward (mean of both heads) of each edit, differentiable with respect to ``edited`` (and
        ``sources``): float tensors B x 3 x H x W in [0, 1]. The prompt side (token ids, image grids) comes
        from the processor on decoded copies; the pixel values are computed in torch
        (:mod:`editlens.models.torch_pixels`). Never cached."""
        import torch
        from PIL import Image

        from editlens.models.torch_pixels import qwen_pixel_values

        if sources is None:
            raise InputError("editreward scores an edit against its source: pass sources")
        loaded = self._load()
        for module in (loaded.vlm, loaded.heads):
            module.requires_grad_(False)  # gradients go to the images, never into the reward model
        pixels, factor = self.pixels(loaded)
        proc = loaded.processor
        # each image at the size the processor would give it: its own bounds where pixels is None (Qwen3-VL)
        size = proc.image_processor.size
        lo, hi = (int(size["shortest_edge"]), int(size["longest_edge"])) if pixels is None else (pixels, pixels)
        as_u8 = lambda t: (t.detach().float().clamp(0, 1).permute(1, 2, 0).cpu().numpy() * 255).round().astype(np.uint8)  # noqa: E731
        texts, images, tensors = [], [], []
        for b in range(edited.shape[0]):
            s = LoadedEdit(id=str(b), source=as_u8(sources[b]), edited=as_u8(edited[b]), instruction=instructions[b])
            for head in HEADS:
                content, imgs = [], []
                for p in self.prompts.parts(head, s):
                    if isinstance(p, str):
                        content.append({"type": "text", "text": p})
                        continue
                    content.append({"type": "image"})
                    is_edited = p is s.edited
                    imgs.append(common.resize_to_pixels(p, factor, lo, hi))
                    tensors.append(edited[b] if is_edited else sources[b])
                texts.append(proc.apply_chat_template([{"role": "user", "content": content}], tokenize=False,
                                                      add_generation_prompt=True))
                images.append([Image.fromarray(i) for i in imgs])
        flat = [np.asarray(i) for row in images for i in row]
        inputs = proc(text=texts, images=images, padding=True, return_tensors="pt",
                      **common.processor_images_kwargs(flat))
        dev = loaded.device
        parts = [qwen_pixel_values(t.to(dev).float(), proc.image_processor,
                                   common.smart_resize(int(t.shape[-2]), int(t.shape[-1]), factor, lo, hi))
                 for t in tensors]
        grids = torch.tensor([g for _, g in parts])
        if not torch.equal(grids, inputs["image_grid_thw"]):
            raise InputError(f"editreward: image grids {grids.tolist()} differ from the processor's "
                             f"{inputs['image_grid_thw'].tolist()}")
        ids, mask = inputs["input_ids"], inputs["attention_mask"]
        at = ids == loaded.reward_token_id
        if bool((at.sum(-1) != 1).any()):
            raise InputError(f"editreward: each request needs exactly one {REWARD_TOKEN} token ({self.prompts.source})")
        kw = {k: v.to(dev) for k, v in inputs.items()}
        kw["pixel_values"] = torch.cat([p for p, _ in parts]).to(loaded.precision.torch_dtype)
        if self.effective_positions(loaded.family) == "1d":
            pos = (mask.long().cumsum(-1) - 1).masked_fill(mask == 0, 1)
            kw["position_ids"] = pos.unsqueeze(0).expand(3, -1, -1).to(dev)
            kw.pop("mm_token_type_ids", None)
        hidden = loaded.vlm.model(**kw).last_hidden_state
        h = hidden[at.to(dev)].float()
        mu = torch.stack([loaded.heads["head_0"](h[0::2])[:, 0], loaded.heads["head_1"](h[1::2])[:, 0]], 1)
        return mu.mean(1)

    def forward(self, loaded: EditRewardModel, items: Sequence[LoadedEdit]) -> list[dict[str, Any]]:
        """Both heads for ``items``: one batched pass of 2 x len(items) rows
        (each distinct image encoded once by the tower)."""
        import torch
        from PIL import Image

        pixels, factor = self.pixels(loaded)
        texts, images = [], []
        proc = loaded.processor
        for s in items:
            for head in HEADS:
                parts = self.prompts.parts(head, s)
                content, imgs = [], []
                for p in parts:
                    if isinstance(p, str):
                        content.append({"type": "text", "text": p})
                    else:
                        content.append({"type": "image"})
                        imgs.append(p if pixels is None else common.resize_to_pixels(p, factor, pixels, pixels))
                texts.append(proc.apply_chat_template([{"role": "user", "content": content}], tokenize=False,
                                                      add_generation_prompt=True))
                images.append([Image.fromarray(i) for i in imgs])
        flat = [np.asarray(i) for row in images for i in row]
        inputs = proc(text=texts, images=images, padding=True, return_tensors="pt",
                      **(common.processor_images_kwargs(flat) if pixels is not None else {}))
        ids, mask = inputs["input_ids"], inputs["attention_mask"]
        at = ids == loaded.reward_token_id
        counts = at.sum(-1)
        if bool((counts != 1).any()):
            bad = int((counts != 1).nonzero()[0][0])
            raise InputError(f"editreward: request {bad} holds {int(counts[bad])} {REWARD_TOKEN} tokens, expected 1 "
                             f"({self.prompts.source})")
        dev = loaded.device
        kw = {k: v.to(dev) for k, v in inputs.items()}
        if "pixel_values" in kw:
            kw["pixel_values"] = kw["pixel_values"].to(loaded.precision.torch_dtype)
        if self.effective_positions(loaded.family) == "1d":
            # the release's backbone call: no input ids, no image grid -> positions from the mask alone
            pos = (mask.long().cumsum(-1) - 1).masked_fill(mask == 0, 1)
            kw["position_ids"] = pos.unsqueeze(0).expand(3, -1, -1).to(dev)
            kw.pop("mm_token_type_ids", None)
        with torch.inference_mode():
            self.calls += 1
            hidden = loaded.vlm.model(**kw).last_hidden_state
            h = hidden[at.to(dev)].float()  # one row per request, in request order
            # rows alternate instruction-following / visual-quality requests: each head reads its own
            outs = torch.stack([loaded.heads["head_0"](h[0::2]), loaded.heads["head_1"](h[1::2])], 1)
        vals = outs.reshape(-1, 2).cpu().tolist()
        results = []
        for i in range(len(items)):
            per = {HEADS[j]: {"reward": vals[2 * i + j][0], "log_uncertainty": vals[2 * i + j][1]} for j in range(2)}
            results.append({"heads": per, "reward": float(np.mean([per[h]["reward"] for h in HEADS])),
                            "log_uncertainty": float(np.mean([per[h]["log_uncertainty"] for h in HEADS]))})
        return results

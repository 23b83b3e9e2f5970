"""Every known model and checkpoint recipe, as data: one JSON file per
preset under ``editlens/models/presets/`` (and, for your own, under
``$EDITLENS_PRESET_DIR`` or ``~/.config/editlens/presets/``).

A preset names a **kind** (what it is and which code loads it: ``clip``,
``dino``, ``vlm-family``, ``dice``, ``adiee``, ``twoframe``...), says what it
is for and where its weights come from, and carries the kind's recipe (the
DICE release's base + adapter pairs and 4-bit settings, a VLM family's class
and box convention, a ViFi checkpoint's tokenizer and preprocessing...).
A preset with a ``role`` is that role's default model (``clip`` ->
``openai/clip-vit-base-patch32``). Adding a preset is adding a file:
``editlens models`` lists it with whether it can load here, and the fix
when it cannot.

>>> get_preset("clip").ref
'openai/clip-vit-base-patch32'
>>> family_for("qwen2_5_vl").boxes
'pixels'
"""

from __future__ import annotations

import functools
import importlib
import json
import os
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Callable

from editlens.errors import InputError, ModelUnavailableError

#: Fields a preset file may hold (anything else is a typo, refused with the file's name).
PRESET_FIELDS = {"name", "kind", "role", "ref", "description", "source", "recipe",
                 # vlm-family presets
                 "model_type", "model_class", "processor", "boxes", "vision_tower", "aliases", "quantize_skip"}


@dataclass(frozen=True)
class ModelKind:
    """What a preset's ``kind`` means: its description, the function
    (``module:function``) that says whether such a preset can load here,
    ``function(preset, models) -> (ok, reason)``, and the one that loads it,
    ``function(ref, precision, quantization, models, **options)`` (called by
    :func:`editlens.models.loader.load_model`, never directly)."""

    name: str
    description: str
    availability: str | None = None
    loader: str | None = None

    def load(self, ref: Any, precision: Any, quantization: str, models: dict[str, str], **options: Any) -> Any:
        if self.loader is None:
            raise InputError(f"models of kind {self.name!r} are not loaded by editlens itself")
        module, _, attr = self.loader.partition(":")
        return getattr(importlib.import_module(module), attr)(ref, precision, quantization, models, **options)

    def check(self, preset: "ModelPreset", models: dict[str, str] | None = None) -> tuple[bool, str | None]:
        if self.availability is None:
            return True, None
        module, _, attr = self.availability.partition(":")
        return getattr(importlib.import_module(module), attr)(preset, dict(models or {}))


_HUB = "editlens.models.resolve:hub_model_available"
#: The kinds of models editlens knows (code wiring; the presets themselves are data).
KINDS: dict[str, ModelKind] = {k.name: k for k in (
    ModelKind("clip", "CLIP image/text encoder (transformers layout)", _HUB, "editlens.models.encoders:load_clip"),
    ModelKind("dino", "DINOv2 image encoder (transformers layout)", _HUB, "editlens.models.encoders:load_dino"),
    ModelKind("owlv2", "OWLv2 open-vocabulary detector (transformers layout)", _HUB,
              "editlens.dice.data.pairs:load_owlv2"),
    ModelKind("lpips", "LPIPS heads + torchvision ImageNet backbone", "editlens.metrics.lpips:preset_available",
              "editlens.metrics.lpips:load_lpips"),
    ModelKind("vlm-family", "a vision-language architecture the local backend runs",
              "editlens.models.registry:family_available"),
    ModelKind("vlm", "a vision-language model (judge, captioner, DICE detector), run locally", _HUB,
              "editlens.backends.local:load_backend"),
    ModelKind("dice", "released-style DICE models: base + LoRA detector and coherence estimator",
              "editlens.dice.released:preset_available", "editlens.dice.released:load_dice"),
    ModelKind("adiee", "ADIEE scorer checkpoint (released or our layout)", "editlens.adiee.checkpoint:preset_available",
              "editlens.adiee.checkpoint:load_for_loader"),
    ModelKind("twoframe", "two-frame video CLIP (ViFi-CLIP .pth or a trained directory)",
              "editlens.twoframe.evaluator:preset_available", "editlens.twoframe.evaluator:load_scorer"),
    ModelKind("editscore", "EditScore: LoRA adapters on a Qwen-VL base", "editlens.rewardmodels.editscore:preset_available",
              "editlens.rewardmodels.editscore:load_editscore"),
    ModelKind("editreward", "EditReward: a reward head on a Qwen-VL base",
              "editlens.rewardmodels.editreward:preset_available", "editlens.rewardmodels.editreward:load_editreward"),
    ModelKind("editor", "an image editor: a diffusers pipeline folder (adiee tune-editor, make-tiny-editor)",
              None, "editlens.editors.diffusers_editor:load_for_loader"),
)}


@dataclass(frozen=True)
class ModelPreset:
    name: str
    kind: str
    description: str = ""
    ref: str | None = None  # hub id, folder, file or "BASE+ADAPTER": what loads by default
    role: str | None = None  # the role this preset is the default of
    source: str = ""  # where the weights come from (shown with the fix)
    recipe: dict[str, Any] = field(default_factory=dict)  # the kind's own settings
    extra: dict[str, Any] = field(default_factory=dict)  # kind-specific top-level fields (families)
    file: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "description": self.description, "ref": self.ref,
                "role": self.role, "source": self.source, "recipe": dict(self.recipe), **self.extra,
                "file": self.file}


def user_preset_dirs() -> list[Path]:
    """Folders of the user's own presets: ``$EDITLENS_PRESET_DIR`` (``:``-separated), else ``~/.config/editlens/presets``."""
    env = os.environ.get("EDITLENS_PRESET_DIR")
    if env:
        return [Path(p).expanduser() for p in env.split(os.pathsep) if p]
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return [Path(base) / "editlens" / "presets"]


def _parse(text: str, where: str) -> ModelPreset:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{where}: not valid JSON ({exc.msg}, line {exc.lineno})") from None
    if not isinstance(data, dict):
        raise InputError(f"{where}: a preset is a JSON object")
    unknown = sorted(set(data) - PRESET_FIELDS)
    if unknown:
        raise InputError(f"{where}: unknown field(s) {unknown}; a preset holds {sorted(PRESET_FIELDS)}")
    for key in ("name", "kind"):
        if not isinstance(data.get(key), str) or not data[key].strip():
            raise InputError(f"{where}: {key!r} must be a non-empty string")
    if data["kind"] not in KINDS:
        raise InputError(f"{where}: unknown kind {data['kind']!r}; known: {', '.join(sorted(KINDS))}")
    if not isinstance(data.get("recipe", {}), dict):
        raise InputError(f"{where}: 'recipe' must be an object")
    core = {"name", "kind", "role", "ref", "description", "source", "recipe"}
    preset = ModelPreset(data["name"], data["kind"], data.get("description", ""), data.get("ref"), data.get("role"),
                         data.get("source", ""), dict(data.get("recipe") or {}),
                         {k: v for k, v in data.items() if k not in core}, where)
    if preset.kind == "vlm-family":
        _family_of(preset)  # checked when read, not when first used
    return preset


def _builtin_files() -> list[tuple[str, str]]:
    root = resources.files("editlens.models") / "presets"
    out = []

    def walk(node: Any, rel: str) -> None:
        for child in sorted(node.iterdir(), key=lambda c: c.name):
            if child.is_dir():
                walk(child, f"{rel}{child.name}/")
            elif child.name.endswith(".json"):
                out.append((f"editlens/models/presets/{rel}{child.name}", child.read_text(encoding="utf-8")))

    walk(root, "")
    return out


@functools.lru_cache(maxsize=1)
def _builtin() -> dict[str, ModelPreset]:
    found: dict[str, ModelPreset] = {}
    for where, text in _builtin_files():
        p = _parse(text, where)
        if p.name in found:
            raise InputError(f"{where}: preset {p.name!r} is also defined in {found[p.name].file}")
        found[p.name] = p
    return found


def presets() -> dict[str, ModelPreset]:
    """Every preset by name: the built-in ones, then the user's (which may not
    replace a built-in one)."""
    found = dict(_builtin())
    for folder in user_preset_dirs():
        if not folder.is_dir():
            continue
        for f in sorted(folder.rglob("*.json")):
            p = _parse(f.read_text(encoding="utf-8"), str(f))
            if p.name in found:
                raise InputError(f"{f}: preset {p.name!r} already exists ({found[p.name].file}); rename yours")
            found[p.name] = p
    return found


def get_preset(name: str, kind: str | None = None) -> ModelPreset:
    """A preset by name (``kind`` checks what it is), with did-you-mean on a typo."""
    allp = presets()
    if name not in allp:
        import difflib

        pool = [n for n, p in allp.items() if kind is None or p.kind == kind]
        close = difflib.get_close_matches(name, pool, n=3)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise InputError(f"unknown model preset {name!r}.{hint} `editlens models` lists them.")
    p = allp[name]
    if kind is not None and p.kind != kind:
        raise InputError(f"preset {name!r} is a {p.kind} preset, not {kind}")
    return p


def is_preset(name: str, kind: str | None = None) -> bool:
    p = presets().get(name)
    return p is not None and (kind is None or p.kind == kind)


def role_default(role: str) -> str | None:
    """The default reference of a role (``clip`` -> ``openai/clip-vit-base-patch32``), from its preset."""
    for p in presets().values():
        if p.role == role and p.ref:
            return p.ref
    return None


# -- VLM families -------------------------------------------------------------------------

#: convention -> what a prompt says about coordinates (see :mod:`editlens.backends.families`)
BOX_CONVENTIONS = ("fraction", "per-mille", "pixels")


@dataclass(frozen=True)
class Family:
    """A vision-language architecture the local backend runs (from a ``vlm-family`` preset)."""

    model_type: str
    model_class: str  # attribute of the transformers package
    boxes: str = "fraction"
    # attribute path of a vision tower that encodes each image row on its own
    # (so repeated images in a batch are encoded once); None where the tower mixes rows
    vision_tower: str | None = None
    processor: str | None = None  # "module:function" building a torchvision-free processor from a folder
    #: module names left unquantised when the language model loads in 4-bit (vision tower, connector, LM head)
    quantize_skip: tuple[str, ...] = ("lm_head",)

    @property
    def fallback_processor(self) -> Callable[[str], Any] | None:
        if not self.processor:
            return None
        module, _, attr = self.processor.partition(":")
        return getattr(importlib.import_module(module), attr)


def _family_of(p: ModelPreset) -> Family:
    e = p.extra
    if not e.get("model_class") or not e.get("model_type"):
        raise InputError(f"{p.file}: a vlm-family preset needs model_type and model_class")
    boxes = e.get("boxes", "fraction")
    if boxes not in BOX_CONVENTIONS:
        raise InputError(f"{p.file}: boxes must be one of {BOX_CONVENTIONS}, got {boxes!r}")
    skip = e.get("quantize_skip", ["lm_head"])
    if not isinstance(skip, list) or not all(isinstance(x, str) and x for x in skip):
        raise InputError(f"{p.file}: quantize_skip must be a list of module names")
    return Family(e["model_type"], e["model_class"], boxes, e.get("vision_tower"), e.get("processor"), tuple(skip))


def families() -> dict[str, Family]:
    """``model_type`` (and each alias) -> :class:`Family`, from the ``vlm-family`` presets."""
    out: dict[str, Family] = {}
    for p in presets().values():
        if p.kind == "vlm-family":
            fam = _family_of(p)
            for key in [fam.model_type, *p.extra.get("aliases", [])]:
                out[key] = fam
    return out


def family_for(model_type: str) -> Family | None:
    return families().get(model_type)


def family_available(preset: ModelPreset, models: dict[str, str]) -> tuple[bool, str | None]:
    import transformers

    cls = preset.extra.get("model_class", "")
    if hasattr(transformers, cls):
        return True, None
    return False, f"transformers {transformers.__version__} has no {cls}; upgrade transformers"


def availability(preset: ModelPreset, models: dict[str, str] | None = None) -> tuple[bool, str | None]:
    """Whether ``preset`` can load here, and why not (with the fix)."""
    try:
        ok, reason = KINDS[preset.kind].check(preset, models)
    except (ModelUnavailableError, InputError) as exc:
        ok, reason = False, str(exc)
    if not ok and preset.source and reason and preset.source not in reason:
        reason = f"{reason}\n  source: {preset.source}"
    return ok, reason

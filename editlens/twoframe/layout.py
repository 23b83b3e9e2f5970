"""ViFi-CLIP / OpenAI CLIP checkpoints in the *original* CLIP layout.

ViFi-CLIP fine-tunes OpenAI's CLIP and saves ``.pth`` files whose ``model``
entry holds the weights of its wrapper module, saved under DDP (every key
starts with ``module.``). The wrapper names the towers ``image_encoder.``
(CLIP's ``visual``) and ``text_encoder.`` (CLIP's text transformer,
positional embedding, final norm and projection); its prompt learner keeps
pre-computed prompt embeddings as buffers, which are of no use for arbitrary
instructions and are dropped. Plain OpenAI state dicts (``visual.conv1.weight``,
``transformer.resblocks.N...``) are read the same way.

This module maps that layout onto ``transformers``' :class:`CLIPModel`,
infers the architecture from the tensors, and accounts for every key: a key
that maps nowhere is *unexpected*, a parameter nothing fills is *missing*, and
either refuses the load (:class:`~editlens.errors.ModelUnavailableError`) -
a scorer never runs with randomly initialised parts. ViFi checkpoints have no
token embedding (the prompt learner used it once, at start-up); it must come
from ``base`` (the CLIP the checkpoint was fine-tuned from).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping

import torch

from editlens.errors import ModelUnavailableError

#: wrapper prefixes of ViFi-CLIP -> original CLIP prefixes
ALIASES = (("image_encoder.", "visual."), ("text_encoder.", ""))
#: keys that hold no weights (OpenAI's metadata) or that scoring cannot use
METADATA_KEYS = ("input_resolution", "context_length", "vocab_size")
DROPPED_PREFIXES = ("prompt_learner.",)

_BLOCK = {
    "ln_1": "layer_norm1",
    "ln_2": "layer_norm2",
    "mlp.c_fc": "mlp.fc1",
    "mlp.c_proj": "mlp.fc2",
    "attn.out_proj": "self_attn.out_proj",
}
_TOP = {
    "token_embedding.weight": "text_model.embeddings.token_embedding.weight",
    "positional_embedding": "text_model.embeddings.position_embedding.weight",
    "ln_final.weight": "text_model.final_layer_norm.weight",
    "ln_final.bias": "text_model.final_layer_norm.bias",
    "logit_scale": "logit_scale",
    "visual.class_embedding": "vision_model.embeddings.class_embedding",
    "visual.positional_embedding": "vision_model.embeddings.position_embedding.weight",
    "visual.conv1.weight": "vision_model.embeddings.patch_embedding.weight",
    "visual.ln_pre.weight": "vision_model.pre_layrnorm.weight",
    "visual.ln_pre.bias": "vision_model.pre_layrnorm.bias",
    "visual.ln_post.weight": "vision_model.post_layernorm.weight",
    "visual.ln_post.bias": "vision_model.post_layernorm.bias",
}
#: stored as (width, embed) and applied as x @ P; transformers' Linear holds P.T
_TRANSPOSED = {"text_projection": "text_projection.weight", "visual.proj": "visual_projection.weight"}
_RES = re.compile(r"^(visual\.)?transformer\.resblocks\.(\d+)\.(.+)$")


@dataclass
class LoadReport:
    """How every key of a checkpoint was accounted for."""

    path: str
    mapped: int = 0
    dropped: list[str] = field(default_factory=list)  # known and deliberately unused
    unexpected: list[str] = field(default_factory=list)  # maps to nothing
    missing: list[str] = field(default_factory=list)  # parameters nothing filled
    from_base: list[str] = field(default_factory=list)  # filled from the base model
    shape_errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.unexpected or self.missing or self.shape_errors)

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "mapped": self.mapped, "dropped": len(self.dropped),
                "dropped_examples": self.dropped[:5], "unexpected": self.unexpected, "missing": self.missing,
                "from_base": self.from_base, "shape_errors": self.shape_errors}

    def raise_if_bad(self) -> None:
        if self.ok:
            return
        parts = []
        for name in ("missing", "unexpected", "shape_errors"):
            items = getattr(self, name)
            if items:
                more = f" ... (+{len(items) - 8})" if len(items) > 8 else ""
                parts.append(f"{len(items)} {name.replace('_', ' ')}: {', '.join(items[:8])}{more}")
        hint = ""
        if any("token_embedding" in k for k in self.missing):
            hint = ("\n  ViFi-CLIP checkpoints hold no token embedding: pass base=<the CLIP it was fine-tuned from> "
                    "(an OpenAI .pt/.pth or a transformers CLIP directory; CLI: --base).")
        raise ModelUnavailableError(f"{self.path}: refusing to load a partial model; " + "; ".join(parts) + hint)


def _split_in_proj(hf_prefix: str, kind: str, t: torch.Tensor) -> Iterator[tuple[str, torch.Tensor]]:
    q, k, v = t.chunk(3, dim=0)
    for name, part in (("q_proj", q), ("k_proj", k), ("v_proj", v)):
        yield f"{hf_prefix}self_attn.{name}.{kind}", part


def _map_key(key: str, t: torch.Tensor) -> list[tuple[str, torch.Tensor]] | None:
    """transformers keys for one original-layout key, or ``None`` if it maps nowhere."""
    if key in _TOP:
        return [(_TOP[key], t)]
    if key in _TRANSPOSED:
        return [(_TRANSPOSED[key], t.t().contiguous())]
    m = _RES.match(key)
    if not m:
        return None
    tower = "vision_model" if m.group(1) else "text_model"
    prefix = f"{tower}.encoder.layers.{m.group(2)}."
    rest = m.group(3)
    if rest == "attn.in_proj_weight":
        return list(_split_in_proj(prefix, "weight", t))
    if rest == "attn.in_proj_bias":
        return list(_split_in_proj(prefix, "bias", t))
    module, _, leaf = rest.rpartition(".")
    if module in _BLOCK and leaf in ("weight", "bias"):
        return [(f"{prefix}{_BLOCK[module]}.{leaf}", t)]
    return None


def normalise_keys(state: Mapping[str, Any], report: LoadReport) -> dict[str, torch.Tensor]:
    """Strip ``module.``, rename ViFi's wrapper prefixes, drop prompt-learner
    buffers and metadata (recorded in ``report.dropped``)."""
    out: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        k = key[len("module."):] if key.startswith("module.") else key
        if k in METADATA_KEYS or k.startswith(DROPPED_PREFIXES):
            report.dropped.append(key)
            continue
        for old, new in ALIASES:
            if k.startswith(old):
                k = new + k[len(old):]
                break
        if not isinstance(value, torch.Tensor):
            report.unexpected.append(f"{key} (not a tensor)")
            continue
        out[k] = value
    return out


def original_to_hf(state: Mapping[str, torch.Tensor], report: LoadReport) -> dict[str, torch.Tensor]:
    """Map original-layout tensors to transformers keys; unknown keys go to ``report.unexpected``."""
    out: dict[str, torch.Tensor] = {}
    for key, t in state.items():
        mapped = _map_key(key, t)
        if mapped is None:
            report.unexpected.append(key)
            continue
        report.mapped += 1
        out.update(mapped)
    return out


def hf_to_original(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The inverse mapping: a transformers ``CLIPModel`` state dict in the
    original CLIP layout (used to export, and by the round-trip test)."""
    inv_top = {v: k for k, v in _TOP.items()}
    inv_tr = {v: k for k, v in _TRANSPOSED.items()}
    inv_block = {v: k for k, v in _BLOCK.items()}
    out: dict[str, torch.Tensor] = {}
    qkv: dict[tuple[str, str], dict[str, torch.Tensor]] = {}
    lay = re.compile(r"^(text_model|vision_model)\.encoder\.layers\.(\d+)\.(.+)\.(weight|bias)$")
    for key, t in state.items():
        if key in inv_top:
            out[inv_top[key]] = t
        elif key in inv_tr:
            out[inv_tr[key]] = t.t().contiguous()
        elif m := lay.match(key):
            pre = ("visual." if m.group(1) == "vision_model" else "") + f"transformer.resblocks.{m.group(2)}."
            module, leaf = m.group(3), m.group(4)
            if module in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"):
                qkv.setdefault((pre, leaf), {})[module.split(".")[1][0]] = t
            elif module in inv_block:
                out[f"{pre}{inv_block[module]}.{leaf}"] = t
            else:
                raise KeyError(f"no original-layout name for {key}")
        else:
            raise KeyError(f"no original-layout name for {key}")
    for (pre, leaf), parts in qkv.items():
        out[f"{pre}attn.in_proj_{leaf}"] = torch.cat([parts["q"], parts["k"], parts["v"]])
    return out


def _layers(state: Mapping[str, torch.Tensor], prefix: str) -> int:
    pat = re.compile(rf"^{re.escape(prefix)}(\d+)\.")
    found = {int(m.group(1)) for k in state if (m := pat.match(k))}
    return max(found) + 1 if found else 0


def infer_config(hf: Mapping[str, torch.Tensor], heads: int | None = None, text_heads: int | None = None,
                 tokenizer: Any = None) -> Any:
    """A :class:`CLIPConfig` read off the tensors. OpenAI's rule is one
    attention head per 64 channels; ``heads``/``text_heads`` override it
    (the count is not stored in the weights)."""
    from transformers import CLIPConfig

    try:
        patch = hf["vision_model.embeddings.patch_embedding.weight"]
        vpos = hf["vision_model.embeddings.position_embedding.weight"]
        tpos = hf["text_model.embeddings.position_embedding.weight"]
        proj = hf["visual_projection.weight"]
    except KeyError as exc:
        raise ModelUnavailableError(f"cannot infer the CLIP architecture: no tensor for {exc.args[0]}") from None
    vwidth, psize = patch.shape[0], patch.shape[-1]
    grid = int(round((vpos.shape[0] - 1) ** 0.5))
    twidth = tpos.shape[1]
    vocab = hf.get("text_model.embeddings.token_embedding.weight")

    def _h(width: int, given: int | None) -> int:
        h = given or max(1, width // 64)
        if width % h:
            raise ModelUnavailableError(f"width {width} is not divisible by {h} attention heads; pass heads=")
        return h

    text = dict(hidden_size=twidth, num_hidden_layers=_layers(hf, "text_model.encoder.layers."),
                num_attention_heads=_h(twidth, text_heads or heads),
                intermediate_size=hf["text_model.encoder.layers.0.mlp.fc1.weight"].shape[0],
                max_position_embeddings=tpos.shape[0], vocab_size=vocab.shape[0] if vocab is not None else 49408,
                hidden_act="quick_gelu")
    if tokenizer is not None:
        text.update(eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.bos_token_id,
                    pad_token_id=tokenizer.pad_token_id)
    vision = dict(hidden_size=vwidth, num_hidden_layers=_layers(hf, "vision_model.encoder.layers."),
                  num_attention_heads=_h(vwidth, heads),
                  intermediate_size=hf["vision_model.encoder.layers.0.mlp.fc1.weight"].shape[0],
                  image_size=grid * psize, patch_size=psize, hidden_act="quick_gelu")
    return CLIPConfig(text_config=text, vision_config=vision, projection_dim=proj.shape[0])


_SAFE_GLOBALS = {
    ("collections", "OrderedDict"), ("copyreg", "_reconstructor"), ("_codecs", "encode"), ("torch", "Size"),
    ("torch", "device"),
    ("torch._utils", "_rebuild_tensor"), ("torch._utils", "_rebuild_tensor_v2"), ("torch._utils", "_rebuild_parameter"),
    ("torch._tensor", "_rebuild_from_type_v2"), ("torch.nn.parameter", "Parameter"),
    ("numpy", "dtype"), ("numpy", "ndarray"), ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar"),
    ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
} | {("builtins", n) for n in ("object", "dict", "list", "set", "frozenset", "tuple", "int", "float", "complex", "str",
                               "bytes", "bytearray", "bool", "slice")}


def _inert_pickle_module(stubbed: list[str]) -> Any:
    """A pickle module whose unpickler builds only tensors and plain data:
    any other global (a training run's config object, an AMP state class)
    becomes an inert empty stand-in and is listed in ``stubbed``. Nothing
    outside :data:`_SAFE_GLOBALS` is ever called."""
    import pickle
    import types

    import numpy as np

    class _Unpickler(pickle.Unpickler):
        def find_class(self, module: str, name: str) -> Any:
            if (module, name) in _SAFE_GLOBALS:
                return super().find_class(module, name)
            if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
                return getattr(torch, name)
            if module.startswith("numpy") and name.endswith("DType") and hasattr(np.dtypes, name):
                return getattr(np.dtypes, name)
            stubbed.append(f"{module}.{name}")

            class Inert(dict):
                def __init__(self, *args: Any, **kwargs: Any) -> None:
                    dict.__init__(self)

                def __setstate__(self, state: Any) -> None:
                    pass

                def __call__(self, *args: Any, **kwargs: Any) -> Any:
                    return Inert()  # a pickled call chain stays inert

            Inert.__qualname__ = Inert.__name__ = f"inert:{module}.{name}"
            return Inert

    mod = types.ModuleType("editlens_inert_pickle")
    mod.Unpickler = _Unpickler  # type: ignore[attr-defined]
    mod.load = pickle.load  # type: ignore[attr-defined]
    mod.__dict__.update({k: getattr(pickle, k) for k in ("UnpicklingError", "HIGHEST_PROTOCOL")})
    return mod


def read_state(path: str | Path) -> dict[str, Any]:
    """The weights of a ``.pth``/``.pt``: the ``model`` (or ``state_dict``)
    entry when there is one, else the dict itself; TorchScript archives
    (OpenAI's released ``.pt``) through :func:`torch.jit.load`.

    Training checkpoints also pickle objects such as the run's config
    (ViFi-CLIP saves a yacs ``CfgNode``), which ``weights_only`` loading
    refuses; those are read with an unpickler that replaces every non-tensor
    class by an inert stand-in instead of running its code.
    """
    import pickle
    import zipfile

    p = Path(path)
    if not p.is_file():
        raise ModelUnavailableError(f"{p}: no such checkpoint file")
    if zipfile.is_zipfile(p):
        with zipfile.ZipFile(p) as zf:
            if any(n.endswith("constants.pkl") for n in zf.namelist()):
                return dict(torch.jit.load(str(p), map_location="cpu").state_dict())
    try:
        obj = torch.load(p, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        stubbed: list[str] = []
        try:
            obj = torch.load(p, map_location="cpu", weights_only=False, pickle_module=_inert_pickle_module(stubbed))
        except Exception as exc:
            raise ModelUnavailableError(f"{p}: not a readable torch checkpoint ({type(exc).__name__}: {exc})") from exc
    except Exception as exc:  # truncated or foreign files
        raise ModelUnavailableError(f"{p}: not a readable torch checkpoint ({type(exc).__name__}: "
                                    f"{str(exc).splitlines()[0] if str(exc) else ''})") from exc
    if isinstance(obj, dict):
        for entry in ("model", "state_dict"):
            if isinstance(obj.get(entry), dict):
                return obj[entry]
        return obj
    raise ModelUnavailableError(f"{p}: expected a dict of tensors, got {type(obj).__name__}")


def base_state(base: str | Path) -> dict[str, torch.Tensor]:
    """transformers-keyed tensors of a base CLIP: an original-layout file or a transformers directory."""
    p = Path(base)
    if p.is_dir():
        from transformers import CLIPModel

        from editlens.models.resolve import load_pretrained

        return dict(load_pretrained(CLIPModel, str(p)).state_dict())
    report = LoadReport(str(p))
    hf = original_to_hf(normalise_keys(read_state(p), report), report)
    if report.unexpected:
        raise ModelUnavailableError(f"{p}: base model has keys that map nowhere: {report.unexpected[:8]}")
    return hf


def load_original_clip(path: str | Path, *, tokenizer: Any = None, base: str | Path | None = None,
                       heads: int | None = None, text_heads: int | None = None) -> tuple[Any, LoadReport]:
    """Build a transformers ``CLIPModel`` from an original-layout checkpoint.

    Every key is accounted for (see :class:`LoadReport`); a missing,
    unexpected or mis-shaped tensor raises before anything is scored.
    """
    from transformers import CLIPModel

    report = LoadReport(str(path))
    hf = original_to_hf(normalise_keys(read_state(path), report), report)
    base_hf = base_state(base) if base is not None else {}
    probe = {**base_hf, **hf}  # architecture of the checkpoint, vocabulary of the base if needed
    config = infer_config(probe, heads=heads, text_heads=text_heads, tokenizer=tokenizer)
    model = CLIPModel(config)
    expected = model.state_dict()
    final: dict[str, torch.Tensor] = {}
    for key, ref in expected.items():
        t = hf.get(key)
        if t is None and key in base_hf:
            t = base_hf[key]
            report.from_base.append(key)
        if t is None:
            report.missing.append(key)
        elif tuple(t.shape) != tuple(ref.shape):
            report.shape_errors.append(f"{key}: {tuple(t.shape)} vs expected {tuple(ref.shape)}")
        else:
            final[key] = t.to(ref.dtype)
    report.unexpected += [k for k in hf if k not in expected]
    report.raise_if_bad()
    model.load_state_dict(final, strict=True)
    return model.eval(), report

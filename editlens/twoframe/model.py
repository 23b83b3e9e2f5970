"""The two-frame video-text model: an edit is the 2-frame video [source, edited].

* **faithful** mode is ViFi-CLIP's scoring: both frames go through the CLIP
  image tower, the projected per-frame features are mean-pooled over time and
  L2-normalised; the instruction's EOT feature from the text tower is the
  text side; the score is their cosine (logit = exp(logit_scale) x cosine).
  Mean pooling is symmetric, so [source, edited] and [edited, source] score
  the same, and a no-op edit looks like its source.
* **order** mode adds :class:`TemporalHead`: frame-position embeddings, a
  difference token (edited minus source features) and a small transformer;
  its output is added to the mean-pooled feature through a zero-initialised
  projection, so an untrained head reproduces the faithful score exactly and
  training only has to learn the correction.

A saved model is a directory: the CLIP weights and tokenizer in transformers'
format (``config.json``, ``model.safetensors``), ``twoframe.json`` (mode,
preprocessing, head shape, calibration, provenance) and ``head.safetensors``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
from torch import nn

from editlens.errors import ModelUnavailableError
from editlens.twoframe.calibration import apply_platt
from editlens.twoframe.preprocess import FramePreprocess

FORMAT = "editlens.twoframe/1"
MODES = ("faithful", "order")


def _pooled(out: Any) -> torch.Tensor:
    # transformers 5 returns an output object holding the projection; 4.x a tensor
    return out if isinstance(out, torch.Tensor) else out.pooler_output


class TemporalHead(nn.Module):
    """Order-aware pooling of (source, edited) frame features.

    Tokens: source + p0, edited + p1, (edited - source) + p2; a
    ``layers``-deep pre-norm transformer mixes them; the mean output goes
    through a zero-initialised projection and is added to the mean of the two
    frames. Swapping the frames flips the difference token and swaps the
    position embeddings, so the output changes; for a no-op the difference
    token is zero, which the head can learn to map away from any instruction.
    """

    def __init__(self, dim: int, layers: int = 1, heads: int | None = None) -> None:
        super().__init__()
        self.dim, self.layers = dim, layers
        self.heads = heads or next(h for h in (8, 4, 2, 1) if dim % h == 0)
        self.position = nn.Parameter(torch.randn(3, dim) * 0.02)
        block = nn.TransformerEncoderLayer(dim, self.heads, dim_feedforward=2 * dim, dropout=0.0, batch_first=True,
                                           norm_first=True)
        self.encoder = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.out = nn.Linear(dim, dim)
        nn.init.zeros_(self.out.weight)
        nn.init.zeros_(self.out.bias)

    def forward(self, source: torch.Tensor, edited: torch.Tensor) -> torch.Tensor:
        # features arrive in float32 whatever the towers ran in; the head computes in its own dtype
        # (bf16 when the model was loaded so) and answers in the dtype it was given
        given = source.dtype
        source, edited = source.to(self.position.dtype), edited.to(self.position.dtype)
        tokens = torch.stack([source, edited, edited - source], dim=1) + self.position
        mixed = self.encoder(tokens)
        return ((source + edited) / 2 + self.out(self.norm(mixed.mean(dim=1)))).to(given)

    def config(self) -> dict[str, int]:
        return {"dim": self.dim, "layers": self.layers, "heads": self.heads}


#: Text prompts: ``raw`` (the instruction as it is; editlens' own models), ``vifi`` (ViFi-CLIP's
#: "a photo of a ..." style, the default for its .pth weights), or the path of a file with ``$instruction``.
PROMPTS = {"raw": None, "vifi": "twoframe_prompt_vifi"}


def prompt_template(prompt: str) -> Any:
    """The :class:`~editlens.judges.templates.Template` of a prompt choice (``None`` for ``raw``)."""
    from editlens.errors import InputError
    from editlens.judges.templates import Template, load_template

    if prompt in PROMPTS:
        name = PROMPTS[prompt]
        return load_template(name) if name else None
    p = Path(prompt).expanduser()
    if not p.is_file():
        raise InputError(f"two-frame prompt {prompt!r}: neither raw, vifi nor a file (with $instruction)")
    text = p.read_text(encoding="utf-8")
    if "$instruction" not in text and "${instruction}" not in text:
        raise InputError(f"{p}: a two-frame prompt file needs $instruction")
    return Template("twoframe_prompt", text, str(p))


class TwoFrameModel(nn.Module):
    """CLIP towers + optional temporal head + preprocessing + calibration."""

    def __init__(self, clip: Any, tokenizer: Any, preprocess: FramePreprocess, mode: str = "faithful",
                 head: TemporalHead | None = None, calibration: dict[str, Any] | None = None,
                 provenance: dict[str, Any] | None = None, prompt: str = "raw") -> None:
        super().__init__()
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if mode == "order" and head is None:
            raise ValueError("order mode needs a TemporalHead")
        self.clip = clip
        self.head = head
        self.tokenizer = tokenizer
        self.preprocess = preprocess
        self.mode = mode
        self.calibration = calibration
        self.provenance = dict(provenance or {})
        self.max_length = int(getattr(clip.config.text_config, "max_position_embeddings", 77))
        self.prompt = prompt
        self._prompt = prompt_template(prompt)

    def prompted(self, texts: Sequence[str]) -> list[str]:
        """The texts the text tower reads: each instruction in the model's prompt."""
        if self._prompt is None:
            return list(texts)
        import string

        return [string.Template(self._prompt.text).substitute(instruction=t).strip() for t in texts]

    # ------------------------------------------------------------ features
    @property
    def device(self) -> torch.device:
        return next(self.clip.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(self.clip.parameters()).dtype

    def frame_features(self, crops: torch.Tensor) -> torch.Tensor:
        """Projected, unnormalised image features of ``(N, S, S, 3)`` uint8 crops."""
        pixels = self.preprocess.normalise(crops.to(self.device)).to(self.dtype)
        return _pooled(self.clip.get_image_features(pixel_values=pixels)).float()

    def text_features(self, texts: Sequence[str]) -> torch.Tensor:
        """L2-normalised text features (the projected EOT token) of the prompted instructions."""
        tok = self.tokenizer(self.prompted(texts), padding=True, truncation=True, max_length=self.max_length,
                             return_tensors="pt")
        out = self.clip.get_text_features(input_ids=tok["input_ids"].to(self.device),
                                          attention_mask=tok["attention_mask"].to(self.device))
        return nn.functional.normalize(_pooled(out).float(), dim=-1)

    def video_features(self, source: torch.Tensor, edited: torch.Tensor, mode: str | None = None) -> torch.Tensor:
        """L2-normalised video features from per-frame features ``(B, D)``.

        ``mode="faithful"`` forces mean pooling even when a head is present.
        """
        mode = mode or self.mode
        if mode == "order":
            if self.head is None:
                raise ModelUnavailableError("this model has no order-aware head; train one with "
                                            "`editlens twoframe train --mode order`")
            # the head takes its inputs in its own dtype (features are float32, a head may be bf16)
            dt = next(self.head.parameters()).dtype
            pooled = self.head(source.to(dt), edited.to(dt)).float()
        else:
            pooled = (source + edited) / 2
        return nn.functional.normalize(pooled, dim=-1)

    @property
    def scale(self) -> float:
        return float(self.clip.logit_scale.detach().exp())

    def outputs(self, cosine: np.ndarray, mode: str | None = None) -> dict[str, np.ndarray]:
        """Cosine, logit (exp(logit_scale) x cosine) and, when a calibration was
        fitted for this ``mode``, the calibrated 0-1 score."""
        out = {"cosine": cosine, "logit": cosine * self.scale}
        if self.calibration and self.calibration.get("mode", self.mode) == (mode or self.mode):
            out["calibrated"] = apply_platt(self.calibration, cosine)
        return out

    # ------------------------------------------------------------ saving
    def save(self, path: str | os.PathLike, extra: dict[str, Any] | None = None) -> Path:
        """Write the model directory atomically (a temp dir renamed into place)."""
        from safetensors.torch import save_file

        from editlens.core.io import atomic_directory, write_json
        from editlens.models.describe import write_description

        path = Path(path)
        with atomic_directory(path) as tmp:
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()
            self.clip.save_pretrained(tmp)
            self.tokenizer.save_pretrained(tmp)
            meta = {"format": FORMAT, "mode": self.mode, "preprocess": self.preprocess.to_dict(),
                    "head": self.head.config() if self.head is not None else None,
                    "calibration": self.calibration, "provenance": self.provenance, "prompt": self.prompt,
                    **(extra or {})}
            if self.head is not None:
                save_file({k: v.detach().cpu().contiguous() for k, v in self.head.state_dict().items()},
                          str(tmp / "head.safetensors"))
            write_json(tmp / "twoframe.json", meta)
            write_description(tmp, "twoframe", "editlens.twoframe.model:TwoFrameModel", format=FORMAT)
        return path


def _strict_clip(ref: str) -> Any:
    """transformers' CLIPModel, refusing checkpoints with missing or unexpected weights."""
    from transformers import CLIPModel

    from editlens.models.resolve import load_pretrained

    model, info = load_pretrained(CLIPModel, ref, output_loading_info=True)
    bad = {k: v for k, v in info.items() if k in ("missing_keys", "unexpected_keys", "mismatched_keys") and v}
    if bad:
        detail = "; ".join(f"{k}: {list(v)[:6]}" for k, v in bad.items())
        raise ModelUnavailableError(f"{ref}: refusing a CLIP checkpoint with unaccounted weights ({detail})")
    return model


def _tokenizer(ref: str | None, where: str) -> Any:
    from transformers import AutoTokenizer

    from editlens.models.resolve import load_pretrained

    if not ref:
        raise ModelUnavailableError(f"{where}: holds no tokenizer; pass tokenizer=<CLIP tokenizer dir or hub id> "
                                    "(CLI: --tokenizer)")
    return load_pretrained(AutoTokenizer, ref)


def is_twoframe_dir(path: str | os.PathLike) -> bool:
    return (Path(path) / "twoframe.json").is_file()


def load_twoframe(ref: str | os.PathLike, *, tokenizer: str | None = None, base: str | None = None,
                  heads: int | None = None, preset: str | None = None, device: str = "auto",
                  dtype: str = "auto", prompt: str | None = None) -> TwoFrameModel:
    """Load a scorer from any of:

    * a directory written by :meth:`TwoFrameModel.save` (``twoframe.json``);
    * a ViFi-CLIP / OpenAI ``.pth``/``.pt`` in the original CLIP layout
      (needs ``tokenizer``; ViFi checkpoints also ``base`` for the token
      embedding; preprocessing defaults to ViFi's);
    * any transformers CLIP (hub id or directory): the zero-shot baseline,
      faithful mode, preprocessing defaults to CLIP's own statistics.
    """
    from editlens.models.precision import decide

    ref = str(ref)
    path = Path(ref).expanduser()
    if path.is_dir() and is_twoframe_dir(path):
        from editlens.core.io import read_json

        meta = read_json(path / "twoframe.json", "the two-frame model's description")
        fmt = meta.get("format") if isinstance(meta, dict) else None
        if fmt != FORMAT:
            raise ModelUnavailableError(f"{path}/twoframe.json: unknown format {fmt!r} (want {FORMAT})")
        clip = _strict_clip(str(path))
        tok = _tokenizer(tokenizer or str(path), str(path))
        head = None
        if meta.get("head"):
            from safetensors.torch import load_file

            head = TemporalHead(**meta["head"])
            weights = path / "head.safetensors"
            if not weights.is_file():
                raise ModelUnavailableError(f"{weights}: missing (twoframe.json declares an order-aware head)")
            result = head.load_state_dict(load_file(str(weights)), strict=False)
            if result.missing_keys or result.unexpected_keys:
                raise ModelUnavailableError(f"{weights}: missing {result.missing_keys}, unexpected "
                                            f"{result.unexpected_keys}")
        prep = FramePreprocess.from_dict(meta["preprocess"])
        prov = dict(meta.get("provenance") or {})
        prov["started_from"] = prov.get("checkpoint")  # what this model was trained from
        prov["checkpoint"] = str(path)
        model = TwoFrameModel(clip, tok, prep, meta["mode"], head, meta.get("calibration"), prov,
                              prompt or meta.get("prompt", "raw"))
    elif path.is_file():
        from editlens.twoframe.layout import load_original_clip

        tok = _tokenizer(tokenizer, str(path))
        clip, report = load_original_clip(path, tokenizer=tok, base=base, heads=heads)
        size = clip.config.vision_config.image_size
        model = TwoFrameModel(clip, tok, FramePreprocess.for_size(size, preset or "vifi"), "faithful",
                              provenance={"checkpoint": str(path), "layout": "original-clip", "load": report.to_dict(),
                                          "base": base}, prompt=prompt or "vifi")  # ViFi's own text prompt
    else:
        clip = _strict_clip(ref)
        tok = _tokenizer(tokenizer or ref, ref)
        size = clip.config.vision_config.image_size
        model = TwoFrameModel(clip, tok, FramePreprocess.for_size(size, preset or "clip"), "faithful",
                              provenance={"checkpoint": ref, "layout": "transformers"}, prompt=prompt or "raw")
    prec = decide(dtype, device)
    model.provenance["precision"] = prec.to_dict()
    from editlens.models import emulated_bf16

    emulated_bf16.install(model)  # a .pth's CLIP is built here, not by the loader: route its bf16 products too
    return model.to(prec.device, prec.torch_dtype).eval()

"""Registered evaluators ``twoframe`` (faithful, ViFi-CLIP scoring) and
``twoframe_order`` (with the order-aware temporal head).

The model comes from the ``twoframe`` role: ``--model twoframe=PATH`` (a
directory written by ``editlens twoframe train``, a ViFi-CLIP/OpenAI ``.pth``,
or any transformers CLIP for the zero-shot baseline), ``EDITLENS_MODEL_TWOFRAME``
or the config file. A ``.pth`` needs ``--option twoframe.tokenizer=DIR`` (and,
for ViFi checkpoints, ``twoframe.base=...``). ``output`` picks the value:
``cosine`` (default), ``logit`` (exp(logit_scale) x cosine) or ``calibrated``
(0-1, needs a fitted calibration); all available ones are in ``details``.
Both evaluators share one loaded model and its frame cache, so a source
shared by many edits is encoded once.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Sequence

from editlens.core.types import LoadedEdit, Score
from editlens.errors import ModelUnavailableError
from editlens.metrics.base import Metric
from editlens.twoframe.preprocess import IMAGENET_MEAN_255, IMAGENET_STD_255

ROLE = "twoframe"
OUTPUTS = ("cosine", "logit", "calibrated")


def resolve(model: str | None, models: dict[str, str] | None) -> str:
    from editlens.models.resolve import model_reference

    return model_reference(model or ROLE, models).ref


def check_available(options: dict[str, Any], models: dict[str, str]) -> tuple[bool, str | None]:
    """The registry's availability hook (``MetricSpec.availability``)."""
    return availability(resolve(options.get("model"), models), options)


def availability(ref: str, options: dict[str, Any]) -> tuple[bool, str | None]:
    """Whether the two-frame model at ``ref`` can load offline (no loading done)."""
    from editlens.models.resolve import is_available

    p = Path(ref).expanduser()
    if p.is_file():
        if not options.get("tokenizer"):
            return False, f"{p} is a checkpoint file: pass --option twoframe.tokenizer=<CLIP tokenizer dir>"
        return True, None
    if is_available(ref):
        return True, None
    return False, (f"model {ref!r} (twoframe) not found locally; train one with `editlens twoframe train`, "
                   "then pass --model twoframe=DIR (or set EDITLENS_MODEL_TWOFRAME)")


def get_scorer(ref: str, tokenizer: str | None = None, base: str | None = None, heads: int | None = None,
               preset: str | None = None, device: str = "auto", dtype: str = "auto", prompt: str | None = None) -> Any:
    """One loaded model + frame cache per settings, shared by both evaluators."""
    from editlens.models.loader import load_model

    return load_model(ref, kind="twoframe", device=device, dtype=dtype, tokenizer=tokenizer, base=base, heads=heads,
                      preset=preset, prompt=prompt)


def load_scorer(ref: Any, precision: Any, quantization: str, models: dict[str, str], tokenizer: str | None = None,
                base: str | None = None, heads: int | None = None, preset: str | None = None,
                prompt: str | None = None, **recipe: Any) -> Any:
    """The ``twoframe`` kind's loader (:func:`editlens.models.loader.load_model`); a preset's recipe
    (``file``, ``tokenizer``, ``base``, ``preprocess``, ``prompt``) fills what is not given."""
    from editlens.twoframe.model import load_twoframe
    from editlens.twoframe.scorer import TwoFrameScorer

    if quantization == "nf4":
        raise ModelUnavailableError("two-frame models load unquantised")
    return TwoFrameScorer(load_twoframe(ref.ref, tokenizer=tokenizer or recipe.get("tokenizer"),
                                        base=base or recipe.get("base"), heads=heads,
                                        preset=preset or recipe.get("preprocess"), device=precision.device,
                                        dtype=precision.dtype, prompt=prompt or recipe.get("prompt")))


class TwoFrameEvaluator(Metric):
    """[source, edited] as a 2-frame video against the instruction."""

    def __init__(self, mode: str = "faithful", output: str = "cosine", model: str | None = None,
                 tokenizer: str | None = None, base: str | None = None, heads: int | None = None,
                 preset: str | None = None, device: str = "auto", dtype: str = "auto",
                 models: dict[str, str] | None = None, prompt: str | None = None) -> None:
        if mode not in ("faithful", "order"):
            raise ValueError(f"mode must be 'faithful' or 'order', got {mode!r}")
        if output not in OUTPUTS:
            raise ValueError(f"output must be one of {OUTPUTS}, got {output!r}")
        self.mode, self.output = mode, output
        self.ref = resolve(model, models)
        # prompt: raw, vifi or a file with $instruction (default: the model's own; vifi for ViFi .pth weights)
        self.load_options: dict[str, Any] = dict(tokenizer=tokenizer, base=base, heads=heads, preset=preset,
                                                 device=device, dtype=dtype, prompt=prompt)
        self._scorer: Any = None
        if mode == "order" and not _has_head(self.ref):
            raise ModelUnavailableError(f"{self.ref}: has no order-aware head (twoframe_order needs a model trained "
                                        "with `editlens twoframe train --mode order`)")

    @property
    def scorer(self) -> Any:
        if self._scorer is None:
            scorer = get_scorer(self.ref, **self.load_options)
            if self.mode == "order" and scorer.model.head is None:
                raise ModelUnavailableError(f"{self.ref}: has no order-aware head (twoframe_order needs a model "
                                            "trained with `editlens twoframe train --mode order`)")
            cal = scorer.model.calibration
            if self.output == "calibrated" and (not cal or cal.get("mode", scorer.model.mode) != self.mode):
                raise ModelUnavailableError(f"{self.ref}: has no calibration for {self.mode} mode; fit one with "
                                            f"`editlens twoframe calibrate --mode {self.mode}` or use output=cosine")
            self._scorer = scorer
        return self._scorer

    def compute(self, batch: Sequence[LoadedEdit]) -> list[float | Score]:
        out = self.scorer.score([s.source_hash for s in batch], [s.source for s in batch],
                                [s.edited_hash for s in batch], [s.edited for s in batch],
                                [s.instruction for s in batch], mode=self.mode)
        scores: list[float | Score] = []
        release = self.release()
        for i in range(len(batch)):
            details: dict[str, Any] = {k: float(v[i]) for k, v in out.items()}
            details["mode"] = self.mode
            details["prompt"] = self.scorer.model.prompt  # how the instruction was put to the text tower
            details.update(release)
            scores.append(Score(self.name, float(out[self.output][i]), details=details))
        return scores

    def release(self) -> dict[str, Any]:
        """For a ViFi-CLIP checkpoint in its original layout: whether scoring is the release's model-level
        behaviour (preprocessing, prompt, mean pooling) and what differs; ``{}`` for models trained here."""
        m = self.scorer.model
        if m.provenance.get("layout") != "original-clip":
            return {}
        diffs = []
        if m.preprocess.interpolation != "bilinear-cv2":
            diffs.append(f"frames resized with {m.preprocess.interpolation} (Pillow); the release uses OpenCV bilinear "
                         "without antialiasing")
        if (m.preprocess.mean, m.preprocess.std) != (IMAGENET_MEAN_255, IMAGENET_STD_255):
            diffs.append("CLIP's normalisation statistics; the release uses ImageNet's")
        if m.prompt != "vifi":
            diffs.append(f"text prompt {m.prompt!r}; the release puts the text into 'a photo of a ...'")
        if self.mode != "faithful":
            diffs.append("the order-aware head is editlens' own")
        return {"identical_to_release": not diffs, "differences_from_release": diffs}

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "model": _fingerprint(self.ref), "prompt": self.load_options["prompt"] or "model's own"}


def _has_head(ref: str) -> bool:
    from editlens.core.io import read_json
    from editlens.errors import InputError

    meta = Path(ref).expanduser() / "twoframe.json"
    try:
        doc = read_json(meta) if meta.is_file() else {}
    except InputError:  # not a two-frame folder this can read: loading it says why
        return False
    return bool(doc.get("head")) if isinstance(doc, dict) else False


def _fingerprint(ref: str) -> dict[str, Any]:
    """Weights and settings identity: retraining or recalibrating means new results."""
    from editlens.models.fingerprint import cached_sha256, fingerprint
    from editlens.models.resolve import model_reference

    p = Path(ref).expanduser()
    if p.is_file():
        return {"ref": ref, "weights": {p.name: cached_sha256(p)}}
    out = fingerprint(model_reference(ref))
    meta = p / "twoframe.json"
    if meta.is_file():
        out["twoframe_json"] = hashlib.sha256(meta.read_bytes()).hexdigest()
    return out


def preset_available(preset: Any, models: dict[str, str]) -> tuple[bool, str | None]:
    """A ``twoframe`` preset's availability (:mod:`editlens.models.registry`):
    its checkpoint given for the role, with the tokenizer the recipe names."""
    mref_ref = resolve(None, models) if preset.role else preset.ref
    if not mref_ref or mref_ref == ROLE:
        return False, (f"no checkpoint given: download {preset.recipe.get('file', 'the checkpoint')}, then pass "
                       f"--model {ROLE}=FILE --option {ROLE}.tokenizer={preset.recipe.get('tokenizer', 'DIR')}")
    return availability(mref_ref, {"tokenizer": preset.recipe.get("tokenizer")})

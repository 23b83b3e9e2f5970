"""Seeded augmentations of a source image: each copy is still the unedited
source (a failed edit, score 0) but not pixel-identical, so the scorer
cannot learn "identical means fail" alone."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image, ImageEnhance

from editlens.adiee.config import AugmentConfig


def augment(arr: np.ndarray, kind: str, rng: np.random.Generator, cfg: AugmentConfig) -> np.ndarray:
    """One augmented copy of an RGB uint8 image; same size as the input."""
    img = Image.fromarray(arr)
    w, h = img.size
    if kind == "crop":
        f = rng.uniform(cfg.crop_fraction, 1.0)
        cw, ch = max(1, int(w * f)), max(1, int(h * f))
        x0, y0 = int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1))
        out = img.crop((x0, y0, x0 + cw, y0 + ch)).resize((w, h), Image.Resampling.BICUBIC)
    elif kind == "color":
        s = cfg.color_strength
        out = img
        for enh in (ImageEnhance.Brightness, ImageEnhance.Contrast, ImageEnhance.Color):
            out = enh(out).enhance(float(rng.uniform(1 - s, 1 + s)))
    elif kind == "jpeg":
        buf = io.BytesIO()
        img.save(buf, format="JPEG", quality=int(cfg.jpeg_quality))
        out = Image.open(io.BytesIO(buf.getvalue())).convert("RGB")
    elif kind == "affine":
        angle = float(rng.uniform(-cfg.max_rotation_deg, cfg.max_rotation_deg))
        dx = int(rng.uniform(-cfg.max_shift_fraction, cfg.max_shift_fraction) * w)
        dy = int(rng.uniform(-cfg.max_shift_fraction, cfg.max_shift_fraction) * h)
        out = img.rotate(angle, resample=Image.Resampling.BICUBIC, translate=(dx, dy), fillcolor=(0, 0, 0))
    else:
        raise ValueError(f"unknown augmentation {kind!r}")
    return np.asarray(out.convert("RGB"), dtype=np.uint8)

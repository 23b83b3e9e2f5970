"""A model-free change map: what changed between source and edited, and where.

Diffusion editors re-render the whole image, so "unchanged" regions come
back slightly recoloured, blurred, shifted by a pixel or two, and
re-compressed. A raw pixel difference lights up everywhere. This detector
removes those nuisances before thresholding:

1. both images are resized to a working resolution (longest side 256 px),
   which also makes 1-2 px shifts at full size sub-pixel;
2. the edited image is photometrically aligned to the source with a robust
   per-channel gain/offset fit (global colour/brightness drift);
3. both are smoothed with a Gaussian (JPEG blocks, noise, slight blur);
4. the distance at each pixel is the smallest over shifts of up to
   ``shift_radius`` working pixels, in both directions (residual misalignment);
5. a threshold that adapts to the image's own residual level, with a floor,
   and hysteresis (strong seeds grown into weaker neighbours) give a mask;
6. small components are dropped; the rest become regions with a box, an
   area and a strength.

It needs no weights, so it is the offline default detector.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

import numpy as np
from PIL import Image
from scipy import ndimage

from editlens.core.types import LoadedEdit, Score
from editlens.metrics.base import PairMetric


@dataclass
class ChangeRegion:
    """One connected changed region, in the source image's pixel coordinates."""

    box: tuple[int, int, int, int]  # x0, y0, x1, y1 (x1, y1 exclusive)
    box_norm: tuple[float, float, float, float]
    area_fraction: float  # changed pixels in the region / image pixels
    strength: float  # mean distance in the region / threshold (> 1)
    confidence: float  # min(1, strength - 1): 0 at the threshold, 1 at twice it

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["box"] = list(self.box)
        d["box_norm"] = [round(v, 5) for v in self.box_norm]
        d["area_fraction"] = round(self.area_fraction, 6)
        d["strength"] = round(self.strength, 4)
        d["confidence"] = round(self.confidence, 4)
        return d


@dataclass
class ChangeMap:
    """The result of :func:`change_map`."""

    distance: np.ndarray  # float32, working resolution
    mask: np.ndarray  # bool, working resolution
    threshold: float
    regions: list[ChangeRegion] = field(default_factory=list)
    size: tuple[int, int] = (0, 0)  # source (height, width)

    @property
    def changed_fraction(self) -> float:
        return float(self.mask.mean())

    def full_mask(self) -> np.ndarray:
        """The mask at the source resolution (nearest neighbour)."""
        h, w = self.size
        img = Image.fromarray(self.mask.astype(np.uint8) * 255)
        return np.asarray(img.resize((w, h), Image.Resampling.NEAREST)) > 127


@dataclass(frozen=True)
class ChangeMapParams:
    """Tuning of :func:`change_map`; the defaults were set on AURORA images
    (MagicBrush, Kubric, WhatsUp) against JPEG, resampling and drift."""

    work_size: int = 256
    blur_sigma: float = 1.5
    shift_radius: int = 1
    floor: float = 0.10  # minimum threshold, in [0, 1] colour units
    noise_factor: float = 3.0  # threshold >= noise_factor * median distance
    cap: float = 0.25  # the adaptive threshold never exceeds this
    low_ratio: float = 0.5  # hysteresis: grow into pixels above low_ratio * threshold
    min_area: float = 0.002  # drop regions smaller than this fraction of the image
    min_strength: float = 1.0  # drop regions whose mean distance is below the threshold


def _to_work(arr: np.ndarray, size: int) -> np.ndarray:
    h, w = arr.shape[:2]
    scale = size / max(h, w)
    if scale < 1:
        nh, nw = max(1, round(h * scale)), max(1, round(w * scale))
        arr = np.asarray(Image.fromarray(arr).resize((nw, nh), Image.Resampling.BOX))
    return arr.astype(np.float32) / 255.0


def _opponent(x: np.ndarray) -> np.ndarray:
    """Luminance plus two chroma axes; decorrelates brightness from colour."""
    r, g, b = x[..., 0], x[..., 1], x[..., 2]
    return np.stack([(r + g + b) / 3.0, (r - g) / 2.0, (r + g) / 4.0 - b / 2.0], axis=-1)


def _align_photometric(src: np.ndarray, edt: np.ndarray) -> np.ndarray:
    """Map ``edt`` onto ``src`` with a robust per-channel gain and offset."""
    out = np.empty_like(edt)
    for c in range(src.shape[-1]):
        x, y = edt[..., c].ravel(), src[..., c].ravel()
        # Start from identity so that edited pixels are outliers from the first
        # step; refit gain only when the inliers span enough intensities.
        gain, offset = 1.0, float(np.median(y - x))
        for _ in range(3):
            res = y - (gain * x + offset)
            mad = np.median(np.abs(res - np.median(res))) + 1e-6
            keep = np.abs(res) < 3.0 * 1.4826 * mad + 0.01
            if keep.sum() < 16 or np.var(x[keep]) < 1e-3:
                if keep.any():
                    gain, offset = 1.0, float(np.median((y - x)[keep]))
                break
            gain, offset = np.polyfit(x[keep], y[keep], 1)
        gain = float(np.clip(gain, 0.5, 2.0))  # a drift, not a new image
        out[..., c] = gain * edt[..., c] + offset
    return out


def _shift_min_distance(a: np.ndarray, b: np.ndarray, radius: int) -> np.ndarray:
    """Per pixel, min over shifts of |a(p + s) - b(p)| (Euclidean over channels)."""
    if radius <= 0:
        return np.sqrt(((a - b) ** 2).sum(-1))
    pad = np.pad(a, ((radius, radius), (radius, radius), (0, 0)), mode="edge")
    h, w = b.shape[:2]
    best = np.full((h, w), np.inf, dtype=np.float32)
    for dy in range(2 * radius + 1):
        for dx in range(2 * radius + 1):
            d = np.sqrt(((pad[dy : dy + h, dx : dx + w] - b) ** 2).sum(-1))
            np.minimum(best, d, out=best)
    return best


def change_map(source: np.ndarray, edited: np.ndarray, params: ChangeMapParams | None = None) -> ChangeMap:
    """Find changed regions between two equally sized RGB ``uint8`` images.

    >>> import numpy as np
    >>> a = np.full((64, 64, 3), 100, dtype=np.uint8)
    >>> b = a.copy(); b[16:32, 16:32] = 250
    >>> cm = change_map(a, b)
    >>> [r.box for r in cm.regions]  # smoothing widens boxes by up to 2 px
    [(14, 14, 34, 34)]
    """
    p = params or ChangeMapParams()
    if source.shape != edited.shape:
        raise ValueError(f"change_map needs equally sized images, got {source.shape} and {edited.shape}")
    h, w = source.shape[:2]
    s = _opponent(_to_work(source, p.work_size))
    e = _opponent(_to_work(edited, p.work_size))
    e = _align_photometric(s, e)
    if p.blur_sigma > 0:
        s = ndimage.gaussian_filter(s, sigma=(p.blur_sigma, p.blur_sigma, 0))
        e = ndimage.gaussian_filter(e, sigma=(p.blur_sigma, p.blur_sigma, 0))
    dist = np.maximum(_shift_min_distance(s, e, p.shift_radius), _shift_min_distance(e, s, p.shift_radius))
    threshold = float(min(max(p.floor, p.noise_factor * float(np.median(dist))), max(p.cap, p.floor)))
    strong = dist > threshold
    weak = dist > threshold * p.low_ratio
    labels, n = ndimage.label(weak)
    if n:
        seeded = np.zeros(n + 1, dtype=bool)
        seeded[np.unique(labels[strong])] = True
        seeded[0] = False
        mask = seeded[labels]
    else:
        mask = strong
    mask = ndimage.binary_closing(mask, structure=np.ones((3, 3)), iterations=1)
    mask = ndimage.binary_fill_holes(mask)
    labels, n = ndimage.label(mask)
    wh, ww = mask.shape
    regions: list[ChangeRegion] = []
    keep_mask = np.zeros_like(mask)
    sy, sx = h / wh, w / ww
    for idx, sl in enumerate(ndimage.find_objects(labels), start=1):
        if sl is None:
            continue
        comp = labels[sl] == idx
        frac = float(comp.sum()) / mask.size
        if frac < p.min_area:
            continue
        strength = float(dist[sl][comp].mean()) / threshold
        if strength < p.min_strength:
            continue
        keep_mask[sl] |= comp
        x0, x1 = int(np.floor(sl[1].start * sx)), int(np.ceil(sl[1].stop * sx))
        y0, y1 = int(np.floor(sl[0].start * sy)), int(np.ceil(sl[0].stop * sy))
        x1, y1 = min(x1, w), min(y1, h)
        regions.append(ChangeRegion((x0, y0, x1, y1), (x0 / w, y0 / h, x1 / w, y1 / h), frac, strength,
                                    float(np.clip(strength - 1.0, 0.0, 1.0))))
    regions.sort(key=lambda r: r.area_fraction, reverse=True)
    return ChangeMap(dist.astype(np.float32), keep_mask, threshold, regions, (h, w))


def sample_change_map(sample: LoadedEdit, params: ChangeMapParams | None = None,
                      compare: str = "source") -> ChangeMap:
    """The change map of a sample's pair, computed once per sample and settings
    (the change_map metric and DICE's model-free detector share it)."""
    params = params or ChangeMapParams()
    a, b = (sample.edited, sample.reference) if compare == "reference" else (sample.source, sample.edited)
    return sample.derive(("change_map", compare, params), lambda: change_map(a, b, params))


class ChangeMapMetric(PairMetric):
    """Changed-area fraction from :func:`change_map`, with the regions in ``details``."""

    def __init__(self, compare: str = "source", **params: Any) -> None:
        super().__init__(compare, "all")
        self.params = ChangeMapParams(**params)

    def compute(self, batch: Sequence[LoadedEdit]) -> list[float | Score]:
        out: list[float | Score] = []
        for sample in batch:
            cm = sample_change_map(sample, self.params, self.compare)
            out.append(Score(self.name, cm.changed_fraction, details={
                "threshold": round(cm.threshold, 5),
                "regions": [r.to_dict() for r in cm.regions],
            }))
        return out

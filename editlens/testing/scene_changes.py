"""Edits of known extent built from one real photo, of the kinds that
frame pairs from everyday videos show (AURORA's Action-Genome and
Something-Something folders): a large object moved far away, a region spread
over half the frame, the camera moved a little (shift, zoom, rotation, with
real new content entering at the border), the light changed (globally or
smoothly across the frame), combinations, JPEG, tiny edits.

Every case knows its truth: the boxes of its local changes in the source
image's pixels, and its global causes (``"camera moved"``, ``"relit"``).
Tests and benchmarks use them to check that the change map never calls such
an edit "unchanged" (see docs/metrics.md).

The photo is treated as a scene: the source is a view of its central part,
the edited image a view of the (edited) scene, possibly from a moved camera,
so that a camera motion brings in real content, not padding.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field

import cv2
import numpy as np
from PIL import Image

Box = tuple[int, int, int, int]

#: Kinds of case :func:`make_case` builds; each a combination of a local
#: change (or none) and global changes (or none).
KINDS = (
    "move_far",  # a large region cut out, the hole filled, pasted far away
    "spread",  # a region spread over half the frame (a cloth unfolded)
    "camera",  # the camera moved a little; nothing else changed
    "camera+object",  # the camera moved and an object appeared
    "camera+move",  # the camera moved and an object moved
    "relight",  # a strong global brightness / white-balance change
    "relight+object",  # the same plus an object appeared
    "uneven_light",  # the light changed smoothly across the frame
    "uneven_light+object",
    "camera+relight+move",  # everything at once
    "camera+relight+spread",  # a cloth unfolded over half the frame, the camera and the light moving
    "tiny",  # one small object (12-20 px at 512)
)


@dataclass
class ChangeCase:
    kind: str
    source: np.ndarray  # uint8 RGB
    edited: np.ndarray  # uint8 RGB, same size
    boxes: list[tuple[int, int, int, int]] = field(default_factory=list)  # local changes, source pixels
    causes: tuple[str, ...] = ()  # global causes: "camera moved", "relit"
    info: dict = field(default_factory=dict)  # the parameters drawn


def jpeg(a: np.ndarray, quality: int) -> np.ndarray:
    buf = io.BytesIO()
    Image.fromarray(a).save(buf, "JPEG", quality=quality)
    return np.asarray(Image.open(buf).convert("RGB"))


def _ellipse(h: int, w: int, box: tuple[int, int, int, int]) -> np.ndarray:
    x0, y0, x1, y1 = box
    yy, xx = np.mgrid[0:h, 0:w]
    cx, cy, rx, ry = (x0 + x1 - 1) / 2, (y0 + y1 - 1) / 2, max((x1 - x0) / 2, 0.5), max((y1 - y0) / 2, 0.5)
    return ((xx - cx) / rx) ** 2 + ((yy - cy) / ry) ** 2 <= 1.0


def fill_hole(img: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Inpaint ``mask`` (bool) with OpenCV (Telea), at reduced resolution when
    the hole is large (full-resolution inpainting of a big hole is slow and
    no better: it is a blur of the border either way)."""
    h, w = img.shape[:2]
    f = max(1, int(np.sqrt(mask.sum() / 4000)))
    if f == 1:
        return cv2.inpaint(np.ascontiguousarray(img), mask.astype(np.uint8) * 255, 5, cv2.INPAINT_TELEA)
    small = cv2.resize(img, (w // f, h // f), interpolation=cv2.INTER_AREA)
    sm = cv2.resize(mask.astype(np.uint8), (w // f, h // f), interpolation=cv2.INTER_NEAREST)
    sm = cv2.dilate(sm, np.ones((3, 3), np.uint8)) * 255
    filled = cv2.resize(cv2.inpaint(small, sm, 5, cv2.INPAINT_TELEA), (w, h), interpolation=cv2.INTER_CUBIC)
    out = img.copy()
    out[mask] = filled[mask]
    return out


def inpaint_region(img: np.ndarray, box: tuple[int, int, int, int]) -> np.ndarray:
    """Remove what is inside the ellipse in ``box`` (OpenCV inpainting)."""
    h, w = img.shape[:2]
    return fill_hole(img, _ellipse(h, w, box))


def changed_box(before: np.ndarray, after: np.ndarray, box: tuple[int, int, int, int],
                level: int = 10) -> tuple[int, int, int, int] | None:
    """The box of the pixels inside ``box`` that changed visibly: by more than
    ``level`` in some channel, in groups (a 3x3 opening drops isolated pixels
    of a texture that an inpainting matched all but by chance). ``None`` when
    nothing did."""
    x0, y0, x1, y1 = box
    d = np.abs(after[y0:y1, x0:x1].astype(np.int16) - before[y0:y1, x0:x1].astype(np.int16)).max(-1) > level
    d = cv2.morphologyEx(d.astype(np.uint8), cv2.MORPH_OPEN, np.ones((3, 3), np.uint8)) > 0
    if not d.any():
        return None
    ys, xs = np.nonzero(d)
    return x0 + int(xs.min()), y0 + int(ys.min()), x0 + int(xs.max()) + 1, y0 + int(ys.max()) + 1


def visible_removal_box(img: np.ndarray, rng: np.random.Generator, side: tuple[int, int], tries: int = 20,
                        min_change: float = 10.0) -> tuple[Box, Box, np.ndarray]:
    """Remove something that is really in the photo: of up to ``tries``
    random ellipses with box sides in ``side``, the first whose inpainting
    changes its colour or brightness at the scale of an object (by
    ``min_change`` levels on average once both images are smoothed over a
    few pixels: smoothing a fine texture such as a carpet's does not count)
    over most of its box (what changed spans at least half the box's area),
    else the most changed one. Returns the ellipse's box, the box of what
    changed (the removal's true extent, :func:`changed_box`) and the
    inpainted image."""
    h, w = img.shape[:2]
    smooth = cv2.GaussianBlur(img, (0, 0), 2.0).astype(np.float32)
    best: tuple[float, tuple[int, int, int, int], tuple[int, int, int, int], np.ndarray] | None = None
    for _ in range(tries):
        bw, bh = (int(rng.integers(side[0], side[1] + 1)) for _ in range(2))
        bw, bh = min(bw, w - 2), min(bh, h - 2)
        x0, y0 = int(rng.integers(0, w - bw)), int(rng.integers(0, h - bh))
        box = (x0, y0, x0 + bw, y0 + bh)
        out = inpaint_region(img, box)
        m = _ellipse(h, w, box)
        change = float(np.abs(cv2.GaussianBlur(out, (0, 0), 2.0).astype(np.float32) - smooth)[m].max(-1).mean())
        seen = changed_box(img, out, box) or box
        cover = (seen[2] - seen[0]) * (seen[3] - seen[1]) / (bw * bh)
        score = change * min(1.0, 2 * cover)
        if best is None or score > best[0]:
            best = (score, box, seen, out)
        if change >= min_change and cover >= 0.5:
            break
    assert best is not None
    return best[1], best[2], best[3]


def _paste_object(scene: np.ndarray, rng: np.random.Generator, box: tuple[int, int, int, int]) -> np.ndarray:
    """A distinct object in the ellipse of ``box``: a crop from elsewhere in the
    scene, mirrored and hue-rotated so that it never matches what it covers."""
    h, w = scene.shape[:2]
    x0, y0, x1, y1 = box
    bw, bh = x1 - x0, y1 - y0
    cx, cy = int(rng.integers(0, w - bw + 1)), int(rng.integers(0, h - bh + 1))
    patch = scene[cy : cy + bh, cx : cx + bw][:, ::-1]
    hsv = cv2.cvtColor(np.ascontiguousarray(patch), cv2.COLOR_RGB2HSV)
    hsv[..., 0] = (hsv[..., 0].astype(int) + int(rng.integers(45, 135))) % 180
    hsv[..., 1] = np.maximum(hsv[..., 1], 110)
    hsv[..., 2] = np.clip(hsv[..., 2].astype(int) + (60 if hsv[..., 2].mean() < 128 else -60), 0, 255)
    patch = cv2.cvtColor(hsv, cv2.COLOR_HSV2RGB)
    out = scene.copy()
    m = _ellipse(h, w, box)
    out[m] = patch[m[y0:y1, x0:x1]]
    return out


def _rand_box(rng: np.random.Generator, h: int, w: int, lo: float, hi: float,
              within: tuple[int, int, int, int] | None = None) -> tuple[int, int, int, int]:
    """A box with sides between ``lo`` and ``hi`` of the shorter image side, inside ``within``."""
    x0w, y0w, x1w, y1w = within or (0, 0, w, h)
    s = min(x1w - x0w, y1w - y0w)
    bw, bh = (max(4, int(s * rng.uniform(lo, hi))) for _ in range(2))
    x0, y0 = int(rng.integers(x0w, x1w - bw + 1)), int(rng.integers(y0w, y1w - bh + 1))
    return x0, y0, x0 + bw, y0 + bh


@dataclass(frozen=True)
class _Camera:
    dx: float = 0.0  # shift, fraction of the view's width / height
    dy: float = 0.0
    zoom: float = 1.0
    angle: float = 0.0  # degrees


def _view_matrix(scene_hw: tuple[int, int], out_hw: tuple[int, int], cover: float, cam: _Camera) -> np.ndarray:
    """2x3 matrix taking scene pixels to view pixels: the view shows the central
    ``cover`` of the scene, moved by ``cam``."""
    sh, sw = scene_hw
    oh, ow = out_hw
    scale = ow / (sw * cover) * cam.zoom
    cx, cy = sw / 2 + cam.dx * sw * cover, sh / 2 + cam.dy * sh * cover
    m = cv2.getRotationMatrix2D((cx, cy), cam.angle, scale)
    m[0, 2] += ow / 2 - cx
    m[1, 2] += oh / 2 - cy
    return m


def _render(scene: np.ndarray, out_hw: tuple[int, int], cover: float, cam: _Camera) -> np.ndarray:
    m = _view_matrix(scene.shape[:2], out_hw, cover, cam)
    return cv2.warpAffine(scene, m, (out_hw[1], out_hw[0]), flags=cv2.INTER_AREA if m[0, 0] < 1 else cv2.INTER_LINEAR,
                          borderMode=cv2.BORDER_REFLECT)


def _box_to_view(box: tuple[int, int, int, int], scene_hw: tuple[int, int], out_hw: tuple[int, int],
                 cover: float) -> tuple[int, int, int, int] | None:
    """A scene box in the source view's pixels (clipped; ``None`` when outside)."""
    m = _view_matrix(scene_hw, out_hw, cover, _Camera())
    x0, y0, x1, y1 = box
    pts = np.array([[x0, y0, 1], [x1, y1, 1]], np.float64) @ m.T
    oh, ow = out_hw
    a = (max(0, int(np.floor(pts[0, 0]))), max(0, int(np.floor(pts[0, 1]))),
         min(ow, int(np.ceil(pts[1, 0]))), min(oh, int(np.ceil(pts[1, 1]))))
    return a if a[2] - a[0] >= 2 and a[3] - a[1] >= 2 else None


def _relight(img: np.ndarray, rng: np.random.Generator, uneven: bool) -> tuple[np.ndarray, dict]:
    """A strong global light change (a third darker or 40-70 % brighter,
    white balance, gamma) or, with ``uneven``, a gain that varies smoothly
    across the frame, by a factor of about two (a lamp on one side, a shadow
    falling over half the scene)."""
    h, w = img.shape[:2]
    x = img.astype(np.float32)
    if not uneven:
        g = rng.uniform(0.5, 0.68) if rng.random() < 0.5 else rng.uniform(1.4, 1.7)
        wb = rng.uniform(0.88, 1.12, 3)
        gamma = rng.uniform(0.9, 1.1)
        y = 255.0 * (x / 255.0) ** gamma * g * wb
        return np.clip(y, 0, 255).astype(np.uint8), {"gain": round(float(g), 3), "wb": wb.round(3).tolist(),
                                                    "gamma": round(float(gamma), 3)}
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    t = rng.uniform(0, 2 * np.pi)
    ramp = ((xx / w - 0.5) * np.cos(t) + (yy / h - 0.5) * np.sin(t)) * np.sqrt(2)  # about -1 .. 1
    lo, hi = rng.uniform(0.4, 0.6), rng.uniform(1.1, 1.3)
    gain = lo + (hi - lo) * (ramp + 1) / 2
    tint = 1 + rng.uniform(-0.12, 0.12, 3)[None, None] * ramp[..., None]
    y = x * gain[..., None] * tint
    return np.clip(y, 0, 255).astype(np.uint8), {"gain_range": [round(float(lo), 3), round(float(hi), 3)],
                                                "direction_deg": round(float(np.degrees(t)), 1)}


def _camera(rng: np.random.Generator) -> _Camera:
    """A small hand-held camera motion: 1.5-5 % shift, up to 4 % zoom, up to 2.5 degrees."""
    mag = rng.uniform(0.015, 0.05)
    t = rng.uniform(0, 2 * np.pi)
    return _Camera(float(mag * np.cos(t)), float(mag * np.sin(t)), float(rng.uniform(0.96, 1.04)),
                   float(rng.uniform(-2.5, 2.5)))


def make_case(photo: np.ndarray, kind: str, rng: np.random.Generator, size: int = 512,
              jpeg_quality: int | None = None) -> ChangeCase:
    """One case of ``kind`` (see :data:`KINDS`) from ``photo`` (uint8 RGB),
    ``size`` pixels on its longest side, the edited image JPEG-compressed at
    ``jpeg_quality`` when given."""
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; known: {', '.join(KINDS)}")
    ph, pw = photo.shape[:2]
    scale = size / max(ph, pw) / 0.85
    scene = cv2.resize(photo, (max(1, round(pw * scale)), max(1, round(ph * scale))),
                       interpolation=cv2.INTER_AREA if scale < 1 else cv2.INTER_CUBIC)
    sh, sw = scene.shape[:2]
    cover = 0.85
    out_hw = (round(sh * cover), round(sw * cover))
    # the part of the scene the source shows (where local changes go)
    vx0, vy0 = int(sw * (1 - cover) / 2) + 4, int(sh * (1 - cover) / 2) + 4
    view = (vx0, vy0, sw - vx0, sh - vy0)
    edited_scene = scene
    scene_boxes: list[Box] = []
    causes: list[str] = []
    info: dict = {}
    parts = kind.split("+")
    if "move_far" in parts or "move" in parts:
        big = "move_far" in parts
        box = _rand_box(rng, sh, sw, 0.3 if big else 0.18, 0.42 if big else 0.28, view)
        x0, y0, x1, y1 = box
        bw, bh = x1 - x0, y1 - y0
        # the new place: as far as the view allows from the old one (the far half of the view)
        vw, vh = view[2] - view[0] - bw, view[3] - view[1] - bh

        def far(lo: int, span: int, at: int) -> int:  # somewhere in the other half of the view's span
            if at - lo < span / 2:
                return lo + int(rng.integers(span // 2, span + 1))
            return lo + int(rng.integers(0, span // 2 + 1))

        nx, ny = far(view[0], vw, x0), far(view[1], vh, y0)
        m = _ellipse(sh, sw, box)
        obj = scene[y0:y1, x0:x1].copy()
        edited_scene = fill_hole(scene, m)
        new = (nx, ny, nx + bw, ny + bh)
        nm = _ellipse(sh, sw, new)
        edited_scene[nm] = obj[m[y0:y1, x0:x1]]
        scene_boxes += [box, new]
    if "spread" in parts:
        src_box = _rand_box(rng, sh, sw, 0.15, 0.25, view)
        x0, y0, x1, y1 = src_box
        half = ["left", "right", "top", "bottom"][int(rng.integers(4))]
        vx0_, vy0_, vx1_, vy1_ = view
        mx, my = (vx0_ + vx1_) // 2, (vy0_ + vy1_) // 2
        dst = {"left": (vx0_, vy0_, mx, vy1_), "right": (mx, vy0_, vx1_, vy1_),
               "top": (vx0_, vy0_, vx1_, my), "bottom": (vx0_, my, vx1_, vy1_)}[half]
        cloth = cv2.resize(scene[y0:y1, x0:x1], (dst[2] - dst[0], dst[3] - dst[1]), interpolation=cv2.INTER_CUBIC)
        # folds: a gentle shading across the spread region
        yy, xx = np.mgrid[0 : dst[3] - dst[1], 0 : dst[2] - dst[0]].astype(np.float32)
        shade = 0.85 + 0.15 * np.sin(xx / max(8.0, rng.uniform(12, 30)) + yy / 40.0)
        cloth = np.clip(cloth.astype(np.float32) * shade[..., None], 0, 255).astype(np.uint8)
        edited_scene = edited_scene.copy()
        edited_scene[dst[1] : dst[3], dst[0] : dst[2]] = cloth
        scene_boxes.append(dst)
        info["half"] = half
    if "object" in parts or kind == "tiny":
        lo, hi = (0.025, 0.04) if kind == "tiny" else (0.12, 0.25)
        box = _rand_box(rng, sh, sw, lo, hi, view)
        edited_scene = _paste_object(edited_scene, rng, box)
        scene_boxes.append(box)
    cam = _Camera()
    if "camera" in parts:
        cam = _camera(rng)
        causes.append("camera moved")
        info["camera"] = {"dx": round(cam.dx, 4), "dy": round(cam.dy, 4), "zoom": round(cam.zoom, 4),
                          "angle": round(cam.angle, 3)}
    source = _render(scene, out_hw, cover, _Camera())
    edited = _render(edited_scene, out_hw, cover, cam)
    if "relight" in parts or "uneven_light" in parts:
        edited, info["light"] = _relight(edited, rng, uneven="uneven_light" in parts)
        causes.append("relit")
    if jpeg_quality:
        edited = jpeg(edited, jpeg_quality)
    boxes = [b for b in (_box_to_view(b, (sh, sw), out_hw, cover) for b in scene_boxes) if b is not None]
    return ChangeCase(kind, source, edited, boxes, tuple(causes), info)

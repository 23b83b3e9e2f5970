"""A small COCO-format detection set for tests: coloured shapes (the
annotated objects, with polygon masks) drawn on backgrounds, which are real
photos when given, else generated gradients."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import numpy as np

CLASSES = ("square", "disc", "triangle", "bar")
PALETTE = ((220, 40, 40), (40, 180, 60), (40, 80, 220), (230, 200, 30), (160, 60, 200))


def _background(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    y, x = np.mgrid[0:h, 0:w]
    c0, c1 = rng.integers(40, 200, 3), rng.integers(40, 200, 3)
    t = ((x / w + y / h) / 2)[..., None]
    img = c0 * (1 - t) + c1 * t + rng.normal(0, 6, (h, w, 3))
    return np.clip(img, 0, 255).astype(np.uint8)


def _polygon(kind: str, x: int, y: int, s: int) -> list[tuple[float, float]]:
    if kind == "disc":
        a = np.linspace(0, 2 * np.pi, 24, endpoint=False)
        return [(x + s / 2 + s / 2 * np.cos(t), y + s / 2 + s / 2 * np.sin(t)) for t in a]
    if kind == "triangle":
        return [(x + s / 2, y), (x + s, y + s), (x, y + s)]
    if kind == "bar":
        return [(x, y + s / 3), (x + s, y + s / 3), (x + s, y + 2 * s / 3), (x, y + 2 * s / 3)]
    return [(x, y), (x + s, y), (x + s, y + s), (x, y + s)]


def make_coco(out: Path, n_images: int = 6, size: tuple[int, int] = (96, 128), seed: int = 0,
              backgrounds: Sequence[Path] = (), objects: tuple[int, int] = (2, 4)) -> tuple[Path, Path]:
    """Write ``out/images/*.png`` and ``out/instances.json``; returns (annotation file, image folder).
    Neighbouring images share most objects (so similar pairs exist)."""
    from PIL import Image, ImageDraw

    rng = np.random.default_rng(seed)
    h, w = size
    (out / "images").mkdir(parents=True, exist_ok=True)
    images: list[dict[str, Any]] = []
    anns: list[dict[str, Any]] = []
    layout: list[tuple[str, int, int, int, tuple[int, int, int]]] = []
    for i in range(n_images):
        if backgrounds:
            bg = Image.open(backgrounds[i % len(backgrounds)]).convert("RGB").resize((w, h))
        else:
            bg = Image.fromarray(_background(rng, h, w))
        # start from the previous image's objects, drop one, add one: consecutive images are similar
        if layout and rng.random() < 0.8:
            layout = list(layout)
            layout.pop(int(rng.integers(len(layout))))
        while len(layout) < int(rng.integers(objects[0], objects[1] + 1)):
            s = int(rng.integers(min(h, w) // 4, min(h, w) // 2))
            layout.append((CLASSES[int(rng.integers(len(CLASSES)))], int(rng.integers(0, w - s)),
                           int(rng.integers(0, h - s)), s, PALETTE[int(rng.integers(len(PALETTE)))]))
        pen = ImageDraw.Draw(bg)
        for kind, x, y, s, colour in layout:
            poly = _polygon(kind, x, y, s)
            pen.polygon(poly, fill=colour)
            xs, ys = [p[0] for p in poly], [p[1] for p in poly]
            bbox = [min(xs), min(ys), max(xs) - min(xs), max(ys) - min(ys)]
            anns.append({"id": len(anns) + 1, "image_id": i + 1, "category_id": CLASSES.index(kind) + 1,
                         "bbox": bbox, "area": bbox[2] * bbox[3], "iscrowd": 0,
                         "segmentation": [[float(v) for p in poly for v in p]]})
        name = f"img{i:03d}.png"
        bg.save(out / "images" / name)
        images.append({"id": i + 1, "file_name": name, "width": w, "height": h})
    cats = [{"id": k + 1, "name": c} for k, c in enumerate(CLASSES)]
    path = out / "instances.json"
    path.write_text(json.dumps({"images": images, "annotations": anns, "categories": cats}))
    return path, out / "images"

"""Model-free DICE detector on real images with known edits.

From AURORA source photos (../shared/data/aurora), build edits whose boxes
are known: paste (a crop of another photo), recolour (hue-rotate an
elliptical object-sized region), remove (OpenCV inpainting of an elliptical
region). Each edit comes in two variants: pixel-aligned, and with the drift
diffusion editors leave on the whole image (colour/brightness shift, blur,
1-2 px shift, noise, JPEG). No-change pairs (the source, and its drifted
copy) measure false alarms. Reports class-agnostic AP and AP50
(pycocotools) and no-change accuracy per variant.

    python benchmarks/dice_detection.py [--sources 50] [--seed 0]
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from pathlib import Path

import numpy as np
from PIL import Image, ImageEnhance, ImageFilter

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import AURORA, aurora_rows  # noqa: E402


def load_sources(n: int, size: int = 512) -> list[np.ndarray]:
    rows = aurora_rows()
    if not rows:
        raise SystemExit(f"{AURORA} not found")
    seen, out = set(), []
    for r in rows:
        if r["input"] in seen or "output" in Path(r["input"]).name:
            continue
        seen.add(r["input"])
        im = Image.open(AURORA / r["input"]).convert("RGB")
        im.thumbnail((size, size), Image.Resampling.LANCZOS)
        out.append(np.asarray(im))
        if len(out) == n:
            break
    return out


def ellipse_mask(h: int, w: int, box: tuple[int, int, int, int]) -> np.ndarray:
    x0, y0, x1, y1 = box
    yy, xx = np.mgrid[0:h, 0:w]
    cx, cy, rx, ry = (x0 + x1) / 2, (y0 + y1) / 2, (x1 - x0) / 2, (y1 - y0) / 2
    return ((xx - cx) / rx) ** 2 + ((yy - cy) / ry) ** 2 <= 1.0


def random_box(rng: np.random.Generator, h: int, w: int) -> tuple[int, int, int, int]:
    bw, bh = int(w * rng.uniform(0.12, 0.35)), int(h * rng.uniform(0.12, 0.35))
    x0, y0 = int(rng.integers(0, w - bw)), int(rng.integers(0, h - bh))
    return x0, y0, x0 + bw, y0 + bh


def paste(src, other, rng):  # type: ignore[no-untyped-def]
    h, w = src.shape[:2]
    box = random_box(rng, h, w)
    x0, y0, x1, y1 = box
    oh, ow = other.shape[:2]
    cy, cx = int(rng.integers(0, max(1, oh - (y1 - y0)))), int(rng.integers(0, max(1, ow - (x1 - x0))))
    patch = other[cy : cy + (y1 - y0), cx : cx + (x1 - x0)]
    out = src.copy()
    m = ellipse_mask(h, w, box)[y0:y1, x0:x1]
    region = out[y0:y1, x0:x1]
    region[m] = patch[: region.shape[0], : region.shape[1]][m]
    return out, box, "ADD"


def recolour(src, other, rng):  # type: ignore[no-untyped-def]
    h, w = src.shape[:2]
    box = random_box(rng, h, w)
    hsv = np.asarray(Image.fromarray(src).convert("HSV")).copy()
    m = ellipse_mask(h, w, box)
    hsv[..., 0][m] = (hsv[..., 0][m].astype(int) + int(rng.integers(60, 196))) % 256
    hsv[..., 1][m] = np.maximum(hsv[..., 1][m], 120)  # make the new colour visible even on grey objects
    return np.asarray(Image.fromarray(hsv, "HSV").convert("RGB")), box, "EDIT"


def remove(src, other, rng):  # type: ignore[no-untyped-def]
    import cv2

    h, w = src.shape[:2]
    box = random_box(rng, h, w)
    m = ellipse_mask(h, w, box).astype(np.uint8) * 255
    out = cv2.inpaint(src[..., ::-1].copy(), m, 7, cv2.INPAINT_TELEA)[..., ::-1]
    return np.ascontiguousarray(out), box, "REMOVE"


def drift(a: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    im = ImageEnhance.Brightness(Image.fromarray(a)).enhance(rng.uniform(0.92, 1.08))
    im = ImageEnhance.Color(im).enhance(rng.uniform(0.9, 1.1)).filter(ImageFilter.GaussianBlur(rng.uniform(0.3, 1.0)))
    x = np.asarray(im).astype(np.float32) * rng.uniform(0.95, 1.05, 3) + rng.uniform(-6, 6, 3)
    dy, dx = rng.integers(-2, 3, 2)
    x = np.pad(x, ((2, 2), (2, 2), (0, 0)), mode="edge")[2 + dy : 2 + dy + a.shape[0], 2 + dx : 2 + dx + a.shape[1]]
    x = np.clip(x + rng.normal(0, 3, x.shape), 0, 255).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(x).save(buf, "JPEG", quality=85)
    return np.asarray(Image.open(buf).convert("RGB"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sources", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    from editlens.core.types import EditSample
    from editlens.dice.detectors import ChangeMapDetector
    from editlens.dice.evaluation import coco_ap

    rng = np.random.default_rng(args.seed)
    sources = load_sources(args.sources)
    det = ChangeMapDetector()
    report = {}
    for variant in ("aligned", "drifted"):
        gt, preds, nochange_ok, n_nochange = [], {}, 0, 0
        for i, src in enumerate(sources):
            other = sources[(i + 1) % len(sources)]
            for make in (paste, recolour, remove):
                edited, box, cmd = make(src, other, rng)
                if variant == "drifted":
                    edited = drift(edited, rng)
                h, w = src.shape[:2]
                sid = f"{i}-{cmd}"
                (res,) = det.detect([EditSample(sid, src, edited, "x").load()])
                gt.append({"id": sid, "width": w, "height": h, "differences": [
                    {"command": cmd, "box": [box[0] / w, box[1] / h, box[2] / w, box[3] / h]}]})
                preds[sid] = [d.to_dict() for d in res.differences]
            same = drift(src, rng) if variant == "drifted" else src
            (res,) = det.detect([EditSample(f"{i}-none", src, same, "x").load()])
            n_nochange += 1
            nochange_ok += not res.differences
        r = coco_ap(gt, preds, lambda d, is_gt: 1)
        report[variant] = {"edits": len(gt), "AP": r["AP"], "AP50": r["AP50"], "AP75": r["AP75"],
                           "predictions": r["n_pred"], "no_change_accuracy": nochange_ok / n_nochange,
                           "no_change_pairs": n_nochange}
    print(json.dumps({"detector": "changemap (model-free)", "sources": len(sources), **report}, indent=2))


if __name__ == "__main__":
    main()

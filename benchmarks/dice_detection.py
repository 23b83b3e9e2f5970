"""Model-free change detection on real photos with known edits, against a
plain pixel-difference baseline measured in the same run.

From AURORA source photos (../shared/data/aurora), build edits whose boxes
are known, one per command: add (paste a crop of another photo), recolour
(hue-rotate an elliptical region), remove, each in three size classes
(COCO's small / medium / large by box area at the benchmark's 512 px).
Every edit comes in two variants: pixel-aligned, and with the drift
diffusion editors leave on the whole image (colour/brightness shift, blur,
1-2 px shift, noise, JPEG). No-change pairs measure false alarms: the source
re-encoded as JPEG (aligned) and its drifted copy (drifted). Each seed draws
a fresh set of edits from every source.

Two kinds of seed:
- ``--seeds`` (0, 1): removals take away an object pasted in first (so its
  box is known), aligned edits are pixel-exact outside the edit;
- ``--fresh-seeds`` (2): removals inpaint what is really in the photo (an
  elliptical region whose OpenCV inpainting changes its colour at the scale
  of an object, not just a texture, over most of its box:
  ``editlens.testing.scene_changes.visible_removal_box``; the box is that of
  the pixels it changed), and every edited image is JPEG-compressed
  (aligned: quality 75-95; drifted: the drift's JPEG). Never used for
  tuning (the change map's settings were tuned on seed 7 and on fresh seed
  9, photos 0-60 only); their AP on photos 61-121 alone is reported too
  (``held_out_photos``).

Detectors:
- ``changemap``: editlens' model-free change map, through DICE's detector;
- ``baseline``: Gaussian blur, per-pixel CIE76 colour difference in Lab, a
  robust threshold (median + k*MAD, with an absolute floor), morphological
  open/close, connected components, tiny ones dropped, confidence = mean
  difference (parameters tuned on this benchmark like the change map's).

Reports class-agnostic COCO AP / AP50 / AP75 / AP small-medium-large
(pycocotools), AP per command and per size class, no-change accuracy and
pairs/s (the change map through DICE's detector, so with its overhead), per
variant and detector, and whether the targets of issues 15 and 20 hold.

    python -m benchmarks.dice_detection [--sources 122] [--seeds 0,1] [--fresh-seeds 2]
"""

from __future__ import annotations

import argparse
import io
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
from PIL import Image, ImageEnhance, ImageFilter

from benchmarks._common import AURORA, aurora_rows, runtime_info

#: Box side ranges in pixels per size class, so that the box areas fall in
#: COCO's buckets (small < 32^2 <= medium < 96^2 <= large) at 512 px.
SIZE_CLASSES = {"small": (14, 30), "medium": (36, 90), "large": (100, 200)}
EDIT_TYPES = ("paste", "recolour", "remove")
#: The command each edit type is (DICE's vocabulary).
COMMAND = {"paste": "add", "recolour": "recolour", "remove": "remove"}
#: Photos from this index on were never used to tune the change map.
HELD_OUT_FROM = 61


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
    cx, cy, rx, ry = (x0 + x1 - 1) / 2, (y0 + y1 - 1) / 2, (x1 - x0) / 2, (y1 - y0) / 2
    return ((xx - cx) / rx) ** 2 + ((yy - cy) / ry) ** 2 <= 1.0


def random_box(rng: np.random.Generator, h: int, w: int, size: str) -> tuple[int, int, int, int]:
    lo, hi = SIZE_CLASSES[size]
    hi = min(hi, int(0.6 * min(h, w)))
    bw, bh = int(rng.integers(lo, hi + 1)), int(rng.integers(lo, hi + 1))
    if size == "small":  # keep the area below 32^2
        bh = min(bh, 1023 // bw)
    x0, y0 = int(rng.integers(0, w - bw)), int(rng.integers(0, h - bh))
    return x0, y0, x0 + bw, y0 + bh


def paste(src, other, box, rng):  # type: ignore[no-untyped-def]
    h, w = src.shape[:2]
    x0, y0, x1, y1 = box
    oh, ow = other.shape[:2]
    cy, cx = int(rng.integers(0, max(1, oh - (y1 - y0)))), int(rng.integers(0, max(1, ow - (x1 - x0))))
    patch = other[cy : cy + (y1 - y0), cx : cx + (x1 - x0)]
    out = src.copy()
    m = ellipse_mask(h, w, box)[y0:y1, x0:x1]
    region = out[y0:y1, x0:x1]
    region[m] = patch[: region.shape[0], : region.shape[1]][m]
    return out


def recolour(src, other, box, rng):  # type: ignore[no-untyped-def]
    h, w = src.shape[:2]
    hsv = np.asarray(Image.fromarray(src).convert("HSV")).copy()
    m = ellipse_mask(h, w, box)
    hsv[..., 0][m] = (hsv[..., 0][m].astype(int) + int(rng.integers(60, 196))) % 256
    hsv[..., 1][m] = np.maximum(hsv[..., 1][m], 120)  # make the new colour visible even on grey objects
    out = src.copy()  # only the region changes (the HSV round trip alters other pixels by a level or two)
    out[m] = np.asarray(Image.fromarray(hsv, "HSV").convert("RGB"))[m]
    return out


def remove(src, other, box, rng):  # type: ignore[no-untyped-def]
    import cv2

    h, w = src.shape[:2]
    m = ellipse_mask(h, w, box).astype(np.uint8) * 255
    out = cv2.inpaint(src[..., ::-1].copy(), m, 7, cv2.INPAINT_TELEA)[..., ::-1]
    return np.ascontiguousarray(out)


MAKERS = {"paste": paste, "recolour": recolour, "remove": remove}


def jpeg(a: np.ndarray, quality: int) -> np.ndarray:
    buf = io.BytesIO()
    Image.fromarray(a).save(buf, "JPEG", quality=quality)
    return np.asarray(Image.open(buf).convert("RGB"))


def drift(a: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    im = ImageEnhance.Brightness(Image.fromarray(a)).enhance(rng.uniform(0.92, 1.08))
    im = ImageEnhance.Color(im).enhance(rng.uniform(0.9, 1.1)).filter(ImageFilter.GaussianBlur(rng.uniform(0.3, 1.0)))
    x = np.asarray(im).astype(np.float32) * rng.uniform(0.95, 1.05, 3) + rng.uniform(-6, 6, 3)
    dy, dx = rng.integers(-2, 3, 2)
    x = np.pad(x, ((2, 2), (2, 2), (0, 0)), mode="edge")[2 + dy : 2 + dy + a.shape[0], 2 + dx : 2 + dx + a.shape[1]]
    x = np.clip(x + rng.normal(0, 3, x.shape), 0, 255).astype(np.uint8)
    return jpeg(x, 85)


@dataclass
class Case:
    id: str
    source: np.ndarray
    edited: np.ndarray
    kind: str  # edit type, or "none"
    size: str | None  # size class, None for no-change pairs
    box: tuple[int, int, int, int] | None
    photo: int = 0  # index of the source photo


def build_cases(sources: list[np.ndarray], seeds: list[int]) -> dict[str, list[Case]]:
    """Both variants' cases; the drifted variant drifts the very same edits."""
    out: dict[str, list[Case]] = {"aligned": [], "drifted": []}
    sizes = list(SIZE_CLASSES)
    for seed in seeds:
        rng = np.random.default_rng(seed)
        for i, src in enumerate(sources):
            h, w = src.shape[:2]
            other = sources[(i + 1 + seed) % len(sources)]
            for k, kind in enumerate(EDIT_TYPES):
                size = sizes[(i + k + seed) % 3]  # every type sees every size class equally often
                box = random_box(rng, h, w, size)
                before = src
                if kind == "remove":  # an object to remove: one pasted in, taken away again below
                    before = paste(src, other, box, rng)
                edited = MAKERS[kind](before, other, box, rng)
                sid = f"s{seed}-{i}-{kind}"
                out["aligned"].append(Case(sid, before, edited, kind, size, box, i))
                out["drifted"].append(Case(sid, before, drift(edited, rng), kind, size, box, i))
            out["aligned"].append(Case(f"s{seed}-{i}-none", src, jpeg(src, 75), "none", None, None, i))
            out["drifted"].append(Case(f"s{seed}-{i}-none", src, drift(src, rng), "none", None, None, i))
    return out


def build_fresh_cases(sources: list[np.ndarray], seeds: list[int]) -> dict[str, list[Case]]:
    """Like :func:`build_cases`, but removals inpaint content that is in the
    photo, and every edited image is JPEG-compressed."""
    from editlens.testing.scene_changes import visible_removal_box

    out: dict[str, list[Case]] = {"aligned": [], "drifted": []}
    sizes = list(SIZE_CLASSES)
    for seed in seeds:
        rng = np.random.default_rng(seed)
        for i, src in enumerate(sources):
            h, w = src.shape[:2]
            other = sources[(i + 1 + seed) % len(sources)]
            for k, kind in enumerate(EDIT_TYPES):
                size = sizes[(i + k + seed) % 3]
                if kind == "remove":  # something that is in the photo, inpainted away
                    lo, hi = SIZE_CLASSES[size]
                    _, box, edited = visible_removal_box(src, rng, (lo, min(hi, int(0.6 * min(h, w)))))
                else:
                    box = random_box(rng, h, w, size)
                    edited = MAKERS[kind](src, other, box, rng)
                sid = f"f{seed}-{i}-{kind}"
                out["aligned"].append(Case(sid, src, jpeg(edited, int(rng.integers(75, 96))), kind, size, box, i))
                out["drifted"].append(Case(sid, src, drift(edited, rng), kind, size, box, i))
            out["aligned"].append(Case(f"f{seed}-{i}-none", src, jpeg(src, 75), "none", None, None, i))
            out["drifted"].append(Case(f"f{seed}-{i}-none", src, drift(src, rng), "none", None, None, i))
    return out


# --- the plain pixel-difference baseline -------------------------------------

@dataclass(frozen=True)
class BaselineParams:
    """Tuned on seed 7 (60 sources, not a reported seed) over blur {0.5, 1, 2}
    x floor {4, 8, 12} x k {4, 8} x close {3, 7}: the best aligned AP among
    settings with no-change accuracy >= 0.95 on aligned pairs (no setting
    reaches it on drifted pairs; the best drifted AP there was 0.38)."""

    blur_sigma: float = 0.5
    k_mad: float = 4.0  # threshold = median + k * MAD (scaled to a standard deviation)
    floor: float = 8.0  # absolute minimum threshold, CIE76 delta E
    open_px: int = 3
    close_px: int = 3
    min_area: float = 0.0005  # drop components smaller than this fraction of the image


def baseline_detect(source: np.ndarray, edited: np.ndarray, p: BaselineParams = BaselineParams()
                    ) -> list[tuple[tuple[float, float, float, float], float]]:
    """(box as fractions, confidence) per detected change."""
    import cv2

    h, w = source.shape[:2]

    def lab(a: np.ndarray) -> np.ndarray:
        x = a.astype(np.float32) / 255.0
        if p.blur_sigma > 0:
            x = cv2.GaussianBlur(x, (0, 0), p.blur_sigma)
        return cv2.cvtColor(x, cv2.COLOR_RGB2LAB)

    de = np.sqrt(((lab(source) - lab(edited)) ** 2).sum(-1))
    med = float(np.median(de))
    mad = 1.4826 * float(np.median(np.abs(de - med)))
    mask = (de > max(p.floor, med + p.k_mad * mad)).astype(np.uint8)
    if p.open_px > 1:
        mask = cv2.morphologyEx(mask, cv2.MORPH_OPEN, np.ones((p.open_px, p.open_px), np.uint8))
    if p.close_px > 1:
        mask = cv2.morphologyEx(mask, cv2.MORPH_CLOSE, np.ones((p.close_px, p.close_px), np.uint8))
    n, labels, stats, _ = cv2.connectedComponentsWithStats(mask, connectivity=8)
    out = []
    for i in range(1, n):
        x, y, bw, bh, area = stats[i]
        if area < p.min_area * h * w:
            continue
        conf = float(de[labels == i].mean())
        out.append(((x / w, y / h, (x + bw) / w, (y + bh) / h), conf))
    return out


# --- evaluation ---------------------------------------------------------------

Detector = Callable[[np.ndarray, np.ndarray], list[tuple[tuple[float, float, float, float], float]]]


def changemap_detector() -> Detector:
    from editlens.core.types import EditSample
    from editlens.dice.detectors import ChangeMapDetector

    det = ChangeMapDetector()

    def detect(source: np.ndarray, edited: np.ndarray):  # type: ignore[no-untyped-def]
        (res,) = det.detect([EditSample("x", source, edited, "x").load()])
        return [(d.box, float(d.confidence or 0.0)) for d in res.differences]

    return detect


def run_detector(detect: Detector, cases: list[Case]) -> tuple[dict[str, list], float]:
    preds = {}
    t = time.perf_counter()
    for c in cases:
        preds[c.id] = detect(c.source, c.edited)
    return preds, time.perf_counter() - t


def score(cases: list[Case], preds: dict[str, list]) -> dict:
    from editlens.dice.evaluation import coco_ap

    def ap(subset: list[Case]) -> dict:
        gt, pr = [], {}
        for c in subset:
            h, w = c.source.shape[:2]
            diffs = [] if c.box is None else [{"box": [c.box[0] / w, c.box[1] / h, c.box[2] / w, c.box[3] / h]}]
            gt.append({"id": c.id, "width": w, "height": h, "differences": diffs})
            pr[c.id] = [{"box": list(b), "confidence": conf} for b, conf in preds[c.id]]
        return coco_ap(gt, pr, lambda d, is_gt: 1)

    rnd = lambda x: None if x is None else round(x, 4)  # noqa: E731
    edits = [c for c in cases if c.kind != "none"]
    nochange = [c for c in cases if c.kind == "none"]
    # No-change pairs take part in AP too: their false alarms cost precision.
    r = ap(cases)
    out = {"edits": len(edits), "AP": rnd(r["AP"]), "AP50": rnd(r["AP50"]), "AP75": rnd(r["AP75"]),
           "AP_small": rnd(r["APs"]), "AP_medium": rnd(r["APm"]), "AP_large": rnd(r["APl"]),
           "predictions": r["n_pred"],
           "no_change_accuracy": round(sum(not preds[c.id] for c in nochange) / max(1, len(nochange)), 4),
           "no_change_pairs": len(nochange)}
    out["AP_per_command"] = {COMMAND[k]: rnd(ap([c for c in edits if c.kind == k])["AP"]) for k in EDIT_TYPES}
    out["AP_per_size"] = {s: rnd(ap([c for c in edits if c.size == s])["AP"]) for s in SIZE_CLASSES}
    # per command and size (9 cells)
    out["AP_per_command_size"] = {f"{COMMAND[k]}/{s}": rnd(ap([c for c in edits if c.kind == k and c.size == s])["AP"])
                                  for k in EDIT_TYPES for s in SIZE_CLASSES}
    held = [c for c in cases if c.photo >= HELD_OUT_FROM]
    if held:
        out["held_out_photos"] = {"photos": f"{HELD_OUT_FROM}+", "AP": rnd(ap(held)["AP"])}
    return out


def check_targets(res: dict) -> dict[str, bool]:
    out = {}
    if "fresh" in res:  # issue 20
        fa, fd = res["fresh"]["changemap"]["aligned"], res["fresh"]["changemap"]["drifted"]
        out["fresh seed: aligned AP >= 0.85"] = fa["AP"] >= 0.85
        out["fresh seed: drifted AP >= 0.78"] = fd["AP"] >= 0.78
        out["fresh seed: no-change accuracy >= 0.95 (aligned, drifted)"] = min(
            fa["no_change_accuracy"], fd["no_change_accuracy"]) >= 0.95
    if "changemap" not in res:
        return out
    cm_a, bl_a = res["changemap"]["aligned"], res["baseline"]["aligned"]
    cm_d = res["changemap"]["drifted"]
    return out | {
        "aligned AP >= 0.80": cm_a["AP"] >= 0.80,
        "aligned AP >= baseline AP + 0.05": cm_a["AP"] >= bl_a["AP"] + 0.05,
        "aligned AP75 >= baseline": cm_a["AP75"] >= bl_a["AP75"],
        "aligned small AP >= baseline": (cm_a["AP_small"] or 0) >= (bl_a["AP_small"] or 0),
        "drifted AP >= 0.60": cm_d["AP"] >= 0.60,
        "drifted AP50 >= 0.85": cm_d["AP50"] >= 0.85,
        "no-change accuracy >= 0.95 (aligned)": cm_a["no_change_accuracy"] >= 0.95,
        "no-change accuracy >= 0.95 (drifted)": cm_d["no_change_accuracy"] >= 0.95,
        "at least as fast as the baseline (aligned)": cm_a["pairs_per_s"] >= bl_a["pairs_per_s"],
        "at least as fast as the baseline (drifted)": cm_d["pairs_per_s"] >= res["baseline"]["drifted"]["pairs_per_s"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sources", type=int, default=122, help="distinct AURORA source photos (at most 122)")
    ap.add_argument("--seeds", default="0,1", help="comma-separated seeds (pasted-then-removed objects, "
                    "aligned edits pixel-exact); each adds 3 edits per source; '' for none")
    ap.add_argument("--fresh-seeds", default="2", help="comma-separated seeds whose removals inpaint content of "
                    "the photo and whose edited images are JPEG-compressed; '' for none")
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    fresh = [int(s) for s in args.fresh_seeds.split(",") if s.strip()]
    sources = load_sources(args.sources)
    detectors = {"changemap": changemap_detector(), "baseline": baseline_detect}

    def evaluate(cases: dict[str, list[Case]]) -> dict:
        res: dict = {name: {} for name in detectors}
        for variant, vcases in cases.items():
            for name, det in detectors.items():
                preds, secs = run_detector(det, vcases)
                res[name][variant] = {**score(vcases, preds), "pairs_per_s": round(len(vcases) / secs, 1)}
            res.setdefault("speed_ratio", {})[variant] = round(
                res["changemap"][variant]["pairs_per_s"] / res["baseline"][variant]["pairs_per_s"], 2)
        return res

    out: dict = {"runtime": runtime_info(), "sources": len(sources), "seeds": seeds}
    if seeds:
        cases = build_cases(sources, seeds)
        out |= {"pairs_per_variant": len(cases["aligned"]), **evaluate(cases)}
    if fresh:
        cases = build_fresh_cases(sources, fresh)
        out["fresh"] = {"seeds": fresh, "pairs_per_variant": len(cases["aligned"]), **evaluate(cases)}
    targets = check_targets(out)
    print(json.dumps(out | {"targets": targets}, indent=2))
    print("PASS" if all(targets.values()) else "FAIL", ", ".join(k for k, ok in targets.items() if not ok))


if __name__ == "__main__":
    main()

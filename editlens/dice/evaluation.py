"""Detection and coherence evaluation on annotated data (DICE-D style),
with pycocotools' COCOeval for every AP figure.

Ground truth: JSONL, one sample per line::

    {"id": "...", "width": 512, "height": 512,
     "differences": [{"command": "ADD", "object": "cat", "box": [x0, y0, x1, y1], "coherent": true}, ...]}

(boxes as fractions, or pixels with ``box_units="pixels"`` / ``"box_units":
"pixels"`` on the line; every box is checked and an out-of-range one is an
error naming the line; ``width``/``height`` in pixels, needed for the COCO
size buckets S/M/L). Predictions: the ``results.jsonl`` of ``editlens run
--dice`` or JSONL ``{"id", "differences": [...]}`` in DICE's own format.

Figures: AP over IoU 0.50:0.95, AP50, AP75, AP small/medium/large,
class-agnostic and class-aware (command as category), AP per command;
coherence AP over detected differences (category = coherence label), with
the detections that got no verdict counted in ``n_pred_unjudged``;
coherence accuracy over ground-truth differences (verdicts given for them).
A prediction without a confidence is ranked with confidence 1 and counted
in ``n_without_confidence``.
"""

from __future__ import annotations

import contextlib
import io
import math
from pathlib import Path
from typing import Any, Iterable

from editlens.data.jsonl import iter_jsonl
from editlens.dice.types import CHANGE, COMMANDS
from editlens.errors import InputError

CLASS_IDS = {c: i + 1 for i, c in enumerate(COMMANDS + (CHANGE,))}
COHERENCE_IDS = {True: 1, False: 2}


BOX_UNITS = ("fraction", "pixels")


def _checked_box(box: Any, units: str, w: float | None, h: float | None, where: str) -> list[float]:
    """The box as fractions, or an :class:`InputError` saying what is wrong and where."""
    if not isinstance(box, (list, tuple)) or len(box) != 4:
        raise InputError(f"{where}: box must be [x0, y0, x1, y1], got {box!r}")
    try:
        vals = [float(v) for v in box]
    except (TypeError, ValueError):
        raise InputError(f"{where}: box must hold four numbers, got {box!r}") from None
    if not all(math.isfinite(v) for v in vals):
        raise InputError(f"{where}: box has a non-finite value: {box!r}")
    x0, y0, x1, y1 = vals
    if x0 >= x1 or y0 >= y1:
        raise InputError(f"{where}: box {box!r} is empty or its corners are swapped (need x0 < x1, y0 < y1)")
    if units == "pixels":
        assert w is not None and h is not None
        if min(vals) < 0 or x1 > w or y1 > h:
            raise InputError(f"{where}: pixel box {box!r} lies outside the {w:g}x{h:g} image")
        return [x0 / w, y0 / h, x1 / w, y1 / h]
    eps = 1e-6
    if min(vals) < -eps or max(vals) > 1 + eps:
        hint = (" (these look like pixels: pass --gt-boxes pixels, or put \"box_units\": \"pixels\" on the line)"
                if max(vals) > 1 else "")
        raise InputError(f"{where}: box {box!r} is outside [0, 1] for fraction coordinates{hint}")
    return [min(1.0, max(0.0, v)) for v in vals]


def load_ground_truth(path: str | Path, box_units: str = "fraction") -> list[dict[str, Any]]:
    """Annotated samples with every box checked and stated as fractions.

    ``box_units``: ``"fraction"`` (0-1 of the image size) or ``"pixels"``
    (converted with the row's ``width``/``height``); a row may override it
    with its own ``"box_units"``. A box outside the image, empty, or of the
    wrong shape is an error naming the line.
    """
    if box_units not in BOX_UNITS:
        raise InputError(f"box units must be one of {BOX_UNITS}, got {box_units!r}")
    numbered = list(iter_jsonl(path))
    rows = [r for _, r in numbered]
    for n, r in numbered:
        if "id" not in r or "differences" not in r:
            raise InputError(f"{path}:{n}: needs 'id' and 'differences'")
        if not (r.get("width") and r.get("height")):
            raise InputError(f"{path}:{n}: needs 'width' and 'height' in pixels (for the COCO size buckets)")
        if not isinstance(r["differences"], list):
            raise InputError(f"{path}:{n}: 'differences' must be a list")
        units = r.get("box_units", box_units)
        if units not in BOX_UNITS:
            raise InputError(f"{path}:{n}: box_units must be one of {BOX_UNITS}, got {units!r}")
        w, h = float(r["width"]), float(r["height"])
        for k, d in enumerate(r["differences"], 1):
            if not isinstance(d, dict):
                raise InputError(f"{path}:{n}: difference {k} must be an object")
            d["box"] = _checked_box(d.get("box"), units, w, h, f"{path}:{n}: difference {k}")
        r["box_units"] = "fraction"  # converted
    return rows


def load_predictions(path: str | Path) -> dict[str, list[dict[str, Any]]]:
    """Predicted differences per sample id (boxes checked: fractions of the image)."""
    return load_predictions_detailed(path)[0]


def load_predictions_detailed(path: str | Path) -> tuple[dict[str, list[dict[str, Any]]], dict[str, str]]:
    """``(predictions, problems)``: ``problems[id]`` says why a sample has no
    usable prediction (the detector's answer was unparsable or truncated);
    such samples count as predicting nothing, and are reported, not hidden."""
    out: dict[str, list[dict[str, Any]]] = {}
    problems: dict[str, str] = {}
    for n, r in iter_jsonl(path):
        if "scores" in r:  # editlens run results
            dice = (r["scores"].get("dice") or {}).get("details") or {}
            diffs = list(dice.get("differences") or [])
            if dice.get("unparsable") or dice.get("truncated"):
                problems[str(r["id"])] = str(dice.get("problem") or "unparsable")
        else:
            diffs = list(r.get("differences") or [])
        for k, d in enumerate(diffs, 1):
            d["box"] = _checked_box(d.get("box"), "fraction", None, None, f"{path}:{n}: predicted difference {k}")
        out[str(r["id"])] = diffs
    return out, problems


def _xywh(box: Iterable[float], w: int, h: int) -> list[float]:
    x0, y0, x1, y1 = box
    return [x0 * w, y0 * h, (x1 - x0) * w, (y1 - y0) * h]


def coco_ap(gt: list[dict[str, Any]], preds: dict[str, list[dict[str, Any]]], category: Any) -> dict[str, Any]:
    """COCOeval bbox figures; ``category(diff, is_gt) -> int | None`` (None: leave out)."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    images: list[dict[str, Any]] = []
    anns: list[dict[str, Any]] = []
    dets: list[dict[str, Any]] = []
    cats: set[int] = set()
    missing_conf = 0
    for i, r in enumerate(gt, 1):
        w, h = int(r["width"]), int(r["height"])
        images.append({"id": i, "width": w, "height": h})
        for d in r["differences"]:
            c = category(d, True)
            if c is None:
                continue
            cats.add(c)
            bb = _xywh(d["box"], w, h)
            anns.append({"id": len(anns) + 1, "image_id": i, "category_id": c, "bbox": bb,
                         "area": bb[2] * bb[3], "iscrowd": 0})
        for d in preds.get(str(r["id"]), []):
            c = category(d, False)
            if c is None:
                continue
            conf = d.get("confidence")
            if conf is None:
                missing_conf += 1
                conf = 1.0
            dets.append({"image_id": i, "category_id": c, "bbox": _xywh(d["box"], w, h), "score": float(conf)})
    cats |= {d["category_id"] for d in dets}
    empty: dict[str, Any] = {"AP": 0.0, "AP50": 0.0, "AP75": 0.0, "APs": None, "APm": None, "APl": None,
                             "per_category": {}, "n_gt": len(anns), "n_pred": len(dets),
                             "n_without_confidence": missing_conf}
    if not anns:
        return {**empty, "AP": None, "AP50": None, "AP75": None}
    gt_coco = COCO()
    gt_coco.dataset = {"images": images, "annotations": anns, "categories": [{"id": c} for c in sorted(cats)]}
    with contextlib.redirect_stdout(io.StringIO()):
        gt_coco.createIndex()
        if not dets:
            return empty
        dt_coco = gt_coco.loadRes(dets)
        ev = COCOeval(gt_coco, dt_coco, "bbox")
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    s = ev.stats
    val = lambda x: None if x < 0 else float(x)  # noqa: E731  (-1: no ground truth in that bucket)
    prec = ev.eval["precision"]  # T x R x K x A x M
    per = {}
    for k, cid in enumerate(ev.params.catIds):
        p = prec[:, :, k, 0, -1]
        per[cid] = float(p[p > -1].mean()) if (p > -1).any() else None
    return {"AP": val(s[0]), "AP50": val(s[1]), "AP75": val(s[2]), "APs": val(s[3]), "APm": val(s[4]),
            "APl": val(s[5]), "per_category": per, "n_gt": len(anns), "n_pred": len(dets),
            "n_without_confidence": missing_conf}


def evaluate_detection(gt: list[dict[str, Any]], preds: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    agnostic = coco_ap(gt, preds, lambda d, is_gt: 1)
    aware = coco_ap(gt, preds, lambda d, is_gt: CLASS_IDS.get(str(d.get("command", "")).upper()))
    names = {v: k for k, v in CLASS_IDS.items()}
    aware["per_command"] = {names[c]: ap for c, ap in aware.pop("per_category").items()}
    agnostic.pop("per_category")

    def coh(d: dict[str, Any], is_gt: bool) -> int | None:
        label = d.get("coherent") if is_gt else (d.get("verdict") or {}).get("coherent")
        return COHERENCE_IDS.get(label) if isinstance(label, bool) else None

    coherence = coco_ap(gt, preds, coh)
    coherence["per_label"] = {("coherent" if c == 1 else "not coherent"): ap
                              for c, ap in coherence.pop("per_category").items()}
    # detections without a verdict cannot enter coherence AP; they are counted, never silently dropped
    ids = {str(r["id"]) for r in gt}
    coherence["n_pred_unjudged"] = sum(1 for i in ids for d in preds.get(i, []) if coh(d, False) is None)
    coherence["n_gt_unlabelled"] = sum(1 for r in gt for d in r["differences"] if coh(d, True) is None)
    return {"class_agnostic": agnostic, "class_aware": aware, "coherence_ap": coherence}


def coherence_accuracy(gt: list[dict[str, Any]], verdicts: dict[str, list[bool | None]]) -> dict[str, Any]:
    """Accuracy of coherence verdicts given for the ground-truth differences
    (``verdicts[id][k]`` for the k-th difference; ``None`` = unparsable, wrong)."""
    correct = total = unparsable = missing = 0
    for r in gt:
        got = verdicts.get(str(r["id"]))
        for k, d in enumerate(r["differences"]):
            if "coherent" not in d:
                continue
            total += 1
            if got is None or k >= len(got):
                missing += 1
                continue
            if got[k] is None:
                unparsable += 1
            elif bool(got[k]) == bool(d["coherent"]):
                correct += 1
    return {"accuracy": correct / total if total else None, "n": total, "unparsable": unparsable, "missing": missing}




def judge_ground_truth(gt: list[dict[str, Any]], pipeline: Any, base: Path) -> dict[str, list[bool | None]]:
    """Run the coherence estimator on each sample's ground-truth differences.

    Rows need ``source``, ``edited`` (paths, relative to ``base``) and
    ``instruction``. Returns ``{id: [coherent or None per GT difference]}``.
    """
    from editlens.core.types import EditSample
    from editlens.dice.coherence import CoherenceEstimator
    from editlens.dice.types import DiceResult, Difference

    est = CoherenceEstimator(pipeline.backend, pipeline.templates["dice_coherence"],
                             samples=getattr(pipeline, "samples", 1), temperature=getattr(pipeline, "temperature", 0.0),
                             seed=getattr(pipeline, "seed", 0))
    out: dict[str, list[bool | None]] = {}
    for n, r in enumerate(gt, 1):
        if not all(r.get(k) for k in ("source", "edited", "instruction")):
            raise InputError(f"ground truth line {n}: judging ground-truth differences needs source, edited, instruction")
        s = EditSample(str(r["id"]), str(base / r["source"]), str(base / r["edited"]), r["instruction"]).load()
        res = DiceResult([Difference(str(d.get("command", "EDIT")).upper(), d.get("object"), tuple(d["box"]))
                          for d in r["differences"]])
        est.judge([s], [res])
        out[str(r["id"])] = [v.coherent for v in res.verdicts or []]
    return out

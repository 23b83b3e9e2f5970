"""Detection and coherence evaluation on annotated data (DICE-D style),
with pycocotools' COCOeval for every AP figure.

Ground truth: JSONL, one sample per line::

    {"id": "...", "width": 512, "height": 512,
     "differences": [{"command": "ADD", "object": "cat", "box": [x0, y0, x1, y1], "coherent": true}, ...]}

(boxes as fractions; ``width``/``height`` in pixels, needed for the COCO
size buckets S/M/L). Predictions: the ``results.jsonl`` of ``editlens run
--dice`` or JSONL ``{"id", "differences": [...]}`` in DICE's own format.

Figures: AP over IoU 0.50:0.95, AP50, AP75, AP small/medium/large,
class-agnostic and class-aware (command as category), AP per command;
coherence AP over detected differences (category = coherence label);
coherence accuracy over ground-truth differences (verdicts given for them).
A prediction without a confidence is ranked with confidence 1 and counted
in ``n_without_confidence``.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any, Iterable



from editlens.dice.types import CHANGE, COMMANDS
from editlens.errors import InputError

CLASS_IDS = {c: i + 1 for i, c in enumerate(COMMANDS + (CHANGE,))}
COHERENCE_IDS = {True: 1, False: 2}


def _read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{p}: file not found")
    rows = []
    for n, line in enumerate(open(p, encoding="utf-8"), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise InputError(f"{p}:{n}: not valid JSON ({exc.msg})") from None
    return rows


def load_ground_truth(path: str | Path) -> list[dict[str, Any]]:
    rows = _read_jsonl(path)
    for n, r in enumerate(rows, 1):
        if "id" not in r or "differences" not in r:
            raise InputError(f"{path}:{n}: needs 'id' and 'differences'")
        if not (r.get("width") and r.get("height")):
            raise InputError(f"{path}:{n}: needs 'width' and 'height' in pixels (for the COCO size buckets)")
    return rows


def load_predictions(path: str | Path) -> dict[str, list[dict[str, Any]]]:
    out = {}
    for r in _read_jsonl(path):
        if "scores" in r:  # editlens run results
            dice = (r["scores"].get("dice") or {}).get("details") or {}
            out[str(r["id"])] = list(dice.get("differences") or [])
        else:
            out[str(r["id"])] = list(r.get("differences") or [])
    return out


def _xywh(box: Iterable[float], w: int, h: int) -> list[float]:
    x0, y0, x1, y1 = box
    return [x0 * w, y0 * h, (x1 - x0) * w, (y1 - y0) * h]


def coco_ap(gt: list[dict[str, Any]], preds: dict[str, list[dict[str, Any]]], category: Any) -> dict[str, Any]:
    """COCOeval bbox figures; ``category(diff, is_gt) -> int | None`` (None: leave out)."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    images, anns, dets = [], [], []
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
    empty = {"AP": 0.0, "AP50": 0.0, "AP75": 0.0, "APs": None, "APm": None, "APl": None, "per_category": {},
             "n_gt": len(anns), "n_pred": len(dets), "n_without_confidence": missing_conf}
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

    est = CoherenceEstimator(pipeline.backend, pipeline.templates["dice_coherence"])
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

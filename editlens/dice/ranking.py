"""DICE model ranking (paper, Table 3), per editing model:

* correct edits: % of samples with at least one coherent difference;
* unwanted edits: % of the image area covered by non-coherent differences
  (union of their boxes), averaged over samples;
* no visual change: % of samples with no detected difference.
"""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np

from editlens.metrics.masks import boxes_to_mask

GRID = 256  # area of a union of boxes, measured on a 256 x 256 grid


def union_area(boxes: list[list[float]]) -> float:
    """Fraction of the image covered by the union of normalised boxes.

    >>> union_area([[0, 0, 0.5, 0.5], [0.25, 0.25, 0.75, 0.75]])
    0.4375
    """
    if not boxes:
        return 0.0
    return float(boxes_to_mask(boxes, GRID, GRID).mean())


def sample_stats(dice: dict[str, Any]) -> dict[str, Any]:
    """Per-sample quantities from a DICE result dict (``DiceResult.to_dict()``)."""
    diffs = dice.get("differences", [])
    judged = all("verdict" in d and d["verdict"].get("coherent") is not None for d in diffs)
    coherent = [d for d in diffs if d.get("verdict", {}).get("coherent") is True]
    unwanted = [d["box"] for d in diffs if d.get("verdict", {}).get("coherent") is False]
    return {"no_change": not diffs, "judged": judged, "correct": bool(coherent),
            "unwanted_area": union_area(unwanted)}


def rank_models(records: Iterable[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """``records``: (editing model, DICE result dict) per sample. Correct and
    unwanted edits use only samples whose every difference got a verdict."""
    by: dict[str, list[dict[str, Any]]] = {}
    for model, dice in records:
        by.setdefault(model or "(none)", []).append(sample_stats(dice))
    rows = []
    for model, stats in sorted(by.items()):
        judged = [s for s in stats if s["judged"]]
        rows.append({
            "model": model, "samples": len(stats), "judged": len(judged),
            "correct_edits": 100.0 * np.mean([s["correct"] for s in judged]) if judged else None,
            "unwanted_edits": 100.0 * np.mean([s["unwanted_area"] for s in judged]) if judged else None,
            "no_visual_change": 100.0 * np.mean([s["no_change"] for s in stats]),
        })
    return rows

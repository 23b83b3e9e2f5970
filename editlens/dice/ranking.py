"""DICE model ranking (paper, Table 3), per editing model:

* correct edits: % of samples with at least one coherent difference;
* unwanted edits: % of the image area covered by non-coherent differences
  (union of their boxes), averaged over samples;
* no visual change: % of samples with no detected difference.

The three rates are over *ranked* samples only: the detector's answer was
parsed and complete, and every difference got a coherence verdict. The
others are counted in their own columns and never enter a rate:
``unscored`` (the detector's answer could not be parsed), ``truncated``
(the difference list was cut off), ``partly_judged`` (some coherence answer
could not be parsed) and ``unjudged`` (no VLM judged coherence: without one
nothing is ranked, not even the pairs where no difference was found). A run
whose answers are all unparsable ranks 0 samples, not "100% no visual change".
"""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np

from editlens.metrics.masks import boxes_to_mask

GRID = 256  # area of a union of boxes, measured on a 256 x 256 grid
#: per-sample states, in the order the columns are shown
STATES = ("ranked", "unscored", "truncated", "partly_judged", "unjudged")


def union_area(boxes: list[list[float]]) -> float:
    """Fraction of the image covered by the union of normalised boxes.

    >>> union_area([[0, 0, 0.5, 0.5], [0.25, 0.25, 0.75, 0.75]])
    0.4375
    """
    if not boxes:
        return 0.0
    return float(boxes_to_mask(boxes, GRID, GRID).mean())


def sample_state(dice: dict[str, Any]) -> str:
    """Which of :data:`STATES` a DICE result dict (``DiceResult.to_dict()``) is in."""
    diffs = dice.get("differences") or []
    # rows written before the "unparsable" flag existed: no differences, not "no change", a problem
    if dice.get("unparsable") or (not diffs and dice.get("no_change") is False and dice.get("problem")):
        return "unscored"
    if dice.get("truncated"):
        return "truncated"
    if dice.get("coherence") == "not judged" or any("verdict" not in d for d in diffs):
        return "unjudged"
    if any(d["verdict"].get("coherent") is None for d in diffs):
        return "partly_judged"
    return "ranked"


def sample_stats(dice: dict[str, Any]) -> dict[str, Any]:
    """Per-sample quantities from a DICE result dict (``DiceResult.to_dict()``)."""
    diffs = dice.get("differences") or []
    state = sample_state(dice)
    coherent = [d for d in diffs if (d.get("verdict") or {}).get("coherent") is True]
    unwanted = [d["box"] for d in diffs if (d.get("verdict") or {}).get("coherent") is False]
    return {"state": state, "judged": state == "ranked", "no_change": state == "ranked" and not diffs,
            "correct": bool(coherent), "unwanted_area": union_area(unwanted)}


def rank_models(records: Iterable[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """``records``: (editing model, DICE result dict) per sample. The rates
    use ranked samples only; the other states are counted per column."""
    by: dict[str, list[dict[str, Any]]] = {}
    for model, dice in records:
        by.setdefault(model or "(none)", []).append(sample_stats(dice))
    rows = []
    for model, stats in sorted(by.items()):
        ranked = [s for s in stats if s["state"] == "ranked"]
        row: dict[str, Any] = {"model": model, "samples": len(stats)}
        row.update({state: sum(s["state"] == state for s in stats) for state in STATES})
        row["judged"] = row["ranked"]  # the earlier name of the column
        row.update({
            "correct_edits": 100.0 * float(np.mean([s["correct"] for s in ranked])) if ranked else None,
            "unwanted_edits": 100.0 * float(np.mean([s["unwanted_area"] for s in ranked])) if ranked else None,
            "no_visual_change": 100.0 * float(np.mean([s["no_change"] for s in ranked])) if ranked else None,
        })
        rows.append(row)
    return rows


def ranking_summary(records: Iterable[tuple[str | None, dict[str, Any]]]) -> list[dict[str, Any]]:
    """The run-level summary DICE contributes (``MetricSpec.summary``):
    ``records`` are (editing model, stored details) of its results."""
    return rank_models((m or "(none)", d) for m, d in records if d and "differences" in d)

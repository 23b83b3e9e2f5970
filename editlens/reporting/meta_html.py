"""The extra data a meta-evaluation report plots: predicted-vs-human points
(point-wise) and the confusion of pairwise verdicts (pair-wise), read from
the same files the meta-evaluation read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from editlens.meta import benchmarks as B

#: pairwise labels in display order: +1 = A better, 0 = tie, -1 = B better
PAIR_LABELS = ((1, "A better"), (0, "tie"), (-1, "B better"))


def pointwise_points(human_path: str | Path, pred_path: str | Path, metric: str | None = None) -> list[tuple[float, float, str]]:
    """``(predicted, human, group)`` for every item with both scores."""
    human, groups = B.load_pointwise_human(human_path)
    scores, _, _ = B.load_predictions(pred_path, metric)
    return [(scores[i], human[i], groups[i]) for i in sorted(set(human) & set(scores))]


def pairwise_confusion(human_path: str | Path, pred_path: str | Path, threshold: float,
                       metric: str | None = None) -> dict[str, Any]:
    """Counts of (human label, predicted label) over scored pairs; a predicted
    tie is ``|score(A) - score(B)| <= threshold`` (the calibrated threshold).

    Rows are the human labels, columns the predicted ones, both in
    :data:`PAIR_LABELS` order.
    """
    from editlens.meta.direction import oriented

    pairs = B.load_pairwise_human(human_path)
    scores = oriented(B.load_predictions(pred_path, metric)[0], metric)  # as the accuracy it shows beside
    index = {lab: i for i, (lab, _) in enumerate(PAIR_LABELS)}
    m = np.zeros((3, 3), dtype=int)
    for p in pairs:
        if p["a"] in scores and p["b"] in scores:
            d = scores[p["a"]] - scores[p["b"]]
            pred = 0 if abs(d) <= threshold else int(np.sign(d))
            m[index[p["label"]], index[pred]] += 1
    return {"labels": [name for _, name in PAIR_LABELS], "matrix": m.tolist(), "threshold": threshold}

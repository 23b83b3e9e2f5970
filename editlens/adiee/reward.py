"""Reward uses of any registered evaluator's scores.

* :func:`best_of_n` – per group of candidate edits (same source and
  instruction), the candidate the evaluator likes best.
* :func:`to_reward_scale` / :func:`relabel` – scores mapped to 1-5 and
  written next to a training manifest for reward-conditioned fine-tuning
  (the instruction gets "quality N of 5" appended as a separate column).
* (the batch reward for training loops, :class:`editlens.RewardFunction`,
  lives in :mod:`editlens.runner.reward`: it works with any evaluator)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from editlens.core.types import EditSample, Score
from editlens.errors import InputError


def to_reward_scale(value: float, low: float, high: float) -> float:
    """Map ``value`` in ``[low, high]`` linearly to 1-5 (clamped).

    >>> to_reward_scale(10.0, 0, 10), to_reward_scale(5.0, 0, 10), to_reward_scale(-1.0, 0, 10)
    (5.0, 3.0, 1.0)
    """
    if not (math.isfinite(low) and math.isfinite(high)) or high <= low:
        raise InputError(f"cannot normalise to 1-5: the evaluator's range [{low}, {high}] is not finite")
    return float(1.0 + 4.0 * min(1.0, max(0.0, (value - low) / (high - low))))


@dataclass
class Pick:
    group: str
    best_id: str | None
    best_value: float | None
    candidates: list[dict[str, Any]]


def group_key(s: EditSample) -> str:
    g = s.metadata.get("group")
    return str(g) if g is not None else f"{s.source}\u241f{s.instruction}"


def best_of_n(samples: Sequence[EditSample], scores: Sequence[Score], higher_is_better: bool) -> list[Pick]:
    """The best scored candidate per group (ties: the first in manifest order)."""
    groups: dict[str, list[tuple[EditSample, Score]]] = {}
    for s, sc in zip(samples, scores):
        groups.setdefault(group_key(s), []).append((s, sc))
    picks = []
    for g, members in groups.items():
        scored = [(s, sc) for s, sc in members if sc.status == "scored" and sc.value is not None]
        best = None
        if scored:
            vals = np.array([sc.value for _, sc in scored], dtype=float)
            best = scored[int(np.argmax(vals) if higher_is_better else np.argmin(vals))]
        picks.append(Pick(g, best[0].id if best else None, best[1].value if best else None,
                          [{"id": s.id, "model": s.model, "value": sc.value, "status": sc.status,
                            "reason": sc.reason} for s, sc in members]))
    return picks

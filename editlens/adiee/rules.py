"""The score-assignment rules of ADIEE's data creation, as pure functions.

Scores are in [0, 1] (0 fail, 0.5 partial, 1 success). Each assignment
returns the rule that decided it, or an exclusion reason, never a guess.

>>> multi_turn_score(3, 1, 5)
0.5
>>> multi_turn_score(6, 1, 5)
0.5
>>> multi_turn_score(5, 1, 5), multi_turn_score(1, 1, 5)
(1.0, 0.0)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from editlens.adiee.config import RuleConfig


@dataclass(frozen=True)
class Assignment:
    """A score with the rule that gave it, or ``score=None`` with the reason."""

    score: float | None
    rule: str | None = None
    excluded: str | None = None


@dataclass(frozen=True)
class Thresholds:
    """Per-dataset percentiles of the input images' own CLIP-I / DINO-I
    (input vs ground truth)."""

    clip_i: float
    dino_i: float
    n: int


def _usable(x: float | None) -> bool:
    # ``x == float("nan")`` is always False; test with isnan/isfinite.
    return x is not None and isinstance(x, (int, float)) and math.isfinite(x)


def input_thresholds(clip_i: Sequence[float | None], dino_i: Sequence[float | None], percentile: float) -> Thresholds | None:
    """The ``percentile``-th percentile of the usable CLIP-I and DINO-I values
    (pairs with a missing or NaN value are left out); ``None`` when none are usable.

    >>> t = input_thresholds([0.1, 0.2, float("nan"), 0.4], [0.5, 0.6, 0.7, None], 50)
    >>> round(t.clip_i, 3), round(t.dino_i, 3), t.n
    (0.15, 0.55, 2)
    """
    pairs = [(c, d) for c, d in zip(clip_i, dino_i) if _usable(c) and _usable(d)]
    if not pairs:
        return None
    arr = np.asarray(pairs, dtype=np.float64)
    return Thresholds(float(np.percentile(arr[:, 0], percentile)), float(np.percentile(arr[:, 1], percentile)),
                      len(pairs))


def assign_model_output(model: str | None, clip_d: float | None, clip_i: float | None, dino_i: float | None,
                        thresholds: Thresholds | None, cfg: RuleConfig) -> Assignment:
    """Score one editing model's output (paper sec. 3.1).

    Order: models listed as weak score 0 (no feature needed); then CLIP-D <= 0
    scores 0; then CLIP-I and DINO-I both below the input percentile score 0;
    then models listed as strong score 0.5 below the CLIP-D threshold; at or
    above it they are excluded, as in the released data code
    (``rules.strong_above_threshold = "exclude"``, the default), or score 1
    (``"success"``: the paper's reading, an option). An output of a model on neither list that no negative rule catches has no
    trustworthy score and is excluded. A feature a rule needs that is missing
    or NaN excludes the sample with that reason.
    """
    name = (model or "").strip().lower()
    weak = {m.lower() for m in cfg.weak_models}
    strong = {m.lower() for m in cfg.strong_models}
    if name in weak:
        return Assignment(0.0, "weak_model")
    if cfg.clip_d_nonpositive or name in strong:
        if not _usable(clip_d):
            return Assignment(None, excluded="clip_d missing or NaN (captions absent or undefined direction)")
        if cfg.clip_d_nonpositive and clip_d <= 0:  # type: ignore[operator]
            return Assignment(0.0, "clip_d_nonpositive")
    if cfg.below_input_percentile:
        if not (_usable(clip_i) and _usable(dino_i)):
            return Assignment(None, excluded="clip_i/dino_i vs ground truth missing or NaN")
        if thresholds is None:
            return Assignment(None, excluded="no input-image percentile (no usable input-vs-ground-truth features)")
        if clip_i < thresholds.clip_i and dino_i < thresholds.dino_i:  # type: ignore[operator]
            return Assignment(0.0, "below_input_percentile")
    if name in strong:
        if clip_d < cfg.clip_d_threshold:  # type: ignore[operator]
            return Assignment(0.5, "strong_model_partial")
        if cfg.strong_above_threshold == "exclude":
            return Assignment(None, excluded="strong model at or above the CLIP-D threshold (excluded as released; "
                                             "rules.strong_above_threshold = \"success\" scores it 1)")
        return Assignment(1.0, "strong_model")
    return Assignment(None, excluded=f"no rule scores model {model!r} (not weak or strong, passed the negative rules)")


def multi_turn_score(k: int, i: int, j: int) -> float:
    """Score of image ``k`` of an edit sequence as the output for input image
    ``i`` and the instructions ``i+1..j`` (paper eq. 4)."""
    if not 0 <= i < j:
        raise ValueError(f"need 0 <= i < j, got i={i}, j={j}")
    if k <= i:
        return 0.0
    if k < j:
        return (k - i) / (j - i)
    if k == j:
        return 1.0
    return 0.5


def sample_turn_pairs(n_turns: int, count: int, rng: np.random.Generator) -> list[tuple[int, int]]:
    """``count`` distinct (i, j) with 0 <= i < j <= n_turns, drawn with ``rng``
    (all pairs when fewer exist)."""
    pairs = [(i, j) for i in range(n_turns + 1) for j in range(i + 1, n_turns + 1)]
    if count >= len(pairs):
        return pairs
    pick = rng.choice(len(pairs), size=count, replace=False)
    return [pairs[p] for p in sorted(pick)]

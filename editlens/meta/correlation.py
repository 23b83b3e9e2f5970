"""Correlations with bootstrap confidence intervals, system-level agreement, ICC."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
from scipy import stats

METHODS = {
    "pearson": lambda x, y: stats.pearsonr(x, y)[0],
    "spearman": lambda x, y: stats.spearmanr(x, y)[0],
    "kendall": lambda x, y: stats.kendalltau(x, y)[0],
}


@dataclass
class Correlation:
    method: str
    value: float
    ci: tuple[float, float]
    n: int

    def to_dict(self) -> dict[str, Any]:
        return {"method": self.method, "value": self.value, "ci95": list(self.ci), "n": self.n}


def _safe(fn: Any, x: np.ndarray, y: np.ndarray) -> float:
    if x.size < 2 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan")  # undefined for constant input; never reported as 0
    return float(fn(x, y))


def correlate(pred: Sequence[float], human: Sequence[float], method: str = "spearman",
              n_boot: int = 1000, seed: int = 0, level: float = 0.95) -> Correlation:
    """Correlation with a percentile bootstrap CI over resampled samples.

    >>> c = correlate([1, 2, 3, 4], [1, 2, 3, 5], "spearman", n_boot=50)
    >>> c.value
    1.0
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {sorted(METHODS)}, got {method!r}")
    x, y = np.asarray(pred, dtype=float), np.asarray(human, dtype=float)
    if x.shape != y.shape:
        raise ValueError(f"{len(x)} predictions vs {len(y)} human scores")
    value = _safe(METHODS[method], x, y)
    rng = np.random.default_rng(seed)
    boots = []
    for _ in range(n_boot):
        idx = rng.integers(0, x.size, x.size)
        boots.append(_safe(METHODS[method], x[idx], y[idx]))
    b = np.asarray(boots)
    b = b[np.isfinite(b)]
    alpha = (1 - level) / 2
    ci = (float(np.quantile(b, alpha)), float(np.quantile(b, 1 - alpha))) if b.size else (float("nan"),) * 2
    return Correlation(method, value, ci, int(x.size))


def system_level(pred_by_model: Mapping[str, Sequence[float]], human_by_model: Mapping[str, Sequence[float]]) -> dict[str, Any]:
    """Kendall tau between the ranking of editing models by mean evaluator
    score and by mean human score (models present in both)."""
    models = sorted(set(pred_by_model) & set(human_by_model))
    p = np.array([np.mean(pred_by_model[m]) for m in models])
    h = np.array([np.mean(human_by_model[m]) for m in models])
    tau = _safe(lambda a, b: stats.kendalltau(a, b)[0], p, h)
    # undefined (fewer than two models, constant means) is null in a report, never NaN
    return {"kendall_tau": tau if np.isfinite(tau) else None, "models": models, "pred_means": p.tolist(), "human_means": h.tolist()}


def icc_2_1(ratings: np.ndarray | Sequence[Sequence[float]]) -> float:
    """ICC(2,1): two-way random effects, absolute agreement, single rater
    (Shrout & Fleiss, 1979). ``ratings`` is (targets, raters) with no gaps.

    >>> round(icc_2_1([[1, 1], [2, 2], [3, 3]]), 6)
    1.0
    """
    x = np.asarray(ratings, dtype=float)
    if x.ndim != 2 or x.shape[0] < 2 or x.shape[1] < 2:
        raise ValueError("ICC needs a (targets, raters) matrix with at least 2 of each")
    if not np.isfinite(x).all():
        raise ValueError("ICC(2,1) needs complete ratings (no missing values)")
    n, k = x.shape
    grand = x.mean()
    ss_rows = k * ((x.mean(axis=1) - grand) ** 2).sum()
    ss_cols = n * ((x.mean(axis=0) - grand) ** 2).sum()
    ss_err = ((x - grand) ** 2).sum() - ss_rows - ss_cols
    ms_r = ss_rows / (n - 1)
    ms_c = ss_cols / (k - 1)
    ms_e = ss_err / ((n - 1) * (k - 1))
    denom = ms_r + (k - 1) * ms_e + k * (ms_c - ms_e) / n
    return float((ms_r - ms_e) / denom) if denom != 0 else float("nan")

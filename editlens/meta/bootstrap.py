"""Seeded percentile bootstrap confidence intervals, shared by
meta-evaluation, run summaries and reports."""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np


def bootstrap_ci(values: Sequence[float] | np.ndarray, stat: Callable[[np.ndarray], float] = np.mean,
                 n_boot: int = 1000, level: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap CI of ``stat`` over resampled values (seeded).

    Fewer than two values give no spread to resample: the interval is
    undefined, ``(nan, nan)``, not the degenerate ``[x, x]``.

    >>> bootstrap_ci([1.0, 1.0, 1.0])
    (1.0, 1.0)
    >>> bootstrap_ci([0.7])
    (nan, nan)
    """
    x = np.asarray(values, dtype=np.float64)
    if x.size < 2:
        return (float("nan"), float("nan"))
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, x.size, size=(n_boot, x.size))
    if stat is np.mean:  # the same numbers row by row, without a Python call per resample
        step = max(1, 2_000_000 // x.size)
        stats = np.concatenate([x[idx[i:i + step]].mean(axis=1) for i in range(0, n_boot, step)])
    else:
        stats = np.array([stat(x[i]) for i in idx])
    alpha = (1 - level) / 2
    return (float(np.nanquantile(stats, alpha)), float(np.nanquantile(stats, 1 - alpha)))


def ci_or_none(values: Sequence[float] | np.ndarray, **kwargs: float) -> list[float] | None:
    """:func:`bootstrap_ci` as a list for JSON reports, ``None`` when undefined (n < 2).

    >>> ci_or_none([0.5]) is None, ci_or_none([1.0, 1.0])
    (True, [1.0, 1.0])
    """
    lo, hi = bootstrap_ci(values, **kwargs)  # type: ignore[arg-type]
    return None if np.isnan(lo) or np.isnan(hi) else [lo, hi]

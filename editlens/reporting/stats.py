"""Statistics for reports: bootstraps and paired tests between editors, each
remembered by the content of its values in the report's own cache (a
:class:`~editlens.reporting.memo.Memo`, so `editlens view` does not redo them). The bootstrap
itself lives with the meta-evaluation statistics (:mod:`editlens.meta.bootstrap`)."""

from __future__ import annotations

import gc
import hashlib
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from editlens.meta.bootstrap import bootstrap_ci
from editlens.reporting.memo import Memo


def _key(*arrays: np.ndarray) -> str:
    h = hashlib.blake2b(digest_size=16)
    for a in arrays:
        a = np.ascontiguousarray(a, dtype=np.float64)
        h.update(str(a.shape).encode())
        h.update(a.tobytes())
    return h.hexdigest()


def cached(kind: str, arrays: Sequence[np.ndarray], params: tuple, compute: Callable[[], Any],
           memo: Memo | None = None) -> Any:
    """``compute()``, remembered in ``memo`` under the content of ``arrays`` and ``params``
    (without a memo, computed each time)."""
    if memo is None:
        return compute()
    return memo.get_or_make((kind, _key(*arrays), params), compute)


def cached_bootstrap_ci(values: Sequence[float] | np.ndarray, n_boot: int = 1000, level: float = 0.95,
                        seed: int = 0, memo: Memo | None = None) -> tuple[float, float]:
    """:func:`bootstrap_ci` of the mean, remembered in ``memo`` by the values' content (same numbers)."""
    x = np.asarray(values, dtype=np.float64)
    return cached("boot-mean", [x], (n_boot, level, seed), lambda: bootstrap_ci(x, n_boot=n_boot, level=level, seed=seed),
                  memo)


def paired_bootstrap(diffs: Sequence[float] | np.ndarray, n_boot: int = 1000, seed: int = 0,
                     memo: Memo | None = None) -> dict[str, Any]:
    """Paired bootstrap test of a mean difference (one difference per shared item).

    Items are resampled with replacement ``n_boot`` times (seeded); the
    result is the mean difference, its percentile 95% CI and a two-sided
    p-value, twice the smaller share of resampled means on either side of 0
    (floored at ``1 / n_boot``). Fewer than two items cannot be tested:
    ``p`` is ``None``. Remembered in ``memo`` by content.

    >>> r = paired_bootstrap([1.0, 2.0, 1.5, 0.5, 1.2, 0.8])
    >>> r["n"], r["mean"] > 0, r["p"] <= 0.002, r["significant"]
    (6, True, True, True)
    >>> paired_bootstrap([0.0, 0.0, 0.0])["p"], paired_bootstrap([0.3])["p"]
    (1.0, None)
    """
    d = np.asarray(diffs, dtype=np.float64)

    def compute() -> dict[str, Any]:
        if d.size < 2:
            return {"n": int(d.size), "mean": float(d.mean()) if d.size else None, "ci": None, "p": None,
                    "significant": False}
        rng = np.random.default_rng(seed)
        means = d[rng.integers(0, d.size, size=(n_boot, d.size))].mean(axis=1)
        lo, hi = np.quantile(means, [0.025, 0.975])
        below, above = float(np.mean(means <= 0)), float(np.mean(means >= 0))
        p = min(1.0, max(2 * min(below, above), 1.0 / n_boot))
        return {"n": int(d.size), "mean": float(d.mean()), "ci": [float(lo), float(hi)], "p": p,
                "significant": bool(p < 0.05)}

    return cached("paired", [d], (n_boot, seed), compute, memo)


@contextmanager
def no_gc_pauses() -> Iterator[None]:
    """Hold the cyclic garbage collector while a report is built: building tens of thousands of
    small dicts triggers collections that scan them all again and again (a third of a rebuild's
    time); reference counting still frees everything as usual."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()

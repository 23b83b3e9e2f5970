"""Statistics the meta-evaluation reports share: the bootstrap CI of an aggregated per-group
Spearman, the breakdown by edit type, and the calibration summary of a report. Pure: values in,
figures out (the benchmarks that read files and build reports are :mod:`editlens.bench`)."""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np
from scipy import stats

from editlens.errors import InputError
from editlens.meta.correlation import correlate
from editlens.meta.protocols import aggregate_correlations


def grouped_bootstrap_ci(pred: Mapping[str, Mapping[str, float]], human: Mapping[str, Mapping[str, float]],
                         aggregation: str, n_boot: int = 1000, seed: int = 0) -> tuple[float, float]:
    """95% CI of an aggregated per-group Spearman, resampling items within each group (seeded)."""
    rng = np.random.default_rng(seed)
    groups = []
    for g in sorted(human):
        items = sorted(set(human[g]) & set(pred.get(g, {})))
        if len(items) >= 2:
            groups.append((np.array([pred[g][i] for i in items]), np.array([human[g][i] for i in items])))
    if not groups:
        return (float("nan"), float("nan"))
    vals = []
    for _ in range(n_boot):
        rs = []
        for x, y in groups:
            idx = rng.integers(0, x.size, x.size)
            xs, ys = x[idx], y[idx]
            if np.ptp(xs) > 0 and np.ptp(ys) > 0:
                rs.append(stats.spearmanr(xs, ys)[0])
        vals.append(aggregate_correlations(rs, aggregation))
    v = np.asarray(vals)
    v = v[np.isfinite(v)]
    return (float(np.quantile(v, 0.025)), float(np.quantile(v, 0.975))) if v.size else (float("nan"),) * 2


def edit_type_breakdown(pred: Mapping[Any, float], human: Mapping[Any, float], types: Mapping[Any, str],
                        n_boot: int = 1000, seed: int = 0) -> dict[str, Any]:
    """Per edit type: the number of items and the Spearman correlation (pooled
    over the type's items, bootstrap 95% CI) of predicted and human scores."""
    from editlens.data.edit_types import edit_type_label

    by: dict[str, list[Any]] = {}
    for k in sorted(set(pred) & set(human) & set(types), key=str):
        by.setdefault(types[k], []).append(k)
    def finite(c: dict[str, Any]) -> dict[str, Any]:  # undefined (n < 2, constant scores) is null, never NaN or 0
        ok = lambda v: v is not None and math.isfinite(v)  # noqa: E731
        return {**c, "value": c["value"] if ok(c["value"]) else None,
                "ci95": c["ci95"] if all(ok(v) for v in c["ci95"]) else None}

    return {t: {"label": edit_type_label(t), "n": len(ks),
                "spearman": finite(correlate([pred[k] for k in ks], [human[k] for k in ks], "spearman", n_boot,
                                             seed).to_dict())}
            for t, ks in sorted(by.items())}


def calibration_summary(labelled: list[Any], seed: int) -> dict[str, Any]:
    """Isotonic calibration (5 folds, grouped by source) of each evaluator: ECE before and
    after out of fold, and the reliability bins the report draws."""
    from editlens.meta.calibration import calibration_report

    try:
        rep, _ = calibration_report(labelled, "isotonic", folds=5, seed=seed)
    except InputError as exc:  # too few items or sources to cross-validate: say so, keep the report
        return {"error": str(exc)}
    return {"method": "isotonic", "target": rep["target"], "evaluators": rep["calibration"]}

"""Meta-evaluation reports: a protocol applied to a benchmark, as one JSON-able dict."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import numpy as np
from scipy import stats

from editlens.errors import InputError
from editlens.meta import benchmarks as B
from editlens.meta.correlation import correlate, icc_2_1, system_level
from editlens.meta.protocols import (
    accuracy_with_ties,
    aggregate_correlations,
    aurora_pointwise,
    genai_bench_accuracy,
    imagenhub_correlation,
)


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


def _split_id(sid: str, models: Mapping[str, str]) -> tuple[str, str]:
    """(group, item) of an editlens run sample id: group = its model, item =
    the id's last '/'-separated part (ImagenHub manifests use METHOD/UID)."""
    return models.get(sid, sid.split("/")[0]), sid.split("/")[-1]


def imagenhub_report(ratings_dir: str | Path, judge_outputs: str | Path | None = None,
                     predictions: str | Path | None = None, metric: str | None = None,
                     aggregation: str = "official", n_boot: int = 1000, seed: int = 0) -> dict[str, Any]:
    """ImagenHub text-guided editing, official protocol by default.

    Predictions come from VIEScore-style judge outputs (``judge_outputs``;
    all three aspects) or from a predictions file (``predictions``; the score
    is compared with human O, SC and PQ).
    """
    human = B.load_imagenhub_human(ratings_dir)
    if (judge_outputs is None) == (predictions is None):
        raise InputError("give exactly one of --judge-outputs or --predictions")
    if judge_outputs is not None:
        preds = B.load_viescore_outputs(judge_outputs)
        pred_by_aspect = preds.scores
        unparsable, total = preds.unparsable, preds.total
    else:
        scores, models, unscored = B.load_predictions(predictions, metric)  # type: ignore[arg-type]
        grouped: dict[str, dict[str, float]] = {}
        for sid, v in scores.items():
            g, item = _split_id(sid, models)
            grouped.setdefault(g, {})[item] = v
        pred_by_aspect = {"O": grouped, "SC": grouped, "PQ": grouped}
        unparsable = [{"id": s} for s in unscored]
        total = len(scores) + len(unscored)
    aspects = {}
    for aspect in ("O", "SC", "PQ"):
        res = imagenhub_correlation(pred_by_aspect[aspect], human.scores[aspect], aggregation)
        aspects[aspect] = {**res.to_dict(), "ci95": list(grouped_bootstrap_ci(
            pred_by_aspect[aspect], human.scores[aspect], aggregation, n_boot, seed))}
    used = sum(aspects["O"]["n_per_group"].values())
    # system level: do the methods' mean predicted and mean human overall ratings (items with both) rank them alike?
    pred_o, human_o = pred_by_aspect["O"], human.scores["O"]
    shared = {g: sorted(set(human_o[g]) & set(pred_o.get(g, {}))) for g in human_o}
    shared = {g: items for g, items in shared.items() if items}
    system = system_level({g: [pred_o[g][i] for i in items] for g, items in shared.items()},
                          {g: [human_o[g][i] for i in items] for g, items in shared.items()})
    rater_matrix = [r for m in human.per_rater_o.values() for r in m.values() if len(r) >= 2]
    k = min(len(r) for r in rater_matrix) if rater_matrix else 0
    icc = icc_2_1([r[:k] for r in rater_matrix]) if k >= 2 else None
    return {
        "benchmark": "imagenhub-tie",
        "protocol": "imagenhub-official" if aggregation == "official" else f"imagenhub-{aggregation}",
        "aggregation": aggregation,
        "aggregation_note": {
            "official": "tanh(mean of per-method Spearman r), as ImagenHub's code and published numbers",
            "fisher": "tanh(mean(arctanh(r))): the true Fisher-z average",
            "mean": "plain mean of per-method r",
        }[aggregation],
        "value": aspects["O"]["value"],
        "aspects": aspects,
        "n_items": used,
        "n_predictions": total,
        "n_unparsable": len(unparsable),
        "unparsable": unparsable[:50],
        "human_inter_rater_icc_2_1": icc,
        "system_level": system,
        "bootstrap": {"n": n_boot, "seed": seed, "resampling": "items within each method"},
    }


def genai_bench_report(path: str | Path) -> dict[str, Any]:
    items = B.load_genai_results(path)
    return {"benchmark": "genai-bench-edition", **genai_bench_accuracy(items)}


def pointwise_report(human_path: str | Path, pred_path: str | Path, metric: str | None = None,
                     protocol: str = "aurora", n_boot: int = 1000, seed: int = 0) -> dict[str, Any]:
    """Generic point-wise agreement: per-group protocol, overall correlations
    with CIs, and system-level Kendall tau between model rankings."""
    human, groups = B.load_pointwise_human(human_path)
    scores, _, unscored = B.load_predictions(pred_path, metric)
    ids = sorted(set(human) & set(scores))
    missing = sorted(set(human) - set(scores) - set(unscored))
    if len(ids) < 2:
        raise InputError(f"only {len(ids)} item(s) have both a prediction and a human score; check the ids match")
    pred_g: dict[str, dict[str, float]] = {}
    human_g: dict[str, dict[str, float]] = {}
    for i in ids:
        pred_g.setdefault(groups[i], {})[i] = scores[i]
        human_g.setdefault(groups[i], {})[i] = human[i]
    if protocol == "aurora":
        grouped = aurora_pointwise(pred_g, human_g).to_dict()
    elif protocol in ("official", "fisher", "mean"):
        grouped = imagenhub_correlation(pred_g, human_g, protocol).to_dict()
    else:
        raise InputError(f"--protocol must be aurora, official, fisher or mean, got {protocol!r}")
    x = [scores[i] for i in ids]
    y = [human[i] for i in ids]
    return {
        "benchmark": "pointwise",
        "protocol": grouped["protocol"],
        "value": grouped["value"],
        "grouped": grouped,
        "overall": {m: correlate(x, y, m, n_boot, seed).to_dict() for m in ("pearson", "spearman", "kendall")},
        "system_level": system_level({g: list(v.values()) for g, v in pred_g.items()},
                                     {g: list(v.values()) for g, v in human_g.items()}),
        "n_items": len(ids),
        "n_unparsable": len([u for u in unscored if u in human]),
        "n_missing": len(missing),
        "bootstrap": {"n": n_boot, "seed": seed},
    }


def pairwise_report(human_path: str | Path, pred_path: str | Path, metric: str | None = None) -> dict[str, Any]:
    """Pairwise accuracy with tie calibration, over pairs whose two edits are both scored."""
    pairs = B.load_pairwise_human(human_path)
    scores, _, unscored = B.load_predictions(pred_path, metric)
    usable = [p for p in pairs if p["a"] in scores and p["b"] in scores]
    unparsable = [p["id"] for p in pairs if p["a"] in unscored or p["b"] in unscored]
    if not usable:
        raise InputError("no pair has both edits scored; check that 'a'/'b' match prediction ids")
    res = accuracy_with_ties([p["label"] for p in usable], [scores[p["a"]] - scores[p["b"]] for p in usable])
    return {"benchmark": "pairwise", **res, "n_pairs": len(pairs), "n_unparsable": len(unparsable),
            "n_missing": len(pairs) - len(usable) - len(unparsable)}

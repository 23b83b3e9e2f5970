"""Meta-evaluation reports: a protocol applied to a benchmark, as one JSON-able dict."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping

import numpy as np
from scipy import stats

from editlens.errors import InputError
from editlens.meta import benchmarks as B
from editlens.meta.correlation import correlate, icc_2_1, system_level
from editlens.meta.direction import direction_note, oriented
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


def labels(benchmark: str, path: str | Path, **options: Any) -> Any:
    """People's labels as the benchmark's adapter reads them (:mod:`editlens.bench`)."""
    from editlens.bench.registry import get

    return get(benchmark).labels(path, **options)


def _split_id(sid: str, models: Mapping[str, str]) -> tuple[str, str]:
    """(group, item) of an editlens run sample id: group = its model, item =
    the id's last '/'-separated part (ImagenHub manifests use METHOD/UID)."""
    return models.get(sid, sid.split("/")[0]), sid.split("/")[-1]


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


def column_breakdown(pred: Mapping[Any, float], human: Mapping[Any, float], paths: list[str | Path], column: str,
                     n_boot: int = 1000, seed: int = 0) -> dict[str, Any]:
    """Per value of ``column`` (a field of the human file's or the predictions' rows, e.g. an
    editlens ``results.jsonl`` keeps every manifest column): items and pooled Spearman with
    its bootstrap 95% CI. An unknown column is an :class:`InputError` listing the fields there are."""
    from editlens.data.jsonl import iter_jsonl

    values: dict[str, Any] = {}
    fields: set[str] = set()
    for path in paths:
        for _, row in iter_jsonl(path):
            fields |= set(row)
            if "id" in row and column in row:
                values.setdefault(str(row["id"]), row[column])
    if not values:
        shown = sorted(fields - {"id", "scores", "images", "score", "human", "details"})
        raise InputError(f"--by {column!r}: no row of {', '.join(str(p) for p in paths)} has that field; "
                         f"group by one of {', '.join(shown) or '(none)'}")
    groups = {k: ("(none)" if v in (None, "") else str(v)) for k, v in values.items()}
    by: dict[str, list[Any]] = {}
    for k in sorted(set(pred) & set(human), key=str):
        by.setdefault(groups.get(str(k), "(none)"), []).append(k)

    def finite(c: dict[str, Any]) -> dict[str, Any]:  # undefined (n < 2, constant scores) is null, never NaN or 0
        ok = lambda v: v is not None and math.isfinite(v)  # noqa: E731
        return {**c, "value": c["value"] if ok(c["value"]) else None,
                "ci95": c["ci95"] if all(ok(v) for v in c["ci95"]) else None}

    return {g: {"n": len(ks), "spearman": finite(correlate([pred[k] for k in ks], [human[k] for k in ks], "spearman",
                                                            n_boot, seed).to_dict())}
            for g, ks in sorted(by.items())}


def _instructions(path: str | Path | None) -> dict[str, dict[str, Any]]:
    """``{id: {"instruction", "edit_type"}}`` from any JSONL with those fields (editlens
    ``results.jsonl``, a human file, ImagenHub's ``samples.jsonl`` keyed ``METHOD/UID`` and ``UID``)."""
    from editlens.data.jsonl import iter_jsonl

    out: dict[str, dict[str, Any]] = {}
    if path is None:
        return out
    for _, row in iter_jsonl(path):
        text = {k: row[k] for k in ("instruction", "edit_type") if row.get(k) not in (None, "")}
        if not text:
            continue
        if "uid" in row:
            out.setdefault(str(row["uid"]), text)
            if "method" in row:
                out[f"{row['method']}/{row['uid']}"] = text
        elif "id" in row:
            out[str(row["id"])] = text
    return out


def _types(texts: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    from editlens.data.edit_types import edit_type_of

    return {k: edit_type_of({"id": k, **v}) for k, v in texts.items()}


def _calibration_summary(labelled: list[Any], seed: int) -> dict[str, Any]:
    """Isotonic calibration (5 folds, grouped by source) of each evaluator: ECE before and
    after out of fold, and the reliability bins the report draws."""
    from editlens.meta.calibration import calibration_report

    try:
        rep, _ = calibration_report(labelled, "isotonic", folds=5, seed=seed)
    except InputError as exc:  # too few items or sources to cross-validate: say so, keep the report
        return {"error": str(exc)}
    return {"method": "isotonic", "target": rep["target"], "evaluators": rep["calibration"]}


def imagenhub_report(ratings_dir: str | Path, judge_outputs: str | Path | None = None,
                     predictions: str | Path | None = None, metric: str | None = None,
                     aggregation: str = "official", n_boot: int = 1000, seed: int = 0,
                     instructions: str | Path | None = None, good_at: float = 0.5) -> dict[str, Any]:
    """ImagenHub text-guided editing, official protocol by default.

    Predictions come from VIEScore-style judge outputs (``judge_outputs``;
    all three aspects) or from a predictions file (``predictions``; the score
    is compared with human O, SC and PQ). The report adds the calibration of
    the O score to the share of raters who rate an edit good (O >= ``good_at``)
    and, when the instructions are known (``instructions``: a JSONL with
    ``uid`` and ``instruction``, by default ``samples.jsonl`` beside the
    ratings folder when there is one), a breakdown by edit type.
    """
    human = labels("imagenhub", ratings_dir)
    if (judge_outputs is None) == (predictions is None):
        raise InputError("give exactly one of --judge-outputs or --predictions")
    if judge_outputs is not None:
        preds = B.load_viescore_outputs(judge_outputs)
        pred_by_aspect = preds.scores
        unparsable, total = preds.unparsable, preds.total
    else:
        scores, models, unscored = B.load_predictions(predictions, metric)  # type: ignore[arg-type]
        if not scores and unscored:
            raise nothing_scored(len(unscored))
        scores = oriented(scores, metric)  # a lower-is-better evaluator agrees when its score falls as ratings rise
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
        ci = grouped_bootstrap_ci(pred_by_aspect[aspect], human.scores[aspect], aggregation, n_boot, seed)
        # undefined (every method excluded: constant ratings, too few items) is null, never NaN
        aspects[aspect] = {**res.to_dict(), "ci95": list(ci) if all(math.isfinite(v) for v in ci) else None}
        if not math.isfinite(aspects[aspect]["value"]):
            aspects[aspect]["value"] = None
    used = sum(aspects["O"]["n_per_group"].values())
    if not used:
        from editlens.core.evidence import not_measured

        raise InputError("ImagenHub agreement " + not_measured(0, "no editing method has two items with both a "
                         "prediction and human ratings") + "; prediction ids must be METHOD/UID")
    # system level: do the methods' mean predicted and mean human overall ratings (items with both) rank them alike?
    pred_o, human_o = pred_by_aspect["O"], human.scores["O"]
    shared = {g: sorted(set(human_o[g]) & set(pred_o.get(g, {}))) for g in human_o}
    shared = {g: items for g, items in shared.items() if items}
    system = system_level({g: [pred_o[g][i] for i in items] for g, items in shared.items()},
                          {g: [human_o[g][i] for i in items] for g, items in shared.items()})
    rater_matrix = [r for m in human.per_rater_o.values() for r in m.values() if len(r) >= 2]
    k = min(len(r) for r in rater_matrix) if rater_matrix else 0
    icc = icc_2_1([r[:k] for r in rater_matrix]) if k >= 2 else None
    from editlens.meta.calibration import imagenhub_labels

    if instructions is None and (Path(ratings_dir).parent / "samples.jsonl").is_file():
        instructions = Path(ratings_dir).parent / "samples.jsonl"
    texts = _instructions(instructions)
    types = _types({uid: t for uid, t in texts.items() if "/" not in uid})
    flat_pred = {(g, i): v for g, items in pred_by_aspect["O"].items() for i, v in items.items()}
    flat_human = {(g, i): v for g, items in human.scores["O"].items() for i, v in items.items()}
    extra: dict[str, Any] = {
        "calibration": _calibration_summary(imagenhub_labels(ratings_dir, judge_outputs, predictions, metric, good_at),
                                            seed),
        "by_edit_type": edit_type_breakdown(flat_pred, flat_human, {k: types[k[1]] for k in flat_pred if k[1] in types},
                                            n_boot, seed) if types else {},
        "instructions_from": str(instructions) if instructions else None,
    }
    return {
        "benchmark": "imagenhub-tie",
        "direction": ("higher is better (VIEScore answers)" if judge_outputs is not None
                      else direction_note(metric)),
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
        **extra,
    }


def genai_bench_report(path: str | Path) -> dict[str, Any]:
    from editlens.core.evidence import not_measured

    items = labels("genai-bench", path)
    res = genai_bench_accuracy(items)
    if res["n"] == res["no_verdict"]:  # "accuracy 0.0" over answers that hold no verdict would be invented
        why = "the file holds no item" if not res["n"] else f"none of the {res['n']} answers holds a [[...]] verdict"
        raise InputError(f"{path}: GenAI-Bench accuracy {not_measured(0, why)}")
    return {"benchmark": "genai-bench-edition", **res}


def nothing_scored(n_unscored: int, what: str = "predictions") -> InputError:
    """The error when every prediction is unscored or failed: say so, and where to look."""
    return InputError(f"nothing was scored: all {n_unscored} {what} are unscored or failed, so there is no "
                      "agreement to measure; `editlens runs failures RUN_DIR` lists the reasons")


def pointwise_report(human_path: str | Path, pred_path: str | Path, metric: str | None = None,
                     protocol: str = "aurora", n_boot: int = 1000, seed: int = 0,
                     by: str | None = None) -> dict[str, Any]:
    """Generic point-wise agreement: the protocol's figure (with the number of
    items it actually counts), overall correlations with CIs, and
    system-level Kendall tau between model rankings.

    ``protocol``: ``aurora`` (one Spearman over all items, as ADIEE's release;
    the per-model mean is reported beside it), ``aurora-per-model`` (the mean
    of per-model Spearman as the headline), ``official``/``fisher``/``mean``
    (ImagenHub-style aggregations of per-group Spearman). ``by``: also a breakdown
    (``by_column``) per value of that field of the human file's or the predictions' rows.
    """
    human, groups = labels("aurora", human_path, kind="pointwise")
    scores, _, unscored = B.load_predictions(pred_path, metric)
    scores = oriented(scores, metric)  # a lower-is-better evaluator agrees when its score falls as ratings rise
    ids = sorted(set(human) & set(scores))
    missing = sorted(set(human) - set(scores) - set(unscored))
    if not scores and unscored:
        raise nothing_scored(len(unscored))
    if len(ids) < 2:
        raise InputError(f"only {len(ids)} item(s) have both a prediction and a human score; check that the "
                         f"prediction ids match the human file's ids (e.g. {sorted(human)[:3]})")
    if len({human[i] for i in ids}) < 2:  # one class: no correlation exists to report
        raise InputError(f"{human_path}: every matched human score is {human[ids[0]]:g} (a single class); agreement "
                         "needs edits people rated differently")
    pred_g: dict[str, dict[str, float]] = {}
    human_g: dict[str, dict[str, float]] = {}
    for i in ids:
        pred_g.setdefault(groups[i], {})[i] = scores[i]
        human_g.setdefault(groups[i], {})[i] = human[i]
    figures: dict[str, Any] = {}
    if protocol in ("aurora", "aurora-per-model"):
        aurora = aurora_pointwise(pred_g, human_g)
        figures = {"global_spearman": {k: aurora[k] for k in ("value", "n_items", "aggregation")},
                   "per_model_mean_spearman": aurora["per_model_mean"]}
        head = figures["global_spearman"] if protocol == "aurora" else figures["per_model_mean_spearman"]
        grouped = {**aurora["per_model_mean"],  # per-group detail; the headline below
                   "protocol": "aurora-pointwise" if protocol == "aurora" else "aurora-per-model-mean",
                   "value": head["value"], "n_items": head["n_items"],
                   "value_note": ("one Spearman over all items (ADIEE's release)" if protocol == "aurora"
                                  else "mean over editing models of per-model Spearman")}
    elif protocol in ("official", "fisher", "mean"):
        grouped = imagenhub_correlation(pred_g, human_g, protocol).to_dict()
        grouped["n_items"] = int(sum(grouped["n_per_group"].values()))
    else:
        raise InputError(f"--protocol must be aurora, aurora-per-model, official, fisher or mean, got {protocol!r}")
    x = [scores[i] for i in ids]
    y = [human[i] for i in ids]
    from editlens.meta.calibration import pointwise_labels

    texts = {**_instructions(human_path), **_instructions(pred_path)}
    types = _types({i: texts[i] for i in ids if i in texts})
    in_01 = all(0.0 <= human[i] <= 1.0 for i in ids)
    extra = {
        # calibration needs a probability to match: human scores in [0, 1] (labels or a share of raters)
        "calibration": _calibration_summary(pointwise_labels(human_path, pred_path, metric), seed) if in_01 else
        {"error": "human scores outside [0, 1]: run `editlens calibrate pointwise --good-at T` to say which are good"},
        "by_edit_type": edit_type_breakdown(scores, human, types, n_boot, seed) if types else {},
    }
    if by:
        extra["by_column"] = {"column": by, "groups": column_breakdown(
            {i: scores[i] for i in ids}, {i: human[i] for i in ids}, [human_path, pred_path], by, n_boot, seed)}
    return {
        "benchmark": "pointwise",
        "direction": direction_note(metric),
        "protocol": grouped["protocol"],
        "value": grouped["value"],
        "n_items": grouped["n_items"],  # the items the headline figure counts
        "figures": figures,
        "grouped": grouped,
        "overall": {m: correlate(x, y, m, n_boot, seed).to_dict() for m in ("pearson", "spearman", "kendall")},
        "system_level": system_level({g: list(v.values()) for g, v in pred_g.items()},
                                     {g: list(v.values()) for g, v in human_g.items()}),
        "n_matched": len(ids),
        "n_unparsable": len([u for u in unscored if u in human]),
        "n_missing": len(missing),
        "bootstrap": {"n": n_boot, "seed": seed},
        **extra,
    }


def pairwise_report(human_path: str | Path, pred_path: str | Path, metric: str | None = None) -> dict[str, Any]:
    """Pairwise accuracy with tie calibration, over pairs whose two edits are both scored."""
    pairs = labels("aurora", human_path, kind="pairwise")
    scores, _, unscored = B.load_predictions(pred_path, metric)
    scores = oriented(scores, metric)  # score(A) - score(B) > 0 means A is better, in either direction
    usable = [p for p in pairs if p["a"] in scores and p["b"] in scores]
    unparsable = [p["id"] for p in pairs if p["a"] in unscored or p["b"] in unscored]
    if not scores and unscored:
        raise nothing_scored(len(unscored))
    if not usable:
        raise InputError("no pair has both edits scored; check that 'a'/'b' match prediction ids")
    res = accuracy_with_ties([p["label"] for p in usable], [scores[p["a"]] - scores[p["b"]] for p in usable])
    texts = {**_instructions(human_path), **_instructions(pred_path)}
    types = _types({p["id"]: texts.get(p["id"]) or texts[p["a"]] for p in usable if p["id"] in texts or p["a"] in texts})
    by_type: dict[str, Any] = {}
    for t in sorted(set(types.values())):
        sub = [p for p in usable if types.get(p["id"]) == t]
        h, d = [p["label"] for p in sub], [scores[p["a"]] - scores[p["b"]] for p in sub]
        from editlens.data.edit_types import edit_type_label

        # the threshold chosen on all pairs, applied within the type (re-fitting it per type would flatter small types)
        pred = [0 if abs(x) <= res["threshold"] else (1 if x > 0 else -1) for x in d]
        by_type[t] = {"label": edit_type_label(t), "n": len(sub),
                      "accuracy": float(np.mean([a == b for a, b in zip(pred, h)]))}
    return {"benchmark": "pairwise", "direction": direction_note(metric), **res, "n_pairs": len(pairs), "n_unparsable": len(unparsable),
            "n_missing": len(pairs) - len(usable) - len(unparsable), "by_edit_type": by_type}

"""Agreement of the annotators of a task (``editlens annotate stats``).

Per criterion (pairwise: the four-way ``outcome`` A / B / tie / both bad, and
``winner`` A / B / no winner; point-wise: each criterion of the preset and the
overall value): Krippendorff's alpha (the ``krippendorff`` package; nominal for
pairs, the preset's level for scales), the mean of Cohen's kappa over
annotator pairs with shared items, and Fleiss' kappa (its form for items rated
by different numbers of people: each item's agreement over the pairs of its
ratings, chance from all ratings). CIs are percentile bootstraps over items
(seeded). Only the first showing of a regular item counts; repeats and gold
items are checks, not labels.

Per annotator: votes, Cohen's kappa with each other annotator (mean), the share
of repeats answered as the first time (self-consistency), the share of gold
items answered as known (gold accuracy), each with a bootstrap CI; an annotator
below a threshold is flagged, with the reason.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from editlens.annotate.presets import PAIR_OUTCOMES, overall
from editlens.errors import InputError

WINNER = {"A": "A", "B": "B", "tie": "none", "both_bad": "none"}


def _alpha(matrix: np.ndarray, level: str, domain: Sequence[float] | None) -> float | None:
    try:
        import krippendorff
    except ImportError as exc:  # pragma: no cover - a dependency of editlens[annotate]
        raise InputError("agreement needs the krippendorff package: pip install 'editlens[annotate]'") from exc
    rated = np.sum(~np.isnan(matrix), axis=0) >= 2
    if rated.sum() < 1:
        return None
    m = matrix[:, rated]
    values = np.unique(m[~np.isnan(m)])
    if values.size < 2:
        return None  # one value everywhere: no disagreement to measure, alpha undefined
    kw: dict[str, Any] = {"level_of_measurement": level}
    if level != "interval" and domain is not None:
        kw["value_domain"] = list(domain)
    try:
        a = float(krippendorff.alpha(reliability_data=m, **kw))
    except (ValueError, ZeroDivisionError):
        return None
    return a if math.isfinite(a) else None


def _cohen(x: np.ndarray, y: np.ndarray, weights: str | None, domain: Sequence[float]) -> float | None:
    from sklearn.metrics import cohen_kappa_score

    both = ~np.isnan(x) & ~np.isnan(y)
    if both.sum() < 2 or len(set(x[both]) | set(y[both])) < 2:
        return None
    codes = np.asarray(domain, dtype=float)  # values as the indices of the scale (0.5 is not a class label)
    k = float(cohen_kappa_score(np.searchsorted(codes, x[both]), np.searchsorted(codes, y[both]), weights=weights))
    return k if math.isfinite(k) else None


def fleiss_kappa(matrix: np.ndarray) -> float | None:
    """Fleiss' kappa over items with at least two ratings (categories as codes; rows raters, columns items).

    >>> m = np.array([[0, 1, 0, 1], [0, 1, 0, 1], [0, 1, 1, np.nan]], dtype=float)
    >>> round(fleiss_kappa(m), 3)
    0.664
    """
    cats = np.unique(matrix[~np.isnan(matrix)])
    per_item = []
    all_counts = np.zeros(len(cats))
    for col in matrix.T:
        vals = col[~np.isnan(col)]
        if vals.size < 2:
            continue
        counts = np.array([np.sum(vals == c) for c in cats], dtype=float)
        n = vals.size
        per_item.append((np.sum(counts * (counts - 1)) / (n * (n - 1))))
        all_counts += counts
    if not per_item or all_counts.sum() == 0:
        return None
    p = all_counts / all_counts.sum()
    pe = float(np.sum(p * p))
    if pe >= 1.0:
        return None
    return float((np.mean(per_item) - pe) / (1 - pe))


def _boot(stat: Any, n_cols: int, n_boot: int, seed: int) -> list[float] | None:
    """Percentile 95% CI of ``stat(columns)`` over resampled items."""
    if n_cols < 2:
        return None
    rng = np.random.default_rng(seed)
    vals = []
    for _ in range(n_boot):
        v = stat(rng.integers(0, n_cols, n_cols))
        if v is not None and math.isfinite(v):
            vals.append(v)
    if len(vals) < max(10, n_boot // 5):
        return None
    lo, hi = np.quantile(vals, [0.025, 0.975])
    return [float(lo), float(hi)]


def _share_ci(flags: Sequence[float], n_boot: int, seed: int) -> list[float] | None:
    from editlens.meta.bootstrap import ci_or_none

    return ci_or_none(list(flags), n_boot=n_boot, seed=seed)


def criteria_of(task: Mapping[str, Any], preset: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``[{name, level, domain, value(answer) -> number or None}]`` of a task."""
    if task["task"] == "pairwise":
        codes = {o: float(k) for k, o in enumerate(PAIR_OUTCOMES)}
        wcodes = {"A": 0.0, "B": 1.0, "none": 2.0}
        return [{"name": "outcome", "level": "nominal", "domain": sorted(codes.values()), "labels": list(PAIR_OUTCOMES),
                 "value": lambda a: codes.get(a.get("choice"))},
                {"name": "winner", "level": "nominal", "domain": sorted(wcodes.values()), "labels": ["A", "B", "none"],
                 "value": lambda a: wcodes.get(WINNER.get(a.get("choice"), ""))}]
    out = []
    for c in preset["criteria"]:
        out.append({"name": c["name"], "level": preset.get("level", "interval"),
                    "domain": sorted(float(s["value"]) for s in c["scale"]), "labels": None,
                    "value": (lambda n: lambda a: (a.get("scores") or {}).get(n))(c["name"])})
    if preset["overall"]["rule"] != "single":
        out.append({"name": preset["overall"]["name"], "level": "interval", "domain": None, "labels": None,
                    "value": lambda a: overall(preset, a.get("scores") or {})})
    return out


def agreement(folder: str | Path, n_boot: int = 500, seed: int = 0, gold_at: float = 0.7, repeat_at: float = 0.7,
              kappa_at: float | None = None) -> dict[str, Any]:
    """The agreement report of an annotation folder (see the module docstring)."""
    from editlens.annotate.task import Task

    t = Task(folder)
    try:
        votes = t.store.votes()
        crits = criteria_of(t.settings, t.preset)
        annotators = sorted({v["annotator"] for v in votes})
        items = sorted({v["item"] for v in votes if v["kind"] == "item"})
        first: dict[tuple[str, str], dict[str, Any]] = {}
        by_pos: dict[tuple[str, int], dict[str, Any]] = {}
        for v in votes:
            by_pos[(v["annotator"], v["position"])] = v
            if v["kind"] == "item":
                first.setdefault((v["annotator"], v["item"]), v)
        assign = {(r["annotator"], r["position"]): r for r in t.store.assignments()}
        gold = t.gold
        settings = t.settings
    finally:
        t.close()
    ai = {a: k for k, a in enumerate(annotators)}
    ii = {it: k for k, it in enumerate(items)}
    out_crit: dict[str, Any] = {}
    weights = {"nominal": None, "ordinal": "linear", "interval": "quadratic"}
    pair_kappas: dict[str, dict[str, list[float]]] = {a: {} for a in annotators}
    mats: dict[str, np.ndarray] = {}
    for c in crits:
        m = np.full((len(annotators), len(items)), np.nan)
        mats[c["name"]] = m
        for (a, it), v in first.items():
            x = c["value"](v["answer"])
            if x is not None:
                m[ai[a], ii[it]] = float(x)
        alpha = _alpha(m, c["level"], c["domain"])
        ci = _boot(lambda cols, m=m, c=c: _alpha(m[:, cols], c["level"], c["domain"]), m.shape[1], n_boot, seed) \
            if alpha is not None else None
        w = weights[c["level"]] if c["domain"] is not None else None
        cohen: dict[str, float | None] = {}
        for x in range(len(annotators)):
            for y in range(x + 1, len(annotators)):
                k = _cohen(m[x], m[y], w, c["domain"]) if c["domain"] is not None else None
                cohen[f"{annotators[x]}|{annotators[y]}"] = k
                if k is not None and c is crits[0]:
                    pair_kappas[annotators[x]].setdefault("k", []).append(k)
                    pair_kappas[annotators[y]].setdefault("k", []).append(k)
        known = [k for k in cohen.values() if k is not None]
        fk = fleiss_kappa(m) if c["level"] == "nominal" or c["domain"] is not None else None
        fk_ci = _boot(lambda cols, m=m: fleiss_kappa(m[:, cols]), m.shape[1], n_boot, seed) if fk is not None else None
        rated = int(np.sum(np.sum(~np.isnan(m), axis=0) >= 2))
        out_crit[c["name"]] = {
            "level": c["level"], "items_rated_twice_or_more": rated, "ratings": int(np.sum(~np.isnan(m))),
            "krippendorff_alpha": alpha, "alpha_ci95": ci,
            "cohen_kappa_mean": float(np.mean(known)) if known else None, "cohen_kappa_pairs": cohen,
            "cohen_weights": w, "fleiss_kappa": fk, "fleiss_ci95": fk_ci}
    # checks per annotator: repeats (answered as the first time) and gold (answered as known)
    head = crits[:1] if settings["task"] == "pairwise" else [c for c in crits if c["domain"] is not None]
    per: dict[str, Any] = {}
    for a in annotators:
        rep_flags: list[float] = []
        gold_flags: list[float] = []
        for (who, pos), v in by_pos.items():
            if who != a:
                continue
            row = assign.get((who, pos)) or {}
            if v["kind"] == "repeat" and row.get("repeat_of") is not None:
                orig = by_pos.get((a, row["repeat_of"]))
                if orig is not None:
                    rep_flags.append(float(all(c["value"](v["answer"]) == c["value"](orig["answer"]) for c in head)))
            elif v["kind"] == "gold" and v["item"] in gold:
                g = gold[v["item"]]
                gold_flags.append(float(all(c["value"](v["answer"]) == c["value"](g) for c in head)))
        ks = pair_kappas[a].get("k", [])
        m0 = mats[crits[0]["name"]]
        others = m0[[k for k in range(len(annotators)) if k != ai[a]]]
        entry: dict[str, Any] = {
            # the first criterion's alpha without this annotator: above the whole group's when they lower it
            "alpha_without": _alpha(others, crits[0]["level"], crits[0]["domain"]) if len(others) >= 2 else None,
            "votes": sum(1 for (who, _) in by_pos if who == a),
            "items": sum(1 for (who, _) in first if who == a),
            "cohen_kappa_with_others": float(np.mean(ks)) if ks else None,
            "self_consistency": float(np.mean(rep_flags)) if rep_flags else None, "repeats": len(rep_flags),
            "self_consistency_ci95": _share_ci(rep_flags, n_boot, seed),
            "gold_accuracy": float(np.mean(gold_flags)) if gold_flags else None, "gold": len(gold_flags),
            "gold_accuracy_ci95": _share_ci(gold_flags, n_boot, seed)}
        why = []
        if entry["gold_accuracy"] is not None and entry["gold_accuracy"] < gold_at:
            why.append(f"gold accuracy {entry['gold_accuracy']:.2f} < {gold_at}")
        if entry["self_consistency"] is not None and entry["self_consistency"] < repeat_at:
            why.append(f"self-consistency {entry['self_consistency']:.2f} < {repeat_at}")
        if kappa_at is not None and entry["cohen_kappa_with_others"] is not None and \
                entry["cohen_kappa_with_others"] < kappa_at:
            why.append(f"Cohen's kappa with the others {entry['cohen_kappa_with_others']:.2f} < {kappa_at}")
        entry["flagged"] = why
        per[a] = entry
    return {"task": settings["task"], "preset": settings.get("preset"), "annotators": len(annotators),
            "items": len(items), "votes": len(votes), "criteria": out_crit, "per_annotator": per,
            "flagged": sorted(a for a, e in per.items() if e["flagged"]),
            "thresholds": {"gold_accuracy": gold_at, "self_consistency": repeat_at, "cohen_kappa": kappa_at},
            "bootstrap": {"n": n_boot, "seed": seed, "over": "items"}}


def stats_lines(rep: Mapping[str, Any]) -> list[str]:
    """How the agreement report reads on a terminal."""
    f = lambda x: "undefined" if x is None else f"{x:.3f}"  # noqa: E731
    ci = lambda c: "" if not c else f" [{c[0]:.3f}, {c[1]:.3f}]"  # noqa: E731
    from editlens.core.evidence import figure

    lines = [f"{rep['task']} task: {rep['votes']} votes by {rep['annotators']} annotators on {rep['items']} items"]
    for name, c in rep["criteria"].items():
        alpha = figure(c["krippendorff_alpha"], c["items_rated_twice_or_more"], "no item rated by two annotators",
                       fmt="{:.3f}")
        lines.append(f"  {name:<8} Krippendorff's alpha ({c['level']}) {alpha}{ci(c['alpha_ci95'])}; "
                     f"Cohen's kappa (mean of pairs) {f(c['cohen_kappa_mean'])}; Fleiss' kappa {f(c['fleiss_kappa'])}"
                     f"{ci(c['fleiss_ci95'])}; {c['items_rated_twice_or_more']} items rated by two or more")
    for a, e in rep["per_annotator"].items():
        lines.append(f"  {a:<14} {e['votes']:>4} votes; kappa with others {f(e['cohen_kappa_with_others'])}; "
                     f"alpha without them {f(e['alpha_without'])}; "
                     f"self-consistency {f(e['self_consistency'])}{ci(e['self_consistency_ci95'])} ({e['repeats']} repeats); "
                     f"gold {f(e['gold_accuracy'])}{ci(e['gold_accuracy_ci95'])} ({e['gold']} items)"
                     + (f"  FLAGGED: {'; '.join(e['flagged'])}" if e["flagged"] else ""))
    return lines

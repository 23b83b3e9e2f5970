"""Run-to-run drift: what changed between two runs of the same edits, and why.

:func:`diff_runs` compares the current results of two run directories
evaluator by evaluator (per-item score changes, rank correlation, editors
whose rank changed, items whose verdict flipped) and their run manifests
(model revisions and weight hashes, prompt templates, backend URL and served
model, dtype, editlens and library versions), naming each difference.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np

#: manifest keys that differ between any two runs (times, counts, history): not differences of setup
VOLATILE = {"started", "finished", "counts", "previous_runs", "interrupted", "created", "seconds"}
#: relative tolerance under which two scores are the same (float noise is not drift)
TOLERANCE = 1e-9


def flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts/lists as ``{"a.b.0.c": value}``; the run manifest's evaluator
    list is keyed by evaluator name (``evaluators.NAME.…``)."""
    out: dict[str, Any] = {}
    if isinstance(obj, Mapping):
        for k, v in obj.items():
            if str(k) in VOLATILE:
                continue
            if prefix == "" and k == "evaluators" and isinstance(v, list):
                for e in v:
                    name = e.get("name", "?") if isinstance(e, Mapping) else "?"
                    out.update(flatten(e, f"evaluators.{name}."))
                continue
            out.update(flatten(v, f"{prefix}{k}."))
    elif isinstance(obj, list) and obj and all(isinstance(v, Mapping) and "id" in v for v in obj):
        for v in obj:  # lists of named entries (a /v1/models answer): keyed by id, order does not matter
            out.update(flatten(v, f"{prefix}{v['id']}."))
    elif isinstance(obj, list) and any(isinstance(v, (Mapping, list)) for v in obj):
        for i, v in enumerate(obj):
            out.update(flatten(v, f"{prefix}{i}."))
    else:
        out[prefix.rstrip(".")] = obj
    return out


_KINDS = [  # (pattern on the dotted key, what it is); the first match names the difference
    (r"^evaluators\.([^.]+)\..*templates\.([^.]+)(?:\.|$)", "template {1} of {0}"),
    (r"^evaluators\.([^.]+)\..*(revision|weights|_sha256|checkpoint|twoframe_json)", "model revision or weights of {0}"),
    (r"^evaluators\.([^.]+)\..*\.url$", "backend URL of {0}"),
    (r"^evaluators\.([^.]+)\..*(served_model|models_answer|served)", "served model of {0}"),
    (r"^evaluators\.([^.]+)\..*backend\.model$", "served model of {0}"),
    (r"^evaluators\.([^.]+)\..*dtype$", "dtype of {0}"),
    (r"^evaluators\.([^.]+)\..*device$", "device of {0}"),
    (r"^evaluators\.([^.]+)\.config_hash$", "settings of {0}"),
    (r"^evaluators\.([^.]+)\.", "settings of {0}"),
    (r"^environment\.editlens$", "editlens version"),
    (r"^environment\.git_commit$", "editlens commit"),
    (r"^environment\.libraries\.([^.]+)$", "{0} version"),
    (r"^environment\.", "environment"),
    (r"^calibration\.", "calibration"),
    (r"^device$", "device"),
    (r"^command", "command line"),
    (r"^inputs\.", "inputs"),
]


def what(key: str) -> str:
    """The kind of a manifest difference, e.g. ``template viescore_sc of viescore``.

    >>> what("evaluators.viescore.templates.viescore_sc.sha256")
    'template viescore_sc of viescore'
    >>> what("environment.editlens")
    'editlens version'
    """
    for pattern, label in _KINDS:
        m = re.search(pattern, key)
        if m:
            return label.format(*m.groups())
    return "other"


def manifest_differences(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every key whose value differs (or exists in one manifest only), with its kind."""
    fa, fb = flatten(a), flatten(b)
    out = []
    for k in sorted(set(fa) | set(fb)):
        va, vb = fa.get(k, "(absent)"), fb.get(k, "(absent)")
        if va != vb:
            out.append({"key": k, "what": what(k), "a": va, "b": vb})
    return out


def _same(x: float, y: float) -> bool:
    return abs(x - y) <= TOLERANCE * max(1.0, abs(x), abs(y))


def _finite(v: Any) -> float | None:
    return float(v) if v is not None and math.isfinite(v) else None


def default_threshold(evaluator: str) -> tuple[float | None, bool | None]:
    """(verdict threshold, higher is better) of a registered evaluator: the middle of its
    declared range when that is finite (``None`` when unbounded or unknown)."""
    from editlens.errors import UnknownMetricError
    from editlens.metrics.registry import get_spec

    try:
        spec = get_spec(evaluator)
    except UnknownMetricError:
        return None, None
    lo, hi = spec.value_range
    mid = (lo + hi) / 2 if math.isfinite(lo) and math.isfinite(hi) and hi > lo else None
    return mid, spec.higher_is_better


def _verdict(row: Mapping[str, Any] | None, threshold: float | None, hib: bool | None) -> str | None:
    if row is None:
        return None
    if row["status"] != "scored":
        return row["status"]
    if threshold is None:
        return "scored"
    good = row["value"] >= threshold if hib is not False else row["value"] <= threshold
    return "pass" if good else "fail"


def _ranks(means: Mapping[str, float], hib: bool | None) -> dict[str, int]:
    order = sorted(means, key=lambda m: (-means[m] if hib is not False else means[m], m))
    return {m: i + 1 for i, m in enumerate(order)}


def compare_evaluator(rows_a: Iterable[Mapping[str, Any]], rows_b: Iterable[Mapping[str, Any]], evaluator: str,
                      threshold: float | None = None, higher_is_better: bool | None = None) -> dict[str, Any]:
    """Item-level comparison of one evaluator's rows in two runs."""
    from scipy import stats

    a = {r["sample_id"]: r for r in rows_a}
    b = {r["sample_id"]: r for r in rows_b}
    common = sorted(set(a) & set(b))
    both = [i for i in common if a[i]["status"] == "scored" and b[i]["status"] == "scored"]
    va = np.array([a[i]["value"] for i in both], dtype=float)
    vb = np.array([b[i]["value"] for i in both], dtype=float)
    changed = [{"id": i, "model": a[i]["model"] or b[i]["model"], "a": a[i]["value"], "b": b[i]["value"],
                "change": b[i]["value"] - a[i]["value"]} for i in both if not _same(a[i]["value"], b[i]["value"])]
    changed.sort(key=lambda r: (-abs(r["change"]), r["id"]))
    flipped = []
    for i in common:
        x, y = _verdict(a[i], threshold, higher_is_better), _verdict(b[i], threshold, higher_is_better)
        if x != y:
            flipped.append({"id": i, "model": a[i]["model"] or b[i]["model"], "verdict_a": x, "verdict_b": y,
                            "a": a[i]["value"], "b": b[i]["value"]})

    def corr(fn: Any) -> float | None:
        if len(both) < 2 or np.ptp(va) == 0 or np.ptp(vb) == 0:
            return None  # undefined, never 0
        return _finite(float(fn(va, vb)[0]))

    by_a: dict[str, list[float]] = {}
    by_b: dict[str, list[float]] = {}
    for i, x, y in zip(both, va, vb):
        m = a[i]["model"] or "(none)"
        by_a.setdefault(m, []).append(float(x))
        by_b.setdefault(m, []).append(float(y))
    means_a = {m: float(np.mean(v)) for m, v in by_a.items()}
    means_b = {m: float(np.mean(v)) for m, v in by_b.items()}
    ra, rb = _ranks(means_a, higher_is_better), _ranks(means_b, higher_is_better)
    editors = [{"model": m, "rank_a": ra[m], "rank_b": rb[m], "mean_a": means_a[m], "mean_b": means_b[m]}
               for m in sorted(ra, key=lambda m: ra[m])]
    d = vb - va
    return {
        "n_a": len(a), "n_b": len(b), "n_common": len(common), "n_scored_both": len(both),
        "only_a": len(set(a) - set(b)), "only_b": len(set(b) - set(a)),
        "n_changed": len(changed),
        "mean_change": _finite(float(d.mean())) if d.size else None,
        "mean_abs_change": _finite(float(np.abs(d).mean())) if d.size else None,
        "max_abs_change": _finite(float(np.abs(d).max())) if d.size else None,
        "spearman": corr(stats.spearmanr), "kendall": corr(stats.kendalltau),
        "threshold": threshold, "higher_is_better": higher_is_better,
        "n_flipped": len(flipped),
        "editors": editors,
        "editors_rank_changed": [e for e in editors if e["rank_a"] != e["rank_b"]],
        "changed": changed,
        "flipped": flipped,
    }


def _named(diffs: list[dict[str, Any]]) -> list[str]:
    """The kinds of difference, most specific first: an evaluator's changed settings hash is
    named only when nothing more specific (a template, a model) explains it."""
    kinds = [d["what"] for d in diffs if d["what"] != "command line"]
    explained = {k.rsplit(" of ", 1)[1] for k in kinds if " of " in k and not k.startswith("settings of ")}
    return list(dict.fromkeys(k for k in sorted(kinds, key=lambda k: k.startswith("settings of "))
                              if not (k.startswith("settings of ") and k[len("settings of "):] in explained)))


def diff_runs(run_a: str | Path, run_b: str | Path, thresholds: Mapping[str, float] | None = None) -> dict[str, Any]:
    """Compare two run directories (each evaluator at its latest settings in each)."""
    from editlens.errors import InputError
    from editlens.runner.store import ResultsStore

    docs = []
    for run in (run_a, run_b):
        p = Path(run)
        if not (p / "results.sqlite").is_file():
            raise InputError(f"{p}: not a run directory (no results.sqlite); create one with `editlens run`")
        store = ResultsStore(p)
        try:
            docs.append((store.get_meta("manifest") or {}, store.rows(store.current_configs())))
        finally:
            store.close()
    (ma, rows_a), (mb, rows_b) = docs
    evs_a = {r["evaluator"] for r in rows_a}
    evs_b = {r["evaluator"] for r in rows_b}
    thresholds = dict(thresholds or {})
    unknown = sorted(set(thresholds) - evs_a - evs_b)
    if unknown:
        raise InputError(f"--threshold names evaluator(s) in neither run: {', '.join(unknown)} "
                         f"(the runs have {', '.join(sorted(evs_a | evs_b))})")
    evaluators = {}
    for ev in sorted(evs_a & evs_b):
        mid, hib = default_threshold(ev)
        evaluators[ev] = compare_evaluator([r for r in rows_a if r["evaluator"] == ev],
                                           [r for r in rows_b if r["evaluator"] == ev], ev,
                                           thresholds.get(ev, mid), hib)
    diffs = manifest_differences(ma, mb)
    return {
        "a": str(run_a), "b": str(run_b),
        "what_differs": _named(diffs),
        "manifest_differences": diffs,
        "evaluators": evaluators,
        "only_in_a": sorted(evs_a - evs_b), "only_in_b": sorted(evs_b - evs_a),
    }

"""Calibration: what a score means as the probability that people rate the
edit good (point-wise benchmarks) or prefer it (pair-wise).

A *map* is monotone in the score: isotonic regression (default) or Platt
scaling (a logistic curve), fitted on a benchmark with human labels and
saved as a small JSON file. ``editlens run/score --calibration FILE`` adds
``calibrated`` (the probability) to each scored result's details.

Targets may be soft: with several raters, the share of raters who rated the
edit good is the probability to match. Quality of a map is its expected
calibration error (ECE: over equal-width probability bins, the
count-weighted mean of |mean predicted - mean observed|), reported

* *before*: the raw score read as a probability (scaled to [0, 1] by the
  evaluator's declared range, or the observed one when unbounded; for pairs,
  the raw verdict taken as certain);
* *after, out of fold*: each item predicted by a map fitted without it
  (k-fold cross-validation, folds grouped by source so the edits of one
  source image never straddle training and test) - the honest figure;
* *in sample*: the final map on its own training data (optimistic).

>>> m = fit_map([0.1, 0.2, 0.8, 0.9], [0, 0, 1, 1], "isotonic")
>>> [round(float(v), 3) for v in m.predict([0.0, 0.5, 1.0])]
[0.0, 0.5, 1.0]
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from editlens.errors import InputError

#: scores or targets as a list or a numpy array (every function here reads them with np.asarray)
Values = Sequence[float] | np.ndarray

SCHEMA = "editlens.calibration/1"
METHODS = ("isotonic", "platt")
BINS = 10


@dataclass
class CalibrationMap:
    """A fitted monotone map from an evaluator's score to a probability."""

    evaluator: str
    method: str
    #: isotonic: breakpoints (scores) and probabilities, linearly interpolated and clipped at the ends
    x: list[float] = field(default_factory=list)
    y: list[float] = field(default_factory=list)
    #: platt: p = 1 / (1 + exp(-(a * score + b)))
    a: float | None = None
    b: float | None = None
    benchmark: str = ""
    target: str = ""
    kind: str = "pointwise"  # or "pairwise": the input is score(A) - score(B)
    n: int = 0
    domain: list[float] = field(default_factory=list)
    quality: dict[str, Any] = field(default_factory=dict)

    def predict(self, scores: Values) -> np.ndarray:
        s = np.asarray(scores, dtype=float)
        if self.method == "isotonic":
            return np.clip(np.interp(s, self.x, self.y), 0.0, 1.0)
        assert self.a is not None and self.b is not None
        return 1.0 / (1.0 + np.exp(-(self.a * s + self.b)))

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"evaluator": self.evaluator, "benchmark": self.benchmark, "method": self.method,
                             "kind": self.kind, "target": self.target, "n": self.n, "domain": self.domain}
        if self.method == "isotonic":
            d.update(x=self.x, y=self.y)
        else:
            d.update(a=self.a, b=self.b)
        d["quality"] = self.quality
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], where: str = "calibration") -> CalibrationMap:
        try:
            method = str(d["method"])
            if method not in METHODS:
                raise InputError(f"{where}: method {method!r} is not one of {', '.join(METHODS)}")
            m = cls(evaluator=str(d["evaluator"]), method=method, benchmark=str(d.get("benchmark", "")),
                    target=str(d.get("target", "")), kind=str(d.get("kind", "pointwise")), n=int(d.get("n", 0)),
                    domain=list(d.get("domain") or []), quality=dict(d.get("quality") or {}))
            if method == "isotonic":
                m.x, m.y = [float(v) for v in d["x"]], [float(v) for v in d["y"]]
                if not m.x or len(m.x) != len(m.y) or any(b < a for a, b in zip(m.x, m.x[1:])):
                    raise InputError(f"{where}: x must be non-empty, sorted and as long as y")
                if any(not 0.0 <= v <= 1.0 for v in m.y):
                    raise InputError(f"{where}: y holds probabilities, each in [0, 1]")
            else:
                m.a, m.b = float(d["a"]), float(d["b"])
        except KeyError as exc:
            raise InputError(f"{where}: missing field {exc.args[0]!r}") from None
        except (TypeError, ValueError) as exc:
            if isinstance(exc, InputError):
                raise
            raise InputError(f"{where}: {exc}") from None
        return m


def fit_map(scores: Values, targets: Values, method: str = "isotonic",
            increasing: bool | None = True, evaluator: str = "") -> CalibrationMap:
    """Fit a map from ``scores`` to ``targets`` (probabilities in [0, 1], soft or 0/1).

    ``increasing``: the direction of the map (``True`` when a higher score
    means better, ``None`` to let isotonic regression choose; Platt finds its
    own sign).
    """
    x = np.asarray(scores, dtype=float)
    t = np.asarray(targets, dtype=float)
    if x.shape != t.shape or x.size < 2:
        raise InputError(f"calibration needs at least 2 (score, label) pairs of equal length, got {x.size}")
    if not (np.isfinite(x).all() and np.isfinite(t).all()) or t.min() < 0 or t.max() > 1:
        raise InputError("calibration: scores must be finite and labels probabilities in [0, 1]")
    if method == "isotonic":
        from sklearn.isotonic import IsotonicRegression

        iso = IsotonicRegression(y_min=0.0, y_max=1.0, out_of_bounds="clip",
                                 increasing="auto" if increasing is None else bool(increasing))
        iso.fit(x, t)
        m = CalibrationMap(evaluator, "isotonic", x=[float(v) for v in iso.X_thresholds_],
                           y=[float(v) for v in iso.y_thresholds_])
    elif method == "platt":
        from sklearn.linear_model import LogisticRegression

        # soft labels as weights: each item counts as a positive with weight t and a negative with 1 - t
        xx = np.concatenate([x, x])[:, None]
        yy = np.concatenate([np.ones_like(t), np.zeros_like(t)])
        ww = np.concatenate([t, 1.0 - t])
        if ww[yy == 1].sum() == 0 or ww[yy == 0].sum() == 0:
            raise InputError("calibration (platt): every label is the same; there is nothing to fit")
        lr = LogisticRegression(C=1e6, max_iter=1000).fit(xx, yy, sample_weight=ww)
        m = CalibrationMap(evaluator, "platt", a=float(lr.coef_[0, 0]), b=float(lr.intercept_[0]))
    else:
        raise InputError(f"calibration method must be one of {', '.join(METHODS)}, got {method!r}")
    m.n, m.domain = int(x.size), [float(x.min()), float(x.max())]
    return m


def reliability(pred: Values, target: Values, bins: int = BINS) -> list[dict[str, Any]]:
    """Equal-width bins of predicted probability: ``{"lo", "hi", "n", "mean_pred", "mean_target"}`` (empty bins left out).

    >>> reliability([0.05, 0.15, 0.95], [0, 1, 1], bins=2)[0]["n"]
    2
    """
    p = np.clip(np.asarray(pred, dtype=float), 0.0, 1.0)
    t = np.asarray(target, dtype=float)
    idx = np.minimum((p * bins).astype(int), bins - 1)
    out = []
    for b in range(bins):
        sel = idx == b
        if sel.any():
            out.append({"lo": b / bins, "hi": (b + 1) / bins, "n": int(sel.sum()),
                        "mean_pred": float(p[sel].mean()), "mean_target": float(t[sel].mean())})
    return out


def ece(pred: Values, target: Values, bins: int = BINS) -> float:
    """Expected calibration error over equal-width bins.

    >>> ece([0.2, 0.2, 0.8, 0.8], [0, 1, 1, 1], bins=10)  # bins: |0.2-0.5|, |0.8-1.0|, each half the items
    0.25
    """
    n = len(pred)
    if n == 0:
        return float("nan")
    return float(round(sum(r["n"] / n * abs(r["mean_pred"] - r["mean_target"]) for r in reliability(pred, target, bins)),
                       12))


def brier(pred: Values, target: Values) -> float:
    p, t = np.asarray(pred, dtype=float), np.asarray(target, dtype=float)
    return float(np.mean((p - t) ** 2)) if p.size else float("nan")


def group_folds(groups: Sequence[Any], folds: int, seed: int = 0) -> np.ndarray:
    """Fold number of each item; all items of a group share a fold (groups shuffled, seeded)."""
    uniq = sorted({str(g) for g in groups})
    if len(uniq) < folds:
        raise InputError(f"cross-validation with {folds} folds needs at least {folds} groups (sources), got {len(uniq)}")
    order = np.random.default_rng(seed).permutation(len(uniq))
    fold_of = {uniq[i]: int(k % folds) for k, i in enumerate(order)}
    return np.array([fold_of[str(g)] for g in groups], dtype=int)


def out_of_fold(scores: Values, targets: Values, groups: Sequence[Any], method: str = "isotonic",
                increasing: bool | None = True, folds: int = 5, seed: int = 0) -> np.ndarray:
    """Each item's probability from a map fitted on the other folds."""
    x, t = np.asarray(scores, dtype=float), np.asarray(targets, dtype=float)
    fold = group_folds(groups, folds, seed)
    out = np.empty_like(x)
    for k in range(folds):
        test = fold == k
        out[test] = fit_map(x[~test], t[~test], method, increasing).predict(x[test])
    return out


def raw_probability(scores: Values, scale: tuple[float, float] | None, higher_is_better: bool | None,
                    kind: str = "pointwise") -> np.ndarray:
    """The score read as a probability before calibration (see module docstring)."""
    s = np.asarray(scores, dtype=float)
    if kind == "pairwise":
        return np.where(s > 0, 1.0, np.where(s < 0, 0.0, 0.5))
    lo, hi = scale if scale else (float(s.min()), float(s.max()))
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        lo, hi = float(s.min()), float(s.max())
    p = (s - lo) / (hi - lo) if hi > lo else np.full_like(s, 0.5)
    return np.clip(p if higher_is_better is not False else 1.0 - p, 0.0, 1.0)


def _ece_ci(pred: np.ndarray, target: np.ndarray, groups: Sequence[Any], bins: int, n_boot: int,
            seed: int) -> list[float] | None:
    """Bootstrap 95% CI of the ECE, resampling groups (sources) with their items."""
    if n_boot <= 0:
        return None
    by: dict[str, list[int]] = {}
    for i, g in enumerate(groups):
        by.setdefault(str(g), []).append(i)
    members = list(by.values())
    if len(members) < 2:
        return None
    rng = np.random.default_rng(seed)
    vals = []
    for _ in range(n_boot):
        idx = np.concatenate([members[j] for j in rng.integers(0, len(members), len(members))])
        vals.append(ece(pred[idx], target[idx], bins))
    return [float(np.quantile(vals, 0.025)), float(np.quantile(vals, 0.975))]


def calibrate(scores: Values, targets: Values, groups: Sequence[Any] | None = None, *,
              evaluator: str, benchmark: str = "", target: str = "", method: str = "isotonic",
              higher_is_better: bool | None = True, scale: tuple[float, float] | None = None,
              kind: str = "pointwise", folds: int = 5, seed: int = 0, bins: int = BINS,
              n_boot: int = 200) -> CalibrationMap:
    """Fit the final map on every item and measure it honestly: ECE and Brier
    before, after out of fold (with a CI over sources) and in sample, and the
    reliability bins of each (what the report's diagram draws)."""
    x, t = np.asarray(scores, dtype=float), np.asarray(targets, dtype=float)
    if t.size and np.ptp(t) == 0:  # one class: any map "fits" it, and the ECE says nothing
        raise InputError(f"{evaluator}: every one of the {t.size} targets is {t[0]:g} (a single class); calibration "
                         "needs edits people rated good and edits they did not (check --good-at)")
    if not np.isfinite(x).all() or not np.isfinite(t).all():
        raise InputError(f"{evaluator}: scores and targets must be finite numbers")
    groups = list(range(len(x))) if groups is None else list(groups)
    increasing = True if kind == "pairwise" else higher_is_better
    final = fit_map(x, t, method, increasing, evaluator)
    oof = out_of_fold(x, t, groups, method, increasing, folds, seed)
    raw = raw_probability(x, scale, higher_is_better, kind)
    fitted = final.predict(x)
    final.benchmark, final.target, final.kind = benchmark, target, kind
    final.quality = {
        "ece_before": ece(raw, t, bins),
        "ece_after": ece(oof, t, bins),
        "ece_after_ci95": _ece_ci(oof, t, groups, bins, n_boot, seed),
        "ece_in_sample": ece(fitted, t, bins),
        "brier_before": brier(raw, t),
        "brier_after": brier(oof, t),
        "base_rate": float(t.mean()),
        "folds": folds, "grouped_by": "source" if len(set(map(str, groups))) < len(groups) else "item",
        "seed": seed, "bins": bins,
        "before_reads": ("the raw verdict (A better, B better, tie) as certain" if kind == "pairwise" else
                         f"the score scaled to [0, 1] by {'its range ' + str(list(scale)) if scale else 'the observed range'}"
                         + (" (lower is better: reversed)" if higher_is_better is False else "")),
        "reliability": {"before": reliability(raw, t, bins), "after": reliability(oof, t, bins)},
    }
    return final


# ------------------------------------------------------------------------------------------ files

@dataclass
class CalibrationSet:
    """The maps of a calibration file, one per evaluator."""

    maps: dict[str, CalibrationMap]
    path: str | None = None
    sha256: str | None = None

    def describe(self) -> dict[str, Any]:
        """What a run manifest records of it."""
        return {"file": self.path, "sha256": self.sha256,
                "maps": {ev: {"benchmark": m.benchmark, "method": m.method, "target": m.target, "n": m.n,
                              "ece_after": m.quality.get("ece_after")} for ev, m in self.maps.items()}}

    def apply(self, score: Any) -> Any:
        """``score`` with ``details["calibrated"]`` when it is scored and its evaluator has a
        point-wise map (a pair-wise map reads score differences, not single scores)."""
        from editlens.core.types import Score

        m = self.maps.get(score.metric)
        if m is None or m.kind != "pointwise" or score.status != "scored" or score.value is None:
            return score
        p = float(m.predict([score.value])[0])
        details = {**(score.details or {}), "calibrated": p}
        return Score(score.metric, score.value, score.status, score.reason, details)


def save_calibration(maps: Iterable[CalibrationMap], path: str | Path, merge: bool = True) -> tuple[Path, list[str]]:
    """Write maps to ``path`` (JSON). With ``merge``, maps of other evaluators
    already in the file are kept. Returns the path and the evaluators kept from before."""
    p = Path(path)
    kept: dict[str, CalibrationMap] = {}
    if merge and p.is_file():
        kept = dict(load_calibration(p).maps)
    new = {m.evaluator: m for m in maps}
    for ev in new:
        kept.pop(ev, None)
    doc = {"schema": SCHEMA, "maps": [m.to_dict() for m in [*kept.values(), *new.values()]]}
    from editlens.core.io import atomic_write

    atomic_write(p, lambda fh: json.dump(doc, fh, indent=1, allow_nan=False))
    return p, sorted(kept)


def load_calibration(path: str | Path | CalibrationSet) -> CalibrationSet:
    """Read a calibration file; errors name the file and the problem."""
    if isinstance(path, CalibrationSet):
        return path
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{p}: calibration file not found (make one with `editlens calibrate ...`)")
    raw = p.read_bytes()
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        raise InputError(f"{p}: not JSON ({exc})") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or not isinstance(doc.get("maps"), list):
        raise InputError(f"{p}: not a calibration file (expected schema {SCHEMA!r} with a list of maps)")
    maps: dict[str, CalibrationMap] = {}
    for i, d in enumerate(doc["maps"], 1):
        if not isinstance(d, dict):
            raise InputError(f"{p}: map {i} is not an object")
        m = CalibrationMap.from_dict(d, f"{p}: map {i}")
        if m.evaluator in maps:
            raise InputError(f"{p}: two maps for evaluator {m.evaluator!r} (benchmarks {maps[m.evaluator].benchmark!r} "
                             f"and {m.benchmark!r}); keep one")
        maps[m.evaluator] = m
    return CalibrationSet(maps, str(p.resolve()), hashlib.sha256(raw).hexdigest())


# ------------------------------------------------------------------------------------------ benchmarks

@dataclass
class Labelled:
    """One evaluator's scores on a benchmark with the human probability each should match."""

    evaluator: str
    benchmark: str
    target: str
    ids: list[str]
    scores: list[float]
    targets: list[float]
    groups: list[str]
    higher_is_better: bool | None = True
    scale: tuple[float, float] | None = None
    kind: str = "pointwise"
    n_unscored: int = 0
    n_unlabelled: int = 0


def evaluator_direction(metric: str) -> tuple[bool | None, tuple[float, float] | None]:
    """Declared direction and (finite) range of a registered evaluator; (None, None) when unknown."""
    from editlens.errors import UnknownMetricError
    from editlens.metrics.registry import get_spec

    try:
        spec = get_spec(metric)
    except UnknownMetricError:
        return None, None
    lo, hi = spec.value_range
    return spec.higher_is_better, ((float(lo), float(hi)) if math.isfinite(lo) and math.isfinite(hi) and hi > lo else None)


def metric_names(metric: str | None) -> list[str | None]:
    if metric is None:
        return [None]
    names = [m.strip() for m in metric.split(",") if m.strip()]
    if not names:
        raise InputError("--metric needs at least one name")
    return list(dict.fromkeys(names))


def calibration_report(labelled: Sequence[Labelled], method: str = "isotonic", folds: int = 5, seed: int = 0,
                       bins: int = BINS, n_boot: int = 200) -> tuple[dict[str, Any], list[CalibrationMap]]:
    """Fit and measure a map per evaluator; the report dict (a meta-evaluation
    document, shown by ``--report``) and the maps to save."""
    maps = []
    for lab in labelled:
        m = calibrate(lab.scores, lab.targets, lab.groups, evaluator=lab.evaluator, benchmark=lab.benchmark,
                      target=lab.target, method=method, higher_is_better=lab.higher_is_better, scale=lab.scale,
                      kind=lab.kind, folds=folds, seed=seed, bins=bins, n_boot=n_boot)
        m.quality.update(n_unscored=lab.n_unscored, n_unlabelled=lab.n_unlabelled)
        maps.append(m)
    first = labelled[0]
    rep = {"benchmark": first.benchmark, "protocol": f"calibration-{method}", "method": method,
           "target": first.target, "folds": folds, "seed": seed,
           "calibration": {m.evaluator: {"n": m.n, **m.quality} for m in maps}}
    return rep, maps

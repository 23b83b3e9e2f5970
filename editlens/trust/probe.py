"""Sanity probes: does an evaluator score a real edit better than a control?

For each evaluator and control (see :mod:`editlens.trust.controls`) the
*pass rate* is the share of edits whose real edit scores strictly better
than the control, in the evaluator's declared direction
(``MetricSpec.higher_is_better``); ties are not passes. Edits where either
score is missing (skipped, unscored, failed) are left out of ``n``. A seeded
percentile bootstrap over the edits gives the 95% CI.

Each control's outcome gives at most one verdict:

* the control ties the real edit on at least half the edits: the evaluator
  *ignores* what the control changed ("ignores the instruction");
* the pass rate's CI lies below 1/2: it *prefers* the control ("rewards
  doing nothing");
* the pass rate is below ``min_pass``: it is *weak* against the control.

When every image control ties, the verdict is "ignores the images".
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from editlens.trust.controls import CONTROLS, DESCRIPTIONS, IMAGE_CONTROLS

SCHEMA = "editlens.probe/1"
#: relative tolerance under which two scores tie (float noise of batched computation is not a difference)
TIE_TOLERANCE = 1e-6
MIN_PASS = 0.75
PROBE_FILE = "probe.json"
CONTROLS_DIR = "probe"

#: the verdict of each control when the evaluator ignores it, prefers it, or barely beats it
VERDICTS: dict[str, dict[str, str]] = {
    "noop": {"ignores": "does not tell an edit from doing nothing", "prefers": "rewards doing nothing",
             "weak": "weak against doing nothing"},
    "blank": {"ignores": "ignores a blank result", "prefers": "rewards a blank image",
              "weak": "weak against a blank image"},
    "noise": {"ignores": "ignores image damage", "prefers": "rewards a noise-damaged edit",
              "weak": "weak against heavy noise"},
    "swapped": {"ignores": "ignores which image is the edit", "prefers": "prefers the edit undone",
                "weak": "weak against source and edit swapped"},
    "wrong_instruction": {"ignores": "ignores the instruction", "prefers": "prefers a wrong instruction",
                          "weak": "weak against a wrong instruction"},
    "unrelated": {"ignores": "ignores what the edited image shows", "prefers": "rewards an unrelated image",
                  "weak": "weak against an unrelated image"},
}
IGNORES_IMAGES = "ignores the images"


def outcome(real: float, control: float, higher_is_better: bool, tolerance: float = TIE_TOLERANCE) -> int:
    """+1 when the real edit is strictly better, 0 for a tie, -1 when the control is better.

    >>> outcome(0.8, 0.5, True), outcome(0.8, 0.5, False), outcome(1.0, 1.0 + 1e-9, True)
    (1, -1, 0)
    """
    if abs(real - control) <= tolerance * max(1.0, abs(real), abs(control)):
        return 0
    better = real > control if higher_is_better else real < control
    return 1 if better else -1


def bootstrap_rate(passes: Sequence[bool] | np.ndarray, n_boot: int = 1000, seed: int = 0,
                   level: float = 0.95) -> list[float] | None:
    """Percentile bootstrap CI of a pass rate (seeded); ``None`` when undefined (n < 2).

    >>> bootstrap_rate([True, True, True])
    [1.0, 1.0]
    >>> bootstrap_rate([True]) is None
    True
    """
    x = np.asarray(passes, dtype=np.float64)
    if x.size < 2:
        return None
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, x.size, size=(n_boot, x.size))].mean(axis=1)
    alpha = (1 - level) / 2
    return [float(np.quantile(means, alpha)), float(np.quantile(means, 1 - alpha))]


def pass_rate(pairs: Iterable[tuple[float, float]], higher_is_better: bool, *, n_boot: int = 1000, seed: int = 0,
              tolerance: float = TIE_TOLERANCE) -> dict[str, Any]:
    """``{"pass_rate", "ci", "n", "wins", "ties", "losses"}`` over ``(real, control)`` score pairs.

    >>> r = pass_rate([(0.9, 0.1), (0.5, 0.5), (0.2, 0.7), (0.6, 0.3)], True, n_boot=10)
    >>> r["pass_rate"], r["n"], r["wins"], r["ties"], r["losses"]
    (0.5, 4, 2, 1, 1)
    """
    out = np.array([outcome(a, b, higher_is_better, tolerance) for a, b in pairs], dtype=int)
    n = int(out.size)
    wins, ties = int((out == 1).sum()), int((out == 0).sum())
    return {"pass_rate": wins / n if n else None, "ci": bootstrap_rate(out == 1, n_boot, seed), "n": n,
            "wins": wins, "ties": ties, "losses": n - wins - ties}


def verdict_kind(stats: Mapping[str, Any], min_pass: float = MIN_PASS) -> str | None:
    """``"ignores"``, ``"prefers"``, ``"weak"`` or ``None`` (passes) for one control's statistics."""
    n = stats.get("n") or 0
    if not n:
        return None
    if stats["ties"] / n >= 0.5:
        return "ignores"
    if stats["ci"] is not None and stats["ci"][1] < 0.5:
        return "prefers"
    if stats["pass_rate"] < min_pass:
        return "weak"
    return None


def verdicts(controls: Mapping[str, Mapping[str, Any]], min_pass: float = MIN_PASS) -> list[str]:
    """The verdicts of one evaluator from its per-control statistics, then what could not be
    measured (empty: passes every probe, each control over enough edits)."""
    kinds = {c: verdict_kind(s, min_pass) for c, s in controls.items()}
    images = [c for c in IMAGE_CONTROLS if c in kinds and controls[c].get("n")]
    out = []
    if len(images) >= 2 and all(kinds[c] == "ignores" for c in images):
        out.append(IGNORES_IMAGES)
        kinds = {c: k for c, k in kinds.items() if c not in images}
    out += [VERDICTS[c][k] for c in CONTROLS if (k := kinds.get(c)) is not None]
    return out + evidence_verdicts(controls)


NO_PAIR = "no edit with both it and its control scored"


def evidence_verdicts(controls: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """What the probe could not judge: a control over no scored pair is *not measured*, one over
    fewer than :data:`~editlens.core.evidence.MIN_N` is *too few*; so "passes every probe" means measured.

    >>> evidence_verdicts({"noop": {"n": 0}, "blank": {"n": 0}})
    ['not measured (n = 0: no edit with both it and its control scored)']
    >>> evidence_verdicts({"noop": {"n": 3}, "blank": {"n": 40}})
    ['noop: too few (n = 3, fewer than 10)']
    """
    from editlens.core.evidence import shortfall

    if controls and all(not (s.get("n") or 0) for s in controls.values()):
        return [shortfall(0, NO_PAIR)]
    return [f"{c}: {w}" for c in CONTROLS if c in controls
            and (w := shortfall(controls[c].get("n") or 0, NO_PAIR)) is not None]


def summarize(real: Mapping[str, Mapping[str, float]], controls: Mapping[str, Mapping[tuple[str, str], float]],
              directions: Mapping[str, bool], control_names: Sequence[str] = CONTROLS, *, ids: Iterable[str] | None = None,
              n_boot: int = 1000, seed: int = 0, min_pass: float = MIN_PASS,
              tolerance: float = TIE_TOLERANCE) -> dict[str, Any]:
    """Per evaluator and control, the pass rate (with details) and the verdicts.

    ``real[evaluator][sample id]`` and ``controls[evaluator][(sample id,
    control)]`` hold the scored values only; ``ids`` limits the edits (one
    edit type). Returns ``{evaluator: {"controls": {control: stats},
    "verdicts": [...]}}`` where stats has ``pass_rate, ci, n, wins, ties, losses``.
    """
    keep = None if ids is None else set(ids)
    out: dict[str, Any] = {}
    for ev, hib in directions.items():
        per: dict[str, Any] = {}
        mine = real.get(ev, {})
        theirs = controls.get(ev, {})
        for c in control_names:
            pairs = [(mine[sid], v) for (sid, cname), v in sorted(theirs.items())
                     if cname == c and sid in mine and (keep is None or sid in keep)]
            per[c] = pass_rate(pairs, hib, n_boot=n_boot, seed=seed, tolerance=tolerance)
        out[ev] = {"controls": per, "verdicts": verdicts(per, min_pass)}
    return out


def public(result: Mapping[str, Any]) -> dict[str, Any]:
    """The published schema: ``{NAME: {"controls": {CONTROL: {"pass_rate", "ci", "n"}}, "verdicts"}}``."""
    return {ev: {"controls": {c: {k: s[k] for k in ("pass_rate", "ci", "n")} for c, s in r["controls"].items()},
                 "verdicts": list(r["verdicts"])} for ev, r in result.items()}


def _scored(rows: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for r in rows:
        if r["status"] == "scored" and r["value"] is not None and math.isfinite(r["value"]):
            out.setdefault(r["evaluator"], {})[r["sample_id"]] = float(r["value"])
    return out


def run_probe(samples: Sequence[Any], evaluators: Sequence[Any], out_dir: str | Path, *,
              controls: Sequence[str] = CONTROLS, seed: int = 0, n_boot: int = 1000, min_pass: float = MIN_PASS,
              tolerance: float = TIE_TOLERANCE, batch_size: int = 16, workers: int = 2, image_options: Any = None,
              progress: bool = True, command: list[str] | None = None, device: str = "cpu", dtype: str = "auto",
              extra_manifest: Mapping[str, Any] | None = None, wait: bool = False,
              say: Any = None) -> dict[str, Any]:
    """Score ``samples`` into ``out_dir`` (a normal run) and their controls into
    ``out_dir/probe`` (another), then write and return the probe document
    (``out_dir/probe.json``). Both runs resume: a rerun recomputes nothing.
    After Ctrl-C the document is only ``{"schema", "interrupted": True}``."""
    import json

    from editlens.core.io import atomic_write
    from editlens.data.edit_types import edit_type_of
    from editlens.data.manifest import write_manifest
    from editlens.errors import InputError, UnknownMetricError
    from editlens.metrics.registry import get_spec
    from editlens.runner.run import result_identity, run_evaluation
    from editlens.runner.store import config_hash
    from editlens.trust.controls import build_controls

    say = say or (lambda msg: None)
    out = Path(out_dir)
    cdir = out / CONTROLS_DIR
    types = {s.id: edit_type_of(s) for s in samples}  # a bad edit_type column fails before any scoring
    probed = [ev for ev in evaluators if not getattr(ev, "always_run", False)]
    directions: dict[str, bool] = {}
    notes: list[str] = []
    for ev in probed:
        try:
            directions[ev.name] = bool(get_spec(ev.name).higher_is_better)
        except UnknownMetricError:
            notes.append(f"{ev.name}: no registered direction (higher or lower is better); not probed")
    if not directions:
        raise InputError("no evaluator to probe: give --metrics or --judge with at least one scoring evaluator")

    say(f"scoring {len(samples)} edits -> {out}")
    common = {"batch_size": batch_size, "workers": workers, "progress": progress, "image_options": image_options,
              "command": command, "device": device, "dtype": dtype, "wait": wait}
    first = run_evaluation(samples, evaluators, out, extra_manifest=dict(extra_manifest or {}), **common)
    if first.interrupted:
        return {"schema": SCHEMA, "interrupted": True}
    built = build_controls(samples, cdir, controls, seed)
    cmanifest = write_manifest(built.samples, cdir / "controls.jsonl") if built.samples else None
    say(f"scoring {len(built.samples)} controls -> {cdir}")
    second = None
    if built.samples:
        second = run_evaluation(built.samples, evaluators, cdir, **common,
                                extra_manifest={"manifest": str(cmanifest.resolve()) if cmanifest else None,
                                                "probe_of": str(out.resolve()), "seed": seed})
        if second.interrupted:
            return {"schema": SCHEMA, "interrupted": True}

    hashes = {ev.name: config_hash(result_identity(ev.describe())) for ev in probed if ev.name in directions}
    ids = {s.id for s in samples}
    real_rows = _rows(out, hashes, ids)
    ctrl_rows = _rows(cdir, hashes, set(built.of)) if built.samples else []
    real = _scored(real_rows)
    ctrl: dict[str, dict[tuple[str, str], float]] = {}
    for ev, vals in _scored(ctrl_rows).items():
        ctrl[ev] = {built.of[cid]: v for cid, v in vals.items()}
    control_names = tuple(c for c in CONTROLS if c in controls)
    kw: dict[str, Any] = {"n_boot": n_boot, "seed": seed, "min_pass": min_pass, "tolerance": tolerance}
    overall = summarize(real, ctrl, directions, control_names, **kw)
    by_type: dict[str, Any] = {}
    for t in sorted(set(types.values())):
        members = [sid for sid, tt in types.items() if tt == t]
        by_type[t] = {"n": len(members), "evaluators": summarize(real, ctrl, directions, control_names,
                                                                 ids=members, **kw)}
    doc = {
        "schema": SCHEMA,
        "evaluators": public(overall),
        "by_edit_type": {t: {"n": v["n"], "evaluators": public(v["evaluators"])} for t, v in by_type.items()},
        "details": {ev: {"higher_is_better": directions[ev], "controls": r["controls"]} for ev, r in overall.items()},
        "by_edit_type_details": {t: {ev: r["controls"] for ev, r in v["evaluators"].items()} for t, v in by_type.items()},
        "controls": {c: DESCRIPTIONS[c] for c in control_names},
        "samples": len(samples),
        "not_built": built.not_built[:200],
        "n_not_built": len(built.not_built),
        "notes": notes,
        "computed": {"edits": first.computed, "controls": second.computed if second else 0},
        "settings": {"seed": seed, "n_boot": n_boot, "min_pass": min_pass, "tie_tolerance": tolerance},
        "config_hashes": hashes,
        "controls_dir": CONTROLS_DIR,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    atomic_write(out / PROBE_FILE, lambda fh: json.dump(doc, fh, indent=2, allow_nan=False))
    return doc


def _rows(run_dir: Path, hashes: Mapping[str, str], ids: set[str]) -> list[dict[str, Any]]:
    from editlens.runner.store import ResultsStore

    store = ResultsStore(run_dir)
    try:
        return [r for r in store.rows(dict(hashes)) if r["sample_id"] in ids]
    finally:
        store.close()

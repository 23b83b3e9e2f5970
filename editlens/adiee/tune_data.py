"""Training data of reward-conditioned editor fine-tuning: per (source,
instruction), the candidate targets with a 0-10 score each.

Read from ``editlens relabel`` output (``reward`` 1-5 -> 0-10) or from a
scored run directory (``results.jsonl`` + the run's manifest; one evaluator's
values mapped from its range to 0-10, flipped when lower is better). The
source image itself can join the candidates with score 0 (the release does:
"doing nothing" is a failed edit). A target is drawn per sample with weights
by quality level (:func:`level_weights`), from a generator seeded by (seed,
position), so a resumed run draws what an uninterrupted one would.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from editlens.errors import InputError

TARGET_WEIGHTS = ("balanced", "uniform")


@dataclass
class Candidate:
    edited: str  # image path
    score10: float
    id: str


@dataclass
class Group:
    """The candidates of one (source, instruction)."""

    key: str
    source: str
    instruction: str
    candidates: list[Candidate] = field(default_factory=list)


def _path(value: Any, base: Path) -> str:
    p = Path(str(value)).expanduser()
    return str(p if p.is_absolute() else (base / p))


def _add(groups: dict[str, Group], source: str, instruction: str, cand: Candidate) -> None:
    key = f"{source}\u241f{instruction.strip()}"
    groups.setdefault(key, Group(key, source, instruction.strip())).candidates.append(cand)


def read_relabelled(path: Path) -> tuple[dict[str, Group], dict[str, Any]]:
    """Rows of ``editlens relabel`` output: ``reward`` 1-5 becomes 0-10 as (reward - 1) * 2.5."""
    groups: dict[str, Group] = {}
    skipped = 0
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}:{n}: not JSON ({exc.msg})") from None
        for k in ("source", "edited", "instruction"):
            if not isinstance(row.get(k), str) or not row[k].strip():
                raise InputError(f"{path}:{n}: missing {k!r}")
        if "reward" not in row:
            raise InputError(f"{path}:{n}: no 'reward' column (make the file with `editlens relabel`, or give a "
                             "scored run directory)")
        r = row["reward"]
        if r is None:
            skipped += 1  # unscored by the reward model: not a target
            continue
        if not isinstance(r, (int, float)) or not math.isfinite(r) or not 1 <= r <= 5:
            raise InputError(f"{path}:{n}: reward must be a number in 1-5, got {r!r}")
        _add(groups, _path(row["source"], path.parent), row["instruction"],
             Candidate(_path(row["edited"], path.parent), (float(r) - 1.0) * 2.5, str(row.get("id", n))))
    return groups, {"kind": "relabel", "path": str(path), "unscored_rows": skipped,
                    "scale": "(reward - 1) * 2.5 -> 0-10", "metric": None}


def read_run(run_dir: Path, metric: str | None, spec_of: Callable[[str], Any]) -> tuple[dict[str, Group], dict[str, Any]]:
    """A run directory's ``results.jsonl``, values of ``metric`` (needed when several were run)."""
    from editlens.data.manifest import read_manifest

    results, meta = run_dir / "results.jsonl", run_dir / "manifest.json"
    if not results.is_file() or not meta.is_file():
        raise InputError(f"{run_dir}: not a finished run directory (needs results.jsonl and manifest.json)")
    manifest_path = (json.loads(meta.read_text()).get("inputs") or {}).get("manifest")
    if not manifest_path or not Path(manifest_path).is_file():
        raise InputError(f"{meta}: the edit manifest it names ({manifest_path}) is not there")
    samples = {s.id: s for s in read_manifest(Path(manifest_path)).samples}
    records = [json.loads(x) for x in results.read_text(encoding="utf-8").splitlines() if x.strip()]
    names = sorted({k for r in records for k in (r.get("scores") or {})})
    if metric is None:
        if len(names) != 1:
            raise InputError(f"{run_dir} holds scores of {', '.join(names) or 'no evaluator'}: name the one to "
                             "train with (--score-metric)")
        metric = names[0]
    elif metric not in names:
        raise InputError(f"{run_dir}: no scores of {metric!r} (it holds {', '.join(names) or 'none'})")
    spec = spec_of(metric)
    low, high = spec.value_range
    values = [r["scores"][metric]["value"] for r in records
              if (r.get("scores") or {}).get(metric, {}).get("status") == "scored"]
    scale = f"[{low:g}, {high:g}] -> 0-10"
    if not (math.isfinite(low) and math.isfinite(high)):
        if len(set(values)) < 2:
            raise InputError(f"{metric} has no fixed range and fewer than two distinct scores in {run_dir}")
        low, high = min(values), max(values)  # an unbounded reward is relative: this run's own range
        scale = f"min-max of this run's {metric} scores [{low:.4g}, {high:.4g}] -> 0-10 (relative)"
    groups: dict[str, Group] = {}
    skipped = 0
    for r in records:
        entry = (r.get("scores") or {}).get(metric)
        s = samples.get(r["id"])
        if entry is None or s is None or entry.get("status") != "scored" or entry.get("value") is None:
            skipped += 1
            continue
        x = (float(entry["value"]) - low) / (high - low)
        x = min(1.0, max(0.0, x if spec.higher_is_better else 1.0 - x))
        _add(groups, str(s.source), s.instruction, Candidate(str(s.edited), 10.0 * x, s.id))
    return groups, {"kind": "run", "path": str(run_dir), "metric": metric, "scale": scale,
                    "higher_is_better": spec.higher_is_better, "unscored_rows": skipped}


def read_tuning_data(path: str | Path, metric: str | None = None, include_source: bool = True,
                     spec_of: Callable[[str], Any] | None = None) -> tuple[list[Group], dict[str, Any]]:
    """The groups (in a stable order) and a description of where they came from."""
    p = Path(path)
    if p.is_dir():
        if spec_of is None:
            from editlens.metrics.registry import get_spec

            spec_of = get_spec
        groups, desc = read_run(p, metric, spec_of)
    elif p.is_file():
        groups, desc = read_relabelled(p)
    else:
        raise InputError(f"{p}: no such file or run directory")
    if not groups:
        raise InputError(f"{p}: no scored candidates to train on")
    ordered = [groups[k] for k in sorted(groups)]
    if include_source:
        for g in ordered:
            g.candidates.insert(0, Candidate(g.source, 0.0, "(source)"))
    if not any(len(g.candidates) > 1 for g in ordered):
        raise InputError(f"{p}: every source has a single candidate; reward conditioning needs several "
                         "(score several editors' outputs per source, or keep the source as a candidate)")
    return ordered, {**desc, "groups": len(ordered), "candidates": sum(len(g.candidates) for g in ordered),
                     "source_as_candidate": include_source}


def level_weights(groups: list[Group], level: Callable[[float], int], how: str) -> dict[int, float]:
    """Sampling weight of a candidate by its quality level. ``balanced``: the inverse of the
    level's share of all candidates (each level drawn about equally often over the run);
    ``uniform``: every candidate alike."""
    if how not in TARGET_WEIGHTS:
        raise InputError(f"target weights must be one of {', '.join(TARGET_WEIGHTS)}, got {how!r}")
    counts: dict[int, int] = {}
    for g in groups:
        for c in g.candidates:
            counts[level(c.score10)] = counts.get(level(c.score10), 0) + 1
    if how == "uniform":
        return {lv: 1.0 for lv in counts}
    total = sum(counts.values())
    return {lv: total / (len(counts) * n) for lv, n in sorted(counts.items())}


def draw_target(group: Group, weights: dict[int, float], level: Callable[[float], int],
                rng: np.random.Generator) -> Candidate:
    w = np.array([weights[level(c.score10)] for c in group.candidates], dtype=float)
    return group.candidates[int(rng.choice(len(w), p=w / w.sum()))]

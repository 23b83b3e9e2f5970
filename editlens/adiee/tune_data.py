"""Training data of reward-conditioned editor fine-tuning: per (source,
instruction), the candidate targets with a 0-10 score each.

Read from ``editlens relabel`` output (``reward`` 1-5 -> 0-10) or from a
scored run directory (``results.jsonl`` + the run's manifest; one evaluator's
values mapped from its range to 0-10, flipped when lower is better). The
source image itself can join the candidates with score 0 (the release does:
"doing nothing" is a failed edit). A target is drawn per sample with weights
(:func:`target_weighting`: by quality level, or by rounded score from a table
such as the release's ``WEIGHT_DICT`` read from a clone), from a generator
seeded by (seed, position), so a resumed run draws what an uninterrupted one
would.
"""

from __future__ import annotations

import ast
import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from editlens.core.io import read_json, read_jsonl
from editlens.errors import InputError

TARGET_WEIGHTS = ("balanced", "uniform", "table")
#: the name of the release's score -> weight table in its dataset module
TABLE_NAME = "WEIGHT_DICT"


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
    doc = read_json(meta, "the run's manifest")
    manifest_path = ((doc.get("inputs") if isinstance(doc, dict) else None) or {}).get("manifest")
    if not manifest_path or not Path(manifest_path).is_file():
        raise InputError(f"{meta}: the edit manifest it names ({manifest_path}) is not there")
    samples = {s.id: s for s in read_manifest(Path(manifest_path)).samples}
    records = read_jsonl(results)
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
                     spec_of: Callable[[str], Any] | None = None, several: bool = True
                     ) -> tuple[list[Group], dict[str, Any]]:
    """The groups (in a stable order) and a description of where they came from. ``several``: refuse
    data where every source has one candidate (reward conditioning needs several; training towards a
    ground truth does not)."""
    p = Path(path)
    if p.is_dir():
        if spec_of is None:  # registered metrics, and a bench run's judge (bench_gedit ...)
            from editlens.bench.judge import evaluator_spec

            spec_of = evaluator_spec
        groups, desc = read_run(p, metric, spec_of)
    elif p.is_file():
        groups, desc = read_relabelled(p)
    else:
        raise InputError(f"{p}: no such file or run directory")
    if not groups:
        raise InputError(f"{p}: no scored candidates to train on")
    for g in groups.values():  # one edit, one score: the same candidate twice would train on both
        seen: dict[str, Candidate] = {}
        for c in g.candidates:
            where = str(Path(c.edited).resolve()) if "#" not in c.edited else c.edited
            first = seen.setdefault(where, c)
            if first is not c:
                raise InputError(f"{p}: the candidate {c.edited} of source {g.source} (instruction {g.instruction!r}) "
                                 f"appears twice, as {first.id} (score {first.score10:g} of 10) and as {c.id} "
                                 f"(score {c.score10:g} of 10); one edit has one score: keep one row")
    ordered = [groups[k] for k in sorted(groups)]
    if include_source:
        for g in ordered:
            g.candidates.insert(0, Candidate(g.source, 0.0, "(source)"))
    if several and not any(len(g.candidates) > 1 for g in ordered):
        raise InputError(f"{p}: every source has a single candidate; reward conditioning needs several "
                         "(score several editors' outputs per source, or keep the source as a candidate)")
    return ordered, {**desc, "groups": len(ordered), "candidates": sum(len(g.candidates) for g in ordered),
                     "source_as_candidate": include_source}


def level_weights(groups: list[Group], level: Callable[[float], int], how: str) -> dict[int, float]:
    """Sampling weight of a candidate by its quality level. ``balanced``: the inverse of the
    level's share of all candidates (each level drawn about equally often over the run);
    ``uniform``: every candidate alike."""
    if how not in ("balanced", "uniform"):
        raise InputError(f"level weights must be balanced or uniform, got {how!r}")
    levels = [level(c.score10) for g in groups for c in g.candidates]
    return {lv: 1.0 for lv in sorted(set(levels))} if how == "uniform" else inverse_frequency(levels)


def inverse_frequency(keys: list[int]) -> dict[int, float]:
    """Key -> the inverse of its share of ``keys`` (normalised: each key drawn about equally often).

    >>> inverse_frequency([1, 1, 1, 5])
    {1: 0.6666666666666666, 5: 2.0}
    """
    counts: dict[int, int] = {}
    for k in keys:
        counts[k] = counts.get(k, 0) + 1
    return {k: len(keys) / (len(counts) * n) for k, n in sorted(counts.items())}


def rounded_score(score10: float) -> int:
    """A 0-10 score as a weight table's key: clipped, then Python's rounding (half to even, as the
    release's binning rounds)."""
    return round(min(10.0, max(0.0, float(score10))))


def check_table_choice(how: str, table: Any, option: str) -> None:
    """``how == "table"`` exactly when a table is given (``option``: the CLI's name, e.g. ``--target-weights``)."""
    if (how == "table") != (table is not None):
        raise InputError(f"{option} table needs {option[:-1]}-table (and a table goes with {option} table), got "
                         f"{how!r} with {'a' if table else 'no'} table")


def table_covering(keys: set[int], table: str | Path, option: str) -> tuple[dict[int, float], dict[str, Any]]:
    """The weight table at ``table``, refused when a key the data has is not in it."""
    values, origin = read_weight_table(table, option)
    missing = sorted(keys - set(values))
    if missing:
        raise InputError(f"{option} {origin['path']}: no weight for rounded score(s) {', '.join(map(str, missing))} "
                         "that the training data has")
    return values, origin


def _table_key(key: Any, where: str) -> int:
    """A table key as an integer score 0-10 (ints, integral floats or their strings)."""
    try:
        f = float(key)
    except (TypeError, ValueError):
        f = math.nan
    if not (math.isfinite(f) and f == int(f) and 0 <= f <= 10) or isinstance(key, bool):
        raise InputError(f"{where}: key {key!r} is not a score 0-10; the table must map rounded 0-10 scores to "
                         "weights (editlens weights a candidate by its rounded score)")
    return int(f)


def _checked_table(raw: Any, where: str) -> dict[int, float]:
    if not isinstance(raw, dict) or not raw:
        raise InputError(f"{where}: expected a non-empty mapping of score -> weight, got {type(raw).__name__}")
    table: dict[int, float] = {}
    for k, v in raw.items():
        score = _table_key(k, where)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise InputError(f"{where}: the weight of score {k!r} must be a number >= 0, got {v!r}")
        if score in table:
            raise InputError(f"{where}: score {score} appears twice")
        table[score] = float(v)
    if not any(table.values()):
        raise InputError(f"{where}: every weight is 0")
    return dict(sorted(table.items()))


def read_weight_table(path: str | Path, option: str = "--target-weight-table") -> tuple[dict[int, float], dict[str, Any]]:
    """A score -> weight table: a JSON object (``{"0": 0.5, "1": 1.0, ...}``), or the release's
    ``WEIGHT_DICT`` from a clone of the ADIEE release (its dataset module, or a ``.py`` file;
    parsed, never run). Returns the table and where it came from (path, sha256 of the table)."""
    from editlens.adiee.editor_prompt import CLONE_MODULES

    p = Path(path).expanduser()
    if p.is_dir():
        module = next((p / m for m in CLONE_MODULES if (p / m).is_file()), None)
        if module is None:
            raise InputError(f"{option} {p}: no dataset module found (looked for "
                             f"{', '.join(CLONE_MODULES)})")
        p = module
    if not p.is_file():
        raise InputError(f"{option} {p}: no such file or clone folder")
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{option} {p}: cannot read it ({exc})") from None
    where = f"{option} {p}"
    if p.suffix == ".py":
        try:
            tree = ast.parse(text, filename=str(p))
        except SyntaxError as exc:
            raise InputError(f"{where}: cannot parse it as Python ({exc.msg}, line {exc.lineno})") from None
        found = [n.value for n in tree.body if isinstance(n, ast.Assign)
                 and any(isinstance(t, ast.Name) and t.id == TABLE_NAME for t in n.targets)]
        if len(found) != 1:
            raise InputError(f"{where}: expected one module-level {TABLE_NAME} = {{...}}, found {len(found)}")
        try:
            raw = ast.literal_eval(found[0])
        except ValueError:
            raise InputError(f"{where}: {TABLE_NAME} is not a literal mapping (line {found[0].lineno})") from None
        where = f"{where}: {TABLE_NAME}"
    else:
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(f"{where}: not JSON ({exc.msg}, line {exc.lineno}); give a JSON object or a clone "
                             "of the ADIEE release") from None
    table = _checked_table(raw, where)
    digest = hashlib.sha256(json.dumps(table, sort_keys=True).encode()).hexdigest()[:16]
    return table, {"path": str(p), "sha256": digest}


@dataclass(frozen=True)
class TargetWeighting:
    """How a candidate's sampling weight follows from its 0-10 score: by its quality level
    (``balanced`` / ``uniform``) or by its rounded score from a table (``table``)."""

    how: str
    weights: dict[int, float]  # level -> weight, or rounded score -> weight
    level: Callable[[float], int]
    origin: dict[str, Any] | None = None

    @property
    def by(self) -> str:
        return "score" if self.how == "table" else "level"

    def key(self, score10: float) -> int:
        # Python's rounding (half to even), as the release's binning rounds
        return rounded_score(score10) if self.how == "table" else self.level(score10)

    def of(self, score10: float) -> float:
        return self.weights[self.key(score10)]

    def describe(self) -> dict[str, Any]:
        d: dict[str, Any] = {"how": self.how, "by": self.by,
                             f"{self.by}_weights": {str(k): round(v, 6) for k, v in self.weights.items()}}
        if self.origin:
            d["table"] = self.origin
        return d

    def summary(self) -> str:
        return f"{self.by} weights " + ", ".join(f"{k}: {v:.3g}" for k, v in self.weights.items())


def target_weighting(groups: list[Group], level: Callable[[float], int], how: str,
                     table: str | Path | None = None) -> TargetWeighting:
    """The weighting of the training targets, checked against the data: every candidate's
    rounded score must be in a table, and every source must have a candidate of weight > 0."""
    if how not in TARGET_WEIGHTS:
        raise InputError(f"target weights must be one of {', '.join(TARGET_WEIGHTS)}, got {how!r}")
    check_table_choice(how, table, "--target-weights")
    if table is None:
        w = TargetWeighting(how, level_weights(groups, level, how), level)
    else:
        keys = {rounded_score(c.score10) for g in groups for c in g.candidates}
        values, origin = table_covering(keys, table, "--target-weight-table")
        w = TargetWeighting(how, values, level, origin)
    for g in groups:
        if not any(w.of(c.score10) > 0 for c in g.candidates):
            raise InputError(f"every candidate of source {g.source} ({g.instruction!r}) has weight 0: it can never "
                             "be drawn (drop it from the data or give its scores a weight)")
    return w


def draw_target(group: Group, weighting: TargetWeighting, rng: np.random.Generator) -> Candidate:
    w = np.array([weighting.of(c.score10) for c in group.candidates], dtype=float)
    return group.candidates[int(rng.choice(len(w), p=w / w.sum()))]


SAMPLE_WEIGHTS = ("uniform", "balanced", "table")


def sample_weights(scores10: list[float], how: str, table: str | Path | None = None) -> tuple[list[float] | None,
                                                                                               dict[str, Any]]:
    """A weight per training sample from its 0-10 score, rounded (``adiee train``'s sampling):
    ``uniform`` (``None``: every sample once per epoch), ``balanced`` (inverse frequency of the
    rounded score: each score drawn about equally often) or ``table`` (a score -> weight table,
    e.g. the release's ``WEIGHT_DICT`` from a clone). Returns the weights and their description.

    >>> w, d = sample_weights([0.0, 0.0, 0.0, 10.0], "balanced")
    >>> [round(x, 3) for x in w], d["score_weights"]
    ([0.667, 0.667, 0.667, 2.0], {'0': 0.666667, '10': 2.0})
    """
    if how not in SAMPLE_WEIGHTS:
        raise InputError(f"sample weights must be one of {', '.join(SAMPLE_WEIGHTS)}, got {how!r}")
    check_table_choice(how, table, "--sample-weights")
    if how == "uniform":
        return None, {"how": "uniform"}
    keys = [rounded_score(s) for s in scores10]
    desc: dict[str, Any] = {"how": how, "by": "rounded 0-10 score"}
    if table is None:
        per = inverse_frequency(keys)
    else:
        per, desc["table"] = table_covering(set(keys), table, "--sample-weight-table")
    weights = [per[k] for k in keys]
    if not any(weights):
        raise InputError("every training sample has weight 0")
    desc["score_weights"] = {str(k): round(v, 6) for k, v in sorted(per.items()) if k in set(keys)}
    return weights, desc

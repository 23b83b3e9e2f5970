"""Gather everything a run report shows into one JSON-able dict.

Reads the run directory's store (the latest settings of each evaluator),
its manifest (for the image paths, editing models and any human scores)
and computes the per-model table, the evaluators' own summaries (e.g. DICE's ranking) and human agreement. The
HTML itself is built by :mod:`editlens.reporting.html`.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Iterable, Mapping

from editlens.errors import InputError

#: manifest/metadata columns read as a human score of the edit
HUMAN_COLUMNS = ("human", "human_score")
#: longest model answer kept in the page (the full text stays in the run's store)
MAX_RAW_CHARS = 2000


def _trim(value: Any) -> Any:
    """Cap long strings (raw model answers) so a page of thousands of edits stays small."""
    if isinstance(value, str) and len(value) > MAX_RAW_CHARS:
        return value[:MAX_RAW_CHARS] + f"... [{len(value) - MAX_RAW_CHARS} more characters]"
    if isinstance(value, dict):
        return {k: _trim(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_trim(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _direction(metric: str) -> bool | None:
    """True when higher is better, None for evaluators the registry does not know."""
    try:
        from editlens.metrics.registry import get_spec

        return bool(get_spec(metric).higher_is_better)
    except Exception:  # an evaluator without a spec (e.g. a third-party judge): direction unknown
        return None


def boxes_of(scores: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Every box of a sample: the change map's regions and DICE's differences.

    Each box is ``{"by", "command", "box" (x0, y0, x1, y1 as fractions), "on"
    (images it is drawn on), "label"}``; DICE's colour code and placement
    follow :mod:`editlens.dice.drawing` (ADD on the edited image, EDIT and
    REMOVE on the source, the kind-less CHANGE on both).

    >>> boxes_of({"dice": {"details": {"differences": [{"command": "ADD", "object": "hat",
    ...                                                 "box": [0.1, 0.2, 0.3, 0.4]}]}}})
    [{'by': 'dice', 'command': 'ADD', 'box': [0.1, 0.2, 0.3, 0.4], 'on': ['edited'], 'label': 'ADD hat', 'index': 0}]
    """
    from editlens.dice.drawing import TARGETS

    out: list[dict[str, Any]] = []
    cm = (scores.get("change_map") or {}).get("details") or {}
    for i, r in enumerate(cm.get("regions") or []):
        if r.get("box_norm"):
            label = (f"whole image: {r.get('cause')}" if r.get("kind") == "global"
                     else f"change {r.get('area_fraction', 0):.1%}")
            out.append({"by": "change_map", "command": "CHANGE", "box": list(r["box_norm"]),
                        "on": ["source", "edited"], "label": label, "index": i})
    dice = dice_details(scores)
    for i, d in enumerate((dice or {}).get("differences") or []):
        cmd = str(d.get("command", "CHANGE")).upper()
        label = cmd + (f" {d['object']}" if d.get("object") else "")
        out.append({"by": "dice", "command": cmd, "box": list(d["box"]), "on": list(TARGETS.get(cmd, ("source", "edited"))),
                    "label": label, "index": i})
    return out


def dice_details(scores: Mapping[str, Mapping[str, Any]]) -> dict[str, Any] | None:
    """The DICE result of a sample: from the ``dice`` evaluator, else from a
    DICE-masked metric that keeps it under ``details["dice"]``."""
    d = (scores.get("dice") or {}).get("details")
    if d and "differences" in d:
        return d
    for s in scores.values():
        inner = (s.get("details") or {}).get("dice")
        if isinstance(inner, dict) and "differences" in inner:
            return inner
    return None


def verdict_tags(scores: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Filterable DICE outcome of a sample: ``correct`` (a coherent difference),
    ``unwanted`` (a non-coherent one), ``no change``, ``unscored`` (an answer
    could not be parsed), ``not judged`` (no coherence estimator ran).

    >>> verdict_tags({"dice": {"status": "scored", "details": {"differences": [
    ...     {"verdict": {"coherent": True}}, {"verdict": {"coherent": False}}]}}})
    ['correct', 'unwanted']
    >>> verdict_tags({"l1": {"status": "scored"}})
    []
    """
    dice = dice_details(scores)
    if dice is None:
        return []
    diffs = dice.get("differences") or []
    tags = []
    if dice.get("problem") and not diffs:
        return ["unscored"]
    if not diffs:
        return ["no change"]
    verdicts = [d.get("verdict") for d in diffs]
    if any(v is None for v in verdicts):
        tags.append("not judged")
    coherent = [v.get("coherent") for v in verdicts if v is not None]
    if True in coherent:
        tags.append("correct")
    if False in coherent:
        tags.append("unwanted")
    if any(v is not None and v.get("coherent") is None for v in verdicts):
        tags.append("unscored")
    return tags


def _read_human(path: str | Path) -> dict[str, float]:
    """``{"id", "human"}`` JSON lines -> scores by id."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{p}: human scores file not found")
    out: dict[str, float] = {}
    for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            out[str(row["id"])] = float(row["human"])
        except (ValueError, KeyError, TypeError) as exc:
            raise InputError(f"{p}:{n}: needs JSON with 'id' and a numeric 'human' ({exc})") from exc
    return out


def read_meta_eval(path: str | Path) -> dict[str, Any]:
    """A saved ``editlens meta-eval ... --json`` document."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{p}: meta-evaluation result not found")
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise InputError(f"{p}: not JSON ({exc}); save one with `editlens meta-eval ... --json > {p.name}`") from exc
    if not isinstance(doc, dict) or not ({"benchmark", "protocol"} & set(doc)):
        raise InputError(f"{p}: not a meta-evaluation result (no 'benchmark' or 'protocol' field)")
    return doc


def _manifest_samples(path: Path, notes: list[str]) -> dict[str, Any]:
    from editlens.data.manifest import read_manifest

    if not path.is_file():
        notes.append(f"manifest {path} not found: cards show no images (pass --manifest to point at it)")
        return {}
    try:
        report = read_manifest(path, skip_invalid=True, check_files=False)
    except Exception as exc:  # noqa: BLE001 - a report should still show the scores
        notes.append(f"manifest {path} could not be read ({exc}): cards show no images")
        return {}
    return {s.id: s for s in report.samples}


def collect_run(run_dir: str | Path, manifest: str | Path | None = None, human: str | Path | None = None,
                seed: int = 0, n_boot: int = 1000) -> dict[str, Any]:
    """Everything the run report shows, as plain data (see module docstring)."""
    from editlens.reporting.runs import _current_rows, _open, evaluator_summaries, summary_table

    run = Path(run_dir)
    store = _open(run)
    try:
        run_manifest = store.get_meta("manifest") or {}
        rows = _current_rows(store)
    finally:
        store.close()
    notes: list[str] = []
    mpath = Path(manifest) if manifest else (Path(run_manifest["inputs"]["manifest"])
                                            if run_manifest.get("inputs", {}).get("manifest") else None)
    samples_in = _manifest_samples(mpath, notes) if mpath else {}
    if mpath is None:
        notes.append("the run records no manifest path: cards show no images (pass --manifest)")
    humans = _read_human(human) if human else {}

    evaluators = [e["name"] for e in run_manifest.get("evaluators", []) if "name" in e]
    by_id: dict[str, dict[str, Any]] = {}
    for r in rows:
        rec = by_id.setdefault(r["sample_id"], {"id": r["sample_id"], "model": r["model"] or "(none)", "scores": {}})
        entry: dict[str, Any] = {"status": r["status"], "value": r["value"]}
        if r["reason"]:
            entry["reason"] = r["reason"]
        if r["details"]:
            entry["details"] = _trim(r["details"])
        rec["scores"][r["evaluator"]] = entry
        if r["evaluator"] not in evaluators:
            evaluators.append(r["evaluator"])
    order = {sid: i for i, sid in enumerate(samples_in)}
    ids = sorted(by_id, key=lambda s: (order.get(s, math.inf), s))

    samples = []
    for sid in ids:
        rec = by_id[sid]
        src = samples_in.get(sid)
        images = {}
        if src is not None:
            for role in ("source", "edited", "reference"):
                value = getattr(src, role)
                if isinstance(value, (str, Path)) and value:
                    images[role] = str(value)
            rec["instruction"] = src.instruction
            meta_h = next((src.metadata[c] for c in HUMAN_COLUMNS if c in src.metadata), None)
            if meta_h is not None and sid not in humans:
                try:
                    humans[sid] = float(meta_h)
                except (TypeError, ValueError):
                    notes.append(f"sample {sid}: human score {meta_h!r} is not a number; ignored")
        rec["images"] = images
        rec["boxes"] = boxes_of(rec["scores"])
        rec["verdicts"] = verdict_tags(rec["scores"])
        rec["statuses"] = sorted({s["status"] for s in rec["scores"].values()})
        if sid in humans:
            rec["human"] = humans[sid]
        samples.append(rec)
    missing_human = set(humans) - set(by_id)
    if human and missing_human:
        notes.append(f"{len(missing_human)} human score id(s) match no sample of the run")

    scored_evaluators = [e for e in evaluators if any(s["scores"].get(e, {}).get("status") == "scored" for s in samples)]
    per_model = _per_model(samples, evaluators, summary_table(run, by="model", seed=seed))
    return {
        "kind": "run",
        "title": run.resolve().name,
        "run_dir": str(run),
        "run": {k: run_manifest.get(k) for k in ("command", "started", "finished", "device", "executor")}
               | {"git_commit": (run_manifest.get("environment") or {}).get("git_commit"),
                  "editlens": (run_manifest.get("environment") or {}).get("editlens"),
                  "skipped_metrics": (run_manifest.get("inputs") or {}).get("skipped_metrics") or {}},
        "evaluators": evaluators,
        "scored_evaluators": scored_evaluators,
        "higher_is_better": {e: _direction(e) for e in evaluators},
        "models": sorted({s["model"] for s in samples}),
        "samples": samples,
        "per_model": per_model,
        # run-level tables evaluators contribute (registry metadata), e.g. DICE's ranking
        "summaries": [{**t, "rows": _trim(t["rows"])} for t in evaluator_summaries(run)],
        "human": _human_agreement(samples, scored_evaluators, seed, n_boot) if any("human" in s for s in samples) else None,
        "notes": notes,
    }


def _per_model(samples: list[dict[str, Any]], evaluators: Iterable[str],
               summary: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (editing model, evaluator): status counts, and the mean and
    bootstrap 95% CI of ``editlens runs summary --by model`` (same numbers)."""
    stats = {(r["group"], r["evaluator"]): r for r in summary}
    out = []
    models = sorted({s["model"] for s in samples})
    for ev in evaluators:
        for m in models:
            counts = {"scored": 0, "skipped": 0, "unscored": 0, "failed": 0, "info": 0}
            for s in samples:
                sc = s["scores"].get(ev)
                if s["model"] == m and sc is not None:
                    counts[sc["status"]] = counts.get(sc["status"], 0) + 1
            if not any(counts.values()):
                continue
            st = stats.get((m, ev))
            out.append({"evaluator": ev, "model": m, "n": st["n"] if st else 0, "mean": st["mean"] if st else None,
                        "ci": st["ci"] if st else None, "counts": counts})
    return out


def _human_agreement(samples: list[dict[str, Any]], evaluators: list[str], seed: int,
                     n_boot: int) -> dict[str, Any]:
    """Correlation of each scored evaluator with the human scores, overall and
    per editing model (Spearman, bootstrap 95% CI); unscored samples are left out."""
    from editlens.meta.correlation import correlate

    out: dict[str, Any] = {"overall": [], "per_model": [], "points": {}}
    for ev in evaluators:
        pts = [(s["scores"][ev]["value"], s["human"], s["model"]) for s in samples
               if "human" in s and s["scores"].get(ev, {}).get("status") == "scored"]
        if len(pts) < 2:
            continue
        out["points"][ev] = pts
        for method in ("pearson", "spearman", "kendall"):
            c = correlate([p[0] for p in pts], [p[1] for p in pts], method, n_boot=n_boot, seed=seed)
            out["overall"].append({"evaluator": ev, **_trim(c.to_dict())})
        for m in sorted({p[2] for p in pts}):
            sub = [p for p in pts if p[2] == m]
            if len(sub) >= 2:
                c = correlate([p[0] for p in sub], [p[1] for p in sub], "spearman", n_boot=n_boot, seed=seed)
                out["per_model"].append({"evaluator": ev, "model": m, **_trim(c.to_dict())})
    return out

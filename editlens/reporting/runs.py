"""Read a run directory: manifest, failures, summaries."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from editlens.errors import InputError
from editlens.meta.bootstrap import bootstrap_ci
from editlens.runner.store import ResultsStore


def _open(run_dir: str | Path) -> ResultsStore:
    path = Path(run_dir)
    if not (path / "results.sqlite").is_file():
        raise InputError(f"{path}: not a run directory (no results.sqlite); create one with `editlens run`")
    return ResultsStore(path)


def _current_rows(store: ResultsStore) -> list[dict[str, Any]]:
    """Rows of every evaluator run in this directory, each at its latest
    settings (rows of older settings stay in the store)."""
    return store.rows(store.current_configs())


def status_counts(run_dir: str | Path) -> dict[str, dict[str, int]]:
    """``{evaluator: {status: count}}`` over the current rows of a run."""
    store = _open(run_dir)
    try:
        rows = _current_rows(store)
    finally:
        store.close()
    out: dict[str, dict[str, int]] = {}
    for r in rows:
        counts = out.setdefault(r["evaluator"], {})
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    return out


def load_run_meta(run_dir: str | Path, key: str) -> Any:
    store = _open(run_dir)
    try:
        return store.get_meta(key)
    finally:
        store.close()


def failures(run_dir: str | Path) -> list[dict[str, Any]]:
    store = _open(run_dir)
    try:
        return [
            {k: r[k] for k in ("sample_id", "evaluator", "status", "reason")}
            | ({"raw": r["details"].get("raw")} if r["details"] and "raw" in r["details"] else {})
            for r in _current_rows(store) if r["status"] in ("failed", "unscored")
        ]
    finally:
        store.close()


def summary_table(run_dir: str | Path, by: str | None = None, seed: int = 0) -> list[dict[str, Any]]:
    """Mean and bootstrap 95% CI of each evaluator's scored values, optionally per
    editing model (``by="model"``), edit type (``by="edit_type"``) or any column of
    the run's manifest (``by="task_type"``: its values, ``(none)`` where a sample has none)."""
    store = _open(run_dir)
    try:
        rows = _current_rows(store)
    finally:
        store.close()
    if by == "edit_type":
        types = run_edit_types(run_dir)
        group_of = lambda r: types.get(r["sample_id"], "other")  # noqa: E731
    elif by not in (None, "model"):
        values = column_values(run_dir, by)
        group_of = lambda r: values.get(r["sample_id"], "(none)")  # noqa: E731
    groups: dict[tuple[str, str], list[float]] = {}
    for r in rows:
        if r["status"] != "scored":
            continue
        g = (r["model"] or "(none)") if by == "model" else group_of(r) if by else "all"
        groups.setdefault((g, r["evaluator"]), []).append(r["value"])
    out = []
    for (g, ev), vals in sorted(groups.items()):
        ci = bootstrap_ci(vals, seed=seed)
        out.append({"group": g, "evaluator": ev, "n": len(vals), "mean": sum(vals) / len(vals),
                    "ci": None if len(vals) < 2 else list(ci)})  # None: undefined for n < 2
    return out


#: keys of a results.jsonl record that are not manifest columns
_NOT_COLUMNS = ("id", "scores", "images")


def run_columns(run_dir: str | Path) -> dict[str, dict[str, Any]]:
    """``{sample_id: {column: value}}``: each sample's model, instruction, edit type and the
    manifest's extra columns, as the run's ``results.jsonl`` keeps them."""
    return {str(row["id"]): {k: v for k, v in row.items() if k not in _NOT_COLUMNS} for row in _result_rows(run_dir)}


def _result_rows(run_dir: str | Path) -> list[dict[str, Any]]:
    """The records of the run's ``results.jsonl`` that have an id (a torn last line is left out)."""
    import json

    results = Path(run_dir) / "results.jsonl"
    rows: list[dict[str, Any]] = []
    if results.is_file():
        for line in results.read_text(encoding="utf-8").splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict) and "id" in row:
                rows.append(row)
    return rows


def _manifest_columns(run_dir: str | Path) -> dict[str, dict[str, Any]]:
    """Each sample's columns read again from the run's manifest, with the options it was read with."""
    inputs = (load_run_meta(run_dir, "manifest") or {}).get("inputs", {})
    manifest = inputs.get("manifest")
    if not manifest or not Path(manifest).exists():
        return {}
    from editlens.data.manifest import read_manifest

    options = {k: v for k, v in (inputs.get("manifest_options") or {}).items()
               if k in ("columns", "encoding", "delimiter", "split", "edits", "edits_pattern", "image_root")}
    try:
        samples = read_manifest(manifest, skip_invalid=True, check_files=False, **options).samples
    except InputError:
        return {}
    return {s.id: {"model": s.model, "instruction": s.instruction, **s.columns()} for s in samples}


def group_label(value: Any) -> str:
    """A column value as a group name: ``(none)`` for a missing or empty value, JSON for lists."""
    import json

    if value is None or (isinstance(value, str) and not value.strip()):
        return "(none)"
    return json.dumps(value, sort_keys=True) if isinstance(value, (list, dict)) else str(value)


def column_values(run_dir: str | Path, column: str) -> dict[str, str]:
    """Each sample's value of ``column`` as a group name; an unknown column is an
    :class:`InputError` listing the columns there are."""
    cols = run_columns(run_dir)
    if not any(column in row for row in cols.values()):
        cols = _manifest_columns(run_dir) or cols  # a run from before results.jsonl kept every column
    available = sorted({c for row in cols.values() for c in row} | {"model", "edit_type"})
    if not any(column in row for row in cols.values()):
        raise InputError(f"--by {column!r}: the run has no such column; group by one of {', '.join(available)}"
                         + ("" if cols else f" (no results.jsonl in {run_dir}: rerun `editlens run` on it)"))
    return {sid: group_label(row.get(column)) for sid, row in cols.items()}


def run_edit_types(run_dir: str | Path) -> dict[str, str]:
    """Each sample's edit type (:func:`editlens.data.edit_types.edit_type_of`): from the run's
    ``results.jsonl`` (written with each sample's type and instruction), else from its manifest."""
    from editlens.data.edit_types import classify_instruction, edit_type_of

    out: dict[str, str] = {}
    for row in _result_rows(run_dir):
        if row.get("edit_type"):
            out[str(row["id"])] = str(row["edit_type"])
        elif row.get("instruction"):
            out[str(row["id"])] = classify_instruction(str(row["instruction"]))
    if not out:
        manifest = (load_run_meta(run_dir, "manifest") or {}).get("inputs", {}).get("manifest")
        if manifest and Path(manifest).is_file():
            from editlens.data.manifest import read_manifest

            out = {s.id: edit_type_of(s) for s in read_manifest(manifest, skip_invalid=True, check_files=False).samples}
    if not out:
        raise InputError(f"{run_dir}: the edit types of its samples are unknown (no results.jsonl with instructions "
                         "and no readable manifest); rerun `editlens run` on it to write results.jsonl")
    return out


def evaluator_summaries(run_dir: str | Path, only: str | None = None) -> list[dict[str, Any]]:
    """Run-level summaries that evaluators contribute (``MetricSpec.summary``):
    ``[{"evaluator", "title", "rows"}]``, one per evaluator of the run that
    declares one (``only``: that evaluator alone). Nothing here knows an
    evaluator by name: the registry metadata says who adds what."""
    store = _open(run_dir)
    try:
        rows = _current_rows(store)
    finally:
        store.close()
    return evaluator_summaries_from_rows(rows, only)


def evaluators_with_summaries(names: Any) -> set[str]:
    """Those of ``names`` whose spec declares a run-level summary."""
    from editlens.errors import UnknownMetricError
    from editlens.metrics.registry import get_spec

    out = set()
    for name in names:
        try:
            if get_spec(name).summary:
                out.add(name)
        except UnknownMetricError:
            pass
    return out


def evaluator_summaries_from_rows(rows: list[dict[str, Any]], only: str | None = None) -> list[dict[str, Any]]:
    """:func:`evaluator_summaries` of rows already read from a run's store."""
    from editlens.errors import UnknownMetricError
    from editlens.metrics.registry import get_spec

    by: dict[str, list[tuple[str | None, dict[str, Any]]]] = {}
    for r in rows:
        by.setdefault(r["evaluator"], []).append((r["model"], r["details"] or {}))
    out = []
    for name in sorted(by):
        if only is not None and name != only:
            continue
        try:
            spec = get_spec(name)
        except UnknownMetricError:
            continue  # an evaluator no longer installed: its rows stay, its summary cannot be made
        fn = spec.load_summary()
        if fn is None:
            continue
        table = fn(by[name])
        if table:
            out.append({"evaluator": name, "title": spec.summary_title or f"{name} summary", "rows": table})
    return out


def evaluator_summary(run_dir: str | Path, evaluator: str) -> list[dict[str, Any]]:
    """The summary rows one evaluator contributes to a run (empty when it did not run)."""
    found = evaluator_summaries(run_dir, only=evaluator)
    return found[0]["rows"] if found else []

"""Gather everything a run report shows into one JSON-able dict, a
:class:`~editlens.reporting.payload.RunData`.

Reads the run directory's store (the latest settings of each evaluator),
its manifest (image paths, editing models, categories, human scores) and
computes the leaderboards, the per-model table, the evaluators' own
summaries, completeness and human agreement. The HTML itself is built by
:mod:`editlens.reporting.html`.

Nothing here knows an evaluator by name: what a score measures, where an
evaluator keeps its boxes and how to draw them, which verdicts make tags and
which score says "unchanged" all come from the evaluator's
:class:`~editlens.metrics.spec.MetricSpec`.
"""

from __future__ import annotations

import json
import math
import string
from pathlib import Path
from typing import Any, Iterable, Mapping

from editlens.core.io import read_json
from editlens.errors import InputError
from editlens.reporting.leaderboard import specs_of
from editlens.reporting.memo import Memo, ReportCache
from editlens.reporting.payload import Box, RunData, SampleRecord, ScoreEntry

#: manifest/metadata columns read as a human score of the edit
HUMAN_COLUMNS = ("human", "human_score")
#: manifest/metadata column holding an edit's category; leaderboards can be grouped by it
CATEGORY_COLUMN = "edit_type"
#: longest model answer kept in the page (the full text stays in the run's store)
MAX_RAW_CHARS = 2000
_MISSING = object()
_FORMATTER = string.Formatter()


def _trim(value: Any) -> Any:
    """Cap long strings (raw model answers) so a page of thousands of edits stays small."""
    t = type(value)  # exact types: this walks every stored detail on each rebuild
    if t is str:
        return value if len(value) <= MAX_RAW_CHARS else (
            value[:MAX_RAW_CHARS] + f"... [{len(value) - MAX_RAW_CHARS} more characters]")
    if t is dict:
        return {k: _trim(v) for k, v in value.items()}
    if t is list:
        return [_trim(v) for v in value]
    if t is float and not math.isfinite(value):
        return None
    return value


def dotted(obj: Any, path: str) -> Any:
    """``obj["a"]["b"]`` for ``"a.b"``; :data:`_MISSING` when a step is absent.

    >>> dotted({"verdict": {"coherent": None}}, "verdict.coherent") is None
    True
    >>> dotted({"x": 1}, "verdict.coherent") is _MISSING
    True
    """
    for part in path.split("."):
        if type(obj) is not dict or part not in obj:  # stored details are JSON: plain dicts
            return _MISSING
        obj = obj[part]
    return obj


def format_label(template: str, item: Mapping[str, Any]) -> str:
    """``template`` filled from ``item``'s fields, leaving out missing or null ones.

    >>> format_label("{command} {object}", {"command": "ADD", "object": None})
    'ADD'
    >>> format_label("{area_fraction:.1%} of the image", {"area_fraction": 0.0523})
    '5.2% of the image'
    """
    parts = []
    for literal, field_name, spec, conv in _FORMATTER.parse(template):
        parts.append(literal)
        if field_name is None:
            continue
        value = dotted(item, field_name)
        if value is _MISSING or value is None:
            continue
        try:
            if conv:
                value = _FORMATTER.convert_field(value, conv)
            parts.append(format(value, spec or ""))
        except (ValueError, TypeError):
            parts.append(str(value))
    return " ".join("".join(parts).split())


def _label_of(layer: Any, item: Mapping[str, Any]) -> str:
    template = (getattr(layer, "kind_labels", None) or {}).get(str(item.get(layer.kind)).upper()) if layer.kind else None
    template = template or layer.label
    return format_label(template, item) if template else ""


def layer_items(details: Mapping[str, Any] | None, layer: Any) -> list[dict[str, Any]] | None:
    """The items of a :class:`~editlens.metrics.spec.BoxLayer` in a result's details
    (``None`` when the details hold no such list)."""
    found = dotted(details or {}, layer.items)
    if not isinstance(found, list):
        return None
    return [it for it in found if type(it) is dict]


def _verdict(item: Mapping[str, Any], layer: Any) -> tuple[str | None, str | None]:
    """(word shown on the item, edit-level tag) of an item's judgement."""
    if not layer.verdict:
        return None, None
    v = dotted(item, layer.verdict)
    if v is _MISSING:
        # a verdict object without its value (e.g. {"problem": ...}): judged, but the answer was not understood
        parent = dotted(item, layer.verdict.rpartition(".")[0]) if "." in layer.verdict else _MISSING
        if type(parent) is not dict:
            return "not judged", "not judged"
        v = None
    if v is True:
        return layer.verdict_words[0], layer.tags[0]
    if v is False:
        return layer.verdict_words[1], layer.tags[1]
    return "unscored", "unscored"


def _box(raw: Any) -> list[float] | None:
    try:
        b = [float(v) for v in raw]
    except (TypeError, ValueError):
        return None
    return b if len(b) == 4 and all(math.isfinite(v) for v in b) else None


def boxes_of(scores: Mapping[str, Mapping[str, Any]], specs: Mapping[str, Any] | None = None) -> list[Box]:
    """Every box of a sample, from each evaluator whose spec declares a box layer.

    Each box is ``{"by" (evaluator), "i" (item index), "n" (its number on the
    sample, from 1), "box" (x0, y0, x1, y1 as fractions), "on" (images it is
    drawn on), "kind", "colour", "dashed", "label", "verdict", "rank",
    "fields"}``. A box another evaluator already gave (same place and kind,
    e.g. DICE's differences kept again by a DICE-masked metric) is listed once.

    >>> [b["label"] for b in boxes_of({"change_map": {"status": "scored", "details": {"regions": [
    ...     {"box_norm": [0.1, 0.2, 0.3, 0.4], "area_fraction": 0.04}]}}})]
    ['4.00% of the image']
    """
    specs = specs if specs is not None else specs_of(scores)
    out: list[Box] = []
    seen: set[tuple] = set()
    for ev, sc in scores.items():
        spec = specs.get(ev)
        layer = getattr(spec, "boxes", None)
        if layer is None:
            continue
        for i, item in enumerate(layer_items(sc.get("details"), layer) or []):
            box = _box(item.get(layer.box))
            if box is None:
                continue
            kind = item.get(layer.kind) if layer.kind else None
            kind = None if kind is None else str(kind).upper()
            key = (tuple(round(v, 4) for v in box), kind)
            if key in seen:
                continue
            seen.add(key)
            word, _ = _verdict(item, layer)
            rank = item.get(layer.rank) if layer.rank else None
            fields = []
            for f in layer.fields:
                v = dotted(item, f)
                if v is not _MISSING and v is not None and not isinstance(v, (dict, list)):
                    fields.append([f.split(".")[-1].replace("_", " "), _trim(v)])
            out.append(Box(
                by=ev, i=i, n=len(out) + 1, box=box,
                on=list(layer.on_kind.get(kind, layer.on) if kind is not None else layer.on),
                kind=kind, colour=layer.colours.get(kind, layer.colour) if kind is not None else layer.colour,
                dashed=layer.dashed, label=_label_of(layer, item),
                verdict=word, rank=rank if isinstance(rank, (int, float)) and math.isfinite(rank) else None,
                fields=fields,
            ))
    return out


def verdict_tags(scores: Mapping[str, Mapping[str, Any]], specs: Mapping[str, Any] | None = None) -> list[str]:
    """Filterable outcome of a sample from the evaluators whose box layer declares a
    verdict: the layer's tags (e.g. ``correct``/``unwanted``), ``no change`` (it found
    nothing), ``unscored`` (an answer could not be parsed), ``not judged`` (no verdict given).

    >>> verdict_tags({"dice": {"status": "scored", "details": {"differences": [
    ...     {"box": [0, 0, 1, 1], "verdict": {"coherent": True}}, {"box": [0, 0, 1, 1], "verdict": {"coherent": False}}]}}})
    ['correct', 'unwanted']
    >>> verdict_tags({"l1": {"status": "scored"}})
    []
    """
    specs = specs if specs is not None else specs_of(scores)
    tags: set[str] = set()
    for ev, sc in scores.items():
        layer = getattr(specs.get(ev), "boxes", None)
        if layer is None or not layer.verdict:
            continue
        items = layer_items(sc.get("details"), layer)
        if not items:
            if sc.get("status") == "unscored":
                tags.add("unscored")
            elif items is not None and sc.get("status") in ("scored", "info"):
                tags.add("no change")
            continue
        # a layer with a verdict tags every item (never None): the filter only tells mypy so
        tags.update(tag for it in items if (tag := _verdict(it, layer)[1]) is not None)
    order = ["correct", "unwanted", "no change", "unscored", "not judged"]
    return sorted(tags, key=lambda t: (order.index(t) if t in order else len(order), t))


def unchanged_by(scores: Mapping[str, Mapping[str, Any]], specs: Mapping[str, Any]) -> list[str]:
    """Evaluators (those declaring ``unchanged_at``) whose score says the edit changed nothing."""
    out = []
    for ev, sc in scores.items():
        limit = getattr(specs.get(ev), "unchanged_at", None)
        if limit is not None and sc.get("status") == "scored" and sc.get("value") is not None and sc["value"] <= limit:
            out.append(ev)
    return out


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
    doc = read_json(p, "meta-evaluation result", hint=f"save one with `editlens meta-eval ... --json > {p.name}`")
    if not isinstance(doc, dict) or not ({"benchmark", "protocol"} & set(doc)):
        raise InputError(f"{p}: not a meta-evaluation result (no 'benchmark' or 'protocol' field)")
    return doc


def _manifest_samples(path: Path, notes: list[str], options: Mapping[str, Any] | None = None,
                      memo: Memo | None = None) -> dict[str, Any]:
    """The manifest's samples by id, read with the options the run read it with (columns,
    split, --edits...); parsed once per file version when ``memo`` keeps it (``view`` rebuilds often)."""
    from editlens.data.manifest import read_manifest

    if not path.exists():
        notes.append(f"manifest {path.name} not found: cards show no images (pass --manifest to point at it)")
        return {}
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns, json.dumps(dict(options or {}), sort_keys=True))
    hit = memo.get(key) if memo is not None else None
    if hit is not None:
        return hit
    try:
        report = read_manifest(path, skip_invalid=True, check_files=False, **dict(options or {}))
    except Exception as exc:  # noqa: BLE001 - a report should still show the scores
        notes.append(f"manifest {path.name} could not be read ({exc}): cards show no images")
        return {}
    by_id = {s.id: s for s in report.samples}
    return memo.put(key, by_id) if memo is not None else by_id


def _lock_holder_alive(run: Path) -> bool | None:
    from editlens.runner.lock import holder_alive

    return holder_alive(run)


def _completeness(run: Path, run_manifest: Mapping[str, Any], by_id: Mapping[str, Any], samples_in: Mapping[str, Any],
                  evaluators: list[str]) -> dict[str, Any]:
    """Where the run stands: finished / interrupted / running / stopped, N of M edits done,
    manifest rows skipped (with reasons) and evaluators that did not run (with reasons)."""
    inputs = run_manifest.get("inputs") or {}
    current = [e["name"] for e in run_manifest.get("evaluators") or [] if "name" in e] or evaluators
    total = inputs.get("samples")
    if not isinstance(total, int):
        total = len(samples_in) or len(by_id)
    done = sum(1 for rec in by_id.values() if all(e in rec["scores"] for e in current))
    if run_manifest.get("interrupted"):
        state = "interrupted"
    elif run_manifest.get("finished"):
        state = "finished"
    elif not run_manifest:
        state = "unknown"
    else:
        alive = _lock_holder_alive(run)
        state = "running" if alive else ("stopped" if alive is False else "unfinished")
    not_run = dict(inputs.get("skipped_metrics") or {})
    if state == "finished":
        for e in current:
            if e not in not_run and not any(e in rec["scores"] for rec in by_id.values()):
                not_run[e] = "no result recorded"
    reasons = inputs.get("skipped_row_reasons") or []
    return {"state": state, "done": done, "total": total, "started": run_manifest.get("started"),
            "finished": run_manifest.get("finished"), "skipped_rows": int(inputs.get("skipped_rows") or 0),
            "skipped_row_reasons": [[r[0], r[1]] for r in reasons if isinstance(r, (list, tuple)) and len(r) == 2],
            # outputs an editor of --edits did not write: not scored, each with the path looked for
            "missing_edits": [m for m in inputs.get("missing_edits") or [] if isinstance(m, dict)],
            "n_missing_edits": int(inputs.get("n_missing_edits") or 0),
            "not_run": not_run}


def _resize_note(images: Mapping[str, str], statuses: Iterable[str], memo: Memo | None = None) -> list[str]:
    """How the runner resized the sample's images: a non-source image of another size is
    resized to the source's size before scoring (size policy ``resize``); a sample that
    failed to load was not (its reason says why)."""
    from editlens.reporting.thumbs import image_size

    if "source" not in images or not any(s in ("scored", "unscored", "info", "skipped") for s in statuses):
        return []
    src = image_size(images["source"], memo)
    notes = []
    for role in ("edited", "reference"):
        if role in images and src is not None:
            got = image_size(images[role], memo)
            if got is not None and got != src:
                notes.append(f"{role} image is {got[0]}x{got[1]}, the source {src[0]}x{src[1]}: it was resized "
                             "to the source size before scoring")
    return notes


def _sample_part(key: tuple, rows: list[dict[str, Any]], images: Mapping[str, str], specs: Mapping[str, Any],
                 used: dict[tuple, SampleRecord], cache: ReportCache) -> SampleRecord:
    """What a sample's own rows and images give: scores (details parsed and trimmed), boxes,
    tags, unchanged flags, statuses and resize notes; remembered in ``cache.samples`` under
    ``key`` (its rows' content, its images' paths and identities, and the specs): ``view``
    rebuilds process only the samples whose results or images changed since the last build."""
    part = cache.samples.get(key)
    if part is None:
        scores: dict[str, ScoreEntry] = {}
        for r in rows:
            entry: ScoreEntry = {"status": r["status"], "value": r["value"]}
            if r["reason"]:
                entry["reason"] = r["reason"]
            if r["details"]:
                entry["details"] = _trim(json.loads(r["details"]))
            scores[r["evaluator"]] = entry
        statuses = sorted({e["status"] for e in scores.values()})
        part = SampleRecord(
            scores=scores, boxes=boxes_of(scores, specs), verdicts=verdict_tags(scores, specs),
            unchanged=unchanged_by(scores, specs),
            change_checked=any(getattr(specs.get(e), "unchanged_at", None) is not None and sc["status"] == "scored"
                               for e, sc in scores.items()),
            statuses=statuses, input_notes=_resize_note(images, statuses, cache.images), _key=key)
    used[key] = part
    return part


def _summaries(rows: list[dict[str, Any]], memo: Memo) -> list[dict[str, Any]]:
    """The evaluators' own summary tables, each remembered in ``memo`` under the content of its rows."""
    from editlens.reporting.runs import evaluator_summaries_from_rows, evaluators_with_summaries

    wanted = evaluators_with_summaries({r["evaluator"] for r in rows})
    by: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        if r["evaluator"] in wanted:
            by.setdefault(r["evaluator"], []).append(r)
    out = []
    for ev in sorted(by):
        key = (ev, tuple((r["model"], r["details"]) for r in by[ev]))
        hit = memo.get(key)
        if hit is None:
            parsed = [{**r, "details": json.loads(r["details"]) if r["details"] else None} for r in by[ev]]
            hit = memo.put(key, [{**t, "rows": _trim(t["rows"])} for t in evaluator_summaries_from_rows(parsed)])
        out += hit
    return out


#: the options of :func:`editlens.data.manifest.read_manifest` a run records (``inputs.manifest_options``)
_READ_OPTIONS = ("columns", "encoding", "delimiter", "split", "edits", "edits_pattern", "image_root", "clip_boxes")


def collect_run(run_dir: str | Path, manifest: str | Path | None = None, human: str | Path | None = None,
                seed: int = 0, n_boot: int = 1000, by: str | None = None,
                cache: ReportCache | None = None) -> RunData:
    """Everything the run report shows, as plain data (see module docstring). ``by``: the
    manifest column whose values are the report's categories (default ``edit_type``).
    ``cache``: what an earlier build of this report may lend this one (default: nothing)."""
    from editlens.metrics.spec import MEASURES
    from editlens.reporting.trust_html import load_probe

    cache = cache if cache is not None else ReportCache()
    run = Path(run_dir)
    run_manifest, rows = _read_store(run)
    notes: list[str] = []
    mpath, read_options, samples_in = _run_inputs(run_manifest, manifest, notes, cache)
    humans = _read_human(human) if human else {}
    _check_by(by, samples_in)
    evaluators, by_sample, models_of = _rows_by_sample(run_manifest, rows)
    specs = specs_of(evaluators)
    samples, group_list = _sample_records(by_sample, models_of, samples_in, humans, specs, by, notes, cache)
    _coverage_notes(samples, mpath, read_options, humans, by_sample, bool(human), notes)

    scored = {e for s in samples for e, sc in s["scores"].items() if sc["status"] == "scored"}
    scored_evaluators = [e for e in evaluators if e in scored]
    models = list(dict.fromkeys(s["model"] for s in samples))  # manifest order: the compare view's columns
    measures = {e: (specs[e].measures if specs[e] is not None else None) for e in evaluators}
    per_model = _per_model(samples, evaluators, models, seed, n_boot, cache.stats)
    completeness = _completeness(run, run_manifest, {s["id"]: s for s in samples}, samples_in, evaluators)
    completeness["resized"] = sum(1 for s in samples if s["input_notes"])
    source_totals = _source_totals(samples_in, by)
    board = _leaderboard(samples, samples_in, evaluators, specs, measures, models, source_totals,
                         completeness["not_run"], by, seed, n_boot, cache)
    arena = _arena(run)
    warning = _scripted_warning(run_manifest, arena)
    if warning:  # first of the report's notes, and the leaderboards' first line
        notes.insert(0, warning)
    return {
        "kind": "run",
        "warning": warning,
        "title": run.resolve().name,
        "run_dir": str(run),
        "run": _run_facts(run_manifest),
        "completeness": completeness,
        "evaluators": evaluators,
        "scored_evaluators": scored_evaluators,
        "higher_is_better": {e: (bool(specs[e].higher_is_better) if specs[e] is not None else None) for e in evaluators},
        "measures": measures,
        "measure_labels": dict(MEASURES),
        "descriptions": {e: specs[e].description for e in evaluators if specs[e] is not None},
        "layers": {e: specs[e].boxes.to_dict() for e in evaluators if specs[e] is not None and specs[e].boxes},
        "unchanged_evaluators": [e for e in evaluators if specs[e] is not None and specs[e].unchanged_at is not None],
        "models": models,
        "categories": sorted({s["category"] for s in samples if "category" in s}),
        "category_column": by or CATEGORY_COLUMN,
        "groups": group_list,
        "source_totals": source_totals,
        "samples": samples,
        "per_model": per_model,
        "leaderboard": board,
        # run-level tables evaluators contribute (registry metadata), e.g. DICE's ranking
        "summaries": _summaries(rows, cache.summaries),
        "human": _human_agreement(samples, scored_evaluators, seed, n_boot, cache.stats) if any("human" in s for s in samples) else None,
        "notes": notes,
        "probe": load_probe(run),  # `editlens probe`'s result, when the run was probed
        "arena": arena,  # `editlens arena`'s ratings, when the run has them
    }


def _read_store(run: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The run's manifest and its rows at each evaluator's latest settings."""
    from editlens.reporting.runs import _open

    store = _open(run)
    try:
        run_manifest = store.get_meta("manifest") or {}
        rows = store.rows(store.current_configs(), parse=False)  # details parsed only where they changed
    finally:
        store.close()
    return run_manifest, rows


def _run_inputs(run_manifest: Mapping[str, Any], manifest: str | Path | None, notes: list[str],
                cache: ReportCache) -> tuple[Path | None, dict[str, Any], dict[str, Any]]:
    """The manifest the report reads (given, or the one the run records), the
    read options the run used and its samples by id."""
    inputs = run_manifest.get("inputs") or {}
    mpath = Path(manifest) if manifest else (Path(inputs["manifest"]) if inputs.get("manifest") else None)
    read_options = {k: v for k, v in (inputs.get("manifest_options") or {}).items() if k in _READ_OPTIONS}
    samples_in = _manifest_samples(mpath, notes, read_options, cache.manifests) if mpath else {}
    if mpath is None:
        notes.append("the run records no manifest path: cards show no images (pass --manifest)")
    return mpath, read_options, samples_in


def _check_by(by: str | None, samples_in: Mapping[str, Any]) -> None:
    """Refuses a ``--by`` column the manifest does not have, naming the ones it has."""
    if by not in (None, "model", CATEGORY_COLUMN) and samples_in and not any(by in s.metadata for s in samples_in.values()):
        available = sorted({c for s in samples_in.values() for c in s.metadata} | {"model", CATEGORY_COLUMN})
        raise InputError(f"--by {by!r}: the run's manifest has no such column; group by one of {', '.join(available)}")


def _rows_by_sample(run_manifest: Mapping[str, Any], rows: list[dict[str, Any]]
                    ) -> tuple[list[str], dict[str, list[dict[str, Any]]], dict[str, str]]:
    """The evaluators with rows (the run's order first), each sample's rows and its editing model."""
    evaluators = [e["name"] for e in run_manifest.get("evaluators", []) if "name" in e]
    by_sample: dict[str, list[dict[str, Any]]] = {}
    models_of: dict[str, str] = {}
    present: set[str] = set()
    for r in rows:
        by_sample.setdefault(r["sample_id"], []).append(r)
        models_of.setdefault(r["sample_id"], r["model"] or "(none)")
        present.add(r["evaluator"])
    evaluators += sorted(present - set(evaluators))
    # evaluators the run lists but that have no row yet (a run that just started) have nothing to show
    return [e for e in evaluators if e in present], by_sample, models_of


def _category(src: Any, by: str | None) -> str | None:
    """A manifest sample's category under ``by`` ("(none)" when grouping by a column it leaves empty)."""
    from editlens.reporting.runs import group_label

    cat = src.metadata.get(by or CATEGORY_COLUMN) if by != "model" else src.model
    if cat is not None and str(cat).strip():
        return group_label(cat)
    return "(none)" if by is not None else None


def _manifest_fields(sid: str, src: Any, by: str | None, humans: dict[str, float],
                     notes: list[str]) -> SampleRecord:
    """What a sample's card takes from its manifest row: instruction, category, plain
    columns (and its human score, into ``humans``, unless the human file gave one)."""
    rec: SampleRecord = {"instruction": src.instruction}
    category = _category(src, by)
    if category is not None:
        rec["category"] = category
    cols = {k: v for k, v in src.columns().items() if not isinstance(v, (list, dict)) and k not in HUMAN_COLUMNS}
    if cols:
        rec["columns"] = cols
    meta_h = next((src.metadata[c] for c in HUMAN_COLUMNS if c in src.metadata), None)
    if meta_h is not None and sid not in humans:
        try:
            humans[sid] = float(meta_h)
        except (TypeError, ValueError):
            notes.append(f"sample {sid}: human score {meta_h!r} is not a number; ignored")
    return rec


def _sample_records(by_sample: dict[str, list[dict[str, Any]]], models_of: Mapping[str, str],
                    samples_in: Mapping[str, Any], humans: dict[str, float], specs: Mapping[str, Any],
                    by: str | None, notes: list[str],
                    cache: ReportCache) -> tuple[list[SampleRecord], list[dict[str, Any]]]:
    """One card per sample (manifest order) and the compare view's groups (one
    source with one instruction, edited by different editors)."""
    from editlens.core.embedded import source_identity

    order = {sid: i for i, sid in enumerate(samples_in)}
    samples: list[SampleRecord] = []
    groups: dict[tuple[str, str], int] = {}
    group_list: list[dict[str, Any]] = []
    used: dict[tuple, SampleRecord] = {}
    for sid in sorted(by_sample, key=lambda s: (order.get(s, math.inf), s)):
        src = samples_in.get(sid)
        rec: SampleRecord = {"id": sid, "model": models_of[sid]}
        # file paths, or references to images inside a parquet/arrow file: the only images a report opens
        images = src.image_refs() if src is not None else {}
        if src is not None:
            rec.update(_manifest_fields(sid, src, by, humans, notes))
        rec["images"] = images
        srows = by_sample[sid]
        # an image's identity: one rewritten in place (another size) changes its resize note
        key = (sid, tuple((role, p, source_identity(p)) for role, p in sorted(images.items())),
               tuple((r["evaluator"], id(specs[r["evaluator"]]), r["config_hash"],
                                                          r["status"], r["value"], r["reason"], r["details"]) for r in srows))
        rec.update(_sample_part(key, srows, images, specs, used, cache))
        # edits of one source with one instruction, by different editors: a row of the compare view
        gkey = (images.get("source") or f"id:{sid}", rec.get("instruction") or "")
        if gkey not in groups:
            groups[gkey] = len(group_list)
            group_list.append({"source": images.get("source"), "instruction": rec.get("instruction")})
        rec["group"] = groups[gkey]
        if sid in humans:
            rec["human"] = humans[sid]
        samples.append(rec)
    cache.samples = used  # keep what this build used: a run's samples, at their latest results
    return samples, group_list


def _coverage_notes(samples: list[SampleRecord], mpath: Path | None, read_options: Mapping[str, Any],
                    humans: Mapping[str, float], by_sample: Mapping[str, Any], human_given: bool,
                    notes: list[str]) -> None:
    """Notes on cards without images and human scores matching no sample: never 200 empty cards without a word."""
    no_images = sum(1 for s in samples if not s["images"])
    if mpath is not None and no_images:
        notes.append(f"{no_images} of {len(samples)} cards show no images: their ids are not in {mpath.name} as read "
                     f"(columns {read_options.get('columns') or 'as named'}); pass --manifest, or rerun with the same --columns")
    missing_human = set(humans) - set(by_sample)
    if human_given and missing_human:
        notes.append(f"{len(missing_human)} human score id(s) match no sample of the run")


def _source_totals(samples_in: Mapping[str, Any], by: str | None) -> dict[str, int]:
    """Sources in the whole manifest, per scope: a partial run's tables say how many of them they cover."""
    planned: dict[str, set] = {}
    for src in samples_in.values():
        source_key = (str(src.source), src.instruction)
        planned.setdefault("all", set()).add(source_key)
        category = _category(src, by)
        if category is not None:
            planned.setdefault(f"type:{category}", set()).add(source_key)
    return {k: len(v) for k, v in planned.items()}


def _leaderboard(samples: list[SampleRecord], samples_in: Mapping[str, Any], evaluators: list[str],
                 specs: Mapping[str, Any], measures: Mapping[str, str | None], models: list[str],
                 source_totals: Mapping[str, int], not_run: Mapping[str, str], by: str | None, seed: int,
                 n_boot: int, cache: ReportCache) -> dict[str, Any]:
    """The leaderboards (grouped by ``by``), and why nothing ranks when no table covers all edits."""
    from editlens.reporting.leaderboard import leaderboards

    board = leaderboards(samples, evaluators, measures, {e: _hib(specs[e]) for e in evaluators}, models,
                         seed=seed, n_boot=n_boot, source_totals=source_totals, memo=cache.stats)
    board["by"] = by or CATEGORY_COLUMN
    if not any(t["scope"] == "all" for t in board["tables"]):
        board["why_empty"] = _why_empty(samples, samples_in, evaluators, measures, not_run)
    return board


def _scripted_warning(run_manifest: Mapping[str, Any], arena: Mapping[str, Any] | None) -> str | None:
    """The warning of a run judged by the scripted judge (no model: its numbers say nothing)."""
    from editlens.backends.scripted_judge import WARNING, scripted_in

    if scripted_in(run_manifest.get("evaluators")) or scripted_in((arena or {}).get("notes")):
        return WARNING
    return None


def _run_facts(run_manifest: Mapping[str, Any]) -> dict[str, Any]:
    """The run's command, times, device and software, as its manifest records them."""
    environment = run_manifest.get("environment") or {}
    return {k: run_manifest.get(k) for k in ("command", "started", "finished", "device", "executor", "interrupted")} \
        | {"git_commit": environment.get("git_commit"),
           "editlens": environment.get("editlens"),
           "skipped_metrics": (run_manifest.get("inputs") or {}).get("skipped_metrics") or {}}


def _why_empty(samples: list[SampleRecord], samples_in: Mapping[str, Any], evaluators: list[str],
               measures: Mapping[str, str | None], not_run: Mapping[str, str]) -> dict[str, Any]:
    """:func:`~editlens.reporting.leaderboard.why_nothing_ranks` of a collected run."""
    from editlens.reporting.leaderboard import why_nothing_ranks

    status: dict[str, dict[str, int]] = {}
    reasons: dict[str, dict[str, int]] = {}
    for s in samples:
        for ev, sc in s["scores"].items():
            c = status.setdefault(ev, {})
            c[sc["status"]] = c.get(sc["status"], 0) + 1
            if sc["status"] != "scored" and sc.get("reason"):
                r = reasons.setdefault(ev, {})
                r[sc["reason"]] = r.get(sc["reason"], 0) + 1
    top = {ev: max(r.items(), key=lambda kv: kv[1])[0] for ev, r in reasons.items()}
    all_measures = dict(measures)
    for ev, spec in specs_of([e for e in not_run if e not in measures]).items():
        all_measures[ev] = spec.measures if spec is not None else None
    has_ref = any("reference" in s["images"] for s in samples) or any(getattr(s, "reference", None) for s in samples_in.values())
    has_caps = any(getattr(s, "target_caption", None) for s in samples_in.values())
    return why_nothing_ranks(evaluators, all_measures, status, top, not_run, has_ref, has_caps)


def _arena(run: Path) -> dict[str, Any] | None:
    """``RUN/arena/arena.json`` (written by ``editlens arena RUN``), or ``None``."""
    from editlens.runner.arena import load_arena

    try:
        return load_arena(run / "arena")
    except InputError:
        return None  # an unreadable arena file must not stop the report of the run


def _hib(spec: Any) -> bool | None:
    return None if spec is None else bool(spec.higher_is_better)


def _per_model(samples: list[SampleRecord], evaluators: Iterable[str], models: list[str], seed: int,
               n_boot: int, memo: Memo | None = None) -> list[dict[str, Any]]:
    """Per (editing model, evaluator): status counts, and the mean and bootstrap 95% CI of
    scored values (the numbers of ``editlens runs summary --by model``: values in sample-id
    order, the same seeded bootstrap; remembered in ``memo`` by content)."""
    from editlens.reporting.stats import cached_bootstrap_ci

    counts: dict[tuple[str, str], dict[str, int]] = {}
    values: dict[tuple[str, str], list[tuple[str, float]]] = {}
    for s in samples:
        for ev, sc in s["scores"].items():
            key = (ev, s["model"])
            c = counts.setdefault(key, {"scored": 0, "skipped": 0, "unscored": 0, "failed": 0, "info": 0})
            c[sc["status"]] = c.get(sc["status"], 0) + 1
            if sc["status"] == "scored" and sc["value"] is not None:
                values.setdefault(key, []).append((s["id"], sc["value"]))
    out = []
    for ev in evaluators:
        for m in models:
            if (ev, m) not in counts:
                continue
            v = [x for _, x in sorted(values.get((ev, m), []))]
            ci = list(cached_bootstrap_ci(v, n_boot=n_boot, seed=seed, memo=memo)) if len(v) >= 2 else None
            out.append({"evaluator": ev, "model": m, "n": len(v), "mean": sum(v) / len(v) if v else None,
                        "ci": ci, "counts": counts[(ev, m)]})
    return out


def _human_agreement(samples: list[SampleRecord], evaluators: list[str], seed: int,
                     n_boot: int, memo: Memo | None = None) -> dict[str, Any]:
    """Correlation of each scored evaluator with the human scores, overall and
    per editing model (Spearman, bootstrap 95% CI); unscored samples are left out.
    Remembered in ``memo`` by content: a rebuild recomputes only what changed."""
    import numpy as np

    from editlens.meta.correlation import correlate
    from editlens.reporting.stats import cached

    def corr(x: list[float], y: list[float], method: str) -> dict[str, Any]:
        xa, ya = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
        return cached("corr", [xa, ya], (method, n_boot, seed),
                      lambda: _trim(correlate(x, y, method, n_boot=n_boot, seed=seed).to_dict()), memo)

    out: dict[str, Any] = {"overall": [], "per_model": [], "points": {}}
    for ev in evaluators:
        pts = [(sc["value"], s["human"], s["model"]) for s in samples
               if "human" in s and (sc := s["scores"].get(ev)) is not None and sc["status"] == "scored"
               and sc["value"] is not None]
        if len(pts) < 2:
            continue
        out["points"][ev] = pts
        for method in ("pearson", "spearman", "kendall"):
            out["overall"].append({"evaluator": ev, **corr([p[0] for p in pts], [p[1] for p in pts], method)})
        for m in sorted({p[2] for p in pts}):
            sub = [p for p in pts if p[2] == m]
            if len(sub) >= 2:
                out["per_model"].append({"evaluator": ev, "model": m,
                                         **corr([p[0] for p in sub], [p[1] for p in sub], "spearman")})
    return out

"""EditScore's EditReward-Bench (``EditScore/EditReward-Bench`` on the Hugging Face hub, split
``train``; arrow files of ``datasets.save_to_disk`` or the hub's parquet): one row per pair with
``key`` (two edit ids), ``instruction``, ``input_image``, ``output_images`` (two; the first is the
preferred one), ``task_type`` (13 subtasks) and ``dimension`` (``prompt_following``,
``consistency``, ``overall``). Protocol (:func:`editscore_bench_report`): accuracy = share of pairs
whose first edit scores strictly higher (ties are wrong), per subtask and dimension; average =
unweighted mean over subtasks; four groups of subtasks."""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from editlens.bench.base import BenchSpec
from editlens.bench.evaluate import HumanLabelBenchmark, MetaReport, evaluated, f, no_options, require
from editlens.bench.labels import (
    Edit,
    LabelledPairs,
    Pair,
    digest,
    image_bytes,
    load_results,
    table_rows,
)
from editlens.bench.registry import register
from editlens.errors import InputError

#: EditScore's subtasks, in the order of its tables, and its four groups
EDITSCORE_TASKS = ("background_change", "color_alter", "style_change", "subject-add", "subject-remove",
                   "subject-replace", "material_alter", "motion_change", "ps_human", "text_change", "tone_transfer",
                   "extract", "compose")

EDITSCORE_GROUPS = {"object": ("subject-add", "subject-remove", "subject-replace"),
                    "appearance": ("color_alter", "material_alter", "style_change", "tone_transfer"),
                    "scene": ("background_change", "extract"),
                    "advanced": ("ps_human", "text_change", "motion_change", "compose")}

EDITSCORE_DIMENSIONS = ("prompt_following", "consistency", "overall")

DOWNLOAD = ("https://huggingface.co/datasets/EditScore/EditReward-Bench (hf download "
            "EditScore/EditReward-Bench --repo-type dataset)")


def read_editscore_bench(path: str | Path, with_images: bool = True) -> LabelledPairs:
    p = Path(path)
    needed = ("key", "instruction", "input_image", "output_images", "task_type", "dimension")
    edits: dict[str, Edit] = {}
    pairs: list[Pair] = []
    seen: dict[str, str] = {}
    for where, base, row in table_rows(p, needed):
        keys = row["key"]
        if not isinstance(keys, (list, tuple)) or len(keys) != 2 or not all(isinstance(k, str) and k for k in keys):
            raise InputError(f"{where}: 'key' must be a list of two edit ids, got {keys!r}")
        instr = row["instruction"]
        if not isinstance(instr, str) or not instr.strip():
            raise InputError(f"{where}: empty instruction")
        dim, task = row["dimension"], row["task_type"]
        if dim not in EDITSCORE_DIMENSIONS:
            raise InputError(f"{where}: dimension {dim!r} is not one of {EDITSCORE_DIMENSIONS}")
        if with_images:
            outs = row["output_images"]
            if not isinstance(outs, list) or len(outs) != 2:
                raise InputError(f"{where}: 'output_images' must hold two images")
            src = image_bytes(row["input_image"], f"{where} input_image", base)
            for k, cell in zip(keys, outs):
                data = image_bytes(cell, f"{where} output_images", base)
                fp = digest(src) + digest(data) + instr
                if k in seen and seen[k] != fp:
                    raise InputError(f"{where}: edit {k!r} appears with another image or instruction than before")
                seen[k] = fp
                edits.setdefault(k, Edit(k, instr.strip(), src, data, extra={"task": task}))
        else:
            for k in keys:
                edits.setdefault(k, Edit(k, instr.strip(), None, None, extra={"task": task}))
        pairs.append(Pair(f"{task}/{dim}/{len(pairs)}", keys[0], keys[1], 1, {"task": task, "dimension": dim}))
    return LabelledPairs("editscore-bench", str(p), edits, pairs, {"rows": len(pairs)})


def editscore_bench_report(bench: LabelledPairs, results: dict[str, dict[str, Any]], metric: str) -> dict[str, Any]:
    """EditScore's protocol: per subtask and dimension, the share of pairs whose
    preferred (first) edit scores strictly higher. A dimension reads the
    evaluator's sub-score of the same name from the result details
    (EditScore's ``prompt_following``, ``consistency``; ``overall`` is its
    value); an evaluator without it is read by its value, and the report says so.
    Pairs with an unscored edit are left out and counted (``accuracy``), and
    also counted as wrong (``accuracy_unscored_as_wrong``: the release always
    has a number)."""
    from editlens.meta.direction import sign

    fields_used: dict[str, Counter] = defaultdict(Counter)
    per: dict[tuple[str, str], list[int | None]] = defaultdict(list)
    turn = sign(metric)  # strictly *better*, in the evaluator's direction
    for pair in bench.pairs:
        dim = pair.meta["dimension"]
        sa, fa = _field(results.get(pair.a), dim)
        sb, fb = _field(results.get(pair.b), dim)
        if fa:
            fields_used[dim][fa] += 1
        per[(pair.meta["task"], dim)].append(None if sa is None or sb is None else int(turn * (sa - sb) > 0))
    tasks = [t for t in EDITSCORE_TASKS if any(k[0] == t for k in per)] + sorted(
        {k[0] for k in per} - set(EDITSCORE_TASKS))
    dims: dict[str, Any] = {}
    for dim in EDITSCORE_DIMENSIONS:
        by_task, strict_task, counts = {}, {}, {}
        for t in tasks:
            flags = per.get((t, dim))
            if not flags:
                continue
            scored = [x for x in flags if x is not None]
            by_task[t] = sum(scored) / len(scored) if scored else None
            strict_task[t] = sum(scored) / len(flags)
            counts[t] = {"pairs": len(flags), "unscored": len(flags) - len(scored)}
        if not by_task:
            continue
        vals = [v for v in by_task.values() if v is not None]
        groups = {g: _mean([by_task.get(t) for t in ts]) for g, ts in EDITSCORE_GROUPS.items()}
        dims[dim] = {"average": float(np.mean(vals)) if vals else None,
                     "average_unscored_as_wrong": float(np.mean(list(strict_task.values()))),
                     "per_task": by_task, "per_task_unscored_as_wrong": strict_task, "groups": groups,
                     "counts": counts, "score_field": dict(fields_used.get(dim, {}))}
    n = sum(len(v) for v in per.values())
    unscored = sum(1 for v in per.values() for x in v if x is None)
    main = dims.get("overall", {}).get("average")
    return {"benchmark": "editscore-editreward-bench", "protocol": "editscore: preferred edit scores strictly higher "
            "(ties wrong), mean over the 13 subtasks", "metric": metric, "value": main, "accuracy": main,
            "dimensions": dims, "n_pairs": n, "n_unscored_pairs": unscored, "n_edits": len(bench.edits)}


def _mean(xs: list[float | None]) -> float | None:
    v = [x for x in xs if x is not None]
    return float(np.mean(v)) if v else None



def _field(result: dict[str, Any] | None, dim: str) -> tuple[float | None, str | None]:
    if not result or result.get("status") != "scored":
        return None, None
    details = result.get("details") or {}
    if dim != "overall" and isinstance(details.get(dim), (int, float)) and not isinstance(details.get(dim), bool):
        return float(details[dim]), f"details.{dim}"
    return float(result["value"]), "value"



def _report(bench: str | Path, predictions: str | Path, metric: str | None = None) -> dict[str, Any]:
    return editscore_bench_report(EditScoreBench().read_pairs(bench), load_results(predictions, metric), metric or "score")


@register
class EditScoreBench(HumanLabelBenchmark):
    spec = BenchSpec(
        name="editscore-bench",
        title="EditReward-Bench (EditScore)",
        homepage="https://huggingface.co/datasets/EditScore/EditReward-Bench",
        download="hf download EditScore/EditReward-Bench --repo-type dataset",
        layout="arrow (save_to_disk) or parquet: key (two edit ids), instruction, input_image, output_images (two; "
               "the first preferred), task_type, dimension",
        label_kind="pairwise",
        columns={"key": "the two edit ids", "output_images": "the two edits, preferred first",
                 "task_type": "category (13)", "dimension": "prompt_following / consistency / overall"},
        categories=("background_change", "color_alter", "style_change", "subject-add", "subject-remove",
                    "subject-replace", "material_alter", "motion_change", "ps_human", "text_change",
                    "tone_transfer", "extract", "compose"),
        protocols={"editscore": "share of pairs whose preferred edit scores strictly higher (ties wrong), per "
                   "subtask and dimension; mean over the 13 subtasks; four groups"},
        table_layout={"columns": ["prompt_following", "consistency", "overall"], "rows": "13 subtasks + 4 groups"},
        usage="editlens meta-eval prepare editscore-bench DIR --out P && editlens run P/manifest.jsonl ... && editlens meta-eval run editscore-bench --data P --predictions RUN/results.jsonl --metric NAME",
        identical="strictly-higher rule, per-subtask accuracy and the unweighted subtask mean",
        differs="pairs with an unscored edit are left out and counted (and also reported as wrong)",
    )
    protocol_functions = {"editscore": _report}
    report_title = "EditScore EditReward-Bench"
    data_help = "the published arrow/parquet folder, or a folder from `editlens meta-eval prepare editscore-bench`"
    predictions_help = "an `editlens run` results.jsonl of the prepared manifest (with --metric) or {id, score} JSONL"
    prepare_download = DOWNLOAD

    def read_published(self, path: Path, with_images: bool = False, **options: Any) -> LabelledPairs:
        return read_editscore_bench(path, with_images=with_images)

    def labels(self, path: str | Path, **options: Any) -> Any:
        return self.read_pairs(path, **options)

    def evaluate(self, data: str | Path, predictions: str | Path | None = None, *, protocol: str | None = None,
                 metric: str | None = None, verdicts: str | Path | None = None, n_boot: int = 1000, seed: int = 0,
                 **options: Any) -> MetaReport:
        no_options(self.spec.name, options)
        if predictions is None or verdicts is not None:
            raise InputError("EditScore's EditReward-Bench reads an evaluator's scores: give --predictions")
        rep = _report(data, predictions, metric)
        require(rep["n_pairs"] - rep["n_unscored_pairs"], "no pair has both edits scored")
        rep["evaluated"] = evaluated(predictions=predictions, metric=metric, human=data)
        return MetaReport(rep, self.report_title)

    def summary(self, rep: Mapping[str, Any]) -> list[str]:
        lines = [f"EditReward-Bench (EditScore): {rep['n_pairs']} pairs, {rep['n_unscored_pairs']} with an unscored edit"]
        for dim, d in rep["dimensions"].items():
            groups = ", ".join(f"{g} {f(v)}" for g, v in d["groups"].items())
            lines.append(f"  {dim:<17} average {f(d['average'])} (unscored as wrong {f(d['average_unscored_as_wrong'])}); "
                         f"{groups}; read from {', '.join(d['score_field']) or '-'}")
        return lines

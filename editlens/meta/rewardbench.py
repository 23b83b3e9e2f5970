"""Human-label benchmarks of edit reward models, read as their owners publish them.

* **EditScore's EditReward-Bench** (``EditScore/EditReward-Bench`` on the
  Hugging Face hub, split ``train``; arrow files of ``datasets.save_to_disk``
  or the hub's parquet): one row per pair with ``key`` (two edit ids),
  ``instruction``, ``input_image``, ``output_images`` (two; the first is
  the preferred one), ``task_type`` (13 subtasks) and ``dimension``
  (``prompt_following``, ``consistency``, ``overall``). Protocol
  (:func:`editscore_bench_report`): accuracy = share of pairs whose first
  edit scores strictly higher (ties are wrong), per subtask and dimension;
  average = unweighted mean over subtasks; four groups of subtasks.
* **TIGER-Lab's EditReward-Bench** (``TIGER-Lab/EditReward-Bench``; parquet
  under ``2pair/``, ``3pair/``, ``4pair/``, or one table with a ``dataset``
  column): one row per compared pair with ``id`` (group = the part before
  the first ``_``), ``instruction``, ``source_image``, ``candidate_1``,
  ``candidate_2``, ``ranking`` (``A>B``, ``C>A``, ``A=B``...),
  ``comparison_type`` (``AvsC``: candidate 1 is A, candidate 2 is C),
  ``score_1``, ``score_2``, ``model_1``, ``model_2``, ``dataset``.
  Protocol (:func:`editreward_bench_report`): 2-way pairs tie-calibrated
  accuracy; 3/4-way pairs C/(C+D); strict group accuracy (every pair of a
  group ordered as people ordered it) per K and pooled.
* **MMRB2 image editing** (``edit.json`` built by the MMRB2 repository's
  ``benchmark/build_from_hf.py``): ``{"pairs": [...]}`` with ``id``,
  ``prompt_content`` (``[["text", ...], ["image", "input_images/..."]]``),
  ``response_a``/``response_b`` (``model_name``, ``response_content``),
  ``chosen`` (``A``/``B``) and ``human_annotations``. Protocol
  (:func:`mmrb2_report`): every pair judged in both orders; accuracy =
  (forward correct + flipped reverse correct) / judgements made, with
  accuracy per order and the consistency of the two orders.

:func:`prepare` turns any of them into what editlens runs on: the images as
files, ``manifest.jsonl`` (one row per distinct edit, for ``editlens run``)
and ``pairs.jsonl`` (one row per labelled pair, for ``editlens compare
--pairs`` and ``meta-eval pairwise``). The reports read the published file
or the prepared folder, and an ``editlens run``'s ``results.jsonl`` (sub-scores
from its details where the evaluator has them) or a ``compare --pairs``
verdicts file.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from editlens.errors import InputError
from editlens.meta.protocols import accuracy_with_ties

KINDS = ("editscore-bench", "editreward-bench", "mmrb2")
#: EditScore's subtasks, in the order of its tables, and its four groups
EDITSCORE_TASKS = ("background_change", "color_alter", "style_change", "subject-add", "subject-remove",
                   "subject-replace", "material_alter", "motion_change", "ps_human", "text_change", "tone_transfer",
                   "extract", "compose")
EDITSCORE_GROUPS = {"object": ("subject-add", "subject-remove", "subject-replace"),
                    "appearance": ("color_alter", "material_alter", "style_change", "tone_transfer"),
                    "scene": ("background_change", "extract"),
                    "advanced": ("ps_human", "text_change", "motion_change", "compose")}
EDITSCORE_DIMENSIONS = ("prompt_following", "consistency", "overall")
DOWNLOADS = {
    "editscore-bench": "https://huggingface.co/datasets/EditScore/EditReward-Bench (hf download "
                       "EditScore/EditReward-Bench --repo-type dataset)",
    "editreward-bench": "https://huggingface.co/datasets/TIGER-Lab/EditReward-Bench (hf download "
                        "TIGER-Lab/EditReward-Bench --repo-type dataset)",
    "mmrb2": "https://github.com/facebookresearch/MMRB2: python benchmark/build_from_hf.py --output-dir DIR "
             "(writes DIR/edit.json and its images)",
}


@dataclass
class Edit:
    id: str
    instruction: str
    source: Any  # bytes (an encoded image), or a path
    edited: Any
    model: str | None = None
    group: str | None = None  # candidates that compete (best-of-n's 'group' column)
    extra: dict[str, Any] = field(default_factory=dict)  # more manifest columns


@dataclass
class Pair:
    id: str
    a: str  # edit ids
    b: str
    label: int  # +1: a preferred, -1: b, 0: tie
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class Benchmark:
    kind: str
    source: str
    edits: dict[str, Edit]
    pairs: list[Pair]
    info: dict[str, Any] = field(default_factory=dict)


# ----------------------------------------------------------------------------------------------- reading tables

def _table_files(path: Path, suffixes: tuple[str, ...]) -> list[Path]:
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise InputError(f"{path}: no such file or directory")
    files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in suffixes and not p.name.startswith("."))
    if not files:
        raise InputError(f"{path}: no {' or '.join(suffixes)} files in it")
    return files


def _read_table(f: Path, columns: list[str] | None = None) -> Any:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        if f.suffix == ".parquet":
            return pq.read_table(f, columns=columns)
        with pa.memory_map(str(f)) as src:  # datasets' .arrow files are IPC streams; files are accepted too
            try:
                table = pa.ipc.open_stream(src).read_all()
            except pa.ArrowInvalid:
                src.seek(0)
                table = pa.ipc.open_file(src).read_all()
        return table.select(columns) if columns else table
    except (pa.ArrowInvalid, pa.ArrowKeyError, OSError, KeyError) as exc:
        raise InputError(f"{f}: cannot read it as {'parquet' if f.suffix == '.parquet' else 'arrow'} "
                         f"({type(exc).__name__}: {exc})") from None


def _rows(files: list[Path], needed: tuple[str, ...], images: tuple[str, ...], with_images: bool
          ) -> Iterator[tuple[Path, int, dict[str, Any]]]:
    import pyarrow.parquet as pq

    for f in files:
        probe = pq.read_schema(f).names if f.suffix == ".parquet" else _read_table(f).schema.names
        missing = [c for c in needed if c not in probe]
        if missing:
            raise InputError(f"{f}: missing column(s) {missing}; it has {probe}")
        cols = [c for c in probe if with_images or c not in images]
        table = _read_table(f, cols)
        for i, row in enumerate(table.to_pylist()):
            yield f, i, row


def _image_bytes(cell: Any, where: str, base: Path) -> bytes:
    """The encoded bytes of a ``datasets`` Image cell (``{"bytes", "path"}``) or raw bytes."""
    if isinstance(cell, (bytes, bytearray)):
        return bytes(cell)
    if isinstance(cell, dict):
        if cell.get("bytes"):
            return bytes(cell["bytes"])
        if cell.get("path"):
            p = Path(cell["path"])
            p = p if p.is_absolute() else base / p
            if p.is_file():
                return p.read_bytes()
            raise InputError(f"{where}: image path {cell['path']!r} not found (relative to {base})")
    raise InputError(f"{where}: not an image cell (expected {{'bytes', 'path'}} or bytes), got {type(cell).__name__}")


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:20]


# ----------------------------------------------------------------------------------------------- EditScore's bench

def read_editscore_bench(path: str | Path, with_images: bool = True) -> Benchmark:
    p = Path(path)
    files = _table_files(p, (".arrow", ".parquet"))
    needed = ("key", "instruction", "input_image", "output_images", "task_type", "dimension")
    edits: dict[str, Edit] = {}
    pairs: list[Pair] = []
    seen: dict[str, str] = {}
    for f, i, row in _rows(files, needed, ("input_image", "output_images"), with_images):
        where = f"{f} row {i}"
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
            src = _image_bytes(row["input_image"], f"{where} input_image", f.parent)
            for k, cell in zip(keys, outs):
                data = _image_bytes(cell, f"{where} output_images", f.parent)
                fp = _digest(src) + _digest(data) + instr
                if k in seen and seen[k] != fp:
                    raise InputError(f"{where}: edit {k!r} appears with another image or instruction than before")
                seen[k] = fp
                edits.setdefault(k, Edit(k, instr.strip(), src, data, extra={"task": task}))
        else:
            for k in keys:
                edits.setdefault(k, Edit(k, instr.strip(), None, None, extra={"task": task}))
        pairs.append(Pair(f"{task}/{dim}/{len(pairs)}", keys[0], keys[1], 1, {"task": task, "dimension": dim}))
    return Benchmark("editscore-bench", str(p), edits, pairs, {"rows": len(pairs)})


def editscore_bench_report(bench: Benchmark, results: dict[str, dict[str, Any]], metric: str) -> dict[str, Any]:
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


# ----------------------------------------------------------------------------------------------- TIGER-Lab's bench

_RANK = re.compile(r"^\s*([A-D])\s*([<>=])\s*([A-D])(?:\s*=\s*(?:Good|Bad))?\s*$", re.I)


def _group_of(pid: str, k: int) -> str:
    if k == 2:
        return pid
    return pid.split("_")[0] if "_" in pid else pid[:10]  # the release's grouping rule


def read_editreward_bench(path: str | Path, with_images: bool = True) -> Benchmark:
    p = Path(path)
    files = _table_files(p, (".parquet", ".arrow"))
    needed = ("id", "instruction", "source_image", "candidate_1", "candidate_2", "ranking", "comparison_type")
    edits: dict[str, Edit] = {}
    pairs: list[Pair] = []
    seen: dict[str, str] = {}
    for f, i, row in _rows(files, needed, ("source_image", "candidate_1", "candidate_2"), with_images):
        where = f"{f} row {i}"
        subset = row.get("dataset") or next((part for part in f.parts if part in ("2pair", "3pair", "4pair")), None)
        if subset not in ("2pair", "3pair", "4pair"):
            raise InputError(f"{where}: cannot tell whether it is a 2-, 3- or 4-way comparison (no 'dataset' column "
                             "and not under a 2pair/3pair/4pair folder)")
        k = int(subset[0])
        pid = str(row["id"])
        ctype = str(row["comparison_type"] or "")
        if len(ctype) != 4 or ctype[1:3].lower() != "vs":
            raise InputError(f"{where}: comparison_type {ctype!r} is not like 'AvsB'")
        l1, l2 = ctype[0].upper(), ctype[3].upper()
        m = _RANK.match(str(row["ranking"] or ""))
        if not m or {m.group(1).upper(), m.group(3).upper()} != {l1, l2}:
            raise InputError(f"{where}: ranking {row['ranking']!r} does not compare {l1} and {l2}")
        label = 0 if m.group(2) == "=" else (1 if (m.group(1).upper() == l1) == (m.group(2) == ">") else -1)
        instr = str(row["instruction"] or "").strip()
        if not instr:
            raise InputError(f"{where}: empty instruction")
        group = _group_of(pid, k)
        ids = []
        for letter, col, mcol in ((l1, "candidate_1", "model_1"), (l2, "candidate_2", "model_2")):
            eid = f"{subset}/{group}/{letter}"
            ids.append(eid)
            if with_images:
                src = _image_bytes(row["source_image"], f"{where} source_image", f.parent)
                data = _image_bytes(row[col], f"{where} {col}", f.parent)
                fp = _digest(src) + _digest(data) + instr
                if eid in seen and seen[eid] != fp:
                    raise InputError(f"{where}: candidate {letter} of group {group} differs from the same candidate "
                                     "in another row of the group")
                seen[eid] = fp
                edits.setdefault(eid, Edit(eid, instr, src, data, row.get(mcol), f"{subset}/{group}"))
            else:
                edits.setdefault(eid, Edit(eid, instr, None, None, row.get(mcol), f"{subset}/{group}"))
        pairs.append(Pair(f"{subset}/{pid}", ids[0], ids[1], label,
                          {"k": k, "group": f"{subset}/{group}", "comparison_type": ctype,
                           "ranking": row["ranking"], "scores": [row.get("score_1"), row.get("score_2")]}))
    return Benchmark("editreward-bench", str(p), edits, pairs,
                     {"groups": len({pr.meta["group"] for pr in pairs}), "rows": len(pairs)})


def _concordance(h: list[int], d: list[float]) -> dict[str, Any]:
    """C/(C+D+Tm) with no model ties allowed (an exact tie is discordant), as the release computes 3/4-way accuracy."""
    c = sum(1 for hi, di in zip(h, d) if hi != 0 and hi * di > 0)
    disc = sum(1 for hi, di in zip(h, d) if hi != 0 and not hi * di > 0)
    return {"accuracy": c / (c + disc) if c + disc else None, "concordant": c, "discordant": disc,
            "human_ties_left_out": sum(1 for hi in h if hi == 0)}


def editreward_bench_report(bench: Benchmark, scores: dict[str, float], metric: str) -> dict[str, Any]:
    """TIGER-Lab's protocol over the pairs whose edits are both scored:
    2-way tie-calibrated accuracy (Deutsch et al. 2023), 3/4-way C/(C+D),
    strict group accuracy per K (every pair of the group ordered as people
    ordered it; a human tie needs |difference| within the 2-way tie
    threshold) and pooled over all groups, and tie-calibrated accuracy
    over every pair. Groups with an unscored edit are counted apart."""
    from editlens.meta.direction import oriented

    scores = oriented(scores, metric)
    by_k: dict[int, list[Pair]] = defaultdict(list)
    for pr in bench.pairs:
        by_k[pr.meta["k"]].append(pr)
    out: dict[str, Any] = {}
    all_h, all_d = [], []
    eps = 0.0
    if by_k.get(2):
        usable = [pr for pr in by_k[2] if pr.a in scores and pr.b in scores]
        if usable:
            r = accuracy_with_ties([pr.label for pr in usable], [scores[pr.a] - scores[pr.b] for pr in usable])
            eps = r["threshold"]
    strict_all = [0, 0, 0]  # correct, judged, with an unscored edit
    for k in sorted(by_k):
        prs = by_k[k]
        usable = [pr for pr in prs if pr.a in scores and pr.b in scores]
        h = [pr.label for pr in usable]
        d = [scores[pr.a] - scores[pr.b] for pr in usable]
        all_h += h
        all_d += d
        entry: dict[str, Any] = {"pairs": len(prs), "scored_pairs": len(usable)}
        if usable:
            entry["pairwise"] = accuracy_with_ties(h, d) if k == 2 else _concordance(h, d)
        groups: dict[str, list[Pair]] = defaultdict(list)
        for pr in prs:
            groups[pr.meta["group"]].append(pr)
        correct = judged = unscored = 0
        for members in groups.values():
            if any(m.a not in scores or m.b not in scores for m in members):
                unscored += 1
                continue
            judged += 1
            correct += all(_agrees(m.label, scores[m.a] - scores[m.b], eps) for m in members)
        entry["strict"] = {"accuracy": correct / judged if judged else None, "correct": correct, "groups": judged,
                           "groups_with_unscored_edits": unscored}
        strict_all = [strict_all[0] + correct, strict_all[1] + judged, strict_all[2] + unscored]
        out[f"{k}pair"] = entry
    overall = accuracy_with_ties(all_h, all_d) if all_h else None
    strict = strict_all[0] / strict_all[1] if strict_all[1] else None
    return {"benchmark": "tiger-lab-editreward-bench", "protocol": "editreward: 2-way tie-calibrated, 3/4-way C/(C+D), "
            "strict group accuracy", "metric": metric, "value": strict, "strict_accuracy": strict,
            "strict": {"correct": strict_all[0], "groups": strict_all[1], "groups_with_unscored_edits": strict_all[2]},
            "pairwise_accuracy_with_ties": overall, "tie_threshold_2pair": eps, "by_k": out,
            "n_pairs": len(bench.pairs), "n_groups": bench.info.get("groups")}


def _agrees(label: int, d: float, eps: float) -> bool:
    if label == 0:
        return abs(d) <= eps
    return label * d > 0


# ----------------------------------------------------------------------------------------------- MMRB2

def read_mmrb2(path: str | Path, multi_input: str = "skip") -> Benchmark:
    """MMRB2's ``edit.json``. Pairs whose prompt holds several input images
    (compositions) are left out unless ``multi_input="first"`` (the first
    image then stands for the source), and counted either way."""
    p = Path(path)
    if p.is_dir():
        p = p / "edit.json"
    if not p.is_file():
        raise InputError(f"{p}: not found (build it with MMRB2's benchmark/build_from_hf.py)")
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"{p}: not readable JSON ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("pairs"), list):
        raise InputError(f"{p}: expected {{\"pairs\": [...]}}")
    base = p.parent
    edits: dict[str, Edit] = {}
    pairs: list[Pair] = []
    skipped: Counter[str] = Counter()
    for n, pr in enumerate(data["pairs"]):
        where = f"{p} pairs[{n}]"
        if not isinstance(pr, dict) or not pr.get("id"):
            raise InputError(f"{where}: needs an 'id'")
        if "prompt_content" not in pr:
            raise InputError(f"{where}: no 'prompt_content' (this looks like MMRB2's *_response_only.json: build the "
                             "full benchmark with its benchmark/build_from_hf.py)")
        chosen = str(pr.get("chosen") or "").upper()
        if chosen not in ("A", "B"):
            raise InputError(f"{where}: 'chosen' must be A or B, got {pr.get('chosen')!r}")
        text = " ".join(c[1].strip() for c in pr["prompt_content"] if _kind(c, where) == "text" and c[1].strip())
        inputs = [c[1] for c in pr["prompt_content"] if _kind(c, where) == "image"]
        outs = []
        for side in ("a", "b"):
            resp = pr.get(f"response_{side}") or {}
            imgs = [c[1] for c in resp.get("response_content") or [] if _kind(c, where) == "image"]
            outs.append((resp.get("model_name"), imgs))
        if not text:
            skipped["no instruction text"] += 1
            continue
        if len(inputs) != 1 and not (len(inputs) > 1 and multi_input == "first"):
            skipped["no input image" if not inputs else "several input images"] += 1
            continue
        if any(len(imgs) != 1 for _, imgs in outs):
            skipped["a response without exactly one image"] += 1
            continue
        src = _path(inputs[0], base, where)
        ids = []
        for side, (model, imgs) in zip(("a", "b"), outs):
            eid = f"{pr['id']}/{side}"
            edits[eid] = Edit(eid, text, src, _path(imgs[0], base, where), model, str(pr["id"]))
            ids.append(eid)
        pairs.append(Pair(str(pr["id"]), ids[0], ids[1], 1 if chosen == "A" else -1,
                          {"chosen": chosen, "human_annotations": pr.get("human_annotations"),
                           "prompt_source": pr.get("prompt_source"), "inputs": len(inputs)}))
    return Benchmark("mmrb2", str(p), edits, pairs, {"pairs_in_file": len(data["pairs"]), "left_out": dict(skipped)})


def _kind(c: Any, where: str) -> str:
    if not (isinstance(c, (list, tuple)) and len(c) == 2 and c[0] in ("text", "image") and isinstance(c[1], str)):
        raise InputError(f"{where}: content items are [\"text\"|\"image\", str], got {c!r}"[:300])
    return c[0]


def _path(rel: str, base: Path, where: str) -> Path:
    q = Path(rel)
    q = q if q.is_absolute() else base / q
    if not q.is_file():
        raise InputError(f"{where}: image {rel!r} not found under {base}")
    return q


def mmrb2_report(bench: Benchmark, *, scores: dict[str, float] | None = None,
                 verdicts: dict[str, dict[str, Any]] | None = None, metric: str | None = None) -> dict[str, Any]:
    """MMRB2's protocol. With a point-wise evaluator's ``scores`` both orders
    are the same computation (the forward judgement is A when A scores
    higher; equal scores are a judgement for neither, counted wrong). With a
    pairwise judge's ``verdicts`` (``compare --pairs --orders both``), the
    forward and the (flipped) reverse verdicts are separate judgements; a
    tie verdict is a judgement for neither (wrong); no verdict is no
    judgement (left out, as MMRB2 does)."""
    from editlens.meta.direction import oriented

    if scores is not None:
        scores = oriented(scores, metric)  # the forward judgement is the *better* edit in the evaluator's direction
    fwd = [0, 0]
    rev = [0, 0]
    agree = checked = missing = ties = 0
    combined = [0, 0]
    for pr in bench.pairs:
        if scores is not None:
            if pr.a not in scores or pr.b not in scores:
                missing += 1
                continue
            d = scores[pr.a] - scores[pr.b]
            j = "A" if d > 0 else "B" if d < 0 else None
            ties += j is None
            for tally in (fwd, rev):
                tally[1] += 1
                tally[0] += j == pr.meta["chosen"]
            checked += 1
            agree += 1
            combined[1] += 1
            combined[0] += j == pr.meta["chosen"]
            continue
        v = (verdicts or {}).get(pr.id)
        if v is None:
            missing += 1
            continue
        orders = v.get("orders") or {}
        js = {}
        for name, tally in (("forward", fwd), ("reverse", rev)):
            o = orders.get(name)
            verdict = (o or {}).get("verdict")
            if verdict is None:
                continue
            j = {"A>B": "A", "B>A": "B"}.get(verdict)
            ties += j is None
            js[name] = j
            tally[1] += 1
            tally[0] += j == pr.meta["chosen"]
        if len(js) == 2:
            checked += 1
            agree += js["forward"] == js["reverse"]
        if v.get("verdict") is not None:
            combined[1] += 1
            combined[0] += {"A>B": "A", "B>A": "B"}.get(v["verdict"]) == pr.meta["chosen"]
    judged = fwd[1] + rev[1]
    acc = (fwd[0] + rev[0]) / judged if judged else None
    return {"benchmark": "mmrb2-image-editing", "protocol": "mmrb2: both orders, (forward correct + flipped reverse "
            "correct) / judgements", "metric": metric, "value": acc, "accuracy": acc,
            "accuracy_forward": fwd[0] / fwd[1] if fwd[1] else None,
            "accuracy_reverse": rev[0] / rev[1] if rev[1] else None,
            "consistency": agree / checked if checked else None,
            "accuracy_of_agreed_verdict": combined[0] / combined[1] if combined[1] else None,
            "judgements": judged, "tie_judgements": ties, "n_pairs": len(bench.pairs), "n_missing": missing,
            "orders": "scored independently: the order cannot matter" if scores is not None else "asked both ways",
            "left_out_when_read": bench.info.get("left_out", {})}


# ----------------------------------------------------------------------------------------------- loading any

READERS: dict[str, Callable[..., Benchmark]] = {"editscore-bench": read_editscore_bench,
                                                "editreward-bench": read_editreward_bench, "mmrb2": read_mmrb2}


def load_benchmark(kind: str, path: str | Path, **kw: Any) -> Benchmark:
    """A benchmark from its published files, or from a folder written by :func:`prepare`
    (its ``benchmark.json`` says which benchmark it holds)."""
    if kind not in READERS:
        raise InputError(f"unknown benchmark {kind!r}; known: {', '.join(KINDS)}")
    p = Path(path)
    if (p / "benchmark.json").is_file():
        return read_prepared(p, kind)
    if kind == "mmrb2":
        return read_mmrb2(p, **kw)
    return READERS[kind](p, with_images=False)


def read_prepared(folder: Path, kind: str | None = None) -> Benchmark:
    try:
        info = json.loads((folder / "benchmark.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"{folder / 'benchmark.json'}: cannot be read ({exc})") from None
    if not isinstance(info, dict):
        raise InputError(f"{folder / 'benchmark.json'}: expected a JSON object")
    if kind and info.get("benchmark") != kind:
        raise InputError(f"{folder}: prepared from {info.get('benchmark')!r}, not {kind!r}")
    pairs = []
    from editlens.data.jsonl import iter_jsonl

    labels = {"A": 1, "B": -1, "tie": 0}
    for n, row in iter_jsonl(folder / "pairs.jsonl"):
        missing = [k for k in ("id", "a", "b", "preference") if k not in row]
        if missing:
            raise InputError(f"{folder / 'pairs.jsonl'}:{n}: missing {', '.join(missing)}")
        if row["preference"] not in labels:
            raise InputError(f"{folder / 'pairs.jsonl'}:{n}: field 'preference' is {row['preference']!r}, not A, B or tie")
        if str(row["a"]) == str(row["b"]):
            raise InputError(f"{folder / 'pairs.jsonl'}:{n}: fields 'a' and 'b' are the same edit {row['a']!r}")
        pairs.append(Pair(str(row["id"]), str(row["a"]), str(row["b"]), labels[row["preference"]], row.get("meta") or {}))
    edits = {}
    for n, row in iter_jsonl(folder / "manifest.jsonl"):
        missing = [k for k in ("id", "instruction", "source", "edited") if k not in row]
        if missing:
            raise InputError(f"{folder / 'manifest.jsonl'}:{n}: missing {', '.join(missing)}")
        edits[str(row["id"])] = Edit(str(row["id"]), row["instruction"], row["source"], row["edited"], row.get("model"),
                                     row.get("group"))
    return Benchmark(info["benchmark"], info.get("source", str(folder)), edits, pairs, info.get("info") or {})


def prepare(kind: str, path: str | Path, out: str | Path, multi_input: str = "skip") -> dict[str, Any]:
    """Write ``out/images/``, ``out/manifest.jsonl`` (one row per distinct
    edit), ``out/pairs.jsonl`` (one row per labelled pair) and
    ``out/benchmark.json``. Images shipped inside the tables are written as
    they are (same bytes, no re-encoding); MMRB2's image files are referred
    to where they lie."""
    from editlens.core.io import atomic_write

    if kind not in READERS:
        raise InputError(f"unknown benchmark {kind!r}; known: {', '.join(KINDS)}")
    bench = read_mmrb2(path, multi_input) if kind == "mmrb2" else READERS[kind](path, with_images=True)
    root = Path(out)
    (root / "images").mkdir(parents=True, exist_ok=True)
    written: dict[str, str] = {}

    def place(img: Any) -> str:
        if isinstance(img, Path):
            return str(img.resolve())
        name = _digest(img)
        if name not in written:
            target = root / "images" / f"{name}.{_extension(img)}"
            if not target.is_file():
                target.write_bytes(img)
            written[name] = str(target.resolve())
        return written[name]

    manifest, paths = [], {}
    for e in bench.edits.values():
        src, edt = place(e.source), place(e.edited)
        paths[e.id] = (src, edt)
        manifest.append({"id": e.id, "source": src, "edited": edt, "instruction": e.instruction,
                         **({"model": e.model} if e.model else {}), **({"group": e.group} if e.group else {}),
                         **e.extra})
    rows = [{"id": pr.id, "a": pr.a, "b": pr.b, "preference": {1: "A", -1: "B", 0: "tie"}[pr.label],
             "source": paths[pr.a][0], "edited_a": paths[pr.a][1], "edited_b": paths[pr.b][1],
             "instruction": bench.edits[pr.a].instruction, "meta": pr.meta} for pr in bench.pairs]
    atomic_write(root / "manifest.jsonl", lambda fh: fh.writelines(json.dumps(r, default=str) + "\n" for r in manifest))
    atomic_write(root / "pairs.jsonl", lambda fh: fh.writelines(json.dumps(r, default=str) + "\n" for r in rows))
    summary = {"benchmark": kind, "source": str(Path(path).resolve()), "edits": len(manifest), "pairs": len(rows),
               "images_written": len(written), "info": bench.info, "download": DOWNLOADS[kind]}
    atomic_write(root / "benchmark.json", lambda fh: json.dump(summary, fh, indent=2, default=str))
    return summary


def _extension(data: bytes) -> str:
    from PIL import Image, UnidentifiedImageError

    try:
        fmt = (Image.open(io.BytesIO(data)).format or "png").lower()
    except (UnidentifiedImageError, OSError):
        raise InputError("an image in the benchmark cannot be decoded") from None
    return {"jpeg": "jpg"}.get(fmt, fmt)


# ----------------------------------------------------------------------------------------------- predictions

def load_results(path: str | Path, metric: str | None) -> dict[str, dict[str, Any]]:
    """``{id: {"status", "value", "details"}}`` of an ``editlens run``'s
    ``results.jsonl`` (``metric`` chooses the evaluator) or of ``{id, score}`` lines."""
    from editlens.data.jsonl import iter_jsonl
    from editlens.meta.benchmarks import keep_once

    out: dict[str, dict[str, Any]] = {}
    seen: dict[str, tuple[Any, str]] = {}
    for n, row in iter_jsonl(path):
        if "id" not in row:
            raise InputError(f"{path}:{n}: missing 'id'")
        given = row["scores"].get(metric) if isinstance(row.get("scores"), dict) else row.get("score")
        if not keep_once(seen, str(row["id"]), given, f"{path}:{n}"):
            continue
        if "scores" in row:
            if metric is None:
                raise InputError(f"{path}: editlens results hold several scores {sorted(row['scores'])}; choose one "
                                 "with --metric")
            entry = row["scores"].get(metric)
            if entry is None:
                continue
            out[str(row["id"])] = {"status": entry.get("status"), "value": entry.get("value"),
                                   "details": entry.get("details") or {}}
        else:
            v = row.get("score")
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)):
                raise InputError(f"{path}:{n}: field 'score' is {json.dumps(v)}, not a finite number "
                                 "(leave it out or null for an unscored edit)")
            ok = v is not None
            out[str(row["id"])] = {"status": "scored" if ok else "unscored", "value": v if ok else None,
                                   "details": {}}
    if not out:
        raise InputError(f"{path}: no result for metric {metric!r}")
    return out


def scored_values(results: dict[str, dict[str, Any]]) -> dict[str, float]:
    return {k: float(v["value"]) for k, v in results.items() if v.get("status") == "scored" and v.get("value") is not None}


def load_verdicts(path: str | Path) -> dict[str, dict[str, Any]]:
    """Verdicts of ``editlens compare --pairs`` (JSONL, one per pair id)."""
    from editlens.data.jsonl import iter_jsonl

    out = {}
    for n, row in iter_jsonl(path):
        if "id" not in row or "verdict" not in row:
            raise InputError(f"{path}:{n}: a verdict line needs 'id' and 'verdict' (from editlens compare --pairs)")
        out[str(row["id"])] = row
    return out


def verdicts_report(human_path: str | Path, verdicts_path: str | Path) -> dict[str, Any]:
    """A pairwise judge against human pairs (``{"id", "preference"}``): accuracy
    of each order asked, MMRB2-style accuracy over all judgements, the
    consistency of the two orders, and the accuracy of the reported verdict
    (agreed, or a tie where the orders disagreed). A tie verdict is right
    only on a human tie; no verdict is no judgement (counted apart)."""
    from editlens.meta.benchmarks import load_pairwise_human

    human = {p["id"]: p["label"] for p in load_pairwise_human(human_path)}
    verdicts = load_verdicts(verdicts_path)
    labels = {"A>B": 1, "B>A": -1, "A=B=Good": 0, "A=B=Bad": 0, "A=B": 0}
    per = {"forward": [0, 0], "reverse": [0, 0]}
    final = [0, 0]
    agree = checked = no_verdict = 0
    for pid, h in human.items():
        v = verdicts.get(pid)
        if v is None:
            continue
        orders = v.get("orders") or {"forward": {"verdict": v.get("verdict")}}
        got = {}
        for name, tally in per.items():
            verdict = (orders.get(name) or {}).get("verdict")
            if verdict in labels:
                tally[1] += 1
                tally[0] += labels[verdict] == h
                got[name] = labels[verdict]
        if len(got) == 2:
            checked += 1
            agree += got["forward"] == got["reverse"]
        if v.get("verdict") in labels:
            final[1] += 1
            final[0] += labels[v["verdict"]] == h
        else:
            no_verdict += 1
    judged = per["forward"][1] + per["reverse"][1]
    acc = (per["forward"][0] + per["reverse"][0]) / judged if judged else None
    return {"benchmark": "pairwise", "protocol": "pairwise judge in both orders (MMRB2): correct judgements / "
            "judgements", "value": acc, "accuracy": acc,
            "accuracy_forward": per["forward"][0] / per["forward"][1] if per["forward"][1] else None,
            "accuracy_reverse": per["reverse"][0] / per["reverse"][1] if per["reverse"][1] else None,
            "consistency": agree / checked if checked else None, "checked_pairs": checked,
            "accuracy_of_reported_verdict": final[0] / final[1] if final[1] else None,
            "judgements": judged, "n_pairs": len(human), "n_no_verdict": no_verdict,
            "n_missing": sum(1 for pid in human if pid not in verdicts)}

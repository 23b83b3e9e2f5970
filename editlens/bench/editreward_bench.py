"""TIGER-Lab's EditReward-Bench (``TIGER-Lab/EditReward-Bench``; parquet under ``2pair/``,
``3pair/``, ``4pair/``, or one table with a ``dataset`` column): one row per compared pair with
``id`` (group = the part before the first ``_``), ``instruction``, ``source_image``,
``candidate_1``, ``candidate_2``, ``ranking`` (``A>B``, ``C>A``, ``A=B``...), ``comparison_type``
(``AvsC``: candidate 1 is A, candidate 2 is C), ``score_1``, ``score_2``, ``model_1``, ``model_2``,
``dataset``. Protocol (:func:`editreward_bench_report`): 2-way pairs tie-calibrated accuracy;
3/4-way pairs C/(C+D); strict group accuracy (every pair of a group ordered as people ordered it)
per K and pooled."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path
from typing import Any, Mapping

from editlens.bench.base import BenchSpec
from editlens.bench.evaluate import HumanLabelBenchmark, MetaReport, evaluated, f, no_options, require
from editlens.bench.labels import (
    Edit,
    LabelledPairs,
    Pair,
    digest,
    image_bytes,
    load_results,
    scored_values,
    table_rows,
)
from editlens.bench.registry import register
from editlens.errors import InputError
from editlens.meta.protocols import accuracy_with_ties

DOWNLOAD = ("https://huggingface.co/datasets/TIGER-Lab/EditReward-Bench (hf download "
            "TIGER-Lab/EditReward-Bench --repo-type dataset)")

_RANK = re.compile(r"^\s*([A-D])\s*([<>=])\s*([A-D])(?:\s*=\s*(?:Good|Bad))?\s*$", re.I)



def _group_of(pid: str, k: int) -> str:
    if k == 2:
        return pid
    return pid.split("_")[0] if "_" in pid else pid[:10]  # the release's grouping rule



def read_editreward_bench(path: str | Path, with_images: bool = True) -> LabelledPairs:
    p = Path(path)
    needed = ("id", "instruction", "source_image", "candidate_1", "candidate_2", "ranking", "comparison_type")
    edits: dict[str, Edit] = {}
    pairs: list[Pair] = []
    seen: dict[str, str] = {}
    for where, base, row in table_rows(p, needed):
        subset = row.get("dataset") or next((part for part in base.parts if part in ("2pair", "3pair", "4pair")), None)
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
                src = image_bytes(row["source_image"], f"{where} source_image", base)
                data = image_bytes(row[col], f"{where} {col}", base)
                fp = digest(src) + digest(data) + instr
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
    return LabelledPairs("editreward-bench", str(p), edits, pairs,
                     {"groups": len({pr.meta["group"] for pr in pairs}), "rows": len(pairs)})


def _concordance(h: list[int], d: list[float]) -> dict[str, Any]:
    """C/(C+D+Tm) with no model ties allowed (an exact tie is discordant), as the release computes 3/4-way accuracy."""
    c = sum(1 for hi, di in zip(h, d) if hi != 0 and hi * di > 0)
    disc = sum(1 for hi, di in zip(h, d) if hi != 0 and not hi * di > 0)
    return {"accuracy": c / (c + disc) if c + disc else None, "concordant": c, "discordant": disc,
            "human_ties_left_out": sum(1 for hi in h if hi == 0)}



def editreward_bench_report(bench: LabelledPairs, scores: dict[str, float], metric: str) -> dict[str, Any]:
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



def _report(bench: str | Path, predictions: str | Path, metric: str | None = None) -> dict[str, Any]:
    scores = scored_values(load_results(predictions, metric))
    return editreward_bench_report(EditRewardBench().read_pairs(bench), scores, metric or "score")


@register
class EditRewardBench(HumanLabelBenchmark):
    spec = BenchSpec(
        name="editreward-bench",
        title="EditReward-Bench (TIGER-Lab)",
        homepage="https://huggingface.co/datasets/TIGER-Lab/EditReward-Bench",
        download="hf download TIGER-Lab/EditReward-Bench --repo-type dataset",
        layout="parquet under 2pair/, 3pair/, 4pair/ (or a 'dataset' column): id, instruction, source_image, "
               "candidate_1, candidate_2, ranking, comparison_type, score_1, score_2, model_1, model_2",
        label_kind="ranked",
        columns={"id": "pair id (group = the part before the first '_')", "ranking": "A>B, C>A, A=B...",
                 "comparison_type": "which candidates (AvsC)"},
        protocols={"editreward": "2-way tie-calibrated accuracy, 3/4-way C/(C+D), strict group accuracy per K "
                   "and pooled"},
        table_layout={"rows": ["2pair", "3pair", "4pair", "pooled"], "columns": ["pairwise", "strict"]},
        usage="editlens meta-eval prepare editreward-bench DIR --out P && editlens run P/manifest.jsonl ... && editlens meta-eval run editreward-bench --data P --predictions RUN/results.jsonl --metric NAME",
        identical="grouping rule, tie-calibrated 2-way accuracy, C/(C+D) for 3/4-way, strict group accuracy",
        differs="groups with an unscored edit are counted apart",
    )
    protocol_functions = {"editreward": _report}
    report_title = "TIGER-Lab EditReward-Bench"
    data_help = "the published parquet folder, or a folder from `editlens meta-eval prepare editreward-bench`"
    predictions_help = "an `editlens run` results.jsonl of the prepared manifest (with --metric) or {id, score} JSONL"
    prepare_download = DOWNLOAD

    def read_published(self, path: Path, with_images: bool = False, **options: Any) -> LabelledPairs:
        return read_editreward_bench(path, with_images=with_images)

    def labels(self, path: str | Path, **options: Any) -> Any:
        return self.read_pairs(path, **options)

    def evaluate(self, data: str | Path, predictions: str | Path | None = None, *, protocol: str | None = None,
                 metric: str | None = None, verdicts: str | Path | None = None, n_boot: int = 1000, seed: int = 0,
                 **options: Any) -> MetaReport:
        no_options(self.spec.name, options)
        if predictions is None or verdicts is not None:
            raise InputError("TIGER-Lab's EditReward-Bench reads an evaluator's scores: give --predictions")
        rep = _report(data, predictions, metric)
        require(sum(e["scored_pairs"] for e in rep["by_k"].values()), "no pair has both edits scored")
        rep["evaluated"] = evaluated(predictions=predictions, metric=metric, human=data)
        return MetaReport(rep, self.report_title)

    def summary(self, rep: Mapping[str, Any]) -> list[str]:
        lines = [f"EditReward-Bench (TIGER-Lab): strict group accuracy {f(rep['strict_accuracy'])} over "
                 f"{rep['strict']['groups']} groups ({rep['strict']['groups_with_unscored_edits']} with unscored edits)"]
        for k, e in rep["by_k"].items():
            pw = (e.get("pairwise") or {}).get("accuracy")
            lines.append(f"  {k}: pairwise {f(pw)}, strict {f(e['strict']['accuracy'])} "
                         f"({e['scored_pairs']}/{e['pairs']} pairs scored)")
        return lines

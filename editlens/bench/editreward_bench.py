"""TIGER-Lab's EditReward-Bench: human rankings of 2, 3 or 4 candidate
edits, compared pair by pair (:mod:`editlens.meta.rewardbench`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from editlens.bench.base import Benchmark, BenchSpec
from editlens.bench.registry import register


def _report(bench: str | Path, predictions: str | Path, metric: str | None = None) -> dict[str, Any]:
    from editlens.meta import rewardbench as R

    scores = R.scored_values(R.load_results(predictions, metric))
    return R.editreward_bench_report(R.load_benchmark("editreward-bench", bench), scores, metric or "score")


@register
class EditRewardBench(Benchmark):
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
        usage="editlens meta-eval prepare editreward-bench DIR --out P && editlens run P/manifest.jsonl ... && editlens meta-eval editreward-bench --bench P --predictions RUN/results.jsonl --metric NAME",
        identical="grouping rule, tie-calibrated 2-way accuracy, C/(C+D) for 3/4-way, strict group accuracy",
        differs="groups with an unscored edit are counted apart",
    )
    protocol_functions = {"editreward": _report}

    def labels(self, path: str | Path, **options: Any) -> Any:
        from editlens.meta.rewardbench import load_benchmark

        return load_benchmark("editreward-bench", path)

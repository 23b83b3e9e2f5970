"""EditScore's EditReward-Bench: preference pairs over 13 subtasks and three
dimensions (:mod:`editlens.meta.rewardbench`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from editlens.bench.base import Benchmark, BenchSpec
from editlens.bench.registry import register


def _report(bench: str | Path, predictions: str | Path, metric: str | None = None) -> dict[str, Any]:
    from editlens.meta import rewardbench as R

    return R.editscore_bench_report(R.load_benchmark("editscore-bench", bench), R.load_results(predictions, metric),
                                    metric or "score")


@register
class EditScoreBench(Benchmark):
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
        usage="editlens meta-eval prepare editscore-bench DIR --out P && editlens run P/manifest.jsonl ... && editlens meta-eval editscore-bench --bench P --predictions RUN/results.jsonl --metric NAME",
        identical="strictly-higher rule, per-subtask accuracy and the unweighted subtask mean",
        differs="pairs with an unscored edit are left out and counted (and also reported as wrong)",
    )
    protocol_functions = {"editscore": _report}

    def labels(self, path: str | Path, **options: Any) -> Any:
        from editlens.meta.rewardbench import load_benchmark

        return load_benchmark("editscore-bench", path)

"""GenAI-Bench image editing (GenAI-Arena votes): four-way human votes on
pairs; the protocol is its official 4-way accuracy of a judge's verdicts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from editlens.bench.base import Benchmark, BenchSpec
from editlens.bench.registry import register


def _report(**kw: Any) -> dict[str, Any]:
    from editlens.meta.reports import genai_bench_report

    return genai_bench_report(**kw)


@register
class GenAIBench(Benchmark):
    spec = BenchSpec(
        name="genai-bench",
        title="GenAI-Bench image editing (human votes)",
        homepage="https://github.com/TIGER-AI-Lab/GenAI-Bench",
        download="hf download TIGER-Lab/GenAI-Bench --repo-type dataset (image_edition split); judge results as "
                 "its evaluation scripts write them",
        layout="a JSON list of {idx, response, human_vote} (the judge's result file)",
        label_kind="pairwise",
        columns={"idx": "pair id", "response": "judge answer ([[A>B]]...)",
                 "human_vote": "leftvote / rightvote / tievote / bothbad_vote"},
        protocols={"genai-bench": "official 4-way accuracy; an answer without a verdict counts as wrong"},
        table_layout={"columns": ["accuracy", "n", "no verdict"]},
        usage="editlens meta-eval genai-bench --judge-outputs RESULTS.json",
        identical="the verdict-to-vote mapping and accuracy over all items",
        differs="a bootstrap CI and the count of answers without a verdict are added",
    )
    protocol_functions = {"genai-bench": lambda **kw: _report(**kw)}

    def labels(self, path: str | Path, **options: Any) -> Any:
        from editlens.meta.benchmarks import load_genai_results

        return load_genai_results(path)

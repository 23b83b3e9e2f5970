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


def adiee_four_way(human: str | Path, predictions: str | Path, metric: str | None = None) -> dict[str, Any]:
    """ADIEE's GenAI-Bench protocol on a scorer's 0-10 scores: human votes
    ``{id, a, b, human_vote}`` (tie and both-bad kept apart), the verdict of
    :func:`editlens.meta.protocols.adiee_genai_vote`, exact 4-way accuracy over all pairs."""
    from editlens.meta.benchmarks import load_pairwise_votes, load_predictions
    from editlens.meta.protocols import adiee_genai_bench_accuracy

    scores, _, _ = load_predictions(predictions, metric)
    return adiee_genai_bench_accuracy([{"id": p["id"], "human_vote": p["human_vote"], "score_a": scores.get(p["a"]),
                                        "score_b": scores.get(p["b"])} for p in load_pairwise_votes(human)])


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
        protocols={"genai-bench": "official 4-way accuracy; an answer without a verdict counts as wrong",
                   "adiee-genai-4way": "ADIEE's rule on two 0-10 scores: the higher round(score/5) wins; equal types "
                                       "are a tie only when both scores are >= 9, else both bad; exact 4-way match "
                                       "over all pairs (editlens adiee pairwise-eval --rule adiee-genai-4way)"},
        table_layout={"columns": ["accuracy", "n", "no verdict"]},
        usage="editlens meta-eval genai-bench --judge-outputs RESULTS.json",
        identical="the verdict-to-vote mapping and accuracy over all items",
        differs="a bootstrap CI and the count of answers without a verdict are added",
    )
    protocol_functions = {"genai-bench": lambda **kw: _report(**kw), "adiee-genai-4way": adiee_four_way}

    def labels(self, path: str | Path, **options: Any) -> Any:
        from editlens.meta.benchmarks import load_genai_results

        return load_genai_results(path)

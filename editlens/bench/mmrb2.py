"""MMRB2 image editing: human-chosen pairs, judged in both presentation
orders (:mod:`editlens.meta.rewardbench`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from editlens.bench.base import Benchmark, BenchSpec
from editlens.bench.registry import register


def _report(bench: str | Path, predictions: str | Path | None = None, verdicts: str | Path | None = None,
            metric: str | None = None, multi_input: str = "skip") -> dict[str, Any]:
    from editlens.meta import rewardbench as R

    b = R.load_benchmark("mmrb2", bench, multi_input=multi_input)
    if predictions is not None:
        return R.mmrb2_report(b, scores=R.scored_values(R.load_results(predictions, metric)), metric=metric)
    return R.mmrb2_report(b, verdicts=R.load_verdicts(verdicts), metric="pairwise judge")  # type: ignore[arg-type]


@register
class MMRB2(Benchmark):
    spec = BenchSpec(
        name="mmrb2",
        title="MMRB2 image editing",
        homepage="https://github.com/facebookresearch/MMRB2",
        download="git clone https://github.com/facebookresearch/MMRB2 && python MMRB2/benchmark/build_from_hf.py "
                 "--output-dir DIR (writes DIR/edit.json and its images)",
        layout="edit.json {pairs: [{id, prompt_content, response_a, response_b, chosen, human_annotations}]}",
        label_kind="pairwise",
        columns={"prompt_content": "instruction text and input image(s)", "response_a/b": "the two edits",
                 "chosen": "A or B"},
        protocols={"mmrb2": "every pair judged in both orders; accuracy = (forward correct + flipped reverse "
                   "correct) / judgements; per order and their consistency"},
        table_layout={"columns": ["accuracy", "forward", "reverse", "consistency"]},
        usage="editlens meta-eval prepare mmrb2 DIR --out P && editlens run P/manifest.jsonl ... && editlens meta-eval mmrb2 --bench P --predictions RUN/results.jsonl --metric NAME",
        identical="both-orders accuracy over judgements; no verdict is no judgement",
        differs="pairs with several input images are left out (or use the first) and counted",
    )
    protocol_functions = {"mmrb2": _report}

    def labels(self, path: str | Path, **options: Any) -> Any:
        from editlens.meta.rewardbench import load_benchmark

        return load_benchmark("mmrb2", path, **options)

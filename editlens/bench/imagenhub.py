"""ImagenHub text-guided image editing: three raters' [SC, PQ] per method
and sample; the meta-evaluation protocol is ImagenHub's per-method Spearman,
aggregated (:mod:`editlens.meta.reports`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from editlens.bench.base import Benchmark, BenchSpec
from editlens.bench.registry import register


def _report(**kw: Any) -> dict[str, Any]:
    from editlens.meta.reports import imagenhub_report

    return imagenhub_report(**kw)


@register
class ImagenHub(Benchmark):
    spec = BenchSpec(
        name="imagenhub",
        title="ImagenHub text-guided image editing (human ratings)",
        homepage="https://github.com/TIGER-AI-Lab/ImagenHub",
        download="git clone https://github.com/TIGER-AI-Lab/ImagenHub (human ratings: "
                 "eval/human_ratings/Text-Guided_IE_rater{1,2,3}.tsv)",
        layout="Text-Guided_IE_rater{1,2,3}.tsv: one row per sample uid, one column per method, cells [SC, PQ]",
        label_kind="pointwise",
        columns={"uid": "sample id", "<method>": "cell [SC, PQ] (0, 0.5, 1)"},
        protocols={"imagenhub-official": "Spearman per method, combined as tanh(mean r) as ImagenHub's code",
                   "imagenhub-fisher": "the true Fisher-z average", "imagenhub-mean": "plain mean of r"},
        table_layout={"columns": ["O", "SC", "PQ"], "rows": ["aggregated Spearman"]},
        usage="editlens meta-eval imagenhub --ratings DIR --predictions results.jsonl --metric NAME",
        identical="human O = mean over raters of sqrt(SC*PQ); the Imagic column excluded; tanh(mean r) as published",
        differs="bootstrap CIs, the true Fisher-z average and the plain mean are offered beside it",
    )
    protocol_functions = {"imagenhub-official": lambda **kw: _report(aggregation="official", **kw),
                          "imagenhub-fisher": lambda **kw: _report(aggregation="fisher", **kw),
                          "imagenhub-mean": lambda **kw: _report(aggregation="mean", **kw)}

    def labels(self, path: str | Path, **options: Any) -> Any:
        from editlens.meta.benchmarks import load_imagenhub_human

        return load_imagenhub_human(path)

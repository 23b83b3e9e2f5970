"""AURORA-Bench (human ratings of edits, point-wise and pair-wise), and the
generic point-/pair-wise human files that fit it: ``{id, model, human}`` and
``{id, a, b, preference}``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from editlens.bench.base import Benchmark, BenchSpec
from editlens.bench.registry import register
from editlens.meta.protocols import adiee_pair_verdict


def released_rule_accuracy(human: str | Path, predictions: str | Path, metric: str | None = None,
                           denominator: str = "scored") -> dict[str, Any]:
    """ADIEE's pairwise protocol: accuracy of the released rule, beside
    accuracy with tie calibration. ``denominator``: ``scored`` (default: over
    the pairs whose two edits are scored) or ``all`` (as the release's
    ``run_aurorabenchpairwise``: over all pairs, a pair without both scores
    counted wrong)."""
    if denominator not in ("scored", "all"):
        raise ValueError(f"denominator must be scored or all, got {denominator!r}")
    from editlens.meta import benchmarks as B
    from editlens.meta.reports import pairwise_report

    rep = pairwise_report(human, predictions, metric)
    pairs = B.load_pairwise_human(human)
    scores, _, _ = B.load_predictions(predictions, metric)
    usable = [p for p in pairs if p["a"] in scores and p["b"] in scores]
    hits = sum(adiee_pair_verdict(scores[p["a"]], scores[p["b"]]) == p["label"] for p in usable)
    over = usable if denominator == "scored" else pairs
    return {"protocol": "adiee-released-rule", "released_rule_accuracy": hits / len(over) if over else None,
            "n": len(over), "denominator": denominator, "unscored_pairs": len(pairs) - len(usable),
            "accuracy_with_ties": rep}


def _pointwise(protocol: str) -> Any:
    def run(**kw: Any) -> dict[str, Any]:
        from editlens.meta.reports import pointwise_report

        return pointwise_report(protocol=protocol, **kw)
    return run


def _pairwise(**kw: Any) -> dict[str, Any]:
    from editlens.meta.reports import pairwise_report

    return pairwise_report(**kw)


@register
class AuroraBench(Benchmark):
    spec = BenchSpec(
        name="aurora",
        title="AURORA-Bench (human ratings)",
        homepage="https://huggingface.co/datasets/McGill-NLP/aurora-bench",
        download="hf download McGill-NLP/aurora-bench --repo-type dataset (400 test edits; the human ratings are "
                 "on the authors' Google Drive, see the dataset card)",
        layout="human ratings as JSONL: point-wise {id, model, human} or pair-wise {id, a, b, preference}",
        label_kind="pointwise",
        columns={"id": "edit id", "model": "editing model", "human": "human score",
                 "a/b": "the two edits of a pair", "preference": "A / B / tie"},
        categories=("magicbrush", "ag", "something", "clevr", "whatsup", "emu", "epic", "kubric"),
        protocols={"aurora": "one Spearman over all items (as ADIEE's release), the per-model mean beside it",
                   "aurora-per-model": "mean over editing models of per-model Spearman (as EditReward reports)",
                   "pairwise-ties": "pairwise accuracy with tie calibration (Deutsch et al. 2023)",
                   "adiee-released-rule": "ADIEE's released rule: type = round(score/5), higher type wins"},
        table_layout={"columns": ["Spearman", "n"]},
        usage="editlens meta-eval pointwise --human HUMAN.jsonl --predictions results.jsonl --protocol aurora (pairs: meta-eval pairwise; the released rule: editlens adiee pairwise-eval)",
        identical="the pooled Spearman of ADIEE's release and the per-model mean of EditReward's paper",
        differs="bootstrap CIs and system-level Kendall tau are added",
    )
    protocol_functions = {"aurora": _pointwise("aurora"), "aurora-per-model": _pointwise("aurora-per-model"),
                          "pairwise-ties": _pairwise, "adiee-released-rule": released_rule_accuracy}

    def labels(self, path: str | Path, **options: Any) -> Any:
        """Point-wise ``(scores, models)`` or pair-wise ``[{id, a, b, label}]``; ``kind``
        (``pointwise``/``pairwise``) says which, else the first line's fields do."""
        from editlens.meta.benchmarks import load_pairwise_human, load_pointwise_human

        kind = options.get("kind")
        if kind is None:
            from editlens.data.jsonl import iter_jsonl

            first = next((row for _, row in iter_jsonl(path)), {})
            kind = "pairwise" if "a" in first and "b" in first else "pointwise"
        return load_pairwise_human(path) if kind == "pairwise" else load_pointwise_human(path)

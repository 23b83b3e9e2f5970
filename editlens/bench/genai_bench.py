"""GenAI-Bench image editing (GenAI-Arena votes): four-way human votes on
pairs; a judge's result file (a JSON list of ``{idx, response, human_vote}``)
holds both the votes and the judge's answers. The protocol is its official
4-way accuracy of a judge's verdicts; ADIEE's rule reads two 0-10 scores."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from editlens.bench.base import BenchSpec
from editlens.bench.evaluate import HumanLabelBenchmark, MetaReport, evaluated, f, no_options
from editlens.bench.labels import keep_once, load_pairwise_votes, load_predictions
from editlens.bench.registry import register
from editlens.data.jsonl import iter_jsonl
from editlens.errors import InputError
from editlens.meta.protocols import adiee_genai_bench_accuracy, genai_bench_accuracy


def load_genai_results(path: str | Path) -> list[dict[str, Any]]:
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{p}: file not found")
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except json.JSONDecodeError:
        data = [row for _, row in iter_jsonl(p)]
    if not isinstance(data, list):
        raise InputError(f"{p}: expected a JSON list of items with idx, response, human_vote")
    seen: dict[str, tuple[Any, str]] = {}
    out = []
    for i, item in enumerate(data):
        if not isinstance(item, dict) or "human_vote" not in item:
            raise InputError(f"{p}: item {i} has no human_vote")
        if item.get("idx") is not None and not keep_once(
                seen, str(item["idx"]), (item.get("human_vote"), item.get("response")), f"{p}: item {i}", "idx"):
            continue  # the same item twice counts once
        out.append(item)
    return out


def genai_bench_report(path: str | Path) -> dict[str, Any]:
    from editlens.core.evidence import not_measured

    items = load_genai_results(path)
    res = genai_bench_accuracy(items)
    if res["n"] == res["no_verdict"]:  # "accuracy 0.0" over answers that hold no verdict would be invented
        why = "the file holds no item" if not res["n"] else f"none of the {res['n']} answers holds a [[...]] verdict"
        raise InputError(f"{path}: GenAI-Bench accuracy {not_measured(0, why)}")
    return {"benchmark": "genai-bench-edition", **res}


def adiee_four_way(human: str | Path, predictions: str | Path, metric: str | None = None) -> dict[str, Any]:
    """ADIEE's GenAI-Bench protocol on a scorer's 0-10 scores: human votes
    ``{id, a, b, human_vote}`` (tie and both-bad kept apart), the verdict of
    :func:`editlens.meta.protocols.adiee_genai_vote`, exact 4-way accuracy over all pairs."""
    scores, _, _ = load_predictions(predictions, metric)
    return adiee_genai_bench_accuracy([{"id": p["id"], "human_vote": p["human_vote"], "score_a": scores.get(p["a"]),
                                        "score_b": scores.get(p["b"])} for p in load_pairwise_votes(human)])


@register
class GenAIBench(HumanLabelBenchmark):
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
        usage="editlens meta-eval run genai-bench --data RESULTS.json",
        identical="the verdict-to-vote mapping and accuracy over all items",
        differs="a bootstrap CI and the count of answers without a verdict are added",
    )
    protocol_functions = {"genai-bench": lambda **kw: genai_bench_report(**kw), "adiee-genai-4way": adiee_four_way}
    report_title = "GenAI-Bench"
    data_help = "the judge's result file (a JSON list of {idx, response, human_vote}); for adiee-genai-4way, JSONL {id, a, b, human_vote}"
    predictions_help = "none (the result file holds the answers); for adiee-genai-4way, the 0-10 scores of the edits"

    def labels(self, path: str | Path, **options: Any) -> Any:
        return load_genai_results(path)

    def evaluate(self, data: str | Path, predictions: str | Path | None = None, *, protocol: str | None = None,
                 metric: str | None = None, verdicts: str | Path | None = None, n_boot: int = 1000, seed: int = 0,
                 **options: Any) -> MetaReport:
        no_options(self.spec.name, options)
        if verdicts is not None:
            raise InputError("GenAI-Bench reads a judge's result file (--data) or scores (--predictions), not --verdicts")
        if (protocol or "genai-bench") == "adiee-genai-4way":
            if predictions is None:
                raise InputError("adiee-genai-4way reads an evaluator's 0-10 scores: give --predictions")
            rep = adiee_four_way(data, predictions, metric)
            rep["evaluated"] = evaluated(predictions=predictions, metric=metric, human=data)
            return MetaReport(rep, "GenAI-Bench (ADIEE's 4-way rule)")
        if predictions is not None:
            raise InputError("GenAI-Bench's official protocol reads the judge's result file alone (--data); "
                             "scores (--predictions) go with --protocol adiee-genai-4way")
        rep = genai_bench_report(data)
        rep["evaluated"] = evaluated(judge_outputs=data)
        return MetaReport(rep, self.report_title)

    def summary(self, rep: Mapping[str, Any]) -> list[str]:
        if "no_verdict" not in rep:
            return [f"ADIEE GenAI-Bench rule (4-way) accuracy {f(rep.get('accuracy'))} over {rep.get('n')} pairs "
                    f"({rep.get('unscored')} without both scores, counted wrong)"]
        from editlens.core.evidence import figure

        return [f"GenAI-Bench accuracy {figure(rep['accuracy'], rep['n'] - rep['no_verdict'], 'no answer holds a verdict')}"
                f" over {rep['n']} items ({rep['no_verdict']} without a verdict, counted wrong as the protocol does)"]

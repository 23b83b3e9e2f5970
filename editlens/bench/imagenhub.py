"""ImagenHub text-guided image editing: three raters' [SC, PQ] per method
and sample (``Text-Guided_IE_rater{1,2,3}.tsv``: one row per sample uid, one
column per method; the ``Imagic`` column holds placeholders and is excluded;
human O is the mean over raters of ``sqrt(SC * PQ)``), VIEScore judge outputs
(``<Method>/SC.json`` and ``PQ.json``), and the meta-evaluation protocol:
ImagenHub's per-method Spearman, aggregated."""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from editlens.bench.base import BenchSpec
from editlens.bench.evaluate import (
    HumanLabelBenchmark,
    MetaReport,
    ci,
    edit_types,
    evaluated,
    figure_of,
    instruction_texts,
    no_options,
    nothing_scored,
    split_id,
    trust_lines,
)
from editlens.bench.labels import keep_once, load_predictions
from editlens.bench.registry import register
from editlens.core.io import read_json
from editlens.errors import InputError
from editlens.meta.calibration import Labelled, evaluator_direction, metric_names
from editlens.meta.correlation import icc_2_1, system_level
from editlens.meta.direction import direction_note, oriented
from editlens.meta.protocols import imagenhub_correlation, parse_score_list, viescore_overall
from editlens.meta.reports import calibration_summary, edit_type_breakdown, grouped_bootstrap_ci

IMAGENHUB_EXCLUDED = ("Imagic",)



@dataclass
class ImagenHubHuman:
    """Human scores per aspect ('SC', 'PQ', 'O') -> method -> uid, and the raw per-rater O."""

    scores: dict[str, dict[str, dict[str, float]]]
    per_rater_o: dict[str, dict[str, list[float]]] = field(default_factory=dict)



def load_imagenhub_human(ratings_dir: str | Path) -> ImagenHubHuman:
    d = Path(ratings_dir)
    files = sorted(d.glob("*rater*.tsv")) if d.is_dir() else []
    if not files:
        raise InputError(f"{d}: no rater TSV files (expected Text-Guided_IE_rater1.tsv, ...)")
    per: dict[str, dict[str, list[tuple[float, float]]]] = {}
    for f in files:
        seen: dict[str, tuple[Any, str]] = {}
        with open(f, encoding="utf-8", newline="") as fh:
            reader = csv.DictReader(fh, delimiter="\t")
            for lineno, row in enumerate(reader, 2):
                uid = row.pop("uid", None)
                if not uid:
                    raise InputError(f"{f}:{lineno}: missing uid")
                cells = {m: c for m, c in row.items() if m is not None and m not in IMAGENHUB_EXCLUDED}
                # one rater rating one sample twice would count as two raters
                if not keep_once(seen, uid, cells, f"{f}:{lineno}", "uid"):
                    continue
                for method, cell in cells.items():
                    vals = parse_score_list(cell)
                    if vals is None or len(vals) != 2:
                        raise InputError(f"{f}:{lineno}: cell for {method} is {cell!r}, expected [SC, PQ]")
                    if any(v < 0 for v in vals):
                        raise InputError(f"{f}:{lineno}: cell for {method} is {cell!r}: a rating is negative")
                    per.setdefault(method, {}).setdefault(uid, []).append((vals[0], vals[1]))
    scores: dict[str, dict[str, dict[str, float]]] = {"SC": {}, "PQ": {}, "O": {}}
    per_o: dict[str, dict[str, list[float]]] = {}
    for method, items in per.items():
        for uid, ratings in items.items():
            sc = [r[0] for r in ratings]
            pq = [r[1] for r in ratings]
            o = [math.sqrt(a * b) for a, b in ratings]
            scores["SC"].setdefault(method, {})[uid] = float(np.mean(sc))
            scores["PQ"].setdefault(method, {})[uid] = float(np.mean(pq))
            scores["O"].setdefault(method, {})[uid] = float(np.mean(o))
            per_o.setdefault(method, {})[uid] = o
    return ImagenHubHuman(scores, per_o)



@dataclass
class JudgePredictions:
    """Predicted scores per aspect -> method -> uid, and the answers that could not be parsed."""

    scores: dict[str, dict[str, dict[str, float]]]
    unparsable: list[dict[str, Any]] = field(default_factory=list)
    total: int = 0



def load_viescore_outputs(judge_dir: str | Path) -> JudgePredictions:
    d = Path(judge_dir)
    if not d.is_dir():
        raise InputError(f"{d}: judge-outputs directory not found (expected <Method>/SC.json and PQ.json)")
    scores: dict[str, dict[str, dict[str, float]]] = {"SC": {}, "PQ": {}, "O": {}}
    bad: list[dict[str, Any]] = []
    total = 0
    methods = sorted(p for p in d.iterdir() if p.is_dir() and p.name not in IMAGENHUB_EXCLUDED)
    if not methods:
        raise InputError(f"{d}: no method folders with SC.json/PQ.json")
    for mdir in methods:
        data = {}
        for aspect in ("SC", "PQ"):
            data[aspect] = read_json(mdir / f"{aspect}.json", f"VIEScore {aspect} answers of {mdir.name}")
        for uid in sorted(set(data["SC"]) | set(data["PQ"])):
            total += 1
            sc_raw = (data["SC"].get(uid) or {}).get("score")
            pq_raw = (data["PQ"].get(uid) or {}).get("score")
            res = viescore_overall(sc_raw, pq_raw)
            if res is None:
                bad.append({"method": mdir.name, "uid": uid, "SC": sc_raw, "PQ": pq_raw})
                continue
            for aspect, v in zip(("SC", "PQ", "O"), res):
                scores[aspect].setdefault(mdir.name, {})[uid] = v
    return JudgePredictions(scores, bad, total)



def imagenhub_report(ratings_dir: str | Path, judge_outputs: str | Path | None = None,
                     predictions: str | Path | None = None, metric: str | None = None,
                     aggregation: str = "official", n_boot: int = 1000, seed: int = 0,
                     instructions: str | Path | None = None, good_at: float = 0.5) -> dict[str, Any]:
    """ImagenHub text-guided editing, official protocol by default.

    Predictions come from VIEScore-style judge outputs (``judge_outputs``;
    all three aspects) or from a predictions file (``predictions``; the score
    is compared with human O, SC and PQ). The report adds the calibration of
    the O score to the share of raters who rate an edit good (O >= ``good_at``)
    and, when the instructions are known (``instructions``: a JSONL with
    ``uid`` and ``instruction``, by default ``samples.jsonl`` beside the
    ratings folder when there is one), a breakdown by edit type.
    """
    human = load_imagenhub_human(ratings_dir)
    if (judge_outputs is None) == (predictions is None):
        raise InputError("give exactly one of --judge-outputs or --predictions")
    if judge_outputs is not None:
        preds = load_viescore_outputs(judge_outputs)
        pred_by_aspect = preds.scores
        unparsable, total = preds.unparsable, preds.total
    else:
        scores, models, unscored = load_predictions(predictions, metric)  # type: ignore[arg-type]
        if not scores and unscored:
            raise nothing_scored(len(unscored))
        scores = oriented(scores, metric)  # a lower-is-better evaluator agrees when its score falls as ratings rise
        grouped: dict[str, dict[str, float]] = {}
        for sid, v in scores.items():
            g, item = split_id(sid, models)
            grouped.setdefault(g, {})[item] = v
        pred_by_aspect = {"O": grouped, "SC": grouped, "PQ": grouped}
        unparsable = [{"id": s} for s in unscored]
        total = len(scores) + len(unscored)
    aspects = {}
    for aspect in ("O", "SC", "PQ"):
        res = imagenhub_correlation(pred_by_aspect[aspect], human.scores[aspect], aggregation)
        ci = grouped_bootstrap_ci(pred_by_aspect[aspect], human.scores[aspect], aggregation, n_boot, seed)
        # undefined (every method excluded: constant ratings, too few items) is null, never NaN
        aspects[aspect] = {**res.to_dict(), "ci95": list(ci) if all(math.isfinite(v) for v in ci) else None}
        if not math.isfinite(aspects[aspect]["value"]):
            aspects[aspect]["value"] = None
    used = sum(aspects["O"]["n_per_group"].values())
    if not used:
        from editlens.core.evidence import not_measured

        raise InputError("ImagenHub agreement " + not_measured(0, "no editing method has two items with both a "
                         "prediction and human ratings") + "; prediction ids must be METHOD/UID")
    # system level: do the methods' mean predicted and mean human overall ratings (items with both) rank them alike?
    pred_o, human_o = pred_by_aspect["O"], human.scores["O"]
    shared = {g: sorted(set(human_o[g]) & set(pred_o.get(g, {}))) for g in human_o}
    shared = {g: items for g, items in shared.items() if items}
    system = system_level({g: [pred_o[g][i] for i in items] for g, items in shared.items()},
                          {g: [human_o[g][i] for i in items] for g, items in shared.items()})
    rater_matrix = [r for m in human.per_rater_o.values() for r in m.values() if len(r) >= 2]
    k = min(len(r) for r in rater_matrix) if rater_matrix else 0
    icc = icc_2_1([r[:k] for r in rater_matrix]) if k >= 2 else None
    if instructions is None and (Path(ratings_dir).parent / "samples.jsonl").is_file():
        instructions = Path(ratings_dir).parent / "samples.jsonl"
    texts = instruction_texts(instructions)
    types = edit_types({uid: t for uid, t in texts.items() if "/" not in uid})
    flat_pred = {(g, i): v for g, items in pred_by_aspect["O"].items() for i, v in items.items()}
    flat_human = {(g, i): v for g, items in human.scores["O"].items() for i, v in items.items()}
    extra: dict[str, Any] = {
        "calibration": calibration_summary(imagenhub_labels(ratings_dir, judge_outputs, predictions, metric, good_at),
                                            seed),
        "by_edit_type": edit_type_breakdown(flat_pred, flat_human, {k: types[k[1]] for k in flat_pred if k[1] in types},
                                            n_boot, seed) if types else {},
        "instructions_from": str(instructions) if instructions else None,
    }
    return {
        "benchmark": "imagenhub-tie",
        "direction": ("higher is better (VIEScore answers)" if judge_outputs is not None
                      else direction_note(metric)),
        "protocol": "imagenhub-official" if aggregation == "official" else f"imagenhub-{aggregation}",
        "aggregation": aggregation,
        "aggregation_note": {
            "official": "tanh(mean of per-method Spearman r), as ImagenHub's code and published numbers",
            "fisher": "tanh(mean(arctanh(r))): the true Fisher-z average",
            "mean": "plain mean of per-method r",
        }[aggregation],
        "value": aspects["O"]["value"],
        "aspects": aspects,
        "n_items": used,
        "n_predictions": total,
        "n_unparsable": len(unparsable),
        "unparsable": unparsable[:50],
        "human_inter_rater_icc_2_1": icc,
        "system_level": system,
        "bootstrap": {"n": n_boot, "seed": seed, "resampling": "items within each method"},
        **extra,
    }



def imagenhub_labels(ratings_dir: str | Path, judge_outputs: str | Path | None = None,
                     predictions: str | Path | None = None, metric: str | None = None, good_at: float = 0.5,
                     name: str | None = None) -> list[Labelled]:
    """ImagenHub: each rater's O = sqrt(SC * PQ); an edit is *good* for a rater
    when O >= ``good_at``; the target is the share of raters who found it good.
    Scores are the judge's O (VIEScore answers, evaluator ``viescore`` unless
    ``name`` says otherwise) or an editlens run's ``metric`` (comma-separated
    for several)."""
    if not 0.0 < good_at <= 1.0:
        raise InputError(f"--good-at must be in (0, 1] (a rater's O = sqrt(SC*PQ) is in [0, 1]), got {good_at}")
    human = load_imagenhub_human(ratings_dir)
    shares = {(m, uid): float(np.mean([o >= good_at - 1e-12 for o in os]))
              for m, items in human.per_rater_o.items() for uid, os in items.items()}
    target = f"share of ImagenHub raters whose O = sqrt(SC*PQ) >= {good_at:g}"
    if (judge_outputs is None) == (predictions is None):
        raise InputError("give exactly one of --judge-outputs or --predictions")
    sources: list[tuple[str, dict[tuple[str, str], float], int, bool | None, tuple[float, float] | None]] = []
    if judge_outputs is not None:
        preds = load_viescore_outputs(judge_outputs)
        flat = {(m, uid): v for m, items in preds.scores["O"].items() for uid, v in items.items()}
        sources.append((name or "viescore", flat, len(preds.unparsable), True, (0.0, 1.0)))
    else:
        for met in metric_names(metric):
            scores, models, unscored = load_predictions(predictions, met)  # type: ignore[arg-type]
            flat = {}
            for sid, v in scores.items():
                flat[split_id(sid, models)] = v
            hib, rng = evaluator_direction(met) if met else (None, None)
            sources.append((name if (name and len(metric_names(metric)) == 1) else (met or "score"), flat, len(unscored),
                            hib, rng))
    out = []
    for ev, flat, n_bad, hib, rng in sources:
        keys = sorted(set(flat) & set(shares))
        if len(keys) < 2:
            raise InputError(f"{ev}: only {len(keys)} edit(s) have both a score and ImagenHub ratings; ids must be METHOD/UID")
        out.append(Labelled(ev, "imagenhub-tie", target, [f"{m}/{u}" for m, u in keys], [flat[k] for k in keys],
                            [shares[k] for k in keys], [u for _, u in keys], True if hib is None else hib, rng,
                            n_unscored=n_bad, n_unlabelled=len(set(flat) - set(shares))))
    return out



@register
class ImagenHub(HumanLabelBenchmark):
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
        usage="editlens meta-eval run imagenhub --data DIR --predictions results.jsonl --metric NAME",
        identical="human O = mean over raters of sqrt(SC*PQ); the Imagic column excluded; tanh(mean r) as published",
        differs="bootstrap CIs, the true Fisher-z average and the plain mean are offered beside it",
    )
    protocol_functions = {"imagenhub-official": lambda **kw: imagenhub_report(aggregation="official", **kw),
                          "imagenhub-fisher": lambda **kw: imagenhub_report(aggregation="fisher", **kw),
                          "imagenhub-mean": lambda **kw: imagenhub_report(aggregation="mean", **kw)}
    report_title = "ImagenHub"
    calibration_target = "the share of the raters whose O = sqrt(SC*PQ) >= --good-at (0.5)"
    data_help = "the folder of Text-Guided_IE_rater*.tsv"
    predictions_help = ("a folder <Method>/{SC,PQ}.json of VIEScore answers, or an editlens results.jsonl / "
                        "{id, score} JSONL with ids METHOD/UID")

    def labels(self, path: str | Path, **options: Any) -> Any:
        return load_imagenhub_human(path)

    def evaluate(self, data: str | Path, predictions: str | Path | None = None, *, protocol: str | None = None,
                 metric: str | None = None, verdicts: str | Path | None = None, n_boot: int = 1000, seed: int = 0,
                 **options: Any) -> MetaReport:
        """``predictions``: a folder of judge answers, or a scores file; option ``instructions``
        (a JSONL with uid and instruction, for the breakdown by edit type)."""
        no_options(self.spec.name, {k: v for k, v in options.items() if k != "instructions"})
        if verdicts is not None:
            raise InputError("ImagenHub is rated point-wise: give --predictions, not --verdicts")
        judge = predictions if predictions is not None and Path(predictions).is_dir() else None
        scores = None if judge is not None else predictions
        aggregation = (protocol or "imagenhub-official").removeprefix("imagenhub-")
        rep = imagenhub_report(data, judge, scores, metric, aggregation, n_boot, seed, options.get("instructions"))
        rep["evaluated"] = evaluated(predictions=scores, metric=metric, judge_outputs=judge, human=data)
        return MetaReport(rep, self.report_title)

    def summary(self, rep: Mapping[str, Any]) -> list[str]:
        from editlens.core.evidence import not_measured

        lines = [f"ImagenHub ({rep['protocol']}: {rep['aggregation_note']})"]
        for aspect, a in rep["aspects"].items():
            n = sum(a["n_per_group"].values())
            lines.append(f"  {aspect:<3} {figure_of(a['value'], n)}  95% CI {ci(a['ci95'])}")
        icc = rep["human_inter_rater_icc_2_1"]
        lines.append(f"  items {rep['n_items']}, unparsable answers {rep['n_unparsable']}, human inter-rater ICC(2,1) "
                     + (f"{icc:.3f}" if icc is not None else not_measured(0, "fewer than two raters rated the same items")))
        return lines + trust_lines(rep)

    def calibration_labels(self, data: str | Path, predictions: str | Path, metric: str | None = None,
                           **options: Any) -> list[Labelled]:
        """P(a rater finds the edit good): the share of raters whose O = sqrt(SC*PQ) >= ``good_at``
        (0.5 unless given); ``name``: the evaluator the map is for."""
        no_options(self.spec.name, {k: v for k, v in options.items() if k not in ("good_at", "name")})
        judge = predictions if Path(predictions).is_dir() else None
        return imagenhub_labels(data, judge, None if judge else predictions, metric, float(options.get("good_at", 0.5)),
                                options.get("name"))

"""A human-label benchmark from another package, in one file (tests/test_meta_plugin.py installs it
as a distribution whose ``editlens.benchmarks`` entry point names :class:`ToyRatings`).

Its published form: a CSV ``id,rater,rating`` (several raters per edit, ratings 1-5). Its protocol:
Kendall tau between an evaluator's scores and the mean rating, with a bootstrap CI; its calibration
target: the share of raters who gave 4 or more."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any, Mapping

from editlens.bench.base import BenchSpec
from editlens.bench.evaluate import HumanLabelBenchmark, MetaReport, evaluated, f, no_options
from editlens.bench.labels import load_predictions, number
from editlens.errors import InputError
from editlens.meta.calibration import Labelled
from editlens.meta.correlation import correlate


def read_ratings(path: str | Path) -> dict[str, list[float]]:
    """``{id: [rating, ...]}``; a bad cell names the file, line and field."""
    out: dict[str, list[float]] = {}
    with open(path, encoding="utf-8", newline="") as fh:
        for n, row in enumerate(csv.DictReader(fh), 2):
            if not row.get("id"):
                raise InputError(f"{path}:{n}: missing id")
            try:
                value = float(row["rating"])
            except (KeyError, TypeError, ValueError):
                raise InputError(f"{path}:{n}: field 'rating' is {row.get('rating')!r}, not a number") from None
            out.setdefault(row["id"], []).append(number(value, f"{path}:{n}", "rating"))
    return out


class ToyRatings(HumanLabelBenchmark):
    spec = BenchSpec(name="toy-ratings", title="Toy ratings (a plugin)", homepage="https://example.org/toy",
                     download="(made by the test)", layout="CSV id,rater,rating (1-5)", label_kind="pointwise",
                     columns={"id": "edit id", "rating": "1-5"},
                     protocols={"toy-kendall": "Kendall tau of the scores with the mean rating"})
    report_title = "toy ratings"
    calibration_target = "share of raters who gave 4 or more"
    data_help = "CSV id,rater,rating"
    predictions_help = "an editlens results.jsonl (with --metric) or {id, score} JSONL"

    def labels(self, path: str | Path, **options: Any) -> Any:
        return read_ratings(path)

    def evaluate(self, data: str | Path, predictions: str | Path | None = None, *, protocol: str | None = None,
                 metric: str | None = None, verdicts: str | Path | None = None, n_boot: int = 1000, seed: int = 0,
                 **options: Any) -> MetaReport:
        no_options(self.spec.name, options)
        if predictions is None:
            raise InputError("toy-ratings reads an evaluator's scores: give --predictions")
        ratings = read_ratings(data)
        scores, _, unscored = load_predictions(predictions, metric)
        ids = sorted(set(ratings) & set(scores))
        c = correlate([scores[i] for i in ids], [sum(ratings[i]) / len(ratings[i]) for i in ids], "kendall", n_boot, seed)
        rep = {"benchmark": "toy-ratings", "protocol": protocol or "toy-kendall", "value": c.value, "n_items": len(ids),
               "ci95": list(c.ci), "n_unparsable": len(unscored),
               "evaluated": evaluated(predictions=predictions, metric=metric, human=data)}
        return MetaReport(rep, self.report_title)

    def summary(self, rep: Mapping[str, Any]) -> list[str]:
        return [f"toy ratings: Kendall tau {f(rep['value'])} over {rep['n_items']} edits"]

    def calibration_labels(self, data: str | Path, predictions: str | Path, metric: str | None = None,
                           **options: Any) -> list[Labelled]:
        ratings = read_ratings(data)
        scores, _, unscored = load_predictions(predictions, metric)
        ids = sorted(set(ratings) & set(scores))
        good = [sum(r >= 4 for r in ratings[i]) / len(ratings[i]) for i in ids]
        return [Labelled(metric or "score", "toy-ratings", "share of raters who gave 4 or more", ids,
                         [scores[i] for i in ids], good, ids, n_unscored=len(unscored))]

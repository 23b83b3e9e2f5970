"""The one meta-evaluation path of every human-label benchmark.

A human-label benchmark is one file, ``bench/<name>.py``: a :class:`HumanLabelBenchmark` whose
``spec`` (:class:`~editlens.bench.base.BenchSpec`, ``label_kind`` pointwise / pairwise / ranked)
says what it is, and whose methods are its reader (:meth:`~HumanLabelBenchmark.labels`), its
protocols (:meth:`~HumanLabelBenchmark.evaluate`: protocol + bootstrap + calibration + breakdown
by edit type, with the helpers here), its report text (:meth:`~HumanLabelBenchmark.summary`,
``report_title``) and its calibration target (:meth:`~HumanLabelBenchmark.calibration_labels`).
:func:`run` (``editlens meta-eval run NAME``), :func:`calibration` (``editlens calibrate run
NAME``) and :func:`prepare` (``editlens meta-eval prepare NAME``) reach every one of them, built-in
or from a plugin's ``editlens.benchmarks`` entry point, through the registry and never by name.
The statistics themselves are :mod:`editlens.meta` (pure: protocols, correlation, bootstrap,
calibration fit and apply).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Mapping

from editlens.bench.base import Benchmark
from editlens.errors import InputError
from editlens.meta.calibration import Labelled
from editlens.meta.correlation import correlate


@dataclass
class MetaReport:
    """One meta-evaluation: the report document (``--json`` prints it), the title of its HTML
    report, and what the report draws beside it (points, a confusion table), if anything."""

    report: dict[str, Any]
    title: str
    extra: dict[str, Any] | None = None


class HumanLabelBenchmark(Benchmark):
    """A benchmark of people's labels; subclasses set ``spec`` and override what applies.

    ``evaluate`` receives ``data`` (the benchmark's files: ``--data``), ``predictions`` (an evaluator's
    scores or answers: ``--predictions``) or ``verdicts`` (a pairwise judge's: ``--verdicts``), the
    ``protocol`` (a key of :meth:`protocols`; ``None``: the benchmark's choice), ``metric``, the
    bootstrap's ``n_boot`` and ``seed``, and the benchmark's own ``options`` (``--option KEY=VALUE``)."""

    #: title of the HTML report
    report_title: ClassVar[str] = ""
    #: what ``--data`` is and what ``--predictions`` is (``meta-eval list``, errors)
    data_help: ClassVar[str] = ""
    predictions_help: ClassVar[str] = ""
    #: protocols accepted beside ``spec.protocols`` (name -> one line), e.g. another aggregation
    more_protocols: ClassVar[Mapping[str, str]] = {}
    #: where the published files come from, as ``meta-eval prepare`` records it (benchmarks of pairs)
    prepare_download: ClassVar[str] = ""
    #: what :meth:`calibration_labels` makes a score's probability match ("": no calibration target)
    calibration_target: ClassVar[str] = ""

    def protocols(self) -> dict[str, str]:
        return {**self.spec.protocols, **self.more_protocols}

    def evaluate(self, data: str | Path, predictions: str | Path | None = None, *, protocol: str | None = None,
                 metric: str | None = None, verdicts: str | Path | None = None, n_boot: int = 1000, seed: int = 0,
                 **options: Any) -> MetaReport:
        raise InputError(f"benchmark {self.spec.name} has no meta-evaluation")

    def summary(self, rep: Mapping[str, Any]) -> list[str]:
        """The report as lines of text (what ``meta-eval run`` prints without ``--json``)."""
        value = rep.get("value")
        return [f"{self.spec.title}: {rep.get('protocol')} " + ("-" if value is None else f"{value:.4f}")]

    def calibration_title(self, data: str | Path) -> str:
        """The title of ``editlens calibrate``'s report on ``data``."""
        return self.report_title or self.spec.title

    def calibration_labels(self, data: str | Path, predictions: str | Path, metric: str | None = None,
                           **options: Any) -> list[Labelled]:
        """Each evaluator's scores with the human probability they should match (the calibration target)."""
        raise InputError(f"benchmark {self.spec.name} names no calibration target")

    def read_pairs(self, path: str | Path, with_images: bool = False, **options: Any) -> Any:
        """The labelled pairs (:class:`~editlens.bench.labels.LabelledPairs`) of a benchmark that
        ``meta-eval prepare`` turns into a manifest: a folder it wrote (its ``benchmark.json``), else the
        published files (:meth:`read_published`)."""
        from editlens.bench.labels import read_prepared

        p = Path(path)
        if (p / "benchmark.json").is_file():
            return read_prepared(p, self.spec.name)
        return self.read_published(p, with_images=with_images, **options)

    def read_published(self, path: Path, with_images: bool = False, **options: Any) -> Any:
        """The published files as labelled pairs (benchmarks that ``meta-eval prepare`` knows)."""
        raise InputError(f"benchmark {self.spec.name} has nothing to prepare (it is read as published)")


def human_label_benchmark(name: str) -> HumanLabelBenchmark:
    """The registered human-label benchmark ``name`` (an error lists them otherwise)."""
    from editlens.bench.registry import get, names

    known = [b.spec.name for b in human_label_benchmarks()]
    if name not in names():  # the list meta-eval can run, not every benchmark's
        raise InputError(f"unknown benchmark {name!r}; meta-eval runs {', '.join(known)} (`editlens meta-eval list`)")
    bench = get(name)
    if not isinstance(bench, HumanLabelBenchmark):
        raise InputError(f"{name} is not a human-label benchmark (label kind {bench.spec.label_kind}); "
                         f"meta-eval runs {', '.join(known)}")
    return bench


def human_label_benchmarks() -> list[HumanLabelBenchmark]:
    from editlens.bench.registry import get, names

    return [b for b in (get(n) for n in names()) if isinstance(b, HumanLabelBenchmark)]


def run(name: str, data: str | Path, predictions: str | Path | None = None, *, protocol: str | None = None,
        metric: str | None = None, verdicts: str | Path | None = None, n_boot: int = 1000, seed: int = 0,
        **options: Any) -> MetaReport:
    """Meta-evaluate an evaluator on the human-label benchmark ``name`` (its protocol, bootstrap CIs,
    calibration and edit-type breakdown where the benchmark has them)."""
    bench = human_label_benchmark(name)
    if protocol is not None and protocol not in bench.protocols():
        raise InputError(f"benchmark {name}: no protocol {protocol!r}; it has {', '.join(bench.protocols())}")
    return bench.evaluate(data, predictions, protocol=protocol, metric=metric, verdicts=verdicts, n_boot=n_boot,
                          seed=seed, **options)


def calibration(name: str, data: str | Path, predictions: str | Path, metric: str | None = None,
                **options: Any) -> list[Labelled]:
    """The labelled scores ``editlens calibrate`` fits a map on, with the benchmark's target."""
    return human_label_benchmark(name).calibration_labels(data, predictions, metric, **options)


def prepare(name: str, path: str | Path, out: str | Path, **options: Any) -> dict[str, Any]:
    """Write a benchmark of labelled pairs as a manifest for ``editlens run`` and pairs for
    ``editlens compare --pairs`` (:func:`editlens.bench.labels.write_prepared`)."""
    from editlens.bench.labels import write_prepared

    bench = human_label_benchmark(name)
    return write_prepared(bench.read_pairs(path, with_images=True, **options), path, out, bench.prepare_download)


def load_benchmark(name: str, path: str | Path, **options: Any) -> Any:
    """The labelled pairs of benchmark ``name`` read from its published files or a prepared folder."""
    return human_label_benchmark(name).read_pairs(path, **options)


def evaluated(*, predictions: str | Path | None = None, metric: str | None = None,
                       judge_outputs: str | Path | None = None, verdicts: str | Path | None = None,
                       human: str | Path | None = None) -> dict[str, Any]:
    """Which evaluator a meta-evaluation measures and where its answers came from (file names
    only: a report must not carry the paths of the machine it was made on). For an editlens
    run's ``results.jsonl``, the run's ``manifest.json`` beside it adds the evaluator's model.

    >>> evaluated(predictions="/data/run/preds.jsonl", human="/data/h.jsonl")
    {'evaluator': 'score column', 'answers': 'preds.jsonl', 'human': 'h.jsonl'}
    """
    import json

    out: dict[str, Any] = {}
    if judge_outputs is not None:
        out.update(evaluator="judge answers (VIEScore-style SC/PQ outputs)", answers=Path(judge_outputs).name)
    elif verdicts is not None:
        out.update(evaluator="pairwise judge verdicts", answers=Path(verdicts).name)
    elif predictions is not None:
        out.update(evaluator=metric or "score column", answers=Path(predictions).name)
        run_manifest = Path(predictions).parent / "manifest.json"
        if metric and run_manifest.is_file():
            try:
                entries = json.loads(run_manifest.read_text(encoding="utf-8")).get("evaluators") or []
            except (OSError, ValueError):
                entries = []
            entry = next((e for e in entries if isinstance(e, dict) and e.get("name") == metric), None)
            opts = (entry or {}).get("options") or {}
            model = {k: Path(str(v)).name for k, v in opts.items() if k in ("vlm", "vlm_model", "model", "models")
                     and v and not isinstance(v, (dict, list))}
            if model:
                out["model"] = model
            out["run"] = Path(predictions).parent.name
    if human is not None:
        out["human"] = Path(human).name
    return out


def require(n: int, why: str) -> None:
    """No judgement at all is no result: an error, never a table of "-"."""
    if n <= 0:
        from editlens.core.evidence import not_measured

        raise InputError(f"{not_measured(0, why)}; check that the ids match the benchmark's")


def no_options(name: str, options: Mapping[str, Any]) -> None:
    if options:
        raise InputError(f"benchmark {name} takes no option {', '.join(sorted(options))}")


def split_id(sid: str, models: Mapping[str, str]) -> tuple[str, str]:
    """(group, item) of an editlens run sample id: group = its model, item =
    the id's last '/'-separated part (ImagenHub manifests use METHOD/UID)."""
    return models.get(sid, sid.split("/")[0]), sid.split("/")[-1]



def column_breakdown(pred: Mapping[Any, float], human: Mapping[Any, float], paths: list[str | Path], column: str,
                     n_boot: int = 1000, seed: int = 0) -> dict[str, Any]:
    """Per value of ``column`` (a field of the human file's or the predictions' rows, e.g. an
    editlens ``results.jsonl`` keeps every manifest column): items and pooled Spearman with
    its bootstrap 95% CI. An unknown column is an :class:`InputError` listing the fields there are."""
    from editlens.data.jsonl import iter_jsonl

    values: dict[str, Any] = {}
    fields: set[str] = set()
    for path in paths:
        for _, row in iter_jsonl(path):
            fields |= set(row)
            if "id" in row and column in row:
                values.setdefault(str(row["id"]), row[column])
    if not values:
        shown = sorted(fields - {"id", "scores", "images", "score", "human", "details"})
        raise InputError(f"--by {column!r}: no row of {', '.join(str(p) for p in paths)} has that field; "
                         f"group by one of {', '.join(shown) or '(none)'}")
    groups = {k: ("(none)" if v in (None, "") else str(v)) for k, v in values.items()}
    by: dict[str, list[Any]] = {}
    for k in sorted(set(pred) & set(human), key=str):
        by.setdefault(groups.get(str(k), "(none)"), []).append(k)

    def finite(c: dict[str, Any]) -> dict[str, Any]:  # undefined (n < 2, constant scores) is null, never NaN or 0
        ok = lambda v: v is not None and math.isfinite(v)  # noqa: E731
        return {**c, "value": c["value"] if ok(c["value"]) else None,
                "ci95": c["ci95"] if all(ok(v) for v in c["ci95"]) else None}

    return {g: {"n": len(ks), "spearman": finite(correlate([pred[k] for k in ks], [human[k] for k in ks], "spearman",
                                                            n_boot, seed).to_dict())}
            for g, ks in sorted(by.items())}



def instruction_texts(path: str | Path | None) -> dict[str, dict[str, Any]]:
    """``{id: {"instruction", "edit_type"}}`` from any JSONL with those fields (editlens
    ``results.jsonl``, a human file, ImagenHub's ``samples.jsonl`` keyed ``METHOD/UID`` and ``UID``)."""
    from editlens.data.jsonl import iter_jsonl

    out: dict[str, dict[str, Any]] = {}
    if path is None:
        return out
    for _, row in iter_jsonl(path):
        text = {k: row[k] for k in ("instruction", "edit_type") if row.get(k) not in (None, "")}
        if not text:
            continue
        if "uid" in row:
            out.setdefault(str(row["uid"]), text)
            if "method" in row:
                out[f"{row['method']}/{row['uid']}"] = text
        elif "id" in row:
            out[str(row["id"])] = text
    return out



def edit_types(texts: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    from editlens.data.edit_types import edit_type_of

    return {k: edit_type_of({"id": k, **v}) for k, v in texts.items()}



def nothing_scored(n_unscored: int, what: str = "predictions") -> InputError:
    """The error when every prediction is unscored or failed: say so, and where to look."""
    return InputError(f"nothing was scored: all {n_unscored} {what} are unscored or failed, so there is no "
                      "agreement to measure; `editlens runs failures RUN_DIR` lists the reasons")



# ----------------------------------------------------------------------------------------------- report text

NO_MATCH = "no item has both a prediction and a human score"


def figure_of(value: float | None, n: int) -> str:
    """A figure with the number of items it counts (:func:`editlens.core.evidence.figure`)."""
    from editlens.core.evidence import figure

    return figure(value, n, NO_MATCH)


def ci(interval: Any) -> str:
    if not interval or any(v is None or not math.isfinite(v) for v in interval):
        return "undefined (too few items to resample)"
    return f"[{interval[0]:.4f}, {interval[1]:.4f}]"


def f(x: float | None) -> str:
    return "-" if x is None else f"{x:.4f}"


def trust_lines(rep: Mapping[str, Any]) -> list[str]:
    """The calibration (ECE before and after, out of fold) and the per-edit-type figures of a report."""
    lines = []
    cal = rep.get("calibration") or {}
    for ev, q in (cal.get("evaluators") or {}).items():
        lines.append(f"  calibration of {ev} to {cal['target']}: ECE {q['ece_before']:.4f} as a raw probability, "
                     f"{q['ece_after']:.4f} after an isotonic map (out of fold; `editlens calibrate` saves it)")
    if rep.get("by_edit_type"):
        lines.append("  by edit type" + (" (Spearman pooled over editing models)" if any(
            "spearman" in r for r in rep["by_edit_type"].values()) else "") + ":")
    for t, r in (rep.get("by_edit_type") or {}).items():
        fig = (f"Spearman {r['spearman']['value']:.3f}" if r.get("spearman", {}).get("value") is not None
               else f"accuracy {r['accuracy']:.3f}" if "accuracy" in r else "undefined")
        lines.append(f"    {r.get('label', t):<17} n={r['n']:<5} {fig}")
    return lines

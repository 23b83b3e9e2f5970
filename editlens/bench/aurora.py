"""AURORA-Bench (human ratings of edits, point-wise and pair-wise), and the
generic point-/pair-wise human files that fit it: ``{id, model, human}`` and
``{id, a, b, preference}``. Its protocols: one Spearman over all items (ADIEE's
release) or per model, ImagenHub-style aggregations, pairwise accuracy with tie
calibration, a pairwise judge's verdicts in both orders, ADIEE's released rule."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from editlens.bench.base import BenchSpec
from editlens.bench.evaluate import (
    HumanLabelBenchmark,
    MetaReport,
    column_breakdown,
    edit_types,
    evaluated,
    instruction_texts,
    no_options,
    nothing_scored,
    require,
)
from editlens.bench.labels import load_pairwise_human, load_pointwise_human, load_predictions, load_verdicts
from editlens.bench.registry import register
from editlens.data.jsonl import iter_jsonl
from editlens.errors import InputError
from editlens.meta.calibration import Labelled, evaluator_direction, metric_names
from editlens.meta.correlation import correlate, system_level
from editlens.meta.direction import direction_note, oriented
from editlens.meta.protocols import accuracy_with_ties, adiee_pair_verdict, aurora_pointwise, imagenhub_correlation
from editlens.meta.reports import calibration_summary, edit_type_breakdown

#: pairwise labels in display order: +1 = A better, 0 = tie, -1 = B better
PAIR_LABELS = ((1, "A better"), (0, "tie"), (-1, "B better"))


def pointwise_points(human_path: str | Path, pred_path: str | Path, metric: str | None = None) -> list[tuple[float, float, str]]:
    """``(predicted, human, group)`` for every item with both scores."""
    human, groups = load_pointwise_human(human_path)
    scores, _, _ = load_predictions(pred_path, metric)
    return [(scores[i], human[i], groups[i]) for i in sorted(set(human) & set(scores))]


def pairwise_confusion(human_path: str | Path, pred_path: str | Path, threshold: float,
                       metric: str | None = None) -> dict[str, Any]:
    """Counts of (human label, predicted label) over scored pairs; a predicted
    tie is ``|score(A) - score(B)| <= threshold`` (the calibrated threshold).

    Rows are the human labels, columns the predicted ones, both in
    :data:`PAIR_LABELS` order.
    """
    from editlens.meta.direction import oriented

    pairs = load_pairwise_human(human_path)
    scores = oriented(load_predictions(pred_path, metric)[0], metric)  # as the accuracy it shows beside
    index = {lab: i for i, (lab, _) in enumerate(PAIR_LABELS)}
    m = np.zeros((3, 3), dtype=int)
    for p in pairs:
        if p["a"] in scores and p["b"] in scores:
            d = scores[p["a"]] - scores[p["b"]]
            pred = 0 if abs(d) <= threshold else int(np.sign(d))
            m[index[p["label"]], index[pred]] += 1
    return {"labels": [name for _, name in PAIR_LABELS], "matrix": m.tolist(), "threshold": threshold}


def released_rule_accuracy(human: str | Path, predictions: str | Path, metric: str | None = None,
                           denominator: str = "scored") -> dict[str, Any]:
    """ADIEE's pairwise protocol: accuracy of the released rule, beside
    accuracy with tie calibration. ``denominator``: ``scored`` (default: over
    the pairs whose two edits are scored) or ``all`` (as the release's
    ``run_aurorabenchpairwise``: over all pairs, a pair without both scores
    counted wrong)."""
    if denominator not in ("scored", "all"):
        raise ValueError(f"denominator must be scored or all, got {denominator!r}")
    rep = pairwise_report(human, predictions, metric)
    pairs = load_pairwise_human(human)
    scores, _, _ = load_predictions(predictions, metric)
    usable = [p for p in pairs if p["a"] in scores and p["b"] in scores]
    hits = sum(adiee_pair_verdict(scores[p["a"]], scores[p["b"]]) == p["label"] for p in usable)
    over = usable if denominator == "scored" else pairs
    return {"protocol": "adiee-released-rule", "released_rule_accuracy": hits / len(over) if over else None,
            "n": len(over), "denominator": denominator, "unscored_pairs": len(pairs) - len(usable),
            "accuracy_with_ties": rep}


def pointwise_report(human_path: str | Path, pred_path: str | Path, metric: str | None = None,
                     protocol: str = "aurora", n_boot: int = 1000, seed: int = 0,
                     by: str | None = None) -> dict[str, Any]:
    """Generic point-wise agreement: the protocol's figure (with the number of
    items it actually counts), overall correlations with CIs, and
    system-level Kendall tau between model rankings.

    ``protocol``: ``aurora`` (one Spearman over all items, as ADIEE's release;
    the per-model mean is reported beside it), ``aurora-per-model`` (the mean
    of per-model Spearman as the headline), ``official``/``fisher``/``mean``
    (ImagenHub-style aggregations of per-group Spearman). ``by``: also a breakdown
    (``by_column``) per value of that field of the human file's or the predictions' rows.
    """
    human, groups = load_pointwise_human(human_path)
    scores, _, unscored = load_predictions(pred_path, metric)
    scores = oriented(scores, metric)  # a lower-is-better evaluator agrees when its score falls as ratings rise
    ids = sorted(set(human) & set(scores))
    missing = sorted(set(human) - set(scores) - set(unscored))
    if not scores and unscored:
        raise nothing_scored(len(unscored))
    if len(ids) < 2:
        raise InputError(f"only {len(ids)} item(s) have both a prediction and a human score; check that the "
                         f"prediction ids match the human file's ids (e.g. {sorted(human)[:3]})")
    if len({human[i] for i in ids}) < 2:  # one class: no correlation exists to report
        raise InputError(f"{human_path}: every matched human score is {human[ids[0]]:g} (a single class); agreement "
                         "needs edits people rated differently")
    pred_g: dict[str, dict[str, float]] = {}
    human_g: dict[str, dict[str, float]] = {}
    for i in ids:
        pred_g.setdefault(groups[i], {})[i] = scores[i]
        human_g.setdefault(groups[i], {})[i] = human[i]
    figures: dict[str, Any] = {}
    if protocol in ("aurora", "aurora-per-model"):
        aurora = aurora_pointwise(pred_g, human_g)
        figures = {"global_spearman": {k: aurora[k] for k in ("value", "n_items", "aggregation")},
                   "per_model_mean_spearman": aurora["per_model_mean"]}
        head = figures["global_spearman"] if protocol == "aurora" else figures["per_model_mean_spearman"]
        grouped = {**aurora["per_model_mean"],  # per-group detail; the headline below
                   "protocol": "aurora-pointwise" if protocol == "aurora" else "aurora-per-model-mean",
                   "value": head["value"], "n_items": head["n_items"],
                   "value_note": ("one Spearman over all items (ADIEE's release)" if protocol == "aurora"
                                  else "mean over editing models of per-model Spearman")}
    elif protocol in ("official", "fisher", "mean"):
        grouped = imagenhub_correlation(pred_g, human_g, protocol).to_dict()
        grouped["n_items"] = int(sum(grouped["n_per_group"].values()))
    else:
        raise InputError(f"--protocol must be aurora, aurora-per-model, official, fisher or mean, got {protocol!r}")
    x = [scores[i] for i in ids]
    y = [human[i] for i in ids]
    texts = {**instruction_texts(human_path), **instruction_texts(pred_path)}
    types = edit_types({i: texts[i] for i in ids if i in texts})
    in_01 = all(0.0 <= human[i] <= 1.0 for i in ids)
    extra = {
        # calibration needs a probability to match: human scores in [0, 1] (labels or a share of raters)
        "calibration": calibration_summary(pointwise_labels(human_path, pred_path, metric), seed) if in_01 else
        {"error": "human scores outside [0, 1]: run `editlens calibrate run aurora --good-at T` to say which are good"},
        "by_edit_type": edit_type_breakdown(scores, human, types, n_boot, seed) if types else {},
    }
    if by:
        extra["by_column"] = {"column": by, "groups": column_breakdown(
            {i: scores[i] for i in ids}, {i: human[i] for i in ids}, [human_path, pred_path], by, n_boot, seed)}
    return {
        "benchmark": "pointwise",
        "direction": direction_note(metric),
        "protocol": grouped["protocol"],
        "value": grouped["value"],
        "n_items": grouped["n_items"],  # the items the headline figure counts
        "figures": figures,
        "grouped": grouped,
        "overall": {m: correlate(x, y, m, n_boot, seed).to_dict() for m in ("pearson", "spearman", "kendall")},
        "system_level": system_level({g: list(v.values()) for g, v in pred_g.items()},
                                     {g: list(v.values()) for g, v in human_g.items()}),
        "n_matched": len(ids),
        "n_unparsable": len([u for u in unscored if u in human]),
        "n_missing": len(missing),
        "bootstrap": {"n": n_boot, "seed": seed},
        **extra,
    }


def pairwise_report(human_path: str | Path, pred_path: str | Path, metric: str | None = None) -> dict[str, Any]:
    """Pairwise accuracy with tie calibration, over pairs whose two edits are both scored."""
    pairs = load_pairwise_human(human_path)
    scores, _, unscored = load_predictions(pred_path, metric)
    scores = oriented(scores, metric)  # score(A) - score(B) > 0 means A is better, in either direction
    usable = [p for p in pairs if p["a"] in scores and p["b"] in scores]
    unparsable = [p["id"] for p in pairs if p["a"] in unscored or p["b"] in unscored]
    if not scores and unscored:
        raise nothing_scored(len(unscored))
    if not usable:
        raise InputError("no pair has both edits scored; check that 'a'/'b' match prediction ids")
    res = accuracy_with_ties([p["label"] for p in usable], [scores[p["a"]] - scores[p["b"]] for p in usable])
    texts = {**instruction_texts(human_path), **instruction_texts(pred_path)}
    types = edit_types({p["id"]: texts.get(p["id"]) or texts[p["a"]] for p in usable if p["id"] in texts or p["a"] in texts})
    by_type: dict[str, Any] = {}
    for t in sorted(set(types.values())):
        sub = [p for p in usable if types.get(p["id"]) == t]
        h, d = [p["label"] for p in sub], [scores[p["a"]] - scores[p["b"]] for p in sub]
        from editlens.data.edit_types import edit_type_label

        # the threshold chosen on all pairs, applied within the type (re-fitting it per type would flatter small types)
        pred = [0 if abs(x) <= res["threshold"] else (1 if x > 0 else -1) for x in d]
        by_type[t] = {"label": edit_type_label(t), "n": len(sub),
                      "accuracy": float(np.mean([a == b for a, b in zip(pred, h)]))}
    return {"benchmark": "pairwise", "direction": direction_note(metric), **res, "n_pairs": len(pairs), "n_unparsable": len(unparsable),
            "n_missing": len(pairs) - len(usable) - len(unparsable), "by_edit_type": by_type}


def verdicts_report(human_path: str | Path, verdicts_path: str | Path) -> dict[str, Any]:
    """A pairwise judge against human pairs (``{"id", "preference"}``): accuracy
    of each order asked, MMRB2-style accuracy over all judgements, the
    consistency of the two orders, and the accuracy of the reported verdict
    (agreed, or a tie where the orders disagreed). A tie verdict is right
    only on a human tie; no verdict is no judgement (counted apart)."""
    human = {p["id"]: p["label"] for p in load_pairwise_human(human_path)}
    verdicts = load_verdicts(verdicts_path)
    labels = {"A>B": 1, "B>A": -1, "A=B=Good": 0, "A=B=Bad": 0, "A=B": 0}
    per = {"forward": [0, 0], "reverse": [0, 0]}
    final = [0, 0]
    agree = checked = no_verdict = 0
    for pid, h in human.items():
        v = verdicts.get(pid)
        if v is None:
            continue
        orders = v.get("orders") or {"forward": {"verdict": v.get("verdict")}}
        got = {}
        for name, tally in per.items():
            verdict = (orders.get(name) or {}).get("verdict")
            if verdict in labels:
                tally[1] += 1
                tally[0] += labels[verdict] == h
                got[name] = labels[verdict]
        if len(got) == 2:
            checked += 1
            agree += got["forward"] == got["reverse"]
        if v.get("verdict") in labels:
            final[1] += 1
            final[0] += labels[v["verdict"]] == h
        else:
            no_verdict += 1
    judged = per["forward"][1] + per["reverse"][1]
    acc = (per["forward"][0] + per["reverse"][0]) / judged if judged else None
    return {"benchmark": "pairwise", "protocol": "pairwise judge in both orders (MMRB2): correct judgements / "
            "judgements", "value": acc, "accuracy": acc,
            "accuracy_forward": per["forward"][0] / per["forward"][1] if per["forward"][1] else None,
            "accuracy_reverse": per["reverse"][0] / per["reverse"][1] if per["reverse"][1] else None,
            "consistency": agree / checked if checked else None, "checked_pairs": checked,
            "accuracy_of_reported_verdict": final[0] / final[1] if final[1] else None,
            "judgements": judged, "n_pairs": len(human), "n_no_verdict": no_verdict,
            "n_missing": sum(1 for pid in human if pid not in verdicts)}


def pointwise_labels(human_path: str | Path, pred_path: str | Path, metric: str | None = None,
                     good_at: float | None = None) -> list[Labelled]:
    """Generic point-wise ``{"id", "model", "human"}``: the edit is good when
    ``human >= good_at``; human values already in [0, 1] with no ``good_at``
    are read as the probability itself (e.g. a share of raters), 0/1 as labels.
    A ``group`` field (e.g. the source image) keeps an item's edits in one fold."""
    human, _ = load_pointwise_human(human_path)
    groups = {str(r["id"]): str(r.get("group", r.get("source", r["id"]))) for _, r in iter_jsonl(human_path) if "id" in r}
    vals = list(human.values())
    if good_at is None:
        if any(not 0.0 <= v <= 1.0 for v in vals):
            raise InputError(f"{human_path}: human scores outside [0, 1]; say which count as good with --good-at T "
                             "(an edit is good when human >= T)")
        targets = dict(human)
        target = "human score read as a probability (0/1 labels or a share of raters)"
    else:
        if not math.isfinite(good_at):
            raise InputError(f"--good-at must be a finite number, got {good_at}")
        targets = {k: float(v >= good_at) for k, v in human.items()}
        target = f"human >= {good_at:g}"
    out = []
    for met in metric_names(metric):
        scores, _, unscored = load_predictions(pred_path, met)
        ids = sorted(set(scores) & set(targets))
        if len(ids) < 2:
            raise InputError(f"only {len(ids)} item(s) have both a prediction and a human score; check the ids match")
        hib, rng = evaluator_direction(met) if met else (None, None)
        out.append(Labelled(met or "score", "pointwise", target, ids, [scores[i] for i in ids], [targets[i] for i in ids],
                            [groups.get(i, i) for i in ids], True if hib is None else hib, rng,
                            n_unscored=len([u for u in unscored if u in targets]),
                            n_unlabelled=len(set(scores) - set(targets))))
    return out


def pairwise_labels(human_path: str | Path, pred_path: str | Path, metric: str | None = None) -> list[Labelled]:
    """Generic pair-wise ``{"id", "a", "b", "preference"}``: the input is
    score(a) - score(b) in the evaluator's better direction, the target 1 when
    people preferred A, 0 when B; ties are left out (counted)."""
    pairs = load_pairwise_human(human_path)
    out = []
    for met in metric_names(metric):
        scores, _, unscored = load_predictions(pred_path, met)
        hib, _ = evaluator_direction(met) if met else (None, None)
        sign = -1.0 if hib is False else 1.0
        usable = [p for p in pairs if p["a"] in scores and p["b"] in scores and p["label"] != 0]
        if len(usable) < 2:
            raise InputError("fewer than 2 non-tied pairs have both edits scored; check that 'a'/'b' match prediction ids")
        out.append(Labelled(met or "score", "pairwise", "P(people prefer A over B) from score(A) - score(B)",
                            [p["id"] for p in usable], [sign * (scores[p["a"]] - scores[p["b"]]) for p in usable],
                            [1.0 if p["label"] == 1 else 0.0 for p in usable], [p["id"] for p in usable], True, None,
                            kind="pairwise", n_unscored=len([p for p in pairs if p["a"] in unscored or p["b"] in unscored]),
                            n_unlabelled=len([p for p in pairs if p["label"] == 0])))
    return out


@register
class AuroraBench(HumanLabelBenchmark):
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
        usage="editlens meta-eval run aurora --data HUMAN.jsonl --predictions results.jsonl --metric NAME (pairs: the same with pairs.jsonl, or --verdicts; the released rule: --protocol adiee-released-rule)",
        identical="the pooled Spearman of ADIEE's release and the per-model mean of EditReward's paper",
        differs="bootstrap CIs and system-level Kendall tau are added",
    )
    protocol_functions = {"aurora": lambda **kw: pointwise_report(protocol="aurora", **kw),
                          "aurora-per-model": lambda **kw: pointwise_report(protocol="aurora-per-model", **kw),
                          "pairwise-ties": lambda **kw: pairwise_report(**kw),
                          "adiee-released-rule": released_rule_accuracy}
    report_title = "point-wise"
    calibration_target = ("point-wise: the edit is good (human >= --good-at, or a human score in [0, 1] read as "
                          "the probability); pair-wise: people prefer A, from score(A) - score(B)")
    data_help = "human ratings as JSONL: point-wise {id, model, human} or pair-wise {id, a, b, preference}"
    predictions_help = "an `editlens run` results.jsonl (with --metric) or {id, score} JSON lines"
    more_protocols = {"official": "ImagenHub: tanh of the mean per-model Spearman rho (as published)",
                      "fisher": "Fisher-z average of per-model Spearman rho",
                      "mean": "mean of per-model Spearman rho"}
    #: the headline of each point-wise protocol, for the text report
    WHAT = {"aurora": "one Spearman rho over all items, as ADIEE's release",
            "aurora-per-model": "mean over editing models of per-model Spearman rho",
            "official": "ImagenHub: tanh of the mean per-method Spearman rho (as published)",
            "fisher": "Fisher-z average of per-method Spearman rho",
            "mean": "mean of per-method Spearman rho"}

    def labels(self, path: str | Path, **options: Any) -> Any:
        """Point-wise ``(scores, models)`` or pair-wise ``[{id, a, b, label}]``; ``kind``
        (``pointwise``/``pairwise``) says which, else the first line's fields do."""
        kind = options.get("kind") or label_kind(path)
        return load_pairwise_human(path) if kind == "pairwise" else load_pointwise_human(path)

    def evaluate(self, data: str | Path, predictions: str | Path | None = None, *, protocol: str | None = None,
                 metric: str | None = None, verdicts: str | Path | None = None, n_boot: int = 1000, seed: int = 0,
                 **options: Any) -> MetaReport:
        pairwise = (options.pop("kind", None) or label_kind(data)) == "pairwise"
        protocol = protocol or ("pairwise-ties" if pairwise else "aurora")
        if protocol == "adiee-released-rule":
            no_options(self.spec.name, {k: v for k, v in options.items() if k != "denominator"})
            if predictions is None:
                raise InputError("the released rule reads an evaluator's scores: give --predictions")
            rep = released_rule_accuracy(data, predictions, metric, **options)
            rep["evaluated"] = evaluated(predictions=predictions, metric=metric, human=data)
            return MetaReport(rep, "ADIEE released rule")
        if (protocol == "pairwise-ties") != pairwise:
            raise InputError(f"{data}: {'pair-wise' if pairwise else 'point-wise'} labels; protocol {protocol} "
                             f"reads {'pair-wise' if protocol == 'pairwise-ties' else 'point-wise'} ones")
        if pairwise:
            no_options(self.spec.name, options)
            if (predictions is None) == (verdicts is None):
                raise InputError("give exactly one of --predictions (scores) or --verdicts (a pairwise judge)")
            if verdicts is not None:
                rep = verdicts_report(data, verdicts)
                require(rep["judgements"], "no human pair has a verdict")
                rep["evaluated"] = evaluated(verdicts=verdicts, human=data)
                return MetaReport(rep, "pair-wise judge")
            assert predictions is not None
            rep = pairwise_report(data, predictions, metric)
            rep["evaluated"] = evaluated(predictions=predictions, metric=metric, human=data)
            return MetaReport(rep, "pair-wise", {"confusion": pairwise_confusion(data, predictions, rep["threshold"], metric)})
        no_options(self.spec.name, {k: v for k, v in options.items() if k != "by"})
        if predictions is None:
            raise InputError("point-wise agreement reads an evaluator's scores: give --predictions")
        rep = pointwise_report(data, predictions, metric, protocol, n_boot, seed, by=options.get("by"))
        rep["evaluated"] = evaluated(predictions=predictions, metric=metric, human=data)
        return MetaReport(rep, "point-wise", {"points": pointwise_points(data, predictions, metric)})

    def summary(self, rep: Mapping[str, Any]) -> list[str]:
        from editlens.bench.evaluate import ci, f, figure_of, trust_lines

        if "released_rule_accuracy" in rep:
            return [f"ADIEE released rule: accuracy {f(rep['released_rule_accuracy'])} over {rep['n']} pairs "
                    f"({rep['denominator']}; {rep['unscored_pairs']} with an unscored edit)"]
        if "consistency" in rep:
            return [f"accuracy {f(rep['accuracy'])} over {rep['judgements']} judgements (forward {f(rep['accuracy_forward'])}, "
                    f"reverse {f(rep['accuracy_reverse'])}); consistency of the two orders {f(rep['consistency'])} over "
                    f"{rep['checked_pairs']} pairs; reported verdict {f(rep['accuracy_of_reported_verdict'])}; "
                    f"{rep['n_no_verdict']} without a verdict, {rep['n_missing']} missing"]
        if "threshold" in rep:
            return [f"accuracy {figure_of(rep['accuracy'], rep['n'])} (tie threshold {rep['threshold']:.4g}) over "
                    f"{rep['n']} pairs; {rep['n_unparsable']} unscored, {rep['n_missing']} missing; {rep['direction']}",
                    *trust_lines(rep)]
        proto = {"aurora-pointwise": "aurora", "aurora-per-model-mean": "aurora-per-model"}.get(
            rep["protocol"], (rep.get("grouped") or {}).get("aggregation", rep["protocol"]))
        lines = [f"{rep['protocol']} ({self.WHAT.get(proto, rep['protocol'])}): {figure_of(rep['value'], rep['n_items'])} "
                 f"over {rep['n_items']} items ({rep['n_unparsable']} unscored, {rep['n_missing']} missing); "
                 f"{rep['direction']}"]
        for name, fig in rep.get("figures", {}).items():
            lines.append(f"  {name.replace('_', ' '):<26} {figure_of(fig['value'], fig['n_items'])} over "
                         f"{fig['n_items']} items")
        for m, c in rep["overall"].items():
            lines.append(f"  {m:<8} {figure_of(c['value'], c['n'])}  95% CI {ci(c['ci95'])}")
        sl = rep["system_level"]
        from editlens.core.evidence import figure

        lines.append(f"  system-level Kendall tau {figure(sl['kendall_tau'], len(sl['models']), 'no editing model', min_n=2)}"
                     f" over {len(sl['models'])} editing models")
        if rep.get("by_column"):
            lines.append(f"  by {rep['by_column']['column']}:")
            for g, v in rep["by_column"]["groups"].items():
                lines.append(f"    {g:<24} n={v['n']:<5} Spearman {f(v['spearman']['value'])}")
        return lines + trust_lines(rep)

    def calibration_title(self, data: str | Path) -> str:
        return "pair-wise" if label_kind(data) == "pairwise" else "point-wise"

    def calibration_labels(self, data: str | Path, predictions: str | Path, metric: str | None = None,
                           **options: Any) -> list[Labelled]:
        """Point-wise: P(the edit is good) (``good_at``: human >= it; else human in [0, 1] is the
        probability); pair-wise: P(people prefer A) from score(A) - score(B)."""
        if (options.pop("kind", None) or label_kind(data)) == "pairwise":
            no_options(self.spec.name, options)
            return pairwise_labels(data, predictions, metric)
        no_options(self.spec.name, {k: v for k, v in options.items() if k != "good_at"})
        return pointwise_labels(data, predictions, metric, options.get("good_at"))


def label_kind(path: str | Path) -> str:
    """``pairwise`` when the file's first row names two edits (``a`` and ``b``), else ``pointwise``."""
    from editlens.data.jsonl import iter_jsonl

    first = next((row for _, row in iter_jsonl(path)), {})
    return "pairwise" if "a" in first and "b" in first else "pointwise"

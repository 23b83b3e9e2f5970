"""``editlens meta-eval`` subcommands."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer

from editlens.cli.common import emit_json, guarded, output_dir, output_file
from editlens.cli.options import ImagenHubProtocol, MultiInput, PointwiseProtocol
from editlens.core.evidence import figure, not_measured

meta_app = typer.Typer(no_args_is_help=True, help="Agreement of an evaluator with human judgments (official protocols).")

JsonOpt = typer.Option(False, "--json", help="Machine-readable output.")
ReportOpt = typer.Option(None, "--report", help="Also write a self-contained HTML report to this file.")


def _write_report(path: Optional[Path], rep: dict, title: str, extra: Optional[dict] = None) -> None:
    if path is not None:
        from editlens.reporting.html import write_meta_report

        output_file(path, "--report")

        typer.echo(f"wrote {write_meta_report(rep, path, title, extra)}", err=True)


def _evaluated(**kw: Any) -> dict:
    """Which evaluator the meta-evaluation measures and where its answers came from (file names)."""
    from editlens.reporting.meta_html import describe_evaluated

    return describe_evaluated(**kw)


@meta_app.command("imagenhub")
@guarded
def imagenhub(
    ratings: Path = typer.Option(..., "--ratings", help="Folder of Text-Guided_IE_rater*.tsv."),
    judge_outputs: Optional[Path] = typer.Option(None, "--judge-outputs", help="Folder <Method>/{SC,PQ}.json."),
    predictions: Optional[Path] = typer.Option(None, "--predictions", help="editlens results.jsonl or {id, score} JSONL (ids METHOD/UID)."),
    metric: Optional[str] = typer.Option(None, "--metric", help="Score to use from editlens results."),
    protocol: ImagenHubProtocol = typer.Option("official", "--protocol", help="official (tanh of mean r), fisher, or mean."),
    n_boot: int = typer.Option(1000, "--n-boot", min=1, help="Bootstrap resamples of each CI."),
    seed: int = typer.Option(0, "--seed", help="Seed of the bootstrap."),
    instructions: Optional[Path] = typer.Option(None, "--instructions", help="JSONL with uid and instruction, for the "
                                                "breakdown by edit type (default: samples.jsonl beside the ratings folder)."),
    json_out: bool = JsonOpt,
    report: Optional[Path] = ReportOpt,
) -> None:
    """ImagenHub text-guided editing: per-method Spearman, aggregated."""
    from editlens.meta.reports import imagenhub_report

    rep = imagenhub_report(ratings, judge_outputs, predictions, metric, protocol, n_boot, seed, instructions)
    rep["evaluated"] = _evaluated(predictions=predictions, metric=metric, judge_outputs=judge_outputs, human=ratings)
    _write_report(report, rep, "ImagenHub")
    if json_out:
        emit_json(rep)
        return
    typer.echo(f"ImagenHub ({rep['protocol']}: {rep['aggregation_note']})")
    for aspect, a in rep["aspects"].items():
        n = sum(a["n_per_group"].values())
        typer.echo(f"  {aspect:<3} {figure(a['value'], n, NO_MATCH)}  95% CI {_ci(a['ci95'])}")
    icc = rep["human_inter_rater_icc_2_1"]
    typer.echo(f"  items {rep['n_items']}, unparsable answers {rep['n_unparsable']}, human inter-rater ICC(2,1) "
               + (f"{icc:.3f}" if icc is not None else not_measured(0, "fewer than two raters rated the same items")))
    _echo_trust(rep)


NO_MATCH = "no item has both a prediction and a human score"


def _ci(ci: Any) -> str:
    import math

    if not ci or any(v is None or not math.isfinite(v) for v in ci):
        return "undefined (too few items to resample)"
    return f"[{ci[0]:.4f}, {ci[1]:.4f}]"


def _echo_trust(rep: dict) -> None:
    """The calibration (ECE before and after, out of fold) and the per-edit-type figures of a report."""
    cal = rep.get("calibration") or {}
    for ev, q in (cal.get("evaluators") or {}).items():
        typer.echo(f"  calibration of {ev} to {cal['target']}: ECE {q['ece_before']:.4f} as a raw probability, "
                   f"{q['ece_after']:.4f} after an isotonic map (out of fold; `editlens calibrate` saves it)")
    if rep.get("by_edit_type"):
        typer.echo("  by edit type" + (" (Spearman pooled over editing models)" if any(
            "spearman" in r for r in rep["by_edit_type"].values()) else "") + ":")
    for t, r in (rep.get("by_edit_type") or {}).items():
        fig = (f"Spearman {r['spearman']['value']:.3f}" if r.get("spearman", {}).get("value") is not None
               else f"accuracy {r['accuracy']:.3f}" if "accuracy" in r else "undefined")
        typer.echo(f"    {r.get('label', t):<17} n={r['n']:<5} {fig}")


@meta_app.command("genai-bench")
@guarded
def genai_bench(judge_outputs: Path = typer.Option(..., "--judge-outputs", help="Official result file (JSON list)."),
                json_out: bool = JsonOpt, report: Optional[Path] = ReportOpt) -> None:
    """GenAI-Bench image editing: official 4-way accuracy."""
    from editlens.meta.reports import genai_bench_report

    rep = genai_bench_report(judge_outputs)
    rep["evaluated"] = _evaluated(judge_outputs=judge_outputs)
    _write_report(report, rep, "GenAI-Bench")
    if json_out:
        emit_json(rep)
        return
    typer.echo(f"GenAI-Bench accuracy {figure(rep['accuracy'], rep['n'] - rep['no_verdict'], 'no answer holds a verdict')}"
               f" over {rep['n']} items ({rep['no_verdict']} without a verdict, counted wrong as the protocol does)")


@meta_app.command("pointwise")
@guarded
def pointwise(human: Path = typer.Option(..., "--human", help="JSONL {id, model, human}."),
              predictions: Path = typer.Option(..., "--predictions", help="JSONL {id, score} or editlens results.jsonl."),
              metric: Optional[str] = typer.Option(None, "--metric", help="Evaluator whose score is used (see `editlens metrics`)."),
              protocol: PointwiseProtocol = typer.Option("aurora", "--protocol", help="aurora (one Spearman over all items, as "
                                           "ADIEE's release; the per-model mean beside it), aurora-per-model "
                                           "(mean of per-model Spearman), official, fisher, mean."),
              n_boot: int = typer.Option(1000, "--n-boot", min=1, help="Bootstrap resamples of each CI."),
              seed: int = typer.Option(0, "--seed", help="Seed of the bootstrap."),
              by: Optional[str] = typer.Option(None, "--by", help="Also break the agreement down by a field of the "
                                               "human file or the predictions (results.jsonl keeps every manifest "
                                               "column, e.g. task_type, instruction_language)."),
              json_out: bool = JsonOpt, report: Optional[Path] = ReportOpt) -> None:
    """Point-wise agreement (AURORA-Bench style) with CIs and system-level tau."""
    from editlens.meta.reports import pointwise_report

    rep = pointwise_report(human, predictions, metric, protocol, n_boot, seed, by=by)
    rep["evaluated"] = _evaluated(predictions=predictions, metric=metric, human=human)
    if report is not None:
        from editlens.reporting.meta_html import pointwise_points

        _write_report(report, rep, "point-wise", {"points": pointwise_points(human, predictions, metric)})
    if json_out:
        emit_json(rep)
        return
    what = {"aurora": "one Spearman rho over all items, as ADIEE's release",
            "aurora-per-model": "mean over editing models of per-model Spearman rho",
            "official": "ImagenHub: tanh of the mean per-method Spearman rho (as published)",
            "fisher": "Fisher-z average of per-method Spearman rho",
            "mean": "mean of per-method Spearman rho"}.get(protocol, rep["protocol"])
    typer.echo(f"{rep['protocol']} ({what}): {figure(rep['value'], rep['n_items'], NO_MATCH)} over {rep['n_items']} "
               f"items ({rep['n_unparsable']} unscored, {rep['n_missing']} missing); {rep['direction']}")
    for name, fig in rep.get("figures", {}).items():
        typer.echo(f"  {name.replace('_', ' '):<26} {figure(fig['value'], fig['n_items'], NO_MATCH)} over "
                   f"{fig['n_items']} items")
    for m, c in rep["overall"].items():
        typer.echo(f"  {m:<8} {figure(c['value'], c['n'], NO_MATCH)}  95% CI {_ci(c['ci95'])}")
    sl = rep["system_level"]
    typer.echo(f"  system-level Kendall tau {figure(sl['kendall_tau'], len(sl['models']), 'no editing model', min_n=2)}"
               f" over {len(sl['models'])} editing models")
    if rep.get("by_column"):
        typer.echo(f"  by {rep['by_column']['column']}:")
        for g, v in rep["by_column"]["groups"].items():
            typer.echo(f"    {g:<24} n={v['n']:<5} Spearman {_f(v['spearman']['value'])}")
    _echo_trust(rep)


@meta_app.command("pairwise")
@guarded
def pairwise(human: Path = typer.Option(..., "--human", help="JSONL {id, a, b, preference}."),
             predictions: Optional[Path] = typer.Option(None, "--predictions", help="JSONL {id, score} or editlens results.jsonl."),
             verdicts: Optional[Path] = typer.Option(None, "--verdicts", help="A pairwise judge's verdicts "
                                                     "(editlens compare --pairs ... --out FILE), instead of scores."),
             metric: Optional[str] = typer.Option(None, "--metric", help="Evaluator whose score is used (see `editlens metrics`)."),
             json_out: bool = JsonOpt, report: Optional[Path] = ReportOpt) -> None:
    """Pair-wise accuracy with tie calibration (Deutsch et al., 2023); with --verdicts, a pairwise judge's
    accuracy per presentation order and the consistency of the two orders (MMRB2's protocol)."""
    if (predictions is None) == (verdicts is None):
        raise typer.BadParameter("give exactly one of --predictions (scores) or --verdicts (a pairwise judge)")
    if verdicts is not None:
        from editlens.meta.rewardbench import verdicts_report

        rep = verdicts_report(human, verdicts)
        _require(rep["judgements"], "no human pair has a verdict")
        rep["evaluated"] = _evaluated(verdicts=verdicts, human=human)
        _write_report(report, rep, "pair-wise judge")
        if json_out:
            emit_json(rep)
            return
        typer.echo(f"accuracy {_f(rep['accuracy'])} over {rep['judgements']} judgements (forward {_f(rep['accuracy_forward'])}, "
                   f"reverse {_f(rep['accuracy_reverse'])}); consistency of the two orders {_f(rep['consistency'])} over "
                   f"{rep['checked_pairs']} pairs; reported verdict {_f(rep['accuracy_of_reported_verdict'])}; "
                   f"{rep['n_no_verdict']} without a verdict, {rep['n_missing']} missing")
        return
    from editlens.meta.reports import pairwise_report

    assert predictions is not None  # exactly one of --predictions, --verdicts (checked above)
    rep = pairwise_report(human, predictions, metric)
    rep["evaluated"] = _evaluated(predictions=predictions, metric=metric, human=human)
    if report is not None:
        from editlens.reporting.meta_html import pairwise_confusion

        _write_report(report, rep, "pair-wise", {"confusion": pairwise_confusion(human, predictions, rep["threshold"], metric)})
    if json_out:
        emit_json(rep)
        return
    typer.echo(f"accuracy {figure(rep['accuracy'], rep['n'], NO_MATCH)} (tie threshold {rep['threshold']:.4g}) over "
               f"{rep['n']} pairs; {rep['n_unparsable']} unscored, {rep['n_missing']} missing; {rep['direction']}")
    _echo_trust(rep)


def _require(n: int, why: str) -> None:
    """No judgement at all is no result: a message and exit 2, never a table of "-"."""
    if n <= 0:
        from editlens.errors import InputError

        raise InputError(f"{not_measured(0, why)}; check that the ids match the benchmark's")


def _f(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.4f}"


BenchOpt = typer.Option(..., "--bench", help="The benchmark as published (file or folder), or a folder from "
                        "`editlens meta-eval prepare`.")
PredOpt = typer.Option(None, "--predictions", help="editlens results.jsonl of the prepared manifest (or {id, score} JSONL).")
MetricOpt = typer.Option(None, "--metric", help="Evaluator whose scores to use from editlens results.")


@meta_app.command("prepare")
@guarded
def prepare_cmd(kind: str = typer.Argument(..., help="editscore-bench, editreward-bench or mmrb2."),
                path: Path = typer.Argument(..., help="The benchmark as published: EditScore's arrow/parquet folder, "
                                            "TIGER-Lab's parquet folder, MMRB2's edit.json."),
                out: Path = typer.Option(..., "--out", help="Folder to write images, manifest.jsonl, pairs.jsonl."),
                multi_input: MultiInput = typer.Option("skip", "--multi-input", help="MMRB2 pairs with several input images: "
                                                "skip, or first (the first image stands for the source)."),
                json_out: bool = JsonOpt) -> None:
    """Turn a human-label benchmark into a manifest for `editlens run` and pairs for `editlens compare --pairs`."""
    from editlens.meta.rewardbench import prepare

    output_dir(out)
    summary = prepare(kind, path, out, multi_input)
    if json_out:
        emit_json(summary)
        return
    typer.echo(f"{summary['edits']} edits, {summary['pairs']} labelled pairs -> {out}/manifest.jsonl (editlens run), "
               f"{out}/pairs.jsonl (editlens compare --pairs, meta-eval pairwise)")
    left = (summary.get("info") or {}).get("left_out")
    if left:
        typer.echo("  left out: " + ", ".join(f"{k} ({v})" for k, v in left.items()))


@meta_app.command("editscore-bench")
@guarded
def editscore_bench_cmd(bench: Path = BenchOpt, predictions: Path = typer.Option(..., "--predictions", help="Predictions: an `editlens run` results.jsonl (with --metric) or {id, score} JSON lines."),
                        metric: Optional[str] = MetricOpt, json_out: bool = JsonOpt,
                        report: Optional[Path] = ReportOpt) -> None:
    """EditScore's EditReward-Bench: pairwise accuracy per subtask and dimension, the 13-subtask average and 4 groups."""
    from editlens.bench.registry import get

    rep = get("editscore-bench").run_protocol("editscore", bench=bench, predictions=predictions, metric=metric)
    _require(rep["n_pairs"] - rep["n_unscored_pairs"], "no pair has both edits scored")
    rep["evaluated"] = _evaluated(predictions=predictions, metric=metric, human=bench)
    _write_report(report, rep, "EditScore EditReward-Bench")
    if json_out:
        emit_json(rep)
        return
    typer.echo(f"EditReward-Bench (EditScore): {rep['n_pairs']} pairs, {rep['n_unscored_pairs']} with an unscored edit")
    for dim, d in rep["dimensions"].items():
        groups = ", ".join(f"{g} {_f(v)}" for g, v in d["groups"].items())
        typer.echo(f"  {dim:<17} average {_f(d['average'])} (unscored as wrong {_f(d['average_unscored_as_wrong'])}); "
                   f"{groups}; read from {', '.join(d['score_field']) or '-'}")


@meta_app.command("editreward-bench")
@guarded
def editreward_bench_cmd(bench: Path = BenchOpt, predictions: Path = typer.Option(..., "--predictions", help="Predictions: an `editlens run` results.jsonl (with --metric) or {id, score} JSON lines."),
                         metric: Optional[str] = MetricOpt, json_out: bool = JsonOpt,
                         report: Optional[Path] = ReportOpt) -> None:
    """TIGER-Lab's EditReward-Bench: 2-way tie-calibrated accuracy, 3/4-way C/(C+D), strict group accuracy."""
    from editlens.bench.registry import get

    rep = get("editreward-bench").run_protocol("editreward", bench=bench, predictions=predictions, metric=metric)
    _require(sum(e["scored_pairs"] for e in rep["by_k"].values()), "no pair has both edits scored")
    rep["evaluated"] = _evaluated(predictions=predictions, metric=metric, human=bench)
    _write_report(report, rep, "TIGER-Lab EditReward-Bench")
    if json_out:
        emit_json(rep)
        return
    typer.echo(f"EditReward-Bench (TIGER-Lab): strict group accuracy {_f(rep['strict_accuracy'])} over "
               f"{rep['strict']['groups']} groups ({rep['strict']['groups_with_unscored_edits']} with unscored edits)")
    for k, e in rep["by_k"].items():
        pw = (e.get("pairwise") or {}).get("accuracy")
        typer.echo(f"  {k}: pairwise {_f(pw)}, strict {_f(e['strict']['accuracy'])} ({e['scored_pairs']}/{e['pairs']} pairs scored)")


@meta_app.command("mmrb2")
@guarded
def mmrb2_cmd(bench: Path = BenchOpt, predictions: Optional[Path] = PredOpt, metric: Optional[str] = MetricOpt,
              verdicts: Optional[Path] = typer.Option(None, "--verdicts", help="Verdicts of a pairwise judge "
                                                      "(editlens compare --pairs PAIRS --orders both --out FILE)."),
              multi_input: MultiInput = typer.Option("skip", "--multi-input", help="skip or first (see meta-eval prepare)."),
              json_out: bool = JsonOpt, report: Optional[Path] = ReportOpt) -> None:
    """MMRB2 image editing: accuracy over both presentation orders, per order, and their consistency."""
    from editlens.bench.registry import get

    if (predictions is None) == (verdicts is None):
        raise typer.BadParameter("give exactly one of --predictions (a point-wise evaluator) or --verdicts (a pairwise judge)")
    rep = get("mmrb2").run_protocol("mmrb2", bench=bench, predictions=predictions, verdicts=verdicts, metric=metric,
                                    multi_input=multi_input)
    _require(rep["judgements"], "no pair has a judgement")
    rep["evaluated"] = _evaluated(predictions=predictions, metric=metric, verdicts=verdicts, human=bench)
    _write_report(report, rep, "MMRB2 image editing")
    if json_out:
        emit_json(rep)
        return
    typer.echo(f"MMRB2 image editing: accuracy {_f(rep['accuracy'])} over {rep['judgements']} judgements "
               f"(forward {_f(rep['accuracy_forward'])}, reverse {_f(rep['accuracy_reverse'])}), consistency "
               f"{_f(rep['consistency'])}; {rep['n_missing']} of {rep['n_pairs']} pairs without a judgement")


@meta_app.command("arena")
@guarded
def arena_agreement(arena: Path = typer.Argument(..., help="An arena's arena.json (editlens arena), or its folder."),
                    human_ranking: Optional[Path] = typer.Option(None, "--human-ranking", help="JSON {editor: score} "
                                                                 "(higher = better) or a list of editors, best first."),
                    human_votes: Optional[Path] = typer.Option(None, "--human-votes", help="Or people's pairwise votes "
                                                               "(an `editlens annotate` folder): their arena's ranking "
                                                               "(written to DIR/arena) is the human one."),
                    json_out: bool = JsonOpt, report: Optional[Path] = ReportOpt) -> None:
    """Agreement of an arena's ranking of the editors with a human ranking: Kendall τ (τ-b) and Spearman ρ."""
    from editlens.errors import InputError
    from editlens.meta.arena import rank_agreement
    from editlens.runner.arena import load_arena, read_human_ranking

    doc = load_arena(arena)
    if doc is None:
        raise InputError(f"{arena}: no arena.json there; make one with `editlens arena RUN ...`")
    if (human_ranking is None) == (human_votes is None):
        raise typer.BadParameter("give one of --human-ranking FILE or --human-votes DIR")
    if human_votes is not None:
        from editlens.annotate.export import people_arena

        people = people_arena(human_votes)
        human = {r["editor"]: r["rating"] for r in people["editors"] if r.get("rank") is not None}
        human_ranking = human_votes / "arena" / "arena.json"
    else:
        assert human_ranking is not None
        human = read_human_ranking(human_ranking)
    # the arena's ranking: its ranked editors (a no-op is rated but never ranked)
    ratings = {r["editor"]: r["rating"] for r in doc["editors"] if r.get("rank") is not None}
    agree = rank_agreement(ratings, human)
    if agree["n"] < 2:
        raise InputError(f"{human_ranking}: names {agree['n']} of the arena's editors ({', '.join(ratings)}); "
                         "a ranking needs at least two in both")
    models = agree["editors"]
    rep = {"benchmark": "editor ranking", "protocol": "arena ranking vs human ranking",
           "statistic": "Kendall τ (τ-b) between the two rankings", "value": agree["kendall"],
           "spearman": agree["spearman"], "n": agree["n"], "ties": doc.get("ties_model"),
           "system_level": {"kendall_tau": agree["kendall"], "models": models,
                            "pred_means": [ratings[m] for m in models], "human_means": [human[m] for m in models]},
           "only_in_arena": sorted(set(ratings) - set(human)), "only_in_human": sorted(set(human) - set(ratings)),
           "not_ranked": [r["editor"] for r in doc["editors"] if r.get("rank") is None],
           "evaluated": {"evaluator": doc.get("judge"), "answers": Path(arena).name, "human": Path(human_ranking).name}}
    _write_report(report, rep, "arena ranking")
    if json_out:
        emit_json(rep)
        return
    typer.echo(f"arena ranking by {doc.get('judge')} vs the human ranking over {agree['n']} editors: Kendall τ "
               f"{_f(agree['kendall'])}, Spearman ρ {_f(agree['spearman'])}")
    for name in ("only_in_arena", "only_in_human"):
        if rep[name]:
            typer.echo(f"  {name.replace('_', ' ')}: {', '.join(rep[name])}")

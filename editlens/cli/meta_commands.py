"""``editlens meta-eval`` subcommands: ``run NAME`` meta-evaluates an evaluator on any registered
human-label benchmark (:mod:`editlens.bench.evaluate`), ``list`` names them, ``prepare NAME`` turns a
benchmark of labelled pairs into a manifest; ``arena`` compares an arena's ranking with people's. The
per-benchmark commands of earlier releases (``imagenhub``, ``genai-bench``, ``pointwise``, ``pairwise``,
``editscore-bench``, ``editreward-bench``, ``mmrb2``) stay one release as hidden aliases of ``run``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, List, Optional

import typer

from editlens.cli.common import emit_json, guarded, output_dir, output_file
from editlens.cli.options import ImagenHubProtocol, MultiInput, PointwiseProtocol

meta_app = typer.Typer(no_args_is_help=True, help="Agreement of an evaluator with human judgments (official protocols).")

JsonOpt = typer.Option(False, "--json", help="Machine-readable output.")
ReportOpt = typer.Option(None, "--report", help="Also write a self-contained HTML report to this file.")
NBootOpt = typer.Option(1000, "--n-boot", min=1, help="Bootstrap resamples of each CI.")
SeedOpt = typer.Option(0, "--seed", help="Seed of the bootstrap.")
OptionOpt = typer.Option(None, "--option", help="A benchmark's own option, KEY=VALUE (repeatable; VALUE read as "
                         "JSON when it is JSON, e.g. multi_input=first, instructions=samples.jsonl, good_at=0.5).")


def _write_report(path: Optional[Path], rep: dict, title: str, extra: Optional[dict] = None) -> None:
    if path is not None:
        from editlens.reporting.html import write_meta_report

        output_file(path, "--report")

        typer.echo(f"wrote {write_meta_report(rep, path, title, extra)}", err=True)


def parse_options(items: Optional[List[str]]) -> dict[str, Any]:
    """``--option KEY=VALUE`` pairs as keyword arguments (a value that parses as JSON is that JSON)."""
    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise typer.BadParameter(f"{item!r} is not KEY=VALUE", param_hint="--option")
        try:
            out[key.strip().replace("-", "_")] = json.loads(value)
        except ValueError:
            out[key.strip().replace("-", "_")] = value
    return out


def _show(name: str, result: Any, json_out: bool, report: Optional[Path]) -> None:
    """Write the report page, then print the report (JSON, or the benchmark's text)."""
    from editlens.bench.evaluate import human_label_benchmark

    _write_report(report, result.report, result.title, result.extra)
    if json_out:
        emit_json(result.report)
        return
    for line in human_label_benchmark(name).summary(result.report):
        typer.echo(line)


def _run(name: str, data: Path, json_out: bool, report: Optional[Path], **kw: Any) -> None:
    from editlens.bench.evaluate import run

    _show(name, run(name, data, **kw), json_out, report)


@meta_app.command("run")
@guarded
def run_cmd(name: str = typer.Argument(..., help="A human-label benchmark (`editlens meta-eval list`)."),
            data: Path = typer.Option(..., "--data", help="The benchmark's human labels as published (see `meta-eval list`)."),
            predictions: Optional[Path] = typer.Option(None, "--predictions", help="The evaluator's scores or answers: an "
                                                       "`editlens run` results.jsonl (with --metric), {id, score} JSONL, or "
                                                       "what the benchmark reads (see `meta-eval list`)."),
            verdicts: Optional[Path] = typer.Option(None, "--verdicts", help="A pairwise judge's verdicts (editlens "
                                                    "compare --pairs ... --out FILE), instead of scores."),
            protocol: Optional[str] = typer.Option(None, "--protocol", help="One of the benchmark's protocols (default: "
                                                   "its own choice; `meta-eval list` names them)."),
            metric: Optional[str] = typer.Option(None, "--metric", help="Evaluator whose score is used (see `editlens metrics`)."),
            n_boot: int = NBootOpt, seed: int = SeedOpt,
            by: Optional[str] = typer.Option(None, "--by", help="Also break the agreement down by a field of the human "
                                             "file or the predictions (point-wise benchmarks that read JSONL)."),
            option: Optional[List[str]] = OptionOpt,
            json_out: bool = JsonOpt, report: Optional[Path] = ReportOpt) -> None:
    """Agreement of an evaluator with people on one human-label benchmark: its protocol, bootstrap CIs,
    calibration and breakdown by edit type where the benchmark has them."""
    options = parse_options(option)
    if by is not None:
        options["by"] = by
    _run(name, data, json_out, report, predictions=predictions, verdicts=verdicts, protocol=protocol, metric=metric,
         n_boot=n_boot, seed=seed, **options)


@meta_app.command("list")
@guarded
def list_cmd(json_out: bool = JsonOpt) -> None:
    """The human-label benchmarks `meta-eval run` knows (built-in and plugins): label kind, protocols, inputs."""
    from editlens.bench.evaluate import human_label_benchmarks

    rows: list[dict[str, Any]] = [
        {"name": b.spec.name, "title": b.spec.title, "label_kind": b.spec.label_kind, "protocols": b.protocols(),
         "data": b.data_help, "predictions": b.predictions_help, "prepare": bool(b.prepare_download),
         "calibration_target": b.calibration_target or None, "class": f"{type(b).__module__}:{type(b).__qualname__}"}
        for b in human_label_benchmarks()]
    if json_out:
        emit_json(rows)
        return
    for r in rows:
        typer.echo(f"{r['name']:<18} {r['label_kind']:<9} {', '.join(r['protocols'])}" + ("  (prepare)" if r["prepare"] else ""))
        typer.echo(f"{'':<18} --data: {r['data']}")
        if r["calibration_target"]:
            typer.echo(f"{'':<18} calibrate run: {r['calibration_target']}")


@meta_app.command("imagenhub", hidden=True)
@guarded
def imagenhub(
    ratings: Path = typer.Option(..., "--ratings", help="Folder of Text-Guided_IE_rater*.tsv."),
    judge_outputs: Optional[Path] = typer.Option(None, "--judge-outputs", help="Folder <Method>/{SC,PQ}.json."),
    predictions: Optional[Path] = typer.Option(None, "--predictions", help="editlens results.jsonl or {id, score} JSONL (ids METHOD/UID)."),
    metric: Optional[str] = typer.Option(None, "--metric", help="Score to use from editlens results."),
    protocol: ImagenHubProtocol = typer.Option("official", "--protocol", help="official (tanh of mean r), fisher, or mean."),
    n_boot: int = NBootOpt, seed: int = SeedOpt,
    instructions: Optional[Path] = typer.Option(None, "--instructions", help="JSONL with uid and instruction, for the "
                                                "breakdown by edit type (default: samples.jsonl beside the ratings folder)."),
    json_out: bool = JsonOpt,
    report: Optional[Path] = ReportOpt,
) -> None:
    """ImagenHub text-guided editing: per-method Spearman, aggregated (= meta-eval run imagenhub)."""
    from editlens.errors import InputError

    if (judge_outputs is None) == (predictions is None):
        raise InputError("give exactly one of --judge-outputs or --predictions")
    _run("imagenhub", ratings, json_out, report, predictions=judge_outputs or predictions, metric=metric,
         protocol=f"imagenhub-{protocol.value}", n_boot=n_boot, seed=seed,
         **({"instructions": instructions} if instructions is not None else {}))


@meta_app.command("genai-bench", hidden=True)
@guarded
def genai_bench(judge_outputs: Path = typer.Option(..., "--judge-outputs", help="Official result file (JSON list)."),
                json_out: bool = JsonOpt, report: Optional[Path] = ReportOpt) -> None:
    """GenAI-Bench image editing: official 4-way accuracy (= meta-eval run genai-bench)."""
    _run("genai-bench", judge_outputs, json_out, report)


@meta_app.command("pointwise", hidden=True)
@guarded
def pointwise(human: Path = typer.Option(..., "--human", help="JSONL {id, model, human}."),
              predictions: Path = typer.Option(..., "--predictions", help="JSONL {id, score} or editlens results.jsonl."),
              metric: Optional[str] = typer.Option(None, "--metric", help="Evaluator whose score is used (see `editlens metrics`)."),
              protocol: PointwiseProtocol = typer.Option("aurora", "--protocol", help="aurora, aurora-per-model, "
                                                         "official, fisher, mean."),
              n_boot: int = NBootOpt, seed: int = SeedOpt,
              by: Optional[str] = typer.Option(None, "--by", help="Also break the agreement down by a field."),
              json_out: bool = JsonOpt, report: Optional[Path] = ReportOpt) -> None:
    """Point-wise agreement (AURORA-Bench style) with CIs and system-level tau (= meta-eval run aurora)."""
    _run("aurora", human, json_out, report, predictions=predictions, metric=metric, protocol=protocol.value,
         n_boot=n_boot, seed=seed, kind="pointwise", by=by)


@meta_app.command("pairwise", hidden=True)
@guarded
def pairwise(human: Path = typer.Option(..., "--human", help="JSONL {id, a, b, preference}."),
             predictions: Optional[Path] = typer.Option(None, "--predictions", help="JSONL {id, score} or editlens results.jsonl."),
             verdicts: Optional[Path] = typer.Option(None, "--verdicts", help="A pairwise judge's verdicts."),
             metric: Optional[str] = typer.Option(None, "--metric", help="Evaluator whose score is used."),
             json_out: bool = JsonOpt, report: Optional[Path] = ReportOpt) -> None:
    """Pair-wise accuracy with tie calibration, or a pairwise judge's (= meta-eval run aurora on pairs)."""
    if (predictions is None) == (verdicts is None):
        raise typer.BadParameter("give exactly one of --predictions (scores) or --verdicts (a pairwise judge)")
    _run("aurora", human, json_out, report, predictions=predictions, verdicts=verdicts, metric=metric, kind="pairwise")


@meta_app.command("prepare")
@guarded
def prepare_cmd(kind: str = typer.Argument(..., help="A benchmark of labelled pairs: editscore-bench, editreward-bench, "
                                           "mmrb2 (or a plugin's; `meta-eval list` marks them)."),
                path: Path = typer.Argument(..., help="The benchmark as published: EditScore's arrow/parquet folder, "
                                            "TIGER-Lab's parquet folder, MMRB2's edit.json."),
                out: Path = typer.Option(..., "--out", help="Folder to write images, manifest.jsonl, pairs.jsonl."),
                multi_input: MultiInput = typer.Option("skip", "--multi-input", help="MMRB2 pairs with several input images: "
                                                "skip, or first (the first image stands for the source)."),
                option: Optional[List[str]] = OptionOpt,
                json_out: bool = JsonOpt) -> None:
    """Turn a human-label benchmark into a manifest for `editlens run` and pairs for `editlens compare --pairs`."""
    from editlens.bench.evaluate import prepare

    options = parse_options(option)
    if multi_input.value != "skip":
        options["multi_input"] = multi_input.value
    output_dir(out)
    summary = prepare(kind, path, out, **options)
    if json_out:
        emit_json(summary)
        return
    typer.echo(f"{summary['edits']} edits, {summary['pairs']} labelled pairs -> {out}/manifest.jsonl (editlens run), "
               f"{out}/pairs.jsonl (editlens compare --pairs, meta-eval run)")
    left = (summary.get("info") or {}).get("left_out")
    if left:
        typer.echo("  left out: " + ", ".join(f"{k} ({v})" for k, v in left.items()))


BenchOpt = typer.Option(..., "--bench", help="The benchmark as published (file or folder), or a folder from "
                        "`editlens meta-eval prepare`.")
PredOpt = typer.Option(None, "--predictions", help="editlens results.jsonl of the prepared manifest (or {id, score} JSONL).")
MetricOpt = typer.Option(None, "--metric", help="Evaluator whose scores to use from editlens results.")


@meta_app.command("editscore-bench", hidden=True)
@guarded
def editscore_bench_cmd(bench: Path = BenchOpt, predictions: Path = typer.Option(..., "--predictions", help="Predictions."),
                        metric: Optional[str] = MetricOpt, json_out: bool = JsonOpt,
                        report: Optional[Path] = ReportOpt) -> None:
    """EditScore's EditReward-Bench (= meta-eval run editscore-bench)."""
    _run("editscore-bench", bench, json_out, report, predictions=predictions, metric=metric)


@meta_app.command("editreward-bench", hidden=True)
@guarded
def editreward_bench_cmd(bench: Path = BenchOpt, predictions: Path = typer.Option(..., "--predictions", help="Predictions."),
                         metric: Optional[str] = MetricOpt, json_out: bool = JsonOpt,
                         report: Optional[Path] = ReportOpt) -> None:
    """TIGER-Lab's EditReward-Bench (= meta-eval run editreward-bench)."""
    _run("editreward-bench", bench, json_out, report, predictions=predictions, metric=metric)


@meta_app.command("mmrb2", hidden=True)
@guarded
def mmrb2_cmd(bench: Path = BenchOpt, predictions: Optional[Path] = PredOpt, metric: Optional[str] = MetricOpt,
              verdicts: Optional[Path] = typer.Option(None, "--verdicts", help="Verdicts of a pairwise judge."),
              multi_input: MultiInput = typer.Option("skip", "--multi-input", help="skip or first (see meta-eval prepare)."),
              json_out: bool = JsonOpt, report: Optional[Path] = ReportOpt) -> None:
    """MMRB2 image editing (= meta-eval run mmrb2)."""
    if (predictions is None) == (verdicts is None):
        raise typer.BadParameter("give exactly one of --predictions (a point-wise evaluator) or --verdicts (a pairwise judge)")
    _run("mmrb2", bench, json_out, report, predictions=predictions, verdicts=verdicts, metric=metric,
         multi_input=multi_input.value)


def _f(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.4f}"


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
    ranked = [r for r in doc["editors"] if r.get("rank") is not None]
    if len(doc.get("groups") or []) > 1:
        raise InputError(f"{arena}: the arena's editors fall into unconnected groups "
                         f"({'; '.join(', '.join(g) for g in doc['groups'])}): no verdict orders one group against "
                         "another, so there is no one ranking to compare with the human one")
    if not ranked:
        raise InputError(f"{arena}: the arena ranks no editor ({'; '.join(doc.get('notes') or []) or 'no verdict'})")
    # the order: ratings where every ranked editor has one, else the ranks (a separated editor has no rating)
    ratings = ({r["editor"]: r["rating"] for r in ranked} if all(r.get("rating") is not None for r in ranked)
               else {r["editor"]: -float(r["rank"]) for r in ranked})
    agree = rank_agreement(ratings, human)
    if agree["kendall"] is None and agree["n"] < 3:
        raise InputError(f"{human_ranking}: names {agree['n']} of the arena's ranked editors ({', '.join(ratings)}); "
                         "a rank correlation needs at least three in both")
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

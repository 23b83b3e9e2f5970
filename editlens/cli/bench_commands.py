"""``editlens bench``: benchmarks as their owners publish and score them."""

from __future__ import annotations

from pathlib import Path
from typing import Any, List, Optional

import typer

from editlens.cli.common import EXIT_FAILED, emit_json, guarded, parse_models
from editlens.cli.edit_commands import editor_options
from editlens.cli.options import (
    AllowFailuresOpt,
    CacheOpt,
    ConcurrencyOpt,
    DeviceOpt,
    DtypeOpt,
    ModelOpt,
    RayBlockOpt,
    RetriesOpt,
    ShardOpt,
    TemperatureOpt,
    TimeoutOpt,
    VlmModelOpt,
    VlmsOpt,
    bundles,
    join_vlms,
)
from editlens.cli.training_options import LogTo, LogToOpt

bench_app = typer.Typer(no_args_is_help=True, help="Benchmarks: list them, see how each is published and scored, "
                        "and score editors' outputs with the benchmark's own protocol.")
JsonOpt = typer.Option(False, "--json", help="Machine-readable output.")


@bench_app.command("list")
@guarded
def list_cmd(json_out: bool = JsonOpt) -> None:
    """Every benchmark editlens knows (built in, or added by a package's editlens.benchmarks entry point)."""
    from editlens.bench.registry import all_benchmarks

    benches = all_benchmarks()
    if json_out:
        emit_json([{"name": b.spec.name, "title": b.spec.title, "label_kind": b.spec.label_kind,
                    "protocols": list(b.spec.protocols)} for b in benches])
        return
    rows = [("name", "labels", "protocols", "title")] + [(b.spec.name, b.spec.label_kind, ", ".join(b.spec.protocols),
                                                          b.spec.title) for b in benches]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]  # columns as wide as their longest entry
    for r in rows:
        typer.echo("  ".join(c.ljust(w) for c, w in zip(r[:3], widths)) + "  " + r[3])


@bench_app.command("info")
@guarded
def info_cmd(name: str = typer.Argument(..., help="Benchmark name (see `editlens bench list`)."),
             json_out: bool = JsonOpt) -> None:
    """Where a benchmark comes from (the exact download command), its layout, columns, categories,
    languages, label kind, protocols, table layout and what is identical to its owner's script."""
    from editlens.bench.registry import get

    info = get(name).info()
    if json_out:
        emit_json(info)
        return
    typer.echo(f"{info['title']} ({info['name']}) — {info['homepage']}")
    for key in ("download", "layout", "outputs", "label_kind", "usage", "prompts_in_clone", "identical", "differs"):
        if info.get(key):
            typer.echo(f"  {key.replace('_', ' ')}: {info[key]}")
    if info.get("label_kind") == "none" and not info.get("metrics") and info.get("release_images"):
        typer.echo("  images as the release sends them: " + ", ".join(f"{k}={v}" for k, v in
                                                                      info["release_images"].items()))
    for key in ("columns", "dimensions", "metrics", "protocols", "answer_policies", "releases"):
        if info.get(key):
            typer.echo(f"  {key}:")
            for k, v in info[key].items():
                typer.echo(f"    {k}: {v}")
    for key in ("categories", "languages"):
        if info.get(key):
            typer.echo(f"  {key}: {', '.join(info[key])}")
    if info.get("table_layout"):
        typer.echo(f"  table layout: {info['table_layout']}")


@bench_app.command("sample")
@guarded
def sample_cmd(name: str = typer.Argument(..., help="Benchmark name (gedit)."),
               out: Path = typer.Option(..., "--out", help="Folder to write it into (new or empty).")) -> None:
    """Write a tiny benchmark in its owner's published layout from the sample edits shipped in the package
    (four cases), to try `edit --bench` and `bench run` without a download (docs/quickstart-loop.md)."""
    from editlens.bench.samples import write_sample

    where = write_sample(name, out)
    typer.echo(f"wrote a 4-case {name} sample in its published layout to {where}\n"
               f"try it: editlens edit {where} --bench {name} --editor EDITOR --out OUT/edits/NAME")


@bench_app.command("run")
@guarded
@bundles
def run_cmd(
    name: str = typer.Argument(..., help="Benchmark name (see `editlens bench list`)."),
    data: Path = typer.Option(..., "--data", help="The benchmark as published (see `editlens bench info NAME`)."),
    split: Optional[str] = typer.Option(None, "--split", help="The split to score when the published folder holds "
                                        "several (default: the benchmark's, e.g. test for Emu Edit)."),
    edits: Optional[Path] = typer.Option(None, "--edits", help="Editors' outputs: DIR/<model>/... as "
                                         "`editlens bench info NAME` says; a missing output is skipped with its path."),
    editor: Optional[List[str]] = typer.Option(None, "--editor", help="Make the edits now with this editor (a "
                                               "pipeline folder, hub id, endpoint URL, module:function, command:..., "
                                               "or a name from `editlens editors`), resumably into OUT/edits/<editor>/. "
                                               "Repeatable; instead of --edits."),
    editor_option: Optional[List[str]] = typer.Option(None, "--editor-option", help="Editor setting KEY=VALUE "
                                                      "(e.g. num_inference_steps=30). Repeatable."),
    out: Path = typer.Option(..., "--out", help="Folder for run/ (resumable store), table.{json,csv,md,tex}, "
                             "items.jsonl and report.html."),
    model_name: Optional[List[str]] = typer.Option(None, "--only", help="Score only this model's folder. Repeatable."),
    vlm_urls: Optional[List[str]] = VlmsOpt,
    vlm_model: Optional[str] = VlmModelOpt,
    prompts_from: Optional[Path] = typer.Option(None, "--prompts-from", help="Your clone of the benchmark's "
                                                "repository (or its prompt file): the official judge prompts. "
                                                "Without it editlens' own wording is used and marked as such."),
    temperature: float = TemperatureOpt,
    seed: int = typer.Option(0, "--seed", help="Judge seed (sampled answers) and bootstrap seed."),
    max_new_tokens: int = typer.Option(512, "--max-new-tokens", min=1, help="Judge answer length limit."),
    model: Optional[List[str]] = ModelOpt,
    cache: str = CacheOpt,
    device: str = DeviceOpt,
    dtype: str = DtypeOpt,
    batch_size: int = typer.Option(8, "--batch-size", min=1, help="Edits per batch (one store commit each)."),
    n_boot: int = typer.Option(1000, "--n-boot", min=10, help="Bootstrap resamples for the 95% CIs."),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="Only the first N cases (a quick look)."),
    estimate: bool = typer.Option(False, "--estimate", help="Say how many judge calls (and roughly how many "
                                  "tokens) the run would make, and stop."),
    answers: str = typer.Option("release", "--answers", help="How judge answers are read: release (as the owner's "
                                "scoring script parses them, bit for bit; a value it would make up at random stays "
                                "unscored and is counted) or strict (editlens' reader: the exact format or "
                                "nothing). Both readings are stored; the table names the policy and counts the "
                                "items the two read differently."),
    images: str = typer.Option("release", "--images", help="How images are sent to the judge: release (as the "
                               "owner's script sends them: its encoding, size and order; see `bench info`) or "
                               "editlens (decoded, re-encoded as PNG)."),
    release: Optional[str] = typer.Option(None, "--release", help="The version (commit) of the owner's scoring "
                                          "script to follow where it changed (see `bench info NAME`: releases); "
                                          "default: the newest reproduced."),
    metrics: Optional[str] = typer.Option(None, "--metrics", help="Metric-suite benchmarks: compute only these "
                                          "metrics (names or the paper's columns, comma-separated, e.g. "
                                          "l1_ref,l2_ref or L1,L2), e.g. without CLIP/DINO weights."),
    probe: bool = typer.Option(True, "--probe/--no-probe", help="Send the judge engine its start-up capability "
                               "probe (one request, counted in --estimate); --no-probe skips it."),
    timeout: Optional[float] = TimeoutOpt,
    max_retries: Optional[int] = RetriesOpt,
    concurrency: Optional[int] = ConcurrencyOpt,
    no_report: bool = typer.Option(False, "--no-report", help="Skip report.html."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show progress bars (off with --json)."),
    allow_failures: bool = AllowFailuresOpt,
    json_out: bool = JsonOpt,
    where: Any = RayBlockOpt,
    shard: Optional[str] = ShardOpt,
    log_to: Optional[LogTo] = LogToOpt,
) -> None:
    """Score editors' outputs on a benchmark with its official protocol; prints the paper's table (per
    category, per language, overall) with bootstrap CIs and n. Resumable: rerun the same command.

    Exit status: 0 done; 3 some judge requests were lost (rerun to retry them); 2 bad input, including
    outputs that cannot be read as images (a rerun cannot fix those: replace the files)."""
    import sys

    from editlens.cli.options import http_settings
    from editlens.runner.bench import run_benchmark

    http = http_settings(timeout, max_retries, concurrency)
    vlm = join_vlms(vlm_urls)
    from editlens.training.tracking import open_tracker

    tracker = None if estimate else open_tracker(log_to.value if log_to else None, out,
                                                 {"benchmark": name, "vlm": vlm, "seed": seed})
    # as `editlens edit` reads them (call.KEY too); the editor runs on --device / --dtype like the metrics
    opts = editor_options(editor_option, device, dtype, False, False)
    from editlens.runner.shards import parse_shard

    part = parse_shard(shard)
    res = run_benchmark(name, data, out, edits=edits, editors=editor or (), editor_options=opts,
                        models_only=model_name, vlm=vlm, vlm_model=vlm_model,
                        prompts_from=prompts_from, temperature=temperature, seed=seed, max_new_tokens=max_new_tokens,
                        metric_models=parse_models(model), device=device, dtype=dtype, batch_size=batch_size,
                        n_boot=n_boot, limit=limit, split=split, estimate_only=estimate, progress=progress and not json_out,
                        cache={"default": True, "none": False}.get(cache, cache), command=sys.argv,
                        answers=answers, images=images, release=release, probe=probe,
                        metrics=[m.strip() for m in metrics.split(",") if m.strip()] if metrics else None,
                        shard=part, where=where, report=not no_report, http=http)
    if res.kind == "estimate":
        _say_estimate(name, res, json_out)
        return
    if res.kind == "generation_stopped":
        from editlens.cli.common import EXIT_SIGNAL_BASE

        typer.echo(f"stopped while making the edits ({res['made']} made and kept; nothing judged yet): rerun the "
                   "same command to go on", err=True)
        raise typer.Exit(EXIT_SIGNAL_BASE + int(res["stopped_by"]))
    if tracker is not None:  # each model's overall figure per section, as scalars
        tracker.log(0, {f"{model}/{sec['name']}/{fig}": cell["value"] for model, m in res["models"].items()
                        for sec in m["sections"] for fig, cell in sec["overall"]["cells"].items()
                        if cell.get("value") is not None})
        tracker.close()
    _say_table(res.to_dict(), json_out)
    _exit_of_table(res.to_dict(), out, allow_failures)


def _say_estimate(name: str, res: Any, json_out: bool) -> None:
    if json_out:
        emit_json(res.to_dict())
        return
    if not res.judged:
        typer.echo(f"{name} is scored by metrics ({', '.join(res.get('metrics', []))}): no judge calls; "
                   f"{res['edits_to_score']} edits to score, {res['skipped']} without an output")
        return
    probe_note = (f" + {res['probe_calls']} start-up probe request (--no-probe skips it)"
                  if res.get("probe_calls") else "")
    typer.echo(f"{res['judge_calls']} judge calls for {res['items']} cases x {res['models']} model(s) "
               f"({res['judge_calls_for_found_edits']} for the {res['edits_to_score']} outputs found; "
               f"{res['skipped']} missing){probe_note}; about {res['prompt_tokens_approx']:,} prompt tokens "
               f"(~{res['image_tokens_per_image_assumed']} per image) and at most "
               f"{res['completion_tokens_max']:,} answer tokens; prompts: {res['prompts']['source']}")


def _say_table(res: dict[str, Any], json_out: bool) -> None:
    if json_out:
        emit_json(res)
        return
    from editlens.bench.table import to_text

    typer.echo(to_text(res))
    for note in res.get("notes") or ():
        typer.echo(f"note: {note}", err=True)
    if res.get("prompts") and not res["prompts"]["from_clone"]:
        typer.echo("note: judge prompts are editlens' fallback wording (give --prompts-from CLONE for the "
                   "official ones); numbers are not comparable to the paper's", err=True)
    typer.echo("wrote " + ", ".join(res["files"].values()), err=True)


def _exit_of_table(res: dict[str, Any], out: Path, allow_failures: bool) -> None:
    """Stopped, unreadable outputs, lost requests, nothing readable: said, and the exit status."""
    if res.get("stopped_by"):  # a signal stopped it: finished batches are kept, rerun to go on
        from editlens.cli.common import EXIT_SIGNAL_BASE

        typer.echo("stopped: rerun the same command to go on", err=True)
        raise typer.Exit(EXIT_SIGNAL_BASE + int(res["stopped_by"]))
    bad = res.get("unreadable") or []
    if bad:
        typer.echo(f"{len(bad)} output(s) cannot be read as images (corrupt, not an image, or over the pixel "
                   f"limit): {', '.join(bad[:5])}{' ...' if len(bad) > 5 else ''}. A rerun cannot fix them: replace "
                   "the files (each one's reason is in items.jsonl)", err=True)
    if res["exit"] == 1 and not allow_failures:
        typer.echo("some edits failed (lost judge requests): rerun the same command to retry them", err=True)
        raise typer.Exit(EXIT_FAILED)
    if res["exit"] == 2 and not allow_failures:
        raise typer.Exit(2)
    counts = [m.get("counts") or {} for m in (res.get("models") or {}).values()]
    if counts and not any(c.get("scored") for c in counts) and any(c.get("unscored") for c in counts):
        # every answer unreadable: a table of dashes is not a result
        typer.echo(f"error: the judge produced nothing readable: all {sum(c.get('unscored', 0) for c in counts)} "
                   f"judged edits are unscored (their raw answers are in {out / 'items.jsonl'}). Is --vlm a judge "
                   "that follows the prompts' answer format? (A tiny random model's answers are noise; "
                   "`editlens make-tiny-vlm DIR --scripted` is a scripted judge for trying the pipeline.)", err=True)
        if not allow_failures:
            raise typer.Exit(EXIT_FAILED)


@bench_app.command("export")
@guarded
def export_cmd(
    run: Path = typer.Argument(..., help="A `bench run` output folder (its --out)."),
    official: Path = typer.Option(..., "--official", help="Folder to write the owners' intermediate files into "
                                  "(GEdit's per-task score CSVs, ImgEdit's result.json, KRIS' metrics.json, "
                                  "RISEBench's judge file; MagicBrush/Emu Edit: the edits in image_eval.py's "
                                  "layout)."),
    json_out: bool = JsonOpt,
) -> None:
    """Write a benchmark run's judge answers in its owners' own files, to run their scripts on them or submit
    them to a leaderboard (docs/benchmarks.md, "Owners' files and owners' code")."""
    from editlens.runner.official import export_official

    res = export_official(run, official)
    if json_out:
        emit_json(res)
        return
    typer.echo(f"wrote {len(res['files'])} file(s) of {res['benchmark']}'s owners under {official}")
    typer.echo(f"run the owners' scripts on them: {res['how_to_run']}")
    if res.get("note"):
        typer.echo(f"note: {res['note']}", err=True)


@bench_app.command("verify")
@guarded
def verify_cmd(
    run: Path = typer.Argument(..., help="A `bench run` output folder (its --out)."),
    clone: Path = typer.Option(..., "--clone", help="Your clone of the benchmark owners' repository (its root)."),
    python: Optional[str] = typer.Option(None, "--python", "--owner-python",
                                         help="The Python that runs the owners' code (default: this one); it needs "
                                         "what their scripts import (pandas, numpy, ...; MagicBrush's "
                                         "image_eval.py: torchvision, clip, pyiqa)."),
    keep: Optional[Path] = typer.Option(None, "--keep", help="Keep the exported files and the owners' outputs in "
                                        "this folder."),
    json_out: bool = JsonOpt,
) -> None:
    """Run the owners' scoring code from your clone on this run's judge answers and print, per figure, editlens'
    value, the owners' value and EQUAL/DIFFERENT with the reason. Exits 3 when any figure differs."""
    from editlens.runner.official import verify, verify_text

    res = verify(run, clone, python=python, keep=keep)
    if json_out:
        emit_json(res)
    else:
        typer.echo(verify_text(res))
    if res["different"]:
        raise typer.Exit(EXIT_FAILED)

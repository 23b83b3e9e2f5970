"""``editlens annotate``: people's votes on edits (a labelling page), their agreement, their export."""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Any, Optional

import typer
from typer.core import TyperGroup

from editlens.cli.common import emit_json, guarded


class _ServeByDefault(TyperGroup):
    """``editlens annotate RUN --task ... --out DIR`` is ``editlens annotate serve RUN ...``: the first word
    is a subcommand's name or the start of ``serve``'s arguments."""

    default_command = "serve"

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = [self.default_command, *args]
        return super().parse_args(ctx, args)


annotate_app = typer.Typer(cls=_ServeByDefault, no_args_is_help=True,
                           help="People's votes on edits: a labelling page (pairwise or point-wise, several "
                                "annotators), agreement statistics, and export to meta-eval, calibrate and the arena. "
                                "`editlens annotate RUN_OR_MANIFEST --task pairwise --out DIR` is `annotate serve ...`.")


class TaskKind(str, enum.Enum):
    pairwise = "pairwise"
    pointwise = "pointwise"


class Preset(str, enum.Enum):
    imagenhub = "imagenhub"
    gedit = "gedit"
    likert = "likert"


DirArg = typer.Argument(..., help="The annotation folder (--out of `editlens annotate`).")


@annotate_app.command("serve")
@guarded
def serve_cmd(
    run_or_manifest: Optional[Path] = typer.Argument(None, help="A run directory or a manifest (with the 'model' "
                                                     "column for pairs). Leave out to serve the task OUT holds."),
    out: Path = typer.Option(..., "--out", help="Annotation folder: votes.sqlite, plan.json, links.txt."),
    task: Optional[TaskKind] = typer.Option(None, "--task", help="pairwise (two edits of one source: A / B / tie / "
                                            "both bad) or pointwise (one edit on a preset's scales)."),
    preset: Preset = typer.Option(Preset.imagenhub, "--preset", help="Point-wise scales: imagenhub (SC and PQ, 0 / "
                                  "0.5 / 1), gedit (SC and PQ, 0-10), likert (overall, 1-5)."),
    annotators: str = typer.Option("1", "--annotators", help="Names (alice,bob) or a count (3 = annotator1..3); "
                                   "each gets a link with their own token."),
    overlap: int = typer.Option(1, "--overlap", min=1, help="k: each item is seen by k annotators."),
    repeats: int = typer.Option(0, "--repeats", min=0, help="Hidden repeats per annotator (pairs come back with "
                                "the sides swapped): self-consistency."),
    gold: Optional[Path] = typer.Option(None, "--gold", help="JSONL of known answers (attention checks) shown to "
                                        "every annotator: pairwise {a, b, preference: A|B|tie|both_bad}, point-wise "
                                        "{id, scores: {criterion: value}}."),
    seed: int = typer.Option(0, "--seed", help="Seed of the plan (recorded)."),
    adaptive: Optional[int] = typer.Option(None, "--adaptive", min=1, help="Pairwise: N pairs per annotator, each "
                                           "picked when reached by the arena's scheduler (the most uncertain "
                                           "neighbours), instead of a fixed plan."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind (default: this machine only)."),
    port: int = typer.Option(0, "--port", min=0, max=65535, help="Port (0: any free port)."),
    plan_only: bool = typer.Option(False, "--plan-only", help="Make the task and print the links, do not serve."),
) -> None:
    """Serve a labelling page for a run's or a manifest's edits (resumes the task OUT holds).

    Every vote is committed to OUT/votes.sqlite before the page moves on (WAL; a killed server loses
    nothing); run the same command again to resume. Links: one per annotator, also in OUT/links.txt."""
    from editlens.annotate.server import AnnotateServer
    from editlens.annotate.store import DB_NAME
    from editlens.annotate.task import Task, annotator_names
    from editlens.core.io import atomic_write
    from editlens.errors import InputError

    exists = (out / DB_NAME).is_file()
    if run_or_manifest is not None and not exists:
        if task is None:
            raise typer.BadParameter("give --task pairwise or --task pointwise")
        Task.create(out, run_or_manifest, task.value, annotators=annotator_names(annotators), overlap=overlap,
                    seed=seed, repeats=repeats, gold=gold, preset=preset.value, adaptive=adaptive).close()
        typer.echo(f"made the task in {out}: plan in {out / 'plan.json'}", err=True)
    elif not exists:
        raise InputError(f"{out}: holds no task yet; give RUN_OR_MANIFEST and --task")
    else:
        typer.echo(f"resuming the task in {out} (its recorded plan; other task options are ignored)", err=True)
    server = None
    if port == 0:  # the port served before, so the links people have keep working (any free port if taken)
        from editlens.annotate.store import VoteStore
        from editlens.errors import EditlensError

        with VoteStore(out) as store:
            before = store.get_meta("port")
        if before:
            try:
                server = AnnotateServer(out, host=host, port=int(before))
            except EditlensError:
                server = None
    if server is None:
        server = AnnotateServer(out, host=host, port=port)
    server.task.store.set_meta("port", server.port)
    links = server.links()
    atomic_write(out / "links.txt", lambda fh: fh.writelines(f"{n}\t{u}\n" for n, u in links.items()))
    for name, p in server.task.store.progress().items():
        if name in links:
            typer.echo(f"{name}: {p['voted']}/{p['planned']} done  {links[name]}")
    if plan_only:
        server.close()
        return
    typer.echo(f"serving on {server.base} (Ctrl-C to stop; votes are saved as they come)", err=True)
    try:
        server.serve_forever()
    finally:
        server.task.close()


@annotate_app.command("status")
@guarded
def status_cmd(folder: Path = DirArg,
               json_out: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """Progress per annotator."""
    from editlens.annotate.store import VoteStore

    with VoteStore(folder) as store:
        prog = store.progress()
    if json_out:
        emit_json(prog)
        return
    for name, p in prog.items():
        typer.echo(f"{name:<20} {p['voted']:>5} of {p['planned']:>5} positions answered")


@annotate_app.command("stats")
@guarded
def stats_cmd(
    folder: Path = DirArg,
    n_boot: int = typer.Option(500, "--n-boot", min=10, help="Bootstrap resamples of the items for each CI."),
    seed: int = typer.Option(0, "--seed", help="Seed of the bootstrap."),
    gold_at: float = typer.Option(0.7, "--gold-at", help="Flag an annotator whose gold accuracy is below this."),
    repeat_at: float = typer.Option(0.7, "--repeat-at", help="Flag an annotator who answers fewer repeats than "
                                    "this the same way as the first time."),
    kappa_at: Optional[float] = typer.Option(None, "--kappa-at", help="Also flag an annotator whose mean Cohen's "
                                             "kappa with the others is below this."),
    json_out: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Agreement: Krippendorff's alpha, Cohen's and Fleiss' kappa per criterion (bootstrap CIs over items);
    per annotator their kappa with the others, self-consistency on hidden repeats, gold accuracy; flagged
    annotators."""
    from editlens.annotate.stats import agreement, stats_lines

    rep = agreement(folder, n_boot=n_boot, seed=seed, gold_at=gold_at, repeat_at=repeat_at, kappa_at=kappa_at)
    if json_out:
        emit_json(rep)
    else:
        for line in stats_lines(rep):
            typer.echo(line)
    if rep["flagged"]:
        typer.echo(f"flagged: {', '.join(rep['flagged'])}", err=True)


class ExportFormat(str, enum.Enum):
    pointwise = "pointwise"
    pairwise = "pairwise"
    genai_bench = "genai-bench"
    arena = "arena"


@annotate_app.command("export")
@guarded
def export_cmd(
    folder: Path = DirArg,
    fmt: ExportFormat = typer.Option(..., "--format", help="pointwise (human.jsonl: meta-eval pointwise, calibrate "
                                     "pointwise), pairwise (pairs.jsonl: meta-eval pairwise, calibrate pairwise, "
                                     "compare --pairs), genai-bench (genai_bench.json: meta-eval genai-bench), arena "
                                     "(arena.json and human_ranking.json: arena / meta-eval arena --human-ranking)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Folder to write (default DIR/export)."),
    criterion: Optional[str] = typer.Option(None, "--criterion", help="pointwise: export this criterion's mean "
                                            "instead of the overall value (e.g. SC)."),
    verdicts: Optional[Path] = typer.Option(None, "--verdicts", help="genai-bench: a pairwise judge's verdicts on "
                                            "the exported pairs (editlens compare --pairs pairs.jsonl --out FILE)."),
    predictions: Optional[Path] = typer.Option(None, "--predictions", help="genai-bench: an evaluator's scores "
                                               "(results.jsonl or {id, score}); the higher-scored edit is its answer."),
    metric: Optional[str] = typer.Option(None, "--metric", help="genai-bench with --predictions: the evaluator."),
    seed: int = typer.Option(0, "--seed", help="arena: seed of the bootstrap."),
    json_out: bool = typer.Option(False, "--json", help="Machine-readable summary."),
) -> None:
    """Write the people's labels as the files meta-eval, calibrate and the arena read (first answer of each
    annotator per item; repeats and gold items left out)."""
    from editlens.annotate.export import export

    summary = export(folder, fmt.value, out, criterion=criterion, verdicts=verdicts, predictions=predictions,
                     metric=metric, seed=seed)
    if json_out:
        emit_json(summary)
        return
    extra = ""
    if summary.get("left_out_no_majority"):
        extra += f"; {summary['left_out_no_majority']} items without a majority left out"
    if summary.get("without_response"):
        extra += f"; {summary['without_response']} without a judged answer"
    typer.echo(f"{summary['rows']} rows{extra} -> {', '.join(summary['files'])}")


@annotate_app.command("labelstudio-export")
@guarded
def labelstudio_export_cmd(
    folder: Path = DirArg,
    out: Path = typer.Option(..., "--out", help="Folder for config.xml (the labelling config) and tasks.json."),
    url_prefix: str = typer.Option("/data/local-files/?d=", "--url-prefix", help="What image URLs start with "
                                   "(default: Label Studio's local files)."),
    image_root: Path = typer.Option(Path("/"), "--image-root", help="Image paths are written relative to this "
                                    "(Label Studio's LOCAL_FILES_DOCUMENT_ROOT)."),
) -> None:
    """The task as a Label Studio project: its labelling config (XML) and tasks (JSON)."""
    from editlens.annotate.interop import write_labelstudio

    files = write_labelstudio(folder, out, url_prefix, image_root)
    typer.echo(f"wrote {', '.join(map(str, files))}: create a project with the config, import the tasks")


@annotate_app.command("labelstudio-import")
@guarded
def labelstudio_import_cmd(
    folder: Path = DirArg,
    export_file: Path = typer.Argument(..., help="Label Studio's export (Export -> JSON) of the tasks of "
                                       "`annotate labelstudio-export`."),
) -> None:
    """Add Label Studio's annotations to the votes store (annotators ls-<id>; importing twice adds nothing)."""
    from editlens.annotate.interop import import_labelstudio

    c = import_labelstudio(folder, export_file)
    typer.echo(f"{c['imported']} votes imported, {c['already_there']} already there, {c['cancelled']} cancelled "
               "annotations skipped")

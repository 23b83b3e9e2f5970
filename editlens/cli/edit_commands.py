"""``editlens edit`` (generate edits with an editor), ``editlens editors``
(list them), ``editlens edit-pairs`` (two editors' images of the same edits,
for ``compare``) and ``editlens make-tiny-editor`` (a tiny random editing
pipeline to try them with)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, List, Optional

import typer

from editlens.cli.common import EXIT_FAILED, EXIT_SIGNAL_BASE, emit_json, guarded
from editlens.cli.options import (
    DeviceOpt,
    DtypeOpt,
    Executor,
    LimitOpt,
    RayBlockOpt,
    ShardOpt,
    TinyEditorFamily,
    bundles,
)

app = typer.Typer()

EditorOpt = typer.Option(..., "--editor", help="The editor: a diffusers pipeline folder or hub id, an endpoint "
                         "http(s)://HOST/v1, module:function, 'command:PROGRAM ARGS {source} {instruction} {seed} "
                         "{out}', or a name from `editlens editors`.")
EditorOptionOpt = typer.Option(None, "--editor-option", help="Editor setting KEY=VALUE (steps=20, guidance=7.5, "
                               "image_guidance=1.5, resolution=512, family=NAME, pipeline_class=NAME, "
                               "prompt_suffix=TEXT, call.ARG=VALUE...; values parse as JSON when they can). Repeatable.")
EditSeedOpt = typer.Option(0, "--seed", help="Base seed: each (edit, sample) gets a seed derived from it, the edit's "
                           "id and the sample index (recorded).")
CpuOffloadOpt = typer.Option(False, "--cpu-offload", help="Big pipelines: keep components on the CPU until used.")
SlicingOpt = typer.Option(False, "--attention-slicing", help="Compute attention in slices (less memory, slower).")


def parse_editor_options(items: Optional[List[str]]) -> dict[str, Any]:
    """``["steps=20", "call.eta=0.5"]`` -> ``{"steps": 20, "call": {"eta": 0.5}}`` (JSON values, else text)."""
    import json

    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise typer.BadParameter(f"--editor-option {item!r} must look like KEY=VALUE (e.g. steps=20)")
        try:
            value: Any = json.loads(raw)
        except ValueError:
            value = raw
        if key.startswith("call."):
            out.setdefault("call", {})[key[5:]] = value
        elif key.startswith("fields."):
            out.setdefault("fields", {})[key[7:]] = value
        else:
            out[key] = value
    return out


def editor_options(option: Optional[List[str]], device: str, dtype: str, cpu_offload: bool,
                   attention_slicing: bool) -> dict[str, Any]:
    return {**parse_editor_options(option), "device": device, "dtype": dtype,
            "cpu_offload": cpu_offload or None, "attention_slicing": attention_slicing or None}


def _redacted(arg: str) -> str:
    """A command-line argument as recorded: an API key given as an editor option is not written down."""
    return "api_key=***" if arg.startswith("api_key=") else arg


def spread(executor: Executor, address: Optional[str], workers: Optional[int],
           gpus_per_worker: float) -> dict[str, Any]:
    """Where the editor runs (:func:`editlens.runner.edit.open_editor`'s keywords)."""
    from editlens.cli.options import RayBlockOpt

    return RayBlockOpt.build({"executor": executor, "address": address, "workers": workers,
                              "gpus_per_worker": gpus_per_worker}, {})


def run_generation(manifest: Path, editor: str, out: Path, samples: int, seed: int, options: dict[str, Any],
                   batch_size: Optional[int], progress: bool, columns: Optional[str], retry_failed: bool = True,
                   wait: bool = False, manifest_options: Optional[dict[str, Any]] = None,
                   where: Optional[dict[str, Any]] = None, shard: Optional[str] = None,
                   limit: Optional[int] = None) -> Any:
    """Generate, print what happened; returns the :class:`~editlens.runner.edit.EditRunResult`.
    ``where``: :func:`spread`'s keywords (default: this process)."""
    from editlens.runner.edit import generate_edits, open_editor
    from editlens.runner.shards import parse_shard

    part = parse_shard(shard)
    made = open_editor(editor, options, **(where or {}))
    try:
        result = generate_edits(manifest, made, out, samples=samples, seed=seed, batch_size=batch_size,
                                progress=progress, columns=columns, retry_failed=retry_failed,
                                wait=wait, command=[_redacted(a) for a in sys.argv], manifest_options=manifest_options,
                                shard=part, limit=limit)
    finally:
        made.close()
    typer.echo(f"{result.generated} images generated, {result.reused} kept, {result.failed} failed "
               f"-> {result.manifest}", err=True)
    for rec in result.failures[:10]:
        typer.echo(f"  failed {rec['edit_id']} sample {rec['sample']}: {str(rec.get('error'))[:300]}", err=True)
    for note in result.notes:
        typer.echo(f"note: {note} (each image's shape_note is in {out / 'generations.jsonl'})", err=True)
    return result


def exit_for(result: Any, out: Path, allow_failures: bool = False) -> None:
    """Exit codes as `editlens run`: 130/143 stopped by a signal, 3 some images failed."""
    if result.interrupted:
        import signal

        how = signal.Signals(result.stopped_by or signal.SIGINT)
        typer.echo(f"interrupted ({how.name}): finished images are kept; rerun the same command to continue.",
                   err=True)
        raise typer.Exit(EXIT_SIGNAL_BASE + int(how))
    if result.failed and not allow_failures:
        typer.echo(f"{result.failed} image(s) failed (listed in {out}/generations.jsonl); rerun the same command to "
                   f"generate them again. Exit status {EXIT_FAILED} (--allow-failures: 0).", err=True)
        raise typer.Exit(EXIT_FAILED)


@app.command("edit")
@guarded
@bundles
def edit_cmd(
    manifest: Path = typer.Argument(..., help="Edits to make: a manifest with source and instruction (any format "
                                    "`editlens run` reads; an edited column is not needed), or with --bench a "
                                    "benchmark's folder as published."),
    editor: str = EditorOpt,
    out: Path = typer.Option(..., "--out", help="Output folder (created; rerun to resume): images/, manifest.jsonl, "
                             "editor.json, generations.jsonl."),
    samples: int = typer.Option(1, "--samples", min=1, help="Images per edit, each with its own seed."),
    seed: int = EditSeedOpt,
    option: Optional[List[str]] = EditorOptionOpt,
    batch_size: Optional[int] = typer.Option(None, "--batch-size", min=1, help="Images per editor call "
                                             "(default: the editor family's)."),
    device: str = DeviceOpt,
    dtype: str = DtypeOpt,
    cpu_offload: bool = CpuOffloadOpt,
    attention_slicing: bool = SlicingOpt,
    columns: Optional[str] = typer.Option(None, "--columns", help="Map the file's columns, e.g. "
                                          "source=input_image,instruction=prompt."),
    retry_failed: bool = typer.Option(True, "--retry-failed/--no-retry-failed", help="Rerun: generate images that "
                                      "failed before again."),
    wait: bool = typer.Option(False, "--wait", help="If another process holds --out, queue behind it."),
    bench: Optional[str] = typer.Option(None, "--bench", help="MANIFEST is this benchmark's folder as published "
                                        "(see `editlens bench list`): make its cases' edits (a case made from an "
                                        "earlier case's edit waits for it). `editlens bench run NAME --editor SPEC "
                                        "--out O` scores them without regenerating when --out is O/edits/<editor>."),
    split: Optional[str] = typer.Option(None, "--split", help="With --bench: the split to use when the folder "
                                        "holds several."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar."),
    allow_failures: bool = typer.Option(False, "--allow-failures", help="Exit 0 even when images failed."),
    where: Any = RayBlockOpt,
    shard: Optional[str] = ShardOpt,
    limit: Optional[int] = LimitOpt,
) -> None:
    """Generate edited images with an editor into a resumable folder whose manifest.jsonl `run`, `report`
    and `best-of-n` take as is (`edit-pairs` pairs two editors' folders for `compare`).

    Exit status: 0 done; 3 done, but some images failed (a rerun generates them); 2 bad input or missing
    weights; 130/143 stopped by Ctrl-C/SIGTERM (finished images kept).
    """
    options = editor_options(option, device, dtype, cpu_offload, attention_slicing)
    if bench is None:
        if split is not None:
            raise typer.BadParameter("--split goes with --bench")
        result = run_generation(manifest, editor, out, samples, seed, options, batch_size, progress, columns,
                                retry_failed, wait, where=where, shard=shard, limit=limit)
        exit_for(result, out, allow_failures)
        return
    if columns is not None:
        raise typer.BadParameter("--columns does not go with --bench: the benchmark says how its files are read")
    exit_for(_generate_benchmark(bench, manifest, split, editor, out, samples, seed, options, batch_size,
                                 progress, where, shard, limit), out, allow_failures)


def _generate_benchmark(name: str, data: Path, split: Optional[str], spec: str, out: Path, samples: int,
                        seed: int, options: dict[str, Any], batch_size: Optional[int], progress: bool,
                        where: Optional[dict[str, Any]] = None, shard: Optional[str] = None,
                        limit: Optional[int] = None) -> Any:
    """``edit --bench``: one editor over a benchmark's cases; the stages' results summed for the exit status."""
    from editlens.runner.bench import generate_cases, read_benchmark, shard_items
    from editlens.runner.edit import EditRunResult, open_editor

    bench, items = read_benchmark(name, data, split=split, limit=limit)
    if shard:  # which cases, and the whole benchmark's order, for `runs merge`
        from editlens.core.io import write_json
        from editlens.runner.shards import ids_digest, parse_shard, shard_record

        part = parse_shard(shard)
        assert part is not None
        out.mkdir(parents=True, exist_ok=True)
        write_json(out / "shard.json", shard_record(part, [it.id for it in items], ids_digest(
            [(it.id, it.source, it.instruction) for it in items]), "edit", benchmark=name, split=split, samples=samples),
            default=str)
    items = shard_items(items, shard)
    editor = open_editor(spec, options, **(where or {}))
    try:
        gen = generate_cases(items, editor, out, samples=samples, seed=seed, batch_size=batch_size,
                             progress=progress, command=[_redacted(a) for a in sys.argv])
    finally:
        editor.close()
    total = EditRunResult(out, out / "manifest.jsonl")
    for res in gen.results:
        total.generated, total.reused, total.failed = (total.generated + res.generated, total.reused + res.reused,
                                                       total.failed + res.failed)
        total.interrupted, total.stopped_by = total.interrupted or res.interrupted, res.stopped_by or total.stopped_by
        total.failures += res.failures
        total.reshaped += res.reshaped
        typer.echo(f"{res.generated} images generated, {res.reused} kept, {res.failed} failed -> {res.manifest}",
                   err=True)
    for rec in total.failures[:10]:  # why, naming the editor where it is at fault
        typer.echo(f"  failed {rec['edit_id']} sample {rec['sample']}: {str(rec.get('error'))[:300]}", err=True)
    missing = [k for k in gen.failures if k not in {f["edit_id"] for f in total.failures}]
    for k in missing[:10]:
        typer.echo(f"  not made {k}: {gen.failures[k]}", err=True)
    total.failed += len(missing)
    typer.echo(f"{bench.spec.title}: {len(gen.done)} of {len(items)} cases made", err=True)
    for note in gen.notes:  # the stages' shape notes among them
        typer.echo(f"note: {note}", err=True)
    return total


@app.command("editors")
@guarded
def editors_cmd(json_out: bool = typer.Option(False, "--json", help="Machine-readable output."),
                families_too: bool = typer.Option(False, "--families", help="Also list the diffusers families' "
                                                  "default settings.")) -> None:
    """The registered editors (kinds, named editors with their weights, plugins) and the diffusers families."""
    from dataclasses import asdict

    from editlens.editors import families, list_editors

    specs = list_editors()
    if json_out:
        emit_json({"editors": [s.to_dict() for s in specs],
                   "families": {k: asdict(v) for k, v in families().items()}})
        return
    for s in specs:
        weights = s.defaults.get("weights")
        typer.echo(f"{s.name:<22} {s.kind:<10} {s.description}" + (f" [{weights}]" if weights else ""))
    if families_too:
        typer.echo("")
        for f in families().values():
            typer.echo(f"family {f.family}: {', '.join(f.pipeline_classes) or '(any class)'}; {f.settings}")


@app.command("make-tiny-editor")
@guarded
def make_tiny_editor_cmd(
    out: Path = typer.Argument(..., help="Folder to write the pipeline into (created; must be empty or new)."),
    family: TinyEditorFamily = typer.Option("instruct-pix2pix", "--family", help="instruct-pix2pix, flux-kontext or "
                               "qwen-image-edit."),
    image_size: Optional[int] = typer.Option(None, "--image-size", min=8, help="Native resolution (default: the "
                                             "builder's, 32-64 px)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the random weights (another seed, another editor)."),
) -> None:
    """Write a tiny random image-editing pipeline in the real diffusers layout (made offline, a few MB).

    Its images are noise: it shows the plumbing (edit, seeds, resume, best-of-n), not editing.
    """
    from editlens.editors.random_init import make_tiny_editor

    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        typer.echo(f"error: {out} exists and is not an empty folder; give a new one", err=True)
        raise typer.Exit(2)
    make_tiny_editor(out, family, seed=seed, **({"image_size": image_size} if image_size else {}))
    typer.echo(f"wrote a tiny random {family} pipeline to {out}\n"
               f"try it: editlens edit MANIFEST --editor {out} --out edits --editor-option steps=2")


@app.command("compare-editors")
@guarded
def compare_editors_cmd(
    folders: List[Path] = typer.Argument(..., help="`editlens edit` output folders, one editor each (two or more)."),
    out: Path = typer.Option(..., "--out", help="The run directory (created; rerun to resume): its manifest.jsonl "
                             "holds every editor's edits, ids MODEL/ID, paths relative to it."),
    metrics: Optional[str] = typer.Option(None, "--metrics", help="As `editlens run --metrics`."),
    judge: Optional[str] = typer.Option(None, "--judge", help="As `editlens run --judge` (with --vlm)."),
    vlm: Optional[str] = typer.Option(None, "--vlm", help="As `editlens run --vlm`."),
    vlm_model: Optional[str] = typer.Option(None, "--vlm-model", help="As `editlens run --vlm-model`."),
    model: Optional[List[str]] = typer.Option(None, "--model", help="As `editlens run --model ROLE=DIR`."),
    option: Optional[List[str]] = typer.Option(None, "--option", help="As `editlens run --option M.KEY=VALUE`."),
    device: str = DeviceOpt,
    dtype: str = DtypeOpt,
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar."),
) -> None:
    """Several editors' `editlens edit` folders into one run (`editlens run` on their combined manifest),
    ready for `report`, `runs leaderboard`, `arena` and `best-of-n`."""
    from typer.main import get_command

    from editlens.runner.edit import combine_edit_folders

    if len(folders) < 2:
        raise typer.BadParameter("give two or more editors' folders to compare")
    manifest, counts = combine_edit_folders(folders, out / "manifest.jsonl")
    typer.echo(f"{sum(counts.values())} edits of {len(counts)} editors ({', '.join(counts)}) -> {manifest}", err=True)
    from editlens.cli.main import app as main_app

    args = ["run", str(manifest), "--out", str(out), "--device", device, "--dtype", dtype,
            *(["--metrics", metrics] if metrics else []), *(["--judge", judge] if judge else []),
            *(["--vlm", vlm] if vlm else []), *(["--vlm-model", vlm_model] if vlm_model else []),
            *[a for m in model or [] for a in ("--model", m)], *[a for o in option or [] for a in ("--option", o)],
            *([] if progress else ["--no-progress"])]
    code = get_command(main_app).main(args=args, prog_name="editlens", standalone_mode=False)
    if code:
        raise typer.Exit(int(code))


@app.command("edit-pairs")
@guarded
def edit_pairs_cmd(
    folder_a: Path = typer.Argument(..., help="An `editlens edit` output folder (editor A)."),
    folder_b: Path = typer.Argument(..., help="Another, made from the same input (editor B)."),
    out: Path = typer.Option(..., "--out", help="The pairs file to write (.jsonl), for `editlens compare --pairs`."),
) -> None:
    """Pair two editors' images of the same edits (same id and sample) for `editlens compare --pairs`."""
    from editlens.runner.edit import write_pairs

    path, n = write_pairs(folder_a, folder_b, out)
    typer.echo(f"{n} pairs -> {path}\ncompare them: editlens compare --pairs {path} --metric NAME (or --vlm URL)")

"""``editlens demo``: the main job on the sample edits shipped in the package, offline."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Optional

import typer

app = typer.Typer(add_completion=False)


@app.command("demo")
def demo_cmd(
    out: Path = typer.Option(Path("runs/demo"), "--out", help="Run directory for the demo run (rerun to resume)."),
    copy_samples: Optional[Path] = typer.Option(
        None, "--copy-samples",
        help="Only copy the sample edits (images/ and manifest.jsonl) into this folder, so that the docs' "
             "examples/... paths work outside a source checkout (e.g. --copy-samples examples)."),
) -> None:
    """Score the bundled sample edits with every model-free evaluator and build the HTML report.

    Runs `editlens run <samples>/manifest.jsonl --out OUT` then `editlens report OUT`; needs no
    weights and no network.
    """
    from editlens.paths import samples_dir

    samples = samples_dir()
    if copy_samples is not None:
        if copy_samples.exists() and any(copy_samples.iterdir()) and not (copy_samples / "manifest.jsonl").is_file():
            typer.echo(f"error: {copy_samples} exists and is not an editlens samples folder; choose an empty or "
                       "new folder", err=True)
            raise typer.Exit(2)
        shutil.copytree(samples, copy_samples, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__pycache__"))
        typer.echo(f"copied the sample edits to {copy_samples} (manifest: {copy_samples / 'manifest.jsonl'})")
        return
    from typer.main import get_command

    from editlens.cli.main import app as root

    command = get_command(root)
    for args in (["run", str(samples / "manifest.jsonl"), "--out", str(out)], ["report", str(out)]):
        try:
            command.main(args, prog_name="editlens", standalone_mode=False)
        except SystemExit as exc:  # a sub-command's exit status is the demo's
            if exc.code:
                raise typer.Exit(int(exc.code)) from None
    typer.echo(f"open {out / 'report.html'} in a browser, or serve it live with `editlens view {out}`")

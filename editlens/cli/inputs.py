"""Reading a command's manifest argument: one place for every command that takes one.

:func:`read_input` reads the manifest in any published format
(:func:`editlens.data.manifest.read_manifest`), says which rows it dropped
and which editors' outputs are missing, and returns the record a run keeps
(``inputs`` of its manifest): the path and every read option, so a report
reads the same samples (and finds the same embedded images) later.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

SplitOpt = typer.Option(None, "--split", help="Split of a dataset folder that holds several (train, test, validation...).")
EditsOpt = typer.Option(None, "--edits", help="Folder of editors' outputs, EDITS/<model>/<id>.<ext>: each manifest row "
                        "(source, instruction) is joined to each editor's output; a missing output is reported as "
                        "skipped with the path looked for.")
EditsPatternOpt = typer.Option(None, "--edits-pattern", help="Where an output lies in EDITS/<model>/ (default {id}.{ext}; "
                               "{ext} tries png, jpg, jpeg, webp...; any column, e.g. {task_type}/{key}.png).")
ImageRootOpt = typer.Option(None, "--image-root", help="Folder that relative image paths of the manifest are "
                            "resolved against (default: the manifest's folder).")


def read_input(manifest: Path, *, skip_invalid: bool = False, columns: str | None = None, encoding: str = "utf-8",
               delimiter: str | None = None, clip_boxes: bool = False, split: str | None = None,
               edits: Path | None = None, edits_pattern: str | None = None,
               image_root: Path | None = None, check_files: bool = True) -> tuple[Any, dict[str, Any]]:
    """``(ManifestReport, inputs record)``; dropped rows and missing outputs are printed to stderr."""
    from editlens.data.manifest import read_manifest

    options: dict[str, Any] = {"columns": columns, "encoding": encoding, "delimiter": delimiter, "split": split,
               "edits": str(edits.resolve()) if edits else None, "edits_pattern": edits_pattern,
               "image_root": str(image_root.resolve()) if image_root else None, "clip_boxes": clip_boxes}
    report = read_manifest(manifest, skip_invalid=skip_invalid, check_files=check_files, **options)
    for line, reason in report.problems:
        where = f"{manifest}:{line}" if report.unit == "line" else f"{manifest} {report.unit} {line}"
        typer.echo(f"skipped {where}: {reason}", err=True)
    for miss in report.missing:
        typer.echo(f"skipped edit {miss.model}/{miss.id}: {miss.reason()}", err=True)
    if report.missing:
        typer.echo(f"{len(report.missing)} edit(s) have no output and are not scored (listed above; the run "
                   "manifest keeps them)", err=True)
    record = {"manifest": str(manifest.resolve()),
              "manifest_options": {k: v for k, v in options.items() if v not in (None, False)},
              "skipped_rows": len(report.problems),
              # the reasons, for the report's header (capped: a broken file can have thousands)
              "skipped_row_reasons": [[line, reason] for line, reason in report.problems[:500]],
              "missing_edits": [{"id": m.id, "model": m.model, "looked_for": m.looked_for[0]}
                                for m in report.missing[:2000]],
              "n_missing_edits": len(report.missing)}
    return report, record

"""Folders that ``editlens edit`` wrote, read as inputs: whether a folder is one, and where each case's
image lies in it (its ``manifest.jsonl`` says; file names are not the benchmark's layout)."""

from __future__ import annotations

from pathlib import Path


def is_edit_folder(folder: Path) -> bool:
    """Whether ``folder`` is what ``editlens edit`` (``--bench``) wrote: ``editor.json`` beside
    ``manifest.jsonl``, or ``step1/``, ``step2/``... folders of that kind (multi-turn cases)."""
    return ((folder / "editor.json").is_file() and (folder / "manifest.jsonl").is_file()) or \
        (folder / "step1" / "editor.json").is_file()


def edit_folder_outputs(folder: Path) -> dict[str, Path]:
    """Case id -> its image (sample 0) in an ``editlens edit --bench`` folder (every ``stepN/`` of it too)."""
    from editlens.data.jsonl import iter_jsonl

    found: dict[str, Path] = {}
    for where in [folder, *sorted(folder.glob("step*"), key=lambda p: (len(p.name), p.name))]:
        if not (where / "manifest.jsonl").is_file():
            continue
        for _, row in iter_jsonl(where / "manifest.jsonl"):
            if int(row.get("sample") or 0) == 0:
                found[str(row.get("edit_id", row["id"]))] = where / str(row["edited"])
    return found

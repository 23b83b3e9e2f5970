"""Manifest files: one edit per row, as JSON Lines or CSV.

Required columns: ``source, edited, instruction``; ``id`` is the row's key
in results (a row without one gets ``line-N``, N its line number, so every
row has a stable id even when only some rows name one; an id used twice is
refused, naming both lines). Optional: ``reference, model, source_caption,
target_caption``. Any other column is kept in ``EditSample.metadata``;
``mask`` (a mask image) and ``boxes`` (JSON list of ``[x0, y0, x1, y1]``,
checked against the source image; clipped to it only with ``clip_boxes``)
feed the masked metric variants; ``edit_type`` overrides the edit type
found from the instruction (:mod:`editlens.data.edit_types`). Relative image
and mask paths are resolved against the manifest's folder. Validation
collects every bad row (line number and reason) instead of stopping at the
first.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from editlens.core import safepath
from editlens.core.embedded import TableImage, parse_ref
from editlens.core.types import EditSample
from editlens.data.tables import read_rows, text_rows  # noqa: F401  (text_rows: re-exported)
from editlens.errors import InputError, ManifestError

REQUIRED = ("id", "source", "edited", "instruction")
OPTIONAL = ("reference", "model", "source_caption", "target_caption")
IMAGE_COLUMNS = ("source", "edited", "reference", "mask")
KNOWN_COLUMNS = REQUIRED + OPTIONAL + ("mask", "boxes")


@dataclass
class ManifestReport:
    """The usable samples of a manifest and the rows that were dropped."""

    path: str
    samples: list[EditSample]
    problems: list[tuple[int, str]] = field(default_factory=list)
    #: what ``problems``' numbers count: ``line`` (text files) or ``row`` (tables, JSON)
    unit: str = "line"
    #: edits an editor of ``--edits`` did not write (not scored; each with the paths looked for)
    missing: list[MissingEdit] = field(default_factory=list)
    #: the table's columns holding images (parquet/arrow inputs)
    image_columns: list[str] = field(default_factory=list)
    split: str | None = None


def parse_columns(spec: str | Mapping[str, str] | None, known: tuple[str, ...] = KNOWN_COLUMNS) -> dict[str, str]:
    """``"source=input,edited=output"`` -> ``{"source": "input", "edited": "output"}``
    (editlens column = the file's column); unknown editlens columns are an error.
    ``COLUMN[N]`` takes the N-th image of a list column (``edited=output_images[0]``).

    >>> parse_columns("source=input, edited=output")
    {'source': 'input', 'edited': 'output'}
    """
    if not spec:
        return {}
    pairs = spec.items() if isinstance(spec, Mapping) else (p.partition("=")[::2] for p in spec.split(",") if p.strip())
    out = {}
    for ours, theirs in pairs:
        ours, theirs = str(ours).strip(), str(theirs).strip()
        if not ours or not theirs:
            raise InputError(f"column mapping {spec!r} must look like source=input,edited=output")
        if ours not in known:
            raise InputError(f"column mapping: {ours!r} is not an editlens column; map one of "
                             f"{', '.join(known)} to a column of your file")
        out[ours] = theirs
    return out


#: extensions tried for an editor's output file, in this order (``{ext}`` in an edits pattern)
OUTPUT_EXTENSIONS = ("png", "jpg", "jpeg", "webp", "bmp", "tif", "tiff")
DEFAULT_EDITS_PATTERN = "{id}.{ext}"


@dataclass
class MissingEdit:
    """An edit an editor did not write: the manifest row ``id``, the editor (its
    folder) and every path looked for."""

    id: str
    model: str
    looked_for: list[str]

    def reason(self) -> str:
        shown = self.looked_for[0] if len(self.looked_for) == 1 else (
            f"{self.looked_for[0]} (also tried {', '.join(Path(p).suffix for p in self.looked_for[1:])})")
        return f"no output of {self.model} for {self.id}: {shown} not found"


def read_manifest(
    path: str | os.PathLike,
    *,
    skip_invalid: bool = False,
    check_files: bool = True,
    columns: str | Mapping[str, str] | None = None,
    encoding: str = "utf-8",
    delimiter: str | None = None,
    clip_boxes: bool = False,
    split: str | None = None,
    edits: str | os.PathLike | None = None,
    edits_pattern: str | None = None,
    image_root: str | os.PathLike | None = None,
) -> ManifestReport:
    """Read and validate a manifest.

    Args:
        path: a ``.jsonl``, ``.csv`` (``.tsv``) or ``.json`` file, a parquet or
            arrow file, a folder of them (a hub snapshot), a ``datasets``
            ``save_to_disk`` folder, or a folder of JSON files (see
            :mod:`editlens.data.tables`). Images embedded in tables are kept
            as references (:class:`~editlens.core.embedded.TableImage`),
            decoded when a sample is loaded.
        skip_invalid: drop bad rows (they are listed in ``problems``) instead
            of raising :class:`ManifestError`.
        check_files: check that every referenced image file exists.
        columns: which of the file's columns hold editlens' columns, e.g.
            ``"source=input,edited=output"`` for AURORA's ``edits.jsonl``
            (CLI: ``--columns``). Rows without an ``id`` get ids from their
            line numbers (``line-7``; tables: ``row-7``, counted from 0).
        encoding: the file's text encoding (a UTF-8 BOM is accepted).
        delimiter: a CSV's field separator (default ``,``; ``.tsv``: tab).
        clip_boxes: cut pixel boxes that reach past the source image to it
            (default: such a row is invalid, with the reason).
        split: which split of a dataset folder holding several.
        edits: a folder of editors' outputs, ``EDITS/<model>/<id>.<ext>``: each
            row is joined to each editor's output (sample id ``<model>/<id>``,
            ``model`` the folder, the row's own id kept as ``row_id``); a row an
            editor has no output for is listed in ``missing`` with the paths
            looked for, not scored.
        edits_pattern: where an output lies inside ``EDITS/<model>/``, with
            ``{id}``, ``{ext}`` (tries png, jpg, jpeg, webp...) and any column,
            e.g. ``fullset/{task_type}/{instruction_language}/{key}.png``.
        image_root: the folder relative image paths are resolved against
            (default: the manifest's folder).

    Duplicate ids raise :class:`ManifestError` naming both rows, even with
    ``skip_invalid``: ids key the results, and dropping either row would
    lose it without a trace.
    """
    mpath = Path(path)
    if not mpath.exists():
        raise InputError(f"{mpath}: manifest file not found")
    mapping = parse_columns(columns)
    read = read_rows(mpath, split=split, encoding=encoding, delimiter=delimiter, image_root=image_root)
    unit = read.unit
    samples: list[EditSample] = []
    problems: list[tuple[int, str]] = []
    seen: dict[str, int] = {}
    rows = []
    for r in read.rows:
        row, error = r.values, r.error
        if row is not None:
            try:
                row = rename_columns(row, mapping)
            except InputError as exc:
                row, error = None, str(exc)
        if error is not None and read.kind == "json":
            error = f"{r.where}: {error}"
        rows.append((r.pos, row, error, r.base or mpath.resolve().parent, r.where))
    missing: list[MissingEdit] = []
    if edits is not None:
        rows, missing = _join_edits(rows, Path(edits), edits_pattern or DEFAULT_EDITS_PATTERN, unit)
    duplicates: list[tuple[int, str]] = []
    for lineno, row, error, base, where in rows:
        if error is not None:
            problems.append((lineno, error))
            continue
        assert row is not None
        # benchmark files often have no id, or ids on some rows only: the line number is a stable id
        given = row.get("id")
        if given is None or (isinstance(given, str) and not given.strip()):
            row["id"] = f"{unit}-{lineno}"
        sid = str(row["id"]).strip()
        if sid in seen:
            duplicates.append((lineno, f"duplicate id {sid!r} on {unit}s {seen[sid]} and {lineno}"))
            problems.append(duplicates[-1])
            continue
        seen[sid] = lineno
        reasons = _check_row(row, base, check_files, clip_boxes)
        if reasons:
            problems.append((lineno, ("; ".join(reasons) if unit == "line" or read.kind != "json"
                                      else f"{where}: {'; '.join(reasons)}")))
            continue
        samples.append(_to_sample(row, base))

    if not samples and not problems and not missing:
        raise InputError(f"{mpath}: manifest has no rows")
    if problems and (not skip_invalid or duplicates):
        problems.sort()
        err = ManifestError(str(mpath), problems, unit=unit)
        if duplicates:  # never skipped: ids key the results, and either row would be lost without a trace
            err.args = (err.args[0].replace(
                "Fix the rows, or pass skip_invalid=True (CLI: --skip-invalid) to drop them.",
                "Ids key the results, so duplicates are refused even with --skip-invalid: make them unique "
                f"(a row without an id gets {unit}-N from its {unit})."),)
        theirs = sorted({k for _, row, _, _, _ in rows if row is not None for k in row} - set(KNOWN_COLUMNS))
        if theirs and any("missing '" in reason for _, reason in problems):
            # a benchmark file with its own column names: say how to map them
            err.args = ((f"{err.args[0]}\nThe file's other columns are {', '.join(theirs)}; map them with e.g. "
                        "--columns source=COLUMN,edited=COLUMN (Python: columns=...)."),)
        raise err
    return ManifestReport(str(mpath), samples, problems, unit=unit, missing=missing, image_columns=read.image_columns,
                          split=read.split)


_INDEXED = re.compile(r"^(.+)\[(\d+)\]$")


def rename_columns(row: dict[str, Any], mapping: Mapping[str, str]) -> dict[str, Any]:
    """``row`` with the file's columns renamed to editlens' (``mapping`` from :func:`parse_columns`).
    A file column that has an editlens name but is replaced by another column (AURORA-Bench's
    ``source``, the dataset an edit comes from, when ``source=input``) is kept as ``<name>_in_file``."""
    if not mapping:
        return row
    theirs = {(m.group(1) if (m := _INDEXED.match(c)) else c) for c in mapping.values()}
    out = {k: v for k, v in row.items() if k not in theirs or k in mapping}
    for ours, col in mapping.items():
        if ours in row and ours not in theirs and col != ours:
            out[f"{ours}_in_file"] = row[ours]
        m = _INDEXED.match(col)
        if m and m.group(1) in row and col not in row:
            items, i = row[m.group(1)], int(m.group(2))
            if not isinstance(items, list):
                raise InputError(f"column {m.group(1)!r} holds no list, so {col!r} picks nothing")
            if i >= len(items):
                raise InputError(f"column {m.group(1)!r} holds {len(items)} item(s), so {col!r} picks nothing")
            out[ours] = items[i]
        elif col in row:
            out[ours] = row[col]
    return out


def _join_edits(rows: list[tuple], edits: Path, pattern: str, unit: str) -> tuple[list[tuple], list[MissingEdit]]:
    """Each row once per editor folder of ``edits`` whose output for it exists (see
    :func:`read_manifest`); the others are returned as missing, with the paths looked for."""
    if not edits.is_dir():
        raise InputError(f"{edits}: --edits must be a folder of editors' outputs (EDITS/<model>/<id>.png)")
    folders = sorted(p for p in edits.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not folders:
        raise InputError(f"{edits}: holds no editor folder; outputs go to {edits}/<model>/{pattern}")
    from editlens.data.edit_folders import edit_folder_outputs, is_edit_folder

    # an `editlens edit` folder says where each edit's image is (its manifest.jsonl): read it, not the pattern
    made = {f: edit_folder_outputs(f) for f in folders if is_edit_folder(f)}
    out: list[tuple] = []
    missing: list[MissingEdit] = []
    for lineno, row, error, base, where in rows:
        if error is not None:
            out.append((lineno, row, error, base, where))
            continue
        if row.get("edited") not in (None, ""):
            out.append((lineno, None, ("the row has an 'edited' column, and --edits gives the edited images too: "
                        "drop one (or map another column with --columns)"), base, where))
            continue
        rid = row.get("id")
        if rid is None or (isinstance(rid, str) and not rid.strip()):
            rid = f"{unit}-{lineno}"
        rid = str(rid).strip()
        fields = {k: v for k, v in row.items() if isinstance(v, (str, int, float, bool))}
        for folder in folders:
            try:
                names = [pattern.format_map({**fields, "id": rid, "model": folder.name, "ext": ext})
                         for ext in (OUTPUT_EXTENSIONS if "{ext}" in pattern else ("",))]
            except (KeyError, ValueError, IndexError) as exc:
                raise InputError(f"--edits-pattern {pattern!r}: {exc} is not a column of {where} "
                                 f"(columns: {', '.join(sorted(fields))})") from None
            unsafe = next((why for n in names if (why := safepath.problem(folder, n)) is not None), None)
            if unsafe is not None:  # an id (or a column of the pattern) shaped like a path: read nothing outside
                out.append((lineno, None, f"id {rid!r}: its output path {names[0]!r} under {folder} {unsafe} "
                            "(an --edits output must lie inside its editor's folder)", base, where))
                break
            paths = [folder / n for n in names]
            if folder in made and made[folder].get(rid) is not None:
                paths = [made[folder][rid]]
            found = next((p for p in paths if p.is_file()), None)
            if found is None:
                missing.append(MissingEdit(rid, folder.name, [str(p) for p in paths]))
                continue
            out.append((lineno, {**row, "id": f"{folder.name}/{rid}", "row_id": rid, "model": folder.name,
                                 "edited": str(found.resolve())}, None, base, where))
    return out, missing


def _check_row(row: dict[str, Any], base: Path, check_files: bool, clip_boxes: bool = False) -> list[str]:
    from editlens.data.validation import check_boxes_in_image, parse_boxes

    reasons = []
    for col in REQUIRED:
        value = row.get(col)
        if value is None or (not isinstance(value, TableImage) and not str(value).strip()):
            reasons.append("empty instruction" if col == "instruction" and col in row else f"missing '{col}'")
    for col in IMAGE_COLUMNS:
        value = row.get(col)
        if isinstance(value, list) and value and all(isinstance(v, TableImage) for v in value):
            reasons.append(f"{col} holds a list of {len(value)} image(s); pick one, e.g. "
                           f"--columns {col}=COLUMN[0]")
        elif value is not None and not isinstance(value, (str, TableImage)):
            reasons.append(f"{col} must be a file path or an image, got a {type(value).__name__}")
    if isinstance(row.get("instruction"), TableImage):
        reasons.append("instruction is an image column")
    if row.get("boxes") is not None:
        try:
            boxes = parse_boxes(row["boxes"])
            src = row.get("source")
            if check_files and isinstance(src, str) and _resolve(src, base).is_file():
                from editlens.core.images import image_size

                checked = check_boxes_in_image(boxes, image_size(_resolve(src, base)), clip_boxes)
                if checked != boxes:  # clipped, as asked: the sample keeps the boxes used
                    row["boxes"] = checked
        except InputError as exc:
            reasons.append(str(exc))
    if row.get("edit_type") not in (None, ""):
        from editlens.data.edit_types import edit_types

        types = edit_types()
        if types.canonical(str(row["edit_type"])) is None:
            reasons.append(f"edit_type {row['edit_type']!r} is not an edit type (use one of {', '.join(types.names)} "
                           "or an alias such as color_alter)")
    for col in IMAGE_COLUMNS:  # "FILE#row=N&column=C" in a text manifest: a cell of a table
        ref = parse_ref(row.get(col)) if isinstance(row.get(col), str) else None
        if ref is not None:
            row[col] = replace(ref, file=str(_resolve(ref.file, base)))
            if check_files and not Path(row[col].file).is_file():
                reasons.append(f"{col} table file not found: {row[col].file}")
    if check_files:
        for col in IMAGE_COLUMNS:
            value = row.get(col)
            if not isinstance(value, str) or not value.strip():
                continue
            p = _resolve(value, base)
            if p.is_dir():
                reasons.append(f"{col} is a directory, not an image file: {p}")
            elif not p.is_file():
                reasons.append(f"{col} file not found: {p}")
    return reasons


def _resolve(value: str, base: Path) -> Path:
    p = Path(value).expanduser()
    return p if p.is_absolute() else base / p


def _image(value: Any, base: Path) -> Any:
    """A path resolved against ``base``; a table cell reference as it is."""
    if isinstance(value, TableImage):
        return value
    return str(_resolve(str(value), base))


def _to_sample(row: dict[str, Any], base: Path) -> EditSample:
    known = set(REQUIRED) | set(OPTIONAL)
    reference = row.get("reference")
    return EditSample(
        id=str(row["id"]).strip(),
        source=_image(row["source"], base),
        edited=_image(row["edited"], base),
        instruction=str(row["instruction"]),
        reference=_image(reference, base) if reference else None,
        model=str(row["model"]) if row.get("model") not in (None, "") else None,
        source_caption=row.get("source_caption"),
        target_caption=row.get("target_caption"),
        metadata={k: (_image(v, base) if k == "mask" and v else v)
                  for k, v in row.items() if k not in known},
    )


def write_manifest(samples: Iterable[EditSample], path: str | os.PathLike) -> Path:
    """Write samples whose images are paths or table cells as JSON Lines (paths kept as given; a
    table cell as ``FILE#row=N&column=C``, which :func:`read_manifest` reads back)."""
    out = Path(path)
    with open(out, "w", encoding="utf-8") as fh:
        for s in samples:
            row: dict[str, Any] = {
                "id": s.id,
                "source": str(s.source),
                "edited": str(s.edited),
                "instruction": s.instruction,
            }
            for col in OPTIONAL:
                value = getattr(s, col)
                if value is not None:
                    row[col] = str(value)
            row.update(s.columns())
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    return out

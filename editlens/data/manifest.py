"""Manifest files: one edit per row, as JSON Lines or CSV.

Required columns: ``id, source, edited, instruction``. Optional:
``reference, model, source_caption, target_caption``. Any other column is
kept in ``EditSample.metadata``; ``mask`` (a mask image) and ``boxes`` (JSON
list of ``[x0, y0, x1, y1]``) feed the masked metric variants. Relative image
and mask paths are resolved against the manifest's folder. Validation collects every bad row (line number and
reason) instead of stopping at the first.
"""

from __future__ import annotations

import csv
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from editlens.core.types import EditSample
from editlens.errors import InputError, ManifestError

REQUIRED = ("id", "source", "edited", "instruction")
OPTIONAL = ("reference", "model", "source_caption", "target_caption")
IMAGE_COLUMNS = ("source", "edited", "reference", "mask")


@dataclass
class ManifestReport:
    """The usable samples of a manifest and the rows that were dropped."""

    path: str
    samples: list[EditSample]
    problems: list[tuple[int, str]] = field(default_factory=list)


def _rows(path: Path) -> Iterable[tuple[int, dict[str, Any] | None, str | None]]:
    """Yield ``(line_number, row, error)``; exactly one of row/error is set."""
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".ndjson", ".json"):
        with open(path, encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as exc:
                    yield lineno, None, f"not valid JSON ({exc.msg} at column {exc.colno})"
                    continue
                if not isinstance(row, dict):
                    yield lineno, None, f"expected a JSON object, got {type(row).__name__}"
                    continue
                yield lineno, row, None
    elif suffix in (".csv", ".tsv"):
        with open(path, encoding="utf-8", newline="") as fh:
            reader = csv.DictReader(fh, delimiter="\t" if suffix == ".tsv" else ",")
            for row in reader:
                # line_num is the physical line of the row's end; header is line 1
                lineno = reader.line_num
                if None in row:
                    yield lineno, None, "more fields than the header has columns"
                    continue
                yield lineno, {k: v for k, v in row.items() if v not in (None, "")}, None
    else:
        raise InputError(f"{path}: unknown manifest format {suffix!r} (use .jsonl or .csv)")


def read_manifest(
    path: str | os.PathLike,
    *,
    skip_invalid: bool = False,
    check_files: bool = True,
) -> ManifestReport:
    """Read and validate a manifest.

    Args:
        path: a ``.jsonl`` or ``.csv`` (``.tsv``) file.
        skip_invalid: drop bad rows (they are listed in ``problems``) instead
            of raising :class:`ManifestError`.
        check_files: check that every referenced image file exists.
    """
    mpath = Path(path)
    if not mpath.exists():
        raise InputError(f"{mpath}: manifest file not found")
    if mpath.is_dir():
        raise InputError(f"{mpath}: is a directory; give the manifest file (.jsonl or .csv)")
    base = mpath.resolve().parent
    samples: list[EditSample] = []
    problems: list[tuple[int, str]] = []
    seen: dict[str, int] = {}
    for lineno, row, error in _rows(mpath):
        if error is not None:
            problems.append((lineno, error))
            continue
        assert row is not None
        reasons = _check_row(row, base, check_files)
        sid = str(row.get("id", "")).strip()
        if sid and sid in seen:
            reasons.append(f"duplicate id {sid!r} (first on line {seen[sid]})")
        if reasons:
            problems.append((lineno, "; ".join(reasons)))
            continue
        seen[sid] = lineno
        samples.append(_to_sample(row, base))
    if not samples and not problems:
        raise InputError(f"{mpath}: manifest has no rows")
    if problems and not skip_invalid:
        raise ManifestError(str(mpath), problems)
    return ManifestReport(str(mpath), samples, problems)


def _check_row(row: dict[str, Any], base: Path, check_files: bool) -> list[str]:
    reasons = []
    for col in REQUIRED:
        value = row.get(col)
        if value is None or not str(value).strip():
            reasons.append("empty instruction" if col == "instruction" and col in row else f"missing '{col}'")
    if check_files:
        for col in IMAGE_COLUMNS:
            value = row.get(col)
            if value is None or not str(value).strip():
                continue
            p = _resolve(str(value), base)
            if not p.is_file():
                reasons.append(f"{col} file not found: {p}")
    return reasons


def _resolve(value: str, base: Path) -> Path:
    p = Path(value).expanduser()
    return p if p.is_absolute() else base / p


def _to_sample(row: dict[str, Any], base: Path) -> EditSample:
    known = set(REQUIRED) | set(OPTIONAL)
    reference = row.get("reference")
    return EditSample(
        id=str(row["id"]).strip(),
        source=str(_resolve(str(row["source"]), base)),
        edited=str(_resolve(str(row["edited"]), base)),
        instruction=str(row["instruction"]),
        reference=str(_resolve(str(reference), base)) if reference else None,
        model=str(row["model"]) if row.get("model") not in (None, "") else None,
        source_caption=row.get("source_caption"),
        target_caption=row.get("target_caption"),
        metadata={k: (str(_resolve(str(v), base)) if k == "mask" and v else v)
                  for k, v in row.items() if k not in known},
    )


def write_manifest(samples: Iterable[EditSample], path: str | os.PathLike) -> Path:
    """Write samples whose images are paths as JSON Lines (paths kept as given)."""
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
            row.update(s.metadata)
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    return out

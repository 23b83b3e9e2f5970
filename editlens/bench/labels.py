"""People's labels and an evaluator's predictions, the types every human-label benchmark shares.

* **Point-wise** labels: ``{"id", "model", "human"}`` JSONL (:func:`load_pointwise_human`).
* **Pair-wise** labels: ``{"id", "a", "b", "preference"}`` with ``A``/``B``/``tie`` (or ``human`` =
  +1/-1/0; :func:`load_pairwise_human`), or the four GenAI-Bench votes kept apart
  (:func:`load_pairwise_votes`); a benchmark of labelled pairs over edits read from its published
  files is a :class:`LabelledPairs` (its :class:`Edit` s and :class:`Pair` s; ranked benchmarks
  give one pair per compared couple, with the group in ``meta``).
* **Predictions**: ``{"id", "score"}`` JSONL or an ``editlens run`` ``results.jsonl`` with ``metric``
  choosing the score (:func:`load_predictions`, :func:`load_results` with the details kept), and a
  pairwise judge's verdicts (:func:`load_verdicts`).

:func:`prepare` writes any :class:`LabelledPairs` benchmark as what editlens runs on (images as files,
``manifest.jsonl``, ``pairs.jsonl``, ``benchmark.json``); :func:`read_prepared` reads that folder back.
Published parquet/arrow tables are read with :func:`editlens.data.tables.read_rows` (:func:`table_rows`).
"""

from __future__ import annotations

import hashlib
import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from editlens.data.jsonl import iter_jsonl
from editlens.errors import InputError


def number(value: Any, where: str, field_name: str) -> float:
    """A finite number read from ``field_name`` at ``where`` (``file:line``); a boolean, a
    string, null, NaN or infinity is refused with the place named, never read as a number.

    >>> number(3, "h.jsonl:2", "human")
    3.0
    >>> number(True, "h.jsonl:2", "human")
    Traceback (most recent call last):
    editlens.errors.InputError: h.jsonl:2: field 'human' is true, not a number
    """
    if isinstance(value, bool):
        raise InputError(f"{where}: field {field_name!r} is {str(value).lower()}, not a number")
    if not isinstance(value, (int, float)):
        shown = "null" if value is None else repr(value)
        raise InputError(f"{where}: field {field_name!r} is {shown}, not a number")
    if not math.isfinite(value):
        raise InputError(f"{where}: field {field_name!r} is {value}, not a finite number")
    return float(value)



def keep_once(seen: dict[str, tuple[Any, str]], key: str, value: Any, where: str, what: str = "id") -> bool:
    """Record ``key`` -> ``value`` read at ``where``. A repeat with the same value is
    ``False`` (the caller skips it: the same fact twice); a repeat with another value is
    refused, naming both places, since either choice would be a silent guess."""
    if key in seen:
        old, first = seen[key]
        if old != value:
            raise InputError(f"{where}: {what} {key!r} repeated with another value ({value!r}; "
                             f"{old!r} at {first}); remove one of them")
        return False
    seen[key] = (value, where)
    return True



def load_predictions(path: str | Path, metric: str | None = None) -> tuple[dict[str, float], dict[str, str], list[str]]:
    """Scores by id from ``{"id", "score"}`` lines or editlens ``results.jsonl``.

    Returns ``(scores, models, unscored_ids)``: ids whose score is missing,
    unscored or failed are listed, never given a number.
    """
    scores: dict[str, float] = {}
    models: dict[str, str] = {}
    unscored: list[str] = []
    seen: dict[str, tuple[Any, str]] = {}
    for n, row in iter_jsonl(path):
        sid = row.get("id")
        if sid is None:
            raise InputError(f"{path}:{n}: missing 'id'")
        sid = str(sid)
        given = row["scores"].get(metric) if "scores" in row and isinstance(row["scores"], dict) else row.get("score")
        if not keep_once(seen, sid, given, f"{path}:{n}"):
            continue
        if row.get("model") is not None:
            models[sid] = str(row["model"])
        if "scores" in row:
            if metric is None:
                names = sorted(row["scores"])
                raise InputError(f"{path}: editlens results hold several scores {names}; choose one with --metric")
            entry = row["scores"].get(metric)
            value = entry.get("value") if isinstance(entry, dict) and entry.get("status") == "scored" else None
        else:
            value = row.get("score")
            if isinstance(value, bool) or (isinstance(value, (int, float)) and not math.isfinite(value)):
                raise InputError(f"{path}:{n}: field 'score' is {json.dumps(value)}, not a finite number "
                                 "(leave it out or null for an unscored edit)")
            if value is not None and not isinstance(value, (int, float)):
                raise InputError(f"{path}:{n}: field 'score' is {value!r}, not a number")
        if value is None or not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
            unscored.append(sid)
            continue
        scores[sid] = float(value)
    return scores, models, unscored



def load_pointwise_human(path: str | Path) -> tuple[dict[str, float], dict[str, str]]:
    scores, models = {}, {}
    seen: dict[str, tuple[Any, str]] = {}
    for n, row in iter_jsonl(path):
        if "id" not in row or "human" not in row:
            raise InputError(f"{path}:{n}: needs 'id' and 'human'")
        value = number(row["human"], f"{path}:{n}", "human")
        sid = str(row["id"])
        if keep_once(seen, sid, (value, str(row.get("model", "all"))), f"{path}:{n}"):
            scores[sid] = value
            models[sid] = str(row.get("model", "all"))
    return scores, models



_PREF = {"a": 1, "left": 1, "leftvote": 1, "b": -1, "right": -1, "rightvote": -1, "tie": 0, "tievote": 0,
         "bothbad_vote": 0, "both_bad": 0, "equal": 0}



def load_pairwise_human(path: str | Path) -> list[dict[str, Any]]:
    """Pairs ``{"id", "a", "b", "label"}`` with label +1 (A), -1 (B), 0 (tie)."""
    out = []
    seen: dict[str, tuple[Any, str]] = {}
    for n, row in iter_jsonl(path):
        if "a" not in row or "b" not in row:
            raise InputError(f"{path}:{n}: needs 'a' and 'b' (the ids of the two edits)")
        if str(row["a"]) == str(row["b"]):
            raise InputError(f"{path}:{n}: fields 'a' and 'b' are the same edit {row['a']!r}; a pair compares two edits")
        if "human" in row:
            value = number(row["human"], f"{path}:{n}", "human")
            if value not in (1.0, -1.0, 0.0):
                raise InputError(f"{path}:{n}: field 'human' is {row['human']!r}; expected +1 (A), -1 (B) or 0 (tie)")
            label = int(value)
        elif "preference" in row:
            key = str(row["preference"]).strip().lower()
            if key not in _PREF:
                raise InputError(f"{path}:{n}: preference {row['preference']!r} is not A, B or tie")
            label = _PREF[key]
        else:
            raise InputError(f"{path}:{n}: needs 'preference' (A/B/tie) or 'human' (+1/-1/0)")
        pair_id, a, b = str(row.get("id", n)), str(row["a"]), str(row["b"])
        pair = {"id": pair_id, "a": a, "b": b, "label": label}
        if keep_once(seen, pair_id, (a, b, label), f"{path}:{n}", "pair id"):
            out.append(pair)
    return out



#: the four GenAI-Bench votes (and spellings of them) for readers that keep tie and both-bad apart
_VOTE4 = {"leftvote": "leftvote", "a": "leftvote", "left": "leftvote", "rightvote": "rightvote", "b": "rightvote",
          "right": "rightvote", "tievote": "tievote", "tie": "tievote", "bothbad_vote": "bothbad_vote",
          "both_bad": "bothbad_vote", "bothbad": "bothbad_vote"}



def load_pairwise_votes(path: str | Path) -> list[dict[str, Any]]:
    """Pairs ``{"id", "a", "b", "human_vote"}`` with the four GenAI-Bench
    votes kept apart (``tievote`` and ``bothbad_vote`` are different labels
    here, unlike :func:`load_pairwise_human`)."""
    out = []
    for n, row in iter_jsonl(path):
        if "a" not in row or "b" not in row:
            raise InputError(f"{path}:{n}: needs 'a' and 'b' (the ids of the two edits)")
        raw = row.get("human_vote", row.get("preference"))
        key = str(raw).strip().lower() if raw is not None else None
        if key not in _VOTE4:
            raise InputError(f"{path}:{n}: needs 'human_vote' or 'preference', one of leftvote, rightvote, tievote, "
                             f"bothbad_vote (A, B, tie, both_bad); got {raw!r}")
        out.append({"id": str(row.get("id", n)), "a": str(row["a"]), "b": str(row["b"]), "human_vote": _VOTE4[key]})
    return out



@dataclass
class Edit:
    id: str
    instruction: str
    source: Any  # bytes (an encoded image), or a path
    edited: Any
    model: str | None = None
    group: str | None = None  # candidates that compete (best-of-n's 'group' column)
    extra: dict[str, Any] = field(default_factory=dict)  # more manifest columns



@dataclass
class Pair:
    id: str
    a: str  # edit ids
    b: str
    label: int  # +1: a preferred, -1: b, 0: tie
    meta: dict[str, Any] = field(default_factory=dict)



@dataclass
class LabelledPairs:
    """A benchmark of labelled pairs over edits: its ``kind`` (the registered name), where it was read
    (``source``), the edits by id, the pairs, and what the reader counted (``info``)."""

    kind: str
    source: str
    edits: dict[str, Edit]
    pairs: list[Pair]
    info: dict[str, Any] = field(default_factory=dict)



def table_rows(path: str | Path, needed: tuple[str, ...]) -> Iterator[tuple[str, Path, dict[str, Any]]]:
    """``(where, folder, row)`` of a published parquet/arrow table (a file, a folder of them or a
    ``datasets`` folder; :func:`editlens.data.tables.read_rows`); image cells are lazy
    :class:`~editlens.core.embedded.TableImage` references. A missing column names the file."""
    from editlens.data.tables import read_rows

    p = Path(path)
    if not p.exists():
        raise InputError(f"{p}: no such file or directory")
    rows = read_rows(p)
    checked: set[Path] = set()
    for r in rows.rows:
        if r.values is None:
            raise InputError(f"{r.where}: {r.error}")
        base = r.base or p.parent
        if base not in checked:
            missing = [c for c in needed if c not in r.values]
            if missing:
                raise InputError(f"{r.where.rsplit(' row ', 1)[0]}: missing column(s) {missing}; it has {list(r.values)}")
            checked.add(base)
        yield r.where, base, r.values


def image_bytes(cell: Any, where: str, base: Path) -> bytes:
    """The encoded bytes of an image cell: a table reference, a ``datasets`` Image cell
    (``{"bytes", "path"}``) or raw bytes."""
    from editlens.core.embedded import TableImage, read_table_image

    if isinstance(cell, TableImage):
        return read_table_image(cell)
    if isinstance(cell, (bytes, bytearray)):
        return bytes(cell)
    if isinstance(cell, dict):
        if cell.get("bytes"):
            return bytes(cell["bytes"])
        if cell.get("path"):
            p = Path(cell["path"])
            p = p if p.is_absolute() else base / p
            if p.is_file():
                return p.read_bytes()
            raise InputError(f"{where}: image path {cell['path']!r} not found (relative to {base})")
    raise InputError(f"{where}: not an image cell (expected {{'bytes', 'path'}} or bytes), got {type(cell).__name__}")


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:20]



def read_prepared(folder: Path, kind: str | None = None) -> LabelledPairs:
    from editlens.core.io import read_json

    info = read_json(folder / "benchmark.json", "a folder written by `editlens meta-eval prepare`")
    if not isinstance(info, dict):
        raise InputError(f"{folder / 'benchmark.json'}: expected a JSON object")
    if kind and info.get("benchmark") != kind:
        raise InputError(f"{folder}: prepared from {info.get('benchmark')!r}, not {kind!r}")
    pairs = []
    labels = {"A": 1, "B": -1, "tie": 0}
    for n, row in iter_jsonl(folder / "pairs.jsonl"):
        missing = [k for k in ("id", "a", "b", "preference") if k not in row]
        if missing:
            raise InputError(f"{folder / 'pairs.jsonl'}:{n}: missing {', '.join(missing)}")
        if row["preference"] not in labels:
            raise InputError(f"{folder / 'pairs.jsonl'}:{n}: field 'preference' is {row['preference']!r}, not A, B or tie")
        if str(row["a"]) == str(row["b"]):
            raise InputError(f"{folder / 'pairs.jsonl'}:{n}: fields 'a' and 'b' are the same edit {row['a']!r}")
        pairs.append(Pair(str(row["id"]), str(row["a"]), str(row["b"]), labels[row["preference"]], row.get("meta") or {}))
    edits = {}
    for n, row in iter_jsonl(folder / "manifest.jsonl"):
        missing = [k for k in ("id", "instruction", "source", "edited") if k not in row]
        if missing:
            raise InputError(f"{folder / 'manifest.jsonl'}:{n}: missing {', '.join(missing)}")
        edits[str(row["id"])] = Edit(str(row["id"]), row["instruction"], row["source"], row["edited"], row.get("model"),
                                     row.get("group"))
    return LabelledPairs(info["benchmark"], info.get("source", str(folder)), edits, pairs, info.get("info") or {})



def write_prepared(bench: LabelledPairs, path: str | Path, out: str | Path, download: str) -> dict[str, Any]:
    """Write ``out/images/``, ``out/manifest.jsonl`` (one row per distinct
    edit), ``out/pairs.jsonl`` (one row per labelled pair) and
    ``out/benchmark.json`` of ``bench`` read (with its images) from ``path``. Images shipped
    inside the tables are written as they are (same bytes, no re-encoding); image files
    (MMRB2's) are referred to where they lie. ``download`` says where the benchmark comes from."""
    from editlens.core.io import atomic_write, write_bytes

    kind = bench.kind
    root = Path(out)
    (root / "images").mkdir(parents=True, exist_ok=True)
    written: dict[str, str] = {}

    def place(img: Any) -> str:
        if isinstance(img, Path):
            return str(img.resolve())
        name = digest(img)
        if name not in written:
            target = root / "images" / f"{name}.{_extension(img)}"
            if not target.is_file():
                write_bytes(target, img)
            written[name] = str(target.resolve())
        return written[name]

    manifest, paths = [], {}
    for e in bench.edits.values():
        src, edt = place(e.source), place(e.edited)
        paths[e.id] = (src, edt)
        manifest.append({"id": e.id, "source": src, "edited": edt, "instruction": e.instruction,
                         **({"model": e.model} if e.model else {}), **({"group": e.group} if e.group else {}),
                         **e.extra})
    rows = [{"id": pr.id, "a": pr.a, "b": pr.b, "preference": {1: "A", -1: "B", 0: "tie"}[pr.label],
             "source": paths[pr.a][0], "edited_a": paths[pr.a][1], "edited_b": paths[pr.b][1],
             "instruction": bench.edits[pr.a].instruction, "meta": pr.meta} for pr in bench.pairs]
    atomic_write(root / "manifest.jsonl", lambda fh: fh.writelines(json.dumps(r, default=str) + "\n" for r in manifest))
    atomic_write(root / "pairs.jsonl", lambda fh: fh.writelines(json.dumps(r, default=str) + "\n" for r in rows))
    summary = {"benchmark": kind, "source": str(Path(path).resolve()), "edits": len(manifest), "pairs": len(rows),
               "images_written": len(written), "info": bench.info, "download": download}
    atomic_write(root / "benchmark.json", lambda fh: json.dump(summary, fh, indent=2, default=str))
    return summary


def _extension(data: bytes) -> str:
    from PIL import Image, UnidentifiedImageError

    try:
        fmt = (Image.open(io.BytesIO(data)).format or "png").lower()
    except (UnidentifiedImageError, OSError):
        raise InputError("an image in the benchmark cannot be decoded") from None
    return {"jpeg": "jpg"}.get(fmt, fmt)



def load_results(path: str | Path, metric: str | None) -> dict[str, dict[str, Any]]:
    """``{id: {"status", "value", "details"}}`` of an ``editlens run``'s
    ``results.jsonl`` (``metric`` chooses the evaluator) or of ``{id, score}`` lines."""
    out: dict[str, dict[str, Any]] = {}
    seen: dict[str, tuple[Any, str]] = {}
    for n, row in iter_jsonl(path):
        if "id" not in row:
            raise InputError(f"{path}:{n}: missing 'id'")
        given = row["scores"].get(metric) if isinstance(row.get("scores"), dict) else row.get("score")
        if not keep_once(seen, str(row["id"]), given, f"{path}:{n}"):
            continue
        if "scores" in row:
            if metric is None:
                raise InputError(f"{path}: editlens results hold several scores {sorted(row['scores'])}; choose one "
                                 "with --metric")
            entry = row["scores"].get(metric)
            if entry is None:
                continue
            out[str(row["id"])] = {"status": entry.get("status"), "value": entry.get("value"),
                                   "details": entry.get("details") or {}}
        else:
            v = row.get("score")
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)):
                raise InputError(f"{path}:{n}: field 'score' is {json.dumps(v)}, not a finite number "
                                 "(leave it out or null for an unscored edit)")
            ok = v is not None
            out[str(row["id"])] = {"status": "scored" if ok else "unscored", "value": v if ok else None,
                                   "details": {}}
    if not out:
        raise InputError(f"{path}: no result for metric {metric!r}")
    return out



def scored_values(results: dict[str, dict[str, Any]]) -> dict[str, float]:
    return {k: float(v["value"]) for k, v in results.items() if v.get("status") == "scored" and v.get("value") is not None}



def load_verdicts(path: str | Path) -> dict[str, dict[str, Any]]:
    """Verdicts of ``editlens compare --pairs`` (JSONL, one per pair id)."""
    out = {}
    for n, row in iter_jsonl(path):
        if "id" not in row or "verdict" not in row:
            raise InputError(f"{path}:{n}: a verdict line needs 'id' and 'verdict' (from editlens compare --pairs)")
        out[str(row["id"])] = row
    return out


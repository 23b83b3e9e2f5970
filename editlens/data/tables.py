"""Rows of the field's published formats, with images as lazy references.

:func:`read_rows` reads any input editlens takes as a manifest and gives one
:class:`InputRows`: every row as a dict, with where it came from (line, row or
key) for messages. Formats:

* JSON Lines / CSV / TSV (``.jsonl``, ``.csv``, ``.tsv``): one edit per line.
* JSON (``.json``): a list of objects, or an object of objects keyed by id
  (ImgEdit-Bench's ``{key: {id, prompt, edit_type}}``: the key becomes the
  ``key`` column, and the row's ``id`` when it has none); ``{"data": [...]}``
  style wrappers with one list are unwrapped. A folder of JSON files
  (KRIS-Bench's ``{category}/annotation.json``) is read file by file; each row
  gets ``subset`` (its folder, relative; an id taken from a key becomes
  ``subset/key``, as keys repeat across files) and resolves its paths there.
* Parquet and arrow files, or folders of them (a hub snapshot's
  ``data/*.parquet``, ``datasets``' cache ``*.arrow``), and ``datasets``
  folders written by ``save_to_disk`` (read with :func:`datasets.load_from_disk`;
  a ``DatasetDict`` folder needs ``split``). Image columns (``datasets``
  ``Image`` features, ``{bytes, path}`` structs, binary columns, lists of
  them) become :class:`~editlens.core.embedded.TableImage` references:
  nothing is decoded or copied until an image is loaded. ``ClassLabel``
  columns give their names. A folder holding several splits needs ``split``.

Relative image paths in text formats are resolved against ``base`` (the
file's folder, or ``image_root``).
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from editlens.core.embedded import TABLE_SUFFIXES, TableImage, read_arrow_file
from editlens.errors import InputError

TEXT_SUFFIXES = (".jsonl", ".ndjson", ".csv", ".tsv")
#: a shard's split from its file name: train-00000-of-00002.parquet, gedit-train.arrow, test.parquet
_SPLIT = re.compile(r"(?:^|[-_.])(train|test|validation|valid|dev|eval)(?:[-_.]|$)", re.IGNORECASE)


@dataclass
class InputRow:
    """One row: ``pos`` its line (text files), row number (tables: counted over every
    file read, from 0) or position (JSON); ``where`` says it for messages; ``base`` is
    the folder its relative paths are resolved against."""

    pos: int
    where: str
    values: dict[str, Any] | None
    error: str | None = None
    base: Path | None = None


@dataclass
class InputRows:
    """What :func:`read_rows` read: the rows, the unit of ``pos`` (``line`` or ``row``),
    the columns holding images (tables), the files read and the split."""

    path: Path
    rows: list[InputRow]
    unit: str = "line"
    image_columns: list[str] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)
    split: str | None = None
    kind: str = "jsonl"


def read_rows(path: str | Path, *, split: str | None = None, encoding: str = "utf-8",
              delimiter: str | None = None, image_root: str | os.PathLike | None = None) -> InputRows:
    """Read ``path`` in whichever published format it is (see the module docstring)."""
    p = Path(path).expanduser()
    if not p.exists():
        raise InputError(f"{p}: manifest file not found")
    root = Path(image_root).expanduser().resolve() if image_root else None
    if p.is_dir():
        if (p / "dataset_dict.json").is_file() or (p / "state.json").is_file():
            return _read_datasets_folder(p, split)
        tables = _files(p, TABLE_SUFFIXES)
        if tables:
            return _read_tables(p, tables, split, "tables")
        jsons = _files(p, (".json",))
        if jsons:
            return _read_json_files(p, jsons, encoding, root)
        raise InputError(f"{p}: a folder with no parquet, arrow or JSON files (and not a `datasets` folder)")
    suffix = p.suffix.lower()
    if suffix in TABLE_SUFFIXES:
        return _read_tables(p, [p], split, suffix.lstrip("."))
    if suffix == ".json":
        return _read_json_files(p.parent, [p], encoding, root, single=True)
    if suffix in TEXT_SUFFIXES:
        base = root or p.resolve().parent
        rows = [InputRow(n, f"{p}:{n}", row, err, base) for n, row, err in text_rows(p, encoding, delimiter)]
        return InputRows(p, rows, "line", files=[p], kind=suffix.lstrip("."))
    raise InputError(f"{p}: unknown manifest format {suffix!r} (use .jsonl, .csv, .json, .parquet, .arrow, a folder "
                     "of them, or a `datasets` folder)")


# ----------------------------------------------------------------------------------- JSON Lines, CSV

def _text(path: Path, encoding: str) -> str:
    """The manifest's text; a UTF-8 BOM is dropped; undecodable bytes name their line."""
    raw = path.read_bytes()
    enc = "utf-8-sig" if encoding.lower().replace("_", "-") in ("utf-8", "utf8") else encoding
    try:
        return raw.decode(enc)
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise InputError(
            f"{path}: line {line} is not valid {encoding} (byte 0x{raw[exc.start]:02x} at file offset {exc.start}: "
            f"{exc.reason}). Save the file as UTF-8, or pass its encoding, e.g. --encoding latin-1 "
            "(Python: encoding='latin-1')."
        ) from None
    except LookupError:
        raise InputError(f"{path}: unknown encoding {encoding!r}") from None


def _json_problem(line: str, exc: json.JSONDecodeError) -> str:
    body = line.rstrip("\r\n")
    if exc.pos >= len(body.rstrip()) or exc.msg.startswith("Unterminated"):
        # the parser ran off the end: say so, with where the line ends
        return f"not valid JSON: the line ends at column {len(body)} before the object is complete (truncated?)"
    return f"not valid JSON: {exc.msg} at column {exc.colno}"


def _check_delimiter(path: Path, text: str, delimiter: str) -> None:
    """A header that is one column holding ``;`` (or tabs) is a CSV written with
    another separator (spreadsheets in many locales write ``;``): say so."""
    header = next((line for line in text.splitlines() if line.strip()), "")
    if delimiter in header:
        return
    for other, name in ((";", "semicolon"), ("\t", "tab"), ("|", "pipe")):
        if header.count(other) >= 2:
            shown = header if len(header) <= 80 else header[:77] + "..."
            raise InputError(f"{path}: the header {shown!r} has no {delimiter!r}; the file looks {name}-separated. "
                             f"Pass --delimiter {other!r} (Python: delimiter={other!r}), or save it comma-separated.")


def text_rows(path: Path, encoding: str = "utf-8",
              delimiter: str | None = None) -> Iterable[tuple[int, dict[str, Any] | None, str | None]]:
    """Yield ``(line_number, row, error)`` of a JSON Lines or CSV file; exactly one of row/error is set."""
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".ndjson", ".json"):
        for lineno, line in enumerate(io.StringIO(_text(path, encoding)), start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                yield lineno, None, _json_problem(line, exc)
                continue
            if not isinstance(row, dict):
                yield lineno, None, f"expected a JSON object, got {type(row).__name__}"
                continue
            yield lineno, row, None
    elif suffix in (".csv", ".tsv"):
        text = _text(path, encoding)
        if delimiter is None:
            delimiter = "\t" if suffix == ".tsv" else ","
            _check_delimiter(path, text, delimiter)
        if len(delimiter) != 1:
            raise InputError(f"delimiter must be one character, got {delimiter!r}")
        reader = csv.DictReader(io.StringIO(text, newline=""), delimiter=delimiter)
        for row in reader:
            # line_num is the physical line of the row's end; header is line 1
            lineno = reader.line_num
            if None in row:
                yield lineno, None, "more fields than the header has columns"
                continue
            yield lineno, {k: v for k, v in row.items() if v not in (None, "")}, None
    else:
        raise InputError(f"{path}: unknown manifest format {suffix!r} (use .jsonl or .csv)")


def _files(folder: Path, suffixes: tuple[str, ...]) -> list[Path]:
    return sorted(f for f in folder.rglob("*") if f.is_file() and f.suffix.lower() in suffixes
                  and not any(part.startswith(".") for part in f.relative_to(folder).parts))


# ----------------------------------------------------------------------------------------------- tables

def _split_of(f: Path, root: Path) -> str | None:
    for part in reversed(f.relative_to(root).parts if f != root else (f.name,)):
        m = _SPLIT.search(Path(part).stem if part == f.name else part)
        if m:
            return m.group(1).lower()
    return None


def _read_datasets_folder(p: Path, split: str | None) -> InputRows:
    """A ``save_to_disk`` folder, read with ``datasets``: it checks the folder and
    lists the arrow shards (memory-mapped, nothing copied) in row order."""
    try:
        import datasets
    except ImportError:
        raise InputError(f"{p}: a `datasets` folder; reading it needs the datasets library "
                         "(pip install datasets)") from None
    try:
        ds = datasets.load_from_disk(str(p))
    except Exception as exc:  # noqa: BLE001 - datasets raises assorted errors on a broken folder
        raise InputError(f"{p}: cannot be read as a `datasets` folder ({type(exc).__name__}: {exc})") from None
    if isinstance(ds, datasets.DatasetDict):
        names = list(ds)
        if split is None and len(names) == 1:
            split = names[0]
        if split not in ds:
            raise InputError(f"{p}: a `datasets` folder with splits {', '.join(names)}; choose one with "
                             "--split NAME (Python: split='NAME')" if split is None else
                             f"{p}: no split {split!r}; it has {', '.join(names)}")
        ds = ds[split]
    if getattr(ds, "_indices", None) is not None:
        raise InputError(f"{p}: the dataset holds an indices mapping (select/shuffle without flatten_indices); "
                         "save it again after ds.flatten_indices()")
    files = [Path(c["filename"]) for c in ds.cache_files]
    if not files:
        raise InputError(f"{p}: the `datasets` folder lists no arrow files")
    return _read_tables(p, files, None, "datasets", features=ds.features, split_name=split)


def _read_tables(p: Path, files: list[Path], split: str | None, kind: str, features: Any = None,
                 split_name: str | None = None) -> InputRows:
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        raise InputError(f"{p}: reading parquet/arrow files needs pyarrow: pip install 'editlens[parquet]'") from None
    root = p if p.is_dir() else p.parent
    if len(files) > 1 or split:
        splits = {f: _split_of(f, root) for f in files}
        found = sorted({s for s in splits.values() if s})
        if split:
            files = [f for f in files if splits[f] == split.lower()]
            if not files:
                raise InputError(f"{p}: no files of split {split!r}; the splits here are "
                                 f"{', '.join(found) or '(none named)'}")
            split_name = split
        elif len(found) > 1:
            raise InputError(f"{p}: holds the splits {', '.join(found)}; choose one with --split NAME "
                             "(Python: split='NAME')")
    rows: list[InputRow] = []
    image_cols: list[str] = []
    total = 0
    for f in files:
        table, schema = _read_table_file(f)
        feats = features if features is not None else _features(schema)
        images = [c for c in schema.names if _is_image(schema.field(c).type, feats.get(c) if feats else None)]
        image_cols += [c for c in images if c not in image_cols]
        names = _class_names(feats)
        plain = table.select([c for c in schema.names if c not in images]).to_pylist() if table is not None else []
        n = table.num_rows if table is not None else 0
        lists = {c for c in images if _is_list(schema.field(c).type)}
        list_cells = {c: table.column(c).combine_chunks() for c in lists}
        # an arrow file is memory-mapped: its empty cells are known without reading any image
        nulls = ({c: table.column(c).is_null().to_pylist() for c in images}
                 if f.suffix.lower() == ".arrow" else {})
        # absolute, not resolved: a hub snapshot's files are links to blobs named by hash, without a suffix
        fstr = os.path.abspath(f)
        for i in range(n):
            values = dict(plain[i]) if plain else {}
            for c, labels in names.items():
                v = values.get(c)
                if isinstance(v, int) and 0 <= v < len(labels):
                    values[c] = labels[v]
            for c in images:
                if c in nulls and nulls[c][i]:
                    values[c] = None
                elif c in lists:
                    cell = list_cells[c][i]
                    k = 0 if not cell.is_valid else len(cell)
                    values[c] = [TableImage(fstr, i, c, j) for j in range(k)]
                else:
                    values[c] = TableImage(fstr, i, c)
            rows.append(InputRow(total, f"{f} row {i}", values, None, Path(fstr).parent))
            total += 1
    if not rows:
        raise InputError(f"{p}: the table has no rows")
    return InputRows(p, rows, "row", image_cols, files, split_name, kind)


def _read_table_file(f: Path) -> tuple[Any, Any]:
    """The table and its schema. A parquet file is read without its single-image columns (their
    cells are read when an image is loaded; lists of images are read, to count them); an arrow
    file is memory-mapped, so nothing is read until it is touched."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        if f.suffix.lower() == ".parquet":
            schema = pq.read_schema(f)
            feats = _features(schema)
            keep = [c for c in schema.names if not _is_image(schema.field(c).type, feats.get(c) if feats else None)
                    or _is_list(schema.field(c).type)]
            table = pq.read_table(f, columns=keep)
            if len(keep) == len(schema.names):
                return table, schema
            # the image columns are not read; their row count comes from the metadata
            return _Padded(table, pq.ParquetFile(f).metadata.num_rows), schema
        table = read_arrow_file(f)
        return table, table.schema
    except (pa.ArrowInvalid, pa.ArrowKeyError, OSError) as exc:
        raise InputError(f"{f}: cannot be read as {f.suffix.lstrip('.')} ({type(exc).__name__}: {exc})") from None


class _Padded:
    """A parquet table read without its image columns: those columns are never touched
    (references are made from row numbers), so they need no data here."""

    def __init__(self, table: Any, rows: int) -> None:
        self.table, self.num_rows = table, rows

    def select(self, cols: list[str]) -> Any:
        return self.table.select([c for c in cols if c in self.table.schema.names])

    def column(self, c: str) -> Any:
        return self.table.column(c)


def _features(schema: Any) -> dict[str, Any] | None:
    """The ``datasets`` features stored in a file's schema metadata (hub parquet and
    ``datasets`` arrow files carry them), or ``None``."""
    meta = schema.metadata or {}
    if b"huggingface" not in meta:
        return None
    try:
        import datasets

        return dict(datasets.Features.from_arrow_schema(schema))
    except Exception:  # noqa: BLE001 - features are a help, the arrow types decide otherwise
        return None


def _feature_is_image(feature: Any) -> bool | None:
    if feature is None:
        return None
    name = type(feature).__name__
    if name == "Image":
        return True
    inner = getattr(feature, "feature", None)  # Sequence / List of images
    if isinstance(feature, list) and feature:
        inner = feature[0]
    return bool(inner is not None and type(inner).__name__ == "Image")


def _is_list(t: Any) -> bool:
    import pyarrow as pa

    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)


def _is_image(t: Any, feature: Any = None) -> bool:
    """An image column: a ``datasets`` Image feature, a ``{bytes, path}`` struct, binary
    bytes, or a list of those."""
    import pyarrow as pa

    by_feature = _feature_is_image(feature)
    if by_feature is not None:
        return by_feature
    if _is_list(t):
        t = t.value_type
    if pa.types.is_struct(t):
        names = {t.field(i).name for i in range(t.num_fields)}
        return "bytes" in names and names <= {"bytes", "path"}
    return pa.types.is_binary(t) or pa.types.is_large_binary(t)


def _class_names(features: dict[str, Any] | None) -> dict[str, list[str]]:
    if not features:
        return {}
    return {c: list(f.names) for c, f in features.items() if type(f).__name__ == "ClassLabel"}


# ----------------------------------------------------------------------------------------------- JSON

def _read_json_files(folder: Path, files: list[Path], encoding: str, root: Path | None,
                     single: bool = False) -> InputRows:
    rows: list[InputRow] = []
    for f in files:
        try:
            data = json.loads(f.read_text(encoding=encoding))
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(f"{f}: cannot be read ({exc})") from None
        except json.JSONDecodeError as exc:
            if single:  # one object per line, named .json: JSON Lines
                base = root or f.resolve().parent
                out = [InputRow(n, f"{f}:{n}", row, err, base) for n, row, err in text_rows(f, encoding, None)]
                return InputRows(f, out, "line", files=[f], kind="jsonl")
            raise InputError(f"{f}: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
        subset = None if single else (str(f.parent.relative_to(folder)) if f.parent != folder else None)
        base = root or f.resolve().parent
        for where, values, error in _json_records(f, data):
            if values is not None and subset is not None:
                values.setdefault("subset", subset)
                if "key" in values and values.get("id") == values["key"]:  # keys repeat across files
                    values["id"] = f"{subset}/{values['key']}"
            rows.append(InputRow(len(rows), where, values, error, base))
    if not rows:
        raise InputError(f"{folder if not single else files[0]}: the JSON holds no rows")
    return InputRows(files[0] if single else folder, rows, "row", files=files, kind="json")


def _json_records(f: Path, data: Any) -> Iterator[tuple[str, dict[str, Any] | None, str | None]]:
    if isinstance(data, dict):
        lists = [k for k, v in data.items() if isinstance(v, list)]
        if len(lists) == 1 and all(not isinstance(v, dict) for v in data.values()):
            data = data[lists[0]]  # {"data": [...], "version": ...}
    if isinstance(data, list):
        for i, item in enumerate(data):
            if isinstance(item, dict):
                yield f"{f} item {i}", dict(item), None
            else:
                yield f"{f} item {i}", None, f"expected a JSON object, got {type(item).__name__}"
    elif isinstance(data, dict):
        for key, item in data.items():
            if isinstance(item, dict):
                values = {"key": key, **item} if "key" not in item else dict(item)
                values.setdefault("id", key)
                yield f"{f} key {key!r}", values, None
            else:
                yield f"{f} key {key!r}", None, f"expected a JSON object, got {type(item).__name__}"
    else:
        raise InputError(f"{f}: expected a list of objects or an object of objects, got {type(data).__name__}")

"""Images embedded in table files (parquet, arrow), read on demand.

The field's benchmarks are published as parquet or arrow files whose image
columns hold the encoded image: a ``{"bytes", "path"}`` struct (the
``datasets`` ``Image`` feature) or plain bytes. A :class:`TableImage` names
one such cell (file, row of that file, column, and the element of a list
column); :func:`read_table_image` reads its bytes from the file when an
image is loaded. Nothing is copied to disk, and a manifest of 10k rows holds
10k small references, not 10k images.

A reference has a string form, ``FILE#row=N&column=NAME[&index=I]``
(:meth:`TableImage.uri`), which run outputs and reports carry; :func:`parse_ref`
reads it back. Anything that opens images (the loader, thumbnails, the
``view`` server) goes through :func:`open_image_source`, so which images a
run may show is decided in one place.
"""

from __future__ import annotations

import io
import os
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from editlens.errors import InputError

_REF = re.compile(r"^(?P<file>.+)#row=(?P<row>\d+)&column=(?P<column>[^&]+)(?:&index=(?P<index>\d+))?$")
TABLE_SUFFIXES = (".parquet", ".arrow")


@dataclass(frozen=True)
class TableImage:
    """One image cell of a parquet/arrow file: ``row`` counts from 0 within ``file``;
    ``index`` picks an element of a list-of-images column."""

    file: str
    row: int
    column: str
    index: int | None = None

    def uri(self) -> str:
        """The reference as one string (see the module docstring)."""
        tail = f"&index={self.index}" if self.index is not None else ""
        return f"{self.file}#row={self.row}&column={quote(self.column, safe='')}{tail}"

    def where(self) -> str:
        """Where the cell is, for messages: ``FILE row N column NAME[I]``."""
        col = self.column if self.index is None else f"{self.column}[{self.index}]"
        return f"{self.file} row {self.row} column {col}"

    def __str__(self) -> str:
        return self.uri()


def is_table_image(value: Any) -> bool:
    return isinstance(value, TableImage)


def parse_ref(value: Any) -> TableImage | None:
    """The :class:`TableImage` a string names (its :meth:`~TableImage.uri`), or ``None``
    for anything else (a plain path).

    >>> parse_ref("/d/test.parquet#row=3&column=input_image")
    TableImage(file='/d/test.parquet', row=3, column='input_image', index=None)
    >>> parse_ref("/d/a.png") is None
    True
    """
    if isinstance(value, TableImage):
        return value
    if not isinstance(value, str) or "#row=" not in value:
        return None
    m = _REF.match(value)
    if not m or Path(m["file"]).suffix.lower() not in TABLE_SUFFIXES:
        return None
    return TableImage(m["file"], int(m["row"]), unquote(m["column"]), int(m["index"]) if m["index"] else None)


# ----------------------------------------------------------------------------------------------- reading cells

class _Tables:
    """Open table files, shared by loader threads. Arrow files are memory-mapped
    (reading a row touches only its pages); a parquet file keeps its metadata and
    the last few decoded row groups of one column (loaders walk rows in order)."""

    def __init__(self, keep: int = 4) -> None:
        self.lock = threading.Lock()
        self.reading = threading.Lock()
        self.arrow: dict[tuple, Any] = {}
        self.parquet: dict[tuple, Any] = {}
        self.groups: OrderedDict[tuple, Any] = OrderedDict()
        self.keep = keep

    @staticmethod
    def _ident(path: str) -> tuple:
        st = os.stat(path)
        return (path, st.st_size, st.st_mtime_ns)

    def cell(self, ref: TableImage) -> Any:
        ident = self._ident(ref.file)
        if ref.file.lower().endswith(".parquet"):
            column = self._parquet_column(ident, ref)
        else:
            column = self._arrow_table(ident).column(ref.column)
        if ref.row >= len(column):
            raise InputError(f"{ref.where()}: the file has {len(column)} rows")
        return column[ref.row].as_py()

    def _arrow_table(self, ident: tuple) -> Any:
        with self.lock:
            hit = self.arrow.get(ident)
        if hit is None:
            hit = read_arrow_file(Path(ident[0]))
            with self.lock:
                self.arrow = {k: v for k, v in self.arrow.items() if k[0] != ident[0]}
                self.arrow[ident] = hit
        return hit

    def _parquet_column(self, ident: tuple, ref: TableImage) -> Any:
        import pyarrow as pa
        import pyarrow.parquet as pq

        with self.lock:
            pf = self.parquet.get(ident)
        if pf is None:
            pf = pq.ParquetFile(ident[0])
            with self.lock:
                self.parquet = {k: v for k, v in self.parquet.items() if k[0] != ident[0]}
                self.parquet[ident] = pf
        start = 0
        for g in range(pf.metadata.num_row_groups):
            n = pf.metadata.row_group(g).num_rows
            if ref.row < start + n:
                key = ident + (g, ref.column)
                with self.lock:
                    col = self.groups.get(key)
                    if col is not None:
                        self.groups.move_to_end(key)
                if col is None:
                    with self.reading:  # one ParquetFile is not documented as safe to read from several threads
                        col = pf.read_row_group(g, columns=[ref.column]).column(0)
                    with self.lock:
                        self.groups[key] = col
                        while len(self.groups) > self.keep:
                            self.groups.popitem(last=False)
                # a view of the row group, indexed by the file's row number
                return _Offset(col, start)
            start += n
        return pa.chunked_array([], type=pa.null())


class _Offset:
    def __init__(self, column: Any, start: int) -> None:
        self.column, self.start = column, start

    def __len__(self) -> int:
        return self.start + len(self.column)

    def __getitem__(self, i: int) -> Any:
        return self.column[i - self.start]


_TABLES = _Tables()


def read_arrow_file(path: Path) -> Any:
    """A ``.arrow`` file as a pyarrow Table, memory-mapped: ``datasets`` writes IPC
    streams (``save_to_disk``, its cache), other tools the IPC file format; both are read."""
    import pyarrow as pa

    try:
        source = pa.memory_map(str(path))
        try:
            return pa.ipc.open_stream(source).read_all()
        except pa.ArrowInvalid:
            source.seek(0)
            return pa.ipc.open_file(source).read_all()
    except (pa.ArrowInvalid, OSError) as exc:
        raise InputError(f"{path}: cannot be read as an arrow file ({exc})") from None


def read_table_image(ref: TableImage) -> bytes:
    """The encoded image bytes of a cell: its ``bytes`` field, or the file its ``path``
    field names (relative to the table file's folder) when the bytes are absent."""
    where = ref.where()
    try:
        cell = _TABLES.cell(ref)
    except FileNotFoundError:
        raise InputError(f"{ref.file}: file not found (the table holding {where})") from None
    except KeyError:
        raise InputError(f"{where}: the file has no column {ref.column!r}") from None
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001 - pyarrow raises assorted errors on a broken file
        raise InputError(f"{where}: cannot be read ({type(exc).__name__}: {exc})") from None
    if ref.index is not None:
        if not isinstance(cell, list):
            raise InputError(f"{where}: the column holds no list of images")
        if ref.index >= len(cell):
            raise InputError(f"{where}: the list holds {len(cell)} image(s)")
        cell = cell[ref.index]
    if cell is None:
        raise InputError(f"{where}: no image (the cell is empty)")
    if isinstance(cell, (bytes, bytearray)):
        data = bytes(cell)
    elif isinstance(cell, dict) and ("bytes" in cell or "path" in cell):
        if cell.get("bytes"):
            data = bytes(cell["bytes"])
        elif cell.get("path"):
            p = Path(cell["path"]).expanduser()
            p = p if p.is_absolute() else Path(ref.file).parent / p
            if not p.is_file():
                raise InputError(f"{where}: the cell has no bytes and its path {cell['path']!r} is not a file "
                                 f"(looked for {p})")
            data = p.read_bytes()
        else:
            raise InputError(f"{where}: no image (the cell's bytes and path are both empty)")
    else:
        raise InputError(f"{where}: not an image cell (expected {{'bytes', 'path'}} or bytes, got "
                         f"{type(cell).__name__})")
    if not data:
        raise InputError(f"{where}: empty image bytes (0 bytes), not an image")
    return data


def open_image_source(value: Any) -> Any:
    """What PIL's ``Image.open`` takes for an image reference: the path of a file, or
    the bytes of a table cell in a ``BytesIO``. Raises :class:`InputError` when the
    cell cannot be read."""
    ref = parse_ref(value)
    if ref is not None:
        return io.BytesIO(read_table_image(ref))
    return value


def source_identity(value: Any) -> tuple | None:
    """What identifies an image's content for caches: a file's path, size and
    modification time; a table cell's file identity, row and column. ``None``
    when the file is gone."""
    ref = parse_ref(value)
    path = ref.file if ref is not None else value
    try:
        st = os.stat(path)
    except (OSError, TypeError, ValueError):
        return None
    base = (str(path), st.st_size, st.st_mtime_ns)
    return base + ((ref.row, ref.column, ref.index) if ref is not None else ())

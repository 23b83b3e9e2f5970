"""Reading files as benchmark owners publish them: hub tables (parquet,
``datasets`` arrow files, a ``save_to_disk`` folder or a hub snapshot) with
images embedded as ``{bytes, path}`` structs or plain bytes, and JSON beside
image folders. Embedded images are opened lazily on their bytes (no copies
on disk); errors name the file, the row and the field."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any, Iterator, Sequence

from editlens.errors import InputError


def table_rows(path: str | Path, needed: Sequence[str]) -> Iterator[tuple[str, dict[str, Any], Path]]:
    """``(where, row, folder)`` of every row of the parquet/arrow files at ``path``
    (a file or a folder searched recursively); a file lacking a needed column is refused."""
    from editlens.meta.rewardbench import _rows, _table_files

    files = _table_files(Path(path), (".parquet", ".arrow"))
    for f, i, row in _rows(files, tuple(needed), (), True):
        yield f"{f} row {i}", row, f.parent


class Embedded:
    """An image embedded in a table: its encoded bytes, opened on demand.
    Each :meth:`open` gives a fresh lazily-decoded PIL image (safe to hand to
    several loader threads); nothing is written to disk."""

    __slots__ = ("data", "where")

    def __init__(self, data: bytes, where: str) -> None:
        self.data, self.where = data, where

    def open(self) -> Any:
        from PIL import Image, UnidentifiedImageError

        try:
            return Image.open(io.BytesIO(self.data))
        except (UnidentifiedImageError, OSError) as exc:
            raise InputError(f"{self.where}: the embedded image cannot be decoded ({exc})") from None

    def __repr__(self) -> str:
        return f"<image embedded in {self.where}, {len(self.data)} bytes>"


def image(cell: Any, where: str, base: Path) -> Any:
    """An :class:`Embedded` image for an embedded cell (checked to decode), or a path for a path cell."""
    from editlens.meta.rewardbench import _image_bytes

    if isinstance(cell, str):
        p = Path(cell) if Path(cell).is_absolute() else base / cell
        if not p.is_file():
            raise InputError(f"{where}: image {cell!r} not found (relative to {base})")
        return p
    emb = Embedded(_image_bytes(cell, where, base), where)
    emb.open()  # the header must parse: a broken image is named now, not mid-run
    return emb


def materialise(img: Any) -> Any:
    """What an :class:`~editlens.core.types.EditSample` takes: a path, or a fresh PIL image of an embedded one."""
    return img.open() if isinstance(img, Embedded) else img


def read_json(path: Path) -> Any:
    if not path.is_file():
        raise InputError(f"{path}: file not found")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise InputError(f"{path}: not readable JSON ({exc})") from None


def text_field(row: dict[str, Any], name: str, where: str) -> str:
    v = row.get(name)
    if not isinstance(v, str) or not v.strip():
        raise InputError(f"{where}: field {name!r} is missing or empty")
    return v.strip()


def find_file(root: Path, name: str, what: str) -> Path:
    """``root`` itself when it is the file, else ``root/name``, else the only ``name`` below ``root``."""
    if root.is_file():
        return root
    if not root.exists():
        raise InputError(f"{root}: no such file or directory")
    if (root / name).is_file():
        return root / name
    found = sorted(root.rglob(name))
    if len(found) == 1:
        return found[0]
    if not found:
        raise InputError(f"{root}: no {name} in it ({what})")
    raise InputError(f"{root}: several {name} in it ({', '.join(map(str, found[:4]))}); give the one to use")

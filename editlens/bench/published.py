"""Reading files as benchmark owners publish them: hub tables (parquet,
``datasets`` arrow files, a ``save_to_disk`` folder or a hub snapshot) with
images embedded as ``{bytes, path}`` structs or plain bytes (through the one
manifest reader, :mod:`editlens.data.tables`: images stay lazy references
into the file), and JSON beside image folders; errors name the file, the row
and the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator, Sequence

from editlens.core.io import read_json  # noqa: F401  (the benchmarks' reader of their JSON files)
from editlens.errors import InputError


def table_rows(path: str | Path, needed: Sequence[str], split: str | None = None
               ) -> Iterator[tuple[str, dict[str, Any], Path]]:
    """``(where, row, folder)`` of every row of the published table(s) at ``path``
    (read by :func:`editlens.data.tables.read_rows`: parquet/arrow files or folders,
    ``datasets`` folders); image cells are lazy :class:`~editlens.core.embedded.TableImage`
    references. ``split`` is used when the folder holds several splits. A row lacking a
    needed column is refused."""
    from editlens.data.tables import read_rows

    try:
        rows = read_rows(path)
    except InputError as exc:
        if split is None or "split" not in str(exc):
            raise
        rows = read_rows(path, split=split)
    for r in rows.rows:
        if r.values is None:
            raise InputError(f"{r.where}: {r.error}")
        missing = [c for c in needed if c not in r.values]
        if missing:
            raise InputError(f"{r.where}: missing column(s) {missing}; it has {sorted(r.values)}")
        yield r.where, r.values, r.base or Path(path)


def image(cell: Any, where: str, base: Path) -> Any:
    """What an :class:`~editlens.core.types.EditSample` takes for an image cell: the
    table reference itself (read when the image is loaded, nothing copied), or the file
    a path cell names."""
    from editlens.core.embedded import TableImage

    if isinstance(cell, TableImage):
        return cell
    if isinstance(cell, str) and cell:
        p = Path(cell) if Path(cell).is_absolute() else base / cell
        if not p.is_file():
            raise InputError(f"{where}: image {cell!r} not found (relative to {base})")
        return p
    raise InputError(f"{where}: no image in the cell (got {type(cell).__name__})")


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

"""Thumbnails (JPEG) and image sizes for the HTML report, cached by file identity.

An image is a file path or a cell of a parquet/arrow file, named by its
reference string (:mod:`editlens.core.embedded`); both are opened through
:func:`editlens.core.embedded.open_image_source`.
``editlens view`` rebuilds the report each time a run writes a batch; the
images behind it rarely change, so a thumbnail is made once per (path, size,
modification time, thumbnail size) and kept in the report's own cache (the
``memo`` argument, :attr:`editlens.reporting.memo.ReportCache.images`); without
one, each call reads the image.
"""

from __future__ import annotations

import io
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Iterable

from PIL import Image

from editlens.core.embedded import open_image_source, parse_ref, source_identity
from editlens.errors import InputError
from editlens.reporting.markup import data_uri
from editlens.reporting.memo import Memo

#: JPEG quality of thumbnails: made at twice their display size (sharp on 2x screens), they stay
#: sharp at a lower quality than a 1x thumbnail needs
QUALITY = 72


def _identity(path: str | Path) -> tuple | None:
    return source_identity(str(path))


def _recall(memo: Memo | None, key: tuple) -> dict[str, Any] | None:
    return memo.get(key) if memo is not None else None


def _remember(memo: Memo | None, key: tuple, value: dict[str, Any]) -> dict[str, Any]:
    return memo.put(key, value) if memo is not None else value


def image_size(path: str | Path, memo: Memo | None = None) -> tuple[int, int] | None:
    """``(width, height)`` of an image file from its header, or ``None`` when it cannot be read."""
    ident = _identity(path)
    if ident is None:
        return None
    key = ("size",) + ident
    hit = _recall(memo, key)
    if hit is None:
        try:
            with Image.open(open_image_source(str(path))) as im:
                hit = {"size": im.size}
        except (OSError, ValueError, Image.DecompressionBombError, InputError):
            hit = {"size": None}
        _remember(memo, key, hit)
    return hit["size"]


def thumbnail(path: str | Path, max_side: int = 512, quality: int = QUALITY, memo: Memo | None = None) -> dict[str, Any]:
    """``{"jpeg": bytes, "w", "h" (full size), "tw", "th" (thumbnail size), "key"}`` of one image file.

    ``key`` names the content (file identity and thumbnail size): a page may
    use it as a cache-forever URL. Images smaller than ``max_side`` are never
    enlarged. A file that cannot be read gives ``{"error": reason}``.
    """
    ident = _identity(path)
    if ident is None:
        return {"error": f"{path}: cannot be read (no such file)"}
    key = ("thumb",) + ident + (max_side, quality)
    hit = _recall(memo, key)
    if hit is not None:
        return hit
    try:
        with Image.open(open_image_source(str(path))) as im:
            full = im.size
            im.draft("RGB", (max_side, max_side))  # fast JPEG decode at reduced size
            rgb = im.convert("RGB")
            rgb.thumbnail((max_side, max_side), Image.Resampling.LANCZOS)
            buf = io.BytesIO()
            rgb.save(buf, "JPEG", quality=quality, optimize=True, progressive=False)
    except (OSError, ValueError, Image.DecompressionBombError, InputError) as exc:
        return {"error": f"{path}: cannot be read ({exc})"}
    import hashlib

    name = hashlib.blake2b(repr(key).encode(), digest_size=8).hexdigest()
    return _remember(memo, key, {"jpeg": buf.getvalue(), "w": full[0], "h": full[1], "tw": rgb.size[0],
                                 "th": rgb.size[1], "key": name})


def thumbnails(paths: Iterable[str], max_side: int = 512, workers: int = 4,
               memo: Memo | None = None) -> dict[str, dict[str, Any]]:
    """Thumbnails of distinct paths; misses are decoded in threads (PIL releases the GIL)."""
    unique = sorted(set(paths))
    out: dict[str, dict[str, Any]] = {}
    missing = []
    for p in unique:  # cache hits here, only misses go to the threads
        ident = _identity(p)
        hit = _recall(memo, ("thumb",) + ident + (max_side, QUALITY)) if ident else None
        if hit is not None:
            out[p] = hit
        else:
            missing.append(p)
    if missing:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            out.update(zip(missing, pool.map(lambda p: thumbnail(p, max_side, memo=memo), missing)))
    return out


def image_bytes(path: str | Path) -> tuple[bytes, str] | None:
    """``(encoded bytes, MIME type)`` of an image file or table cell, or ``None`` if unreadable."""
    import mimetypes

    ref = parse_ref(str(path))
    try:
        if ref is None:
            return Path(path).read_bytes(), mimetypes.guess_type(str(path))[0] or "application/octet-stream"
        body = open_image_source(ref).getvalue()
    except (OSError, InputError):
        return None
    try:
        with Image.open(io.BytesIO(body)) as im:
            fmt = (im.format or "").lower()
    except (OSError, ValueError, Image.DecompressionBombError):
        fmt = ""
    return body, Image.MIME.get(fmt.upper(), "application/octet-stream")


def image_file_name(path: str | Path) -> str:
    """A file name for an image: a file's own; a table cell's ``<table>_r<row>_<column>.<ext>``."""
    ref = parse_ref(str(path))
    if ref is None:
        return Path(path).name
    found = image_bytes(ref.uri())
    ext = {"image/png": ".png", "image/jpeg": ".jpg", "image/webp": ".webp", "image/gif": ".gif"}.get(
        found[1] if found else "", ".img")
    col = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in ref.column)
    return f"{Path(ref.file).stem}_r{ref.row}_{col}{'' if ref.index is None else f'_{ref.index}'}{ext}"


def file_data_uri(path: str | Path) -> str | None:
    """The image itself as a data URI (for embedding full-size images), or ``None`` if unreadable."""
    found = image_bytes(path)
    return None if found is None else data_uri(*found)

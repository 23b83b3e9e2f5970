"""Small embedded thumbnails (JPEG data URIs) for the HTML report."""

from __future__ import annotations

import base64
import io
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterable

from PIL import Image


def thumbnail(path: str | Path, max_side: int = 256, quality: int = 80) -> dict[str, object]:
    """``{"uri": data URI, "w", "h" (full size), "tw", "th" (thumbnail size)}`` of one image file.

    A file that cannot be read gives ``{"error": reason}`` (shown on the card).
    """
    try:
        with Image.open(path) as im:
            full = im.size
            im.draft("RGB", (max_side, max_side))  # fast JPEG decode at reduced size
            im = im.convert("RGB")
            im.thumbnail((max_side, max_side), Image.Resampling.BICUBIC)
            buf = io.BytesIO()
            im.save(buf, "JPEG", quality=quality, optimize=True)
    except (OSError, ValueError, Image.DecompressionBombError) as exc:
        return {"error": f"{path}: cannot be read ({exc})"}
    return {"uri": "data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode("ascii"),
            "w": full[0], "h": full[1], "tw": im.size[0], "th": im.size[1]}


def thumbnails(paths: Iterable[str], max_side: int = 256, workers: int = 4) -> dict[str, dict[str, object]]:
    """Thumbnails of distinct paths, decoded in threads (PIL releases the GIL)."""
    unique = sorted(set(paths))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return dict(zip(unique, pool.map(lambda p: thumbnail(p, max_side), unique)))

"""Images sent to a benchmark's judge as its release sends them.

Each benchmark's spec says, as data (:class:`~editlens.bench.base.ImageSending`),
how its owner's script encodes the images it shows the judge: the file's own
bytes (ImgEdit-Bench, KRIS-Bench), a JPEG of the decoded image with the edit
resized to the source (GEdit-Bench), a JPEG shrunk to fit 768 px (RISEBench).
:func:`encode_for_release` applies that description to one image; the judge
(:class:`~editlens.bench.judge.BenchJudge`) calls it for every role a question
shows, so no benchmark is named here.
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageOps

from editlens.backends.types import EncodedImage
from editlens.bench.base import ImageSending

_MIME = {"JPEG": "image/jpeg", "PNG": "image/png", "WEBP": "image/webp", "GIF": "image/gif", "BMP": "image/bmp"}


def original_bytes(src: Any) -> bytes | None:
    """The stored bytes of an image as published: a file's, or a table cell's embedded bytes;
    ``None`` for an image that only exists decoded (an array, a PIL image made in memory)."""
    from editlens.core.embedded import TableImage, read_table_image

    if isinstance(src, TableImage):
        return read_table_image(src)
    if isinstance(src, (str, os.PathLike)) and Path(src).is_file():
        return Path(src).read_bytes()
    return None


def _open(src: Any, name: str) -> Image.Image:
    data = original_bytes(src)
    if data is not None:
        return Image.open(io.BytesIO(data))
    if isinstance(src, Image.Image):
        return src
    if isinstance(src, np.ndarray):
        return Image.fromarray(src)
    raise ValueError(f"{name}: no image to send (got {type(src).__name__})")


def _pixels(data: bytes, name: str) -> np.ndarray:
    from editlens.core.images import load_image

    return load_image(Image.open(io.BytesIO(data)), name=name)[0]


def encode_for_release(src: Any, how: ImageSending, name: str,
                       source_size: tuple[int, int] | None = None) -> EncodedImage:
    """``src`` (a path, a table cell, a PIL image or an array) encoded as ``how`` says; ``source_size``
    (width, height), when given and ``how.sizes`` is ``source``, is the size it is resized to first
    (the edited and reference images of a release that resizes them to the source's)."""
    if how.encoding == "file":
        data = original_bytes(src)
        if data is None:
            raise ValueError(f"{name}: the release sends the image file's own bytes, but this image has no file")
        fmt = Image.open(io.BytesIO(data)).format or "PNG"
        return EncodedImage(data, how.mime or _MIME.get(fmt, f"image/{fmt.lower()}"), _pixels(data, name), how.detail)
    img = _open(src, name)
    if how.exif_transpose:
        img = ImageOps.exif_transpose(img)
    if how.rgb == "always" or img.mode in ("RGBA", "P"):
        img = img.convert("RGB")
    if source_size is not None and how.sizes == "source" and img.size != (source_size[0], source_size[1]):
        img = img.resize((source_size[0], source_size[1]))  # PIL's default filter, as the releases call it
    if how.max_side:
        img = img.copy()
        img.thumbnail((how.max_side, how.max_side))
    buf = io.BytesIO()
    fmt = "JPEG" if how.encoding == "jpeg" else "PNG"
    if fmt == "JPEG" and how.quality is not None:
        img.save(buf, format=fmt, quality=how.quality)
    else:
        img.save(buf, format=fmt)
    data = buf.getvalue()
    return EncodedImage(data, how.mime or _MIME[fmt], _pixels(data, name), how.detail)


def opened_size(src: Any, how: ImageSending, name: str) -> tuple[int, int]:
    """The (width, height) of ``src`` as the release opens it (after the EXIF turn it applies)."""
    img = _open(src, name)
    return (ImageOps.exif_transpose(img) if how.exif_transpose else img).size

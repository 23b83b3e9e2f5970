"""Image loading with explicit, recorded normalisation.

Everything downstream works on ``uint8`` RGB arrays of shape ``(H, W, 3)``.
Each step that changes pixels (EXIF rotation, alpha compositing, mode
conversion, resizing) is recorded as a short note, so a result can say how
its inputs were prepared.
"""

from __future__ import annotations

import hashlib
import io
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from editlens.core.embedded import TableImage, read_table_image
from editlens.errors import InputError

#: a file path, a decoded image, or a cell of a parquet/arrow file (:mod:`editlens.core.embedded`)
ImageLike = Union[str, os.PathLike, Image.Image, np.ndarray, TableImage]

#: Resampling used whenever editlens resizes an image (documented policy).
RESAMPLE = Image.Resampling.BICUBIC

SIZE_POLICIES = ("resize", "error")


@dataclass(frozen=True)
class ImageLoadOptions:
    """How inputs are normalised.

    Attributes:
        max_pixels: images with more pixels are refused (decompression-bomb
            guard). 178,956,970 is Pillow's own default ceiling for errors.
        size_policy: what to do when the edited (or reference) image differs in
            size from the source. ``"resize"`` (default) resizes it to the
            source size with bicubic resampling and records that it happened;
            ``"error"`` refuses the sample.
        background: RGB colour that transparent pixels are composited on.
    """

    max_pixels: int = 178_956_970
    size_policy: str = "resize"
    background: tuple[int, int, int] = (255, 255, 255)

    def __post_init__(self) -> None:
        if self.size_policy not in SIZE_POLICIES:
            raise InputError(
                f"size_policy must be one of {SIZE_POLICIES}, got {self.size_policy!r}"
            )


def describe(src: ImageLike, name: str | None = None) -> str:
    """A short label for an input, used in messages."""
    if name:
        return name
    if isinstance(src, TableImage):
        return src.where()
    if isinstance(src, (str, os.PathLike)):
        return str(src)
    if isinstance(src, Image.Image):
        return f"<PIL image {src.size[0]}x{src.size[1]} {src.mode}>"
    if isinstance(src, np.ndarray):
        return f"<array {src.shape} {src.dtype}>"
    return f"<{type(src).__name__}>"


def load_image(
    src: ImageLike, options: ImageLoadOptions | None = None, name: str | None = None
) -> tuple[np.ndarray, list[str]]:
    """Load ``src`` as an RGB ``uint8`` array and the notes of what was done.

    >>> import numpy as np
    >>> rgba = np.zeros((2, 2, 4), dtype=np.uint8)  # fully transparent black
    >>> arr, notes = load_image(rgba)
    >>> arr[0, 0].tolist(), notes
    ([255, 255, 255], ['alpha composited on (255, 255, 255)'])
    """
    options = options or ImageLoadOptions()
    label = describe(src, name)
    if isinstance(src, TableImage):
        image = _decode(io.BytesIO(read_table_image(src)), options, label)
    elif isinstance(src, (str, os.PathLike)):
        image = _open_file(Path(src), options, label)
    elif isinstance(src, Image.Image):
        image = src
    elif isinstance(src, np.ndarray):
        return _from_array(src, options, label)
    else:
        raise InputError(
            f"{label}: expected a file path, a PIL image or a numpy array, "
            f"got {type(src).__name__}"
        )
    return _from_pil(image, options, label)


def image_size(path: str | os.PathLike | TableImage) -> tuple[int, int]:
    """``(width, height)`` of an image file (or table cell) as :func:`load_image` would
    return it (EXIF rotation applied), read from its header without decoding."""
    label = describe(path)
    try:
        with Image.open(io.BytesIO(read_table_image(path)) if isinstance(path, TableImage) else path) as image:
            w, h = image.size
            orientation = image.getexif().get(0x0112, 1)
    except FileNotFoundError:
        raise InputError(f"{label}: file not found") from None
    except (UnidentifiedImageError, OSError) as exc:
        raise InputError(f"{label}: cannot be read as an image ({exc})") from None
    return (h, w) if orientation in (5, 6, 7, 8) else (w, h)


def _open_file(path: Path, options: ImageLoadOptions, label: str) -> Image.Image:
    if not path.exists():
        raise InputError(f"{label}: file not found")
    if path.is_dir():
        raise InputError(f"{label}: is a directory, not an image file")
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise InputError(f"{label}: cannot be read ({exc.strerror or exc})") from exc
    if size == 0:
        raise InputError(f"{label}: empty file (0 bytes), not an image")
    return _decode(path, options, label)


def _decode(path: Path | io.BytesIO, options: ImageLoadOptions, label: str) -> Image.Image:
    """Open and decode an image file or buffer with the bomb guard; errors name ``label``."""
    # Pillow's own bomb guard uses a process-wide setting; check size ourselves
    # before decoding so the limit is per call and the message is ours.
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            saved = Image.MAX_IMAGE_PIXELS
            Image.MAX_IMAGE_PIXELS = None
            try:
                image = Image.open(path)
            finally:
                Image.MAX_IMAGE_PIXELS = saved
    except UnidentifiedImageError as exc:
        raise InputError(
            f"{label}: not an image (Pillow cannot identify the file format)"
        ) from exc
    except OSError as exc:
        raise InputError(f"{label}: cannot be read ({exc})") from exc
    w, h = image.size
    if w * h > options.max_pixels:
        raise InputError(
            f"{label}: image is {w}x{h} = {w * h:,} pixels, above the limit of "
            f"{options.max_pixels:,} (decompression-bomb guard). If the file is "
            "trusted, raise ImageLoadOptions.max_pixels (CLI: --max-pixels)."
        )
    try:
        image.load()
    except OSError as exc:
        raise InputError(f"{label}: truncated or corrupt image data ({exc})") from exc
    except Exception as exc:  # Pillow raises assorted errors on hostile data
        raise InputError(f"{label}: corrupt image data ({type(exc).__name__}: {exc})") from exc
    return image


def _from_pil(image: Image.Image, options: ImageLoadOptions, label: str) -> tuple[np.ndarray, list[str]]:
    notes: list[str] = []
    w, h = image.size
    if w == 0 or h == 0:
        raise InputError(f"{label}: image has zero size ({w}x{h})")
    if w * h > options.max_pixels:
        raise InputError(
            f"{label}: image is {w}x{h} = {w * h:,} pixels, above the limit of "
            f"{options.max_pixels:,} (decompression-bomb guard)"
        )
    orientation = image.getexif().get(0x0112, 1) if hasattr(image, "getexif") else 1
    if orientation not in (None, 1):
        image = ImageOps.exif_transpose(image)
        notes.append(f"EXIF orientation {orientation} applied")
    mode = image.mode
    if mode == "P" and "transparency" in image.info:
        image = image.convert("RGBA")
        mode = "RGBA"
    if mode in ("RGBA", "LA", "PA", "La", "RGBa"):
        rgba = image.convert("RGBA")
        background = Image.new("RGBA", rgba.size, options.background + (255,))
        image = Image.alpha_composite(background, rgba).convert("RGB")
        notes.append(f"alpha composited on {options.background}")
    elif mode in ("I;16", "I;16B", "I;16L", "I", "F"):
        arr = np.asarray(image).astype(np.float64)
        peak = 65535.0 if mode.startswith("I;16") or arr.max() > 255 else 255.0
        arr8 = np.clip(np.round(arr / peak * 255.0), 0, 255).astype(np.uint8)
        image = Image.fromarray(arr8, mode="L").convert("RGB")
        notes.append(f"converted from {mode} (scaled to 8 bits) to RGB")
    elif mode != "RGB":
        image = image.convert("RGB")
        notes.append(f"converted from {mode} to RGB")
    return np.ascontiguousarray(np.asarray(image, dtype=np.uint8)), notes


def _from_array(arr: np.ndarray, options: ImageLoadOptions, label: str) -> tuple[np.ndarray, list[str]]:
    notes: list[str] = []
    if arr.ndim == 2:
        arr = arr[:, :, None]
    if arr.ndim != 3 or arr.shape[2] not in (1, 3, 4):
        raise InputError(
            f"{label}: array must be HxW, HxWx1, HxWx3 or HxWx4 (channels last), "
            f"got shape {arr.shape}"
        )
    if arr.shape[0] == 0 or arr.shape[1] == 0:
        raise InputError(f"{label}: array has zero size {arr.shape}")
    if arr.shape[0] * arr.shape[1] > options.max_pixels:
        raise InputError(f"{label}: array is above the pixel limit of {options.max_pixels:,}")
    if arr.dtype == np.uint8:
        data = arr
    elif np.issubdtype(arr.dtype, np.floating):
        if not np.isfinite(arr).all():
            raise InputError(f"{label}: array contains NaN or infinite values")
        lo, hi = float(arr.min()), float(arr.max())
        if lo < 0.0 or hi > 1.0:
            raise InputError(
                f"{label}: float arrays must hold values in [0, 1], found [{lo:.3g}, {hi:.3g}]"
            )
        data = np.round(arr * 255.0).astype(np.uint8)
        notes.append("float [0, 1] scaled to uint8")
    else:
        raise InputError(f"{label}: unsupported array dtype {arr.dtype} (use uint8 or float in [0, 1])")
    if data.shape[2] == 4:
        alpha = data[:, :, 3:4].astype(np.float64) / 255.0
        bg = np.asarray(options.background, dtype=np.float64)
        rgb = data[:, :, :3].astype(np.float64) * alpha + bg * (1.0 - alpha)
        data = np.round(rgb).astype(np.uint8)
        notes.append(f"alpha composited on {options.background}")
    elif data.shape[2] == 1:
        data = np.repeat(data, 3, axis=2)
        notes.append("converted from L to RGB")
    return np.ascontiguousarray(data), notes


def resize_to(arr: np.ndarray, size_hw: tuple[int, int]) -> np.ndarray:
    """Resize an RGB array to ``(height, width)`` with the documented resampling."""
    h, w = size_hw
    return np.asarray(Image.fromarray(arr).resize((w, h), RESAMPLE), dtype=np.uint8)


def image_hash(arr: np.ndarray) -> str:
    """Content hash of a decoded image (shape and pixels), stable across runs."""
    digest = hashlib.blake2b(digest_size=16)
    digest.update(repr(arr.shape).encode())
    digest.update(np.ascontiguousarray(arr).tobytes())
    return digest.hexdigest()


def file_sha256(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    """SHA-256 of a file's bytes (used for weight files in run manifests)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(chunk), b""):
            digest.update(block)
    return digest.hexdigest()


def as_float_tensor_batch(arrays: list[np.ndarray]) -> Any:
    """Stack equally sized uint8 HxWx3 arrays into a float tensor (N, 3, H, W) in [0, 1]."""
    import cv2
    import torch

    # Planes first (cv2.split is a fast de-interleave), then one conversion
    # pass on contiguous memory: a strided type conversion is several times slower.
    planar = np.stack([np.stack(cv2.split(np.ascontiguousarray(a))) for a in arrays])
    return torch.from_numpy(planar).float().div_(255.0)

"""Region masks from mask images or boxes, for masked metric variants."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from editlens.core.images import load_image, resize_to
from editlens.errors import InputError

REGIONS = ("all", "inside", "outside")


def boxes_to_mask(boxes: Sequence[Sequence[float]], height: int, width: int) -> np.ndarray:
    """Boolean mask, True inside any box.

    Boxes are ``[x0, y0, x1, y1]``; when every coordinate is within ``[0, 1]``
    they are read as fractions of the image size, otherwise as pixels. A
    reversed box, or a pixel box reaching past the image, is an error (see
    :mod:`editlens.data.validation`; manifests clip only with ``--clip-boxes``).

    >>> boxes_to_mask([[0, 0, 0.5, 0.5]], 4, 4).sum()
    np.int64(4)
    """
    mask = np.zeros((height, width), dtype=bool)
    if not boxes:
        return mask
    arr = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    if not np.isfinite(arr).all():
        raise InputError("boxes contain NaN or infinite coordinates")
    normalised = bool((arr >= 0).all() and (arr <= 1).all())
    for i, (x0, y0, x1, y1) in enumerate(arr, start=1):
        if x0 > x1 or y0 > y1:
            raise InputError(f"box {i} {[float(v) for v in (x0, y0, x1, y1)]} is reversed (x0 <= x1 and "
                             "y0 <= y1 are needed)")
        if not normalised and (x0 < 0 or y0 < 0 or x1 > width or y1 > height):
            raise InputError(f"box {i} {[float(v) for v in (x0, y0, x1, y1)]} reaches past the {width}x{height} "
                             "image (clip boxes explicitly: --clip-boxes)")
        if normalised:
            x0, x1, y0, y1 = x0 * width, x1 * width, y0 * height, y1 * height
        c0, c1 = int(np.clip(np.floor(x0), 0, width)), int(np.clip(np.ceil(x1), 0, width))
        r0, r1 = int(np.clip(np.floor(y0), 0, height)), int(np.clip(np.ceil(y1), 0, height))
        mask[r0:r1, c0:c1] = True
    return mask


def sample_mask(metadata: dict[str, Any], height: int, width: int) -> np.ndarray | None:
    """The sample's region of interest from ``metadata['mask']`` or ``metadata['boxes']``.

    A mask image is thresholded at half intensity and resized (nearest) to the
    source size when needed. Returns ``None`` when the sample has neither.
    """
    if metadata.get("mask") is not None:
        src = metadata["mask"]
        arr, _ = load_image(src) if not isinstance(src, np.ndarray) or src.ndim == 3 else (src, [])
        if arr.ndim == 3:
            arr = arr.mean(axis=2)
        if arr.dtype == bool:
            arr = arr.astype(np.uint8) * 255
        if arr.shape[:2] != (height, width):
            arr = resize_to(np.repeat(arr.astype(np.uint8)[:, :, None], 3, 2), (height, width))[:, :, 0]
        return arr >= 128
    boxes = metadata.get("boxes")
    if boxes is None:
        return None
    from editlens.data.validation import parse_boxes

    return boxes_to_mask(parse_boxes(boxes), height, width)  # malformed boxes: a sentence, not a numpy error


def select_region(mask: np.ndarray, region: str) -> np.ndarray:
    if region == "inside":
        return mask
    if region == "outside":
        return ~mask
    raise ValueError(f"region must be one of {REGIONS}, got {region!r}")

"""Checks of manifest values that need more than presence: boxes.

A box is ``[x0, y0, x1, y1]`` with ``x0 < x1`` and ``y0 < y1``: fractions of
the image size when every number of the list is within ``[0, 1]``, pixels
otherwise. Reversed corners and boxes reaching past the image are errors
naming the box, never silently reordered or clipped; clipping to the image is
done only when asked (:func:`check_boxes_in_image` with ``clip=True``, CLI
``--clip-boxes``).
"""

from __future__ import annotations

import json
import math
from typing import Any

from editlens.errors import InputError

BOXES_FORMAT = "a JSON list of boxes [x0, y0, x1, y1], e.g. [[0.1, 0.2, 0.5, 0.6]]"


def parse_boxes(value: Any) -> list[list[float]]:
    """Boxes from a JSON string or a list, with a sentence for what is wrong.

    A single box ``[x0, y0, x1, y1]`` is accepted as a list of one.

    >>> parse_boxes("[[0, 0, 0.5, 0.5]]")
    [[0.0, 0.0, 0.5, 0.5]]
    >>> parse_boxes("[1, 2, 3]")
    Traceback (most recent call last):
    ...
    editlens.errors.InputError: boxes [1, 2, 3]: box 1 has 3 numbers, not 4; give a JSON list of boxes [x0, y0, x1, y1], e.g. [[0.1, 0.2, 0.5, 0.6]]
    """
    shown = value if isinstance(value, str) else json.dumps(value, default=str)
    shown = shown if len(shown) <= 80 else shown[:77] + "..."

    def bad(reason: str) -> InputError:
        return InputError(f"boxes {shown}: {reason}; give {BOXES_FORMAT}")

    boxes = value
    if isinstance(value, str):
        try:
            boxes = json.loads(value)
        except json.JSONDecodeError as exc:
            raise bad(f"not valid JSON ({exc.msg} at character {exc.pos})") from None
    if not isinstance(boxes, list):
        raise bad(f"a JSON {type(boxes).__name__}, not a list")
    if boxes and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in boxes):
        boxes = [boxes]  # one box given bare
    out = []
    for i, box in enumerate(boxes, start=1):
        if not isinstance(box, (list, tuple)):
            raise bad(f"box {i} is not a list of 4 numbers")
        if len(box) != 4:
            raise bad(f"box {i} has {len(box)} numbers, not 4")
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in box):
            raise bad(f"box {i} holds something other than numbers")
        if not all(math.isfinite(v) for v in box):
            raise bad(f"box {i} has a NaN or infinite coordinate")
        if any(v < 0 for v in box):
            raise bad(f"box {i} has a negative coordinate")
        if not (box[0] < box[2] and box[1] < box[3]):
            raise bad(f"box {i} is reversed or empty (x0 < x1 and y0 < y1 are needed, got "
                      f"x0={box[0]:g}, x1={box[2]:g}, y0={box[1]:g}, y1={box[3]:g})")
        out.append([float(v) for v in box])
    return out


def boxes_are_fractions(boxes: list[list[float]]) -> bool:
    """Whether boxes are read as fractions of the image (every number within [0, 1])."""
    return all(0.0 <= v <= 1.0 for box in boxes for v in box)


def check_boxes_in_image(boxes: list[list[float]], size: tuple[int, int], clip: bool = False) -> list[list[float]]:
    """``boxes`` (from :func:`parse_boxes`) checked against an image of
    ``size = (width, height)``: a pixel box reaching past the image is an
    error, or, with ``clip``, is cut to the image (a box left with no area
    is still an error).

    >>> check_boxes_in_image([[10, 10, 50, 40]], (64, 48))
    [[10.0, 10.0, 50.0, 40.0]]
    >>> check_boxes_in_image([[0, 0, 5000, 5000]], (64, 48), clip=True)
    [[0.0, 0.0, 64.0, 48.0]]
    """
    if boxes_are_fractions(boxes):
        return boxes
    w, h = size
    out = []
    for i, (x0, y0, x1, y1) in enumerate(boxes, start=1):
        if x1 > w or y1 > h:
            if not clip:
                raise InputError(f"box {i} [{x0:g}, {y0:g}, {x1:g}, {y1:g}] reaches past the {w}x{h} image "
                                 "(pixel boxes must lie inside it; pass --clip-boxes, Python clip_boxes=True, "
                                 "to cut boxes to the image)")
            x1, y1 = min(x1, float(w)), min(y1, float(h))
            if not (x0 < x1 and y0 < y1):
                raise InputError(f"box {i} [{x0:g}, {y0:g}, ...] lies outside the {w}x{h} image")
        out.append([float(x0), float(y0), float(x1), float(y1)])
    return out

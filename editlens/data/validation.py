"""Checks of manifest values that need more than presence: boxes."""

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
        out.append([float(v) for v in box])
    return out

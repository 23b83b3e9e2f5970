"""Boxes drawn on the images with DICE's colour code: ADD red on the edited
image; EDIT green and REMOVE blue on the original image. The model-free
detector's CHANGE (kind unknown) is drawn yellow on both."""

from __future__ import annotations

import numpy as np
from PIL import Image, ImageDraw

from editlens.dice.types import Difference

COLOURS = {"ADD": (255, 0, 0), "EDIT": (0, 255, 0), "REMOVE": (0, 0, 255), "CHANGE": (255, 255, 0)}
#: which image each command's box goes on
TARGETS = {"ADD": ("edited",), "EDIT": ("source",), "REMOVE": ("source",), "CHANGE": ("source", "edited")}


def box_pixels(box: tuple[float, float, float, float], width: int, height: int) -> tuple[int, int, int, int]:
    x0, y0, x1, y1 = box
    return (int(round(x0 * (width - 1))), int(round(y0 * (height - 1))),
            int(round(x1 * (width - 1))), int(round(y1 * (height - 1))))


def draw_differences(source: np.ndarray, edited: np.ndarray, diffs: list[Difference],
                     line: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Copies of both images with every difference's box drawn where DICE puts it."""
    h, w = source.shape[:2]
    width = line or max(2, round(min(h, w) / 150))
    canvases = {"source": Image.fromarray(source), "edited": Image.fromarray(edited)}
    pens = {k: ImageDraw.Draw(v) for k, v in canvases.items()}
    for d in diffs:
        for target in TARGETS[d.command]:
            pens[target].rectangle(box_pixels(d.box, w, h), outline=COLOURS[d.command], width=width)
    return np.asarray(canvases["source"]), np.asarray(canvases["edited"])

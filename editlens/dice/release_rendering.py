"""The coherence estimator's input images rendered the way the released DICE
pipeline makes them, so the released coherence checkpoint sees the pixels it
was run on in the release.

What the release does (aimagelab/DICE, read from its dataset and plotting
helpers; this is our own code): a non-square pair is centre-cropped to a
square and resized to 512x512 (Lanczos), a square pair keeps its size; each
image is then drawn with matplotlib on a default figure (6.4 x 4.8 in at
100 dpi = 640 x 480 px) filling the canvas with equal aspect, so the picture
sits between white bars; the box is a 3-point (about 4 px) outline in
matplotlib's named colour of the command (red ADD, "green" = (0, 128, 0)
EDIT, blue REMOVE); axes off; the figure is saved as a JPEG (Pillow's default
quality), which the model then loads. The image without a box goes through
the same figure and JPEG.

Not reproduced: the release de-normalises boxes with the crop's size without
shifting them into the crop, which misplaces boxes on non-square images; we
map them exactly (:class:`editlens.dice.released_format.CentreCrop`).
"""

from __future__ import annotations

import io
from typing import Sequence

import numpy as np
from PIL import Image

#: figure geometry and line of the release (matplotlib's defaults when it ran: figsize 6.4 x 4.8, dpi 100)
FIGSIZE_IN = (6.4, 4.8)
DPI = 100
LINE_POINTS = 3.0
SQUARE_SIZE = 512  # non-square pairs are cropped and resized to this; square ones keep their size
#: matplotlib colour names per command, as the release names them (unknown commands get "green" there too)
COLOUR_NAMES = {"ADD": "red", "EDIT": "green", "REMOVE": "blue"}
#: matplotlib version the release pins (requirements.txt); our rendering runs on the installed one
RELEASE_MATPLOTLIB = "3.7.5"


def release_square(image: np.ndarray) -> Image.Image:
    """A non-square image centre-cropped (PIL crop at the half-pixel box the
    release computes) and resized to 512x512 with Lanczos; a square one as is."""
    pil = Image.fromarray(np.ascontiguousarray(image)).convert("RGB")
    w, h = pil.size
    if w == h:
        return pil
    s = min(w, h)
    cropped = pil.crop(((w - s) / 2, (h - s) / 2, (w + s) / 2, (h + s) / 2))
    return cropped.resize((SQUARE_SIZE, SQUARE_SIZE), Image.Resampling.LANCZOS)


def render_figure(image: Image.Image, box_pixels: Sequence[float] | None = None, colour: str = "green") -> np.ndarray:
    """``image`` drawn on a 640x480 matplotlib canvas (white bars around the
    equal-aspect picture), with an optional unfilled box ``(x0, y0, x1, y1)``
    in the image's pixel coordinates, saved as JPEG and read back as RGB."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle

    fig = Figure(figsize=FIGSIZE_IN, dpi=DPI, facecolor="white")
    FigureCanvasAgg(fig)
    ax = fig.add_axes((0, 0, 1, 1))
    # "antialiased" = matplotlib's default resampling when the release ran (3.7)
    ax.imshow(np.asarray(image), aspect="equal", interpolation="antialiased")
    if box_pixels is not None:
        x0, y0, x1, y1 = (float(v) for v in box_pixels)
        ax.add_patch(Rectangle((x0, y0), x1 - x0, y1 - y0, edgecolor=colour, facecolor="none",
                               linewidth=LINE_POINTS))
    ax.axis("off")
    buf = io.BytesIO()
    fig.savefig(buf, format="jpeg", dpi=DPI, facecolor="white")
    buf.seek(0)
    with Image.open(buf) as im:
        return np.asarray(im.convert("RGB"))


def release_pair(source: np.ndarray, edited: np.ndarray) -> tuple[Image.Image, Image.Image]:
    """The two images as the release prepares them: the decision is the
    original's (DICE ``coherence_on_prediction_dataset.py``: ``if image_w !=
    image_h`` of the original): a non-square original sends both images
    through the centre crop and 512x512 resize (the edit too, square or not);
    a square one leaves both as they are (the edit too, square or not)."""
    src = Image.fromarray(np.ascontiguousarray(source)).convert("RGB")
    edt = Image.fromarray(np.ascontiguousarray(edited)).convert("RGB")
    if src.size[0] == src.size[1]:
        return src, edt
    return release_square(source), _crop_resize(edt)


def _crop_resize(pil: Image.Image) -> Image.Image:
    w, h = pil.size
    s = min(w, h)
    cropped = pil.crop(((w - s) / 2, (h - s) / 2, (w + s) / 2, (h + s) / 2))
    return cropped.resize((SQUARE_SIZE, SQUARE_SIZE), Image.Resampling.LANCZOS)


def release_coherence_images(source: np.ndarray, edited: np.ndarray, command: str,
                             box_in_square: Sequence[float] | None, target: str) -> tuple[np.ndarray, np.ndarray]:
    """Both images as the release feeds them (:func:`release_pair`), then
    rendered (:func:`render_figure`), the box (fractions of the original as
    prepared) on ``target`` ("source" or "edited") in the command's colour,
    in pixels of the *original's* prepared size on either image, as the
    release de-normalises it (``image_w, image_h = image_original.size``)."""
    src, edt = release_pair(source, edited)
    images = {"source": src, "edited": edt}
    colour = COLOUR_NAMES.get(command, "green")
    w, h = src.size
    out = {}
    for k, im in images.items():
        px = None
        if k == target and box_in_square is not None:
            x0, y0, x1, y1 = box_in_square
            px = (x0 * w, y0 * h, x1 * w, y1 * h)
        out[k] = render_figure(im, px, colour)
    return out["source"], out["edited"]


def describe() -> dict[str, object]:
    """What a result records about this rendering (the matplotlib that drew it)."""
    import matplotlib

    return {"rendering": "release", "canvas": [int(FIGSIZE_IN[0] * DPI), int(FIGSIZE_IN[1] * DPI)],
            "line_points": LINE_POINTS, "format": "jpeg", "matplotlib": matplotlib.__version__,
            "release_matplotlib": RELEASE_MATPLOTLIB}

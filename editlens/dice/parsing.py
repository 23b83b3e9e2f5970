"""Parse difference lists: ``COMMAND: object, [x0, y0, x1, y1]``.

Tolerates a JSON list of such strings, extra spaces, swapped corners,
slightly out-of-range values (clamped and flagged) and duplicates (merged).
Box coordinates are read in the model family's convention (0-1 fractions,
Qwen2-VL's 0-1000, pixels), given by the caller, never guessed from their
size. Returns ``None`` for an answer with no difference line that is not an
explicit "no difference" answer.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Sequence

from editlens.backends.families import BOX_CONVENTIONS, DEFAULT_BOX_CONVENTION
from editlens.dice.types import Difference

_NUM = r"[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?"
_LINE = re.compile(
    rf"\b(ADD|REMOVE|EDIT)\b\s*:\s*(?P<obj>[^\[\n]*?)\s*,?\s*\[\s*(?P<a>{_NUM})\s*,\s*(?P<b>{_NUM})\s*,\s*"
    rf"(?P<c>{_NUM})\s*,\s*(?P<d>{_NUM})\s*\]", re.I)
_NONE = re.compile(r"^\W*(none|no (visible )?differences?|nothing( changed)?|no changes?)\W*$", re.I)


def iou(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def _flatten_json(text: str) -> str:
    s = text.strip()
    if s.startswith("```"):
        s = re.sub(r"^```\w*|```$", "", s).strip()
    if s.startswith("["):
        try:
            obj = json.loads(s)
        except ValueError:
            return text
        if isinstance(obj, list) and all(isinstance(x, str) for x in obj):
            return "\n".join(obj)
    return text


@dataclass
class ParsedDifferences:
    """What a detector answer holds: the differences (``None``: no difference
    line and no explicit "none"), and the lines left out with the reason."""

    differences: list[Difference] | None
    rejected: list[str] = field(default_factory=list)


#: how far past the edge a coordinate may stray and still be clamped (5% of the image)
TOLERANCE = 0.05


def _json_offsets(text: str, flat: str) -> Any:
    """Map offsets of ``flat`` (a JSON list's strings joined by newlines) back
    to ``text`` by finding each string in order; ``None`` where not found."""
    cursor = 0
    starts: list[tuple[int, int | None]] = []
    pos = 0
    for line in flat.split("\n"):
        at = text.find(line, cursor) if line else -1
        starts.append((pos, at if at >= 0 else None))
        if at >= 0:
            cursor = at + len(line)
        pos += len(line) + 1

    def to_text(offset: int) -> int | None:
        for line_start, at in reversed(starts):
            if offset >= line_start:
                return None if at is None else at + offset - line_start
        return None

    return to_text


def parse_differences_detailed(text: str | None, size: tuple[int, int] | None = None, merge_iou: float = 0.9,
                               *, convention: str = DEFAULT_BOX_CONVENTION) -> ParsedDifferences:
    """Differences in ``text`` with boxes in ``convention`` (see
    :data:`~editlens.backends.families.BOX_CONVENTIONS`); ``size`` =
    (width, height) of the image, needed for ``pixels``. A box outside the
    convention's range (beyond a 5% margin, which is clamped and flagged) is
    left out with the reason: the convention is never guessed from the
    numbers."""
    if convention not in BOX_CONVENTIONS:
        raise ValueError(f"unknown box convention {convention!r}; known: {sorted(BOX_CONVENTIONS)}")
    if text is None:
        return ParsedDifferences(None)
    flat = _flatten_json(text)
    to_text = (lambda o: o) if flat is text else _json_offsets(text, flat)
    out: list[Difference] = []
    rejected: list[str] = []
    for m in _LINE.finditer(flat):
        cmd = m.group(1).upper()
        obj = m.group("obj").strip().strip(",").strip().strip('"').strip() or None
        vals = [float(m.group(k)) for k in "abcd"]
        flags: list[str] = []
        if convention == "pixels":
            if size is None:
                rejected.append(f"{m.group(0).strip()}: pixel coordinates without an image size")
                continue
            w, h = size
            vals = [vals[0] / w, vals[1] / h, vals[2] / w, vals[3] / h]
        elif convention == "per-mille":
            vals = [v / 1000.0 for v in vals]
        if any(v < -TOLERANCE or v > 1 + TOLERANCE for v in vals):
            rejected.append(f"{m.group(0).strip()}: outside the image in the {convention} convention")
            continue
        box = tidy_box(vals, flags)
        if box[2] - box[0] <= 0 or box[3] - box[1] <= 0:
            rejected.append(f"{m.group(0).strip()}: empty box")
            continue  # an empty box locates nothing
        out.append(Difference(cmd, obj, box, flags=flags, char_offset=to_text(m.start(1))))
    if not out:
        none = not rejected and _NONE.match(flat.strip())
        return ParsedDifferences([] if none else None, rejected)
    return ParsedDifferences(merge_duplicates(out, merge_iou), rejected)


def parse_differences(text: str | None, size: tuple[int, int] | None = None,
                      merge_iou: float = 0.9, *, convention: str = DEFAULT_BOX_CONVENTION) -> list[Difference] | None:
    """Differences in ``text``; ``size`` = (width, height) of the image the
    boxes refer to (needed for the ``pixels`` convention). See
    :func:`parse_differences_detailed`.

    >>> [(d.command, d.object, d.box) for d in parse_differences("ADD: a red hat, [0.1, 0.2, 0.3, 0.4]")]
    [('ADD', 'a red hat', (0.1, 0.2, 0.3, 0.4))]
    >>> parse_differences("ADD: a hat, [100, 200, 300, 400]", convention="per-mille")[0].box
    (0.1, 0.2, 0.3, 0.4)
    >>> parse_differences("NONE")
    []
    >>> parse_differences("the cat looks happier") is None
    True
    """
    return parse_differences_detailed(text, size, merge_iou, convention=convention).differences


def merge_duplicates(diffs: list[Difference], threshold: float = 0.9) -> list[Difference]:
    """Drop repeats: same command and box IoU >= ``threshold``; the kept one is flagged."""
    kept: list[Difference] = []
    for d in diffs:
        twin = next((k for k in kept if k.command == d.command and iou(k.box, d.box) >= threshold), None)
        if twin is None:
            kept.append(d)
        elif "duplicates merged" not in twin.flags:
            twin.flags.append("duplicates merged")
    return kept



def tidy_box(vals: Sequence[float], flags: list[str]) -> tuple[float, float, float, float]:
    """A normalised box with swapped corners ordered and edges clamped to
    [0, 1]; what was changed is appended to ``flags`` (kept with the box).

    >>> flags = []; tidy_box([0.5, 0.2, 0.1, 1.02], flags), flags
    ((0.1, 0.2, 0.5, 1.0), ['corners swapped', 'clamped to the image'])
    """
    x0, y0, x1, y1 = vals
    if x0 > x1 or y0 > y1:
        x0, x1 = sorted((x0, x1))
        y0, y1 = sorted((y0, y1))
        flags.append("corners swapped")
    clamped = tuple(min(1.0, max(0.0, v)) for v in (x0, y0, x1, y1))
    if list(clamped) != [x0, y0, x1, y1]:
        flags.append("clamped to the image")
    return clamped  # type: ignore[return-value]

"""Parse difference lists: ``COMMAND: object, [x0, y0, x1, y1]``.

Tolerates a JSON list of such strings, extra spaces, pixel coordinates,
swapped corners, out-of-range values (clamped and flagged) and duplicates
(merged). Returns ``None`` for an answer with no difference line that is
not an explicit "no difference" answer.
"""

from __future__ import annotations

import json
import re

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


def parse_differences(text: str | None, size: tuple[int, int] | None = None,
                      merge_iou: float = 0.9) -> list[Difference] | None:
    """Differences in ``text``; ``size`` = (width, height) of the image the
    boxes refer to, needed to normalise pixel coordinates.

    >>> [(d.command, d.object, d.box) for d in parse_differences("ADD: a red hat, [0.1, 0.2, 0.3, 0.4]")]
    [('ADD', 'a red hat', (0.1, 0.2, 0.3, 0.4))]
    >>> parse_differences("NONE")
    []
    >>> parse_differences("the cat looks happier") is None
    True
    """
    if text is None:
        return None
    flat = _flatten_json(text)
    offset_base = 0 if flat is text else None
    out: list[Difference] = []
    for m in _LINE.finditer(flat):
        cmd = m.group(1).upper()
        obj = m.group("obj").strip().strip(",").strip().strip('"').strip() or None
        vals = [float(m.group(k)) for k in "abcd"]
        flags: list[str] = []
        # Fractions slightly out of range (1.05) are clamped; values above 2
        # can only be pixels (a 2-pixel box would locate nothing anyway).
        if any(v > 2.0 for v in vals):
            if size is None:
                flags.append("pixel coordinates without an image size")
                continue
            w, h = size
            vals = [vals[0] / w, vals[1] / h, vals[2] / w, vals[3] / h]
            flags.append("pixel coordinates normalised")
        x0, y0, x1, y1 = vals
        if x0 > x1 or y0 > y1:
            x0, x1 = sorted((x0, x1))
            y0, y1 = sorted((y0, y1))
            flags.append("corners swapped")
        clamped = [min(1.0, max(0.0, v)) for v in (x0, y0, x1, y1)]
        if clamped != [x0, y0, x1, y1]:
            flags.append("clamped to the image")
        box = tuple(clamped)
        if box[2] - box[0] <= 0 or box[3] - box[1] <= 0:
            continue  # an empty box locates nothing
        out.append(Difference(cmd, obj, box, flags=flags,
                              char_offset=m.start(1) if offset_base is not None else None))
    if not out:
        return [] if _NONE.match(flat.strip()) else None
    return merge_duplicates(out, merge_iou)


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


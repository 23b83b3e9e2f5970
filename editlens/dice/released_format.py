"""The answer format, confidence and image conventions of the released DICE
models (Baraldi et al., 2025), written from the paper and the behaviour of
the public checkpoints.

* Detector answer: a JSON-like list of strings ``"COMMAND: object, (x0, y0, x1, y1)"``
  with coordinates as fractions of the edited image, brackets or parentheses,
  single or double quotes; ``"nochange"`` (or an empty list) for no difference.
* Confidence of a difference: softmax over the ADD/EDIT/REMOVE logits at the
  generation step that emitted its command (the released code reports 1.0).
* Coherence images: centre-cropped to a square, boxes mapped into the crop,
  drawn 3 px wide without fill, red ADD, green EDIT, blue REMOVE. Where each box
  goes is a *convention*: ``paper`` (ADD on the edited image, EDIT and REMOVE on
  the original) or ``released`` (ADD and EDIT on the edited image, REMOVE on the
  original), as the released code does.
* Coherence answer: a reasoning line, then the decision YES or NO.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
from PIL import Image, ImageDraw

from editlens.dice.parsing import tidy_box
from editlens.dice.types import COMMANDS, Difference

_NUM = r"[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?"
# One item: COMMAND: object, (x0, y0, x1, y1) — the object runs to the last
# comma before the opening bracket; it may hold apostrophes but not quotes of the
# other kind or brackets.
_ITEM = re.compile(
    rf"\b(?P<cmd>ADD|EDIT|REMOVE)\b\s*:\s*(?P<obj>[^\"\[\]\(\)\n]*?)\s*,?\s*[\(\[]\s*(?P<a>{_NUM})\s*,\s*"
    rf"(?P<b>{_NUM})\s*,\s*(?P<c>{_NUM})\s*,\s*(?P<d>{_NUM})\s*[\)\]]", re.I)
_NOCHANGE = re.compile(r"\bno[\s_-]?changes?\b", re.I)
_EMPTY_LIST = re.compile(r"^\s*[\[\(]\s*[\]\)]\s*$")
#: values this far outside [0, 1] are clamped (rounding of the model); beyond, the item is rejected
CLAMP_TOLERANCE = 0.05
#: the flag of an item editlens keeps and the release's parser drops (an integer coordinate, or one outside [0, 1])
RELEASE_DROPS_FLAG = "the release drops this item (a coordinate that is an integer or outside [0, 1])"


@dataclass
class ReleasedAnswer:
    """A parsed detector answer. ``differences`` is ``None`` when the text
    holds neither a difference nor an explicit "no change"."""

    differences: list[Difference] | None
    no_change: bool = False
    rejected: list[str] = field(default_factory=list)  # items dropped, with the reason
    #: text after the last complete item (closing brackets, quotes and commas aside): an item cut off
    #: at the token limit ends up here, never silently dropped
    tail: str = ""

    #: the release's reading only: why the answer is left unscored (the release would crash, or reads nothing)
    unscored: str | None = None

    @property
    def problem(self) -> str | None:
        if self.differences is not None:
            return None
        if self.unscored:
            return f"unscored detector answer: {self.unscored}"
        why = "; ".join(self.rejected) if self.rejected else "no 'COMMAND: object, (x0, y0, x1, y1)' item"
        return f"unparsable detector answer: {why}"


def _strip_role(text: str) -> str:
    # a model decoding without a generation prompt may write the role itself
    return re.sub(r"^\s*(assistant)\s*:?\s*\n?", "", text, flags=re.I)


def parse_released_answer(text: str | None) -> ReleasedAnswer:
    """Parse a released-style detector answer.

    >>> a = parse_released_answer("['ADD: a red hat, (0.1, 0.2, 0.3, 0.4)', \\"REMOVE: dog, [0.5, 0.5, 0.9, 1.0]\\"]")
    >>> [(d.command, d.object, d.box) for d in a.differences]
    [('ADD', 'a red hat', (0.1, 0.2, 0.3, 0.4)), ('REMOVE', 'dog', (0.5, 0.5, 0.9, 1.0))]
    >>> parse_released_answer("['nochange']").no_change, parse_released_answer("[]").differences
    (True, [])
    >>> parse_released_answer("I see two cats").differences is None
    True
    """
    if text is None:
        return ReleasedAnswer(None, rejected=["no answer"])
    body = _strip_role(text)
    out: list[Difference] = []
    rejected: list[str] = []
    end = 0
    for m in _ITEM.finditer(body):
        end = m.end()
        cmd = m.group("cmd").upper()
        obj = m.group("obj").strip().strip("'").strip() or None
        vals = [float(m.group(k)) for k in "abcd"]
        flags: list[str] = []
        if any(not math.isfinite(v) or v < -CLAMP_TOLERANCE or v > 1 + CLAMP_TOLERANCE for v in vals):
            rejected.append(f"{m.group(0)!r}: coordinates outside [0, 1] (the format is normalised)")
            continue
        if any(not re.search(r"[.eE]", m.group(k)) for k in "abcd") or any(not 0 <= v <= 1 for v in vals):
            # DICE's TunedIdefics.py keeps an item only when its four coordinates are Python floats in [0, 1]
            flags.append(RELEASE_DROPS_FLAG)
        box = tidy_box(vals, flags)
        if box[2] <= box[0] or box[3] <= box[1]:
            rejected.append(f"{m.group(0)!r}: empty box")
            continue
        offset = m.start("cmd") + (len(text) - len(body))
        out.append(Difference(cmd, obj, box, flags=flags, char_offset=offset))
    tail = body[end:].strip().strip("[]()'\", \n") if end else ""
    if out:
        return ReleasedAnswer(out, rejected=rejected, tail=tail)
    first = body.strip().splitlines()[0] if body.strip() else ""
    if _NOCHANGE.search(first) or _EMPTY_LIST.match(first):
        return ReleasedAnswer([], no_change=True, rejected=rejected)
    return ReleasedAnswer(None, rejected=rejected)


#: how the detector's answer is read: ``editlens`` (:func:`parse_released_answer`: any line, integer and
#: nearly-in-range coordinates kept, flagged) or ``release`` (:func:`read_as_release`: as DICE's released parser)
ANSWER_READINGS = ("editlens", "release")
#: the note a run reading answers the editlens way records
EDITLENS_READING_NOTE = ("detector answers read by editlens' parser: items the release drops (integer or out-of-range "
                         "coordinates, items after a box of another length, lines after the first) are kept and "
                         "flagged, a 'nochange' answer is no change where the release raises "
                         "(--option dice.dice_answer_reading=release reads as the release)")


class _ReleaseRaises(Exception):
    """The released parser would raise here: the answer gets no reading."""


def _release_list(line: str) -> Any:
    """The first line decoded as the release does: quotes made double, then JSON, then brackets for
    parentheses, a closing bracket added, a filler item added, then ``json_repair`` (when installed)."""
    import json

    line = line.replace("'", '"')
    try:
        return json.loads(line)
    except ValueError:
        pass
    line = line.replace("(", "[").replace(")", "]")
    for attempt in (line, line + "]", line + '"skip: error, []" ]'):
        try:
            return json.loads(attempt)
        except ValueError:
            continue
    try:
        import json_repair
    except ImportError:
        raise _ReleaseRaises("the release hands this line to json_repair, which is not installed here; "
                             "editlens does not guess its repair") from None
    try:
        return json_repair.loads(line + '"skip: error, []" ]')
    except Exception:  # the release reads nothing when json_repair fails too
        return None


def _release_box(text: str) -> Any:
    import json

    return json.loads(text)


def read_as_release(text: str | None) -> ReleasedAnswer:
    """A detector answer read as DICE's released parser reads it (``--option
    dice.dice_answer_reading=release``): only the answer's first line; a list
    of ``"COMMAND: object, (x0, y0, x1, y1)"`` strings; an item is **dropped**
    unless its four coordinates are JSON floats in [0, 1] (``0`` and ``1.02``
    drop it; nothing is clamped or reordered); a box of another length ends the
    reading (later items are not read); an item whose command contains
    ``nochange`` makes the release raise, so the answer is left *unscored*
    (raw kept), as is an answer the release reads as nothing (not a list, or
    every item dropped: the release would report no differences, editlens
    does not call that a verdict). An explicit empty list is no change.

    >>> a = read_as_release("['ADD: cat, (0.1, 0.2, 0.3, 0.4)', 'EDIT: dog, (0, 0.2, 1, 0.9)']")
    >>> [(d.command, d.box) for d in a.differences], len(a.rejected)
    ([('ADD', (0.1, 0.2, 0.3, 0.4))], 1)
    >>> read_as_release("['nochange']").differences is None
    True
    """
    if text is None:
        return ReleasedAnswer(None, rejected=["no answer"])
    # the release splits the decoded prompt + answer at "Assistant:" and keeps the first line after it
    line = text.split("Assistant:")[0].split("\n")[0]
    rest = text[len(line):].strip()
    rejected = [f"text after the first line not read (the release reads the first line only): {rest[:80]!r}"] \
        if rest else []
    try:
        preds = _release_list(line)
        out = _release_items(text, preds, rejected)
    except _ReleaseRaises as exc:
        return ReleasedAnswer(None, rejected=rejected, unscored=str(exc))
    if out is None:
        return ReleasedAnswer(None, rejected=rejected, unscored="the release's parser reads no list from the "
                                                                  "first line (it would report no differences)")
    if not out and preds:
        return ReleasedAnswer(None, rejected=rejected, unscored="the release drops every item (it would report "
                                                                  "no differences): " + "; ".join(rejected))
    return ReleasedAnswer(out, no_change=not out, rejected=rejected)


def _release_items(text: str, preds: Any, rejected: list[str]) -> list[Difference] | None:
    """The items the release keeps, in order; ``None`` when it reads no list."""
    if not isinstance(preds, list):
        return None
    if preds and isinstance(preds[0], list):
        preds = preds[0]
    out: list[Difference] = []
    cursor, misaligned = 0, False
    for i, pred in enumerate(preds):
        if not isinstance(pred, str):
            rejected.append(f"{pred!r}: not a string (the release skips it)")
            continue
        parts = pred.split(":")
        command = parts[0]
        if "nochange" in command.lower():
            raise _ReleaseRaises(f"{pred!r}: the release's parser returns three values for a 'nochange' item where "
                                 "its caller unpacks four, and raises")
        at = text.find(command, cursor)
        if at >= 0:
            cursor = at + len(command)
        if len(parts) < 2:  # the release has kept the command but no object: its lists no longer line up
            rejected.append(f"{pred!r}: no ':' (the release keeps the command without an object)")
            misaligned = True
            continue
        obj = parts[1].split(",")[0]
        coord_text = ",".join(parts[1].split(",")[1:]).replace("(", "[").replace(")", "]")
        range_checked = True
        try:
            coords = _release_box(coord_text)
            n = len(coords)
        except (ValueError, TypeError):
            range_checked = False  # the release's fallback: a "BOUNDING_BOX:" field, range not checked
            try:
                try:
                    coords = _release_box(pred.split("BOUNDING_BOX:")[1])
                except (ValueError, IndexError):
                    coords = _release_box(pred.split("BOUNDING BOX:")[1])
                n = len(coords)
            except (ValueError, IndexError, TypeError):
                rejected.append(f"{pred!r}: no readable box (the release drops it)")
                continue
        if n != 4:
            rejected.append(f"{pred!r}: a box of {n} values (the release drops it and reads no further item)")
            rejected += [f"{p!r}: not read (after a box of {n} values)" for p in preds[i + 1:]]
            break
        bad = next((c for c in coords if not isinstance(c, float) or (range_checked and not 0 <= c <= 1)), None)
        if bad is not None:
            rejected.append(f"{pred!r}: coordinate {bad!r} is not a float in [0, 1] (the release drops the item)")
            continue
        if misaligned:
            raise _ReleaseRaises(f"{pred!r}: an earlier item without ':' left the release's commands, objects and "
                                 "boxes out of line; editlens does not guess how it pairs them")
        if command not in COMMANDS:
            raise _ReleaseRaises(f"{pred!r}: command {command!r} is none of {', '.join(COMMANDS)} as written; "
                                 "editlens does not guess what the release draws for it")
        flags = [] if range_checked else ["read from a BOUNDING_BOX field, range not checked (as the release)"]
        box = (float(coords[0]), float(coords[1]), float(coords[2]), float(coords[3]))
        if box[2] <= box[0] or box[3] <= box[1]:
            flags.append("empty or inverted box, kept as the release keeps it")
        out.append(Difference(command, obj.strip() or None, box, flags=flags, char_offset=at if at >= 0 else None))
    return out


def format_released_answer(diffs: Sequence[tuple[str, str, Sequence[float]]], digits: int = 3) -> str:
    """The training target for a list of (command, object, box): the released
    answer format, ``['nochange']`` for none.

    >>> format_released_answer([("ADD", "cat", (0.1, 0.25, 0.5, 0.75))])
    "['ADD: cat, (0.1, 0.25, 0.5, 0.75)']"
    """
    if not diffs:
        return "['nochange']"
    items = []
    for cmd, obj, box in diffs:
        coords = ", ".join(f"{round(float(v), digits):g}" for v in box)
        items.append(f"'{cmd}: {str(obj).replace(chr(39), '')}, ({coords})'")
    return "[" + ", ".join(items) + "]"


# -- confidence ---------------------------------------------------------------------

def softmax(values: Sequence[float]) -> list[float]:
    m = max(values)
    ex = [math.exp(v - m) for v in values]
    z = sum(ex)
    return [e / z for e in ex]


def step_for_offset(offsets: Sequence[int], offset: int) -> int | None:
    """Index of the generated token whose text span contains character ``offset``
    (``offsets[j]`` is where token ``j`` starts in the decoded answer). Offsets
    that are not a list (an engine's, computed on demand from token ids) are
    searched by bisection: each costs a request."""
    if not isinstance(offsets, list):
        import bisect

        k = bisect.bisect_right(offsets, offset)
        return k - 1 if k > 0 else None
    j = None
    for i, start in enumerate(offsets):
        if start <= offset:
            j = i
        else:
            break
    return j


def candidate_variants(tokenizer: Any, words: Sequence[str]) -> list[dict[str, int]]:
    """The first token of each word as written bare (``'ADD`` after a quote) and
    after a space (`` YES`` after a colon); a variant is kept only when every
    word has its own distinct first token (else their probabilities cannot be told apart).
    """
    out: list[dict[str, int]] = []
    for prefix in ("", " "):
        ids = {w: (tokenizer.encode(prefix + w, add_special_tokens=False) or [None])[0] for w in words}
        if None not in ids.values() and len(set(ids.values())) == len(words) and ids not in out:
            out.append(ids)
    return out


def word_probability(word: str, emitted: int, logits: dict[int, float], variants: Sequence[dict[str, int]]
                     ) -> float | None:
    """P(word) = softmax over the candidate words' logits at a step, using the
    variant (bare or spaced) whose token for ``word`` is the one emitted;
    ``None`` when the step did not emit ``word``'s token."""
    for v in variants:
        if v.get(word) == emitted and all(i in logits for i in v.values()):
            words = list(v)
            return softmax([logits[v[w]] for w in words])[words.index(word)]
    return None


def missing_candidates(word: str, emitted: int, logits: dict[int, float], variants: Sequence[dict[str, int]]
                       ) -> list[str] | None:
    """The candidate words whose value is missing at a step that emitted
    ``word``'s token (an engine returned only its top log-probabilities);
    ``None`` when the step did not emit ``word``'s token at all."""
    for v in variants:
        if v.get(word) == emitted:
            return [w for w, i in v.items() if i not in logits]
    return None


def unavailable_reason(word: str, emitted: int, logits: dict[int, float], variants: Sequence[dict[str, int]],
                       source: str | None) -> str:
    """Why no probability of ``word`` could be read at its step."""
    missing = missing_candidates(word, emitted, logits, variants)
    if missing:
        return (f"unavailable: {', '.join(missing)} not among the log-probabilities the engine returned at the "
                f"step ({source or 'engine top log-probabilities'})")
    return f"unavailable: {word} was not emitted as its own token at the step it starts"


def assign_command_confidence(diffs: list[Difference], offsets: Sequence[int], step_ids: Sequence[int],
                              step_logits: Sequence[dict[int, float]], variants: Sequence[dict[str, int]],
                              source: str | None = None) -> None:
    """Confidence of each difference = softmax over the ADD/EDIT/REMOVE logits
    at the step that emitted its command token.

    ``offsets[j]``: where generated token ``j`` starts in the answer;
    ``step_ids[j]``: the token; ``step_logits[j]``: token id -> logit for the
    candidate ids; ``variants``: from :func:`candidate_variants` over ADD/EDIT/REMOVE.
    A difference whose command was not emitted as its own first token (a
    tokenizer that merges it with the quote, say) gets ``None`` and a reason.
    """
    for d in diffs:
        if not variants:
            d.confidence, d.confidence_source = None, "unavailable: ADD/EDIT/REMOVE do not start with distinct tokens"
            continue
        j = None if d.char_offset is None else step_for_offset(offsets, d.char_offset)
        p = None if j is None or j >= len(step_ids) else word_probability(d.command, step_ids[j], step_logits[j],
                                                                             variants)
        if p is None:
            if j is None or j >= len(step_ids):
                d.confidence_source = "unavailable: the command's place in the answer was not found among the tokens"
            else:
                d.confidence_source = unavailable_reason(d.command, step_ids[j], step_logits[j], variants, source)
            d.confidence = None
            continue
        d.confidence, d.confidence_source = p, "softmax over ADD/EDIT/REMOVE logits" + (f" ({source})" if source
                                                                                          else "")


# -- coherence answer ---------------------------------------------------------------

_DECISION = re.compile(r"decision\s*[:\-]?\s*[\"'*]*\s*(YES|NO)\b", re.I)
_LAST_WORD = re.compile(r"^[\s\-*\"']*(?:answer\s*:\s*)?[\"'*]*(YES|NO)[\"'*.!]*\s*$", re.I)


@dataclass
class Decision:
    coherent: bool | None
    reasoning: str | None
    char_offset: int | None  # where the YES/NO word starts
    problem: str | None = None


def parse_decision(text: str | None) -> Decision:
    """The YES/NO decision that ends a coherence answer, and its reasoning.

    >>> d = parse_decision('- Reasoning: the hat was added as asked.\\n- Decision: "YES"')
    >>> d.coherent, d.reasoning
    (True, 'the hat was added as asked.')
    >>> parse_decision("maybe").coherent is None
    True
    """
    if not text or not text.strip():
        return Decision(None, None, None, "empty coherence answer")
    hits = list(_DECISION.finditer(text))
    m: re.Match[str] | None
    if hits:
        m = hits[-1]
        later = text[m.end():]
        if re.search(r"\b(YES|NO)\b", later):
            return Decision(None, None, None, "more than one decision after 'Decision:'")
    else:
        lines = text.rstrip().splitlines()
        m = _LAST_WORD.match(lines[-1]) if lines else None
        if m is None:
            return Decision(None, None, None, "no 'Decision: YES/NO' and no final YES/NO line")
        base = text.rstrip().rfind(lines[-1])
        return Decision(m.group(1).upper() == "YES", _reasoning(text[:base]), base + m.start(1))
    return Decision(m.group(1).upper() == "YES", _reasoning(text[: m.start()]), m.start(1))


def _reasoning(head: str) -> str | None:
    head = _strip_role(head).strip().rstrip("-").strip()
    head = re.sub(r"^[\s\-*]*reasoning\s*:\s*", "", head, flags=re.I).strip()
    return head or None


# -- centre crop and drawing ---------------------------------------------------------

@dataclass(frozen=True)
class CentreCrop:
    """The square centre crop of a ``width`` x ``height`` image (side = the
    shorter edge) and the exact mapping of normalised boxes into and out of it."""

    width: int
    height: int

    @property
    def side(self) -> int:
        return min(self.width, self.height)

    @property
    def left(self) -> int:
        return (self.width - self.side) // 2

    @property
    def top(self) -> int:
        return (self.height - self.side) // 2

    def apply(self, image: np.ndarray) -> np.ndarray:
        return image[self.top : self.top + self.side, self.left : self.left + self.side]

    def to_crop(self, box: Sequence[float]) -> tuple[float, float, float, float] | None:
        """A box (fractions of the full image) as fractions of the crop, clipped
        to it; ``None`` when nothing of it is inside the crop."""
        x0, y0, x1, y1 = box
        s = self.side
        out = ((x0 * self.width - self.left) / s, (y0 * self.height - self.top) / s,
               (x1 * self.width - self.left) / s, (y1 * self.height - self.top) / s)
        c = tuple(min(1.0, max(0.0, v)) for v in out)
        if c[2] <= c[0] or c[3] <= c[1]:
            return None
        return c  # type: ignore[return-value]

    def from_crop(self, box: Sequence[float]) -> tuple[float, float, float, float]:
        """The inverse of :meth:`to_crop` for a box inside the crop."""
        x0, y0, x1, y1 = box
        s = self.side
        return ((x0 * s + self.left) / self.width, (y0 * s + self.top) / self.height,
                (x1 * s + self.left) / self.width, (y1 * s + self.top) / self.height)


COLOURS = {"ADD": (255, 0, 0), "EDIT": (0, 255, 0), "REMOVE": (0, 0, 255)}
#: which image ("source" = original, "edited") each command's box goes on
CONVENTIONS = {
    "paper": {"ADD": "edited", "EDIT": "source", "REMOVE": "source"},
    "released": {"ADD": "edited", "EDIT": "edited", "REMOVE": "source"},
}


def box_to_pixels(box: Sequence[float], width: int, height: int) -> tuple[int, int, int, int]:
    x0, y0, x1, y1 = box
    return (min(width - 1, round(x0 * width)), min(height - 1, round(y0 * height)),
            min(width - 1, round(x1 * width)), min(height - 1, round(y1 * height)))


#: how the coherence images are made: ``release`` = the released pipeline's matplotlib figure saved as JPEG
#: (:mod:`editlens.dice.release_rendering`); ``editlens`` = a PIL outline on the square array (what
#: ``editlens dice train`` trains on)
RENDERINGS = ("release", "editlens")


def coherence_images(source: np.ndarray, edited: np.ndarray, diff: Difference, convention: str = "released",
                     crop: bool = True, size: int | None = 512, line: int = 3,
                     rendering: str = "editlens") -> tuple[np.ndarray, np.ndarray]:
    """The two images the coherence estimator sees for one difference.

    ``rendering="editlens"``: both centre-cropped to a square (``crop``),
    resized to ``size``, the box drawn ``line`` px wide without fill on the
    image ``convention`` names. ``rendering="release"``: as the released
    pipeline (640x480 JPEG figures, see :mod:`editlens.dice.release_rendering`;
    ``crop``, ``size`` and ``line`` do not apply there).

    Either way the box is mapped into the crop exactly (the released code draws
    the full-image fractions onto the crop, which shifts boxes on non-square images)."""
    if convention not in CONVENTIONS:
        raise ValueError(f"drawing convention must be one of {sorted(CONVENTIONS)}, got {convention!r}")
    if diff.command not in COLOURS:
        raise ValueError(f"cannot draw command {diff.command!r}; the released models know {sorted(COLOURS)}")
    if rendering not in RENDERINGS:
        raise ValueError(f"coherence rendering must be one of {RENDERINGS}, got {rendering!r}")
    if rendering == "release":
        from editlens.dice.release_rendering import release_coherence_images

        # as the release: the original's size decides the crop and scales the box, for both images
        h, w = source.shape[:2]
        scaled = CentreCrop(w, h).to_crop(diff.box) if w != h else tuple(diff.box)
        return release_coherence_images(source, edited, diff.command, scaled, CONVENTIONS[convention][diff.command])
    images = {"source": source, "edited": edited}
    box: Sequence[float] | None = diff.box
    if crop:
        h, w = edited.shape[:2]
        cc = CentreCrop(w, h)
        box = cc.to_crop(diff.box)
        images = {k: CentreCrop(v.shape[1], v.shape[0]).apply(v) for k, v in images.items()}
    pil = {k: Image.fromarray(np.ascontiguousarray(v)) for k, v in images.items()}
    if size:
        pil = {k: v.resize((size, size), Image.Resampling.LANCZOS) if v.size != (size, size) else v
               for k, v in pil.items()}
    if box is not None:
        target = pil[CONVENTIONS[convention][diff.command]]
        ImageDraw.Draw(target).rectangle(box_to_pixels(box, *target.size), outline=COLOURS[diff.command],
                                         width=line)
    return np.asarray(pil["source"]), np.asarray(pil["edited"])


def release_change_text(raw: str | None, diff: Difference) -> str:
    """The coherence prompt's change text as the released pipeline writes it:
    ``"COMMAND: "`` then the item's text between its first ``:`` and the next
    ``,`` unstripped, so ``ADD: cat, (...)`` gives ``"ADD:  cat"`` (two spaces).
    Falls back to ``"COMMAND: object"`` when the item cannot be found in ``raw``."""
    if raw is None or diff.char_offset is None or not raw[diff.char_offset:].upper().startswith(diff.command):
        return f"{diff.command}: {diff.object or 'an object'}"
    rest = raw[diff.char_offset + len(diff.command):]
    colon = rest.find(":")
    if colon < 0:
        return f"{diff.command}: {diff.object or 'an object'}"
    m = re.match(r"[^,:\"'\n]*", rest[colon + 1:])
    return f"{diff.command}: {m.group(0) if m else ''}"


@dataclass
class RawGeneration:
    text: str
    step_ids: list[int]
    offsets: list[int]  # start of each generated token in ``text``
    step_logits: list[dict[int, float]]  # per step, token id -> logit for the candidates' first tokens
    variants: list[dict[str, int]]  # candidate word -> first token id, bare and after a space
    finish_reason: str = "length"
    #: where the candidates' values came from (``None``: in-process logits or scores, as ``confidence`` says);
    #: on an engine: "engine ids (exact)", "engine top-20 log-probabilities", "... after penalties"
    source: str | None = None
    #: steps that emitted a candidate's token, and how many of them lacked another candidate's value
    candidate_steps: int = 0
    candidate_steps_missing: int = 0

"""Strict parsing of judge answers. What cannot be read as an answer
returns ``None`` (or a reason); callers record the sample as *unscored*
with the raw text, never as a number guessed from stray text.

This module imports nothing heavy (no models, no numpy), so
:mod:`editlens.meta` uses the same parsers for stored judge outputs.
"""

from __future__ import annotations

import ast
import json
import math
import re
from typing import Any

_OBJ = re.compile(r"\{.*\}", re.S)
_NUM = r"-?\d+(?:\.\d+)?"
_NUM_LIST = re.compile(rf"\[\s*{_NUM}(?:\s*,\s*{_NUM})*\s*\]")
# "score: [7, 8]", "Scores = (7, 8)", '"score": "[7, 8]"': a list right after a score label
_LABELLED = re.compile(rf"""\bscores?\b["']?\s*[:=]\s*["']?\s*([\[(]\s*{_NUM}(?:\s*,\s*{_NUM})*\s*[\])])""", re.I)
_VERDICT = re.compile(r"\[\[.*?\]\]")
_VERDICTS = {"[[A>B]]": "A>B", "[[A>>B]]": "A>B", "[[B>A]]": "B>A", "[[B>>A]]": "B>A",
             "[[A=B=Good]]": "A=B=Good", "[[A=B=Bad]]": "A=B=Bad"}
# an answer that opens like this declines the task (it is not a caption, a score or a verdict)
_REFUSAL = re.compile(r"^\W*(i'?m sorry|i am sorry|sorry\s*[,.!]|sorry,? but\b|i can ?not\b|i can'?t\b|i'?m (not )?(un)?able|"
                      r"i am (not )?(un)?able|as an ai\b|i won'?t\b|i will not\b|unfortunately,? i\b)", re.I)


def refusal_in(text: str | None) -> str | None:
    """The refusal sentence when ``text`` declines the task, else ``None``.

    >>> refusal_in("I'm sorry, but I can't help with that.")
    "I'm sorry, but I can't help with that."
    >>> refusal_in("A cat sits on a sofa.") is None, refusal_in("Sorry-looking dog on a couch") is None
    (True, True)
    """
    if not text or not _REFUSAL.match(text.strip()):
        return None
    return text.strip().splitlines()[0][:200]


def parse_object(text: str | None) -> dict[str, Any] | None:
    """The first JSON (or Python-literal) object in ``text``, fences and all."""
    if not text:
        return None
    cleaned = re.sub(r"```(?:json|python)?", "", text)
    m = _OBJ.search(cleaned)
    if not m:
        return None
    blob = m.group(0)
    for parse in (json.loads, ast.literal_eval):
        try:
            obj = parse(blob)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
        if isinstance(obj, dict):
            return obj
    return None


def parse_score_list(value: Any) -> list[float] | None:
    """A list of numbers from a stored rating cell: a list, or a string such
    as ``"[0, 10]"``, ``"[7,8]"``, or text with one such list in it. ``None``
    if there is none (never a made-up number). For a judge's *answer*, use
    the stricter :func:`parse_scores`.

    >>> parse_score_list("[0, 10]"), parse_score_list([3, 4]), parse_score_list("no idea")
    ([0.0, 10.0], [3.0, 4.0], None)
    >>> parse_score_list([True, 8]) is None
    True
    """
    if isinstance(value, (list, tuple)):
        if any(isinstance(v, bool) for v in value):  # `true` is not the score 1
            return None
        try:
            nums = [float(v) for v in value]
        except (TypeError, ValueError):
            return None
        return nums if nums and all(math.isfinite(v) for v in nums) else None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return [float(value)] if math.isfinite(value) else None
    if not isinstance(value, str):
        return None
    text = value.strip()
    for parse in (json.loads, ast.literal_eval):
        try:
            obj = parse(text)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
        if isinstance(obj, (list, tuple, int, float)) and not isinstance(obj, bool):
            return parse_score_list(obj if isinstance(obj, (list, tuple)) else [obj])
        if isinstance(obj, dict) and "score" in obj:
            return parse_score_list(obj["score"])
    m = _NUM_LIST.search(text)
    return parse_score_list(json.loads(m.group(0))) if m else None


def _whole_list(value: Any) -> list[float] | None:
    """Numbers when ``value`` *is* a list (or a string that is only a list)."""
    if isinstance(value, (list, tuple)):
        return parse_score_list(value)
    if not isinstance(value, str):
        return None
    text = re.sub(r"```\w*", "", value).strip().strip("\"'").strip()
    for parse in (json.loads, ast.literal_eval):
        try:
            obj = parse(text)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
        return parse_score_list(obj) if isinstance(obj, (list, tuple)) else None
    return None


def read_scores(text: str | None, expected: int = 2, low: float = 0.0,
                high: float = 10.0) -> tuple[list[float] | None, str | None, str | None]:
    """``(scores, reasoning, problem)`` of a judge's score answer.

    Where the scores may come from, in order: the ``score``/``scores`` field
    of a JSON object; a list right after a ``score:`` label; an answer that
    is nothing but the list. A number list elsewhere in prose (``"on the
    scale [0, 10] I give 7 and 8"``) is not an answer, and neither is an
    answer that only restates the scale (``"[0, 10]"``, ``{"score": "[0, 10]"}``:
    the bounds and no word of reasoning): ``scores`` is then ``None`` and
    ``problem`` says why.
    """
    if not text or not text.strip():
        return None, None, "empty answer"
    obj = parse_object(text)
    reasoning = None
    scores = None
    where = None
    if obj is not None:
        reasoning = obj.get("reasoning") if isinstance(obj.get("reasoning"), str) else None
        for key in ("score", "scores"):
            if key in obj:
                scores, where = _whole_list(obj[key]), f"the JSON {key!r} field"
                if scores is None:
                    return None, reasoning, f"the JSON {key!r} field is not a list of numbers"
                break
    if scores is None:
        m = _LABELLED.search(text)
        if m:
            scores, where = _whole_list(m.group(1).replace("(", "[").replace(")", "]")), "the labelled list"
    if scores is None:
        scores, where = _whole_list(text), "the answer"
    if scores is None:
        if refusal_in(text):
            return None, reasoning, f"model refused: {refusal_in(text)}"
        return None, reasoning, "no score list in the expected place (a JSON 'score' field or 'score: [...]')"
    if scores == [float(low), float(high)] and not _has_words(text, reasoning):
        return None, reasoning, f"the answer only restates the scale [{low:g}, {high:g}] (no scores of its own)"
    if len(scores) != expected:
        return None, reasoning, f"{where} has {len(scores)} scores, expected {expected}"
    if any(not (low <= s <= high) for s in scores):
        return None, reasoning, f"{where} has scores outside [{low:g}, {high:g}]: {scores}"
    return scores, reasoning, None


_NOT_REASONING = re.compile(r"\b(?:json|scores?|reasoning|rating|answer)\b", re.I)


def _has_words(text: str, reasoning: str | None) -> bool:
    """Whether the answer says anything besides a list and its labels (a
    judgement, however short); a bare scale echo does not."""
    if reasoning and re.search(r"[^\W\d_]{2,}", reasoning):
        return True
    return bool(re.search(r"[^\W\d_]{2,}", _NOT_REASONING.sub(" ", text)))


def parse_scores(text: str | None, expected: int = 2, low: float = 0.0,
                 high: float = 10.0) -> tuple[list[float], str | None] | None:
    """``(scores, reasoning)`` from an answer like ``{"score": [7, 8], "reasoning": ...}``,
    ``score: [7, 8]`` or ``"[7, 8]"``; ``None`` otherwise (see :func:`read_scores`).

    >>> parse_scores('{"reasoning": "ok", "score": [7, 8]}')
    ([7.0, 8.0], 'ok')
    >>> parse_scores("On the scale [0, 10] I give 7 and 8") is None
    True
    """
    scores, reasoning, _ = read_scores(text, expected, low, high)
    return None if scores is None else (scores, reasoning)


def genai_verdict(response: str | None) -> str | None:
    """The first ``[[...]]`` span on the first line that has one.

    >>> genai_verdict("Reasoning...\\nFinal: [[B>A]] and [[A>B]]")
    '[[B>A]]'
    """
    if not response:
        return None
    for line in str(response).splitlines():
        m = _VERDICT.search(line)
        if m:
            return m.group(0).replace(" ", "")
    return None


def parse_verdict(text: str | None) -> str | None:
    """``A>B``, ``B>A``, ``A=B=Good`` or ``A=B=Bad`` from the first ``[[...]]``
    verdict on a line (``[[A>>B]]`` counts as ``A>B``); ``None`` otherwise."""
    v = genai_verdict(text)
    return _VERDICTS.get(v) if v else None


def parse_yes_no(text: str | None) -> bool | None:
    """``True``/``False`` when the answer is a yes/no answer (it starts with
    YES or NO as a word), else ``None``.

    >>> parse_yes_no("Yes, it was."), parse_yes_no("Nope"), parse_yes_no("Maybe yes")
    (True, None, None)
    """
    m = yes_no_span(text)
    return None if m is None else m[0]


def yes_no_span(text: str | None) -> tuple[bool, int] | None:
    """``(said YES, character offset of the word)`` of a yes/no answer, else ``None``."""
    if not text:
        return None
    m = re.match(r"\W*(yes|no)\b", text, re.I)
    return None if m is None else (m.group(1).lower() == "yes", m.start(1))


#: a decision: "ANSWER: YES", "Decision: no", 'Answer: "YES"', "**ANSWER:** NO", closing its line
_DECISION = re.compile(r"""(?:^|(?<=[\s*_#>.:;-]))(?:final\s+)?(?:answer|decision)\s*[*_]*\s*[:=]\s*[*_]*\s*["'`]?"""
                       r"""\s*(YES|NO)\b["'`]?[\s.!*_]*$""", re.I | re.M)


def parse_decision(text: str | None) -> tuple[bool, int] | None:
    """``(said YES, character offset of YES/NO)`` from the last explicit
    decision (``ANSWER: YES``, ``Decision: "NO"``) that ends its line;
    ``None`` when there is none. A bare YES or NO inside the reasoning is not
    a decision.

    >>> parse_decision("It was asked for.\\nANSWER: YES")
    (True, 26)
    >>> parse_decision("Yes, a hat was added, but no ANSWER line") is None
    True
    """
    if not text:
        return None
    found = list(_DECISION.finditer(text))
    if not found:
        return None
    last = found[-1]
    return last.group(1).upper() == "YES", last.start(1)

"""Robust parsing of judge answers: JSON, Python-style literals, lists
inside strings, stray text around them. What cannot be parsed returns
``None``; callers record the sample as *unscored* with the raw text."""

from __future__ import annotations

import ast
import json
import re
from typing import Any

from editlens.meta.protocols import parse_score_list

_OBJ = re.compile(r"\{.*\}", re.S)
_VERDICTS = {"[[A>B]]": "A>B", "[[A>>B]]": "A>B", "[[B>A]]": "B>A", "[[B>>A]]": "B>A",
             "[[A=B=Good]]": "A=B=Good", "[[A=B=Bad]]": "A=B=Bad"}


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


def parse_scores(text: str | None, expected: int = 2, low: float = 0.0, high: float = 10.0) -> tuple[list[float], str | None] | None:
    """``(scores, reasoning)`` from an answer like ``{"score": [7, 8], "reasoning": ...}``,
    ``score: [7, 8]`` or ``"[7, 8]"``. Scores outside ``[low, high]`` or of
    the wrong count make the answer unparsable rather than being guessed at.

    >>> parse_scores('{"reasoning": "ok", "score": [7, 8]}')
    ([7.0, 8.0], 'ok')
    >>> parse_scores("scores are 7 and 8") is None
    True
    """
    if not text:
        return None
    obj = parse_object(text)
    reasoning = None
    scores = None
    if obj is not None:
        reasoning = obj.get("reasoning") if isinstance(obj.get("reasoning"), str) else None
        for key in ("score", "scores"):
            if key in obj:
                scores = parse_score_list(obj[key])
                break
    if scores is None:
        scores = parse_score_list(text)
    if scores is None or len(scores) != expected or any(not (low <= s <= high) for s in scores):
        return None
    return scores, reasoning


def parse_verdict(text: str | None) -> str | None:
    """``A>B``, ``B>A``, ``A=B=Good`` or ``A=B=Bad`` from the first ``[[...]]``
    verdict on a line (``[[A>>B]]`` counts as ``A>B``); ``None`` otherwise."""
    from editlens.meta.protocols import genai_verdict

    v = genai_verdict(text)
    return _VERDICTS.get(v) if v else None


def parse_yes_no(text: str | None) -> bool | None:
    """``True``/``False`` when the answer starts with yes/no, else ``None``."""
    if not text:
        return None
    m = re.match(r"\W*(yes|no)\b", text.strip(), re.I)
    return None if m is None else m.group(1).lower() == "yes"

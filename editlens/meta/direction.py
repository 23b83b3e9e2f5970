"""The direction of an evaluator's score, from its spec: one rule for every protocol.

Meta-evaluation compares scores (which edit scores better, do scores rise
with human ratings); for a lower-is-better evaluator (L1, LPIPS, change
maps) "better" is the lower score. Every protocol reads the direction here,
as ``compare``, ``best-of-n`` and ``calibrate`` do, and sees scores
*oriented* so that higher is better.
"""

from __future__ import annotations

from typing import Mapping


def higher_is_better(metric: str | None) -> bool | None:
    """The registered evaluator's declared direction; ``None`` when the name is unknown
    (a plain ``{id, score}`` file: scores are read as higher-is-better, and reports say so)."""
    if not metric:
        return None
    from editlens.errors import UnknownMetricError
    from editlens.metrics.registry import get_spec

    try:
        return bool(get_spec(metric).higher_is_better)
    except UnknownMetricError:
        return None


def sign(metric: str | None) -> float:
    """``-1.0`` for a lower-is-better evaluator, else ``1.0``."""
    return -1.0 if higher_is_better(metric) is False else 1.0


def oriented(scores: Mapping[str, float], metric: str | None) -> dict[str, float]:
    """Scores turned so that higher is better (negated for a lower-is-better evaluator)."""
    s = sign(metric)
    return {k: s * v for k, v in scores.items()} if s < 0 else dict(scores)


def direction_note(metric: str | None) -> str:
    """How the report read the scores' direction, in words."""
    hib = higher_is_better(metric)
    if hib is None:
        return "higher scores read as better (no registered evaluator named)"
    return "higher is better (from its spec)" if hib else "lower is better (from its spec): scores negated"

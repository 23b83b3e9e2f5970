"""How much evidence a figure rests on, in one wording for every command.

A figure over no items is *not measured* (never 0, never "passes"); one over
fewer than :data:`MIN_N` items is *too few* to read. probe, calibrate,
meta-eval, ``runs diff`` and every summary use these words.
"""

from __future__ import annotations

import math
from typing import Any, Literal, overload

#: the fewest items a figure may rest on before it is called "too few" to read
MIN_N = 10


@overload
def shortfall(n: Literal[0], why: str, min_n: int = MIN_N) -> str: ...
@overload
def shortfall(n: int, why: str, min_n: int = MIN_N) -> str | None: ...
def shortfall(n: int, why: str, min_n: int = MIN_N) -> str | None:
    """``None`` when ``n`` items are enough; otherwise the words that replace the verdict.

    >>> shortfall(0, "every answer unscored")
    'not measured (n = 0: every answer unscored)'
    >>> shortfall(3, "x")
    'too few (n = 3, fewer than 10)'
    >>> shortfall(10, "x") is None
    True
    """
    if n <= 0:
        return f"not measured (n = 0: {why})"
    if n < min_n:
        return f"too few (n = {n}, fewer than {min_n})"
    return None


@overload
def not_measured(n: Literal[0], why: str) -> str: ...
@overload
def not_measured(n: int, why: str) -> str | None: ...
def not_measured(n: int, why: str) -> str | None:
    """The words for a figure over no items (``None`` when there is at least one)."""
    return shortfall(n, why, 1)


def figure(value: Any, n: int, why: str, fmt: str = "{:.4f}", min_n: int = MIN_N) -> str:
    """A value as text with its evidence: ``not measured (...)`` when n = 0, the
    value followed by ``(too few ...)`` below ``min_n``, ``undefined`` for NaN/None.

    >>> figure(0.5, 0, "no answer parsed")
    'not measured (n = 0: no answer parsed)'
    >>> figure(0.5, 4, "x")
    '0.5000 (too few (n = 4, fewer than 10))'
    >>> figure(float("nan"), 40, "x"), figure(0.25, 40, "x")
    ('undefined', '0.2500')
    """
    if n <= 0:
        return shortfall(0, why)
    words = shortfall(n, why, min_n)
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    text = fmt.format(value) if ok else "undefined"
    return text if words is None else f"{text} ({words})"

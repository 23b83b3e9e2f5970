"""One rule for data written as strict JSON (report pages, score-server answers).

JSON has no NaN or infinity and only string keys: a non-finite number becomes
``null`` (an undefined figure, never a made-up 0), a key its string, and a
value JSON cannot hold (a path, a numpy scalar that is not a float) its text.
"""

from __future__ import annotations

import math
from typing import Any


def json_safe(value: Any) -> Any:
    """``value`` with every NaN or infinity as ``None``, through dicts, lists and tuples.

    >>> json_safe({"a": float("nan"), 1: [float("inf"), 0.5, "x", None, True]})
    {'a': None, '1': [None, 0.5, 'x', None, True]}
    >>> from pathlib import Path
    >>> json_safe({"path": Path("a/b")})
    {'path': 'a/b'}
    """
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, (str, int, bool)) or value is None:
        return value
    return str(value)

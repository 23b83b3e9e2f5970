"""What a meta-evaluation page needs beside the report: the extra data it plots (predicted-vs-human
points, the confusion of pairwise verdicts: :mod:`editlens.bench.aurora` reads them from the same
files the meta-evaluation read) and a report without the paths of the machine it was made on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from editlens.bench.aurora import PAIR_LABELS, pairwise_confusion, pointwise_points
from editlens.bench.evaluate import evaluated as describe_evaluated

__all__ = ["PAIR_LABELS", "describe_evaluated", "pairwise_confusion", "pointwise_points", "without_local_paths"]


def without_local_paths(obj: Any) -> Any:
    """``obj`` with every absolute path string replaced by its file name (for pages that travel).

    >>> without_local_paths({"instructions_from": "/home/me/data/samples.jsonl", "n": 3, "note": "a/b"})
    {'instructions_from': 'samples.jsonl', 'n': 3, 'note': 'a/b'}
    """
    if isinstance(obj, str):
        looks_absolute = obj.startswith("/") or (len(obj) > 2 and obj[1] == ":" and obj[2] in "/\\")
        return Path(obj).name if looks_absolute and "\n" not in obj and " " not in obj.strip() else obj
    if isinstance(obj, dict):
        return {k: without_local_paths(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [without_local_paths(v) for v in obj]
    return obj

"""Reading JSON-lines files: the one reader lives in :mod:`editlens.core.io`."""

from __future__ import annotations

from editlens.core.io import iter_jsonl, read_jsonl

__all__ = ["iter_jsonl", "read_jsonl"]

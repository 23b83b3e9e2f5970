"""Reading JSON-lines files with errors that name the file and the line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

from editlens.errors import InputError


def iter_jsonl(path: str | Path, missing_hint: str = "") -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` for every non-blank line of ``path``.

    Raises :class:`InputError` naming the file (and line) when the file is
    missing, is not UTF-8, holds a line that is not JSON, or a line that is
    not a JSON object.

    >>> import tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "x.jsonl")
    >>> _ = open(p, "w").write('{"a": 1}\\n\\n[2]\\n')
    >>> next(iter_jsonl(p))
    (1, {'a': 1})
    >>> list(iter_jsonl(p))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    editlens.errors.InputError: ...x.jsonl:3: expected a JSON object, got list
    """
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{p}: file not found" + (f" ({missing_hint})" if missing_hint else ""))
    with open(p, encoding="utf-8") as fh:
        n = 0
        try:
            for n, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise InputError(f"{p}:{n}: not valid JSON ({exc.msg})") from None
                if not isinstance(row, dict):
                    raise InputError(f"{p}:{n}: expected a JSON object, got {type(row).__name__}")
                yield n, row
        except UnicodeDecodeError as exc:
            raise InputError(f"{p}:{n + 1}: not UTF-8 text ({exc.reason})") from None

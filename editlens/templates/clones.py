"""Prompt wordings read from a user's clone of an authors' repository.

The released prompt texts of DICE, EditScore and EditReward are not shipped
with editlens: the user points at their clone, and editlens reads the
module-level string assignments of its prompt module by parsing it (nothing
of the clone is imported or run).
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Sequence

from editlens.errors import InputError


def find_module(path: str | Path, candidates: Sequence[str], option: str, what: str) -> Path:
    """``path`` itself when it is a file, else the first of ``candidates``
    (paths inside the repository) under it; errors name ``option``."""
    p = Path(path).expanduser()
    if p.is_file():
        return p
    if not p.exists():
        raise InputError(f"{option} {p}: no such file or directory (expected a clone of {what} or its "
                         f"{candidates[0]})")
    for rel in candidates:
        if (p / rel).is_file():
            return p / rel
    raise InputError(f"{option} {p}: looked for the prompts module of {what} at "
                     + ", ".join(str(p / r) for r in candidates) + "; none exists")


def module_strings(path: Path, option: str) -> dict[str, str]:
    """Module-level ``NAME = "..."`` string assignments of a Python file
    (chained and annotated targets included).

    >>> import tempfile, pathlib
    >>> f = pathlib.Path(tempfile.mkdtemp()) / "prompts.py"
    >>> _ = f.write_text('A = B = "hi"\\nC: str = "there"\\nD = 3\\n')
    >>> module_strings(f, "--prompts")
    {'A': 'hi', 'B': 'hi', 'C': 'there'}
    """
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (OSError, UnicodeDecodeError, SyntaxError) as exc:
        raise InputError(f"{option} {path}: cannot parse it as Python ({exc})") from None
    out: dict[str, str] = {}
    for node in tree.body:
        value = getattr(node, "value", None)
        if not (isinstance(value, ast.Constant) and isinstance(value.value, str)):
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        for t in targets:
            if isinstance(t, ast.Name):
                out[t.id] = value.value
    return out

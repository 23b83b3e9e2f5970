"""Prompt wordings read from a user's clone of an authors' repository.

The released prompt texts of DICE, EditScore and EditReward are not shipped
with editlens: the user points at their clone, and editlens reads the
module-level string assignments of its prompt module by parsing it (nothing
of the clone is imported or run). Where a release's judging script writes
more text into its messages (KRIS-Bench's captions before each image), the
literal texts of that script's message dicts are read the same way.
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


def _function(path: Path, function: str, option: str) -> ast.FunctionDef:
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (OSError, UnicodeDecodeError, SyntaxError) as exc:
        raise InputError(f"{option} {path}: cannot parse it as Python ({exc})") from None
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == function:
            return node
    raise InputError(f"{option} {path}: no function {function}() in it (the release's layout this reads)")


def _in_order(nodes: list[ast.AST]) -> list[ast.AST]:
    return sorted(nodes, key=lambda n: (getattr(n, "lineno", 0), getattr(n, "col_offset", 0)))


def _format_template(node: ast.AST) -> str | None:
    """A string literal as a ``str.format`` template: an f-string's fields become
    ``{0}``, ``{1}``... in order; ``None`` for anything that is not a literal."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value.replace("{", "{{").replace("}", "}}")
    if isinstance(node, ast.JoinedStr):
        out, k = [], 0
        for v in node.values:
            if isinstance(v, ast.Constant):
                out.append(str(v.value).replace("{", "{{").replace("}", "}}"))
            else:
                out.append("{%d}" % k)
                k += 1
        return "".join(out)
    return None


def message_texts(path: Path, function: str, option: str) -> list[str]:
    """The literal ``"text"`` values of the chat-message dicts that ``function``
    of a Python file builds (``{"type": "text", "text": "..."}``), in source
    order, as ``str.format`` templates (see :func:`_format_template`); texts
    that are variables (the prompt) are left out. Read by parsing, never run.

    >>> import tempfile, pathlib
    >>> f = pathlib.Path(tempfile.mkdtemp()) / "judge.py"
    >>> _ = f.write_text('def ask(p, xs):\\n    c = [{"text": p}]\\n'
    ...                  '    for i, x in enumerate(xs):\\n        c.append({"type": "text", "text": f"Pic {i}:"})\\n'
    ...                  '    c.append({"text": "Last {one}:"})\\n')
    >>> message_texts(f, "ask", "--prompts-from")
    ['Pic {0}:', 'Last {{one}}:']
    """
    found = []
    for node in _in_order([n for n in ast.walk(_function(path, function, option)) if isinstance(n, ast.Dict)]):
        assert isinstance(node, ast.Dict)
        for k, v in zip(node.keys, node.values):
            if isinstance(k, ast.Constant) and k.value == "text":
                text = _format_template(v)
                if text is not None:
                    found.append(text)
    return found


def appended_labels(path: Path, function: str, option: str) -> list[str]:
    """The string literal ending each tuple that ``function`` appends to a list
    (``frames.append((n, image, "label"))``), in source order.

    >>> import tempfile, pathlib
    >>> f = pathlib.Path(tempfile.mkdtemp()) / "judge.py"
    >>> _ = f.write_text('def ask(xs, y):\\n    out = [(1, x, "given") for x in xs]\\n'
    ...                  '    out.append((2, y, "made"))\\n    out.append((3, y))\\n')
    >>> appended_labels(f, "ask", "--prompts-from")
    ['made']
    """
    found = []
    for node in _in_order([n for n in ast.walk(_function(path, function, option)) if isinstance(n, ast.Call)]):
        assert isinstance(node, ast.Call)
        if isinstance(node.func, ast.Attribute) and node.func.attr == "append" and len(node.args) == 1 \
                and isinstance(node.args[0], ast.Tuple) and node.args[0].elts:
            last = node.args[0].elts[-1]
            if isinstance(last, ast.Constant) and isinstance(last.value, str):
                found.append(last.value)
    return found

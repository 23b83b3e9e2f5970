"""The reward prompt of reward-conditioned editor fine-tuning (ADIEE §3.4).

Each training instruction gets a suffix naming the quality of the chosen
target, one of five levels; at inference the editor is prompted with the top
level. Two parts, both recorded with the trained editor:

* **wording**: a template with a ``{quality}`` field. Ours is
  ``editlens/templates/editor_quality_suffix.txt`` (written after the
  paper's description, "The image quality is [SCORE] out of five"); a user's
  own file, or the suffix read from their clone of the ADIEE release (the
  formatted string of its dataset module that mentions "out of five"),
  replaces it.
* **binning**: how a 0-10 score becomes a level 1-5. ``release``: the score
  rounded, then 0-2 -> 1, 3-4 -> 2, 5-6 -> 3, 7-8 -> 4, 9-10 -> 5 (the
  release's bins); ``linear``: round(1 + 4 * score / 10) (the paper's "normalised
  to 1-5", and what ``editlens relabel`` writes).
  Levels are written as words (``one`` .. ``five``) or digits.
"""

from __future__ import annotations

import ast
import hashlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from editlens.errors import InputError

BINNINGS = ("release", "linear")
LEVEL_STYLES = ("words", "digits")
WORDS = ("one", "two", "three", "four", "five")
TOP_LEVEL = 5
DEFAULT_TEMPLATE = Path(__file__).resolve().parents[1] / "templates" / "editor_quality_suffix.txt"
#: where a clone of the ADIEE release keeps its dataset module (searched in order)
CLONE_MODULES = ("dataset.py", "src/dataset.py", "editing/dataset.py")


def quality_level(score10: float, binning: str = "release") -> int:
    """The level 1-5 of a score on 0-10.

    >>> [quality_level(s) for s in (0, 2.4, 2.6, 4, 6.5, 8.4, 9, 10)]
    [1, 1, 2, 2, 3, 4, 5, 5]
    >>> [quality_level(s, "linear") for s in (0, 2.4, 5, 8.8, 10)]
    [1, 2, 3, 5, 5]
    """
    if not math.isfinite(score10):
        raise InputError(f"a target's score is {score10}: cannot bin it")
    s = min(10.0, max(0.0, float(score10)))
    if binning == "release":
        r = round(s)  # Python's rounding (half to even), as a Python release rounds
        return 1 if r <= 2 else min(TOP_LEVEL, (r + 1) // 2)
    if binning == "linear":
        return int(min(TOP_LEVEL, max(1, round(1 + 4 * s / 10))))  # as `relabel` rounds
    raise InputError(f"binning must be one of {', '.join(BINNINGS)}, got {binning!r}")


@dataclass(frozen=True)
class CloneSuffix:
    """What a clone of the ADIEE release says about the reward suffix."""

    template: str  # with a {quality} field
    #: the release joins ``(instruction + suffix).replace("..", ".")``: an instruction ending in "." keeps one
    collapse_double_period: bool
    #: the suffix its editor test script prompts with (``None``: none found; then the top training suffix)
    inference_suffix: str | None = None


def _module_of(p: Path) -> Path:
    module = p if p.is_file() else next((p / m for m in CLONE_MODULES if (p / m).is_file()), None)
    if module is None:
        raise InputError(f"--suffix-from-clone {p}: no dataset module found (looked for "
                         f"{', '.join(CLONE_MODULES)})")
    return module


def _parse(module: Path) -> ast.AST:
    try:
        return ast.parse(module.read_text(encoding="utf-8"), filename=str(module))
    except (OSError, UnicodeDecodeError, SyntaxError) as exc:
        raise InputError(f"--suffix-from-clone {module}: cannot parse it as Python ({exc})") from None


def _string_lists(tree: ast.AST) -> dict[str, list[str]]:
    """``name`` or ``attr`` (of ``self.attr``) -> the list of string literals assigned to it."""
    out: dict[str, list[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.List) and all(
                isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.value.elts):
            for t in node.targets:
                name = t.id if isinstance(t, ast.Name) else t.attr if isinstance(t, ast.Attribute) else None
                if name:
                    out[name] = [str(e.value) for e in node.value.elts]  # type: ignore[attr-defined]
    return out


def _resolve(value: ast.expr, lists: dict[str, list[str]]) -> str | None:
    """The text of a formatted field that is a literal list's element (``self.score_list[-1]``), else ``None``."""
    if not isinstance(value, ast.Subscript):
        return None
    try:
        index = ast.literal_eval(value.slice)  # -1 is written as a unary minus on 1
    except (ValueError, TypeError, SyntaxError):
        return None
    base = value.value
    name = base.id if isinstance(base, ast.Name) else base.attr if isinstance(base, ast.Attribute) else None
    items = lists.get(name or "")
    if isinstance(index, int) and not isinstance(index, bool) and items is not None and -len(items) <= index < len(items):
        return items[index]
    return None


def _collapses_periods(tree: ast.AST) -> bool:
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "replace"
               and [a.value for a in n.args if isinstance(a, ast.Constant)] == ["..", "."]
               for n in ast.walk(tree))


def read_clone_suffix(path: str | Path) -> CloneSuffix:
    """The reward suffix of a clone of the ADIEE release (parsed, never run): the
    formatted string of its dataset module that mentions "out of", whose first
    field is the quality and whose other fields are elements of literal lists
    of the module (the release's ``{self.score_list[-1]}``, "five"); whether the
    module collapses ``..`` after joining (the release's ``.replace("..", ".")``);
    and the plain suffix its scripts prompt the tuned editor with ("... five out
    of five", in any ``.py`` file beside the module)."""
    p = Path(path).expanduser()
    module = _module_of(p)
    tree = _parse(module)
    lists = _string_lists(tree)
    found, unresolved = [], 0
    for node in ast.walk(tree):
        if not isinstance(node, ast.JoinedStr):
            continue
        consts = "".join(v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str))
        fields = [v for v in node.values if isinstance(v, ast.FormattedValue)]
        if "out of" not in consts or not fields:
            continue
        parts, ok = [], True
        for v in node.values:
            if isinstance(v, ast.Constant):
                parts.append(str(v.value))
            elif v is fields[0]:
                parts.append("{quality}")
            else:
                text = _resolve(v.value, lists)  # type: ignore[attr-defined]
                ok = ok and text is not None
                parts.append(text or "")
        if ok and "out of five" in "".join(parts):
            found.append("".join(parts))
        else:
            unresolved += 1
    if len(set(found)) != 1:
        raise InputError(f"--suffix-from-clone {module}: expected one formatted string with 'out of five' whose "
                         f"first field is the quality (other fields: elements of literal lists of the module), "
                         f"found {len(set(found))}" + (f" ({unresolved} with fields not read)" if unresolved else ""))
    inference = None
    folder = module.parent
    plain: set[str] = set()
    for f in sorted(folder.glob("*.py")):
        try:
            other = ast.parse(f.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, SyntaxError):
            continue
        for n in ast.walk(other):
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and "five out of five" in n.value \
                    and len(n.value) < 120:
                plain.add(n.value)
    if len(plain) == 1:
        inference = plain.pop()
    return CloneSuffix(found[0], _collapses_periods(tree), inference)


def clone_suffix(path: str | Path) -> str:
    """The reward suffix template of a clone of the ADIEE release (see :func:`read_clone_suffix`)."""
    return read_clone_suffix(path).template


@dataclass(frozen=True)
class QualityPrompt:
    """The suffix template, how scores become levels, and how levels are written."""

    template: str
    origin: str  # "editlens default", "file PATH" or "clone PATH"
    binning: str = "release"
    levels: str = "words"
    #: join as the release: ``(instruction + suffix).replace("..", ".")`` (else ``instruction.rstrip() + suffix``)
    collapse_double_period: bool = False
    #: the suffix the tuned editor is prompted with afterwards (the release's test script's); ``None``: the top one
    inference_suffix: str | None = None

    def __post_init__(self) -> None:
        if "{quality}" not in self.template:
            raise InputError(f"reward suffix template ({self.origin}) has no {{quality}} field: {self.template!r}")
        if self.binning not in BINNINGS:
            raise InputError(f"binning must be one of {', '.join(BINNINGS)}, got {self.binning!r}")
        if self.levels not in LEVEL_STYLES:
            raise InputError(f"levels must be one of {', '.join(LEVEL_STYLES)}, got {self.levels!r}")

    def level(self, score10: float) -> int:
        return quality_level(score10, self.binning)

    def suffix(self, level: int) -> str:
        return self.template.replace("{quality}", WORDS[level - 1] if self.levels == "words" else str(level))

    def join(self, instruction: str, suffix: str) -> str:
        if self.collapse_double_period:
            return (instruction + suffix).replace("..", ".")
        return instruction.rstrip() + suffix

    def prompt(self, instruction: str, score10: float) -> str:
        return self.join(instruction, self.suffix(self.level(score10)))

    def top_prompt(self, instruction: str) -> str:
        """The instruction with the top level's suffix (validation, as the release validates)."""
        return self.join(instruction, self.top_suffix)

    @property
    def top_suffix(self) -> str:
        return self.suffix(TOP_LEVEL)

    @property
    def editor_suffix(self) -> str:
        """What the tuned editor is prompted with afterwards: the release's test script's suffix when read."""
        return self.inference_suffix if self.inference_suffix is not None else self.top_suffix

    def describe(self) -> dict[str, Any]:
        return {"template": self.template, "origin": self.origin, "binning": self.binning, "levels": self.levels,
                "sha256": hashlib.sha256(self.template.encode()).hexdigest()[:16], "top_suffix": self.top_suffix,
                "join": "(instruction + suffix).replace('..', '.')" if self.collapse_double_period
                else "instruction.rstrip() + suffix", "editor_suffix": self.editor_suffix}


def load_quality_prompt(template_file: str | Path | None = None, clone: str | Path | None = None,
                        binning: str = "release", levels: str = "words") -> QualityPrompt:
    """Ours by default; ``template_file`` (a text file with ``{quality}``) or ``clone`` replaces it."""
    if template_file and clone:
        raise InputError("give either a suffix template file or a clone, not both")
    if clone:
        read = read_clone_suffix(clone)
        return QualityPrompt(read.template, f"clone {Path(clone).expanduser()}", binning, levels,
                             read.collapse_double_period, read.inference_suffix)
    path = Path(template_file).expanduser() if template_file else DEFAULT_TEMPLATE
    try:
        text = path.read_text(encoding="utf-8").rstrip("\n")
    except OSError as exc:
        raise InputError(f"reward suffix template {path}: {exc.strerror or exc}") from None
    return QualityPrompt(text, f"file {path}" if template_file else "editlens default", binning, levels)

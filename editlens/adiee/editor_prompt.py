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


def clone_suffix(path: str | Path) -> str:
    """The reward suffix of a clone of the ADIEE release, as a ``{quality}`` template: the
    formatted string of its dataset module that mentions "out of five" (parsed, never run)."""
    p = Path(path).expanduser()
    module = p if p.is_file() else next((p / m for m in CLONE_MODULES if (p / m).is_file()), None)
    if module is None:
        raise InputError(f"--suffix-from-clone {p}: no dataset module found (looked for "
                         f"{', '.join(CLONE_MODULES)})")
    try:
        tree = ast.parse(module.read_text(encoding="utf-8"), filename=str(module))
    except (OSError, UnicodeDecodeError, SyntaxError) as exc:
        raise InputError(f"--suffix-from-clone {module}: cannot parse it as Python ({exc})") from None
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.JoinedStr):
            continue
        consts = [v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str)]
        fields = [v for v in node.values if isinstance(v, ast.FormattedValue)]
        if "out of five" in "".join(consts) and len(fields) == 1:
            found.append("".join(str(v.value) if isinstance(v, ast.Constant) else "{quality}" for v in node.values))
    if len(set(found)) != 1:
        raise InputError(f"--suffix-from-clone {module}: expected one formatted string with 'out of five' and "
                         f"one field, found {len(set(found))}")
    return found[0]


@dataclass(frozen=True)
class QualityPrompt:
    """The suffix template, how scores become levels, and how levels are written."""

    template: str
    origin: str  # "editlens default", "file PATH" or "clone PATH"
    binning: str = "release"
    levels: str = "words"

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

    def prompt(self, instruction: str, score10: float) -> str:
        return instruction.rstrip() + self.suffix(self.level(score10))

    @property
    def top_suffix(self) -> str:
        return self.suffix(TOP_LEVEL)

    def describe(self) -> dict[str, Any]:
        return {"template": self.template, "origin": self.origin, "binning": self.binning, "levels": self.levels,
                "sha256": hashlib.sha256(self.template.encode()).hexdigest()[:16], "top_suffix": self.top_suffix}


def load_quality_prompt(template_file: str | Path | None = None, clone: str | Path | None = None,
                        binning: str = "release", levels: str = "words") -> QualityPrompt:
    """Ours by default; ``template_file`` (a text file with ``{quality}``) or ``clone`` replaces it."""
    if template_file and clone:
        raise InputError("give either a suffix template file or a clone, not both")
    if clone:
        return QualityPrompt(clone_suffix(clone), f"clone {Path(clone).expanduser()}", binning, levels)
    path = Path(template_file).expanduser() if template_file else DEFAULT_TEMPLATE
    try:
        text = path.read_text(encoding="utf-8").rstrip("\n")
    except OSError as exc:
        raise InputError(f"reward suffix template {path}: {exc.strerror or exc}") from None
    return QualityPrompt(text, f"file {path}" if template_file else "editlens default", binning, levels)

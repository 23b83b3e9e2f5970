"""Prompt sets for the released-style DICE models: the detector prompt, and
the coherence system and user prompts.

editlens ships its own wording (``editlens/templates/dice_released_*.txt``).
The official prompts belong to the DICE authors and are not shipped: with
``--dice-prompts PATH`` they are read from a user's local clone of the
original repository by *parsing* its prompts module (``ast``; nothing of it is
imported or run).
"""

from __future__ import annotations

import hashlib
import re
import string
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from editlens.errors import InputError
from editlens.templates.clones import find_module, module_strings

#: where the prompts module sits inside a clone of the original repository
MODULE_PATHS = ("editing-evaluation/editing_evaluation/prompts/prompts.py", "editing_evaluation/prompts/prompts.py",
                "prompts/prompts.py", "prompts.py")
#: module-level names read from it: role -> variable
OFFICIAL_NAMES = {"detect": "PRETRAIN_PROMPT_NOCHANGE", "coherence_system": "PROMPT_DIFFERENCE_COHERENCE_SYSTEM",
                  "coherence_user": "PROMPT_DIFFERENCE_COHERENCE"}
_BRACED = re.compile(r"\{(\w+)\}")


@dataclass(frozen=True)
class PromptSet:
    """``coherence_user`` is a :class:`string.Template` text with ``$instruction`` and ``$change``."""

    detect: str
    coherence_system: str
    coherence_user: str
    source: str

    def coherence_text(self, instruction: str, change: str) -> str:
        return string.Template(self.coherence_user).substitute(instruction=instruction, change=change)

    @property
    def sha256(self) -> str:
        blob = "\0".join((self.detect, self.coherence_system, self.coherence_user))
        return hashlib.sha256(blob.encode()).hexdigest()

    def describe(self) -> dict[str, str]:
        return {"source": self.source, "sha256": self.sha256}


def default_prompts() -> PromptSet:
    """editlens' own wording, with the structure of the released prompts."""
    root = resources.files("editlens.templates")
    read = lambda n: root.joinpath(f"dice_released_{n}.txt").read_text(encoding="utf-8").strip()  # noqa: E731
    return PromptSet(read("detect"), read("coherence_system"), read("coherence_user"), "editlens (own wording)")


def find_prompts_module(path: str | Path) -> Path:
    return find_module(path, MODULE_PATHS, "--dice-prompts", "the DICE repository")


def _module_strings(path: Path) -> dict[str, str]:
    return module_strings(path, "--dice-prompts")


def _user_template(text: str, path: Path, name: str) -> str:
    """Turn the official ``{..PROMPT..}`` / ``{..CHANGE..}`` placeholders into ``$instruction`` / ``$change``."""
    fields = _BRACED.findall(text)
    prompt = [f for f in fields if "PROMPT" in f.upper()]
    change = [f for f in fields if "CHANGE" in f.upper()]
    if not prompt or not change:
        raise InputError(f"--dice-prompts {path}: {name} has no {{...PROMPT...}} and {{...CHANGE...}} placeholders "
                         f"(found {fields or 'none'})")
    out = text.replace("$", "$$")
    out = out.replace("{" + prompt[0] + "}", "$instruction").replace("{" + change[0] + "}", "$change")
    return out


def load_official_prompts(path: str | Path, names: dict[str, str] | None = None) -> PromptSet:
    """Read the prompts from a local clone of the original DICE repository
    (or the prompts file itself), by parsing the module without importing it."""
    names = {**OFFICIAL_NAMES, **(names or {})}
    module = find_prompts_module(path)
    found = _module_strings(module)
    missing = [v for v in names.values() if v not in found]
    if missing:
        raise InputError(f"--dice-prompts {module}: looked for the string assignments {', '.join(names.values())}; "
                         f"missing: {', '.join(missing)}")
    user = _user_template(found[names["coherence_user"]], module, names["coherence_user"])
    # verbatim: the released models were run on these strings with their leading/trailing newlines and spaces
    return PromptSet(found[names["detect"]], found[names["coherence_system"]], user,
                     f"official prompts parsed from {module}")

"""A benchmark's judge prompts: the official wording read from the user's
clone of the owner's repository, or editlens' own wording (template files we
wrote) as a marked fallback. Whichever is used is recorded with its hash in
the run manifest and the results."""

from __future__ import annotations

import hashlib
import json
import string
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from editlens.core import io as core_io
from editlens.errors import InputError

FALLBACK = "editlens fallback wording (not the benchmark's official prompts: numbers are not comparable to the paper's)"


@dataclass(frozen=True)
class PromptSet:
    texts: Mapping[str, str]
    from_clone: bool
    source: str  # the clone's file(s), or FALLBACK
    files: Mapping[str, str] = field(default_factory=dict)

    @property
    def sha256(self) -> str:
        blob = json.dumps(dict(self.texts), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()

    def describe(self) -> dict[str, Any]:
        return {"from_clone": self.from_clone, "source": self.source, "sha256": self.sha256,
                "per_prompt_sha256": {k: hashlib.sha256(v.encode()).hexdigest() for k, v in sorted(self.texts.items())}}

    def fill(self, name: str, **values: str) -> str:
        """Prompt ``name`` with its placeholders filled: the owner's ``<name>`` /
        ``{name}`` convention for clone texts (the adapter passes them), ``$name``
        for editlens' templates."""
        if name not in self.texts:
            raise InputError(f"prompt {name!r} is not in {self.source}")
        text = self.texts[name]
        if self.from_clone:
            return text
        return string.Template(text).safe_substitute(**values)


def load_prompts(bench: Any, clone: str | Path | None) -> PromptSet:
    """The prompts ``bench`` needs: from ``clone`` when given (an error names
    what is missing), else the fallback templates."""
    if clone is not None:
        p = Path(clone).expanduser()
        if not p.exists():
            raise InputError(f"--prompts-from {p}: no such file or directory (expected a clone of "
                             f"{bench.spec.homepage}; its prompts live in {bench.spec.prompts_in_clone})")
        texts = bench.clone_prompts(p)
        missing = [n for n in bench.prompt_names() if n not in texts]
        if missing:
            raise InputError(f"--prompts-from {p}: prompts {missing} not found (looked in {bench.spec.prompts_in_clone})")
        return PromptSet(texts, True, str(p))
    return PromptSet(bench.fallback_prompts(), False, FALLBACK)


def read_json(path: Path, option: str = "--prompts-from") -> Any:
    """The JSON in ``path``, given by ``option`` (named in the error)."""
    return core_io.read_json(path, what=f"given by {option}")

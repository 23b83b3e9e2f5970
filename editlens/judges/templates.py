"""Prompt templates: plain text files, replaceable by the user.

A template is text with ``$name`` placeholders (``$instruction``,
``$source_caption``...) and image markers on their own lines
(``<<source>>``, ``<<edited>>``, ``<<edited_a>>``...). Lookup order for a
template ``NAME``: an explicit override path, then ``$EDITLENS_TEMPLATE_DIR/NAME.txt``,
then the file shipped in ``editlens/templates``.
"""

from __future__ import annotations

import hashlib
import os
import re
import string
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Mapping

import numpy as np

from editlens.errors import InputError

_MARK = re.compile(r"^\s*<<(\w+)>>\s*$", re.M)


@dataclass(frozen=True)
class Template:
    name: str
    text: str
    source: str

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()

    def render(self, images: Mapping[str, np.ndarray], **values: str) -> list:
        """Message parts: text and images in template order."""
        try:
            text = string.Template(self.text).substitute(**values)
        except KeyError as exc:
            raise InputError(f"template {self.name} ({self.source}) needs ${exc.args[0]}") from None
        parts: list = []
        pos = 0
        for m in _MARK.finditer(text):
            chunk = text[pos : m.start()].strip()
            if chunk:
                parts.append(chunk)
            if m.group(1) not in images:
                raise InputError(f"template {self.name} ({self.source}) places image <<{m.group(1)}>>, "
                                 f"which this judge does not have (it has {sorted(images)})")
            parts.append(images[m.group(1)])
            pos = m.end()
        tail = text[pos:].strip()
        if tail:
            parts.append(tail)
        return parts


def load_template(name: str, overrides: Mapping[str, str] | None = None) -> Template:
    overrides = overrides or {}
    if name in overrides:
        p = Path(overrides[name]).expanduser()
        if not p.is_file():
            raise InputError(f"template override for {name!r}: {p} not found")
        return Template(name, p.read_text(encoding="utf-8"), str(p))
    env = os.environ.get("EDITLENS_TEMPLATE_DIR")
    if env and (Path(env) / f"{name}.txt").is_file():
        p = Path(env) / f"{name}.txt"
        return Template(name, p.read_text(encoding="utf-8"), str(p))
    res = resources.files("editlens.templates").joinpath(f"{name}.txt")
    if not res.is_file():
        raise InputError(f"no template named {name!r}")
    return Template(name, res.read_text(encoding="utf-8"), f"editlens/templates/{name}.txt")

"""What an editor is and needs, as data: :class:`EditorSpec`, and the
per-family generation defaults of diffusers editors (:class:`EditorFamily`,
read from the JSON files in ``editlens/editors/presets/``).

Kept apart from the registry so plugins can import the type without loading
the registry.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from editlens.core.io import read_json
from editlens.core.registry import load_target
from editlens.errors import InputError

if TYPE_CHECKING:
    from editlens.editors.base import Editor

#: How an editor produces images: the built-in kinds (a plugin may register more,
#: see :func:`editlens.editors.registry.kinds`).
KINDS = ("diffusers", "endpoint", "callable", "command")
_KIND_NAME = re.compile(r"^[a-z][a-z0-9_-]*$")
#: Inputs an editor can take from an edit (every editor needs ``source`` and ``instruction``).
EDITOR_INPUTS = ("source", "instruction", "mask", "reference")
PRESETS = Path(__file__).resolve().parent / "presets"


@dataclass(frozen=True)
class EditorSpec:
    """One registered editor.

    Attributes:
        name: registry name (``[a-z0-9-]``); ``editlens edit --editor NAME``.
        kind: one of :data:`KINDS`, or a kind a plugin registered
            (:func:`editlens.editors.registry.kinds`).
        target: ``"module:Class"`` of the :class:`~editlens.editors.base.Editor`
            subclass (or the class itself), or of a function returning an
            ``Editor`` (called with the options).
        needs: edit inputs it reads (:data:`EDITOR_INPUTS`).
        description: one line for ``editlens editors``.
        defaults: options passed to the class unless the caller overrides them
            (for a named diffusers editor: ``weights``, the hub id).
        family: the diffusers family (:func:`family`) when the editor is one.
        value_option: for a kind (an editor whose ``name`` is its ``kind``):
            the option the value of an ``--editor KIND:VALUE`` string sets
            (``"weights"`` for ``diffusers``). A spec with its own name as
            ``kind`` and a ``value_option`` is how a plugin adds a kind.
    """

    name: str
    kind: str
    target: Any
    needs: tuple[str, ...] = ("source", "instruction")
    description: str = ""
    defaults: dict[str, Any] = field(default_factory=dict)
    family: str | None = None
    value_option: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.kind, str) or not _KIND_NAME.match(self.kind):
            raise ValueError(f"editor {self.name!r}: kind must be a lower-case name (one of {KINDS} or a "
                             f"plugin's kind), got {self.kind!r}")
        if self.kind == self.name and self.kind not in KINDS and not self.value_option:
            raise ValueError(f"editor kind {self.name!r}: a new kind needs value_option (the option "
                             f"'{self.name}:VALUE' sets)")
        unknown = set(self.needs) - set(EDITOR_INPUTS)
        if unknown:
            raise ValueError(f"editor {self.name!r}: unknown inputs {sorted(unknown)}")

    def load_class(self) -> Callable[..., Editor]:
        """The Editor subclass (or factory) ``target`` names, imported now."""
        return load_target(self.target, f"editor {self.name!r}")

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "needs": list(self.needs), "description": self.description,
                "defaults": dict(self.defaults), "family": self.family}


@dataclass(frozen=True)
class EditorFamily:
    """Generation defaults of one family of diffusers editing pipelines (a preset file).

    Attributes:
        family: its name (the preset file's stem).
        pipeline_classes: diffusers pipeline classes of the family, as
            ``model_index.json``'s ``_class_name`` names them (the first is
            the one a folder of the family is loaded with).
        settings: generation settings (``steps``, ``guidance``,
            ``image_guidance``, ``true_cfg``, ``resolution``, ...).
        call: setting -> the pipeline's ``__call__`` argument it goes to;
            ``height``/``width`` map the generated size where the pipeline takes one.
        size_multiple: the generated sides are multiples of this.
        dtype: device kind -> the dtype the weights are published in (the
            precision policy's ``preferred``).
        batch_size: default edits per pipeline call.
        example_weights: hub ids of real weights, for docs and messages.
    """

    family: str
    description: str
    pipeline_classes: tuple[str, ...]
    settings: dict[str, Any]
    call: dict[str, str]
    size_multiple: int = 8
    dtype: dict[str, str] = field(default_factory=dict)
    batch_size: int = 1
    example_weights: tuple[str, ...] = ()


@functools.cache
def families() -> dict[str, EditorFamily]:
    """Every family preset, by name."""
    out = {}
    for path in sorted(PRESETS.glob("*.json")):
        data = read_json(path, "editor family preset")
        out[data["family"]] = EditorFamily(
            family=data["family"], description=data.get("description", ""),
            pipeline_classes=tuple(data.get("pipeline_classes", ())), settings=dict(data.get("settings", {})),
            call=dict(data.get("call", {})), size_multiple=int(data.get("size_multiple", 8)),
            dtype=dict(data.get("dtype", {})), batch_size=int(data.get("batch_size", 1)),
            example_weights=tuple(data.get("example_weights", ())))
    return out


def family(name: str) -> EditorFamily:
    """The family preset ``name`` (``instruct-pix2pix``, ``flux-kontext``...)."""
    key = name.strip().lower().replace("_", "-")
    table = families()
    if key not in table:
        raise InputError(f"unknown editor family {name!r}; one of {', '.join(sorted(table))}")
    return table[key]


def family_of_class(class_name: str) -> str | None:
    """The family whose preset lists this pipeline class (``None``: no preset does).

    >>> family_of_class("StableDiffusionInstructPix2PixPipeline")
    'instruct-pix2pix'
    """
    for fam in families().values():
        if class_name in fam.pipeline_classes:
            return fam.family
    return None

"""``editlens.json``: the file by which a folder editlens wrote says what it holds.

Every exporter (an ADIEE scorer in either layout, a two-frame model, a tuned
editor) writes one beside its weights, as diffusers' ``model_index.json``
names a pipeline's class::

    {"kind": "adiee", "class": "editlens.adiee.model:AdieeScorer",
     "editlens_version": "0.1.0", "format": "released"}

``kind`` is a model kind of :data:`editlens.models.registry.KINDS` (what
:func:`editlens.models.loader.load_model` loads it as), ``class`` what it
loads into, ``editlens_version`` the version that wrote it; the exporter may
add its own keys (``format``). :func:`editlens.models.loader.infer_kind` reads
it first; folders saved before it existed are still told by their older
markers (``adiee.json``, ``twoframe.json``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from editlens.errors import InputError

DESCRIPTION_FILE = "editlens.json"


def describe(kind: str, cls: str, **extra: Any) -> dict[str, Any]:
    """The description of a folder holding a ``kind`` model loading into ``cls`` (``module:Class``)."""
    from editlens import __version__
    from editlens.models.registry import KINDS

    if kind not in KINDS:  # an exporter's mistake: never write what no editlens can read back
        raise ValueError(f"unknown model kind {kind!r}; known: {', '.join(sorted(KINDS))}")
    return {"kind": kind, "class": cls, "editlens_version": __version__, **extra}


def write_description(folder: str | os.PathLike, kind: str, cls: str, **extra: Any) -> Path:
    """Write ``folder/editlens.json`` (atomically) and return its path."""
    from editlens.core.io import write_json

    return write_json(Path(folder) / DESCRIPTION_FILE, describe(kind, cls, **extra))


def read_description(folder: str | os.PathLike) -> dict[str, Any] | None:
    """The description in ``folder/editlens.json``, ``None`` when the folder has none.

    A file that is not a JSON object with a known ``kind`` is an :class:`InputError` naming it."""
    from editlens.core.io import read_json
    from editlens.models.registry import KINDS

    path = Path(folder) / DESCRIPTION_FILE
    if not path.exists():
        return None
    doc = read_json(path, "what the folder holds")
    if not isinstance(doc, dict):
        raise InputError(f"{path}: expected a JSON object naming the folder's kind, got {type(doc).__name__}")
    kind = doc.get("kind")
    if not isinstance(kind, str) or not kind:
        raise InputError(f"{path}: no 'kind' (what the folder holds, e.g. adiee or twoframe)")
    if kind not in KINDS:
        version = doc.get("editlens_version")
        raise InputError(f"{path}: unknown kind {kind!r} (known: {', '.join(sorted(KINDS))})"
                         + (f"; written by editlens {version}" if version else "")
                         + "; upgrade editlens, or pass kind=")
    return doc

"""Editors: models that make the edits editlens judges.

An editor turns (source image, instruction, seed) into an edited image. The
kinds (:mod:`editlens.editors.spec`): a diffusers pipeline (folder or hub id;
per-family defaults in ``presets/``), an OpenAI-compatible image-edit
endpoint, a Python callable and an external command. The registry
(:func:`create_editor`, :func:`list_editors`, entry-point group
``editlens.editors``) turns an ``--editor`` spec string into one;
:func:`editlens.runner.edit.generate_edits` runs one over a manifest.
"""

from editlens.editors.base import Editor, EditOutput, EditRequest
from editlens.editors.registry import (
           create_editor,
           list_editors,
           register_editor,
           resolve_spec,
)
from editlens.editors.spec import EditorFamily, EditorSpec, families, family

__all__ = ["EditOutput", "EditRequest", "Editor", "EditorFamily", "EditorSpec", "create_editor", "families",
           "family", "list_editors", "register_editor", "resolve_spec"]

"""The editor registry: a spec string -> an :class:`~editlens.editors.base.Editor`.

Built-in editors are data (``catalog.json``: the four kinds and named
diffusers editors with their hub weights). Third-party packages add editors
through the ``editlens.editors`` entry-point group; each entry point names an
:class:`EditorSpec` or an ``Editor`` subclass with a ``spec`` attribute.

A spec string (``editlens edit --editor SPEC``) is, in order:

* ``KIND:VALUE`` with a kind of :func:`kinds`: the built-in
  :data:`~editlens.editors.spec.KINDS` (``diffusers:DIR``, ``endpoint:URL``,
  ``callable:module:function``, ``command:PROG ARGS...``) or one a plugin
  registers (an ``EditorSpec`` whose name is its kind, with a ``value_option``);
* a registered name (``instruct-pix2pix``, ``magicbrush``, a plugin's);
* ``http://...`` or ``https://...``: an endpoint;
* an existing folder: a diffusers pipeline;
* ``module:function``: a callable;
* ``owner/name``: a diffusers pipeline on the hub.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any

from editlens.core.registry import Registry
from editlens.editors.base import Editor
from editlens.editors.spec import EditorSpec
from editlens.errors import InputError

CATALOG = Path(__file__).resolve().parent / "catalog.json"
#: the option each built-in kind's spec-string value goes to (a plugin kind declares its own ``value_option``)
VALUE_OPTION = {"diffusers": "weights", "endpoint": "url", "callable": "function", "command": "command"}
#: options `editlens edit` passes to every editor; a kind without them ignores them
RUNTIME_OPTIONS = ("device", "dtype", "cpu_offload", "attention_slicing")
_CALLABLE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
_HUB_ID = re.compile(r"^[\w.-]+/[\w.-]+$")


def _builtins() -> list[tuple[str, EditorSpec]]:
    out = []
    for row in json.loads(CATALOG.read_text(encoding="utf-8"))["editors"]:
        spec = EditorSpec(name=row["name"], kind=row["kind"], target=row["target"],
                          description=row.get("description", ""), defaults=dict(row.get("defaults", {})),
                          family=row.get("family"),
                          value_option=VALUE_OPTION.get(row["name"]) if row["name"] == row["kind"] else None)
        out.append((spec.name, spec))
    return out


def _check_kind(spec: EditorSpec) -> None:
    if spec.kind != spec.name and spec.kind not in kinds():
        raise ValueError(f"editor {spec.name!r}: unknown kind {spec.kind!r}; known: {', '.join(sorted(kinds()))} "
                         "(a plugin kind is an EditorSpec whose name is its kind, with a value_option)")


def _plugin_spec(obj: Any, ep: EntryPoint) -> tuple[str, EditorSpec]:
    spec = obj if isinstance(obj, EditorSpec) else getattr(obj, "spec", None)
    if not isinstance(spec, EditorSpec):
        raise TypeError(f"it provides no EditorSpec ({ep.value})")
    if isinstance(obj, type):
        spec = replace(spec, target=obj)
    _check_kind(spec)
    return spec.name, spec


#: every editor and editor kind, built-in (``catalog.json``) and plugin (the
#: ``editlens.editors`` entry-point group); the shared policy of :mod:`editlens.core.registry`
EDITORS: Registry[EditorSpec] = Registry(
    "editor", group="editlens.editors", builtins=_builtins, from_plugin=_plugin_spec, error=InputError,
    hint="Run `editlens editors` to list them.")


def register_editor(spec: EditorSpec, *, overwrite: bool = False) -> EditorSpec:
    """Add an editor to the registry (a built-in one cannot be replaced).

    An editor whose ``kind`` is its own name and which declares a
    ``value_option`` is a new kind: ``--editor KIND:VALUE`` then builds it
    with ``VALUE`` as that option.
    """
    EDITORS.ensure_loaded()
    _check_kind(spec)
    return EDITORS.register(spec.name, spec, overwrite=overwrite)


def kinds() -> dict[str, EditorSpec]:
    """Each kind (the built-in :data:`~editlens.editors.spec.KINDS` and those plugins add) -> its spec.

    >>> sorted(kinds())
    ['callable', 'command', 'diffusers', 'endpoint']
    """
    return {name: spec for name, spec in EDITORS.items() if spec.kind == name and spec.value_option}


def list_editors() -> list[EditorSpec]:
    """Every registered editor, sorted by name.

    >>> {"diffusers", "endpoint", "callable", "command", "instruct-pix2pix"} <= {s.name for s in list_editors()}
    True
    """
    return [spec for _, spec in sorted(EDITORS.items())]


def get_editor_spec(name: str) -> EditorSpec:
    return EDITORS.get(name)


def resolve_spec(spec_string: str) -> tuple[EditorSpec, dict[str, Any]]:
    """The registered spec a spec string means, and the options its value sets.

    >>> resolve_spec("callable:my_pkg.edits:flip")[1]
    {'function': 'my_pkg.edits:flip'}
    >>> resolve_spec("https://example.org/v1")[0].kind
    'endpoint'
    """
    text = str(spec_string).strip()
    if not text:
        raise InputError("--editor is empty; give a pipeline folder, a hub id, an endpoint URL, module:function, "
                         "command:... or a name from `editlens editors`")
    kind, sep, value = text.partition(":")
    by_kind = kinds()
    if sep and kind in by_kind and not text.startswith(("http://", "https://")):
        if not value.strip():
            raise InputError(f"--editor {text!r}: nothing after '{kind}:'")
        spec = by_kind[kind]
        return spec, {str(spec.value_option): value.strip()}
    if text in EDITORS:
        return EDITORS.get(text), {}
    if text.startswith(("http://", "https://")):
        return EDITORS.get("endpoint"), {"url": text}
    if Path(text).expanduser().is_dir():
        return EDITORS.get("diffusers"), {"weights": text}
    if _CALLABLE.match(text):
        return EDITORS.get("callable"), {"function": text}
    if _HUB_ID.match(text) and not text.startswith((".", "~", "/")):
        return EDITORS.get("diffusers"), {"weights": text}
    close = EDITORS.suggest(text)
    hint = f" Did you mean {', '.join(close)}?" if close else ""
    looks_like_path = "/" in text or text.startswith((".", "~"))
    raise InputError(
        f"--editor {text!r}: " + (f"no such folder ({Path(text).expanduser()})." if looks_like_path else
                                   "not a registered editor.") + hint +
        " An editor is a diffusers pipeline folder or hub id (owner/name), an endpoint URL (http://HOST/v1), "
        "module:function, command:PROGRAM ARGS, or a name from `editlens editors`.")


def create_editor(spec_string: str, **options: Any) -> Editor:
    """Build the editor a spec string names; ``options`` override the spec's defaults.

    >>> ed = create_editor("callable:editlens.editors.callable_editor:identity_edit")
    >>> ed.name, ed.spec.kind
    ('identity_edit', 'callable')
    """
    spec, from_string = resolve_spec(spec_string)
    merged = {**spec.defaults, **from_string, **{k: v for k, v in options.items() if v is not None}}
    if spec.family and "family" not in options:
        merged.setdefault("family", spec.family)
    factory = spec.load_class()  # an Editor subclass, or a function returning an Editor
    import inspect

    params = inspect.signature(factory).parameters
    # run-wide options (--device, --cpu-offload...) reach the kinds that name them only
    merged = {k: v for k, v in merged.items() if k in params or k not in RUNTIME_OPTIONS}
    try:
        inspect.signature(factory).bind(**merged)
    except TypeError as exc:
        raise InputError(f"editor {spec_string!r} ({spec.kind}): {exc}") from None
    editor = factory(**merged)
    if not isinstance(editor, Editor):
        raise InputError(f"editor {spec_string!r} ({spec.kind}): {spec.target!r} gave a {type(editor).__name__}, "
                         "not an editlens Editor")
    editor.spec = spec
    return editor

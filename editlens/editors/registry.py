"""The editor registry: a spec string -> an :class:`~editlens.editors.base.Editor`.

Built-in editors are data (``catalog.json``: the four kinds and named
diffusers editors with their hub weights). Third-party packages add editors
through the ``editlens.editors`` entry-point group; each entry point names an
:class:`EditorSpec` or an ``Editor`` subclass with a ``spec`` attribute.

A spec string (``editlens edit --editor SPEC``) is, in order:

* ``KIND:VALUE`` with a kind of :data:`~editlens.editors.spec.KINDS`
  (``diffusers:DIR``, ``endpoint:URL``, ``callable:module:function``,
  ``command:PROG ARGS...``);
* a registered name (``instruct-pix2pix``, ``magicbrush``, a plugin's);
* ``http://...`` or ``https://...``: an endpoint;
* an existing folder: a diffusers pipeline;
* ``module:function``: a callable;
* ``owner/name``: a diffusers pipeline on the hub.
"""

from __future__ import annotations

import json
import re
import threading
import warnings
from dataclasses import replace
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from editlens.editors.base import Editor
from editlens.editors.spec import KINDS, EditorSpec
from editlens.errors import InputError

CATALOG = Path(__file__).resolve().parent / "catalog.json"
#: the option each kind's spec-string value goes to
VALUE_OPTION = {"diffusers": "weights", "endpoint": "url", "callable": "function", "command": "command"}
#: options `editlens edit` passes to every editor; a kind without them ignores them
RUNTIME_OPTIONS = ("device", "dtype", "cpu_offload", "attention_slicing")
_CALLABLE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
_HUB_ID = re.compile(r"^[\w.-]+/[\w.-]+$")

_REGISTRY: dict[str, EditorSpec] = {}
_BUILTIN: set[str] = set()
_LOCK = threading.RLock()
_LOADED = False


def _load() -> None:
    global _LOADED
    if _LOADED:
        return
    with _LOCK:
        if _LOADED:
            return
        for row in json.loads(CATALOG.read_text(encoding="utf-8"))["editors"]:
            spec = EditorSpec(name=row["name"], kind=row["kind"], target=row["target"],
                              description=row.get("description", ""), defaults=dict(row.get("defaults", {})),
                              family=row.get("family"))
            _REGISTRY[spec.name] = spec
            _BUILTIN.add(spec.name)
        for ep in entry_points(group="editlens.editors"):
            try:
                obj = ep.load()
                found = obj if isinstance(obj, EditorSpec) else getattr(obj, "spec", None)
                if not isinstance(found, EditorSpec):
                    raise TypeError(f"it provides no EditorSpec ({ep.value})")
                spec = found
                if isinstance(obj, type):
                    spec = replace(spec, target=obj)
            except Exception as exc:  # a broken plugin must not take the others down
                warnings.warn(f"editlens editor plugin {ep.name!r} could not be loaded and is left out: "
                              f"{type(exc).__name__}: {exc}", RuntimeWarning, stacklevel=2)
                continue
            if spec.name in _REGISTRY:
                warnings.warn(f"editlens editor plugin {ep.name!r} registers {spec.name!r}, which already exists; "
                              "the plugin is left out (rename its editor)", RuntimeWarning, stacklevel=2)
                continue
            _REGISTRY[spec.name] = spec
        _LOADED = True


def register_editor(spec: EditorSpec, *, overwrite: bool = False) -> EditorSpec:
    """Add an editor to the registry (a built-in one cannot be replaced)."""
    _load()
    with _LOCK:
        if spec.name in _REGISTRY and (spec.name in _BUILTIN or not overwrite):
            raise ValueError(f"editor {spec.name!r} is already registered" +
                             (" (built in)" if spec.name in _BUILTIN else ""))
        _REGISTRY[spec.name] = spec
    return spec


def list_editors() -> list[EditorSpec]:
    """Every registered editor, sorted by name.

    >>> {"diffusers", "endpoint", "callable", "command", "instruct-pix2pix"} <= {s.name for s in list_editors()}
    True
    """
    _load()
    return [_REGISTRY[k] for k in sorted(_REGISTRY)]


def get_editor_spec(name: str) -> EditorSpec:
    _load()
    return _REGISTRY[name]


def resolve_spec(spec_string: str) -> tuple[EditorSpec, dict[str, Any]]:
    """The registered spec a spec string means, and the options its value sets.

    >>> resolve_spec("callable:my_pkg.edits:flip")[1]
    {'function': 'my_pkg.edits:flip'}
    >>> resolve_spec("https://example.org/v1")[0].kind
    'endpoint'
    """
    _load()
    text = str(spec_string).strip()
    if not text:
        raise InputError("--editor is empty; give a pipeline folder, a hub id, an endpoint URL, module:function, "
                         "command:... or a name from `editlens editors`")
    kind, sep, value = text.partition(":")
    if sep and kind in KINDS and not text.startswith(("http://", "https://")):
        if not value.strip():
            raise InputError(f"--editor {text!r}: nothing after '{kind}:'")
        return _REGISTRY[kind], {VALUE_OPTION[kind]: value.strip()}
    if text in _REGISTRY:
        return _REGISTRY[text], {}
    if text.startswith(("http://", "https://")):
        return _REGISTRY["endpoint"], {"url": text}
    if Path(text).expanduser().is_dir():
        return _REGISTRY["diffusers"], {"weights": text}
    if _CALLABLE.match(text):
        return _REGISTRY["callable"], {"function": text}
    if _HUB_ID.match(text) and not text.startswith((".", "~", "/")):
        return _REGISTRY["diffusers"], {"weights": text}
    import difflib

    close = difflib.get_close_matches(text, _REGISTRY, n=3)
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
    cls = spec.load_class()
    import inspect

    params = inspect.signature(cls.__init__).parameters
    # run-wide options (--device, --cpu-offload...) reach the kinds that name them only
    merged = {k: v for k, v in merged.items() if k in params or k not in RUNTIME_OPTIONS}
    try:
        inspect.signature(cls).bind(**merged)
    except TypeError as exc:
        raise InputError(f"editor {spec_string!r} ({spec.kind}): {exc}") from None
    editor = cls(**merged)
    editor.spec = spec
    return editor

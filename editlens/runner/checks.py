"""Checks of what the user asked for, run before any model loads, so a typo
costs a one-line error that lists the valid names instead of a traceback
after a minute of loading (or, worse, being silently ignored)."""

from __future__ import annotations

import inspect
import re
import string
from importlib import resources
from pathlib import Path
from typing import Any, Mapping

from editlens.errors import InputError, UnknownMetricError

_MARK = re.compile(r"^\s*<<(\w+)>>\s*$", re.M)


def option_names(spec: Any) -> set[str] | None:
    """Keyword options a metric's class accepts (``None``: it takes any). A class that declares
    ``kwargs_go_to_base = True`` (its ``**kwargs`` are its base class's options, e.g. the pairwise
    judge's) accepts its own names and its bases', followed up the MRO."""
    names: set[str] = set()
    for cls in spec.load_class().__mro__:
        init = cls.__dict__.get("__init__")
        if init is None:
            continue
        if cls is object:
            return None
        params = inspect.signature(init).parameters.values()
        names |= {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "self"}
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            return names
        if not cls.__dict__.get("kwargs_go_to_base", False):
            return None  # forwards what it is given elsewhere: its callee decides
    return None


def check_options(options: Mapping[str, Mapping[str, Any]]) -> None:
    """Every ``--option METRIC.KEY=VALUE`` names a known metric and one of its options.

    >>> check_options({"l1": {"region": "outside"}})
    >>> check_options({"l1": {"regoin": "outside"}})
    Traceback (most recent call last):
    ...
    editlens.errors.InputError: --option l1.regoin: l1 has no option 'regoin'; its options are: compare, region
    """
    from editlens.metrics.registry import get_spec, list_metrics

    for metric, opts in options.items():
        try:
            spec = get_spec(metric)
        except UnknownMetricError:
            known = ", ".join(s.name for s in list_metrics())
            key = next(iter(opts), "KEY")
            raise UnknownMetricError(f"--option {metric}.{key}: unknown metric {metric!r}; known metrics: {known}") \
                from None
        valid = option_names(spec)
        if valid is None:
            continue
        for key in opts:
            if key not in valid:
                listed = ", ".join(sorted(valid)) if valid else "(none)"
                raise InputError(f"--option {metric}.{key}: {spec.name} has no option {key!r}; "
                                 f"its options are: {listed}")


def template_names() -> list[str]:
    return sorted(p.name[: -len(".txt")] for p in resources.files("editlens.templates").iterdir()
                  if p.name.endswith(".txt"))


def supplied(name: str) -> tuple[set[str], set[str]]:
    """The ``$values`` and ``<<images>>`` the caller of template ``name`` fills
    in, as declared in ``editlens/templates/templates.json`` (a caller may
    supply more than its shipped wording uses: the perceptual-quality judge
    has the instruction and the source at hand); a template it does not list
    supplies what its shipped text uses."""
    import json

    declared = json.loads(resources.files("editlens.templates").joinpath("templates.json").read_text(encoding="utf-8"))
    shipped = resources.files("editlens.templates").joinpath(f"{name}.txt").read_text(encoding="utf-8")
    entry = declared.get(name, {})
    return (_placeholders(shipped) | set(entry.get("values", ())), set(_MARK.findall(shipped)) | set(entry.get("images", ())))


def _placeholders(text: str) -> set[str]:
    return {m.group("named") or m.group("braced") for m in string.Template.pattern.finditer(text)
            if m.group("named") or m.group("braced")}


def check_templates(overrides: Mapping[str, str] | None) -> None:
    """Every ``--template NAME=FILE`` names a known template and a readable
    file whose ``$placeholders`` and ``<<image>>`` markers the judge can fill."""
    for name, path in (overrides or {}).items():
        known = template_names()
        if name not in known:
            raise InputError(f"--template {name}={path}: no template named {name!r}; templates are: {', '.join(known)}")
        p = Path(path).expanduser()
        if not p.is_file():
            raise InputError(f"--template {name}={path}: {p} not found")
        try:
            text = p.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(f"--template {name}={path}: cannot be read as UTF-8 text ({exc})") from None
        values, images = supplied(name)
        unknown = sorted(_placeholders(text) - values)
        if unknown:
            raise InputError(f"--template {name}={path}: unknown placeholder(s) {', '.join('$' + u for u in unknown)}; "
                             f"{name} can use: {', '.join('$' + v for v in sorted(values)) or '(none)'}")
        wrong = sorted(set(_MARK.findall(text)) - images)
        if wrong:
            raise InputError(f"--template {name}={path}: unknown image marker(s) "
                             f"{', '.join('<<' + w + '>>' for w in wrong)}; {name} has: "
                             f"{', '.join('<<' + i + '>>' for i in sorted(images))}")

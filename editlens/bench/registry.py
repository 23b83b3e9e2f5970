"""Which benchmarks exist: the built-in adapters (one module each, listed in
``BUILTIN``) and those other packages declare in the ``editlens.benchmarks``
entry-point group (``name = "package.module:BenchmarkClass"``).

One :class:`~editlens.core.registry.Registry` holds them, with the shared
policy: loaded once under a lock, a broken plugin warned about and skipped,
a built-in never replaced by a plugin or by code.
"""

from __future__ import annotations

import importlib
from importlib.metadata import EntryPoint
from typing import Any

from editlens.bench.base import Benchmark
from editlens.core.registry import Registry
from editlens.errors import InputError

#: modules of the built-in adapters; each registers its classes on import
BUILTIN = ("gedit", "imgedit", "kris", "rise", "emu_edit", "magicbrush",
           "imagenhub", "genai_bench", "aurora", "editscore_bench", "editreward_bench", "mmrb2")


#: the classes the built-in modules declared (with ``@register``), kept so a fresh registry finds them again
_DECLARED: list[type[Benchmark]] = []


def _import_builtins() -> list[tuple[str, type[Benchmark]]]:
    for mod in BUILTIN:  # each module declares its classes with @register as it is imported
        importlib.import_module(f"editlens.bench.{mod}")
    return [(cls.spec.name, cls) for cls in _DECLARED]


def _checked(cls: Any) -> type[Benchmark]:
    if not isinstance(cls, type) or not issubclass(cls, Benchmark) or getattr(cls, "spec", None) is None:
        raise TypeError(f"{cls!r} is not a Benchmark subclass with a spec")
    return cls


def _plugin(obj: Any, ep: EntryPoint) -> tuple[str, type[Benchmark]]:
    cls = _checked(obj)
    return cls.spec.name, cls


#: every benchmark; the shared policy of :mod:`editlens.core.registry`
BENCHMARKS: Registry[type[Benchmark]] = Registry(
    "benchmark", group="editlens.benchmarks", builtins=_import_builtins, from_plugin=_plugin, error=InputError,
    hint=lambda: f"Known: {', '.join(names())} (`editlens bench list`).")


def register(cls: type[Benchmark], *, overwrite: bool = False) -> type[Benchmark]:
    """Add a benchmark class (usable as a decorator). A second class under a
    taken name is refused unless ``overwrite``; a built-in is never replaced."""
    cls = _checked(cls)
    if cls.__module__ in {f"editlens.bench.{mod}" for mod in BUILTIN}:  # a built-in: protected, no plugin scan yet
        if cls not in _DECLARED:
            _DECLARED.append(cls)
        return BENCHMARKS.register(cls.spec.name, cls, builtin=True)
    return BENCHMARKS.register(cls.spec.name, cls, overwrite=overwrite)


def unregister(name: str) -> None:
    """Take out a benchmark code or a plugin registered (a built-in one cannot be removed)."""
    BENCHMARKS.unregister(name)


def names() -> list[str]:
    return sorted(BENCHMARKS.names())


def get(name: str, **options: Any) -> Benchmark:
    """An instance of the benchmark called ``name`` (``options``: ``split``)."""
    return BENCHMARKS.get(name)(**options)


def all_benchmarks() -> list[Benchmark]:
    return [get(n) for n in names()]

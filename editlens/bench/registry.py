"""Which benchmarks exist: the built-in adapters (one module each, listed in
``BUILTIN``) and those other packages declare in the ``editlens.benchmarks``
entry-point group (``name = "package.module:BenchmarkClass"``)."""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points
from typing import Any

from editlens.bench.base import Benchmark
from editlens.errors import InputError

#: modules of the built-in adapters; each registers its classes on import
BUILTIN = ("gedit", "imgedit", "kris", "rise", "emu_edit", "magicbrush",
           "imagenhub", "genai_bench", "aurora", "editscore_bench", "editreward_bench", "mmrb2")
_REGISTRY: dict[str, type[Benchmark]] = {}
_loaded = False


def register(cls: type[Benchmark], *, overwrite: bool = False) -> type[Benchmark]:
    """Add a benchmark class (usable as a decorator). A second class under a
    taken name is refused unless ``overwrite``."""
    spec = getattr(cls, "spec", None)
    if spec is None or not isinstance(cls, type) or not issubclass(cls, Benchmark):
        raise TypeError(f"{cls!r} is not a Benchmark subclass with a spec")
    if spec.name in _REGISTRY and _REGISTRY[spec.name] is not cls and not overwrite:
        raise ValueError(f"a benchmark named {spec.name!r} is already registered ({_REGISTRY[spec.name].__module__})")
    _REGISTRY[spec.name] = cls
    return cls


def unregister(name: str) -> None:
    _REGISTRY.pop(name, None)


def _ensure_loaded() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    for mod in BUILTIN:
        importlib.import_module(f"editlens.bench.{mod}")
    for ep in entry_points(group="editlens.benchmarks"):
        try:
            cls: Any = ep.load()
        except Exception as exc:  # a broken plugin must not hide the others: say which and why
            raise InputError(f"benchmark plugin {ep.name} ({ep.value}) cannot be loaded: "
                             f"{type(exc).__name__}: {exc}") from exc
        register(cls, overwrite=True)


def names() -> list[str]:
    _ensure_loaded()
    return sorted(_REGISTRY)


def get(name: str, **options: Any) -> Benchmark:
    """An instance of the benchmark called ``name`` (``options``: ``split``)."""
    _ensure_loaded()
    if name not in _REGISTRY:
        raise InputError(f"unknown benchmark {name!r}; known: {', '.join(sorted(_REGISTRY))} "
                         "(`editlens bench list`)")
    return _REGISTRY[name](**options)


def all_benchmarks() -> list[Benchmark]:
    return [get(n) for n in names()]

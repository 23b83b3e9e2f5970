"""The metric registry: one name -> implementation and metadata.

Built-in metrics are declared as data in :mod:`editlens.metrics.catalog` with
the import path of their class, so nothing heavy is imported until a metric
is created. Third-party packages register metrics through the
``editlens.metrics`` entry-point group; each entry point names either a
:class:`MetricSpec` or a :class:`~editlens.metrics.base.Metric` subclass with
a ``spec`` attribute.
"""

from __future__ import annotations

import threading
import warnings
from dataclasses import replace
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any

from editlens.errors import UnknownMetricError
from editlens.metrics.spec import MetricSpec

if TYPE_CHECKING:
    from editlens.metrics.base import Metric

_REGISTRY: dict[str, MetricSpec] = {}
_BUILTIN_NAMES: set[str] = set()
# re-entrant: register_metric takes it too, from inside plugin loading
_LOCK = threading.RLock()
_LOADED = False
_LOADING = False


def register_metric(spec: MetricSpec, *, overwrite: bool = False) -> MetricSpec:
    """Add a metric to the registry. A built-in metric cannot be replaced
    (``overwrite`` applies to metrics registered by code or plugins)."""
    _ensure_loaded()
    with _LOCK:
        if spec.name in _REGISTRY:
            if spec.name in _BUILTIN_NAMES:
                raise ValueError(f"metric {spec.name!r} is built in and cannot be replaced; register it under another name")
            if not overwrite:
                raise ValueError(f"metric {spec.name!r} is already registered")
        _REGISTRY[spec.name] = spec
    return spec


def _plugin_spec(ep: Any) -> MetricSpec:
    obj = ep.load()
    spec = obj if isinstance(obj, MetricSpec) else getattr(obj, "spec", None)
    if not isinstance(spec, MetricSpec):
        raise TypeError(f"it provides no MetricSpec ({ep.value})")
    if isinstance(obj, type) and (isinstance(spec.target, str) or spec.target is None):
        spec = replace(spec, target=obj)
    return replace(spec, name=spec.name or ep.name)


def _ensure_loaded() -> None:
    """Built-ins, then plugins, once, under the lock: no thread sees a half-loaded registry.

    A plugin that fails to load, or that names a metric already registered
    (a built-in or an earlier plugin), is left out with a warning; the rest load.
    """
    global _LOADED, _LOADING
    if _LOADED:
        return
    with _LOCK:
        if _LOADED or _LOADING:  # _LOADING: a plugin module calling register_metric while it is imported
            return
        _LOADING = True
        try:
            _load_all()
            _LOADED = True
        finally:
            _LOADING = False


def _load_all() -> None:
    """Built-ins, then each entry-point plugin (called under the lock)."""
    from editlens.metrics.catalog import BUILTIN

    for spec in BUILTIN:
        _REGISTRY.setdefault(spec.name, spec)
        _BUILTIN_NAMES.add(spec.name)
    for ep in entry_points(group="editlens.metrics"):
        try:
            spec = _plugin_spec(ep)
        except Exception as exc:  # a broken plugin must not take the others down
            warnings.warn(f"editlens metric plugin {ep.name!r} could not be loaded and is left out: "
                          f"{type(exc).__name__}: {exc}", RuntimeWarning, stacklevel=2)
            continue
        if spec.name in _REGISTRY:
            warnings.warn(f"editlens metric plugin {ep.name!r} ({ep.value}) registers {spec.name!r}, which "
                          "already exists; the plugin is left out (rename its metric)", RuntimeWarning,
                          stacklevel=2)
            continue
        _REGISTRY[spec.name] = spec


def get_spec(name: str) -> MetricSpec:
    _ensure_loaded()
    key = name.strip().lower().replace("-", "_")
    try:
        return _REGISTRY[key]
    except KeyError:
        import difflib

        close = difflib.get_close_matches(key, _REGISTRY, n=3)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise UnknownMetricError(
            f"unknown metric {name!r}.{hint} Run `editlens metrics` to list them."
        ) from None


def default_metric_names(with_reference: bool = False) -> list[str]:
    """Metrics tried when the user names none, in registration order (the
    ones whose ``default`` metadata says so)."""
    _ensure_loaded()
    return [n for n, s in _REGISTRY.items() if s.in_defaults(with_reference)]


def list_metrics() -> list[MetricSpec]:
    """All registered metrics, sorted by name.

    >>> {"ssim", "clip_t", "change_map"} <= {s.name for s in list_metrics()}
    True
    """
    _ensure_loaded()
    return [_REGISTRY[k] for k in sorted(_REGISTRY)]


def create_metric(name: str, **options: Any) -> Metric:
    """Build a metric by registry name; ``options`` override the spec's defaults.

    >>> m = create_metric("psnr")
    >>> m.spec.higher_is_better
    True
    """
    spec = get_spec(name)
    cls = spec.load_class()
    merged = {**spec.defaults, **options}
    # the spec and options are in place before __init__ runs: a constructor may read its own spec
    metric = cls.__new__(cls)
    metric.spec = spec
    metric.options = merged
    cls.__init__(metric, **merged)
    return metric

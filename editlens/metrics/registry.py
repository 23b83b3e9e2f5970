"""The metric registry: one name -> implementation and metadata.

Built-in metrics are declared as data in :mod:`editlens.metrics.catalog` with
the import path of their class, so nothing heavy is imported until a metric
is created. Third-party packages register metrics through the
``editlens.metrics`` entry-point group; each entry point names either a
:class:`MetricSpec` or a :class:`~editlens.metrics.base.Metric` subclass with
a ``spec`` attribute.
"""

from __future__ import annotations

from dataclasses import replace
from importlib.metadata import EntryPoint
from typing import TYPE_CHECKING, Any

from editlens.core.registry import Registry
from editlens.errors import UnknownMetricError
from editlens.metrics.spec import MetricSpec

if TYPE_CHECKING:
    from editlens.metrics.base import Metric


def _builtins() -> list[tuple[str, MetricSpec]]:
    from editlens.metrics.catalog import BUILTIN

    return [(spec.name, spec) for spec in BUILTIN]


def _plugin_spec(obj: Any, ep: EntryPoint) -> tuple[str, MetricSpec]:
    spec = obj if isinstance(obj, MetricSpec) else getattr(obj, "spec", None)
    if not isinstance(spec, MetricSpec):
        raise TypeError(f"it provides no MetricSpec ({ep.value})")
    if isinstance(obj, type) and (isinstance(spec.target, str) or spec.target is None):
        spec = replace(spec, target=obj)
    spec = replace(spec, name=spec.name or ep.name)
    return spec.name, spec


#: every metric, built-in (:mod:`editlens.metrics.catalog`) and plugin (the
#: ``editlens.metrics`` entry-point group); the shared policy of :mod:`editlens.core.registry`
METRICS: Registry[MetricSpec] = Registry(
    "metric", group="editlens.metrics", builtins=_builtins, from_plugin=_plugin_spec,
    key=lambda name: name.strip().lower().replace("-", "_"), error=UnknownMetricError,
    hint="Run `editlens metrics` to list them.")


def register_metric(spec: MetricSpec, *, overwrite: bool = False) -> MetricSpec:
    """Add a metric to the registry. A built-in metric cannot be replaced
    (``overwrite`` applies to metrics registered by code or plugins)."""
    return METRICS.register(spec.name, spec, overwrite=overwrite)


def get_spec(name: str) -> MetricSpec:
    """The spec of metric ``name`` (``UnknownMetricError`` with close matches when there is none)."""
    return METRICS.get(name)


def default_metric_names(with_reference: bool = False) -> list[str]:
    """Metrics tried when the user names none, in registration order (the
    ones whose ``default`` metadata says so)."""
    return [n for n, s in METRICS.items() if s.in_defaults(with_reference)]


def list_metrics() -> list[MetricSpec]:
    """All registered metrics, sorted by name.

    >>> {"ssim", "clip_t", "change_map"} <= {s.name for s in list_metrics()}
    True
    """
    return [spec for _, spec in sorted(METRICS.items())]


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

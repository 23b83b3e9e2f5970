"""The metric registry: one name -> implementation and metadata.

Built-in metrics are declared as data in :mod:`editlens.metrics.catalog` with
the import path of their class, so nothing heavy is imported until a metric
is created. Third-party packages register metrics through the
``editlens.metrics`` entry-point group; each entry point names either a
:class:`MetricSpec` or a :class:`~editlens.metrics.base.Metric` subclass with
a ``spec`` attribute.
"""

from __future__ import annotations

import importlib
import threading
from dataclasses import dataclass, field, replace
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any

from editlens.errors import UnknownMetricError

if TYPE_CHECKING:
    from editlens.metrics.base import Metric

#: Inputs a metric can need from a sample.
INPUTS = ("source", "edited", "reference", "instruction", "source_caption", "target_caption", "mask")


@dataclass(frozen=True)
class MetricSpec:
    """What a metric is and needs.

    Attributes:
        name: registry name (lower case, ``[a-z0-9_]``).
        target: ``"module:Class"`` import path (or the class itself).
        needs: sample inputs required; a sample lacking one is skipped with a reason.
        higher_is_better: direction of the score.
        value_range: ``(low, high)`` of possible values (``inf`` allowed).
        model: model role the metric loads (``"clip"``, ``"dino"``,
            ``"lpips-alex"``, ...) or ``None`` for model-free metrics.
        description: one line for ``editlens metrics``.
        defaults: options passed to the class unless the caller overrides them.
        vlm: whether the metric uses a vision-language model: ``"none"``,
            ``"optional"`` (DICE: model-free without one) or ``"required"``
            (judges). Metrics that use one receive the run's VLM options.
    """

    name: str
    target: Any
    needs: tuple[str, ...]
    higher_is_better: bool
    value_range: tuple[float, float]
    model: str | None = None
    description: str = ""
    defaults: dict[str, Any] = field(default_factory=dict)
    vlm: str = "none"

    def __post_init__(self) -> None:
        if self.vlm not in ("none", "optional", "required"):
            raise ValueError(f"metric {self.name!r}: vlm must be none, optional or required, got {self.vlm!r}")
        unknown = set(self.needs) - set(INPUTS)
        if unknown:
            raise ValueError(f"metric {self.name!r}: unknown inputs {sorted(unknown)}")

    def load_class(self) -> type[Metric]:
        if not isinstance(self.target, str):
            return self.target
        module, _, attr = self.target.partition(":")
        return getattr(importlib.import_module(module), attr)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "needs": list(self.needs),
            "higher_is_better": self.higher_is_better,
            # JSON has no infinity: an unbounded end is null
            "range": [None if abs(v) == float("inf") else v for v in self.value_range],
            "model": self.model,
            "description": self.description,
            "defaults": dict(self.defaults),
            "vlm": self.vlm,
        }


_REGISTRY: dict[str, MetricSpec] = {}
_LOCK = threading.Lock()
_LOADED = False


def register_metric(spec: MetricSpec, *, overwrite: bool = False) -> MetricSpec:
    """Add a metric to the registry."""
    with _LOCK:
        if spec.name in _REGISTRY and not overwrite:
            raise ValueError(f"metric {spec.name!r} is already registered")
        _REGISTRY[spec.name] = spec
    return spec


def _ensure_loaded() -> None:
    global _LOADED
    if _LOADED:
        return
    with _LOCK:
        if _LOADED:
            return
        from editlens.metrics.catalog import BUILTIN

        for spec in BUILTIN:
            _REGISTRY.setdefault(spec.name, spec)
        _LOADED = True
    for ep in entry_points(group="editlens.metrics"):
        obj = ep.load()
        spec = obj if isinstance(obj, MetricSpec) else getattr(obj, "spec", None)
        if not isinstance(spec, MetricSpec):
            raise TypeError(f"entry point {ep.name!r} ({ep.value}) provides no MetricSpec")
        if isinstance(spec.target, str) or spec.target is None:
            spec = spec if not isinstance(obj, type) else replace(spec, target=obj)
        register_metric(replace(spec, name=spec.name or ep.name), overwrite=True)


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
    metric = cls(**merged)
    metric.spec = spec
    metric.options = merged
    return metric

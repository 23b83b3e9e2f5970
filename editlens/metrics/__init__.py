"""Metrics: the registry, a functional core, and batched metric objects."""

from editlens.metrics.registry import create_metric, get_spec, list_metrics, register_metric
from editlens.metrics.spec import MetricSpec

__all__ = ["MetricSpec", "create_metric", "get_spec", "list_metrics", "register_metric"]

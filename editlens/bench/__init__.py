"""Benchmarks in one shape (:class:`~editlens.bench.base.Benchmark`): one
module per benchmark, found through :mod:`editlens.bench.registry`.

>>> from editlens.bench import get
>>> get("gedit").spec.languages
('en', 'cn')
"""

from editlens.bench.base import BenchItem, Benchmark, BenchSpec, Question
from editlens.bench.registry import get, names, register, unregister

__all__ = ["Benchmark", "BenchItem", "BenchSpec", "Question", "get", "names", "register", "unregister"]

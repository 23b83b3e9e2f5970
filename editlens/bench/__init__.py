"""Benchmarks in one shape (:class:`~editlens.bench.base.Benchmark`): one
module per benchmark, found through :mod:`editlens.bench.registry`."""

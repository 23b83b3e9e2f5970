"""Tiny randomly initialised models for tests and benchmarks (no download)."""

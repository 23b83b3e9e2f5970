"""Speed and accuracy scripts: run from the repository root as ``python -m benchmarks.NAME``
(see docs/benchmarks.md)."""

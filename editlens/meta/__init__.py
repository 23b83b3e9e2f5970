"""Meta-evaluation statistics: how well an evaluator agrees with human judgments (protocols,
correlation, bootstrap, calibration, arena ranks). Pure: reading a benchmark's files is
:mod:`editlens.bench` (human-label benchmarks: :mod:`editlens.bench.evaluate`)."""

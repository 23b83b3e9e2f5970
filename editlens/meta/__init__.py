"""Meta-evaluation: how well an evaluator agrees with human judgments."""

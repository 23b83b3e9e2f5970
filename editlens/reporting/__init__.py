"""Reports of runs: manifests, failures, per-model summaries."""

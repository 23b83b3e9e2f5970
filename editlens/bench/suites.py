"""What benchmarks scored by a metric suite (no judge) share: per-item rows
of metric values, averaged per category and overall under the paper's
column names."""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from editlens.bench.table import counts, section


def suite_table(bench: Any, rows: Sequence[Mapping[str, Any]], sections: Sequence[tuple[str, Callable[[Mapping[str, Any]], bool]]],
                *, n_boot: int = 1000, seed: int = 0) -> dict[str, Any]:
    """The paper's columns (``spec.metrics``' values) per category and overall,
    one block per ``(name, row filter)``; an item lacking a metric (skipped,
    e.g. no caption) is left out of that column only, and counted."""
    cols = dict(getattr(bench, "metrics", None) or bench.spec.metrics)  # `bench run --metrics`: the part computed
    models: dict[str, Any] = {}
    for model in sorted({r["model"] for r in rows}):
        mine = [r for r in rows if r["model"] == model]
        usable = [{**r, "scores": {cols[k]: v for k, v in (r.get("scores") or {}).items() if k in cols}}
                  for r in mine]
        secs = [section(name, [r for r in usable if keep(r)], list(cols.values()), bench.spec.categories,
                        lambda r: r["category"], n_boot=n_boot, seed=seed) for name, keep in sections]
        missing = {cols[k]: sum(1 for r in mine if r.get("status") != "skipped" and (r.get("scores") or {}).get(k) is None)
                   for k in cols}
        models[model] = {"sections": secs, "counts": {**counts(mine), "missing_per_metric": missing}}
    return {"benchmark": bench.spec.name, "title": bench.spec.title, "protocol": next(iter(bench.spec.protocols.values())),
            "models": models}

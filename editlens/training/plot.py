"""The loss curve of a training run, drawn from its ``log.jsonl`` rows (one
function for every system)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class PlotSpec:
    """What a system's loss curve shows.

    ``series``: keys of the step records drawn on the loss axis (the first is
    the total loss). ``references``: horizontal ``(value, label)`` lines, e.g.
    the score loss of the best constant prediction. ``val_series``: keys of
    the validation dicts drawn on the loss axis (a validation loss);
    ``val_metric``: one key drawn on a second axis (Spearman, AP, ...). Dotted
    keys reach into nested dicts (``video_to_text.recall@1``).
    """

    title: str = "training"
    ylabel: str = "loss"
    series: tuple[str, ...] = ("loss",)
    references: tuple[tuple[float, str], ...] = ()
    val_series: tuple[str, ...] = ()
    val_metric: str | None = None
    val_label: str | None = None
    logy: bool = False
    filename: str = "loss.png"
    group_by: str | None = None  # a step-record key (e.g. "epoch"): also draw the first series' mean per group


def _get(d: dict[str, Any] | None, key: str) -> Any:
    for part in key.split("."):
        if not isinstance(d, dict):
            return None
        d = d.get(part)
    return d


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and abs(v) != float("inf")


def plot_training(rows: list[dict[str, Any]], path: str | Path, spec: PlotSpec = PlotSpec()) -> Path | None:
    """Write the loss curve of ``rows`` (log records) to ``path`` atomically; ``None`` with nothing to draw."""
    steps = [r for r in rows if _number(r.get(spec.series[0]))]
    vals = [(r["step"], r["val"]) for r in rows if isinstance(r.get("val"), dict)]
    if not steps and not vals:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from editlens.core.io import atomic_write

    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    styles = ("-", "--", ":", "-.")
    positive = True
    for i, key in enumerate(spec.series):
        pts = [(r["step"], r[key]) for r in steps if _number(r.get(key))]
        if pts:
            positive &= all(v > 0 for _, v in pts)
            ax.plot(*zip(*pts), styles[i % len(styles)], lw=1, label=key if len(spec.series) > 1 or
                    not spec.val_series else f"training {key}")
    if spec.group_by:
        groups: dict[Any, list[tuple[int, float]]] = {}
        for r in steps:
            if r.get(spec.group_by) is not None:
                groups.setdefault(r[spec.group_by], []).append((r["step"], r[spec.series[0]]))
        pts = [(g[-1][0], sum(v for _, v in g) / len(g)) for g in groups.values()]
        if pts:
            ax.plot(*zip(*pts), "o-", ms=4, label=f"{spec.series[0]} ({spec.group_by} mean)")
    for key in spec.val_series:
        pts = [(s, _get(v, key)) for s, v in vals if _number(_get(v, key))]
        if pts:
            positive &= all(v > 0 for _, v in pts)
            ax.plot(*zip(*pts), "s-", ms=4, label=f"validation {key}")
    for value, label in spec.references:
        if _number(value):
            ax.axhline(value, color="C1", lw=0.8, ls="-.", label=label)
    ax.set_xlabel("optimiser step")
    ax.set_ylabel(spec.ylabel)
    if spec.logy and positive:
        ax.set_yscale("log")
    handles, labels = ax.get_legend_handles_labels()
    if spec.val_metric:
        pts = [(s, _get(v, spec.val_metric)) for s, v in vals if _number(_get(v, spec.val_metric))]
        if pts:
            ax2 = ax.twinx()
            label = spec.val_label or f"validation {spec.val_metric}"
            ax2.plot(*zip(*pts), "o-", color="tab:red", ms=4, label=label)
            ax2.set_ylabel(label)
            h2, l2 = ax2.get_legend_handles_labels()
            handles, labels = handles + h2, labels + l2
    if handles:
        ax.legend(handles, labels, loc="best", fontsize="small")
    ax.set_title(spec.title)
    fig.tight_layout()
    target = Path(path)
    try:
        atomic_write(target, lambda fh: fig.savefig(fh, format="png", dpi=100), mode="wb")
    finally:
        plt.close(fig)
    return target

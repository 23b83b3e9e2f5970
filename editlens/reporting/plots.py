"""Plots for the HTML reports (matplotlib, Agg backend), returned as base64 PNG data URIs."""

from __future__ import annotations

import base64
import io
import math
from typing import Any, Sequence

import numpy as np

PALETTE = ["#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860", "#DA8BC3", "#8C8C8C", "#CCB974",
           "#64B5CD"]


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # no display; safe in threads and on servers
    import matplotlib.pyplot as plt

    return plt


def _horizontal() -> dict[str, Any]:
    import matplotlib

    # `orientation` replaced `vert` in matplotlib 3.10
    major, minor = (int(v) for v in matplotlib.__version__.split(".")[:2])
    return {"orientation": "horizontal"} if (major, minor) >= (3, 10) else {"vert": False}


def _to_uri(fig: Any) -> str:
    plt = _pyplot()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _grid(n: int, ncols: int = 3) -> tuple[int, int]:
    ncols = max(1, min(ncols, n))
    return math.ceil(n / ncols), ncols


def score_distributions(samples: Sequence[dict[str, Any]], evaluators: Sequence[str],
                        models: Sequence[str], max_points: int = 400) -> str | None:
    """One panel per evaluator: box plot of its scored values per editing model, points overlaid."""
    panels = []
    for ev in evaluators:
        per = [[s["scores"][ev]["value"] for s in samples if s["model"] == m
                and s["scores"].get(ev, {}).get("status") == "scored"] for m in models]
        if any(per):
            panels.append((ev, per))
    if not panels:
        return None
    plt = _pyplot()
    from matplotlib.ticker import MaxNLocator

    rows, cols = _grid(len(panels))
    height = max(1.6, 0.42 * len(models) + 1.0)
    fig, axes = plt.subplots(rows, cols, figsize=(3.8 * cols, height * rows), squeeze=False)
    rng = np.random.default_rng(0)
    for ax, (ev, per) in zip(axes.flat, panels):
        pos = [i for i, v in enumerate(per) if v]
        ax.boxplot([per[i] for i in pos], positions=pos, widths=0.55, showfliers=False,
                   medianprops={"color": "#222"}, **_horizontal())
        for i in pos:
            v = np.asarray(per[i])
            if v.size > max_points:
                v = rng.choice(v, max_points, replace=False)
            ax.scatter(v, i + rng.uniform(-0.18, 0.18, v.size), s=9, alpha=0.6, color=PALETTE[i % len(PALETTE)],
                       zorder=3)
        ax.set_yticks(range(len(models)), [m if len(m) <= 18 else m[:17] + "…" for m in models], fontsize=8)
        ax.set_ylim(-0.6, len(models) - 0.4)
        ax.set_title(ev, fontsize=10)
        ax.tick_params(axis="x", labelsize=8)
        ax.xaxis.set_major_locator(MaxNLocator(5))
        ax.grid(axis="x", alpha=0.3)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.tight_layout()
    return _to_uri(fig)


def human_scatter(points: dict[str, list[tuple[float, float, str]]], overall: Sequence[dict[str, Any]]) -> str | None:
    """Predicted vs human score per evaluator, coloured by editing model, Spearman r [95% CI] in the title."""
    if not points:
        return None
    plt = _pyplot()
    rows, cols = _grid(len(points))
    fig, axes = plt.subplots(rows, cols, figsize=(3.8 * cols, 3.3 * rows), squeeze=False)
    models = sorted({p[2] for pts in points.values() for p in pts})
    for ax, (ev, pts) in zip(axes.flat, points.items()):
        for k, m in enumerate(models):
            sub = [p for p in pts if p[2] == m]
            if sub:
                ax.scatter([p[1] for p in sub], [p[0] for p in sub], s=12, alpha=0.7, color=PALETTE[k % len(PALETTE)],
                           label=m)
        rho = next((c for c in overall if c["evaluator"] == ev and c["method"] == "spearman"), None)
        title = ev
        if rho and rho["value"] is not None:
            title += f"\nSpearman {rho['value']:.3f} [{_f(rho['ci95'][0])}, {_f(rho['ci95'][1])}]"
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("human", fontsize=8)
        ax.set_ylabel("predicted", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    axes.flat[0].legend(fontsize=7, loc="best")
    for ax in list(axes.flat)[len(points):]:
        ax.axis("off")
    fig.tight_layout()
    return _to_uri(fig)


def _f(v: float | None) -> str:
    return "nan" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.3f}"


def correlation_bars(rows: Sequence[dict[str, Any]], label: str, title: str) -> str | None:
    """Correlations with their 95% CIs as points with error bars, one row per ``row[label]``."""
    rows = [r for r in rows if r.get("value") is not None and not math.isnan(r["value"])]
    if not rows:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 0.35 * len(rows) + 1.2))
    y = np.arange(len(rows))
    vals = np.array([r["value"] for r in rows])
    ci = np.array([[r["ci95"][0] if r.get("ci95") and r["ci95"][0] is not None else np.nan,
                    r["ci95"][1] if r.get("ci95") and r["ci95"][1] is not None else np.nan] for r in rows], dtype=float)
    err = np.vstack([vals - ci[:, 0], ci[:, 1] - vals])
    err = np.where(np.isfinite(err), np.maximum(err, 0), 0)
    ax.errorbar(vals, y, xerr=err, fmt="o", color=PALETTE[0], ecolor="#999", capsize=3)
    ax.axvline(0, color="#bbb", lw=0.8)
    ax.set_yticks(y, [str(r[label]) for r in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(min(-0.1, np.nanmin(ci[:, 0]) - 0.05 if np.isfinite(ci[:, 0]).any() else -0.1), 1.0)
    ax.set_title(title, fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return _to_uri(fig)


def confusion(matrix: Sequence[Sequence[int]], labels: Sequence[str], xlabel: str, ylabel: str) -> str:
    """A labelled count matrix (rows: ``ylabel``, columns: ``xlabel``)."""
    plt = _pyplot()
    m = np.asarray(matrix)
    fig, ax = plt.subplots(figsize=(0.9 * len(labels) + 2, 0.8 * len(labels) + 1.4))
    ax.imshow(m, cmap="Blues")
    for i in range(m.shape[0]):
        for j in range(m.shape[1]):
            ax.text(j, i, str(m[i, j]), ha="center", va="center",
                    color="white" if m[i, j] > m.max() / 2 else "#222", fontsize=10)
    ax.set_xticks(range(len(labels)), labels)
    ax.set_yticks(range(len(labels)), labels)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    fig.tight_layout()
    return _to_uri(fig)

"""Plots for the meta-evaluation reports (matplotlib, Agg backend), returned as SVG data URIs.

Every axis is labelled. Text stays text (the browser draws it, sharp at any
zoom) and is at least :data:`MIN_FONT` points; the page shows a plot at its own
size and lets a narrow screen scroll it sideways rather than shrink its type
(see ``_plot`` in :mod:`editlens.reporting.html`). A run report draws its own
plots in the page (SVG, see ``assets/report.js``).
"""

from __future__ import annotations

import io
import math
from typing import Any, Sequence

import numpy as np

from editlens.reporting.markup import data_uri

PALETTE = ["#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860", "#DA8BC3", "#8C8C8C", "#CCB974",
           "#64B5CD"]


def pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # no display; safe in threads and on servers
    import matplotlib.pyplot as plt

    return plt


#: smallest type on a plot, in points (a point is 4/3 CSS pixels at the plot's own size)
MIN_FONT = 9


def svg_uri(fig: Any) -> str:
    """``fig`` as an SVG data URI (closed afterwards)."""
    plt = pyplot()
    buf = io.BytesIO()
    with plt.rc_context({"svg.fonttype": "none", "svg.hashsalt": "editlens"}):  # text as text; stable ids
        fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    return data_uri(buf.getvalue(), "image/svg+xml")


def png_uri(fig: Any, dpi: int = 110) -> str:
    """``fig`` as a PNG data URI (closed afterwards)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    pyplot().close(fig)
    return data_uri(buf.getvalue(), "image/png")


def _grid(n: int, ncols: int = 3) -> tuple[int, int]:
    ncols = max(1, min(ncols, n))
    return math.ceil(n / ncols), ncols


def human_scatter(points: dict[str, list[tuple[float, float, str]]], overall: Sequence[dict[str, Any]]) -> str | None:
    """Predicted vs human score per evaluator, coloured by editing model, Spearman r [95% CI] in the title.

    The legend sits outside the axes (to the right), so it never covers a point.
    """
    if not points:
        return None
    plt = pyplot()
    rows, cols = _grid(len(points))
    models = sorted({p[2] for pts in points.values() for p in pts})
    fig, axes = plt.subplots(rows, cols, figsize=(3.8 * cols + (1.8 if len(models) > 1 else 0), 3.3 * rows),
                             squeeze=False)
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
        ax.set_xlabel("human score", fontsize=MIN_FONT)
        ax.set_ylabel(f"predicted score ({ev})", fontsize=MIN_FONT)
        ax.tick_params(labelsize=MIN_FONT)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(points):]:
        ax.axis("off")
    fig.tight_layout()
    if len(models) > 1:
        handles, labels = axes.flat[0].get_legend_handles_labels()
        fig.legend(handles, labels, fontsize=MIN_FONT, loc="upper left", bbox_to_anchor=(1.0, 0.98), title="group",
                   title_fontsize=MIN_FONT, frameon=False)
    return svg_uri(fig)


def system_scatter(models: Sequence[str], human: Sequence[float], pred: Sequence[float]) -> str | None:
    """Mean predicted vs mean human score, one labelled point per method."""
    if not models:
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.2, 3.8))
    for k, (m, h, p) in enumerate(zip(models, human, pred)):
        ax.scatter([h], [p], s=36, color=PALETTE[k % len(PALETTE)], zorder=3)
        ax.annotate(m, (h, p), textcoords="offset points", xytext=(5, 4), fontsize=MIN_FONT)
    ax.set_xlabel("mean human score of the method")
    ax.set_ylabel("mean predicted score of the method")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return svg_uri(fig)


def _f(v: float | None) -> str:
    return "nan" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.3f}"


def correlation_bars(rows: Sequence[dict[str, Any]], label: str, title: str,
                     xlabel: str = "correlation with human scores (95% CI)") -> str | None:
    """Correlations with their 95% CIs as points with error bars, one row per ``row[label]``."""
    rows = [r for r in rows if r.get("value") is not None and not math.isnan(r["value"])]
    if not rows:
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 0.35 * len(rows) + 1.2))
    y = np.arange(len(rows))
    vals = np.array([r["value"] for r in rows])
    ci = np.array([[r["ci95"][0] if r.get("ci95") and r["ci95"][0] is not None else np.nan,
                    r["ci95"][1] if r.get("ci95") and r["ci95"][1] is not None else np.nan] for r in rows], dtype=float)
    err = np.vstack([vals - ci[:, 0], ci[:, 1] - vals])
    err = np.where(np.isfinite(err), np.maximum(err, 0), 0)
    ax.errorbar(vals, y, xerr=err, fmt="o", color=PALETTE[0], ecolor="#999", capsize=3)
    ax.axvline(0, color="#bbb", lw=0.8)
    ax.set_yticks(y, [str(r[label]) for r in rows], fontsize=MIN_FONT)
    ax.invert_yaxis()
    ax.set_xlim(min(-0.1, np.nanmin(ci[:, 0]) - 0.05 if np.isfinite(ci[:, 0]).any() else -0.1), 1.0)
    ax.set_title(title, fontsize=10)
    ax.set_xlabel(xlabel, fontsize=9)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return svg_uri(fig)


def confusion(matrix: Sequence[Sequence[int]], labels: Sequence[str], xlabel: str, ylabel: str) -> str:
    """A labelled count matrix (rows: ``ylabel``, columns: ``xlabel``)."""
    plt = pyplot()
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
    return svg_uri(fig)

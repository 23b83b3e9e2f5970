"""A benchmark's table as its paper lays it out, with bootstrap CIs and n,
and its writers (JSON-able dict, CSV, Markdown, LaTeX).

A table is ``{"benchmark", "protocol", "models": {model: {"sections":
[section...], "counts": {...}}}}``; a section is ``{"name", "figures":
[column...], "rows": [{"row": label, "cells": {figure: cell}}], "overall":
{"row", "cells"}, "overall_rule"}``; a cell is ``{"value", "ci95", "n"}``
(``value`` ``None`` when nothing was scored: never a zero).
"""

from __future__ import annotations

import csv
import io
import math
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from editlens.meta.bootstrap import ci_or_none


def cell(values: Sequence[float], n_boot: int = 1000, seed: int = 0, scale: float = 1.0) -> dict[str, Any]:
    """Mean of ``values`` (times ``scale``) with its bootstrap 95% CI and n.

    >>> cell([1.0, 3.0], n_boot=200)["value"], cell([])["value"]
    (2.0, None)
    """
    v = np.asarray([x for x in values if x is not None and math.isfinite(x)], dtype=float)
    if v.size == 0:
        return {"value": None, "ci95": None, "n": 0}
    ci = ci_or_none(v, n_boot=n_boot, seed=seed)
    return {"value": float(v.mean()) * scale, "ci95": [c * scale for c in ci] if ci else None, "n": int(v.size)}


def mean_of_means(groups: Mapping[str, Sequence[float]], n_boot: int = 1000, seed: int = 0,
                  scale: float = 1.0) -> dict[str, Any]:
    """The unweighted mean over groups of each group's mean (what GEdit-Bench's
    and ImgEdit-Bench's "average" rows are), with a CI from resampling items
    within each group. Groups with no value are left out and named.

    >>> round(mean_of_means({"a": [1.0, 1.0, 1.0], "b": [0.0]}, n_boot=50)["value"], 3)
    0.5
    """
    arrs = {g: np.asarray([x for x in vs if x is not None and math.isfinite(x)], dtype=float) for g, vs in groups.items()}
    used = {g: a for g, a in arrs.items() if a.size}
    if not used:
        return {"value": None, "ci95": None, "n": 0, "groups": 0}
    value = float(np.mean([a.mean() for a in used.values()]))
    rng = np.random.default_rng(seed)
    boots = np.zeros(n_boot)
    for a in used.values():
        boots += a[rng.integers(0, a.size, size=(n_boot, a.size))].mean(axis=1)
    boots /= len(used)
    n = int(sum(a.size for a in used.values()))
    ci = [float(np.quantile(boots, 0.025)) * scale, float(np.quantile(boots, 0.975)) * scale] if n >= 2 else None
    out: dict[str, Any] = {"value": value * scale, "ci95": ci, "n": n, "groups": len(used)}
    empty = sorted(set(arrs) - set(used))
    if empty:
        out["groups_without_scores"] = empty
    return out


def section(name: str, rows: Sequence[Mapping[str, Any]], figures: Sequence[str], order: Sequence[str],
            group_of: Callable[[Mapping[str, Any]], str], *, overall: str = "items", n_boot: int = 1000,
            seed: int = 0, scale: float = 1.0, labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    """One block of a table: a row per group (in ``order``, then any others),
    a column per figure, and an overall row (``overall``: ``"items"`` pools
    the items, ``"groups"`` averages the group means as the paper does).
    Each row of ``rows`` holds ``scores`` (figure -> number or None)."""
    by: dict[str, list[Mapping[str, Any]]] = {}
    for r in rows:
        by.setdefault(group_of(r), []).append(r)
    groups = [g for g in order if g in by] + sorted(set(by) - set(order))
    out_rows = []
    for g in groups:
        cells = {f: cell([r["scores"].get(f) for r in by[g]], n_boot, seed, scale) for f in figures}
        out_rows.append({"row": (labels or {}).get(g, g), "cells": cells})
    if overall == "groups":
        over = {f: mean_of_means({g: [r["scores"].get(f) for r in by[g]] for g in groups}, n_boot, seed, scale)
                for f in figures}
        rule = "unweighted mean of the per-group means (as the paper)"
    else:
        over = {f: cell([r["scores"].get(f) for r in rows], n_boot, seed, scale) for f in figures}
        rule = "mean over all items"
    return {"name": name, "figures": list(figures), "rows": out_rows, "overall": {"row": "overall", "cells": over},
            "overall_rule": rule}


def counts(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Items per status: scored, unscored (judge answer unparsable or refused:
    *missing*, never a zero), failed (lost requests, redone on rerun), skipped
    (no output file: the path is listed)."""
    c: dict[str, Any] = {"items": len(rows), "scored": 0, "unscored": 0, "failed": 0, "skipped": 0}
    for r in rows:
        c[r.get("status", "scored")] = c.get(r.get("status", "scored"), 0) + 1
    c["skipped_paths"] = [r.get("reason") for r in rows if r.get("status") == "skipped"][:50]
    return c


def comparison(table: Mapping[str, Any], rank_by: Mapping[str, str] | None = None,
               lower_is_better: Sequence[str] = ()) -> dict[str, Any]:
    """The models side by side, as papers compare them: a row per model, a column per
    (section, figure) of each section's overall row; with ``rank_by`` (``{"section",
    "figure"}``, the paper's headline; first section when no section is named) the rows are
    ranked by it, models without a value last. ``best`` names each column's best model
    (the lowest for figures in ``lower_is_better``; none on a tie or with fewer than two values).

    >>> def model(v):
    ...     return {"sections": [{"name": "all", "figures": ["O"], "overall": {"cells": {"O": {"value": v, "n": 3}}}}]}
    >>> t = {"models": {"a": model(5.0), "b": model(7.0), "c": model(None)}}
    >>> c = comparison(t, {"figure": "O"})
    >>> [r["model"] for r in c["rows"]], [r["rank"] for r in c["rows"]], c["best"]
    (['b', 'a', 'c'], [1, 2, None], {'all / O': 'b'})
    """
    columns: list[dict[str, str]] = []
    for m in table["models"].values():
        for sec in m["sections"]:
            for f in sec["figures"]:
                col = {"section": sec["name"], "figure": f}
                if col not in columns:
                    columns.append(col)
    rows = []
    for model, m in table["models"].items():
        by = {(sec["name"], f): sec["overall"]["cells"].get(f) for sec in m["sections"] for f in sec["figures"]}
        rows.append({"model": model, "cells": [by.get((c["section"], c["figure"])) or {"value": None, "n": 0}
                                               for c in columns]})
    key = None
    if rank_by and columns:
        section_name = rank_by.get("section") or columns[0]["section"]
        matches = [i for i, c in enumerate(columns) if c["section"] == section_name and c["figure"] == rank_by["figure"]]
        key = matches[0] if matches else None
    if key is not None:
        sign = 1.0 if columns[key]["figure"] in lower_is_better else -1.0
        rows.sort(key=lambda r: (r["cells"][key].get("value") is None, sign * (r["cells"][key].get("value") or 0.0)))
        for i, r in enumerate(rows):
            r["rank"] = i + 1 if r["cells"][key].get("value") is not None else None
    best: dict[str, str] = {}
    for i, c in enumerate(columns):
        vals = [(r["cells"][i]["value"], r["model"]) for r in rows if r["cells"][i].get("value") is not None]
        if len(vals) < 2:
            continue
        top = min(v for v, _ in vals) if c["figure"] in lower_is_better else max(v for v, _ in vals)
        winners = [mdl for v, mdl in vals if v == top]
        if len(winners) == 1:
            best[f"{c['section']} / {c['figure']}"] = winners[0]
    if key is None:
        ranking = "not ranked: the benchmark names no headline figure"
    elif not any(r.get("rank") for r in rows):
        ranking = f"not ranked: no model has a {columns[key]['section']} {columns[key]['figure']} value"
    else:
        ranking = (f"ranked by {columns[key]['section']} {columns[key]['figure']} "
                   f"({'lower' if columns[key]['figure'] in lower_is_better else 'higher'} first)")
    one_section = len({c["section"] for c in columns}) == 1
    for c in columns:  # what a writer heads the column with
        c["name"] = c["figure"] if one_section else f"{c['section']} {c['figure']}"
    for r in rows:  # whether each cell is its column's best, for the writers to mark
        r["best"] = [best.get(f"{c['section']} / {c['figure']}") == r["model"] for c in columns]
    return {"columns": columns, "rows": rows, "best": best, "ranking": ranking,
            "ranked_by": {"section": columns[key]["section"], "figure": columns[key]["figure"],
                          "order": "lower first" if columns[key]["figure"] in lower_is_better else "higher first"}
            if key is not None else None}


# ------------------------------------------------------------------------------------------------ writers

def _fmt(c: Mapping[str, Any] | None, digits: int = 3) -> str:
    if not c or c.get("value") is None:
        return "–"
    ci = c.get("ci95")
    s = f"{c['value']:.{digits}f}"
    if ci:
        s += f" [{ci[0]:.{digits}f}, {ci[1]:.{digits}f}]"
    return s + f" (n={c['n']})"


def flat_rows(table: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per (model, section, row, figure): the CSV's content."""
    out = []
    for model, m in table["models"].items():
        for sec in m["sections"]:
            for r in sec["rows"] + [sec["overall"]]:
                for f in sec["figures"]:
                    c = r["cells"].get(f) or {}
                    ci = c.get("ci95") or [None, None]
                    out.append({"model": model, "section": sec["name"], "row": r["row"], "figure": f,
                                "value": c.get("value"), "ci_low": ci[0], "ci_high": ci[1], "n": c.get("n", 0)})
    return out


def to_csv(table: Mapping[str, Any]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, ["model", "section", "row", "figure", "value", "ci_low", "ci_high", "n"],
                       lineterminator="\n")
    w.writeheader()
    w.writerows(flat_rows(table))
    return buf.getvalue()


def comparison_markdown(comp: Mapping[str, Any]) -> list[str]:
    """The side-by-side table (best of each column in bold) and how it is ranked."""
    ranked = any("rank" in r for r in comp["rows"])
    head = (["#"] if ranked else []) + ["model"] + [c["name"] for c in comp["columns"]]
    lines = ["## Models compared", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in comp["rows"]:
        cells = []
        for cell_, best in zip(r["cells"], r["best"]):
            text = "–" if cell_.get("value") is None else f"{cell_['value']:.3f}"
            cells.append(f"**{text}**" if best else text)
        lead = ([str(r.get("rank") or "–")] if ranked else [])
        lines.append("| " + " | ".join(lead + [r["model"]] + cells) + " |")
    note = (comp["ranking"][:1].upper() + comp["ranking"][1:] + "; each column's best in bold; overall rows of each "
            "section, CIs and n below.")
    return lines + ["", note, ""]


def reading_lines(table: Mapping[str, Any]) -> list[str]:
    """How the table's numbers were read, one sentence each: the answer policy and the items the two
    policies read differently, the images as sent, the owner's script version followed."""
    out = []
    a = table.get("answers")
    if a:
        s = (f"Answers read: {a['policy']}" + (f" (asked for {a['requested']}: {a['note']})" if a.get("note") else "")
             + f"; {a['read_differently']} item(s) read differently by the release and strict policies")
        if a.get("release_would_invent"):
            s += (f"; {a['release_would_invent']} answer(s) the release would have replaced with a random score "
                  "(left unscored)")
        out.append(s + ".")
    im = table.get("images")
    if im:
        out.append("Images sent: " + ", ".join(f"{k}={v}" for k, v in im.items()) + ".")
    rel = table.get("release")
    if isinstance(rel, dict):
        out.append(f"Owner's scoring script followed: commit {rel.get('commit')} ({rel.get('what')}).")
    elif rel:
        out.append(f"Owner's scoring script followed: {rel}.")
    return out


def to_markdown(table: Mapping[str, Any]) -> str:
    lines = [f"# {table.get('title', table['benchmark'])}", "", f"Protocol: {table.get('protocol', '')}", ""]
    for line in reading_lines(table):
        lines += [line, ""]
    if table.get("comparison") and len(table["models"]) > 1:
        lines += comparison_markdown(table["comparison"])
    for model, m in table["models"].items():
        c = m.get("counts", {})
        lines.append(f"## {model}")
        lines.append("")
        lines.append(f"{c.get('items', 0)} items: {c.get('scored', 0)} scored, {c.get('unscored', 0)} unscored "
                     f"(missing, not zero), {c.get('failed', 0)} failed, {c.get('skipped', 0)} skipped (no output)")
        lines.append("")
        for sec in m["sections"]:
            lines += [f"### {sec['name']}", "", "| | " + " | ".join(sec["figures"]) + " |",
                      "|---|" + "---|" * len(sec["figures"])]
            for r in sec["rows"] + [sec["overall"]]:
                bold = "**" if r is sec["overall"] else ""
                lines.append(f"| {bold}{r['row']}{bold} | " + " | ".join(_fmt(r["cells"].get(f)) for f in sec["figures"])
                             + " |")
            empty = sorted({g for c in sec["overall"]["cells"].values() for g in c.get("groups_without_scores", [])})
            lines += ["", f"Overall: {sec['overall_rule']}" + (f"; no score at all in {', '.join(empty)}, so the "
                                                                 "overall leaves it out" if empty else "") + ".", ""]
    return "\n".join(lines) + "\n"


def _tex(s: str) -> str:
    return "".join("\\" + ch if ch in "&%$#_{}" else ch for ch in str(s))


def to_latex(table: Mapping[str, Any]) -> str:
    """The models compared (best of each column in bold), then one tabular per model and
    section: value with the CI as a subscript-free ``\\pm`` half-width."""
    out = [f"% {line}" for line in reading_lines(table)]
    comp = table.get("comparison")
    if comp and len(table["models"]) > 1:
        cols = comp["columns"]
        out.append(f"% {_tex(table['benchmark'])} -- models compared")
        out.append("\\begin{tabular}{l" + "c" * len(cols) + "}")
        out.append("\\hline")
        out.append(" & ".join(["Model"] + [_tex(c["name"]) for c in cols]) + " \\\\")
        out.append("\\hline")
        for r in comp["rows"]:
            vals = []
            for cell_, best in zip(r["cells"], r["best"]):
                v = "--" if cell_.get("value") is None else f"{cell_['value']:.3f}"
                vals.append(f"\\textbf{{{v}}}" if best else v)
            out.append(" & ".join([_tex(r["model"])] + vals) + " \\\\")
        out.append("\\hline")
        out.append("\\end{tabular}")
        out.append("")
    for model, m in table["models"].items():
        for sec in m["sections"]:
            figs = sec["figures"]
            out.append(f"% {_tex(table['benchmark'])} -- {_tex(model)} -- {_tex(sec['name'])}")
            out.append("\\begin{tabular}{l" + "c" * len(figs) + "}")
            out.append("\\hline")
            out.append(" & ".join([""] + [_tex(f) for f in figs]) + " \\\\")
            out.append("\\hline")
            for r in sec["rows"] + [sec["overall"]]:
                vals = []
                for f in figs:
                    c = r["cells"].get(f) or {}
                    if c.get("value") is None:
                        vals.append("--")
                    elif c.get("ci95"):
                        vals.append(f"{c['value']:.3f} $\\pm$ {(c['ci95'][1] - c['ci95'][0]) / 2:.3f}")
                    else:
                        vals.append(f"{c['value']:.3f}")
                label = f"\\textbf{{{_tex(r['row'])}}}" if r is sec["overall"] else _tex(r["row"])
                out.append(" & ".join([label] + vals) + " \\\\")
            out.append("\\hline")
            out.append("\\end{tabular}")
            out.append("")
    return "\n".join(out)


def to_text(table: Mapping[str, Any]) -> str:
    """The terminal's view: the Markdown tables without the markup's noise."""
    return to_markdown(table)

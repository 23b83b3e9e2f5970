"""Report sections on whether an evaluator can be trusted: sanity probes (a
run report, from ``RUN_DIR/probe.json``), calibration with reliability
diagrams and breakdowns by edit type (a meta-evaluation report).

The run and meta-evaluation pages call :func:`probe_section` and
:func:`meta_trust_sections` and nothing else here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from editlens.core.io import read_json
from editlens.errors import InputError
from editlens.reporting.markup import data_table, esc, num, pct, section

PROBE_FILE = "probe.json"


# ----------------------------------------------------------------------------------------- probes

def load_probe(run_dir: str | Path) -> dict[str, Any] | None:
    """``RUN_DIR/probe.json`` when the run was probed (``editlens probe``), else ``None``;
    a file that cannot be read gives ``{"error": ...}`` (the report still renders)."""
    p = Path(run_dir) / PROBE_FILE
    if not p.is_file():
        return None
    try:
        doc = read_json(p, "probe result")
    except InputError as exc:
        return {"error": str(exc)}
    return doc if isinstance(doc, dict) and "evaluators" in doc else {"error": f"{p} is not a probe result"}


def _rate_cell(s: Mapping[str, Any], d: Mapping[str, Any] | None, flagged: bool) -> str:
    ci = s.get("ci")
    ci_html = f'<span class="ci">95% CI [{pct(ci[0])}, {pct(ci[1])}]</span>' if ci else ""
    wtl = f", {d['wins']}/{d['ties']}/{d['losses']}" if d else ""
    style = ' style="background:#fde8e8"' if flagged else ""
    return (f'<td class="num"{style} data-pass="{esc(s.get("pass_rate"))}">{pct(s.get("pass_rate"))}{ci_html}'
            f'<span class="cnt">n={s.get("n", 0)}{wtl}</span></td>')


def _probe_table(evaluators: Mapping[str, Any], details: Mapping[str, Any], controls: Sequence[str],
                 min_pass: float, first: Sequence[str] = ()) -> tuple[list[str], list[list[str]]]:
    rows = []
    for ev, r in evaluators.items():
        cells = [f"<td>{c}</td>" for c in first] + [f"<td><b>{esc(ev)}</b></td>"]
        for c in controls:
            s = r["controls"].get(c)
            if s is None:
                cells.append('<td class="num">–</td>')
                continue
            d = (details.get(ev) or {}).get(c)
            flagged = s.get("pass_rate") is not None and (s["pass_rate"] < min_pass)
            cells.append(_rate_cell(s, d, flagged))
        verdicts = r.get("verdicts") or []
        cells.append('<td class="reason">' + ("<br>".join(esc(v) for v in verdicts) if verdicts
                                               else "passes every probe") + "</td>")
        rows.append(cells)
    return list(controls), rows


def probe_section(doc: Mapping[str, Any]) -> str:
    """The "Sanity probes" section of a run report."""
    if doc.get("error"):
        return section("probe", "Sanity probes", f"<p>{esc(doc['error'])}</p>")
    first: Mapping[str, Any] = next(iter(doc["evaluators"].values()), {})
    controls = list(doc.get("controls") or first.get("controls", {}))
    min_pass = float((doc.get("settings") or {}).get("min_pass", 0.75))
    details = {ev: d.get("controls", {}) for ev, d in (doc.get("details") or {}).items()}
    cols, rows = _probe_table(doc["evaluators"], details, controls, min_pass)
    body = [data_table(["evaluator"] + [c.replace("_", " ") for c in cols] + ["verdicts"], rows, "data probe")]
    legend = "".join(f"<li><b>{esc(c.replace('_', ' '))}</b>: {esc(what)}</li>" for c, what in (doc.get("controls") or {}).items())
    if legend:
        body.append(f"<ul class=\"hint\">{legend}</ul>")
    by_type = doc.get("by_edit_type") or {}
    if by_type:
        from editlens.data.edit_types import edit_type_label

        trows: list[list[str]] = []
        for t, v in by_type.items():
            tdetails = (doc.get("by_edit_type_details") or {}).get(t, {})
            trows += _probe_table(v["evaluators"], tdetails, controls, min_pass,
                                  [f"{esc(edit_type_label(t))} <span class=\"cnt\">n={v['n']}</span>"])[1]
        body.append("<details><summary>By edit type</summary>"
                    + data_table(["edit type", "evaluator"] + [c.replace("_", " ") for c in controls] + ["verdicts"], trows,
                             "data probe-by-type") + "</details>")
    if doc.get("n_not_built"):
        body.append(f"<p class=\"hint\">{doc['n_not_built']} control(s) could not be built; see not_built in probe.json.</p>")
    hint = ("Each edit is scored beside controls an evaluator that can be trusted must score worse. Pass rate: share of "
            "edits whose real edit scores strictly better than the control in the evaluator's direction (ties are not "
            f"passes), with a bootstrap 95% CI; n counts edits where both were scored; better/tie/worse counts. Shaded: "
            f"below {min_pass:.0%}. Controls are scored in the run folder probe/ (open its report to see them).")
    return section("probe", "Sanity probes", "".join(body), hint)


# ----------------------------------------------------------------------------------------- calibration

def reliability_plot(name: str, q: Mapping[str, Any]) -> str | None:
    """Reliability diagram: observed share vs predicted probability per bin, before and after
    (out of fold) calibration, point size by count; the diagonal is perfect calibration."""
    rel = q.get("reliability") or {}
    if not rel.get("before") and not rel.get("after"):
        return None
    from editlens.reporting.plots import png_uri, pyplot

    fig, ax = pyplot().subplots(figsize=(4.4, 4.0))
    ax.plot([0, 1], [0, 1], color="#bbb", lw=1, label="perfectly calibrated")
    total = max(1, sum(b["n"] for b in rel.get("before") or []))
    for key, colour, label in (("before", "#DD8452", f"before (ECE {num(q.get('ece_before'), scientific=False)})"),
                               ("after", "#4C72B0", f"after, out of fold (ECE {num(q.get('ece_after'), scientific=False)})")):
        bins = rel.get(key) or []
        if bins:
            ax.plot([b["mean_pred"] for b in bins], [b["mean_target"] for b in bins], "-o", color=colour, label=label,
                    ms=3, lw=1.2)
            ax.scatter([b["mean_pred"] for b in bins], [b["mean_target"] for b in bins], color=colour, alpha=0.35,
                       s=[20 + 400 * b["n"] / total for b in bins])
    ax.set_xlim(-0.02, 1.02)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("predicted probability", fontsize=9)
    ax.set_ylabel("observed share (people)", fontsize=9)
    ax.set_title(f"reliability: {name}", fontsize=10)
    ax.legend(fontsize=7, loc="upper left")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return png_uri(fig, dpi=110)


def calibration_section(cal: Mapping[str, Any], prefix: str = "") -> str:
    """ECE before/after and reliability diagrams of ``{"evaluators": {name: quality}}``
    (the ``calibration`` entry of a meta-evaluation or ``editlens calibrate`` report)."""
    if cal.get("error"):
        return section(f"{prefix}calibration", "Calibration", f"<p>{esc(cal['error'])}</p>")
    evs = cal.get("evaluators") or {}
    rows = []
    plots = []
    for ev, q in evs.items():
        ci = q.get("ece_after_ci95")
        rows.append([f"<b>{esc(ev)}</b>", f'<td class="num">{q.get("n")}</td>',
                     f'<td class="num" data-ece="before">{num(q.get("ece_before"), scientific=False)}</td>',
                     f'<td class="num" data-ece="after">{num(q.get("ece_after"), scientific=False)}'
                     + (f'<span class="ci">95% CI [{num(ci[0], scientific=False)}, {num(ci[1], scientific=False)}]</span>' if ci else "") + "</td>",
                     f'<td class="num">{num(q.get("ece_in_sample"), scientific=False)}</td>',
                     f'<td class="num">{num(q.get("brier_before"), scientific=False)} → {num(q.get("brier_after"), scientific=False)}</td>',
                     f'<td class="num">{num(q.get("base_rate"), scientific=False)}</td>', esc(q.get("before_reads"))])
        uri = reliability_plot(ev, q)
        if uri:
            plots.append(f'<img class="plot" alt="reliability diagram of {esc(ev)}" src="{uri}">')
    first: Mapping[str, Any] = next(iter(evs.values()), {})
    hint = (f"Target: {esc(cal.get('target'))}. ECE: expected calibration error over {first.get('bins', 10)} equal-width "
            f"bins. After: each item predicted by a map ({esc(cal.get('method', 'isotonic'))}) fitted without it "
            f"({first.get('folds', 5)}-fold cross-validation grouped by {first.get('grouped_by', 'item')}); the CI resamples "
            "sources. In sample: the final map on its own training data (optimistic).")
    table = data_table(["evaluator", "n", "ECE before", "ECE after (out of fold)", "ECE in sample", "Brier before → after",
                    "share good", "before reads"], rows, "data calibration")
    return section(f"{prefix}calibration", "Calibration: what a score means", table + "".join(plots), hint)


def edit_type_section(by_type: Mapping[str, Any], prefix: str = "") -> str:
    """Per edit type: n and the agreement figure the benchmark reports per type."""
    rows = []
    for t, r in by_type.items():
        label = r.get("label", t)
        if "spearman" in r:
            c = r["spearman"]
            ci = c.get("ci95")
            cell = (f'<td class="num">{num(c.get("value"), scientific=False)}'
                    + (f'<span class="ci">95% CI [{num(ci[0], scientific=False)}, {num(ci[1], scientific=False)}]</span>' if ci else "") + "</td>")
            what = "Spearman (pooled)"
        else:
            cell = f'<td class="num">{num(r.get("accuracy"), scientific=False)}</td>'
            what = "accuracy (tie threshold of all pairs)"
        rows.append([f"<b>{esc(label)}</b>", f'<td class="num" data-type="{esc(t)}">{r.get("n")}</td>', cell])
    hint = ("Edit types from the instructions (rules in editlens/data/edit_types.toml; an edit_type column overrides "
            "them). Small types have wide intervals.")
    return section(f"{prefix}by-edit-type", "By edit type", data_table(["edit type", "n", what], rows, "data by-edit-type"),
                    hint)


def meta_trust_sections(rep: Mapping[str, Any], prefix: str = "") -> list[str]:
    """The calibration and edit-type sections of a meta-evaluation report (empty when it has neither)."""
    out = []
    if rep.get("calibration"):
        cal = rep["calibration"]
        if "evaluators" not in cal and "error" not in cal:  # an `editlens calibrate` document
            cal = {"evaluators": cal, "target": rep.get("target"), "method": rep.get("method")}
        out.append(calibration_section(cal, prefix))
    if rep.get("by_edit_type"):
        out.append(edit_type_section(rep["by_edit_type"], prefix))
    return out

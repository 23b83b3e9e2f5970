"""Self-contained HTML reports: a run (sample cards, per-model table, DICE
ranking, plots) and a meta-evaluation (correlations, CIs, confusion).

One file with everything embedded (thumbnails as JPEG data URIs, plots as
PNG, CSS and plain JavaScript inline): it opens offline and can be mailed.
Cards are rendered by the page's script one page at a time, so a report of
thousands of edits stays quick; the full-size images are links.

>>> page = render_meta_report({"benchmark": "pairwise", "accuracy": 0.75, "n": 4}, "demo")
>>> page.startswith("<!DOCTYPE html>") and "0.75" in page
True
"""

from __future__ import annotations

import html
import json
import math
import os
import re
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence
from urllib.parse import quote

from editlens.reporting import plots

#: thumbnails' longest side in pixels; big runs get smaller ones to keep the file light
THUMB_SIZE = 256
THUMB_SIZE_LARGE_RUN = 160
LARGE_RUN = 300


def _asset(name: str) -> str:
    return resources.files("editlens.reporting").joinpath("assets", name).read_text(encoding="utf-8")


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _num(v: Any) -> str:
    """Compact number: 4 significant digits, '–' for missing or NaN.

    >>> _num(0.123456), _num(None), _num(float("nan")), _num(12)
    ('0.1235', '–', '–', '12')
    """
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "–"
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return _e(v)
    if isinstance(v, int):
        return str(v)
    a = abs(v)
    return f"{v:.3e}" if a and (a < 1e-3 or a >= 1e5) else f"{v:.4g}"


def _json_for_script(obj: Any) -> str:
    """JSON safe inside a <script> element (no '</script>' or '<!--' can appear)."""
    return json.dumps(_finite(obj), separators=(",", ":"), allow_nan=False).replace("<", "\\u003c")


def _finite(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def _page(title: str, header: str, sections: str, data: Any, thumbs: Mapping[str, str] | None = None) -> str:
    from editlens import __version__

    parts = {"TITLE": _e(title), "VERSION": _e(__version__), "CSS": _asset("report.css"), "HEADER": header,
             "SECTIONS": sections, "DATA": _json_for_script(data), "THUMBS": _json_for_script(thumbs or {}),
             "JS": _asset("report.js")}
    # one pass, so text inserted for one placeholder is never scanned for another
    return re.sub(r"__([A-Z]+)__", lambda m: parts.get(m.group(1), m.group(0)), _asset("report.html"))


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], cls: str = "data", attrs: str = "") -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(c if c.startswith("<td") else f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f'<div class="tablewrap"><table class="{cls}" {attrs}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'


def _section(sid: str, title: str, body: str, hint: str = "") -> str:
    hint_html = f'<p class="hint">{hint}</p>' if hint else ""
    return f'<section id="{sid}"><h2>{_e(title)}</h2>{hint_html}{body}</section>'


def _plot(uri: str | None, alt: str) -> str:
    return f'<img class="plot" alt="{_e(alt)}" src="{uri}">' if uri else ""


def _ci(ci: Sequence[float | None] | None) -> str:
    if not ci or ci[0] is None:
        return ""
    return f'<span class="ci">95% CI [{_num(ci[0])}, {_num(ci[1])}]</span>'


def generic_table(rows: Sequence[Mapping[str, Any]], cls: str = "data") -> str:
    """A table of dict rows, columns in order of first appearance (no fixed column set).

    >>> "<th>no visual change</th>" in generic_table([{"model": "a", "no_visual_change": 2}])
    True
    """
    cols: list[str] = []
    for r in rows:
        cols += [k for k in r if k not in cols]
    body = [[f'<td class="num">{_num(r.get(c))}</td>' if isinstance(r.get(c), (int, float)) and not isinstance(r.get(c), bool)
             else ("–" if r.get(c) is None else _e(json.dumps(r[c]) if isinstance(r[c], (dict, list)) else r[c]))
             for c in cols] for r in rows]
    return _table([c.replace("_", " ") for c in cols], body, cls)


# ----------------------------------------------------------------------------------------------- run report

def default_link(out_dir: Path | None) -> Callable[[str], str]:
    """Links to full-size images: relative to the report's folder when possible, else file URIs."""

    def link(path: str) -> str:
        p = Path(path).resolve()
        if out_dir is not None:
            try:
                return quote(Path(os.path.relpath(p, out_dir.resolve())).as_posix())
            except ValueError:  # another drive (Windows)
                pass
        return p.as_uri()

    return link


def render_run_report(data: Mapping[str, Any], out_dir: str | Path | None = None,
                      link: Callable[[str], str] | None = None, thumb_size: int | None = None) -> str:
    """HTML of a run report from :func:`editlens.reporting.collect.collect_run`'s dict."""
    from editlens.reporting.thumbs import thumbnails

    samples = data["samples"]
    link = link or default_link(Path(out_dir) if out_dir is not None else None)
    size = thumb_size or (THUMB_SIZE if len(samples) <= LARGE_RUN else THUMB_SIZE_LARGE_RUN)
    made = thumbnails([p for s in samples for p in s["images"].values()], size)
    keys: dict[str, str] = {}
    thumbs: dict[str, str] = {}
    page_samples = []
    for s in samples:
        images = {}
        for role, path in s["images"].items():
            t = made[path]
            if "error" in t:
                images[role] = {"error": t["error"]}
                continue
            if path not in keys:
                keys[path] = f"t{len(keys)}"
                thumbs[keys[path]] = str(t["uri"])
            images[role] = {"t": keys[path], "href": link(path), "w": t["w"], "h": t["h"], "tw": t["tw"], "th": t["th"]}
        page_samples.append({**s, "images": images})
    page_data = {"evaluators": data["evaluators"], "samples": page_samples}
    return _page(f"editlens report: {data['title']}", _run_header(data), _run_sections(data), page_data, thumbs)


def _run_header(data: Mapping[str, Any]) -> str:
    run = data["run"]
    counts = {"unscored": 0, "failed": 0, "skipped": 0}
    for r in data["per_model"]:
        for k in counts:
            counts[k] += r["counts"].get(k, 0)
    argv = list(run.get("command") or [])
    if argv and Path(argv[0]).name in ("editlens", "main.py", "__main__.py"):
        argv[0] = "editlens"  # the console script's or module's full path says nothing to a reader
    cmd = " ".join(argv) or "(not recorded)"
    sub = [f"command <code>{_e(cmd)}</code>"]
    if run.get("started"):
        sub.append(f"started {_e(run['started'])}" + (f", finished {_e(run['finished'])}" if run.get("finished") else ""))
    if run.get("device"):
        sub.append(f"device {_e(run['device'])}")
    if run.get("git_commit"):
        sub.append(f"git {_e(str(run['git_commit'])[:10])}")
    stats = [("edits", len(data["samples"])), ("editing models", len(data["models"])),
             ("evaluators", len(data["evaluators"])), ("unscored", counts["unscored"]), ("failed", counts["failed"]),
             ("skipped", counts["skipped"])]
    stat_html = "".join(f'<div class="stat" data-stat="{_e(k)}"><b>{v}</b><span>{_e(k)}</span></div>' for k, v in stats)
    return (f"<h1>editlens report · {_e(data['title'])}</h1><div class=\"sub\">{' · '.join(sub)}</div>"
            f'<div class="stats">{stat_html}</div>')


def _run_sections(data: Mapping[str, Any]) -> str:
    out = []
    notes = list(data.get("notes") or [])
    notes += [f"metric {k} did not run: {v}" for k, v in (data["run"].get("skipped_metrics") or {}).items()]
    if notes:
        out.append(_section("notes", "Notes", "<ul>" + "".join(f"<li>{_e(n)}</li>" for n in notes) + "</ul>")
                   .replace("<section ", '<section class="notes" ', 1))
    out.append(_per_model_section(data))
    for table in data.get("summaries") or []:
        ev = table["evaluator"]
        out.append(_section(f"summary-{ev}", table["title"], generic_table(table["rows"], f"data summary-{ev}"),
                            f"Contributed by the {ev} evaluator, per editing model. Samples whose model answers "
                            "could not be parsed are never guessed: rates leave them out and count columns say how many."))
    out.append(_status_section(data))
    if data.get("human"):
        out.append(_human_section(data["human"]))
    dist = plots.score_distributions(data["samples"], data["scored_evaluators"], data["models"])
    if dist:
        out.append(_section("plots", "Score distributions", _plot(dist, "score distributions per editing model"),
                            "Scored values only, per evaluator and editing model (box: quartiles; points: samples)."))
    for i, (name, rep) in enumerate((data.get("meta_eval") or {}).items()):
        inner = "".join(meta_sections(rep, prefix=f"meta{i}-")).replace("<section ", "<div ").replace("</section>", "</div>")
        out.append(_section(f"meta{i}", f"Meta-evaluation: {name}", inner.replace("<h2>", "<h3>").replace("</h2>", "</h3>"),
                            f"benchmark {_e(rep.get('benchmark', '?'))}, protocol {_e(rep.get('protocol', '?'))}"))
    out.append(_cards_section(data))
    # a line of links to the sections, so the cards are one click away
    links = re.findall(r'<section (?:class="[^"]*" )?id="([^"]+)"><h2>([^<]+)</h2>', "".join(out))
    nav = '<nav class="toc">' + " · ".join(f'<a href="#{i}">{t}</a>' for i, t in links) + "</nav>"
    return nav + "\n".join(out)


def _per_model_section(data: Mapping[str, Any]) -> str:
    evs = [e for e in data["evaluators"] if any(r["evaluator"] == e for r in data["per_model"])]
    by = {(r["model"], r["evaluator"]): r for r in data["per_model"]}
    rows = []
    for m in data["models"]:
        cells = [f"<td><b>{_e(m)}</b></td>"]
        for ev in evs:
            r = by.get((m, ev))
            if r is None:
                cells.append('<td class="num">–</td>')
                continue
            other = ", ".join(f"{v} {k}" for k, v in r["counts"].items() if k != "scored" and v)
            cells.append(f'<td class="num" data-model="{_e(m)}" data-evaluator="{_e(ev)}">{_num(r["mean"])}'
                         f'{_ci(r["ci"])}<span class="cnt">n={r["n"]}{", " + _e(other) if other else ""}</span></td>')
        rows.append(cells)
    arrows = {True: " ↑", False: " ↓", None: ""}
    headers = ["editing model"] + [ev + arrows[data["higher_is_better"].get(ev)] for ev in evs]
    return _section("per-model", "Per editing model", _table(headers, rows, "data per-model"),
                    "Mean of scored values with a seeded percentile-bootstrap 95% CI; n counts scored samples, "
                    "other statuses are listed beside it. ↑/↓: higher/lower is better.")


def _status_section(data: Mapping[str, Any]) -> str:
    rows = []
    for ev in data["evaluators"]:
        counts = {"scored": 0, "skipped": 0, "unscored": 0, "failed": 0, "info": 0}
        reasons: dict[str, int] = {}
        for s in data["samples"]:
            sc = s["scores"].get(ev)
            if sc is None:
                continue
            counts[sc["status"]] = counts.get(sc["status"], 0) + 1
            if sc.get("reason") and sc["status"] != "scored":
                reasons[sc["reason"]] = reasons.get(sc["reason"], 0) + 1
        top = sorted(reasons.items(), key=lambda kv: -kv[1])[:3]
        why = "<br>".join(f"{n}× {_e(r if len(r) < 160 else r[:157] + '...')}" for r, n in top)
        rows.append([_e(ev)] + [f'<td class="num">{counts[k]}</td>' for k in counts] + [f'<td class="reason">{why}</td>'])
    return _section("status", "Results by status",
                    _table(["evaluator", "scored", "skipped", "unscored", "failed", "info", "most common reasons"], rows))


def _human_section(h: Mapping[str, Any]) -> str:
    methods = ("pearson", "spearman", "kendall")
    by = {(r["evaluator"], r["method"]): r for r in h["overall"]}
    evs = list(dict.fromkeys(r["evaluator"] for r in h["overall"]))
    rows = [[f"<b>{_e(ev)}</b>", f'<td class="num">{by[(ev, "spearman")]["n"]}</td>']
            + [f'<td class="num" data-evaluator="{_e(ev)}" data-method="{m}">{_num(by[(ev, m)]["value"])}'
               f'{_ci(by[(ev, m)]["ci95"])}</td>' for m in methods] for ev in evs]
    body = [_table(["evaluator", "n", "Pearson", "Spearman", "Kendall τ"], rows, "data human")]
    body.append(_plot(plots.human_scatter(h["points"], h["overall"]), "predicted vs human"))
    if h["per_model"]:
        body.append("<h3>Spearman per editing model</h3>")
        pm = {(r["evaluator"], r["model"]): r for r in h["per_model"]}
        models = sorted({r["model"] for r in h["per_model"]})
        body.append(_table(["evaluator"] + models, [
            [f"<b>{_e(ev)}</b>"] + [f'<td class="num">{_num(pm[(ev, m)]["value"])}{_ci(pm[(ev, m)]["ci95"])}'
                                    f'<span class="cnt">n={pm[(ev, m)]["n"]}</span></td>' if (ev, m) in pm else
                                    '<td class="num">–</td>' for m in models]
            for ev in dict.fromkeys(r["evaluator"] for r in h["per_model"])], "data human-per-model"))
        body.append(_plot(plots.correlation_bars([{**r, "label": f"{r['evaluator']} · {r['model']}"} for r in h["per_model"]],
                                                 "label", "Spearman per editing model (95% CI)"), "per-model correlations"))
    return _section("human", "Agreement with human scores", "".join(body),
                    "Correlations over samples with both a scored value and a human score; bootstrap 95% CIs (seeded).")


def _cards_section(data: Mapping[str, Any]) -> str:
    def opts(values: Sequence[str], any_label: str) -> str:
        return f'<option value="">{_e(any_label)}</option>' + "".join(f'<option value="{_e(v)}">{_e(v)}</option>' for v in values)

    statuses = sorted({st for s in data["samples"] for st in s["statuses"]})
    verdicts = sorted({v for s in data["samples"] for v in s["verdicts"]})
    sortable = [("order", "manifest order"), ("id", "id"), ("model", "editing model")]
    sortable += [(f"m:{ev}", ev) for ev in data["scored_evaluators"]]
    if any("human" in s for s in data["samples"]):
        sortable.append(("human", "human score"))
    controls = f"""
<div class="controls">
  <label>search<input type="search" id="f-text" placeholder="id or instruction"></label>
  <label>editing model<select id="f-model">{opts(data['models'], 'all models')}</select></label>
  <label>status<select id="f-status"><option value="">any status</option><option value="all scored">all scored</option>
    {''.join(f'<option value="{_e(s)}">has {_e(s)}</option>' for s in statuses)}</select></label>
  <label>DICE verdict<select id="f-verdict"{' disabled' if not verdicts else ''}>{opts(verdicts, 'any verdict')}</select></label>
  <label>metric<select id="f-metric">{opts(data['scored_evaluators'], '(choose)')}</select></label>
  <label>min<input type="number" step="any" id="f-min"></label>
  <label>max<input type="number" step="any" id="f-max"></label>
  <label>sort by<select id="sort">{''.join(f'<option value="{_e(k)}">{_e(v)}</option>' for k, v in sortable)}</select></label>
  <label>&nbsp;<button type="button" id="sort-dir" data-dir="asc">ascending</button></label>
  <label>per page<select id="page-size"><option>12</option><option selected>24</option><option>48</option><option>96</option></select></label>
</div>
<div class="legend">
  <span><i style="border-color:#e53935"></i>ADD (on edited)</span><span><i style="border-color:#1e63d6"></i>REMOVE (on source)</span>
  <span><i style="border-color:#22a046"></i>EDIT (on source)</span><span><i style="border-color:#f5c400"></i>DICE change (kind unknown)</span>
  <span><i class="dash" style="border-color:#f5c400"></i>change map region</span>
</div>
<div class="pager"><button type="button" id="prev">‹ previous</button><span id="page-info"></span>
  <button type="button" id="next">next ›</button><span id="count"></span></div>
<div id="cards"></div>"""
    return _section("samples", "Edits", controls,
                    "Thumbnails link to the full-size images. Boxes: solid = DICE, dashed = change map.")


def write_run_report(run_dir: str | Path, out: str | Path | None = None, *, manifest: str | Path | None = None,
                     human: str | Path | None = None, meta_eval: Sequence[str | Path] = (),
                     thumb_size: int | None = None, seed: int = 0, n_boot: int = 1000) -> Path:
    """Collect a run and write its report (default ``RUN_DIR/report.html``) atomically.

    ``meta_eval``: saved ``editlens meta-eval ... --json`` documents to show in the report.
    """
    from editlens.reporting.collect import collect_run, read_meta_eval
    from editlens.core.io import atomic_write

    target = Path(out) if out else Path(run_dir) / "report.html"
    metas = {Path(p).name: read_meta_eval(p) for p in meta_eval}  # before the slow part: bad input fails fast
    data = collect_run(run_dir, manifest=manifest, human=human, seed=seed, n_boot=n_boot)
    data["meta_eval"] = metas
    page = render_run_report(data, out_dir=target.parent, thumb_size=thumb_size)
    atomic_write(target, lambda fh: fh.write(page))
    os.chmod(target, 0o644)  # a report is meant to be shared (the temp file it came from is private)
    return target


# ----------------------------------------------------------------------------------------------- meta-evaluation

def _corr_rows(rep: Mapping[str, Any], prefix: str = "") -> list[dict[str, Any]]:
    """Every ``{"value", "ci95"}`` entry of a meta-evaluation report, with its path as the label."""
    rows = []
    for k, v in rep.items():
        if isinstance(v, Mapping):
            if "value" in v and isinstance(v.get("ci95"), (list, tuple)):
                rows.append({"label": f"{prefix}{k}", "value": v["value"], "ci95": list(v["ci95"]),
                             "n": v.get("n", v.get("n_items"))})
            rows += _corr_rows(v, f"{prefix}{k} · ")
    return rows


def _per_group_rows(rep: Mapping[str, Any], prefix: str = "") -> list[dict[str, Any]]:
    """Per-method correlations (``per_group`` maps of a grouped protocol)."""
    rows = []
    for k, v in rep.items():
        if isinstance(v, Mapping):
            groups = v.get("per_group")
            if isinstance(groups, Mapping):
                n = v.get("n_per_group") or {}
                for g, r in groups.items():
                    rows.append({"where": f"{prefix}{k}".strip(" ·") or "all", "method": g, "value": r,
                                 "n": n.get(g) if isinstance(n, Mapping) else None})
            rows += _per_group_rows(v, f"{prefix}{k} · ")
    return rows


def meta_sections(rep: Mapping[str, Any], extra: Mapping[str, Any] | None = None, prefix: str = "") -> list[str]:
    """The sections of a meta-evaluation report (also embedded in a run report).

    ``extra`` may hold ``points`` (``[(predicted, human, group)]``) for a
    scatter, and ``confusion`` (``{"labels", "matrix"}``, rows human,
    columns predicted) for pairwise verdicts.
    """
    extra = extra or {}
    scalars = {k: v for k, v in rep.items() if isinstance(v, (int, float, str)) and not isinstance(v, bool)}
    sections = [_section(f"{prefix}summary", "Summary", generic_table([{"field": k, "value": v} for k, v in scalars.items()]))]
    corr = _corr_rows(rep)
    if "ci95" in rep and "value" not in rep:  # a top-level accuracy with its CI
        corr.insert(0, {"label": "accuracy", "value": rep.get("accuracy"), "ci95": rep["ci95"], "n": rep.get("n")})
    if corr:
        sections.append(_section(f"{prefix}correlations", "Agreement with confidence intervals",
                                 generic_table([{"where": r["label"], "value": r["value"], "CI low": r["ci95"][0],
                                                 "CI high": r["ci95"][1], "n": r["n"]} for r in corr], "data corr")
                                 + _plot(plots.correlation_bars(corr, "label", "value with 95% CI"), "correlations")))
    groups = _per_group_rows(rep)
    if groups:
        sections.append(_section(f"{prefix}per-method", "Per method", generic_table(groups, "data per-method")
                                 + _plot(plots.correlation_bars([{**g, "label": f"{g['where']} · {g['method']}",
                                                                  "ci95": None} for g in groups], "label",
                                                                "per-method correlation"), "per-method correlations"),
                                 "Correlation within each editing method, as the protocol aggregates them."))
    if extra.get("points"):
        pts = extra["points"]
        sections.append(_section(f"{prefix}scatter", "Predicted vs human",
                                 _plot(plots.human_scatter({"prediction": pts}, []), "predicted vs human")))
    if extra.get("confusion"):
        c = extra["confusion"]
        sections.append(_section(f"{prefix}confusion", "Pairwise verdicts", _plot(
            plots.confusion(c["matrix"], c["labels"], "predicted", "human"), "confusion of pairwise verdicts")
            + _table([""] + [f"predicted {lab}" for lab in c["labels"]],
                     [[f"<b>human {_e(lab)}</b>"] + [f'<td class="num">{v}</td>' for v in row]
                      for lab, row in zip(c["labels"], c["matrix"])], "data confusion"),
            f"Predicted tie when |score(A) − score(B)| ≤ {_num(c.get('threshold'))} (the calibrated threshold)."))
    sections.append(_section(f"{prefix}raw", "Full result", "<details><summary>JSON</summary><pre>"
                             f"{_e(json.dumps(_finite(dict(rep)), indent=1, default=str))}</pre></details>"))
    return sections


def render_meta_report(rep: Mapping[str, Any], title: str, extra: Mapping[str, Any] | None = None) -> str:
    """HTML of a meta-evaluation report dict (``editlens meta-eval ... --json``'s document);
    ``extra`` as in :func:`meta_sections`."""
    scalars = {k: v for k, v in rep.items() if isinstance(v, (int, float, str)) and not isinstance(v, bool)}
    stat_keys = [k for k in ("value", "accuracy", "n_items", "n", "n_unparsable", "n_missing") if k in scalars]
    stat_html = "".join(f'<div class="stat" data-stat="{_e(k)}"><b>{_num(scalars[k])}</b><span>{_e(k)}</span></div>'
                        for k in stat_keys)
    header = (f"<h1>editlens meta-evaluation · {_e(title)}</h1><div class=\"sub\">benchmark "
              f"<code>{_e(rep.get('benchmark', '?'))}</code> · protocol <code>{_e(rep.get('protocol', '?'))}</code>"
              f"{' · ' + _e(rep['aggregation_note']) if rep.get('aggregation_note') else ''}</div>"
              f'<div class="stats">{stat_html}</div>')
    return _page(f"editlens meta-evaluation: {title}", header, "\n".join(meta_sections(rep, extra)), {})


def write_meta_report(rep: Mapping[str, Any], path: str | Path, title: str,
                      extra: Mapping[str, Any] | None = None) -> Path:
    from editlens.core.io import atomic_write

    page = render_meta_report(rep, title, extra)
    atomic_write(path, lambda fh: fh.write(page))
    os.chmod(path, 0o644)
    return Path(path)

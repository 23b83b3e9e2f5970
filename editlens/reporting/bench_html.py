"""The HTML report of ``editlens bench run``: the paper's table per model
(value, 95% CI, n), the counts of unscored / failed / skipped edits, and the
judge's identity and prompts (official, or editlens' marked fallback)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Mapping

from editlens.reporting.markup import esc, generic_table, render_page, section, text_items, write_page


def _cell(c: Mapping[str, Any] | None) -> str:
    if not c or c.get("value") is None:
        return "–"
    ci = c.get("ci95")
    return f"{c['value']:.3f}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "") + f" (n={c['n']})"


def render_bench_report(table: Mapping[str, Any]) -> str:
    title = table.get("title", table["benchmark"])
    prompts = table.get("prompts") or {}
    warn = ""
    if prompts and not prompts.get("from_clone"):
        warn = ('<p class="hint"><b>Judge prompts: editlens fallback wording</b>, not the benchmark\'s official '
                "prompts (give --prompts-from CLONE): numbers are not comparable to the paper's.</p>")
    from editlens.bench.table import reading_lines

    how = "".join(f'<p class="hint">{esc(line)}</p>' for line in reading_lines(table))
    from editlens.bench.table import scripted_warning

    if scripted_warning(table):
        warn = f'<p class="hint"><b>{esc(scripted_warning(table) or "")}</b></p>' + warn
    header = (f"<h1>editlens bench · {esc(title)}</h1><div class=\"sub\">protocol: {esc(table.get('protocol', ''))}"
              f"</div>{warn}{how}")
    sections = []
    comp = table.get("comparison")
    if comp and len(table["models"]) > 1:
        rows = []
        for r in comp["rows"]:
            row = {"#": str(r.get("rank") or "–")} if comp.get("ranked_by") else {}
            row["model"] = r["model"]
            for c, cell, best in zip(comp["columns"], r["cells"], r["best"]):
                row[c["name"]] = ("★ " if best else "") + _cell(cell)
            rows.append(row)
        note = comp["ranking"] + "; ★ each column's best"
        sections.append(section("compared", "Models compared", generic_table(rows) + f'<p class="hint">{esc(note)}</p>'))
    for model, m in table["models"].items():
        c = m.get("counts", {})
        body = (f"<p>{c.get('items', 0)} items: {c.get('scored', 0)} scored, <b>{c.get('unscored', 0)} unscored</b> "
                f"(judge answer unreadable or refused: missing, not zero), {c.get('failed', 0)} failed, "
                f"{c.get('skipped', 0)} skipped (no output)</p>")
        for sec in m["sections"]:
            rows = [{"": r["row"], **{f: _cell(r["cells"].get(f)) for f in sec["figures"]}}
                    for r in sec["rows"] + [sec["overall"]]]
            body += f"<h3>{esc(sec['name'])}</h3>" + generic_table(rows) + f"<p class=\"hint\">overall: {esc(sec['overall_rule'])}</p>"
        if c.get("skipped_paths"):
            body += f"<details><summary>skipped edits</summary><ul>{text_items(c['skipped_paths'])}</ul></details>"
        anchor = hashlib.sha256(model.encode()).hexdigest()[:8]  # stable across runs, unlike hash()
        sections.append(section(f"model-{anchor}", f"model {model}", body))
    run_html = (table.get("files") or {}).get("run_html")
    if run_html:  # the edits: every image and answer, in the run's own report beside this one
        rel = Path(run_html).relative_to(Path(run_html).parent.parent).as_posix()
        sections.append(section("edits", "The edits", f'<p>Every edit\'s images, the judge\'s answers and the '
                                f'leaderboard: <a href="{esc(rel)}">{esc(rel)}</a> (<code>editlens report</code> of '
                                '<code>run/</code>).</p>'))
    ident = {"judge": table.get("judge"), "prompts": prompts or None, "metrics": table.get("metrics"),
             "bootstrap": table.get("bootstrap")}
    sections.append(section("identity", "Judge, prompts and settings",
                             generic_table([{"what": k, "value": str(v)} for k, v in ident.items() if v])))
    return render_page(f"editlens bench: {title}", header, "\n".join(sections), {})


def write_bench_report(table: Mapping[str, Any], path: str | Path) -> Path:
    return write_page(path, render_bench_report(table))


def write_bench_html(table: Mapping[str, Any], root: str | Path) -> dict[str, Path]:
    """A bench folder's HTML: the edits' own report (``run/report.html``: every image and judge answer,
    with the table's bootstrap) and ``report.html`` linking it; returns ``{"run_html": ..., "html": ...}``.
    Called by :func:`editlens.runner.bench_results.write_bench_folder`, the one writer of a bench folder."""
    from editlens.reporting.html import write_run_report

    root = Path(root)
    boot = table.get("bootstrap") or {}
    run_html = write_run_report(root / "run", n_boot=boot.get("n", 1000), seed=boot.get("seed", 0))
    files = {**(table.get("files") or {}), "run_html": str(run_html)}
    html = write_bench_report({**table, "files": files}, root / "report.html")
    return {"run_html": run_html, "html": html}

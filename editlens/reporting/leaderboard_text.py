"""The run report's leaderboard outside the browser: ``editlens runs leaderboard``.

:func:`leaderboard_document` reads the same collected leaderboard the HTML
report draws (:func:`editlens.reporting.collect.collect_run`: ranked columns
with their direction and what they measure, bootstrap CIs, the paired test
against the next editor, no-op flags, coverage, similarity columns apart, and
why nothing ranks when nothing does; the run's pairwise arena, when it has one);
:func:`render` writes it as a terminal
table, Markdown, LaTeX (booktabs), CSV or JSON, so a paper's table is one
command.
"""

from __future__ import annotations

import csv
import io
import json
from typing import Any, Callable, Mapping

FORMATS = ("table", "md", "latex", "csv", "json")


def leaderboard_document(data: Mapping[str, Any]) -> dict[str, Any]:
    """The leaderboard of a collected run as plain rows (see module docstring)."""
    from editlens.reporting.leaderboard import direction_words

    lb = data.get("leaderboard") or {}
    labels = data.get("measure_labels") or {}
    scope_label = {s["key"]: s["label"] for s in lb.get("scopes") or []}
    tables = []
    for t in lb.get("tables") or []:
        flags = (lb.get("noop") or {}).get(t["scope"]) or {}
        pairs = {p["better"]: p for p in t["pairs"]}
        rows = []
        for r in t["rows"]:
            p = pairs.get(r["model"])
            f = flags.get(r["model"]) or {}
            rows.append({"rank": r["rank"], "editor": r["model"], "mean": r["mean"], "ci": r["ci"], "n": r["n"],
                         "sources": r.get("sources"), "of_sources": r.get("of_sources"),
                         "vs_next": None if p is None else {"editor": p["worse"], "p": p["p"], "n": p["n"],
                                                            "significant": p["significant"]},
                         "noop": (f"{f['unchanged']}/{f['checked']} edits unchanged" if f.get("unchanged") else None)})
        tables.append({"scope": t["scope"], "scope_label": scope_label.get(t["scope"], t["scope"]),
                       "evaluator": t["evaluator"], "measures": labels.get(t["measures"], t["measures"]),
                       "direction": direction_words(t["higher_is_better"], t["measures"]),
                       "description": (data.get("descriptions") or {}).get(t["evaluator"], ""),
                       "rows": rows, "missing": t.get("missing", [])})
    by = {(r["model"], r["evaluator"]): r for r in data.get("per_model") or []}
    similarity = []
    for ev in lb.get("unranked") or []:
        rows = [{"editor": m, "mean": by[(m, ev)]["mean"], "ci": by[(m, ev)]["ci"], "n": by[(m, ev)]["n"]}
                for m in data.get("models") or [] if (m, ev) in by and by[(m, ev)]["n"]]
        if rows:
            m = (data.get("measures") or {}).get(ev)
            similarity.append({"evaluator": ev, "measures": labels.get(m, m),
                               "direction": direction_words((data.get("higher_is_better") or {}).get(ev), m),
                               "rows": rows})
    noop = [{"editor": m, **f, "ranked": not f["noop"]} for m, f in ((lb.get("noop") or {}).get("all") or {}).items()
            if f.get("unchanged")]
    c = data.get("completeness") or {}
    arena = data.get("arena")
    return {"run": data.get("title"), "warning": data.get("warning"), "by": lb.get("by"), "test": lb.get("test"), "tables": tables,
            "similarity": similarity, "noop": noop, "why_empty": lb.get("why_empty"),
            "arena": None if not arena else {k: arena.get(k) for k in ("judge", "ties_model", "ci", "editors", "notes",
                                                                        "verdicts", "schedule", "human")},
            "completeness": {k: c.get(k) for k in ("state", "done", "total")},
            "ci": "seeded percentile bootstrap 95% CI of the mean"}


def _n(x: float | None, digits: int = 4) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def _ci(ci: list[float] | None, digits: int = 4) -> str:
    return "n < 2" if ci is None else f"[{ci[0]:.{digits}f}, {ci[1]:.{digits}f}]"


def _vs(v: Mapping[str, Any] | None, latex: bool = False) -> str:
    if v is None:
        return ""
    if v["p"] is None:
        return f"not tested vs {v['editor']} ({v['n']} shared)"
    p = "p < 0.001" if v["p"] <= 0.001 else f"p = {v['p']:.3g}"
    sym = (r"$\gg$" if latex else "≫") if v["significant"] else (r"$\approx$" if latex else "≈")
    return f"{sym} {v['editor']} ({p}, {v['n']} shared)"


def _coverage(r: Mapping[str, Any]) -> str:
    if r.get("sources") is None or r.get("of_sources") is None or r["sources"] >= r["of_sources"]:
        return str(r["n"])
    return f"{r['n']} ({r['sources']} of {r['of_sources']} sources)"


def _head(t: Mapping[str, Any]) -> str:
    scope = "" if t["scope"] == "all" else f" · {t['scope_label']}"
    return f"{t['evaluator']} ({t['measures']}, {t['direction']}){scope}"


def _rows(t: Mapping[str, Any], latex: bool = False) -> list[list[str]]:
    out = []
    for r in t["rows"]:
        name = r["editor"] + (f" [no-op: {r['noop']}, not ranked]" if r["rank"] is None and r["noop"] else
                              f" [{r['noop']}]" if r["noop"] else "")
        out.append(["–" if r["rank"] is None else str(r["rank"]), name, _n(r["mean"]), _ci(r["ci"]), _coverage(r),
                    _vs(r["vs_next"], latex)])
    return out


HEAD = ["#", "editor", "mean", "95% CI", "n", "vs the next editor"]
ARENA_HEAD = ["#", "editor", "rating", "95% CI", "Elo", "rank CI", "W-L-T"]


def _arena_head(a: Mapping[str, Any]) -> str:
    return f"pairwise arena judged by {a['judge']} (Bradley-Terry, {a['ties_model']}; {a['ci']})"


def _arena_value(r: Mapping[str, Any], fmt: str, key: str) -> str:
    """An arena rating, or what stands in its place (a separated editor has none)."""
    if r.get(key) is not None:
        return fmt.format(r[key])
    return "separated" if "separation" in (r.get("rating_note") or "") else "–"


def _arena_ci(r: Mapping[str, Any]) -> str:
    if r.get("ci"):
        return _ci(r["ci"], 3)
    return "too few sources" if "too few" in (r.get("rating_note") or "") else "–"


def _arena_rows(a: Mapping[str, Any]) -> list[list[str]]:
    return [["–" if r["rank"] is None else str(r["rank"]),
             r["editor"] + (f" [no-op: {r['noop']}, not ranked]" if r.get("noop") and r["rank"] is None else ""),
             _arena_value(r, "{:+.3f}", "rating"), _arena_ci(r), _arena_value(r, "{:.0f}", "elo"),
             "–" if r["rank_ci"] is None else f"{r['rank_ci'][0]}-{r['rank_ci'][1]}",
             f"{r['wins']}-{r['losses']}-{r['ties']}"] for r in a["editors"]]


def _footer(doc: Mapping[str, Any]) -> list[str]:
    lines = []
    for f in doc["noop"]:
        lines.append(f"no-op flag: {f['editor']}: {f['unchanged']}/{f['checked']} edits unchanged (by "
                     f"{', '.join(f['by'])})" + ("" if f["ranked"] else "; not ranked"))
    if doc["why_empty"]:
        lines.append("nothing ranks the editors:")
        lines += [f"  - {w}" for w in doc["why_empty"]["why"]]
        lines.append("to rank them, add one of:")
        lines += [f"  - {a}" for a in doc["why_empty"]["add"]]
    c = doc["completeness"]
    if c.get("state") and c["state"] != "finished":
        lines.append(f"run {c['state']}: {c['done']} of {c['total']} edits have every result")
    if doc["tables"]:
        lines.append(f"mean of scored edits, {doc['ci']}; vs the next editor: {doc['test']}")
    return lines


def _plain(doc: Mapping[str, Any]) -> str:
    out: list[str] = [f"WARNING: {doc['warning']}", ""] if doc.get("warning") else []

    def table(rows: list[list[str]]) -> None:
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        out.extend("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)

    for t in doc["tables"]:
        out.append(_head(t))
        table([HEAD] + _rows(t))
        out.append("")
    if doc.get("arena"):
        out.append(_arena_head(doc["arena"]))
        table([ARENA_HEAD] + _arena_rows(doc["arena"]))
        out += [f"note: {n}" for n in doc["arena"].get("notes") or []] + [""]
    for s in doc["similarity"]:
        out.append(f"{s['evaluator']} ({s['direction']}) — similarity to the source, not a ranking")
        table([["editor", "mean", "95% CI", "n"]] + [[r["editor"], _n(r["mean"]), _ci(r["ci"]), str(r["n"])]
                                                       for r in s["rows"]])
        out.append("")
    out += _footer(doc)
    return "\n".join(out).rstrip() + "\n"


def _md(doc: Mapping[str, Any]) -> str:
    def esc(x: str) -> str:
        return x.replace("|", "\\|")

    out: list[str] = [f"**WARNING: {esc(doc['warning'])}**", ""] if doc.get("warning") else []
    for t in doc["tables"]:
        out += [f"**{esc(_head(t))}**", "", "| " + " | ".join(HEAD) + " |", "|" + "---|" * len(HEAD)]
        out += ["| " + " | ".join(esc(c) for c in r) + " |" for r in _rows(t)]
        out.append("")
    if doc.get("arena"):
        out += [f"**{esc(_arena_head(doc['arena']))}**", "", "| " + " | ".join(ARENA_HEAD) + " |",
                "|" + "---|" * len(ARENA_HEAD)]
        out += ["| " + " | ".join(esc(c) for c in r) + " |" for r in _arena_rows(doc["arena"])]
        out += [f"- {esc(n)}" for n in doc["arena"].get("notes") or []] + [""]
    for s in doc["similarity"]:
        out += [f"**{esc(s['evaluator'])} ({esc(s['direction'])}): similarity to the source, not a ranking**", "",
                "| editor | mean | 95% CI | n |", "|---|---|---|---|"]
        out += [f"| {esc(r['editor'])} | {_n(r['mean'])} | {_ci(r['ci'])} | {r['n']} |" for r in s["rows"]]
        out.append("")
    out += [f"- {esc(x.strip())}" if not x.startswith("  ") else f"  - {esc(x.strip()[2:])}" for x in _footer(doc)]
    return "\n".join(out).rstrip() + "\n"


_TEX = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{", "}": r"\}",
        "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "–": "--", "≫": r"$\gg$", "≈": r"$\approx$"}


def _tex(x: str) -> str:
    return "".join(_TEX.get(ch, ch) for ch in x)


def _latex(doc: Mapping[str, Any]) -> str:
    out = ["% editlens runs leaderboard: needs \\usepackage{booktabs}"]
    warn = f"WARNING: {doc['warning']}. " if doc.get("warning") else ""
    if warn:
        out.append("% " + _tex(warn))
    for t in doc["tables"]:
        out += [r"\begin{table}[t]", r"\centering", r"\caption{" + _tex(warn + _head(t)) + ". Mean of scored edits with a "
                "95\\% bootstrap CI; vs the next editor: paired bootstrap over shared sources.}",
                r"\begin{tabular}{rllllp{5cm}}", r"\toprule", " & ".join(_tex(h) for h in HEAD) + r" \\", r"\midrule"]
        for r in t["rows"]:
            cells = [_tex(c) for c in _rows(t)[t["rows"].index(r)][:5]] + [_vs(r["vs_next"], latex=True).replace("_", r"\_")]
            out.append(" & ".join(cells) + r" \\")
        out += [r"\bottomrule", r"\end{tabular}", r"\end{table}", ""]
    if doc.get("arena"):
        out += [r"\begin{table}[t]", r"\centering", r"\caption{" + _tex(warn + _arena_head(doc["arena"])) + "}",
                r"\begin{tabular}{rllllll}", r"\toprule", " & ".join(_tex(h) for h in ARENA_HEAD) + r" \\", r"\midrule"]
        out += [" & ".join(_tex(c) for c in r) + r" \\" for r in _arena_rows(doc["arena"])]
        out += [r"\bottomrule", r"\end{tabular}", r"\end{table}", ""]
    for s in doc["similarity"]:
        out += [r"\begin{table}[t]", r"\centering",
                r"\caption{" + _tex(f"{s['evaluator']} ({s['direction']}): similarity to the source, not a ranking") + "}",
                r"\begin{tabular}{llll}", r"\toprule", r"editor & mean & 95\% CI & n \\", r"\midrule"]
        out += [f"{_tex(r['editor'])} & {_n(r['mean'])} & {_ci(r['ci'])} & {r['n']} \\\\" for r in s["rows"]]
        out += [r"\bottomrule", r"\end{tabular}", r"\end{table}", ""]
    out += ["% " + _tex(line) for line in _footer(doc)]
    return "\n".join(out).rstrip() + "\n"


def _csv(doc: Mapping[str, Any]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["scope", "evaluator", "kind", "direction", "rank", "editor", "mean", "ci_low", "ci_high", "n",
                "sources", "of_sources", "vs_next", "p_vs_next", "significant_vs_next", "noop"]
               + (["warning"] if doc.get("warning") else []))
    tail = [doc["warning"]] if doc.get("warning") else []

    def put(row: list[Any]) -> None:
        w.writerow(row + tail)

    for t in doc["tables"]:
        for r in t["rows"]:
            v = r["vs_next"] or {}
            put([t["scope"], t["evaluator"], "ranked", t["direction"], r["rank"] or "", r["editor"], r["mean"],
                        *(r["ci"] or ["", ""]), r["n"], r["sources"], r["of_sources"], v.get("editor", ""),
                        "" if v.get("p") is None else v["p"], v.get("significant", ""), r["noop"] or ""])
    if doc.get("arena"):
        a = doc["arena"]
        for r in a["editors"]:
            put(["all", f"arena: {a['judge']}", "pairwise (Bradley-Terry rating)", "higher is better",
                 r["rank"] or "", r["editor"], "" if r["rating"] is None else r["rating"],
                 *(r["ci"] or ["", ""]), r["comparisons"], "", "", "", "", "",
                        f"{r['noop']}" if r.get("noop") else ""])
    for s in doc["similarity"]:
        for r in s["rows"]:
            put(["all", s["evaluator"], "similarity (not a ranking)", s["direction"], "", r["editor"], r["mean"],
                        *(r["ci"] or ["", ""]), r["n"], "", "", "", "", "", ""])
    return buf.getvalue()


_RENDER: dict[str, Callable[[Mapping[str, Any]], str]] = {
    "table": _plain, "md": _md, "latex": _latex, "csv": _csv,
    "json": lambda doc: json.dumps(doc, indent=2, default=str) + "\n",
}


def render(doc: Mapping[str, Any], fmt: str = "table") -> str:
    """The leaderboard document in one of :data:`FORMATS`.

    >>> doc = {"tables": [{"scope": "all", "scope_label": "all edits", "evaluator": "q", "measures": "edit quality",
    ...        "direction": "higher is better", "rows": [{"rank": 1, "editor": "a_b", "mean": 0.5, "ci": [0.4, 0.6],
    ...        "n": 3, "sources": 3, "of_sources": 4, "vs_next": None, "noop": None}]}], "similarity": [], "noop": [],
    ...        "why_empty": None, "completeness": {}, "ci": "CI", "test": "test", "arena": None}
    >>> print(render(doc, "md").splitlines()[4])
    | 1 | a_b | 0.5000 | [0.4000, 0.6000] | 3 (3 of 4 sources) |  |
    >>> "a\\\\_b" in render(doc, "latex")
    True
    """
    if fmt not in _RENDER:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    return _RENDER[fmt](doc)

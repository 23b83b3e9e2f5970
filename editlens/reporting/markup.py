"""The small HTML pieces every report page is made of: escaping, number formats,
tables, sections, plots, stat boxes, the page shell (``assets/report.html``) and
writing a page. The run, meta-evaluation, bench and trust pages all build from
these, so a table or a number reads the same on each of them.

>>> data_table(["a"], [[esc("<b>")]])
'<div class="tablewrap"><table class="data"><thead><tr><th>a</th></tr></thead><tbody><tr><td>&lt;b&gt;</td></tr></tbody></table></div>'
"""

from __future__ import annotations

import base64
import html
import json
import math
import os
import re
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence
from urllib.parse import quote

from editlens.core.json_safe import json_safe

#: the page's icon (an inline SVG: a page that asks the server for /favicon.ico logs a 404)
FAVICON = ("data:image/svg+xml," + quote(
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16"><rect width="16" height="16" rx="3" fill="#1d2330"/>'
    '<rect x="3" y="4" width="7" height="7" fill="none" stroke="#f5c400" stroke-width="1.6"/>'
    '<rect x="7" y="7" width="6" height="5" fill="none" stroke="#e53935" stroke-width="1.6"/></svg>', safe=":/=\" "))


def asset(name: str) -> str:
    """A file of ``editlens/reporting/assets`` (the page template, its CSS and script)."""
    return resources.files("editlens.reporting").joinpath("assets", name).read_text(encoding="utf-8")


def esc(value: Any) -> str:
    """``value`` as HTML text (``None`` is empty).

    >>> esc('a<b & "c"'), esc(None)
    ('a&lt;b &amp; &quot;c&quot;', '')
    """
    return html.escape("" if value is None else str(value))


def num(v: Any, *, scientific: bool = True) -> str:
    """Compact number: 4 significant digits, '–' for missing or NaN; very small or large
    floats in scientific notation unless ``scientific=False``.

    >>> num(0.123456), num(None), num(float("nan")), num(12), num(0.0004), num(0.0004, scientific=False)
    ('0.1235', '–', '–', '12', '4.000e-04', '0.0004')
    """
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "–"
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return esc(v)
    if isinstance(v, int):
        return str(v)
    a = abs(v)
    return f"{v:.3e}" if scientific and a and (a < 1e-3 or a >= 1e5) else f"{v:.4g}"


def pct(v: Any) -> str:
    """A share as a percentage with one decimal.

    >>> pct(0.8125), pct(None)
    ('81.2%', '–')
    """
    return "–" if v is None else f"{100 * v:.1f}%"


def ci_span(ci: Sequence[Any] | None, fmt: Callable[[Any], str] = num) -> str:
    """A 95% confidence interval under its value (empty when there is none).

    >>> ci_span([0.1, 0.25]), ci_span(None), ci_span([None, None])
    ('<span class="ci">95% CI [0.1, 0.25]</span>', '', '')
    """
    if not ci or ci[0] is None:
        return ""
    return f'<span class="ci">95% CI [{fmt(ci[0])}, {fmt(ci[1])}]</span>'


def script_json(obj: Any) -> str:
    """JSON safe inside a <script> element (no '</script>' or '<!--' can appear).

    >>> script_json({"a": "</script>", "b": float("nan")})
    '{"a":"\\\\u003c/script>","b":null}'
    """
    try:  # the data is normally finite already: skip the slow walk
        text = json.dumps(obj, separators=(",", ":"), allow_nan=False)
    except ValueError:
        text = json.dumps(json_safe(obj), separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c")


def data_uri(body: bytes, mime: str) -> str:
    """``body`` as a base64 data URI."""
    return f"data:{mime};base64," + base64.b64encode(body).decode("ascii")


def data_table(headers: Sequence[str], rows: Sequence[Sequence[str]], cls: str = "data", attrs: str = "") -> str:
    """A table in its scrolling wrapper. ``rows`` hold HTML cells; a cell that is not a
    ``<td ...>`` already is wrapped in one. ``attrs``: more attributes of the table."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(c if c.startswith("<td") else f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    more = f" {attrs}" if attrs else ""
    return (f'<div class="tablewrap"><table class="{cls}"{more}><thead><tr>{head}</tr></thead>'
            f"<tbody>{body}</tbody></table></div>")


def generic_table(rows: Sequence[Mapping[str, Any]], cls: str = "data") -> str:
    """A table of dict rows, columns in order of first appearance (no fixed column set).

    >>> "<th>no visual change</th>" in generic_table([{"model": "a", "no_visual_change": 2}])
    True
    """
    cols: list[str] = []
    for r in rows:
        cols += [k for k in r if k not in cols]
    body = [[f'<td class="num">{num(r.get(c))}</td>' if isinstance(r.get(c), (int, float)) and not isinstance(r.get(c), bool)
             else ("–" if r.get(c) is None else esc(json.dumps(r[c]) if isinstance(r[c], (dict, list)) else r[c]))
             for c in cols] for r in rows]
    return data_table([c.replace("_", " ") for c in cols], body, cls)


def section(sid: str, title: str, body: str, hint: str = "") -> str:
    """A titled section of a page (``hint``: HTML of the line under the title)."""
    hint_html = f'<p class="hint">{hint}</p>' if hint else ""
    return f'<section id="{sid}"><h2>{esc(title)}</h2>{hint_html}{body}</section>'


def plot_img(uri: str | None, alt: str) -> str:
    """A plot at its own size (its type legible); a screen narrower than it scrolls it sideways."""
    return f'<div class="plot-scroll"><img class="plot" alt="{esc(alt)}" src="{uri}"></div>' if uri else ""


def stat_box(key: str, value_html: str, label: str) -> str:
    """One headline figure of a page's header (``value_html`` is HTML already)."""
    return f'<div class="stat" data-stat="{esc(key)}"><b>{value_html}</b><span>{esc(label)}</span></div>'


def select_options(values: Sequence[tuple[str, str]]) -> str:
    """``<option>`` elements of ``(value, label)`` pairs."""
    return "".join(f'<option value="{esc(k)}">{esc(v)}</option>' for k, v in values)


def text_items(items: Sequence[Any]) -> str:
    """``<li>`` elements of plain texts (escaped)."""
    return "".join(f"<li>{esc(x)}</li>" for x in items)


def render_page(title: str, header: str, sections: str, data: Any, thumbs: Mapping[str, str] | None = None,
         full: Mapping[str, str] | None = None) -> str:
    """A whole page from the template: header and sections (HTML), and the JSON the page's
    script reads (``data``: an object, or its JSON already made safe for a script)."""
    from editlens import __version__

    parts = {"HEAD": page_head(title, asset("report.css")), "VERSION": esc(__version__), "HEADER": header,
             "SECTIONS": sections, "DATA": data if isinstance(data, str) else script_json(data),
             "THUMBS": script_json(thumbs or {}),
             "FULL": script_json(full or {}), "JS": asset("report.js")}
    return fill(asset("report.html"), parts)


def fill(template: str, parts: Mapping[str, str]) -> str:
    """``template`` with each ``__NAME__`` replaced by ``parts[NAME]`` (unknown names stay), in one
    pass, so text inserted for one placeholder is never scanned for another.

    >>> fill("<b>__A__</b>__B__", {"A": "__B__", "B": "x"})
    '<b>__B__</b>x'
    """
    return re.sub(r"__([A-Z]+)__", lambda m: parts.get(m.group(1), m.group(0)), template)


def page_head(title: str, css: str) -> str:
    """The head every editlens page starts with (``assets/head.html``: doctype, charset,
    viewport, generator, title, the inline icon, the page's CSS), filled in: the report's
    pages and the labelling page of ``editlens annotate`` share it."""
    from editlens import __version__

    head = fill(asset("head.html"), {"TITLE": esc(title), "VERSION": esc(__version__), "FAVICON": FAVICON,
                                     "CSS": css})
    return head.removesuffix("\n")  # the page template puts it on a line of its own


def write_page(path: str | Path, text: str) -> Path:
    """Write a page atomically, readable by all (a report is meant to be shared; the
    temporary file it came from is private)."""
    from editlens.core.io import atomic_write

    atomic_write(path, lambda fh: fh.write(text))
    os.chmod(path, 0o644)
    return Path(path)

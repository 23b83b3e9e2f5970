"""Self-contained HTML reports: a run (leaderboard, editor comparison, edit cards with
boxes, an image inspector, tables, plots) and a meta-evaluation (system-level
agreement, correlations, CIs, confusion).

One file with everything embedded (thumbnails as JPEG data URIs, CSS and plain
JavaScript inline, plots drawn by the page as SVG): it opens offline and can be
mailed. Full-size images are embedded, copied next to the report, linked, or
left out (``images=``); by default the file holds no absolute or ``../`` path.
Cards are rendered by the page's script one page at a time, so a report of
thousands of edits stays quick.

>>> page = render_meta_report({"benchmark": "pairwise", "accuracy": 0.75, "n": 4}, "demo")
>>> page.startswith("<!DOCTYPE html>") and "0.75" in page
True
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence
from urllib.parse import quote

from editlens.core.embedded import parse_ref
from editlens.core.io import atomic_write
from editlens.core.json_safe import json_safe
from editlens.errors import InputError
from editlens.reporting import plots
from editlens.reporting.leaderboard import direction_words
from editlens.reporting.markup import (
    ci_span,
    data_table,
    data_uri,
    esc,
    generic_table,
    num,
    plot_img,
    render_page,
    script_json,
    section,
    select_options,
    stat_box,
    text_items,
    write_page,
)
from editlens.reporting.memo import ReportCache
from editlens.reporting.payload import SAMPLE_HEAVY, SAMPLE_LIGHT, PagePayload, RunData

#: thumbnails' longest side in CSS pixels (they are made at twice that, for 2x screens);
#: big runs get smaller ones to keep the file light
THUMB_SIZE = 240
THUMB_SIZE_LARGE_RUN = 160
LARGE_RUN = 300
#: how full-size images reach the report (see :func:`render_run_report`)
IMAGE_MODES = ("auto", "embed", "copy", "link", "none")
#: ``auto`` embeds the full-size images when they weigh at most this much in all, else copies them
EMBED_LIMIT = 32 * 1024 * 1024


# ----------------------------------------------------------------------------------------------- run report

def default_link(out_dir: Path | None) -> Callable[[str], str | None]:
    """Links to full-size images relative to the report's folder (``../`` included), else
    file URIs: the ``link`` image mode, for reports that stay on this machine. An image
    embedded in a table has no file to link to (``None``: the inspector shows its thumbnail)."""

    def link(path: str) -> str | None:
        if parse_ref(path) is not None:  # an image inside a table file: nothing to link to
            return None
        p = Path(path).resolve()
        if out_dir is not None:
            try:
                return quote(Path(os.path.relpath(p, out_dir.resolve())).as_posix())
            except ValueError:  # another drive (Windows)
                pass
        return p.as_uri()

    return link


def _copy_link(out_dir: Path, folder: str) -> Callable[[str], str | None]:
    """The ``copy`` image mode: each image is copied (never hard-linked: the copy is the
    report's own) into ``out_dir/folder/`` under a name unique to its path; links are
    relative to the report."""
    target = out_dir / folder

    def link(path: str) -> str | None:
        from editlens.reporting.thumbs import image_bytes, image_file_name

        if parse_ref(path) is not None:  # an image inside a table file: its bytes become the copy
            name = hashlib.blake2b(path.encode(), digest_size=6).hexdigest() + "_" + image_file_name(path)
            dst = target / name
            if not dst.exists():
                found = image_bytes(path)
                if found is None:
                    return None
                target.mkdir(parents=True, exist_ok=True)
                atomic_write(dst, lambda fh: fh.write(found[0]), mode="wb")
            return quote(f"{folder}/{name}")
        src = Path(path)
        name = hashlib.blake2b(str(src.resolve()).encode(), digest_size=6).hexdigest() + "_" + src.name
        dst = target / name
        if not (dst.exists() and dst.stat().st_size == src.stat().st_size):
            target.mkdir(parents=True, exist_ok=True)
            tmp = dst.with_name(dst.name + ".tmp")
            tmp.unlink(missing_ok=True)
            # a copy, never a hard link: editing the report's image must not edit the original
            shutil.copyfile(src, tmp)
            os.replace(tmp, dst)
        return quote(f"{folder}/{name}")

    return link


def _image_mode(mode: str, paths: Sequence[str], out_dir: Path | None) -> str:
    if mode not in IMAGE_MODES:
        raise InputError(f"--images must be one of {', '.join(IMAGE_MODES)}, got {mode!r}")
    if mode != "auto":
        if mode == "copy" and out_dir is None:
            raise InputError("--images copy needs the report's folder")
        return mode
    total = 0
    for p in set(paths):
        ref = parse_ref(p)
        if ref is not None:  # an image inside a table: its own bytes count
            from editlens.reporting.thumbs import image_bytes

            found = image_bytes(p)
            total += len(found[0]) if found else 0
            continue
        try:
            total += os.path.getsize(p)
        except OSError:
            pass
    if total <= EMBED_LIMIT:
        return "embed"
    return "copy" if out_dir is not None else "none"


def _page_scores(scores: Mapping[str, Any], layers: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Scores as the page needs them: a box layer's items are in ``boxes`` already, so they
    leave the details (the page would carry them twice); ``items_found`` counts them."""
    out = {}
    for ev, sc in scores.items():
        layer = layers.get(ev)
        d = sc.get("details")
        if layer and isinstance(d, dict):
            path = layer["items"].split(".")
            if len(path) == 1 and path[0] in d:
                d = {k: v for k, v in d.items() if k != path[0]}
                d["items_found"] = len(sc["details"][path[0]] or [])
            elif len(path) == 2 and isinstance(d.get(path[0]), dict) and path[1] in d[path[0]]:
                inner = {k: v for k, v in d[path[0]].items() if k != path[1]}
                d = {**d, path[0]: inner, "items_found": len(d[path[0]][path[1]] or [])}
            sc = {**sc, "details": d}
        out[ev] = sc
    return out




def _sample_json(s: Mapping[str, Any], images: Mapping[str, Any], layers: Mapping[str, Mapping[str, Any]],
                 layers_key: str, used: dict[tuple, str], earlier: Mapping[tuple, str]) -> str:
    """One sample as page JSON; the heavy part (the part its results give) is taken from
    ``earlier`` (the previous build's, by the content key collect gave the sample) when there."""
    key = (s.get("_key"), layers_key)
    heavy = earlier.get(key) if s.get("_key") is not None else None
    if heavy is None:
        heavy = script_json({"scores": _page_scores(s["scores"], layers), **{k: s[k] for k in SAMPLE_HEAVY if k in s}})
    if s.get("_key") is not None:
        used[key] = heavy
    light = script_json({**{k: s[k] for k in SAMPLE_LIGHT if k in s}, "images": images})
    return light[:-1] + "," + heavy[1:]


def render_run_report(data: RunData, out_dir: str | Path | None = None,
                      link: Callable[[str], str | None] | None = None, thumb_size: int | None = None, *,
                      images: str = "auto", images_folder: str = "report_images",
                      thumb_url: Callable[[Mapping[str, Any]], str] | None = None,
                      cache: ReportCache | None = None) -> str:
    """HTML of a run report from :func:`editlens.reporting.collect.collect_run`'s data; the
    page's script gets its :class:`~editlens.reporting.payload.PagePayload`.

    Full-size images (the inspector's zoom) reach the page as ``images`` says:
    ``embed`` (data URIs in the file), ``copy`` (into ``out_dir/images_folder``,
    linked relatively: move the folder with the report), ``link`` (relative
    links to the originals, ``../`` included: for this machine only), ``none``
    (the inspector shows the thumbnails), or ``auto`` (embed up to
    :data:`EMBED_LIMIT` in all, else copy). ``link`` (a function of the path),
    when given, overrides it: ``editlens view`` serves the images itself.
    ``thumb_url``: thumbnails as URLs (a function of :func:`~editlens.reporting.thumbs.thumbnail`'s
    dict) instead of data URIs. ``cache``: what an earlier build of this report may lend this
    one (thumbnails, page JSON of unchanged samples; default: nothing).
    """
    from editlens.reporting.thumbs import file_data_uri, thumbnails

    cache = cache if cache is not None else ReportCache()
    samples = data["samples"]
    outp = Path(out_dir) if out_dir is not None else None
    css = thumb_size or (THUMB_SIZE if len(samples) <= LARGE_RUN else THUMB_SIZE_LARGE_RUN)
    all_paths = [p for s in samples for p in s["images"].values()]
    made = thumbnails(all_paths, 2 * css, memo=cache.images)  # twice the display size: sharp on 2x screens
    mode = "served" if link is not None else _image_mode(images, all_paths, outp)
    if link is None:
        if mode == "copy":
            assert outp is not None  # _image_mode picks "copy" only with a folder to copy into
            link = _copy_link(outp, images_folder)
        elif mode == "link":
            link = default_link(outp)
    keys: dict[str, str] = {}
    thumbs: dict[str, str] = {}
    full: dict[str, str] = {}
    full_keys: dict[str, str] = {}
    per_sample_images = []
    for s in samples:
        imgs = {}
        for role, path in s["images"].items():
            t = made[path]
            if "error" in t:
                imgs[role] = {"error": t["error"]}
                continue
            if path not in keys:
                keys[path] = f"t{len(keys)}"
                thumbs[keys[path]] = thumb_url(t) if thumb_url else data_uri(t["jpeg"], "image/jpeg")
            entry: dict[str, Any] = {"t": keys[path], "w": t["w"], "h": t["h"], "tw": t["tw"], "th": t["th"]}
            if mode == "embed":
                if path not in full_keys:
                    uri = file_data_uri(path)
                    if uri is not None:
                        full_keys[path] = f"f{len(full_keys)}"
                        full[full_keys[path]] = uri
                if path in full_keys:
                    entry["f"] = full_keys[path]
            elif link is not None:
                href = link(path)
                if href is not None:
                    entry["href"] = href
            imgs[role] = entry
        per_sample_images.append(imgs)
    layers = data.get("layers") or {}
    layers_key = json.dumps(layers, sort_keys=True)
    used: dict[tuple, str] = {}
    fragments = [_sample_json(s, imgs, layers, layers_key, used, cache.fragments)
                 for s, imgs in zip(samples, per_sample_images)]
    cache.fragments = used  # keep this build's: the next one of a growing run reuses them
    page_json = PagePayload.from_run(data).to_json(fragments)
    return render_page(f"editlens report: {data['title']}", _run_header(data), _run_sections(data, mode), page_json,
                 thumbs, full)


_STATE_TEXT = {
    "finished": "finished",
    "interrupted": "interrupted",
    "running": "in progress",
    "stopped": "stopped before finishing",
    "unfinished": "not finished",
    "unknown": "state unknown",
}


def _category_words(data: Mapping[str, Any]) -> str:
    """What the report's categories are: edit types, or the manifest column of ``report --by``."""
    column = data.get("category_column") or "edit_type"
    return "edit type" if column == "edit_type" else column


def _completeness_html(c: Mapping[str, Any]) -> str:
    state, done, total = c["state"], c["done"], c["total"]
    of = f"{done} of {total} edits"
    says = {
        "finished": f"{of} have every result" + (f" · {esc(c['finished'])}" if c.get("finished") else ""),
        "interrupted": f"{of} have every result; stopped by Ctrl-C — rerun the same command to continue",
        "running": f"{of} so far — refresh the page to follow the run",
        "stopped": f"{of}; the run's process is gone (killed or crashed?) — rerun the same command to continue",
        "unfinished": f"{of}; the run has not recorded an end (it may still be going on another machine)",
        "unknown": "the run records no manifest",
    }[state]
    pct = 100.0 * done / total if total else 0.0
    bar = (f'<span class="bar" role="progressbar" aria-valuenow="{done}" aria-valuemax="{total}">'
           f'<i style="width:{pct:.1f}%"></i></span>') if state != "finished" or done < total else ""
    lines = [f'<div class="state" data-state="{esc(state)}"><b class="chip st-{esc(state)}">{_STATE_TEXT[state]}</b> '
             f'<span class="of" data-done="{done}" data-total="{total}">{says}</span>{bar}</div>']
    extra = []
    if c.get("skipped_rows"):
        reasons = c.get("skipped_row_reasons") or []
        items = "".join(f"<li>line {esc(line)}: {esc(reason)}</li>" for line, reason in reasons[:50])
        more = c["skipped_rows"] - min(len(reasons), 50)
        if more > 0:
            items += f"<li>… {more} more (the run recorded {len(reasons)} reasons)</li>"
        extra.append(f'<details class="skipped-rows"><summary>{c["skipped_rows"]} manifest row(s) skipped '
                     f'(--skip-invalid)</summary><ul>{items}</ul></details>')
    if c.get("n_missing_edits"):
        shown = c.get("missing_edits") or []
        items = "".join(f"<li>{esc(m.get('model'))}/{esc(m.get('id'))}: {esc(m.get('looked_for'))} not found</li>"
                        for m in shown[:50])
        if c["n_missing_edits"] > min(len(shown), 50):
            items += f"<li>… {c['n_missing_edits'] - min(len(shown), 50)} more (`editlens runs show` lists them)</li>"
        extra.append(f'<details class="missing-edits"><summary>{c["n_missing_edits"]} edit(s) without an output '
                     f'(not scored)</summary><ul>{items}</ul></details>')
    if c.get("resized"):
        extra.append(f'<span class="resized" data-resized="{c["resized"]}">{c["resized"]} edit(s) resized to the '
                     'source size before scoring (each card says which)</span>')
    if c.get("not_run"):
        items = "".join(f'<li data-evaluator="{esc(k)}"><b>{esc(k)}</b>: {esc(v)}</li>' for k, v in c["not_run"].items())
        extra.append(f'<details class="not-run" open><summary>{len(c["not_run"])} evaluator(s) did not run</summary>'
                     f"<ul>{items}</ul></details>")
    return '<div class="completeness">' + "".join(lines) + (f'<div class="extra">{"".join(extra)}</div>' if extra else "") + "</div>"


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
    sub = [f"command <code>{esc(cmd)}</code>"]
    if run.get("started"):
        sub.append(f"started {esc(run['started'])}")
    if run.get("device"):
        sub.append(f"device {esc(run['device'])}")
    if run.get("git_commit"):
        sub.append(f"git {esc(str(run['git_commit'])[:10])}")
    stats = [("edits", len(data["samples"])), ("editing models", len(data["models"])),
             ("evaluators", len(data["evaluators"])), ("unscored", counts["unscored"]), ("failed", counts["failed"]),
             ("skipped", counts["skipped"])]
    stat_html = "".join(stat_box(k, str(v), k) for k, v in stats)
    comp = _completeness_html(data["completeness"]) if data.get("completeness") else ""
    return (f"<h1>editlens report · {esc(data['title'])}</h1><div class=\"sub\">{' · '.join(sub)}</div>"
            f'{comp}<div class="stats">{stat_html}</div>')


def _run_sections(data: Mapping[str, Any], image_mode: str = "auto") -> str:
    out = []
    notes = list(data.get("notes") or [])
    if image_mode == "none":
        notes.append("full-size images are not in this report: the inspector zooms into the thumbnails "
                     "(rebuild with --images embed or --images copy)")
    if notes:
        out.append(section("notes", "Notes", f"<ul>{text_items(notes)}</ul>")
                   .replace("<section ", '<section class="notes" ', 1))
    out.append(_leaderboard_section(data))
    if data.get("arena"):
        out.append(arena_section(data["arena"]))
    if data.get("probe"):  # `editlens probe` wrote RUN_DIR/probe.json
        from editlens.reporting.trust_html import probe_section

        out.append(probe_section(data["probe"]))
    out.append(_samples_section(data))
    out.append(_similarity_section(data))
    scored_by = {r["evaluator"] for r in data.get("per_model") or [] if r["counts"].get("scored")}
    for table in data.get("summaries") or []:
        ev = table["evaluator"]
        if ev not in scored_by:  # its table would be all zeros and blanks: say why in one line instead
            reasons: dict[str, int] = {}
            for smp in data["samples"]:
                r = (smp["scores"].get(ev) or {}).get("reason")
                if r:
                    reasons[r] = reasons.get(r, 0) + 1
            top = max(reasons.items(), key=lambda kv: kv[1])[0] if reasons else "no result has a score"
            out.append(section(f"summary-{ev}", table["title"],
                                f'<p class="nothing-ranked summary-empty">No edit has a {esc(ev)} score, so its summary '
                                f"is not shown (most common reason: {esc(top)}).</p>"))
            continue
        out.append(section(f"summary-{ev}", table["title"], generic_table(table["rows"], f"data summary-{ev}"),
                            f"Contributed by the {esc(ev)} evaluator, per editing model. Samples whose model answers "
                            "could not be parsed, or that no model judged, are never guessed: rates leave them out "
                            "and count columns say how many."))
    out.append(_status_section(data))
    if data.get("human"):
        out.append(_human_section(data["human"]))
    if data["scored_evaluators"]:
        out.append(section("plots", "Score distributions", '<div class="plot-grid" data-plot="distributions"></div>',
                            "Scored values per evaluator and editing model: box = quartiles, whiskers = 5th–95th "
                            "percentile, dots = edits (up to 300 per editor)."))
    for i, (name, rep) in enumerate((data.get("meta_eval") or {}).items()):
        inner = "".join(meta_sections(rep, prefix=f"meta{i}-")).replace("<section ", "<div ").replace("</section>", "</div>")
        out.append(section(f"meta{i}", f"Meta-evaluation: {name}", inner.replace("<h2>", "<h3>").replace("</h2>", "</h3>"),
                            f"benchmark {esc(rep.get('benchmark', '?'))}, protocol {esc(rep.get('protocol', '?'))}"))
    # a line of links to the sections, so every part is one click away
    links = re.findall(r'<section (?:class="[^"]*" )?id="([^"]+)"><h2>([^<]+)</h2>', "".join(out))
    nav = '<nav class="toc">' + " · ".join(f'<a href="#{i}">{t}</a>' for i, t in links) + "</nav>"
    return nav + "\n".join(out)


def _noop_chip(flag: Mapping[str, Any] | None) -> str:
    if not flag or not flag.get("unchanged"):
        return ""
    cls = "noop" if flag["noop"] else "some-unchanged"
    word = "no-op" if flag["noop"] else "partly unchanged"
    return (f' <span class="chip {cls}" data-noop="{esc(flag["unchanged"])}/{esc(flag["checked"])}" '
            f'title="found unchanged by {esc(", ".join(flag["by"]))}">{word}: {flag["unchanged"]}/{flag["checked"]} '
            f"edits unchanged</span>")


def _leaderboard_section(data: Mapping[str, Any]) -> str:
    lb = data.get("leaderboard") or {}
    labels = data.get("measure_labels") or {}
    counts = {(r["model"], r["evaluator"]): r["counts"] for r in data["per_model"]}
    tables_by_scope: dict[str, list[dict[str, Any]]] = {}
    for t in lb.get("tables", []):
        tables_by_scope.setdefault(t["scope"], []).append(t)
    parts = []
    scopes = lb.get("scopes") or [{"key": "all", "label": "all edits", "n": len(data["samples"])}]
    if len(scopes) > 1:
        parts.append('<div class="controls"><label>group by<select id="lb-group"><option value="all">all edits</option>'
                     f'<option value="type">{esc(_category_words(data))}</option></select></label></div>')
    flags = (lb.get("noop") or {}).get("all") or {}
    flagged = [(m, f) for m, f in flags.items() if f.get("unchanged")]
    if flagged:
        parts.append('<ul class="noop-flags">' + "".join(
            f'<li data-model="{esc(m)}"><b>{esc(m)}</b>{_noop_chip(f)} — found unchanged by {esc(", ".join(f["by"]))}'
            + (": not ranked (an editor that changes nothing must not win)" if f["noop"] else "") + "</li>"
            for m, f in flagged) + "</ul>")
    empty = lb.get("why_empty")
    if empty:
        why, add = text_items(empty["why"]), text_items(empty["add"])
        arena = ('<p class="see-arena">This run\'s <a href="#arena">pairwise arena</a> ranks them from pairwise '
                 "verdicts.</p>") if data.get("arena") else ""
        parts.append('<div class="nothing-ranked"><p><b>Nothing here ranks the editors.</b> No evaluator that judges '
                     "the edit produced a score:</p>"
                     f'<ul class="why">{why}</ul><p>To rank them, add one of:</p><ul class="add">{add}</ul>{arena}</div>')
    for scope in scopes:
        tabs = tables_by_scope.get(scope["key"], [])
        if not tabs:
            continue
        sflags = (lb.get("noop") or {}).get(scope["key"]) or {}
        blocks = []
        for t in tabs:
            ev = t["evaluator"]
            rows = []
            pairs = {p["better"]: p for p in t["pairs"]}
            for r in t["rows"]:
                c = counts.get((r["model"], ev), {}) if scope["key"] == "all" else {}
                other = ", ".join(f"{v} {k}" for k, v in c.items() if k != "scored" and v)
                p = pairs.get(r["model"])
                if r["rank"] is None:
                    vs = "not ranked: every checked edit unchanged"
                elif p is None:
                    vs = ""
                elif p["p"] is None:
                    vs = f'<span class="untested">not tested vs {esc(p["worse"])} ({p["n"]} shared source(s))</span>'
                else:
                    sym, word = ("≫", "better than") if p["significant"] else ("≈", "not clearly better than")
                    pv = "p < 0.001" if p["p"] <= 0.001 else f"p = {p['p']:.3g}"
                    vs = (f'<span class="{"sig" if p["significant"] else "nsig"}" data-p="{p["p"]}">{sym} {word} '
                          f'{esc(p["worse"])} ({pv}, {p["n"]} shared)</span>')
                rows.append([f'<td class="num rank">{r["rank"] if r["rank"] is not None else "–"}</td>',
                             f'<td class="editor" data-model="{esc(r["model"])}"><b>{esc(r["model"])}</b>'
                             f'{_noop_chip(sflags.get(r["model"]))}<span class="vs">{vs}</span></td>',
                             f'<td class="num" data-mean="{r["mean"]}">{num(r["mean"])}{ci_span(r["ci"])}</td>',
                             f'<td class="num">{r["n"]}{_coverage(r)}'
                             f'{("<span class=cnt>" + esc(other) + "</span>") if other else ""}</td>'])
            missing = "".join(f"<li>{esc(m)}: no scored edit</li>" for m in t.get("missing", []))
            body = (data_table(["#", "editor (vs the next one)", "mean", "n"], rows, "data lb-table",
                           f'data-evaluator="{esc(ev)}" data-scope="{esc(scope["key"])}"')
                    + (f'<ul class="missing">{missing}</ul>' if missing else "")
                    + f'<div class="plot" data-plot="lb-ci" data-evaluator="{esc(ev)}" data-scope="{esc(scope["key"])}"></div>')
            what = labels.get(t["measures"], t["measures"])
            blocks.append(f'<div class="lb" data-evaluator="{esc(ev)}"><h3>{esc(ev)} <span class="measure">'
                          f'{esc(what)} · {direction_words(t["higher_is_better"], t["measures"])}</span></h3>'
                          f'<p class="desc">{esc((data.get("descriptions") or {}).get(ev, ""))}</p>{body}</div>')
        title = "" if scope["key"] == "all" else f'<h3 class="scope-title">{esc(_category_words(data))}: {esc(scope["label"])} ({scope["n"]} edits)</h3>'
        parts.append(f'<div class="lb-scope" data-scope="{esc(scope["key"])}"{" hidden" if scope["key"] != "all" else ""}>'
                     f'{title}<div class="lb-grid">{"".join(blocks)}</div></div>')
    hint = ("Editors ranked by the evaluators that judge the edit (edit quality, instruction following, agreement "
            "with a reference edit), as each evaluator declares; similarity to the source is never ranked (see "
            "below). Mean of scored edits with a seeded percentile-bootstrap 95% CI. Between neighbours: "
            f"{esc(lb.get('test', ''))}.")
    return section("leaderboard", "Leaderboard", "".join(parts), hint)


def arena_section(doc: Mapping[str, Any]) -> str:
    """``editlens arena``'s ranking: Bradley-Terry ratings with bootstrap CIs, ties named, and
    its agreement with a human ranking when one was given."""
    v, s = doc["verdicts"], doc["schedule"]
    nxt = {n["better"]: n for n in doc.get("neighbours") or []}
    rows = []
    for r in doc["editors"]:
        n = nxt.get(r["editor"])
        vs = "" if n is None else (f'<span class="nsig">? {esc(n["worse"])} (too few sources to say)</span>'
                                   if n["p_better"] is None else
                                   f'<span class="{"sig" if n["significant"] else "nsig"}">'
                                   f'{"≫" if n["significant"] else "≈"} {esc(n["worse"])} (better in '
                                   f'{n["p_better"]:.0%} of resamples)</span>')
        rank_ci = "–" if r["rank_ci"] is None else f'{r["rank_ci"][0]}–{r["rank_ci"][1]}'
        flag = (f' <span class="chip noop">no-op: {esc(r["noop"])}</span>' if r.get("noop") and r["rank"] is None else
                f' <span class="chip some-unchanged">{esc(r["noop"])}</span>' if r.get("noop") else "")
        rows.append([f'<td class="num rank">{"–" if r["rank"] is None else r["rank"]}</td>',
                     f'<td class="editor" data-model="{esc(r["editor"])}"><b>{esc(r["editor"])}</b>{flag}'
                     f'<span class="vs">{vs}</span></td>',
                     (f'<td class="num" data-rating="{r["rating"]}">{r["rating"]:+.3f}{ci_span(r["ci"])}</td>'
                      if r.get("rating") is not None else
                      f'<td class="num" data-rating="">{esc(r.get("rating_note") or "–")}</td>'),
                     (f'<td class="num">{r["elo"]:.0f}' + (f'<span class="ci">[{r["elo_ci"][0]:.0f}, '
                                                          f'{r["elo_ci"][1]:.0f}]</span>' if r.get("elo_ci") else "")
                      + '</td>' if r.get("elo") is not None else '<td class="num">–</td>'),
                     f'<td class="num nowrap">{rank_ci}</td>',
                     f'<td class="num nowrap">{r["wins"]}–{r["losses"]}–{r["ties"]}</td>'])
    body = [f'<p class="desc">Judged by <code>{esc(doc.get("judge", "?"))}</code> on {doc["sources"]} sources: '
            f'{s["comparisons"]} of {s["all_pairs"]} possible comparisons (pairs chosen adaptively, uncertain '
            f'neighbours first; stopped: {esc(s["stopped"])}). Verdicts: {v["decided"]} decided, {v["ties"]} '
            f'{"tie" if v["ties"] == 1 else "ties"} '
            f'({v["position_bias"]} from position bias), {v["no_verdict"]} without a verdict. Bradley-Terry, '
            f'{esc(doc["ties_model"])}.</p>',
            data_table(["#", "editor (vs the next one)", "rating (log-strength)", "Elo", "rank CI", "W–L–T"], rows,
                   "data arena-table")]
    for note in doc.get("notes") or []:
        body.append(f'<p class="nothing-ranked arena-note">{esc(note)}</p>')
    h = doc.get("human")
    if h:
        body.append(f'<p class="arena-human" data-kendall="{esc(h.get("kendall"))}">Agreement with the human ranking over '
                    f'{h["n"]} editors: Kendall τ <b>{num(h.get("kendall"))}</b>, Spearman ρ '
                    f'<b>{num(h.get("spearman"))}</b>.</p>')
    return section("arena", "Pairwise arena", "".join(body),
                    f"Ratings from pairwise verdicts (editlens arena), {esc(doc['ci'])}; Elo = 1000 + 400 × rating / ln 10.")


def _coverage(row: Mapping[str, Any]) -> str:
    """"36 of 60 sources" when an editor was scored on only part of the sources (a partial run)."""
    got, of = row.get("sources"), row.get("of_sources")
    if got is None or of is None or got >= of:
        return ""
    return f'<span class="cnt coverage" data-sources="{got}" data-of="{of}">{got} of {of} sources</span>'


def _similarity_section(data: Mapping[str, Any]) -> str:
    lb = data.get("leaderboard") or {}
    evs = [e for e in lb.get("unranked", []) if any(r["evaluator"] == e for r in data["per_model"])]
    if not evs:
        return ""
    by = {(r["model"], r["evaluator"]): r for r in data["per_model"]}
    flags = (lb.get("noop") or {}).get("all") or {}
    # coverage: a partial run's means are over the sources scored so far
    total = max((data.get("source_totals") or {}).get("all", 0), len({s.get("group", s["id"]) for s in data["samples"]}))
    covered: dict[tuple[str, str], set] = {}
    for smp in data["samples"]:
        for ev, sc in smp["scores"].items():
            if sc["status"] == "scored":
                covered.setdefault((smp["model"], ev), set()).add(smp.get("group", smp["id"]))
    rows = []
    for m in data["models"]:
        cells = [f"<td><b>{esc(m)}</b>{_noop_chip(flags.get(m))}</td>"]
        for ev in evs:
            r = by.get((m, ev))
            if r is None:
                cells.append('<td class="num">–</td>')
                continue
            other = ", ".join(f"{v} {k}" for k, v in r["counts"].items() if k != "scored" and v)
            cov = _coverage({"sources": len(covered.get((m, ev), ())), "of_sources": total})
            cells.append(f'<td class="num" data-model="{esc(m)}" data-evaluator="{esc(ev)}">{num(r["mean"])}'
                         f'{ci_span(r["ci"])}<span class="cnt">n={r["n"]}{", " + esc(other) if other else ""}</span>{cov}</td>')
        rows.append(cells)
    measures = data.get("measures") or {}
    labels = data.get("measure_labels") or {}
    heads = ["editing model"]
    for ev in evs:
        m = measures.get(ev)
        heads.append(f"{ev} ({direction_words(data['higher_is_better'].get(ev), m)})" if m == "similarity"
                     else f"{ev} ({labels.get(m, 'what it measures is not declared') if m else 'undeclared'})")
    return section("similarity", "Similarity to the source (not a ranking)", data_table(heads, rows, "data per-model"),
                    "How close each editor's output stays to its source: an editor that changes nothing scores best "
                    "here, so these are not ranked and no value is called better. Read them beside the leaderboard "
                    "(did the editor keep what it should?). Mean of scored edits, seeded bootstrap 95% CI; n counts "
                    "scored edits, other statuses beside it.")


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
        why = "<br>".join(f"{n}× {esc(r if len(r) < 160 else r[:157] + '...')}" for r, n in top)
        rows.append([esc(ev)] + [f'<td class="num">{counts[k]}</td>' for k in counts] + [f'<td class="reason">{why}</td>'])
    return section("status", "Results by status",
                    data_table(["evaluator", "scored", "skipped", "unscored", "failed", "info", "most common reasons"], rows))


def _human_section(h: Mapping[str, Any]) -> str:
    methods = ("pearson", "spearman", "kendall")
    by = {(r["evaluator"], r["method"]): r for r in h["overall"]}
    evs = list(dict.fromkeys(r["evaluator"] for r in h["overall"]))
    rows = [[f"<b>{esc(ev)}</b>", f'<td class="num">{by[(ev, "spearman")]["n"]}</td>']
            + [f'<td class="num" data-evaluator="{esc(ev)}" data-method="{m}">{num(by[(ev, m)]["value"])}'
               f'{ci_span(by[(ev, m)]["ci95"])}</td>' for m in methods] for ev in evs]
    body = [data_table(["evaluator", "n", "Pearson r", "Spearman ρ", "Kendall τ"], rows, "data human"),
            '<div class="plot-grid" data-plot="human-scatter"></div>']
    if h["per_model"]:
        body.append("<h3>Spearman ρ within each editing model</h3>")
        pm = {(r["evaluator"], r["model"]): r for r in h["per_model"]}
        models = sorted({r["model"] for r in h["per_model"]})
        body.append(data_table(["evaluator"] + models, [
            [f"<b>{esc(ev)}</b>"] + [f'<td class="num">{num(pm[(ev, m)]["value"])}{ci_span(pm[(ev, m)]["ci95"])}'
                                    f'<span class="cnt">n={pm[(ev, m)]["n"]}</span></td>' if (ev, m) in pm else
                                    '<td class="num">–</td>' for m in models]
            for ev in dict.fromkeys(r["evaluator"] for r in h["per_model"])], "data human-per-model"))
        body.append('<div class="plot" data-plot="human-per-model"></div>')
    return section("human", "Agreement with human scores", "".join(body),
                    "Correlations over edits with both a scored value and a human score; seeded bootstrap 95% CIs.")


def _samples_section(data: Mapping[str, Any]) -> str:
    samples = data["samples"]
    statuses = sorted({st for s in samples for st in s["statuses"]})
    verdicts = sorted({v for s in samples for v in s["verdicts"]})
    if any(s.get("unchanged") for s in samples):
        verdicts.append("unchanged")
    sortable = [("order", "manifest order"), ("id", "id"), ("model", "editing model")]
    sortable += [(f"m:{ev}", ev) for ev in data["scored_evaluators"]]
    if any("human" in s for s in samples):
        sortable.append(("human", "human score"))
    cats = data.get("categories") or []
    multi = len({s["group"] for s in samples}) < len(samples)  # some source was edited more than once
    cat_filter = (f'<label>{esc(_category_words(data))}<select id="c-type"><option value="">all types</option>'
                  f'{select_options([(c, c) for c in cats])}</select></label>') if cats else ""
    card_cat = (f'<label>{esc(_category_words(data))}<select id="f-type"><option value="">all types</option>'
                f'{select_options([(c, c) for c in cats])}</select></label>') if cats else ""
    compare = f"""
<div id="view-compare" class="view"{'' if multi else ' hidden'}>
<div class="controls">
  <label>search<input type="search" id="c-text" placeholder="source or instruction"></label>
  {cat_filter}
  <label>sort by<select id="c-sort"><option value="order">manifest order</option>{select_options([(e, e) for e in data['scored_evaluators']])}</select></label>
  <label>of<select id="c-by"><option value="mean">mean over editors</option><option value="spread">spread (best − worst)</option>
    {select_options([(f'e:{m}', m) for m in data['models']])}</select></label>
  <label>&nbsp;<button type="button" id="c-dir" data-dir="asc">ascending</button></label>
  <label>show<select id="c-show"><option value="">no score</option>{select_options([(e, e) for e in data['scored_evaluators']])}</select></label>
  <label>per page<select id="c-size"><option>6</option><option selected>12</option><option>24</option><option>48</option></select></label>
</div>
<div class="pager"><button type="button" id="c-prev">‹ previous</button><span id="c-info"></span>
  <button type="button" id="c-next">next ›</button><span id="c-count"></span></div>
<div id="compare"></div>
</div>"""
    cards = f"""
<div id="view-cards" class="view"{' hidden' if multi else ''}>
<div class="controls">
  <label>search<input type="search" id="f-text" placeholder="id or instruction"></label>
  <label>editing model<select id="f-model"><option value="">all models</option>{select_options([(m, m) for m in data['models']])}</select></label>
  {card_cat}
  <label>status<select id="f-status"><option value="">any status</option><option value="all scored">all scored</option>
    {''.join(f'<option value="{esc(s)}">has {esc(s)}</option>' for s in statuses)}</select></label>
  <label>verdict<select id="f-verdict"{' disabled' if not verdicts else ''}><option value="">any verdict</option>{select_options([(v, v) for v in verdicts])}</select></label>
  <label>metric<select id="f-metric"><option value="">(choose)</option>{select_options([(e, e) for e in data['scored_evaluators']])}</select></label>
  <label>min<input type="number" step="any" id="f-min"></label>
  <label>max<input type="number" step="any" id="f-max"></label>
  <label>sort by<select id="sort">{select_options(sortable)}</select></label>
  <label>&nbsp;<button type="button" id="sort-dir" data-dir="asc">ascending</button></label>
  <label>per page<select id="page-size"><option>12</option><option selected>24</option><option>48</option><option>96</option></select></label>
</div>
<div class="pager"><button type="button" id="prev">‹ previous</button><span id="page-info"></span>
  <button type="button" id="next">next ›</button><span id="count"></span></div>
<div id="cards"></div>
</div>"""
    tabs = ('<div class="tabs" role="tablist">'
            f'<button type="button" role="tab" id="tab-compare" data-view="compare" aria-selected="{str(multi).lower()}">'
            'Compare editors</button>'
            f'<button type="button" role="tab" id="tab-cards" data-view="cards" aria-selected="{str(not multi).lower()}">'
            'All edits</button></div>')
    layers = data.get("layers") or {}
    legend = ""
    if layers:
        items = []
        for ev, ly in layers.items():
            sw = "".join(f'<i class="sw{" dash" if ly["dashed"] else ""}" style="border-color:{esc(c)}" title="{esc(ly["legend"].get(k, k))}"></i>'
                         for k, c in (ly["colours"] or {"": ly["colour"]}).items())
            kinds = ", ".join(ly["legend"].get(k, k) for k in ly["colours"]) if ly["colours"] else ""
            items.append(f'<label class="layer" data-layer="{esc(ev)}"><input type="checkbox" data-layer="{esc(ev)}" checked>'
                         f'{sw}<b>{esc(ev)}</b> {esc(ly["name"])}{(" (" + esc(kinds) + ")") if kinds else ""}</label>')
        legend = ('<div class="legend" id="layers"><span class="legend-title">boxes:</span>' + "".join(items)
                  + "</div>")
    return section("samples", "Edits", tabs + legend + compare + cards,
                    "Click an image to inspect it: zoom and pan at full resolution, source / edited / difference, "
                    "a before–after slider, each box numbered with its entry. Thumbnails show the strongest boxes "
                    "(\"+N more\": the rest are in the inspector). The filters, the sort and the open edit are in "
                    "the address: copy it to share this view.")


def write_run_report(run_dir: str | Path, out: str | Path | None = None, *, manifest: str | Path | None = None,
                     human: str | Path | None = None, meta_eval: Sequence[str | Path] = (),
                     thumb_size: int | None = None, seed: int = 0, n_boot: int = 1000,
                     images: str = "auto", by: str | None = None, cache: ReportCache | None = None) -> Path:
    """Collect a run and write its report (default ``RUN_DIR/report.html``) atomically.

    ``meta_eval``: saved ``editlens meta-eval ... --json`` documents to show in the report.
    ``images``: how full-size images reach the report (see :func:`render_run_report`);
    ``copy`` puts them in ``<report name>_images/`` beside it.
    ``by``: the manifest column whose values group the leaderboards (default ``edit_type``).
    ``cache``: an earlier build's cache of this same report to reuse (default: a fresh one, so
    nothing comes from another report built in this process).
    """
    from editlens.reporting.collect import collect_run, read_meta_eval
    from editlens.reporting.stats import no_gc_pauses

    if images not in IMAGE_MODES:
        raise InputError(f"--images must be one of {', '.join(IMAGE_MODES)}, got {images!r}")
    target = Path(out) if out else Path(run_dir) / "report.html"
    metas = {Path(p).name: read_meta_eval(p) for p in meta_eval}  # before the slow part: bad input fails fast
    cache = cache if cache is not None else ReportCache()
    with no_gc_pauses():
        data = collect_run(run_dir, manifest=manifest, human=human, seed=seed, n_boot=n_boot, by=by, cache=cache)
        data["meta_eval"] = metas
        _only_images_the_run_read(run_dir, data)
        page = render_run_report(data, out_dir=target.parent, thumb_size=thumb_size, images=images,
                                 images_folder=f"{target.stem}_images", cache=cache)
    return write_page(target, page)


def _only_images_the_run_read(run_dir: str | Path, data: RunData) -> bool:
    """Keep in the report (thumbnails, embedded or copied full-size images) only the files the run
    itself decoded **for that row**, by the run store's per-sample record: a manifest edited after
    the run, or a hostile one, can neither put another file of this machine into a report that is
    then shared, nor put another row's image beside a row's scores. Runs made before the record, and
    runs moved with their images (no image where the run read it), keep every image the manifest
    names, with a note saying so. Returns whether the record was applied."""
    from editlens.runner.store import recorded_image_map, resolved_image

    recorded = recorded_image_map(run_dir)
    if recorded is None:
        if any(s["images"] for s in data["samples"]):
            data["notes"].append("this run has no record of the images it read (made before editlens kept one): "
                                 "the report shows the files its manifest names now")
        return False
    read_anywhere = set(recorded.values())
    named = {p for s in data["samples"] for p in s["images"].values()}
    if named and not any(resolved_image(p) in read_anywhere for p in named):
        # the run and its images were moved (or copied) since it ran: nothing to match
        data["notes"].append("none of the images the manifest names is where this run read its images (moved "
                             "since?): the report shows the files its manifest names now")
        return False
    dropped = 0
    for s in data["samples"]:
        kept = {role: p for role, p in s["images"].items() if recorded.get((s["id"], role)) == resolved_image(p)}
        dropped += len(s["images"]) - len(kept)
        s["images"] = kept
    if dropped:
        data["notes"].append(f"{dropped} image(s) the manifest names are not the ones this run read for those rows "
                             "(changed or added after it): left out of the report")
    return True


# ----------------------------------------------------------------------------------------------- meta-evaluation

#: plain words for the keys of meta-evaluation results
PLAIN = {
    "O": "overall rating (O)", "SC": "semantic consistency (SC)", "PQ": "perceptual quality (PQ)",
    "aspects": "", "overall": "all items pooled", "grouped": "per-model protocol",
    "pearson": "Pearson r", "spearman": "Spearman ρ", "kendall": "Kendall τ",
    "value": "the protocol's figure", "accuracy": "accuracy", "n": "items", "n_items": "items with a prediction and a human score",
    "n_pairs": "pairs", "n_predictions": "predictions", "n_unparsable": "unparsable answers (left out)",
    "n_missing": "items without a prediction (left out)", "human_inter_rater_icc_2_1": "agreement between human raters, ICC(2,1)",
    "threshold": "tie threshold", "aggregation": "aggregation", "benchmark": "benchmark", "protocol": "protocol",
    "aggregation_note": "aggregation, in words", "no_verdict": "items without a verdict", "kendall_tau": "Kendall τ",
}


def plain(key: str) -> str:
    """Plain words for a result key or a ``·``-joined path of keys.

    >>> plain("aspects · O"), plain("overall · spearman")
    ('overall rating (O)', 'all items pooled · Spearman ρ')
    """
    parts = [PLAIN.get(p.strip(), p.strip().replace("_", " ")) for p in key.split("·")]
    return " · ".join(p for p in parts if p)


def _corr_rows(rep: Mapping[str, Any], prefix: str = "") -> list[dict[str, Any]]:
    """Every ``{"value", "ci95"}`` entry of a meta-evaluation report, with its path as the label."""
    rows = []
    for k, v in rep.items():
        if isinstance(v, Mapping):
            if "value" in v and isinstance(v.get("ci95"), (list, tuple)):
                rows.append({"label": plain(f"{prefix}{k}"), "value": v["value"], "ci95": list(v["ci95"]),
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
                    rows.append({"where": plain(f"{prefix}{k}".strip(" ·")) or "all", "method": g, "value": r,
                                 "n": n.get(g) if isinstance(n, Mapping) else None})
            rows += _per_group_rows(v, f"{prefix}{k} · ")
    return rows


def _system_section(rep: Mapping[str, Any], prefix: str) -> str:
    sl = rep.get("system_level")
    if not isinstance(sl, Mapping) or not sl.get("models"):
        return ""
    models, pm, hm = sl["models"], sl.get("pred_means") or [], sl.get("human_means") or []
    if len(pm) != len(models) or len(hm) != len(models):
        return ""

    def ranks(vals: Sequence[float]) -> list[int]:
        order = sorted(range(len(vals)), key=lambda i: -vals[i])
        out = [0] * len(vals)
        for r, i in enumerate(order, 1):
            out[i] = r
        return out

    hr, pr = ranks(hm), ranks(pm)
    rows = sorted(zip(models, hm, pm, hr, pr), key=lambda t: t[3])
    table = data_table(["editing method", "human mean", "predicted mean", "human rank", "predicted rank"],
                   [[f"<b>{esc(m)}</b>", f'<td class="num">{num(h)}</td>', f'<td class="num">{num(p)}</td>',
                     f'<td class="num">{a}</td>', f'<td class="num">{b}</td>'] for m, h, p, a, b in rows], "data system")
    tau = sl.get("kendall_tau")
    lead = (f'<p class="headline" data-tau="{esc(tau)}">Kendall τ between the ranking of the {len(models)} methods by '
            f"mean human score and by mean predicted score: <b>{num(tau)}</b> (1 = same order, −1 = reversed).</p>")
    return section(f"{prefix}system", "System level: do the two rankings of the methods agree?",
                    lead + table + plot_img(plots.system_scatter(models, hm, pm), "mean predicted vs mean human score per method"))


def meta_sections(rep: Mapping[str, Any], extra: Mapping[str, Any] | None = None, prefix: str = "") -> list[str]:
    """The sections of a meta-evaluation report (also embedded in a run report).

    ``extra`` may hold ``points`` (``[(predicted, human, group)]``) for a
    scatter, and ``confusion`` (``{"labels", "matrix"}``, rows human,
    columns predicted) for pairwise verdicts.
    """
    extra = extra or {}
    sections = []
    system = _system_section(rep, prefix)
    if system:
        sections.append(system)
    scalars = {k: v for k, v in rep.items() if isinstance(v, (int, float, str)) and not isinstance(v, bool)}
    sections.append(section(f"{prefix}summary", "Summary", data_table(
        ["", "value"], [[esc(statistic_name(rep) if k == "value" else plain(k)),
                         f'<td class="num">{num(v)}</td>' if isinstance(v, (int, float))
                         else esc(v)] for k, v in scalars.items()], "data summary")))
    corr = _corr_rows({k: v for k, v in rep.items() if k != "by_edit_type"})  # per-type figures get their own table
    if "ci95" in rep and "value" not in rep:  # a top-level accuracy with its CI
        corr.insert(0, {"label": "accuracy", "value": rep.get("accuracy"), "ci95": rep["ci95"], "n": rep.get("n")})
    if corr:
        sections.append(section(f"{prefix}correlations", "Agreement with human judgments, with 95% CIs",
                                 generic_table([{"where": r["label"], "value": r["value"], "CI low": r["ci95"][0],
                                                 "CI high": r["ci95"][1], "n": r["n"]} for r in corr], "data corr")
                                 + plot_img(plots.correlation_bars(corr, "label", "agreement with human judgments",
                                                                "correlation (or accuracy) with 95% CI"), "correlations")))
    groups = _per_group_rows(rep)
    if groups:
        wheres = list(dict.fromkeys(g["where"] for g in groups))
        by = {(g["method"], g["where"]): g for g in groups}
        pivot = data_table(["editing method"] + wheres, [
            [f"<b>{esc(m)}</b>"] + [(f'<td class="num" data-where="{esc(w)}">{num(by[(m, w)]["value"])}'
                                    f'<span class="cnt">n={num(by[(m, w)]["n"])}</span></td>') if (m, w) in by
                                   else '<td class="num">–</td>' for w in wheres]
            for m in dict.fromkeys(g["method"] for g in groups)], "data per-method")
        sections.append(section(f"{prefix}per-method", "Within each editing method", pivot
                                 + plot_img(plots.correlation_bars([{**g, "label": g["method"] if len(wheres) == 1 else
                                                                  f"{g['where']} · {g['method']}",
                                                                  "ci95": None} for g in groups], "label",
                                                                "correlation within each method",
                                                                "Spearman ρ between predicted and human scores"),
                                         "per-method correlations"),
                                 "Correlation between predicted and human scores among the edits of one method, as the "
                                 "protocol aggregates them."))
    if extra.get("points"):
        pts = extra["points"]
        sections.append(section(f"{prefix}scatter", "Predicted vs human, per item",
                                 plot_img(plots.human_scatter({"prediction": pts}, []), "predicted vs human")))
    if extra.get("confusion"):
        c = extra["confusion"]
        sections.append(section(f"{prefix}confusion", "Pairwise verdicts", plot_img(
            plots.confusion(c["matrix"], c["labels"], "predicted verdict", "human verdict"), "confusion of pairwise verdicts")
            + data_table([""] + [f"predicted {lab}" for lab in c["labels"]],
                     [[f"<b>human {esc(lab)}</b>"] + [f'<td class="num">{v}</td>' for v in row]
                      for lab, row in zip(c["labels"], c["matrix"])], "data confusion"),
            f"Predicted tie when |score(A) − score(B)| ≤ {num(c.get('threshold'))} (the calibrated threshold)."))
    from editlens.reporting.trust_html import meta_trust_sections

    sections += meta_trust_sections(rep, prefix)  # calibration (reliability diagram, ECE) and edit types
    sections.append(section(f"{prefix}raw", "Full result", "<details><summary>JSON</summary><pre>"
                             f"{esc(json.dumps(json_safe(dict(rep)), indent=1))}</pre></details>"))
    return sections


def statistic_name(rep: Mapping[str, Any]) -> str:
    """The name of a meta-evaluation's headline ``value``: the statistic, not "headline agreement".

    >>> statistic_name({"protocol": "aurora-pointwise", "value": 0.4})
    'Spearman ρ over all items'
    >>> statistic_name({"value": 0.7, "accuracy": 0.7})
    'accuracy'
    """
    if rep.get("statistic"):
        return str(rep["statistic"])
    proto = str(rep.get("protocol") or "")
    value = rep.get("value", _NOT_GIVEN)
    if value is not _NOT_GIVEN and value == rep.get("strict_accuracy", _NOT_GIVEN):
        return "strict group accuracy"
    if value is not _NOT_GIVEN and value == rep.get("accuracy", _NOT_GIVEN):
        return "accuracy"
    if proto == "aurora-pointwise":
        return "Spearman ρ over all items"
    if proto == "aurora-per-model-mean":
        return "mean per-model Spearman ρ"
    agg = rep.get("aggregation") or (rep.get("grouped") or {}).get("aggregation")
    if agg in ("official", "fisher", "mean"):
        return {"official": "Spearman ρ per editing method, tanh of their mean",
                "fisher": "Spearman ρ per editing method, Fisher-z mean", "mean": "mean Spearman ρ per editing method"}[agg]
    return "agreement (statistic not recorded)"


_NOT_GIVEN = object()


def _evaluated_html(ev: Mapping[str, Any] | None) -> str:
    if not ev:
        return ""
    parts = [f'evaluator <code class="evaluator">{esc(ev.get("evaluator", "?"))}</code>']
    if ev.get("model"):
        parts.append("model " + ", ".join(f"<code>{esc(v)}</code>" for v in ev["model"].values()))
    if ev.get("answers"):
        parts.append(f'answers from <code class="answers">{esc(ev["answers"])}</code>'
                     + (f' (run <code>{esc(ev["run"])}</code>)' if ev.get("run") else ""))
    if ev.get("human"):
        parts.append(f"human judgments <code>{esc(ev['human'])}</code>")
    return f'<div class="sub evaluated">{" · ".join(parts)}</div>'


def render_meta_report(rep: Mapping[str, Any], title: str, extra: Mapping[str, Any] | None = None) -> str:
    """HTML of a meta-evaluation report dict (``editlens meta-eval ... --json``'s document);
    ``extra`` as in :func:`meta_sections`. Paths in it are shown as file names."""
    from editlens.reporting.meta_html import without_local_paths

    rep = without_local_paths(dict(rep))
    scalars = {k: v for k, v in rep.items() if isinstance(v, (int, float, str)) and not isinstance(v, bool)}
    stat_keys = [k for k in ("value", "accuracy", "n_items", "n", "n_unparsable", "n_missing") if k in scalars]
    if "value" in stat_keys and "accuracy" in stat_keys and scalars["value"] == scalars["accuracy"]:
        stat_keys.remove("accuracy")  # the same number twice
    stat_html = "".join(stat_box(k, num(scalars[k]), statistic_name(rep) if k == "value" else plain(k))
                        for k in stat_keys)
    sl = rep.get("system_level")
    if isinstance(sl, Mapping) and sl.get("kendall_tau") is not None:
        stat_html += stat_box("system_tau", num(sl["kendall_tau"]), "system-level Kendall τ")
    header = (f"<h1>editlens meta-evaluation · {esc(title)}</h1><div class=\"sub\">benchmark "
              f"<code>{esc(rep.get('benchmark', '?'))}</code> · protocol <code>{esc(rep.get('protocol', '?'))}</code>"
              f"{' · ' + esc(rep['aggregation_note']) if rep.get('aggregation_note') else ''}</div>"
              f"{_evaluated_html(rep.get('evaluated'))}"
              f'<div class="stats">{stat_html}</div>')
    return render_page(f"editlens meta-evaluation: {title}", header, "\n".join(meta_sections(rep, extra)), {})


def write_meta_report(rep: Mapping[str, Any], path: str | Path, title: str,
                      extra: Mapping[str, Any] | None = None) -> Path:
    return write_page(path, render_meta_report(rep, title, extra))

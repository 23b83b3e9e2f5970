"""HTML report of large runs: build time, file size, time to interactive in headless Chromium, and
refresh time under `editlens view` while the run is being written.

    python -m benchmarks.report_load [--edits 1000,10000] [--image-size 256] [--repeats 3] [--keep DIR]

For each size, builds a synthetic run (generated images with drawn edits, four editors per source,
every kind of status, DICE differences; `editlens.testing.synthetic_run`: its rows are fixtures, not
model outputs), then measures:

* build: `editlens report` from cold caches (collect, thumbnails, bootstraps, page), and the file size;
* time to interactive: from navigation until the page's script has drawn the first page (the
  `data-ready` mark) and until its thumbnails are decoded (system Chromium, median of repeats);
  then a filter, a sort, a page turn and opening the inspector;
* `view` refresh: a `ReportServer` follows the run while its last edits' results land in the store
  16 edits at a time (as `editlens run` commits batches); each refresh is timed. The peer is the
  cold build in the same run: `refresh_vs_cold_build` is their ratio (the target is < 2 s per
  refresh at 1,000 edits).

Prints JSON; exits 1 if the page logged a console error or made a network request.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

EDITORS = ("editor_a", "editor_b", "editor_c", "editor_d")


def _browser(html: Path, repeats: int) -> dict:
    from editlens.testing.browser import chromium_page

    ready, images = [], []
    with chromium_page(width=1400, height=1000) as (page, errors):
        for _ in range(repeats):
            page.goto("about:blank")
            t = time.perf_counter()
            page.goto(html.resolve().as_uri(), timeout=300_000)
            page.wait_for_function("document.body.hasAttribute('data-ready')", timeout=300_000)
            ready.append(time.perf_counter() - t)
            page.wait_for_function("Array.from(document.querySelectorAll('#compare img, #cards img'))"
                                   ".filter(i => i.offsetParent).every(i => i.complete)", timeout=300_000)
            images.append(time.perf_counter() - t)

        def timed(action) -> float:  # type: ignore[no-untyped-def]
            t0 = time.perf_counter()
            action()
            page.evaluate("() => new Promise(r => requestAnimationFrame(() => r(1)))")
            return time.perf_counter() - t0

        out = {
            "interactive_s_median": round(statistics.median(ready), 3),
            "interactive_s_all": [round(v, 3) for v in ready],
            "thumbnails_shown_s_median": round(statistics.median(images), 3),
            "compare_sort_s": round(timed(lambda: page.select_option("#c-sort", "l1")), 3),
            "cards_view_s": round(timed(lambda: page.click("#tab-cards")), 3),
            "filter_s": round(timed(lambda: page.select_option("#f-model", EDITORS[1])), 3),
            "sort_s": round(timed(lambda: page.select_option("#sort", "m:l1")), 3),
            # a small run filtered to one editor fits one page: there is no next page to time
            "next_page_s": round(timed(lambda: page.click("#next")), 3) if page.is_enabled("#next") else None,
            "open_inspector_s": round(timed(lambda: page.locator("#cards .card .frame").first.click()), 3),
        }
        heap = page.evaluate("performance.memory ? performance.memory.usedJSHeapSize : null")
        out["js_heap_mb"] = round(heap / 1e6, 1) if heap else None
        out["console_errors"] = list(errors)
    return out


def _refresh(run: Path, batches: int) -> dict:
    """Time `view` refreshes while the run is written: the results of the last ``batches`` x 16 edits
    are taken out of the store, the server builds the report, and they come back 16 edits at a time
    (every evaluator's row of an edit together, as `editlens run` commits a batch)."""
    import sqlite3

    from editlens.core.types import Score
    from editlens.reporting.serve import ReportServer
    from editlens.runner.store import ResultsStore

    store = ResultsStore(run)
    rows = store.rows()
    ids = sorted({r["sample_id"] for r in rows})[-16 * batches:]
    later = {sid: [r for r in rows if r["sample_id"] == sid] for sid in ids}
    store.close()
    with sqlite3.connect(run / "results.sqlite") as conn:
        conn.executemany("DELETE FROM results WHERE sample_id=?", [(sid,) for sid in ids])
    t = time.perf_counter()
    server = ReportServer(run)  # its own, empty cache
    first = time.perf_counter() - t
    store = ResultsStore(run)
    times = []
    try:
        for b in range(batches):
            batch = [r for sid in ids[b * 16:(b + 1) * 16] for r in later[sid]]
            store.write([(r["sample_id"], r["evaluator"], r["config_hash"], r["model"],
                          Score(r["evaluator"], r["value"], r["status"], r["reason"], r["details"] or {})) for r in batch])
            t = time.perf_counter()
            server.current_page()
            times.append(time.perf_counter() - t)
    finally:
        store.close()
        server.close()
    return {"view_first_build_s": round(first, 2), "view_refresh_s_median": round(statistics.median(times), 3),
            "view_refresh_s_max": round(max(times), 3), "view_refreshes": len(times),
            "view_page_mb": round(len(server.page) / 1e6, 2)}


def measure(root: Path, n: int, image_size: int, repeats: int, batches: int) -> dict:
    from editlens.reporting.html import write_run_report
    from editlens.reporting.memo import ReportCache
    from editlens.testing.synthetic_run import make_synthetic_run

    t = time.perf_counter()
    made = make_synthetic_run(root, n=n, size=image_size, models=EDITORS, per_source=len(EDITORS))
    make_s = time.perf_counter() - t
    cache = ReportCache()
    t = time.perf_counter()
    html = write_run_report(made["run"], root / "report.html", cache=cache)
    build_s = time.perf_counter() - t
    t = time.perf_counter()
    write_run_report(made["run"], root / "report-warm.html", cache=cache)  # as `view` rebuilds: the same cache
    warm_s = time.perf_counter() - t
    copied = root / "report_images"
    result = {"edits": n, "image_size": image_size, "make_run_s": round(make_s, 2), "build_s": round(build_s, 2),
              "rebuild_warm_caches_s": round(warm_s, 2), "html_mb": round(html.stat().st_size / 1e6, 2),
              "full_size_images": "copied beside it" if copied.is_dir() else "embedded"}
    result.update(_browser(html, repeats))
    result.update(_refresh(made["run"], batches))
    result["refresh_vs_cold_build"] = round(result["view_refresh_s_median"] / build_s, 3)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--edits", default="1000,10000", help="comma-separated run sizes")
    ap.add_argument("--image-size", type=int, default=256, help="side of the generated images")
    ap.add_argument("--repeats", type=int, default=3, help="page loads timed (the median is reported)")
    ap.add_argument("--refreshes", type=int, default=5, help="batches written while `view` follows the run")
    ap.add_argument("--keep", type=Path, default=None, help="keep the runs and reports in this folder")
    args = ap.parse_args()
    base = args.keep or Path(tempfile.mkdtemp(prefix="editlens-report-bench-"))
    results = []
    try:
        for n in (int(x) for x in args.edits.split(",")):
            results.append(measure(base / f"n{n}", n, args.image_size, args.repeats, args.refreshes))
            print(json.dumps(results[-1]), file=sys.stderr, flush=True)
    finally:
        if args.keep is None:
            shutil.rmtree(base, ignore_errors=True)
    out = {"results": results}
    if len(results) > 1:
        a, b = results[0], results[-1]
        out["scaling"] = {f"{k}_x": round(b[k] / a[k], 2) for k in ("build_s", "html_mb", "interactive_s_median",
                                                                      "view_refresh_s_median") if a[k]}
    print(json.dumps(out, indent=2))
    if any(r["console_errors"] for r in results):
        sys.exit(1)


if __name__ == "__main__":
    main()

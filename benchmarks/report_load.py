"""HTML report of a large run: build time, file size, and how fast it opens
and reacts in headless Chromium.

    python benchmarks/report_load.py [--edits 2000] [--image-size 256] [--keep DIR]

Builds a synthetic run (generated images with drawn edits, every kind of
status, DICE differences; `editlens.testing.synthetic_run`), writes its
report, then opens it in the system Chromium (`apt-get install chromium`)
and times: load until the first page of cards is drawn, a filter, a sort,
and turning the page. Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--edits", type=int, default=2000)
    ap.add_argument("--image-size", type=int, default=256, help="side of the generated images")
    ap.add_argument("--repeats", type=int, default=3, help="page loads timed (the median is reported)")
    ap.add_argument("--keep", type=Path, default=None, help="keep the run and report in this folder")
    args = ap.parse_args()
    from editlens.reporting.collect import collect_run
    from editlens.reporting.html import render_run_report
    from editlens.testing.browser import chromium_page
    from editlens.testing.synthetic_run import make_synthetic_run

    root = args.keep or Path(tempfile.mkdtemp(prefix="editlens-report-bench-"))
    try:
        t = time.perf_counter()
        made = make_synthetic_run(root, n=args.edits, size=args.image_size)
        make_s = time.perf_counter() - t
        t = time.perf_counter()
        data = collect_run(made["run"])
        collect_s = time.perf_counter() - t
        t = time.perf_counter()
        page_html = render_run_report(data, out_dir=root)
        render_s = time.perf_counter() - t
        html = root / "report.html"
        html.write_text(page_html, encoding="utf-8")
        loads = []
        with chromium_page() as (page, errors):
            for _ in range(args.repeats):
                t = time.perf_counter()
                page.goto(html.resolve().as_uri())
                page.wait_for_function("document.body.getAttribute('data-rendered') > 0", timeout=120_000)
                page.wait_for_function("Array.from(document.querySelectorAll('#cards img')).every(i => i.complete)")
                loads.append(time.perf_counter() - t)
            cards = page.locator("#cards .card").count()

            def timed(action) -> float:  # type: ignore[no-untyped-def]
                t0 = time.perf_counter()
                action()
                page.wait_for_function("document.body.hasAttribute('data-rendered')")
                return time.perf_counter() - t0

            filter_s = timed(lambda: page.select_option("#f-model", "model_b"))
            sort_s = timed(lambda: page.select_option("#sort", "m:l1"))
            next_s = timed(lambda: page.click("#next"))
            heap = page.evaluate("performance.memory ? performance.memory.usedJSHeapSize : null")
        loads.sort()
        result = {"edits": args.edits, "image_size": args.image_size, "html_mb": round(html.stat().st_size / 1e6, 2),
                  "make_run_s": round(make_s, 2), "collect_s": round(collect_s, 2), "render_s": round(render_s, 2),
                  "browser_load_s_median": round(loads[len(loads) // 2], 3), "browser_load_s_all": [round(v, 3) for v in loads],
                  "cards_on_first_page": cards, "filter_s": round(filter_s, 3), "sort_s": round(sort_s, 3),
                  "next_page_s": round(next_s, 3), "js_heap_mb": round(heap / 1e6, 1) if heap else None,
                  "console_errors": errors}
        print(json.dumps(result, indent=2))
        if errors:
            sys.exit(1)
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

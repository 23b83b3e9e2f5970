"""Regenerate the report screenshots of docs/runs-and-reports.md (docs/report-*.png).

    python docs/make_screenshots.py

Builds the four-editor example from the bundled photos (ground truth, a no-op, a blur and a wrong
edit on each source and its mirror image; `editlens.testing.report_scenario`), scores it with the
model-free evaluators, DICE without a VLM and `detail_kept` (the small test evaluator registered in
code, the one score here that judges the edit), writes its report under runs/editors/ and
screenshots it in the system Chromium: the top of the page at desktop width, the inspector, and the
page at phone width (390 px).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def _save(png: Path) -> None:
    from PIL import Image

    Image.open(png).convert("RGB").quantize(256, dither=Image.Dither.FLOYDSTEINBERG).save(png, optimize=True)
    print(f"wrote {png}")


def shoot(html: Path) -> None:
    from editlens.testing.browser import chromium_page

    url = html.resolve().as_uri()
    with chromium_page(width=1280, height=1500) as (page, errors):
        page.goto(url)
        page.wait_for_function("document.body.hasAttribute('data-ready')")
        page.select_option("#c-show", "detail_kept")
        page.screenshot(path=str(REPO / "docs/report-example.png"))
        _save(REPO / "docs/report-example.png")
        page.set_viewport_size({"width": 1280, "height": 800})
        page.goto(url + "#edit=hydrant%2Fblur&lv=edited")
        page.reload()
        page.wait_for_function("document.body.hasAttribute('data-inspector')")
        page.wait_for_timeout(300)
        page.screenshot(path=str(REPO / "docs/report-inspector.png"))
        _save(REPO / "docs/report-inspector.png")
        if errors:
            raise SystemExit(f"{html}: {errors}")
    with chromium_page(width=390, height=2600) as (page, errors):
        page.goto(url)
        page.wait_for_function("document.body.hasAttribute('data-ready')")
        page.screenshot(path=str(REPO / "docs/report-phone.png"))
        _save(REPO / "docs/report-phone.png")
        if errors:
            raise SystemExit(f"{html}: {errors}")


def main() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import shutil

    from editlens.cli.main import app
    from editlens.reporting.html import write_run_report
    from editlens.testing.report_scenario import build_scenario, register_detail_kept

    root = REPO / "runs" / "editors"
    shutil.rmtree(root, ignore_errors=True)
    made = build_scenario(root)
    register_detail_kept()  # in this process: the run and the report both see it
    app(["run", str(made["manifest"]), "--out", str(root / "run"), "--metrics",
         "change_map,l1,ssim,psnr,detail_kept", "--dice", "--no-progress"], standalone_mode=False)
    html = write_run_report(root / "run", root / "report.html")
    shoot(html)


if __name__ == "__main__":
    main()

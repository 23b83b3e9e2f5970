"""Regenerate the report screenshots shown in the README (docs/report-*.png).

    python docs/make_screenshots.py

Runs the bundled example edits (model-free metrics) and a DICE run judged by a
tiny random Idefics3 (its answers are noise, so verdicts show as unscored with
the raw text), writes both reports under runs/, and screenshots them in the
system Chromium.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def editlens(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "editlens.cli.main", *args], cwd=REPO, check=True)
    # (the report shows the recorded command with the module path shortened to `editlens`)


def shoot(html: Path, png: Path, height: int) -> None:
    from editlens.testing.browser import chromium_page

    with chromium_page(width=1280, height=height) as (page, errors):
        page.goto(html.resolve().as_uri())
        page.wait_for_function("document.body.hasAttribute('data-rendered')")
        page.screenshot(path=str(png), full_page=True)
        if errors:
            raise SystemExit(f"{html}: {errors}")
    from PIL import Image

    Image.open(png).convert("RGB").quantize(256, dither=Image.Dither.FLOYDSTEINBERG).save(png, optimize=True)
    print(f"wrote {png}")


def main() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    editlens("run", "examples/manifest.jsonl", "--out", "runs/demo", "--no-progress")
    editlens("report", "runs/demo")
    shoot(REPO / "runs/demo/report.html", REPO / "docs/report-example.png", 900)
    from editlens.testing.tiny_models import build_idefics3

    build_idefics3(REPO / "runs" / "tiny-idefics3")
    editlens("run", "examples/manifest.jsonl", "--out", "runs/dice-tiny-vlm", "--metrics", "l1,ssim", "--dice",
             "--vlm", "runs/tiny-idefics3", "--option", "dice.detector=changemap", "--cache", "none", "--no-progress")
    editlens("report", "runs/dice-tiny-vlm")
    shoot(REPO / "runs/dice-tiny-vlm/report.html", REPO / "docs/report-dice.png", 900)


if __name__ == "__main__":
    main()

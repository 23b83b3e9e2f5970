"""Regenerate the screenshots of docs/annotate.md (docs/annotate-*.png).

    python docs/make_annotate_screenshots.py

Makes a pairwise and a point-wise task from the four-editor example on the bundled photos
(`editlens.testing.report_scenario`), serves each with `editlens.annotate.server.AnnotateServer` on
127.0.0.1 and screenshots the page in the system Chromium: a pair at desktop width, ImagenHub's scales at
phone width (390 px), and a multi-turn session. PNGs are quantized to stay small.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def _save(png: Path, colours: int = 128) -> None:
    from PIL import Image

    Image.open(png).convert("RGB").quantize(colours, dither=Image.Dither.FLOYDSTEINBERG).save(png, optimize=True)
    print(f"wrote {png} ({png.stat().st_size // 1024} KB)")


def _shoot(folder: Path, png: Path, width: int, height: int, keys: list[str]) -> None:
    from editlens.annotate.server import AnnotateServer
    from editlens.testing.browser import chromium_page

    server = AnnotateServer(folder).start()
    try:
        with chromium_page(width=width, height=height, allow=(server.base,)) as (page, errors):
            page.goto(next(iter(server.links().values())))
            page.wait_for_selector("body[data-ready]", state="attached")
            page.wait_for_timeout(300)
            for k in keys:
                page.keyboard.press(k)
            page.wait_for_load_state("networkidle")
            page.wait_for_timeout(300)
            page.screenshot(path=str(png))
            if errors:
                raise SystemExit(f"{png}: {errors}")
    finally:
        server.close()
    _save(png)


def main() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from editlens.annotate.task import Task
    from editlens.testing.annotate_data import make_edit_set
    from editlens.testing.report_scenario import build_scenario

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        scen = build_scenario(root / "edits", mirror=False, edit_type=False, upscale_one=False)
        Task.create(root / "pairs", scen["manifest"], "pairwise", annotators=["alice"], seed=2).close()
        _shoot(root / "pairs", REPO / "docs/annotate-pairwise.png", 1280, 820, ["1"])
        Task.create(root / "points", scen["manifest"], "pointwise", annotators=["alice"], seed=1,
                    preset="imagenhub").close()
        _shoot(root / "points", REPO / "docs/annotate-phone.png", 390, 1500, ["3"])
        turns = make_edit_set(root / "turns", sources=1, editors=2, turns=3, size=160)
        Task.create(root / "session", turns, "pairwise", annotators=["alice"], seed=0).close()
        # the plan shuffles: keep the first list position that is a third turn in view
        t = Task(root / "session")
        first = t.current("alice")
        third = t.items[first["item"]]["turn"] == 3 if first else False
        t.close()
        _shoot(root / "session", REPO / "docs/annotate-turns.png", 1280, 1000, [] if third else ["3", "Enter"])


if __name__ == "__main__":
    main()

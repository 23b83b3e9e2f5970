"""A report's caches belong to the report (editlens.reporting.memo.ReportCache): two reports
built in one process never see each other's entries, and a cache kept between the builds of
one report (as ``editlens view`` keeps it) is keyed by everything its entries depend on."""

from __future__ import annotations

import base64
import io
import json
import os
import re
from pathlib import Path

import pytest
from PIL import Image
from PIL.PngImagePlugin import PngInfo

from editlens.reporting.collect import collect_run
from editlens.reporting.html import render_run_report, write_run_report
from editlens.reporting.memo import Memo, ReportCache
from editlens.reporting.stats import cached_bootstrap_ci
from editlens.testing.synthetic_run import make_synthetic_run


def _script(page: str, name: str) -> dict:
    found = re.search(rf'<script type="application/json" id="report-{name}">(.*?)</script>', page, re.S)
    assert found is not None
    return json.loads(found.group(1))


def _edited_thumb(page: str, sid: str) -> Image.Image:
    data, thumbs = _script(page, "data"), _script(page, "thumbs")
    key = next(s for s in data["samples"] if s["id"] == sid)["images"]["edited"]["t"]
    return Image.open(io.BytesIO(base64.b64decode(thumbs[key].split(",", 1)[1]))).convert("RGB")


@pytest.fixture()
def run(tmp_path: Path) -> dict:
    return make_synthetic_run(tmp_path / "syn", n=3, size=32)


def _rewrite_keeping_identity(path: Path, colour: tuple[int, int, int]) -> None:
    """Other pixels, the same byte size and modification time: what a file cache keyed by
    file identity cannot tell apart (as after ``cp -p`` of a same-size image)."""
    st = path.stat()
    size = Image.open(path).size
    bare = io.BytesIO()
    Image.new("RGB", size, colour).save(bare, "PNG")
    pad = st.st_size - len(bare.getvalue()) - 12 - 2  # a tEXt chunk: 12 bytes of frame, key "k" and its NUL
    assert pad >= 0, "the solid image must be smaller than the original"
    info = PngInfo()
    info.add_text("k", "x" * pad)
    Image.new("RGB", size, colour).save(path, "PNG", pnginfo=info)
    assert path.stat().st_size == st.st_size
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_a_report_never_shows_another_reports_thumbnail(run: dict, tmp_path: Path) -> None:
    edited = run["manifest"].parent / "images" / "s0000_edit.png"
    a = write_run_report(run["run"], tmp_path / "a.html", images="none", n_boot=50).read_text()
    _rewrite_keeping_identity(edited, (0, 200, 0))
    b = write_run_report(run["run"], tmp_path / "b.html", images="none", n_boot=50).read_text()
    assert _edited_thumb(a, "s0000").getpixel((1, 1)) != pytest.approx((0, 200, 0), abs=12)
    # B made its own thumbnail of the file as it is now (a process-wide cache served A's)
    assert _edited_thumb(b, "s0000").getpixel((1, 1)) == pytest.approx((0, 200, 0), abs=12)


def _resized(data: dict, sid: str) -> list[str]:
    return next(s for s in data["samples"] if s["id"] == sid)["input_notes"]


def test_an_image_rewritten_with_another_size_is_seen_by_the_next_build(run: dict, tmp_path: Path) -> None:
    edited = run["manifest"].parent / "images" / "s0001_edit.png"
    cache = ReportCache()  # kept between builds, as `editlens view` keeps it
    first = collect_run(run["run"], n_boot=50, cache=cache)
    assert _resized(first, "s0001") == [] and first["completeness"]["resized"] == 0
    Image.open(edited).resize((20, 16)).save(edited)  # the run's rows do not change
    again = collect_run(run["run"], n_boot=50, cache=cache)
    assert _resized(again, "s0001") == ["edited image is 20x16, the source 32x32: it was resized to the source size "
                                        "before scoring"]
    assert again["completeness"]["resized"] == 1
    # and a report written afterwards in this process says so too
    page = write_run_report(run["run"], tmp_path / "r.html", images="none", n_boot=50).read_text()
    assert 'data-resized="1"' in page


def test_a_rebuild_with_the_same_cache_reuses_its_entries(run: dict) -> None:
    cache = ReportCache()
    data = collect_run(run["run"], n_boot=50, cache=cache)
    page = render_run_report(data, images="none", cache=cache)
    kept = (dict(cache.samples), dict(cache.fragments), len(cache.images), len(cache.stats))
    assert len(kept[0]) == 3 and len(kept[1]) == 3 and kept[2] > 0 and kept[3] > 0
    again = collect_run(run["run"], n_boot=50, cache=cache)
    assert all(again["samples"][i] is not data["samples"][i] for i in range(3))  # records are new...
    assert all(cache.samples[k] is kept[0][k] for k in kept[0])  # ...their processed parts reused
    assert render_run_report(again, images="none", cache=cache) == page
    assert (len(cache.images), len(cache.stats)) == kept[2:]  # nothing new to make
    other = ReportCache()
    assert len(other.images) == len(other.stats) == len(other.samples) == 0  # two caches share nothing


def test_stats_are_remembered_only_where_a_memo_is_given() -> None:
    memo = Memo(10)
    ci = cached_bootstrap_ci([1.0, 2.0, 3.0, 4.0], n_boot=100, memo=memo)
    assert len(memo) == 1 and cached_bootstrap_ci([1.0, 2.0, 3.0, 4.0], n_boot=100, memo=memo) == ci
    assert cached_bootstrap_ci([1.0, 2.0, 3.0, 4.0], n_boot=100) == ci  # same numbers without one
    assert len(memo) == 1

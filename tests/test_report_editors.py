"""The run report as a researcher comparing editors uses it: four editors (ground truth, a no-op, a
blur, a wrong edit) on the bundled example photos, scored by the model-free evaluators, DICE without
a VLM and an evaluator registered in code (with boxes) that the report has never heard of.

Browser tests share one built report per scenario; they need the system Chromium (see
editlens/testing/browser.py) and fail, never skip, without it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from helpers import EXAMPLES, REPO
from typer.testing import CliRunner

from editlens.cli.main import app
from editlens.reporting.collect import collect_run
from editlens.reporting.html import write_run_report
from editlens.testing.browser import chromium_page
from editlens.testing.report_scenario import (
    EDITORS,
    build_scenario,
    register_detail_kept,
    unregister_detail_kept,
)

runner = CliRunner()
METRICS = "change_map,l1,ssim,psnr,detail_kept"


@pytest.fixture(scope="module")
def scenario(tmp_path_factory):  # type: ignore[no-untyped-def]
    """The scenario's run and its report (built once for the module)."""
    register_detail_kept()  # a new evaluator with boxes, known only to this process
    root = tmp_path_factory.mktemp("editors")
    made = build_scenario(root, examples=EXAMPLES)
    res = runner.invoke(app, ["run", str(made["manifest"]), "--out", str(root / "run"), "--metrics", METRICS,
                              "--dice", "--no-progress"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    html = write_run_report(root / "run", root / "out" / "report.html", n_boot=1000)
    yield {"root": root, "run": root / "run", "manifest": made["manifest"], "html": html,
           "data": collect_run(root / "run"), "results": {r["id"]: r for r in map(json.loads, open(root / "run" / "results.jsonl"))}}
    unregister_detail_kept()


def _value(results: dict, sid: str, ev: str) -> float:
    return results[sid]["scores"][ev]["value"]


# ------------------------------------------------------------------------------------------ data, no browser

def test_leaderboard_ranks_only_what_judges_the_edit_and_flags_the_noop(scenario):
    data, results = scenario["data"], scenario["results"]
    lb = data["leaderboard"]
    # measures come from the specs: the four pixel/structure scores and the change map are similarity
    assert lb["unranked"] == ["change_map", "l1", "ssim", "psnr"]
    tables = {(t["scope"], t["evaluator"]): t for t in lb["tables"]}
    assert {ev for _, ev in tables} == {"detail_kept"}  # DICE without a VLM scored nothing: nothing to rank
    t = tables[("all", "detail_kept")]
    sources = scenario["data"]["groups"]
    means = {m: np.mean([_value(results, f"{s}/{m}", "detail_kept") for s in
                         {r["id"].split("/")[0] for r in results.values()}]) for m in EDITORS}
    ranked = sorted((m for m in EDITORS if m != "no_op"), key=lambda m: -means[m])
    assert [r["model"] for r in t["rows"]] == ranked + ["no_op"]
    assert [r["rank"] for r in t["rows"]] == [1, 2, 3, None]  # the no-op is listed, flagged, never ranked
    for r in t["rows"]:
        assert r["mean"] == pytest.approx(means[r["model"]]) and r["n"] == 8 and r["ci"][0] <= r["mean"] <= r["ci"][1]
    # neighbours: a paired bootstrap over the 8 sources both editors edited, recomputed here
    assert len(sources) == 8
    for pair in t["pairs"]:
        names = list(dict.fromkeys(r["id"].split("/")[0] for r in results.values()))  # sources in manifest order
        d = np.array([_value(results, f"{s}/{pair['better']}", "detail_kept") - _value(results, f"{s}/{pair['worse']}", "detail_kept")
                      for s in names])
        rng = np.random.default_rng(0)
        boot = d[rng.integers(0, d.size, size=(1000, d.size))].mean(axis=1)
        p = min(1.0, max(2 * min(np.mean(boot <= 0), np.mean(boot >= 0)), 1e-3))
        assert pair["n"] == 8 and pair["p"] == pytest.approx(p) and pair["significant"] == (p < 0.05)
    blur = next(p for p in t["pairs"] if p["worse"] == "blur")
    assert blur["significant"]  # a blur loses detail on every source
    flags = lb["noop"]["all"]
    assert flags["no_op"] == {"checked": 8, "unchanged": 8, "by": ["change_map"], "noop": True}
    assert flags["ground_truth"]["unchanged"] == 0 and not flags["ground_truth"]["noop"]
    # leaderboards per edit type (the manifest's edit_type column)
    assert [s["key"] for s in lb["scopes"]] == ["all", "type:add", "type:move", "type:replace"]
    assert [s["n"] for s in lb["scopes"]] == [32, 8, 16, 8]
    assert ("type:move", "detail_kept") in tables


def test_dice_without_a_vlm_is_no_verdict(scenario):
    data = scenario["data"]
    (dice,) = data["summaries"]
    for row in dice["rows"]:  # nothing ranked: no "no visual change 100"
        assert row["ranked"] == 0 and row["unjudged"] == 8
        assert row["no_visual_change"] is None and row["correct_edits"] is None
    by = {s["id"]: s for s in data["samples"]}
    noop, gt = by["cat_seat/no_op"], by["cat_seat/ground_truth"]
    assert noop["scores"]["dice"]["reason"] == "no VLM: no difference found, coherence not judged"
    assert gt["scores"]["dice"]["reason"] == "no VLM: differences found, coherence not judged"
    assert gt["verdicts"] == ["not judged"] and noop["verdicts"] == ["no change"]
    # the report does not show its all-blank summary, it says why in one line
    page = scenario["html"].read_text(encoding="utf-8")
    section = page[page.index('<section id="summary-dice">'):]
    section = section[:section.index("</section>")]
    assert "summary-empty" in section and "<table" not in section and "most common reason: no VLM" in section


def test_a_new_evaluator_with_boxes_needs_no_report_change(scenario):
    data = scenario["data"]
    assert data["layers"]["detail_kept"]["name"] == "tiles that lost detail"
    assert data["measures"]["detail_kept"] == "quality"
    blur = next(s for s in data["samples"] if s["id"] == "cat_seat/blur")
    tiles = blur["scores"]["detail_kept"]["details"]["tiles"]
    mine = [b for b in blur["boxes"] if b["by"] == "detail_kept"]
    assert tiles and [b["box"] for b in mine] == [t["box"] for t in tiles]
    assert all(b["colour"] == "#8e24aa" and b["label"].endswith("of the detail lost") for b in mine)


def test_reporting_code_names_no_evaluator():
    from editlens.metrics.registry import list_metrics

    names = [s.name for s in list_metrics() if s.name != "detail_kept"]
    files = list((REPO / "editlens" / "reporting").rglob("*.py")) + list((REPO / "editlens" / "reporting" / "assets").glob("*"))
    pattern = re.compile(r"""["'](%s)["']""" % "|".join(map(re.escape, names)))
    found = []
    for f in files:
        for line in f.read_text(encoding="utf-8").splitlines():
            if line.strip().startswith((">>>", "...")):
                continue  # doctest examples name real evaluators; the code they document does not
            found += [f"{f.name}: {m.group(0)}" for m in pattern.finditer(line)]
    assert found == []


def test_resize_notes_and_thumbnails_at_twice_their_size(scenario, tmp_path):
    by = {s["id"]: s for s in scenario["data"]["samples"]}
    (note,) = by["cat_seat/wrong_edit"]["input_notes"]
    assert "640x640" in note and "320x320" in note and "resized" in note
    assert scenario["data"]["completeness"]["resized"] == 1
    # thumbnails are made at twice their display size (sharp on 2x screens), never enlarged
    from PIL import Image

    from editlens.reporting.thumbs import thumbnail

    Image.new("RGB", (1024, 512), "white").save(tmp_path / "big.png")
    t = thumbnail(tmp_path / "big.png", 2 * 240)
    assert (t["tw"], t["th"], t["w"], t["h"]) == (480, 240, 1024, 512)
    assert thumbnail(EXAMPLES / "images" / "cat_seat_source.png", 480)["tw"] == 320


def test_report_file_holds_no_local_path(scenario):
    page = scenario["html"].read_text(encoding="utf-8")
    assert "../" not in page and "file:" not in page and str(scenario["root"]) not in page
    assert str(EXAMPLES) not in page


# ------------------------------------------------------------------------------------------ in the browser

def _ready(page, url: str) -> None:  # type: ignore[no-untyped-def]
    page.goto(url)
    page.wait_for_function("document.body.hasAttribute('data-ready')")


def _no_overflow(page) -> None:  # type: ignore[no-untyped-def]
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= page.evaluate("window.innerWidth"), f"page is {width}px wide"


def test_editor_comparison_in_chromium(scenario):
    data, html = scenario["data"], scenario["html"]
    url = html.resolve().as_uri()
    by = {s["id"]: s for s in data["samples"]}
    cli = runner.invoke(app, ["runs", "leaderboard", str(scenario["run"]), "--format", "json"], catch_exceptions=False)
    assert cli.exit_code == 0, cli.output
    board = {(t["scope"], t["evaluator"]): t for t in json.loads(cli.stdout)["tables"]}
    with chromium_page(width=1280, height=1000) as (page, errors):
        _ready(page, url)
        # leaderboard: ranked editors, the no-op flagged and unranked, similarity never called better
        rows = page.locator('table.lb-table[data-scope="all"] tbody tr')
        assert [rows.nth(i).locator("td.editor b").inner_text() for i in range(4)] == ["ground_truth", "wrong_edit", "blur", "no_op"]
        # each ranked column says why it ranks (what it measures, which way is better)
        assert page.inner_text('.lb-scope[data-scope="all"] .lb[data-evaluator="detail_kept"] h3 .measure') == \
            "edit quality · higher is better"
        # `runs leaderboard` prints the same order, means and CIs as the page
        cli_rows = board[("all", "detail_kept")]["rows"]
        assert [r["editor"] for r in cli_rows] == ["ground_truth", "wrong_edit", "blur", "no_op"]
        assert [r["rank"] for r in cli_rows] == [1, 2, 3, None]
        shown = page.eval_on_selector_all('table.lb-table[data-scope="all"] td.num[data-mean]',
                                          "cs => cs.map(c => [+c.dataset.mean, c.querySelector('.ci') && c.querySelector('.ci').textContent])")
        assert [m for m, _ in shown] == pytest.approx([r["mean"] for r in cli_rows])
        for (_, ci_text), r in zip(shown, cli_rows):
            lo, hi = (float(x) for x in ci_text.split("[")[1].rstrip("]").split(","))
            assert (lo, hi) == (pytest.approx(r["ci"][0], abs=6e-4), pytest.approx(r["ci"][1], abs=6e-4))
        noop_row = rows.nth(3).inner_text()
        assert "no-op: 8/8 edits unchanged" in noop_row and "not ranked" in noop_row
        assert rows.nth(3).locator("td.rank").inner_text() == "–"
        assert "≫ better than blur" in rows.nth(1).inner_text()
        assert "no-op: 8/8 edits unchanged" in page.inner_text(".noop-flags")
        sim = page.inner_text("#similarity")
        table = page.inner_text("#similarity table")
        assert "not a ranking" in sim and "l1 (lower = closer to the source)" in table and "better" not in table
        assert page.locator('[data-plot="lb-ci"][data-scope="all"] svg text.xlabel').text_content().startswith("detail_kept: mean")
        # grouped by edit type
        assert page.is_hidden('.lb-scope[data-scope="type:move"]')
        page.select_option("#lb-group", "type")
        assert page.is_hidden('.lb-scope[data-scope="all"]') and page.is_visible('.lb-scope[data-scope="type:move"]')
        assert "lbg=type" in page.evaluate("location.hash")
        page.select_option("#lb-group", "all")

        # compare view (the default: every source was edited by several editors): one row per source
        assert page.is_visible("#view-compare") and page.locator("#compare .crow").count() == 8
        first = page.locator("#compare .crow").first
        assert first.locator("figure").count() == 1 + len(EDITORS)
        assert first.locator(".instr").inner_text().startswith("Put a cat on the seat.")
        # sort the sources by any evaluator: here by how far apart the editors' detail_kept scores are
        page.select_option("#c-sort", "detail_kept")
        page.select_option("#c-by", "spread")
        page.click("#c-dir")
        spread = {}
        for s in data["samples"]:
            spread.setdefault(s["group"], []).append(s["scores"]["detail_kept"]["value"])
        want = sorted(spread, key=lambda g: (-(max(spread[g]) - min(spread[g])), g))
        got = page.eval_on_selector_all("#compare .crow", "rs => rs.map(r => +r.dataset.group)")
        assert got == want
        page.select_option("#c-show", "detail_kept")
        cell = page.locator('#compare figure.cell[data-id="cat_seat/blur"]')
        assert cell.locator(".val").inner_text() == f"{by['cat_seat/blur']['scores']['detail_kept']['value']:.4g}"
        noop_cell = page.locator('#compare figure.cell[data-id="cat_seat/no_op"]').inner_text()
        assert "not judged" in cell.inner_text() and "unchanged" in noop_cell
        assert "no change" not in noop_cell  # one flag for an unchanged edit, not two
        # box numbers read as a list, never as a fraction, and no label covers another
        labels = page.eval_on_selector_all("#compare .bx .num", "ns => ns.map(n => n.textContent)")
        assert labels and not any("/" in t for t in labels)
        for frame_el in page.locator("#compare .frame").all()[:16]:
            rects = frame_el.evaluate("f => Array.from(f.querySelectorAll('.bx .num')).map(n => { const r = n.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; })")
            for i, a in enumerate(rects):
                for b in rects[i + 1:]:
                    assert a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1], (a, b)
        # a readable number of boxes on a thumbnail, the rest counted
        drawn = cell.locator(".bx").count()
        places = {tuple(round(v, 3) for v in b["box"]) for b in by["cat_seat/blur"]["boxes"] if "edited" in b["on"]}
        assert drawn == 3 and cell.locator(".more").inner_text() == f"+{len(places) - 3} more"
        # sharp on 2x screens: thumbnails carry twice their shown width (up to the image's own)
        img = cell.locator("img").evaluate("i => [i.naturalWidth, i.clientWidth]")
        assert img[0] >= min(2 * img[1], 320)
        # overlays toggled per detector (the registered evaluator's included), remembered in the address
        assert page.locator('#compare .bx[data-by="detail_kept"]').count() > 0
        page.uncheck('#layers input[data-layer="detail_kept"]')
        assert page.locator('#compare .bx[data-by="detail_kept"]').count() == 0
        assert "hide=detail_kept" in page.evaluate("location.hash")
        page.check('#layers input[data-layer="detail_kept"]')
        assert page.locator('#compare .bx[data-by="detail_kept"]').count() > 0

        # the inspector: click an edit
        cell.locator(".frame").click()
        assert page.get_attribute("body", "data-inspector") == "cat_seat/blur"
        assert "edit=cat_seat%2Fblur" in page.evaluate("location.hash")
        full = page.locator('#inspector img[data-role="edited"]')
        page.wait_for_function("document.querySelector('#inspector img[data-role=\"edited\"]').complete")
        assert full.evaluate("i => i.naturalWidth") == 320 and full.get_attribute("src").startswith("data:image/png")
        page.click("#lb-one")  # full resolution: one image pixel per CSS pixel
        assert float(page.get_attribute("#inspector .lb-stage", "data-scale")) == pytest.approx(1.0)
        page.click("#lb-in")
        assert float(page.get_attribute("#inspector .lb-stage", "data-scale")) == pytest.approx(1.5)
        before = page.evaluate("document.querySelector('#inspector .lb-stage').style.transform")
        box = page.locator("#inspector .lb-view").bounding_box()
        page.mouse.move(box["x"] + 200, box["y"] + 200)
        page.mouse.down()
        page.mouse.move(box["x"] + 260, box["y"] + 230, steps=4)
        page.mouse.up()
        assert page.evaluate("document.querySelector('#inspector .lb-stage').style.transform") != before  # panned
        page.mouse.wheel(0, -300)
        assert float(page.get_attribute("#inspector .lb-stage", "data-scale")) > 1.5  # zoomed at the pointer
        page.click("#lb-fit")
        # numbered boxes linked to their list entries
        first_box = page.locator("#inspector .lb-stage .bx").first
        n = first_box.get_attribute("data-ns").split()[0]
        first_box.locator(".num").click()
        assert "hl" in page.get_attribute(f'#inspector .lb-side li[data-n="{n}"]', "class")
        li = page.locator("#inspector .lb-side li").nth(2)
        li.click()
        assert "hl" in (page.locator(f'#inspector .lb-stage .bx[data-ns~="{li.get_attribute("data-n")}"]').get_attribute("class") or "")
        # per-detector toggles in the inspector
        page.uncheck('#inspector .lb-side input[data-layer="change_map"]')
        assert page.locator('#inspector .lb-side .items[data-layer="change_map"]').count() == 0
        page.check('#inspector .lb-side input[data-layer="change_map"]')
        # source / edited / difference / before-after
        page.click('#inspector button[data-mode="source"]')
        assert page.is_visible('#inspector img[data-role="source"]') and page.is_hidden('#inspector img[data-role="edited"]')
        page.click('#inspector button[data-mode="diff"]')
        assert full.evaluate("i => getComputedStyle(i).mixBlendMode") == "difference"
        page.select_option("#lb-gain", "4")
        assert "brightness(4)" in page.evaluate("document.querySelector('#inspector .pair').style.filter")
        page.click('#inspector button[data-mode="slider"]')
        page.fill("#inspector .lb-slider", "30")
        assert full.evaluate("i => i.style.clipPath") == "inset(0px 0px 0px 30%)"
        assert "lv=slider" in page.evaluate("location.hash")
        page.click("#lb-next")  # next edit of the compare view
        assert page.get_attribute("body", "data-inspector") == "cat_seat/wrong_edit"
        page.keyboard.press("Escape")
        assert page.is_hidden("#inspector") and "edit=" not in page.evaluate("location.hash")

        # every filter, the sort and the open edit are in the address: a copied link opens the same view
        page.click("#tab-cards")
        page.select_option("#f-model", "blur")
        page.select_option("#sort", "m:detail_kept")
        page.click("#sort-dir")
        cards = page.eval_on_selector_all("#cards .card", "cs => cs.map(c => c.dataset.id)")
        want = sorted((s for s in data["samples"] if s["model"] == "blur"), key=lambda s: -s["scores"]["detail_kept"]["value"])
        assert cards == [s["id"] for s in want]
        page.locator("#cards .card").nth(1).locator('figure[data-role="edited"] .frame').click()
        page.click('#inspector button[data-mode="diff"]')
        link = page.url
        page.reload()  # the copied link, opened afresh
        page.wait_for_function("document.body.hasAttribute('data-ready')")
        other = page
        assert other.eval_on_selector_all("#cards .card", "cs => cs.map(c => c.dataset.id)") == cards
        assert other.input_value("#f-model") == "blur" and other.get_attribute("#sort-dir", "data-dir") == "desc"
        assert other.get_attribute("body", "data-inspector") == cards[1]
        assert other.get_attribute('#inspector button[data-mode="diff"]', "aria-pressed") == "true"
        assert page.url == link
        # an old-style section link still scrolls to its section
        _ready(page, url + "#similarity")
        assert page.evaluate("document.getElementById('similarity').getBoundingClientRect().top") < 50
        assert page.locator("#compare .crow").count() == 8  # and the page is drawn as usual
        assert errors == []


def test_phone_widths_without_overflow(scenario):
    url = scenario["html"].resolve().as_uri()
    with chromium_page(width=390, height=800) as (page, errors):
        _ready(page, url)
        _no_overflow(page)
        # the leaderboard at phone width: each ranked column still says why it ranks
        reason = page.locator('.lb-scope[data-scope="all"] .lb[data-evaluator="detail_kept"] h3 .measure')
        assert reason.is_visible() and reason.inner_text() == "edit quality · higher is better"
        assert page.locator('table.lb-table[data-scope="all"]').bounding_box()["width"] <= 390
        cells = page.locator("#compare .crow").first.locator("figure")
        a, b, c = (cells.nth(i).bounding_box() for i in range(3))
        assert a["y"] == b["y"] and c["y"] > a["y"]  # two images a row
        # plots take the whole width
        section = page.locator("#plots").bounding_box()
        for plot in page.locator("#plots .plot").all():
            assert plot.bounding_box()["width"] >= section["width"] - 40
        page.click("#tab-cards")
        _no_overflow(page)
        src, edit = (page.locator("#cards .card").first.locator(f'figure[data-role="{r}"]').bounding_box()
                     for r in ("source", "edited"))
        assert edit["y"] >= src["y"] + src["height"] and edit["width"] > 300  # stacked, full width
        page.set_viewport_size({"width": 360, "height": 740})
        _no_overflow(page)
        page.locator("#cards .card").first.locator('figure[data-role="edited"] .frame').click()
        _no_overflow(page)
        view = page.locator("#inspector .lb-view").bounding_box()
        assert view["width"] == pytest.approx(360, abs=1)
        # the edit's score table never splits a number over two lines
        lines = page.eval_on_selector_all("#inspector table.scores td.num", """tds => tds.filter(td => td.textContent)
            .map(td => { const r = document.createRange(); r.selectNodeContents(td); return new Set(Array.from(r.getClientRects()).map(x => Math.round(x.top))).size; })""")
        assert lines and set(lines) == {1}
        page.screenshot(path=str(scenario["root"] / "phone.png"))
        assert errors == []


def test_a_moved_report_still_opens_its_images(scenario, tmp_path):
    root = tmp_path / "copy"
    shutil.copytree(scenario["root"], root, ignore=shutil.ignore_patterns("out", "*.png.tmp"))
    out = root / "out"
    embedded = write_run_report(root / "run", out / "embedded.html", manifest=root / "manifest.jsonl", n_boot=50)
    res = runner.invoke(app, ["report", str(root / "run"), "--out", str(out / "copied.html"), "--manifest",
                              str(root / "manifest.jsonl"), "--images", "copy"], catch_exceptions=False)
    assert res.exit_code == 0 and "copied_images" in res.output, res.output
    linked = write_run_report(root / "run", out / "linked.html", manifest=root / "manifest.jsonl", images="link", n_boot=50)
    assert "../images/" in linked.read_text()  # the opt-in local mode: this machine only
    for f in (embedded, out / "copied.html"):
        text = f.read_text()
        assert "../" not in text and "file:" not in text and str(root) not in text
    moved = tmp_path / "elsewhere"
    shutil.move(str(out), moved)
    shutil.rmtree(root / "images")  # the originals are gone
    # and one copied image did not travel with the report: the inspector falls back to its thumbnail
    (lost,) = [p for p in (moved / "copied_images").iterdir() if "hydrant_source" in p.name]
    lost.unlink()
    with chromium_page(width=1200, height=900) as (page, errors):
        for name in ("embedded.html", "copied.html"):
            _ready(page, (moved / name).resolve().as_uri() + "#edit=hydrant%2Fground_truth&lv=edited")
            page.wait_for_function("document.querySelector('#inspector img[data-role=\"edited\"]').complete")
            size = page.evaluate("document.querySelector('#inspector img[data-role=\"edited\"]').naturalWidth")
            assert size == 320, name
            src = page.get_attribute('#inspector img[data-role="edited"]', "src")
            assert src.startswith("data:image/png") if name == "embedded.html" else src.startswith("copied_images/")
        page.wait_for_function("document.querySelector('#inspector img[data-role=\"source\"]').hasAttribute('data-fallback')")
        source = page.locator('#inspector img[data-role="source"]')
        assert source.get_attribute("src").startswith("data:image/jpeg")  # the thumbnail
        page.wait_for_function("document.querySelector('#inspector img[data-role=\"source\"]').complete")
        assert source.evaluate("i => i.naturalWidth") > 0
        note = page.inner_text("#inspector .lb-note")
        assert f"copied_images/{lost.name}" in note and "missing" in note and "image folder" in note
        assert [e for e in errors if lost.name not in e and "Failed to load resource" not in e] == []


def _run_interrupted(manifest: Path, out: Path) -> None:
    """Score the scenario and press Ctrl-C while the first batch is scored."""
    from editlens.data.manifest import read_manifest
    from editlens.metrics.registry import create_metric
    from editlens.runner.run import run_evaluation

    samples = read_manifest(manifest).samples
    result = run_evaluation(samples, [create_metric("change_map"), create_metric("l1")], out, batch_size=4,
                            progress=False, on_batch=lambda i: os.kill(os.getpid(), signal.SIGINT),
                            extra_manifest={"manifest": str(manifest)})
    assert result.interrupted


def test_completeness_in_the_header(scenario, tmp_path):
    from editlens.runner.store import ResultsStore

    interrupted = tmp_path / "interrupted"
    _run_interrupted(scenario["manifest"], interrupted)
    # the same run while its process still works on it (this process holds its lock file), and after it died
    running = tmp_path / "running"
    shutil.copytree(interrupted, running)
    store = ResultsStore(running)
    meta = store.get_meta("manifest")
    store.set_meta("manifest", {k: v for k, v in meta.items() if k not in ("finished", "interrupted")})
    store.close()
    (running / ".lock").write_text(json.dumps({"pid": os.getpid(), "host": __import__("socket").gethostname()}))
    stopped = tmp_path / "stopped"
    shutil.copytree(running, stopped)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (stopped / ".lock").write_text(json.dumps({"pid": int(dead.stdout), "host": __import__("socket").gethostname()}))
    # rows dropped by --skip-invalid, with their reasons, and an evaluator that could not run
    rows = [json.loads(x) for x in scenario["manifest"].read_text().splitlines()][:3]
    rows.insert(1, {"id": "broken", "source": rows[0]["source"], "instruction": "no edited image"})
    small = scenario["root"] / "small.jsonl"
    small.write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = runner.invoke(app, ["run", str(small), "--out", str(tmp_path / "skipped"),  # default set: some cannot run here
                              "--skip-invalid", "--no-progress"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    pages = {name: write_run_report(tmp_path / name, tmp_path / f"{name}.html", n_boot=20)
             for name in ("interrupted", "running", "stopped", "skipped")}
    # a partial run's tables say how many of the sources their means cover (the first batch: one source)
    partial = pages["interrupted"].read_text()
    assert partial.count('data-sources="1" data-of="8">1 of 8 sources</span>') == 4 * 2  # 4 editors x 2 evaluators
    with chromium_page(width=1200, height=900) as (page, errors):
        _ready(page, pages["interrupted"].as_uri())
        state = page.locator("header .completeness .state")
        assert state.get_attribute("data-state") == "interrupted"
        assert "interrupted" in state.inner_text() and "4 of 32 edits" in state.inner_text()
        assert "finished" not in state.locator(".chip").inner_text()
        _ready(page, pages["running"].as_uri())
        assert "in progress" in page.inner_text("header .completeness") and "4 of 32 edits" in page.inner_text("header")
        assert page.get_attribute('header [role="progressbar"]', "aria-valuenow") == "4"
        _ready(page, pages["stopped"].as_uri())
        assert "stopped before finishing" in page.inner_text("header .completeness")
        _ready(page, pages["skipped"].as_uri())
        page.click("header details.skipped-rows summary")
        text = page.inner_text("header .completeness")
        assert "1 manifest row(s) skipped" in text and "line 2:" in text and "edited" in text
        assert "lpips" in page.inner_text("header details.not-run") and "3 of 3 edits" in text
        assert errors == []


def test_view_rebuilds_incrementally(scenario, tmp_path, monkeypatch):
    from editlens.reporting import stats, thumbs
    from editlens.reporting.serve import ReportServer

    run = tmp_path / "run"
    shutil.copytree(scenario["run"], run)
    server = ReportServer(run)
    server.serve_in_background()
    try:
        page = urllib.request.urlopen(server.url, timeout=30).read().decode()
        key = re.search(r"/thumb/([0-9a-f]+)", page).group(1)
        thumb = urllib.request.urlopen(server.url + "thumb/" + key, timeout=10)
        assert thumb.headers["Content-Type"] == "image/jpeg" and "immutable" in thumb.headers["Cache-Control"]
        assert urllib.request.urlopen(server.url + "favicon.ico", timeout=10).status == 204
        assert "data:image/jpeg" not in page  # served thumbnails are links, not a page of base64
        opened, boots = [], []
        real_open, real_boot = thumbs.Image.open, stats.bootstrap_ci
        monkeypatch.setattr(thumbs.Image, "open", lambda *a, **k: opened.append(a) or real_open(*a, **k))
        monkeypatch.setattr(stats, "bootstrap_ci", lambda *a, **k: boots.append(a) or real_boot(*a, **k))
        res = runner.invoke(app, ["run", str(scenario["manifest"]), "--out", str(run), "--metrics", METRICS + ",l2",
                                  "--dice", "--no-progress"], catch_exceptions=False)
        assert res.exit_code == 0, res.output
        opened.clear()  # the run decoded the images (to score l2); the report must not again
        boots.clear()
        t = time.perf_counter()
        second = urllib.request.urlopen(server.url, timeout=30).read().decode()
        took = time.perf_counter() - t
        assert server.builds == 2 and 'data-evaluator="l2"' in second
        assert opened == []  # no image decoded again
        # only the new evaluator's per-editor CIs are bootstrapped (an array seen before, like the
        # no-op's zeros, is looked up): every resampled array is one editor's l2 values
        l2 = {}
        for r in map(json.loads, open(run / "results.jsonl")):
            l2.setdefault(r["model"], []).append((r["id"], r["scores"]["l2"]["value"]))
        per_editor = [[v for _, v in sorted(vals)] for vals in l2.values()]
        assert 1 <= len(boots) <= len(EDITORS)
        assert all(any(list(b[0]) == v for v in per_editor) for b in boots)
        assert took < 10, took
    finally:
        server.close()


def test_the_extending_docs_example_draws_its_boxes(tmp_path):
    """docs/extending.md registers an evaluator with boxes; run it and find its layer in the report."""
    text = (REPO / "docs" / "extending.md").read_text(encoding="utf-8")
    code = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    from editlens.metrics import registry

    try:
        exec(compile(code, "docs/extending.md", "exec"), {})
        rows = [json.loads(x) for x in open(EXAMPLES / "manifest.jsonl")][:2]
        manifest = tmp_path / "m.jsonl"
        manifest.write_text("".join(json.dumps({**r, "source": str(EXAMPLES / r["source"]),
                                                "edited": str(EXAMPLES / r["edited"])}) + "\n" for r in rows))
        res = runner.invoke(app, ["run", str(manifest), "--out", str(tmp_path / "run"), "--metrics", "bright_spots",
                                  "--no-progress"], catch_exceptions=False)
        assert res.exit_code == 0, res.output
        data = collect_run(tmp_path / "run")
        assert data["layers"]["bright_spots"]["name"] == "bright spots"
        assert data["leaderboard"]["unranked"] == ["bright_spots"]  # it declared a similarity
        (box,) = [b for b in data["samples"][0]["boxes"] if b["by"] == "bright_spots"]
        assert box["box"] == [0.0, 0.0, 0.5, 0.5] and box["colour"] == "#ff9800" and box["label"].endswith("brighter")
        page = write_run_report(tmp_path / "run", tmp_path / "r.html", n_boot=20).read_text()
        assert 'data-layer="bright_spots"' in page
    finally:
        registry.METRICS.unregister("bright_spots")


def test_a_leaderboard_that_cannot_rank_says_why_and_what_to_add(tmp_path):
    """The model-free evaluators only (similarity scores, DICE without a VLM): nothing ranks the
    editors, and the report, `runs leaderboard` and `runs summary` say why and what to add."""
    made = build_scenario(tmp_path, mirror=False, upscale_one=False, examples=EXAMPLES)
    res = runner.invoke(app, ["run", str(made["manifest"]), "--out", str(tmp_path / "run"), "--metrics",
                              "change_map,l1,psnr", "--dice", "--no-progress"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    data = collect_run(tmp_path / "run", n_boot=50)
    assert data["leaderboard"]["tables"] == []
    why = data["leaderboard"]["why_empty"]
    assert why["why"][0].startswith("dice (instruction following) scored no edit (16 without a score (info)); most common reason: no VLM:")
    assert "change_map, l1, psnr measure similarity to the source" in why["why"][1]
    assert any("--vlm MODEL" in a for a in why["add"]) and any("'reference' column" in a for a in why["add"])
    assert any("captions" in a for a in why["add"])
    # the same in the terminal
    board = runner.invoke(app, ["runs", "leaderboard", str(tmp_path / "run"), "--format", "md"], catch_exceptions=False)
    assert board.exit_code == 0 and "nothing ranks the editors" in board.stdout and "not a ranking" in board.stdout
    assert why["why"][0].replace("|", "\\|") in board.stdout
    summary = runner.invoke(app, ["runs", "summary", str(tmp_path / "run"), "--by", "model"], catch_exceptions=False)
    assert summary.exit_code == 0
    line = next(x for x in summary.output.splitlines() if x.startswith("no_op") and " psnr " in x)
    assert line.endswith("(higher = closer to the source)")
    assert "measure similarity to the source: an editor that changes nothing scores best, so these means are not a " \
           "ranking" in summary.output and "to rank them, add one of:" in summary.output
    html = write_run_report(tmp_path / "run", tmp_path / "report.html", n_boot=50)
    with chromium_page(width=1280, height=900) as (page, errors):
        _ready(page, html.resolve().as_uri())
        box = page.locator("#leaderboard .nothing-ranked")
        assert box.is_visible()
        items = box.locator("ul.why li").all_inner_texts()
        assert items == why["why"] and box.locator("ul.add li").count() == len(why["add"])
        assert "no-op: 4/4 edits unchanged" in page.inner_text("#leaderboard .noop-flags")
        page.set_viewport_size({"width": 390, "height": 800})
        _no_overflow(page)
        assert box.bounding_box()["width"] <= 390
        # axis names are whole: a long one goes on two lines inside its plot, its ")" kept
        labels = page.eval_on_selector_all("svg text.xlabel", """ts => ts.map(t => { const b = t.getBBox();
            const w = t.ownerSVGElement.viewBox.baseVal.width; return [t.textContent, b.x >= 0 && b.x + b.width <= w]; })""")
        assert labels and all(inside for _, inside in labels), labels
        assert any(text.endswith("(lower = closer to the source)") for text, _ in labels)
        assert errors == []


def test_runs_leaderboard_formats_and_grouping(scenario):
    run = str(scenario["run"])
    lb = scenario["data"]["leaderboard"]
    table = {(t["scope"], t["evaluator"]): t for t in lb["tables"]}[("all", "detail_kept")]
    csv_out = runner.invoke(app, ["runs", "leaderboard", run, "--format", "csv", "--n-boot", "1000"], catch_exceptions=False)
    import csv as csv_mod

    rows = list(csv_mod.DictReader(csv_out.stdout.splitlines()))
    ranked = [r for r in rows if r["scope"] == "all" and r["evaluator"] == "detail_kept"]
    assert [r["editor"] for r in ranked] == [r["model"] for r in table["rows"]]
    assert [float(r["ci_low"]) for r in ranked] == pytest.approx([r["ci"][0] for r in table["rows"]])
    assert ranked[-1]["rank"] == "" and ranked[-1]["noop"] == "8/8 edits unchanged"
    assert {r["kind"] for r in rows if r["evaluator"] == "ssim"} == {"similarity (not a ranking)"}
    latex = runner.invoke(app, ["runs", "leaderboard", run, "--format", "latex", "--scope", "move"], catch_exceptions=False)
    assert latex.exit_code == 0 and r"\toprule" in latex.stdout and r"ground\_truth" in latex.stdout
    assert latex.stdout.count(r"\begin{tabular}") == 1 + 4  # the move scope's ranked table, then 4 similarity ones
    text = runner.invoke(app, ["runs", "leaderboard", run], catch_exceptions=False).stdout
    assert "detail_kept (edit quality, higher is better)" in text and "no-op flag: no_op: 8/8 edits unchanged" in text
    # any manifest column groups the leaderboard; a missing one is a clear error naming the columns there are
    by = runner.invoke(app, ["runs", "leaderboard", run, "--by", "edit_type", "--format", "json"], catch_exceptions=False)
    scopes = {t["scope"] for t in json.loads(by.stdout)["tables"]}
    assert scopes == {"all", "type:add", "type:move", "type:replace"}
    bad = runner.invoke(app, ["runs", "leaderboard", run, "--by", "lighting"])
    assert bad.exit_code == 2 and "lighting" in bad.output and "edit_type" in bad.output
    assert runner.invoke(app, ["runs", "leaderboard", run, "--by", "model"]).exit_code == 2

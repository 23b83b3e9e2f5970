"""The HTML run report: collected data, CLI, server, and the page in a real headless Chromium.

The browser tests need the system's Chromium (Debian: `apt-get install chromium`); they fail,
never skip, when it is missing. Screenshots go to $EDITLENS_TEST_ARTIFACTS (default: the test's
temp dir).
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from helpers import EXAMPLES
from scipy import stats
from typer.testing import CliRunner

from editlens.cli.main import app
from editlens.reporting.collect import collect_run
from editlens.reporting.runs import evaluator_summary, summary_table
from editlens.testing.browser import chromium_page
from editlens.testing.synthetic_run import make_synthetic_run

runner = CliRunner()


def _artifact(tmp_path: Path, name: str) -> Path:
    folder = Path(os.environ.get("EDITLENS_TEST_ARTIFACTS", tmp_path))
    folder.mkdir(parents=True, exist_ok=True)
    return folder / name


def _open(page, html: Path, state: str = "#v=cards") -> None:  # type: ignore[no-untyped-def]
    """Open a report (by default on its list of edit cards) and wait until it is drawn."""
    page.goto(html.resolve().as_uri() + state)
    page.wait_for_function("document.body.hasAttribute('data-ready')")


def _card_ids(page) -> list[str]:  # type: ignore[no-untyped-def]
    return page.eval_on_selector_all("#cards .card", "cs => cs.map(c => c.dataset.id)")


def _box_geometry(page, sid: str, role: str) -> list[dict]:  # type: ignore[no-untyped-def]
    """Each box drawn on a card's image, one entry per box number (boxes in the same place are
    drawn once with all their numbers): its data and its on-screen position as fractions of the image."""
    drawn = page.evaluate("""([sid, role]) => {
        const fig = document.querySelector(`.card[data-id="${sid}"] figure[data-role="${role}"]`);
        const img = fig.querySelector('img').getBoundingClientRect();
        return Array.from(fig.querySelectorAll('.bx')).map(r => {
            const b = r.getBoundingClientRect(), cs = getComputedStyle(r);
            return {by: r.dataset.by, kind: r.dataset.kind || null, colour: cs.borderTopColor, ns: r.dataset.ns.split(' ').map(Number),
                    dashed: cs.borderTopStyle === 'dashed', box: r.dataset.box.split(',').map(Number),
                    screen: [(b.left - img.left) / img.width, (b.top - img.top) / img.height,
                             (b.right - img.left) / img.width, (b.bottom - img.top) / img.height]};
        });
    }""", [sid, role])
    boxes = {b["n"]: b for b in page.evaluate(
        "sid => JSON.parse(document.getElementById('report-data').textContent).samples.find(s => s.id === sid).boxes", sid)}
    return [{**d, "n": n, "by": boxes[n]["by"], "kind": boxes[n]["kind"]} for d in drawn for n in d["ns"]]


def _rgb(hex_colour: str) -> str:
    h = hex_colour.lstrip("#")
    return "rgb({}, {}, {})".format(*(int(h[i:i + 2], 16) for i in (0, 2, 4)))


def _screenshot(page, path: Path) -> None:  # type: ignore[no-untyped-def]
    page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 10_000 and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def example_run(tmp_path_factory) -> Path:  # type: ignore[no-untyped-def]
    out = tmp_path_factory.mktemp("example") / "run"
    res = runner.invoke(app, ["run", str(EXAMPLES / "manifest.jsonl"), "--out", str(out),
                              "--metrics", "change_map,l1,ssim,psnr", "--no-progress"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return out


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):  # type: ignore[no-untyped-def]
    return make_synthetic_run(tmp_path_factory.mktemp("synthetic"), n=30, human=True)


# ------------------------------------------------------------------------------------------ data, no browser

def test_collect_matches_run_tables(example_run):
    data = collect_run(example_run)
    assert [s["id"] for s in data["samples"]] == [json.loads(x)["id"] for x in open(EXAMPLES / "manifest.jsonl")]
    by = {(r["model"], r["evaluator"]): r for r in data["per_model"]}
    for row in summary_table(example_run, by="model"):
        mine = by[(row["group"], row["evaluator"])]
        assert mine["n"] == row["n"] and mine["mean"] == pytest.approx(row["mean"]) and mine["ci"] == row["ci"]
    cat = next(s for s in data["samples"] if s["id"] == "cat_seat")
    assert cat["images"]["source"].endswith("cat_seat_source.png")
    regions = cat["scores"]["change_map"]["details"]["regions"]
    assert [b["box"] for b in cat["boxes"]] == [r["box_norm"] for r in regions]
    assert all(b["on"] == ["source", "edited"] and b["kind"] == "LOCAL" and b["dashed"] for b in cat["boxes"])
    assert [b["n"] for b in cat["boxes"]] == list(range(1, len(regions) + 1))
    # what each score measures comes from its spec: these four all measure similarity to the source
    assert {data["measures"][e] for e in ("change_map", "l1", "ssim", "psnr")} == {"similarity"}
    assert data["leaderboard"]["ranked"] == [] and data["leaderboard"]["tables"] == []
    noop = next(s for s in data["samples"] if s["id"] == "cat_seat_noop")
    assert noop["unchanged"] == ["change_map"] and noop["boxes"] == []


def test_collect_human_agreement_and_statuses(synthetic):
    data = collect_run(synthetic["run"], n_boot=100)
    truth = {s["id"]: s for s in synthetic["samples"]}
    l1 = [(truth[s["id"]]["scores"]["l1"].value, truth[s["id"]]["human"]) for s in data["samples"]]
    rho = next(r for r in data["human"]["overall"] if r["evaluator"] == "l1" and r["method"] == "spearman")
    assert rho["value"] == pytest.approx(stats.spearmanr(*zip(*l1))[0]) and rho["n"] == 30
    assert rho["ci95"][0] <= rho["value"] <= rho["ci95"][1]
    # failed ssim rows are left out of the correlation, never given a number
    ssim = next(r for r in data["human"]["overall"] if r["evaluator"] == "ssim" and r["method"] == "pearson")
    assert ssim["n"] == 30 - len([i for i in range(30) if i % 11 == 5])
    s3 = next(s for s in data["samples"] if s["id"] == "s0003")
    assert s3["verdicts"] == ["unscored"] and "unscored" in s3["statuses"]
    s1 = next(s for s in data["samples"] if s["id"] == "s0001")  # REMOVE, judged not coherent
    assert s1["verdicts"] == ["unwanted"]
    assert [b["on"] for b in s1["boxes"] if b["by"] == "dice"] == [["source"]]
    assert [t["evaluator"] for t in data["summaries"]] == ["dice"]
    assert data["summaries"][0]["rows"] == evaluator_summary(synthetic["run"], "dice")


def test_report_cli_and_errors(example_run, tmp_path):
    out = tmp_path / "r.html"
    res = runner.invoke(app, ["report", str(example_run), "--out", str(out)], catch_exceptions=False)
    assert res.exit_code == 0 and out.is_file(), res.output
    page = out.read_text()
    # self-contained: nothing is fetched from anywhere (the icon is inline)
    assert not re.search(r"<script[^>]*\ssrc=|<link\b(?![^>]*href=\"data:)|(src|href)=[\"']?(https?:)?//", page)
    assert '<link rel="icon" href="data:image/svg+xml,' in page
    bad = runner.invoke(app, ["report", str(tmp_path / "nope")])
    assert bad.exit_code == 2 and "not a run directory" in bad.output
    missing_human = runner.invoke(app, ["report", str(example_run), "--human", str(tmp_path / "h.jsonl")])
    assert missing_human.exit_code == 2 and "h.jsonl: human scores file not found" in missing_human.output


def test_report_without_manifest_still_shows_scores(example_run, tmp_path):
    data = collect_run(example_run, manifest=tmp_path / "moved.jsonl")
    assert all(not s["images"] for s in data["samples"])
    assert any("moved.jsonl not found" in n for n in data["notes"])


def test_view_serves_report_and_only_run_images(example_run):
    from editlens.reporting.serve import ReportServer

    server = ReportServer(example_run)
    server.serve_in_background()
    try:
        assert server.url.startswith("http://127.0.0.1:")
        page = urllib.request.urlopen(server.url, timeout=10).read().decode()
        assert "/image/0" in page and "cat_seat" in page
        img = urllib.request.urlopen(server.url + "image/0", timeout=10)
        assert img.headers["Content-Type"] == "image/png"
        for bad in ("image/999", "image/x", "../etc/passwd", "etc/passwd"):
            with pytest.raises(urllib.error.HTTPError) as err:
                urllib.request.urlopen(server.url + bad, timeout=10)
            assert err.value.code == 404
    finally:
        server.close()


def test_view_rebuilds_when_the_run_changes(example_run, tmp_path):
    import shutil

    from editlens.reporting.serve import ReportServer

    run = tmp_path / "run"
    shutil.copytree(example_run, run)
    server = ReportServer(run)
    server.serve_in_background()
    try:
        first = urllib.request.urlopen(server.url, timeout=10).read().decode()
        urllib.request.urlopen(server.url, timeout=10).read()
        assert server.builds == 1  # unchanged run: no rebuild per request
        assert 'data-evaluator="l2"' not in first
        images = list(server.images)
        # The run goes on: a new evaluator's results land in the same directory.
        res = runner.invoke(app, ["run", str(EXAMPLES / "manifest.jsonl"), "--out", str(run),
                                  "--metrics", "change_map,l1,ssim,psnr,l2", "--no-progress"], catch_exceptions=False)
        assert res.exit_code == 0, res.output
        second = urllib.request.urlopen(server.url, timeout=10).read().decode()
        assert server.builds == 2 and 'data-evaluator="l2"' in second
        assert server.images[: len(images)] == images  # earlier pages' image links stay valid
    finally:
        server.close()


def test_view_cli_prints_url_after_binding(example_run):
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    proc = subprocess.Popen([sys.executable, "-m", "editlens.cli.main", "view", str(example_run)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = proc.stdout.readline()
        url = line.split(" at ")[1].split()[0]
        assert b"cat_seat" in urllib.request.urlopen(url, timeout=10).read()
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_meta_eval_report(tmp_path):

    (tmp_path / "p.jsonl").write_text("".join(json.dumps({"id": k, "score": v}) + "\n"
                                              for k, v in {"a": 0.9, "b": 0.1, "c": 0.5, "d": 0.52}.items()))
    (tmp_path / "h.jsonl").write_text('{"id": "x", "a": "a", "b": "b", "preference": "A"}\n'
                                      '{"id": "y", "a": "c", "b": "d", "preference": "tie"}\n'
                                      '{"id": "z", "a": "b", "b": "c", "preference": "A"}\n')
    out = tmp_path / "meta.html"
    res = runner.invoke(app, ["meta-eval", "pairwise", "--human", str(tmp_path / "h.jsonl"),
                              "--predictions", str(tmp_path / "p.jsonl"), "--report", str(out)], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    # threshold 0.02 makes (c, d) a tie; (a, b) right; (b, c) predicted B better, human says A
    page = out.read_text()
    assert "Pairwise verdicts" in page and "0.02" in page
    with chromium_page() as (browser_page, errors):
        browser_page.goto(out.resolve().as_uri())
        cells = browser_page.eval_on_selector_all("table.confusion tbody tr",
                                                  "rs => rs.map(r => Array.from(r.querySelectorAll('td.num')).map(c => +c.textContent))")
        assert cells == [[1, 0, 1], [0, 1, 0], [0, 0, 0]]
        assert errors == []


def test_meta_eval_pointwise_report(tmp_path):
    from editlens.reporting.meta_html import pointwise_points

    human = {f"{m}/{i}": (i * 1.0 + (m == "m2")) for m in ("m1", "m2") for i in range(6)}
    (tmp_path / "h.jsonl").write_text("".join(json.dumps({"id": k, "model": k.split("/")[0], "human": v}) + "\n"
                                              for k, v in human.items()))
    (tmp_path / "p.jsonl").write_text("".join(json.dumps({"id": k, "score": (v * 7) % 5}) + "\n" for k, v in human.items()))
    # the same scores as an editlens run's results, whose manifest names the judge's model
    run = tmp_path / "judge_run"
    run.mkdir()
    (run / "results.jsonl").write_text("".join(json.dumps({"id": k, "model": k.split("/")[0], "scores": {
        "viescore": {"status": "scored", "value": (v * 7) % 5}}}) + "\n" for k, v in human.items()))
    (run / "manifest.json").write_text(json.dumps({"evaluators": [
        {"name": "viescore", "options": {"vlm": str(tmp_path / "models" / "tiny-vl")}}]}))
    out = tmp_path / "pw.html"
    res = runner.invoke(app, ["meta-eval", "pointwise", "--human", str(tmp_path / "h.jsonl"), "--predictions",
                              str(run / "results.jsonl"), "--metric", "viescore", "--n-boot", "50", "--report", str(out)],
                        catch_exceptions=False)
    assert res.exit_code == 0, res.output
    page = out.read_text()
    assert 'id="per-method"' in page and 'id="scatter"' in page and "all items pooled · Spearman ρ" in page
    # the system-level result is a table at the top, not hidden in the JSON
    assert page.index('id="system"') < page.index('id="summary"') and 'class="data system"' in page
    pts = pointwise_points(tmp_path / "h.jsonl", tmp_path / "p.jsonl")
    assert sorted(pts) == sorted(((v * 7) % 5, v, k.split("/")[0]) for k, v in human.items())
    # the page names what it measures, with the statistic's name, and carries no path of this machine
    assert str(tmp_path) not in page and "headline agreement" not in page.lower()
    js = runner.invoke(app, ["meta-eval", "pointwise", "--human", str(tmp_path / "h.jsonl"), "--predictions",
                             str(run / "results.jsonl"), "--metric", "viescore", "--n-boot", "50", "--json"])
    assert json.loads(js.stdout)["evaluated"] == {"evaluator": "viescore", "answers": "results.jsonl",
                                                  "model": {"vlm": "tiny-vl"}, "run": "judge_run", "human": "h.jsonl"}
    with chromium_page(width=390, height=800) as (browser_page, errors):
        browser_page.goto(out.resolve().as_uri())
        head = browser_page.inner_text("header")
        assert "evaluator viescore" in head and "tiny-vl" in head and "answers from results.jsonl" in head
        assert "Spearman ρ over all items" in head and "system-level Kendall τ" in head  # as written, not upper-cased
        assert browser_page.evaluate("document.documentElement.scrollWidth") <= 390
        # plots at their own size (a narrow screen scrolls them), their type at least 9 pt = 12 px
        sizes = browser_page.eval_on_selector_all("img.plot", "is => is.map(i => [i.naturalWidth, i.clientWidth])")
        assert sizes and all(shown >= natural - 1 for natural, shown in sizes)
        srcs = browser_page.eval_on_selector_all("img.plot", "is => is.map(i => i.src)")
        assert all(u.startswith("data:image/svg+xml;base64,") for u in srcs)
        fonts = {float(x) for u in srcs for x in re.findall(r"font[^;\"]*?([\d.]+)px", base64.b64decode(u.split(",")[1]).decode())}
        assert fonts and min(fonts) >= 9
        assert errors == []


@pytest.mark.integration
def test_meta_eval_imagenhub_report_puts_the_system_level_first(tmp_path):
    from helpers import shared_path

    root = shared_path("benchmarks", "imagenhub_tie")
    out = tmp_path / "ih.html"
    res = runner.invoke(app, ["meta-eval", "imagenhub", "--ratings", str(root / "human_ratings"), "--judge-outputs",
                              str(root / "judge_outputs" / "gpt4o_0shot"), "--n-boot", "50", "--report", str(out)],
                        catch_exceptions=False)
    assert res.exit_code == 0, res.output
    page = out.read_text()
    assert "0.3821" in page and page.index('id="system"') < page.index('id="correlations"')
    with chromium_page() as (browser_page, errors):
        browser_page.goto(out.resolve().as_uri())
        rows = browser_page.locator("table.system tbody tr")
        assert rows.count() == 8  # the eight editing methods, human and predicted means and ranks
        tau = float(browser_page.get_attribute("#system .headline", "data-tau"))
        assert -1 <= tau <= 1 and "Kendall τ" in browser_page.inner_text("#system")
        # plain words, not result keys
        assert "overall rating (O)" in browser_page.inner_text("#correlations") and "aspects ·" not in page
        assert errors == []


# ------------------------------------------------------------------------------------------ in the browser

def test_example_run_report_in_chromium(example_run, tmp_path):
    html = tmp_path / "example.html"
    assert runner.invoke(app, ["report", str(example_run), "--out", str(html)]).exit_code == 0
    records = {r["id"]: r for r in map(json.loads, open(example_run / "results.jsonl"))}
    with chromium_page() as (page, errors):
        _open(page, html)
        assert sorted(_card_ids(page)) == sorted(records)  # every card present
        assert _card_ids(page) == list(records)  # manifest order
        # boxes drawn where the change map says, on both images, read back from the rendered page
        for sid, rec in records.items():
            regions = rec["scores"]["change_map"]["details"]["regions"]
            for role in ("source", "edited"):
                drawn = _box_geometry(page, sid, role)
                assert [d["box"] for d in drawn] == [r["box_norm"] for r in regions]
                for d in drawn:
                    assert d["screen"] == pytest.approx(d["box"], abs=0.01) and d["by"] == "change_map" and d["dashed"]
        # the inspector shows the full-size image itself (embedded: a small run), byte for byte
        page.click('.card[data-id="cat_seat"] figure[data-role="edited"] .frame')
        src = page.get_attribute('#inspector img[data-role="edited"]', "src")
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1]) == (EXAMPLES / "images" / "cat_seat_edited.png").read_bytes()
        page.keyboard.press("Escape")
        assert page.is_hidden("#inspector")
        # filter by editing model
        page.select_option("#f-model", "no_op")
        assert _card_ids(page) == ["cat_seat_noop"]
        page.select_option("#f-model", "")
        # filter by metric value
        page.select_option("#f-metric", "ssim")
        page.fill("#f-min", "0.93")
        assert sorted(_card_ids(page)) == sorted(k for k, r in records.items() if r["scores"]["ssim"]["value"] >= 0.93)
        page.fill("#f-min", "")
        # sort by a metric, both directions
        page.select_option("#sort", "m:ssim")
        by_ssim = sorted(records, key=lambda k: records[k]["scores"]["ssim"]["value"])
        assert _card_ids(page) == by_ssim
        page.click("#sort-dir")
        assert _card_ids(page) == by_ssim[::-1]
        page.select_option("#sort", "order")
        _screenshot(page, _artifact(tmp_path, "report-example.png"))
        assert errors == []


def test_synthetic_report_filters_pages_and_colours(synthetic, tmp_path):
    from editlens.reporting.html import write_run_report

    html = write_run_report(synthetic["run"], tmp_path / "syn.html", n_boot=100)
    truth = {s["id"]: s for s in synthetic["samples"]}
    with chromium_page() as (page, errors):
        _open(page, html)
        assert page.inner_text("#count") == "edits 1–24 of 30" and len(_card_ids(page)) == 24
        assert page.inner_text('.card[data-id="s0004"] .instr').endswith('</script><script>window.pwned = 1</script>')
        assert page.evaluate("window.pwned === undefined")
        first = _card_ids(page)
        page.click("#next")
        assert page.inner_text("#page-info") == "page 2 / 2" and page.is_disabled("#next")
        assert sorted(first + _card_ids(page)) == sorted(truth)
        # DICE colour code: ADD only on the edited image (red), REMOVE/EDIT only on the source
        page.select_option("#page-size", "48")
        colours = {"ADD": "#e53935", "REMOVE": "#1e63d6", "EDIT": "#22a046"}
        for sid, s in truth.items():
            for role in ("source", "edited"):
                dice = [d for d in _box_geometry(page, sid, role) if d["by"] == "dice"]
                expected = [d for d in s["differences"] if (d["command"] == "ADD") == (role == "edited")]
                assert [d["box"] for d in dice] == [d["box"] for d in expected]
                for d in dice:
                    assert d["colour"] == _rgb(colours[d["kind"]])
                    assert d["screen"] == pytest.approx(d["box"], abs=0.01)
        # verdict and status filters hide exactly the right cards
        page.select_option("#f-verdict", "unscored")
        assert sorted(_card_ids(page)) == sorted(k for k, s in truth.items() if s["scores"]["dice"].status == "unscored")
        assert page.locator('.card tr[data-evaluator="dice"] details pre').first.text_content().startswith("garbled answer")
        judge = page.locator('.card[data-id="s0003"] tr[data-evaluator="viescore"]')
        assert "SC answer has no two 0-10 scores" in judge.inner_text()
        assert "SC: unparsable judge text 3" in judge.locator("pre").text_content()
        assert "(filtered from 30)" in page.inner_text("#count")
        page.select_option("#f-verdict", "unwanted")
        assert "SC: judge reasoning 1\nPQ: looks natural" in page.inner_text('.card[data-id="s0001"] tr[data-evaluator="viescore"]')
        assert sorted(_card_ids(page)) == sorted(k for k, s in truth.items() if s["differences"]
                                                 and s["differences"][0]["verdict"]["coherent"] is False)
        page.select_option("#f-verdict", "")
        page.select_option("#f-status", "failed")
        failed = sorted(k for k, s in truth.items() if s["scores"]["ssim"].status == "failed")
        assert sorted(_card_ids(page)) == failed
        assert "fixture failure" in page.inner_text(f'.card[data-id="{failed[0]}"] tr[data-evaluator="ssim"]')
        page.select_option("#f-status", "")
        page.fill("#f-text", "remove")
        assert sorted(_card_ids(page)) == sorted(k for k, s in truth.items() if s["command"] == "REMOVE")
        page.fill("#f-text", "")
        assert page.locator('.card[data-id="s0005"] figure').count() == 3  # source | edited | reference
        assert page.locator('.card[data-id="s0006"] figure').count() == 2
        # sorting by a metric puts samples without a value (failed ssim) last, in both directions
        failed_ssim = {k for k, s in truth.items() if s["scores"]["ssim"].status != "scored"}
        page.select_option("#sort", "m:ssim")
        for _ in range(2):
            ids = _card_ids(page)
            values = [truth[k]["scores"]["ssim"].value for k in ids[:-len(failed_ssim)]]
            assert set(ids[-len(failed_ssim):]) == failed_ssim
            assert values == sorted(values, reverse=page.get_attribute("#sort-dir", "data-dir") == "desc")
            page.click("#sort-dir")
        page.select_option("#sort", "human")
        page.click("#sort-dir")
        assert _card_ids(page) == sorted(truth, key=lambda k: -truth[k]["human"])
        # the ranking table shows whatever columns the ranking rows have
        headers = page.eval_on_selector_all("table.summary-dice th", "hs => hs.map(h => h.textContent)")
        assert headers == [k.replace("_", " ") for k in evaluator_summary(synthetic["run"], "dice")[0]]
        # plots drawn by the page, one panel per evaluator, every axis labelled
        data = collect_run(synthetic["run"], n_boot=20)
        assert page.locator("#human [data-plot=human-scatter] svg").count() == len(data["human"]["points"])
        assert page.locator("#human [data-plot=human-per-model] svg").count() == 1
        assert page.locator("#plots svg").count() == len(data["scored_evaluators"])
        for svg in page.locator("#plots svg, #human svg").all():  # both axes named
            assert svg.locator("text.xlabel").text_content().strip() and svg.locator("text.ylabel").text_content().strip()
        assert page.locator("#human [data-plot=human-scatter] svg text.ylabel").count() == len(data["human"]["points"])
        l1 = [(s["scores"]["l1"].value, s["human"]) for s in truth.values()]
        cell = page.inner_text('#human td[data-evaluator="l1"][data-method="spearman"]')
        assert float(cell.split()[0]) == pytest.approx(stats.spearmanr(*zip(*l1))[0], abs=1e-4) and "95% CI" in cell
        assert errors == []


@pytest.fixture(scope="module")
def tiny_idefics3(tmp_path_factory) -> Path:  # type: ignore[no-untyped-def]
    from editlens.models.random_init import build_idefics3

    return build_idefics3(tmp_path_factory.mktemp("tiny-idefics3"))


def _dice_run(out: Path, vlm: Path, detector: str, manifest: Path = EXAMPLES / "manifest.jsonl") -> Path:
    res = runner.invoke(app, ["run", str(manifest), "--out", str(out), "--metrics", "l1,ssim",
                              "--dice", "--vlm", str(vlm), "--option", f"dice.detector={detector}",
                              "--cache", "none", "--no-progress"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return out


@pytest.fixture(scope="module")
def dice_run(tmp_path_factory, tiny_idefics3) -> Path:  # type: ignore[no-untyped-def]
    """A DICE run of the example edits with a tiny random Idefics3: change-map boxes, VLM verdicts."""
    return _dice_run(tmp_path_factory.mktemp("dice") / "run", tiny_idefics3, "changemap")


def test_dice_run_with_vlm_detector_shows_raw_answers(tiny_idefics3, tmp_path):
    """The tiny VLM as DICE's detector: its noise is recorded as unscored with the raw answer, and shown so."""
    # two edits keep the random model's long answers cheap
    rows = [json.loads(x) for x in open(EXAMPLES / "manifest.jsonl")][:2]
    manifest = tmp_path / "two.jsonl"
    manifest.write_text("".join(json.dumps({**r, "source": str(EXAMPLES / r["source"]),
                                            "edited": str(EXAMPLES / r["edited"])}) + "\n" for r in rows))
    run = _dice_run(tmp_path / "run", tiny_idefics3, "mllm", manifest)
    records = {r["id"]: r["scores"]["dice"] for r in map(json.loads, open(run / "results.jsonl"))}
    html = tmp_path / "mllm.html"
    assert runner.invoke(app, ["report", str(run), "--out", str(html)]).exit_code == 0
    with chromium_page() as (page, errors):
        _open(page, html)
        for sid, d in records.items():
            card = page.locator(f'.card[data-id="{sid}"]')
            if d["status"] == "unscored" and not d["details"]["differences"]:
                assert "unscored" in card.locator("header").inner_text()
                assert card.locator('tr[data-evaluator="dice"] details pre').first.text_content() == d["details"]["raw"][:2000]
        assert errors == []


def test_dice_run_report_in_chromium(dice_run, tmp_path):
    html = tmp_path / "dice.html"
    assert runner.invoke(app, ["report", str(dice_run), "--out", str(html)]).exit_code == 0
    records = {r["id"]: r for r in map(json.loads, open(dice_run / "results.jsonl"))}
    with chromium_page() as (page, errors):
        _open(page, html)
        assert sorted(_card_ids(page)) == sorted(records)
        for sid, rec in records.items():
            diffs = rec["scores"]["dice"]["details"]["differences"]
            for role in ("source", "edited"):  # CHANGE (kind unknown) is drawn on both images
                drawn = [d for d in _box_geometry(page, sid, role) if d["by"] == "dice"]
                assert [d["box"] for d in drawn] == [d["box"] for d in diffs]
                assert all(d["screen"] == pytest.approx(d["box"], abs=0.01) for d in drawn)
            # every verdict is shown as the model gave it: parsed, or unscored with its raw answer
            items = page.locator(f'.card[data-id="{sid}"] .items[data-layer="dice"] li')
            assert items.count() == len(diffs)
            for i, d in enumerate(diffs):
                text = items.nth(i).text_content()
                coherent = d["verdict"].get("coherent")
                assert {True: "coherent", False: "not coherent", None: "unscored"}[coherent] in text
        no_change = [k for k, r in records.items() if not r["scores"]["dice"]["details"]["differences"]]
        page.select_option("#f-verdict", "no change")
        assert sorted(_card_ids(page)) == sorted(no_change)
        page.select_option("#f-verdict", "")
        rows = evaluator_summary(dice_run, "dice")
        assert page.locator("table.summary-dice tbody tr").count() == len(rows)
        _screenshot(page, _artifact(tmp_path, "report-dice.png"))
        assert errors == []


def test_missing_image_and_meta_eval_in_run_report(synthetic, tmp_path):
    import shutil

    from editlens.reporting.html import write_run_report

    root = tmp_path / "copy"
    shutil.copytree(synthetic["run"].parent, root)
    manifest = root / "manifest.jsonl"
    (root / "images" / "s0002_edit.png").write_bytes(b"not a png")
    meta = tmp_path / "meta.json"
    meta.write_text(json.dumps({"benchmark": "pointwise", "protocol": "aurora-pointwise", "value": 0.5,
                                "overall": {"spearman": {"method": "spearman", "value": 0.61, "ci95": [0.4, 0.75], "n": 30}}}))
    html = write_run_report(root / "run", tmp_path / "r.html", manifest=manifest, meta_eval=[meta], n_boot=50)
    with chromium_page() as (page, errors):
        _open(page, html)
        fig = page.locator('.card[data-id="s0002"] figure[data-role="edited"]')
        assert "s0002_edit.png: cannot be read" in fig.inner_text()
        assert page.locator('.card[data-id="s0002"] figure[data-role="source"] img').count() == 1
        assert "0.61" in page.inner_text("#meta0") and page.locator("#meta0 img.plot").count() == 1
        assert errors == []
    bad = runner.invoke(app, ["report", str(root / "run"), "--meta-eval", str(manifest)])
    assert bad.exit_code == 2 and "manifest.jsonl: not valid JSON" in bad.output

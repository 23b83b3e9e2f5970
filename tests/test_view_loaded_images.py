"""``editlens view`` serves exactly the image files the run decoded, from the run
store's per-image record; a run without that record falls back to its results."""

from __future__ import annotations

import json
import shutil
import sqlite3
import urllib.error
import urllib.request

import pytest
from helpers import EXAMPLES
from typer.testing import CliRunner

from editlens.cli.main import app
from editlens.runner.store import IMAGES_RECORDED, recorded_images


def _get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as err:
        return err.code


def _run(tmp_path):  # type: ignore[no-untyped-def]
    rows = [json.loads(x) for x in (EXAMPLES / "manifest.jsonl").read_text().splitlines() if x.strip()][:3]
    for r in rows:
        for k in ("source", "edited"):
            r[k] = str((EXAMPLES / r[k]).resolve())
    manifest = tmp_path / "m.jsonl"
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows))
    run = tmp_path / "run"
    res = CliRunner().invoke(app, ["run", str(manifest), "--out", str(run), "--metrics", "l1", "--no-progress"])
    assert res.exit_code == 0, res.output
    # the manifest changed after the run: row 0's edit is now another image (a real one, its sample
    # scored fine), a file the run never read
    other = tmp_path / "elsewhere" / "never_read.png"
    other.parent.mkdir()
    shutil.copy(EXAMPLES / "images" / "hydrant_edited.png", other)
    changed = tmp_path / "changed.jsonl"
    changed.write_text("".join(json.dumps({**r, "edited": str(other)} if i == 0 else r) + "\n"
                               for i, r in enumerate(rows)))
    return run, rows, other, changed


def _statuses(run, manifest, paths):  # type: ignore[no-untyped-def]
    from editlens.reporting.serve import ReportServer

    server = ReportServer(run, manifest=manifest)
    server.serve_in_background()
    try:
        # an image the page never links to (left out of its row) is a 404 too
        return ({p: _get(f"{server.url}image/{server.images.index(p)}") if p in server.images else 404 for p in paths},
                server.fallback_note)
    finally:
        server.close()


def test_view_serves_only_the_files_the_run_read(tmp_path):
    run, rows, other, changed = _run(tmp_path)
    read = {r[k] for r in rows for k in ("source", "edited")}
    assert recorded_images(run) == read  # real paths, one per file the run decoded
    linked = tmp_path / "link.png"  # a link made after the run, to a file the run read: the file is what counts
    linked.symlink_to(rows[1]["source"])
    with_link = tmp_path / "link.jsonl"
    with_link.write_text(json.dumps({**rows[1], "source": str(linked)}) + "\n")

    got, note = _statuses(run, changed, [str(other), rows[0]["source"], rows[1]["edited"]])
    assert note is None
    assert got == {str(other): 404, rows[0]["source"]: 200, rows[1]["edited"]: 200}
    assert _statuses(run, with_link, [str(linked)])[0] == {str(linked): 200}


def test_view_of_a_run_without_the_record_falls_back_to_its_results_and_says_so(tmp_path, capsys):
    run, rows, other, changed = _run(tmp_path)
    with sqlite3.connect(run / "results.sqlite") as db:  # as a store written before the record existed
        db.execute("DROP TABLE loaded_images")
        db.execute("DELETE FROM meta WHERE key=?", (IMAGES_RECORDED,))
    assert recorded_images(run) is None
    got, note = _statuses(run, changed, [str(other), rows[1]["edited"]])
    # the old rule: images of samples with a result that is not failed (row 0 scored, so its new file too)
    assert got == {str(other): 200, rows[1]["edited"]: 200}
    assert "no record of the images it read" in note and note in capsys.readouterr().err


def test_a_run_resumed_from_a_store_without_the_record_is_not_marked_complete(tmp_path):
    from editlens.runner.store import ResultsStore

    run, *_ = _run(tmp_path)
    with sqlite3.connect(run / "results.sqlite") as db:
        db.execute("DELETE FROM meta WHERE key=?", (IMAGES_RECORDED,))
    store = ResultsStore(run)
    try:
        assert store.start_image_record() is False  # earlier results' images are unknown
    finally:
        store.close()
    assert recorded_images(run) is None


def test_report_embeds_and_copies_only_the_files_the_run_read(tmp_path):
    import base64

    import numpy as np
    from PIL import Image

    run, rows, other, changed = _run(tmp_path)
    noise = np.random.default_rng(7).integers(0, 256, (48, 64, 3), dtype=np.uint8)
    Image.fromarray(noise).save(other)  # bytes found nowhere else (the copy the helper made is of a read image)
    secret = base64.b64encode(other.read_bytes()).decode()[100:300]
    for mode in ("embed", "copy"):
        out = tmp_path / f"report_{mode}.html"
        res = CliRunner().invoke(app, ["report", str(run), "--manifest", str(changed), "--out", str(out),
                                       "--images", mode])
        assert res.exit_code == 0, res.output
        page = out.read_text()
        assert "not the ones this run read for those rows" in page and secret not in page
        copied = tmp_path / f"report_{mode}_images"
        names = sorted(p.name for p in copied.iterdir()) if copied.is_dir() else []
        assert "never_read.png" not in names and all(other.read_bytes() != p.read_bytes()
                                                     for p in copied.glob("*") if p.is_file())
        if mode == "copy":
            assert names  # the images the run did read were copied
            # real copies, never hard links: editing the report's image leaves the original alone
            assert all(p.stat().st_nlink == 1 for p in copied.glob("*") if p.is_file())


def test_a_row_shows_only_the_image_the_run_scored_for_that_row(tmp_path):
    """A manifest changed after the run so that row 0 names row 1's edit (a file the run did read, for
    another row): the report and view leave it out of row 0 rather than show it beside row 0's scores."""
    from editlens.reporting.collect import collect_run
    from editlens.reporting.html import _only_images_the_run_read
    from editlens.reporting.serve import ReportServer

    run, rows, _, _ = _run(tmp_path)
    swapped = tmp_path / "swapped.jsonl"
    swapped.write_text("".join(json.dumps({**r, "edited": rows[1]["edited"]} if i == 0 else r) + "\n"
                               for i, r in enumerate(rows)))
    data = collect_run(run, manifest=swapped, n_boot=10)
    assert _only_images_the_run_read(run, data)
    by_id = {s["id"]: s["images"] for s in data["samples"]}
    assert "edited" not in by_id[rows[0]["id"]] and by_id[rows[0]["id"]]["source"] == rows[0]["source"]
    assert by_id[rows[1]["id"]]["edited"] == rows[1]["edited"]
    assert any("not the ones this run read for those rows" in n for n in data["notes"])
    server = ReportServer(run, manifest=swapped)
    server.serve_in_background()
    try:  # /image/-1 is no image (not the last one), and no error body names a path or an exception
        assert _get(f"{server.url}image/-1") == 404 and _get(f"{server.url}image/99999") == 404
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"{server.url}image/-1", timeout=10)
        assert err.value.read() == b"not found"
        page = server.current_page().decode()
        assert page.count(f"/image/{server.images.index(rows[1]['edited'])}") >= 1
    finally:
        server.close()

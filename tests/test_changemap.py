"""The model-free change map on constructed and real images."""

import io
import json

import numpy as np
import pytest
from helpers import shared_path
from PIL import Image, ImageEnhance, ImageFilter

from editlens import EditSample, create_metric
from editlens.metrics.changemap import change_map


def _jpeg(a, q=75):
    buf = io.BytesIO()
    Image.fromarray(a).save(buf, "JPEG", quality=q)
    return np.asarray(Image.open(buf).convert("RGB"))


def _drift(a, seed=0):
    """What diffusion editors do to regions they should keep."""
    rng = np.random.default_rng(seed)
    im = ImageEnhance.Brightness(Image.fromarray(a)).enhance(1.06)
    im = ImageEnhance.Color(im).enhance(0.92).filter(ImageFilter.GaussianBlur(0.8))
    x = np.asarray(im).astype(np.float32) * np.array([1.03, 0.98, 1.0]) + np.array([4, -3, 2])
    x = np.pad(x, ((2, 2), (2, 2), (0, 0)), mode="edge")[1:-3, 2:-2]  # shift 1 px down
    x = x + rng.normal(0, 3, x.shape)
    return _jpeg(np.clip(x, 0, 255).astype(np.uint8), 85)


def test_square_found_with_its_box():
    a = np.full((128, 128, 3), 90, np.uint8)
    b = a.copy()
    b[32:64, 64:96] = (220, 30, 30)
    cm = change_map(a, b)
    assert len(cm.regions) == 1
    x0, y0, x1, y1 = cm.regions[0].box
    assert abs(x0 - 64) <= 2 and abs(y0 - 32) <= 2 and abs(x1 - 96) <= 2 and abs(y1 - 64) <= 2
    # smoothing widens the region by at most 2 px on each side
    assert 32 * 32 / 128**2 <= cm.changed_fraction <= 36 * 36 / 128**2
    assert cm.regions[0].confidence > 0.5


def test_two_separate_changes_are_two_regions():
    a = np.full((128, 128, 3), 90, np.uint8)
    b = a.copy()
    b[10:30, 10:30] = 250
    b[90:120, 80:110] = 0
    assert len(change_map(a, b).regions) == 2


def test_bundled_real_images(example_pairs):
    for src_path, edt_path, _ in example_pairs:
        s = EditSample("x", src_path, edt_path, "i").load()
        assert change_map(s.source, s.source).regions == []
        assert change_map(s.source, _jpeg(s.source)).regions == []
        assert change_map(s.source, _drift(s.source)).regions == []
        assert len(change_map(s.source, s.edited).regions) >= 1


def test_metric_reports_regions(example_pairs):
    src, edt, _ = example_pairs[0]  # the cat on the seat
    sc = create_metric("change_map")([EditSample("x", src, edt, "put a cat").load()])[0]
    assert 0 < sc.value < 0.5
    box = sc.details["regions"][0]["box_norm"]
    assert box[0] < 0.6 < box[2] and box[1] < 0.5 < box[3]  # the cat sits around the centre


def _aurora_row(args):
    """Regions found on 4 no-change versions of a row's source, and whether its real edit has any."""
    root, r = args
    s = EditSample("x", root / r["input"], root / r["output"], r["instruction"]).load()
    unchanged = [len(change_map(s.source, other).regions) for other in
                 (s.source, _jpeg(s.source), _jpeg(s.source, 90), _drift(s.source))]  # docs/metrics.md's tolerances
    return r["input"], unchanged, (len(change_map(s.source, s.edited).regions) > 0 if r["task"] == "magicbrush" else None)


@pytest.mark.integration
def test_aurora_no_change_and_real_edits():
    from helpers import pmap

    root = shared_path("data", "aurora")
    rows = [json.loads(line) for line in open(root / "edits.jsonl")]
    results = pmap(_aurora_row, [(root, r) for r in rows])
    assert [(name, u) for name, u, _ in results if any(u)] == []
    found = sum(1 for _, _, f in results if f)
    assert found >= 48  # of 50 MagicBrush edits

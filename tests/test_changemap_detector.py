"""The change map's behaviour on constructed images: one box per changed
object (touching changes split, distant ones never merged), tiny changes,
global drift."""

import io

import numpy as np
import pytest
from PIL import Image, ImageFilter

from editlens.metrics.changemap import ChangeMapParams, change_map


def _texture(h=256, w=256, seed=0):
    """A smooth, photo-like background (blurred noise), so drift has edges to act on."""
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, (h // 8, w // 8, 3), dtype=np.uint8)
    return np.asarray(Image.fromarray(small).resize((w, h), Image.Resampling.BICUBIC))


def _drift(a, shift=(1, 2), seed=0):
    """Brightness/white-balance change, slight blur, a shift, noise, JPEG."""
    rng = np.random.default_rng(seed)
    x = np.asarray(Image.fromarray(a).filter(ImageFilter.GaussianBlur(0.7))).astype(np.float32)
    x = x * np.array([1.05, 1.0, 0.96]) + np.array([5.0, -3.0, 2.0])
    dy, dx = shift
    x = np.pad(x, ((3, 3), (3, 3), (0, 0)), mode="edge")[3 + dy : 3 + dy + a.shape[0], 3 + dx : 3 + dx + a.shape[1]]
    x = np.clip(x + rng.normal(0, 2.5, x.shape), 0, 255).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(x).save(buf, "JPEG", quality=85)
    return np.asarray(Image.open(buf).convert("RGB"))


def _iou(a, b):
    ix = max(0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


def test_aligned_change_gets_its_exact_box():
    a = _texture()
    b = a.copy()
    b[40:70, 100:150] = (230, 20, 40)
    cm = change_map(a, b)
    assert [r.box for r in cm.regions] == [(100, 40, 150, 70)]


def test_touching_changes_are_split():
    a = np.full((128, 128, 3), 90, np.uint8)
    b = a.copy()
    b[30:60, 30:60] = (220, 30, 30)  # a red square ...
    b[30:60, 60:90] = (30, 30, 220)  # ... touching a blue one
    boxes = sorted(r.box for r in change_map(a, b).regions)
    assert boxes == [(30, 30, 60, 60), (60, 30, 90, 60)]


def test_one_varied_change_is_not_split():
    rng = np.random.default_rng(1)
    a = _texture(seed=1)
    b = a.copy()
    b[50:110, 60:160] = rng.integers(0, 256, (60, 100, 3))  # one pasted patch of many colours
    assert [r.box for r in change_map(a, b).regions] == [(60, 50, 160, 110)]
    off = change_map(a, b, ChangeMapParams(split=False))
    assert [r.box for r in off.regions] == [(60, 50, 160, 110)]


def test_distant_changes_are_never_merged():
    a = _texture(seed=2)
    b = a.copy()
    b[20:40, 20:40] = 250
    b[20:40, 44:64] = 5  # 4 px apart: close, but two changes
    b[200:230, 180:240] = (0, 200, 0)
    boxes = sorted(r.box for r in change_map(a, b).regions)
    assert boxes == [(20, 20, 40, 40), (44, 20, 64, 40), (180, 200, 240, 230)]


def test_tiny_changes():
    a = _texture(512, 512, seed=3)
    b = a.copy()
    b[100:112, 300:312] = 255  # 12 x 12 px at 512: found, with its box
    b[400:403, 50:53] = 0  # 3 x 3 px: below the smallest region (min_area), not reported
    cm = change_map(a, b)
    assert [r.box for r in cm.regions] == [(300, 100, 312, 112)]
    # ...unless min_area allows it
    fine = change_map(a, b, ChangeMapParams(min_area=0.00002))
    assert sorted(r.box for r in fine.regions) == [(50, 400, 53, 403), (300, 100, 312, 112)]


@pytest.mark.parametrize("shift", [(0, 0), (1, 2), (-2, 1)])
def test_global_drift_alone_is_no_change(shift):
    a = _texture(seed=4)
    assert change_map(a, _drift(a, shift)).regions == []


def test_change_under_drift_found_with_a_tight_box():
    a = _texture(seed=5)
    b = a.copy()
    b[60:120, 80:150] = (20, 200, 60)
    cm = change_map(a, _drift(b, (1, 2)))
    assert len(cm.regions) == 1
    assert _iou(cm.regions[0].box, (80, 60, 150, 120)) > 0.85  # the shift is undone, boxes stay tight
    assert cm.regions[0].confidence > 0.5


def test_stronger_larger_change_ranks_first():
    a = _texture(seed=6)
    b = a.copy()
    b[20:80, 20:80] = (255, 0, 0)
    faint = a[150:170, 150:170].astype(int) + 40
    b[150:170, 150:170] = np.clip(faint, 0, 255)
    regions = change_map(a, b).regions
    assert len(regions) == 2
    big = [r for r in regions if r.box[0] < 100][0]
    small = [r for r in regions if r.box[0] >= 100][0]
    assert big.confidence > small.confidence


def test_size_mismatch_is_a_clear_error():
    with pytest.raises(ValueError, match="equally sized"):
        change_map(np.zeros((10, 10, 3), np.uint8), np.zeros((10, 12, 3), np.uint8))


def test_drifted_thin_lines_are_no_change():
    """Two-pixel dark lines under a 1-2 px shift, blur and JPEG. The robust
    path runs at half resolution; the shift must still be measured and undone
    at the working one (measured at half resolution it comes out about half
    as large, and these lines then show up as changes)."""
    for seed, shift in ((3, (2, 1)), (4, (1, 2))):
        a = (_texture(seed=seed).astype(np.int32) // 4 + 170).astype(np.uint8)
        for y in range(30, 230, 40):
            a[y : y + 2, 10:246] = 40
        for x in range(25, 230, 50):
            a[10:246, x : x + 2] = 40
        assert change_map(a, _drift(a, shift=shift, seed=seed)).regions == []


def test_robust_boxes_are_refined_at_the_working_resolution():
    """The coarse distance finds the regions; their boxes match those of the
    all-full-resolution path within a pixel or two, and the true box."""
    a = _texture(seed=5)
    b = a.copy()
    b[50:81, 120:171] = (230, 20, 40)
    b[150:175, 30:60] = (20, 200, 240)
    b = _drift(b, shift=(1, 1), seed=5)
    coarse = sorted(r.box for r in change_map(a, b).regions)
    full = sorted(r.box for r in change_map(a, b, ChangeMapParams(robust_coarse=False)).regions)
    assert len(coarse) == len(full) == 2
    for c, f in zip(coarse, full):
        assert max(abs(u - v) for u, v in zip(c, f)) <= 2
    truth = sorted([(30, 150, 60, 175), (120, 50, 171, 81)])
    assert all(_iou(c, t) > 0.7 for c, t in zip(coarse, truth))  # JPEG ringing widens both paths alike

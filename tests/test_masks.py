"""Masked (inside/outside region) variants on constructed images."""

import numpy as np
import pytest
from PIL import Image

from editlens import EditSample, create_metric
from editlens.errors import InputError
from editlens.metrics.masks import boxes_to_mask


def _pair():
    src = np.zeros((10, 10, 3), np.uint8)
    edt = src.copy()
    edt[0:5, 0:5] = 255  # the edit: top-left quarter
    edt[9, 9] = 51  # a stray change outside: 0.2 in one pixel
    return src, edt


def test_boxes_normalised_and_pixels_agree():
    a = boxes_to_mask([[0, 0, 0.5, 0.5]], 10, 10)
    b = boxes_to_mask([[0, 0, 5, 5]], 10, 10)
    assert a.sum() == 25 and (a == b).all()


@pytest.mark.parametrize("box,why", [([5, 5, 0, 0], "reversed"), ([0, 0, 50, 50], "reaches past the 10x10 image")])
def test_bad_boxes_are_errors_never_repaired(box, why):
    with pytest.raises(InputError, match=why):
        boxes_to_mask([box], 10, 10)


def test_l1_outside_and_inside_box():
    src, edt = _pair()
    s = EditSample("x", src, edt, "whiten the corner", metadata={"boxes": [[0, 0, 0.5, 0.5]]}).load()
    outside = create_metric("l1", region="outside")([s])[0].value
    inside = create_metric("l1", region="inside")([s])[0].value
    assert outside == pytest.approx(0.2 / 75)  # one pixel of 75 outside differs by 0.2
    assert inside == pytest.approx(1.0)


def test_mask_image_from_file(tmp_path):
    src, edt = _pair()
    m = np.zeros((10, 10), np.uint8)
    m[0:5, 0:5] = 255
    Image.fromarray(m).save(tmp_path / "mask.png")
    s = EditSample("x", src, edt, "whiten", metadata={"mask": str(tmp_path / "mask.png")}).load()
    assert create_metric("l2", region="outside")([s])[0].value == pytest.approx(0.04 / 75)


def test_masked_metric_without_mask_is_skipped():
    src, edt = _pair()
    sc = create_metric("l1", region="outside")([EditSample("x", src, edt, "w").load()])[0]
    assert sc.status == "skipped" and "no mask or boxes" in sc.reason


def test_psnr_outside_region_is_inf_when_background_untouched():
    src = np.zeros((10, 10, 3), np.uint8)
    edt = src.copy()
    edt[0:5, 0:5] = 255
    s = EditSample("x", src, edt, "w", metadata={"boxes": "[[0, 0, 5, 5]]"}).load()
    assert create_metric("psnr", region="outside")([s])[0].value == 100.0


def test_ssim_outside_region_hand_check():
    rng = np.random.default_rng(0)
    src = rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)
    edt = src.copy()
    edt[:8, :8] = 0
    # window centres at least 3 px + 1 away from the edit see identical windows
    mask_boxes = [[0, 0, 16, 16]]
    s = EditSample("x", src, edt, "w", metadata={"boxes": mask_boxes}).load()
    assert create_metric("ssim", region="outside")([s])[0].value == pytest.approx(1.0, abs=1e-9)
    assert create_metric("ssim", region="inside")([s])[0].value < 0.9

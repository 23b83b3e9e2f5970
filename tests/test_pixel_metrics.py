"""Pixel metrics against scikit-image on real photographs (bundled examples)."""

import numpy as np
import pytest
import torch
from helpers import rng_image
from skimage.metrics import mean_squared_error, peak_signal_noise_ratio, structural_similarity

from editlens import EditSample, create_metric
from editlens.metrics import functional as F


@pytest.fixture(scope="module")
def real_batch(example_pairs):
    return [EditSample(f"s{i}", s, e, instr).load() for i, (s, e, instr) in enumerate(example_pairs)]


def _values(name, batch, **kw):
    scores = create_metric(name, **kw)(batch)
    assert all(s.status == "scored" for s in scores)
    return np.array([s.value for s in scores])


def test_l1_mse_psnr_ssim_match_skimage(real_batch):
    ref_l1 = [np.abs(s.source / 255.0 - s.edited / 255.0).mean() for s in real_batch]
    ref_mse = [mean_squared_error(s.source / 255.0, s.edited / 255.0) for s in real_batch]
    ref_psnr = [peak_signal_noise_ratio(s.source, s.edited, data_range=255) for s in real_batch]
    ref_ssim = [structural_similarity(s.source, s.edited, channel_axis=2, data_range=255) for s in real_batch]
    np.testing.assert_allclose(_values("l1", real_batch), ref_l1, atol=1e-4)
    np.testing.assert_allclose(_values("l2", real_batch), ref_mse, atol=1e-4)
    np.testing.assert_allclose(_values("psnr", real_batch), ref_psnr, atol=1e-4)
    np.testing.assert_allclose(_values("ssim", real_batch), ref_ssim, atol=1e-4)


def test_ssim_matches_skimage_on_noise_various_sizes():
    for h, w in [(7, 7), (31, 45), (64, 33)]:
        a, b = rng_image(1, h, w), rng_image(2, h, w)
        ref = structural_similarity(a, b, channel_axis=2, data_range=255)
        got = F.ssim(torch.from_numpy(a / 255.0).permute(2, 0, 1)[None], torch.from_numpy(b / 255.0).permute(2, 0, 1)[None])
        assert abs(float(got) - ref) < 1e-6


def test_hand_computed_values():
    a = np.zeros((4, 4, 3), np.uint8)
    b = a.copy()
    b[:2] = 255  # half the pixels differ by 1.0
    s = EditSample("x", a, b, "paint the top white").load()
    assert _values("l1", [s])[0] == pytest.approx(0.5)
    assert _values("l2", [s])[0] == pytest.approx(0.5)
    assert _values("psnr", [s])[0] == pytest.approx(10 * np.log10(1 / 0.5), abs=1e-5)


def test_identical_images_psnr_capped_and_explained():
    a = rng_image(0)
    sc = create_metric("psnr")([EditSample("x", a, a, "nothing").load()])[0]
    assert sc.value == 100.0 and "identical" in sc.reason


def test_reference_variant_skips_without_reference():
    a = rng_image(0)
    sc = create_metric("l1_ref")([EditSample("x", a, a, "n").load()])[0]
    assert sc.status == "skipped" and sc.reason.startswith("no reference for this sample (add a reference column")
    ref = a.copy()
    ref[0, 0] = 0
    sc = create_metric("l1_ref")([EditSample("x", a, a, "n", reference=ref).load()])[0]
    assert sc.value == pytest.approx(np.abs(a[0, 0].astype(float) / 255).mean() / (48 * 64))


def test_batch_with_mixed_sizes_keeps_order():
    small = EditSample("a", np.zeros((8, 8, 3), np.uint8), np.full((8, 8, 3), 255, np.uint8), "x").load()
    big = EditSample("b", np.zeros((16, 16, 3), np.uint8), np.zeros((16, 16, 3), np.uint8), "x").load()
    assert _values("l1", [small, big, small]).tolist() == [1.0, 0.0, 1.0]

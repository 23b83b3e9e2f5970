"""The fast SSIM (OpenCV box filter, float32, batched) against scikit-image."""

import numpy as np
import torch
from skimage.metrics import structural_similarity

from editlens.metrics import functional as F


def _pair(seed, h, w, c=3):
    rng = np.random.default_rng(seed)
    a = rng.random((h, w, c))
    b = np.clip(a + rng.normal(0, 0.15, a.shape), 0, 1)  # related images: SSIM far from 0 and from 1
    return a, b


def _t(x):
    return torch.from_numpy(x).permute(2, 0, 1)[None].float()


def test_batch_matches_skimage_per_sample():
    pairs = [_pair(i, 96, 130) for i in range(3)]
    got = F.ssim(torch.cat([_t(a) for a, _ in pairs]), torch.cat([_t(b) for _, b in pairs]))
    ref = [structural_similarity(a, b, channel_axis=2, data_range=1.0) for a, b in pairs]
    np.testing.assert_allclose(got.numpy(), ref, atol=1e-5)
    assert len(set(np.round(ref, 4))) == 3  # three different values, each matched in its slot


def test_large_image_parity_and_data_range():
    a, b = _pair(7, 512, 384)
    ref = structural_similarity(a * 255, b * 255, channel_axis=2, data_range=255.0)
    got = float(F.ssim(_t(a * 255), _t(b * 255), data_range=255.0))
    assert abs(got - ref) < 1e-4


def test_torch_path_agrees_with_opencv_path():
    # The pooled torch path (GPUs) and the OpenCV path (CPU) give the same map.
    from editlens.metrics.functional.pixel import _ssim_map_torch

    a, b = _pair(3, 40, 50, c=5)
    ref = structural_similarity(a, b, channel_axis=2, data_range=1.0)
    assert abs(float(F.ssim(_t(a), _t(b))) - ref) < 1e-5
    n = 49
    via_torch = _ssim_map_torch(_t(a), _t(b), 7, n / (n - 1), 0.5, 0.01**2, 0.03**2).mean()
    assert abs(float(via_torch) - ref) < 1e-5


def test_mask_averages_the_map_over_masked_window_centres():
    a, b = _pair(4, 40, 50)
    _, smap = structural_similarity(a, b, channel_axis=2, data_range=1.0, full=True)
    mask = np.zeros((40, 50), bool)
    mask[10:30, 5:45] = True
    ref = smap[3:-3, 3:-3][mask[3:-3, 3:-3]].mean()  # channels averaged, centres under the mask
    got = float(F.ssim(_t(a), _t(b), mask=torch.from_numpy(mask)[None, None].float()))
    assert abs(got - ref) < 1e-5
    assert abs(got - float(F.ssim(_t(a), _t(b)))) > 1e-4  # and it is not the whole-image value

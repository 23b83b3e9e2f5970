"""Qwen-VL pixel values computed in torch, so a reward model's score is
differentiable with respect to the image.

The processors of Qwen2-VL, Qwen2.5-VL and Qwen3-VL resize an image to
multiples of patch x merge, rescale and normalise it, and cut it into
flattened patches (each repeated over ``temporal_patch_size`` frames, in the
order the vision tower's 2 x 2 merge expects). :func:`qwen_pixel_values` does
the same on a float tensor with torch operations; on an image already at its
Qwen size it equals the processor's output up to the uint8 rounding the
processor's input went through (a resize in between is torch's antialiased
bicubic, close to but not equal to PIL's).
"""

from __future__ import annotations

from typing import Any

from editlens.rewardmodels.common import smart_resize


def qwen_pixel_values(image01: Any, processor: Any, min_pixels: int, max_pixels: int) -> tuple[Any, tuple[int, int, int]]:
    """``(patches, (t, h, w) grid)`` of one image (3 x H x W in [0, 1]) for a Qwen-VL processor."""
    import torch
    import torch.nn.functional as F

    ip = processor.image_processor
    patch, merge = int(ip.patch_size), int(ip.merge_size)
    temporal = int(getattr(ip, "temporal_patch_size", 2))
    factor = patch * merge
    _, height, width = image01.shape
    h, w = smart_resize(int(height), int(width), factor, min_pixels, max_pixels)
    x = image01.unsqueeze(0)
    if (h, w) != (height, width):
        x = F.interpolate(x, size=(h, w), mode="bicubic", antialias=True, align_corners=False).clamp(0, 1)
    mean = torch.tensor(ip.image_mean, dtype=x.dtype, device=x.device).view(1, 3, 1, 1)
    std = torch.tensor(ip.image_std, dtype=x.dtype, device=x.device).view(1, 3, 1, 1)
    x = (x - mean) / std
    x = x.expand(temporal, -1, -1, -1)  # one still image: the frame repeated over the temporal patch
    gh, gw = h // patch, w // patch
    x = x.reshape(1, temporal, 3, gh // merge, merge, patch, gw // merge, merge, patch)
    x = x.permute(0, 3, 6, 4, 7, 2, 1, 5, 8)
    return x.reshape(gh * gw, 3 * temporal * patch * patch), (1, gh, gw)

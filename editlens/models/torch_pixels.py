"""Vision-language processors' pixel values computed with torch operations,
so a score read from the model is differentiable with respect to the image.

Each function redoes one processor's image path on a float tensor
(3 x H x W in [0, 1]) as the processor does it on a decoded image: the same
sizes, padding, tiling, patch order and normalisation. Where the processor
resizes, torch's antialiased bicubic stands in for PIL's bicubic (close, not
equal); where it does not, the values equal the processor's up to the uint8
rounding its input went through.

* :func:`qwen_pixel_values`: Qwen2-VL, Qwen2.5-VL, Qwen3-VL (flattened
  patches, each repeated over the temporal patch, in the 2 x 2 merge order).
* :func:`llava_next_pixel_values`: LLaVA-NeXT's any-resolution tiling (a base
  view, then tiles of the best grid resolution, padded in the middle).
"""

from __future__ import annotations

import math
from typing import Any


def _resize(x: Any, size: tuple[int, int]) -> Any:
    import torch.nn.functional as F

    if tuple(x.shape[-2:]) == tuple(size):
        return x
    return F.interpolate(x.unsqueeze(0), size=size, mode="bicubic", antialias=True,
                         align_corners=False).squeeze(0).clamp(0, 1)


def _normalise(x: Any, ip: Any) -> Any:
    import torch

    mean = torch.tensor(ip.image_mean, dtype=x.dtype, device=x.device).view(3, 1, 1)
    std = torch.tensor(ip.image_std, dtype=x.dtype, device=x.device).view(3, 1, 1)
    return (x - mean) / std


def qwen_pixel_values(image01: Any, image_processor: Any, size_hw: tuple[int, int]) -> tuple[Any, tuple[int, int, int]]:
    """``(patches, (t, h, w) grid)`` of one image resized to ``size_hw`` (the processor's resize rule decides it)."""
    ip = image_processor
    patch, merge = int(ip.patch_size), int(ip.merge_size)
    temporal = int(getattr(ip, "temporal_patch_size", 2))
    h, w = size_hw
    x = _normalise(_resize(image01, (h, w)), ip)
    x = x.unsqueeze(0).expand(temporal, -1, -1, -1)  # one still image: the frame repeated over the temporal patch
    gh, gw = h // patch, w // patch
    x = x.reshape(1, temporal, 3, gh // merge, merge, patch, gw // merge, merge, patch)
    x = x.permute(0, 3, 6, 4, 7, 2, 1, 5, 8)
    return x.reshape(gh * gw, 3 * temporal * patch * patch), (1, gh, gw)


def _best_resolution(height: int, width: int, pinpoints: list[list[int]]) -> tuple[int, int]:
    """LLaVA-NeXT's choice: the grid resolution keeping most of the image, then wasting least."""
    best, best_eff, best_waste = None, 0, math.inf
    for h, w in pinpoints:
        scale = min(w / width, h / height)
        eff = min(int(width * scale) * int(height * scale), width * height)
        waste = w * h - eff
        if eff > best_eff or (eff == best_eff and waste < best_waste):
            best, best_eff, best_waste = (int(h), int(w)), eff, waste
    assert best is not None
    return best


def llava_next_pixel_values(image01: Any, image_processor: Any) -> Any:
    """``(1 + tiles) x 3 x crop x crop`` of one image, as LLaVA-NeXT's image processor makes them."""
    import torch
    import torch.nn.functional as F

    ip = image_processor
    size = ip.size
    crop = ip.crop_size
    crop_h = int(crop["height"] if crop and crop.get("height") else size.get("height") or size["shortest_edge"])
    crop_w = int(crop["width"] if crop and crop.get("width") else size.get("width") or size["shortest_edge"])
    base = (int(size["height"]), int(size["width"])) if size.get("height") else (int(size["shortest_edge"]),) * 2
    _, height, width = image01.shape
    th, tw = _best_resolution(int(height), int(width), ip.image_grid_pinpoints)
    sw, sh = tw / width, th / height
    if sw < sh:
        nh, nw = min(math.ceil(height * sw), th), tw
    else:
        nh, nw = th, min(math.ceil(width * sh), tw)
    resized = _resize(image01, (nh, nw))
    top, left = (th - nh) // 2, (tw - nw) // 2
    padded = F.pad(resized, (left, tw - nw - left, top, th - nh - top), value=0.0)  # black, before normalising
    tiles = [padded[:, i : i + crop_h, j : j + crop_w] for i in range(0, th, crop_h) for j in range(0, tw, crop_w)]
    views = [_resize(image01, base)] + tiles
    out = []
    for v in views:
        if getattr(ip, "do_resize", True) and tuple(v.shape[-2:]) != (crop_h, crop_w):
            v = _resize(v, (crop_h, crop_w))
        out.append(_normalise(v, ip))
    return torch.stack(out)

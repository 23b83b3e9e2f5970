"""Pixel metrics: L1, MSE, PSNR, SSIM.

SSIM follows scikit-image's ``structural_similarity`` defaults exactly
(7x7 uniform window, K1=0.01, K2=0.03, sample covariance, mean over the
region not touched by the window's border, channels averaged), so values
agree with scikit-image within 1e-5, while running batched in float32 torch
with a separable box filter (several times faster).
"""

from __future__ import annotations

import functools
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import cv2
import numpy as np
import torch
import torch.nn.functional as F


def _check(a: torch.Tensor, b: torch.Tensor) -> None:
    if a.shape != b.shape or a.ndim != 4:
        raise ValueError(f"expected two (N, C, H, W) tensors of equal shape, got {tuple(a.shape)} and {tuple(b.shape)}")


def _masked_mean(x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Mean over (C, H, W) per sample, over masked pixels only when a mask is
    given (torch sums float32 pairwise: accurate to ~1e-7 relative)."""
    if mask is None:
        return x.flatten(1).mean(dim=1)
    m = mask.to(x.dtype).expand_as(x)
    total = m.flatten(1).sum(dim=1)
    out = (x * m).flatten(1).sum(dim=1) / total.clamp_min(1)
    return torch.where(total > 0, out, torch.full_like(out, float("nan")))


def l1(a: torch.Tensor, b: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Mean absolute difference per sample.

    >>> import torch
    >>> l1(torch.zeros(1, 3, 2, 2), torch.full((1, 3, 2, 2), 0.5))
    tensor([0.5000])
    """
    _check(a, b)
    return _masked_mean((a - b).abs_(), mask)


def mse(a: torch.Tensor, b: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Mean squared difference per sample (the "L2" metric of editing papers).

    >>> import torch
    >>> mse(torch.zeros(1, 3, 2, 2), torch.full((1, 3, 2, 2), 0.5))
    tensor([0.2500])
    """
    _check(a, b)
    d = a - b
    return _masked_mean(d.mul_(d), mask)


def psnr(
    a: torch.Tensor, b: torch.Tensor, data_range: float = 1.0, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Peak signal-to-noise ratio in dB; ``inf`` for identical images.

    >>> import torch
    >>> psnr(torch.zeros(1, 3, 2, 2), torch.full((1, 3, 2, 2), 0.1)).round(decimals=4)
    tensor([20.])
    """
    _check(a, b)
    err = mse(a, b, mask).double()
    return (10.0 * torch.log10(data_range**2 / err)).to(a.dtype)


@functools.lru_cache(maxsize=1)
def _pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=max(1, min(8, os.cpu_count() or 1)), thread_name_prefix="editlens-ssim")


_local = threading.local()


def _buffers(shape: tuple[int, int], n: int) -> list[np.ndarray]:
    """``n`` float32 scratch planes, reused by this thread: fresh large arrays
    cost page faults on first touch, which would dominate the arithmetic."""
    bufs = getattr(_local, "bufs", None)
    if bufs is None or bufs[0].shape != shape or len(bufs) < n:
        bufs = _local.bufs = [np.empty(shape, np.float32) for _ in range(n)]
    return bufs


def _ssim_map_cpu(x: np.ndarray, y: np.ndarray, k: int, cov_norm: float, centre: float,
                  c1: float, c2: float) -> np.ndarray:
    """SSIM map of two (H, W) float32 planes over the valid region: OpenCV's
    box filter (running sums, kept in float64 for float32 data) and fused
    OpenCV arithmetic (``addWeighted`` scales, adds and offsets in one pass)
    into reused buffers, on centred data so that float32 variances keep their
    precision. Returns a fresh array."""
    h, w = x.shape
    r = (k - 1) // 2
    xs, ys, t, mx, my, bxx, byy, bxy = _buffers((h, w), 8)
    border = cv2.BORDER_REFLECT
    cv2.subtract(x, centre, dst=xs)
    cv2.subtract(y, centre, dst=ys)
    cv2.blur(xs, (k, k), dst=mx, borderType=border)
    cv2.blur(ys, (k, k), dst=my, borderType=border)
    cv2.blur(cv2.multiply(xs, xs, dst=t), (k, k), dst=bxx, borderType=border)
    cv2.blur(cv2.multiply(ys, ys, dst=t), (k, k), dst=byy, borderType=border)
    cv2.blur(cv2.multiply(xs, ys, dst=t), (k, k), dst=bxy, borderType=border)
    mxy, mm, shift = xs, ys, t  # the centred inputs are no longer needed
    cv2.multiply(mx, my, dst=mxy)
    cv2.multiply(mx, mx, dst=mm)
    cv2.add(mm, cv2.multiply(my, my, dst=shift), dst=mm)  # mx^2 + my^2
    # With ux = mx + centre: 2 ux uy = 2 mxy + shift and ux^2 + uy^2 = mm + shift,
    # where shift = 2 centre (mx + my) + 2 centre^2.
    cv2.addWeighted(mx, 2 * centre, my, 2 * centre, 2 * centre * centre, dst=shift)
    cv2.addWeighted(bxy, 2 * cov_norm, mxy, -2 * cov_norm, c2, dst=bxy)  # 2 cov_xy + c2
    cv2.addWeighted(mxy, 2.0, shift, 1.0, c1, dst=mxy)  # 2 ux uy + c1
    cv2.multiply(mxy, bxy, dst=mxy)
    cv2.add(bxx, byy, dst=bxx)
    cv2.addWeighted(bxx, cov_norm, mm, -cov_norm, c2, dst=bxx)  # var_x + var_y + c2
    cv2.addWeighted(mm, 1.0, shift, 1.0, c1, dst=mm)  # ux^2 + uy^2 + c1
    cv2.multiply(mm, bxx, dst=mm)
    cv2.divide(mxy, mm, dst=mxy)
    return mxy[r : h - r, r : w - r].copy()


def _ssim_map_torch(x: torch.Tensor, y: torch.Tensor, k: int, cov_norm: float, centre: float,
                    c1: float, c2: float) -> torch.Tensor:
    """SSIM map of (N, C, H, W) tensors on any device: one separable box
    filter pass over all five moment maps. No padding: only the valid
    region, which is exactly what scikit-image keeps after cropping the
    border of width (k - 1) // 2."""
    xc, yc = x - centre, y - centre
    c = x.shape[1]
    stack = torch.cat([xc, yc, xc * xc, yc * yc, xc * yc], dim=1)
    m = F.avg_pool2d(F.avg_pool2d(stack, (1, k), stride=1), (k, 1), stride=1)
    mx, my, mxx, myy, mxy = m.split(c, dim=1)
    vx = cov_norm * (mxx - mx * mx)
    vy = cov_norm * (myy - my * my)
    vxy = cov_norm * (mxy - mx * my)
    ux, uy = mx + centre, my + centre
    return ((2 * ux * uy + c1) * (2 * vxy + c2)) / ((ux * ux + uy * uy + c1) * (vx + vy + c2))


def ssim(
    a: torch.Tensor,
    b: torch.Tensor,
    data_range: float = 1.0,
    win_size: int = 7,
    k1: float = 0.01,
    k2: float = 0.03,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Mean structural similarity per sample (scikit-image defaults).

    With ``mask``, the SSIM map is averaged over the window centres where
    the mask is 1.

    >>> import torch
    >>> x = torch.rand(2, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    >>> ssim(x, x)
    tensor([1., 1.])
    """
    _check(a, b)
    if min(a.shape[-2:]) < win_size:
        raise ValueError(f"images of {a.shape[-2]}x{a.shape[-1]} are smaller than the SSIM window {win_size}")
    n = win_size * win_size
    cov_norm = n / (n - 1)  # sample covariance, as scikit-image's default
    c1 = (k1 * data_range) ** 2
    c2 = (k2 * data_range) ** 2
    # float32 is enough once the data are centred: the variances are then
    # differences of small numbers, not of two values near 0.25 (parity with
    # scikit-image's float64 stays well inside 1e-4).
    centre = 0.5 * data_range
    x, y = a.float(), b.float()
    if x.device.type == "cpu":
        x, y = x.contiguous(), y.contiguous()

        def one(i: int) -> torch.Tensor:
            planes = [_ssim_map_cpu(x[i, c].numpy(), y[i, c].numpy(), win_size, cov_norm, centre, c1, c2)
                      for c in range(x.shape[1])]
            if mask is None:  # the mean right away: no full-size maps to stack
                return torch.tensor(float(np.mean([p.mean(dtype=np.float64) for p in planes])))
            return torch.from_numpy(np.stack(planes))

        # OpenCV and numpy release the GIL: the samples of a batch run in parallel.
        parts = list(_pool().map(one, range(len(x)))) if len(x) > 1 else [one(0)]
        if mask is None:
            return torch.stack(parts).to(a.dtype)
        s = torch.stack(parts)
    else:
        s = _ssim_map_torch(x, y, win_size, cov_norm, centre, c1, c2)
    if mask is not None:
        pad = (win_size - 1) // 2
        h, w = mask.shape[-2:]
        mask = mask[..., pad : h - pad, pad : w - pad]
    return _masked_mean(s, mask).to(a.dtype)

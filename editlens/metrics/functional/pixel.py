"""Pixel metrics: L1, MSE, PSNR, SSIM.

SSIM follows scikit-image's ``structural_similarity`` defaults exactly
(7x7 uniform window, K1=0.01, K2=0.03, sample covariance, mean over the
region not touched by the window's border, channels averaged), so values
agree with scikit-image to float precision, while running batched in torch.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _check(a: torch.Tensor, b: torch.Tensor) -> None:
    if a.shape != b.shape or a.ndim != 4:
        raise ValueError(f"expected two (N, C, H, W) tensors of equal shape, got {tuple(a.shape)} and {tuple(b.shape)}")


def _masked_mean(x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Mean over (C, H, W) per sample, over masked pixels only when a mask is given."""
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
    return _masked_mean((a - b).abs(), mask)


def mse(a: torch.Tensor, b: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Mean squared difference per sample (the "L2" metric of editing papers).

    >>> import torch
    >>> mse(torch.zeros(1, 3, 2, 2), torch.full((1, 3, 2, 2), 0.5))
    tensor([0.2500])
    """
    _check(a, b)
    return _masked_mean((a - b) ** 2, mask)


def psnr(
    a: torch.Tensor, b: torch.Tensor, data_range: float = 1.0, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Peak signal-to-noise ratio in dB; ``inf`` for identical images.

    >>> import torch
    >>> psnr(torch.zeros(1, 3, 2, 2), torch.full((1, 3, 2, 2), 0.1)).round(decimals=4)
    tensor([20.])
    """
    err = mse(a.double(), b.double(), mask)
    return (10.0 * torch.log10(data_range**2 / err)).to(a.dtype)


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
    x, y = a.double(), b.double()
    n = win_size * win_size
    cov_norm = n / (n - 1)  # sample covariance, as scikit-image's default

    def mean(t: torch.Tensor) -> torch.Tensor:
        # No padding: only the valid region, which is exactly what scikit-image
        # keeps after cropping the border of width (win_size - 1) // 2.
        return F.avg_pool2d(t, win_size, stride=1)

    ux, uy = mean(x), mean(y)
    vx = cov_norm * (mean(x * x) - ux * ux)
    vy = cov_norm * (mean(y * y) - uy * uy)
    vxy = cov_norm * (mean(x * y) - ux * uy)
    c1 = (k1 * data_range) ** 2
    c2 = (k2 * data_range) ** 2
    s = ((2 * ux * uy + c1) * (2 * vxy + c2)) / ((ux**2 + uy**2 + c1) * (vx + vy + c2))
    if mask is not None:
        pad = (win_size - 1) // 2
        h, w = mask.shape[-2:]
        mask = mask[..., pad : h - pad, pad : w - pad]
    return _masked_mean(s, mask).to(a.dtype)

"""Pure functions on tensors: the numeric core of every metric.

Images are float tensors ``(N, 3, H, W)`` in ``[0, 1]``; each function returns
one value per sample, shape ``(N,)``. Optional ``mask`` tensors ``(N, 1, H, W)``
restrict a pixel metric to the pixels where the mask is 1.
"""

from editlens.metrics.functional.embedding import clip_directional, clipscore, cosine
from editlens.metrics.functional.pixel import l1, mse, psnr, ssim

__all__ = ["l1", "mse", "psnr", "ssim", "cosine", "clip_directional", "clipscore"]

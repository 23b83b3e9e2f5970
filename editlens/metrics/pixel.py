"""Pixel metrics as batched objects (L1, L2/MSE, PSNR, SSIM)."""

from __future__ import annotations

from collections import defaultdict
from typing import Callable, Sequence

import numpy as np
import torch

from editlens.core.images import as_float_tensor_batch
from editlens.core.types import LoadedEdit, Score
from editlens.metrics import functional as F
from editlens.metrics.base import PairMetric


class _PixelMetric(PairMetric):
    fn: Callable[..., torch.Tensor]

    def compute(self, batch: Sequence[LoadedEdit]) -> list[float | Score]:
        out: list[float | Score] = [0.0] * len(batch)
        groups: dict[tuple[int, ...], list[int]] = defaultdict(list)
        for i, s in enumerate(batch):
            groups[s.source.shape].append(i)  # equal-size samples share a tensor
        for idx in groups.values():
            pairs = [self.pair(batch[i]) for i in idx]
            a = as_float_tensor_batch([p[0] for p in pairs])
            b = as_float_tensor_batch([p[1] for p in pairs])
            mask = None
            if self.region != "all":
                masks = [m for m in (self.region_mask(batch[i]) for i in idx) if m is not None]
                mask = torch.from_numpy(np.stack(masks)[:, None].astype(np.float32))
            with torch.no_grad():
                values = self.fn(a, b, mask=mask)
            for i, v in zip(idx, values.tolist()):
                out[i] = v
        return out


class L1(_PixelMetric):
    fn = staticmethod(F.l1)


class MSE(_PixelMetric):
    fn = staticmethod(F.mse)


class PSNR(_PixelMetric):
    fn = staticmethod(F.psnr)


class SSIM(_PixelMetric):
    """SSIM with scikit-image's 7x7 window: an image smaller than the window
    has no SSIM, so such a sample is *skipped* with the reason (the other
    metrics still score it)."""

    fn = staticmethod(F.ssim)
    win_size = 7

    def missing(self, sample: LoadedEdit) -> str | None:
        reason = super().missing(sample)
        if reason is not None:
            return reason
        h, w = sample.source.shape[:2]
        if min(h, w) < self.win_size:
            return f"image is {w}x{h}, smaller than SSIM's {self.win_size}x{self.win_size} window"
        return None

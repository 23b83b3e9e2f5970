"""Scoring with each unique image encoded once.

A per-frame feature does not depend on which pair the frame is in, so frames
are encoded through a content-keyed cache (the :class:`EmbeddingCache` of
:mod:`editlens.models.encoders`): with 8 edits per source, the source is
encoded once, not 8 times. Pairs are then pooled (mean or temporal head) from
cached features, which costs nothing next to the image tower.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
import torch

from editlens.models.encoders import EmbeddingCache, text_hash
from editlens.twoframe.model import TwoFrameModel


class TwoFrameScorer:
    """Cached frame/text features and pair scores for one :class:`TwoFrameModel`."""

    def __init__(self, model: TwoFrameModel, batch_size: int = 32, workers: int | None = None) -> None:
        import os

        self.model = model.eval()
        self.batch_size = batch_size
        # decoding/resizing threads: on a GPU the tower outruns a few CPU threads
        self.workers = workers if workers is not None else min(16, os.cpu_count() or 1)
        self.frame_cache = EmbeddingCache()
        self.text_cache = EmbeddingCache()

    @property
    def frames_encoded(self) -> int:
        return self.frame_cache.misses

    @torch.inference_mode()
    def _encode(self, images: Callable[[int], np.ndarray], idx: list[int]) -> torch.Tensor:
        crop = self.model.preprocess.crop
        batches = [idx[s : s + self.batch_size] for s in range(0, len(idx), self.batch_size)]
        if self.workers <= 1 or len(idx) <= self.batch_size:
            return torch.cat([self.model.frame_features(torch.from_numpy(np.stack([crop(images(i)) for i in b])))
                              for b in batches])
        from concurrent.futures import ThreadPoolExecutor

        # decoding and resizing (PIL releases the GIL) run in threads, one batch ahead of the model
        outs = []
        with ThreadPoolExecutor(self.workers) as pool, ThreadPoolExecutor(1) as ahead:
            prepare = lambda b: np.stack(list(pool.map(lambda i: crop(images(i)), b)))  # noqa: E731
            pending = ahead.submit(prepare, batches[0])
            for k in range(len(batches)):
                crops = pending.result()
                if k + 1 < len(batches):
                    pending = ahead.submit(prepare, batches[k + 1])
                outs.append(self.model.frame_features(torch.from_numpy(crops)))
        return torch.cat(outs)

    def frame_features(self, keys: Sequence[str], images: Callable[[int], np.ndarray] | Sequence[np.ndarray]) -> torch.Tensor:
        """Per-frame features for ``keys``; ``images`` gives the pixels of the
        i-th key (a list, or a function so that cached frames are never loaded)."""
        get = images if callable(images) else images.__getitem__
        return self.frame_cache.get_many(list(keys), lambda idx: self._encode(get, idx))

    def text_features(self, texts: Sequence[str]) -> torch.Tensor:
        def compute(idx: list[int]) -> torch.Tensor:
            with torch.inference_mode():
                return torch.cat([self.model.text_features([texts[i] for i in idx[s : s + self.batch_size]])
                                  for s in range(0, len(idx), self.batch_size)])

        return self.text_cache.get_many([text_hash(t) for t in texts], compute)

    @torch.inference_mode()
    def videos(self, source: torch.Tensor, edited: torch.Tensor, mode: str | None = None) -> torch.Tensor:
        dev = self.model.device
        outs = [self.model.video_features(source[s : s + 1024].to(dev), edited[s : s + 1024].to(dev), mode).float().cpu()
                for s in range(0, source.shape[0], 1024)]
        return torch.cat(outs) if outs else torch.zeros(0)

    def score(self, source_keys: Sequence[str], sources: Any, edited_keys: Sequence[str], editeds: Any,
              instructions: Sequence[str], mode: str | None = None) -> dict[str, np.ndarray]:
        """Cosine, logit and (when fitted) calibrated score of each (pair, instruction)."""
        fs = self.frame_features(source_keys, sources)
        fe = self.frame_features(edited_keys, editeds)
        video = self.videos(fs, fe, mode)
        text = self.text_features(instructions)
        cosine = (video * text).sum(-1).clamp(-1, 1).numpy().astype(np.float64)
        return self.model.outputs(cosine, mode)

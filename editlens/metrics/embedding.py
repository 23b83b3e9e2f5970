"""Embedding metrics: CLIP-I, CLIP-T, CLIP-D, CLIPScore, DINO-I.

Models load on first use through :func:`editlens.models.encoders.get_encoder`,
so metrics that share a model share its weights and embedding cache.
With ``region="inside"``/``"outside"``, the excluded pixels of both images are
filled with mid-grey (128, 128, 128) before encoding (a "patched" image, as
DICE does for its masked CLIP metrics), since an encoder cannot ignore pixels.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from editlens.core.images import image_hash
from editlens.core.types import LoadedEdit, Score
from editlens.metrics import functional as F
from editlens.metrics.base import Metric, PairMetric
from editlens.metrics.model_options import EncoderModelOptions

PATCH_FILL = (128, 128, 128)


def patch(arr: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """Copy of ``arr`` with pixels outside ``keep`` set to :data:`PATCH_FILL`."""
    out = arr.copy()
    out[~keep] = PATCH_FILL
    return out


_ModelOptions = EncoderModelOptions  # the old private name


class _ImagePair(_ModelOptions, PairMetric):
    def __init__(self, compare: str = "source", region: str = "all", model: str | None = None,
                 device: str = "auto", dtype: str = "auto", models: dict[str, str] | None = None) -> None:
        PairMetric.__init__(self, compare, region)
        self._init_model(model, device, dtype, models)

    def prepare(self, sample: LoadedEdit) -> None:
        """Preprocess the pair's images in a loader thread (see editlens.runner.loader)."""
        if self.region != "all" or (self.compare == "reference" and sample.reference is None):
            return  # patched images are made in compute
        a, b = self.pair(sample)
        h = (sample.source_hash, sample.edited_hash) if self.compare == "source" else \
            (sample.edited_hash, sample.reference_hash)
        self.encoder.prefetch_images([a, b], list(h))

    def compute(self, batch: Sequence[LoadedEdit]) -> list[float | Score]:
        firsts, seconds, h1, h2 = [], [], [], []
        for s in batch:
            a, b = self.pair(s)
            keep = self.region_mask(s)
            if keep is not None:
                a, b = patch(a, keep), patch(b, keep)
                h1.append(image_hash(a))
                h2.append(image_hash(b))
            else:
                h1.append(s.source_hash if self.compare == "source" else s.edited_hash)
                h2.append(s.edited_hash if self.compare == "source" else str(s.reference_hash))
            firsts.append(a)
            seconds.append(b)
        ea = self.encoder.encode_images(firsts, h1)
        eb = self.encoder.encode_images(seconds, h2)
        return F.cosine(ea, eb).tolist()

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "model": self.model_describe()}


class CLIPImage(_ImagePair):
    """CLIP-I: cosine of CLIP image embeddings of two images."""

    kind = "clip"


class DINOImage(_ImagePair):
    """DINO-I: cosine of DINOv2 CLS embeddings of two images."""

    kind = "dino"


class _TextMetric(_ModelOptions, Metric):
    kind = "clip"

    def __init__(self, model: str | None = None, device: str = "auto", dtype: str = "auto",
                 models: dict[str, str] | None = None) -> None:
        self._init_model(model, device, dtype, models)

    def prepare(self, sample: LoadedEdit) -> None:
        """Preprocess the edited image in a loader thread (see editlens.runner.loader)."""
        self.encoder.prefetch_images([sample.edited], [sample.edited_hash])

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "model": self.model_describe()}


class CLIPText(_TextMetric):
    """CLIP-T: cosine of the edited image and the target caption."""

    def compute(self, batch: Sequence[LoadedEdit]) -> list[float | Score]:
        img = self.encoder.encode_images([s.edited for s in batch], [s.edited_hash for s in batch])
        txt = self.encoder.encode_texts([s.target_caption for s in batch])
        return F.cosine(img, txt).tolist()


class CLIPScoreMetric(_TextMetric):
    """CLIPScore (Hessel et al.): 2.5 * max(cos(edited, target caption), 0)."""

    def compute(self, batch: Sequence[LoadedEdit]) -> list[float | Score]:
        img = self.encoder.encode_images([s.edited for s in batch], [s.edited_hash for s in batch])
        txt = self.encoder.encode_texts([s.target_caption for s in batch])
        return F.clipscore(img, txt).tolist()


class CLIPDirectional(_TextMetric):
    """CLIP-D: cosine between image-embedding change and caption-embedding change.
    An edit that changed nothing scores 0 (see :func:`~editlens.metrics.functional.clip_directional`)."""

    def compute(self, batch: Sequence[LoadedEdit]) -> list[float | Score]:
        src = self.encoder.encode_images([s.source for s in batch], [s.source_hash for s in batch])
        edt = self.encoder.encode_images([s.edited for s in batch], [s.edited_hash for s in batch])
        cs = self.encoder.encode_texts([s.source_caption for s in batch])
        ct = self.encoder.encode_texts([s.target_caption for s in batch])
        # an unchanged image scores 0 (a failed edit); identical captions have no direction to compare with
        return [Score.skipped(self.name, "source and target captions embed identically: no caption change "
                                         "to compare the image change with") if v != v else v
                for v in F.clip_directional(src, edt, cs, ct).tolist()]

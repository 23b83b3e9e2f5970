"""Batched metric objects over :class:`~editlens.core.types.LoadedEdit` samples."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from editlens.core.types import LoadedEdit, Score
from editlens.metrics.masks import REGIONS, sample_mask, select_region
from editlens.metrics.spec import MetricSpec

_INPUT_ATTR = {
    "source": "source",
    "edited": "edited",
    "reference": "reference",
    "instruction": "instruction",
    "source_caption": "source_caption",
    "target_caption": "target_caption",
}
#: how a user gets an input a manifest lacks (said in the skip reason)
_HOW_TO_GET = {
    "source_caption": " (add a source_caption column, or write captions with --captions --vlm DIR|URL)",
    "target_caption": " (add a target_caption column, or write captions with --captions --vlm DIR|URL)",
    "reference": " (add a reference column: the ground-truth edit)",
}


class Metric:
    """A metric scores a batch of samples, one :class:`Score` per sample.

    Subclasses implement :meth:`compute` on samples that have every input the
    metric needs; samples lacking one are returned as *skipped* with the
    reason, never as a number.
    """

    spec: MetricSpec  # set by create_metric before __init__ runs
    options: dict[str, Any]
    #: scored on every sample of a batch before the other evaluators, even where its results exist
    #: (the captioner: the metrics after it read the captions it fills in)
    always_run: bool = False

    def __init__(self, **options: Any) -> None:
        if options:
            raise TypeError(f"{type(self).__name__} takes no options, got {sorted(options)}")

    def prepare(self, sample: LoadedEdit) -> None:
        """Optional work the runner does in its image-loading threads before scoring (embeddings of the
        sample's images, a change map), cached on the sample; a failure here is ignored (scoring redoes the
        work and records the error). The base class does nothing."""

    @property
    def has_prepare(self) -> bool:
        """Whether this evaluator overrides :meth:`prepare` (the runner skips the no-op hook)."""
        return type(self).prepare is not Metric.prepare

    @property
    def name(self) -> str:
        return self.spec.name

    def needs(self) -> tuple[str, ...]:
        return self.spec.needs

    def missing(self, sample: LoadedEdit) -> str | None:
        """Why ``sample`` cannot be scored, or ``None`` when it can."""
        for need in self.needs():
            if need == "mask":
                if sample.metadata.get("mask") is None and sample.metadata.get("boxes") is None:
                    return "no mask or boxes for this sample (needed for a masked metric)"
                continue
            value = getattr(sample, _INPUT_ATTR[need])
            if value is None or (isinstance(value, str) and not value.strip()):
                return f"no {need.replace('_', ' ')} for this sample{_HOW_TO_GET.get(need, '')}"
        return None

    def __call__(self, batch: Sequence[LoadedEdit]) -> list[Score]:
        return self.score_batch(batch)

    def score_batch(self, batch: Sequence[LoadedEdit]) -> list[Score]:
        out: list[Score | None] = [None] * len(batch)
        ready = []
        for i, sample in enumerate(batch):
            reason = self.missing(sample)
            if reason is None:
                ready.append(i)
            else:
                out[i] = Score.skipped(self.name, reason)
        if ready:
            policy = self.size_policy()
            values = self.compute([batch[i].at_sizes(policy) for i in ready])
            if len(values) != len(ready):
                raise RuntimeError(f"{self.name}: compute returned {len(values)} results for {len(ready)} samples")
            for i, value in zip(ready, values):
                out[i] = value if isinstance(value, Score) else self._as_score(value)
                if batch[i].edited_native is not None or batch[i].reference_native is not None:
                    out[i].details.setdefault("size_policy", policy)  # type: ignore[union-attr]
        return [s for s in out if s is not None]

    def size_policy(self) -> str:
        """``source`` or ``native`` (see :attr:`MetricSpec.size_policy`); an
        evaluator whose options change it (released-style DICE) overrides this."""
        return getattr(getattr(self, "spec", None), "size_policy", "source")

    def _as_score(self, value: float) -> Score:
        v = float(value)
        if np.isnan(v):
            return Score(self.name, None, "skipped", "undefined for this sample (no change to measure)")
        if np.isinf(v):
            # PSNR of identical images is +inf: a real, meaningful result that
            # JSON cannot hold; report the cap and say so.
            return Score(self.name, 100.0 if v > 0 else -100.0, "scored", "infinite (identical images), capped at 100 dB")
        return Score(self.name, v)

    def compute(self, batch: Sequence[LoadedEdit]) -> Sequence[float | Score]:
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        """Name, options and models, for run manifests and cache keys."""
        return {"name": self.name, "options": dict(getattr(self, "options", {}))}

    def provenance(self) -> dict[str, Any]:
        """What the run manifest pins beyond :meth:`describe` without making it part of the
        results' identity (a served model's ``/v1/models`` answer, weight hashes of a judge's model)."""
        return {}


class PairMetric(Metric):
    """A metric of two images of the same sample.

    Options:
        compare: ``"source"`` compares source and edited (how much changed);
            ``"reference"`` compares edited and the reference edit (how close
            to the ground truth).
        region: ``"all"``, or ``"inside"``/``"outside"`` the sample's mask or
            boxes (``metadata["mask"]`` / ``metadata["boxes"]``). ``outside``
            measures background preservation.
    """

    def __init__(self, compare: str = "source", region: str = "all") -> None:
        if compare not in ("source", "reference"):
            raise ValueError(f"compare must be 'source' or 'reference', got {compare!r}")
        if region not in REGIONS:
            raise ValueError(f"region must be one of {REGIONS}, got {region!r}")
        self.compare = compare
        self.region = region

    def needs(self) -> tuple[str, ...]:
        extra: tuple[str, ...] = ("reference",) if self.compare == "reference" else ()
        extra += ("mask",) if self.region != "all" else ()
        return tuple(dict.fromkeys(self.spec.needs + extra))

    def pair(self, sample: LoadedEdit) -> tuple[np.ndarray, np.ndarray]:
        if self.compare == "reference":
            assert sample.reference is not None
            return sample.edited, sample.reference
        return sample.source, sample.edited

    def region_mask(self, sample: LoadedEdit) -> np.ndarray | None:
        if self.region == "all":
            return None
        h, w = sample.source.shape[:2]
        mask = sample_mask(sample.metadata, h, w)
        assert mask is not None
        return select_region(mask, self.region)

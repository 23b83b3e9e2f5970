"""The DICE pipeline as an evaluator (registry name ``dice``) and the
DICE-masked CLIP metrics.

With a VLM: the MLLM detector, then the coherence estimator on each
difference. Without one: the model-free change-map detector; differences
are reported but their coherence is unknown, so the sample gets an
``info`` row (no score is made up). With ``detector="changemap"`` and a VLM,
change-map regions are judged by the VLM.

Score of a judged sample: 1.0 when at least one difference is coherent (a
"correct edit" in the paper's ranking), else 0.0; ``details`` hold every
difference with its box, confidence and verdict, the unwanted area and the
no-change flag.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from editlens.backends.families import BOX_CONVENTIONS, box_convention
from editlens.core.types import LoadedEdit, Score
from editlens.dice.coherence import CoherenceEstimator
from editlens.dice.detectors import ChangeMapDetector, MLLMDetector
from editlens.dice.ranking import sample_stats
from editlens.dice.types import DiceResult
from editlens.judges.templates import load_template
from editlens.metrics import functional as F
from editlens.metrics.base import Metric
from editlens.metrics.embedding import PATCH_FILL
from editlens.metrics.masks import boxes_to_mask
from editlens.metrics.model_options import EncoderModelOptions

if TYPE_CHECKING:
    from editlens.dice.released import ReleasedDice

DETECTORS = ("auto", "mllm", "changemap")


class DicePipeline:
    def __init__(self, vlm: str | None = None, detector: str = "auto", vlm_model: str | None = None,
                 device: str = "auto", dtype: str = "auto", cache: bool | str = True,
                 templates: dict[str, str] | None = None, batch_size: int = 8, boxes: str = "auto",
                 samples: int = 1, temperature: float = 0.0, seed: int = 0, min_samples: int | None = None,
                 http: Any = None) -> None:
        from editlens.judges.ensemble import check_sampling

        check_sampling(samples, temperature, min_samples)
        self.min_samples = min_samples
        if boxes != "auto" and boxes not in BOX_CONVENTIONS:
            raise ValueError(f"boxes must be auto or one of {sorted(BOX_CONVENTIONS)}, got {boxes!r}")
        self.boxes, self.samples, self.temperature, self.seed = boxes, int(samples), float(temperature), int(seed)
        if detector not in DETECTORS:
            raise ValueError(f"detector must be one of {DETECTORS}, got {detector!r}")
        if detector == "mllm" and not vlm:
            from editlens.errors import ModelUnavailableError

            raise ModelUnavailableError("the MLLM detector needs --vlm; without one use detector=changemap")
        self.vlm, self.vlm_model, self.device, self.dtype, self.cache = vlm, vlm_model, device, dtype, cache
        self.batch_size, self.http = batch_size, http  # http: how an engine's answers are fetched
        self.detector_name = ("mllm" if vlm else "changemap") if detector == "auto" else detector
        self.templates = {n: load_template(n, templates) for n in ("dice_detect", "dice_coherence")}
        self._backend: Any = None

    @property
    def backend(self) -> Any:
        if self._backend is None and self.vlm:
            from editlens.backends.factory import create_backend

            self._backend = create_backend(self.vlm, device=self.device, dtype=self.dtype, cache=self.cache,
                                           http_model=self.vlm_model, batch_size=self.batch_size, http=self.http)
        return self._backend

    def key(self) -> tuple:
        """Identity of this pipeline's settings: results are shared per sample and key."""
        # the backend object itself: metrics built from the same --vlm get the same
        # pooled backend (and share results); an injected backend never collides
        backend = id(self.backend) if self.vlm else None
        return ("dice", self.detector_name, backend, tuple(t.sha256 for t in self.templates.values()),
                self.box_convention(), self.samples, self.temperature, self.seed, self.min_samples)

    def box_convention(self) -> str:
        """``boxes``, or with ``auto`` the convention of the backend's model family."""
        if self.boxes != "auto":
            return self.boxes
        return box_convention(self.backend.describe()) if self.vlm else "fraction"

    def run(self, batch: Sequence[LoadedEdit]) -> list[DiceResult]:
        """DICE results for the batch; a sample already processed with the same
        settings (by ``dice``, ``dice_clip_i`` or ``dice_clip_t``) is not redone."""
        key = self.key()
        todo = [s for s in batch if key not in s.derived]
        if todo:
            for s, res in zip(todo, self._run(todo)):
                s.derived[key] = res
        return [s.derived[key] for s in batch]

    def _run(self, batch: Sequence[LoadedEdit]) -> list[DiceResult]:
        if self.detector_name == "mllm":
            results = MLLMDetector(self.backend, self.templates["dice_detect"],
                                   convention=self.box_convention()).detect(batch)
        else:
            results = ChangeMapDetector().detect(batch)
        if self.vlm:
            CoherenceEstimator(self.backend, self.templates["dice_coherence"], samples=self.samples,
                               temperature=self.temperature, seed=self.seed,
                               min_samples=self.min_samples).judge(batch, results)
        return results

    def provenance(self) -> dict[str, Any]:
        from editlens.backends.types import backend_provenance

        return {"backend": backend_provenance(self.backend)} if self.vlm else {}

    def describe(self) -> dict[str, Any]:
        return {"detector": self.detector_name, "backend": self.backend.describe() if self.vlm else None,
                "boxes": self.box_convention() if self.detector_name == "mllm" else None,
                "samples": self.samples, "temperature": self.temperature,
                **({"min_samples": self.min_samples} if self.min_samples is not None else {}),
                "templates": {n: {"source": t.source, "sha256": t.sha256} for n, t in self.templates.items()}}


class DiceEvaluator(Metric):
    def __init__(self, vlm: str | None = None, detector: str = "auto", device: str = "auto", dtype: str = "auto",
                 models: dict[str, str] | None = None, http: Any = None, **kw: Any) -> None:
        from editlens.dice.released import RELEASED_OPTIONS, released_from_options

        if any(kw.get(k) for k in RELEASED_OPTIONS):  # --option dice.dice_preset=... : released-style models
            self.pipeline: DicePipeline | ReleasedDice = released_from_options({**kw, "device": device,
                                                                                "dtype": dtype, "http": http})
            return
        for k in RELEASED_OPTIONS:
            kw.pop(k, None)
        self.pipeline = DicePipeline(vlm, detector, device=device, dtype=dtype, http=http, **kw)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "dice": self.pipeline.describe(), "size_policy": self.size_policy()}

    def size_policy(self) -> str:
        """Released-style models see each image at its own size, as the release feeds them; the
        model-free and prompted detectors compare pixels of equal-size images (the spec's ``source``)."""
        from editlens.dice.released import ReleasedDice

        return "native" if isinstance(self.pipeline, ReleasedDice) else super().size_policy()

    def provenance(self) -> dict[str, Any]:
        fn = getattr(self.pipeline, "provenance", None)
        return fn() if callable(fn) else {}

    def compute(self, batch: Sequence[LoadedEdit]) -> list[float | Score]:
        out: list[float | Score] = []
        for res in self.pipeline.run(batch):
            d = res.to_dict()
            if res.failed or any(v.failed for v in res.verdicts or []):
                # never answered (a model or transport error): failed, redone on rerun
                problem = res.problem or next(v.problem for v in res.verdicts or [] if v.failed)
                out.append(Score(self.name, None, "failed", problem, d))
                continue
            if res.unparsable:
                out.append(Score(self.name, None, "unscored", res.problem, d))
                continue
            if res.truncated:
                # an incomplete list cannot say "no unwanted change" or "no change at all"
                out.append(Score(self.name, None, "unscored", res.problem, d))
                continue
            stats = sample_stats(d)
            d["unwanted_area"] = stats["unwanted_area"]
            if res.verdicts is None:
                found = "differences found" if res.differences else "no difference found"
                out.append(Score(self.name, None, "info", f"no VLM: {found}, coherence not judged", d))
            elif not stats["judged"]:
                lost = _lost(res)
                out.append(Score(self.name, None, "failed", lost, d) if lost else
                           Score(self.name, None, "unscored", "a coherence answer could not be parsed", d))
            else:
                out.append(Score(self.name, 1.0 if stats["correct"] else 0.0, details=d))
        return out


def _lost(res: DiceResult) -> str | None:
    """The backend error of a coherence question that got no answer (the row is then failed, retried on rerun)."""
    from editlens.backends.types import is_backend_failure

    return next((v.problem for v in res.verdicts or [] if is_backend_failure(v.problem)), None)


def _patch(arr: np.ndarray, boxes: list[tuple[float, ...]]) -> np.ndarray:
    if not boxes:
        return arr
    h, w = arr.shape[:2]
    mask = boxes_to_mask([list(b) for b in boxes], h, w)
    out = arr.copy()
    out[mask] = PATCH_FILL
    return out


class _DiceMasked(EncoderModelOptions, Metric):
    """Base of DICE-masked CLIP metrics: patch (fill with mid-grey) some of
    DICE's differences in both images, then compute the CLIP metric."""

    kind = "clip"
    spec_name: str  # the registered name, for the messages
    patch_coherent: bool

    def __init__(self, vlm: str | None = None, detector: str = "auto", model: str | None = None, device: str = "auto",
                 dtype: str = "auto", models: dict[str, str] | None = None, http: Any = None, **kw: Any) -> None:
        from editlens.dice.released import RELEASED_OPTIONS, released_from_options

        self._init_model(model, device, dtype, models)
        if any(kw.get(k) for k in RELEASED_OPTIONS):  # DICE's own models (released preset or trained here)
            self.pipeline: Any = released_from_options({**kw, "device": device, "dtype": dtype, "http": http})
            return
        for k in RELEASED_OPTIONS:
            kw.pop(k, None)
        if not vlm:
            from editlens.errors import ModelUnavailableError

            raise ModelUnavailableError(
                "DICE-masked CLIP needs coherence verdicts: pass --vlm (a prompted judge), or DICE's own models with "
                f"--option {self.spec_name}.dice_preset=PRESET (or .dice_detector=BASE+ADAPTER and "
                ".dice_coherence=BASE+ADAPTER)")
        self.pipeline = DicePipeline(vlm, detector, device=device, dtype=dtype, http=http, **kw)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "model": self.model_describe(), "dice": self.pipeline.describe()}

    def provenance(self) -> dict[str, Any]:
        return self.pipeline.provenance()

    def _patched(self, batch: Sequence[LoadedEdit]) -> list[tuple[np.ndarray, np.ndarray] | Score]:
        out: list[tuple[np.ndarray, np.ndarray] | Score] = []
        for s, res in zip(batch, self.pipeline.run(batch)):
            if res.failed or any(v.failed for v in res.verdicts or []):
                problem = res.problem or next(v.problem for v in res.verdicts or [] if v.failed)
                out.append(Score(self.name, None, "failed", problem, {"dice": res.to_dict()}))
                continue
            if res.unparsable or res.truncated or not res.judged:
                lost = None if res.unparsable or res.truncated else _lost(res)
                out.append(Score(self.name, None, "failed" if lost else "unscored",
                                 lost or res.problem or "a coherence answer could not be parsed", {"dice": res.to_dict()}))
                continue
            boxes = [d.box for d, v in zip(res.differences, res.verdicts or []) if v.coherent is self.patch_coherent]
            out.append((_patch(s.source, boxes), _patch(s.edited, boxes)))
        return out


class DiceCLIPImage(_DiceMasked):
    """CLIP-I (source vs edited) with coherent differences patched: background preservation."""

    patch_coherent = True
    spec_name = "dice_clip_i"

    def compute(self, batch: Sequence[LoadedEdit]) -> list[float | Score]:
        pairs = self._patched(batch)
        ok = [p for p in pairs if not isinstance(p, Score)]
        if ok:
            a = self.encoder.encode_images([p[0] for p in ok])
            b = self.encoder.encode_images([p[1] for p in ok])
            vals = iter(F.cosine(a, b).tolist())
        return [p if isinstance(p, Score) else next(vals) for p in pairs]


class DiceCLIPText(_DiceMasked):
    """CLIP-T (edited vs target caption) with non-coherent differences patched: prompt adherence."""

    patch_coherent = False
    spec_name = "dice_clip_t"

    def compute(self, batch: Sequence[LoadedEdit]) -> list[float | Score]:
        pairs = self._patched(batch)
        idx = [i for i, p in enumerate(pairs) if not isinstance(p, Score)]
        if idx:
            img = self.encoder.encode_images([pairs[i][1] for i in idx])  # type: ignore[index]
            txt = self.encoder.encode_texts([batch[i].target_caption for i in idx])
            vals = dict(zip(idx, F.cosine(img, txt).tolist()))
        return [p if isinstance(p, Score) else vals[i] for i, p in enumerate(pairs)]

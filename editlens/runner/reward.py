"""A reward for training loops, from any registered evaluator.

:class:`RewardFunction` scores batches of edits given as PIL images, numpy
arrays or torch tensors and returns a torch tensor, one value per edit
(``nan`` where the evaluator could not score; the reason is in
:attr:`RewardFunction.last_scores`). Float inputs need their value range
declared (``value_range=(0, 1)`` or ``(-1, 1)``); it is never guessed. An
evaluator that has a differentiable path (a ``score_tensor`` method, see
below) is used through it when the edited images are tensors, so gradients
flow back to them; the others score decoded ``uint8`` images under
``torch.no_grad``. No disk cache is used unless ``cache`` is given.

A differentiable evaluator implements::

    def score_tensor(self, edited, sources, instructions) -> torch.Tensor:
        # edited, sources: float tensors B x 3 x H x W in [0, 1] (sources may be None)
        # returns B values on the evaluator's own scale

It is also served as ``POST /v1/score`` (``editlens serve``) through :meth:`RewardFunction.scores`.
"""

from __future__ import annotations

import inspect
import math
from typing import Any, Sequence

import numpy as np

from editlens.core.types import EditSample, LoadedEdit, Score
from editlens.errors import InputError

RANGES = ((0.0, 1.0), (-1.0, 1.0))


def _range(value_range: Any) -> tuple[float, float]:
    try:
        lo, hi = (float(v) for v in value_range)
    except (TypeError, ValueError):
        raise InputError(f"value_range must be (0, 1) or (-1, 1), got {value_range!r}") from None
    if (lo, hi) not in RANGES:
        raise InputError(f"value_range must be (0, 1) or (-1, 1), got {value_range!r}")
    return lo, hi


def _is_tensor(x: Any) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "detach")


def as_tensor01(images: Any, value_range: Any, what: str) -> Any:
    """``images`` as a float tensor B x 3 x H x W in [0, 1], differentiable for tensor input.

    Accepts a list of PIL images, an array or a list of arrays (H x W x 3 or B x H x W x 3, or
    channels first), a tensor (C x H x W or B x C x H x W). ``uint8`` data are 0-255; float data
    need ``value_range``.
    """
    import torch

    if images is None:
        return None
    if _is_tensor(images):
        t = images
        if t.dim() == 3:
            t = t.unsqueeze(0)
        if t.dim() != 4 or t.shape[1] != 3:
            raise InputError(f"{what}: a tensor must be C x H x W or B x C x H x W with 3 channels, "
                             f"got shape {tuple(images.shape)}")
        if t.dtype == torch.uint8:
            return t.float() / 255.0
        if value_range is None:
            raise InputError(f"{what}: float tensors need value_range=(0, 1) or (-1, 1) (it is never guessed)")
        lo, _ = _range(value_range)
        t = t.float()
        return (t + 1.0) / 2.0 if lo == -1.0 else t
    return torch.from_numpy(np.stack([a.astype(np.float32) / 255.0 for a in as_uint8(images, value_range, what)])
                            ).permute(0, 3, 1, 2)


def _array_hwc(a: np.ndarray, what: str) -> np.ndarray:
    if a.ndim == 3 and a.shape[-1] == 3:
        return a
    if a.ndim == 3 and a.shape[0] == 3:
        return np.moveaxis(a, 0, -1)
    raise InputError(f"{what}: an image array must be H x W x 3 or 3 x H x W, got shape {a.shape}")


def as_uint8(images: Any, value_range: Any, what: str) -> list[np.ndarray]:
    """``images`` as a list of H x W x 3 ``uint8`` arrays (the form every evaluator scores)."""
    if _is_tensor(images):
        t = as_tensor01(images, value_range, what).detach().float().clamp(0, 1)
        return [x for x in (t.permute(0, 2, 3, 1).cpu().numpy() * 255.0).round().astype(np.uint8)]
    if isinstance(images, np.ndarray):
        if images.ndim == 4:
            images = list(images)
        elif images.ndim == 3:
            images = [images]
        else:
            raise InputError(f"{what}: an image array must have 3 or 4 dimensions, got shape {images.shape}")
    if not isinstance(images, (list, tuple)):
        raise InputError(f"{what}: expected PIL images, numpy arrays or a torch tensor, got {type(images).__name__}")
    out = []
    for i, im in enumerate(images):
        if _is_tensor(im):
            out += as_uint8(im, value_range, f"{what}[{i}]")
            continue
        if hasattr(im, "convert") and hasattr(im, "size"):  # PIL
            out.append(np.asarray(im.convert("RGB")))
            continue
        a = _array_hwc(np.asarray(im), f"{what}[{i}]")
        if a.dtype == np.uint8:
            out.append(a)
            continue
        if not np.issubdtype(a.dtype, np.floating):
            raise InputError(f"{what}[{i}]: arrays must be uint8 (0-255) or float with a declared value_range, "
                             f"got {a.dtype}")
        if value_range is None:
            raise InputError(f"{what}[{i}]: float arrays need value_range=(0, 1) or (-1, 1) (it is never guessed)")
        lo, _ = _range(value_range)
        a01 = (a + 1.0) / 2.0 if lo == -1.0 else a
        out.append((np.clip(a01, 0, 1) * 255.0).round().astype(np.uint8))
    return out


class RewardFunction:
    """``reward(edited, instructions, sources, value_range=...) -> tensor`` with a registered evaluator.

    ``metric``: a registry name (built with ``options``; ``cache`` is off unless given) or a built
    metric. ``differentiable``: ``"auto"`` (use the evaluator's differentiable path for tensor
    input when it has one), ``True`` (require it) or ``False`` (always score decoded images).
    """

    def __init__(self, metric: Any, batch_size: int = 8, *, cache: Any = False, differentiable: Any = "auto",
                 **options: Any) -> None:
        if isinstance(metric, str):
            from editlens.metrics.registry import create_metric, get_spec

            cls = get_spec(metric).load_class()
            if "cache" in inspect.signature(cls).parameters:
                options.setdefault("cache", cache)  # no per-call disk cache unless asked
            metric = create_metric(metric, **options)
        elif options:
            raise InputError("options go with a metric name, not with a built metric")
        if batch_size < 1:
            raise InputError(f"batch_size must be at least 1, got {batch_size}")
        self.metric = metric
        self.batch_size = batch_size
        self.last_scores: list[Score] = []
        has = callable(getattr(metric, "score_tensor", None))
        if differentiable is True and not has:
            raise InputError(f"{metric.name} has no differentiable path (no score_tensor)")
        self.differentiable = has and differentiable is not False

    @property
    def value_range(self) -> tuple[float, float]:
        low, high = self.metric.spec.value_range
        return float(low), float(high)

    @property
    def higher_is_better(self) -> bool:
        return bool(self.metric.spec.higher_is_better)

    def describe(self) -> dict[str, Any]:
        return {**self.metric.describe(), "differentiable": self.differentiable,
                "higher_is_better": self.higher_is_better,
                "range": [None if math.isinf(v) else v for v in self.value_range]}

    # -- scoring of manifest samples (best-of-n, relabel, serve) ---------------------------------
    def scores(self, samples: Sequence[EditSample | LoadedEdit]) -> list[Score]:
        """One :class:`Score` per sample, in batches."""
        out: list[Score] = []
        for s in range(0, len(samples), self.batch_size):
            part = [x.load() if isinstance(x, EditSample) else x for x in samples[s : s + self.batch_size]]
            out += self.metric.score_batch(part)
        self.last_scores = out
        return out

    # -- the training-loop call ----------------------------------------------------------------
    def __call__(self, edited: Any, instructions: Sequence[str] | str | None = None, sources: Any = None, *,
                 value_range: Any = None) -> Any:
        import torch

        n = len(edited) if not (isinstance(edited, np.ndarray) and edited.ndim == 3) and not (
            _is_tensor(edited) and edited.dim() == 3) else 1
        if isinstance(instructions, str) or instructions is None:
            instructions = [instructions or ""] * n
        if len(instructions) != n:
            raise InputError(f"{n} edited images but {len(instructions)} instructions")
        if self.differentiable and _is_tensor(edited):
            e = as_tensor01(edited, value_range, "edited")
            src = as_tensor01(sources, value_range, "sources")
            if src is not None:
                src = src.to(e.device)
                if src.shape[0] != e.shape[0]:
                    raise InputError(f"{e.shape[0]} edited images but {src.shape[0]} sources")
            values = self.metric.score_tensor(e, src, list(instructions))
            self.last_scores = [Score(self.metric.name, float(v)) for v in values.detach().float().cpu()]
            return values
        device = edited.device if _is_tensor(edited) else "cpu"
        eds = as_uint8(edited, value_range, "edited")
        srcs = as_uint8(sources, value_range, "sources") if sources is not None else [None] * n
        if len(srcs) != len(eds):
            raise InputError(f"{len(eds)} edited images but {len(srcs)} sources")
        # without sources, an evaluator that needs one skips the edit (nan, reason in last_scores)
        loaded = [LoadedEdit(id=str(i), source=s, edited=e, instruction=str(ins))  # type: ignore[arg-type]
                  for i, (e, s, ins) in enumerate(zip(eds, srcs, instructions))]
        with torch.no_grad():
            scores = self.scores(loaded)
        return torch.tensor([sc.value if sc.status == "scored" and sc.value is not None else float("nan")
                             for sc in scores], dtype=torch.float32, device=device)

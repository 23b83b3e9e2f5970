"""Calibrated 0-1 scores: Platt scaling of a two-frame similarity.

``p = sigmoid(a * cosine + b)``, fitted by minimising binary cross-entropy
against labels in [0, 1] (binary match/non-match labels, or human scores
rescaled to 0-1 used as soft targets). Two numbers, stored with the model.

>>> cal = fit_platt([0.1, 0.2, 0.8, 0.9], [0, 0, 1, 1])
>>> bool(apply_platt(cal, [0.9])[0] > 0.5 > apply_platt(cal, [0.1])[0])
True
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from editlens.errors import InputError


def fit_platt(scores: Sequence[float], labels: Sequence[float], l2: float = 1e-3) -> dict[str, Any]:
    """Fit ``a, b``; ``l2`` keeps ``a`` finite when the classes separate perfectly."""
    import torch

    x = torch.as_tensor(np.asarray(scores, dtype=np.float64))
    y = torch.as_tensor(np.asarray(labels, dtype=np.float64))
    if x.ndim != 1 or x.shape != y.shape or x.numel() < 2:
        raise InputError(f"calibration needs equal-length score and label lists (>= 2), got {x.numel()} and {y.numel()}")
    if not torch.isfinite(x).all() or ((y < 0) | (y > 1)).any():
        raise InputError("calibration needs finite scores and labels in [0, 1]")
    if float(y.min()) == float(y.max()):
        raise InputError("calibration needs both matching and non-matching examples (all labels are equal)")
    mu, sd = x.mean(), x.std().clamp_min(1e-8)  # fit on standardised scores, then fold back
    z = (x - mu) / sd
    w = torch.zeros(2, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([w], lr=0.5, max_iter=200, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = torch.nn.functional.binary_cross_entropy_with_logits(w[0] * z + w[1], y) + l2 * w[0] ** 2
        loss.backward()
        return loss

    opt.step(closure)
    w0, w1 = w.detach()
    a = float(w0 / sd)
    b = float(w1 - w0 * mu / sd)
    with torch.no_grad():
        loss = float(torch.nn.functional.binary_cross_entropy_with_logits(a * x + b, y))
    return {"method": "platt", "a": a, "b": b, "n": int(x.numel()), "bce": loss}


def apply_platt(cal: dict[str, Any], scores: Sequence[float]) -> np.ndarray:
    s = np.asarray(scores, dtype=np.float64)
    return 1.0 / (1.0 + np.exp(-(cal["a"] * s + cal["b"])))

"""Calibrated 0-1 scores: Platt scaling of a two-frame similarity.

``p = sigmoid(a * cosine + b)``, fitted against labels in [0, 1] (binary
match/non-match labels, or human scores rescaled to 0-1 used as soft
targets) by editlens' one calibration fit
(:func:`editlens.meta.calibration.fit_map`); the two numbers are stored with
the model as a small dict.

>>> cal = fit_platt([0.1, 0.2, 0.8, 0.9], [0, 0, 1, 1])
>>> bool(apply_platt(cal, [0.9])[0] > 0.5 > apply_platt(cal, [0.1])[0])
True
"""

from __future__ import annotations

from typing import Any

import numpy as np

from editlens.meta.calibration import CalibrationMap, Values, fit_map


def fit_platt(scores: Values, labels: Values) -> dict[str, Any]:
    """``{"method": "platt", "a", "b", "n", "bce"}`` for the model's metadata."""
    fitted = fit_map(scores, labels, "platt", evaluator="twoframe")
    p = np.clip(fitted.predict(scores), 1e-12, 1 - 1e-12)
    y = np.asarray(labels, dtype=float)
    bce = float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))
    return {"method": "platt", "a": fitted.a, "b": fitted.b, "n": fitted.n, "bce": bce}


def apply_platt(cal: dict[str, Any], scores: Values) -> np.ndarray:
    return CalibrationMap("twoframe", "platt", a=float(cal["a"]), b=float(cal["b"])).predict(scores)

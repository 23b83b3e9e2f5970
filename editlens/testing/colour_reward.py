"""A constructed differentiable evaluator for tests and examples: how red
the edited image is, mean(R - (G + B) / 2) over its pixels, in [-1, 1].

It has both paths a :class:`editlens.RewardFunction` uses: ``compute`` on
decoded ``uint8`` images and ``score_tensor`` on float tensors (gradients
flow to the image), and they agree. Register it with :func:`register`.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from editlens.core.types import LoadedEdit
from editlens.metrics.base import Metric
from editlens.metrics.spec import MetricSpec

NAME = "test_redness"


class Redness(Metric):
    def compute(self, batch: Sequence[LoadedEdit]) -> list[float]:
        out = []
        for s in batch:
            x = s.edited.astype(np.float64) / 255.0
            out.append(float(np.mean(x[..., 0] - (x[..., 1] + x[..., 2]) / 2)))
        return out

    def score_tensor(self, edited: Any, sources: Any, instructions: list[str]) -> Any:
        return (edited[:, 0] - (edited[:, 1] + edited[:, 2]) / 2).flatten(1).mean(1)


SPEC = MetricSpec(NAME, "editlens.testing.colour_reward:Redness", ("edited",), True, (-1.0, 1.0),
                  description="how red the edited image is (a constructed differentiable reward for tests)",
                  measures="none")


def register() -> MetricSpec:
    """Register ``test_redness`` (again, harmlessly)."""
    from editlens.metrics.registry import register_metric

    return register_metric(SPEC, overwrite=True)

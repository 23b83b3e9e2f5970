"""Experiment tracking: ``--log-to tensorboard`` (or ``wandb``) for the trainers (every optimiser
step's figures and each validation, through :mod:`editlens.training.loop`) and ``bench run`` (the
table's overall figures per model), beside editlens' own ``log.jsonl``/``table.json``, which stay
the record.

* ``tensorboard``: event files in ``OUT/tensorboard/`` (``tensorboard --logdir OUT``); needs the
  ``tensorboard`` package (``pip install 'editlens[tracking]'``).
* ``wandb``: a Weights & Biases run (project ``$WANDB_PROJECT`` or ``editlens``, its files under
  ``OUT``; ``WANDB_MODE=offline`` keeps it local); needs ``pip install 'editlens[wandb]'``.

A tracker that is asked for and missing is a clear error before any work, never a silent skip.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Callable, Mapping

from editlens.errors import InputError


class Tracker:
    """Where scalars go: ``log(step, {name: number})`` and ``close()``."""

    def log(self, step: int, scalars: Mapping[str, float]) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass


class TensorBoardTracker(Tracker):
    def __init__(self, out: Path, config: Mapping[str, Any]) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ModuleNotFoundError:
            raise InputError("--log-to tensorboard needs the tensorboard package: pip install 'editlens[tracking]' "
                             "(or pip install tensorboard)") from None
        self.folder = out / "tensorboard"
        self.writer = SummaryWriter(log_dir=str(self.folder))
        if config:
            self.writer.add_text("config", "\n".join(f"    {k}: {v}" for k, v in sorted(config.items())), 0)

    def log(self, step: int, scalars: Mapping[str, float]) -> None:
        for name, value in scalars.items():
            self.writer.add_scalar(name, value, step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandbTracker(Tracker):
    def __init__(self, out: Path, config: Mapping[str, Any]) -> None:
        try:
            import wandb
        except ModuleNotFoundError:
            raise InputError("--log-to wandb needs Weights & Biases, which is not installed: pip install "
                             "'editlens[wandb]' (or pip install wandb); --log-to tensorboard needs no account") from None
        self.run = wandb.init(project=os.environ.get("WANDB_PROJECT", "editlens"), name=out.name, dir=str(out),
                              config=dict(config), reinit=True)

    def log(self, step: int, scalars: Mapping[str, float]) -> None:
        self.run.log(dict(scalars), step=step)

    def close(self) -> None:
        self.run.finish()


#: ``--log-to`` name -> the tracker class
TRACKERS: dict[str, Callable[[Path, Mapping[str, Any]], Tracker]] = {"tensorboard": TensorBoardTracker,
                                                                     "wandb": WandbTracker}


def open_tracker(kind: str | None, out: str | Path, config: Mapping[str, Any] | None = None) -> Tracker | None:
    """The tracker ``--log-to kind`` names (``None``: none), writing under ``out``."""
    if kind is None:
        return None
    if kind not in TRACKERS:
        raise InputError(f"--log-to {kind}: not a tracker; one of {', '.join(TRACKERS)}")
    Path(out).mkdir(parents=True, exist_ok=True)
    return TRACKERS[kind](Path(out), {k: v for k, v in (config or {}).items()
                                      if isinstance(v, (str, int, float, bool)) or v is None})


def scalars_of(record: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    """The finite numbers of a (nested) log record, named by their path: ``{"loss": 1.0, "val": {"auc":
    0.5}}`` -> ``{"loss": 1.0, "val/auc": 0.5}`` (the step itself and non-numbers left out).

    >>> scalars_of({"step": 3, "loss": 1.5, "val": {"auc": 0.5, "n": 4, "note": "x"}, "ok": True})
    {'loss': 1.5, 'val/auc': 0.5, 'val/n': 4.0}
    """
    out: dict[str, float] = {}
    for key, value in record.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(scalars_of(value, f"{name}/"))
        elif name != "step" and isinstance(value, (int, float)) and not isinstance(value, bool) \
                and math.isfinite(value):
            out[name] = float(value)
    return out

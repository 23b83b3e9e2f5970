"""The one training loop that DICE, ADIEE and two-frame training share.

A system describes *what* a step is (:class:`TrainingTask`: its batches, its
loss, its validation, what to export); :func:`run` owns the rest: resume,
Ctrl-C/SIGTERM, atomic checkpoints, validation cadence, progress bar,
``log.jsonl``, the loss curve, gradient accumulation, LR schedule, clipping
and mixed precision from :mod:`editlens.models.precision`.
"""

from editlens.training.loop import (
                                    LoopResult,
                                    LoopSettings,
                                    TrainingTask,
                                    latest_checkpoint,
                                    prepare_run_dir,
                                    read_log,
                                    run,
)
from editlens.training.plot import PlotSpec, plot_training

__all__ = ["LoopResult", "LoopSettings", "PlotSpec", "TrainingTask", "latest_checkpoint", "plot_training",
           "prepare_run_dir", "read_log", "run"]

"""Run several ``editlens`` commands one after the other in ONE process (``python cli_jobs.py JOBS.json``, or
under ``torchrun`` / ``accelerate launch``: then every process runs every job, as it would run each command
launched on its own). Importing torch, transformers, diffusers and peft costs each process ~10 s of CPU:
tests/test_training_distributed.py pays it once per launch instead of once per command.

JOBS.json is a list of ``{"args": [...], "log": PATH}``. Each job's console output (stdout and stderr) goes to
``PATH.rank<R>`` and its exit status to ``PATH.rank<R>.status``; a failing job does not stop the next one.
Between jobs the model pool is emptied, so no job sees a model an earlier one loaded (and trained)."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import traceback


def run_jobs(jobs: list[dict]) -> None:
    from editlens.cli.main import app
    from editlens.models import pool

    rank = os.environ.get("RANK", "0")
    for job in jobs:
        log = f"{job['log']}.rank{rank}"
        with open(log, "w") as out, contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            try:
                app([str(a) for a in job["args"]], prog_name="editlens")
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            except BaseException:  # noqa: BLE001 - recorded as the job's failure, with its traceback
                traceback.print_exc()
                code = 1
        with open(f"{log}.status", "w") as f:
            f.write(str(code))
        pool.clear()


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        run_jobs(json.load(f))

"""Run-scale throughput: 2,000 edits built from the real AURORA pairs
(repeated with different ids), scored with the offline metric set, timed for
the first run and for a rerun on the same directory (everything reused).

    python -m benchmarks.run_scaling [--edits 2000] [--executor local|ray]

Prints edits/s of both runs and their ratio (target: >= 8 edits/s for the
first run), with the CPU features it ran on. Needs ../shared/data/aurora.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from benchmarks._common import AURORA, aurora_rows, runtime_info

OFFLINE = ["change_map", "l1", "l2", "psnr", "ssim"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--edits", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--executor", default="local", choices=["local", "ray"])
    args = ap.parse_args()
    rows = aurora_rows()
    if not rows:
        raise SystemExit(f"{AURORA} not found")
    from editlens import EditSample, create_metric
    from editlens.runner.run import run_evaluation

    samples = []
    for i in range(args.edits):
        r = rows[i % len(rows)]
        samples.append(EditSample(f"e{i:05d}", str(AURORA / r["input"]), str(AURORA / r["output"]),
                                  r["instruction"], model=r["task"]))
    out = Path(tempfile.mkdtemp(prefix="editlens-scaling-"))
    try:
        times = []
        for attempt in ("first", "rerun"):
            metrics = [create_metric(n) for n in OFFLINE]
            executor = None
            if args.executor == "ray":
                from editlens.core.images import ImageLoadOptions
                from editlens.runner.executors import RayExecutor

                executor = RayExecutor(metrics, ImageLoadOptions())
            t = time.perf_counter()
            res = run_evaluation(samples, metrics, out, batch_size=args.batch, progress=True, executor=executor)
            times.append(time.perf_counter() - t)
            print(f"{attempt}: {res.computed} computed, {res.reused} reused in {times[-1]:.1f} s", file=sys.stderr)
        result = {"runtime": runtime_info(), "edits": args.edits, "metrics": OFFLINE, "executor": args.executor,
                  "first_s": times[0], "first_edits_per_s": args.edits / times[0],
                  "rerun_s": times[1], "rerun_edits_per_s": args.edits / times[1],
                  "rerun_speedup": times[0] / times[1]}
        print(json.dumps(result, indent=2))
        ok = result["first_edits_per_s"] >= 8
        print("PASS" if ok else "FAIL", f"first run {result['first_edits_per_s']:.2f} edits/s (target >= 8)")
    finally:
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()

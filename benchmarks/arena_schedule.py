"""Arena scheduling and fitting: how many comparisons the adaptive schedule spends, how
often it recovers the true order, how often the bootstrap CIs cover the true strengths,
and the time of the statistics (the judge is a simulated one: verdicts drawn from the
Davidson model of known strengths, so only editlens' own cost is timed).

    python -m benchmarks.arena_schedule [--editors 8] [--sources 200] [--seeds 10] [--gap 0.5]

Prints JSON: per seed the comparisons made against all pairs, whether the order was
recovered, the CI coverage of the true strengths, and seconds spent; then the totals
(targets: fewer than half of all pairs; order recovered in >= 90% of seeds; coverage
near 95%).
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import time

import numpy as np

from benchmarks._common import runtime_info


class SimulatedJudge:
    name = "simulated"

    def __init__(self, strengths: dict[str, float], seed: int, nu: float) -> None:
        self.strengths, self.rng, self.nu = strengths, np.random.default_rng(seed), nu

    def identity(self) -> dict:
        return {"simulated": sorted(self.strengths.items()), "nu": self.nu}

    def compare(self, items, batch_size=8):  # type: ignore[no-untyped-def]
        out = []
        for it in items:
            _, a, b = it.id.split("|")
            pa, pb = math.exp(self.strengths[a]), math.exp(self.strengths[b])
            u = self.rng.random() * (pa + pb + self.nu * math.sqrt(pa * pb))
            label = 1 if u < pa else -1 if u < pa + pb else 0
            out.append({"id": it.id, "verdict": {1: "A>B", -1: "B>A", 0: "A=B"}[label], "label": label})
        return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--editors", type=int, default=8)
    ap.add_argument("--sources", type=int, default=200)
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--gap", type=float, default=0.5, help="log-strength gap between neighbouring editors")
    ap.add_argument("--nu", type=float, default=0.3, help="Davidson tie parameter of the simulated judge")
    ap.add_argument("--n-boot", type=int, default=200)
    args = ap.parse_args()
    from editlens.runner.arena import Contest, run_arena

    truth = {f"e{k}": args.gap * ((args.editors - 1) / 2 - k) for k in range(args.editors)}
    runs = []
    for seed in range(args.seeds):
        contests = [Contest(f"s{k}", f"s{k}.png", "edit", {m: f"{k}_{m}.png" for m in truth},
                            {m: f"{k}/{m}" for m in truth}) for k in range(args.sources)]
        t = time.perf_counter()
        with tempfile.TemporaryDirectory() as out:
            doc = run_arena(contests, SimulatedJudge(truth, seed, args.nu), out, seed=seed, n_boot=args.n_boot)
        took = time.perf_counter() - t
        rows = doc["editors"]
        runs.append({"seed": seed, "comparisons": doc["schedule"]["comparisons"], "all_pairs": doc["schedule"]["all_pairs"],
                     "stopped": doc["schedule"]["stopped"], "order_recovered": [r["editor"] for r in rows] == list(truth),
                     "ci_coverage": sum(r["ci"][0] <= truth[r["editor"]] <= r["ci"][1] for r in rows) / len(rows),
                     "seconds": round(took, 3)})
    total = {"share_of_all_pairs": sum(r["comparisons"] for r in runs) / sum(r["all_pairs"] for r in runs),
             "order_recovered": sum(r["order_recovered"] for r in runs) / len(runs),
             "ci_coverage": float(np.mean([r["ci_coverage"] for r in runs])),
             "seconds_per_arena": float(np.mean([r["seconds"] for r in runs]))}
    print(json.dumps({"args": vars(args), "runs": runs, "total": total, "runtime": runtime_info()}, indent=1))


if __name__ == "__main__":
    main()

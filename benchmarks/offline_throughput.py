"""Speed of the model-free metrics against their peers, in one run.

1. SSIM at 1024x1024: editlens (OpenCV box filter, float32, a batch at once)
   against scikit-image's ``structural_similarity`` one pair at a time;
   values must agree within 1e-4. Target >= 5x.
2. Change map against the plain pixel-difference baseline of
   dice_detection.py on the same 512 px pairs (AURORA photos, half of them
   drifted). Target: at least as fast.
3. The change map through ``editlens run`` (``run_evaluation``, the code
   the CLI calls: PNG decoding, the prefetching loader, the results store)
   on 512 px pairs written to disk. Target >= 40 pairs/s.

    python -m benchmarks.offline_throughput [--pairs 64] [--ssim-pairs 8]

Timings swing when anything else runs: compare the ratios, and run it alone.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

from benchmarks._common import runtime_info
from benchmarks.dice_detection import baseline_detect, drift, load_sources, paste


def bench_ssim(n: int, size: int = 1024) -> dict:
    import torch
    from skimage.metrics import structural_similarity

    from editlens.metrics.functional import ssim

    rng = np.random.default_rng(0)
    a = rng.random((n, size, size, 3)).astype(np.float32)
    b = np.clip(a + rng.normal(0, 0.1, a.shape).astype(np.float32), 0, 1)
    ta, tb = torch.from_numpy(a).permute(0, 3, 1, 2), torch.from_numpy(b).permute(0, 3, 1, 2)
    ssim(ta[:1], tb[:1])  # warm up thread pools
    t = time.perf_counter()
    ours = ssim(ta, tb).numpy()
    t_ours = time.perf_counter() - t
    t = time.perf_counter()
    ref = np.array([structural_similarity(a[i].astype(np.float64), b[i].astype(np.float64), channel_axis=2,
                                          data_range=1.0) for i in range(n)])
    t_ref = time.perf_counter() - t
    diff = float(np.abs(ours - ref).max())
    return {"pairs": n, "size": size, "editlens_s": round(t_ours, 3), "skimage_s": round(t_ref, 3),
            "speedup": round(t_ref / t_ours, 2), "max_abs_diff": diff, "parity_1e-4": diff <= 1e-4}


def make_pairs(n: int) -> list[tuple[np.ndarray, np.ndarray]]:
    sources = load_sources(max(2, min(n, 148)))
    rng = np.random.default_rng(0)
    pairs = []
    for i in range(n):
        src = np.ascontiguousarray(np.asarray(Image.fromarray(sources[i % len(sources)]).resize((512, 512))))
        h, w = src.shape[:2]
        x0, y0 = int(rng.integers(0, w - 120)), int(rng.integers(0, h - 120))
        edited = paste(src, sources[(i + 1) % len(sources)], (x0, y0, x0 + 100, y0 + 90), rng)
        pairs.append((src, drift(edited, rng) if i % 2 else edited))
    return pairs


def bench_detectors(pairs: list[tuple[np.ndarray, np.ndarray]]) -> dict:
    from editlens.metrics.changemap import change_map

    out = {}
    for name, fn in (("changemap", change_map), ("baseline", baseline_detect)):
        fn(*pairs[0])
        t = time.perf_counter()
        for a, b in pairs:
            fn(a, b)
        out[f"{name}_pairs_per_s"] = round(len(pairs) / (time.perf_counter() - t), 1)
    out["changemap_vs_baseline"] = round(out["changemap_pairs_per_s"] / out["baseline_pairs_per_s"], 2)
    return out


def bench_run(pairs: list[tuple[np.ndarray, np.ndarray]], batch: int) -> dict:
    from editlens import EditSample, create_metric
    from editlens.runner.run import run_evaluation

    tmp = Path(tempfile.mkdtemp(prefix="editlens-offline-"))
    try:
        samples = []
        for i, (a, b) in enumerate(pairs):
            Image.fromarray(a).save(tmp / f"{i}-a.png")
            Image.fromarray(b).save(tmp / f"{i}-b.png")
            samples.append(EditSample(f"p{i}", str(tmp / f"{i}-a.png"), str(tmp / f"{i}-b.png"), "edit"))
        t = time.perf_counter()
        res = run_evaluation(samples, [create_metric("change_map")], tmp / "run", batch_size=batch, progress=False)
        secs = time.perf_counter() - t
        return {"pairs": len(pairs), "computed": res.computed, "seconds": round(secs, 2),
                "pairs_per_s": round(len(pairs) / secs, 1)}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=64, help="512 px pairs for the change map parts")
    ap.add_argument("--ssim-pairs", type=int, default=8, help="1024 px pairs for the SSIM part")
    ap.add_argument("--batch", type=int, default=16)
    args = ap.parse_args()
    pairs = make_pairs(args.pairs)
    result = {"runtime": runtime_info(), "ssim_1024": bench_ssim(args.ssim_pairs),
              "detectors_512": bench_detectors(pairs), "editlens_run_change_map_512": bench_run(pairs, args.batch)}
    targets = {
        "ssim >= 5x scikit-image": result["ssim_1024"]["speedup"] >= 5,
        "ssim parity 1e-4": result["ssim_1024"]["parity_1e-4"],
        "change map at least as fast as the baseline": result["detectors_512"]["changemap_vs_baseline"] >= 1.0,
        "change map >= 40 pairs/s through editlens run": result["editlens_run_change_map_512"]["pairs_per_s"] >= 40,
    }
    print(json.dumps({**result, "targets": targets}, indent=2))
    print("PASS" if all(targets.values()) else "FAIL", ", ".join(k for k, ok in targets.items() if not ok))


if __name__ == "__main__":
    main()

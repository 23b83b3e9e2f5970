"""ADIEE scorer throughput on a random LLaVA-NeXT with a [SCORE] token, in one run:

1. batched scoring (one generate() per batch, left padding) vs one edit at a time;
2. a cached rerun (the scorer's SQLite cache) vs the first run.

    python -m benchmarks.adiee_throughput [--size 0.5b] [--requests 8] [--dtype auto|float32|bfloat16|both] [--image-side 512]

``--size 0.5b`` builds a ~0.45B model (CLIP-B/14-like tower at 336 px with
LLaVA-NeXT tiling, 24-layer 1024-wide Llama); ``--size tiny`` is a smoke
test. The device is CUDA when available, else the CPU; ``--dtype`` follows
the precision policy (``both``: float32 and bfloat16 in one run). Targets:
batching >= 2x, cached rerun >= 50x, in each dtype.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from benchmarks._common import DTYPE_HELP, run_per_dtype, source_images


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="0.5b", choices=["tiny", "0.5b"])
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--dtype", default="auto", help=DTYPE_HELP)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--image-side", type=int, default=512)
    args = ap.parse_args()
    sys.exit(run_per_dtype(args.dtype, args.device, lambda dt: measure(args, dt), check))


def check(result: dict) -> tuple[bool, str]:
    ok = result["batching_speedup"] >= 2 and result["cache_speedup"] >= 50 and result["model_calls_in_rerun"] == 0
    return ok, (f"batching {result['batching_speedup']:.2f}x (target >= 2x), cache {result['cache_speedup']:.0f}x "
                f"(target >= 50x), batched vs single max diff {result['max_abs_score_diff_batched_vs_single']:.2g}")


def measure(args: argparse.Namespace, dtype_choice: str) -> dict:
    import torch

    from editlens.adiee.checkpoint import save_released, scorer_from_base
    from editlens.adiee.evaluator import AdieeEvaluator
    from editlens.metrics.registry import create_metric
    from editlens.testing.tiny_adiee import build_llava_next_sized

    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        base = build_llava_next_sized(Path(tmp) / "base", args.size)
        ckpt = save_released(scorer_from_base(str(base), device="cpu", dtype="float32"), Path(tmp) / "ckpt")
        build_s = time.perf_counter() - t
        imgs = source_images(args.requests + 1, size=args.image_side)
        items = [(imgs[i], imgs[i + 1], f"edit instruction number {i}: make it look different") for i in range(args.requests)]
        # `editlens run` hashes each image once when it loads it (the results store needs the hash anyway):
        # the cached rerun is timed with those hashes given, as the runner gives them
        from editlens.core.images import image_hash

        hashes = [(image_hash(a), image_hash(b)) for a, b, _ in items]

        def evaluator(batch: int, cache: bool | str) -> AdieeEvaluator:
            return create_metric("adiee", model=str(ckpt), batch_size=batch, image_side=args.image_side,
                                 device=args.device, dtype=dtype_choice, cache=cache,
                                 require_token=False)  # a random model: time every answer, [SCORE] or not

        single = evaluator(1, False)
        scorer = single.scorer
        params = sum(p.numel() for p in scorer.parameters())
        device, dtype = str(scorer.device), str(next(scorer.vlm.parameters()).dtype).replace("torch.", "")
        print(f"device {device} ({torch.cuda.get_device_name() if device.startswith('cuda') else 'cpu'}), "
              f"dtype {dtype}, {params / 1e6:.0f}M parameters", file=sys.stderr, flush=True)
        single.score_many(items[:1])  # warm-up

        def timed(fn):  # type: ignore[no-untyped-def]
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            out = fn()
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            return out, time.perf_counter() - t0

        batched = evaluator(args.requests, False)
        batched._scorer, batched._hidden = scorer, single._hidden  # same weights: no second load
        batched.score_many(items)  # warm-up of the batched shapes too (kernels, allocator)
        # medians of 3, alternating, so drift on a shared machine hits both alike
        ones, manys = [], []
        for _ in range(3):
            one, s1 = timed(lambda: [single.score_many([it])[0] for it in items])
            many, s2 = timed(lambda: batched.score_many(items))
            ones.append(s1)
            manys.append(s2)
        one_s, many_s = sorted(ones)[1], sorted(manys)[1]
        cached = evaluator(args.requests, str(Path(tmp) / "scores.sqlite"))
        cached._scorer, cached._hidden = scorer, single._hidden
        first, first_s = timed(lambda: cached.score_many(items, hashes))
        calls = cached.calls
        again, rerun_s = timed(lambda: cached.score_many(items, hashes))
        _, rerun_hashing_s = timed(lambda: cached.score_many(items))  # hashing the pixels again as well
        diff = max(abs(a.value - b.value) for a, b in zip(one, many))
        result = {
            "size": args.size, "params_millions": round(params / 1e6, 1), "device": device, "dtype": dtype,
            "requests": args.requests, "image_side": args.image_side, "max_new_tokens": 8,
            "model_build_s": round(build_s, 1), "one_at_a_time_s": one_s, "batched_s": many_s,
            "batching_speedup": one_s / many_s, "first_run_s": first_s, "cached_rerun_s": rerun_s,
            "cache_speedup": first_s / rerun_s,
            "cached_rerun_with_hashing_s": rerun_hashing_s, "cache_speedup_with_hashing": first_s / rerun_hashing_s, "model_calls_in_rerun": cached.calls - calls,
            "max_abs_score_diff_batched_vs_single": diff,
            "same_scores_on_rerun": [s.value for s in again] == [s.value for s in first],
        }
        return result


if __name__ == "__main__":
    main()

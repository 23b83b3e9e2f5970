"""Judge throughput on a ~256M-parameter random model of SmolVLM-256M's
architecture (Idefics3: 93M SigLIP-like vision tower at 512 px, 576-wide
30-layer text model), in one run:

1. batched generation (one generate() per batch) vs one request at a time;
2. the same batch with the vision tower encoding every image row (the
   tower wrapper of editlens.backends.vision_batching removed), to show
   what encoding each distinct image once is worth;
3. a cached rerun (SQLite response cache) vs the first run.

The requests are what a model comparison sends: ``--sources`` source photos,
each edited by ``--models`` editors, one (source, edited) request per edit
(defaults: 4 x 2 = 8 requests, 16 image rows, 12 distinct images).

    python -m benchmarks.judge_throughput [--sources 4] [--models 2] [--new-tokens 128] [--dtype auto|float32|bfloat16|both]

128 new tokens is the length of a typical judge answer (a VIEScore JSON with
its reasoning, a DICE difference list). On a CPU the prefill of two 512-px
images is compute-bound and gains nothing from batching, so short answers
(e.g. --new-tokens 24) show a much smaller batching gain; on this 2-core
machine 1.1x at 24 tokens against 2.3x at 128.
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
    ap.add_argument("--sources", type=int, default=4, help="source photos")
    ap.add_argument("--models", type=int, default=2, help="edited images per source (one per editor compared)")
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--dtype", default="auto", help=DTYPE_HELP)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--size", default="smolvlm-256m", choices=["tiny", "smolvlm-256m"],
                    help="tiny: a smoke test of the script, no meaningful timing")
    args = ap.parse_args()
    sys.exit(run_per_dtype(args.dtype, args.device, lambda dt: measure(args, dt), check))


def check(result: dict) -> tuple[bool, str]:
    ok = (result["batching_speedup"] >= 2 and result["cache_speedup"] >= 50 and result["model_calls_in_rerun"] == 0
          and result["same_answers_with_every_row_encoded"] is not False)
    return ok, (f"batching {result['batching_speedup']:.2f}x (target >= 2x), cache {result['cache_speedup']:.0f}x "
                f"(target >= 50x), same answers with every row encoded: {result['same_answers_with_every_row_encoded']}")


def measure(args: argparse.Namespace, dtype: str) -> dict:
    from editlens.backends.cache import CachedBackend, ResponseCache
    from editlens.backends.local import TransformersBackend
    from editlens.backends.types import ChatRequest, GenerationSettings, Message
    from editlens.models.random_init import build_idefics3
    from editlens.models.registry import family_for

    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        build_idefics3(Path(tmp) / "model", size=args.size)
        build_s = time.perf_counter() - t
        n_req = args.sources * args.models
        backend = TransformersBackend(str(Path(tmp) / "model"), device=args.device, dtype=dtype, batch_size=n_req)
        params = sum(p.numel() for p in backend.model.parameters())
        imgs = source_images(args.sources * (1 + args.models), size=512 if args.size != "tiny" else 64)
        settings = GenerationSettings(max_new_tokens=args.new_tokens)
        reqs = [ChatRequest([Message("user", [imgs[s], imgs[args.sources + s * args.models + m],
                                              f"Edit instruction {s}: was it carried out by editor {m}?"])],
                            settings, ("YES", "NO")) for s in range(args.sources) for m in range(args.models)]
        backend.generate(reqs[:1])  # warm-up
        t = time.perf_counter()
        single_out = [backend.generate([r])[0] for r in reqs]
        single = time.perf_counter() - t
        t = time.perf_counter()
        batched_out = backend.generate(reqs)
        batched = time.perf_counter() - t
        stats = backend.tower_stats
        rows, encoded = stats.history[-1] if stats and stats.history else (None, None)
        plain_batched, same = None, None
        if stats is not None:  # the same batch with every image row encoded (the wrapper removed)
            tower = backend.model
            for part in family_for(backend.model_type).vision_tower.split("."):
                tower = getattr(tower, part)
            wrapped = tower.forward
            del tower.forward
            t = time.perf_counter()
            plain_out = backend.generate(reqs)
            plain_batched = time.perf_counter() - t
            tower.forward = wrapped
            same = all(a.text == b.text for a, b in zip(batched_out, plain_out))

        cached = CachedBackend(backend, ResponseCache(Path(tmp) / "cache.sqlite"))
        t = time.perf_counter()
        cached.generate(reqs)
        first = time.perf_counter() - t
        calls = backend.calls
        t = time.perf_counter()
        cached.generate(reqs)
        rerun = time.perf_counter() - t
        return {
            "params_millions": round(params / 1e6, 1), "dtype": str(backend.dtype).replace("torch.", ""),
            "precision": backend.precision.to_dict(), "requests": n_req, "sources": args.sources,
            "editors": args.models, "images_per_request": 2, "image_px": 512, "new_tokens": args.new_tokens,
            "model_build_s": round(build_s, 1),
            "one_at_a_time_s": single, "batched_s": batched, "batching_speedup": single / batched,
            "same_answers_batched_vs_one_at_a_time": sum(a.text == b.text for a, b in zip(single_out, batched_out)),
            "batch_image_rows": rows, "batch_rows_encoded": encoded,
            "batched_every_row_encoded_s": plain_batched,
            "batching_speedup_every_row_encoded": single / plain_batched if plain_batched else None,
            "same_answers_with_every_row_encoded": same,
            "first_run_s": first, "cached_rerun_s": rerun, "cache_speedup": first / rerun,
            "model_calls_in_rerun": backend.calls - calls,
        }


if __name__ == "__main__":
    main()

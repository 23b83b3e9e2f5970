"""Two-frame scoring throughput: unique-image caching vs encoding every frame.

Dataset shaped like a multi-method editing benchmark: each of ``--sources``
source images has ``--edits-per-source`` edits (default 8), each with its own
instruction. Three rates are measured in the same run on a random model of
ViT-B/16 size (no weights can be downloaded here; speed does not depend on
the values):

* ``raw``: the image tower's forward rate on already-normalised batches
  (images/s): the ceiling.
* ``editlens``: :class:`TwoFrameScorer` scoring every edit (crop, normalise,
  image tower on each *unique* image once, text tower, pooling), reported as
  edits/s and as unique images/s; the target is >= 80 % of ``raw``.
* ``naive``: the same scores with both frames of every pair encoded (no cache).

The scores of ``editlens`` and ``naive`` must agree (checked).

    python -m benchmarks.twoframe_throughput --size vit-b-16 --sources 32     # the real figure (GPU)
    python -m benchmarks.twoframe_throughput --size tiny --sources 4           # smoke run
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import torch

from benchmarks._common import DTYPE_HELP, median, run_per_dtype, source_images
from editlens.models import emulated_bf16


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def make_edits(n_sources: int, per_source: int, size: int) -> tuple[list[np.ndarray], list[np.ndarray], list[int], list[str]]:
    sources = source_images(n_sources, size)
    rng = np.random.default_rng(0)
    edited, owner, texts = [], [], []
    colours = ["red", "green", "blue", "yellow", "white", "black", "purple", "orange"]
    for s, src in enumerate(sources):
        for j in range(per_source):
            e = src.copy()
            y, x = rng.integers(0, size // 2, 2)
            e[y : y + size // 3, x : x + size // 3] = rng.integers(0, 256, 3)
            edited.append(e)
            owner.append(s)
            texts.append(f"add a {colours[j % len(colours)]} box number {s * per_source + j}")
    return sources, edited, owner, texts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="vit-b-16", choices=["tiny", "vit-b-16"])
    ap.add_argument("--sources", type=int, default=32)
    ap.add_argument("--edits-per-source", type=int, default=8)
    ap.add_argument("--image-size", type=int, default=256, help="side of the input photos before preprocessing")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--dtype", default="auto", help=DTYPE_HELP)
    args = ap.parse_args()
    sys.exit(run_per_dtype(args.dtype, args.device, lambda dt: measure(args, dt), check))


def check(report: dict) -> tuple[bool, str]:
    ok = report["scores_agree"] and report["unique_rate_vs_raw"] >= report["target_unique_rate_vs_raw"]
    return ok, (f"{report['unique_rate_vs_raw']:.0%} of the raw tower rate (target 80%), "
                f"{report['speedup_vs_naive']:.2f}x encoding every frame, max score difference "
                f"{report['max_score_difference']:.2g}")


def measure(args: argparse.Namespace, dtype_name: str) -> dict:
    from editlens.models.precision import decide
    from editlens.testing.twoframe_models import random_twoframe
    from editlens.twoframe.scorer import TwoFrameScorer

    prec = decide(dtype_name, args.device)
    device, dtype = prec.device, prec.torch_dtype
    model = random_twoframe(args.size).to(device, dtype).eval()
    emulated_bf16.install(model)  # as editlens' loader does (bf16 on a CPU without it)
    print(f"device={device} ({torch.cuda.get_device_name() if device.startswith('cuda') else 'cpu'}) "
          f"dtype={str(dtype).replace('torch.', '')} size={args.size}", file=sys.stderr)
    sources, edited, owner, texts = make_edits(args.sources, args.edits_per_source, args.image_size)
    n_edits, n_unique = len(edited), len(sources) + len(edited)
    bs = args.batch_size

    # raw tower rate over the unique images, inputs already normalised and on the device
    crops = torch.from_numpy(np.stack([model.preprocess.crop(a) for a in sources + edited]))
    pixels = model.preprocess.normalise(crops.to(device)).to(dtype)
    with torch.inference_mode():
        model.clip.get_image_features(pixel_values=pixels[:bs])  # warm-up
    raw_t = []
    for _ in range(args.repeats):
        _sync(device)
        t = time.perf_counter()
        with torch.inference_mode():
            for s in range(0, n_unique, bs):
                model.clip.get_image_features(pixel_values=pixels[s : s + bs])
        _sync(device)
        raw_t.append(time.perf_counter() - t)

    ours_t, ours_scores = [], None
    src_keys = [f"s{o}" for o in owner]
    for _ in range(args.repeats):
        scorer = TwoFrameScorer(model, batch_size=bs)  # fresh caches: nothing reused between repeats
        _sync(device)
        t = time.perf_counter()
        out = scorer.score(src_keys, [sources[o] for o in owner], [f"e{i}" for i in range(n_edits)], edited, texts)
        _sync(device)
        ours_t.append(time.perf_counter() - t)
        assert scorer.frames_encoded == n_unique
        ours_scores = out["cosine"]

    naive_t, naive_scores = [], None
    for _ in range(args.repeats):
        _sync(device)
        t = time.perf_counter()
        feats = []
        with torch.inference_mode():
            for s in range(0, n_edits, bs // 2 or 1):
                frames = [sources[o] for o in owner[s : s + bs // 2]] + edited[s : s + bs // 2]
                f = model.frame_features(torch.from_numpy(np.stack([model.preprocess.crop(a) for a in frames])))
                half = len(frames) // 2
                feats.append((f[:half], f[half:]))
            fs = torch.cat([a for a, _ in feats])
            fe = torch.cat([b for _, b in feats])
            video = model.video_features(fs, fe)
            text = torch.cat([model.text_features(texts[s : s + bs]) for s in range(0, n_edits, bs)])
            naive_scores = (video * text).sum(-1).float().cpu().numpy()
        _sync(device)
        naive_t.append(time.perf_counter() - t)

    tol = 1e-4 if dtype == torch.float32 else 5e-2
    max_diff = float(np.abs(ours_scores - naive_scores).max())
    raw_rate = n_unique / median(raw_t)
    ours_unique_rate = n_unique / median(ours_t)
    report = {
        "device": device, "dtype": str(dtype).replace("torch.", ""), "size": args.size,
        "sources": args.sources, "edits_per_source": args.edits_per_source, "edits": n_edits,
        "unique_images": n_unique, "frames_if_uncached": 2 * n_edits, "batch_size": bs, "repeats": args.repeats,
        "raw_tower_images_per_s": raw_rate,
        "editlens_edits_per_s": n_edits / median(ours_t),
        "editlens_unique_images_per_s": ours_unique_rate,
        "naive_edits_per_s": n_edits / median(naive_t),
        "speedup_vs_naive": median(naive_t) / median(ours_t),
        "unique_rate_vs_raw": ours_unique_rate / raw_rate,
        "target_unique_rate_vs_raw": 0.8,
        "max_score_difference": max_diff,
        "scores_agree": max_diff <= tol,
    }
    return report


if __name__ == "__main__":
    main()

"""Editor throughput: batched vs one-at-a-time generation with ``editlens edit``
on a random InstructPix2Pix pipeline of realistic size (``--size realistic``:
SD 1.5's UNet layout at 128-256-512-512 channels, about 140M UNet parameters;
a 2-layer 768-wide text encoder; 4-level VAE), in one run per dtype.

Both passes go through :func:`editlens.runner.edit.generate_edits` (the
``editlens edit`` code path: derived seeds, atomic writes, the manifest) on
the same edits into fresh folders; the images of the two passes are compared
(the same seeds: equal up to the rounding of batched products).

    python -m benchmarks.edit_throughput [--size realistic|tiny] [--edits 8] [--batch 8] [--steps 10]
        [--image-side 256] [--dtype auto|float32|bfloat16|both] [--device cpu|cuda]

Target: batched >= 1.5x one at a time. Peak memory is reported (CUDA: the
allocator's peak; CPU: the process's peak resident set). ``--size tiny`` is
a smoke test of the script (timings meaningless).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

from benchmarks._common import DTYPE_HELP, run_per_dtype, source_images


def _peak_memory(device: str) -> dict:
    import resource

    import torch

    out = {"cpu_peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}
    if device.startswith("cuda"):
        out["cuda_peak_mib"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="realistic", choices=["tiny", "realistic"],
                    help="tiny: a smoke test, no meaningful timing")
    ap.add_argument("--edits", type=int, default=8, help="edits generated per pass")
    ap.add_argument("--batch", type=int, default=8, help="images per pipeline call of the batched pass")
    ap.add_argument("--steps", type=int, default=10, help="denoising steps")
    ap.add_argument("--image-side", type=int, default=None, help="generated side in pixels (default 256; tiny 32)")
    ap.add_argument("--dtype", default="auto", help=DTYPE_HELP)
    ap.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or auto")
    args = ap.parse_args()
    side = args.image_side or (32 if args.size == "tiny" else 256)
    steps = 2 if args.size == "tiny" else args.steps
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        from editlens.testing.tiny_editors import build_instruct_pix2pix

        editor_dir = build_instruct_pix2pix(root / "editor", image_size=side, size=args.size)
        from diffusers import UNet2DConditionModel

        unet_params = sum(p.numel() for p in UNet2DConditionModel.from_pretrained(editor_dir / "unet").parameters())
        rows = []
        for i, arr in enumerate(source_images(args.edits, side)):
            Image.fromarray(arr).save(root / f"src{i}.png")
            rows.append({"id": f"e{i}", "source": f"src{i}.png", "instruction": "make the sky a sunset"})
        (root / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

        def measure(dtype: str) -> dict:
            import torch

            from editlens.editors import create_editor
            from editlens.runner.edit import generate_edits

            editor = create_editor(str(editor_dir), steps=steps, resolution=side, dtype=dtype, device=args.device)
            editor.load()
            device = editor.runtime()["precision"]["device"]
            # warm-up: first-call costs (allocator, kernels) belong to neither pass
            generate_edits(root / "in.jsonl", editor, root / f"warm-{dtype}", batch_size=1, progress=False)
            times = {}
            for name, bs in (("one_at_a_time", 1), ("batched", args.batch)):
                if device.startswith("cuda"):
                    torch.cuda.synchronize()
                    torch.cuda.reset_peak_memory_stats()
                t0 = time.perf_counter()
                res = generate_edits(root / "in.jsonl", editor, root / f"{name}-{dtype}", batch_size=bs,
                                     progress=False)
                if device.startswith("cuda"):
                    torch.cuda.synchronize()
                times[name] = {"seconds": round(time.perf_counter() - t0, 3), "generated": res.generated,
                               "images_per_s": round(res.generated / (time.perf_counter() - t0), 3),
                               **_peak_memory(device)}
            diffs = []
            for r in rows:
                imgs = [np.asarray(Image.open(next((root / f"{n}-{dtype}" / "images").glob(f"{r['id']}-*"))), np.int16)
                        for n in ("one_at_a_time", "batched")]
                diffs.append(int(np.abs(imgs[0] - imgs[1]).max()))
            return {"unet_parameters": unet_params, "edits": args.edits, "batch": args.batch, "steps": steps,
                    "side": side, "size": args.size, **times,
                    "speedup": round(times["one_at_a_time"]["seconds"] / times["batched"]["seconds"], 3),
                    "max_pixel_difference_batched_vs_single": max(diffs),
                    "precision": editor.runtime()["precision"]}

        def check(res: dict) -> tuple[bool, str]:
            msg = (f"batched {res['speedup']:.2f}x one-at-a-time ({res['unet_parameters'] / 1e6:.0f}M UNet "
                   f"parameters, {res['edits']} edits, {res['steps']} steps, {res['side']} px)")
            if res["size"] == "tiny":
                return True, msg + " [tiny: smoke test, not gated]"
            return res["speedup"] >= 1.5 and res["unet_parameters"] >= 100e6, msg + " (target >= 1.5x)"

        sys.exit(run_per_dtype(args.dtype, args.device, measure, check))


if __name__ == "__main__":
    main()

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
        [--channels-last] [--tf32] [--vae-slicing/--no-vae-slicing] [--breakdown/--no-breakdown] [--profile]

``--compare raw``: ``editlens edit`` (``generate_edits``: seeds, PNG writes, the fsynced log,
the manifest) against the raw diffusers pipeline call on the same loaded pipeline, the same
inputs and batches (target: editlens >= 0.95 of the raw rate, in each precision).
``--compare ray``: the same edits on ``--workers`` Ray CPU workers (one pipeline each, one
thread each) against one process (all threads); target >= 1.6x on 2 workers when the machine
has the cores (``os.cpu_count()`` is reported). Run either with nothing else on the machine.

Target: batched >= 1.5x one at a time. Peak memory is reported (CUDA: the
allocator's peak; CPU: the process's peak resident set). ``--size tiny`` is
a smoke test of the script (timings meaningless).

The editor options (``--channels-last``, ``--tf32``, ``--vae-slicing``) go to both passes: the
ratio is one of batching, not of options. ``breakdown`` (default on a CPU,
where it costs nothing; on CUDA it synchronises around each component)
gives each pass's seconds per image in the text encoder, the UNet, the VAE's
encoder and decoder and the rest (pipeline, PNG writes): where batching can
save and where it cannot. ``--profile`` adds torch.profiler's top operators
(share of self time) of one pipeline call at 1 and at ``--batch`` images.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

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


COMPONENTS = (("text_encoder", "forward"), ("unet", "forward"), ("vae", "encode"), ("vae", "decode"))


class ComponentClock:
    """Seconds spent in each pipeline component (wrapped in place; CUDA synchronised around each call)."""

    def __init__(self, pipe: Any, cuda: bool) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.cuda = cuda
        for comp, method in COMPONENTS:
            module = getattr(pipe, comp, None)
            if module is not None:
                self._wrap(module, method, comp if method == "forward" else f"{comp}_{method}")

    def _wrap(self, obj: Any, method: str, key: str) -> None:
        import torch

        inner = getattr(obj, method)

        def timed(*args: Any, **kwargs: Any) -> Any:
            if self.cuda:
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                if self.cuda:
                    torch.cuda.synchronize()
                self.seconds[key] += time.perf_counter() - t0

        setattr(obj, method, timed)

    def take(self, total: float, images: int) -> dict[str, float]:
        """Seconds per image by component since the last call (``rest``: what is outside them)."""
        out = {k: round(v / images, 4) for k, v in self.seconds.items()}
        out["rest"] = round((total - sum(self.seconds.values())) / images, 4)
        self.seconds.clear()
        return out


def _op_shares(editor: Any, requests: list, cuda: bool, top: int = 8) -> dict[str, Any]:
    """torch.profiler's top operators of one ``edit_batch`` call: share of the self time (CUDA: device time)."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=acts) as prof:
        editor.edit_batch(requests)
    events = prof.key_averages()

    def own(e: Any) -> float:
        return float(getattr(e, "self_device_time_total", 0) if cuda else e.self_cpu_time_total)

    total = sum(own(e) for e in events) or 1.0
    ranked = sorted(events, key=own, reverse=True)[:top]
    return {"images": len(requests), "self_seconds_per_image": round(total / 1e6 / len(requests), 4),
            "top_ops_percent": {e.key: round(100 * own(e) / total, 1) for e in ranked}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="realistic", choices=["tiny", "realistic", "full"],
                    help="tiny: a smoke test, no meaningful timing; full: SD 1.5's 860M UNet (for a GPU)")
    ap.add_argument("--edits", type=int, default=8, help="edits generated per pass")
    ap.add_argument("--batch", type=int, default=8, help="images per pipeline call of the batched pass")
    ap.add_argument("--steps", type=int, default=10, help="denoising steps")
    ap.add_argument("--image-side", type=int, default=None, help="generated side in pixels (default 256; tiny 32)")
    ap.add_argument("--dtype", default="auto", help=DTYPE_HELP)
    ap.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or auto")
    ap.add_argument("--channels-last", action="store_true", help="editor option channels_last (both passes)")
    ap.add_argument("--tf32", action="store_true", help="editor option tf32: CUDA float32 matmuls (both passes)")
    ap.add_argument("--vae-slicing", action=argparse.BooleanOptionalAction, default=None,
                    help="editor option vae_slicing (both passes; default: the editor's, on a CPU only)")
    ap.add_argument("--breakdown", action=argparse.BooleanOptionalAction, default=None,
                    help="seconds per image by pipeline component (default: on a CPU only)")
    ap.add_argument("--profile", action="store_true", help="torch.profiler's top operators at 1 and --batch images")
    ap.add_argument("--compare", default="batching", choices=["batching", "raw", "ray"],
                    help="batching (batched vs one at a time), raw (editlens edit vs the raw pipeline call) or "
                         "ray (Ray CPU workers vs one process)")
    ap.add_argument("--workers", type=int, default=2, help="--compare ray: Ray workers")
    args = ap.parse_args()
    side = args.image_side or {"tiny": 32, "realistic": 256, "full": 512}[args.size]
    steps = 2 if args.size == "tiny" else args.steps
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        from editlens.editors.random_init import build_instruct_pix2pix

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

            editor = create_editor(str(editor_dir), steps=steps, resolution=side, dtype=dtype, device=args.device,
                                   channels_last=args.channels_last, tf32=args.tf32, vae_slicing=args.vae_slicing)
            pipe = editor.load()
            device = editor.runtime()["precision"]["device"]
            cuda = device.startswith("cuda")
            breakdown = (not cuda) if args.breakdown is None else args.breakdown
            # warm-up: first-call costs (allocator, kernels) belong to neither pass
            generate_edits(root / "in.jsonl", editor, root / f"warm-{dtype}", batch_size=1, progress=False)
            clock = ComponentClock(pipe, cuda) if breakdown else None
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
                took = time.perf_counter() - t0
                times[name] = {"seconds": round(took, 3), "generated": res.generated,
                               "images_per_s": round(res.generated / took, 3),
                               "seconds_per_image": round(took / max(1, res.generated), 4), **_peak_memory(device)}
                if clock is not None:
                    times[name]["seconds_per_image_by_component"] = clock.take(took, max(1, res.generated))
            diffs = []
            for r in rows:
                imgs = [np.asarray(Image.open(next((root / f"{n}-{dtype}" / "images").glob(f"{r['id']}-*"))), np.int16)
                        for n in ("one_at_a_time", "batched")]
                diffs.append(int(np.abs(imgs[0] - imgs[1]).max()))
            profiled = {}
            if args.profile:
                from editlens.editors.base import EditRequest

                requests = [EditRequest(id=r["id"], sample=0, source=Image.open(root / r["source"]).convert("RGB"),
                                        instruction=r["instruction"], seed=k) for k, r in enumerate(rows[:args.batch])]
                profiled = {"profile": {"one_at_a_time": _op_shares(editor, requests[:1], cuda),
                                        "batched": _op_shares(editor, requests, cuda)}}
            why = {}
            if breakdown:  # what batching can save at most: the UNet's own gain, and the share outside it
                single, batched = (times[n]["seconds_per_image_by_component"] for n in ("one_at_a_time", "batched"))
                share = single["unet"] / max(1e-9, times["one_at_a_time"]["seconds_per_image"])
                unet_gain = single["unet"] / max(1e-9, batched["unet"])
                why = {"unet_share_one_at_a_time": round(share, 3), "unet_speedup": round(unet_gain, 3),
                       # the ratio if everything outside the UNet cost nothing when batched
                       "ceiling_at_this_unet_speedup": round(1 / (share / unet_gain), 3)}
            return {"unet_parameters": unet_params, "edits": args.edits, "batch": args.batch, "steps": steps,
                    "side": side, "size": args.size, **times, **why,
                    "speedup": round(times["one_at_a_time"]["seconds"] / times["batched"]["seconds"], 3),
                    "max_pixel_difference_batched_vs_single": max(diffs),
                    "precision": editor.runtime()["precision"],
                    "options": {k: editor.runtime()[k] for k in ("channels_last", "tf32", "vae_slicing")}, **profiled}

        def check(res: dict) -> tuple[bool, str]:
            msg = (f"batched {res['speedup']:.2f}x one-at-a-time ({res['unet_parameters'] / 1e6:.0f}M UNet "
                   f"parameters, {res['edits']} edits, {res['steps']} steps, {res['side']} px)")
            if "unet_speedup" in res:
                msg += (f"; the UNet is {100 * res['unet_share_one_at_a_time']:.0f}% of an image's time and batched "
                        f"{res['unet_speedup']:.2f}x: at most {res['ceiling_at_this_unet_speedup']:.2f}x overall")
            if res["size"] == "tiny":
                return True, msg + " [tiny: smoke test, not gated]"
            return res["speedup"] >= 1.5 and res["unet_parameters"] >= 100e6, msg + " (target >= 1.5x)"

        if args.compare == "raw":
            sys.exit(run_per_dtype(args.dtype, args.device,
                                   lambda dtype: _raw(args, root, editor_dir, rows, steps, side, dtype), _check_raw))
        if args.compare == "ray":
            sys.exit(run_per_dtype(args.dtype, args.device,
                                   lambda dtype: _ray(args, root, editor_dir, steps, side, dtype), _check_ray))
        sys.exit(run_per_dtype(args.dtype, args.device, measure, check))


def _raw(args: Any, root: Path, editor_dir: Path, rows: list, steps: int, side: int, dtype: str) -> dict:
    """editlens edit vs the pipeline called directly, on one loaded pipeline, the same inputs and batches."""
    import torch

    from editlens.editors import create_editor
    from editlens.editors.diffusers_editor import fit_size
    from editlens.runner.edit import derive_seed, generate_edits

    editor = create_editor(str(editor_dir), steps=steps, resolution=side, dtype=dtype, device=args.device)
    pipe = editor.load()
    device = editor.runtime()["precision"]["device"]
    sources = [Image.open(root / r["source"]).convert("RGB") for r in rows]
    w, h = fit_size(*sources[0].size, side, 8)
    values = editor.settings()

    def raw() -> int:
        made = 0
        for start in range(0, len(rows), args.batch):
            idx = range(start, min(len(rows), start + args.batch))
            out = pipe(prompt=[rows[i]["instruction"] for i in idx],
                       image=[sources[i].resize((w, h), Image.Resampling.BICUBIC) for i in idx],
                       num_inference_steps=steps, guidance_scale=values["guidance"],
                       image_guidance_scale=values["image_guidance"],
                       generator=[torch.Generator("cpu").manual_seed(derive_seed(0, rows[i]["id"], 0)) for i in idx])
            made += len(out.images)
        return made

    def sync() -> None:
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    generate_edits(root / "in.jsonl", editor, root / f"rawwarm-{dtype}", batch_size=args.batch, progress=False)
    times: dict[str, float] = {}
    for rep in range(2):  # alternate, so a drift of the machine's speed hits both
        for name in ("raw_pipeline", "editlens_edit"):
            sync()
            t0 = time.perf_counter()
            if name == "raw_pipeline":
                n = raw()
            else:
                n = generate_edits(root / "in.jsonl", editor, root / f"edit-{dtype}-{rep}", batch_size=args.batch,
                                   progress=False).generated
            sync()
            times[name] = times.get(name, 0.0) + (time.perf_counter() - t0) / max(1, n)
    ratio = times["raw_pipeline"] / times["editlens_edit"]
    return {"edits": len(rows), "batch": args.batch, "steps": steps, "side": side, "size": args.size,
            "seconds_per_image": {k: round(v / 2, 4) for k, v in times.items()},
            "editlens_rate_vs_raw": round(ratio, 3), "precision": editor.runtime()["precision"]}


def _check_raw(res: dict) -> tuple[bool, str]:
    msg = (f"editlens edit runs at {res['editlens_rate_vs_raw']:.3f} of the raw pipeline call's rate "
           f"({res['edits']} edits, batch {res['batch']}, {res['steps']} steps, {res['side']} px)")
    if res["size"] == "tiny":
        return True, msg + " [tiny: smoke test, not gated]"
    return res["editlens_rate_vs_raw"] >= 0.95, msg + " (target >= 0.95)"


def _ray(args: Any, root: Path, editor_dir: Path, steps: int, side: int, dtype: str) -> dict:
    """The same edits on Ray CPU workers (one pipeline, one thread each) vs one process (all threads)."""
    import os

    import ray

    from editlens.editors import create_editor
    from editlens.runner.edit import generate_edits
    from editlens.runner.executors import RayEditors

    options = {"steps": steps, "resolution": side, "dtype": dtype, "device": "cpu"}
    editor = create_editor(str(editor_dir), **options)
    generate_edits(root / "in.jsonl", editor, root / f"raywarm-{dtype}", batch_size=args.batch, progress=False)
    t0 = time.perf_counter()
    one = generate_edits(root / "in.jsonl", editor, root / f"one-{dtype}", batch_size=args.batch, progress=False)
    t_one = time.perf_counter() - t0
    editor.close()
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    try:
        spread = RayEditors(str(editor_dir), options, num_workers=args.workers)
        try:  # warm-up on every worker (loading and first calls belong to neither pass)
            generate_edits(root / "in.jsonl", spread, root / f"raywarm2-{dtype}", batch_size=args.batch, progress=False)
            t0 = time.perf_counter()
            res = generate_edits(root / "in.jsonl", spread, root / f"ray-{dtype}", batch_size=args.batch,
                                 progress=False)
            t_ray = time.perf_counter() - t0
        finally:
            spread.close()
    finally:
        ray.shutdown()
    diff = 0  # one process sums over all its threads, a worker over its one: the last bits may round apart
    for p in (root / f"ray-{dtype}" / "images").iterdir():
        a = np.asarray(Image.open(p), np.int16)
        b = np.asarray(Image.open(root / f"one-{dtype}" / "images" / p.name), np.int16)
        diff = max(diff, int(np.abs(a - b).max()))
    return {"cpu_count": os.cpu_count(), "workers": args.workers, "edits": args.edits, "batch": args.batch,
            "steps": steps, "side": side, "size": args.size, "one_process_s": round(t_one, 3),
            "ray_s": round(t_ray, 3), "speedup": round(t_one / t_ray, 3), "max_pixel_difference_vs_one_process": diff,
            "generated": (one.generated, res.generated)}


def _check_ray(res: dict) -> tuple[bool, str]:
    msg = (f"{res['workers']} Ray workers {res['speedup']:.2f}x one process on {res['cpu_count']} cores "
           f"({res['edits']} edits, batch {res['batch']}; images differ by at most "
           f"{res['max_pixel_difference_vs_one_process']} levels: 1 vs all threads per process)")
    if res["size"] == "tiny" or (res["cpu_count"] or 1) < res["workers"]:
        return True, msg + " [not gated: tiny, or fewer cores than workers]"
    return res["speedup"] >= 1.6, msg + " (target >= 1.6x)"


if __name__ == "__main__":
    main()

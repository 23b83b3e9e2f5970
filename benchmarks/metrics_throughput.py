"""CLIP-I + CLIP-T throughput: editlens vs torchmetrics' CLIPScore, same run.

editlens scores through the runner's executor (loader threads decode and
preprocess ahead of the model), as ``editlens run`` does. Dataset shaped
like ImagenHub: each source image is shared by 8 edits (8 editing
methods), and the 8 edits of a source share its target caption.
Model: CLIP of ViT-B/32 size, randomly initialised (no weights can be
downloaded here), saved and loaded through editlens' real loading code;
torchmetrics gets the very same model and preprocessing. Both compute
per-sample CLIP-I (source vs edited) and CLIP-T (edited vs caption) in
batches of 16 under inference mode; the values must agree within 1e-5
(2e-2 when ``--dtype`` picks bf16: torchmetrics runs in float32).

The same run also times the raw forward passes of the same model over the
unique images and texts (already preprocessed, batches of 16): editlens'
rate over those unique inputs as a fraction of that raw rate says how much
its preprocessing, hashing and caching cost (target >= 80%).

    python -m benchmarks.metrics_throughput [--sources 12] [--repeats 2] [--dtype float32|auto|bfloat16]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks._common import DTYPE_HELP, clip_tokenizer, median, run_per_dtype, source_images
from editlens.models import emulated_bf16


def build_model(tmp: Path) -> Path:
    from transformers import CLIPConfig, CLIPImageProcessorPil, CLIPModel

    tok = clip_tokenizer()
    torch.manual_seed(0)
    cfg = CLIPConfig()  # defaults are ViT-B/32: 768-wide 12-layer vision, 512-wide 12-layer text
    cfg.text_config.eos_token_id = tok.eos_token_id
    CLIPModel(cfg).save_pretrained(tmp)
    tok.save_pretrained(tmp)
    CLIPImageProcessorPil(size={"shortest_edge": 224}, crop_size={"height": 224, "width": 224},
                          image_mean=[0.48145466, 0.4578275, 0.40821073],
                          image_std=[0.26862954, 0.26130258, 0.27577711]).save_pretrained(tmp)
    return tmp


def make_dataset(n_sources: int, per_source: int = 8):
    from editlens import EditSample

    rng = np.random.default_rng(0)
    samples = []
    for si, src in enumerate(source_images(n_sources)):
        caption = f"a photo after edit number {si}"
        for k in range(per_source):
            edt = src.copy()
            y, x = rng.integers(0, 192, 2)
            edt[y : y + 64, x : x + 64] = rng.integers(0, 256, 3)  # each method paints a different patch
            samples.append(EditSample(f"s{si}-m{k}", src, edt, "edit", source_caption="a photo",
                                      target_caption=caption).load())
    return samples


def run_editlens(samples, model_dir: Path, batch: int, dtype: str):
    from editlens import create_metric
    from editlens.models.pool import clear

    clear("clip")
    models = {"clip": str(model_dir)}
    ci = create_metric("clip_i", models=models, dtype=dtype)
    ct = create_metric("clip_t", models=models, dtype=dtype)
    _ = ci.encoder  # load weights before timing: both sides time scoring only
    from editlens.core.images import ImageLoadOptions
    from editlens.core.types import EditSample
    from editlens.runner.loader import PrefetchExecutor

    # The runner's path: loader threads preprocess the next batches' images
    # while the model encodes the current one.
    raw = [EditSample(s.id, s.source, s.edited, s.instruction, source_caption=s.source_caption,
                      target_caption=s.target_caption) for s in samples]
    ex = PrefetchExecutor([ci, ct], ImageLoadOptions(), workers=2)
    hashes, done = {"clip_i": "-", "clip_t": "-"}, {"clip_i": set(), "clip_t": set()}
    t = time.perf_counter()
    values: dict[tuple[str, str], float] = {}
    for _, rows in ex.map([raw[i : i + batch] for i in range(0, len(raw), batch)], hashes, done):
        values.update({(sid, ev): score.value for sid, ev, _, _, score in rows})
    secs = time.perf_counter() - t
    ex.close()
    vi = np.array([values[(s.id, "clip_i")] for s in samples])
    vt = np.array([values[(s.id, "clip_t")] for s in samples])
    return secs, vi, vt


class _Model(torch.nn.Module):
    """Adapts transformers 5's output objects to torchmetrics' tensor contract."""

    def __init__(self, clip):
        super().__init__()
        self.clip, self.config = clip, clip.config

    def get_image_features(self, pixel_values):
        return self.clip.get_image_features(pixel_values=pixel_values).pooler_output

    def get_text_features(self, input_ids, attention_mask):
        return self.clip.get_text_features(input_ids=input_ids, attention_mask=attention_mask).pooler_output


class _Processor:
    def __init__(self, image_processor, tokenizer):
        self.ip, self.tok = image_processor, tokenizer

    def __call__(self, images=None, text=None, return_tensors="pt", padding=True):
        from PIL import Image

        if images is not None:
            pil = [Image.fromarray(i.permute(1, 2, 0).numpy()) for i in images]
            return self.ip(images=pil, return_tensors=return_tensors)
        return self.tok(text, return_tensors=return_tensors, padding=padding, truncation=True, max_length=77)


def run_raw_forward(samples, model_dir: Path, batch: int, dtype):
    """Forward passes only, over the unique images and texts, on inputs
    preprocessed beforehand: the rate no wrapper can beat."""
    from PIL import Image
    from transformers import AutoTokenizer, CLIPImageProcessorPil, CLIPModel

    from editlens.core.images import image_hash

    model = CLIPModel.from_pretrained(model_dir, dtype=dtype).eval()
    emulated_bf16.install(model)  # the same kernels as editlens' loader gives its model
    proc, tok = CLIPImageProcessorPil.from_pretrained(model_dir), AutoTokenizer.from_pretrained(model_dir)

    images = {image_hash(a): a for s in samples for a in (s.source, s.edited)}
    texts = sorted({s.target_caption for s in samples})
    pixels = proc(images=[Image.fromarray(a) for a in images.values()], return_tensors="pt")["pixel_values"]
    pixels = pixels.to(dtype)
    ids = tok(texts, padding=True, truncation=True, max_length=77, return_tensors="pt")
    t = time.perf_counter()
    with torch.inference_mode():
        for i in range(0, len(pixels), batch):
            model.get_image_features(pixel_values=pixels[i : i + batch])
        for i in range(0, len(texts), batch):
            model.get_text_features(input_ids=ids["input_ids"][i : i + batch],
                                    attention_mask=ids["attention_mask"][i : i + batch])
    return time.perf_counter() - t, len(images), len(texts)


def run_torchmetrics(samples, model_dir: Path, batch: int, dtype=torch.float32):
    from torchmetrics.functional.multimodal.clip_score import _clip_score_update
    from transformers import AutoTokenizer, CLIPImageProcessorPil, CLIPModel

    model = _Model(emulated_bf16.routed(CLIPModel.from_pretrained(model_dir, dtype=dtype).eval()))
    proc = _Processor(CLIPImageProcessorPil.from_pretrained(model_dir), AutoTokenizer.from_pretrained(model_dir))
    chw = lambda a: torch.from_numpy(a).permute(2, 0, 1)  # noqa: E731
    t = time.perf_counter()
    vi, vt = [], []
    with torch.inference_mode():
        for i in range(0, len(samples), batch):
            b = samples[i : i + batch]
            si, _ = _clip_score_update([chw(s.source) for s in b], [chw(s.edited) for s in b], model, proc)
            st, _ = _clip_score_update([chw(s.edited) for s in b], [s.target_caption for s in b], model, proc)
            vi += (si / 100).tolist()
            vt += (st / 100).tolist()
    return time.perf_counter() - t, np.array(vi), np.array(vt)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sources", type=int, default=12)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--dtype", default="float32", help=DTYPE_HELP + "; float32 checks parity with torchmetrics "
                    "to 1e-5, bf16 to 2e-2 (both sides run the model in that dtype)")
    args = ap.parse_args()
    sys.exit(run_per_dtype(args.dtype, "cpu", lambda dt: measure(args, dt), check))


def check(result: dict) -> tuple[bool, str]:
    ok = result["values_agree"] and result["speedup"] >= 1.5 and result["fraction_of_raw_forward"] >= 0.8
    return ok, (f"speedup {result['speedup']:.2f}x (target >= 1.5x), {result['fraction_of_raw_forward']:.0%} of the "
                f"raw forward rate (target >= 80%), max |diff| {result['max_abs_diff']:.2e}")


def measure(args: argparse.Namespace, dtype_name: str) -> dict:
    from editlens.models.precision import decide

    dtype = decide(dtype_name, "cpu").torch_dtype
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_model(Path(tmp))
        samples = make_dataset(args.sources)
        ours, theirs, raw = [], [], []
        for _ in range(args.repeats):  # interleaved, so all see the same machine load
            t_ours, ei, et = run_editlens(samples, model_dir, args.batch, dtype_name)
            t_theirs, ti, tt = run_torchmetrics(samples, model_dir, args.batch, dtype)
            t_raw, n_img, n_txt = run_raw_forward(samples, model_dir, args.batch, dtype)
            ours.append(t_ours)
            theirs.append(t_theirs)
            raw.append(t_raw)
        max_diff = float(max(np.abs(ei - ti).max(), np.abs(et - tt).max()))
        unique = n_img + n_txt
        return {
            "dtype": str(dtype).replace("torch.", ""),
            "edits": len(samples), "sources": args.sources, "edits_per_source": 8,
            "editlens_s": median(ours), "torchmetrics_s": median(theirs),
            "speedup": median(theirs) / median(ours),
            "editlens_edits_per_s": len(samples) / median(ours),
            "unique_images": n_img, "unique_texts": n_txt,
            "raw_forward_s": median(raw), "raw_inputs_per_s": unique / median(raw),
            "editlens_inputs_per_s": unique / median(ours),
            "fraction_of_raw_forward": median(raw) / median(ours),
            "max_abs_diff": max_diff, "tolerance": tol, "values_agree": max_diff <= tol,
        }


if __name__ == "__main__":
    main()

"""CLIP-I + CLIP-T throughput: editlens vs torchmetrics' CLIPScore, same run.

Dataset shaped like ImagenHub: each source image is shared by 8 edits (8
editing methods), and the 8 edits of a source share its target caption.
Model: CLIP of ViT-B/32 size, randomly initialised (no weights can be
downloaded here), saved and loaded through editlens' real loading code;
torchmetrics gets the very same model and preprocessing. Both compute
per-sample CLIP-I (source vs edited) and CLIP-T (edited vs caption) in
batches of 16 under inference mode; the values must agree within 1e-5.

    python benchmarks/metrics_throughput.py [--sources 12] [--repeats 2]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import clip_tokenizer, median, source_images  # noqa: E402


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


def run_editlens(samples, model_dir: Path, batch: int):
    from editlens import create_metric
    from editlens.models.encoders import clear_encoders

    clear_encoders()
    models = {"clip": str(model_dir)}
    ci, ct = create_metric("clip_i", models=models), create_metric("clip_t", models=models)
    ci.encoder  # load weights before timing: both sides time scoring only
    t = time.perf_counter()
    vi, vt = [], []
    for i in range(0, len(samples), batch):
        b = samples[i : i + batch]
        vi += [s.value for s in ci(b)]
        vt += [s.value for s in ct(b)]
    return time.perf_counter() - t, np.array(vi), np.array(vt)


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


def run_torchmetrics(samples, model_dir: Path, batch: int):
    from torchmetrics.functional.multimodal.clip_score import _clip_score_update
    from transformers import AutoTokenizer, CLIPImageProcessorPil, CLIPModel

    model = _Model(CLIPModel.from_pretrained(model_dir).eval())
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
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_model(Path(tmp))
        samples = make_dataset(args.sources)
        ours, theirs = [], []
        for _ in range(args.repeats):  # interleaved, so both see the same machine load
            t_ours, ei, et = run_editlens(samples, model_dir, args.batch)
            t_theirs, ti, tt = run_torchmetrics(samples, model_dir, args.batch)
            ours.append(t_ours)
            theirs.append(t_theirs)
        max_diff = float(max(np.abs(ei - ti).max(), np.abs(et - tt).max()))
        result = {
            "edits": len(samples), "sources": args.sources, "edits_per_source": 8,
            "editlens_s": median(ours), "torchmetrics_s": median(theirs),
            "speedup": median(theirs) / median(ours),
            "editlens_edits_per_s": len(samples) / median(ours),
            "max_abs_diff": max_diff, "values_agree_1e-5": max_diff <= 1e-5,
            "threads": torch.get_num_threads(),
        }
        print(json.dumps(result, indent=2))
        ok = result["values_agree_1e-5"] and result["speedup"] >= 1.5
        print("PASS" if ok else "FAIL", f"speedup {result['speedup']:.2f}x (target >= 1.5x), max |diff| {max_diff:.2e}")
        sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()

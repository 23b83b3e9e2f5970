"""DICE fine-tuning end to end, with size flags: build a stage-2 dataset
(synthetic shapes, or a COCO set you pass), train the detector with LoRA,
then run the adapter through the released-style loader. Prints JSON with
seconds per step, the loss before/after, the evaluation, whether QLoRA
(4-bit base + paged AdamW 8-bit) was used, and what differs from the release.

    python -m benchmarks.dice_finetune --model tiny --steps 30            # CPU smoke run
    python -m benchmarks.dice_finetune --model smolvlm-256m --steps 200   # GPU: QLoRA path when bitsandbytes is there (--quantization nf4 forces it)
    python -m benchmarks.dice_finetune --base /models/Idefics3-8B-Llama3 --longest-edge 1456 --steps 100

``--model`` builds a random model of that architecture (its answers are
noise until trained); ``--base`` uses real weights.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from benchmarks._common import DTYPE_HELP, run_per_dtype


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="tiny", choices=["tiny", "smolvlm-256m"])
    ap.add_argument("--base", default=None, help="A real base VLM directory (overrides --model).")
    ap.add_argument("--annotations", default=None, help="COCO instances JSON (default: synthetic shapes).")
    ap.add_argument("--images", default=None)
    ap.add_argument("--n-images", type=int, default=16)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--lr", type=float, default=1e-2)
    ap.add_argument("--rank", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=1)
    ap.add_argument("--longest-edge", type=int, default=None)
    ap.add_argument("--eval-new-tokens", type=int, default=64)
    ap.add_argument("--out", default=None)
    ap.add_argument("--dtype", default="auto", help="Compute dtype of training (autocast; LoRA weights stay "
                    "float32): " + DTYPE_HELP)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--quantization", default="auto", choices=["auto", "nf4", "none"],
                    help="auto: QLoRA on CUDA with bitsandbytes; nf4: QLoRA anywhere (CPU too); none")
    args = ap.parse_args()

    def check(r: dict) -> tuple[bool, str]:
        ok = r["last_loss"] < r["first_loss"] and not r["inference_failed"]
        return ok, (f"loss {r['first_loss']:.3f} -> {r['last_loss']:.3f}, {r['s_per_step']} s/step; "
                    f"adapter answered through the released-style loader: {not r['inference_failed']}")

    sys.exit(run_per_dtype(args.dtype, args.device, lambda dt: measure(args, dt), check))


def measure(args: argparse.Namespace, dtype: str) -> dict:
    from editlens.core.types import EditSample
    from editlens.dice.data.edits import EditConfig, make_edits
    from editlens.dice.released import build_released
    from editlens.dice.training import TrainConfig, train
    from editlens.testing.tiny_coco import make_coco

    root = Path(args.out or tempfile.mkdtemp(prefix="dice-finetune-")) / dtype
    if args.annotations:
        ann, imgs = Path(args.annotations), Path(args.images)
    else:
        ann, imgs = make_coco(root / "coco", n_images=args.n_images, size=(192, 256))
    t0 = time.perf_counter()
    stats = make_edits(EditConfig(str(ann), str(imgs), str(root / "s2"), max_images=args.n_images), progress=False)
    t_data = time.perf_counter() - t0
    if args.base:
        base = Path(args.base)
    else:
        from editlens.models.random_init import build_idefics3
        from editlens.testing.tiny_dice import build_trainable_idefics3

        base = root / f"base-{args.model}"
        if not (base / "config.json").is_file():
            (build_trainable_idefics3 if args.model == "tiny" else
             lambda p: build_idefics3(p, size="smolvlm-256m"))(base)
    cfg = TrainConfig("detect", str(root / "s2"), str(root / "run"), str(base), eval_data=str(root / "s2" / "train.jsonl"),
                      steps=args.steps, lr=args.lr, rank=args.rank, batch_size=args.batch_size,
                      save_every=max(1, args.steps // 2), eval_max_new_tokens=args.eval_new_tokens, max_eval=4,
                      longest_edge=args.longest_edge, quantization=args.quantization, dtype=dtype,
                      device=args.device)
    t0 = time.perf_counter()
    res = train(cfg, progress=True, log=lambda m: print(m, flush=True))
    t_train = time.perf_counter() - t0
    first = json.loads((root / "s2" / "train.jsonl").read_text().splitlines()[0])
    dice = build_released(str(res.preset), quantization="none" if args.quantization == "none" else
                          ("nf4" if args.quantization == "nf4" else "auto"), dtype=dtype, device=args.device)
    sample = EditSample("x", str(root / "s2" / first["source"]), str(root / "s2" / first["edited"]), "edit").load()
    t0 = time.perf_counter()
    (out,) = dice.run([sample])
    t_infer = time.perf_counter() - t0
    log = [json.loads(x) for x in open(root / "run" / "log.jsonl")]
    return {
        "dataset": {k: stats[k] for k in ("records", "differences", "by_command")}, "dataset_s": round(t_data, 2),
        "steps": res.steps_done, "s_per_step": round(t_train / max(1, res.steps_done - res.resumed_from), 3),
        "first_loss": res.first_loss, "last_loss": res.last_loss,
        "mean_loss_last_5": sum([r["loss"] for r in log if "loss" in r][-5:]) / min(5, res.steps_done),
        "evals": res.evals, "notes": res.notes,
        "precision": res.summary.get("precision"), "inference_s": round(t_infer, 2),
        "inference_unparsable": out.unparsable, "released_loader": dice.describe()["differences_from_release"],
        "inference_failed": bool(getattr(out, "failed", False)), "run_dir": str(root / "run"),
    }


if __name__ == "__main__":
    main()

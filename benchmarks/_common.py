"""Helpers shared by the benchmark scripts (not part of the package)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
from PIL import Image

REPO = Path(__file__).resolve().parent.parent
#: ../shared, or where EDITLENS_TEST_SHARED points (as for the tests: a worktree has no ../shared).
SHARED = Path(os.environ.get("EDITLENS_TEST_SHARED") or REPO.parent / "shared")
AURORA = SHARED / "data" / "aurora"


def aurora_rows() -> list[dict]:
    path = AURORA / "edits.jsonl"
    if not path.is_file():
        return []
    return [json.loads(line) for line in open(path)]


def source_images(n: int, size: int = 256, seed: int = 0) -> list[np.ndarray]:
    """``n`` real source photos from AURORA when present, else seeded noise images."""
    rows = aurora_rows()
    out = []
    for r in rows[:n]:
        im = Image.open(AURORA / r["input"]).convert("RGB").resize((size, size), Image.Resampling.BICUBIC)
        out.append(np.asarray(im))
    rng = np.random.default_rng(seed)
    while len(out) < n:
        out.append(rng.integers(0, 256, (size, size, 3), dtype=np.uint8))
    return out


def clip_tokenizer():  # type: ignore[no-untyped-def]
    from transformers import CLIPTokenizerFast

    real = SHARED / "tokenizers" / "clip-vit-base-patch32"
    if real.is_dir():
        return CLIPTokenizerFast.from_pretrained(str(real))
    raise SystemExit(f"{real} not found: this benchmark needs the real CLIP tokenizer files")


def median(xs: list[float]) -> float:
    return float(np.median(xs))


def runtime_info(dtype: str | None = None) -> dict:
    """CPU features and dtype, printed by every benchmark next to its figures."""
    from editlens.models.precision import runtime_info as info

    out = info()
    if dtype is not None:
        out["dtype"] = dtype
    return out


DTYPE_HELP = ("auto (the precision policy: bf16 where the GPU or CPU computes it natively, else float32), "
              "float32, bfloat16, float16 (GPU), or both (float32 and bfloat16 in one run; bf16 emulated or native "
              "as the CPU flags say)")


def run_per_dtype(choice: str, device: str, measure, check) -> int:  # type: ignore[no-untyped-def]
    """Measure once per dtype of ``choice`` (``both``: float32 then bfloat16)
    and print one JSON document with every result, the machine and how bf16
    computes here; then a PASS/FAIL line per dtype. Returns the exit code.

    ``measure(dtype) -> dict``; ``check(result) -> (ok, message)``.
    """
    from editlens.models.precision import benchmark_dtypes, bf16_mode, decide, resolve_device

    device = resolve_device(device)
    results = {dt: measure(dt) for dt in benchmark_dtypes(choice, device)}
    doc = {"runtime": runtime_info(), "device": device, "bf16": bf16_mode(device),
           "auto_means": decide("auto", device).to_dict(), "results": results}
    print(json.dumps(doc, indent=2, default=str))
    ok_all = True
    for dt, res in results.items():
        ok, message = check(res)
        ok_all &= ok
        print("PASS" if ok else "FAIL", f"[{dt}{' ' + bf16_mode(device) if dt == 'bfloat16' else ''}]", message)
    return 0 if ok_all else 1

"""A synthetic run directory for tests and benchmarks of the HTML report.

Writes small generated images, a manifest, and a results store whose rows
are *fixtures*, not model outputs: each sample gets a known box (a drawn
rectangle), change-map regions and DICE differences placed on it, a
few statuses of every kind and, optionally, human scores. Everything is
seeded, so a test can compute what the report must show.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from editlens.core.types import Score
from editlens.runner.store import ResultsStore

MODELS = ("model_a", "model_b", "model_c")
COMMANDS = ("ADD", "REMOVE", "EDIT")


def make_synthetic_run(root: str | Path, n: int = 30, size: int = 96, seed: int = 0, human: bool = False,
                       distinct_images: bool = True, models: tuple[str, ...] = MODELS,
                       per_source: int = 1) -> dict[str, Any]:
    """Create ``root/images``, ``root/manifest.jsonl`` and the run ``root/run``.

    Returns ``{"run": path, "manifest": path, "samples": [...]}`` where each
    sample lists the values and boxes written for it. Sample ``i`` gets model
    ``MODELS[i % 3]``; every 7th sample's DICE answer is unparsable
    (``unscored``), every 11th fails ``ssim``, every 13th skips ``clip_i``.
    ``per_source`` > 1: that many consecutive samples (one per model of
    ``models``) edit the same source with the same instruction, as in a
    comparison of editors.
    """
    rng = np.random.default_rng(seed)
    root = Path(root)
    (root / "images").mkdir(parents=True, exist_ok=True)
    run = root / "run"
    store = ResultsStore(run)
    rows = []
    samples = []
    manifest_lines = []
    for i in range(n):
        sid = f"s{i:04d}"
        model = models[i % len(models)]
        x0, y0 = rng.uniform(0.05, 0.5, 2)
        w, h = rng.uniform(0.15, 0.4, 2)
        box = [round(float(x0), 4), round(float(y0), 4), round(float(x0 + w), 4), round(float(y0 + h), 4)]
        if per_source > 1:  # editors side by side: one source per group of `per_source` samples
            head = i - i % per_source
            if i == head:
                base = rng.integers(40, 200, (size, size, 3), dtype=np.uint8)
                src = np.repeat(np.repeat(base[:: size // 8, :: size // 8], size // 8, 0), size // 8, 1)[:size, :size]
                Image.fromarray(src).save(root / "images" / f"s{head:04d}_src.png")
            edited = src.copy()
            px = [int(round(v * size)) for v in box]
            edited[px[1]:px[3], px[0]:px[2]] = (230, 40, 40)
            Image.fromarray(edited).save(root / "images" / f"{sid}_edit.png")
            src_name, edit_name = f"s{head:04d}_src.png", f"{sid}_edit.png"
        elif distinct_images or i < 2:
            base = rng.integers(40, 200, (size, size, 3), dtype=np.uint8)
            src = np.repeat(np.repeat(base[:: size // 8, :: size // 8], size // 8, 0), size // 8, 1)[:size, :size]
            edited = src.copy()
            px = [int(round(v * size)) for v in box]
            edited[px[1]:px[3], px[0]:px[2]] = (230, 40, 40)
            Image.fromarray(src).save(root / "images" / f"{sid}_src.png")
            Image.fromarray(edited).save(root / "images" / f"{sid}_edit.png")
            src_name, edit_name = f"{sid}_src.png", f"{sid}_edit.png"
        else:  # reuse the first pair's files (thumbnails are shared, as in runs with one source per many edits)
            src_name, edit_name = "s0000_src.png", "s0000_edit.png"
        l1 = float(rng.uniform(0, 0.2))
        g = i - i % per_source
        line: dict[str, Any] = {"id": sid, "source": f"images/{src_name}", "edited": f"images/{edit_name}",
                "instruction": f"{COMMANDS[g % 3].lower()} a red block ({g})", "model": model}
        if i % 5 == 0:  # a reference edit (here: the edited image itself) on every 5th sample
            line["reference"] = f"images/{edit_name}"
        if i == 4:  # markup in data must show as text, never run or break the page
            line["instruction"] += ' <b>bold</b> & "quoted" </script><script>window.pwned = 1</script>'

        hv = None
        if human:
            hv = round(float(10 * (1 - l1 / 0.2) + rng.normal(0, 1.5)), 3)
            line["human"] = hv
        manifest_lines.append(json.dumps(line))
        command = COMMANDS[i % 3]
        coherent = bool(i % 4 != 1)
        diff = {"command": command, "object": "red block", "box": box, "confidence": 0.8,
                "confidence_source": "logprobs", "verdict": {"coherent": coherent, "p_yes": 0.9 if coherent else 0.1,
                                                             "reasoning": f"fixture reasoning {i}"}}
        if i % 7 == 3:
            dice = Score("dice", None, "unscored", "no 'COMMAND: object, [x0, y0, x1, y1]' line in the answer",
                         {"detector": "mllm", "differences": [], "no_change": False, "raw": f"garbled answer {i}",
                          "problem": "no 'COMMAND: object, [x0, y0, x1, y1]' line in the answer"})
            diffs: list[dict[str, Any]] = []
        else:
            dice = Score("dice", 1.0 if coherent else 0.0, details={"detector": "mllm", "differences": [diff],
                                                                     "no_change": False})
            diffs = [diff]
        scores = [
            Score("change_map", float(w * h), details={"threshold": 0.1, "regions": [
                {"box": [int(v * size) for v in box], "box_norm": box, "area_fraction": float(w * h),
                 "strength": 1.5, "confidence": 0.5}]}),
            Score("l1", l1),
            Score("ssim", None, "failed", "ValueError: fixture failure") if i % 11 == 5 else
            Score("ssim", float(rng.uniform(0.6, 1.0))),
            Score("clip_i", None, "skipped", "model 'clip' not found locally") if i % 13 == 0 else
            Score("clip_i", float(rng.uniform(0.5, 1.0))),
            dice,
            Score("viescore", None, "unscored", "SC answer has no two 0-10 scores",
                  {"raw": {"SC": f"unparsable judge text {i}", "PQ": "[7, 8]"}}) if i % 7 == 3 else
            Score("viescore", round(float(rng.uniform(0, 1)), 4), details={
                "SC": [6, 7], "PQ": [8, 8], "reasoning": {"SC": f"judge reasoning {i}", "PQ": "looks natural"}}),
        ]
        for s in scores:
            rows.append((sid, s.metric, "h-" + s.metric, model, s))
        samples.append({"id": sid, "model": model, "box": box, "command": command, "differences": diffs,
                        "scores": {s.metric: s for s in scores}, "human": hv})
    store.write(rows)
    (root / "manifest.jsonl").write_text("\n".join(manifest_lines) + "\n")
    store.set_meta("manifest", {
        "command": ["editlens", "run", "manifest.jsonl", "--out", "run"], "started": "fixture", "finished": "fixture",
        "inputs": {"samples": n, "manifest": str((root / "manifest.jsonl").resolve())},
        "evaluators": [{"name": m, "config_hash": "h-" + m} for m in ("change_map", "l1", "ssim", "clip_i", "dice",
                                                                                  "viescore")],
        "environment": {"editlens": "fixture"}})
    store.close()
    return {"run": run, "manifest": root / "manifest.jsonl", "samples": samples}

"""Tiny training data for editor fine-tuning tests: per source, several
candidate edits with known scores, written as ``editlens relabel`` output
(``reward`` 1-5) or as plain manifest rows.

The candidates are flat colours blended into the source: the redder, the
higher the reward, so a reward that likes red (``test_redness``) agrees
with the labels.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

COLOURS = {"red": (220, 30, 30), "green": (30, 200, 40), "blue": (30, 40, 210)}
REWARDS = {"red": 5.0, "green": 2.0, "blue": 1.0}


def make_relabelled(root: Path | str, n_sources: int = 6, size: int = 16, seed: int = 0) -> Path:
    """``root/relabelled.jsonl`` and its images; returns the file."""
    from PIL import Image

    root = Path(root)
    (root / "images").mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n_sources):
        src = rng.integers(60, 200, size=(size, size, 3), dtype=np.uint8)
        Image.fromarray(src).save(root / "images" / f"s{i}.png")
        for name, colour in COLOURS.items():
            out = (0.3 * src + 0.7 * np.array(colour)).astype(np.uint8)
            Image.fromarray(out).save(root / "images" / f"s{i}_{name}.png")
            rows.append({"id": f"s{i}_{name}", "source": f"images/s{i}.png", "edited": f"images/s{i}_{name}.png",
                         "instruction": "make it red", "model": name, "reward": REWARDS[name]})
    path = root / "relabelled.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path

"""A tiny ADIEE training set whose scores a tiny random model *can* learn.

Every sample edits the same source image by blending it towards white; the
score is the blend fraction ``t`` (0 = unchanged, 1 = fully white), i.e. how
far the edit went, which is visible in the edited half of the input. The
fractions are evenly spaced over [0, 1], so no constant prediction fits:
the best constant (the median) still has an L1 error of 2.67 on the 0-10
scale for 16 samples (:func:`editlens.adiee.model.constant_score_loss`),
and a score loss below that means the model reads the images.

Why not binary scores: with half 0 and half 10, *every* constant in [0, 10]
has L1 exactly 5, so a regression loss cannot fall at all until the model
discriminates, while a 3-class cross-entropy falls from ln 3 to ln 2 by
learning the class prior alone; the two heads' curves then differ for
reasons that have nothing to do with the code.

Run ``python -m editlens.testing.adiee_learnable DIR [N]`` to write one
for ``editlens adiee train --data DIR``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np


def blend_fractions(n: int, seed: int = 0) -> list[float]:
    """``n`` evenly spaced fractions over [0, 1] in a seeded order.

    >>> sorted(blend_fractions(5))
    [0.0, 0.25, 0.5, 0.75, 1.0]
    """
    return [round(float(t), 4) for t in np.random.default_rng(seed).permutation(np.linspace(0.0, 1.0, n))]


def write_learnable_dataset(root: Path, n: int = 16, side: int = 16, seed: int = 0) -> Path:
    """``samples.jsonl`` + ``images/`` in the layout of ``adiee make-data``
    (all samples in the ``train`` split); returns ``root``."""
    from PIL import Image

    root = Path(root)
    (root / "images").mkdir(parents=True, exist_ok=True)
    coarse = np.random.default_rng(seed).integers(0, 256, (4, 4, 3), dtype=np.uint8)
    source = np.asarray(Image.fromarray(coarse).resize((side, side), Image.Resampling.BILINEAR), dtype=np.float64)
    Image.fromarray(source.astype(np.uint8)).save(root / "images" / "source.png")
    rows = []
    for i, t in enumerate(blend_fractions(n, seed)):
        edited = ((1.0 - t) * source + t * 255.0).round().astype(np.uint8)
        Image.fromarray(edited).save(root / "images" / f"edited_{i:03d}.png")
        rows.append({"id": f"blend{i:03d}", "source": "images/source.png", "edited": f"images/edited_{i:03d}.png",
                     "instruction": "make the picture brighter", "score": t, "split": "train"})
    (root / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return root


if __name__ == "__main__":  # python -m editlens.testing.adiee_learnable DIR [N]
    import sys

    out = write_learnable_dataset(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 16)
    from editlens.adiee.model import constant_score_loss

    scores = [json.loads(line)["score"] for line in (out / "samples.jsonl").read_text().splitlines()]
    print(f"{len(scores)} samples -> {out}/samples.jsonl; "
          f"L1 of the best constant prediction {constant_score_loss(scores, 'regression'):.3f}")

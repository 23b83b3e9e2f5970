"""Test helpers (importable as ``helpers``: pytest puts tests/ on sys.path)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"
#: The optional ../shared folder (papers, real data, tokenizers). Set
#: EDITLENS_TEST_SHARED to look elsewhere, e.g. to a missing path to run the
#: suite as a fresh clone without it would (CI does both).
SHARED = Path(os.environ.get("EDITLENS_TEST_SHARED") or REPO.parent / "shared")


def shared_path(*parts: str) -> Path:
    p = SHARED.joinpath(*parts)
    if not p.exists():
        pytest.skip(f"{p} not present (../shared is optional)")
    return p


def rng_image(seed: int, h: int = 48, w: int = 64) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)

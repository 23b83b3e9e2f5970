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


#: The box of the red square :func:`write_dice_records` adds, as fractions.
DICE_BOX = [0.25, 0.25, 0.5, 0.75]


def write_dice_records(root: Path, coherence: bool = False) -> Path:
    """Two 64x48 pairs with one added red square, written as DICE detector
    records (``train.jsonl``) and, if asked, coherence records (``coherence.jsonl``)."""
    import json

    from PIL import Image

    rng = np.random.default_rng(0)
    det, coh = [], []
    for i in range(2):
        a = rng.integers(0, 255, (48, 64, 3), dtype=np.uint8)
        b = a.copy()
        b[12:36, 16:40] = (255, 0, 0)
        Image.fromarray(a).save(root / f"s{i}.png")
        Image.fromarray(b).save(root / f"e{i}.png")
        diff = {"command": "ADD", "object": "cat", "box": DICE_BOX}
        det.append({"id": f"p{i}", "source": f"s{i}.png", "edited": f"e{i}.png", "width": 64, "height": 48,
                    "differences": [dict(diff)]})
        coh.append({"id": f"c{i}", "source": f"s{i}.png", "edited": f"e{i}.png", "instruction": "add a cat",
                    "difference": dict(diff), "reasoning": "cat added", "decision": "YES"})
    (root / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in det))
    if coherence:
        (root / "coherence.jsonl").write_text("".join(json.dumps(r) + "\n" for r in coh))
    return root


def pmap(fn, items):  # type: ignore[no-untyped-def]
    """``[fn(x) for x in items]`` over the machine's cores (at most 4), for
    the slow loops over real data. ``fn`` must be a module-level function;
    workers are spawned (not forked: OpenCV's and torch's thread pools do
    not survive a fork)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    items = list(items)
    workers = min(4, os.cpu_count() or 1, len(items))
    if workers <= 1:
        return [fn(x) for x in items]
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as ex:
        return list(ex.map(fn, items))


def built_once(tmp_path_factory: pytest.TempPathFactory, name: str, build):  # type: ignore[no-untyped-def]
    """``build(folder)`` once per test run however many xdist workers ask (the others wait for it, then reuse
    it), for costly fixtures whose tests may land on several workers: its JSON-able result."""
    import json

    from filelock import FileLock

    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # the workers' common folder
    done = root / f"{name}.json"
    with FileLock(str(root / f"{name}.lock")):
        if not done.is_file():
            (root / name).mkdir(exist_ok=True)
            done.write_text(json.dumps(build(root / name)))
    return json.loads(done.read_text())

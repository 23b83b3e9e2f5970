"""Four editors on the bundled example photos, for the report's tests, benchmark and screenshots.

The issue that shaped the report (a researcher comparing editors) used four
editors on each source: the ground-truth edit, a **no-op** (the source
unchanged), a **blur** of the source and a **wrong edit** (a change the
instruction did not ask for). :func:`build_scenario` writes them from
``examples/images`` (the real AURORA photos bundled with the package, and
their mirror images, so there are 8 sources): the no-op must be flagged,
similarity scores must not crown it, and the evaluators that judge the edit
must be the ones that rank.

:class:`DetailKept` is a small model-free evaluator used to test the report's
handling of an evaluator it has never seen (registered in code, with boxes):
the share of the source's fine detail (gradient energy) still in the edited
image, with the tiles that lost most of theirs as boxes. It is a real, if
crude, measure of one kind of quality loss (blur), not a model output.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from PIL import Image, ImageDraw, ImageFilter, ImageOps

from editlens.core.types import LoadedEdit, Score
from editlens.metrics.base import Metric
from editlens.metrics.spec import BoxLayer, MetricSpec

EDITORS = ("ground_truth", "no_op", "blur", "wrong_edit")
#: a category per example, as an instruction classifier would fill the manifest's edit_type column
EDIT_TYPES = {"cat_seat": "add", "hydrant": "replace", "pencil_case": "move", "dragonfruit": "move"}


def examples_dir() -> Path:
    """The sample edits shipped in the package (the bundled photos and their manifest)."""
    from editlens.paths import samples_dir

    return samples_dir()


def _wrong_edit(img: Image.Image, seed: int) -> Image.Image:
    """A plain, confident change in a place the instruction did not name."""
    rng = np.random.default_rng(seed)
    out = img.copy()
    w, h = out.size
    x0, y0 = int(rng.uniform(0.02, 0.3) * w), int(rng.uniform(0.02, 0.3) * h)
    ImageDraw.Draw(out).ellipse([x0, y0, x0 + w // 4, y0 + h // 5], fill=(40, 90, 230))
    return out


def build_scenario(root: str | Path, mirror: bool = True, edit_type: bool = True,
                   upscale_one: bool = True, examples: str | Path | None = None) -> dict[str, Any]:
    """Write ``root/images/*`` and ``root/manifest.jsonl``: every source edited by each of
    :data:`EDITORS`. Ids are ``<source>/<editor>``.

    ``upscale_one``: the first source's wrong edit is saved at twice the size,
    so a run resizes it (the report must say so). Returns ``{"manifest",
    "rows", "sources"}``.
    """
    root = Path(root)
    img_dir = root / "images"
    img_dir.mkdir(parents=True, exist_ok=True)
    ex = Path(examples) if examples else examples_dir()
    base = [json.loads(x) for x in (ex / "manifest.jsonl").read_text().splitlines() if x.strip()]
    base = [r for r in base if r["model"] == "ground_truth"]
    rows = []
    sources = []
    for k, r in enumerate(base):
        variants = [("", False)] + ([("_mirror", True)] if mirror else [])
        for suffix, flip in variants:
            name = r["id"] + suffix
            src = Image.open(ex / r["source"]).convert("RGB")
            gt = Image.open(ex / r["edited"]).convert("RGB")
            if flip:
                src, gt = ImageOps.mirror(src), ImageOps.mirror(gt)
            src_path = img_dir / f"{name}_source.png"
            src.save(src_path)
            outs = {
                "ground_truth": gt,
                "no_op": src.copy(),
                "blur": src.filter(ImageFilter.GaussianBlur(3)),
                "wrong_edit": _wrong_edit(src, k * 2 + int(flip)),
            }
            if upscale_one and k == 0 and not flip:
                outs["wrong_edit"] = outs["wrong_edit"].resize((src.width * 2, src.height * 2), Image.Resampling.BICUBIC)
            sources.append(name)
            for editor in EDITORS:
                path = img_dir / f"{name}_{editor}.png"
                outs[editor].save(path)
                row = {"id": f"{name}/{editor}", "source": f"images/{src_path.name}", "edited": f"images/{path.name}",
                       "instruction": r["instruction"], "model": editor}
                if edit_type:
                    row["edit_type"] = EDIT_TYPES.get(r["id"], "other")
                rows.append(row)
    manifest = root / "manifest.jsonl"
    manifest.write_text("".join(json.dumps(x) + "\n" for x in rows), encoding="utf-8")
    return {"manifest": manifest, "rows": rows, "sources": sources, "root": root}


# ----------------------------------------------------------------------------- a new evaluator with boxes

GRID = 4


def _energy(arr: np.ndarray) -> np.ndarray:
    """Gradient energy per tile of a GRID x GRID grid."""
    g = arr.astype(np.float32).mean(axis=2)
    e = np.zeros_like(g)
    e[:, 1:] += np.abs(np.diff(g, axis=1))
    e[1:, :] += np.abs(np.diff(g, axis=0))
    h, w = g.shape
    return np.array([[e[i * h // GRID:(i + 1) * h // GRID, j * w // GRID:(j + 1) * w // GRID].sum()
                      for j in range(GRID)] for i in range(GRID)])


class DetailKept(Metric):
    """Share of the source's fine detail still in the edited image (1 = all of it), with the
    tiles that lost more than half of theirs as boxes."""

    def compute(self, batch: Sequence[LoadedEdit]) -> list[float | Score]:
        out: list[float | Score] = []
        for s in batch:
            a, b = _energy(s.source), _energy(s.edited)
            kept = float(min(1.0, b.sum() / a.sum())) if a.sum() > 0 else 1.0
            tiles = []
            for i in range(GRID):
                for j in range(GRID):
                    if a[i, j] > 0 and b[i, j] < 0.5 * a[i, j]:
                        tiles.append({"box": [j / GRID, i / GRID, (j + 1) / GRID, (i + 1) / GRID],
                                      "lost": round(float(1 - b[i, j] / a[i, j]), 4)})
            out.append(Score(self.name, kept, details={"tiles": tiles}))
        return out


DETAIL_KEPT = MetricSpec(
    "detail_kept", DetailKept, ("source", "edited"), True, (0.0, 1.0), None,
    "share of the source's fine detail kept in the edited image (test evaluator)",
    measures="quality",
    boxes=BoxLayer("tiles", name="tiles that lost detail", label="{lost:.0%} of the detail lost", colour="#8e24aa",
                   rank="lost", empty="no tile lost detail"),
)


def register_detail_kept() -> MetricSpec:
    """Register :data:`DETAIL_KEPT` (idempotent)."""
    from editlens.metrics.registry import register_metric

    return register_metric(DETAIL_KEPT, overwrite=True)


def unregister_detail_kept() -> None:
    """Take :data:`DETAIL_KEPT` out of the registry again (a test leaves the process as it found it)."""
    from editlens.metrics import registry

    registry.METRICS.unregister(DETAIL_KEPT.name)

"""Emu Edit test set (Meta): 7 tasks, no ground-truth output; scored by the
paper's metric suite against the input image and the captions."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from editlens.bench.base import BenchItem, Benchmark, BenchSpec
from editlens.bench.published import image, table_rows, text_field
from editlens.bench.registry import register
from editlens.bench.suites import suite_table

TASKS = ("background", "global", "style", "remove", "add", "local", "texture")
COLUMNS = ("image", "instruction", "task", "input_caption", "output_caption", "idx")


@register
class EmuEditTest(Benchmark):
    spec = BenchSpec(
        name="emu-edit",
        title="Emu Edit test set",
        homepage="https://huggingface.co/datasets/facebook/emu_edit_test_set",
        download="hf download facebook/emu_edit_test_set --repo-type dataset --local-dir emu_edit_test_set "
                 "(splits validation and test)",
        layout="the hub dataset (parquet, images embedded as {bytes, path}); one row per edit",
        columns={"idx": "item id (names the output file)", "image": "source", "instruction": "instruction",
                 "task": "category (7)", "input_caption": "source caption", "output_caption": "target caption",
                 "hash": "kept", "split": "kept"},
        categories=TASKS, languages=("en",),
        protocols={"emu-edit": "mean of CLIP-dir, CLIP-I, CLIP-out, L1 and DINO per task and over all items"},
        table_layout={"sections": ["test"], "rows": list(TASKS) + ["overall"],
                      "columns": ["CLIP-dir", "CLIP-I", "CLIP-out", "L1", "DINO"]},
        outputs="DIR/<model>/<idx>.png",
        split="test",
        metrics={"clip_d": "CLIP-dir", "clip_i": "CLIP-I", "clip_t": "CLIP-out", "l1": "L1", "dino_i": "DINO"},
        identical="columns, the metric definitions (input vs edited image, captions for the text side) and "
                  "the mean over items",
        differs="CLIP/DINO checkpoints are whatever --model clip=/dino= names (the paper's ViT-L/14 and "
                "DINO ViT-S/16 must be given to match); the edited image is resized to the source size",
    )

    def read(self, path: str | Path) -> list[BenchItem]:
        items = []
        for where, row, base in table_rows(path, COLUMNS, self.split):
            idx = row["idx"]
            if idx is None or str(idx).strip() == "":
                from editlens.errors import InputError

                raise InputError(f"{where}: empty idx")
            task = text_field(row, "task", where)
            extra = {k: v for k, v in row.items() if k not in COLUMNS}
            items.append(BenchItem(str(idx), str(idx), text_field(row, "instruction", where),
                                   image(row["image"], f"{where} image", base), task, "en",
                                   source_caption=row.get("input_caption"), target_caption=row.get("output_caption"),
                                   extra=extra))
        return items

    def table(self, rows: Sequence[Mapping[str, Any]], *, n_boot: int = 1000, seed: int = 0) -> dict[str, Any]:
        return suite_table(self, rows, [("test", lambda r: True)], n_boot=n_boot, seed=seed)

"""MagicBrush (OSU NLP): edit sessions of up to three turns with
ground-truth outputs; scored by the paper's metric suite against the
ground truth (L1, L2, CLIP-I, DINO) and the output's caption (CLIP-T)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping, Sequence

from editlens.bench.base import BenchItem, Benchmark, BenchSpec
from editlens.bench.published import image, read_json, table_rows, text_field
from editlens.bench.registry import register
from editlens.bench.suites import suite_table
from editlens.errors import InputError

HUB_COLUMNS = ("img_id", "turn_index", "source_img", "instruction", "target_img")


@register
class MagicBrushTest(Benchmark):
    spec = BenchSpec(
        name="magicbrush",
        title="MagicBrush",
        homepage="https://osu-nlp-group.github.io/MagicBrush/",
        download="test: the password-protected zip linked from https://github.com/OSU-NLP-Group/MagicBrush "
                 "(password in its README; do not redistribute), unzip to test/; dev/train: hf download "
                 "osunlp/MagicBrush --repo-type dataset",
        layout="test/edit_sessions.json {img_id: [{input, mask, output, instruction}, ...]} with images under "
               "test/images/<img_id>/ (and optionally local_descriptions.json); or the hub parquet (img_id, "
               "turn_index, source_img, mask_img, instruction, target_img)",
        columns={"img_id": "session id", "turn_index": "turn (1-3)", "source_img/input": "source (ground-truth "
                 "input of the turn)", "target_img/output": "reference (ground-truth output)",
                 "mask_img/mask": "mask (kept)", "instruction": "instruction"},
        categories=("turn 1", "turn 2", "turn 3"), languages=("en",),
        protocols={"magicbrush": "mean of L1, L2, CLIP-I, DINO (edited vs ground truth) and CLIP-T (edited vs "
                   "output caption) per turn and over all turns, every turn edited from its ground-truth input"},
        table_layout={"sections": ["single-turn (every turn from its ground-truth input)"],
                      "rows": ["turn 1", "turn 2", "turn 3", "overall"],
                      "columns": ["L1", "L2", "CLIP-I", "DINO", "CLIP-T"]},
        outputs="DIR/<model>/<img_id>_<turn>.png (or DIR/<model>/<img_id>/<img_id>_<turn>.png)",
        split="test",
        metrics={"l1_ref": "L1", "l2_ref": "L2", "clip_i_ref": "CLIP-I", "dino_i_ref": "DINO", "clip_t": "CLIP-T"},
        identical="columns, the metrics against the ground-truth output (L2 as the mean squared error), turns "
                  "from their ground-truth inputs in the single-turn setting",
        differs="CLIP/DINO checkpoints are whatever --model names (give the paper's to match); the edited image is "
                "resized to the ground truth's size",
    )

    def read(self, path: str | Path) -> list[BenchItem]:
        p = Path(path)
        sessions = p / "edit_sessions.json" if p.is_dir() else p
        if p.is_dir() and not sessions.is_file() and (p / "test" / "edit_sessions.json").is_file():
            sessions = p / "test" / "edit_sessions.json"
        if sessions.name == "edit_sessions.json" and sessions.is_file():
            return self._read_sessions(sessions)
        return self._read_hub(p)

    def _read_sessions(self, f: Path) -> list[BenchItem]:
        data = read_json(f)
        if not isinstance(data, dict):
            raise InputError(f"{f}: expected {{img_id: [turns]}}")
        desc_f = f.parent / "local_descriptions.json"
        desc = read_json(desc_f) if desc_f.is_file() else {}
        items = []
        for img_id, turns in data.items():
            if not isinstance(turns, list) or not turns:
                raise InputError(f"{f} [{img_id!r}]: expected a list of turns")
            for t, turn in enumerate(turns, 1):
                where = f"{f} [{img_id!r}][{t - 1}]"
                if not isinstance(turn, dict):
                    raise InputError(f"{where}: expected an object")
                folder = f.parent / "images" / str(img_id)
                src = folder / text_field(turn, "input", where)
                out = folder / text_field(turn, "output", where)
                for q, what in ((src, "input"), (out, "output")):
                    if not q.is_file():
                        raise InputError(f"{where}: {what} image {q.name!r} not found in {folder}")
                caption = (desc.get(str(img_id)) or {}).get(out.name) if isinstance(desc, dict) else None
                items.append(BenchItem(f"{img_id}_{t}", f"{img_id}_{t}", text_field(turn, "instruction", where), src,
                                       f"turn {t}", "en", reference=out, target_caption=caption,
                                       extra={"img_id": str(img_id), "turn_index": t, "turns": len(turns),
                                              "mask": turn.get("mask")}))
        return items

    def _read_hub(self, path: Path) -> list[BenchItem]:
        rows = []
        for where, row, base in table_rows(path, HUB_COLUMNS, self.split):
            rows.append((where, row, base))
        last: dict[str, int] = {}
        for _, row, _ in rows:
            last[str(row["img_id"])] = max(last.get(str(row["img_id"]), 0), int(row["turn_index"]))
        items = []
        for where, row, base in rows:
            img_id, t = str(row["img_id"]), int(row["turn_index"])
            items.append(BenchItem(f"{img_id}_{t}", f"{img_id}_{t}", text_field(row, "instruction", where),
                                   image(row["source_img"], f"{where} source_img", base), f"turn {t}", "en",
                                   reference=image(row["target_img"], f"{where} target_img", base),
                                   extra={**{k: v for k, v in row.items() if k not in HUB_COLUMNS},
                                          "img_id": img_id, "turn_index": t, "turns": last[img_id]}))
        return items

    def output_candidates(self, item: BenchItem) -> list[str]:
        return super().output_candidates(item) + [f"{item.extra['img_id']}/{item.key}.png"]

    def table(self, rows: Sequence[Mapping[str, Any]], *, n_boot: int = 1000, seed: int = 0) -> dict[str, Any]:
        return suite_table(self, rows, [(self.spec.table_layout["sections"][0], lambda r: True)],
                           n_boot=n_boot, seed=seed)


@register
class MagicBrushMultiTurn(MagicBrushTest):
    """The multi-turn setting: turn n edits the editor's own output of turn n-1
    (``--editor`` makes them in that order; ``--edits`` must hold outputs made so)."""

    spec = replace(
        MagicBrushTest.spec, name="magicbrush-multiturn", title="MagicBrush (multi-turn)",
        protocols={"magicbrush-multiturn": "the metric suite of `magicbrush` per turn, over all turns and over "
                   "each session's final turn, where turn n edits the editor's own output of turn n-1"},
        table_layout={"sections": ["multi-turn (each turn from the editor's previous output)", "final turn"],
                      "rows": ["turn 1", "turn 2", "turn 3", "overall"],
                      "columns": ["L1", "L2", "CLIP-I", "DINO", "CLIP-T"]},
        identical="columns and metrics as `magicbrush`; turn n's input is the editor's turn n-1 output (with "
                  "--editor, editlens chains them; the first turn starts from the ground-truth input)",
        differs="with --edits editlens cannot check that the outputs were chained: it scores them as given",
    )

    def read(self, path: str | Path) -> list[BenchItem]:
        items = super().read(path)
        for it in items:
            t = it.extra["turn_index"]
            it.after = f"{it.extra['img_id']}_{t - 1}" if t > 1 else None
        return items

    def table(self, rows: Sequence[Mapping[str, Any]], *, n_boot: int = 1000, seed: int = 0) -> dict[str, Any]:
        names = self.spec.table_layout["sections"]
        return suite_table(self, rows, [(names[0], lambda r: True),
                                        (names[1], lambda r: r.get("turn_index") == r.get("turns"))],
                           n_boot=n_boot, seed=seed)

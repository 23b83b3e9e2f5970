"""Small benchmark files built exactly as their owners publish them (column
names, nesting, image encodings, folder layout), for tests/test_bench*.py."""

from __future__ import annotations

import io
import json
import zlib
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from PIL import Image


def png(seed: int, size: tuple[int, int] = (32, 24), fmt: str = "PNG") -> bytes:
    arr = np.random.default_rng(seed).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format=fmt)
    return buf.getvalue()


def save(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def _image_struct(data: bytes, name: str) -> dict[str, Any]:
    return {"bytes": data, "path": name}  # the `datasets` Image feature as stored


def write_table(rows: Sequence[dict[str, Any]], path: Path, image_cols: Sequence[str], kind: str = "parquet") -> Path:
    """Rows as a hub parquet file, or as a ``datasets`` arrow file (IPC stream), images as {bytes, path} structs."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    img_type = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    cols = {}
    for name in rows[0]:
        vals = [r[name] for r in rows]
        cols[name] = pa.array(vals, type=img_type) if name in image_cols else pa.array(vals)
    table = pa.table(cols)
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "parquet":
        pq.write_table(table, path)
    else:
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as w:
            w.write_table(table)
    return path


#: (key, task_type, language, intersection) of the tiny GEdit-Bench
GEDIT_ROWS = [("k1", "background_change", "en", True), ("k2", "background_change", "en", False),
              ("k3", "color_alter", "en", True), ("k4", "background_change", "cn", True)]


def gedit(root: Path, kind: str = "parquet", instructions: dict[str, str] | None = None) -> Path:
    rows = []
    for i, (key, task, lang, inter) in enumerate(GEDIT_ROWS):
        rows.append({"key": key, "task_type": task, "instruction": (instructions or {}).get(key, f"edit {key}"),
                     "instruction_language": lang, "input_image": _image_struct(png(i), f"{key}.png"),
                     "input_image_raw": _image_struct(png(i, (64, 48)), f"{key}_raw.png"),
                     "Intersection_exist": inter})
    name = "data/train-00000-of-00001.parquet" if kind == "parquet" else "train/data-00000-of-00001.arrow"
    write_table(rows, root / name, ("input_image", "input_image_raw"), kind)
    return root


def gedit_outputs(edits: Path, model: str, keys: Sequence[str]) -> None:
    """The release's layout: DIR/<model>/fullset/<task>/<lang>/<key>.png."""
    for i, (key, task, lang, _) in enumerate(GEDIT_ROWS):
        if key in keys:
            save(edits / model / "fullset" / task / lang / f"{key}.png", png(100 + i))


def imgedit(root: Path) -> Path:
    data = {"1082": {"id": "animal/000342021.jpg", "prompt": "Make the shell smooth.", "edit_type": "adjust"},
            "673": {"id": "style/000278574.jpg", "prompt": "Turn it into a woodblock print.", "edit_type": "style"},
            "12": {"id": "animal/000000012.jpg", "prompt": "Add a hat.", "edit_type": "add"}}
    for i, e in enumerate(data.values()):
        save(root / "singleturn" / e["id"], png(i, fmt="JPEG"))
    (root / "singleturn" / "basic_edit.json").write_text(json.dumps(data, indent=4))
    return root / "singleturn"


def kris(root: Path, **drop: Any) -> Path:
    """KRIS_Bench/<category>/annotation.json for a plain, a knowledge, a multi-image, a temporal (frames 1, 2
    and 4 given: the edit is frame 3) and a viewpoint case (with its gt_img); ``drop={"viewpoint_change":
    "gt_img"}`` leaves that field out of that category's case."""
    base = root / "KRIS_Bench"
    ann = {"count_change": {"1": {"ori_img": "1.jpg", "ins_en": "Add one more apple.", "explain_en": ""}},
           "biology": {"7": {"ori_img": "7.jpg", "ins_en": "Show this leaf in autumn.",
                             "explain_en": "Leaves lose chlorophyll and turn yellow or red."}},
           "multi-element_composition": {"3": {"ori_img": ["3-1.jpg", "3-2.jpg", "3-3.jpg"],
                                               "ins_en": "Put the cat on the sofa."}},
           "temporal_prediction": {"5": {"ori_img": ["5-1.jpg", "5-2.jpg", "5-4.jpg"],
                                         "ins_en": "Show the missing moment."}},
           "viewpoint_change": {"9": {"ori_img": "9.jpg", "gt_img": "9_gt.jpg", "ins_en": "Show it from above."}}}
    for cat, entries in ann.items():
        for e in entries.values():
            e.pop(drop.get(cat, ""), None)
            for f in (e["ori_img"] if isinstance(e["ori_img"], list) else [e["ori_img"]]) + [e.get("gt_img", "")]:
                if f:
                    save(base / cat / f, png(zlib.crc32(f"{cat}/{f}".encode()), fmt="JPEG"))
        (base / cat / "annotation.json").write_text(json.dumps(entries, indent=2))
    return base


def kris_outputs(root: Path, model: str, base: Path) -> Path:
    """An editor's outputs in the release's results/<model>/<category>/<id>.jpg layout, for every case under ``base``."""
    for ann in sorted(base.glob("*/annotation.json")):
        for key in json.loads(ann.read_text()):
            save(root / model / ann.parent.name / f"{key}.jpg", png(zlib.crc32(f"{model}/{key}".encode()), fmt="JPEG"))
    return root


def kris_clone(root: Path) -> Path:
    """A clone of the release's repository as editlens reads it: utils/prompts.py (made-up texts under the
    release's names) and judging scripts that write made-up captions in the release's message layout."""
    names = ["consist", "quality", "instruction_following", "dual_evaluation", "view_instruction_following",
             "consist_multi", "instruction_multi", "consist_temporal", "instruction_temporal"]
    prompts = "".join(f'prompt_{n} = "P-{n} of {{instruct}}"\n' for n in names)
    prompts = prompts.replace("P-dual_evaluation of {instruct}", "P-dual_evaluation of {instruct} as {explanation}")
    prompts = prompts.replace("P-consist_temporal of {instruct}", "P-consist_temporal of {instruct} at {N} {{x}}")
    prompts = prompts.replace("P-quality of {instruct}", "P-quality of {instruct} {{x}}")
    save(root / "utils" / "prompts.py", prompts.encode())

    def ask(fn: str, captions: Sequence[str], loop: str = "") -> str:
        lines = [f"def {fn}(prompt, images, frames=()):", '    content = [{"type": "text", "text": prompt}]']
        lines += [f'    content.append({{"type": "text", "text": {c}}})' for c in captions]
        return "\n".join(lines + ([loop] if loop else []) + ["    return content", ""])

    pair = ['"C-orig:"', '"C-edit:"']
    save(root / "metrics_common.py", ask("evaluate_with_gpt", pair).encode())
    save(root / "metrics_knowledge.py", ask("evaluate_with_gpt", ['"K-orig:"', '"K-edit:"']).encode())
    save(root / "metrics_view_change.py", ask("evaluate_with_gpt", pair + ['"C-truth {x}:"']).encode())
    save(root / "metrics_multi_element.py", (ask("evaluate_multi_element_with_gpt", ['f"M-ref {idx}:"', '"M-pred:"'])
                                             + ask("evaluate_with_gpt", ['"M-alone:"'])).encode())
    frames = '    frames.append((1, images, "T-ref"))\n    frames.append((2, images, "T-gen"))'
    save(root / "metrics_temporal_prediction.py", (ask("evaluate_temporal_with_gpt", ['f"T-frame {n} <{kind}>:"'], frames)
                                                   + ask("evaluate_with_gpt", ['"T-alone:"'])).encode())
    return root


def rise(root: Path) -> Path:
    cases = [
        {"index": "temporal_1", "category": "temporal_reasoning", "subtask": "Life Progression",
         "instruction": "Show this puppy ten years later.", "image": "data/images/t1.png", "reference": "an old dog"},
        {"index": "causal_2", "category": "causal_reasoning", "subtask": "State Transition",
         "instruction": "Show the ice after an hour in the sun.", "image": "data/images/c2.png",
         "reference": "a puddle", "consistency_free": True},
        {"index": "logic_3", "category": "logical_reasoning", "subtask": "Puzzle Solving",
         "instruction": "Solve the maze.", "image": "data/images/l3.png", "reference_txt": "the path goes right"},
    ]
    for i, c in enumerate(cases):
        save(root / c["image"], png(i))
    (root / "data_total.json").write_text(json.dumps(cases, indent=2))
    return root


def emu(root: Path) -> Path:
    rows = [{"instruction": "make it snow", "image": _image_struct(png(1), "a.png"), "task": "global", "split": "test",
             "idx": 0, "hash": "h0", "input_caption": "a street", "output_caption": "a snowy street"},
            {"instruction": "remove the car", "image": _image_struct(png(2), "b.png"), "task": "remove",
             "split": "test", "idx": 1, "hash": "h1", "input_caption": "a car", "output_caption": "a road"}]
    return write_table(rows, root / "data" / "test-00000-of-00001.parquet", ("image",))


def magicbrush_test(root: Path) -> Path:
    """test/edit_sessions.json with images under test/images/<img_id>/."""
    t = root / "test"
    sessions = {"242679": [{"input": "242679-input.png", "mask": "242679-mask1.png", "output": "242679-output1.png",
                            "instruction": "Put a hat on the man"},
                           {"input": "242679-output1.png", "mask": "242679-mask2.png", "output": "242679-output2.png",
                            "instruction": "Make the hat red"}]}
    for i, name in enumerate(["242679-input.png", "242679-output1.png", "242679-output2.png",
                              "242679-mask1.png", "242679-mask2.png"]):
        save(t / "images" / "242679" / name, png(10 + i))
    (t / "edit_sessions.json").write_text(json.dumps(sessions))
    (t / "local_descriptions.json").write_text(json.dumps({"242679": {"242679-output1.png": "a man in a hat"}}))
    return t


def magicbrush_hub(root: Path) -> Path:
    """The hub's parquet (dev/train): one row per turn, images as {bytes, path} structs."""
    rows = [{"img_id": "327726", "turn_index": t, "source_img": _image_struct(png(20 + t), f"s{t}.png"),
             "mask_img": _image_struct(png(30 + t), f"m{t}.png"), "instruction": f"turn {t} edit",
             "target_img": _image_struct(png(40 + t), f"t{t}.png")} for t in (1, 2)]
    return write_table(rows, root / "data" / "dev-00000-of-00001.parquet", ("source_img", "mask_img", "target_img"))

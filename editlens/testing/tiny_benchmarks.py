"""Small files in exactly the published formats of the three human-label
benchmarks of edit reward models (for tests; the real files are downloads,
see the ``DOWNLOAD`` of each ``editlens.bench`` module):

* :func:`write_editscore_bench` — EditScore's EditReward-Bench as
  ``datasets.save_to_disk`` writes it (an arrow IPC stream
  ``data-00000-of-00001.arrow`` with ``dataset_info.json`` and
  ``state.json``), or as the hub's parquet (``data/train-00000-of-00001.parquet``);
  image columns are ``datasets`` Image structs ``{bytes, path}``;
* :func:`write_editreward_bench` — TIGER-Lab's EditReward-Bench parquet
  under ``2pair/``, ``3pair/``, ``4pair/``;
* :func:`write_mmrb2` — MMRB2's ``edit.json`` with ``input_images/`` and ``images/``.
"""

from __future__ import annotations

import io
import json
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np

IMAGE = {"bytes": "binary", "path": "string"}


def png(seed: int, size: tuple[int, int] = (24, 32)) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    arr = np.random.default_rng(seed).integers(0, 256, (*size, 3), dtype=np.uint8)
    Image.fromarray(arr).save(buf, format="PNG")
    return buf.getvalue()


def _image_type() -> Any:
    import pyarrow as pa

    return pa.struct([("bytes", pa.binary()), ("path", pa.string())])


def write_editscore_bench(root: Path, fmt: str = "arrow", tasks: tuple[str, ...] = ("subject-add", "color_alter")) -> Path:
    """Two subtasks x three dimensions x two pairs; edit keys are shared across
    dimensions (the same two edits judged on each dimension), as in the release."""
    import pyarrow as pa

    rows: dict[str, list[Any]] = {k: [] for k in ("key", "instruction", "input_image", "output_images", "task_type",
                                                   "dimension")}
    seed = 0
    for t, task in enumerate(tasks):
        for p in range(2):
            src = png(100 + 10 * t + p)
            keys = [f"{task}_{p}_m{j}" for j in range(2)]
            outs = [png(200 + 10 * t + 2 * p + j) for j in range(2)]
            for dim in ("prompt_following", "consistency", "overall"):
                rows["key"].append(keys)
                rows["instruction"].append(f"{task} instruction {p}")
                rows["input_image"].append({"bytes": src, "path": None})
                rows["output_images"].append([{"bytes": o, "path": None} for o in outs])
                rows["task_type"].append(task)
                rows["dimension"].append(dim)
                seed += 1
    schema = pa.schema([("key", pa.list_(pa.string())), ("instruction", pa.string()), ("input_image", _image_type()),
                        ("output_images", pa.list_(_image_type())), ("task_type", pa.string()),
                        ("dimension", pa.string())])
    table = pa.Table.from_pydict(rows, schema=schema)
    root.mkdir(parents=True, exist_ok=True)
    if fmt == "parquet":
        import pyarrow.parquet as pq

        (root / "data").mkdir(exist_ok=True)
        pq.write_table(table, root / "data" / "train-00000-of-00001.parquet")
        return root
    with pa.OSFile(str(root / "data-00000-of-00001.arrow"), "wb") as sink:
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
    features = {"key": {"feature": {"dtype": "string", "_type": "Value"}, "_type": "Sequence"},
                "instruction": {"dtype": "string", "_type": "Value"}, "input_image": {"_type": "Image"},
                "output_images": {"feature": {"_type": "Image"}, "_type": "Sequence"},
                "task_type": {"dtype": "string", "_type": "Value"}, "dimension": {"dtype": "string", "_type": "Value"}}
    (root / "dataset_info.json").write_text(json.dumps({"features": features, "splits": {"train": {"num_examples": len(table)}}}))
    (root / "state.json").write_text(json.dumps({"_data_files": [{"filename": "data-00000-of-00001.arrow"}],
                                                 "_fingerprint": "0123456789abcdef", "_format_columns": None,
                                                 "_format_kwargs": {}, "_format_type": None,
                                                 "_output_all_columns": False, "_split": "train"}))
    return root


#: (group, K, human order of letters best first); a tie group for K=2
EDITREWARD_GROUPS = (("g2a", 2, "A>B"), ("g2b", 2, "B>A"), ("g2c", 2, "A=B"), ("g3a", 3, "C>A>B"), ("g4a", 4, "B>A>D>C"))


def write_editreward_bench(root: Path) -> Path:
    """Parquet under 2pair/, 3pair/, 4pair/ with the published columns; a
    3-way group has rows AvsB, AvsC, BvsC whose ``ranking`` follows the group's order."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema([("id", pa.string()), ("instruction", pa.string()), ("source_image", _image_type()),
                        ("candidate_1", _image_type()), ("candidate_2", _image_type()), ("ranking", pa.string()),
                        ("comparison_type", pa.string()), ("score_1", pa.float64()), ("score_2", pa.float64()),
                        ("model_1", pa.string()), ("model_2", pa.string()), ("dataset", pa.string())])
    by_k: dict[int, list[dict[str, Any]]] = {2: [], 3: [], 4: []}
    for g, (name, k, order) in enumerate(EDITREWARD_GROUPS):
        letters = "ABCD"[:k]
        src = png(300 + g)
        cand = {x: png(400 + 10 * g + i) for i, x in enumerate(letters)}
        rank = {x: order.replace("=", ">").split(">").index(x) for x in letters}
        for n, (x, y) in enumerate(combinations(letters, 2)):
            if "=" in order:
                ranking = f"{x}={y}"
            else:
                ranking = f"{x}>{y}" if rank[x] < rank[y] else f"{y}>{x}"
            pid = name if k == 2 else f"{name}_{n}"
            by_k[k].append({"id": pid, "instruction": f"instruction {name}", "source_image": {"bytes": src, "path": None},
                            "candidate_1": {"bytes": cand[x], "path": None}, "candidate_2": {"bytes": cand[y], "path": None},
                            "ranking": ranking, "comparison_type": f"{x}vs{y}", "score_1": float(4 - rank[x]),
                            "score_2": float(4 - rank[y]), "model_1": f"model_{x}", "model_2": f"model_{y}",
                            "dataset": f"{k}pair"})
    for k, rows in by_k.items():
        folder = root / f"{k}pair"
        folder.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), folder / "train-00000-of-00001.parquet")
    return root


def write_mmrb2(root: Path, n: int = 4) -> Path:
    """``edit.json`` as MMRB2's build_from_hf.py writes it, with one pair whose
    prompt holds two input images (a composition)."""
    (root / "images").mkdir(parents=True, exist_ok=True)
    (root / "input_images").mkdir(parents=True, exist_ok=True)
    pairs = []
    for i in range(n):
        pid = f"emu-edit_{i}_model-x_{i}_model-y_{i + 1}"
        (root / "input_images" / f"{pid}_prompt_0.png").write_bytes(png(500 + i))
        content = [["text", f"Make the sky pink {i}."], ["image", f"input_images/{pid}_prompt_0.png"]]
        if i == n - 1:
            (root / "input_images" / f"{pid}_prompt_1.png").write_bytes(png(550 + i))
            content.append(["image", f"input_images/{pid}_prompt_1.png"])
        for side in "ab":
            (root / "images" / f"{pid}_{side}_0.png").write_bytes(png(600 + 2 * i + (side == "b")))
        pairs.append({"id": pid, "prompt_content": content, "prompt_source": "emu-edit",
                      "prompt_metadata": {"id": i, "category": "global"},
                      "response_a": {"model_name": "model-x", "response_content": [["image", f"images/{pid}_a_0.png"]]},
                      "response_b": {"model_name": "model-y", "response_content": [["image", f"images/{pid}_b_0.png"]]},
                      "chosen": "A" if i % 2 == 0 else "B", "human_annotations": [6, 5, 6]})
    (root / "edit.json").write_text(json.dumps({"pairs": pairs}, indent=2))
    return root

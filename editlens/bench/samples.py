"""A tiny benchmark in its owner's published layout, made from the sample edits shipped in the
package (``editlens bench sample gedit --out DIR``): the quickstart's benchmark
(docs/quickstart-loop.md), and a way to try ``edit --bench`` / ``bench run`` without a download.

It is GEdit-Bench's hub layout exactly (``data/train-00000-of-00001.parquet``, the ``datasets``
image struct ``{bytes, path}`` in ``input_image`` and ``input_image_raw``, the release's columns);
its content is four sample photos with their instructions, not GEdit-Bench's cases.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from editlens.errors import InputError

#: sample id -> (GEdit task type, in the intersection subset)
_GEDIT_CASES = {"cat_seat": ("subject-add", True), "hydrant": ("background_change", True),
                "pencil_case": ("motion_change", False), "dragonfruit": ("motion_change", True)}


def write_gedit_sample(out: str | Path) -> Path:
    """GEdit-Bench's published layout under ``out`` with the package's four sample sources (English)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from editlens.core.io import atomic_write, read_jsonl
    from editlens.paths import samples_dir

    root = samples_dir()
    rows = read_jsonl(root / "manifest.jsonl")
    table: dict[str, list[Any]] = {k: [] for k in ("key", "task_type", "instruction", "instruction_language",
                                                  "input_image", "input_image_raw", "Intersection_exist")}
    for row in rows:
        if row["id"] not in _GEDIT_CASES:
            continue
        task, inter = _GEDIT_CASES[row["id"]]
        data = (root / row["source"]).read_bytes()
        image = {"bytes": data, "path": Path(row["source"]).name}
        for key, value in (("key", row["id"]), ("task_type", task), ("instruction", row["instruction"]),
                           ("instruction_language", "en"), ("input_image", image), ("input_image_raw", image),
                           ("Intersection_exist", inter)):
            table[key].append(value)
    struct = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    arrow = pa.table({k: pa.array(v, type=struct) if k.startswith("input_image") else pa.array(v)
                      for k, v in table.items()})
    path = Path(out) / "data" / "train-00000-of-00001.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda fh: pq.write_table(arrow, fh), mode="wb")
    return Path(out)


#: benchmark name -> the writer of its sample
SAMPLES = {"gedit": write_gedit_sample}


def write_sample(name: str, out: str | Path) -> Path:
    """The sample of benchmark ``name`` under ``out`` (a new or empty folder)."""
    if name not in SAMPLES:
        raise InputError(f"no sample of benchmark {name!r}; samples exist for: {', '.join(sorted(SAMPLES))}")
    o = Path(out)
    if o.exists() and (not o.is_dir() or any(o.iterdir())):
        raise InputError(f"{o} exists and is not an empty folder; give a new one")
    return SAMPLES[name](o)

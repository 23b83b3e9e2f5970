"""Manifests in the field's published formats: parquet / arrow files and folders with embedded
images, `datasets` folders, JSON beside image folders, and folders of editors' outputs.

Every file here is built in its owner's layout (column names, nesting, image encodings, file
names) with `datasets` and pyarrow; images are small PNGs whose pixels are known, so a read is
checked by the pixels it decodes."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from editlens.cli.main import app
from editlens.core.embedded import TableImage, parse_ref
from editlens.core.images import load_image
from editlens.data.manifest import read_manifest, write_manifest
from editlens.errors import InputError, ManifestError

datasets = pytest.importorskip("datasets")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

runner = CliRunner()
COLOURS = [(200, 30, 30), (30, 200, 30), (30, 30, 200)]
TASKS = ["color_alter", "subject-add", "color_alter"]
LANGS = ["en", "cn", "en"]


def png(colour, size=(24, 16), seed: int | None = None) -> bytes:
    arr = np.zeros((size[1], size[0], 3), np.uint8) + np.array(colour, np.uint8)
    if seed is not None:  # some texture, so metrics differ between edits
        arr = (arr + np.random.default_rng(seed).integers(0, 60, arr.shape)).clip(0, 255).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, "PNG")
    return buf.getvalue()


def pixel(value) -> list[int]:
    return load_image(value)[0][0, 0].tolist()


def gedit_features():
    F = datasets
    return F.Features({"key": F.Value("string"), "input_image": F.Image(), "input_image_raw": F.Image(),
                       "instruction": F.Value("string"), "task_type": F.Value("string"),
                       "instruction_language": F.Value("string"), "Intersection_exist": F.Value("bool")})


def gedit_rows() -> dict:
    keys = ["k0", "k1", "k2"]
    return {"key": keys,
            "input_image": [{"bytes": png(c), "path": f"{k}.png"} for k, c in zip(keys, COLOURS)],
            "input_image_raw": [{"bytes": png(c, (48, 32)), "path": None} for c in COLOURS],
            "instruction": ["make the car red", "add a cat", "make it blue"],
            "task_type": TASKS, "instruction_language": LANGS, "Intersection_exist": [True, False, True]}


@pytest.fixture(scope="module")
def gedit(tmp_path_factory) -> Path:
    """GEdit-Bench as `datasets` publishes it: a save_to_disk folder, and the same rows as parquet."""
    root = tmp_path_factory.mktemp("gedit")
    ds = datasets.Dataset.from_dict(gedit_rows(), features=gedit_features())
    ds.save_to_disk(str(root / "GEdit-Bench"))
    # a hub snapshot: the snapshot's files are links to blobs named by their hash
    (root / "hub" / "data").mkdir(parents=True)
    (root / "blobs").mkdir()
    ds.to_parquet(str(root / "blobs" / "9f2c4e"))
    (root / "hub" / "data" / "train-00000-of-00001.parquet").symlink_to(root / "blobs" / "9f2c4e")
    # editors' outputs, one folder per editor; editor B did not write k1
    for model, shade in (("editorA", 0), ("editorB", 40)):
        (root / "outputs" / model).mkdir(parents=True)
        for i, k in enumerate(["k0", "k1", "k2"]):
            if model == "editorB" and k == "k1":
                continue
            (root / "outputs" / model / f"{k}.png").write_bytes(png(tuple(min(255, x + shade) for x in COLOURS[i]), seed=i))
    return root


# ------------------------------------------------------------------------------------------ each format reads

def test_datasets_folder_and_hub_parquet_read_the_same_rows(gedit):
    a = read_manifest(gedit / "GEdit-Bench", columns="id=key,source=input_image,edited=input_image_raw",
                      check_files=False)
    b = read_manifest(gedit / "hub", columns="id=key,source=input_image,edited=input_image_raw")
    for rep in (a, b):
        assert rep.unit == "row" and rep.image_columns == ["input_image", "input_image_raw"]
        assert [s.id for s in rep.samples] == ["k0", "k1", "k2"]
        s = rep.samples[1]
        assert isinstance(s.source, TableImage) and s.source.row == 1 and s.source.column == "input_image"
        assert pixel(s.source) == list(COLOURS[1]) and load_image(s.edited)[0].shape == (32, 48, 3)
        # every other column is kept, with its type
        assert s.metadata == {"task_type": "subject-add", "instruction_language": "cn", "Intersection_exist": False}
    assert a.samples[0].source.file.endswith(".arrow") and b.samples[0].source.file.endswith(".parquet")


def test_arrow_files_stream_and_file_format(gedit, tmp_path):
    shard = next((gedit / "GEdit-Bench").glob("*.arrow"))  # datasets writes IPC streams
    rep = read_manifest(shard, columns="id=key,source=input_image,edited=input_image_raw")
    assert [pixel(s.source) for s in rep.samples] == [list(c) for c in COLOURS]
    # the `datasets` cache's layout: <name>-<split>.arrow beside dataset_info.json
    cache = tmp_path / "stepfun-ai___g_edit-bench" / "default" / "0.0.0" / "0123abcd"
    cache.mkdir(parents=True)
    (cache / "g_edit-bench-train.arrow").write_bytes(shard.read_bytes())
    (cache / "dataset_info.json").write_text((gedit / "GEdit-Bench" / "dataset_info.json").read_text())
    rep = read_manifest(tmp_path / "stepfun-ai___g_edit-bench", columns="id=key,source=input_image,edited=input_image")
    assert [pixel(s.source) for s in rep.samples] == [list(c) for c in COLOURS] and rep.split is None
    # the IPC file format (pyarrow.ipc.new_file), with plain binary image columns
    table = pa.table({"id": ["a", "b"], "src": pa.array([png(COLOURS[0]), png(COLOURS[2])], pa.binary()),
                      "out": pa.array([png(COLOURS[1]), png(COLOURS[1])], pa.binary()), "instruction": ["x", "y"]})
    with pa.OSFile(str(tmp_path / "t.arrow"), "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
        w.write_table(table)
    rep = read_manifest(tmp_path / "t.arrow", columns="source=src,edited=out")
    assert [pixel(s.source) for s in rep.samples] == [list(COLOURS[0]), list(COLOURS[2])]


def test_parquet_folder_with_splits_needs_a_split(tmp_path):
    """Emu Edit's hub layout: data/validation-*.parquet and data/test-*.parquet, no output image."""
    F = datasets
    feats = F.Features({"image": F.Image(), "instruction": F.Value("string"), "task": F.Value("string"),
                        "input_caption": F.Value("string"), "output_caption": F.Value("string"),
                        "idx": F.Value("int64"), "hash": F.Value("string"), "split": F.Value("string")})
    (tmp_path / "data").mkdir()
    for split, n, first in (("validation", 1, 0), ("test", 2, 1)):
        for shard in range(n):
            rows = {"image": [{"bytes": png(COLOURS[first + shard]), "path": None}], "instruction": [f"edit {split}"],
                    "task": ["background"], "input_caption": ["a dog"], "output_caption": ["a dog on a beach"],
                    "idx": [first + shard], "hash": [f"h{first + shard}"], "split": [split]}
            datasets.Dataset.from_dict(rows, features=feats).to_parquet(
                str(tmp_path / "data" / f"{split}-{shard:05d}-of-{n:05d}.parquet"))
    with pytest.raises(InputError, match=r"holds the splits test, validation; choose one with --split"):
        read_manifest(tmp_path, columns="source=image,edited=image")
    rep = read_manifest(tmp_path, split="test", columns="id=idx,source=image,edited=image")
    assert [s.id for s in rep.samples] == ["1", "2"]
    assert [pixel(s.source) for s in rep.samples] == [list(COLOURS[1]), list(COLOURS[2])]
    assert rep.samples[0].metadata["input_caption"] == "a dog" and rep.split == "test"


def test_datasets_dict_folder_and_class_labels(tmp_path):
    """A DatasetDict save_to_disk folder (MagicBrush's train/dev); ClassLabel columns give their names."""
    F = datasets
    feats = F.Features({"img_id": F.Value("string"), "turn_index": F.Value("int32"), "source_img": F.Image(),
                        "mask_img": F.Image(), "instruction": F.Value("string"), "target_img": F.Image(),
                        "kind": F.ClassLabel(names=["local", "global"])})

    def rows(n):
        return {"img_id": [f"{i:06d}" for i in range(n)], "turn_index": [1] * n,
                "source_img": [{"bytes": png(COLOURS[i]), "path": None} for i in range(n)],
                "mask_img": [{"bytes": png((255, 255, 255)), "path": None}] * n, "instruction": ["add a hat"] * n,
                "target_img": [{"bytes": png(COLOURS[(i + 1) % 3]), "path": None} for i in range(n)],
                "kind": [i % 2 for i in range(n)]}
    datasets.DatasetDict({"train": datasets.Dataset.from_dict(rows(3), features=feats),
                          "dev": datasets.Dataset.from_dict(rows(2), features=feats)}).save_to_disk(str(tmp_path / "mb"))
    with pytest.raises(InputError, match=r"splits train, dev; choose one with --split"):
        read_manifest(tmp_path / "mb", columns="source=source_img,edited=target_img")
    rep = read_manifest(tmp_path / "mb", split="dev", columns="id=img_id,source=source_img,edited=target_img,"
                                                             "reference=target_img,mask=mask_img")
    assert [s.id for s in rep.samples] == ["000000", "000001"]
    assert pixel(rep.samples[1].edited) == list(COLOURS[2]) and pixel(rep.samples[1].reference) == list(COLOURS[2])
    assert rep.samples[1].metadata["kind"] == "global"  # the label's name, not 1
    assert rep.samples[1].metadata["turn_index"] == 1
    # the mask feeds the masked metrics straight from the table
    from editlens.metrics.masks import sample_mask

    assert isinstance(rep.samples[0].metadata["mask"], TableImage)
    assert sample_mask(rep.samples[0].metadata, 16, 24).all()


def test_plain_struct_parquet_without_hub_metadata_and_list_columns(tmp_path):
    """{bytes, path} structs written by pyarrow alone (no `datasets` metadata), a list-of-images column
    (EditScore's output_images) picked with COLUMN[N], and a path-only cell resolved beside the file."""
    (tmp_path / "imgs").mkdir()
    (tmp_path / "imgs" / "b.png").write_bytes(png(COLOURS[2]))
    img = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    table = pa.table({
        "id": ["p0", "p1"], "instruction": ["x", "y"],
        "input_image": pa.array([{"bytes": png(COLOURS[0]), "path": None},
                                 {"bytes": None, "path": "imgs/b.png"}], img),
        "output_images": pa.array([[{"bytes": png(COLOURS[1]), "path": None}, {"bytes": png(COLOURS[2]), "path": None}],
                                   [{"bytes": png(COLOURS[0]), "path": None}, {"bytes": png(COLOURS[1]), "path": None}]],
                                  pa.list_(img))})
    pq.write_table(table, tmp_path / "pairs.parquet")
    rep = read_manifest(tmp_path / "pairs.parquet", columns="source=input_image,edited=output_images[1]")
    assert [pixel(s.source) for s in rep.samples] == [list(COLOURS[0]), list(COLOURS[2])]
    assert [pixel(s.edited) for s in rep.samples] == [list(COLOURS[2]), list(COLOURS[1])]
    with pytest.raises(ManifestError, match=r"row 0: edited holds a list of 2 image\(s\); pick one"):
        read_manifest(tmp_path / "pairs.parquet", columns="source=input_image,edited=output_images")
    with pytest.raises(ManifestError, match=r"holds 2 item\(s\), so 'output_images\[5\]' picks nothing"):
        read_manifest(tmp_path / "pairs.parquet", columns="source=input_image,edited=output_images[5]")


def test_json_and_image_folders(tmp_path):
    """ImgEdit-Bench's {key: {id, prompt, edit_type}} beside its image folders, and KRIS-Bench's
    {category}/annotation.json, each category's images in its folder."""
    bench = tmp_path / "singleturn"
    (bench / "animal").mkdir(parents=True)
    (bench / "animal" / "000342021.jpg").write_bytes(png(COLOURS[0]))
    (bench / "animal" / "000342022.jpg").write_bytes(png(COLOURS[1]))
    (bench / "basic_edit.json").write_text(json.dumps({
        "1": {"id": "animal/000342021.jpg", "prompt": "make the dog's fur white", "edit_type": "adjust"},
        "2": {"id": "animal/000342022.jpg", "prompt": "replace the dog with a cat", "edit_type": "replace"}}))
    (tmp_path / "outs" / "editorA").mkdir(parents=True)
    for k in ("1", "2"):
        (tmp_path / "outs" / "editorA" / f"{k}.png").write_bytes(png(COLOURS[2]))
    rep = read_manifest(bench / "basic_edit.json", columns="id=key,source=id,instruction=prompt",
                        edits=tmp_path / "outs")
    assert [s.id for s in rep.samples] == ["editorA/1", "editorA/2"]
    assert [pixel(s.source) for s in rep.samples] == [list(COLOURS[0]), list(COLOURS[1])]
    assert rep.samples[1].metadata == {"edit_type": "replace", "row_id": "2"} and rep.samples[1].model == "editorA"
    from editlens.data.edit_types import edit_type_of

    assert [edit_type_of(s) for s in rep.samples] == ["attribute", "replace"]  # ImgEdit's own type names

    kris = tmp_path / "KRIS_Bench"
    for cat, colour in (("color_change", COLOURS[0]), ("count_change", COLOURS[1])):
        (kris / cat).mkdir(parents=True)
        (kris / cat / "1.jpg").write_bytes(png(colour))
        (kris / cat / "annotation.json").write_text(json.dumps(
            {"1": {"ori_img": "1.jpg", "ins_en": f"do {cat}", "explain_en": "because"}}))
    rep = read_manifest(kris, columns="source=ori_img,edited=ori_img,instruction=ins_en")
    assert [(s.id, s.metadata["subset"], s.metadata["key"]) for s in rep.samples] == [
        ("color_change/1", "color_change", "1"), ("count_change/1", "count_change", "1")]
    assert [pixel(s.source) for s in rep.samples] == [list(COLOURS[0]), list(COLOURS[1])]


def test_aurora_bench_parquet_keeps_its_source_column(tmp_path):
    """AURORA-Bench: image bytes in `input`, no id, and a `source` column naming the dataset an edit is
    from; mapped source=input, the file's own `source` stays as `source_in_file` (groups with --by)."""
    img = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    pq.write_table(pa.table({"input": pa.array([{"bytes": png(c), "path": "input.png"} for c in COLOURS], img),
                             "instruction": ["move the cup left", "add a ball", "remove the cube"],
                             "source": ["something", "clevr", "kubric"]}), tmp_path / "test.parquet")
    rep = read_manifest(tmp_path / "test.parquet", columns="source=input,edited=input")
    assert [s.id for s in rep.samples] == ["row-0", "row-1", "row-2"]
    assert [s.metadata["source_in_file"] for s in rep.samples] == ["something", "clevr", "kubric"]
    assert pixel(rep.samples[2].source) == list(COLOURS[2])


def test_table_references_round_trip_through_a_jsonl_manifest(gedit, tmp_path):
    rep = read_manifest(gedit / "hub", columns="id=key,source=input_image,edited=input_image_raw")
    out = write_manifest(rep.samples, tmp_path / "m.jsonl")
    line = json.loads(out.read_text().splitlines()[0])
    assert parse_ref(line["source"]) == rep.samples[0].source
    back = read_manifest(out)
    assert [s.source for s in back.samples] == [s.source for s in rep.samples]
    assert back.samples[2].metadata["task_type"] == "color_alter"


# ------------------------------------------------------------------------------------------ errors

def test_corrupt_image_bytes_name_file_row_and_column(tmp_path):
    img = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    table = pa.table({"id": ["a", "b"], "instruction": ["x", "y"],
                      "src": pa.array([{"bytes": png(COLOURS[0]), "path": None},
                                       {"bytes": b"these bytes are no image", "path": None}], img)})
    f = tmp_path / "bad.parquet"
    pq.write_table(table, f)
    rep = read_manifest(f, columns="source=src,edited=src")  # nothing is decoded while reading
    with pytest.raises(InputError, match=re.escape(f"source {f} row 1 column src: not an image")):
        rep.samples[1].load()
    out = tmp_path / "run"
    res = runner.invoke(app, ["run", str(f), "--columns", "source=src,edited=src", "--out", str(out),
                              "--metrics", "l1", "--no-progress"])
    assert res.exit_code == 3, res.output  # the sample failed, the other was scored
    rows = {json.loads(x)["id"]: json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()}
    assert rows["a"]["scores"]["l1"]["status"] == "scored"
    assert rows["b"]["scores"]["l1"]["status"] == "failed"
    assert f"{f} row 1 column src: not an image" in rows["b"]["scores"]["l1"]["reason"]


def test_unknown_formats_and_empty_cells(tmp_path):
    (tmp_path / "m.xlsx").write_text("x")
    with pytest.raises(InputError, match=r"unknown manifest format '.xlsx'"):
        read_manifest(tmp_path / "m.xlsx")
    with pytest.raises(InputError, match=r"no parquet, arrow or JSON files"):
        read_manifest(tmp_path / "nothing" if (tmp_path / "nothing").mkdir() is None else tmp_path)
    shard = tmp_path / "n.arrow"
    img = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    table = pa.table({"instruction": ["x"], "src": pa.array([None], img)})
    with pa.OSFile(str(shard), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    with pytest.raises(ManifestError, match=r"row 0: missing 'source'"):  # an empty image cell is a missing image
        read_manifest(shard, columns="source=src,edited=src")
    with pytest.raises(InputError, match=r"n.arrow row 0 column src: no image"):
        load_image(TableImage(str(shard), 0, "src"))


# ------------------------------------------------------------------------------------------ runs

def _results(out: Path) -> dict[str, dict]:
    return {r["id"]: r for r in map(json.loads, (out / "results.jsonl").read_text().splitlines())}


def test_parquet_with_embedded_images_gives_the_jsonl_results(tmp_path):
    files = tmp_path / "files"
    files.mkdir()
    rows = []
    for i, c in enumerate(COLOURS):
        (files / f"s{i}.png").write_bytes(png(c, seed=10 + i))
        (files / f"e{i}.png").write_bytes(png(c, seed=20 + i))
        rows.append({"id": f"r{i}", "source": f"files/s{i}.png", "edited": f"files/e{i}.png",
                     "instruction": "make it brighter", "task_type": TASKS[i], "instruction_language": LANGS[i]})
    (tmp_path / "m.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    F = datasets
    feats = F.Features({"id": F.Value("string"), "input_image": F.Image(), "output_image": F.Image(),
                        "instruction": F.Value("string"), "task_type": F.Value("string"),
                        "instruction_language": F.Value("string")})
    ds = datasets.Dataset.from_dict({
        "id": [r["id"] for r in rows],
        "input_image": [{"bytes": (tmp_path / r["source"]).read_bytes(), "path": None} for r in rows],
        "output_image": [{"bytes": (tmp_path / r["edited"]).read_bytes(), "path": None} for r in rows],
        "instruction": [r["instruction"] for r in rows], "task_type": TASKS, "instruction_language": LANGS},
        features=feats)
    ds.to_parquet(str(tmp_path / "m.parquet"))
    args = ["--metrics", "l1,l2,psnr", "--no-progress", "--export", "jsonl,csv,parquet"]
    ra = runner.invoke(app, ["run", str(tmp_path / "m.jsonl"), "--out", str(tmp_path / "a"), *args])
    rb = runner.invoke(app, ["run", str(tmp_path / "m.parquet"), "--out", str(tmp_path / "b"),
                             "--columns", "source=input_image,edited=output_image", *args])
    assert ra.exit_code == 0 and rb.exit_code == 0, ra.output + rb.output
    a, b = _results(tmp_path / "a"), _results(tmp_path / "b")
    assert list(a) == list(b) == ["r0", "r1", "r2"]
    for sid in a:
        assert a[sid]["scores"] == b[sid]["scores"]
        assert a[sid]["task_type"] == b[sid]["task_type"] == TASKS[int(sid[1])]
    assert parse_ref(b["r1"]["images"]["source"]) == TableImage(str((tmp_path / "m.parquet").resolve()), 1, "input_image")
    assert a["r1"]["images"]["source"] == str(tmp_path / "files" / "s1.png")
    # exports carry every extra column
    import csv

    with open(tmp_path / "b" / "results_long.csv") as fh:
        long_csv = list(csv.DictReader(fh))
    assert {(r["sample_id"], r["task_type"], r["instruction_language"]) for r in long_csv} == \
        {(f"r{i}", TASKS[i], LANGS[i]) for i in range(3)}
    assert pq.read_table(tmp_path / "b" / "results_long.parquet").column("task_type").to_pylist()[:1] == [TASKS[0]]
    first = json.loads((tmp_path / "b" / "results_long.jsonl").read_text().splitlines()[0])
    assert first["instruction_language"] == LANGS[0]
    # --by any column
    res = runner.invoke(app, ["runs", "summary", str(tmp_path / "b"), "--by", "task_type", "--json"])
    assert res.exit_code == 0, res.output
    table = json.loads(res.stdout)
    l1 = {r["group"]: r for r in table if r["evaluator"] == "l1"}
    assert {g: r["n"] for g, r in l1.items()} == {"color_alter": 2, "subject-add": 1}
    by_id = {sid: b[sid]["scores"]["l1"]["value"] for sid in b}
    assert l1["color_alter"]["mean"] == pytest.approx((by_id["r0"] + by_id["r2"]) / 2)
    res = runner.invoke(app, ["runs", "summary", str(tmp_path / "b"), "--by", "nope"])
    assert res.exit_code == 2
    assert "--by 'nope': the run has no such column; group by one of" in res.output
    assert "instruction_language" in res.output and "task_type" in res.output


def test_edits_folder_with_a_missing_output(gedit, tmp_path):
    out = tmp_path / "run"
    res = runner.invoke(app, ["run", str(gedit / "GEdit-Bench"), "--columns", "id=key,source=input_image",
                              "--edits", str(gedit / "outputs"), "--out", str(out), "--metrics", "l1",
                              "--no-progress"])
    assert res.exit_code == 0, res.output
    looked = gedit / "outputs" / "editorB" / "k1.png"
    assert f"skipped edit editorB/k1: no output of editorB for k1: {looked}" in res.output
    rows = _results(out)
    assert sorted(rows) == ["editorA/k0", "editorA/k1", "editorA/k2", "editorB/k0", "editorB/k2"]
    assert rows["editorB/k2"]["model"] == "editorB" and rows["editorB/k2"]["row_id"] == "k2"
    assert rows["editorA/k1"]["task_type"] == "subject-add"
    inputs = json.loads((out / "manifest.json").read_text())["inputs"]
    assert inputs["missing_edits"] == [{"id": "k1", "model": "editorB", "looked_for": str(looked)}]
    assert inputs["manifest_options"]["edits"] == str((gedit / "outputs").resolve())
    res = runner.invoke(app, ["runs", "summary", str(out), "--by", "instruction_language", "--json"])
    groups = {(r["group"], r["evaluator"]): r["n"] for r in json.loads(res.stdout)}
    assert groups == {("en", "l1"): 4, ("cn", "l1"): 1}
    # a run whose results.jsonl predates the columns: they are read again from its manifest, as it was read
    (out / "results.jsonl").write_text("".join(json.dumps({"id": k, "scores": r["scores"]}) + "\n"
                                               for k, r in rows.items()))
    res = runner.invoke(app, ["runs", "summary", str(out), "--by", "instruction_language", "--json"])
    assert {(r["group"], r["evaluator"]): r["n"] for r in json.loads(res.stdout)} == groups


def test_report_of_a_parquet_run_shows_its_images(gedit, tmp_path):
    from editlens.reporting.collect import collect_run
    from editlens.reporting.html import write_run_report

    out = tmp_path / "run"
    res = runner.invoke(app, ["run", str(gedit / "hub"), "--columns", "id=key,source=input_image",
                              "--edits", str(gedit / "outputs"), "--out", str(out), "--metrics", "l1",
                              "--no-progress"])
    assert res.exit_code == 0, res.output
    data = collect_run(out, by="task_type")
    sample = next(s for s in data["samples"] if s["id"] == "editorA/k1")
    assert parse_ref(sample["images"]["source"]) == TableImage(
        str(gedit / "hub" / "data" / "train-00000-of-00001.parquet"), 1, "input_image")
    assert sample["category"] == "subject-add" and data["categories"] == ["color_alter", "subject-add"]
    assert sample["columns"]["instruction_language"] == "cn"
    with pytest.raises(InputError, match=r"--by 'nope': .* group by one of .*task_type"):
        collect_run(out, by="nope")
    page = write_run_report(out, tmp_path / "r.html", images="copy", by="task_type").read_text()
    # every image got a thumbnail (none could not be read) and a full-size copy beside the report
    assert "cannot be read" not in page
    assert '<option value="type">task_type</option>' in page  # the leaderboards group by the column asked for
    assert data["completeness"]["n_missing_edits"] == 1
    assert f"editorB/k1: {gedit / 'outputs' / 'editorB' / 'k1.png'} not found" in page
    doc = json.loads(re.search(r'<script type="application/json" id="report-data">(.*?)</script>', page, re.S).group(1))
    card = next(s for s in doc["samples"] if s["id"] == "editorA/k1")
    assert card["columns"]["instruction_language"] == "cn" and card["category"] == "subject-add"
    assert set(card["images"]) == {"source", "edited"} and all("t" in v and "href" in v for v in card["images"].values())
    copies = sorted(p.name for p in (tmp_path / "r_images").iterdir())
    assert len(copies) == 3 + 5 and sum(n.endswith("_input_image.png") for n in copies) == 3
    copied = next((tmp_path / "r_images").glob("*_r1_input_image.png"))
    assert pixel(str(copied)) == list(COLOURS[1])
    # `editlens view` serves the embedded image's own bytes
    import urllib.request

    from editlens.reporting.serve import ReportServer

    server = ReportServer(out, by="task_type")
    server.serve_in_background()
    try:
        n = server.images.index(sample["images"]["source"])
        got = urllib.request.urlopen(server.url + f"image/{n}", timeout=10)
        assert got.headers["Content-Type"] == "image/png"
        assert list(Image.open(io.BytesIO(got.read())).getpixel((0, 0))) == list(COLOURS[1])
    finally:
        server.close()


def test_probe_builds_controls_on_table_images(gedit, tmp_path):
    out = tmp_path / "probe"
    res = runner.invoke(app, ["probe", str(gedit / "GEdit-Bench"), "--columns", "id=key,source=input_image",
                              "--edits", str(gedit / "outputs"), "--out", str(out), "--metrics", "l1",
                              "--controls", "noop,blank", "--no-progress", "--n-boot", "10",
                              "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads((out / "probe.json").read_text())
    assert not doc.get("not_built"), doc.get("not_built")
    assert doc["evaluators"]["l1"]["controls"]["noop"]["n"] == 5  # each of the 5 written edits
    assert "skipped edit editorB/k1" in res.output


def test_meta_eval_pointwise_by_a_manifest_column(tmp_path):
    from scipy import stats

    pred = [0.1, 0.4, 0.2, 0.9, 0.5, 0.3, 0.8]
    human = [1.0, 3.0, 2.0, 5.0, 2.0, 4.0, 3.0]
    langs = ["en", "en", "en", "cn", "cn", "cn", "cn"]
    with open(tmp_path / "results.jsonl", "w") as fh:  # as `editlens run` writes it: the manifest's columns kept
        for i, (p, lang) in enumerate(zip(pred, langs)):
            fh.write(json.dumps({"id": f"e{i}", "model": "m" + str(i % 2), "instruction": "x",
                                 "scores": {"l1": {"value": p, "status": "scored"}}, "instruction_language": lang}) + "\n")
    with open(tmp_path / "human.jsonl", "w") as fh:
        for i, h in enumerate(human):
            fh.write(json.dumps({"id": f"e{i}", "model": "m" + str(i % 2), "human": h}) + "\n")
    res = runner.invoke(app, ["meta-eval", "pointwise", "--human", str(tmp_path / "human.jsonl"), "--predictions",
                              str(tmp_path / "results.jsonl"), "--metric", "l1", "--by", "instruction_language",
                              "--n-boot", "20", "--json"])
    assert res.exit_code == 0, res.output
    groups = json.loads(res.stdout)["by_column"]["groups"]
    assert {g: v["n"] for g, v in groups.items()} == {"cn": 4, "en": 3}
    # l1 is lower-is-better: the correlation is oriented so that agreement reads positive
    assert groups["cn"]["spearman"]["value"] == pytest.approx(-stats.spearmanr(pred[3:], human[3:])[0])
    res = runner.invoke(app, ["meta-eval", "pointwise", "--human", str(tmp_path / "human.jsonl"), "--predictions",
                              str(tmp_path / "results.jsonl"), "--metric", "l1", "--by", "task"])
    assert res.exit_code == 2 and "--by 'task'" in res.output and "instruction_language" in res.output


def test_compare_pairs_from_a_published_pair_table(tmp_path):
    """EditScore's EditReward-Bench layout: input_image and output_images (two) embedded, one row per pair."""
    F = datasets
    feats = F.Features({"key": F.Sequence(F.Value("string")), "instruction": F.Value("string"),
                        "input_image": F.Image(), "output_images": F.Sequence(F.Image()),
                        "task_type": F.Value("string"), "dimension": F.Value("string")})
    src = [png(COLOURS[0], seed=1), png(COLOURS[1], seed=2)]
    ds = datasets.Dataset.from_dict({
        "key": [["e1", "e2"], ["e3", "e4"]], "instruction": ["make it red", "make it green"],
        "input_image": [{"bytes": b, "path": None} for b in src],
        # pair 0: the first output is the source itself (L1 0); pair 1: the second is
        "output_images": [[{"bytes": src[0], "path": None}, {"bytes": png((0, 0, 0)), "path": None}],
                          [{"bytes": png((255, 255, 255)), "path": None}, {"bytes": src[1], "path": None}]],
        "task_type": ["color_alter"] * 2, "dimension": ["overall"] * 2}, features=feats)
    ds.to_parquet(str(tmp_path / "pairs.parquet"))
    res = runner.invoke(app, ["compare", "--pairs", str(tmp_path / "pairs.parquet"), "--metric", "l1", "--columns",
                              "source=input_image,edited_a=output_images[0],edited_b=output_images[1]",
                              "--out", str(tmp_path / "v.jsonl")])
    assert res.exit_code == 0, res.output
    verdicts = [json.loads(x) for x in (tmp_path / "v.jsonl").read_text().splitlines()]
    assert [(v["id"], v["label"], v["score_a"] == 0.0, v["score_b"] == 0.0) for v in verdicts] == [
        ("0", 1, True, False), ("1", -1, False, True)]
    res = runner.invoke(app, ["compare", "--pairs", str(tmp_path / "pairs.parquet"), "--metric", "l1"])
    assert res.exit_code == 2 and "a pair needs source, edited_a, edited_b" in res.output
    assert "map them with --columns" in res.output

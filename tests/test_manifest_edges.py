"""Manifest rough edges: encodings, BOM, column mapping, truncated lines,
directories given as images, malformed boxes."""

import json

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from editlens.cli.main import app
from editlens.data.manifest import read_manifest
from editlens.errors import InputError, ManifestError
from editlens.metrics.masks import sample_mask

runner = CliRunner()


@pytest.fixture
def images(tmp_path):
    d = tmp_path / "imgs"
    d.mkdir()
    for name in ("a", "b"):
        Image.fromarray(np.full((8, 8, 3), 10 if name == "a" else 200, np.uint8)).save(d / f"{name}.png")
    return d


def test_utf8_bom_is_accepted(tmp_path, images):
    p = tmp_path / "m.csv"
    p.write_bytes("\ufeffid,source,edited,instruction\nx,imgs/a.png,imgs/b.png,add a hat\n".encode("utf-8"))
    (s,) = read_manifest(p).samples
    assert s.id == "x" and s.instruction == "add a hat"
    j = tmp_path / "m.jsonl"
    j.write_bytes(b"\xef\xbb\xbf" + json.dumps({"id": "y", "source": "imgs/a.png", "edited": "imgs/b.png",
                                                "instruction": "go"}).encode() + b"\n")
    assert read_manifest(j).samples[0].id == "y"


def test_non_utf8_csv_names_file_line_and_fix(tmp_path, images):
    p = tmp_path / "m.csv"
    p.write_bytes("id,source,edited,instruction\nx,imgs/a.png,imgs/b.png,ok\n"
                  "y,imgs/a.png,imgs/b.png,caf\u00e9 au lait\n".encode("latin-1"))
    with pytest.raises(InputError) as info:
        read_manifest(p)
    msg = str(info.value)
    assert str(p) in msg and "line 3" in msg and "not valid utf-8" in msg and "--encoding" in msg
    assert read_manifest(p, encoding="latin-1").samples[1].instruction == "caf\u00e9 au lait"
    res = runner.invoke(app, ["run", str(p), "--out", str(tmp_path / "run"), "--metrics", "l1", "--no-progress",
                              "--encoding", "latin-1"])
    assert res.exit_code == 0, res.output


def test_truncated_json_line_reports_where_it_ends(tmp_path, images):
    good = json.dumps({"id": "a", "source": "imgs/a.png", "edited": "imgs/b.png", "instruction": "x"})
    p = tmp_path / "m.jsonl"
    p.write_text(good + "\n" + good[:40] + "\n")
    with pytest.raises(ManifestError) as info:
        read_manifest(p)
    ((line, reason),) = info.value.problems
    assert line == 2 and "ends at column 40" in reason and "truncated" in reason


def test_directory_as_image_and_bad_boxes_are_row_problems(tmp_path, images):
    rows = [{"id": "d", "source": "imgs", "edited": "imgs/b.png", "instruction": "x"},
            {"id": "b1", "source": "imgs/a.png", "edited": "imgs/b.png", "instruction": "x", "boxes": "[[1, 2, 3]]"},
            {"id": "b2", "source": "imgs/a.png", "edited": "imgs/b.png", "instruction": "x", "boxes": "[[1, 2"},
            {"id": "m", "source": "imgs/a.png", "edited": "imgs/b.png", "instruction": "x", "mask": "imgs"},
            {"id": "ok", "source": "imgs/a.png", "edited": "imgs/b.png", "instruction": "x", "boxes": [[0, 0, 4, 4]]}]
    p = tmp_path / "m.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(ManifestError) as info:
        read_manifest(p)
    problems = dict(info.value.problems)
    assert set(problems) == {1, 2, 3, 4}
    assert "source is a directory" in problems[1]
    assert "box 1 has 3 numbers, not 4" in problems[2]
    assert "not valid JSON" in problems[3]
    assert "mask is a directory" in problems[4]
    assert [s.id for s in read_manifest(p, skip_invalid=True).samples] == ["ok"]


def test_malformed_boxes_are_a_sentence_not_a_numpy_error(tmp_path):
    with pytest.raises(InputError, match=r"box 2 has 2 numbers, not 4; give a JSON list of boxes"):
        sample_mask({"boxes": "[[0, 0, 1, 1], [3, 4]]"}, 8, 8)
    src = tmp_path / "a.png"
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(src)
    res = runner.invoke(app, ["score", "--source", str(src), "--edited", str(src), "--instruction", "x",
                              "--metrics", "l1", "--boxes", "[[1, 2], [3]]"])
    assert res.exit_code == 2 and "box 1 has 2 numbers" in res.output and "Traceback" not in res.output


def test_column_mapping_loads_aurora_style_files(tmp_path, images):
    p = tmp_path / "edits.jsonl"
    p.write_text("".join(json.dumps({"input": "imgs/a.png", "output": "imgs/b.png", "instruction": f"edit {i}",
                                     "task": "magicbrush"}) + "\n" for i in range(3)))
    with pytest.raises(ManifestError, match="missing 'source'") as info:
        read_manifest(p)
    assert "other columns are input, output, task; map them with e.g. --columns" in str(info.value)
    rep = read_manifest(p, columns="source=input,edited=output")
    assert [s.id for s in rep.samples] == ["line-1", "line-2", "line-3"]
    assert rep.samples[0].source.endswith("imgs/a.png") and rep.samples[0].metadata == {"task": "magicbrush"}
    with pytest.raises(InputError, match="'src' is not an editlens column; map one of id, source, edited"):
        read_manifest(p, columns="src=input")
    res = runner.invoke(app, ["run", str(p), "--out", str(tmp_path / "run"), "--metrics", "l1", "--no-progress",
                              "--columns", "source=input,edited=output"])
    assert res.exit_code == 0, res.output
    assert "3 samples" in res.output

import json

import numpy as np
import pytest
from PIL import Image

from editlens.data.manifest import read_manifest, write_manifest
from editlens.errors import InputError, ManifestError


@pytest.fixture
def images(tmp_path):
    d = tmp_path / "imgs"
    d.mkdir()
    for name in ("a", "b", "c"):
        Image.fromarray(np.full((8, 8, 3), 10, np.uint8)).save(d / f"{name}.png")
    return d


def _jsonl(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_jsonl_relative_paths_and_metadata(tmp_path, images):
    m = _jsonl(tmp_path / "m.jsonl", [
        {"id": "1", "source": "imgs/a.png", "edited": "imgs/b.png", "instruction": "do it", "model": "X",
         "target_caption": "a thing", "difficulty": 3},
    ])
    rep = read_manifest(m)
    s = rep.samples[0]
    assert s.source == str(images / "a.png") and s.model == "X"
    assert s.target_caption == "a thing" and s.source_caption is None
    assert s.metadata == {"difficulty": 3}


def test_csv_with_optional_reference(tmp_path, images):
    m = tmp_path / "m.csv"
    m.write_text("id,source,edited,instruction,reference,extra\n1,imgs/a.png,imgs/b.png,do it,imgs/c.png,hi\n"
                 "2,imgs/a.png,imgs/b.png,again,,\n")
    rep = read_manifest(m)
    assert [s.id for s in rep.samples] == ["1", "2"]
    assert rep.samples[0].reference == str(images / "c.png") and rep.samples[1].reference is None
    assert rep.samples[0].metadata == {"extra": "hi"}


def test_every_bad_row_reported_with_line(tmp_path, images):
    m = _jsonl(tmp_path / "m.jsonl", [
        {"id": "1", "source": "imgs/a.png", "edited": "imgs/b.png", "instruction": "ok"},
        "{not json",
        {"id": "3", "source": "imgs/a.png", "edited": "imgs/zzz.png", "instruction": "ok"},
        {"id": "4", "source": "imgs/a.png", "edited": "imgs/b.png", "instruction": "  "},
        {"id": "1", "source": "imgs/a.png", "edited": "imgs/b.png", "instruction": "dup"},
        {"source": "imgs/a.png", "edited": "imgs/b.png", "instruction": "no id"},
    ])
    with pytest.raises(ManifestError) as err:
        read_manifest(m)
    lines = dict(err.value.problems)
    assert sorted(lines) == [2, 3, 4, 5]  # line 6 has no id: it gets line-6
    assert "not valid JSON" in lines[2]
    assert "edited file not found" in lines[3] and "zzz.png" in lines[3]
    assert lines[4] == "empty instruction"
    assert "duplicate id '1' on lines 1 and 5" in lines[5]
    assert "refused even with --skip-invalid" in str(err.value)


def test_skip_invalid_keeps_good_rows(tmp_path, images):
    m = _jsonl(tmp_path / "m.jsonl", [
        {"id": "1", "source": "imgs/a.png", "edited": "imgs/b.png", "instruction": "ok"},
        {"id": "2", "source": "imgs/a.png", "edited": "imgs/none.png", "instruction": "ok"},
    ])
    rep = read_manifest(m, skip_invalid=True)
    assert [s.id for s in rep.samples] == ["1"] and rep.problems[0][0] == 2


def test_missing_manifest_and_bad_suffix(tmp_path):
    with pytest.raises(InputError, match="manifest file not found"):
        read_manifest(tmp_path / "x.jsonl")
    p = tmp_path / "x.txt"
    p.write_text("a")
    with pytest.raises(InputError, match="unknown manifest format"):
        read_manifest(p)


def test_round_trip(tmp_path, images):
    m = _jsonl(tmp_path / "m.jsonl", [
        {"id": "1", "source": "imgs/a.png", "edited": "imgs/b.png", "instruction": "ok", "model": "M", "k": "v"}])
    samples = read_manifest(m).samples
    out = write_manifest(samples, tmp_path / "again.jsonl")
    again = read_manifest(out).samples
    assert [(s.id, s.source, s.model, s.metadata) for s in again] == [(s.id, s.source, s.model, s.metadata) for s in samples]


def test_mask_column_resolved_against_manifest(tmp_path, images, monkeypatch):
    from editlens import create_metric

    m = np.zeros((8, 8), np.uint8)
    m[:4] = 255
    Image.fromarray(m).save(images / "mask.png")
    man = _jsonl(tmp_path / "m.jsonl", [
        {"id": "1", "source": "imgs/a.png", "edited": "imgs/b.png", "instruction": "ok", "mask": "imgs/mask.png"}])
    monkeypatch.chdir(images)  # a relative mask path must not depend on the working folder
    s = read_manifest(man).samples[0]
    assert s.metadata["mask"] == str(images / "mask.png")
    assert create_metric("l1", region="inside")([s.load()])[0].status == "scored"
    bad = _jsonl(tmp_path / "bad.jsonl", [
        {"id": "1", "source": "imgs/a.png", "edited": "imgs/b.png", "instruction": "ok", "mask": "imgs/nope.png"}])
    with pytest.raises(ManifestError, match="mask file not found"):
        read_manifest(bad)

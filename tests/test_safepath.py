"""The one path-safety rule (:mod:`editlens.core.safepath`) and every place that turns an id or a
manifest value into a path: ``bench run --edits``, ``--edits`` joins of manifests, the images an
``editlens edit`` folder names (bench generation, ``edit --pair``, resume). Each is tried with ``..``,
absolute paths, a symbolic link out of the folder and a NUL byte."""

from __future__ import annotations

import json
import os
from pathlib import Path

import bench_files as F
import pytest

from editlens.core.safepath import UnsafePathError, inside, is_inside, problem

HOSTILE = ["../../escape", "../escape.png", "a/../../b.png", "/etc/passwd", "C:\\Windows\\x.png", "a\0b.png", "",
           "sub/../../x.png"]


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_names_are_refused_with_the_value_and_the_folder(tmp_path, name):
    with pytest.raises(UnsafePathError) as err:
        inside(tmp_path, name, what="case id")
    msg = str(err.value)
    assert "case id" in msg and repr(name) in msg and str(tmp_path) in msg
    assert not is_inside(tmp_path, name)


def test_names_inside_the_folder_are_joined_unchanged(tmp_path):
    assert inside(tmp_path, "a.png") == tmp_path / "a.png"
    assert inside(tmp_path, "fullset/edit/en/k1.png") == tmp_path / "fullset" / "edit" / "en" / "k1.png"
    assert inside(tmp_path, "..a.png") == tmp_path / "..a.png"  # a name starting with dots is not '..'


def test_a_symbolic_link_out_of_the_folder_is_refused_one_inside_is_not(tmp_path):
    outside = tmp_path / "secret.png"
    outside.write_bytes(b"x")
    folder = tmp_path / "m"
    (folder / "sub").mkdir(parents=True)
    (folder / "real.png").write_bytes(b"y")
    os.symlink(outside, folder / "leak.png")
    os.symlink(tmp_path, folder / "sub" / "up")
    os.symlink(folder / "real.png", folder / "alias.png")
    assert "symbolic link" in (problem(folder, "leak.png") or "")
    assert not is_inside(folder, "sub/up/secret.png")
    assert is_inside(folder, "alias.png")
    # the folder itself may be a link: what counts is where it really is
    os.symlink(folder, tmp_path / "m-link")
    assert is_inside(tmp_path / "m-link", "real.png") and not is_inside(tmp_path / "m-link", "leak.png")


def _bench(keys):  # type: ignore[no-untyped-def]
    from editlens.bench.base import BenchItem, Benchmark, BenchSpec

    class Keys(Benchmark):
        spec = BenchSpec(name="keys-test", title="Keys", homepage="https://example.org", download="-", layout="-")

        def read(self, path):  # type: ignore[no-untyped-def]
            return [BenchItem(k, k, "edit", F.save(Path(path) / f"src{i}.png", F.png(i)), "c") for i, k in enumerate(keys)]

    return Keys()


def test_bench_run_with_path_shaped_ids_reads_nothing_outside_the_models_folder(tmp_path):
    from editlens.runner.bench import locate

    root = tmp_path / "edits"
    F.save(root / "m" / "ok.png", F.png(1))
    F.save(root / "m" / "other.png", F.png(1))
    # the files the hostile ids would reach if joined naively
    F.save(tmp_path / "escape.png", F.png(2))
    F.save(tmp_path / "other" / "escape.png", F.png(2))
    os.symlink(tmp_path / "escape.png", root / "m" / "leak.png")
    b = _bench(["ok", "../escape", "../../escape", str(tmp_path / "escape"), "leak", "a\0b"])
    items = b.read(tmp_path / "data")
    got = locate(b, items, root)
    assert [s.id for s in got.samples] == ["m/ok"]
    assert all(Path(s.edited).resolve().parent == (root / "m").resolve() for s in got.samples)
    reasons = {s["item"]: s["reason"] for s in got.skipped}
    assert set(reasons) == {"../escape", "../../escape", str(tmp_path / "escape"), "leak", "a\0b"}
    assert "'..' component" in reasons["../escape"] and "absolute path" in reasons[str(tmp_path / "escape")]
    assert "symbolic link" in reasons["leak"] and "NUL byte" in reasons["a\0b"]
    # DIR holding outputs of a hostile id only is not taken for one model's folder
    assert locate(b, items[1:3], root).models == ["m"]


def test_edits_join_of_a_manifest_refuses_path_shaped_ids(tmp_path):
    from editlens.data.manifest import read_manifest
    from editlens.errors import ManifestError

    src = F.save(tmp_path / "src.png", F.png(0))
    F.save(tmp_path / "edits" / "m" / "ok.png", F.png(1))
    F.save(tmp_path / "edits" / "escape.png", F.png(2))
    rows = [{"id": "ok", "source": str(src), "instruction": "x"},
            {"id": "../escape", "source": str(src), "instruction": "x"},
            {"id": "/etc/passwd", "source": str(src), "instruction": "x"}]
    man = tmp_path / "m.jsonl"
    man.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(ManifestError) as err:
        read_manifest(man, edits=tmp_path / "edits")
    assert "id '../escape'" in str(err.value) and "'..' component" in str(err.value)
    assert "id '/etc/passwd'" in str(err.value) and "absolute path" in str(err.value)
    ok = read_manifest(man, edits=tmp_path / "edits", skip_invalid=True)
    assert [s.id for s in ok.samples] == ["m/ok"]


def test_an_edit_folders_manifest_naming_a_file_elsewhere_is_refused(tmp_path):
    from editlens.runner.edit import write_pairs

    for name in ("a", "b"):
        F.save(tmp_path / name / "images" / "e.png", F.png(1))
        row = {"id": "e", "edit_id": "e", "sample": 0, "source": "../s.png", "edited": "images/e.png", "instruction": "x"}
        (tmp_path / name / "manifest.jsonl").write_text(json.dumps(row) + "\n")
    path, n = write_pairs(tmp_path / "a", tmp_path / "b", tmp_path / "pairs.jsonl")
    assert n == 1
    bad = {"id": "e", "edit_id": "e", "sample": 0, "source": "../s.png", "edited": "../../etc/passwd", "instruction": "x"}
    (tmp_path / "b" / "manifest.jsonl").write_text(json.dumps(bad) + "\n")
    with pytest.raises(UnsafePathError, match=r"manifest.jsonl: edited '\.\./\.\./etc/passwd' has a '\.\.' component"):
        write_pairs(tmp_path / "a", tmp_path / "b", tmp_path / "pairs.jsonl")


def test_an_adiee_dataset_naming_images_outside_its_folder_is_refused(tmp_path):
    from editlens.adiee.train import read_dataset

    F.save(tmp_path / "ds" / "images" / "a.png", F.png(0))
    row = {"source": "images/a.png", "edited": "images/a.png", "instruction": "x", "score": 0.5}
    (tmp_path / "ds" / "samples.jsonl").write_text(json.dumps(row) + "\n")
    assert len(read_dataset(tmp_path / "ds")) == 1
    for bad in ("../../etc/passwd", "/etc/passwd", "images/\0a.png"):
        (tmp_path / "ds" / "samples.jsonl").write_text(json.dumps({**row, "edited": bad}) + "\n")
        with pytest.raises(UnsafePathError, match=r"samples.jsonl:1: edited"):
            read_dataset(tmp_path / "ds")


def test_bench_run_cli_with_path_shaped_case_ids_reads_nothing_outside(tmp_path, monkeypatch):
    """End to end: a GEdit table whose keys are shaped like paths; the files they would reach are
    there, and bench run skips those cases naming why, scoring only the case inside the folder."""
    from fake_openai import FakeServer
    from typer.testing import CliRunner

    from editlens.cli.main import app

    keys = ["k1", "../../../../../escape", "/etc/passwd"]
    rows = [{"key": k, "task_type": "background_change", "instruction": "edit", "instruction_language": "en",
             "input_image": F._image_struct(F.png(i), "x.png"), "input_image_raw": F._image_struct(F.png(i), "y.png"),
             "Intersection_exist": True} for i, k in enumerate(keys)]
    data = tmp_path / "gedit"
    F.write_table(rows, data / "data" / "train-00000-of-00001.parquet", ("input_image", "input_image_raw"))
    edits = tmp_path / "edits"
    F.save(edits / "m" / "fullset" / "background_change" / "en" / "k1.png", F.png(9))
    F.save(tmp_path / "escape.png", F.png(8))  # where m/fullset/background_change/en/../../../../../escape.png leads
    opened = []
    real_open = open

    def spy(file, *a, **k):  # type: ignore[no-untyped-def]
        opened.append(str(file))
        return real_open(file, *a, **k)

    monkeypatch.setattr("builtins.open", spy)
    with FakeServer().running() as url:
        res = CliRunner().invoke(app, ["bench", "run", "gedit", "--data", str(data), "--edits", str(edits), "--out",
                                       str(tmp_path / "out"), "--vlm", url, "--cache", "none", "--n-boot", "10",
                                       "--json", "--no-report"])
    assert res.exit_code == 0, res.output
    assert not any("escape" in f or f == "/etc/passwd" for f in opened)
    items = [json.loads(x) for x in (tmp_path / "out" / "items.jsonl").read_text().splitlines()]
    skipped = [r for r in items if r["status"] == "skipped"]
    assert len(skipped) == 2 and all("names no file inside" in r["reason"] for r in skipped)
    assert any("'..' component" in r["reason"] for r in skipped) and any("absolute path" in r["reason"] for r in skipped)
    assert [r["id"] for r in items if r["status"] != "skipped"] == ["m/background_change/en/k1"]

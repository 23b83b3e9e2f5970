"""Best of N over candidates made already, and reward relabelling, from Python (editlens.runner.best_of_n,
editlens.runner.relabel): the same files and numbers the commands print."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from editlens.cli.main import app
from editlens.errors import InputError
from editlens.runner.best_of_n import best_of_manifest
from editlens.runner.relabel import relabel


def _png(path, value):
    Image.fromarray(np.full((16, 16, 3), value, dtype=np.uint8)).save(path)
    return path.name


@pytest.fixture()
def candidates(tmp_path):
    """Two edits of one source, three candidates each: the closer to the source, the lower its L1."""
    src = _png(tmp_path / "src.png", 100)
    rows = []
    for edit, instruction in enumerate(["make it red", "make it blue"]):
        for k, value in enumerate([160, 110, 220]):
            rows.append({"id": f"e{edit}c{k}", "source": src, "edited": _png(tmp_path / f"e{edit}c{k}.png", value + edit),
                         "instruction": instruction})
    path = tmp_path / "candidates.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_best_of_manifest_picks_by_the_evaluators_direction_and_writes_what_the_command_prints(candidates, tmp_path):
    doc = best_of_manifest(candidates, "l1", device="cpu", out=tmp_path / "picks.json")
    assert doc["higher_is_better"] is False
    assert [p["best_id"] for p in doc["picks"]] == ["e0c1", "e1c1"]  # the smallest change: l1 is lower-better
    assert doc["picks"][0]["best_value"] == pytest.approx(10 / 255, rel=1e-4)
    assert json.loads((tmp_path / "picks.json").read_text()) == json.loads(json.dumps(doc, default=str))
    cli = CliRunner().invoke(app, ["best-of-n", str(candidates), "--metric", "l1", "--device", "cpu",
                                   "--json"])
    assert cli.exit_code == 0, cli.output
    assert json.loads(cli.stdout) == json.loads(json.dumps(doc, default=str))
    assert [len(p["candidates"]) for p in best_of_manifest(candidates, "l1", limit=1)["picks"]] == [3]


def test_relabel_maps_a_bounded_score_to_one_to_five_and_keeps_the_rows(candidates, tmp_path):
    done = relabel(candidates, "l1", device="cpu", out=tmp_path / "out.jsonl")
    assert (done.relabelled, done.unscored, done.scale) == (6, 0, "[0, 1] -> 1-5")
    rows = [json.loads(x) for x in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert rows == done.rows and [r["id"] for r in rows] == [f"e{e}c{k}" for e in range(2) for k in range(3)]
    best = rows[1]  # l1 = 10/255, lower is better: mapped near the top of 1-5
    assert best["reward"] == pytest.approx(1 + 4 * (1 - 10 / 255), abs=1e-4)
    assert best["instruction_with_reward"] == "make it red The image quality is 5 out of five."
    assert best["source"] == "src.png"  # the manifest's own row, kept as written


def test_relabel_of_an_unbounded_score_maps_this_manifests_range_or_refuses(candidates, tmp_path, monkeypatch):
    """An unbounded evaluator (EditReward) is relative: min-max of this manifest, and said so; with fewer
    than two distinct values there is nothing to map. (The evaluator is L1 with its range declared open.)"""
    from dataclasses import replace

    import editlens.runner.best_of_n as B

    real = B.score_manifest

    def unbounded(*args, **kwargs):
        samples, scores, m = real(*args, **kwargs)
        m.spec = replace(m.spec, value_range=(float("-inf"), float("inf")))
        return samples, scores, m

    monkeypatch.setattr(B, "score_manifest", unbounded)
    done = relabel(candidates, "l1", device="cpu", out=tmp_path / "rel.jsonl")
    assert done.scale.startswith("min-max of this manifest's l1 scores") and done.scale.endswith("(relative)")
    assert done.rows[1]["reward"] == pytest.approx(5.0) and done.rows[5]["reward"] == pytest.approx(1.0)
    one = tmp_path / "one.jsonl"
    one.write_text(candidates.read_text().splitlines()[0] + "\n")
    with pytest.raises(InputError, match="no fixed range and fewer than two distinct scores"):
        relabel(one, "l1", device="cpu")

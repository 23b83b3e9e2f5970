"""Label Studio interop: the labelling config and tasks written, and Label Studio's JSON export read back
into the votes store (pairs turned to their own A / B; importing twice adds nothing)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

from typer.testing import CliRunner

from editlens.annotate.export import first_votes
from editlens.annotate.task import Task
from editlens.cli.main import app
from editlens.testing.annotate_data import make_edit_set


def _ls_export(tasks, pick):
    """What Label Studio's JSON export holds for these tasks: one annotation per task by two users."""
    out = []
    for k, t in enumerate(tasks):
        anns = []
        for user in (7, {"id": 9, "email": "kim@example.org"}):
            result = pick(t, user)
            anns.append({"id": 1000 + 10 * k + (0 if user == 7 else 1), "completed_by": user, "was_cancelled": False,
                         "created_at": "2025-03-01T10:00:00.000000Z", "result": result})
        out.append({"id": k + 1, "data": t["data"], "annotations": anns})
    return out


def test_pairwise_round_trip(tmp_path):
    edits = make_edit_set(tmp_path / "e", sources=2, editors=3, size=24)
    Task.create(tmp_path / "t", edits, "pairwise", annotators=["alice"], seed=0).close()
    r = CliRunner().invoke(app, ["annotate", "labelstudio-export", str(tmp_path / "t"), "--out", str(tmp_path / "ls")])
    assert r.exit_code == 0, r.output
    root = ET.parse(tmp_path / "ls" / "config.xml").getroot()
    assert [c.get("alias") for c in root.iter("Choice")] == ["left", "right", "tie", "both_bad"]
    assert {i.get("name") for i in root.iter("Image")} == {"source", "left", "right"}
    tasks = json.load(open(tmp_path / "ls" / "tasks.json"))
    assert len(tasks) == 6 and all(t["data"]["left"].startswith("/data/local-files/?d=") for t in tasks)
    # user 7 always picks the left edit, user 9 always says tie
    export = _ls_export(tasks, lambda t, u: [{"from_name": "preference", "to_name": "left", "type": "choices",
                                              "value": {"choices": ["left" if u == 7 else "tie"]}},
                                             {"from_name": "reason", "to_name": "left", "type": "textarea",
                                              "value": {"text": ["looks right"]}}])
    (tmp_path / "export.json").write_text(json.dumps(export))
    r = CliRunner().invoke(app, ["annotate", "labelstudio-import", str(tmp_path / "t"), str(tmp_path / "export.json")])
    assert r.exit_code == 0 and "12 votes imported" in r.output, r.output
    r = CliRunner().invoke(app, ["annotate", "labelstudio-import", str(tmp_path / "t"), str(tmp_path / "export.json")])
    assert "0 votes imported, 12 already there" in r.output
    task, by_item = first_votes(tmp_path / "t")
    try:
        left_of = {t["data"]["editlens_item"]: t["data"]["left_id"] for t in tasks}
        for iid, votes in by_item.items():
            it = task.items[iid]
            mine = {v["annotator"]: v for v in votes}
            assert set(mine) == {"ls-7", "ls-kim@example.org"}
            want = "A" if left_of[iid] == it["a"]["id"] else "B"
            assert mine["ls-7"]["answer"]["choice"] == want and mine["ls-7"]["origin"] == "labelstudio"
            assert mine["ls-kim@example.org"]["answer"]["choice"] == "tie"
            assert mine["ls-7"]["reason"] == "looks right" and mine["ls-7"]["at"] > 1.7e9
        assert task.store.annotators()["ls-7"] == {"token": None, "origin": "labelstudio"}
    finally:
        task.close()


def test_pointwise_import_and_bad_export(tmp_path):
    edits = make_edit_set(tmp_path / "e", sources=2, editors=2, size=24)
    Task.create(tmp_path / "t", edits, "pointwise", annotators=["a"], seed=0, preset="imagenhub").close()
    r = CliRunner().invoke(app, ["annotate", "labelstudio-export", str(tmp_path / "t"), "--out", str(tmp_path / "ls")])
    assert r.exit_code == 0, r.output
    root = ET.parse(tmp_path / "ls" / "config.xml").getroot()
    assert [c.get("name") for c in root.iter("Choices")] == ["SC", "PQ"]
    tasks = json.load(open(tmp_path / "ls" / "tasks.json"))
    export = _ls_export(tasks, lambda t, u: [{"from_name": "SC", "type": "choices", "value": {"choices": ["0.5"]}},
                                             {"from_name": "PQ", "type": "choices", "value": {"choices": ["1"]}}])
    (tmp_path / "export.json").write_text(json.dumps(export))
    r = CliRunner().invoke(app, ["annotate", "labelstudio-import", str(tmp_path / "t"), str(tmp_path / "export.json")])
    assert r.exit_code == 0 and "8 votes imported" in r.output, r.output
    task, by_item = first_votes(tmp_path / "t")
    assert all(v["answer"]["scores"] == {"SC": 0.5, "PQ": 1.0} for vs in by_item.values() for v in vs)
    task.close()
    export[0]["annotations"][0]["result"][0]["value"]["choices"] = ["0.7"]  # not on the scale
    export[0]["annotations"][0]["id"] = 1
    (tmp_path / "bad.json").write_text(json.dumps(export))
    r = CliRunner().invoke(app, ["annotate", "labelstudio-import", str(tmp_path / "t"), str(tmp_path / "bad.json")])
    assert r.exit_code == 2 and "annotation 1" in r.output and "not on its scale" in r.output

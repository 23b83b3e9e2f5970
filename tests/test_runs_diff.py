"""Run-to-run drift: `runs diff` names what differs between two runs and lists what changed;
run manifests pin what makes a judge's answers (served model, /v1/models answer, templates, weights)."""

import json

import pytest
from fake_openai import FakeServer
from helpers import EXAMPLES
from typer.testing import CliRunner

from editlens.cli.main import app
from editlens.trust.diff import diff_runs, flatten, manifest_differences, what

runner = CliRunner()

STRICT = """<<source>>
<<edited>>
STRICT REVIEW. The first picture is the original; the second was edited following:
"$instruction"
Give two scores from 0 to 10 (success, restraint) as JSON: {"reasoning": "...", "score": [success, restraint]}
"""


class StrictAboutCats(FakeServer):
    """A judge that answers 8/7 to everything, but 2/7 to edits about cats when the prompt says STRICT."""

    def good_answer(self, body):
        # the text parts only (images travel as base64, where any three letters can appear)
        text = " ".join(p.get("text", "") for m in body.get("messages", []) for p in
                        (m["content"] if isinstance(m["content"], list) else [{"text": m["content"]}]))
        if "STRICT" in text and "cat" in text.lower():
            return '{"score": [2, 7], "reasoning": "no cat to be seen"}'
        return '{"score": [8, 7], "reasoning": "the edit was done"}'


def _manifest(tmp_path):
    src = EXAMPLES / "images"
    rows = [("c1", "cat_seat", "Put a cat on the seat.", "editorA"), ("c2", "cat_seat", "Add a cat.", "editorA"),
            ("h1", "hydrant", "Put the hydrant on asphalt.", "editorA"),
            ("h2", "hydrant", "Make the hydrant white.", "editorB"),
            ("p1", "pencil_case", "move the pencil case left", "editorA"),
            ("d1", "dragonfruit", "Move the dragonfruit under the table", "editorB")]
    path = tmp_path / "m.jsonl"
    path.write_text("".join(json.dumps({"id": i, "source": str(src / f"{n}_source.png"), "edited": str(src / f"{n}_edited.png"),
                                        "instruction": t, "model": m}) + "\n" for i, n, t, m in rows))
    return path


def _run(manifest, out, url, *extra):
    res = runner.invoke(app, ["run", str(manifest), "--out", str(out), "--judge", "viescore", "--metrics", "l1",
                              "--vlm", url, "--cache", "none", "--no-progress", *map(str, extra)])
    assert res.exit_code == 0, res.output


def test_diff_names_the_changed_template_and_lists_the_changed_items(tmp_path):
    manifest = _manifest(tmp_path)
    strict = tmp_path / "strict.txt"
    strict.write_text(STRICT)
    fake = StrictAboutCats()
    fake.broken = False
    with fake.running() as url:
        _run(manifest, tmp_path / "a", url)
        _run(manifest, tmp_path / "b", url, "--template", f"viescore_sc={strict}")
    # the manifest pins the served model and the server's /v1/models answer
    ma = json.loads((tmp_path / "a" / "manifest.json").read_text())
    judge = next(e for e in ma["evaluators"] if e["name"] == "viescore")
    prov = judge["provenance"]["backend"]
    assert prov["served_model"] == "fake" and prov["url"] == url
    assert prov["models_answer"] == [{"id": "fake", "owned_by": "tests", "root": "fake-v1"}]
    assert set(judge["provenance"]["templates"]) == {"viescore_sc", "viescore_pq"}
    assert ma["environment"]["editlens"]

    res = runner.invoke(app, ["runs", "diff", str(tmp_path / "a"), str(tmp_path / "b"), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert "template viescore_sc of viescore" in doc["what_differs"]
    assert not any(w.startswith(("template viescore_pq", "model revision", "backend URL", "served model", "dtype",
                                 "editlens")) for w in doc["what_differs"])
    keys = {d["key"] for d in doc["manifest_differences"] if d["what"] == "template viescore_sc of viescore"}
    assert "evaluators.viescore.templates.viescore_sc.sha256" in keys
    v = doc["evaluators"]["viescore"]
    # the cat edits (sqrt(7*7)/10 -> sqrt(2*7)/10) and nothing else
    assert [c["id"] for c in v["changed"]] == ["c1", "c2"]
    assert v["changed"][0]["a"] == pytest.approx(0.7) and v["changed"][0]["b"] == pytest.approx(14 ** 0.5 / 10)
    assert {(f["id"], f["verdict_a"], f["verdict_b"]) for f in v["flipped"]} == {("c1", "pass", "fail"),
                                                                              ("c2", "pass", "fail")}
    assert v["n_scored_both"] == 6 and v["threshold"] == 0.5
    # A: every edit 0.7, the editors tie (ranked by name); B: editorA's two cat edits drop, editorB comes first
    assert [(e["model"], e["rank_a"], e["rank_b"]) for e in v["editors_rank_changed"]] == [("editorA", 1, 2),
                                                                                         ("editorB", 2, 1)]
    l1 = doc["evaluators"]["l1"]
    assert l1["n_changed"] == 0 and l1["spearman"] == pytest.approx(1.0) and l1["n_flipped"] == 0
    # the table says the same
    res = runner.invoke(app, ["runs", "diff", str(tmp_path / "a"), str(tmp_path / "b")])
    assert "what differs in how the runs were made: template viescore_sc of viescore" in res.stdout
    assert "changed c1: 0.7000 -> 0.3742" in res.stdout and "flipped c2: pass -> fail" in res.stdout
    assert "editor editorA: rank 1 -> 2" in res.stdout


def test_diff_ranks_editors_and_thresholds(tmp_path):
    from editlens.trust.diff import compare_evaluator

    rows = lambda vals: [{"sample_id": f"s{i}", "model": m, "status": "scored", "value": v, "reason": None}  # noqa: E731
                         for i, (m, v) in enumerate(vals)]
    a = rows([("A", 0.9), ("A", 0.8), ("B", 0.5), ("B", 0.4)])
    b = rows([("A", 0.3), ("A", 0.2), ("B", 0.5), ("B", 0.4)])
    r = compare_evaluator(a, b, "x", threshold=0.6, higher_is_better=True)
    assert [(e["model"], e["rank_a"], e["rank_b"]) for e in r["editors_rank_changed"]] == [("A", 1, 2), ("B", 2, 1)]
    assert [f["id"] for f in r["flipped"]] == ["s0", "s1"] and r["n_changed"] == 2
    # ranks [4, 3, 2, 1] vs [2, 1, 4, 3]: rho = 1 - 6 * 16 / (4 * 15)
    assert r["mean_change"] == pytest.approx(-0.3) and r["spearman"] == pytest.approx(-0.6)
    lower = compare_evaluator(a, b, "x", threshold=0.6, higher_is_better=False)
    assert [(e["model"], e["rank_a"]) for e in lower["editors"]] == [("B", 1), ("A", 2)]
    unscored = [dict(b[0], status="unscored", value=None)] + b[1:]
    r = compare_evaluator(a, unscored, "x", threshold=None, higher_is_better=True)
    assert r["flipped"] == [{"id": "s0", "model": "A", "verdict_a": "scored", "verdict_b": "unscored", "a": 0.9,
                             "b": None}]
    assert r["n_scored_both"] == 3


def test_manifest_differences_are_named():
    a = {"started": "x", "environment": {"editlens": "0.1", "libraries": {"torch": "2.1"}},
         "evaluators": [{"name": "clip_i", "model": {"revision": "abc", "dtype": "float32"}, "config_hash": "1"},
                        {"name": "viescore", "backend": {"url": "http://a/v1", "model": "m"}}]}
    b = {"started": "y", "environment": {"editlens": "0.2", "libraries": {"torch": "2.2"}},
         "evaluators": [{"name": "viescore", "backend": {"url": "http://b/v1", "model": "m2"}},
                        {"name": "clip_i", "model": {"revision": "def", "dtype": "bfloat16"}, "config_hash": "2"}]}
    kinds = {d["what"] for d in manifest_differences(a, b)}
    assert kinds == {"editlens version", "torch version", "model revision or weights of clip_i", "dtype of clip_i",
                     "settings of clip_i", "backend URL of viescore", "served model of viescore"}
    assert manifest_differences(a, a) == []
    assert flatten({"m": [{"id": "x", "created": 1}, {"id": "y"}]}) == {"m.y.id": "y", "m.x.id": "x"}
    assert what("evaluators.dice.dice.templates.dice_detect.sha256") == "template dice_detect of dice"


def test_diff_of_a_run_with_itself_and_bad_input(tmp_path):
    out = tmp_path / "r"
    res = runner.invoke(app, ["run", str(EXAMPLES / "manifest.jsonl"), "--out", str(out), "--metrics", "l1",
                              "--no-progress"])
    assert res.exit_code == 0
    doc = diff_runs(out, out)
    assert doc["what_differs"] == [] and doc["evaluators"]["l1"]["n_changed"] == 0
    res = runner.invoke(app, ["runs", "diff", str(out), str(tmp_path / "nothing")])
    assert res.exit_code == 2 and "not a run directory" in res.output
    res = runner.invoke(app, ["runs", "diff", str(out), str(out), "--threshold", "ssim=0.5"])
    assert res.exit_code == 2 and "names evaluator(s) in neither run: ssim" in res.output
    res = runner.invoke(app, ["runs", "diff", str(out), str(out), "--threshold", "l1=high"])
    assert res.exit_code == 2 and "must be numbers" in res.output


def test_local_vlm_provenance_pins_weight_hashes(tmp_path):
    from editlens.backends.local import TransformersBackend
    from editlens.core.images import file_sha256
    from editlens.models.random_init import BUILDERS
    from editlens.runner.manifest import provenance_of

    folder = BUILDERS["idefics3"](tmp_path / "tiny")
    backend = TransformersBackend(str(folder), device="cpu")
    prov = backend.provenance()
    weights = prov["weights"]["weights"]
    assert weights and all(v == file_sha256(folder / k) for k, v in weights.items())
    assert prov["dtype"] and prov["model"] == str(folder)

    class Broken:
        def provenance(self):
            raise OSError("disk gone")

    assert provenance_of(Broken()) == {"error": "OSError: disk gone"}  # a record, never a failed run

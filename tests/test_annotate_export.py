"""People's votes exported (`editlens annotate export`) and read, unchanged, by meta-eval pointwise, pairwise,
genai-bench and arena, by calibrate, and ranked by `editlens arena --human-votes` -- all through the CLI."""

from __future__ import annotations

import json
import random

import pytest
from typer.testing import CliRunner

from editlens.annotate.task import Task
from editlens.cli.main import app
from editlens.testing.annotate_data import make_edit_set, synthetic_annotator

STRENGTH = {f"editor{e}": 2.0 - e for e in range(5)}  # editor0 best, editor4 worst


def cli(*args):
    r = CliRunner().invoke(app, [str(a) for a in args])
    assert r.exit_code == 0, r.output
    return r.output


@pytest.fixture(scope="module")
def edits(tmp_path_factory):
    return make_edit_set(tmp_path_factory.mktemp("edits"), sources=8, editors=5, size=24)


def _noisy_scores(ids_models, seed=0, noise=0.6):
    rng = random.Random(seed)
    return {i: STRENGTH[m] + rng.gauss(0, noise) for i, m in ids_models}


@pytest.fixture(scope="module")
def pair_task(edits, tmp_path_factory):
    folder = tmp_path_factory.mktemp("votes") / "pairs"
    t = Task.create(folder, edits, "pairwise", annotators=["ann1", "ann2", "ann3"], overlap=2, seed=1)
    rng = random.Random(4)

    def truth(iid):  # people prefer the stronger editor, sometimes say tie / both bad
        it = t.items[iid]
        d = STRENGTH[it["a"]["editor"]] - STRENGTH[it["b"]["editor"]]
        x = rng.random()
        if x < 0.1:
            return {"choice": "tie"}
        if x < 0.15:
            return {"choice": "both_bad"}
        return {"choice": "A" if d > 0 else "B"}
    outcomes = [{"choice": c} for c in ("A", "B", "tie", "both_bad")]
    for a in ("ann1", "ann2", "ann3"):
        synthetic_annotator(t, a, truth, 0.85, rng, lambda _: outcomes)
    ids = [(it[s]["id"], it[s]["editor"]) for it in t.items.values() for s in ("a", "b")]
    t.close()
    preds = folder.parent / "preds.jsonl"
    preds.write_text("".join(json.dumps({"id": i, "score": v}) + "\n" for i, v in _noisy_scores(sorted(set(ids))).items()))
    return folder, preds


def test_pairwise_export_into_meta_eval_and_calibrate(pair_task, tmp_path):
    folder, preds = pair_task
    cli("annotate", "export", folder, "--format", "pairwise", "--out", tmp_path)
    rows = [json.loads(line) for line in open(tmp_path / "pairs.jsonl")]
    assert len(rows) == 80 and {r["preference"] for r in rows} <= {"A", "B", "tie"}
    assert all(sum(r["votes"].values()) == 2 for r in rows)  # overlap 2: two first votes per pair
    rep = json.loads(cli("meta-eval", "pairwise", "--human", tmp_path / "pairs.jsonl", "--predictions", preds, "--json"))
    assert rep["n"] == 80 and rep["accuracy"] > 0.45  # three-way; A and B swapped would give ~0.1
    cli("calibrate", "pairwise", "--human", tmp_path / "pairs.jsonl", "--predictions", preds, "--out", tmp_path / "cal.json")
    assert json.load(open(tmp_path / "cal.json"))


def test_genai_bench_export(pair_task, tmp_path):
    folder, preds = pair_task
    r = CliRunner().invoke(app, ["annotate", "export", str(folder), "--format", "genai-bench", "--out", str(tmp_path)])
    assert r.exit_code == 2 and "--verdicts" in r.output  # a judge's answers are what it measures
    out = json.loads(cli("annotate", "export", folder, "--format", "genai-bench", "--out", tmp_path,
                         "--predictions", preds, "--json"))
    items = json.load(open(tmp_path / "genai_bench.json"))
    assert out["rows"] == len(items) and out["rows"] + out["left_out_no_majority"] == 80
    assert {i["human_vote"] for i in items} <= {"leftvote", "rightvote", "tievote", "bothbad_vote"}
    rep = json.loads(cli("meta-eval", "genai-bench", "--judge-outputs", tmp_path / "genai_bench.json", "--json"))
    assert rep["n"] == len(items) and rep["accuracy"] > 0.5


def test_people_arena_and_meta_eval_arena(pair_task, tmp_path):
    folder, _ = pair_task
    doc = json.loads(cli("arena", "--human-votes", folder, "--json", "--n-boot", "50"))
    assert [r["editor"] for r in doc["editors"]] == [f"editor{e}" for e in range(5)]
    assert doc["judge"] == "people" and doc["verdicts"]["comparisons"] == 160
    assert (folder / "arena" / "arena.json").is_file()
    cli("annotate", "export", folder, "--format", "arena", "--out", tmp_path / "exp")
    ranking = json.load(open(tmp_path / "exp" / "human_ranking.json"))
    assert sorted(ranking, key=lambda m: -ranking[m]) == [f"editor{e}" for e in range(5)]
    # arena --human-ranking reads the exported ranking as it reads any
    doc = json.loads(cli("arena", "--human-votes", folder, "--human-ranking", tmp_path / "exp" / "human_ranking.json",
                         "--json", "--n-boot", "20", "--out", tmp_path / "again"))
    assert doc["human"]["n"] == 5 and doc["human"]["kendall"] == pytest.approx(1.0)
    # the people's ranking read by meta-eval arena, against another arena (here: the people's own)
    rep = json.loads(cli("meta-eval", "arena", tmp_path / "exp", "--human-ranking", tmp_path / "exp" / "human_ranking.json",
                         "--json"))
    assert rep["n"] == 5 and rep["value"] == pytest.approx(1.0)
    rep = json.loads(cli("meta-eval", "arena", tmp_path / "exp", "--human-votes", folder, "--json"))
    assert rep["value"] == pytest.approx(1.0) and rep["evaluated"]["human"] == "arena.json"
    # a judge arena with the order of two editors swapped: tau below 1, through the same command
    judge = json.load(open(tmp_path / "exp" / "arena.json"))
    for r in judge["editors"]:
        if r["editor"] in ("editor0", "editor1"):
            r["rating"] = -r["rating"] - 10 if r["editor"] == "editor0" else r["rating"]
    (tmp_path / "judge").mkdir()
    json.dump(judge, open(tmp_path / "judge" / "arena.json", "w"))
    rep = json.loads(cli("meta-eval", "arena", tmp_path / "judge", "--human-votes", folder, "--json"))
    assert rep["value"] < 0.9
    # --human-votes with a run or a judge is refused
    r = CliRunner().invoke(app, ["arena", str(folder), "--human-votes", str(folder)])
    assert r.exit_code == 2


def test_pointwise_export_into_meta_eval_and_calibrate(edits, tmp_path):
    folder = tmp_path / "pw"
    t = Task.create(folder, edits, "pointwise", annotators=["p1", "p2"], overlap=2, seed=2, preset="imagenhub")
    rng = random.Random(3)
    vals = (0.0, 0.5, 1.0)

    def truth(iid):
        k = {2.0: 2, 1.0: 2, 0.0: 1, -1.0: 1, -2.0: 0}[STRENGTH[t.items[iid]["model"]]]
        return {"scores": {"SC": vals[k], "PQ": vals[max(k, 1)]}}
    domain = [{"scores": {"SC": a, "PQ": b}} for a in vals for b in vals]
    for a in ("p1", "p2"):
        synthetic_annotator(t, a, truth, 0.8, rng, lambda _: domain)
    ids = [(i, it["model"]) for i, it in t.items.items()]
    t.close()
    preds = tmp_path / "preds.jsonl"
    preds.write_text("".join(json.dumps({"id": i, "score": v}) + "\n" for i, v in _noisy_scores(ids).items()))
    cli("annotate", "export", folder, "--format", "pointwise", "--out", tmp_path / "exp")
    rows = [json.loads(line) for line in open(tmp_path / "exp" / "human.jsonl")]
    assert len(rows) == 40 and all(r["n_raters"] == 2 and 0 <= r["human"] <= 1 for r in rows)
    rep = json.loads(cli("meta-eval", "pointwise", "--human", tmp_path / "exp" / "human.jsonl", "--predictions", preds,
                         "--json"))
    assert rep["n_items"] == 40 and rep["value"] > 0.4
    cli("calibrate", "pointwise", "--human", tmp_path / "exp" / "human.jsonl", "--predictions", preds,
        "--out", tmp_path / "cal.json", "--good-at", "0.5")
    assert json.load(open(tmp_path / "cal.json"))
    cli("annotate", "export", folder, "--format", "pointwise", "--criterion", "SC", "--out", tmp_path / "sc")
    sc = {json.loads(line)["id"]: json.loads(line) for line in open(tmp_path / "sc" / "human.jsonl")}
    assert all(r["human"] == r["scores"]["SC"] for r in sc.values())
    r = CliRunner().invoke(app, ["annotate", "export", str(folder), "--format", "pairwise"])
    assert r.exit_code == 2 and "point" in r.output


def test_a_judge_arena_against_the_peoples(pair_task, edits, tmp_path):
    """`editlens arena RUN --metric l1_ref` (a model-free evaluator: closeness to a reference edit) is a
    judge's arena; `meta-eval arena` compares its ranking with the people's, read from their votes."""
    folder, _ = pair_task
    rows = [json.loads(line) for line in open(edits)]
    ref = {r["source"]: r["edited"] for r in rows if r["model"] == "editor1"}
    with_ref = edits.parent / "with_reference.jsonl"
    with_ref.write_text("".join(json.dumps({**r, "reference": ref[r["source"]]}) + "\n" for r in rows))
    # scored by a run first: the arena reuses the run's stored scores
    cli("run", with_ref, "--metrics", "l1_ref", "--out", tmp_path / "run")
    cli("arena", tmp_path / "run", "--metric", "l1_ref", "--out", tmp_path / "judge", "--n-boot", "20")
    judge = json.load(open(tmp_path / "judge" / "arena.json"))
    assert judge["editors"][0]["editor"] == "editor1"  # the reference's own editor wins every pair
    rep = json.loads(cli("meta-eval", "arena", tmp_path / "judge", "--human-votes", folder, "--json"))
    from editlens.meta.arena import rank_agreement

    people = json.load(open(folder / "arena" / "arena.json"))
    want = rank_agreement({r["editor"]: r["rating"] for r in judge["editors"]},
                          {r["editor"]: r["rating"] for r in people["editors"]})
    assert rep["n"] == 5 and rep["value"] == pytest.approx(want["kendall"]) and rep["value"] < 1

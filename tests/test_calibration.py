"""Calibration: maps from score to P(people rate the edit good), honest ECE, files, and `--calibration`."""

import json

import numpy as np
import pytest
from helpers import EXAMPLES, shared_path
from typer.testing import CliRunner

from editlens.cli.main import app
from editlens.errors import InputError
from editlens.meta.calibration import (
    CalibrationMap,
    calibrate,
    ece,
    fit_map,
    group_folds,
    load_calibration,
    reliability,
    save_calibration,
)

runner = CliRunner()


def _known(n=4000, seed=0, power=3.0):
    """Scores whose true P(good) is known: people say good with probability p, the evaluator reports p**power."""
    rng = np.random.default_rng(seed)
    p = rng.uniform(0, 1, n)
    good = (rng.uniform(0, 1, n) < p).astype(float)
    return p, p ** power, good


def test_ece_and_reliability_by_hand():
    assert ece([0.2, 0.2, 0.8, 0.8], [0, 1, 1, 1]) == pytest.approx(0.5 * 0.3 + 0.5 * 0.2)
    assert ece([0.1, 0.9], [0.1, 0.9]) == 0.0  # soft targets matched exactly
    bins = reliability([0.05, 0.15, 0.95, 1.0], [0, 1, 1, 0], bins=2)
    assert [(b["n"], b["mean_pred"], b["mean_target"]) for b in bins] == [(2, pytest.approx(0.1), 0.5),
                                                                          (2, pytest.approx(0.975), 0.5)]


def test_a_calibrated_score_stays_calibrated():
    p, _, good = _known(power=1.0)
    m = calibrate(p, good, evaluator="e", n_boot=0)
    assert m.quality["ece_before"] < 0.03 and m.quality["ece_after"] < 0.03
    assert m.predict([0.25, 0.5, 0.75]) == pytest.approx([0.25, 0.5, 0.75], abs=0.06)


def test_a_miscalibrated_score_is_recovered_out_of_fold():
    p, s, good = _known(power=3.0)  # s = p**3: a score of 0.125 means P(good) = 0.5
    m = calibrate(s, good, evaluator="e", scale=(0.0, 1.0), n_boot=50)
    q = m.quality
    # before: E|p**3 - p| over uniform p is 1/4 - ... about 0.19 binned; after: small, honestly out of fold
    assert q["ece_before"] > 0.15
    assert q["ece_after"] < 0.04 and q["ece_in_sample"] <= q["ece_after"]
    assert q["ece_after_ci95"][0] <= q["ece_after"] <= q["ece_after_ci95"][1]
    assert q["brier_after"] < q["brier_before"]
    assert m.predict([0.125, 0.512]) == pytest.approx([0.5, 0.8], abs=0.06)
    assert np.all(np.diff(m.predict(np.linspace(0, 1, 50))) >= 0)  # monotone
    platt = calibrate(s, good, evaluator="e", method="platt", scale=(0.0, 1.0), n_boot=0)
    assert platt.quality["ece_after"] < q["ece_before"] and platt.a > 0


def test_platt_recovers_a_logistic_curve_and_lower_is_better():
    rng = np.random.default_rng(1)
    x = rng.normal(0, 2, 5000)
    y = (rng.uniform(0, 1, x.size) < 1 / (1 + np.exp(-(1.5 * x - 0.5)))).astype(float)
    m = fit_map(x, y, "platt")
    assert (m.a, m.b) == (pytest.approx(1.5, abs=0.15), pytest.approx(-0.5, abs=0.1))
    down = fit_map(-x, y, "isotonic", increasing=False)  # a distance: lower is better
    assert down.predict([-3.0])[0] > 0.9 > 0.1 > down.predict([3.0])[0]


def test_folds_keep_sources_together_and_are_seeded():
    groups = [f"src{i // 8}" for i in range(80)]
    folds = group_folds(groups, 5, seed=0)
    assert all(len({folds[i] for i in range(80) if groups[i] == g}) == 1 for g in set(groups))
    assert sorted(np.bincount(folds)) == [16, 16, 16, 16, 16]
    assert (group_folds(groups, 5, seed=0) == folds).all() and not (group_folds(groups, 5, seed=1) == folds).all()
    with pytest.raises(InputError, match="at least 5 groups"):
        group_folds(["a", "a", "b"], 5)


def test_files_round_trip_merge_and_errors(tmp_path):
    p, s, good = _known(n=400)
    a = calibrate(s, good, evaluator="viescore", benchmark="b1", n_boot=0)
    b = fit_map(s, good, "platt", evaluator="yes_no")
    path = tmp_path / "cal.json"
    save_calibration([a], path)
    _, kept = save_calibration([b], path)
    assert kept == ["viescore"]
    loaded = load_calibration(path)
    assert set(loaded.maps) == {"viescore", "yes_no"} and len(loaded.sha256) == 64
    assert loaded.maps["viescore"].predict([0.1, 0.4]) == pytest.approx(a.predict([0.1, 0.4]))
    assert loaded.maps["yes_no"].predict([0.3]) == pytest.approx(b.predict([0.3]))
    doc = json.loads(path.read_text())
    doc["maps"].append(doc["maps"][0])
    path.write_text(json.dumps(doc))
    with pytest.raises(InputError, match="two maps for evaluator 'viescore'"):
        load_calibration(path)
    path.write_text(json.dumps({"schema": "editlens.calibration/1", "maps": [{"evaluator": "x", "method": "isotonic",
                                                                              "x": [0, 1], "y": [0.2, 1.5]}]}))
    with pytest.raises(InputError, match="map 1: y holds probabilities"):
        load_calibration(path)
    path.write_text("{}")
    with pytest.raises(InputError, match="not a calibration file"):
        load_calibration(path)
    with pytest.raises(InputError, match="calibration file not found"):
        load_calibration(tmp_path / "missing.json")


def _l1_calibration(tmp_path):
    m = CalibrationMap("l1", "isotonic", x=[0.0, 0.01, 0.02], y=[1.0, 0.6, 0.1], benchmark="made up", n=3)
    path, _ = save_calibration([m], tmp_path / "cal.json")
    return path


def test_run_and_score_add_calibrated_to_details(tmp_path):
    cal = _l1_calibration(tmp_path)
    out = tmp_path / "run"
    res = runner.invoke(app, ["run", str(EXAMPLES / "manifest.jsonl"), "--out", str(out), "--metrics", "l1,ssim",
                              "--no-progress"])
    assert res.exit_code == 0, res.output
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert all("calibrated" not in (r["scores"]["l1"].get("details") or {}) for r in rows)
    # a rerun with --calibration computes nothing new and calibrates what is stored
    res = runner.invoke(app, ["run", str(EXAMPLES / "manifest.jsonl"), "--out", str(out), "--metrics", "l1,ssim",
                              "--no-progress", "--calibration", str(cal)])
    assert res.exit_code == 0, res.output
    assert "0 results computed" in res.stdout
    rows = {r["id"]: r for r in (json.loads(line) for line in (out / "results.jsonl").read_text().splitlines())}
    for r in rows.values():
        v = r["scores"]["l1"]["value"]
        assert r["scores"]["l1"]["details"]["calibrated"] == pytest.approx(float(np.interp(v, [0, 0.01, 0.02], [1, 0.6, 0.1])))
        assert "details" not in r["scores"]["ssim"]  # no map for ssim
    assert rows["cat_seat_noop"]["scores"]["l1"]["details"]["calibrated"] == 1.0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["calibration"]["maps"]["l1"]["benchmark"] == "made up"
    res = runner.invoke(app, ["score", "--source", str(EXAMPLES / "images/cat_seat_source.png"), "--edited",
                              str(EXAMPLES / "images/cat_seat_edited.png"), "--instruction", "x", "--metrics", "l1",
                              "--calibration", str(cal), "--json"])
    assert res.exit_code == 0, res.output
    l1 = json.loads(res.stdout)["scores"]["l1"]
    assert l1["details"]["calibrated"] == pytest.approx(float(np.interp(l1["value"], [0, 0.01, 0.02], [1, 0.6, 0.1])))
    res = runner.invoke(app, ["run", str(EXAMPLES / "manifest.jsonl"), "--out", str(out), "--metrics", "l1",
                              "--calibration", str(tmp_path / "nope.json")])
    assert res.exit_code == 2 and "calibration file not found" in res.output


def test_calibrate_pointwise_and_pairwise_commands(tmp_path):
    p, s, good = _known(n=600, seed=4)
    human = tmp_path / "h.jsonl"
    preds = tmp_path / "p.jsonl"
    human.write_text("".join(json.dumps({"id": f"i{k}", "model": "m", "human": 4 * g + 1, "group": f"src{k // 3}"})
                             + "\n" for k, g in enumerate(good)))
    preds.write_text("".join(json.dumps({"id": f"i{k}", "score": float(v)}) + "\n" for k, v in enumerate(s)))
    out = tmp_path / "cal.json"
    res = runner.invoke(app, ["calibrate", "pointwise", "--human", str(human), "--predictions", str(preds),
                              "--out", str(out)])
    assert res.exit_code == 2 and "--good-at" in res.output  # 1-5 ratings: say which are good
    res = runner.invoke(app, ["calibrate", "pointwise", "--human", str(human), "--predictions", str(preds),
                              "--good-at", "3", "--out", str(out), "--json", "--report", str(tmp_path / "cal.html")])
    assert res.exit_code == 0, res.output
    rep = json.loads(res.stdout)
    q = rep["calibration"]["score"]
    assert q["grouped_by"] == "source" and q["ece_after"] < q["ece_before"]
    assert load_calibration(out).maps["score"].target == "human >= 3"
    page = (tmp_path / "cal.html").read_text()
    assert 'alt="reliability diagram of score"' in page and 'data-ece="after"' in page
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps({"id": f"q{k}", "a": f"i{k}", "b": f"i{k + 1}",
                                         "preference": "A" if good[k] >= good[k + 1] else "B"}) + "\n"
                             for k in range(0, 598, 2)))
    res = runner.invoke(app, ["calibrate", "pairwise", "--human", str(pairs), "--predictions", str(preds),
                              "--out", str(tmp_path / "pair.json"), "--json"])
    assert res.exit_code == 0, res.output
    m = load_calibration(tmp_path / "pair.json").maps["score"]
    assert m.kind == "pairwise" and m.predict([0.9])[0] > m.predict([-0.9])[0]


def test_meta_eval_report_shows_calibration(tmp_path):
    from editlens.bench.aurora import pointwise_report
    from editlens.reporting.html import render_meta_report

    p, s, good = _known(n=300, seed=2)
    human = tmp_path / "h.jsonl"
    preds = tmp_path / "p.jsonl"
    human.write_text("".join(json.dumps({"id": f"i{k}", "model": f"m{k % 3}", "human": g}) + "\n"
                             for k, g in enumerate(good)))
    preds.write_text("".join(json.dumps({"id": f"i{k}", "score": float(v)}) + "\n" for k, v in enumerate(s)))
    rep = pointwise_report(human, preds, n_boot=50)
    cal = rep["calibration"]["evaluators"]["score"]
    assert cal["n"] == 300 and cal["ece_after"] < cal["ece_before"]
    assert {"before", "after"} == set(cal["reliability"])
    page = render_meta_report(rep, "demo")
    assert 'id="calibration"' in page and "reliability diagram" in page and "ECE after (out of fold)" in page


@pytest.mark.integration
def test_calibrate_gpt4o_on_imagenhub(tmp_path):
    """The shared ImagenHub ratings with the shared GPT-4o answers (VIEScore O): the out-of-fold ECE of
    P(a rater finds the edit good) is well below the raw score's."""
    root = shared_path("benchmarks", "imagenhub_tie")
    out = tmp_path / "cal.json"
    res = runner.invoke(app, ["calibrate", "imagenhub", "--ratings", str(root / "human_ratings"), "--judge-outputs",
                              str(root / "judge_outputs" / "gpt4o_0shot"), "--out", str(out), "--json"])
    assert res.exit_code == 0, res.output
    q = json.loads(res.stdout)["calibration"]["viescore"]
    assert q["n"] == 1432 and q["grouped_by"] == "source"
    assert q["ece_before"] == pytest.approx(0.0588, abs=5e-4)  # the raw O read as a probability
    assert q["ece_after"] == pytest.approx(0.0180, abs=5e-4)  # isotonic, 5 folds by source, seed 0
    assert q["ece_after_ci95"][1] < q["ece_before"]
    # the meta-eval report carries the same calibration and still reproduces the published figure
    from editlens.bench.imagenhub import imagenhub_report

    rep = imagenhub_report(root / "human_ratings", root / "judge_outputs" / "gpt4o_0shot", n_boot=50)
    assert rep["value"] == pytest.approx(0.3821, abs=1e-4)
    assert rep["calibration"]["evaluators"]["viescore"]["ece_after"] == pytest.approx(q["ece_after"])
    assert sum(t["n"] for t in rep["by_edit_type"].values()) == 1432 and rep["by_edit_type"]["add"]["n"] > 100

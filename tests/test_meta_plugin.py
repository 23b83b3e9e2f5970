"""Done when (issue 45): a human-label benchmark is one file. A plugin's benchmark (tests/plugin_bench/
toy_ratings.py), installed as a distribution whose ``editlens.benchmarks`` entry point names it, runs
through `meta-eval run` (with its HTML report), `meta-eval list` and `calibrate run` with no other file
of editlens touched. It runs in a fresh process so the entry point is found the way a user's is."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from scipy import stats

from editlens.meta.calibration import load_calibration

HERE = Path(__file__).resolve().parent
SCRIPT = ("import json, sys\nfrom typer.testing import CliRunner\nfrom editlens.cli.main import app\n"
          "runs = [CliRunner().invoke(app, a) for a in json.loads(sys.argv[1])]\n"
          "print(json.dumps([[r.exit_code, r.stdout, r.output + repr(r.exception)] for r in runs]))\n")


def _install(site: Path) -> None:
    """A distribution with one module and one entry point, as pip would leave it in site-packages."""
    site.mkdir()
    shutil.copy(HERE / "plugin_bench" / "toy_ratings.py", site / "toy_ratings_plugin.py")
    info = site / "toy_ratings_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-ratings-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[editlens.benchmarks]\ntoy-ratings = toy_ratings_plugin:ToyRatings\n")


def _data(root: Path) -> tuple[Path, Path, list[float], list[float]]:
    ratings = root / "ratings.csv"
    lines, means, scores = ["id,rater,rating"], [], []
    for i in range(30):
        rs = [1 + (i * 7 + r * 3) % 5 for r in range(3)]
        lines += [f"e{i},r{r},{v}" for r, v in enumerate(rs)]
        means.append(sum(rs) / 3)
        scores.append(round(sum(rs) / 3 + ((i * 13) % 7) / 5, 4))
    ratings.write_text("\n".join(lines) + "\n")
    preds = root / "preds.jsonl"
    preds.write_text("".join(json.dumps({"id": f"e{i}", "score": s}) + "\n" for i, s in enumerate(scores)))
    return ratings, preds, means, scores


def test_a_plugin_human_label_benchmark_runs_through_meta_eval_calibrate_and_the_report(tmp_path: Path) -> None:
    _install(tmp_path / "site")
    ratings, preds, means, scores = _data(tmp_path)
    runs = [["meta-eval", "run", "toy-ratings", "--data", str(ratings), "--predictions", str(preds), "--n-boot", "50",
             "--json", "--report", str(tmp_path / "report.html")],
            ["meta-eval", "run", "toy-ratings", "--data", str(ratings), "--predictions", str(preds), "--n-boot", "50"],
            ["meta-eval", "list", "--json"],
            ["calibrate", "run", "toy-ratings", "--data", str(ratings), "--predictions", str(preds), "--out",
             str(tmp_path / "cal.json"), "--folds", "3", "--json", "--report", str(tmp_path / "cal.html")],
            ["meta-eval", "run", "toy-ratings", "--data", str(ratings), "--predictions", str(preds), "--protocol", "x"]]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), str(HERE.parent)])}
    done = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(runs)], capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    (code, out, both), (code_text, text, _), (code_list, listed, _), (code_cal, cal, cal_both), (code_bad, _, bad) = \
        json.loads(done.stdout)
    assert code == 0, both
    rep = json.loads(out)
    assert rep["value"] == pytest.approx(stats.kendalltau(scores, means)[0]) and rep["n_items"] == 30
    assert rep["evaluated"] == {"evaluator": "score column", "answers": "preds.jsonl", "human": "ratings.csv"}
    page = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert "toy ratings" in page and "toy-kendall" in page and f"{rep['value']:.3f}"[:4] in page
    assert code_text == 0 and text.strip() == f"toy ratings: Kendall tau {rep['value']:.4f} over 30 edits"
    rows = {r["name"]: r for r in json.loads(listed)}
    assert code_list == 0 and rows["toy-ratings"]["class"] == "toy_ratings_plugin:ToyRatings"
    assert rows["toy-ratings"]["protocols"] == {"toy-kendall": "Kendall tau of the scores with the mean rating"}
    assert code_cal == 0, cal_both
    q = json.loads(cal)
    assert q["benchmark"] == "toy-ratings" and q["target"] == "share of raters who gave 4 or more"
    saved = load_calibration(tmp_path / "cal.json").maps["score"]
    assert saved.benchmark == "toy-ratings" and saved.n == 30 and saved.kind == "pointwise"
    assert "calibration · toy ratings" in (tmp_path / "cal.html").read_text(encoding="utf-8")
    assert code_bad == 2 and "no protocol 'x'; it has toy-kendall" in bad

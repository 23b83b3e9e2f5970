"""`editlens arena`: Bradley-Terry ratings from pairwise verdicts, scheduled adaptively.

Recovery of known strengths uses a simulated judge (a test double that draws each
verdict from the Davidson model of the editors' true strengths: it stands in for a
judge so the statistics can be checked against the truth); position bias uses the
real pairwise judge on a scripted backend that always prefers the first picture.
"""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
from helpers import EXAMPLES
from scripted import ScriptedBackend
from typer.testing import CliRunner

from editlens.cli.main import app
from editlens.runner.arena import Contest, contests_from, run_arena
from editlens.testing.report_scenario import build_scenario, register_detail_kept, unregister_detail_kept

runner = CliRunner()
#: nothing here depends on a model's precision (statistics, a scripted judge, numpy scores): CI's first pass is enough
pytestmark = pytest.mark.once
TRUE = {"e0": 1.5, "e1": 0.5, "e2": -0.5, "e3": -1.5}  # log-strengths, centred


class SimulatedJudge:
    """Verdicts drawn from the Davidson model of :data:`TRUE` (tie parameter ``nu``)."""

    name = "simulated"

    def __init__(self, seed: int, nu: float = 0.3) -> None:
        self.rng = np.random.default_rng(seed)
        self.nu = nu
        self.asked = 0

    def identity(self) -> dict:
        return {"simulated": self.nu}

    def compare(self, items, batch_size=8):  # type: ignore[no-untyped-def]
        out = []
        for it in items:
            self.asked += 1
            _, a, b = it.id.split("|")
            pa, pb = math.exp(TRUE[a]), math.exp(TRUE[b])
            u = self.rng.random() * (pa + pb + self.nu * math.sqrt(pa * pb))
            label = 1 if u < pa else -1 if u < pa + pb else 0
            out.append({"id": it.id, "verdict": {1: "A>B", -1: "B>A", 0: "A=B"}[label], "label": label})
        return out


def _contests(n: int, editors=TRUE) -> list[Contest]:  # type: ignore[no-untyped-def]
    return [Contest(f"s{k}", f"s{k}.png", "edit", {m: f"{k}_{m}.png" for m in editors},
                    {m: f"{k}/{m}" for m in editors}) for k in range(n)]


def test_recovers_known_strengths_with_fewer_comparisons_than_all_pairs(tmp_path):
    covered = cases = 0
    for seed in range(3):
        doc = run_arena(_contests(60), SimulatedJudge(seed), tmp_path / str(seed), seed=seed, n_boot=100)
        rows = doc["editors"]
        assert [r["editor"] for r in rows] == list(TRUE)  # the order, every seed
        assert [r["rank"] for r in rows] == [1, 2, 3, 4]
        s = doc["schedule"]
        assert s["all_pairs"] == 60 * 6 and s["comparisons"] < 0.8 * s["all_pairs"] and s["stopped"] == "settled"
        assert doc["verdicts"]["comparisons"] == s["comparisons"] and doc["ties"] == "davidson"
        assert 0.1 < doc["tie_parameter"] < 1.0  # the simulated nu (0.3), fitted
        for r in rows:
            cases += 1
            covered += r["ci"][0] <= TRUE[r["editor"]] <= r["ci"][1]
            assert r["elo"] == pytest.approx(1000 + 400 * r["rating"] / math.log(10))
        assert all(n["p_better"] > 0.5 for n in doc["neighbours"])
    assert covered >= cases - 1  # 95% intervals: at most 1 miss of 12


def test_budget_caps_comparisons_and_rerun_replays_the_cache(tmp_path):
    first = SimulatedJudge(0)
    doc = run_arena(_contests(20), first, tmp_path, budget=25, n_boot=50)
    assert doc["schedule"]["comparisons"] == 25 and doc["schedule"]["stopped"] == "budget" and first.asked == 25
    again = SimulatedJudge(99)  # different draws: a rerun must not ask (nor change) anything already judged
    doc2 = run_arena(_contests(20), again, tmp_path, budget=25, n_boot=50)
    assert again.asked == 0 and doc2["schedule"]["cached"] == 25
    assert doc2["editors"] == doc["editors"]
    lines = (tmp_path / "comparisons.jsonl").read_text().splitlines()
    assert len(lines) == 25 and json.loads((tmp_path / "arena.json").read_text())["schema"] == "editlens.arena/1"


def test_failed_verdicts_are_asked_again(tmp_path):
    class Flaky(SimulatedJudge):
        def compare(self, items, batch_size=8):  # type: ignore[no-untyped-def]
            out = super().compare(items, batch_size)
            return [{"id": v["id"], "verdict": None, "label": None, "reason": "HTTP 503", "failed": True}
                    if k == 0 else v for k, v in enumerate(out)]

    doc = run_arena(_contests(6), Flaky(0), tmp_path, budget=6, n_boot=20)
    assert doc["verdicts"]["failed"] >= 1 and doc["verdicts"]["no_verdict"] == doc["verdicts"]["failed"]
    again = SimulatedJudge(0)
    run_arena(_contests(6), again, tmp_path, budget=6, n_boot=20)
    assert again.asked == doc["verdicts"]["failed"]  # only the lost ones


def test_a_judge_that_always_prefers_the_first_picture_rates_every_editor_equal(tmp_path):
    from editlens.judges.pairwise import PairwiseJudge
    from editlens.metrics.registry import get_spec
    from editlens.runner.compare import JudgeComparer

    made = build_scenario(tmp_path / "scene", mirror=False, upscale_one=False, examples=EXAMPLES)
    contests, info = contests_from(made["manifest"])
    assert len(contests) == 4 and info["editors"] == sorted(["blur", "ground_truth", "no_op", "wrong_edit"])
    comparer = JudgeComparer.__new__(JudgeComparer)
    backend = ScriptedBackend(lambda r: "The first image follows the instruction. [[A>B]]")
    comparer.judge = PairwiseJudge(vlm="scripted", orders="both")
    comparer.judge._backend = backend
    comparer.judge.spec = get_spec("pairwise")
    comparer.name = "pairwise (both)"
    for ties in ("davidson", "half"):  # the second fit reads every verdict from the first's cache
        doc = run_arena(contests, comparer, tmp_path / "arena", ties=ties, n_boot=50)
        v = doc["verdicts"]
        assert v["comparisons"] == doc["schedule"]["all_pairs"] == 24  # never settled: every pair asked
        assert v["decided"] == 0 and v["ties"] == 24 and v["position_bias"] == 24
        assert len(backend.requests) == 48  # both orders of every pair, asked once
        # ties leave no order: no rank, rank CI or neighbour "significance" from floating-point noise
        assert {r["rank"] for r in doc["editors"]} == {None} and {r["rank_ci"] for r in doc["editors"]} == {None}
        assert doc["neighbours"] == [] and doc["ordered"] is False
        assert all(r["rating"] == 0 for r in doc["editors"])
        # 4 sources: too few for a CI, said rather than given as [0, 0]
        assert all(r["ci"] is None and r["rating_note"].startswith("too few sources (4)") for r in doc["editors"])
        assert "every verdict was a tie (24, 24 of them position bias" in doc["notes"][0]
        assert "no rank is given" in doc["notes"][0]
        assert doc["tie_parameter"] is None  # nothing to fit nu from when every verdict is a tie
    assert doc["schedule"]["cached"] == 24 and doc["ties"] == "half"


@pytest.fixture(scope="module")
def scene_run(tmp_path_factory):  # type: ignore[no-untyped-def]
    register_detail_kept()
    root = tmp_path_factory.mktemp("arena")
    made = build_scenario(root, mirror=False, examples=EXAMPLES)
    res = runner.invoke(app, ["run", str(made["manifest"]), "--out", str(root / "run"), "--metrics",
                              "change_map,l1,detail_kept", "--no-progress"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    yield root
    unregister_detail_kept()


def test_cli_on_a_run_with_stored_scores_and_a_human_ranking(scene_run):
    human = scene_run / "human.json"
    human.write_text(json.dumps(["ground_truth", "wrong_edit", "blur", "no_op"]))
    args = ["arena", str(scene_run / "run"), "--metric", "detail_kept", "--ties", "half", "--human-ranking", str(human)]
    res = runner.invoke(app, args + ["--json"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout[res.stdout.index("{"):])
    assert doc["judge"] == "detail_kept" and doc["judge_identity"]["stored_scores"] == "detail_kept"
    assert doc["schedule"]["asked"] == doc["schedule"]["comparisons"]
    assert doc["ties_model"].startswith("ties as half a win")
    # the no-op (the change map finds every edit unchanged) keeps all the detail and would win: rated, flagged,
    # never ranked, as on the leaderboard; a blur loses fine detail on every source: last of the ranked
    rows = {r["editor"]: r for r in doc["editors"]}
    assert doc["editors"][-1]["editor"] == "no_op" and rows["no_op"]["rank"] is None
    assert rows["no_op"]["noop"] == "4/4 edits unchanged" and any(n.startswith("no_op: all 4 checked edits") for n in doc["notes"])
    assert [r["rank"] for r in doc["editors"][:3]] == [1, 2, 3] and doc["editors"][2]["editor"] == "blur"
    assert rows["blur"]["losses"] == rows["blur"]["comparisons"]
    assert [n["worse"] for n in doc["neighbours"]][-1] == "blur"  # neighbours among the ranked only
    assert doc["human"]["n"] == 3 and doc["human"]["kendall"] is not None  # the ranked editors
    saved = json.loads((scene_run / "run" / "arena" / "arena.json").read_text())
    assert saved["editors"] == doc["editors"]
    # rerun: every verdict from the cache; the table names the ties model and the CI
    res = runner.invoke(app, args + ["--scale", "elo"], catch_exceptions=False)
    assert res.exit_code == 0 and "0 asked" in res.output and "ties as half a win" in res.output
    assert "Elo" in res.output and "Kendall τ" in res.output
    # the run's report shows the arena's ranking beside the leaderboard
    from editlens.reporting.collect import collect_run
    from editlens.reporting.html import render_run_report

    page = render_run_report(collect_run(scene_run / "run", n_boot=20), images="none")
    section = page[page.index('<section id="arena">'):]
    section = section[:section.index("</section>")]
    shown = re.findall(r'<td class="editor" data-model="([^"]+)"', section)
    assert shown == [r["editor"] for r in doc["editors"]] and "ties as half a win" in section
    assert f'data-kendall="{doc["human"]["kendall"]}"' in section
    # and `runs leaderboard` prints it beside the leaderboard
    md = runner.invoke(app, ["runs", "leaderboard", str(scene_run / "run"), "--format", "md"], catch_exceptions=False).stdout
    block = md[md.index("**pairwise arena judged by detail_kept"):]
    assert [line.split(" | ")[1].split(" [")[0] for line in block.splitlines()[4:8]] == shown


def test_cli_refuses_similarity_and_says_what_to_give(scene_run):
    res = runner.invoke(app, ["arena", str(scene_run / "run"), "--metric", "l1"])
    assert res.exit_code == 2 and "changes nothing" in res.output
    res = runner.invoke(app, ["arena", str(scene_run / "run")])
    assert res.exit_code == 2 and "--judge" in res.output
    res = runner.invoke(app, ["arena", str(scene_run / "run"), "--judge", "pairwise"])
    assert res.exit_code == 2 and "--vlm" in res.output
    res = runner.invoke(app, ["arena", str(scene_run / "run"), "--metric", "detail_kept", "--editors", "blur,nobody"])
    assert res.exit_code == 2 and "nobody" in res.output


def test_meta_eval_of_an_arena_against_a_human_ranking(scene_run, tmp_path):
    arena_dir = scene_run / "run" / "arena"
    if not (arena_dir / "arena.json").is_file():
        res = runner.invoke(app, ["arena", str(scene_run / "run"), "--metric", "detail_kept"], catch_exceptions=False)
        assert res.exit_code == 0, res.output
    doc = json.loads((arena_dir / "arena.json").read_text())
    order = [r["editor"] for r in doc["editors"] if r["rank"] is not None]  # the no-op is not ranked
    human = tmp_path / "human.json"
    human.write_text(json.dumps(order[::-1] + ["no_op"]))  # exactly reversed: tau = -1
    out = tmp_path / "meta.html"
    res = runner.invoke(app, ["meta-eval", "arena", str(arena_dir), "--human-ranking", str(human), "--json",
                              "--report", str(out)], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    rep = json.loads(res.stdout)
    assert rep["value"] == pytest.approx(-1.0) and rep["spearman"] == pytest.approx(-1.0) and rep["n"] == 3
    assert rep["not_ranked"] == ["no_op"] and rep["only_in_human"] == ["no_op"]
    assert rep["evaluated"] == {"evaluator": doc["judge"], "answers": "arena", "human": "human.json"}
    page = out.read_text()
    assert "Kendall τ (τ-b) between the two rankings" in page and str(tmp_path) not in page
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(["nobody", "else"]))
    res = runner.invoke(app, ["meta-eval", "arena", str(arena_dir), "--human-ranking", str(bad)])
    assert res.exit_code == 2 and "names 0 of the arena's ranked editors" in res.output


def test_cli_on_a_manifest_scores_each_edit_once_and_resumes(scene_run, tmp_path, monkeypatch):
    from editlens.metrics.base import Metric

    calls = []
    real = Metric.score_batch
    monkeypatch.setattr(Metric, "score_batch", lambda self, batch: calls.append(len(batch)) or real(self, batch))
    args = ["arena", str(scene_run / "manifest.jsonl"), "--metric", "detail_kept", "--out", str(tmp_path / "a"),
            "--budget", "10", "--json"]
    first = runner.invoke(app, args, catch_exceptions=False)
    assert first.exit_code == 0, first.output
    doc = json.loads(first.stdout[first.stdout.index("{"):])
    assert doc["schedule"]["comparisons"] == 10 and doc["schedule"]["stopped"] == "budget"
    assert doc["judge_identity"]["metric"] == "detail_kept"  # scored here, not read from a run
    assert 0 < sum(calls) <= 20  # each distinct edit of the asked pairs scored once
    calls.clear()
    again = runner.invoke(app, args, catch_exceptions=False)
    assert json.loads(again.stdout[again.stdout.index("{"):])["schedule"]["cached"] == 10 and sum(calls) == 0


def test_a_run_made_with_columns_is_read_back_with_them(tmp_path):
    """`arena RUN` reads the run's manifest as the run read it (--columns source=input,edited=output)."""
    import json

    import numpy as np
    from PIL import Image
    from typer.testing import CliRunner

    from editlens.cli.main import app
    from editlens.runner.arena import contests_from

    rng = np.random.default_rng(0)
    rows = []
    for k in range(2):
        src = rng.integers(0, 255, (32, 32, 3), dtype=np.uint8)
        Image.fromarray(src).save(tmp_path / f"s{k}.png")
        for m, shift in (("a", 10), ("b", 60)):
            Image.fromarray(np.clip(src.astype(int) + shift, 0, 255).astype(np.uint8)).save(tmp_path / f"{m}{k}.png")
            rows.append({"id": f"{m}{k}", "input": f"s{k}.png", "output": f"{m}{k}.png", "instruction": "brighten",
                         "model": m})
    (tmp_path / "m.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = CliRunner().invoke(app, ["run", str(tmp_path / "m.jsonl"), "--out", str(tmp_path / "r"), "--metrics", "l1",
                                   "--columns", "source=input,edited=output", "--no-progress"])
    assert res.exit_code == 0, res.output
    contests, info = contests_from(tmp_path / "r")
    assert len(contests) == 2 and sorted(info["editors"]) == ["a", "b"]

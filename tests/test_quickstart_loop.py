"""Issue 41: the loop from `edit` to a ranked table without workarounds, each joint run from the CLI.

The scripted judge (``make-tiny-vlm --scripted`` / ``serve --scripted-judge``) answers every judge
and benchmark prompt in its format, deterministically, and is marked as NOT a real judge everywhere."""

from __future__ import annotations

import json

import bench_files as F
import numpy as np
import pytest
from typer.testing import CliRunner

from editlens.cli.main import app

runner = CliRunner()


def _bench_items(name, root):
    from editlens.bench.registry import get

    writers = {"gedit": F.gedit, "imgedit": F.imgedit, "kris": F.kris, "rise": F.rise}
    return get(name), get(name).read(writers[name](root / name))


@pytest.mark.parametrize("name", ["gedit", "imgedit", "kris", "rise"])
def test_the_scripted_judge_answers_every_benchmark_question_readably_and_deterministically(name, tmp_path):
    from editlens.backends.scripted_judge import LABEL, ScriptedJudgeBackend
    from editlens.backends.types import ChatRequest, Message
    from editlens.bench.judge import message_parts
    from editlens.bench.prompts import load_prompts

    bench, items = _bench_items(name, tmp_path)
    prompts = load_prompts(bench, None)
    judge = ScriptedJudgeBackend(seed=3)
    seen = set()
    for it in items:
        for q in bench.questions(it, prompts):
            imgs = {r: np.full((8, 8, 3), i * 40, np.uint8) for i, r in enumerate(q.images)}
            req = ChatRequest([Message("user", message_parts(q, imgs))])
            text = judge.generate([req])[0].text
            values = bench.parse_answer(q, text, False)
            assert values is not None and len(values) == len(q.dimensions), (q.name, text)
            assert LABEL in text and judge.generate([req])[0].text == text  # labelled, deterministic
            seen.add(tuple(values))
    assert len(seen) > 1  # varied: not one constant answer


def test_the_scripted_judge_answers_the_generic_judges_in_their_formats():
    from editlens.backends.scripted_judge import ScriptedJudgeBackend
    from editlens.backends.types import ChatRequest, Message
    from editlens.judges.parsing import read_scores
    from editlens.judges.templates import load_template

    judge = ScriptedJudgeBackend()
    for name, n in (("viescore_sc", 2), ("viescore_pq", 2), ("editscore_sc", 2)):
        text = load_template(name).text.replace("$instruction", "add a hat").replace("$scale", "10")
        answer = judge.generate([ChatRequest([Message("user", [text])])])[0].text
        scores, _, problem = read_scores(answer, expected=n, low=0, high=10)
        assert scores is not None, (name, problem)
    pair = judge.generate([ChatRequest([Message("user", [load_template("pairwise").text])])])[0].text
    assert pair.splitlines()[-1] in ("[[A>B]]", "[[B>A]]", "[[A=B=Good]]", "[[A=B=Bad]]")
    yn = judge.generate([ChatRequest([Message("user", [load_template("yes_no").text])], candidates=("YES", "NO"))])[0]
    assert yn.text in ("YES", "NO") and yn.candidate_distribution(0) is not None
    odd = judge.generate([ChatRequest([Message("user", ["Tell me a story."])])])[0].text
    assert read_scores(odd)[0] is None  # no format asked: nothing that reads as a score


def test_a_missing_diffusers_names_the_editors_extra_instead_of_a_traceback(tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "diffusers", None)  # import diffusers -> ModuleNotFoundError
    res = runner.invoke(app, ["make-tiny-editor", str(tmp_path / "ed")])
    assert res.exit_code == 2 and "pip install 'editlens[editors]'" in res.output and "Traceback" not in res.output


def test_one_item_groups_give_no_zero_width_interval():
    from editlens.bench.table import mean_of_means

    assert mean_of_means({"a": [4.0], "b": [2.0]}, n_boot=50)["ci95"] is None
    assert mean_of_means({"a": [4.0, 1.0], "b": [2.0]}, n_boot=50)["ci95"] is not None


def test_a_tuned_editor_keeps_its_base_folders_settings(tmp_path):
    from editlens.adiee.tune_editor import base_editor_settings

    (tmp_path / "editlens_editor.json").write_text(json.dumps({"settings": {"resolution": 64}}))
    assert base_editor_settings(str(tmp_path)) == {"resolution": 64}
    assert base_editor_settings(str(tmp_path / "nothing")) == {}


def test_edit_bench_then_bench_run_arena_leaderboard_report_from_the_cli(tmp_path, monkeypatch):
    """edit --bench folders are what bench run --edits reads; its run/ is an ordinary run (manifest, images in
    the report, the judge's direction); arena reads its table-cell sources and leaves no journal; every output
    says the scripted judge is not a real judge."""
    monkeypatch.setenv("EDITLENS_CACHE_DIR", str(tmp_path / "cache"))
    data, loop, judge = tmp_path / "GEdit", tmp_path / "loop", tmp_path / "judge"
    assert runner.invoke(app, ["bench", "sample", "gedit", "--out", str(data)]).exit_code == 0
    assert runner.invoke(app, ["make-tiny-vlm", str(judge), "--scripted"]).exit_code == 0
    for name, editor in (("same", "editlens.editors.callable_editor:identity_edit"),
                         ("flip", "tests.test_quickstart_loop:flip_edit")):
        res = runner.invoke(app, ["edit", str(data), "--bench", "gedit", "--editor", editor,
                                  "--out", str(loop / "edits" / name), "--no-progress"])
        assert res.exit_code == 0, res.output
    rows = [json.loads(x) for x in (loop / "edits" / "same" / "manifest.jsonl").read_text().splitlines()]
    assert rows[0]["source"].startswith("../../../GEdit/data/")  # relative: the folders move together
    res = runner.invoke(app, ["bench", "run", "gedit", "--data", str(data), "--edits", str(loop / "edits"),
                              "--vlm", str(judge), "--out", str(loop), "--no-progress", "--n-boot", "50"])
    assert res.exit_code == 0, res.output
    table = json.loads((loop / "table.json").read_text())
    assert [r["rank"] for r in table["comparison"]["rows"]] == [1, 2]
    assert "NOT A REAL JUDGE" in (loop / "table.md").read_text() and "\\toprule" in (loop / "table.tex").read_text()
    assert "\\hline" not in (loop / "table.tex").read_text() and "$\\pm$" not in (loop / "table.tex").read_text()
    assert (loop / "run" / "manifest.jsonl").is_file()
    assert (loop / "run" / "report.html").read_text().count("data:image/") >= 8  # the edits' images
    assert 'href="run/report.html"' in (loop / "report.html").read_text()
    lb = runner.invoke(app, ["runs", "leaderboard", str(loop / "run"), "--format", "latex"])
    assert lb.exit_code == 0 and "edit quality, higher is better" in lb.output and "NOT A REAL JUDGE" in lb.output
    ar = runner.invoke(app, ["arena", str(loop / "run"), "--judge", "pairwise", "--vlm", str(judge)])
    assert ar.exit_code == 0, ar.output
    assert "NOT A REAL JUDGE" in ar.output
    assert not list((loop / "run" / "arena").glob("*-journal"))


def flip_edit(image, instruction, seed=0):  # an editor that changes the picture (mirror image)
    from PIL import ImageOps

    return ImageOps.mirror(image)


@pytest.mark.slow
@pytest.mark.once
def test_the_quickstart_runs_as_written_from_the_wheel_in_a_fresh_venv(wheel_venv, tmp_path):
    """docs/quickstart-loop.md, run from the built wheel in a fresh venv (tests/conftest.py builds it once for
    this test and tests/test_front_door.py), so `editlens` can only be the installed wheel."""
    import os
    import re
    import subprocess

    from helpers import REPO

    _, py, _ = wheel_venv
    venv = py.parent.parent
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    script = re.search(r"^```bash\n(.*?)^```", (REPO / "docs" / "quickstart-loop.md").read_text(), re.S | re.M)
    assert script is not None
    work = tmp_path / "work"
    work.mkdir()
    env = dict(clean)
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env['PATH']}", HF_HUB_OFFLINE="1",
               EDITLENS_CACHE_DIR=str(tmp_path / "cache"))
    assert (venv / "bin" / "editlens").is_file(), sorted(p.name for p in (venv / "bin").iterdir())
    res = subprocess.run(["bash", "-e", "-c", script.group(1)], cwd=work, env=env, capture_output=True, text=True,
                         timeout=1200)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    assert "\\toprule" in (work / "leaderboard.tex").read_text() and "\\#" in (work / "leaderboard.tex").read_text()
    assert json.loads((work / "loop" / "run" / "arena" / "arena.json").read_text())["editors"]
    card = json.loads((work / "tuned" / "editor" / "editlens_editor.json").read_text())
    assert card["settings"] == {"resolution": 64}  # the base's settings kept
    made = json.loads((work / "loop" / "edits" / "alpha-tuned" / "editor.json").read_text())
    assert made["settings"]["resolution"] == 64 and made["settings"]["settings_from_folder"] == ["resolution"]


def test_option_typos_editor_option_aliases_and_an_all_unscored_bench_run_are_clean_messages(tmp_path):
    from fake_openai import FakeServer

    from editlens.runner.selection import parse_options

    with pytest.raises(Exception, match="pairwise has no option 'bogus_key'"):
        parse_options(["pairwise.bogus_key=16"])
    assert parse_options(["pairwise.orders=forward"]) == {"pairwise": {"orders": "forward"}}

    class Garbage(FakeServer):
        def good_answer(self, body):  # type: ignore[no-untyped-def]
            return "I like this picture."

    data = F.gedit(tmp_path / "gedit")
    F.gedit_outputs(tmp_path / "edits", "m", ["k1", "k2"])
    with Garbage().running() as url:
        res = runner.invoke(app, ["bench", "run", "gedit", "--data", str(data), "--edits", str(tmp_path / "edits"),
                                  "--out", str(tmp_path / "out"), "--vlm", url, "--cache", "none", "--n-boot", "20",
                                  "--no-progress"])
    assert res.exit_code == 3 and "the judge produced nothing readable" in res.output


def test_diffusers_editors_take_the_pipelines_own_argument_names(tmp_path):
    from editlens.editors.random_init import make_tiny_editor
    from editlens.editors.registry import create_editor

    make_tiny_editor(tmp_path / "ed", "instruct-pix2pix")
    ed = create_editor(str(tmp_path / "ed"), num_inference_steps=3, guidance_scale=2.0)
    assert ed.settings()["steps"] == 3 and ed.settings()["guidance"] == 2.0
    with pytest.raises(Exception, match="set the same thing"):
        create_editor(str(tmp_path / "ed"), num_inference_steps=3, steps=4)


def test_limit_on_run_edit_best_of_n_and_arena(tmp_path, monkeypatch):
    from helpers import EXAMPLES

    monkeypatch.setenv("EDITLENS_CACHE_DIR", str(tmp_path / "cache"))
    res = runner.invoke(app, ["run", str(EXAMPLES / "manifest.jsonl"), "--out", str(tmp_path / "r"), "--metrics",
                              "l1", "--limit", "2", "--no-progress"])
    assert res.exit_code == 0 and "2 samples" in res.output
    assert json.loads((tmp_path / "r" / "manifest.json").read_text())["inputs"]["limit"] == 2
    res = runner.invoke(app, ["edit", str(EXAMPLES / "manifest.jsonl"), "--editor",
                              "editlens.editors.callable_editor:identity_edit", "--out", str(tmp_path / "e"),
                              "--limit", "1", "--samples", "2", "--no-progress"])
    assert res.exit_code == 0 and len((tmp_path / "e" / "manifest.jsonl").read_text().splitlines()) == 2
    res = runner.invoke(app, ["best-of-n", str(tmp_path / "e" / "manifest.jsonl"), "--metric", "l1", "--limit", "1",
                              "--json"])
    assert res.exit_code == 0 and len(json.loads(res.output)["picks"]) == 1
    # an arena needs an evaluator that judges the edit: closeness to a reference edit (the ground truth's)
    rows = [json.loads(x) for x in (EXAMPLES / "manifest.jsonl").read_text().splitlines() if x.strip()]
    truth = {r["source"]: r["edited"] for r in rows if r["model"] == "ground_truth"}
    with_ref = tmp_path / "with_reference.jsonl"
    with_ref.write_text("".join(json.dumps({**r, **{k: str(EXAMPLES / r[k]) for k in ("source", "edited")},
                                            "reference": str(EXAMPLES / truth[r["source"]])}) + "\n"
                                for r in rows if r["source"] in truth))
    res = runner.invoke(app, ["arena", str(with_ref), "--metric", "ssim_ref", "--limit", "1",
                              "--out", str(tmp_path / "a")])
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "a" / "arena.json").read_text())["sources"] == 1


def test_serve_defaults_fit_a_small_models_context(tmp_path):
    from editlens.cli.serve_commands import _context_of

    (tmp_path / "config.json").write_text(json.dumps({"text_config": {"max_position_embeddings": 512}}))
    assert _context_of(str(tmp_path)) == 512 and _context_of(str(tmp_path / "none")) is None


def test_edit_folders_combine_into_one_run_and_move_with_their_inputs(tmp_path, monkeypatch):
    import shutil

    from helpers import EXAMPLES

    monkeypatch.setenv("EDITLENS_CACHE_DIR", str(tmp_path / "cache"))
    home = tmp_path / "project"
    shutil.copytree(EXAMPLES, home / "examples")
    for name, editor in (("same", "editlens.editors.callable_editor:identity_edit"),
                         ("flip", "tests.test_quickstart_loop:flip_edit")):
        res = runner.invoke(app, ["edit", str(home / "examples" / "manifest.jsonl"), "--editor", editor,
                                  "--out", str(home / "edits" / name), "--no-progress"])
        assert res.exit_code == 0, res.output
    moved = tmp_path / "elsewhere"
    shutil.move(str(home), str(moved))  # the whole project moves: the folders' relative paths still hold
    res = runner.invoke(app, ["compare-editors", str(moved / "edits" / "same"), str(moved / "edits" / "flip"),
                              "--out", str(moved / "run"), "--metrics", "l1", "--no-progress"])
    assert res.exit_code == 0, res.output
    ids = [json.loads(x)["id"] for x in (moved / "run" / "manifest.jsonl").read_text().splitlines()]
    # ids carry the editor each folder recorded (its `model`)
    assert "identity_edit/cat_seat" in ids and "flip_edit/cat_seat" in ids and len(ids) == len(set(ids)) == 10
    lb = runner.invoke(app, ["runs", "leaderboard", str(moved / "run"), "--format", "csv"])
    assert lb.exit_code == 0 and "flip_edit" in lb.output
    # the same through `run --edits`: an edit folder's manifest says where each image is
    rows = [json.loads(x) for x in (moved / "examples" / "manifest.jsonl").read_text().splitlines()]
    (moved / "examples" / "inputs.jsonl").write_text("".join(
        json.dumps({k: v for k, v in r.items() if k not in ("edited", "model")}) + "\n" for r in rows))
    res = runner.invoke(app, ["run", str(moved / "examples" / "inputs.jsonl"), "--edits", str(moved / "edits"), "--out", str(tmp_path / "r2"), "--metrics", "l1",
                              "--no-progress"])
    assert res.exit_code == 0, res.output
    rows = [json.loads(x) for x in (tmp_path / "r2" / "results.jsonl").read_text().splitlines()]
    assert {r["id"] for r in rows} >= {"same/cat_seat", "flip/cat_seat"}
    twice = runner.invoke(app, ["compare-editors", str(moved / "edits" / "same"), str(moved / "edits" / "same"),
                                "--out", str(tmp_path / "r3")])
    assert twice.exit_code == 2 and "given twice" in twice.output


@pytest.mark.slow
def test_sigterm_stops_a_diffusers_editor_between_denoising_steps(tmp_path):
    """A batch that would take hours (100,000 steps) stops on SIGTERM at the next step: exit 143, the image
    neither kept nor logged as failed (a rerun makes it)."""
    import os
    import signal
    import subprocess
    import sys

    from helpers import EXAMPLES, REPO

    from editlens.editors.random_init import make_tiny_editor

    make_tiny_editor(tmp_path / "ed", "instruct-pix2pix", image_size=16)
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "editlens.cli.main", "edit", str(EXAMPLES / "manifest.jsonl"),
                             "--editor", str(tmp_path / "ed"), "--out", str(tmp_path / "out"), "--limit", "1",
                             "--editor-option", "steps=100000"], stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stderr is not None
    seen = ""
    while "editing" not in seen:  # the progress bar: generation has started
        line = proc.stderr.read(1)
        assert line, "the command ended before generating"
        seen += line
    proc.send_signal(signal.SIGTERM)
    rc = proc.wait(timeout=300)
    assert rc == 128 + signal.SIGTERM
    log = tmp_path / "out" / "generations.jsonl"
    assert not log.exists() or log.read_text().strip() == ""


def test_a_bench_runs_leaderboard_gives_the_bench_tables_interval_for_the_same_mean(tmp_path, monkeypatch):
    """One task type, one language: the table's overall and the leaderboard's mean are the same number, and so
    is the interval (the same seed, resamples and order of the edits)."""
    monkeypatch.setenv("EDITLENS_CACHE_DIR", str(tmp_path / "cache"))
    rows = [{"key": f"k{i}", "task_type": "color_alter", "instruction": f"edit {i}", "instruction_language": "en",
             "input_image": {"bytes": F.png(i), "path": f"k{i}.png"}, "Intersection_exist": True} for i in range(5)]
    data = tmp_path / "gedit"
    F.write_table(rows, data / "data" / "train-00000-of-00001.parquet", ("input_image",))
    for model in ("a", "b"):
        for i in range(5):
            F.save(tmp_path / "edits" / model / f"k{i}.png", F.png(50 + i + (7 if model == "b" else 0)))
    assert runner.invoke(app, ["make-tiny-vlm", str(tmp_path / "judge"), "--scripted"]).exit_code == 0
    res = runner.invoke(app, ["bench", "run", "gedit", "--data", str(data), "--edits", str(tmp_path / "edits"),
                              "--vlm", str(tmp_path / "judge"), "--out", str(tmp_path / "out"), "--n-boot", "300",
                              "--no-progress", "--no-report"])
    assert res.exit_code == 0, res.output
    table = json.loads((tmp_path / "out" / "table.json").read_text())
    lb = runner.invoke(app, ["runs", "leaderboard", str(tmp_path / "out" / "run"), "--format", "json"])
    doc = json.loads(lb.output[lb.output.index("{"):])
    board = {r["editor"]: r for r in doc["tables"][0]["rows"]}
    for model in ("a", "b"):
        cell = table["models"][model]["sections"][0]["overall"]["cells"]["O"]
        assert board[model]["mean"] == pytest.approx(cell["value"])
        assert board[model]["ci"] == pytest.approx(cell["ci95"])


def test_an_all_tie_arena_shows_no_number_one_and_one_tie_is_one_tie():
    from editlens.cli.arena_commands import arena_lines

    editors = [{"editor": e, "rank": r, "rating": 0.0, "ci": [0.0, 0.0], "elo": 1000.0, "elo_ci": [1000.0, 1000.0],
                "rank_ci": rc, "wins": 0, "losses": 0, "ties": 1} for e, r, rc in (("a", 1, [2, 2]), ("b", 1, [1, 1]))]
    doc = {"editors": editors, "sources": 1, "judge": "j", "ci": "95% CI", "ties_model": "ties as half a win",
           "neighbours": [], "schedule": {"comparisons": 1, "all_pairs": 1, "stopped": "all", "asked": 1, "cached": 0},
           "verdicts": {"decided": 0, "ties": 1, "position_bias": 0, "no_verdict": 0, "failed": 0}}
    text = "\n".join(arena_lines(doc))
    assert "1 tie " in text and "1 ties" not in text
    rows = [line for line in text.splitlines() if line.startswith(("1 ", "–"))]
    assert rows and all(line.startswith("–") for line in rows) and "2-2" not in text
    assert "no editor is #1" in text


def test_bench_list_columns_line_up_and_an_empty_csv_leaderboard_says_why(tmp_path):
    from helpers import EXAMPLES

    out = runner.invoke(app, ["bench", "list"]).output.splitlines()
    start = out[0].index("labels")
    assert all(len(line) > start and line[start - 2 : start] == "  " for line in out)
    res = runner.invoke(app, ["run", str(EXAMPLES / "manifest.jsonl"), "--out", str(tmp_path / "r"), "--metrics",
                              "l1", "--no-progress"])
    assert res.exit_code == 0
    lb = runner.invoke(app, ["runs", "leaderboard", str(tmp_path / "r"), "--format", "csv"])
    assert lb.exit_code == 0 and "nothing ranks the editors" in lb.output


@pytest.mark.slow
def test_serve_scripted_judge_answers_over_http_and_names_itself(tmp_path):
    import os
    import subprocess
    import sys
    import time

    import httpx
    from helpers import REPO
    from servers import free_port

    from editlens.backends.http import OpenAIBackend
    from editlens.backends.scripted_judge import MARK, ScriptedJudgeBackend, scripted_in
    from editlens.backends.types import ChatRequest, Message
    from editlens.judges.parsing import read_scores
    from editlens.judges.templates import load_template

    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO), "EDITLENS_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.Popen([sys.executable, "-m", "editlens.cli.main", "serve", "--scripted-judge", "3", "--port",
                             str(port), "--no-access-log"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    try:
        url = f"http://127.0.0.1:{port}/v1"
        while True:  # until it listens (or has died)
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            try:
                models = httpx.get(f"{url}/models", timeout=2).json()
                break
            except httpx.HTTPError:
                time.sleep(0.2)
        assert MARK in models["data"][0]["id"]
        text = load_template("viescore_pq").text
        image = np.full((16, 16, 3), 90, np.uint8)
        req = ChatRequest([Message("user", [image, text])])
        remote = OpenAIBackend(url, timeout=60, max_retries=0).generate([req])[0].text
        assert remote == ScriptedJudgeBackend(3).generate([req])[0].text  # the same answer as in-process
        assert read_scores(remote, expected=2, low=0, high=10)[0] is not None
        assert scripted_in(remote)
    finally:
        proc.terminate()
        proc.wait(timeout=60)

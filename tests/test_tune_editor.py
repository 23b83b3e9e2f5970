"""`editlens adiee tune-editor` on a tiny random InstructPix2Pix pipeline (16 px): reward-conditioned
fine-tuning from the CLI, resume, export, ReFL; the quality prompt and the training data readers."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from editlens.errors import InputError

pytest.importorskip("diffusers")


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory):  # type: ignore[no-untyped-def]
    from editlens.testing.tiny_editors import make_tiny_editor

    return make_tiny_editor(tmp_path_factory.mktemp("ip2p") / "base", "instruct-pix2pix", image_size=16)


@pytest.fixture(scope="module")
def relabelled(tmp_path_factory):  # type: ignore[no-untyped-def]
    from editlens.testing.tiny_tuning import make_relabelled

    return make_relabelled(tmp_path_factory.mktemp("tune-data"))


def _cli(*args: str):  # type: ignore[no-untyped-def]
    from editlens.cli.main import app

    return CliRunner().invoke(app, ["adiee", "tune-editor", *args])


@pytest.mark.slow
def test_cli_loss_goes_down_and_the_export_edits_with_the_reward_prompt(tiny_base, relabelled, tmp_path):
    from diffusers import StableDiffusionInstructPix2PixPipeline
    from PIL import Image

    out = tmp_path / "run"
    r = _cli(str(relabelled), "--base", str(tiny_base), "--out", str(out), "--steps", "8", "--lr", "1e-3",
             "--batch-size", "2", "--resolution", "16", "--device", "cpu", "--no-progress")
    assert r.exit_code == 0, r.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["last_loss"] < 0.8 * summary["first_loss"], summary
    assert summary["precision"]["trained"] == "whole UNet"
    card = json.loads((out / "editor" / "editlens_editor.json").read_text())
    assert card["family"] == "instruct-pix2pix"
    assert card["prompt_suffix"] == " The image quality is five out of five."
    assert card["quality_prompt"]["origin"] == "editlens default" and card["quality_prompt"]["binning"] == "release"
    assert card["source"]["base"] == str(tiny_base) and card["source"]["trained_steps"] == 8
    assert card["source"]["data"]["kind"] == "relabel"
    # the exported UNet is the trained one
    pipe = StableDiffusionInstructPix2PixPipeline.from_pretrained(out / "editor")
    trained = torch.load(out / "checkpoints" / "step-0000008" / "state.pt")["trainable"]
    exported = dict(pipe.unet.named_parameters())
    assert set(trained) == set(exported)
    assert all(torch.equal(trained[k], exported[k].detach()) for k in trained)
    img = pipe("make it red" + card["prompt_suffix"], image=Image.new("RGB", (16, 16), (90, 90, 90)),
               num_inference_steps=2, generator=torch.Generator().manual_seed(0), output_type="np").images[0]
    assert img.shape == (16, 16, 3) and np.isfinite(img).all()
    # `editlens edit`'s diffusers editor reads the reward prompt from the folder
    from editlens.editors.registry import create_editor

    assert create_editor(str(out / "editor"), device="cpu").prompt_suffix == card["prompt_suffix"]
    # the folder says what it is (editlens.json), and the one model door loads it as an editor
    from editlens.models.loader import infer_kind, load_model

    described = json.loads((out / "editor" / "editlens.json").read_text())
    assert described["kind"] == "editor" and described["pipeline"] == "StableDiffusionInstructPix2PixPipeline"
    assert described["class"] == "editlens.editors.diffusers_editor:DiffusersEditor"
    assert infer_kind(str(out / "editor")) == "editor"
    editor = load_model(str(out / "editor"), device="cpu", dtype="float32", shared=False)
    assert type(editor).__name__ == "DiffusersEditor" and editor.prompt_suffix == card["prompt_suffix"]


# a child that runs the real CLI and SIGKILLs itself when optimiser step KILL_IN (0-based) asks for its batch:
# a crash at a known point (after a checkpoint and a logged step past it), not at a moment a sleep picks
_KILLED_CHILD = """
import os, signal, sys
from editlens.adiee.tune_editor import TuneEditorTask
from editlens.cli.main import app

batch = TuneEditorTask.batch
def dying(self, step, micro):
    if step == int(os.environ["KILL_IN"]):
        os.kill(os.getpid(), signal.SIGKILL)
    return batch(self, step, micro)
TuneEditorTask.batch = dying
app(sys.argv[1:])
"""


@pytest.mark.slow
def test_sigkill_mid_run_then_ctrl_c_then_resume_equals_an_uninterrupted_run(tiny_base, relabelled, tmp_path,
                                                                            monkeypatch):
    """LoRA tuning from the CLI, 4 steps, a checkpoint every 2: killed (SIGKILL) during step 4, resumed
    and stopped with Ctrl-C during step 3, resumed to the end. Weights, loss history and the exported
    UNet equal an uninterrupted run's bit for bit (the policy's dtype: float32 or bfloat16 autocast)."""
    import os
    import signal
    import subprocess
    import sys

    from editlens.adiee.tune_editor import TuneEditorTask
    from editlens.training import latest_checkpoint, read_log

    def args(out: Path) -> list[str]:
        return ["adiee", "tune-editor", str(relabelled), "--base", str(tiny_base), "--out", str(out), "--steps", "4",
                "--save-every", "2", "--batch-size", "2", "--resolution", "16", "--lr", "1e-3", "--lora-rank", "4",
                "--device", "cpu", "--no-progress"]

    from editlens.cli.main import app

    whole = CliRunner().invoke(app, args(tmp_path / "whole"))
    assert whole.exit_code == 0, whole.output

    run_dir = tmp_path / "broken"
    child = subprocess.run([sys.executable, "-c", _KILLED_CHILD, *args(run_dir)], env={**os.environ, "KILL_IN": "3"},
                           capture_output=True, text=True, timeout=300)
    assert child.returncode == -signal.SIGKILL, child.stderr[-2000:]
    # killed mid-run: step 3 logged, the newest checkpoint is step 2's, nothing exported
    assert [r["step"] for r in read_log(run_dir)] == [1, 2, 3]
    assert latest_checkpoint(run_dir).name == "step-0000002"
    assert not (run_dir / "editor").exists() and not (run_dir / "summary.json").exists()

    batch = TuneEditorTask.batch

    def ctrl_c(self, step, micro):  # type: ignore[no-untyped-def]
        if step == 2:  # step 3, logged before the kill: redone, as its log line is past the checkpoint
            os.kill(os.getpid(), signal.SIGINT)  # the loop's handler: finish this step, save, stop
        return batch(self, step, micro)

    monkeypatch.setattr(TuneEditorTask, "batch", ctrl_c)
    stopped = CliRunner().invoke(app, args(run_dir))
    assert stopped.exit_code == 130, stopped.output
    assert "resumed" in stopped.output and "SIGINT" in stopped.output
    assert latest_checkpoint(run_dir).name == "step-0000003"
    assert json.loads((run_dir / "summary.json").read_text())["interrupted"] is True
    assert not (run_dir / "editor").exists()
    monkeypatch.setattr(TuneEditorTask, "batch", batch)

    done = CliRunner().invoke(app, args(run_dir))
    assert done.exit_code == 0, done.output
    a = torch.load(tmp_path / "whole" / "checkpoints" / "step-0000004" / "state.pt")["trainable"]
    b = torch.load(run_dir / "checkpoints" / "step-0000004" / "state.pt")["trainable"]
    assert set(a) == set(b) and len(a) > 10 and all("lora" in k for k in a)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert [r["loss"] for r in read_log(run_dir)] == [r["loss"] for r in read_log(tmp_path / "whole")]
    assert [r["step"] for r in read_log(run_dir)] == [1, 2, 3, 4]  # nothing lost, nothing twice
    from safetensors.torch import load_file

    exported = [load_file(d / "editor" / "unet" / "diffusion_pytorch_model.safetensors")
                for d in (tmp_path / "whole", run_dir)]
    assert all(torch.equal(exported[0][k], exported[1][k]) for k in exported[0])
    # another LoRA rank is another run: refused, not silently resumed
    refused = CliRunner().invoke(app, [*args(run_dir), "--lora-rank", "8", "--steps", "5"])
    assert refused.exit_code == 2 and "lora_rank was 4, now 8" in refused.output, refused.output


@pytest.mark.slow
def test_refl_raises_the_reward_of_the_validation_edits(tiny_base, relabelled, tmp_path):
    """A constructed case where ReFL can win: the reward is how red the edit is (differentiable). Runs in the
    policy's dtype ($EDITLENS_DTYPE: float32 in the plain CI pass, bfloat16 in the other)."""
    from editlens.adiee.tune_editor import TuneConfig, tune_editor
    from editlens.runner.reward import RewardFunction
    from editlens.testing import colour_reward

    colour_reward.register()
    reward = RewardFunction(colour_reward.NAME)
    assert reward.differentiable
    cfg = TuneConfig(base=str(tiny_base), data=str(relabelled), out=str(tmp_path / "refl"), steps=4, batch_size=2,
                     resolution=16, lr=3e-3, val_count=2, val_steps=2, refl_weight=1e4, refl_steps=3,
                     refl_min_step=1, refl_metric=colour_reward.NAME, val_metric=colour_reward.NAME, augment=False,
                     device="cpu")
    s = tune_editor(cfg, val_reward=reward, refl_reward=reward, progress=False, echo=lambda m: None)
    rows = [json.loads(x) for x in (tmp_path / "refl" / "log.jsonl").read_text().splitlines()]
    vals = [r["val"]["reward"] for r in rows if "val" in r]
    assert len(vals) == 2 and vals[-1] > vals[0] + 1e-3, vals
    assert all("refl_reward" in r and r["refl_scored"] == 1.0 for r in rows if "loss" in r)
    card = json.loads((tmp_path / "refl" / "editor" / "editlens_editor.json").read_text())
    assert card["source"]["recipe"]["refl"]["reward"]["name"] == colour_reward.NAME
    assert s["precision"]["dtype"] in ("float32", "bfloat16")


def test_refl_refuses_a_reward_without_a_differentiable_path(tiny_base, relabelled, tmp_path):
    from editlens.adiee.tune_editor import TuneConfig, tune_editor
    from editlens.runner.reward import RewardFunction

    cfg = TuneConfig(base=str(tiny_base), data=str(relabelled), out=str(tmp_path / "x"), steps=1, refl_weight=1.0,
                     refl_metric="psnr", resolution=16)
    with pytest.raises(InputError, match="differentiable"):
        tune_editor(cfg, refl_reward=RewardFunction("psnr"), progress=False, echo=lambda m: None)


# -- the quality prompt and the data --------------------------------------------------------------

def test_suffix_from_a_clone_and_a_bad_template(tmp_path):
    from editlens.adiee.editor_prompt import load_quality_prompt

    clone = tmp_path / "clone"
    clone.mkdir()
    (clone / "dataset.py").write_text('def f(text, word):\n    return text + f" -- rated {word} out of five!"\n')
    p = load_quality_prompt(clone=clone, binning="linear", levels="digits")
    assert p.template == " -- rated {quality} out of five!" and p.origin.startswith("clone ")
    assert p.prompt("add a hat", 10.0) == "add a hat -- rated 5 out of five!"
    assert p.prompt("add a hat", 5.0) == "add a hat -- rated 3 out of five!"
    bad = tmp_path / "bad.txt"
    bad.write_text("no field here")
    with pytest.raises(InputError, match=r"no \{quality\} field"):
        load_quality_prompt(bad)
    with pytest.raises(InputError, match="no dataset module"):
        load_quality_prompt(clone=tmp_path / "nothing-here")


# the release's own lines (the ADIEE dataset module's MagicBrushDataset and its editor test script), as the audit
# quotes them: a two-field f-string whose second field is a list element, then a ".." -> "." replace
_RELEASE_DATASET = """
import torch_that_is_not_installed

# evaluation score weights for balanced score sampling
WEIGHT_DICT = {0: 4.11415770609319, 1: 6.060774064100533, 2: 9.254615818753527, 3: 12.355758880516685, 8: 14.027251619210558, 7: 14.299862962501557, 6: 14.62788326749076, 4: 14.981075437222657, 5: 16.24239422668742, 9: 16.41661899313501, 10: 241.65263157894736}

class MagicBrushDataset:
    def __init__(self, args, tokenizer):
        self.score_list = ["one", "two", "three", "four", "five"]

    def __getitem__(self, idx):
        instruction_text = self.data[idx]["instruction"]
        score = self.score_list[self.level(idx)]
        reward_instruction = f". The image quality is {score} out of {self.score_list[-1]}."
        instruction_text = (instruction_text + reward_instruction).replace("..", ".")
        return instruction_text
"""
_RELEASE_TEST_SCRIPT = """
def prompt_of(instruction, add_reward_prompt):
    if add_reward_prompt:
        instruction = instruction + ". The image quality is five out of five"
    return instruction
"""


def test_suffix_from_the_releases_own_text(tmp_path):
    """--suffix-from-clone on the release's real dataset module: two fields, "five" read from the literal list,
    the ".." -> "." replace applied as the release applies it, and the test script's suffix (no final period)
    exported for prompting the tuned editor."""
    from editlens.adiee.editor_prompt import load_quality_prompt, read_clone_suffix

    clone = tmp_path / "ADIEE"
    clone.mkdir()
    (clone / "dataset.py").write_text(_RELEASE_DATASET)
    (clone / "test_editor.py").write_text(_RELEASE_TEST_SCRIPT)
    read = read_clone_suffix(clone)
    assert read.template == ". The image quality is {quality} out of five."
    from editlens.adiee.tune_data import read_weight_table

    table, _ = read_weight_table(clone)  # --target-weight-table on the same file: the release's table, exact
    assert table[10] == 241.65263157894736 and table[0] == 4.11415770609319 and sorted(table) == list(range(11))
    assert read.collapse_double_period and read.inference_suffix == ". The image quality is five out of five"
    p = load_quality_prompt(clone=clone)
    assert p.prompt("Make it red.", 10.0) == "Make it red. The image quality is five out of five."  # one period
    assert p.prompt("make it red", 3.0) == "make it red. The image quality is two out of five."
    assert p.prompt("make it red", 0.0) == "make it red. The image quality is one out of five."
    assert p.top_prompt("Add a hat.") == "Add a hat. The image quality is five out of five."  # validation
    assert p.editor_suffix == ". The image quality is five out of five"
    assert p.describe()["join"] == "(instruction + suffix).replace('..', '.')"
    # without the test script beside it: the tuned editor is prompted with the top training suffix
    (clone / "test_editor.py").unlink()
    assert load_quality_prompt(clone=clone).editor_suffix == ". The image quality is five out of five."
    # a second field that is not a literal list's element cannot be read: said, never guessed
    (clone / "dataset.py").write_text(_RELEASE_DATASET.replace("{self.score_list[-1]}", "{self.top()}"))
    with pytest.raises(InputError, match="1 with fields not read"):
        read_clone_suffix(clone)


def test_tuning_data_errors_name_the_line_and_the_fix(tmp_path, relabelled):
    from editlens.adiee.tune_data import read_tuning_data

    groups, desc = read_tuning_data(relabelled)
    assert desc["groups"] == 6 and all(len(g.candidates) == 4 for g in groups)  # 3 edits + the source
    assert sorted(c.score10 for c in groups[0].candidates) == [0.0, 0.0, 2.5, 10.0]
    rows = [json.loads(x) for x in relabelled.read_text().splitlines()]
    del rows[1]["reward"]
    f = relabelled.parent / "broken.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(InputError, match=r"broken.jsonl:2: no 'reward' column"):
        read_tuning_data(f)
    one = relabelled.parent / "one.jsonl"
    one.write_text(json.dumps(rows[0]) + "\n")
    with pytest.raises(InputError, match="single candidate"):
        read_tuning_data(one, include_source=False)
    # the same candidate twice with rewards 3 and 5: refused, naming both rows, not trained on
    good = [json.loads(x) for x in relabelled.read_text().splitlines()]
    twice = relabelled.parent / "twice.jsonl"
    dup = [{**good[0], "reward": 3}] + good[1:] + [{**good[0], "id": "again", "reward": 5}]
    twice.write_text("".join(json.dumps(r) + "\n" for r in dup))
    with pytest.raises(InputError, match=r"twice.jsonl: the candidate .* appears twice, as .* \(score 5 of 10\) "
                                         r"and as again \(score 10 of 10\)"):
        read_tuning_data(twice)


def test_balanced_weights_draw_each_level_about_equally_often(relabelled):
    from editlens.adiee.editor_prompt import quality_level
    from editlens.adiee.tune_data import draw_target, read_tuning_data, target_weighting

    groups, _ = read_tuning_data(relabelled)
    w = target_weighting(groups, quality_level, "balanced")
    assert set(w.weights) == {1, 5} and w.weights[5] == pytest.approx(3 * w.weights[1])  # 3 of 4 are level 1
    rng = np.random.default_rng(0)
    drawn = [quality_level(draw_target(groups[0], w, rng).score10) for _ in range(2000)]
    assert abs(drawn.count(5) / 2000 - 0.5) < 0.05


# a clone's dataset module: the table among code that must never run (parsed, not imported)
_CLONE_DATASET = """
import this_module_does_not_exist
WORDS = ["one", "two", "three", "four", "five"]
WEIGHT_DICT = {0: 1, 1: 1, 2: 0, 3: 0.5, 4: 0.5, 5: 1, 6: 1, 7: 2, 8: 2, 9: 3, 10: 3}
raise SystemExit("a clone's module is read, never run")
"""


def test_a_weight_table_from_a_clone_weights_targets_by_rounded_score(relabelled, tmp_path):
    """Candidates score 0 (source, blue), 2.5 -> 2 (green, Python rounds half to even) and 10 (red): with the
    clone's table 1 / 0 / 3 green is never drawn and red is drawn 3 times in 5."""
    from editlens.adiee.editor_prompt import quality_level
    from editlens.adiee.tune_data import draw_target, read_tuning_data, read_weight_table, target_weighting

    clone = tmp_path / "ADIEE"
    clone.mkdir()
    (clone / "dataset.py").write_text(_CLONE_DATASET)
    table, origin = read_weight_table(clone)
    assert table == {0: 1.0, 1: 1.0, 2: 0.0, 3: 0.5, 4: 0.5, 5: 1.0, 6: 1.0, 7: 2.0, 8: 2.0, 9: 3.0, 10: 3.0}
    assert origin["path"] == str(clone / "dataset.py") and len(origin["sha256"]) == 16
    groups, _ = read_tuning_data(relabelled)
    w = target_weighting(groups, quality_level, "table", clone)
    assert w.by == "score" and w.describe()["table"] == origin
    rng = np.random.default_rng(0)
    drawn = [draw_target(groups[0], w, rng).id for _ in range(3000)]
    assert "s0_green" not in drawn
    assert abs(drawn.count("s0_red") / 3000 - 0.6) < 0.03
    # the same table as JSON gives the same draws
    as_json = tmp_path / "table.json"
    as_json.write_text(json.dumps({str(k): v for k, v in table.items()}))
    wj = target_weighting(groups, quality_level, "table", as_json)
    rng = np.random.default_rng(0)
    assert [draw_target(groups[0], wj, rng).id for _ in range(3000)] == drawn


@pytest.mark.parametrize("text, error", [
    ('WEIGHT_DICT = {"red": 1.0, "blue": 0.5}\n', r"key 'red' is not a score 0-10"),
    ("WEIGHT_DICT = {0: 1, 10: -2}\n", r"weight of score 10 must be a number >= 0"),
    ("WEIGHT_DICT = {0: 0, 10: 0}\n", "every weight is 0"),
    ("X = 1\n", r"expected one module-level WEIGHT_DICT = \{...\}, found 0"),
    ("WEIGHT_DICT = {0: 1}\nWEIGHT_DICT = {0: 2}\n", "found 2"),
    ("WEIGHT_DICT = dict(a=1)\n", "not a literal mapping"),
    ("WEIGHT_DICT = {0: 1\n", "cannot parse it as Python"),
])
def test_a_bad_weight_table_is_refused_naming_the_file(tmp_path, text, error):
    from editlens.adiee.tune_data import read_weight_table

    f = tmp_path / "dataset.py"
    f.write_text(text)
    with pytest.raises(InputError, match=error) as exc:
        read_weight_table(f)
    assert str(f) in str(exc.value)


def test_a_weight_table_must_cover_the_data_and_leave_each_source_a_target(relabelled, tmp_path):
    from editlens.adiee.editor_prompt import quality_level
    from editlens.adiee.tune_data import read_tuning_data, target_weighting

    groups, _ = read_tuning_data(relabelled)
    partial = tmp_path / "partial.json"
    partial.write_text(json.dumps({"0": 1, "10": 1}))  # no weight for green's rounded 2
    with pytest.raises(InputError, match=r"no weight for rounded score\(s\) 2 "):
        target_weighting(groups, quality_level, "table", partial)
    zero = tmp_path / "zero.json"
    zero.write_text(json.dumps({"0": 0, "2": 0, "10": 0.0, "5": 1}))
    with pytest.raises(InputError, match="has weight 0: it can never be drawn"):
        target_weighting(groups, quality_level, "table", zero)
    with pytest.raises(InputError, match="needs --target-weight-table"):
        target_weighting(groups, quality_level, "table")
    with pytest.raises(InputError, match="goes with --target-weights table"):
        target_weighting(groups, quality_level, "balanced", partial)


def test_a_scored_run_directory_is_training_data(relabelled, tmp_path):
    """A run's results of one evaluator become 0-10 target scores (flipped when lower is better)."""
    from types import SimpleNamespace

    from editlens.adiee.tune_data import read_tuning_data

    rows = [json.loads(x) for x in relabelled.read_text().splitlines()][:6]
    manifest = relabelled.parent / "cands.jsonl"
    manifest.write_text("".join(json.dumps({k: r[k] for k in ("id", "source", "edited", "instruction", "model")})
                                + "\n" for r in rows))
    run = tmp_path / "run"
    run.mkdir()
    (run / "manifest.json").write_text(json.dumps({"inputs": {"manifest": str(manifest)}}))
    values = {"s0_red": 1.0, "s0_green": 3.0, "s0_blue": 5.0, "s1_red": 2.0, "s1_green": None, "s1_blue": 4.0}
    (run / "results.jsonl").write_text("".join(json.dumps(
        {"id": k, "scores": {"dist": {"value": v, "status": "scored" if v is not None else "unscored"},
                             "other": {"value": 0.5, "status": "scored"}}}) + "\n" for k, v in values.items()))
    spec = SimpleNamespace(value_range=(1.0, 5.0), higher_is_better=False)
    with pytest.raises(InputError, match="--score-metric"):
        read_tuning_data(run, spec_of=lambda name: spec)
    groups, desc = read_tuning_data(run, "dist", include_source=False, spec_of=lambda name: spec)
    assert desc["kind"] == "run" and desc["unscored_rows"] == 1 and desc["scale"] == "[1, 5] -> 0-10"
    scores = {c.id: c.score10 for g in groups for c in g.candidates}
    assert scores == {"s0_red": 10.0, "s0_green": 5.0, "s0_blue": 0.0, "s1_red": 7.5, "s1_blue": 2.5}
    with pytest.raises(InputError, match="no scores of 'missing'"):
        read_tuning_data(run, "missing", spec_of=lambda name: spec)


def test_cli_records_the_weight_table_it_trained_with(tiny_base, relabelled, tmp_path):
    clone = tmp_path / "ADIEE"
    clone.mkdir()
    (clone / "dataset.py").write_text(_CLONE_DATASET)
    out = tmp_path / "run"
    common = ["--base", str(tiny_base), "--steps", "1", "--batch-size", "2", "--resolution", "16", "--device", "cpu",
              "--no-progress"]
    r = _cli(str(relabelled), "--out", str(out), "--target-weight-table", str(clone), *common)
    assert r.exit_code == 0, r.output
    assert "score weights 0: 1, 1: 1, 2: 0, 3: 0.5" in r.output
    recipe = json.loads((out / "editor" / "editlens_editor.json").read_text())["source"]["recipe"]
    assert recipe["target_weights"] == "table"
    assert recipe["target_weighting"]["by"] == "score"
    assert recipe["target_weighting"]["table"]["path"] == str(clone / "dataset.py")
    assert recipe["target_weighting"]["score_weights"]["10"] == 3.0
    mixed = _cli(str(relabelled), "--out", str(tmp_path / "mixed"), "--target-weights", "balanced",
                 "--target-weight-table", str(clone), *common)
    assert mixed.exit_code == 2 and "goes with --target-weights table" in mixed.output
    assert not (tmp_path / "mixed").exists()  # refused before anything is written
    partial = tmp_path / "partial.json"
    partial.write_text(json.dumps({"0": 1, "10": 1}))  # green's rounded 2 has no weight
    bad = _cli(str(relabelled), "--out", str(tmp_path / "bad"), "--target-weight-table", str(partial), *common)
    assert bad.exit_code == 2 and "no weight for rounded score(s) 2" in bad.output
    assert not (tmp_path / "bad").exists()


def test_sources_in_a_benchmark_table_train_like_files(tiny_base, relabelled, tmp_path):
    """A published benchmark (GEdit, ...) keeps its sources in parquet cells: a scored run of generated
    candidates names them FILE#row=N&column=C, and tune-editor reads those cells."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from editlens.adiee.tune_editor import TuneConfig, tune_editor

    rows = [json.loads(x) for x in relabelled.read_text().splitlines()]
    sources = sorted({r["source"] for r in rows})
    cell = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    table = tmp_path / "bench" / "test.parquet"
    table.parent.mkdir()
    pq.write_table(pa.table({"input_image": pa.array(
        [{"bytes": (relabelled.parent / s).read_bytes(), "path": s} for s in sources], type=cell)}), table)
    data = tmp_path / "cands.jsonl"
    data.write_text("".join(json.dumps({**r, "source": f"{table}#row={sources.index(r['source'])}&column=input_image",
                                        "edited": str(relabelled.parent / r["edited"])}) + "\n" for r in rows))
    out = tmp_path / "run"
    res = tune_editor(TuneConfig(base=str(tiny_base), data=str(data), out=str(out), steps=2, batch_size=2,
                                 resolution=16, device="cpu"), progress=False, echo=lambda m: None)
    assert res["exit_code"] == 0 and res["steps_done"] == 2
    assert json.loads((out / "editor" / "editlens_editor.json").read_text())["source"]["trained_steps"] == 2


def test_refl_only_with_a_ground_truth_trains_towards_it_alone(tiny_base, relabelled, tmp_path, monkeypatch):
    """The release's RL data mode: no reward suffix and the MSE target is the ground-truth edit only
    (--no-reward-prompt --ground-truth ID), never a weighted draw that includes the source or failed edits."""
    from types import SimpleNamespace

    import editlens.training as training
    from editlens.adiee.tune_data import read_tuning_data
    from editlens.adiee.tune_editor import TuneConfig, ground_truth_targets, to_tensor, tune_editor

    groups, _ = read_tuning_data(relabelled)
    truth = ground_truth_targets(groups, "red")
    assert {c.id for c in truth.values()} == {f"s{i}_red" for i in range(6)}
    with pytest.raises(InputError, match=r"6 source\(s\) without a candidate of that id"):
        ground_truth_targets(groups, "target")
    seen = {}

    def fake_run(task, settings):  # the loop itself is tested elsewhere: here, what a step trains towards
        seen["batches"] = [task.batch(step, 0) for step in range(3)]
        seen["recipe"] = task.recipe()
        return SimpleNamespace(summary={}, exit_code=0)

    monkeypatch.setattr(training, "run", fake_run)
    cfg = TuneConfig(base=str(tiny_base), data=str(relabelled), out=str(tmp_path / "run"), reward_prompt=False,
                     ground_truth="red", steps=3, batch_size=2, resolution=16, device="cpu", augment=False,
                     val_count=0)
    tune_editor(cfg, echo=lambda _: None, progress=False)
    from PIL import Image

    reds = [to_tensor(np.asarray(Image.open(relabelled.parent / "images" / f"s{i}_red.png").convert("RGB")))
            for i in range(6)]
    for b in seen["batches"]:
        assert b["prompts"] == ["make it red"] * 2  # no suffix
        assert all(any(torch.equal(target.cpu(), r) for r in reds) for target in b["target"])
    assert seen["recipe"]["mse_target"] == "each source's ground truth ('red') only"
    with pytest.raises(InputError, match="give it with --no-reward-prompt"):
        TuneConfig(base="b", data="d", out="o", ground_truth="red").validate()


def test_release_validation_protocol_edits_as_the_release_validates(tiny_base, relabelled, tmp_path, monkeypatch):
    """``--val-protocol release``: 512 px inputs, EulerAncestral, 100 steps, guidance 7.5 / 1.5, every edit from
    a generator seeded 42, the release's prompt; recorded in the summary and the card. The default is unchanged."""
    from diffusers import EulerAncestralDiscreteScheduler, StableDiffusionInstructPix2PixPipeline

    from editlens.adiee.tune_editor import TuneConfig, release_validation_prompt, tune_editor
    from editlens.runner.reward import RewardFunction
    from editlens.testing import colour_reward

    calls: list[dict] = []
    real = StableDiffusionInstructPix2PixPipeline.__call__

    def spy(self, prompt, image, **kw):  # type: ignore[no-untyped-def]
        calls.append({"prompt": prompt, "size": image.size, "scheduler": type(self.scheduler).__name__,
                      "seed_state": kw["generator"].get_state().clone(), **{k: kw[k] for k in (
                          "num_inference_steps", "guidance_scale", "image_guidance_scale")}})
        # the settings are what this test checks: the edit itself runs small (16 px, 2 steps) to stay cheap
        return real(self, prompt, image=image.resize((16, 16)), **{**kw, "num_inference_steps": 2})

    monkeypatch.setattr(StableDiffusionInstructPix2PixPipeline, "__call__", spy)
    colour_reward.register()
    reward = RewardFunction(colour_reward.NAME)
    common = dict(base=str(tiny_base), data=str(relabelled), steps=1, batch_size=2, resolution=16, val_count=2,
                  val_metric=colour_reward.NAME, val_at_start=False, augment=False, device="cpu")
    s = tune_editor(TuneConfig(out=str(tmp_path / "rel"), val_protocol="release", **common), val_reward=reward,
                    progress=False, echo=lambda m: None)
    assert len(calls) == 2
    seeded = torch.Generator().manual_seed(42).get_state()
    for c in calls:
        assert c["size"] == (512, 512) and c["num_inference_steps"] == 100
        assert (c["guidance_scale"], c["image_guidance_scale"]) == (7.5, 1.5)
        assert c["scheduler"] == EulerAncestralDiscreteScheduler.__name__
        assert torch.equal(c["seed_state"], seeded)
        assert c["prompt"].endswith(". The image quality is five out of five.") and ".." not in c["prompt"]
    assert release_validation_prompt("Add a hat.") == "Add a hat. The image quality is five out of five."
    assert s["validation"]["protocol"] == "release" and s["validation"]["steps"] == 100
    assert s["validation"]["resolution"] == 512 and s["validation"]["seed"] == 42
    card = json.loads((tmp_path / "rel" / "editor" / "editlens_editor.json").read_text())
    assert card["source"]["recipe"]["validation"]["scheduler"] == "EulerAncestralDiscreteScheduler"

    calls.clear()
    s = tune_editor(TuneConfig(out=str(tmp_path / "ours"), val_steps=2, **common), val_reward=reward,
                    progress=False, echo=lambda m: None)
    assert [c["size"] for c in calls] == [(16, 16)] * 2 and calls[0]["num_inference_steps"] == 2
    base_scheduler = json.loads((Path(tiny_base) / "scheduler" / "scheduler_config.json").read_text())["_class_name"]
    assert calls[0]["scheduler"] == base_scheduler  # the base's own
    assert s["validation"]["protocol"] == "editlens"
    with pytest.raises(InputError, match="val_protocol"):
        TuneConfig(out=str(tmp_path / "x"), val_protocol="imagenhub", **common).validate()

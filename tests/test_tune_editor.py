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


def test_balanced_weights_draw_each_level_about_equally_often(relabelled):
    from editlens.adiee.editor_prompt import quality_level
    from editlens.adiee.tune_data import draw_target, level_weights, read_tuning_data

    groups, _ = read_tuning_data(relabelled)
    w = level_weights(groups, quality_level, "balanced")
    assert set(w) == {1, 5} and w[5] == pytest.approx(3 * w[1])  # 3 of 4 candidates are level 1
    rng = np.random.default_rng(0)
    drawn = [quality_level(draw_target(groups[0], w, quality_level, rng).score10) for _ in range(2000)]
    assert abs(drawn.count(5) / 2000 - 0.5) < 0.05


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

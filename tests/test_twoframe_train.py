"""Two-frame retrieval training, checkpoints/resume, the evaluators and the CLI chain."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import rng_image
from PIL import Image
from typer.testing import CliRunner

COLOURS = {"red": (230, 20, 20), "green": (20, 200, 40), "blue": (30, 40, 230), "yellow": (240, 230, 30)}
PLACES = {"top left": (2, 2), "bottom right": (26, 26), "centre": (14, 14)}


@pytest.fixture(scope="module")
def edit_manifest(tmp_path_factory) -> Path:  # type: ignore[no-untyped-def]
    """16 real edits: 8 sources, each with two 'add a COLOUR square at PLACE' edits."""
    root = tmp_path_factory.mktemp("twoframe-edits")
    rows, k = [], 0
    combos = [(c, p) for c in COLOURS for p in PLACES]
    for s in range(8):
        src = rng_image(100 + s, 48, 48) // 2 + 64
        Image.fromarray(src).save(root / f"src{s}.png")
        for j in range(2):
            colour, place = combos[(2 * s + j) % len(combos)]
            edt = src.copy()
            y, x = PLACES[place]
            edt[y : y + 20, x : x + 20] = COLOURS[colour]
            Image.fromarray(edt).save(root / f"edit{k}.png")
            rows.append({"id": f"e{k}", "source": f"src{s}.png", "edited": f"edit{k}.png",
                         "instruction": f"add a {colour} square at the {place}", "human": (k % 5) / 4})
            k += 1
    path = root / "edits.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory) -> Path:  # type: ignore[no-untyped-def]
    from editlens.models.random_init import build_clip

    return build_clip(tmp_path_factory.mktemp("twoframe-base"))


def _train(base_dir, manifest, out, **cfg):  # type: ignore[no-untyped-def]
    from editlens.twoframe.data import read_edits
    from editlens.twoframe.model import load_twoframe
    from editlens.twoframe.train import TrainConfig, train

    config = TrainConfig(**{"mode": "order", "tune": "head", "epochs": 6, "batch_size": 8, "head_lr": 3e-3,
                            "val_fraction": 0.0, "plot": False, **cfg})
    return train(load_twoframe(base_dir, device="cpu"), read_edits(manifest), out, config, progress=False,
                 log=lambda m: None)


def test_noop_scores_below_real_edit_after_training(base_dir, edit_manifest, tmp_path):
    from editlens.twoframe.data import read_edits
    from editlens.twoframe.model import load_twoframe
    from editlens.twoframe.scorer import TwoFrameScorer

    history = _train(base_dir, edit_manifest, tmp_path / "run")
    losses = [e["train_loss"] for e in history["epochs"]]
    assert losses[-1] < losses[0]
    model = load_twoframe(tmp_path / "run" / "model", device="cpu")
    assert model.mode == "order" and model.head is not None and model.calibration["mode"] == "order"
    data = read_edits(edit_manifest)
    sc = TwoFrameScorer(model)
    img = lambda keys: (lambda i: data.image(keys[i]))  # noqa: E731
    real = sc.score(data.source_keys, img(data.source_keys), data.edited_keys, img(data.edited_keys), data.instructions)
    noop = sc.score(data.source_keys, img(data.source_keys), data.source_keys, img(data.source_keys), data.instructions)
    swap = sc.score(data.edited_keys, img(data.edited_keys), data.source_keys, img(data.source_keys), data.instructions)
    assert (real["cosine"] > noop["cosine"]).mean() >= 0.9
    assert real["cosine"].mean() > noop["cosine"].mean()
    assert not np.allclose(real["cosine"], swap["cosine"], atol=1e-4)  # the order-aware head sees the order
    assert ((real["calibrated"] >= 0) & (real["calibrated"] <= 1)).all()
    # each unique image encoded once: 8 sources + 16 edits
    assert sc.frames_encoded == 24


def test_interrupted_training_resumes_without_redoing_batches(base_dir, edit_manifest, tmp_path, monkeypatch):
    import editlens.twoframe.train as T

    real_loss, calls = T.info_nce, {"n": 0}

    def flaky(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] == 4:  # epoch 2, batch 2 of 2
            raise KeyboardInterrupt
        return real_loss(*args, **kwargs)

    monkeypatch.setattr(T, "info_nce", flaky)
    stopped = _train(base_dir, edit_manifest, tmp_path / "run", epochs=3)
    assert stopped["interrupted"] and stopped["exit_code"] == 130
    from editlens.training import latest_checkpoint

    # epoch 2, batch 1 of 2 finished; batch 2 was running: its gradients are dropped
    assert latest_checkpoint(tmp_path / "run").name == "step-0000003"
    assert [(s["epoch"], s["step"]) for s in stopped["steps"]] == [(1, 1), (1, 2), (2, 3)]
    monkeypatch.setattr(T, "info_nce", real_loss)
    history = _train(base_dir, edit_manifest, tmp_path / "run", epochs=3)
    steps = [(s["epoch"], s["step"]) for s in history["steps"]]
    assert steps == [(1, 1), (1, 2), (2, 3), (2, 4), (3, 5), (3, 6)]  # nothing lost, nothing redone
    assert [e["epoch"] for e in history["epochs"]] == [1, 2, 3] and not history["interrupted"]
    # the same as a run that was never interrupted
    whole = _train(base_dir, edit_manifest, tmp_path / "whole", epochs=3)
    assert [s["loss"] for s in whole["steps"]] == pytest.approx([s["loss"] for s in history["steps"]], abs=1e-6)
    with pytest.raises(Exception, match="other settings.*batch_size was 8, now 4"):
        _train(base_dir, edit_manifest, tmp_path / "run", epochs=3, batch_size=4)


def test_training_settings_are_checked():
    from editlens.twoframe.train import TrainConfig

    with pytest.raises(ValueError, match="faithful mode has no head"):
        TrainConfig(mode="faithful", tune="head")
    with pytest.raises(ValueError, match="needs a number"):
        TrainConfig(tune="last")
    # faithful mode is the poster's plain video-to-text retrieval; hard negatives are opt-in there
    plain = TrainConfig(mode="faithful", tune="last:1")
    assert plain.negatives == () and plain.loss_objective == "video_to_text"
    hard = TrainConfig(mode="faithful", tune="last:1", hard_negatives=("noop", "swap"))
    assert hard.negatives == ("noop",) and hard.loss_objective == "symmetric"  # swap == real under mean pooling
    order = TrainConfig()
    assert order.negatives == ("noop", "swap") and order.loss_objective == "symmetric"
    with pytest.raises(ValueError, match="text->video"):
        TrainConfig(mode="faithful", tune="all", hard_negatives=("noop",), objective="video_to_text")
    # --amp of earlier releases maps onto the precision policy's dtypes
    assert TrainConfig(amp="none").dtype == "float32" and TrainConfig(amp="bf16").dtype == "bfloat16"
    with pytest.raises(ValueError, match="use dtype alone"):
        TrainConfig(amp="bf16", dtype="float32")


def test_video_to_text_objective_is_the_plain_retrieval_loss():
    """The faithful default: cross-entropy of each edit over the batch's instructions, nothing else."""
    from types import SimpleNamespace

    from editlens.twoframe.train import info_nce

    torch.manual_seed(0)
    fs, fe, text = torch.randn(4, 8), torch.randn(4, 8), torch.nn.functional.normalize(torch.randn(4, 8), dim=-1)
    model = SimpleNamespace(clip=SimpleNamespace(logit_scale=torch.tensor(np.log(10.0))),
                            video_features=lambda a, b: torch.nn.functional.normalize((a + b) / 2, dim=-1))
    instr = ["a", "b", "c", "d"]
    video = model.video_features(fs, fe)
    expected = torch.nn.functional.cross_entropy(10.0 * video @ text.T, torch.arange(4))
    assert float(info_nce(model, fs, fe, text, instr, (), "video_to_text")) == pytest.approx(float(expected), rel=1e-5)
    both = float(info_nce(model, fs, fe, text, instr, (), "symmetric"))
    t2v = torch.nn.functional.cross_entropy(10.0 * text @ video.T, torch.arange(4))
    assert both == pytest.approx(float((expected + t2v) / 2), rel=1e-5)


def test_faithful_lora_training_exports_plain_clip(base_dir, edit_manifest, tmp_path):
    from editlens.twoframe.model import load_twoframe

    history = _train(base_dir, edit_manifest, tmp_path / "run", mode="faithful", tune="lora:4", epochs=1, lr=1e-3)
    assert history["steps"] and all(np.isfinite(s["loss"]) for s in history["steps"])
    assert history["objective"] == "video_to_text" and history["negatives"] == []
    model = load_twoframe(tmp_path / "run" / "model", device="cpu")  # strict load: LoRA merged, no adapter keys
    assert model.head is None and model.mode == "faithful"
    before = load_twoframe(base_dir, device="cpu").clip.state_dict()
    after = model.clip.state_dict()
    key = "vision_model.encoder.layers.1.self_attn.q_proj.weight"
    assert not torch.equal(before[key], after[key])  # the adapters' update is in the merged weights
    assert torch.equal(before["vision_model.embeddings.patch_embedding.weight"],
                       after["vision_model.embeddings.patch_embedding.weight"])  # frozen parts untouched


def test_evaluators_through_score_edit(base_dir, tmp_path):
    from editlens.errors import ModelUnavailableError
    from editlens.runner.scoring import score_edit

    src, edt = rng_image(7, 40, 40), rng_image(8, 40, 40)
    rep = score_edit(src, edt, "add a red square", metrics=["twoframe"], models={"twoframe": str(base_dir)})
    s = rep["twoframe"]
    assert s.status == "scored" and s.details["mode"] == "faithful" and -1 <= s.value <= 1
    # CLIP's initial temperature, as stored in the dtype the policy loads the model in ($EDITLENS_DTYPE)
    from editlens.models.precision import decide

    scale = float(torch.tensor(2.6592, dtype=decide("auto", "cpu").torch_dtype).float().exp())
    assert s.details["logit"] == pytest.approx(s.value * scale, rel=1e-3)
    with pytest.raises(ModelUnavailableError, match="twoframe"):
        score_edit(src, edt, "x", metrics=["twoframe"], models={"twoframe": str(tmp_path / "nope")})
    with pytest.raises(ModelUnavailableError, match="no order-aware head"):  # a plain CLIP has none
        score_edit(src, edt, "x", metrics=["twoframe_order"], models={"twoframe": str(base_dir)})
    # a ViFi-layout .pth as the evaluator's model: needs the tokenizer (and base) as metric options
    from editlens.testing.twoframe_models import write_original_checkpoint
    from editlens.twoframe.model import load_twoframe

    pth = write_original_checkpoint(load_twoframe(base_dir, device="cpu").clip, tmp_path / "vifi.pth")
    with pytest.raises(ModelUnavailableError, match="tokenizer"):
        score_edit(src, edt, "x", metrics=["twoframe"], models={"twoframe": str(pth)})
    rep = score_edit(src, edt, "add a red square", metrics=["twoframe"], models={"twoframe": str(pth)},
                     options={"twoframe": {"tokenizer": str(base_dir), "base": str(base_dir), "preset": "clip"}})
    assert rep["twoframe"].details["prompt"] == "vifi"  # ViFi weights read ViFi's prompt by default ...
    rep = score_edit(src, edt, "add a red square", metrics=["twoframe"], models={"twoframe": str(pth)},
                     options={"twoframe": {"tokenizer": str(base_dir), "base": str(base_dir), "preset": "clip",
                                           "prompt": "raw"}})
    # ... and with the same prompt: same weights, same preprocessing, same score
    assert rep["twoframe"].value == pytest.approx(s.value, abs=1e-6) and rep["twoframe"].details["prompt"] == "raw"


def test_cli_train_save_reload_score_eval(base_dir, edit_manifest, tmp_path):
    from editlens.cli.twoframe_commands import twoframe_app

    runner = CliRunner()

    def run(*args):  # type: ignore[no-untyped-def]
        res = runner.invoke(twoframe_app, [str(a) for a in args], catch_exceptions=False)
        assert res.exit_code == 0, res.output
        return res

    base = tmp_path / "base"
    run("random-model", base)
    out = tmp_path / "run"
    res = run("train", edit_manifest, "--model", base, "--out", out, "--epochs", 4, "--batch-size", 8,
              "--val-fraction", 0.25, "--head-lr", 3e-3, "--no-progress", "--json")
    summary = json.loads(res.stdout)
    assert summary["last_epoch_loss"] < summary["first_epoch_loss"]
    assert (out / "loss_curve.png").stat().st_size > 1000 and (out / "model" / "twoframe.json").is_file()
    assert summary["objective"] == "symmetric" and summary["negatives"] == ["noop", "swap"]
    assert summary["precision"]["purpose"] == "training" and (out / "history.json").is_file()
    assert json.loads((out / "model" / "twoframe.json").read_text())["provenance"]["trained"]["precision"]["dtype"] \
        == summary["precision"]["dtype"]
    assert set(summary["final_val"]["video_to_text"]) >= {"recall@1", "recall@5", "recall@10", "recall@50", "mean_rank"}

    res = run("eval", out / "model", edit_manifest, "--json", "--scores", tmp_path / "scores.jsonl")
    rep = json.loads(res.stdout)
    assert rep["n_edits"] == 16 and rep["unique_images"] == 24 and rep["frames_encoded"] == 24
    assert 1 <= rep["video_to_text"]["median_rank"] <= rep["pool"] == 12
    rows = [json.loads(line) for line in open(tmp_path / "scores.jsonl")]
    assert len(rows) == 16 and {"cosine", "logit", "calibrated", "rank"} <= set(rows[0])

    src = edit_manifest.parent / "src0.png"
    res = run("score", out / "model", "--source", src, "--edited", edit_manifest.parent / "edit0.png",
              "--instruction", "add a red square at the top left", "--json")
    assert json.loads(res.stdout)["mode"] == "order"
    res = run("calibrate", out / "model", edit_manifest, "--label-column", "human", "--json")
    cal = json.loads(res.stdout)
    assert cal["n"] == 16 and cal["mode"] == "order"
    assert json.loads((out / "model" / "twoframe.json").read_text())["calibration"]["a"] == cal["a"]

    # the trained model as a registered evaluator in a run, then the usual meta-evaluation
    from scipy.stats import spearmanr

    from editlens.cli.main import app

    res = runner.invoke(app, ["run", str(edit_manifest), "--out", str(tmp_path / "scored"), "--metrics",
                              "twoframe,twoframe_order", "--model", f"twoframe={out / 'model'}", "--no-progress"],
                        catch_exceptions=False)
    assert res.exit_code == 0, res.output
    results = [json.loads(line) for line in open(tmp_path / "scored" / "results.jsonl")]
    values = {r["id"]: r["scores"]["twoframe_order"]["value"] for r in results}
    human = {r["id"]: r["human"] for r in map(json.loads, open(edit_manifest))}
    (tmp_path / "human.jsonl").write_text("".join(json.dumps({"id": i, "model": f"m{int(i[1:]) % 3}", "human": h}) + "\n"
                                                  for i, h in human.items()))
    res = runner.invoke(app, ["meta-eval", "pointwise", "--human", str(tmp_path / "human.jsonl"), "--predictions",
                              str(tmp_path / "scored" / "results.jsonl"), "--metric", "twoframe_order", "--json",
                              "--n-boot", "10"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    meta = json.loads(res.stdout)
    ids = sorted(values)
    expected = spearmanr([values[i] for i in ids], [human[i] for i in ids])[0]
    assert meta["overall"]["spearman"]["value"] == pytest.approx(expected)

    bad = runner.invoke(twoframe_app, ["eval", str(out / "model"), str(tmp_path / "missing.jsonl")])
    assert bad.exit_code == 2 and "missing.jsonl: manifest file not found" in bad.output


def test_cli_ctrl_c_saves_exits_130_and_the_rerun_resumes(base_dir, edit_manifest, tmp_path, monkeypatch):
    """A real SIGINT in the middle of `twoframe train`: the step finishes, a checkpoint is saved, exit 130;
    the same command again picks up there (bf16 compute, from --dtype)."""
    import os
    import signal

    import editlens.twoframe.train as T
    from editlens.cli.twoframe_commands import twoframe_app
    from editlens.training import latest_checkpoint, read_log

    real_loss, calls = T.info_nce, {"n": 0}

    def ctrl_c_at_3(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] == 3:
            os.kill(os.getpid(), signal.SIGINT)
        return real_loss(*args, **kwargs)

    monkeypatch.setattr(T, "info_nce", ctrl_c_at_3)
    args = ["train", str(edit_manifest), "--model", str(base_dir), "--out", str(tmp_path / "run"), "--epochs", "3",
            "--batch-size", "8", "--val-fraction", "0", "--dtype", "bfloat16", "--no-progress", "--json"]
    res = CliRunner().invoke(twoframe_app, args)
    assert res.exit_code == 130, res.output
    assert latest_checkpoint(tmp_path / "run").name == "step-0000003"
    monkeypatch.setattr(T, "info_nce", real_loss)
    res = CliRunner().invoke(twoframe_app, args)
    assert res.exit_code == 0, res.output
    assert [r["step"] for r in read_log(tmp_path / "run")] == [1, 2, 3, 4, 5, 6]
    summary = json.loads(res.stdout)
    assert summary["precision"]["dtype"] == "bfloat16" and summary["last_epoch_loss"] < summary["first_epoch_loss"]


@pytest.mark.integration
def test_aurora_train_reload_eval_from_cli(tmp_path):
    """The issue's chain on real photos: AURORA (source, ground-truth edit, instruction) triples."""
    from helpers import shared_path

    from editlens.cli.twoframe_commands import twoframe_app

    aurora = shared_path("data", "aurora")
    rows = [json.loads(line) for line in open(aurora / "edits.jsonl")][:16]
    manifest = tmp_path / "aurora.jsonl"
    manifest.write_text("".join(json.dumps({"id": f"a{i}", "source": str(aurora / r["input"]),
                                            "edited": str(aurora / r["output"]), "instruction": r["instruction"]})
                                + "\n" for i, r in enumerate(rows)))
    runner = CliRunner()
    invoke = lambda *a: runner.invoke(twoframe_app, [str(x) for x in a], catch_exceptions=False)  # noqa: E731
    assert invoke("random-model", tmp_path / "base").exit_code == 0
    res = invoke("train", manifest, "--model", tmp_path / "base", "--out", tmp_path / "run", "--epochs", 3,
                 "--batch-size", 8, "--val-fraction", 0, "--no-progress", "--json")
    summary = json.loads(res.stdout)
    assert summary["last_epoch_loss"] < summary["first_epoch_loss"]
    rep = json.loads(invoke("eval", tmp_path / "run" / "model", manifest, "--json").stdout)
    assert rep["n_edits"] == 16 and rep["frames_encoded"] == rep["unique_images"] < 32
    assert 0 <= rep["video_to_text"]["recall@5"] <= 1

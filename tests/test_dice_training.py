"""DICE LoRA fine-tuning from the CLI on a tiny Idefics3: the loss goes down,
checkpoints resume, the adapter reloads into `editlens dice`."""

import json
from pathlib import Path

import pytest
from helpers import DICE_BOX, write_dice_records
from typer.testing import CliRunner

CLONE = Path(__file__).parent / "data" / "dice_prompts_clone"
BOX = DICE_BOX


@pytest.fixture(scope="module")
def trainable_base(tmp_path_factory):
    from editlens.testing.tiny_dice import build_trainable_idefics3

    return build_trainable_idefics3(tmp_path_factory.mktemp("tiny-trainable"))


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory):
    return write_dice_records(tmp_path_factory.mktemp("dice-data"), coherence=True)


def _train(base, data, out, stage, steps, extra=()):
    from editlens.cli.main import app

    args = ["dice-train", "--stage", stage, "--data", str(data), "--base", str(base), "--out", str(out),
            "--steps", str(steps), "--lr", "1e-2", "--rank", "8", "--dropout", "0", "--save-every", "8",
            "--eval-max-new-tokens", "40", "--repetition-penalty", "1.0", "--dice-prompts", str(CLONE), "--no-progress", "--json", *extra]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout[r.stdout.index("{"):])


@pytest.fixture(scope="module")
def trained_detector(trainable_base, tiny_data, tmp_path_factory):
    """24 steps with an evaluation, then a resumed run to 40 steps (both from the CLI)."""
    out = tmp_path_factory.mktemp("det") / "det"
    first = _train(trainable_base, tiny_data / "train.jsonl", out, "detect", 24,
                   ["--eval-data", str(tiny_data / "train.jsonl"), "--eval-every", "24"])
    log24 = [json.loads(x) for x in open(out / "log.jsonl")]
    more = _train(trainable_base, tiny_data / "train.jsonl", out, "detect", 40)
    return out, first, log24, more


def test_detector_trains_resumes_and_runs_in_dice(trainable_base, tiny_data, tmp_path, trained_detector):
    from editlens.cli.main import app

    out, doc, log, more = trained_detector
    assert doc["steps_done"] == 24 and doc["last_loss"] < 0.25 * doc["first_loss"]
    assert doc["evals"] and doc["evals"][-1]["n"] == 2 and "AP" in doc["evals"][-1]
    for name in ("adapter/adapter_config.json", "adapter/adapter_model.safetensors", "preset.json", "loss.png",
                 "log.jsonl", "train_config.json", "summary.json"):
        assert (out / name).is_file(), name
    assert [r["step"] for r in log if "loss" in r] == list(range(1, 25))
    assert log[-1]["val"]["n"] == 2 and doc["evals"][-1]["step"] == 24
    # the policy's decision and the base/optimizer are recorded in checkpoints, adapter and summary
    state = json.loads(next((out / "checkpoints").glob("step-*/state.json")).read_text())
    meta = json.loads((out / "adapter" / "editlens_training.json").read_text())
    assert state["precision"] == meta["precision"] == doc["precision"]
    # (on CUDA with bitsandbytes the policy picks paged AdamW 8-bit)
    assert state["precision"]["purpose"] == "training"
    assert state["precision"]["optimizer"] == ("AdamW" if state["precision"]["device"] == "cpu" else "paged AdamW 8-bit")
    assert meta["crop"] == doc["crop"] == "none" and state["identity"]["crop"] == "none"
    assert json.loads((out / "preset.json").read_text())["detector_crop"] is False

    # resume: only the new steps ran, the log continues without repeats
    assert more["resumed_from"] == 24 and more["steps_done"] == 40
    log = [json.loads(x) for x in open(out / "log.jsonl")]
    assert [r["step"] for r in log if "loss" in r] == list(range(1, 41))
    # a different setting in the same folder is refused
    r = CliRunner().invoke(app, ["dice-train", "--stage", "detect", "--data", str(tiny_data / "train.jsonl"),
                                 "--base", str(trainable_base), "--out", str(out), "--rank", "4", "--no-progress"])
    assert r.exit_code == 2 and "other settings" in r.output and "rank was 8, now 4" in r.output

    # the adapter reloads through the preset it wrote, and answers in the released format
    r = CliRunner().invoke(app, ["dice", "--source", str(tiny_data / "s0.png"), "--edited", str(tiny_data / "e0.png"),
                                 "--instruction", "add a cat", "--dice-preset", str(out / "preset.json"), "--json"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.stdout)
    assert res["detector"] == "released" and not res.get("problem"), res["raw"]
    (d,) = res["differences"]
    assert d["command"] == "ADD" and d["object"] == "cat" and d["box"] == pytest.approx(BOX, abs=0.01)
    assert 0.5 < d["confidence"] <= 1.0 and d["confidence_source"] == "softmax over ADD/EDIT/REMOVE logits"
    assert res["dice_models"]["prompts"]["source"].startswith("official prompts")

    # stage 1 -> stage 2 as released: merge the adapter into the base; the merged model alone answers the same
    r = CliRunner().invoke(app, ["dice-merge", "--base", str(trainable_base), "--adapter", str(out / "adapter"),
                                 "--out", str(tmp_path / "merged")])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(app, ["dice", "--source", str(tiny_data / "s0.png"), "--edited", str(tiny_data / "e0.png"),
                                 "--instruction", "add a cat", "--dice-preset", str(out / "preset.json"),
                                 "--dice-detector", str(tmp_path / "merged"), "--json"])
    merged = json.loads(r.stdout)
    assert merged["raw"] == res["raw"] and merged["differences"][0]["confidence"] == pytest.approx(d["confidence"], abs=1e-4)

    # the same adapter inside `editlens run --dice`, then COCO AP with dice-eval
    manifest = tmp_path / "m.jsonl"
    manifest.write_text("".join(json.dumps({"id": f"p{i}", "source": str(tiny_data / f"s{i}.png"),
                                            "edited": str(tiny_data / f"e{i}.png"), "instruction": "add a cat"}) + "\n"
                                for i in range(2)))
    run = tmp_path / "run"
    r = CliRunner().invoke(app, ["run", str(manifest), "--out", str(run), "--metrics", "l1", "--dice", "--option",
                                 f"dice.dice_preset={out / 'preset.json'}", "--no-progress"])
    assert r.exit_code == 0, r.output
    rows = [json.loads(x) for x in open(run / "results.jsonl")]
    dice = [r["scores"]["dice"] for r in rows]
    # detector only: differences reported, coherence not judged -> an info row, no made-up score
    assert all(d["status"] == "info" and d["details"]["differences"][0]["command"] == "ADD" for d in dice)
    r = CliRunner().invoke(app, ["dice-eval", "--gt", str(tiny_data / "train.jsonl"), "--predictions",
                                 str(run / "results.jsonl"), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["class_aware"]["AP50"] == pytest.approx(1.0)


def test_coherence_trains_and_judges(trainable_base, tiny_data, tmp_path, trained_detector):
    from editlens.cli.main import app

    out = tmp_path / "coh"
    doc = _train(trainable_base, tiny_data, out, "coherence", 36,
                 ["--eval-data", str(tiny_data / "coherence.jsonl")])
    assert doc["last_loss"] < 0.25 * doc["first_loss"]
    assert doc["evals"][-1]["accuracy"] == 1.0 and doc["evals"][-1]["unparsable"] == 0
    preset = json.loads((out / "preset.json").read_text())
    assert "detector" not in preset and preset["coherence"].endswith("adapter")
    # both trained adapters in `editlens dice`: the detector finds the added cat, the estimator
    # judges it coherent, with P(YES) from the YES/NO logits
    det = trained_detector[0]
    r = CliRunner().invoke(app, ["dice", "--source", str(tiny_data / "s0.png"), "--edited", str(tiny_data / "e0.png"),
                                 "--instruction", "add a cat", "--dice-preset", str(det / "preset.json"),
                                 "--dice-coherence", preset["coherence"], "--json"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.stdout)
    (d,) = res["differences"]
    # (36 steps memorise the reasoning "cat added"; CUDA's bf16 kernels may end it a token early)
    assert d["command"] == "ADD" and d["verdict"]["coherent"] is True and d["verdict"]["reasoning"].startswith("cat add")
    assert d["verdict"]["p_yes"] > 0.5
    # the decoding an adapter was trained with follows it; a coherence adapter is no detector
    r = CliRunner().invoke(app, ["dice", "--source", str(tiny_data / "s0.png"), "--edited", str(tiny_data / "e0.png"),
                                 "--instruction", "add a cat", "--dice-detector", preset["coherence"]])
    assert r.exit_code == 2 and "trained for the coherence stage, not as the detector" in r.output


def test_bad_training_data_is_named(tmp_path, trainable_base):
    from editlens.cli.main import app

    (tmp_path / "t.jsonl").write_text(json.dumps({"id": 1, "source": "nope.png", "edited": "nope.png",
                                                  "differences": []}) + "\n")
    r = CliRunner().invoke(app, ["dice-train", "--stage", "detect", "--data", str(tmp_path / "t.jsonl"),
                                 "--base", str(trainable_base), "--out", str(tmp_path / "o"), "--no-progress"])
    assert r.exit_code == 2 and "t.jsonl:1: image 'nope.png' not found" in r.output


def test_interrupt_saves_and_resume_redoes_nothing(trainable_base, tiny_data, tmp_path, monkeypatch):
    from editlens.dice import training

    calls = {"n": 0}
    real = training.encode_example

    def interrupting(*a, **k):
        calls["n"] += 1
        if calls["n"] == 4:  # during step 4
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(training, "encode_example", interrupting)
    cfg = training.TrainConfig("detect", str(tiny_data / "train.jsonl"), str(tmp_path / "r"), str(trainable_base),
                               steps=5, lr=1e-2, rank=4, dropout=0.0, save_every=100, crop="square")
    from editlens.training import latest_checkpoint

    res = training.train(cfg, progress=False, log=lambda m: None)
    assert res.interrupted and res.steps_done == 3 and res.adapter is None and res.exit_code == 130

    ck = latest_checkpoint(tmp_path / "r")
    assert ck.name == "step-0000003" and (ck / "adapter" / "adapter_config.json").is_file()
    monkeypatch.setattr(training, "encode_example", real)
    res = training.train(cfg, progress=False, log=lambda m: None)
    assert res.resumed_from == 3 and res.steps_done == 5 and not res.interrupted and res.adapter.is_dir()
    steps = [json.loads(x)["step"] for x in open(tmp_path / "r" / "log.jsonl")]
    assert steps == [1, 2, 3, 4, 5]
    # a finished run rerun does nothing more
    again = training.train(cfg, progress=False, log=lambda m: None)
    assert again.resumed_from == again.steps_done == 5 and again.adapter == res.adapter
    assert [json.loads(x)["step"] for x in open(tmp_path / "r" / "log.jsonl")] == steps
    # trained on square centre crops (the paper's recipe): recorded, and the preset crops at inference too
    meta = json.loads((res.adapter / "editlens_training.json").read_text())
    assert meta["crop"] == "square" and meta["config"]["crop"] == "square"
    assert json.loads((tmp_path / "r" / "preset.json").read_text())["detector_crop"] is True
    ck = json.loads((latest_checkpoint(tmp_path / "r") / "state.json").read_text())
    assert ck["identity"]["crop"] == "square"


def test_square_crop_maps_the_boxes_into_the_crop(tiny_data):
    """64x48 images: the square crop is x 8..56; a box at x 16..32 (of 64) becomes 8..24 of 48."""
    from editlens.dice.prompt_sets import load_official_prompts
    from editlens.dice.released_format import CentreCrop
    from editlens.dice.training import ExampleBuilder, TrainConfig, crop_differences, load_records

    rows = load_records(tiny_data / "train.jsonl", "detect")
    prompts = load_official_prompts(CLONE)
    _, whole, answer = ExampleBuilder("detect", prompts, "released", True)(rows[0])
    assert whole[0].shape == (48, 64, 3) and answer == "['ADD: cat, (0.25, 0.25, 0.5, 0.75)']"
    _, images, answer = ExampleBuilder("detect", prompts, "released", True, crop=True)(rows[0])
    assert [i.shape for i in images] == [(48, 48, 3)] * 2
    assert answer == "['ADD: cat, (0.167, 0.25, 0.5, 0.75)']"
    assert (images[1] == whole[1][:, 8:56]).all()
    # a difference wholly outside the crop is not in the picture the model sees
    outside = [{"command": "REMOVE", "object": "cup", "box": [0.0, 0.1, 0.1, 0.2]}]
    assert crop_differences(outside, CentreCrop(64, 48)) == []
    # coherence: cropped as the released estimator sees it unless asked otherwise
    coh = load_records(tiny_data / "coherence.jsonl", "coherence")
    assert ExampleBuilder("coherence", prompts, "released", True)(coh[0])[1][0].shape[:2] == (512, 512)
    assert TrainConfig("coherence", "d", "o", "b").square_crop and not TrainConfig("detect", "d", "o", "b").square_crop
    assert TrainConfig("detect", "d", "o", "b", crop="square").identity()["crop"] == "square"


def test_loss_mask_covers_only_the_answer(trainable_base, tiny_data):
    from transformers import AutoProcessor

    from editlens.dice.prompt_sets import load_official_prompts
    from editlens.dice.training import ExampleBuilder, encode_example, load_records

    proc = AutoProcessor.from_pretrained(str(trainable_base))
    rows = load_records(tiny_data / "train.jsonl", "detect")
    conv, images, answer = ExampleBuilder("detect", load_official_prompts(CLONE), "released", True)(rows[0])
    assert answer == "['ADD: cat, (0.25, 0.25, 0.5, 0.75)']"
    enc = encode_example(proc, conv, images, answer)
    ids, labels = enc["input_ids"][0], enc["labels"][0]
    kept = labels != -100
    first = int(kept.nonzero()[0])
    assert kept[first:].all() and not kept[:first].any() and (labels[kept] == ids[kept]).all()
    assert proc.tokenizer.decode(ids[kept], skip_special_tokens=True).strip() == answer

"""ADIEE scorer: decoder and score formulas, the hidden-state choice on a
scripted model, released-layout and our-layout round trips with strict key
accounting, answer-only loss masking, and training (loss down, resume)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from PIL import Image

from editlens.adiee.model import AdieeScorer, ScoreDecoder, decode_scores, score_loss, score_targets
from editlens.errors import InputError


def test_decoder_layout_and_shapes():
    d = ScoreDecoder(32, 1)
    assert [type(m).__name__ for m in d] == ["Linear", "ReLU", "Linear", "ReLU", "Linear"]
    assert [tuple(d[i].weight.shape) for i in (0, 2, 4)] == [(256, 32), (16, 256), (1, 16)]
    assert sorted(d.state_dict()) == ["0.bias", "0.weight", "2.bias", "2.weight", "4.bias", "4.weight"]
    assert ScoreDecoder(8, 3)(torch.zeros(5, 8)).shape == (5, 3)


def test_score_formulas():
    # regression: the output itself
    assert decode_scores(torch.tensor([[3.25], [11.0]]), "regression").tolist() == [3.25, 11.0]
    # class head: clamp(sum softmax * [0, 1, 2], 0, 2) * 5
    logits = torch.tensor([[0.0, 0.0, 0.0], [100.0, 0.0, 0.0], [0.0, 0.0, 100.0], [1.0, 2.0, 3.0]])
    p = torch.softmax(logits[3], 0)
    expected = [5.0, 0.0, 10.0, float((p[1] + 2 * p[2]) * 5)]
    assert decode_scores(logits, "class3").tolist() == pytest.approx(expected, abs=1e-5)
    assert score_targets(torch.tensor([0.0, 0.5, 1.0]), "regression").tolist() == [0.0, 5.0, 10.0]
    # L1 on the 0-10 scale, CE on the nearest class
    assert float(score_loss(torch.tensor([[4.0], [10.0]]), torch.tensor([0.5, 0.5]), "regression")) == 3.0
    ce = score_loss(torch.tensor([[0.0, 0.0, 0.0]]), torch.tensor([1.0]), "class3")
    assert float(ce) == pytest.approx(np.log(3), rel=1e-5)


# -- hidden-state choice on a scripted model -------------------------------------------
SCORE, EOS, PAD = 5, 2, 0


class _Tok:
    unk_token_id, pad_token_id, eos_token_id = 1, PAD, EOS

    def convert_tokens_to_ids(self, t):
        return SCORE if t == "[SCORE]" else 1

    def decode(self, ids, skip_special_tokens=False):
        return " ".join(map(str, ids))


class _ScriptedVLM(torch.nn.Module):
    """Generates scripted tokens; the last-layer state at generation step t
    (row b) is filled with 10 * (t + 1) + b, and a plain forward's last state
    is 100 * last input token + sequence length."""

    def __init__(self, new_tokens):
        super().__init__()
        self.new = torch.tensor(new_tokens)
        self.config = SimpleNamespace(text_config=SimpleNamespace(hidden_size=4))
        self.generation_config = SimpleNamespace(eos_token_id=EOS)
        self.seen = []

    def generate(self, input_ids, attention_mask, max_new_tokens, **kw):
        b, n = input_ids.shape
        steps = self.new.shape[1]
        hidden = tuple((torch.full((b, n if t == 0 else 1, 4), 0.0) + (10.0 * (t + 1) + torch.arange(b))[:, None, None],)
                       for t in range(steps))
        return SimpleNamespace(sequences=torch.cat([input_ids, self.new], 1), hidden_states=hidden)

    def forward(self, input_ids, attention_mask, output_hidden_states=True, use_cache=False, **kw):
        self.seen.append(input_ids[0].tolist())
        h = torch.zeros(1, input_ids.shape[1], 4)
        h[0, -1] = 100.0 * float(input_ids[0, -1]) + input_ids.shape[1]
        return SimpleNamespace(hidden_states=(h,))


def _scripted_scorer(new_tokens):
    vlm = _ScriptedVLM(new_tokens)
    scorer = AdieeScorer(vlm, SimpleNamespace(tokenizer=_Tok()), "regression", "scripted")
    scorer.decode = lambda h: h[:, :1]  # score = the state's first value: the states themselves are visible
    return scorer, vlm


def test_hidden_state_choice_scripted():
    new = [[7, SCORE, 8, EOS],  # row 0: [SCORE] emitted at step 1, fed back at step 2
           [7, 7, 7, 7],  # row 1: never emitted, no end token
           [7, 7, 7, SCORE]]  # row 2: emitted at the very last step
    scorer, vlm = _scripted_scorer(new)
    ids = torch.tensor([[PAD, 3, 4], [3, 4, 4], [PAD, PAD, 3]])
    inputs = {"input_ids": ids, "attention_mask": (ids != PAD).long()}
    emit = scorer.predict(inputs, hidden="emitting-step")
    assert [p.score for p in emit] == [20.0, 41.0, 42.0]  # step 1; last step (3); step 3
    assert [p.emitted for p in emit] == [True, False, True]
    tok = scorer.predict(inputs, hidden="score-token")
    # row 0: the step after emission (2); rows 1 and 2 need a forward with [SCORE] at the end
    assert tok[0].score == 30.0
    assert vlm.seen == [[3, 4, 4, 7, 7, 7, 7, SCORE], [3, 7, 7, 7, SCORE]]  # padding removed, [SCORE] appended once
    assert tok[1].score == 100.0 * SCORE + 8 and tok[2].score == 100.0 * SCORE + 5
    with pytest.raises(ValueError, match="hidden"):
        scorer.predict(inputs, hidden="middle")


def test_several_score_tokens_read_at_the_last_as_the_release_or_the_first():
    """ADIEE's get_score reads the last [SCORE] of an answer emitting several; score_token=first the first."""
    new = [[SCORE, 7, SCORE, EOS]]  # [SCORE] at steps 0 and 2
    scorer, _ = _scripted_scorer(new)
    ids = torch.tensor([[3, 4]])
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    assert scorer.predict(inputs, hidden="emitting-step")[0].score == 30.0  # default: the last (step 2)
    assert scorer.predict(inputs, hidden="emitting-step", score_token="first")[0].score == 10.0
    assert scorer.predict(inputs, hidden="score-token", score_token="last")[0].score == 40.0  # fed back at step 3
    with pytest.raises(ValueError, match="score_token"):
        scorer.predict(inputs, score_token="middle")


# -- real tiny models -----------------------------------------------------------------------
def _pairs(n=3, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.integers(0, 256, (20, 24, 3), dtype=np.uint8), rng.integers(0, 256, (20, 24, 3), dtype=np.uint8),
             f"make change {i}") for i in range(n)]


def _predict(scorer, items, hidden="emitting-step"):
    from editlens.adiee.prompts import inference_inputs, load_prompts, side_by_side

    pr = load_prompts()
    imgs = [side_by_side(a, b, 32) for a, b, _ in items]
    return scorer.predict(inference_inputs(scorer.processor, imgs, [pr.question(i) for _, _, i in items],
                                           scorer.device, torch.float32), hidden=hidden)


@pytest.mark.parametrize("family", ["llava_next", "qwen2_vl"])
def test_released_layout_round_trip(tiny_vlm_dirs, tmp_path, family):
    from safetensors.torch import load_file

    from editlens.adiee.checkpoint import load_scorer, save_released, scorer_from_base

    scorer = scorer_from_base(str(tiny_vlm_dirs[family]), head="class3", device="cpu")
    before = _predict(scorer, _pairs())
    out = save_released(scorer, tmp_path / "rel")
    keys = load_file(str(out / "model.safetensors")).keys()
    assert all(k.startswith(("vlm.", "score_decoder.")) for k in keys)
    assert {"score_decoder.0.weight", "score_decoder.4.weight"} <= set(keys)
    loaded, rep, hidden = load_scorer(out, device="cpu", dtype="float32")  # a round trip is exact in float32
    assert hidden == "emitting-step" and loaded.head == "class3" and rep.missing == rep.unexpected == []
    assert loaded.processor.tokenizer.convert_tokens_to_ids("[SCORE]") == scorer.score_token_id
    after = _predict(loaded, _pairs())
    assert [p.score for p in after] == pytest.approx([p.score for p in before], abs=1e-5)


def test_released_layout_strict_keys_and_old_names(tiny_vlm_dirs, tmp_path):
    from safetensors.torch import load_file, save_file

    from editlens.adiee.checkpoint import CheckpointError, load_scorer, save_released, scorer_from_base

    scorer = scorer_from_base(str(tiny_vlm_dirs["llava_next"]), device="cpu")
    out = save_released(scorer, tmp_path / "rel")
    state = load_file(str(out / "model.safetensors"))
    (out / "adiee.json").unlink()  # as released: no editlens metadata

    def write(s):
        save_file(s, str(out / "model.safetensors"))

    # keys as transformers < 4.52 wrote them are renamed and load
    old = {}
    for k, v in state.items():
        k2 = k.replace("vlm.model.language_model.", "vlm.language_model.model.").replace("vlm.lm_head.",
                                                                                           "vlm.language_model.lm_head.")
        old[k2.replace("vlm.model.vision_tower.", "vlm.vision_tower.")] = v
    write(old)
    loaded, rep, hidden = load_scorer(out, device="cpu", dtype="float32")  # a round trip is exact in float32
    assert rep.renamed > 0 and hidden == "emitting-step"
    assert [p.score for p in _predict(loaded, _pairs(2))] == pytest.approx([p.score for p in _predict(scorer, _pairs(2))],
                                                                        abs=1e-5)
    # a missing decoder key, a missing VLM key, an unexpected key: refused, each named
    for broken, word in (({k: v for k, v in state.items() if k != "score_decoder.2.bias"}, "score_decoder.2.bias"),
                         ({k: v for k, v in state.items() if k != "vlm.model.image_newline"}, "image_newline"),
                         ({**state, "extra.weight": torch.zeros(1)}, "extra.weight")):
        write(broken)
        with pytest.raises(CheckpointError, match=word):
            load_scorer(out, device="cpu")
    write(state)
    (out / "config.json").unlink()
    with pytest.raises(CheckpointError, match="--base"):
        load_scorer(out, device="cpu")
    loaded, _, _ = load_scorer(out, base=str(tiny_vlm_dirs["llava_next"]), device="cpu")  # base gives the config
    assert loaded.score_decoder.out_features == 1


def _tiny_dataset(root: Path, n: int = 8) -> Path:
    (root / "images").mkdir(parents=True)
    rows = []
    for i in range(n):
        rng = np.random.default_rng(i)
        src = rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)
        same = i % 2 == 0
        edt = src if same else 255 - src
        Image.fromarray(src).save(root / "images" / f"s{i}.png")
        Image.fromarray(edt).save(root / "images" / f"e{i}.png")
        rows.append({"id": f"x{i}", "source": f"images/s{i}.png", "edited": f"images/e{i}.png",
                     "instruction": "invert the colours", "score": 0.0 if same else 1.0,
                     "split": "val" if i >= n - 2 else "train"})
    (root / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root


def test_answer_only_loss_masking(tiny_vlm_dirs):
    from editlens.adiee.checkpoint import scorer_from_base
    from editlens.adiee.prompts import chat_prompt, collate, side_by_side, training_example

    scorer = scorer_from_base(str(tiny_vlm_dirs["llava_next"]), device="cpu")
    tok = scorer.processor.tokenizer
    img = side_by_side(*_pairs(1)[0][:2], 32)
    ex = training_example(scorer.processor, img, "rate it", "The edit gets [SCORE]")
    prompt_len = len(scorer.processor(text=[chat_prompt(scorer.processor, "rate it")], images=[img])["input_ids"][0])
    labels = ex["labels"]
    assert (labels[:prompt_len] == -100).all() and (labels[prompt_len:] != -100).all()
    assert tok.decode(labels[prompt_len:].tolist()) == "The edit gets [SCORE]" + tok.eos_token
    assert int((ex["input_ids"] == scorer.score_token_id).sum()) == 1
    short = training_example(scorer.processor, img, "rate it", "[SCORE]")
    batch = collate([ex, short], tok.pad_token_id)
    n_short = len(short["input_ids"])
    assert (batch["labels"][1, n_short:] == -100).all() and (batch["attention_mask"][1, n_short:] == 0).all()
    assert batch["pixel_values"].shape[0] == 2
    # the CE term sees only answer tokens: changing a prompt label position has no effect
    batch["scores"] = torch.tensor([1.0, 0.0])
    torch.manual_seed(0)
    a = scorer.training_losses(batch)["ce_loss"]
    batch2 = dict(batch)
    batch2["labels"] = batch["labels"].clone()
    batch2["labels"][:, prompt_len:] = -100  # masking the answer too leaves nothing: NaN mean
    assert torch.isfinite(a) and not torch.isfinite(scorer.training_losses(batch2)["ce_loss"])


def test_training_loss_down_resume_and_our_layout(tiny_vlm_dirs, tmp_path):
    from editlens.adiee.checkpoint import load_scorer
    from editlens.adiee.train import TrainConfig, train

    data = _tiny_dataset(tmp_path / "ds")
    common = dict(base=str(tiny_vlm_dirs["llava_next"]), data=str(data), steps=6, lr=5e-3, batch_size=2,
                  image_side=32, lora_dropout=0.0, val_every=6, save_every=3, device="cpu", seed=1)
    lines = []
    s = train(TrainConfig(out=str(tmp_path / "a"), **common), echo=lines.append, progress=False)
    assert s["last_loss"] < s["first_loss"]
    assert any(line.startswith("step") for line in lines)
    assert (tmp_path / "a" / "loss.png").stat().st_size > 1000
    log = [json.loads(x) for x in (tmp_path / "a" / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log] == list(range(1, 7)) and "spearman" in log[5]["val"]
    assert log[5]["val"]["n"] + log[5]["val"]["unscored"] == 2  # rows without [SCORE] are counted, not scored
    assert s["precision"]["purpose"] == "training" and s["precision"]["optimizer"] == "AdamW"

    # interrupted after step 3, resumed: same final weights as the uninterrupted run
    def stop_at_3(msg):
        if msg.startswith("step     3"):
            raise KeyboardInterrupt

    stopped = train(TrainConfig(out=str(tmp_path / "b"), **common), echo=stop_at_3, progress=False)
    assert stopped["interrupted"] and stopped["steps_done"] == 3 and stopped["exit_code"] == 130
    out = []
    train(TrainConfig(out=str(tmp_path / "b"), **common), echo=out.append, progress=False)
    assert any("resumed" in x and "step 3" in x for x in out)
    log_b = [json.loads(x) for x in (tmp_path / "b" / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log_b] == list(range(1, 7))  # nothing redone
    assert [r["loss"] for r in log_b] == pytest.approx([r["loss"] for r in log], abs=1e-6)
    # another LoRA rank in the same folder is refused, naming the setting
    with pytest.raises(InputError, match="lora_r was 8, now 4"):
        train(TrainConfig(out=str(tmp_path / "b"), **{**common, "lora_r": 4}), echo=out.append, progress=False)
    a, _, ha = load_scorer(tmp_path / "a" / "scorer", device="cpu")
    b, rep, _ = load_scorer(tmp_path / "b" / "scorer", device="cpu")
    assert ha == "score-token" and rep.format == "ours" and rep.missing == []
    for (na, pa), (_, pb) in zip(a.score_decoder.state_dict().items(), b.score_decoder.state_dict().items()):
        assert torch.allclose(pa, pb, atol=1e-5), na
    # our layout loads to the same predictions as the model that was trained
    preds = [p.score for p in _predict(a, _pairs(2), "score-token")]
    assert preds == pytest.approx([p.score for p in _predict(b, _pairs(2), "score-token")], abs=1e-4)
    # a damaged adapter is refused
    from safetensors.torch import load_file, save_file

    f = tmp_path / "a" / "scorer" / "adapter_model.safetensors"
    st = load_file(str(f))
    save_file({k: v for i, (k, v) in enumerate(st.items()) if i > 0}, str(f))
    from editlens.adiee.checkpoint import CheckpointError

    with pytest.raises(CheckpointError, match="missing"):
        load_scorer(tmp_path / "a" / "scorer", device="cpu")


def test_validation_skips_rows_that_never_emitted_score(tmp_path, monkeypatch):
    """As inference (require_token): a validation row whose answer has no [SCORE] is unscored,
    counted but not part of the Spearman/MAE."""
    from editlens.adiee import train as T
    from editlens.adiee.model import Prediction
    from editlens.adiee.prompts import load_prompts

    data = _tiny_dataset(tmp_path / "ds", n=6)
    rows = T.read_dataset(data)
    answers = {"x0": (0.0, True), "x1": (9.0, True), "x2": (55.0, False), "x3": (3.0, True), "x4": (1.0, False),
               "x5": (8.0, True)}  # scores 0/10 alternate; the unemitted ones would wreck the figures

    class FakeScorer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.vlm = torch.nn.Linear(1, 1)
            self.processor = None
            self.device = torch.device("cpu")
            self.batches = []

        def predict(self, inputs, hidden):
            assert hidden == "score-token"
            self.batches.append(inputs)
            return [Prediction(answers[i][0], "answer", answers[i][1], hidden) for i in inputs]

    seen = iter(r["id"] for r in rows)
    monkeypatch.setattr(T, "inference_inputs", lambda proc, imgs, qs, dev, dt: [next(seen) for _ in imgs])
    cfg = T.TrainConfig(base="x", data=str(data), out=str(tmp_path / "o"), image_side=16)
    scorer = FakeScorer()
    val = T.validate(scorer, T.Examples(rows, data, scorer, load_prompts(None), cfg), list(range(6)), 4)
    assert val["n"] == 4 and val["unscored"] == 2
    assert val["mae"] == pytest.approx(np.mean([0.0, 1.0, 7.0, 2.0]))  # x0 0/0, x1 9/10, x3 3/10, x5 8/10
    assert val["spearman"] == pytest.approx(0.7746, abs=1e-3)  # ranks (1, 4, 2, 3) against (1, 3, 3, 3)
    assert scorer.training  # left in training mode as it was


def test_cli_trains_in_bfloat16_with_float32_trained_weights(tiny_vlm_dirs, tmp_path):
    """`adiee train --dtype bfloat16`: the base computes in bf16 (autocast; on a CPU its frozen weights stay
    float32), the trained weights stay float32, and the policy's decision is recorded in the checkpoint,
    summary and scorer."""
    from safetensors.torch import load_file
    from typer.testing import CliRunner

    from editlens.cli.main import app

    data = _tiny_dataset(tmp_path / "ds")
    out = tmp_path / "run"
    r = CliRunner().invoke(app, ["adiee", "train", "--data", str(data), "--base", str(tiny_vlm_dirs["llava_next"]),
                                 "--out", str(out), "--steps", "4", "--lr", "5e-3", "--image-side", "32",
                                 "--lora-dropout", "0", "--val-every", "4", "--save-every", "2", "--device", "cpu",
                                 "--dtype", "bfloat16", "--sample-weights", "balanced", "--no-progress"])
    assert r.exit_code == 0, r.output
    assert "computing in bfloat16" in r.output and "checkpoint (ours layout)" in r.output
    assert "samples drawn by balanced weights of the rounded 0-10 score" in r.output
    summary = json.loads((out / "summary.json").read_text())
    state = json.loads((out / "checkpoints" / "step-0000004" / "state.json").read_text())
    assert summary["precision"] == state["precision"] and state["precision"]["dtype"] == "bfloat16"
    meta = json.loads((out / "scorer" / "adiee.json").read_text())
    assert meta["precision"]["dtype"] == "bfloat16" and meta["precision"]["base_weights"] == "float32"
    assert {v.dtype for v in load_file(str(out / "scorer" / "adapter_model.safetensors")).values()} == {torch.float32}
    assert summary["sampling"]["how"] == "balanced" and meta["sampling"] == summary["sampling"]
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step-0000002", "step-0000004"]


def test_weighted_draw_is_per_source_as_the_release(tmp_path):
    """The release (ADIEEDataset.get_syn_item) draws, for every source of its shuffled epoch, one of that
    source's candidates by WEIGHT_DICT[round(score)] (unnormalised weights, here the release's own table read from
    a clone): each source once per epoch, the within-source shares as the weights say, whatever the other
    sources hold."""
    from editlens.adiee.train import sample_order, source_groups
    from editlens.adiee.tune_data import sample_weights

    clone = tmp_path / "ADIEE"
    clone.mkdir()
    (clone / "dataset.py").write_text(
        "WEIGHT_DICT = {0: 4.11415770609319, 1: 6.060774064100533, 2: 9.254615818753527, 3: 12.355758880516685, "
        "8: 14.027251619210558, 7: 14.299862962501557, 6: 14.62788326749076, 4: 14.981075437222657, "
        "5: 16.24239422668742, 9: 16.41661899313501, 10: 241.65263157894736}\n")
    # two sources: A with a source copy (0) and edits scored 1.0 and 0.5; B with one edit scored 10 and its copy
    rows = [{"source": "a.png", "instruction": "x", "score": s} for s in (0.0, 1.0, 0.5)] + \
           [{"source": "b.png", "instruction": "y", "score": s} for s in (1.0, 0.0)]
    idx = list(range(5))
    weights, desc = sample_weights([10 * r["score"] for r in rows], "table", clone)
    groups = source_groups(rows, idx)
    assert groups == [[0, 1, 2], [3, 4]]
    order = sample_order(5, 2 * 4000, 3, weights, groups)
    for epoch in range(4000):  # every source exactly once per epoch
        pair = order[2 * epoch: 2 * epoch + 2]
        assert sorted(g for g, members in enumerate(groups) for p in pair if p in members) == [0, 1]
    a = [p for p in order if p in groups[0]]
    total = 4.11415770609319 + 241.65263157894736 + 16.24239422668742
    assert abs(a.count(1) / len(a) - 241.65263157894736 / total) < 0.02  # within source A, by its weights
    assert abs(a.count(0) / len(a) - 4.11415770609319 / total) < 0.01
    b = [p for p in order if p in groups[1]]
    assert abs(b.count(3) / len(b) - 241.65263157894736 / (241.65263157894736 + 4.11415770609319)) < 0.01
    assert sample_order(5, 100, 3, weights, groups) == order[:100]  # resumable: the same draws again


def test_weighted_sample_order_draws_by_weight_and_extends_as_it_began():
    from editlens.adiee.train import sample_order
    from editlens.adiee.tune_data import sample_weights

    order = sample_order(3, 3000, 0, [0.0, 1.0, 3.0])
    assert 0 not in order and abs(order.count(2) / 3000 - 0.75) < 0.03
    assert sample_order(3, 1500, 0, [0.0, 1.0, 3.0]) == order[:1500]  # a run extended later draws the same start
    assert sorted(sample_order(4, 4, 7)) == [0, 1, 2, 3]  # uniform: each once per epoch
    w, d = sample_weights([0.0, 5.0, 5.0, 10.0], "balanced")  # 0-1 scores x 10: fail, partial x2, success
    assert w == pytest.approx([4 / 3, 2 / 3, 2 / 3, 4 / 3]) and d["how"] == "balanced"
    assert sample_weights([0.0, 10.0], "uniform") == (None, {"how": "uniform"})
    with pytest.raises(InputError, match="needs --sample-weight-table"):
        sample_weights([0.0], "table")

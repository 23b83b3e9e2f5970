"""ADIEE's regression score head learns: the score loss reaches the decoder,
the LoRA weights and the [SCORE] embedding; the [SCORE] state is taken at the
right position under padding; and real training on a learnable synthetic
signal drives the L1 score loss well below what any constant prediction gets,
with a checkpoint that ranks unseen-order samples correctly after a strict load."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from editlens.adiee.model import constant_score_loss


def _lora_scorer(base, seed=0):
    from editlens.adiee.checkpoint import scorer_from_base
    from editlens.adiee.train import TrainConfig, apply_lora

    torch.manual_seed(seed)  # as train() does before building the scorer
    scorer = scorer_from_base(str(base), head="regression", device="cpu", seed=seed)
    apply_lora(scorer, TrainConfig(base=str(base), data="", out="", lora_dropout=0.0, seed=seed))
    return scorer


def _batch(scorer, answers, scores):
    from editlens.adiee.prompts import collate, side_by_side, training_example

    rng = np.random.default_rng(0)
    exs = []
    for a, s in zip(answers, scores):
        img = side_by_side(rng.integers(0, 256, (16, 16, 3), dtype=np.uint8),
                           rng.integers(0, 256, (16, 16, 3), dtype=np.uint8), 32)
        ex = training_example(scorer.processor, img, "How well was it done?", a)
        ex["scores"] = torch.tensor(s)
        exs.append(ex)
    return collate(exs, scorer.processor.tokenizer.pad_token_id)


def _decoded_states(scorer, batch):
    """Run the training loss; return the states it decoded at [SCORE] (one row each)."""
    seen = []
    real = scorer.decode
    scorer.decode = lambda h: (seen.append(h), real(h))[1]
    try:
        loss = scorer.training_losses(batch)["score_loss"]
    finally:
        del scorer.decode  # back to the class's method
    return seen[0], loss


def test_constant_score_loss_hand_values():
    assert constant_score_loss([0.0, 1.0, 0.0, 1.0], "regression") == 5.0  # every constant in [0, 10] has L1 5
    assert constant_score_loss([0.0, 0.25, 0.5, 0.75, 1.0], "regression") == 3.0  # median 5: (5+2.5+0+2.5+5)/5
    assert constant_score_loss([1.0, 1.0], "regression") == 0.0
    assert constant_score_loss([0.0, 0.5, 1.0], "class3") == pytest.approx(np.log(3))
    assert constant_score_loss([1.0, 1.0, 1.0], "class3") == 0.0


@pytest.mark.parametrize("family", ["llava_next", "qwen2_vl"])
def test_score_loss_reaches_decoder_lora_and_score_embedding(tiny_vlm_dirs, family):
    scorer = _lora_scorer(tiny_vlm_dirs[family])
    scorer.train()
    batch = _batch(scorer, ["It is [SCORE].", "[SCORE]"], [0.2, 0.9])
    losses = scorer.training_losses(batch, score_weight=1.0, ce_weight=0.0)  # the score loss alone
    losses["loss"].backward()
    named = dict(scorer.named_parameters())
    for n, p in scorer.score_decoder.named_parameters():
        assert p.grad is not None and float(p.grad.abs().sum()) > 0, f"decoder {n} gets no gradient"
    lora_b = {n: p for n, p in named.items() if "lora_B" in n}
    assert len(lora_b) == 4  # q and v of both layers
    for n, p in lora_b.items():  # lora_B starts at 0, so lora_A's gradient is 0 until B moves
        assert p.grad is not None and float(p.grad.abs().sum()) > 0, f"{n} gets no gradient"
    emb = next(p for n, p in named.items() if "embed_tokens" in n and "modules_to_save" in n)
    assert emb.requires_grad and float(emb.grad[scorer.score_token_id].abs().sum()) > 0
    # every parameter with a gradient is one the trainer optimises (it takes exactly the requires_grad ones)
    assert all(p.requires_grad for p in scorer.parameters() if p.grad is not None)


def test_score_state_position_under_right_padding(tiny_vlm_dirs):
    """The decoded state of each padded row equals the state at [SCORE] of
    the same row run alone, and the L1 uses targets on the 0-10 scale."""
    scorer = _lora_scorer(tiny_vlm_dirs["llava_next"])
    scorer.eval()
    answers, scores = ["Sure, the score is [SCORE] out of ten", "[SCORE]"], [0.2, 0.9]
    batch = _batch(scorer, answers, scores)
    assert int(batch["attention_mask"][1].sum()) < batch["input_ids"].shape[1]  # row 1 is padded
    with torch.no_grad():
        both, sl = _decoded_states(scorer, batch)
        out = scorer.decode(both)[:, 0]
    assert float(sl) == pytest.approx(float((out - torch.tensor([2.0, 9.0])).abs().mean()), abs=1e-5)
    for i, (a, s) in enumerate(zip(answers, scores)):
        one = _batch(scorer, [a], [s])
        one["pixel_values"] = batch["pixel_values"][i : i + 1]  # the same image as row i
        with torch.no_grad():
            alone, _ = _decoded_states(scorer, one)
            inputs = {k: v for k, v in one.items() if k not in ("labels", "scores")}
            states = scorer.vlm(**inputs, output_hidden_states=True).hidden_states[-1][0]
        at = int((one["input_ids"][0] == scorer.score_token_id).nonzero()[0, 0])
        assert torch.allclose(alone[0], states[at], atol=1e-5), f"row {i}: not the last-layer state at [SCORE]"
        assert torch.allclose(alone[0], both[i], atol=1e-4), f"row {i}: padding moved the state"


def test_regression_head_learns_a_visible_signal(tiny_vlm_dirs, tmp_path):
    """Scores = how far each edit blended the image towards white. Real
    training (LoRA + decoder, random templates, flips) must bring the L1
    score loss far below its start and below the best constant prediction,
    and the saved checkpoint must rank the samples by their scores."""
    from scipy.stats import spearmanr

    from editlens.adiee.checkpoint import load_scorer
    from editlens.adiee.prompts import collate, load_prompts, side_by_side, training_example
    from editlens.adiee.train import TrainConfig, read_dataset, train
    from editlens.core.images import load_image
    from editlens.testing.adiee_learnable import write_learnable_dataset

    data = write_learnable_dataset(tmp_path / "ds", n=16)
    base = tiny_vlm_dirs["llava_next"]
    cfg = TrainConfig(base=str(base), data=str(data), out=str(tmp_path / "run"), head="regression", steps=40, lr=1e-2,
                      batch_size=4, image_side=32, lora_dropout=0.0, save_every=1000, val_every=1000, device="cpu",
                      seed=0)
    lines = []
    s = train(cfg, echo=lines.append, progress=False)
    log = [json.loads(x) for x in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    sl = np.array([r["score_loss"] for r in log])
    k = len(sl) // 5
    first, last = sl[:k].mean(), sl[-k:].mean()
    rows = read_dataset(data)
    constant = constant_score_loss([r["score"] for r in rows], "regression")
    assert constant == pytest.approx(2.6666, abs=1e-3) and s["constant_score_loss"] == pytest.approx(constant)
    assert any(f"{constant:.4f}" in line for line in lines)  # the yardstick is printed
    assert s["first_score_loss"] == pytest.approx(first) and s["last_score_loss"] == pytest.approx(last)
    assert last < 0.6 * first, (first, last, sl.round(2).tolist())
    assert last < 0.75 * constant, (constant, last)  # not reachable by predicting one value for all

    # the trained decoder and adapters were saved (not re-initialised) and load strictly
    init = _lora_scorer(base, seed=0)
    scorer, rep, hidden = load_scorer(tmp_path / "run" / "scorer", device="cpu")
    assert rep.missing == rep.unexpected == rep.mismatched == [] and hidden == "score-token"
    assert not torch.allclose(scorer.score_decoder[0].weight, init.score_decoder[0].weight)
    # teacher-forced as in training (fixed template, no flips): predictions rank the samples by score
    pr = load_prompts()
    src, _ = load_image(data / rows[0]["source"])
    preds = []
    with torch.no_grad():
        for r in rows:
            img = side_by_side(src, load_image(data / r["edited"])[0], 32)
            b = collate([training_example(scorer.processor, img, pr.question(r["instruction"]), pr.answers[0])],
                        scorer.processor.tokenizer.pad_token_id)
            b["scores"] = torch.tensor([r["score"]])
            state, _ = _decoded_states(scorer, b)
            preds.append(float(scorer.decode(state)[0, 0]))
    truth = [r["score"] * 10 for r in rows]
    rho = spearmanr(preds, truth).statistic
    assert rho > 0.8, (rho, np.round(preds, 2).tolist(), truth)

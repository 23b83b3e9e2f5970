"""Batched local generation: the vectorised top-k/top-p draw (the warpers'
distribution, ties at the k-th token kept, each row drawn by its own
generator whatever else shares the batch) and batches of similar prompts."""

import math

import pytest
import torch

from editlens.backends.stepping import sample_tokens


def _gens(n, offset=0):
    return [torch.Generator().manual_seed(offset + i) for i in range(n)]


def _freq(logits, top_k, top_p, n=4000, temperature=1.0):
    rows = logits.unsqueeze(0).expand(n, -1).clone()
    got = sample_tokens(rows, temperature, top_k, top_p, _gens(n))
    return torch.bincount(got, minlength=logits.numel()).float() / n


def test_top_k_keeps_the_k_most_likely_renormalised():
    logits = torch.tensor([2.0, 1.0, 0.0, -1.0, -5.0])
    freq = _freq(logits, 3, 1.0)
    want = torch.softmax(logits[:3], 0)
    assert freq[3:].sum() == 0
    assert torch.allclose(freq[:3], want, atol=0.03)


def test_top_p_keeps_the_smallest_set_reaching_the_mass():
    logits = torch.log(torch.tensor([0.5, 0.3, 0.2]))
    freq = _freq(logits, 0, 0.7)  # 0.5 < 0.7, 0.5 + 0.3 reaches it: the third is out
    assert freq[2] == 0
    assert freq[0] == pytest.approx(0.625, abs=0.03) and freq[1] == pytest.approx(0.375, abs=0.03)


def test_temperature_sharpens():
    logits = torch.tensor([1.0, 0.0])
    freq = _freq(logits, 0, 1.0, temperature=0.5)
    assert freq[0] == pytest.approx(1 / (1 + math.exp(-2)), abs=0.03)


def test_tokens_tied_with_the_kth_stay_in():
    freq = _freq(torch.tensor([1.0, 1.0, 1.0, 0.0]), 2, 1.0)  # three tied for the top two places
    assert freq[3] == 0
    assert torch.allclose(freq[:3], torch.full((3,), 1 / 3), atol=0.03)


def test_a_rows_draw_depends_on_its_generator_alone():
    torch.manual_seed(0)
    logits = torch.randn(6, 500) * 3
    together = sample_tokens(logits, 0.7, 20, 0.9, _gens(6, offset=100))
    alone = [int(sample_tokens(logits[i : i + 1], 0.7, 20, 0.9, _gens(1, offset=100 + i))[0]) for i in range(6)]
    assert together.tolist() == alone
    # the draw is one of the row's 20 most likely tokens
    assert all(int(t) in torch.topk(logits[i], 20).indices.tolist() for i, t in enumerate(together))


def test_generate_batches_similar_prompts_and_answers_in_request_order():
    import numpy as np

    from editlens.backends.local import TransformersBackend
    from editlens.backends.types import ChatRequest, Generation, Message

    be = TransformersBackend.__new__(TransformersBackend)
    be.batch_size = 2
    batches = []

    def generate_some(reqs, states=None, control=None):
        batches.append([r.messages[0].parts[-1] for r in reqs])
        return [Generation(r.messages[0].parts[-1]) for r in reqs]

    be.generate_some = generate_some
    img = np.zeros((28, 28, 3), np.uint8)
    two = lambda n: ChatRequest([Message("user", [img, img, f"two pictures {n}"])])  # noqa: E731
    one = lambda n: ChatRequest([Message("user", [img, f"one {n}"])])  # noqa: E731
    reqs = [two(0), one(0), two(1), one(1)]  # interleaved, as EditScore's SC and PQ requests of each edit
    out = be.generate(reqs)
    assert batches == [["one 0", "one 1"], ["two pictures 0", "two pictures 1"]]
    assert [g.text for g in out] == ["two pictures 0", "one 0", "two pictures 1", "one 1"]
    batches.clear()
    be.batch_size = 4  # one batch: kept in request order
    be.generate(reqs)
    assert batches == [["two pictures 0", "one 0", "two pictures 1", "one 1"]]


def test_a_row_without_finite_logits_fails_instead_of_drawing():
    with pytest.raises(ValueError, match="no finite value"):
        sample_tokens(torch.tensor([[float("nan"), 0.0]]), 1.0, 0, 1.0, _gens(1))


@pytest.mark.parametrize("family", ["idefics3", "qwen2_vl", "llava_next"])
def test_samples_sharing_one_prefill_answer_as_separate_prefills(tiny_vlm_dirs, monkeypatch, family):
    import numpy as np

    from editlens.backends import stepping
    from editlens.backends.local import TransformersBackend
    from editlens.backends.types import ChatRequest, GenerationSettings, Message

    if family not in tiny_vlm_dirs:
        pytest.skip(f"no tiny {family} builder")
    # float32: the comparison is of the two ways to prefill, not of bf16 rounding in batches of other sizes
    be = TransformersBackend(str(tiny_vlm_dirs[family]), dtype="float32")
    rng = np.random.default_rng(0)
    img = lambda: rng.integers(0, 255, (40, 56, 3), dtype=np.uint8)  # noqa: E731
    settings = GenerationSettings(max_new_tokens=8, temperature=0.9, n=3, seed=5, top_logprobs=2)
    reqs = [ChatRequest([Message("user", [img(), img(), "describe the change"])], settings),
            ChatRequest([Message("user", [img(), "rate it"])], settings)]
    got = {}
    for shared in (False, True):
        monkeypatch.setattr(stepping, "SHARED_PREFILL", shared)
        got[shared] = [(g.error, g.text, g.samples, g.usage, [(s.token, s.top) for s in g.steps or []])
                       for g in be.generate(reqs)]
    assert got[True] == got[False]
    assert all(err is None and len(set(samples)) > 1 for err, _, samples, _, _ in got[True])

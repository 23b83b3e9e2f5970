"""Local transformers backend on tiny random VLMs of three families."""

import numpy as np
import pytest
from helpers import rng_image

from editlens.backends.local import TransformersBackend
from editlens.backends.types import ChatRequest, Generation, GenerationSettings, Message, TokenStep
from editlens.errors import ModelUnavailableError


def _req(i, cands=("ADD", "REMOVE", "EDIT"), n_images=2, **settings):
    imgs = [rng_image(i + k, 40, 48) for k in range(n_images)]
    return ChatRequest([Message("user", imgs + [f"What changed {i}?"])],
                       GenerationSettings(max_new_tokens=5, **settings), cands)


@pytest.mark.parametrize("family", ["idefics3", "qwen2_vl", "llava_next"])
def test_batched_generation_with_candidate_logprobs(tiny_vlm_dirs, family):
    be = TransformersBackend(str(tiny_vlm_dirs[family]), batch_size=4)
    gens = be.generate([_req(i) for i in range(3)])
    assert be.calls == 1  # one forward pass per batch
    assert all(g.error is None and isinstance(g.text, str) for g in gens)
    for g in gens:
        assert g.steps is not None and len(g.steps) >= 1
        dist = g.candidate_distribution(0)
        assert set(dist) == {"ADD", "REMOVE", "EDIT"} and sum(dist.values()) == pytest.approx(1.0)
        assert all(s.logprob is None or s.logprob <= 0 for s in g.steps)


def test_batched_equals_one_at_a_time(tiny_vlm_dirs):
    be = TransformersBackend(str(tiny_vlm_dirs["idefics3"]), batch_size=4)
    reqs = [_req(i) for i in range(3)]
    batched = be.generate(reqs)
    single = [be.generate([r])[0] for r in reqs]
    for b, s in zip(batched, single):
        np.testing.assert_allclose([x.logprob for x in b.steps[:1]], [x.logprob for x in s.steps[:1]], atol=1e-4)


def test_sampling_n_and_seed(tiny_vlm_dirs):
    be = TransformersBackend(str(tiny_vlm_dirs["idefics3"]))
    r = _req(0, cands=(), temperature=1.0, n=3, seed=7)
    a, b = be.generate([r])[0], be.generate([r])[0]
    assert len(a.samples) == 3 and a.samples == b.samples  # seeded sampling is reproducible


def test_text_only_request(tiny_vlm_dirs):
    be = TransformersBackend(str(tiny_vlm_dirs["idefics3"]))
    g = be.generate([ChatRequest([Message("user", ["Describe a cat."])], GenerationSettings(max_new_tokens=3))])[0]
    assert g.error is None and g.steps is None


def test_unsupported_family_is_a_clear_error(tiny_clip_dir):
    with pytest.raises(ModelUnavailableError, match="is a 'clip' model; the local backend runs idefics3"):
        TransformersBackend(str(tiny_clip_dir))


def test_missing_model_dir(tmp_path):
    with pytest.raises(ModelUnavailableError, match="no-such-model"):
        TransformersBackend(str(tmp_path / "no-such-model"))


def test_candidate_distribution_from_known_logprobs():
    import math

    g = Generation("ADD: cat", [TokenStep("ADD", math.log(0.5), {"ADD": math.log(0.5), "REMOVE": math.log(0.3),
                                                                 "EDIT": math.log(0.1)})])
    dist = g.candidate_distribution(0)
    assert dist["ADD"] == pytest.approx(0.5 / 0.9) and dist["EDIT"] == pytest.approx(0.1 / 0.9)
    missing = Generation("x", [TokenStep("x", -1.0, {"ADD": -1.0, "REMOVE": None, "EDIT": -2.0})])
    assert missing.candidate_distribution(0) is None  # unknown, never guessed
    assert Generation("x").candidate_distribution(0) is None

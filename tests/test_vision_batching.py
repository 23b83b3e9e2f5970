"""Repeated images in a batch are encoded once, with the results of encoding every row."""

import numpy as np
import pytest
import torch
from helpers import rng_image

from editlens.backends import vision_batching
from editlens.backends.local import TransformersBackend
from editlens.backends.types import ChatRequest, GenerationSettings, Message


def test_unique_rows_groups_equal_rows_only():
    x = torch.zeros(5, 3, 8, 8)
    x[1] += 1.0
    x[3] += 1.0
    x[4, 0, 7, 7] = 1e-6  # differs from row 0 in one pixel, which the strided fingerprint may miss
    keep, inverse = vision_batching.unique_rows(x)
    assert keep == [0, 1, 4] and inverse == [0, 1, 0, 1, 2]


def test_unique_rows_respects_the_patch_mask():
    x = torch.zeros(2, 3, 4, 4)
    masks = torch.tensor([[[1, 1], [1, 1]], [[1, 0], [1, 0]]], dtype=torch.bool)
    assert vision_batching.unique_rows(x, masks)[0] == [0, 1]
    assert vision_batching.unique_rows(x, None)[0] == [0]


def _requests():
    # One source edited by three models, plus an unrelated pair: 8 image rows, 6 distinct.
    src = rng_image(0, 40, 48)
    pairs = [(src, rng_image(1, 40, 48)), (src, rng_image(2, 40, 48)), (src, rng_image(3, 40, 48)),
             (rng_image(4, 40, 48), rng_image(5, 40, 48))]
    settings = GenerationSettings(max_new_tokens=4)
    return [ChatRequest([Message("user", [a, b, f"Was edit {i} carried out?"])], settings, ("YES", "NO"))
            for i, (a, b) in enumerate(pairs)]


@pytest.mark.parametrize("family,path", [("idefics3", "model.vision_model"), ("llava_next", "model.vision_tower")])
def test_shared_images_are_encoded_once_with_identical_answers(tiny_vlm_dirs, family, path):
    be = TransformersBackend(str(tiny_vlm_dirs[family]), batch_size=8)
    reqs = _requests()
    deduped = be.generate(reqs)
    calls = len(be.tower_stats.history)
    stats = be.tower_stats
    assert stats is not None and stats.rows > stats.encoded > 0
    if family == "idefics3":  # one row per image (LLaVA-NeXT adds one row per tile)
        assert stats.history[-1] == (8, 6)
    # The same model with the plain tower: every row encoded.
    tower = be.model
    for part in path.split("."):
        tower = getattr(tower, part)
    del tower.forward  # the instance attribute the wrapper set; the class's forward is back
    plain = be.generate(reqs)
    assert len(stats.history) == calls  # the plain tower ran: the wrapper saw no further call
    for a, b in zip(deduped, plain):
        assert a.error is None and a.text == b.text
        np.testing.assert_allclose([s.logprob for s in a.steps], [s.logprob for s in b.steps], atol=1e-4)
        assert a.steps[0].candidates.keys() == b.steps[0].candidates.keys()


def test_tower_that_mixes_rows_is_left_alone(tiny_vlm_dirs):
    be = TransformersBackend(str(tiny_vlm_dirs["qwen2_vl"]))
    assert be.tower_stats is None
    assert be.generate(_requests()[:2])[0].error is None


def test_cpu_runs_the_tower_a_few_rows_at_a_time(tiny_vlm_dirs):
    be = TransformersBackend(str(tiny_vlm_dirs["idefics3"]), batch_size=8, device="cpu")
    before = be.tower_stats.forwards
    be.generate(_requests())
    assert be.tower_stats.forwards - before == -(-6 // vision_batching.CPU_ROWS_PER_FORWARD)

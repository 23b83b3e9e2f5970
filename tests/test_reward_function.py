"""`editlens.RewardFunction`: batches of PIL images, arrays or tensors with a declared value range, a
tensor back, gradients through evaluators that have a differentiable path, no disk cache unless asked."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

import editlens
from editlens.errors import InputError
from editlens.testing import colour_reward


@pytest.fixture(scope="module", autouse=True)
def _registered():  # type: ignore[no-untyped-def]
    colour_reward.register()


def _images(n: int = 3, size: int = 8) -> np.ndarray:
    rng = np.random.default_rng(0)
    return rng.integers(0, 256, size=(n, size, size, 3), dtype=np.uint8)


def _redness(a: np.ndarray) -> float:
    x = a.astype(np.float64) / 255
    return float(np.mean(x[..., 0] - (x[..., 1] + x[..., 2]) / 2))


def test_every_input_form_gives_the_same_rewards():
    reward = editlens.RewardFunction(colour_reward.NAME)
    arr = _images()
    want = torch.tensor([_redness(a) for a in arr], dtype=torch.float32)
    t01 = torch.from_numpy(arr).permute(0, 3, 1, 2).float() / 255
    forms = {
        "pil": ([Image.fromarray(a) for a in arr], None),
        "uint8 batch": (arr, None),
        "uint8 list": (list(arr), None),
        "float array [0,1]": (arr.astype(np.float32) / 255, (0, 1)),
        "channels-first arrays": ([np.moveaxis(a, -1, 0) for a in arr], None),
        "tensor [0,1]": (t01, (0, 1)),
        "tensor [-1,1]": (t01 * 2 - 1, (-1, 1)),
    }
    for name, (x, vr) in forms.items():
        got = reward(x, "make it red", value_range=vr)
        assert isinstance(got, torch.Tensor) and got.shape == (3,), name
        assert torch.allclose(got.float(), want, atol=1e-5), name
    one = reward(t01[0], ["make it red"], value_range=(0, 1))  # a single C x H x W tensor
    assert one.shape == (1,)


def test_float_input_without_a_declared_range_is_refused():
    reward = editlens.RewardFunction(colour_reward.NAME)
    with pytest.raises(InputError, match="value_range"):
        reward(torch.rand(2, 3, 8, 8), "x")
    with pytest.raises(InputError, match="value_range"):
        reward(np.random.rand(2, 8, 8, 3).astype(np.float32), "x")
    with pytest.raises(InputError, match=r"\(0, 1\) or \(-1, 1\)"):
        reward(torch.rand(2, 3, 8, 8), "x", value_range=(0, 255))
    with pytest.raises(InputError, match="3 channels"):
        reward(torch.rand(2, 4, 8, 8), "x", value_range=(0, 1))
    with pytest.raises(InputError, match="2 edited images but 3 instructions"):
        reward(torch.rand(2, 3, 8, 8), ["a", "b", "c"], value_range=(0, 1))


def test_gradients_flow_to_the_edited_tensor():
    reward = editlens.RewardFunction(colour_reward.NAME)
    assert reward.differentiable and reward.describe()["differentiable"] is True
    x = (torch.rand(2, 3, 8, 8) * 2 - 1).requires_grad_(True)
    reward(x, "make it red", value_range=(-1, 1)).sum().backward()
    # d mean(R - (G + B) / 2) / dx over [-1, 1] input: +1/2 per red pixel, -1/4 per green and blue one, / 64 pixels
    assert torch.allclose(x.grad[:, 0], torch.full((2, 8, 8), 0.5 / 64))
    assert torch.allclose(x.grad[:, 1], torch.full((2, 8, 8), -0.25 / 64))
    off = editlens.RewardFunction(colour_reward.NAME, differentiable=False)
    y = torch.rand(2, 3, 8, 8, requires_grad=True)
    assert not off(y, "x", value_range=(0, 1)).requires_grad


def test_an_evaluator_without_a_differentiable_path_scores_decoded_images():
    reward = editlens.RewardFunction("l1")
    assert not reward.differentiable
    with pytest.raises(InputError, match="no differentiable path"):
        editlens.RewardFunction("l1", differentiable=True)
    src = _images(2)
    same = reward(src, ["keep it"] * 2, sources=src)
    assert torch.equal(same, torch.zeros(2))
    # without sources an evaluator that needs them skips: nan, with the reason kept
    got = reward(src, "keep it")
    assert torch.isnan(got).all() and "source" in reward.last_scores[0].reason


class _Cached(colour_reward.Redness):
    def __init__(self, cache=True):  # type: ignore[no-untyped-def]
        self.cache_option = cache


def test_no_disk_cache_unless_asked(tmp_path):
    from editlens.metrics.registry import register_metric
    from editlens.metrics.spec import MetricSpec

    register_metric(MetricSpec("test_cached_redness", _Cached, ("edited",), True, (-1.0, 1.0), measures="none"),
                    overwrite=True)
    assert editlens.RewardFunction("test_cached_redness").metric.cache_option is False
    asked = editlens.RewardFunction("test_cached_redness", cache=str(tmp_path / "c.sqlite"))
    assert asked.metric.cache_option == str(tmp_path / "c.sqlite")


def test_training_commands_share_one_option_vocabulary():
    from typer.testing import CliRunner

    from editlens.cli.main import app
    from editlens.cli.training_options import SHARED

    commands = (["dice", "train"], ["adiee", "train"], ["twoframe", "train"], ["adiee", "tune-editor"])
    runner = CliRunner()
    for cmd in commands:
        r = runner.invoke(app, [*cmd, "--help"], terminal_width=200, env={"COLUMNS": "200"})
        assert r.exit_code == 0, r.output
        for name in SHARED:
            assert name in r.output, f"{' '.join(cmd)} lacks {name}"
    # the earlier names still parse, hidden from --help
    for cmd, old in ((["dice", "train"], ["--rank", "8"]), (["dice", "train"], ["--eval-every", "5"]),
                     (["adiee", "train"], ["--lora-r", "4"]), (["adiee", "train"], ["--qlora"])):
        help_text = runner.invoke(app, [*cmd, "--help"], env={"COLUMNS": "200"}).output
        assert old[0] not in help_text.replace("--lora-rank", "").replace("--val-every", "")
        r = runner.invoke(app, [*cmd, *old])
        assert "No such option" not in r.output, r.output


def test_an_old_and_a_new_name_that_disagree_are_refused():
    from editlens.cli.training_options import aliased

    assert aliased(64, 64, 8, "--lora-rank", "--rank") == 8
    assert aliased(16, 64, None, "--lora-rank", "--rank") == 16
    with pytest.raises(InputError, match="--rank is the earlier name of --lora-rank"):
        aliased(16, 64, 8, "--lora-rank", "--rank")


@pytest.mark.parametrize("family", ["q25", "q3"])
def test_editreward_differentiable_path_matches_its_scores_and_passes_gradients(editreward_dirs, family):
    """EditReward's head through the torch pixel path: the same reward as scoring the decoded images
    (images already at the model's size, so no resize sits between), and gradients reach the edit."""
    from editlens.core.types import LoadedEdit
    from editlens.metrics.registry import create_metric

    base, ckpt = editreward_dirs[family]
    ev = create_metric("editreward", model=str(ckpt), base=str(base), device="cpu", dtype="float32",
                       image_pixels=56 * 56 if family == "q25" else 64 * 64, cache=False)
    side = 56 if family == "q25" else 64  # a multiple of patch x merge (28 / 32) at the model's pixel budget
    rng = np.random.default_rng(1)
    src = rng.integers(0, 256, size=(2, side, side, 3), dtype=np.uint8)
    edt = rng.integers(0, 256, size=(2, side, side, 3), dtype=np.uint8)
    want = [s.value for s in ev.score_batch([LoadedEdit(str(i), src[i], edt[i], "add a hat") for i in range(2)])]
    reward = editlens.RewardFunction(ev)
    assert reward.differentiable
    x = torch.from_numpy(edt).permute(0, 3, 1, 2).float().div(255).requires_grad_(True)
    s = torch.from_numpy(src).permute(0, 3, 1, 2).float().div(255)
    got = reward(x, ["add a hat"] * 2, sources=s, value_range=(0, 1))
    assert got.tolist() == pytest.approx(want, abs=1e-4)
    got.sum().backward()
    assert x.grad is not None and float(x.grad.abs().sum()) > 0
    assert all(p.grad is None for p in ev._loaded.vlm.parameters())  # nothing flows into the reward model


@pytest.mark.parametrize("family", ["llava_next", "qwen2_vl"])
def test_adiee_differentiable_path_matches_its_scores_and_passes_gradients(tiny_vlm_dirs, tmp_path, family):
    """ADIEE's score head through torch pixels: the generated answer as when it scores, the state it reads
    recomputed with gradients. Images already at the side-by-side size keep resizes out of the way
    (the processor's own tiling resize remains: close, not equal)."""
    from editlens.adiee.checkpoint import save_released, scorer_from_base
    from editlens.core.types import LoadedEdit
    from editlens.runner.selection import select_metrics

    ckpt = save_released(scorer_from_base(str(tiny_vlm_dirs[family]), device="cpu"), tmp_path / "ckpt")
    sel = select_metrics(["adiee"], models={"adiee": str(ckpt)}, device="cpu", dtype="float32",
                         options={"adiee": {"image_side": 32, "require_token": False, "cache": False}})
    ev = sel.metrics[0]
    rng = np.random.default_rng(2)
    src = rng.integers(0, 256, size=(2, 32, 32, 3), dtype=np.uint8)
    edt = rng.integers(0, 256, size=(2, 32, 32, 3), dtype=np.uint8)
    want = [s.value for s in ev.score_batch([LoadedEdit(str(i), src[i], edt[i], "add a hat") for i in range(2)])]
    reward = editlens.RewardFunction(ev)
    assert reward.differentiable
    x = torch.from_numpy(edt).permute(0, 3, 1, 2).float().div(255).requires_grad_(True)
    s = torch.from_numpy(src).permute(0, 3, 1, 2).float().div(255)
    got = reward(x, ["add a hat"] * 2, sources=s, value_range=(0, 1))
    assert got.tolist() == pytest.approx(want, abs=0.05)
    got.sum().backward()
    assert float(x.grad.abs().sum()) > 0

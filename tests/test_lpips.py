"""LPIPS: our backbone + the official heads, checked against the lpips
package's own forward pass. The lpips package imports torchvision, which
cannot be installed beside every torch build; the test gives it a minimal
stand-in module whose alexnet/vgg16 are our torchvision-compatible stacks
with the same random weights, so the comparison covers the scaling,
normalisation, heads and averaging of the reference implementation."""

import sys
import types

import pytest
import torch
from helpers import rng_image

from editlens import EditSample, create_metric
from editlens.errors import ModelUnavailableError
from editlens.metrics.lpips import Backbone, build_lpips, heads_path

pytestmark = pytest.mark.skipif(heads_path("alex") is None, reason="lpips heads not installed")


def _backbone_file(tmp_path, net, seed=0):
    torch.manual_seed(seed)
    bb = Backbone(net)
    path = tmp_path / f"{net}.pth"
    torch.save({f"features.{k}": v for k, v in bb.features.state_dict().items()}, path)
    return path, bb


@pytest.fixture
def fake_torchvision(monkeypatch):
    registry = {}
    tv = types.ModuleType("torchvision")
    models = types.ModuleType("torchvision.models")

    def make(net):
        def ctor(pretrained=False, **kw):
            return types.SimpleNamespace(features=registry[net])
        return ctor

    models.alexnet = make("alex")
    models.vgg16 = make("vgg")
    tv.models = models
    monkeypatch.setitem(sys.modules, "torchvision", tv)
    monkeypatch.setitem(sys.modules, "torchvision.models", models)
    for mod in [m for m in sys.modules if m == "lpips" or m.startswith("lpips.")]:
        monkeypatch.delitem(sys.modules, mod)
    return registry


@pytest.mark.parametrize("net", ["alex", "vgg"])
def test_matches_reference_implementation(tmp_path, fake_torchvision, net):
    path, bb = _backbone_file(tmp_path, net)
    import copy

    fake_torchvision[net] = copy.deepcopy(bb.features)
    import lpips as reference

    ref = reference.LPIPS(net=net, verbose=False).eval()
    ours = build_lpips(net, backbone_weights=str(path))
    a = torch.from_numpy(rng_image(1, 64, 64) / 255.0).permute(2, 0, 1)[None].float()
    b = torch.from_numpy(rng_image(2, 64, 64) / 255.0).permute(2, 0, 1)[None].float()
    with torch.no_grad():
        expected = ref(a, b, normalize=True).flatten()
        got = ours(a, b)
    assert torch.allclose(got, expected, atol=1e-6), (got, expected)


def test_metric_zero_for_identical_and_positive_otherwise(tmp_path):
    path, _ = _backbone_file(tmp_path, "alex")
    m = create_metric("lpips", backbone_weights=str(path))
    a, b = rng_image(3, 64, 64), rng_image(4, 64, 64)
    same, diff = m([EditSample("x", a, a, "n").load(), EditSample("y", a, b, "n").load()])
    assert same.value == pytest.approx(0.0, abs=1e-7) and diff.value > 0


def test_missing_backbone_names_file_and_place(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "th"))
    with pytest.raises(ModelUnavailableError) as err:
        build_lpips("alex")
    msg = str(err.value)
    assert "alexnet-owt-7be5be79.pth" in msg
    assert str(tmp_path / "th" / "hub" / "checkpoints") in msg
    assert "https://download.pytorch.org/models/alexnet-owt-7be5be79.pth" in msg


def test_wrong_checkpoint_is_refused(tmp_path):
    bad = tmp_path / "bad.pth"
    torch.save({"classifier.weight": torch.zeros(1)}, bad)
    with pytest.raises(ModelUnavailableError, match="not a torchvision checkpoint"):
        build_lpips("alex", backbone_weights=str(bad))

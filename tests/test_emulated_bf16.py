"""bf16 on a CPU without native bf16: large products computed in float32 and
rounded, small ones (decoding) on the bf16 kernel; nothing changes where the
CPU has native bf16, under autocast, or for float32 models."""

import pytest
import torch

from editlens.models import emulated_bf16


@pytest.fixture
def emulated(monkeypatch):
    monkeypatch.setattr(emulated_bf16, "needed", lambda: True)


def test_install_routes_large_products_and_keeps_results(emulated):
    torch.manual_seed(0)
    lin = torch.nn.Linear(64, 32).to(torch.bfloat16)
    conv = torch.nn.Conv2d(3, 8, 4, stride=4).to(torch.bfloat16)
    model = torch.nn.ModuleDict({"lin": lin, "conv": conv})
    big = torch.randn(2, 40, 64, dtype=torch.bfloat16)
    small = torch.randn(1, 4, 64, dtype=torch.bfloat16)
    img = torch.randn(1, 3, 16, 16, dtype=torch.bfloat16)
    before = lin(big), lin(small), conv(img)
    assert emulated_bf16.install(model) == 2 and emulated_bf16.install(model) == 0  # once
    after = lin(big), lin(small), conv(img)
    assert all(a.dtype is torch.bfloat16 for a in after)
    assert torch.equal(after[1], before[1])  # decoding-size product: the bf16 kernel, untouched
    exact = torch.nn.functional.linear(big.float(), lin.weight.float(), lin.bias.float())
    assert torch.equal(after[0], exact.to(torch.bfloat16))  # float32 product, rounded once
    for a, b in ((after[0], before[0]), (after[2], before[2])):
        assert (a.float() - b.float()).abs().max() <= 0.02 * b.float().abs().max()
    assert lin.weight.dtype is torch.bfloat16  # memory stays bf16


def test_float32_autocast_and_native_cpus_are_left_alone(emulated, monkeypatch):
    lin = torch.nn.Linear(64, 32)
    emulated_bf16.install(lin)
    x = torch.randn(64, 64)
    assert torch.equal(lin(x), torch.nn.functional.linear(x, lin.weight, lin.bias))  # float32: plain
    with torch.autocast("cpu", dtype=torch.bfloat16):  # training: autocast decides
        assert lin(x).dtype is torch.bfloat16
    monkeypatch.setattr(emulated_bf16, "needed", lambda: False)
    assert emulated_bf16.install(torch.nn.Linear(4, 4)) == 0
    assert emulated_bf16.install("not a module") == 0


def test_models_loaded_through_the_loader_are_routed(tiny_clip_dir, emulated):
    from transformers import CLIPModel

    from editlens.models.resolve import load_pretrained

    model = load_pretrained(CLIPModel, str(tiny_clip_dir), dtype=torch.bfloat16)
    routed = [m for m in model.modules() if getattr(m.forward, "__func__", None) is emulated_bf16._linear]
    assert routed and len(routed) == sum(1 for m in model.modules() if type(m) is torch.nn.Linear)

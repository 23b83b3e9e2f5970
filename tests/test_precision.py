"""dtype=auto: bf16 only where the CPU computes it natively; the dtype is
recorded; bf16 embeddings stay within the documented tolerance of fp32."""

import numpy as np
import pytest
import torch

from editlens import EditSample, create_metric
from editlens.models import precision
from editlens.models.resolve import pick_dtype

from helpers import rng_image


@pytest.mark.parametrize("flags, expected", [
    ({"avx2", "avx512f", "avx512_bf16"}, torch.bfloat16),
    ({"avx2", "amx_bf16", "amx_tile"}, torch.bfloat16),
    ({"avx2", "avx512f"}, torch.float32),  # AVX-512 without BF16: emulated, slower than fp32
])
def test_auto_dtype_follows_cpu_flags(monkeypatch, flags, expected):
    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset(flags))
    assert precision.auto_dtype("cpu") is expected
    assert pick_dtype("auto", "cpu") is expected
    assert pick_dtype("auto", "cuda") is torch.float32  # metrics stay fp32 on GPUs
    assert pick_dtype("float32", "cpu") is torch.float32  # explicit names win


def test_runtime_info_reports_features(monkeypatch):
    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset({"avx2", "avx512_bf16", "sse4_2"}))
    info = precision.runtime_info()
    assert info["cpu_features"] == ["avx2", "avx512_bf16"] and info["native_bf16"] is True


def _samples():
    return [EditSample(f"s{i}", rng_image(100 + i), rng_image(i), "edit", target_caption=f"a photo {i}").load()
            for i in range(4)]


def test_bf16_embeddings_within_tolerance_and_dtype_in_describe(tiny_clip_dir):
    models = {"clip": str(tiny_clip_dir)}
    fp32 = create_metric("clip_i", models=models, dtype="float32")
    bf16 = create_metric("clip_i", models=models, dtype="bfloat16")
    assert fp32.describe()["model"]["dtype"] == "float32"
    assert bf16.describe()["model"]["dtype"] == "bfloat16"
    a = np.array([s.value for s in fp32(_samples())])
    b = np.array([s.value for s in bf16(_samples())])
    assert np.abs(a - b).max() < 2e-2  # the tolerance documented in pick_dtype
    assert not np.array_equal(a, b)  # it really ran in bf16

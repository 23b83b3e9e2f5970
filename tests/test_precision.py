"""dtype=auto: bf16 only where the CPU computes it natively; the dtype is
recorded; bf16 embeddings stay within the documented tolerance of fp32."""

import numpy as np
import pytest
import torch
from helpers import rng_image

from editlens import EditSample, create_metric
from editlens.errors import InputError
from editlens.models import precision
from editlens.models.precision import decide


@pytest.mark.parametrize("flags, expected", [
    ({"avx2", "avx512f", "avx512_bf16"}, torch.bfloat16),
    ({"avx2", "amx_bf16", "amx_tile"}, torch.bfloat16),
    ({"avx2", "avx512f"}, torch.float32),  # AVX-512 without BF16: emulated, slower than fp32
])
def test_auto_dtype_follows_cpu_flags(monkeypatch, flags, expected):
    monkeypatch.delenv("EDITLENS_DTYPE", raising=False)
    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset(flags))
    for purpose in ("inference", "training", "quantized"):
        assert precision.decide("auto", "cpu", purpose).torch_dtype is expected
    assert decide("auto", "cpu").torch_dtype is expected
    assert decide("float32", "cpu").torch_dtype is torch.float32  # explicit names win
    assert precision.decide("auto", "cpu").features["native_bf16"] is (expected is torch.bfloat16)


def test_explicit_flag_beats_environment_beats_auto(monkeypatch):
    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset({"avx2"}))
    monkeypatch.setenv("EDITLENS_DTYPE", "bf16")
    p = precision.decide("auto", "cpu")
    assert p.dtype == "bfloat16" and p.requested["dtype_from"] == "$EDITLENS_DTYPE"
    assert precision.decide("float32", "cpu").dtype == "float32"
    monkeypatch.setenv("EDITLENS_DTYPE", "double")
    with pytest.raises(InputError, match=r"\$EDITLENS_DTYPE: unknown dtype 'double'; use one of auto, float32"):
        precision.decide("auto", "cpu")
    monkeypatch.delenv("EDITLENS_DTYPE")
    monkeypatch.setenv("EDITLENS_DEVICE", "cuda:7")
    if not torch.cuda.is_available():
        with pytest.raises(InputError, match=r"\$EDITLENS_DEVICE cuda:7: this torch build or machine has no CUDA"):
            precision.decide("auto", "auto")
    assert precision.decide("auto", "cpu").device == "cpu"  # an explicit device wins


def test_float16_on_a_cpu_is_refused_with_the_fix():
    with pytest.raises(InputError, match="--dtype float16: most CPU kernels do not compute float16; on a CPU use bfloat16"):
        precision.decide("fp16", "cpu")


def test_a_recipes_own_dtype_applies_only_on_a_gpu_that_computes_it(monkeypatch):
    monkeypatch.delenv("EDITLENS_DTYPE", raising=False)
    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset({"avx2"}))
    p = precision.decide("auto", "cpu", "quantized", preferred="float16")
    assert p.dtype == "float32" and "recipe's float16 does not compute on cpu" in p.reason
    monkeypatch.setattr(precision, "_cuda_features", lambda d: {"gpu": "X", "bf16": True})
    monkeypatch.setattr(precision, "resolve_device", lambda d: "cuda")
    assert precision.decide("auto", "cuda", "quantized", preferred="float16").dtype == "float16"
    assert precision.decide("auto", "cuda").dtype == "bfloat16"
    monkeypatch.setattr(precision, "_cuda_features", lambda d: {"gpu": "T4", "bf16": False})
    assert precision.decide("auto", "cuda").dtype == "float16"
    with pytest.raises(InputError, match=r"this GPU \(T4\) does not compute bf16"):
        precision.decide("bfloat16", "cuda")


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
    assert np.abs(a - b).max() < 2e-2  # the tolerance documented in precision.decide
    assert not np.array_equal(a, b)  # it really ran in bf16

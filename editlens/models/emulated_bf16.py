"""bfloat16 on a CPU that does not compute it natively, at float32 speed.

On a CPU without AVX512-BF16/AMX (e.g. AVX2 only) torch computes a bf16
matrix product or convolution with a generic kernel that is 5-7x slower
than the float32 one for the large products of a prefill (measured on a
2-core AVX2 machine: a 1024x768 by 768x3072 product takes 363 ms in bf16,
56 ms in fp32). The policy's ``auto`` picks float32 there, but a user or CI
may ask for bf16 (``--dtype bfloat16``, ``EDITLENS_DTYPE``) to get bf16's
memory or to test its code paths.

:func:`install` makes the ``Linear`` and ``Conv2d`` layers of a model compute
such products in float32 and round the result to bf16: the same result
(native bf16 kernels accumulate in float32 too), several times faster. Small
products (decoding one token: a few rows against a large weight) stay on the
bf16 kernel, where converting the weight would cost more than it saves. The
model keeps its bf16 weights (its memory), and nothing changes on CUDA, on a
CPU with native bf16, under autocast (training) or for other dtypes.
"""

from __future__ import annotations

import types
from typing import Any

import torch
import torch.nn.functional as F

#: rows (tokens x batch) from which a product is computed in float32: converting a
#: weight that fits in cache costs about 4 rows of the bf16 kernel, a large one
#: (a 49k-token LM head) about 40 (measured on a 2-core AVX2 machine)
MIN_ROWS, MIN_ROWS_LARGE, LARGE = 8, 48, 4_000_000


def _min_rows(weight: torch.Tensor) -> int:
    return MIN_ROWS_LARGE if weight.numel() > LARGE else MIN_ROWS


def _emulated(x: torch.Tensor) -> bool:
    return x.dtype is torch.bfloat16 and x.device.type == "cpu" and not torch.is_autocast_enabled("cpu")


def _linear(self: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    if _emulated(x) and self.weight.dtype is torch.bfloat16 and x.numel() >= _min_rows(self.weight) * x.shape[-1]:
        bias = None if self.bias is None else self.bias.float()
        return F.linear(x.float(), self.weight.float(), bias).to(torch.bfloat16)
    return F.linear(x, self.weight, self.bias)


def _conv2d(self: torch.nn.Conv2d, x: torch.Tensor) -> torch.Tensor:
    if _emulated(x) and self.weight.dtype is torch.bfloat16:
        bias = None if self.bias is None else self.bias.float()
        return self._conv_forward(x.float(), self.weight.float(), bias).to(torch.bfloat16)
    return self._conv_forward(x, self.weight, self.bias)


def needed() -> bool:
    """Whether this CPU computes bf16 without native instructions."""
    from editlens.models.precision import cpu_has_native_bf16

    return not cpu_has_native_bf16()


def install(model: Any) -> int:
    """Route the model's large bf16 products through float32 on a CPU without
    native bf16 (see the module docstring); returns how many layers were
    routed (0 on a CPU with native bf16, or for an object that is not a
    torch module). Safe to call twice.

    >>> layer = torch.nn.Linear(8, 4).to(torch.bfloat16)
    >>> x = torch.randn(64, 8, dtype=torch.bfloat16)
    >>> before = layer(x)
    >>> n = install(layer) if needed() else 0
    >>> torch.equal(layer(x), before) or bool((layer(x) - before).abs().max() < 0.05)
    True
    """
    if not isinstance(model, torch.nn.Module) or not needed():
        return 0
    n = 0
    for m in model.modules():
        if type(m) is torch.nn.Linear and getattr(m.forward, "__func__", None) is not _linear:
            m.forward = types.MethodType(_linear, m)  # type: ignore[method-assign]
            n += 1
        elif type(m) is torch.nn.Conv2d and getattr(m.forward, "__func__", None) is not _conv2d:
            m.forward = types.MethodType(_conv2d, m)  # type: ignore[method-assign]
            n += 1
    return n


def routed(model: Any) -> Any:
    """``model`` after :func:`install` (for peers in benchmarks: the same kernels)."""
    install(model)
    return model

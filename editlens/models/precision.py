"""Which floating-point type a model should run in on this machine.

bf16 is 3-5x faster than fp32 on CPUs that compute it natively (AVX512-BF16
or AMX), and several times *slower* where it is emulated. So ``auto`` checks
the CPU instead of assuming: bf16 on a CPU with native support (or a GPU
that has it), fp32 otherwise.
"""

from __future__ import annotations

import functools
import platform
from pathlib import Path
from typing import Any

#: CPU flags (as /proc/cpuinfo spells them) that mean native bf16 arithmetic.
NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")
#: Flags worth printing next to a benchmark's figures.
REPORTED_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16", "amx_tile", "neon", "asimd")


@functools.lru_cache(maxsize=1)
def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags from /proc/cpuinfo (empty where it does not exist)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


def cpu_has_native_bf16(flags: frozenset[str] | None = None) -> bool:
    """True when the CPU computes bf16 natively (AVX512-BF16 or AMX).

    >>> cpu_has_native_bf16(frozenset({"avx2", "avx512_bf16"}))
    True
    >>> cpu_has_native_bf16(frozenset({"avx2"}))
    False
    """
    flags = cpu_flags() if flags is None else flags
    if any(f in flags for f in NATIVE_BF16_FLAGS):
        return True
    if not flags:  # no /proc/cpuinfo (macOS, Windows): ask torch's oneDNN instead
        try:
            import torch

            return bool(torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported())
        except Exception:  # noqa: BLE001  (an old torch without the query: assume emulated)
            return False
    return False


def auto_dtype(device: str) -> Any:
    """bf16 where ``device`` computes it natively, fp32 otherwise."""
    import torch

    if device.startswith("cuda"):
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float32
    if device == "cpu":
        return torch.bfloat16 if cpu_has_native_bf16() else torch.float32
    return torch.float32


def resolve_dtype(dtype: Any, device: str) -> Any:
    """``"auto"`` through :func:`auto_dtype`; anything else is returned as given
    (the VLM backend calls this with its ``dtype`` option)."""
    if isinstance(dtype, str) and dtype == "auto":
        return auto_dtype(device)
    return dtype


def runtime_info() -> dict[str, Any]:
    """What a benchmark or a run manifest should say about the machine."""
    import torch

    flags = cpu_flags()
    return {
        "cpu": platform.processor() or platform.machine(),
        "cpu_features": sorted(f for f in REPORTED_FLAGS if f in flags),
        "native_bf16": cpu_has_native_bf16(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "cuda": torch.cuda.is_available(),
    }

"""The one precision and device policy: which device a model runs on and
in which floating-point type, for inference, training and 4-bit compute.

Every path that loads or trains a model asks :func:`decide` (or its
shorthands) and records :meth:`Precision.to_dict` in what it writes — run
manifests, checkpoints, benchmark output — so a result always says what ran
and why.

The rules, in one place:

* **device** ``auto``: ``$EDITLENS_DEVICE`` when set, else CUDA, then Apple
  MPS, then CPU.
* **dtype** ``auto`` (after ``$EDITLENS_DTYPE``, when set):
  - CUDA: bfloat16 where the GPU computes it, else float16;
  - CPU: bfloat16 where the CPU computes it natively (AVX512-BF16 or AMX:
    3-5x faster), float32 otherwise (emulated bf16 is several times
    *slower*);
  - MPS: float16.
  Training uses the same compute dtype: the training loop keeps the trained
  weights in float32 and runs the forward pass under autocast in that dtype
  (mixed precision), with loss scaling for float16; frozen weights load in
  the compute dtype on a GPU and stay float32 on a CPU
  (:attr:`Precision.weights_dtype`).
* **float16 on a CPU** is refused: most CPU kernels do not compute it.
* **A recipe's own dtype** (``preferred``: e.g. the DICE release computes its
  4-bit layers in float16) is used under ``auto`` on a GPU that computes it;
  elsewhere the rules above apply and the reason says so.
* **4-bit NF4** computes in the same dtype (see :mod:`editlens.models.quant`
  for the kernel checks that make it run on every CPU kind).

An explicit ``--dtype``/``--device`` (or ``dtype=``/``device=`` in Python)
always wins over the environment variables, which win over ``auto``.
"""

from __future__ import annotations

import functools
import os
import platform
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from editlens.errors import InputError

#: CPU flags (as /proc/cpuinfo spells them) that mean native bf16 arithmetic.
NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")
#: Flags worth recording next to a run's or a benchmark's figures.
REPORTED_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16", "amx_tile", "neon", "asimd")
#: Spellings accepted for a dtype, and the torch attribute each means.
DTYPE_NAMES = {"float32": "float32", "fp32": "float32", "bfloat16": "bfloat16", "bf16": "bfloat16",
               "float16": "float16", "fp16": "float16", "half": "float16"}
DTYPE_CHOICES = ("auto", "float32", "bfloat16", "float16")
PURPOSES = ("inference", "training", "quantized")
ENV_DTYPE = "EDITLENS_DTYPE"
ENV_DEVICE = "EDITLENS_DEVICE"


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


def dtype_name(dtype: Any) -> str:
    """``torch.bfloat16`` or ``"bf16"`` -> ``"bfloat16"``.

    >>> dtype_name("fp16")
    'float16'
    """
    text = str(dtype).replace("torch.", "")
    return DTYPE_NAMES.get(text.lower(), text)


def torch_dtype(name: str) -> Any:
    """``"bfloat16"`` -> ``torch.bfloat16``."""
    import torch

    return getattr(torch, DTYPE_NAMES[name])


def _normalise_dtype(value: Any, where: str) -> str:
    if not isinstance(value, str):
        value = dtype_name(value)
    v = value.strip().lower()
    if v == "auto":
        return "auto"
    if v not in DTYPE_NAMES:
        raise InputError(f"{where}: unknown dtype {value!r}; use one of {', '.join(DTYPE_CHOICES)} "
                         "(fp32, bf16 and fp16 are accepted too)")
    return DTYPE_NAMES[v]


def _cuda_features(device: str) -> dict[str, Any]:
    import torch

    if not torch.cuda.is_available():
        return {}
    index = torch.device(device).index or 0
    props = torch.cuda.get_device_properties(index)
    return {"gpu": props.name, "capability": f"{props.major}.{props.minor}",
            "memory_gib": round(props.total_memory / 2**30, 1), "bf16": bool(torch.cuda.is_bf16_supported())}


def resolve_device(device: str | None = "auto") -> str:
    """``auto`` -> ``$EDITLENS_DEVICE``, else cuda, mps, cpu; anything else is checked and returned."""
    import torch

    device = (device or "auto").strip()
    origin = "--device"
    if device == "auto" and os.environ.get(ENV_DEVICE, "").strip():
        device, origin = os.environ[ENV_DEVICE].strip(), f"${ENV_DEVICE}"
    if device == "auto":
        if torch.cuda.is_available():
            return "cuda"
        mps = getattr(torch.backends, "mps", None)
        return "mps" if mps is not None and mps.is_available() else "cpu"
    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError):
        raise InputError(f"{origin}: unknown device {device!r}; use auto, cpu, cuda, cuda:N or mps") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise InputError(f"{origin} {device}: this torch build or machine has no CUDA device "
                         f"(torch {torch.__version__}); use --device cpu or auto")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise InputError(f"{origin} {device}: only {torch.cuda.device_count()} CUDA device(s) here")
    if dev.type == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise InputError(f"{origin} {device}: Apple MPS is not available here; use --device cpu or auto")
    return device


@dataclass(frozen=True)
class Precision:
    """One decision of the policy: where and in what a model computes, and why."""

    device: str
    dtype: str  # "float32" | "bfloat16" | "float16": the compute dtype
    purpose: str = "inference"
    requested: dict[str, str] = field(default_factory=dict)  # what was asked, and where it came from
    reason: str = ""
    features: dict[str, Any] = field(default_factory=dict)  # what the decision was based on

    @property
    def torch_dtype(self) -> Any:
        return torch_dtype(self.dtype)

    @property
    def autocast_dtype(self) -> Any:
        """The autocast dtype of mixed-precision training (``None``: plain float32)."""
        return None if self.dtype == "float32" else self.torch_dtype

    @property
    def weights_dtype(self) -> str:
        """The dtype weights load in: the compute dtype, except for training on
        a CPU, where they stay float32 and autocast computes the matrix products
        in the compute dtype while norms, softmax and losses stay in float32
        (small LoRA updates on a CPU need that; GPUs keep frozen weights in the
        compute dtype as usual)."""
        if self.purpose == "training" and self.device.split(":")[0] == "cpu":
            return "float32"
        return self.dtype

    @property
    def needs_grad_scaler(self) -> bool:
        return self.dtype == "float16"

    def to_dict(self) -> dict[str, Any]:
        return {"device": self.device, "dtype": self.dtype, "purpose": self.purpose, "requested": dict(self.requested),
                "reason": self.reason, "features": dict(self.features)}


def _auto_dtype(device: str, features: dict[str, Any]) -> tuple[str, str]:
    kind = device.split(":")[0]
    if kind == "cuda":
        if features.get("bf16"):
            return "bfloat16", "auto: the GPU computes bf16"
        return "float16", "auto: the GPU has no bf16, float16 instead"
    if kind == "mps":
        return "float16", "auto: MPS computes float16"
    if features.get("native_bf16"):
        return "bfloat16", "auto: the CPU computes bf16 natively (avx512_bf16/amx)"
    return "float32", "auto: the CPU has no native bf16 (emulated bf16 is slower than float32)"


def decide(dtype: Any = "auto", device: str | None = "auto", purpose: str = "inference",
           option: str = "--dtype", preferred: str | None = None) -> Precision:
    """The policy's decision for a model about to load (or train, or load in 4-bit).

    >>> p = decide("float32", "cpu")
    >>> (p.device, p.dtype, p.purpose)
    ('cpu', 'float32', 'inference')
    >>> decide("bf16", "cpu", "training").autocast_dtype
    torch.bfloat16
    """
    if purpose not in PURPOSES:
        raise ValueError(f"purpose must be one of {PURPOSES}, got {purpose!r}")
    requested_device = device or "auto"
    dev = resolve_device(device)
    asked = _normalise_dtype(dtype if dtype is not None else "auto", option)
    origin = option
    if asked == "auto" and os.environ.get(ENV_DTYPE, "").strip():
        asked, origin = _normalise_dtype(os.environ[ENV_DTYPE], f"${ENV_DTYPE}"), f"${ENV_DTYPE}"
    kind = dev.split(":")[0]
    features = machine_features(dev)
    if kind == "cpu" and asked == "float16":
        raise InputError(f"{origin} float16: most CPU kernels do not compute float16; on a CPU use bfloat16 "
                         "(fast where the CPU has avx512_bf16/amx) or float32")
    if asked == "auto" and preferred and kind == "cuda" and (dtype_name(preferred) != "bfloat16" or features.get("bf16")):
        chosen, reason = dtype_name(preferred), "auto: the recipe's own dtype"
    elif asked == "auto":
        chosen, reason = _auto_dtype(dev, features)
        if preferred:
            reason += f" (the recipe's {dtype_name(preferred)} does not compute on {kind})"
    else:
        chosen, reason = asked, f"as asked ({origin})"
    if kind == "cuda" and chosen == "bfloat16" and not features.get("bf16"):
        raise InputError(f"{origin} bfloat16: this GPU ({features.get('gpu', '?')}) does not compute bf16; "
                         "use float16 or float32")
    return Precision(dev, chosen, purpose, {"dtype": asked, "dtype_from": origin, "device": requested_device},
                     reason, features)


def machine_features(device: str = "cpu") -> dict[str, Any]:
    """What the policy looks at: CPU flags, native bf16, the GPU's name and bf16 support."""
    flags = cpu_flags()
    out: dict[str, Any] = {"cpu": platform.processor() or platform.machine(),
                           "cpu_features": sorted(f for f in REPORTED_FLAGS if f in flags),
                           "native_bf16": cpu_has_native_bf16()}
    if device.startswith("cuda"):
        out.update(_cuda_features(device))
    return out


def runtime_info() -> dict[str, Any]:
    """What a benchmark or a run manifest should say about the machine."""
    import torch

    return {**machine_features("cuda" if torch.cuda.is_available() else "cpu"), "torch": torch.__version__,
            "threads": torch.get_num_threads(), "cuda": torch.cuda.is_available()}


def benchmark_dtypes(choice: str, device: str = "cpu") -> list[str]:
    """The dtypes a model benchmark measures: ``both`` -> float32 and bfloat16
    (emulated or native, as the CPU flags say), else the one asked for.

    >>> benchmark_dtypes("both")
    ['float32', 'bfloat16']
    """
    if choice == "both":
        return ["float32", "bfloat16"]
    return [decide(choice, device).dtype]


def bf16_mode(device: str = "cpu") -> str:
    """How bf16 computes here: ``native`` or ``emulated`` (CPU), ``gpu``."""
    if device.startswith("cuda"):
        return "gpu"
    return "native" if cpu_has_native_bf16() else "emulated"

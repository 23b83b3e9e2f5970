"""4-bit NF4 loading (bitsandbytes) for the DICE and ADIEE models: when it is
used, with which compute dtype, and what a run should record about it.

Three choices, everywhere the same:

* ``auto``: 4-bit NF4 only where it pays — a CUDA device with bitsandbytes
  installed (memory is what 4-bit saves; on a CPU it is slower than bf16/fp32);
  elsewhere the model runs unquantised and the caller notes the difference.
* ``nf4``: 4-bit NF4 on any device bitsandbytes supports (its CPU backend
  included); a clear error when bitsandbytes is not importable.
* ``none``: unquantised.

The compute dtype (the dtype the dequantised 4-bit weights are multiplied in)
is chosen at run time: the caller's preference on a GPU (the DICE release
computes in fp16), bf16 on a CPU that computes it natively, fp32 otherwise.
"""

from __future__ import annotations

from typing import Any

from editlens.errors import InputError, ModelUnavailableError

CHOICES = ("auto", "nf4", "none")
#: Accepted spellings of the forced choice (``4bit`` is the older option value).
ALIASES = {"4bit": "nf4", "4-bit": "nf4", "qlora": "nf4"}
INSTALL_HINT = "pip install 'editlens[quant]' (bitsandbytes>=0.46)"


def normalise_choice(choice: str, option: str = "--quantization") -> str:
    """``auto``, ``nf4`` or ``none`` (``4bit`` is read as ``nf4``).

    >>> normalise_choice("4bit"), normalise_choice("NONE")
    ('nf4', 'none')
    """
    c = ALIASES.get(str(choice).strip().lower(), str(choice).strip().lower())
    if c not in CHOICES:
        raise InputError(f"{option} must be one of {', '.join(CHOICES)} (4bit = nf4), got {choice!r}")
    return c


def bitsandbytes_problem() -> str | None:
    """Why 4-bit cannot load here (``None`` when bitsandbytes imports)."""
    try:
        import bitsandbytes  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - a broken install fails with other errors than ImportError
        return f"bitsandbytes is not importable ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
    return None


def use_4bit(choice: str, device: str, option: str = "--quantization") -> tuple[bool, str]:
    """(load in 4-bit?, why not) for ``choice`` on ``device``.

    ``nf4`` without bitsandbytes raises :class:`ModelUnavailableError` naming
    what to install; ``auto`` falls back with the reason.

    >>> use_4bit("none", "cuda")
    (False, '')
    """
    choice = normalise_choice(choice, option)
    if choice == "none":
        return False, ""
    problem = bitsandbytes_problem()
    if choice == "nf4":
        if problem:
            raise ModelUnavailableError(f"{option} nf4 needs bitsandbytes: {INSTALL_HINT} ({problem})")
        return True, ""
    if not device.startswith("cuda"):
        return False, f"auto uses 4-bit only on CUDA (device is {device}); {option} nf4 forces it"
    if problem:
        return False, f"{problem}; {INSTALL_HINT}"
    return True, ""


def compute_dtype(device: str, gpu_dtype: Any = None, dtype: Any = "auto") -> Any:
    """The dtype 4-bit weights are computed in, from the precision policy:
    ``gpu_dtype`` (a recipe's own, e.g. the DICE release's fp16) on a GPU
    that computes it, else the policy's choice for the device."""
    from editlens.models.precision import decide, dtype_name

    return decide(dtype, device, "quantized", preferred=dtype_name(gpu_dtype) if gpu_dtype is not None else None).torch_dtype


def nf4_config(compute: Any, skip_modules: list[str] | None = None, double_quant: bool = False) -> Any:
    """A transformers ``BitsAndBytesConfig`` for 4-bit NF4 weights."""
    from transformers import BitsAndBytesConfig

    kw: dict[str, Any] = {}
    if skip_modules is not None:
        kw["llm_int8_skip_modules"] = list(skip_modules)
    return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=compute,
                              bnb_4bit_use_double_quant=double_quant, **kw)


def dtype_name(dtype: Any) -> str:
    """``torch.float32`` -> ``"float32"``.

    >>> import torch; dtype_name(torch.bfloat16)
    'bfloat16'
    """
    return str(dtype).replace("torch.", "")


def count_4bit_layers(model: Any) -> int:
    """How many ``bitsandbytes`` 4-bit linear layers ``model`` holds."""
    try:
        from bitsandbytes.nn import Linear4bit
    except Exception:  # noqa: BLE001
        return 0
    return sum(isinstance(m, Linear4bit) for m in model.modules())


def floating_dtype(model: Any) -> Any:
    """The dtype of the model's unquantised floating-point weights (the
    packed 4-bit weights are uint8 and are skipped)."""
    import torch

    return next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)


def describe_precision(model: Any) -> dict[str, Any]:
    """What actually ran: the weights' format, the 4-bit compute dtype and
    the dtype of the parts left unquantised."""
    qc = getattr(getattr(model, "config", None), "quantization_config", None)
    n4 = count_4bit_layers(model)
    if qc is not None and n4:
        get = qc.get if isinstance(qc, dict) else (lambda k, d=None: getattr(qc, k, d))
        return {"weights": "4-bit NF4" if get("bnb_4bit_quant_type") == "nf4" else f"4-bit {get('bnb_4bit_quant_type')}",
                "compute_dtype": dtype_name(get("bnb_4bit_compute_dtype")).replace("torch.", ""),
                "double_quant": bool(get("bnb_4bit_use_double_quant", False)), "linear_4bit_layers": n4,
                "unquantised_dtype": dtype_name(floating_dtype(model))}
    return {"weights": dtype_name(floating_dtype(model)), "compute_dtype": dtype_name(floating_dtype(model)),
            "double_quant": False, "linear_4bit_layers": 0, "unquantised_dtype": dtype_name(floating_dtype(model))}


def _packable_for_cpu(layer: Any) -> bool:
    """Whether bitsandbytes' AVX512-BF16 CPU kernel can repack this 4-bit layer:
    its repacking reshapes the block scales to (out, in / blocksize) and the
    weights into 32-row tiles, so ``in`` must be a multiple of the blocksize
    and ``out`` of 32."""
    qs = getattr(layer.weight, "quant_state", None)
    if qs is None or len(qs.shape) != 2:
        return True
    out_f, in_f = int(qs.shape[0]), int(qs.shape[1])
    return in_f % int(qs.blocksize) == 0 and in_f >= int(qs.blocksize) and out_f % 32 == 0


def prepare_4bit(model: Any, device: str, option: str = "--quantization", trainable: bool = False) -> dict[str, Any]:
    """Make a freshly loaded 4-bit model run on ``device``, or refuse it now.

    On CPUs with AVX512-BF16, bitsandbytes repacks each 4-bit layer for a
    fused kernel at its first inference call; layers whose shapes that
    repacking cannot hold keep the generic dequantising path (same values,
    slower); a model to be trained keeps it everywhere (the repacked layout
    has no backward pass, and an evaluation in the middle of training would
    repack). Then one forward through a 4-bit layer checks that the kernels
    run here: a failure is a :class:`ModelUnavailableError` naming the fix,
    raised before any sample is scored (never a per-sample error).
    """
    import torch

    try:
        from bitsandbytes.nn import Linear4bit
    except Exception:  # noqa: BLE001
        return {}
    layers = [m for m in model.modules() if isinstance(m, Linear4bit)]
    kept = 0
    if device.startswith("cpu"):
        for layer in layers:
            if getattr(layer, "support_avx512bf16_for_cpu", False) and (trainable or not _packable_for_cpu(layer)):
                layer.support_avx512bf16_for_cpu = False  # generic path for shapes the fused kernel cannot pack
                kept += 1
    if layers:
        probe = layers[0]
        was_training = probe.training
        probe.train(trainable)
        try:
            dtype = probe.compute_dtype or floating_dtype(model)
            with torch.no_grad():
                probe(torch.zeros(1, probe.in_features, dtype=dtype, device=probe.weight.device))
        except Exception as exc:  # noqa: BLE001 - any kernel failure: refuse the model before scoring
            import bitsandbytes

            raise ModelUnavailableError(
                f"4-bit NF4 does not run on this {device} (bitsandbytes {bitsandbytes.__version__}: "
                f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); load the model "
                f"unquantised instead: {option} none") from None
        finally:
            probe.train(was_training)
    return {"generic_cpu_4bit_layers": kept} if kept else {}

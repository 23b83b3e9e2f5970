"""The one loader of vision-language models made of a base and an optional
LoRA adapter: DICE's detector and coherence estimator, the ADIEE scorer's
backbone, EditScore and EditReward. Each of those keeps only its recipe (which
base, which dtype and 4-bit settings, merge or not); everything below is done
once, here:

1. :func:`parse_reference` reads ``BASE+ADAPTER`` (or one part) the same way
   everywhere;
2. :func:`locate` finds each part: a local folder, or ``owner/repo[/folder]``
   in the Hugging Face cache (downloaded where allowed);
3. :func:`load_base` loads the base strictly (a weight missing from the
   checkpoint refuses the load), unquantised or with its language model in
   4-bit NF4, leaving unquantised the modules the model family's preset lists
   (``quantize_skip`` in ``presets/families/*.json``);
4. :func:`attach_adapter` wraps it with the adapter strictly (every adapter
   weight must land on a LoRA parameter of the right shape and every LoRA
   parameter must get one), and :func:`with_adapter` (used by :func:`load_vlm`
   and ``serve --adapter``) merges it when asked;
5. :func:`from_state_dict` builds a VLM whose weights come as one state dict
   (a released ADIEE scorer) and reports the keys that did not fit.

Adding a VLM-based released model therefore needs a recipe, not loading code.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from editlens.errors import InputError, ModelUnavailableError


@dataclass(frozen=True)
class VlmReference:
    """A model reference: a base, an adapter, or both (``BASE+ADAPTER``)."""

    base: str | None
    adapter: str | None = None

    def __str__(self) -> str:
        return "+".join(p for p in (self.base, self.adapter) if p)


def parse_reference(text: str, single: str = "base") -> VlmReference:
    """``BASE+ADAPTER``, or one reference (``single`` says which part it is).

    The whole text when it names an existing path (paths may hold ``+``);
    otherwise it is split at the first ``+`` whose left side is an existing
    path, else at the first ``+`` (hub ids never hold one).

    >>> parse_reference("org/base+org/adapter/sub")
    VlmReference(base='org/base', adapter='org/adapter/sub')
    >>> parse_reference("org/adapter", single="adapter")
    VlmReference(base=None, adapter='org/adapter')
    """
    if single not in ("base", "adapter"):
        raise ValueError(f"single must be base or adapter, got {single!r}")
    t = str(text).strip()
    cuts = [i for i, c in enumerate(t) if c == "+"]
    if not t or not cuts or Path(t).expanduser().exists():
        if not t:
            raise InputError("empty model reference; expected BASE, ADAPTER or BASE+ADAPTER")
        return VlmReference(t, None) if single == "base" else VlmReference(None, t)
    cut = next((i for i in cuts if Path(t[:i].strip()).expanduser().exists()), cuts[0])
    base, adapter = t[:cut].strip(), t[cut + 1:].strip()
    if not base or not adapter:
        raise InputError(f"model reference {text!r} must be BASE, ADAPTER or BASE+ADAPTER")
    return VlmReference(base, adapter)


def locate(ref: str, what: str = "model") -> Path:
    """A local directory, or ``owner/repo[/folder...]`` from the Hugging Face cache/hub."""
    p = Path(ref).expanduser()
    if p.is_dir():
        return p
    parts = ref.strip("/").split("/")
    if len(parts) < 2 or ref.startswith((".", "/", "~")):
        raise ModelUnavailableError(f"{what} {ref!r}: no such directory")
    repo, sub = "/".join(parts[:2]), "/".join(parts[2:])
    try:
        from huggingface_hub import snapshot_download

        from editlens.models.resolve import _offline

        root = snapshot_download(repo, allow_patterns=[f"{sub}/*"] if sub else None, local_files_only=_offline())
    except Exception as exc:  # noqa: BLE001 - any hub or cache failure: the model is not here
        from editlens.models.resolve import hub_cache_dir

        # the hub client's own exception text (a socket error, a class name) says nothing a user can act on
        why = "not in the local cache and the hub cannot be reached" if "connect" in str(exc).lower() \
            or "offline" in str(exc).lower() or "LocalEntryNotFound" in type(exc).__name__ else "not found"
        raise ModelUnavailableError(
            f"{what} {ref!r}: {why} (looked in {hub_cache_dir()}). Fix: on a machine with internet run "
            f"`hf download {repo}` and copy the cache here (or set HF_HOME to it), or pass a local directory "
            f"with the {sub or repo} folder.") from None
    out = Path(root) / sub
    if not out.is_dir():
        raise ModelUnavailableError(f"{what} {ref!r}: {repo} has no folder {sub!r}")
    return out


def model_type_of(path: Path) -> str:
    """``config.json``'s ``model_type`` of a model folder."""
    from editlens.core.io import read_json

    cfg = Path(path) / "config.json"
    if not cfg.is_file():
        raise ModelUnavailableError(f"{path}: no config.json (not a saved transformers model)")
    doc = read_json(cfg, "the model's config")
    if not isinstance(doc, dict) or not doc.get("model_type"):
        raise ModelUnavailableError(f"{cfg}: no model_type")
    return str(doc["model_type"])


def family_of(model_type: str, where: str = "") -> Any:
    """The family preset of ``model_type`` (class, 4-bit skip list, ...)."""
    from editlens.models.registry import families

    fam = families().get(model_type)
    if fam is None:
        raise ModelUnavailableError(f"{where or 'model'}: a {model_type!r} model; the vision-language families "
                                    f"editlens loads are {', '.join(sorted(families()))}")
    return fam


@dataclass(frozen=True)
class Quantization:
    """A recipe's 4-bit choice as it resolved on this device."""

    use_4bit: bool
    why_not: str = ""  # when ``auto`` fell back to unquantised


def decide_quantization(choice: str, device: str, option: str = "--quantization") -> Quantization:
    """``none`` (unquantised), ``nf4`` (4-bit, any device bitsandbytes supports)
    or ``auto`` (4-bit only on CUDA with bitsandbytes)."""
    from editlens.models.quant import use_4bit

    q4, why = use_4bit(choice, device, option)
    return Quantization(q4, why)


def load_base(source: str | Path, device: str, quantization: str = "none", *, dtype: Any = "auto",
              compute_dtype: str | None = None, unquantised_dtype: str | None = None, trainable: bool = False,
              option: str = "--quantization", notes: list[str] | None = None, what: str = "base model",
              error: Callable[[str], Exception] = ModelUnavailableError) -> Any:
    """The base VLM from ``source`` (a folder or hub reference), every weight
    from its checkpoint.

    ``quantization``: see :func:`decide_quantization`; in 4-bit the modules of
    the family's ``quantize_skip`` stay unquantised. Dtypes come from the
    precision policy (:func:`editlens.models.precision.decide`):
    ``compute_dtype`` is the recipe's own 4-bit compute dtype (the DICE
    release's float16) and ``unquantised_dtype`` the recipe's dtype for the
    parts 4-bit leaves alone (the DICE release's bfloat16), each used under
    ``dtype=auto`` on a GPU that computes it. A model to be trained keeps
    float32 weights on a CPU (the training loop runs autocast). ``notes``
    receives what differs from the recipe (4-bit fallback, unexpected keys)."""
    import transformers

    from editlens.models.precision import decide
    from editlens.models.quant import nf4_config, prepare_4bit

    notes = notes if notes is not None else []
    path = source if isinstance(source, Path) else locate(str(source), what)
    family = family_of(model_type_of(path), f"{what} {source}")
    q = decide_quantization(quantization, str(decide(dtype, device).device), option)
    prec = decide(dtype, device, "training" if trainable else ("quantized" if q.use_4bit else "inference"),
                  preferred=compute_dtype if q.use_4bit and not trainable else None)
    weights = decide(prec.weights_dtype, prec.device).torch_dtype
    kwargs: dict[str, Any] = {"dtype": weights}
    if q.use_4bit:
        rest = weights
        if unquantised_dtype and not trainable:
            rest = decide(dtype, prec.device, "inference", preferred=unquantised_dtype).torch_dtype
        kwargs = {"dtype": rest, "quantization_config": nf4_config(weights, skip_modules=list(family.quantize_skip)),
                  "device_map": {"": prec.device}}
    elif quantization == "auto" and q.why_not:
        notes.append(f"{source}: language model in {prec.weights_dtype} instead of 4-bit NF4 ({q.why_not})")
    cls: Any = getattr(transformers, family.model_class, None) or transformers.AutoModelForImageTextToText
    try:
        model, info = cls.from_pretrained(str(path), local_files_only=True, output_loading_info=True, **kwargs)
    except (OSError, ValueError) as exc:
        raise error(f"{what} {source} ({path}): cannot load ({type(exc).__name__}: "
                    f"{str(exc).splitlines()[0] if str(exc) else ''})") from None
    missing = sorted(info.get("missing_keys") or [])
    if missing:  # transformers would fill them with random values: never run like that
        raise error(f"{what} {source} ({path}): {len(missing)} weight(s) missing from the checkpoint "
                    f"(e.g. {missing[:3]}); refusing to run with randomly initialised parts")
    if info.get("unexpected_keys"):
        notes.append(f"{source}: {len(info['unexpected_keys'])} unexpected checkpoint key(s) ignored "
                     f"(e.g. {sorted(info['unexpected_keys'])[:3]})")
    if q.use_4bit:
        prepare_4bit(model, prec.device, option, trainable=trainable)
    else:
        model = model.to(prec.device)
    model.editlens_precision = prec.to_dict()  # what the policy decided, for the recipe's record
    return model


def attach_adapter(model: Any, source: str | Path, trainable: bool = False,
                   key_map: Callable[[str], str] | None = None, *, what: str | None = None,
                   error: Callable[[str], Exception] = ModelUnavailableError) -> Any:
    """``model`` wrapped with the LoRA adapter at ``source``; refused unless
    every adapter weight lands on a LoRA parameter of the same shape and every
    LoRA parameter gets one (never a silently random adapter). ``key_map``
    renames the file's keys first (adapters saved against older layouts).
    ``what`` names the adapter in errors (``--adapter NAME=DIR``; default
    ``adapter SOURCE (PATH)``); ``error`` is the caller's error type."""
    from peft import PeftConfig, get_peft_model
    from peft.utils import get_peft_model_state_dict, load_peft_weights, set_peft_model_state_dict

    path = source if isinstance(source, Path) else locate(str(source), "adapter")
    label = what or f"adapter {source} ({path})"
    if not (path / "adapter_config.json").is_file():
        raise error(f"{label}: no adapter_config.json (not a peft adapter folder)")
    config = PeftConfig.from_pretrained(str(path))
    config.inference_mode = not trainable
    weights = load_peft_weights(str(path), device="cpu")
    if key_map is not None:
        weights = {key_map(k): v for k, v in weights.items()}
    peft_model = get_peft_model(model, config)
    expected = get_peft_model_state_dict(peft_model)
    missing, unexpected = sorted(set(expected) - set(weights)), sorted(set(weights) - set(expected))
    shapes = sorted(k for k in set(expected) & set(weights) if tuple(expected[k].shape) != tuple(weights[k].shape))
    if missing or unexpected or shapes:
        raise error(
            f"{label} does not fit the base model: {len(missing)} LoRA weight(s) missing "
            f"(e.g. {missing[:3]}), {len(unexpected)} unexpected (e.g. {unexpected[:3]}), {len(shapes)} of another "
            f"shape (e.g. {shapes[:3]}); refusing to run a partly random adapter")
    set_peft_model_state_dict(peft_model, weights)
    return peft_model


def with_adapter(model: Any, source: str | Path, merge: bool = False, *, what: str | None = None,
                 key_map: Callable[[str], str] | None = None,
                 error: Callable[[str], Exception] = ModelUnavailableError) -> tuple[Any, bool]:
    """``(model, merged)``: ``model`` running the adapter at ``source`` (strictly, as
    :func:`attach_adapter`), folded into its weights when ``merge`` asks and they are
    not 4-bit (merging would requantise them: there it stays beside its base and
    ``merged`` is False); in eval mode."""
    from editlens.models.quant import count_4bit_layers

    quantized = count_4bit_layers(model) > 0
    peft_model = attach_adapter(model, source, key_map=key_map, what=what, error=error)
    if merge and not quantized:
        return peft_model.merge_and_unload().eval(), True
    return peft_model.eval(), False


@dataclass
class StateFit:
    """How a state dict fitted its model: keys renamed from an older layout, and
    the keys the model wanted but did not get, got but did not know, or got in
    another shape (a caller refuses to run unless the last three are empty)."""

    renamed: int = 0
    missing: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    mismatched: list[str] = field(default_factory=list)


def from_state_dict(model_class: str, config: Any, state: dict[str, Any], *, dtype: Any = None,
                    rename: Callable[[dict[str, Any], set[str]], tuple[dict[str, Any], int]] | None = None
                    ) -> tuple[Any, StateFit]:
    """A VLM of ``model_class`` (a transformers class name, from the family's
    preset) built from ``config`` with its weights from ``state`` (a checkpoint
    that is one state dict, e.g. a released scorer's ``vlm.`` keys), in the
    torch ``dtype`` the precision policy chose. ``rename(state, known_keys)``
    maps keys an older transformers wrote onto the current names first. Nothing
    is refused here: the returned :class:`StateFit` lists what did not fit, for
    the caller's own error."""
    import torch
    import transformers

    cls: Any = getattr(transformers, model_class, None)
    if cls is None:
        raise ModelUnavailableError(f"transformers {transformers.__version__} has no {model_class}; "
                                    "upgrade transformers")
    fit = StateFit()
    if rename is not None:
        with torch.device("meta"):  # the key names only: no memory, no initialisation
            known = set(cls(config).state_dict())
        state, fit.renamed = rename(state, known)
    model, info = cls.from_pretrained(None, config=config, state_dict=state, output_loading_info=True, dtype=dtype)
    fit.missing = sorted(info.get("missing_keys") or [])
    fit.unexpected = sorted(info.get("unexpected_keys") or [])
    fit.mismatched = sorted(str(m[0]) if isinstance(m, tuple) else str(m) for m in info.get("mismatched_keys") or [])
    return model, fit


@dataclass
class LoadedVlm:
    model: Any
    base_path: Path
    adapter_path: Path | None
    model_type: str
    quantized: bool
    merged: bool
    notes: list[str] = field(default_factory=list)


def load_vlm(reference: VlmReference, device: str, quantization: str = "none", *, merge: bool = False,
             dtype: Any = "auto", compute_dtype: str | None = None, unquantised_dtype: str | None = None,
             option: str = "--quantization", key_map: Callable[[str], str] | None = None,
             before_adapter: Callable[[Any, str], None] | None = None) -> LoadedVlm:
    """Base (+ adapter) as one recipe asks: ``merge`` folds the adapter into
    unquantised weights (never into 4-bit ones, which would requantise them:
    there it stays beside its base and the result says ``merged=False``).
    ``before_adapter(model, model_type)`` runs on the base first (e.g. to
    install a vision-tower hook)."""
    from editlens.models.quant import count_4bit_layers

    if reference.base is None:
        raise InputError(f"model reference {reference}: no base model")
    notes: list[str] = []
    base_path = locate(reference.base, "base model")
    model_type = model_type_of(base_path)
    model = load_base(base_path, device, quantization, dtype=dtype, compute_dtype=compute_dtype,
                      unquantised_dtype=unquantised_dtype, option=option, notes=notes)
    if before_adapter is not None:
        before_adapter(model, model_type)
    adapter_path = None
    quantized = count_4bit_layers(model) > 0
    merged = False
    if reference.adapter:
        adapter_path = locate(reference.adapter, "adapter")
        model, merged = with_adapter(model, adapter_path, merge, key_map=key_map)
    return LoadedVlm(model.eval(), base_path, adapter_path, model_type, quantized, merged, notes)


def load_processor(path: Path, model_type: str | None = None) -> Any:
    """The processor saved in ``path``; the family's torchvision-free one where
    transformers' needs what is not installed."""
    import transformers

    try:
        return transformers.AutoProcessor.from_pretrained(str(path), local_files_only=True)
    except Exception:  # noqa: BLE001 - e.g. a processor that needs torchvision: the family's own
        fallback = family_of(model_type or model_type_of(path), str(path)).fallback_processor
        if fallback is None:
            raise
        return fallback(str(path))

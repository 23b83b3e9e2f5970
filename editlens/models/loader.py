"""The one door to every model: :func:`load_model`.

Whatever the reference is — a role (``clip``), a preset name
(``vifi-clip-b16-k400``), a hub id, a local folder, a ``.pth`` file in an
original layout, ``BASE+ADAPTER``, or any of these in 4-bit — ``load_model``

1. resolves it (role overrides, ``EDITLENS_MODEL_<ROLE>``, the config file,
   the preset's default; a preset also brings its recipe as options),
2. works out what it is from the files' own description (``editlens.json``,
   written by every editlens exporter (:mod:`editlens.models.describe`); for
   older folders ``twoframe.json`` or ``adiee.json``; ``config.json``'s
   ``model_type``) unless ``kind`` says so — never from the path,
3. asks the precision policy (:mod:`editlens.models.precision`) for the
   device and dtype,
4. returns the instance held by the model pool (:mod:`editlens.models.pool`),
   built by the kind's loader on first use.

Each kind's loader lives with the code that knows its format (listed in
:data:`editlens.models.registry.KINDS`) and has one signature:
``load(ref, precision, quantization, models, **options)``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from editlens.core.io import read_json
from editlens.errors import InputError

#: ``config.json`` model types that are not vision-language families.
_MODEL_TYPE_KINDS = {"clip": "clip", "dinov2": "dino", "owlv2": "owlv2"}


def infer_kind(ref: str) -> str:
    """What ``ref`` is, from its own files (a local folder), or an error asking for ``kind``.

    >>> infer_kind("no/such/folder")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    editlens.errors.InputError: cannot tell what 'no/such/folder' is (not a local folder ...); pass kind= (one of adiee, clip, ...)
    """
    from editlens.models.registry import KINDS, families

    base = ref.rpartition("+")[0] if "+" in ref else ref
    p = Path(base).expanduser()
    if p.is_dir():
        from editlens.models.describe import read_description

        described = read_description(p)  # editlens.json: what every exporter writes
        if described is not None:
            return str(described["kind"])
        # folders saved before editlens.json: their older markers
        if (p / "twoframe.json").is_file():
            return "twoframe"
        if (p / "adiee.json").is_file():
            return "adiee"
        if (p / "scripted_judge.json").is_file():  # editlens make-tiny-vlm --scripted: served like a VLM
            return "vlm"
        cfg = p / "config.json"
        if cfg.is_file():
            doc = read_json(cfg, "the model's config")
            model_type = doc.get("model_type") if isinstance(doc, dict) else None
            if model_type in _MODEL_TYPE_KINDS:
                return _MODEL_TYPE_KINDS[model_type]
            if model_type in families():
                return "vlm"
            raise InputError(f"{p}: a {model_type!r} model, which no editlens kind loads; pass kind=")
    loadable = sorted(k for k, v in KINDS.items() if v.loader)
    if p.is_file():
        raise InputError(f"{p}: a checkpoint file does not say what it is; pass kind= (e.g. twoframe for a "
                         f"ViFi-CLIP .pth; one of {', '.join(loadable)})")
    raise InputError(f"cannot tell what {ref!r} is (not a local folder that describes itself); pass kind= "
                     f"(one of {', '.join(loadable)})")


def _freeze(value: Any) -> Any:
    if isinstance(value, Mapping):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple, set)):
        return tuple(_freeze(v) for v in value)
    return value


def load_model(ref: str | None = None, *, kind: str | None = None, dtype: Any = "auto", device: str = "auto",
               quantization: str = "none", models: Mapping[str, str] | None = None, shared: bool = True,
               **options: Any) -> Any:
    """Load (or reuse) a model. ``ref``: role, preset name, hub id, folder,
    file or ``BASE+ADAPTER`` (``None``: the kind's role); ``kind``: what to
    build when the files cannot say (see :data:`editlens.models.registry.KINDS`);
    ``quantization``: ``none``, ``auto`` or ``nf4`` where the kind supports
    4-bit; ``shared=False`` builds a private instance (e.g. to train it).
    ``options`` go to the kind's loader (a preset's recipe fills the rest).
    """
    from editlens.models import pool
    from editlens.models.precision import decide
    from editlens.models.quant import normalise_choice
    from editlens.models.registry import KINDS, get_preset, is_preset
    from editlens.models.resolve import model_reference

    models = dict(models or {})
    if ref is not None and is_preset(ref) and ref not in models:
        preset = get_preset(ref, kind)
        kind = preset.kind
        options = {**preset.recipe, **options}
        ref = preset.role or preset.ref or ref  # a role keeps its overrides (--model, $EDITLENS_MODEL_*, config)
    if ref is None:
        if kind is None:
            raise InputError("load_model needs a reference or a kind")
        ref = kind
    mref = model_reference(ref, models)
    kind = kind or infer_kind(mref.ref)
    if kind not in KINDS or KINDS[kind].loader is None:
        raise InputError(f"no loader for kind {kind!r}; loadable kinds: "
                         f"{', '.join(sorted(k for k, v in KINDS.items() if v.loader))}")
    quant = normalise_choice(quantization)
    precision = decide(dtype, device, "quantized" if quant == "nf4" else "inference")

    def build() -> Any:
        return KINDS[kind].load(mref, precision, quant, models, **options)

    if not shared:
        return build()
    key = (kind, mref.ref, precision.device, precision.dtype, quant, _freeze(options), _freeze(models))
    return pool.shared(key, build)

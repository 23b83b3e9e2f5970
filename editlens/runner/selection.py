"""Choosing metrics for a run: explicit names, or every available default."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from editlens.errors import ModelUnavailableError
from editlens.metrics.availability import metric_availability
from editlens.metrics.base import Metric
from editlens.metrics.registry import create_metric, get_spec

#: Metrics tried when the user names none (those whose models are present run).
DEFAULT_METRICS = ("change_map", "l1", "l2", "psnr", "ssim", "lpips", "clip_i", "clip_t", "clip_d",
                   "clipscore", "dino_i")
REFERENCE_METRICS = ("l1_ref", "l2_ref", "clip_i_ref", "dino_i_ref")


@dataclass
class Selection:
    metrics: list[Metric]
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (name, reason)


def parse_options(items: Sequence[str]) -> dict[str, dict[str, Any]]:
    """``["lpips.net=vgg", "l1.region=outside"]`` -> ``{"lpips": {"net": "vgg"}, ...}``."""
    out: dict[str, dict[str, Any]] = {}
    for item in items:
        key, sep, value = item.partition("=")
        metric, dot, opt = key.partition(".")
        if not sep or not dot or not opt:
            raise ValueError(f"option {item!r} must look like METRIC.KEY=VALUE")
        out.setdefault(metric.strip().lower(), {})[opt.strip()] = _coerce(value.strip())
    return out


def _coerce(value: str) -> Any:
    for cast in (int, float):
        try:
            return cast(value)
        except ValueError:
            pass
    return {"true": True, "false": False, "none": None}.get(value.lower(), value)


def select_metrics(
    names: Sequence[str] | None,
    *,
    extra: Sequence[str] = (),
    models: Mapping[str, str] | None = None,
    options: Mapping[str, Mapping[str, Any]] | None = None,
    with_reference: bool = False,
    device: str = "auto",
    vlm: Mapping[str, Any] | None = None,
) -> Selection:
    """Build metric objects.

    ``names``: metrics that must run (a missing model raises
    :class:`ModelUnavailableError` with the fix), or ``None`` for every
    default metric whose model is present (the others are listed in
    ``skipped`` with the reason). ``extra``: more metrics that must run,
    added to either (judges, DICE, the captioner). ``vlm`` holds the options
    of metrics that use a vision-language model, e.g.
    ``{"vlm": "HuggingFaceTB/SmolVLM-256M-Instruct", "cache": True}``.
    """
    options = options or {}
    models = dict(models or {})
    defaults = list(DEFAULT_METRICS) + (list(REFERENCE_METRICS) if with_reference else [])
    wanted = [(n, True) for n in names] if names is not None else [(n, False) for n in defaults]
    wanted += [(n, True) for n in extra]
    sel = Selection([])
    for name, required in wanted:
        spec = get_spec(name)
        opts = dict(options.get(spec.name, {}))
        if spec.vlm != "none" and vlm:
            for k, v in vlm.items():
                opts.setdefault(k, v)
        ok, reason = metric_availability(spec, models, opts)
        if not ok:
            if required:
                if spec.model in ("clip", "dino"):
                    from editlens.models.resolve import model_reference, unavailable_message

                    reason = unavailable_message(model_reference(str(opts.get("model") or spec.model), models),
                                                 "not found locally")
                raise ModelUnavailableError(f"metric {spec.name!r} cannot run: {reason}")
            sel.skipped.append((spec.name, reason or "unavailable"))
            continue
        if spec.model in ("clip", "dino") or spec.vlm != "none" or "models" in spec.defaults:
            opts.setdefault("models", models)
            opts.setdefault("device", device)
        sel.metrics.append(create_metric(spec.name, **opts))
    return sel

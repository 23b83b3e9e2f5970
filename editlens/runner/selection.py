"""Choosing metrics for a run: explicit names, or every available default."""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from editlens.errors import ModelUnavailableError
from editlens.metrics.availability import metric_availability
from editlens.metrics.base import Metric
from editlens.metrics.registry import create_metric, default_metric_names, get_spec
from editlens.metrics.spec import MetricSpec

#: Run-time options the runner hands to metrics whose constructor takes them (``http``: how an engine's
#: answers are fetched, :class:`editlens.backends.factory.HttpSettings`' fields; only when given).
RUNTIME_OPTIONS = ("models", "device", "dtype", "http")
#: VLM options of self-ensembling (``--samples``, ``--temperature``, ``--min-samples``)
ENSEMBLE_OPTIONS = ("samples", "temperature", "seed", "min_samples")


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
    from editlens.runner.checks import check_options

    check_options(out)  # every command's typo is one clean message, before any model loads
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
    vlm: str | Mapping[str, Any] | None = None,
    dtype: str = "auto",
    http: Any = None,
) -> Selection:
    """Build metric objects.

    ``names``: metrics that must run (a missing model raises
    :class:`ModelUnavailableError` with the fix), or ``None`` for every
    default metric whose model is present (the others are listed in
    ``skipped`` with the reason). ``extra``: more metrics that must run,
    added to either (judges, DICE, the captioner). ``vlm`` holds the options
    of metrics that use a vision-language model, e.g.
    ``{"vlm": "HuggingFaceTB/SmolVLM-256M-Instruct", "cache": True}``.
    ``device`` and ``dtype`` go to every metric that loads a model (the
    precision policy, :mod:`editlens.models.precision`, resolves ``auto``). ``http``
    (an :class:`~editlens.backends.factory.HttpSettings` or its fields) goes to every evaluator that fetches
    answers from an engine (judges get it with ``vlm`` too; EditScore's or DICE's ``engine`` without one).
    """
    from editlens.runner.checks import check_options, check_templates

    options = options or {}
    if isinstance(vlm, str):
        vlm = {"vlm": vlm}
    check_options(options)  # typos fail here, before any model loads
    check_templates((vlm or {}).get("templates"))
    from editlens.runner.judge_settings import fetch_options

    # the judge settings' fetching, also for the engines of evaluators that take no --vlm
    http = fetch_options(http if http is not None else (vlm or {}).get("http"))
    models = dict(models or {})
    # which metrics are defaults is registry metadata (MetricSpec.default), not a list here
    defaults = default_metric_names(with_reference)
    wanted = [(n, True) for n in names] if names is not None else [(n, False) for n in defaults]
    wanted += [(n, True) for n in extra]
    # a name asked twice (--judge viescore --metrics viescore) is one evaluator, built and paid for once
    required_names = {n for n, r in wanted if r}
    wanted = [(n, n in required_names) for n in dict.fromkeys(n for n, _ in wanted)]
    sel = Selection([])
    for name, required in wanted:
        spec = get_spec(name)
        if spec.pairwise:
            from editlens.errors import InputError

            raise InputError(f"{spec.name!r} judges pairs of edits, not one edit at a time: use `editlens compare` "
                             "(one pair, or --pairs FILE for many)")
        opts = dict(options.get(spec.name, {}))
        if spec.vlm != "none" and vlm:
            for k, v in vlm.items():
                if k in ENSEMBLE_OPTIONS and not spec.ensemble:
                    continue  # self-ensembling goes only to evaluators that declare it (MetricSpec.ensemble)
                opts.setdefault(k, v)
        ok, reason = metric_availability(spec, models, opts, detailed=required)
        if not ok:
            if required:
                raise ModelUnavailableError(f"metric {spec.name!r} cannot run: {reason}")
            sel.skipped.append((spec.name, reason or "unavailable"))
            continue
        runtime = {"models": models, "device": device, "dtype": dtype, "http": http}
        for key in _runtime_options(spec):
            if key != "http" or http is not None:
                opts.setdefault(key, runtime[key])
        sel.metrics.append(create_metric(spec.name, **opts))
    return sel


def _runtime_options(spec: MetricSpec) -> tuple[str, ...]:
    """The run-time options a metric receives: those its spec declares, else
    those its constructor names as parameters (no metric or model role is
    named here; a ``**kwargs`` catch-all does not count)."""
    if spec.runtime is not None:
        return tuple(k for k in spec.runtime if k in RUNTIME_OPTIONS)
    params = inspect.signature(spec.load_class().__init__).parameters
    return tuple(k for k in RUNTIME_OPTIONS if k in params)

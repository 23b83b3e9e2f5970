"""Options and helpers shared by several ``editlens`` commands."""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum, StrEnum
from typing import Any, List, Optional

import typer

from editlens.cli.common import parse_models, split_names


class SizePolicy(str, Enum):
    """When an edit's size differs from its source's."""

    resize = "resize"
    error = "error"


class Executor(str, Enum):
    local = "local"
    ray = "ray"


class Orders(str, Enum):
    """Presentation orders of a pairwise judge."""

    both = "both"
    forward = "forward"
    reverse = "reverse"


# Fixed sets of values as typer Choices (``--help`` lists them, a typo is refused before any work), in
# the functional form mypy reads as enum types. A StrEnum member's value is its name lowercased, so member
# names equal the values: a member hashes, compares and formats as its plain string and the commands pass
# it on to library code unchanged. tests/test_cli.py holds each set equal to the library's own tuple.
Binning = StrEnum("Binning", "release linear")
LevelStyle = StrEnum("LevelStyle", "words digits")
TargetWeights = StrEnum("TargetWeights", "balanced uniform table")
SampleWeights = StrEnum("SampleWeights", "uniform balanced table")
LrDecay = StrEnum("LrDecay", "constant linear cosine")
AdieeHead = StrEnum("AdieeHead", "regression class3")
AdieeLayout = StrEnum("AdieeLayout", "ours released both")
DiceCrop = StrEnum("DiceCrop", "auto square none")
BoxDrawing = StrEnum("BoxDrawing", "released paper")
BoxUnits = StrEnum("BoxUnits", "fraction pixels")
ReportImages = StrEnum("ReportImages", "auto embed copy link none")
CalibrationMethod = StrEnum("CalibrationMethod", "isotonic platt")
TwoFrameMode = StrEnum("TwoFrameMode", "faithful order")
TwoFrameObjective = StrEnum("TwoFrameObjective", "auto video_to_text symmetric")
TwoFrameSize = StrEnum("TwoFrameSize", "tiny vit-b-16")
MultiInput = StrEnum("MultiInput", "skip first")
ImagenHubProtocol = StrEnum("ImagenHubProtocol", "official fisher mean")
PointwiseProtocol = StrEnum("PointwiseProtocol", "aurora aurora-per-model official fisher mean")
TinyVlmFamily = StrEnum("TinyVlmFamily", "idefics3 qwen2_vl llava_next")
TinyEditorFamily = StrEnum("TinyEditorFamily", "instruct-pix2pix flux-kontext qwen-image-edit")

ModelOpt = typer.Option(None, "--model", help="Model for a role, ROLE=HUB_ID_OR_DIR (e.g. clip=./clip). Repeatable.")
OptionOpt = typer.Option(None, "--option", help="Evaluator option NAME.KEY=VALUE (e.g. l1.region=outside). Repeatable.")
JudgeOpt = typer.Option(None, "--judge", help="Comma-separated judges: viescore, yes_no (need --vlm).")
VlmOpt = typer.Option(None, "--vlm", help="Vision-language model: hub id, local dir, or http(s)://HOST/v1 of an OpenAI-compatible server.")
VlmsOpt = typer.Option(None, "--vlm", help="Vision-language model: hub id, local dir, or http(s)://HOST/v1 of an "
                       "OpenAI-compatible server. Repeatable with URLs: several engines serving one model share "
                       "the requests (round robin; an engine that gives up is left out for a while).")


def join_vlms(vlm: Sequence[str] | None) -> str | None:
    """``--vlm`` given once or several times (engine URLs) as the one reference the backends take."""
    if not vlm:
        return None
    if len(vlm) > 1 and not all(v.startswith(("http://", "https://")) for v in vlm):
        raise typer.BadParameter("several --vlm must all be http(s):// URLs of engines serving one model")
    return " ".join(vlm)


VlmModelOpt = typer.Option(None, "--vlm-model", help="Model name on the server (default: the first it lists).")
CacheOpt = typer.Option("default", "--cache", help="Response cache: 'default' (user cache dir), a file path, or 'none'.")
CaptionsOpt = typer.Option(False, "--captions", help="Write missing captions with the VLM (for CLIP-T/CLIP-D).")
TemplateOpt = typer.Option(None, "--template", help="Replace a prompt template, NAME=PATH (e.g. viescore_sc=my.txt). Repeatable.")
SamplesOpt = typer.Option(1, "--samples", min=1, help="Self-ensembling: answers asked per judge question "
                          "(needs --temperature > 0); the score is the mean over parsed answers. Each is cached.")
MinSamplesOpt = typer.Option(None, "--min-samples", min=1, help="Parsed answers a --samples score needs "
                             "(default: all of them); fewer: unscored. A sample lost to the transport always "
                             "makes the row failed (retried on rerun).")
AllowFailuresOpt = typer.Option(False, "--allow-failures", help="Exit 0 even when results failed (default: exit 3 "
                                "when any result failed, after writing everything).")
TemperatureOpt = typer.Option(0.0, "--temperature", min=0.0, help="Sampling temperature of judge answers (0: greedy).")
TimeoutOpt = typer.Option(None, "--timeout", help="Seconds an HTTP judge request may take before it is retried (default 120).")
RetriesOpt = typer.Option(None, "--max-retries", help="Retries of an HTTP judge request after 429/5xx/time-outs (default 5).")
ConcurrencyOpt = typer.Option(None, "--concurrency", help="HTTP judge requests in flight at once (default 8).")
ExecutorOpt = typer.Option(Executor.local, "--executor", help="local, or ray: the editor on Ray workers (one "
                           "pipeline each; per GPU with --gpus-per-worker 1), same images as one process.")
AddressOpt = typer.Option(None, "--address", help="With --executor ray: the Ray cluster's address (default: a local Ray).")
RayWorkersOpt = typer.Option(None, "--workers", min=1, help="With --executor ray: workers (default: one per GPU "
                             "with --gpus-per-worker, else one per CPU).")
GpusPerWorkerOpt = typer.Option(0.0, "--gpus-per-worker", min=0.0, help="With --executor ray: GPUs each worker holds "
                                "(1: one pipeline per GPU; 0: CPU workers).")
ShardOpt = typer.Option(None, "--shard", help="Job arrays: do only shard I of N (I/N, from 0; split by a hash of the "
                        "id); `editlens runs merge OUT SHARD_DIR...` joins the shards' folders.")
DeviceOpt = typer.Option("auto", "--device", help="auto ($EDITLENS_DEVICE, else cuda, mps, cpu), cpu, cuda, cuda:1, mps.")
DtypeOpt = typer.Option("auto", "--dtype", help="auto ($EDITLENS_DTYPE, else bf16 where the GPU or CPU computes it "
                        "natively, float32 on other CPUs), float32, bfloat16, float16 (GPU).")
CalibrationOpt = typer.Option(None, "--calibration", help="Calibration file (from `editlens calibrate`): adds "
                              "'calibrated', the probability that people rate the edit good, to each mapped score's details.")


def http_settings(timeout: float | None, max_retries: int | None, concurrency: int | None) -> Any:
    """--timeout/--max-retries/--concurrency as the :class:`~editlens.backends.factory.HttpSettings` a command
    passes down (in its :class:`~editlens.runner.judge_settings.JudgeSettings`); a bad value is a usage error."""
    from editlens.backends.factory import HttpSettings

    try:
        return HttpSettings.of(timeout, max_retries, concurrency)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


def judge_settings(vlm: str | None, vlm_model: str | None = None, cache: str = "default",
                   template: Sequence[str] | None = None, device: str = "auto", samples: int = 1,
                   temperature: float = 0.0, dtype: str = "auto", min_samples: int | None = None,
                   timeout: float | None = None, max_retries: int | None = None,
                   concurrency: int | None = None) -> Any:
    """The judge block of a command's options as one :class:`~editlens.runner.judge_settings.JudgeSettings`
    (bad sampling settings refused first, before any model loads)."""
    from editlens.judges.ensemble import check_sampling
    from editlens.runner.judge_settings import JudgeSettings

    check_sampling(samples, temperature, min_samples)
    templates = parse_models(template, "--template", "NAME=PATH (e.g. viescore_sc=my_prompt.txt)") if vlm else {}
    return JudgeSettings(vlm, vlm_model, cache, templates, samples, temperature, min_samples, device, dtype,
                         http_settings(timeout, max_retries, concurrency))


def vlm_options(vlm: str | None, vlm_model: str | None, cache: str, template: Sequence[str] | None,
                device: str = "auto", samples: int = 1, temperature: float = 0.0, dtype: str = "auto",
                min_samples: int | None = None, http: Any = None) -> dict[str, Any] | None:
    """The options of VLM evaluators (:meth:`JudgeSettings.vlm_options`); ``http``: the command's
    :func:`http_settings` (``None``: the built-in values)."""
    from dataclasses import replace

    settings = judge_settings(vlm, vlm_model, cache, template, device, samples, temperature, dtype, min_samples)
    return (replace(settings, http=http) if http is not None else settings).vlm_options()


class OptionBundle:
    """Options several commands declare alike, declared once: a command names one parameter with a bundle as
    its default (``judging: Any = JudgeBlockOpt``) and :func:`bundles` puts the bundle's options in that
    place of its signature (and of ``--help``); the command receives what ``build(values, kwargs)`` makes of
    them (``kwargs``: the command's other options, e.g. ``--device``)."""

    def __init__(self, params: list[tuple[str, Any, Any]], build: Any) -> None:
        self.params, self.build = params, build


def bundles(fn: Any) -> Any:
    """Expand every :class:`OptionBundle` parameter of a command into its options (see there)."""
    import functools
    import inspect

    sig = inspect.signature(fn)
    params: list[inspect.Parameter] = []
    found: dict[str, OptionBundle] = {}
    for p in sig.parameters.values():
        if isinstance(p.default, OptionBundle):
            found[p.name] = p.default
            params += [inspect.Parameter(n, p.kind, default=opt, annotation=ann) for n, ann, opt in p.default.params]
        else:
            params.append(p)

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        values = {name: {n: kwargs.pop(n) for n, _, _ in b.params} for name, b in found.items()}
        for name, b in found.items():
            kwargs[name] = b.build(values[name], kwargs)
        return fn(*args, **kwargs)

    wrapper.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
    hints = {k: v for k, v in getattr(fn, "__annotations__", {}).items() if k not in found}
    wrapper.__annotations__ = {**hints, **{n: ann for b in found.values() for n, ann, _ in b.params}}
    return wrapper


def _judge(v: dict[str, Any], kwargs: dict[str, Any]) -> Any:
    return judge_settings(join_vlms(v["vlm"]) if isinstance(v["vlm"], list) else v["vlm"], v["vlm_model"], v["cache"],
                          v["template"], kwargs.get("device", "auto"), v["samples"], v["temperature"],
                          kwargs.get("dtype", "auto"), v["min_samples"], v["timeout"], v["max_retries"],
                          v["concurrency"])


def judge_bundle(vlms: bool = False) -> OptionBundle:
    """The judge block: ``--vlm`` (repeatable engine URLs with ``vlms``), ``--vlm-model``, ``--cache``,
    ``--template``, ``--samples``, ``--temperature``, ``--min-samples``, ``--timeout``, ``--max-retries``,
    ``--concurrency``, received as one :class:`~editlens.runner.judge_settings.JudgeSettings` (with the
    command's ``--device`` and ``--dtype``)."""
    return OptionBundle([
        ("vlm", Optional[List[str]], VlmsOpt) if vlms else ("vlm", Optional[str], VlmOpt),
        ("vlm_model", Optional[str], VlmModelOpt), ("cache", str, CacheOpt),
        ("template", Optional[List[str]], TemplateOpt), ("samples", int, SamplesOpt),
        ("temperature", float, TemperatureOpt), ("min_samples", Optional[int], MinSamplesOpt),
        ("timeout", Optional[float], TimeoutOpt), ("max_retries", Optional[int], RetriesOpt),
        ("concurrency", Optional[int], ConcurrencyOpt)], _judge)


JudgeBlockOpt: Any = judge_bundle()


def _where(v: dict[str, Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    if v["executor"] is not Executor.ray and (v["address"] or v["workers"] or v["gpus_per_worker"]):
        raise typer.BadParameter("--address, --workers and --gpus-per-worker go with --executor ray")
    return {"executor": v["executor"].value, "address": v["address"], "workers": v["workers"],
            "gpus_per_worker": v["gpus_per_worker"]}


#: the Ray block (``--executor``, ``--address``, ``--workers``, ``--gpus-per-worker``): where the editor runs,
#: received as :func:`editlens.runner.edit.open_editor`'s keywords
RayBlockOpt: Any = OptionBundle([("executor", Executor, ExecutorOpt), ("address", Optional[str], AddressOpt),
                                 ("workers", Optional[int], RayWorkersOpt),
                                 ("gpus_per_worker", float, GpusPerWorkerOpt)], _where)


#: ``--limit N``: a quick look at the first N edits (run, edit, best-of-n) or sources (arena)
LimitOpt = typer.Option(None, "--limit", min=1, help="Only the first N edits (a quick look; recorded).")


def extra_metrics(judge: str | None, captions: bool = False, dice: bool = False) -> list[str]:
    """Metrics asked for by --judge, --captions and --dice, added to --metrics or the defaults."""
    return (["captions"] if captions else []) + (split_names(judge) or []) + (["dice"] if dice else [])

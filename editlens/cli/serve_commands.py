"""``editlens serve``: a local VLM behind an OpenAI-compatible API; and
``editlens make-tiny-vlm``: a tiny random model to try it with."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import List, Optional

import typer

from editlens.cli.common import guarded, parse_models, split_names
from editlens.cli.options import DeviceOpt, DtypeOpt, ModelOpt, TinyVlmFamily, judge_settings

app = typer.Typer()


def _positive(value: float, flag: str) -> None:
    """Refuse a limit of zero or less (or NaN) the way click refuses a bad value: exit 2, no traceback."""
    if not (value > 0 and math.isfinite(value)):
        raise typer.BadParameter(f"must be a positive number, got {value:g}", param_hint=flag)


@app.command("serve")
@guarded
def serve_cmd(
    vlm: Optional[str] = typer.Option(None, "--vlm", help="Local model: hub id or directory (try one: editlens "
                                      "make-tiny-vlm DIR); optional with --score: then only /v1/score is served)."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind (default: this machine only)."),
    port: int = typer.Option(8000, "--port", min=0, max=65535,
                             help="Port to bind (0: any free port; the URL printed says which)."),
    name: Optional[str] = typer.Option(None, "--name", help="Model name clients use (default: the --vlm value)."),
    api_key_env: Optional[str] = typer.Option(None, "--api-key-env", help="Require the key held in this environment variable."),
    max_image_mb: float = typer.Option(20.0, "--max-image-mb", help="Largest accepted image payload (MB, > 0)."),
    max_image_pixels: int = typer.Option(40_000_000, "--max-image-pixels", min=1,
                                         help="Largest decoded image (width x height)."),
    max_batch: int = typer.Option(8, "--max-batch", min=1, help="Requests answered by one generate() call."),
    max_tokens: Optional[int] = typer.Option(None, "--max-tokens", min=1, help="Largest max_tokens a request may ask "
                                             "for (default 2048, or a quarter of a smaller model's context)."),
    max_n: int = typer.Option(8, "--max-n", min=1, help="Largest n (answers per request)."),
    max_prompt_tokens: Optional[int] = typer.Option(None, "--max-prompt-tokens", min=1,
                                          help="Largest prompt in the model's tokens, images included (413 above; "
                                          "default 8192, or what a smaller model's context leaves after --max-tokens). "
                                          "A long prompt is encoded in slices of --prefill-tokens, other clients' "
                                          "work running between two: any limit the model can read stays fair."),
    prefill_tokens: Optional[int] = typer.Option(None, "--prefill-tokens", min=1,
                                                 help="Encode a longer prompt in slices of at most this many tokens, "
                                                 "the scheduler free to run other clients between two (smaller: "
                                                 "fairer, slightly slower prefill; default 2048 on a GPU, 512 on a "
                                                 "CPU)."),
    max_aspect_ratio: float = typer.Option(100.0, "--max-aspect-ratio", min=1.0,
                                           help="Largest longest-to-shortest side ratio of an image (413 above)."),
    request_timeout: float = typer.Option(300.0, "--request-timeout", help="Seconds a request may wait (504 after)."),
    read_timeout: float = typer.Option(30.0, "--read-timeout", help="Seconds a client may take to send its request "
                                       "(head and body; 408 or closed after)."),
    slice_ms: float = typer.Option(20.0, "--slice-ms", min=0.0, help="Least time a batch runs before a long answer "
                                   "yields to shorter requests (fairness vs. re-encoding cost)."),
    access_log: bool = typer.Option(True, "--access-log/--no-access-log", help="One stderr line per request."),
    device: str = DeviceOpt,
    dtype: str = DtypeOpt,
    score: Optional[str] = typer.Option(None, "--score", help="Also serve POST /v1/score with these evaluators "
                                        "(e.g. adiee, editscore, yes_no, viescore; judges use --vlm)."),
    model: Optional[List[str]] = ModelOpt,
    option: Optional[List[str]] = typer.Option(None, "--option", help="Evaluator option NAME.KEY=VALUE for --score "
                                               "(e.g. editscore.samples=4). Repeatable."),
    adapter: Optional[List[str]] = typer.Option(None, "--adapter", help="Serve a LoRA adapter of --vlm as a model "
                                                "of its own, NAME=DIR (as vLLM's --lora-modules). Repeatable."),
    merge_adapters: bool = typer.Option(False, "--merge-adapters/--keep-adapters", help="Fold each adapter into "
                                        "its own copy of the base (as EditScore runs in-process) or keep it beside "
                                        "the weights (as vLLM and DICE in-process run it)."),
    max_images_per_prompt: Optional[int] = typer.Option(None, "--max-images-per-prompt", min=1, help="Refuse "
                                                        "prompts with more images (as vLLM's --limit-mm-per-prompt)."),
    imitate: Optional[str] = typer.Option(None, "--imitate", help="Answer as this engine does (vllm or sglang): "
                                          "no editlens-only fields, its log-probability cap, its defaults for "
                                          "omitted sampling fields and its penalty, prompt and seed behaviour "
                                          "(see docs/engines.md). A test double of the engine."),
    deterministic_inference: bool = typer.Option(False, "--enable-deterministic-inference", help="With --imitate "
                                                 "sglang: honour request seeds, as SGLang started with this flag."),
    max_logprobs: int = typer.Option(20, "--max-logprobs", min=1, help="With --imitate vllm: the largest "
                                     "top_logprobs accepted (vLLM's --max-logprobs)."),
    vlm_model: Optional[str] = typer.Option(None, "--vlm-model", help="With --score and --vlm URL: the model name "
                                            "on that engine the judges use (default: the first it lists)."),
    cache: str = typer.Option("default", "--cache", help="Response cache of --score judges: 'default' (user cache "
                              "dir), a file path, or 'none' (every request answered afresh)."),
    template: Optional[List[str]] = typer.Option(None, "--template", help="Replace a judge prompt template, "
                                                 "NAME=PATH. Repeatable."),
    scripted_judge: Optional[int] = typer.Option(None, "--scripted-judge", help="Serve the scripted judge with "
                                                 "this seed instead of a model: NOT A REAL JUDGE (every answer in "
                                                 "the format its prompt asks for, scores a hash of the request; "
                                                 "for pipelines and CI; marked in every result and table)."),
) -> None:
    """Serve a local VLM over an OpenAI-compatible /v1/chat/completions API (and /v1/score with --score)."""
    from editlens.backends.serving import ServeSettings
    from editlens.runner.serve import build_server, serve

    _positive(max_image_mb, "--max-image-mb")
    _positive(request_timeout, "--request-timeout")
    _positive(read_timeout, "--read-timeout")
    if scripted_judge is not None:
        if vlm or score or adapter:
            raise typer.BadParameter("--scripted-judge serves the scripted judge alone (no --vlm, --score or "
                                     "--adapter)")
        from editlens.backends import scripted_judge as sj

        vlm = sj.write_folder(Path(_scripted_home()) / f"seed-{scripted_judge}", scripted_judge).parent.as_posix()
        name = name or sj.MODEL_ID
        typer.echo(f"warning: {sj.WARNING}", err=True)
    if imitate is not None and imitate not in ("vllm", "sglang"):
        raise typer.BadParameter(f"must be vllm or sglang, got {imitate!r}", param_hint="--imitate")
    key = None
    if api_key_env:
        key = os.environ.get(api_key_env)
        if not key:
            typer.echo(f"error: --api-key-env {api_key_env} is set but ${api_key_env} is empty", err=True)
            raise typer.Exit(2)
    settings = ServeSettings(
        vlm=vlm, name=name, host=host, port=port, api_key=key, max_image_mb=max_image_mb,
        max_image_pixels=max_image_pixels, max_batch=max_batch, max_tokens=max_tokens, max_n=max_n,
        max_prompt_tokens=max_prompt_tokens, prefill_tokens=prefill_tokens, max_aspect_ratio=max_aspect_ratio,
        request_timeout=request_timeout, read_timeout=read_timeout, slice_ms=slice_ms, access_log=access_log,
        device=device, dtype=dtype, merge_adapters=merge_adapters, max_images_per_prompt=max_images_per_prompt,
        adapters=parse_models(adapter, "--adapter", "NAME=DIR (a LoRA adapter folder)") if adapter else {},
        imitate=imitate, deterministic_inference=deterministic_inference, max_logprobs=max_logprobs)
    from editlens.runner.selection import parse_options

    # judges (yes_no, viescore, ...) ask --vlm: the model served here, or an engine's URL
    server = build_server(settings, split_names(score) if score else None, models=parse_models(model),
                          options=parse_options(option or []),
                          judge=judge_settings(vlm, vlm_model, cache, template, device, dtype=dtype))
    serve(server, settings)


def _context_of(vlm: str) -> int | None:
    """The positions a local model was built for (:func:`editlens.backends.serving.context_of`)."""
    from editlens.backends.serving import context_of

    return context_of(vlm)


def _scripted_home() -> str:
    """Where ``serve --scripted-judge`` keeps its one-line folder (the user cache)."""
    from editlens.paths import cache_dir

    return str(cache_dir() / "scripted-judge")


@app.command("make-tiny-vlm")
@guarded
def make_tiny_vlm_cmd(
    out: Path = typer.Argument(..., help="Folder to write the model into (created; must be empty or new)."),
    family: TinyVlmFamily = typer.Option("idefics3", "--family", help="idefics3, qwen2_vl or llava_next."),
    scripted: bool = typer.Option(False, "--scripted", help="Write the scripted judge instead: NOT A REAL JUDGE. "
                                  "Every judge and benchmark prompt gets an answer in its format with "
                                  "deterministic scores derived from the request (a hash), so a pipeline makes "
                                  "ranked tables; every result and table made with it says so."),
    seed: int = typer.Option(0, "--seed", help="With --scripted: the seed its scores are derived with."),
) -> None:
    """Write a tiny random vision-language model (a few MB, made offline) to try `editlens serve` with.

    Its answers are noise: it shows the plumbing (batching, streaming, limits, clients), not judgements.
    With --scripted, a scripted judge for pipelines (not a real judge; see docs/quickstart-loop.md).
    """
    from editlens.models.random_init import BUILDERS

    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        typer.echo(f"error: {out} exists and is not an empty folder; give a new one", err=True)
        raise typer.Exit(2)
    if scripted:
        from editlens.backends import scripted_judge as sj

        sj.write_folder(out, seed)
        typer.echo(f"wrote the scripted judge (seed {seed}) to {out}: {sj.WARNING}\n"
                   f"use it: --vlm {out} (bench run, run --metrics viescore, arena --judge pairwise, ...)")
        return
    out.mkdir(parents=True, exist_ok=True)
    BUILDERS[family](out)
    typer.echo(f"wrote a tiny random {family} model to {out}\n"
               f"try it: editlens serve --vlm {out} --port 8000")

"""The same evaluator in-process and through an engine URL, in one run.

An ``editlens serve`` started here (on 127.0.0.1, in a thread of this
process, the base with the evaluator's LoRA adapter served as a model name)
plays the engine; on a GPU machine point ``--engine URL`` at a vLLM or
SGLang server instead (the evaluator's served names: ``editscore``,
``dice-detector``/``dice-coherence``). Both paths score the same edits
greedily; the script checks the answers are the same and reports edits per
second each way.

    python -m benchmarks.engine_throughput [--evaluator editscore|dice] [--size tiny|0.5b]
        [--edits 8] [--new-tokens 32] [--device cpu|cuda] [--dtype auto|float32|bfloat16|both]
        [--engine URL]

``--size tiny`` is a smoke test of the script (timings meaningless). With
``--engine URL`` the "same answers" check compares against another
implementation's kernels: near-ties may flip a greedy token, so it is
reported, not gated.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from benchmarks._common import DTYPE_HELP, run_per_dtype, source_images


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--evaluator", default="editscore", choices=["editscore", "dice"], help="what to score with")
    ap.add_argument("--size", default="tiny", choices=["tiny", "0.5b"], help="random model size (EditScore only; "
                    "DICE's tiny Idefics3 is always tiny)")
    ap.add_argument("--edits", type=int, default=8, help="edits scored each way")
    ap.add_argument("--new-tokens", type=int, default=32, help="answer length (tokens)")
    ap.add_argument("--image-side", type=int, default=112, help="side of the square test images (pixels)")
    ap.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1 ... (in-process and the served model)")
    ap.add_argument("--dtype", default="auto", help=DTYPE_HELP)
    ap.add_argument("--engine", default=None, help="an engine already serving the evaluator (default: start "
                    "editlens serve here)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        models = build(root, args)
        sys.exit(run_per_dtype(args.dtype, args.device, lambda dt: measure(args, dt, root, models), check))


def build(root: Path, args: argparse.Namespace) -> dict:
    if args.evaluator == "editscore":
        from editlens.testing.tiny_reward import build_editscore, build_qwen_vl

        base = build_qwen_vl(root / "base", "qwen2_5_vl", size=args.size)
        _, adapter = build_editscore(root / "editscore", base=base, rank=8)
        return {"base": base, "adapters": {"editscore": adapter}}
    from editlens.testing.tiny_dice import build_released_layout

    layout = build_released_layout(root)
    return {"base": layout["detector"][0], "layout": layout,
            "adapters": {"dice-detector": layout["detector"][1], "dice-coherence": layout["coherence"][1]}}


def check(r: dict) -> tuple[bool, str]:
    ok = r["same_answers"] or r["external_engine"]
    return ok, (f"{r['evaluator']}: in-process {r['in_process_edits_per_s']:.2f} edits/s, engine "
                f"{r['engine_edits_per_s']:.2f} edits/s ({r['engine_speedup']:.2f}x); same answers: {r['same_answers']}")


def _serve(models: dict, dtype: str, device: str, merge: bool) -> tuple:
    import threading

    import uvicorn

    from editlens.backends.engine_api import load_adapter
    from editlens.backends.local import TransformersBackend
    from editlens.backends.server import build_app
    from editlens.backends.serving import bind, uvicorn_config

    base = TransformersBackend(str(models["base"]), device=device, dtype=dtype, batch_size=16)
    adapters = {n: load_adapter(TransformersBackend(str(models["base"]), device=device, dtype=dtype, batch_size=16),
                                d, n, merge=merge) for n, d in models["adapters"].items()}
    app = build_app(base, "Qwen2.5-VL-random" if "editscore" in models["adapters"] else "Idefics3-random",
                    adapters=adapters, max_batch=16)
    sock = bind("127.0.0.1", 0)
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn_config(app, "127.0.0.1", port, log_level="error"))
    thread = threading.Thread(target=lambda: server.run(sockets=[sock]), daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    return f"http://127.0.0.1:{port}/v1", server, thread


def _signature(evaluator: str, scores: list) -> list:
    if evaluator == "editscore":
        return [(s.status, s.value, s.details.get("passes")) for s in scores]
    return [(s.status, s.value, s.details.get("raw")) for s in scores]


def measure(args: argparse.Namespace, dtype: str, root: Path, models: dict) -> dict:
    from editlens.core.types import EditSample
    from editlens.metrics.registry import create_metric
    from editlens.models import pool

    pool.clear()
    imgs = source_images(2 * args.edits, size=args.image_side)
    edits = [EditSample(f"e{i}", imgs[2 * i], imgs[2 * i + 1], f"make edit {i}").load() for i in range(args.edits)]
    if args.evaluator == "editscore":
        opts = {"temperature": 0.0, "cache": False, "max_new_tokens": args.new_tokens, "batch_size": args.edits}
        local = create_metric("editscore", model=str(models["adapters"]["editscore"]), base=str(models["base"]),
                              device=args.device, dtype=dtype, **opts)
        remote_opts = opts
    else:
        import json

        layout = models["layout"]
        preset = {"detector": "{}+{}".format(*layout["detector"]), "coherence": "{}+{}".format(*layout["coherence"]),
                  "longest_edge": None, "detector_generation": {"max_new_tokens": args.new_tokens,
                                                                "repetition_penalty": 1.5},
                  "coherence_generation": {"max_new_tokens": args.new_tokens, "add_generation_prompt": False}}
        (root / "preset.json").write_text(json.dumps(preset))
        local = create_metric("dice", dice_preset=str(root / "preset.json"), device=args.device, dtype=dtype)
        remote_opts = {"dice_preset": str(root / "preset.json")}
    local.score_batch(edits[:1])  # load and warm up
    want, t_local = _timed(lambda: local.score_batch(edits))
    server = thread = None
    url = args.engine
    if url is None:
        url, server, thread = _serve(models, dtype, args.device, merge=args.evaluator == "editscore")
    try:
        remote = create_metric(args.evaluator, engine=url, **remote_opts)
        remote.score_batch(edits[:1])  # the check at start, and a warm engine
        got, t_engine = _timed(lambda: remote.score_batch(edits))
    finally:
        if server is not None:
            server.should_exit = True
            thread.join(timeout=10)
    return {"evaluator": args.evaluator, "dtype": dtype, "device": args.device, "edits": args.edits,
            "new_tokens": args.new_tokens, "external_engine": args.engine is not None, "engine": url,
            "in_process_s": round(t_local, 2), "engine_s": round(t_engine, 2),
            "in_process_edits_per_s": args.edits / t_local, "engine_edits_per_s": args.edits / t_engine,
            "engine_speedup": t_local / t_engine,
            "same_answers": _signature(args.evaluator, want) == _signature(args.evaluator, got),
            "statuses": sorted({s.status for s in got})}


def _timed(fn):  # type: ignore[no-untyped-def]
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


if __name__ == "__main__":
    main()

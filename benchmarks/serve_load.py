"""Short requests to ``editlens serve`` while a long answer is generated, in one run:

1. idle: ``--shorts`` short requests (``--short-tokens`` each), one after another,
   on an otherwise idle server: latency p50/p95;
2. busy, fair scheduling (the default): the same short requests while one
   long answer (``--long-tokens``) is being generated: p50/p95, and their
   ratio to idle (target: p95 within 2x of idle);
3. busy, first-come-first-served (the long answer never yields; the
   scheduling before this work): the same, for comparison;
4. the long answer's own time alone and under each policy, and whether its
   text under fair scheduling equals its text alone (it is paused and resumed
   from its model cache, so it must).

A random model is built on the spot (CPU is fine; nothing is downloaded):
``--size tiny`` (32-wide) or ``small`` (256-wide text model, default).

    python -m benchmarks.serve_load [--size small] [--shorts 20] [--short-tokens 4] [--long-tokens 400] [--device cpu]

Prints JSON. Run it alone on the machine: latencies on a shared CPU are noise.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from benchmarks._common import DTYPE_HELP, run_per_dtype


def _server(app):  # type: ignore[no-untyped-def]
    import socket

    import uvicorn

    from editlens.backends.serving import uvicorn_config

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn_config(app, "127.0.0.1", port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + 60
    while not server.started:
        if time.time() > deadline:
            raise RuntimeError("server did not start")
        time.sleep(0.02)
    return server, thread, f"http://127.0.0.1:{port}/v1"


def _pct(xs: list[float]) -> dict:
    return {"p50_ms": round(1000 * float(np.percentile(xs, 50)), 1), "p95_ms": round(1000 * float(np.percentile(xs, 95)), 1),
            "max_ms": round(1000 * max(xs), 1)}


def _shorts(client, url: str, n: int, tokens: int) -> list[float]:  # type: ignore[no-untyped-def]
    lat = []
    for i in range(n):
        t0 = time.perf_counter()
        r = client.post(f"{url}/chat/completions", json={"messages": [{"role": "user", "content": f"Is edit {i} done?"}],
                                                         "max_tokens": tokens})
        r.raise_for_status()
        lat.append(time.perf_counter() - t0)
    return lat


LONG_PROMPT = "Describe every change between the two pictures in detail. " * 8


def _long(url: str, tokens: int, out: dict) -> None:
    import httpx

    t0 = time.perf_counter()
    r = httpx.post(f"{url}/chat/completions", json={"messages": [{"role": "user", "content": LONG_PROMPT}],
                                                    "max_tokens": tokens}, timeout=3600)
    out["seconds"] = time.perf_counter() - t0
    out["text"] = r.json()["choices"][0]["message"]["content"]
    out["tokens"] = r.json()["usage"]["completion_tokens"]


def _phase(backend, args, slice_ms: float) -> dict:  # type: ignore[no-untyped-def]
    import httpx

    from editlens.backends.server import ServeLimits, build_app

    app = build_app(backend, "bench", limits=ServeLimits(max_tokens=max(args.long_tokens, 16)), slice_ms=slice_ms)
    server, thread, url = _server(app)
    try:
        with httpx.Client(timeout=3600) as client:
            _shorts(client, url, 2, args.short_tokens)  # warm-up
            idle = _shorts(client, url, args.shorts, args.short_tokens)
            long: dict = {}
            t = threading.Thread(target=_long, args=(url, args.long_tokens, long))
            t.start()
            time.sleep(args.head_start)  # the long answer is generating
            busy = _shorts(client, url, args.shorts, args.short_tokens)
            t.join()
        return {"idle": idle, "busy": busy, "long": long, "preemptions": app.state.batcher.preemptions}
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", choices=("tiny", "small"), default="small")
    ap.add_argument("--shorts", type=int, default=20)
    ap.add_argument("--short-tokens", type=int, default=4)
    ap.add_argument("--long-tokens", type=int, default=400)
    ap.add_argument("--head-start", type=float, default=0.5, help="seconds the long answer runs before the shorts")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="auto", help=DTYPE_HELP)
    args = ap.parse_args()

    def check(r: dict) -> tuple[bool, str]:
        ok = r["p95_fair_over_idle"] <= 2 and r["long_same_text_when_paused"]
        return ok, (f"short-request p95 under a long answer: {r['p95_fair_over_idle']}x idle (FIFO "
                    f"{r['p95_fifo_over_idle']}x; target <= 2); paused long answer identical: "
                    f"{r['long_same_text_when_paused']}")

    sys.exit(run_per_dtype(args.dtype, args.device, lambda dt: measure(args, dt), check))


def measure(args: argparse.Namespace, dtype: str) -> dict:

    from editlens.backends.local import TransformersBackend
    from editlens.backends.types import ChatRequest, GenerationSettings, Message
    from editlens.models.random_init import build_idefics3

    with tempfile.TemporaryDirectory() as tmp:
        build_idefics3(Path(tmp), size=args.size)
        backend = TransformersBackend(tmp, device=args.device, dtype=dtype, batch_size=8)
        req = ChatRequest([Message("user", [LONG_PROMPT])], GenerationSettings(max_new_tokens=args.long_tokens))
        backend.generate([ChatRequest([Message("user", ["warm up"])], GenerationSettings(max_new_tokens=2))])
        t0 = time.perf_counter()
        alone = backend.generate([req])[0]
        alone_s = time.perf_counter() - t0
        fair = _phase(backend, args, slice_ms=20.0)
        fifo = _phase(backend, args, slice_ms=float("inf"))

    idle = fair["idle"] + fifo["idle"]
    return {
        "model": f"random idefics3 ({args.size})", "device": args.device, "shorts": args.shorts,
        "short_tokens": args.short_tokens, "long_tokens": args.long_tokens,
        "idle": _pct(idle),
        "fair": {**_pct(fair["busy"]), "preemptions": fair["preemptions"]},
        "fifo": {**_pct(fifo["busy"]), "preemptions": fifo["preemptions"]},
        "p95_fair_over_idle": round(float(np.percentile(fair["busy"], 95) / np.percentile(idle, 95)), 2),
        "p95_fifo_over_idle": round(float(np.percentile(fifo["busy"], 95) / np.percentile(idle, 95)), 2),
        "target": "p95_fair_over_idle <= 2",
        "long_seconds": {"alone": round(alone_s, 2), "fair": round(fair["long"]["seconds"], 2),
                         "fifo": round(fifo["long"]["seconds"], 2)},
        "long_same_text_when_paused": fair["long"]["text"] == alone.text,
        "precision": backend.precision.to_dict(),
    }


if __name__ == "__main__":
    main()

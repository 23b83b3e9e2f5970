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

``--hostile`` measures instead how long other clients wait beside two costly
requests (issue 30's battery): a prompt of ``--long-prompt-tokens`` tokens
(prefilled in slices of ``--prefill-tokens``) and an extreme-aspect image
(``--aspect-width`` x 1 pixels, refused from its header). Probe clients
(short chat requests and ``GET /v1/models``) ask one after another while
both run; the figure is the longest a probe waited (target: under 2 s),
with slicing and, for comparison, with the prompt prefilled in one step.
At ``--size tiny --long-prompt-tokens 1500 --prefill-tokens 128
--aspect-width 2000000`` it runs in a few seconds.

``--hostile`` also sends the battery to ``POST /v1/score`` (``editlens serve
--score``, the ``l1`` evaluator: no model, so the figure is the server's own):
a 900M-pixel PNG (decompression bomb), a 50,000-deep JSON body, a
39,000,000 x 1 image, an 81M-pixel image, a body over the limit, non-JSON, and
a large but legal edit pair (a ~320 KB request of two 6000 x 6000 images),
all at once, while probe clients ask ``GET /v1/models`` and score a small
edit with another evaluator. Figures: the count of 5xx answers (target 0),
each costly request's status, and the longest a probe waited (target under
2 s); a small edit scored by the same evaluator as the large pair waits for
that pair's scoring (one batch at a time per evaluator) and is reported apart.
``--score-only`` runs just this part (no model is built).

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


def _long_prompt(backend, tokens: int) -> str:  # type: ignore[no-untyped-def]
    """A text prompt of about ``tokens`` tokens of this model (at least that many)."""
    from editlens.backends.types import ChatRequest, Message

    unit = "Describe every change between the pictures. "
    base = backend.count_prompt_tokens(ChatRequest([Message("user", [""])]))
    per = (backend.count_prompt_tokens(ChatRequest([Message("user", [unit * 20])])) - base) / 20
    text = unit * max(1, int((tokens - base) / per) + 1)
    return text


def _extreme_png(width: int) -> str:
    """A ``width`` x 1 PNG as a data URL (a few KB: the cost is in its shape, not its bytes)."""
    import base64
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.new("L", (width, 1), 128).save(buf, format="PNG", optimize=True)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _hostile_phase(backend, args, prefill_tokens: int | None, prompt: str, image_url: str) -> dict:  # type: ignore[no-untyped-def]
    import httpx

    from editlens.backends.server import ServeLimits, build_app

    limits = ServeLimits(max_tokens=16, max_prompt_tokens=args.long_prompt_tokens * 2)
    app = build_app(backend, "bench", limits=limits, prefill_tokens=prefill_tokens)
    server, thread, url = _server(app)
    costly: dict = {}

    def post(name: str, body: dict) -> None:
        t0 = time.perf_counter()
        r = httpx.post(f"{url}/chat/completions", json=body, timeout=3600)
        costly[name] = {"status": r.status_code, "seconds": round(time.perf_counter() - t0, 3)}
        if r.status_code == 200:
            costly[name]["prompt_tokens"] = r.json()["usage"]["prompt_tokens"]

    waits: list[float] = []
    try:
        with httpx.Client(timeout=3600) as client:
            _shorts(client, url, 2, args.short_tokens)  # warm-up
            threads = [
                threading.Thread(target=post, args=("long_prefill", {
                    "messages": [{"role": "user", "content": prompt}], "max_tokens": 1})),
                threading.Thread(target=post, args=("extreme_aspect_image", {
                    "messages": [{"role": "user", "content": [{"type": "text", "text": "What is this?"},
                                                              {"type": "image_url", "image_url": {"url": image_url}}]}],
                    "max_tokens": 2})),
            ]
            for t in threads:
                t.start()
            batcher = app.state.batcher
            # probes from the moment the long prompt is in the scheduler until both costly requests are answered
            while not batcher._running and not batcher._pending and threads[0].is_alive():
                time.sleep(0.001)
            i = 0
            while any(t.is_alive() for t in threads) or i < args.shorts:
                t0 = time.perf_counter()
                if i % 4 == 3:
                    client.get(f"{url}/models").raise_for_status()
                else:
                    _shorts(client, url, 1, args.short_tokens)
                waits.append(time.perf_counter() - t0)
                i += 1
                time.sleep(args.probe_gap_ms / 1000)  # a client's think time: the model is free meanwhile
            for t in threads:
                t.join()
        slices = sum(1 for e in batcher.events if e[0] == "prefill")
        return {"prefill_tokens": prefill_tokens, "probes": len(waits), "max_wait_s": round(max(waits), 3),
                **_pct(waits), "prefill_slices": slices, "preemptions": batcher.preemptions, "costly": costly}
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def _png_header_only(width: int, height: int) -> bytes:
    """A few hundred bytes declaring a ``width`` x ``height`` PNG (a decompression bomb)."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b"")


def _png_url(image) -> str:  # type: ignore[no-untyped-def]
    import base64
    import io

    buf = io.BytesIO()
    image.save(buf, format="PNG", optimize=True)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def measure_score_hostile(args: argparse.Namespace) -> dict:
    """The hostile battery against ``/v1/score`` (see the module docstring)."""
    import base64
    import json

    import httpx
    from PIL import Image

    from editlens.metrics.registry import create_metric
    from editlens.runner.score_server import score_app

    def bomb(w: int, h: int) -> str:
        return "data:image/png;base64," + base64.b64encode(_png_header_only(w, h)).decode()

    small = _png_url(Image.new("RGB", (16, 16), (10, 20, 30)))
    big_a = _png_url(Image.new("RGB", (6000, 6000), (120, 60, 30)))
    big_b = _png_url(Image.new("RGB", (6000, 6000), (121, 61, 31)))

    def item(src: str, edt: str = small) -> dict:
        return {"source": src, "edited": edt, "instruction": "add a hat"}

    costly_bodies = {
        "bomb_900M_pixels": json.dumps({"items": [item(bomb(30_000, 30_000))]}).encode(),
        "deep_json_50000": b"[" * 50_000 + b"]" * 50_000,
        "aspect_39M_x_1": json.dumps({"items": [item(bomb(39_000_000, 1))]}).encode(),
        "pixels_81M": json.dumps({"items": [item(bomb(9_000, 9_000))]}).encode(),
        "over_body_limit": b" " * (25 * 1024 * 1024 * 4),
        "not_json": b"\x80\x03pickle",
        "large_legal_pair": json.dumps({"items": [item(big_a, big_b)]}).encode(),
    }
    # the costly requests go to l1; probes ask /v1/models, score a small edit with l2 (the server's own
    # responsiveness: the figure) and with l1 (queued behind l1's large legal request: one evaluator scores
    # one batch at a time by design, so that wait is the large request's own scoring time, reported apart)
    app = score_app({"l1": create_metric("l1"), "l2": create_metric("l2")})
    server, thread, url = _server(app)
    costly: dict = {}

    def post(name: str, raw: bytes) -> None:
        t0 = time.perf_counter()
        try:
            r = httpx.post(f"{url}/score", content=raw, timeout=600)
            costly[name] = {"status": r.status_code, "seconds": round(time.perf_counter() - t0, 3),
                            "bytes": len(raw), "message": (r.json().get("error") or {}).get("message", "")[:120]
                            if r.status_code != 200 else "scored"}
        except httpx.HTTPError as exc:  # the server closed a refused upload early: no status is an error too
            costly[name] = {"status": None, "error": type(exc).__name__, "seconds": round(time.perf_counter() - t0, 3)}

    waits: list[float] = []
    kinds: dict[str, list[float]] = {"models": [], "score_other_evaluator": [], "score_same_evaluator": []}
    probe_5xx = 0
    try:
        with httpx.Client(timeout=600) as client:
            client.get(f"{url}/models").raise_for_status()
            threads = [threading.Thread(target=post, args=kv) for kv in costly_bodies.items()]
            for t in threads:
                t.start()
            i = 0
            while any(t.is_alive() for t in threads) or i < args.shorts:
                t0 = time.perf_counter()
                kind = ("models", "score_other_evaluator", "score_same_evaluator")[i % 3]
                if kind == "models":
                    r = client.get(f"{url}/models")
                else:
                    metric = "l2" if kind == "score_other_evaluator" else "l1"
                    r = client.post(f"{url}/score", json={"items": [item(small)], "metric": metric})
                probe_5xx += r.status_code >= 500
                kinds[kind].append(time.perf_counter() - t0)
                if kind != "score_same_evaluator":
                    waits.append(kinds[kind][-1])
                i += 1
                time.sleep(args.probe_gap_ms / 1000)
            for t in threads:
                t.join()
    finally:
        server.should_exit = True
        thread.join(timeout=30)
    n_5xx = probe_5xx + sum(1 for c in costly.values() if c["status"] is None or c["status"] >= 500)
    return {"evaluator": "l1", "probes": len(waits), "max_wait_s": round(max(waits), 3), **_pct(waits),
            "max_wait_s_by_probe": {k: round(max(v), 3) for k, v in kinds.items() if v},
            "responses_5xx": n_5xx, "costly": costly, "target": "responses_5xx == 0 and max_wait_s < 2"}


def _score_ok(r: dict) -> bool:
    refused = all(c["status"] is not None and 400 <= c["status"] < 500
                  for name, c in r["costly"].items() if name != "large_legal_pair")
    return r["responses_5xx"] == 0 and r["max_wait_s"] < 2 and refused and r["costly"]["large_legal_pair"]["status"] == 200


def measure_hostile(args: argparse.Namespace, dtype: str) -> dict:
    from editlens.backends.local import TransformersBackend
    from editlens.models.random_init import build_idefics3

    with tempfile.TemporaryDirectory() as tmp:
        build_idefics3(Path(tmp), size=args.size)
        backend = TransformersBackend(tmp, device=args.device, dtype=dtype, batch_size=8)
        prompt = _long_prompt(backend, args.long_prompt_tokens)
        image_url = _extreme_png(args.aspect_width)
        from editlens.backends.scheduler import default_prefill_tokens

        sliced = _hostile_phase(backend, args, args.prefill_tokens or default_prefill_tokens(backend.device), prompt,
                                image_url)
        whole = _hostile_phase(backend, args, None, prompt, image_url)
        score = measure_score_hostile(args)
    return {"model": f"random idefics3 ({args.size})", "device": args.device,
            "long_prompt_tokens": sliced["costly"].get("long_prefill", {}).get("prompt_tokens"),
            "aspect_width": args.aspect_width, "sliced": sliced, "unsliced": whole, "score": score,
            "max_wait_s": sliced["max_wait_s"], "target": "max_wait_s < 2", "precision": backend.precision.to_dict()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", choices=("tiny", "small"), default="small")
    ap.add_argument("--shorts", type=int, default=20)
    ap.add_argument("--short-tokens", type=int, default=4)
    ap.add_argument("--long-tokens", type=int, default=400)
    ap.add_argument("--head-start", type=float, default=0.5, help="seconds the long answer runs before the shorts")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="auto", help=DTYPE_HELP)
    ap.add_argument("--hostile", action="store_true", help="measure the longest wait beside a long prefill and an "
                    "extreme-aspect image instead (see above)")
    ap.add_argument("--long-prompt-tokens", type=int, default=8192, help="--hostile: tokens of the long prompt")
    ap.add_argument("--prefill-tokens", type=int, default=None,
                    help="--hostile: prefill slice (default: editlens serve's on --device: 2048 on a GPU, 512 on a CPU)")
    ap.add_argument("--aspect-width", type=int, default=39_000_000, help="--hostile: width of the N x 1 image")
    ap.add_argument("--probe-gap-ms", type=float, default=50.0, help="--hostile: pause between two probes")
    ap.add_argument("--score-only", action="store_true", help="--hostile: only the /v1/score battery (no model)")
    args = ap.parse_args()
    if args.hostile and args.score_only:
        import json

        r = measure_score_hostile(args)
        print(json.dumps(r, indent=1))
        ok = _score_ok(r)
        print(f"/v1/score battery: {r['responses_5xx']} x 5xx, longest probe wait {r['max_wait_s']} s "
              f"(target 0 and < 2): {'ok' if ok else 'FAILED'}", file=sys.stderr)
        sys.exit(0 if ok else 1)
    if args.hostile:
        def check_hostile(r: dict) -> tuple[bool, str]:
            costly = r["sliced"]["costly"]
            ok = r["max_wait_s"] < 2 and costly["long_prefill"]["status"] == 200 and \
                costly["extreme_aspect_image"]["status"] == 413 and _score_ok(r["score"])
            return ok, (f"longest wait of a probe beside a {r['long_prompt_tokens']}-token prefill (sliced) and a "
                        f"{r['aspect_width']}x1 image: {r['max_wait_s']} s (target < 2; prefilled in one step: "
                        f"{r['unsliced']['max_wait_s']} s); /v1/score battery: {r['score']['responses_5xx']} x 5xx, "
                        f"longest probe wait {r['score']['max_wait_s']} s")

        sys.exit(run_per_dtype(args.dtype, args.device, lambda dt: measure_hostile(args, dt), check_hostile))

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

"""`editlens serve` against hostile requests, long generations and SIGTERM.

Every server binds 127.0.0.1 only and stops by itself; every loop is bounded.
"""

import json
import os
import signal
import struct
import subprocess
import sys
import threading
import time
import zlib

import httpx
import pytest
from helpers import REPO
from servers import running

from editlens.backends.local import TransformersBackend
from editlens.backends.server import Batcher, ServeLimits, build_app
from editlens.backends.types import ChatRequest, Generation, GenerationSettings, Message

HI = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def backend(tiny_vlm_dirs):
    return TransformersBackend(str(tiny_vlm_dirs["idefics3"]), batch_size=4)


def _png_header_only(width, height):
    """A few hundred bytes that declare a huge image (a decompression bomb)."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b"")


def _image_message(raw):
    import base64

    url = "data:image/png;base64," + base64.b64encode(raw).decode()
    return [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": "x"}]}]


HOSTILE = [
    ({"messages": HI, "n": 0}, 400, "'n' must be between 1"),
    ({"messages": HI, "max_tokens": 0}, 400, "'max_tokens' must be between 1"),
    ({"messages": HI, "max_tokens": 1e9}, 400, "server's limit"),
    ({"messages": HI, "n": 500, "temperature": 1}, 400, "'n' must be between 1 and 8"),
    ({"messages": HI, "stream": "yes"}, 400, "'stream' must be true or false"),
    # integers of 400 digits, a seed beyond 64 bits, lone surrogates: 400 naming the field, never a 500
    ({"messages": HI, "max_tokens": 10**400}, 400, "'max_tokens' must be between 1 and 2048, got an integer of 401"),
    ({"messages": HI, "n": 10**400}, 400, "'n' must be between 1 and 8"),
    ({"messages": HI, "temperature": 10**400}, 400, "'temperature' must be a number from 0 to 2"),
    ({"messages": HI, "temperature": -10**400}, 400, "'temperature'"),
    ({"messages": HI, "seed": 10**30}, 400, "'seed' must be a 64-bit integer"),
    ({"messages": HI, "logprobs": True, "top_logprobs": 10**400}, 400, "'top_logprobs' must be between 0 and 20"),
    ({"messages": [{"role": "user", "content": "a\ud800b"}]}, 400, "messages[0].content is not valid Unicode"),
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": "\udfff"}]}]}, 400,
     "messages[0].content[0].text is not valid Unicode"),
    ({"messages": HI, "logprobs": True, "candidates": ["YES", "\ud800"]}, 400, "candidates[1] is not valid Unicode"),
    ({"messages": HI, "logprobs": "yes"}, 400, "'logprobs' must be true or false"),
    (b'{"messages": [{"role": "user", "content": "hi"}], "temperature": NaN}', 400, "NaN is not valid JSON"),
    (b'{"messages": [{"role": "user", "content": "hi"}], "temperature": Infinity}', 400, "Infinity"),
    ({"messages": HI, "temperature": -1}, 400, "temperature"),
    ({"messages": HI, "max_tokens": 2.5}, 400, "must be an integer"),
    ({"messages": HI, "seed": "abc"}, 400, "'seed' must be an integer"),
    (b"[" * 200_000 + b"]" * 200_000, 400, "nested too deeply"),
    ({"messages": _image_message(_png_header_only(8_000, 8_000))}, 413, "over the limit"),
    ({"messages": _image_message(_png_header_only(2_000_000, 2_000_000))}, 413, "pixels"),
    # under the pixel limit, but a 39,000,000 x 1 strip: refused from its header, naming the aspect ratio
    ({"messages": _image_message(_png_header_only(39_000_000, 1))}, 413, "aspect ratio of 3.9e+07:1, over the limit"),
    ({"messages": _image_message(_png_header_only(1, 20_000))}, 413, "--max-aspect-ratio"),
]


def test_hostile_requests_get_4xx_and_server_stays_responsive(backend):
    with running(build_app(backend, "tiny")) as url:
        with httpx.Client(timeout=30) as client:
            for body, status, needle in HOSTILE:
                # json.dumps escapes lone surrogates as \ud800, as a hostile client would send them
                raw = body if isinstance(body, bytes) else json.dumps(body).encode()
                r = client.post(f"{url}/chat/completions", content=raw)
                assert r.status_code == status, (str(body)[:80], r.status_code, r.text[:200])
                assert needle in r.json()["error"]["message"], (str(body)[:80], r.text[:200])
            ok = client.post(f"{url}/chat/completions", json={"messages": HI, "max_tokens": 2})
            assert ok.status_code == 200 and ok.json()["choices"][0]["message"]["role"] == "assistant"


def test_oversized_body_is_refused_unread(backend):
    app = build_app(backend, "tiny", limits=ServeLimits(max_image_bytes=1000))
    with running(app) as url:
        r = httpx.post(f"{url}/chat/completions", content=b" " * 2_000_000)
        assert r.status_code == 413
        assert httpx.post(f"{url}/chat/completions", json={"messages": HI, "max_tokens": 1}).status_code == 200


def test_deadline_stops_a_long_generation_and_frees_the_server(backend):
    app = build_app(backend, "tiny", limits=ServeLimits(request_timeout=1.5))
    with running(app) as url:
        t0 = time.monotonic()
        long = httpx.post(f"{url}/chat/completions", json={"messages": HI, "max_tokens": 2000}, timeout=60)
        assert long.status_code == 504 and "deadline" in long.json()["error"]["message"]
        assert time.monotonic() - t0 < 5
        t1 = time.monotonic()
        short = httpx.post(f"{url}/chat/completions", json={"messages": HI, "max_tokens": 2}, timeout=60)
        # the abandoned 2,000-token generation (about a minute here) was stopped, not finished first
        assert short.status_code == 200 and time.monotonic() - t1 < 5


class _SlowScripted:
    """Answers after ``max_new_tokens / 100`` seconds and records the order; ``started`` is set once the
    first batch is being generated."""

    name, model_id, revision = "scripted", "scripted", None

    def __init__(self):
        self.order = []
        self.started = threading.Event()

    def describe(self):
        return {}

    def generate(self, requests):
        self.started.set()
        time.sleep(requests[0].settings.max_new_tokens / 100)
        self.order += [r.messages[0].parts[0] for r in requests]
        return [Generation(r.messages[0].parts[0]) for r in requests]


def test_short_requests_go_before_waiting_long_ones():
    be = _SlowScripted()
    batcher = Batcher(be, max_batch=4, window_ms=1)
    try:
        req = lambda text, n: ChatRequest([Message("user", [text])], GenerationSettings(max_new_tokens=n))  # noqa: E731
        first = batcher.submit(req("long-1", 40))
        assert be.started.wait(timeout=10)  # long-1 is generating: the next two queue behind it
        futs = [batcher.submit(req("long-2", 40)), batcher.submit(req("short", 2))]
        assert [f.result(timeout=10).text for f in [first, *futs]] == ["long-1", "long-2", "short"]
        assert be.order == ["long-1", "short", "long-2"]
    finally:
        batcher.close()


def test_closing_answers_waiting_requests_with_503(backend):
    app = build_app(backend, "tiny")
    with running(app) as url:
        app.state.batcher.close()
        r = httpx.post(f"{url}/chat/completions", json={"messages": HI, "max_tokens": 2})
        assert r.status_code == 503 and "shutting down" in r.json()["error"]["message"]


def test_access_log_line_per_request(backend, caplog):
    with caplog.at_level("INFO", logger="editlens.serve"):
        with running(build_app(backend, "tiny")) as url:
            httpx.get(f"{url}/models")
            httpx.post(f"{url}/chat/completions", json={"messages": HI, "n": 0})
    lines = [r.getMessage() for r in caplog.records if r.name == "editlens.serve"]
    assert any('"GET /v1/models" 200' in x and x.endswith("ms") for x in lines), lines
    assert any('"POST /v1/chat/completions" 400' in x for x in lines), lines


def _start_serve(model_dir, *extra):
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.Popen([sys.executable, "-m", "editlens.cli.main", "serve", "--vlm", str(model_dir),
                             "--port", "0", "--device", "cpu", *extra],
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env)
    lines = []
    threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True).start()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        banner = [x for x in lines if x.startswith("serving ")]
        if banner:
            return proc, banner[0].split(" at ")[1].split()[0], lines
        time.sleep(0.05)
    proc.kill()
    raise AssertionError(f"serve did not start: {''.join(lines)[-2000:]}")


def test_sigterm_during_long_generation_exits_within_10s(tiny_vlm_dirs):
    proc, url, log = _start_serve(tiny_vlm_dirs["idefics3"], "--max-tokens", "2000")
    try:
        # the URL is printed only once the port is bound: it answers at once
        assert httpx.get(f"{url}/models", timeout=10).status_code == 200
        events, generating = [], threading.Event()

        def ask():  # streamed, so that the test knows the model is generating (a token arrived), not guesses
            try:
                body = {"messages": HI, "max_tokens": 2000, "stream": True}
                with httpx.stream("POST", f"{url}/chat/completions", json=body, timeout=90) as r:
                    for line in r.iter_lines():
                        if line.startswith("data: {"):
                            doc = json.loads(line[6:])
                            events.append(doc)
                            if any(c.get("delta", {}).get("content") for c in doc.get("choices", [])):
                                generating.set()
            except httpx.HTTPError as exc:
                events.append(exc)
            generating.set()

        client = threading.Thread(target=ask, daemon=True)
        client.start()
        assert generating.wait(timeout=60) and not any(isinstance(e, Exception) for e in events), events
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)
        assert time.monotonic() - t0 < 10
        client.join(timeout=5)
        assert not client.is_alive()
        # the 2,000-token answer was cut short: the stream ends in an error (or a dropped connection), never
        # in a finished choice
        finished = [c for e in events if isinstance(e, dict) for c in e.get("choices", []) if c.get("finish_reason")]
        assert finished == [] and (isinstance(events[-1], Exception) or "error" in events[-1]), events[-3:]
        text = "".join(log)
        assert '"GET /v1/models" 200' in text  # access log
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


def test_port_in_use_is_a_clear_error(tiny_vlm_dirs):
    import socket

    from typer.testing import CliRunner

    from editlens.cli.main import app

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        res = CliRunner().invoke(app, ["serve", "--vlm", str(tiny_vlm_dirs["idefics3"]), "--port", str(port),
                                       "--device", "cpu"])
    assert res.exit_code == 2 and f"cannot listen on 127.0.0.1:{port}" in res.output


def test_request_preprocessing_runs_off_the_event_loop(backend, monkeypatch):
    """While one request is stuck in its preprocessing (parsing, image decoding), the server still
    answers others: the evidence is the order of events, not a timing."""
    import editlens.backends.server as server_mod

    entered, release = threading.Event(), threading.Event()
    real = server_mod.parse_chat_request

    def slow_parse(body, *args, **kwargs):
        if body.get("max_tokens") == 3:  # only the "costly" request blocks
            entered.set()
            assert release.wait(60)
        return real(body, *args, **kwargs)

    monkeypatch.setattr(server_mod, "parse_chat_request", slow_parse)
    with running(build_app(backend, "tiny")) as url:
        results = {}
        stuck = threading.Thread(target=lambda: results.setdefault("slow", httpx.post(
            f"{url}/chat/completions", json={"messages": HI, "max_tokens": 3}, timeout=60)))
        stuck.start()
        assert entered.wait(30)
        try:  # the costly request is mid-preprocessing: both the model list and a short request are answered
            assert httpx.get(f"{url}/models", timeout=30).status_code == 200
            assert httpx.post(f"{url}/chat/completions", json={"messages": HI, "max_tokens": 1},
                              timeout=30).status_code == 200
            assert "slow" not in results
        finally:
            release.set()
            stuck.join(60)
        assert results["slow"].status_code == 200


def test_a_long_prompt_limit_is_served_with_sliced_prefill(tiny_vlm_dirs, monkeypatch):
    """No cap of its own on --max-prompt-tokens (prefill is sliced); over the model's context it says so."""
    from typer.testing import CliRunner

    from editlens.backends import serving
    from editlens.cli.main import app

    served = {}
    monkeypatch.setattr(serving, "serve_app", lambda app_, *a, **k: served.setdefault("app", app_))
    res = CliRunner().invoke(app, ["serve", "--vlm", str(tiny_vlm_dirs["idefics3"]), "--device", "cpu",
                                   "--max-prompt-tokens", "200000", "--prefill-tokens", "512"])
    assert res.exit_code == 0, res.output
    assert "over this model's context of 2048 positions" in res.output
    state = served["app"].state
    assert state.limits.max_prompt_tokens == 200_000 and state.batcher.prefill_tokens == 512
    state.batcher.close()

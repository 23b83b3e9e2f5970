"""``POST /v1/score`` (``editlens serve --score``) shares the chat server's request limits:
decompression bombs, deep JSON, the pixel and aspect limits, the body limit, the error shape,
and parsing/decoding off the event loop (shown by the order of events, not a timing)."""

from __future__ import annotations

import base64
import io
import json
import threading

import httpx
import numpy as np
import pytest
from PIL import Image
from servers import running

from editlens.backends.server import ServeLimits
from editlens.metrics.registry import create_metric
from editlens.runner.score_server import score_app


def _png_header_only(width: int, height: int) -> bytes:
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b"")


def _url(raw: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(raw).decode()


def _png(h: int = 8, w: int = 8, seed: int = 0) -> str:
    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)).save(buf, format="PNG")
    return _url(buf.getvalue())


def _item(source: str, edited: str | None = None) -> dict:
    return {"source": source, "edited": edited or _png(), "instruction": "add a hat"}


HOSTILE = [
    ({"items": [_item(_url(_png_header_only(30_000, 30_000)))]}, 413, "pixels is over the limit of 40000000 pixels"),
    ({"items": [_item(_url(_png_header_only(39_000_000, 1)))]}, 413, "aspect ratio of 3.9e+07:1"),
    ({"items": [_item(_png(), _url(_png_header_only(9_000, 9_000)))]}, 413, "items[0].edited: image of 9000x9000"),
    ({"items": [_item(_url(b"\x89PNG not really"))]}, 400, "items[0].source: image cannot be decoded"),
    ({"items": [_item("%%%")]}, 400, "not valid base64"),
    ({"items": [_item(_png())], "metric": ["l1"]}, 400, "'metric' must be the name"),
    ({"items": []}, 400, "non-empty 'items'"),
    (b"[" * 50_000 + b"]" * 50_000, 400, "nested too deeply"),
    (b'{"items": NaN}', 400, "NaN is not valid JSON"),
    (b"\x80\x03pickle", 400, "not JSON"),
]


def test_hostile_score_requests_get_4xx_in_the_chat_servers_error_shape():
    app = score_app({"l1": create_metric("l1")}, limits=ServeLimits(max_image_pixels=40_000_000))
    with running(app) as url:
        with httpx.Client(timeout=60) as client:
            for body, status, needle in HOSTILE:
                raw = body if isinstance(body, bytes) else json.dumps(body).encode()
                r = client.post(f"{url}/score", content=raw)
                assert r.status_code == status, (str(body)[:80], r.status_code, r.text[:300])
                err = r.json()["error"]
                assert needle in err["message"] and err["code"] == status, (needle, r.text[:300])
            ok = client.post(f"{url}/score", json={"items": [_item(_png(8, 8, 1), _png(8, 8, 1))]})
            assert ok.status_code == 200 and ok.json()["scores"][0]["value"] == 0.0


def test_the_serve_limits_given_apply_to_score():
    app = score_app({"l1": create_metric("l1")}, limits=ServeLimits(max_image_pixels=1000, max_aspect_ratio=3,
                                                                    max_image_bytes=5000))
    with running(app) as url:
        r = httpx.post(f"{url}/score", json={"items": [_item(_png(40, 40))]})
        assert r.status_code == 413 and "over the limit of 1000 pixels" in r.json()["error"]["message"]
        r = httpx.post(f"{url}/score", json={"items": [_item(_png(4, 16))]})
        assert r.status_code == 413 and "over the limit of 3:1" in r.json()["error"]["message"]
        r = httpx.post(f"{url}/score", content=b" " * 200_000)  # under the body limit (max_image_bytes * 4 + 1 MiB)
        assert r.status_code == 400
        r = httpx.post(f"{url}/score", content=b" " * 2_000_000)
        assert r.status_code == 413 and "request body over the limit" in r.json()["error"]["message"]


def test_score_parsing_runs_off_the_event_loop(monkeypatch):
    """While one score request is stuck decoding its images, /v1/models and another score are answered."""
    import editlens.runner.score_server as mod

    entered, release = threading.Event(), threading.Event()
    real = mod._image

    def slow_image(value, where, limits):  # type: ignore[no-untyped-def]
        if value == SLOW:
            entered.set()
            assert release.wait(60)
        return real(value, where, limits)

    SLOW = _png(8, 8, 7)
    monkeypatch.setattr(mod, "_image", slow_image)
    with running(score_app({"l1": create_metric("l1"), "l2": create_metric("l2")})) as url:
        results: dict = {}
        stuck = threading.Thread(target=lambda: results.setdefault("slow", httpx.post(
            f"{url}/score", json={"items": [_item(SLOW)]}, timeout=60)))
        stuck.start()
        assert entered.wait(30)
        try:
            assert httpx.get(f"{url}/models", timeout=30).status_code == 200
            quick = httpx.post(f"{url}/score", json={"items": [_item(_png())], "metric": "l2"}, timeout=30)
            assert quick.status_code == 200
            assert "slow" not in results
        finally:
            release.set()
            stuck.join(60)
        assert results["slow"].status_code == 200


@pytest.mark.parametrize("raw_b64", [True, False])
def test_raw_base64_and_data_urls_both_score(raw_b64):
    img = _png(6, 6, 3)
    value = img.split(",", 1)[1] if raw_b64 else img
    with running(score_app({"l1": create_metric("l1")})) as url:
        r = httpx.post(f"{url}/score", json={"items": [_item(value, value)]})
        assert r.status_code == 200 and r.json()["scores"][0]["value"] == 0.0

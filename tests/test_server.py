"""`editlens serve` and the OpenAI-compatible HTTP backend, over real sockets."""

import base64
import io

import httpx
import numpy as np
import pytest
from helpers import rng_image
from PIL import Image
from servers import running

from editlens.backends.http import OpenAIBackend
from editlens.backends.local import TransformersBackend
from editlens.backends.server import build_app
from editlens.backends.types import ChatRequest, GenerationSettings, Message
from editlens.errors import ModelUnavailableError


@pytest.fixture(scope="module")
def local_backend(tiny_vlm_dirs):
    return TransformersBackend(str(tiny_vlm_dirs["idefics3"]), batch_size=8)


def _req(i):
    return ChatRequest([Message("user", [rng_image(i, 40, 48), rng_image(i + 1, 40, 48), "What changed?"])],
                       GenerationSettings(max_new_tokens=4), ("ADD", "REMOVE", "EDIT"))


def test_http_backend_against_serve_matches_local(local_backend):
    with running(build_app(local_backend, "tiny")) as url:
        client = OpenAIBackend(url, concurrency=4)
        assert client.model_id == "tiny" and client.extensions
        calls_before = local_backend.calls
        remote = client.generate([_req(i) for i in range(6)])
        assert local_backend.calls - calls_before < 6  # concurrent requests were batched
    local = local_backend.generate([_req(i) for i in range(6)])
    for r, here in zip(remote, local):
        assert r.error is None and r.text == here.text
        assert r.candidate_distribution(0) == pytest.approx(here.candidate_distribution(0), abs=1e-4)


def test_api_key_required(local_backend, monkeypatch):
    with running(build_app(local_backend, "tiny", api_key="s3cret")) as url:
        r = httpx.post(f"{url}/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]})
        assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
        monkeypatch.delenv("EDITLENS_API_KEY", raising=False)
        with pytest.raises(ModelUnavailableError, match="401"):
            OpenAIBackend(url)
        monkeypatch.setenv("EDITLENS_API_KEY", "s3cret")
        assert OpenAIBackend(url).generate([_req(0)])[0].error is None


def _png_url(arr):
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, "PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


@pytest.mark.parametrize("body,status,needle", [
    (b"{not json", 400, "not valid JSON"),
    ({"messages": []}, 400, "non-empty list"),
    ({"messages": [{"role": "robot", "content": "x"}]}, 400, "needs a role"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}]},
     400, "only data: URLs"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,@@@"}}]}]},
     400, "not valid base64"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,aGVsbG8="}}]}]},
     400, "cannot be decoded"),
    ({"messages": [{"role": "user", "content": "hi"}], "max_tokens": "lots"}, 400, "bad generation settings"),
    ({"model": "other", "messages": [{"role": "user", "content": "hi"}]}, 404, "not served here"),
])
def test_malformed_requests_get_4xx_json(local_backend, body, status, needle):
    with running(build_app(local_backend, "tiny")) as url:
        kw = {"content": body} if isinstance(body, bytes) else {"json": body}
        r = httpx.post(f"{url}/chat/completions", **kw)
        assert r.status_code == status and needle in r.json()["error"]["message"]
        ok = httpx.post(f"{url}/chat/completions", json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
        assert ok.status_code == 200  # the server survived


def test_image_size_limit(local_backend):
    with running(build_app(local_backend, "tiny", max_image_bytes=2000)) as url:
        big = _png_url(np.random.default_rng(0).integers(0, 255, (64, 64, 3), dtype=np.uint8))
        r = httpx.post(f"{url}/chat/completions", json={"messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": big}}]}]})
        assert r.status_code == 413


def test_retries_on_429_and_5xx_then_succeeds():
    from fastapi import FastAPI

    app = FastAPI()
    hits = {"n": 0}

    @app.get("/v1/models")
    def models():
        return {"data": [{"id": "m", "owned_by": "someone"}]}

    @app.post("/v1/chat/completions")
    def chat():
        from fastapi.responses import JSONResponse

        hits["n"] += 1
        if hits["n"] == 1:
            return JSONResponse({"error": "slow down"}, status_code=429, headers={"retry-after": "0"})
        if hits["n"] == 2:
            return JSONResponse({"error": "oops"}, status_code=503)
        return {"choices": [{"message": {"role": "assistant", "content": "YES"}, "finish_reason": "stop",
                             "logprobs": {"content": [{"token": "YES", "logprob": -0.1,
                                                       "top_logprobs": [{"token": "YES", "logprob": -0.1},
                                                                        {"token": " NO", "logprob": -2.4}]}]}}]}

    with running(app) as url:
        be = OpenAIBackend(url, backoff=0.01)
        assert not be.extensions
        g = be.generate([ChatRequest([Message("user", ["x"])], candidates=("YES", "NO"))])[0]
    assert hits["n"] == 3 and g.text == "YES"
    assert g.candidate_distribution(0)["YES"] == pytest.approx(np.exp(-0.1) / (np.exp(-0.1) + np.exp(-2.4)))


def test_refusal_and_gave_up_are_recorded():
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse

    app = FastAPI()

    @app.get("/v1/models")
    def models():
        return {"data": [{"id": "m"}]}

    @app.post("/v1/chat/completions")
    def chat(request: dict):
        if request["messages"][0]["content"][0]["text"] == "refuse":
            return {"choices": [{"message": {"role": "assistant", "content": None, "refusal": "I can't help"}}]}
        return JSONResponse({"error": "down"}, status_code=500)

    with running(app) as url:
        be = OpenAIBackend(url, backoff=0.001, max_retries=2)
        refused, failed = be.generate([ChatRequest([Message("user", ["refuse"])]), ChatRequest([Message("user", ["x"])])])
    assert refused.refusal == "I can't help" and refused.problem == "model refused: I can't help"
    assert "gave up after 3 attempts" in failed.error

"""``editlens serve`` composed from Python (editlens.runner.serve): the command only parses its options."""

from __future__ import annotations

import base64
import io
import json

import numpy as np
import pytest
from PIL import Image

from editlens.backends.serving import ServeSettings
from editlens.errors import InputError
from editlens.runner.serve import build_server


def _b64(a):
    buf = io.BytesIO()
    Image.fromarray(a).save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def test_a_score_server_built_from_python_scores_behind_its_key():
    from fastapi.testclient import TestClient

    server = build_server(ServeSettings(api_key="k"), ["l1", "psnr"])
    assert server.what == "/v1/score (l1, psnr)" and set(server.scored) == {"l1", "psnr"} and server.api_key
    client = TestClient(server.app)
    assert client.get("/v1/models").status_code == 401
    listed = client.get("/v1/models", headers={"authorization": "Bearer k"}).json()
    assert [m["id"] for m in listed["data"]] == ["l1", "psnr"]
    rng = np.random.default_rng(0)
    a, b = (rng.integers(0, 256, (8, 8, 3), dtype=np.uint8) for _ in range(2))
    r = client.post("/v1/score", headers={"authorization": "Bearer k"},
                    json={"items": [{"source": _b64(a), "edited": _b64(b), "instruction": "x"}], "metric": "l1"})
    assert r.status_code == 200, r.text
    assert r.json()["scores"][0]["value"] == pytest.approx(np.abs(a / 255.0 - b / 255.0).mean(), rel=1e-4)


def test_settings_and_composition_refuse_what_cannot_be_served():
    with pytest.raises(InputError, match="--vlm .* and/or --score"):
        build_server(ServeSettings())
    with pytest.raises(InputError, match="already a server"):
        build_server(ServeSettings(vlm="http://127.0.0.1:9/v1"))
    with pytest.raises(InputError, match="LoRA adapter of the local --vlm"):
        build_server(ServeSettings(adapters={"a": "dir"}), ["l1"])
    with pytest.raises(InputError, match="--read-timeout must be a positive number"):
        ServeSettings(read_timeout=0)
    with pytest.raises(InputError, match="--imitate must be vllm or sglang"):
        ServeSettings(imitate="tgi")


def test_token_limits_fit_a_small_models_context(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"text_config": {"max_position_embeddings": 1024}}))
    limits = ServeSettings(vlm=str(tmp_path)).limits()
    assert (limits.max_tokens, limits.max_prompt_tokens) == (256, 768)
    big = ServeSettings(vlm=str(tmp_path / "nowhere"), max_image_mb=1.0).limits()
    assert (big.max_tokens, big.max_prompt_tokens, big.max_image_bytes) == (2048, 8192, 1024 * 1024)
    assert ServeSettings(vlm=str(tmp_path), max_tokens=100).limits().max_prompt_tokens == 924

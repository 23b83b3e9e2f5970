"""Editors behind an OpenAI-compatible image-edit endpoint: ``--editor http(s)://HOST/v1``.

Each image is one ``POST {url}/images/edits`` (multipart: ``image`` as PNG,
``prompt``, ``n=1``, ``response_format=b64_json``, ``model`` when given,
``seed``, and any ``fields``); the answer's ``data[0].b64_json`` is the
image. ``seed`` is not part of OpenAI's API: servers that ignore it make
images that a seed cannot reproduce (the manifest records that it was sent,
not that it was honoured). 429, 5xx and transport errors are retried with
back-off (``max_retries``); an image still without an answer is failed and
redone on rerun. The API key comes from ``api_key=`` or ``$OPENAI_API_KEY``
and is never recorded (``editlens edit`` writes ``api_key=***`` in the command it records).
"""

from __future__ import annotations

import base64
import io
import os
import random
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from editlens.editors.base import Editor, EditOutput, EditRequest
from editlens.editors.callable_editor import as_image
from editlens.errors import InputError


class EndpointEditor(Editor):
    """An OpenAI-compatible ``/v1/images/edits`` endpoint (see the module docstring)."""

    def __init__(self, url: str, model: str | None = None, api_key: str | None = None, size: str | None = None,
                 fields: Mapping[str, Any] | None = None, timeout: float = 300.0, max_retries: int = 3,
                 batch_size: int = 4, name: str | None = None) -> None:
        url = str(url).rstrip("/")
        if not url.startswith(("http://", "https://")):
            raise InputError(f"endpoint editor: {url!r} is not an http(s) URL")
        self.endpoint = url if url.endswith("/images/edits") else f"{url}/images/edits"
        self.model, self.size = model, size
        self.fields = {str(k): str(v) for k, v in (fields or {}).items()}
        self._key = api_key or os.environ.get("OPENAI_API_KEY")
        self.timeout, self.max_retries = float(timeout), int(max_retries)
        self.batch_size = max(1, int(batch_size))  # requests in flight at once
        self.name = name or model or "endpoint"

    def settings(self) -> dict[str, Any]:
        return {"kind": "endpoint", "endpoint": self.endpoint, "model": self.model, "size": self.size,
                "fields": dict(self.fields), "seed_sent": True}

    def weights(self) -> dict[str, Any]:
        return {"ref": f"{self.endpoint} ({self.model or 'default model'})", "sha256": None,
                "note": "served remotely: the weights cannot be hashed here"}

    def _one(self, client: Any, r: EditRequest) -> EditOutput:
        import httpx

        buf = io.BytesIO()
        r.source.convert("RGB").save(buf, format="PNG")
        data = {"prompt": r.instruction, "n": "1", "response_format": "b64_json", "seed": str(r.seed), **self.fields}
        if self.model:
            data["model"] = self.model
        if self.size:
            data["size"] = self.size
        headers = {"Authorization": f"Bearer {self._key}"} if self._key else {}
        error = "no answer"
        for attempt in range(self.max_retries + 1):
            if attempt:
                time.sleep(min(30.0, 0.5 * 2 ** (attempt - 1)) * (0.5 + random.random()))
            try:
                resp = client.post(self.endpoint, data=data, headers=headers,
                                   files={"image": ("source.png", buf.getvalue(), "image/png")})
            except httpx.HTTPError as exc:
                error = f"{type(exc).__name__}: {exc}"
                continue
            if resp.status_code == 429 or resp.status_code >= 500:
                error = f"HTTP {resp.status_code}: {resp.text[:300]}"
                continue
            if resp.status_code != 200:
                return EditOutput(error=f"HTTP {resp.status_code}: {resp.text[:300]}")
            try:
                b64 = resp.json()["data"][0]["b64_json"]
                return EditOutput(image=as_image(io.BytesIO(base64.b64decode(b64))))
            except Exception as exc:  # noqa: BLE001  (any malformed answer fails this image)
                return EditOutput(error=f"the answer holds no b64_json image ({type(exc).__name__}: {exc}): "
                                        f"{resp.text[:200]}")
        return EditOutput(error=f"gave up after {self.max_retries + 1} tries: {error}")

    def edit_batch(self, requests: Sequence[EditRequest]) -> list[EditOutput]:
        import httpx

        with httpx.Client(timeout=self.timeout) as client, ThreadPoolExecutor(self.batch_size) as pool:
            return list(pool.map(lambda r: self._one(client, r), requests))

"""OpenAI-compatible HTTP backend (vLLM, SGLang, TGI, hosted APIs, ``editlens serve``).

Many requests are in flight at once (bounded by ``concurrency``); 429, 5xx
and time-outs are retried with exponential backoff (honouring
``Retry-After``); the API key is read from an environment variable; a
refusal or an empty answer is recorded as such, never as a score.
"""

from __future__ import annotations

import asyncio
import os
import random
import threading
from typing import Any, Sequence

import httpx

from editlens.backends.types import ChatRequest, Generation
from editlens.backends.wire import parse_response, request_body
from editlens.errors import ModelUnavailableError

RETRY_STATUS = {408, 409, 429, 500, 502, 503, 504}


class OpenAIBackend:
    name = "openai-http"

    def __init__(self, base_url: str, model: str | None = None, api_key_env: str = "EDITLENS_API_KEY",
                 concurrency: int = 8, timeout: float = 120.0, max_retries: int = 5, backoff: float = 0.5) -> None:
        self.base_url = base_url.rstrip("/")
        self.api_key = os.environ.get(api_key_env) or None
        self.api_key_env = api_key_env
        self.concurrency = max(1, concurrency)
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff = backoff
        self.revision = None
        self.calls = 0
        info = self._models()
        ids = [m.get("id") for m in info]
        if model is None:
            if not ids:
                raise ModelUnavailableError(f"{self.base_url}/models lists no model; pass --vlm-model NAME")
            model = ids[0]
        self.model_id = str(model)
        owner = next((m.get("owned_by") for m in info if m.get("id") == model), None)
        self.extensions = owner == "editlens"

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def _models(self) -> list[dict[str, Any]]:
        try:
            r = httpx.get(f"{self.base_url}/models", headers=self._headers(), timeout=min(self.timeout, 30))
        except httpx.HTTPError as exc:
            raise ModelUnavailableError(f"cannot reach {self.base_url} ({type(exc).__name__}: {exc}); "
                                        "is the server running, and does the URL end in /v1?") from exc
        if r.status_code == 401:
            raise ModelUnavailableError(f"{self.base_url}: 401 unauthorised; set the API key in ${self.api_key_env}")
        if r.status_code >= 400:
            return []
        try:
            return list(r.json().get("data") or [])
        except ValueError:
            return []

    def describe(self) -> dict[str, Any]:
        return {"backend": self.name, "url": self.base_url, "model": self.model_id, "concurrency": self.concurrency}

    def generate(self, requests: Sequence[ChatRequest]) -> list[Generation]:
        if not requests:
            return []
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self._generate_all(requests))
        # called from inside an event loop (e.g. a notebook): run in a helper thread
        box: list[Any] = []
        t = threading.Thread(target=lambda: box.append(asyncio.run(self._generate_all(requests))))
        t.start()
        t.join()
        return box[0]

    async def _generate_all(self, requests: Sequence[ChatRequest]) -> list[Generation]:
        sem = asyncio.Semaphore(self.concurrency)
        limits = httpx.Limits(max_connections=self.concurrency, max_keepalive_connections=self.concurrency)
        async with httpx.AsyncClient(timeout=self.timeout, limits=limits, headers=self._headers()) as client:
            return list(await asyncio.gather(*(self._one(client, sem, r) for r in requests)))

    async def _one(self, client: httpx.AsyncClient, sem: asyncio.Semaphore, req: ChatRequest) -> Generation:
        body = request_body(req, self.model_id, self.extensions)
        last = "no attempt"
        async with sem:
            for attempt in range(self.max_retries + 1):
                self.calls += 1
                try:
                    r = await client.post(f"{self.base_url}/chat/completions", json=body)
                except (httpx.TimeoutException, httpx.TransportError) as exc:
                    last = f"{type(exc).__name__}: {exc}"
                else:
                    if r.status_code < 400:
                        try:
                            return parse_response(r.json(), req.candidates)
                        except ValueError:
                            return Generation(None, error=f"HTTP {r.status_code}: response is not JSON")
                    last = f"HTTP {r.status_code}: {r.text[:300]}"
                    if r.status_code not in RETRY_STATUS:
                        return Generation(None, error=last)
                    retry_after = r.headers.get("retry-after")
                    if retry_after and retry_after.replace(".", "", 1).isdigit():
                        await asyncio.sleep(min(float(retry_after), 60.0))
                        continue
                if attempt < self.max_retries:
                    # exponential backoff with jitter, so many clients do not retry in lockstep
                    await asyncio.sleep(self.backoff * (2**attempt) * (0.5 + random.random()))  # jitter
        return Generation(None, error=f"gave up after {self.max_retries + 1} attempts: {last}")

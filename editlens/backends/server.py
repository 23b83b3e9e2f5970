"""``editlens serve``: an OpenAI-compatible ``/v1/chat/completions`` server
backed by one loaded local model, so many clients share it.

Concurrent requests are gathered into batches (up to ``max_batch``, waiting
at most ``batch_window_ms``) and answered by one ``generate`` call. Binds to
127.0.0.1 unless told otherwise; with an API key every request without it
gets 401. Image payloads are data URLs with a size limit (413 past it);
malformed requests get 400 with a JSON error.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import io
import queue
import secrets
import threading
import time
from concurrent.futures import Future
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Sequence

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from editlens.backends.types import ChatRequest, Generation, GenerationSettings, Message


class BadRequest(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class Batcher:
    """Collects requests from many clients into batched generate() calls."""

    def __init__(self, backend: Any, max_batch: int = 8, window_ms: float = 10.0) -> None:
        self.backend = backend
        self.max_batch = max_batch
        self.window = window_ms / 1000.0
        self.q: queue.Queue[tuple[ChatRequest, Future] | None] = queue.Queue()
        self.thread = threading.Thread(target=self._loop, daemon=True, name="editlens-batcher")
        self.thread.start()

    def submit(self, req: ChatRequest) -> Future:
        fut: Future = Future()
        self.q.put((req, fut))
        return fut

    def _loop(self) -> None:
        while True:
            item = self.q.get()
            if item is None:
                return
            items = [item]
            deadline = time.monotonic() + self.window
            while len(items) < self.max_batch:
                try:
                    nxt = self.q.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    break
                if nxt is None:
                    self.q.put(None)
                    break
                items.append(nxt)
            try:
                gens = self.backend.generate([r for r, _ in items])
            except Exception as exc:
                gens = [Generation(None, error=f"{type(exc).__name__}: {exc}") for _ in items]
            for (_, fut), g in zip(items, gens):
                fut.set_result(g)

    def close(self) -> None:
        self.q.put(None)


def _decode_image(url: str, max_bytes: int) -> Any:
    import numpy as np
    from PIL import Image, UnidentifiedImageError

    from editlens.core.images import load_image
    from editlens.errors import InputError

    if not url.startswith("data:"):
        raise BadRequest(400, "only data: URLs are accepted for images (this server fetches nothing)")
    head, _, payload = url.partition(",")
    if ";base64" not in head:
        raise BadRequest(400, "image data URLs must be base64-encoded")
    if len(payload) * 3 // 4 > max_bytes:
        raise BadRequest(413, f"image payload over the limit of {max_bytes} bytes")
    try:
        raw = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise BadRequest(400, "image data URL is not valid base64") from None
    try:
        img = Image.open(io.BytesIO(raw))
        arr, _ = load_image(img, name="request image")
    except (UnidentifiedImageError, OSError, InputError) as exc:
        raise BadRequest(400, f"image cannot be decoded: {exc}") from None
    return np.asarray(arr)


def parse_chat_request(body: Any, max_image_bytes: int) -> ChatRequest:
    if not isinstance(body, dict):
        raise BadRequest(400, "request body must be a JSON object")
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise BadRequest(400, "'messages' must be a non-empty list")
    messages = []
    for i, m in enumerate(msgs):
        if not isinstance(m, dict) or m.get("role") not in ("system", "user", "assistant"):
            raise BadRequest(400, f"messages[{i}] needs a role of system, user or assistant")
        content = m.get("content")
        parts: list[Any] = []
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            for j, p in enumerate(content):
                kind = p.get("type") if isinstance(p, dict) else None
                if kind == "text" and isinstance(p.get("text"), str):
                    parts.append(p["text"])
                elif kind == "image_url" and isinstance(p.get("image_url"), dict) and isinstance(p["image_url"].get("url"), str):
                    parts.append(_decode_image(p["image_url"]["url"], max_image_bytes))
                else:
                    raise BadRequest(400, f"messages[{i}].content[{j}] must be a text or image_url part")
        else:
            raise BadRequest(400, f"messages[{i}].content must be a string or a list of parts")
        messages.append(Message(m["role"], parts))
    try:
        max_tokens = int(body.get("max_completion_tokens") or body.get("max_tokens") or 256)
        temperature = float(body.get("temperature") or 0.0)
        n = int(body.get("n") or 1)
        seed = body.get("seed")
        top = int(body.get("top_logprobs") or 0) if body.get("logprobs") else 0
        settings = GenerationSettings(max_tokens, temperature, n, int(seed) if seed is not None else None, min(top, 20))
    except (TypeError, ValueError) as exc:
        raise BadRequest(400, f"bad generation settings: {exc}") from None
    cands = body.get("candidates") or []
    if not isinstance(cands, list) or not all(isinstance(c, str) for c in cands):
        raise BadRequest(400, "'candidates' must be a list of strings")
    return ChatRequest(messages, settings, tuple(cands) if body.get("logprobs") else ())


def completion_json(gen: Generation, model: str, req: ChatRequest, want_logprobs: bool) -> dict[str, Any]:
    texts = gen.samples or [gen.text or ""]
    choices = []
    for i, t in enumerate(texts):
        choice: dict[str, Any] = {"index": i, "message": {"role": "assistant", "content": t},
                                  "finish_reason": gen.finish_reason or "stop"}
        if want_logprobs and i == 0 and gen.steps is not None:
            choice["logprobs"] = {"content": [
                {"token": s.token, "logprob": s.logprob,
                 "top_logprobs": [{"token": tok, "logprob": lp} for tok, lp in s.top],
                 **({"candidates": s.candidates} if req.candidates else {})} for s in gen.steps]}
        choices.append(choice)
    return {"id": "chatcmpl-" + secrets.token_hex(8), "object": "chat.completion", "created": int(time.time()),
            "model": model, "choices": choices}


def build_app(backend: Any, model_name: str, api_key: str | None = None, max_image_bytes: int = 20 * 1024 * 1024,
              max_batch: int = 8, batch_window_ms: float = 10.0, routers: Sequence[Any] = ()) -> Any:
    """``routers``: extra FastAPI routers (e.g. ``/v1/score`` from editlens.adiee.serve), behind the same API key."""
    batcher = Batcher(backend, max_batch, batch_window_ms)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        batcher.close()

    app = FastAPI(title="editlens serve", lifespan=lifespan)
    app.state.batcher = batcher

    def error(status: int, message: str, kind: str = "invalid_request_error") -> JSONResponse:
        return JSONResponse({"error": {"message": message, "type": kind, "code": status}}, status_code=status)

    @app.middleware("http")
    async def auth(request: Request, call_next: Any) -> Any:
        if api_key is not None:
            given = request.headers.get("authorization", "")
            if not secrets.compare_digest(given, f"Bearer {api_key}"):
                return error(401, "missing or wrong API key", "authentication_error")
        return await call_next(request)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": model_name, "object": "model", "owned_by": "editlens"}]}

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Any:
        raw = await request.body()
        if len(raw) > max_image_bytes * 4:
            return error(413, "request body too large")
        try:
            import json

            body = json.loads(raw)
        except ValueError:
            return error(400, "request body is not valid JSON")
        try:
            req = parse_chat_request(body, max_image_bytes)
        except BadRequest as exc:
            return error(exc.status, exc.message)
        if body.get("model") not in (None, model_name):
            return error(404, f"model {body.get('model')!r} is not served here; this server serves {model_name!r}")
        gen = await asyncio.wrap_future(batcher.submit(req))
        if gen.error:
            return error(500, gen.error, "server_error")
        return completion_json(gen, model_name, req, bool(body.get("logprobs")))

    for router in routers:
        app.include_router(router)
    return app

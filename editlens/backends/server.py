"""``editlens serve``: an OpenAI-compatible ``/v1/chat/completions`` server
backed by one loaded local model, so many clients share it.

Concurrent requests are gathered into batches (up to ``max_batch``, waiting
at most ``batch_window_ms``) and answered by one ``generate`` call; when
several are waiting, the shortest (fewest ``max_tokens``) goes first. Binds to
127.0.0.1 unless told otherwise; with an API key every request without it
gets 401. Malformed or hostile requests get a 4xx JSON error, never a 500 or
a hang: server-side limits (:class:`ServeLimits`) cap ``max_tokens``, ``n``,
body and image size (decoded pixels too: no decompression bombs), and every
request has a deadline (504 past it; its generation is stopped when no client
waits for it any more). Closing the app (SIGTERM) stops the generation in
flight at the next token and answers waiting requests with 503.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import io
import json
import logging
import math
import secrets
import threading
import time
from concurrent.futures import Future, InvalidStateError
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, AsyncIterator, Sequence

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from editlens.backends.cancel import cancel_scope, make_cancellable
from editlens.backends.types import ChatRequest, Generation, GenerationSettings, Message

access_log = logging.getLogger("editlens.serve")

SHUTTING_DOWN = "the server is shutting down"
DEADLINE = "no answer within the server's deadline"


@dataclass(frozen=True)
class ServeLimits:
    """What one request may ask of the server (CLI: ``editlens serve --max-tokens ...``).

    Attributes:
        max_tokens: largest ``max_tokens`` accepted (400 above it).
        max_n: largest ``n`` (answers per request).
        request_timeout: seconds a request may wait for its answer (504 after).
        max_image_bytes: largest image payload (413 above it).
        max_image_pixels: largest decoded image, width x height (413 above it).
    """

    max_tokens: int = 2048
    max_n: int = 8
    request_timeout: float = 300.0
    max_image_bytes: int = 20 * 1024 * 1024
    max_image_pixels: int = 40_000_000

    def __post_init__(self) -> None:
        if self.max_tokens < 1 or self.max_n < 1 or not self.request_timeout > 0:
            raise ValueError("serve limits must be positive")


class BadRequest(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass
class _Job:
    req: ChatRequest
    fut: Future
    deadline: float
    seq: int

    @property
    def abandoned(self) -> bool:
        return self.fut.done() or time.monotonic() > self.deadline


def _resolve(fut: Future, gen: Generation) -> None:
    try:
        fut.set_result(gen)
    except InvalidStateError:  # the client gave up (deadline) meanwhile
        pass


class Batcher:
    """Collects requests from many clients into batched generate() calls.

    Shortest requests first; a batch whose clients have all given up, or a
    batcher being closed, stops generating at the next token (local models).
    """

    def __init__(self, backend: Any, max_batch: int = 8, window_ms: float = 10.0) -> None:
        self.backend = backend
        self.max_batch = max(1, max_batch)
        self.window = window_ms / 1000.0
        self._cv = threading.Condition()
        self._pending: list[_Job] = []
        self._running: list[_Job] = []
        self._closed = False
        self._seq = 0
        make_cancellable(backend)
        self.thread = threading.Thread(target=self._loop, daemon=True, name="editlens-batcher")
        self.thread.start()

    def submit(self, req: ChatRequest, timeout: float = 300.0) -> Future:
        fut: Future = Future()
        with self._cv:
            if self._closed:
                fut.set_result(Generation(None, error=SHUTTING_DOWN))
                return fut
            self._seq += 1
            self._pending.append(_Job(req, fut, time.monotonic() + timeout, self._seq))
            self._cv.notify_all()
        return fut

    def _should_stop(self) -> bool:
        running = self._running
        return bool(running) and (self._closed or all(j.abandoned for j in running))

    def _take(self) -> list[_Job] | None:
        with self._cv:
            while not self._pending and not self._closed:
                self._cv.wait()
            if self._closed:
                return None
            end = time.monotonic() + self.window
            while len(self._pending) < self.max_batch and not self._closed:
                left = end - time.monotonic()
                if left <= 0:
                    break
                self._cv.wait(left)
            if self._closed:
                return None
            live = [j for j in self._pending if not j.abandoned]
            self._pending = live
            if not live:
                return []
            first = min(live, key=lambda j: (j.req.settings.max_new_tokens, j.seq))
            group = (first.req.settings, first.req.candidates)
            batch = [j for j in live if (j.req.settings, j.req.candidates) == group][: self.max_batch]
            taken = {id(j) for j in batch}
            self._pending = [j for j in live if id(j) not in taken]
            self._running = batch
            return batch

    def _loop(self) -> None:
        while True:
            batch = self._take()
            if batch is None:
                return
            if not batch:
                continue
            try:
                with cancel_scope(self._should_stop):
                    gens = self.backend.generate([j.req for j in batch])
            except Exception as exc:
                gens = [Generation(None, error=f"{type(exc).__name__}: {exc}") for _ in batch]
            closed, now = self._closed, time.monotonic()
            with self._cv:
                self._running = []
            for job, g in zip(batch, gens):
                # a generation stopped early is never passed off as a whole answer
                if closed:
                    g = Generation(None, error=SHUTTING_DOWN)
                elif now > job.deadline:
                    g = Generation(None, error=DEADLINE)
                _resolve(job.fut, g)

    def close(self) -> None:
        """Stop: the generation in flight ends at its next token; waiting requests get 503."""
        with self._cv:
            self._closed = True
            pending, self._pending = self._pending, []
            self._cv.notify_all()
        for job in pending:
            _resolve(job.fut, Generation(None, error=SHUTTING_DOWN))


def _decode_image(url: str, max_bytes: int, max_pixels: int = ServeLimits.max_image_pixels) -> Any:
    import numpy as np
    from PIL import Image, UnidentifiedImageError

    from editlens.core.images import ImageLoadOptions, load_image
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
        img = Image.open(io.BytesIO(raw))  # reads the header only
        w, h = img.size
        if w * h > max_pixels:  # a few KB can declare gigapixels: refuse before decoding
            raise BadRequest(413, f"image of {w}x{h} pixels is over the limit of {max_pixels} pixels")
        arr, _ = load_image(img, ImageLoadOptions(max_pixels=max_pixels), name="request image")
    except Image.DecompressionBombError as exc:
        raise BadRequest(413, f"image refused as a decompression bomb: {exc}") from None
    except (UnidentifiedImageError, OSError, InputError, SyntaxError, ValueError) as exc:
        raise BadRequest(400, f"image cannot be decoded: {exc}") from None
    return np.asarray(arr)


def _int_field(body: dict[str, Any], names: Sequence[str], default: int, low: int, high: int, hint: str = "") -> int:
    name = next((n for n in names if body.get(n) is not None), None)
    if name is None:
        return min(default, high)
    value = body[name]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or int(value) != value:
        raise BadRequest(400, f"bad generation settings: '{name}' must be an integer, got {value!r}")
    if not low <= value <= high:
        raise BadRequest(400, f"bad generation settings: '{name}' must be between {low} and {high}, got {value:g}"
                         + hint)
    return int(value)


def parse_chat_request(body: Any, max_image_bytes: int, limits: ServeLimits | None = None) -> ChatRequest:
    limits = limits or ServeLimits(max_image_bytes=max_image_bytes)
    if not isinstance(body, dict):
        raise BadRequest(400, "request body must be a JSON object")
    if body.get("stream"):
        raise BadRequest(400, "streaming is not supported by editlens serve; send \"stream\": false")
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
                    parts.append(_decode_image(p["image_url"]["url"], max_image_bytes, limits.max_image_pixels))
                else:
                    raise BadRequest(400, f"messages[{i}].content[{j}] must be a text or image_url part")
        else:
            raise BadRequest(400, f"messages[{i}].content must be a string or a list of parts")
        messages.append(Message(m["role"], parts))
    max_tokens = _int_field(body, ("max_completion_tokens", "max_tokens"), 256, 1, limits.max_tokens,
                            " (the server's limit; see editlens serve --max-tokens)")
    n = _int_field(body, ("n",), 1, 1, limits.max_n, " (the server's limit; see editlens serve --max-n)")
    temperature = body.get("temperature")
    temperature = 0.0 if temperature is None else temperature
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not math.isfinite(temperature) \
            or not 0 <= temperature <= 2:
        raise BadRequest(400, f"bad generation settings: 'temperature' must be a number from 0 to 2, got {temperature!r}")
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise BadRequest(400, f"bad generation settings: 'seed' must be an integer, got {seed!r}")
    top = _int_field(body, ("top_logprobs",), 0, 0, 20) if body.get("logprobs") else 0
    try:
        settings = GenerationSettings(max_tokens, float(temperature), n, seed, top)
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


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def build_app(backend: Any, model_name: str, api_key: str | None = None, max_image_bytes: int = 20 * 1024 * 1024,
              max_batch: int = 8, batch_window_ms: float = 10.0, limits: ServeLimits | None = None,
              routers: Sequence[Any] = ()) -> Any:
    """The FastAPI app of ``editlens serve``.

    ``routers``: extra ``fastapi.APIRouter`` objects to include (more endpoints
    sharing the same backend, auth and access log).
    """
    limits = limits or ServeLimits(max_image_bytes=max_image_bytes)
    max_image_bytes = limits.max_image_bytes
    batcher = Batcher(backend, max_batch, batch_window_ms)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        batcher.close()

    app = FastAPI(title="editlens serve", lifespan=lifespan)
    app.state.batcher = batcher
    app.state.backend = backend
    app.state.limits = limits

    def error(status: int, message: str, kind: str = "invalid_request_error") -> JSONResponse:
        return JSONResponse({"error": {"message": message, "type": kind, "code": status}}, status_code=status)

    @app.middleware("http")
    async def auth(request: Request, call_next: Any) -> Any:
        if api_key is not None:
            given = request.headers.get("authorization", "")
            if not secrets.compare_digest(given, f"Bearer {api_key}"):
                return error(401, "missing or wrong API key", "authentication_error")
        return await call_next(request)

    @app.middleware("http")
    async def log_access(request: Request, call_next: Any) -> Any:  # outermost: sees every answer
        t0 = time.perf_counter()
        status = 500
        try:
            response = await call_next(request)
            status = response.status_code
            return response
        finally:
            client = request.client.host if request.client else "-"
            access_log.info('%s "%s %s" %d %.0f ms', client, request.method, request.url.path, status,
                            1000 * (time.perf_counter() - t0))

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": model_name, "object": "model", "owned_by": "editlens"}]}

    body_limit = max_image_bytes * 4 + 1024 * 1024

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Any:
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > body_limit:
            return error(413, "request body too large")
        chunks, size = [], 0
        async for chunk in request.stream():  # bounded read: a huge body is refused, not buffered
            size += len(chunk)
            if size > body_limit:
                return error(413, "request body too large")
            chunks.append(chunk)
        try:
            body = json.loads(b"".join(chunks), parse_constant=_reject_constant)
        except RecursionError:
            return error(400, "request body is nested too deeply")
        except ValueError as exc:
            return error(400, f"request body is not valid JSON ({exc})")
        try:
            req = parse_chat_request(body, max_image_bytes, limits)
        except BadRequest as exc:
            return error(exc.status, exc.message)
        except RecursionError:
            return error(400, "request body is nested too deeply")
        if body.get("model") not in (None, model_name):
            return error(404, f"model {body.get('model')!r} is not served here; this server serves {model_name!r}")
        fut = batcher.submit(req, limits.request_timeout)
        try:
            gen = await asyncio.wait_for(asyncio.wrap_future(fut), timeout=limits.request_timeout)
        except asyncio.TimeoutError:
            fut.cancel()
            gen = Generation(None, error=DEADLINE)
        if gen.error == DEADLINE:
            return error(504, f"{DEADLINE} of {limits.request_timeout:g} s (editlens serve --request-timeout)",
                         "timeout")
        if gen.error == SHUTTING_DOWN:
            return error(503, gen.error, "server_error")
        if gen.error:
            return error(500, gen.error, "server_error")
        return completion_json(gen, model_name, req, bool(body.get("logprobs")))

    for router in routers:
        app.include_router(router)
    return app

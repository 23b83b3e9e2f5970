"""``editlens serve``: an OpenAI-compatible ``/v1/chat/completions`` server
backed by one loaded local model, so many clients share it.

* Scheduling (:mod:`editlens.backends.scheduler`): concurrent requests are
  batched; a long answer yields between two tokens to short requests, so
  they keep flowing while it runs, and goes on afterwards.
* Limits (:class:`ServeLimits`, CLI options of ``editlens serve``): prompt
  tokens (413 naming the limit), ``max_tokens``, ``n``, body and image size
  (decoded pixels too: no decompression bombs), the time a client may take
  to send its request (408), and a deadline per request (504; its
  generation stops).
* Malformed or hostile requests get a 4xx JSON error naming the field,
  never a 500 or a hang: huge integers, NaN, lone surrogates, deep JSON.
* A client that disconnects stops its generation at the next token.
* Responses carry ``usage`` (prompt, completion and total tokens);
  ``"stream": true`` answers with server-sent events as the OpenAI API does
  (``chat.completion.chunk`` deltas, then ``data: [DONE]``).
* Binds to 127.0.0.1 unless told otherwise; with an API key every request
  without it gets 401. Closing the app (SIGTERM) stops the generation in
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
import re
import secrets
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, AsyncIterator, Mapping, Sequence

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from editlens.backends.scheduler import DEADLINE, GONE, SHUTTING_DOWN, Batcher
from editlens.backends.types import ChatRequest, Generation, GenerationSettings, Message

access_log = logging.getLogger("editlens.serve")

#: OpenAI's seed is a 64-bit integer; anything wider is refused, not wrapped.
SEED_RANGE = (-(2**63), 2**64 - 1)


@dataclass(frozen=True)
class ServeLimits:
    """What one request may ask of the server (CLI: ``editlens serve --max-tokens ...``).

    Attributes:
        max_tokens: largest ``max_tokens`` accepted (400 above it).
        max_n: largest ``n`` (answers per request).
        request_timeout: seconds a request may wait for its answer (504 after).
        max_image_bytes: largest image payload (413 above it).
        max_image_pixels: largest decoded image, width x height (413 above it).
        max_prompt_tokens: largest prompt, in the model's tokens with the chat
            template and image tokens (413 above it). A long prompt is
            prefilled in slices other clients' work runs between (see
            :mod:`editlens.backends.scheduler`), so any length stays fair.
        max_aspect_ratio: longest over shortest side of an image (413 above
            it): a 39,000,000 x 1 image is under the pixel limit, yet costs a
            model's processor seconds to tile, and no model reads it.
        read_timeout: seconds a client may take to send its request, head
            and body (408, or the connection closed, after it).
    """

    max_tokens: int = 2048
    max_n: int = 8
    request_timeout: float = 300.0
    max_image_bytes: int = 20 * 1024 * 1024
    max_image_pixels: int = 40_000_000
    max_prompt_tokens: int = 8192
    read_timeout: float = 30.0
    max_aspect_ratio: float = 100.0

    def __post_init__(self) -> None:
        for name in ("max_tokens", "max_n", "max_image_bytes", "max_image_pixels", "max_prompt_tokens"):
            if not getattr(self, name) >= 1:
                raise ValueError(f"serve limit {name} must be at least 1, got {getattr(self, name)!r}")
        for name in ("request_timeout", "read_timeout", "max_aspect_ratio"):
            value = getattr(self, name)
            if not (value > 0 and math.isfinite(value)):
                raise ValueError(f"serve limit {name} must be a positive number of seconds, got {value!r}")


class BadRequest(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _decode_image(url: str, max_bytes: int, max_pixels: int = ServeLimits.max_image_pixels,
                  max_aspect: float = ServeLimits.max_aspect_ratio) -> Any:
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
        raise BadRequest(413, f"image payload over the limit of {max_bytes} bytes (editlens serve --max-image-mb)")
    try:
        raw = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise BadRequest(400, "image data URL is not valid base64") from None
    try:
        img = Image.open(io.BytesIO(raw))  # reads the header only
        w, h = img.size
        if w * h > max_pixels:  # a few KB can declare gigapixels: refuse before decoding
            raise BadRequest(413, f"image of {w}x{h} pixels is over the limit of {max_pixels} pixels "
                                  "(editlens serve --max-image-pixels)")
        if max(w, h) > max_aspect * max(1, min(w, h)):  # from the header too: before any decoding or tiling
            raise BadRequest(413, f"image of {w}x{h} pixels has an aspect ratio of {max(w, h) / max(1, min(w, h)):g}:1, "
                                  f"over the limit of {max_aspect:g}:1 (editlens serve --max-aspect-ratio)")
        arr, _ = load_image(img, ImageLoadOptions(max_pixels=max_pixels), name="request image")
    except Image.DecompressionBombError as exc:
        # Pillow's own check (twice its MAX_IMAGE_PIXELS) can fire in Image.open, before the size is ours to
        # read: the same refusal as ours, with the count Pillow names
        declared = re.search(r"\((\d+) pixels\)", str(exc))
        if declared and int(declared.group(1)) > max_pixels:
            raise BadRequest(413, f"image of {int(declared.group(1))} pixels is over the limit of {max_pixels} "
                                  "pixels (editlens serve --max-image-pixels)") from None
        raise BadRequest(413, f"image refused as a decompression bomb: {exc}") from None
    except (UnidentifiedImageError, OSError, InputError, SyntaxError, ValueError) as exc:
        raise BadRequest(400, f"image cannot be decoded: {exc}") from None
    return np.asarray(arr)


def _shown(value: Any) -> str:
    """A value for an error message: 400-digit integers are described, not printed."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**18:
        return f"an integer of {len(str(abs(value)))} digits"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _int_field(body: dict[str, Any], names: Sequence[str], default: int, low: int, high: int, hint: str = "") -> int:
    name = next((n for n in names if body.get(n) is not None), None)
    if name is None:
        return min(default, high)
    value = body[name]
    # ints are compared as ints: float() of a 400-digit integer would overflow
    if not _is_number(value) or (isinstance(value, float) and not (math.isfinite(value) and value.is_integer())):
        raise BadRequest(400, f"bad generation settings: '{name}' must be an integer, got {_shown(value)}")
    if not low <= value <= high:
        raise BadRequest(400, f"bad generation settings: '{name}' must be between {low} and {high}, got "
                              f"{_shown(value)}" + hint)
    return int(value)


def _text(value: str, where: str) -> str:
    """``value``, refused when it is not valid Unicode (a lone surrogate such as
    ``"\\ud800"`` from a JSON escape cannot reach the tokenizer)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise BadRequest(400, f"{where} is not valid Unicode text: a lone surrogate "
                              f"{value[exc.start:exc.end].encode('unicode_escape').decode()} at character {exc.start}"
                         ) from None
    return value


def parse_chat_request(body: Any, max_image_bytes: int, limits: ServeLimits | None = None,
                       max_top_logprobs: int = 20) -> ChatRequest:
    limits = limits or ServeLimits(max_image_bytes=max_image_bytes)
    if not isinstance(body, dict):
        raise BadRequest(400, "request body must be a JSON object")
    if not isinstance(body.get("stream", False), (bool, type(None))):
        raise BadRequest(400, f"'stream' must be true or false, got {_shown(body['stream'])}")
    opts = body.get("stream_options")
    if opts is not None and not (isinstance(opts, dict) and isinstance(opts.get("include_usage", False), bool)):
        raise BadRequest(400, "'stream_options' must be an object like {\"include_usage\": true}")
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
            parts.append(_text(content, f"messages[{i}].content"))
        elif isinstance(content, list):
            for j, p in enumerate(content):
                kind = p.get("type") if isinstance(p, dict) else None
                if kind == "text" and isinstance(p.get("text"), str):
                    parts.append(_text(p["text"], f"messages[{i}].content[{j}].text"))
                elif kind == "image_url" and isinstance(p.get("image_url"), dict) and isinstance(p["image_url"].get("url"), str):
                    parts.append(_decode_image(p["image_url"]["url"], max_image_bytes, limits.max_image_pixels,
                                               limits.max_aspect_ratio))
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
    if not _is_number(temperature) or (isinstance(temperature, float) and not math.isfinite(temperature)) \
            or not 0 <= temperature <= 2:
        raise BadRequest(400, f"bad generation settings: 'temperature' must be a number from 0 to 2, got "
                              f"{_shown(temperature)}")
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise BadRequest(400, f"bad generation settings: 'seed' must be an integer, got {_shown(seed)}")
    if seed is not None and not SEED_RANGE[0] <= seed <= SEED_RANGE[1]:
        raise BadRequest(400, f"bad generation settings: 'seed' must be a 64-bit integer (from {SEED_RANGE[0]} to "
                              f"{SEED_RANGE[1]}), got {_shown(seed)}")
    logprobs = body.get("logprobs")
    if logprobs is not None and not isinstance(logprobs, bool):
        raise BadRequest(400, f"'logprobs' must be true or false, got {_shown(logprobs)}")
    top = _int_field(body, ("top_logprobs",), 0, 0, max_top_logprobs) if logprobs else 0
    try:
        settings = GenerationSettings(max_tokens, float(temperature), n, seed, top)
    except (TypeError, ValueError) as exc:
        raise BadRequest(400, f"bad generation settings: {exc}") from None
    cands = body.get("candidates") or []
    if not isinstance(cands, list) or not all(isinstance(c, str) for c in cands) or len(cands) > 64:
        raise BadRequest(400, "'candidates' must be a list of at most 64 strings")
    cands = [_text(c, f"candidates[{k}]") for k, c in enumerate(cands)]
    return ChatRequest(messages, settings, tuple(cands) if logprobs else ())


def _usage(gen: Generation, prompt_tokens: int | None) -> dict[str, int] | None:
    u = gen.usage or {}
    prompt = u.get("prompt_tokens", prompt_tokens)
    if prompt is None or "completion_tokens" not in u:
        return None  # a backend that cannot count: no made-up numbers
    return {"prompt_tokens": int(prompt), "completion_tokens": int(u["completion_tokens"]),
            "total_tokens": int(prompt) + int(u["completion_tokens"])}


def _logprobs_json(gen: Generation, req: ChatRequest) -> dict[str, Any]:
    return {"content": [{"token": s.token, "logprob": s.logprob,
                         "top_logprobs": [{"token": tok, "logprob": lp} for tok, lp in s.top],
                         **({"candidates": s.candidates} if req.candidates else {}),
                         **({"token_logprobs": {str(k): v for k, v in s.ids.items()}} if req.logprob_tokens else {})}
                        for s in gen.steps or []]}


def completion_json(gen: Generation, model: str, req: ChatRequest, want_logprobs: bool,
                    prompt_tokens: int | None = None, logprobs_of: Any = None,
                    token_ids: bool = False) -> dict[str, Any]:
    """The chat-completions answer; ``logprobs_of(gen)``: an engine imitation's
    ``choice.logprobs`` (default: editlens' own, with its extension fields);
    ``token_ids``: add the choice's generated token ids (vLLM's and SGLang's ``return_token_ids``)."""
    texts = gen.samples or [gen.text or ""]
    choices = []
    for i, t in enumerate(texts):
        choice: dict[str, Any] = {"index": i, "message": {"role": "assistant", "content": t},
                                  "finish_reason": gen.finish_reason or "stop", "logprobs": None}
        if want_logprobs and i == 0 and gen.steps is not None:
            choice["logprobs"] = logprobs_of(gen) if logprobs_of is not None else _logprobs_json(gen, req)
        if token_ids and i == 0 and gen.steps is not None and all(s.token_id is not None for s in gen.steps):
            choice["token_ids"] = [s.token_id for s in gen.steps]
        choices.append(choice)
    out = {"id": "chatcmpl-" + secrets.token_hex(8), "object": "chat.completion", "created": int(time.time()),
           "model": model, "choices": choices}
    usage = _usage(gen, prompt_tokens)
    if usage is not None:
        out["usage"] = usage
    return out


def _load_json(raw: bytes) -> Any:
    return json.loads(raw, parse_constant=_reject_constant)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _json_error(status: int, message: str, kind: str = "invalid_request_error") -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "code": status}}


_STATUS_OF = {DEADLINE: (504, "timeout"), SHUTTING_DOWN: (503, "server_error"), GONE: (499, "client_closed")}


class _Guard:
    """Pure ASGI middleware (no buffering, so streams and client disconnects
    pass through untouched): API key, and one access-log line per request."""

    def __init__(self, app: Any, api_key: str | None) -> None:
        self.app, self.api_key = app, api_key
        self.state = app.state  # batcher, backend, limits

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0 = time.perf_counter()
        status = [500]

        async def logged_send(message: Any) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            if self.api_key is not None:
                given = dict(scope.get("headers") or []).get(b"authorization", b"").decode("latin-1")
                if not secrets.compare_digest(given, f"Bearer {self.api_key}"):
                    await JSONResponse(_json_error(401, "missing or wrong API key", "authentication_error"),
                                       status_code=401)(scope, receive, logged_send)
                    return
            await self.app(scope, receive, logged_send)
        finally:
            client = scope.get("client")
            access_log.info('%s "%s %s" %d %.0f ms', client[0] if client else "-", scope.get("method"),
                            scope.get("path"), status[0], 1000 * (time.perf_counter() - t0))


async def _read_body(request: Request, limit: int, timeout: float) -> bytes:
    """The body, refused (413) past ``limit`` bytes and (408) when it takes longer than ``timeout``."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise BadRequest(413, f"request body over the limit of {limit} bytes")
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    chunks, size = [], 0
    stream = request.stream().__aiter__()
    while True:
        try:
            chunk = await asyncio.wait_for(stream.__anext__(), max(0.0, deadline - loop.time()))
        except StopAsyncIteration:
            break
        except asyncio.TimeoutError:
            raise BadRequest(408, f"request body not received within {timeout:g} s "
                                  "(editlens serve --read-timeout)") from None
        size += len(chunk)
        if size > limit:  # bounded read: a huge body is refused, not buffered
            raise BadRequest(413, f"request body over the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


async def _disconnected(request: Request) -> None:
    """Returns once the client has closed its connection (after its body was read)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


def _error(status: int, message: str, kind: str = "invalid_request_error", close: bool = False) -> JSONResponse:
    headers = {"Connection": "close"} if close else None
    return JSONResponse(_json_error(status, message, kind), status_code=status, headers=headers)


class _ChatService:
    """What the endpoints of :func:`build_app` share: the served models (one
    scheduler each), the limits and the engine imitated; one method per step
    of answering a chat request."""

    def __init__(self, backend: Any, model_name: str, batchers: dict[str, Any], limits: ServeLimits,
                 adapters: Mapping[str, Any], max_images: int | None, imitate: Any) -> None:
        from editlens.backends import imitation as imitation_mod

        self.backend, self.model_name, self.batchers, self.limits = backend, model_name, batchers, limits
        self.adapters, self.max_images, self.imitate = adapters, max_images, imitate
        self.count_tokens = getattr(backend, "count_prompt_tokens", None)
        self.max_model_len = limits.max_prompt_tokens + limits.max_tokens
        self.tokenizer = getattr(backend, "tokenizer", None)
        self.vocab = len(self.tokenizer) if self.tokenizer is not None else None
        self.gen_defaults = imitation_mod.generation_defaults(backend) if imitate is not None else {}
        self.body_limit = limits.max_image_bytes * 4 + 1024 * 1024

    async def models(self) -> dict[str, Any]:
        from editlens.backends import engine_api

        paths = {name: getattr(b, "adapter", {}).get("path", name) for name, b in self.adapters.items()}
        data = engine_api.model_entries(self.model_name, paths, self.max_model_len)
        if self.imitate is not None:
            for entry in data:
                entry["owned_by"] = self.imitate.engine
                if self.imitate.engine == "vllm" and entry.get("parent") is not None:
                    entry.pop("max_model_len", None)  # vLLM lists no max_model_len for LoRA adapters
        return {"object": "list", "data": data}

    async def prompt_tokens(self, req: ChatRequest) -> int | None:
        """The prompt's tokens (``None`` when the backend cannot count them); 413 over the limit."""
        if self.count_tokens is None:
            return None
        limit = self.limits.max_prompt_tokens
        chars = sum(len(p) for m in req.messages for p in m.parts if isinstance(p, str))
        bound = getattr(self.backend, "max_token_chars", None)
        if isinstance(bound, int) and chars > limit * bound:  # over the limit whatever the tokenizer does
            raise BadRequest(413, f"prompt of {chars} characters is over the limit of {limit} tokens "
                                  "(editlens serve --max-prompt-tokens)")
        from starlette.concurrency import run_in_threadpool

        try:
            n = await run_in_threadpool(self.count_tokens, req)
        except Exception as exc:  # the model's processor refuses the request
            raise BadRequest(400, f"the model cannot read this request ({type(exc).__name__}: {exc})") from None
        if n > limit:
            raise BadRequest(413, f"prompt of {n} tokens is over the limit of {limit} tokens "
                                  "(editlens serve --max-prompt-tokens)")
        return n

    async def parse(self, raw: bytes) -> tuple[dict[str, Any], ChatRequest]:
        """The request body and the request it asks for; :class:`BadRequest` naming what is wrong."""
        from starlette.concurrency import run_in_threadpool

        from editlens.backends import engine_api
        from editlens.backends import imitation as imitation_mod

        imitate = self.imitate
        # parsing, image decoding and (later) token counting run off the event loop: one costly
        # request must not stall the others' I/O, nor GET /v1/models
        try:
            body = await run_in_threadpool(_load_json, raw)
        except RecursionError:
            raise BadRequest(400, "request body is nested too deeply") from None
        except ValueError as exc:
            raise BadRequest(400, f"request body is not valid JSON ({str(exc)[:200]})") from None
        if imitate is not None and isinstance(body, dict):
            body = imitation_mod.engine_body(body, imitate, self.gen_defaults)
            refused = imitation_mod.check_logprobs(body, imitate, self.vocab)
            if refused:
                raise BadRequest(400, refused)
        try:
            req = await run_in_threadpool(parse_chat_request, body, self.limits.max_image_bytes, self.limits,
                                          20 if imitate is None else (imitate.max_logprobs or self.vocab or 20))
        except RecursionError:
            raise BadRequest(400, "request body is nested too deeply") from None
        if body.get("model") not in (None, *self.batchers):
            raise BadRequest(404, f"model {_shown(body.get('model'))} is not served here; this server serves "
                                  f"{', '.join(repr(n) for n in self.batchers)}")
        try:
            req = engine_api.apply_engine_fields(body, req, self.vocab)
        except engine_api.FieldError as exc:
            raise BadRequest(400, str(exc)) from None
        if imitate is not None and imitate.logprob_token_ids:
            req = imitation_mod.with_token_ids(req, body)
        too_many = engine_api.image_limit_error(req, self.max_images)
        if too_many:
            raise BadRequest(400, too_many)
        return body, req

    async def chat(self, request: Request) -> Any:
        """``POST /v1/chat/completions``."""
        from starlette.requests import ClientDisconnect

        try:
            raw = await _read_body(request, self.body_limit, self.limits.read_timeout)
        except BadRequest as exc:
            return _error(exc.status, exc.message, close=True)
        except ClientDisconnect:
            return Response(status_code=499)
        try:
            body, req = await self.parse(raw)
            n_prompt = await self.prompt_tokens(req)
        except BadRequest as exc:
            return _error(exc.status, exc.message)
        served = self.batchers[body.get("model") or self.model_name]
        want_logprobs = bool(body.get("logprobs"))
        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            return StreamingResponse(self.stream(req, n_prompt, want_logprobs, include_usage, served,
                                                 self.logprobs_of(body)),
                                     media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
        return await self.answer(request, body, req, served, n_prompt)

    def _deadline_error(self, kind: str = "timeout") -> JSONResponse:
        return _error(504, f"{DEADLINE} of {self.limits.request_timeout:g} s (editlens serve --request-timeout)",
                      kind)

    async def answer(self, request: Request, body: dict[str, Any], req: ChatRequest, served: Any,
                     n_prompt: int | None) -> Any:
        """The whole answer at once; its generation stops when the client leaves or the deadline passes."""
        timeout = self.limits.request_timeout
        job = served.enqueue(req, timeout, n_prompt)
        answer = asyncio.ensure_future(asyncio.wrap_future(job.fut))
        gone = asyncio.ensure_future(_disconnected(request))
        try:
            done, _ = await asyncio.wait({answer, gone}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
        if answer not in done:
            answer.cancel()
            job.cancel()  # nobody waits for it any more: it stops at the next token
            if gone in done:
                return Response(status_code=499)
            return self._deadline_error()
        gen = answer.result()
        if gen.error:
            status, kind = _STATUS_OF.get(gen.error, (500, "server_error"))
            if gen.error == DEADLINE:
                return self._deadline_error(kind)
            return _error(status, gen.error, kind)
        return completion_json(gen, self.model_name, req, want_logprobs=bool(body.get("logprobs")),
                               prompt_tokens=n_prompt, logprobs_of=self.logprobs_of(body),
                               token_ids=bool(body.get("return_token_ids")))

    def logprobs_of(self, body: dict[str, Any]) -> Any:
        """How the imitated engine writes log-probabilities (``None``: editlens' own way)."""
        from editlens.backends import imitation as imitation_mod

        imitate, tokenizer = self.imitate, self.tokenizer
        if imitate is None:
            return None
        decode = (lambda k: tokenizer.decode([k])) if tokenizer is not None else None
        return lambda gen: imitation_mod.logprobs_json(gen, body, imitate, decode)

    async def stream(self, req: ChatRequest, n_prompt: int | None, want_logprobs: bool,
                     include_usage: bool, served: Any, lp_of: Any = None) -> AsyncIterator[str]:
        """The answer as server-sent events: a role chunk, text deltas token by
        token, a last chunk per answer, usage when asked, then ``[DONE]``."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()
        chunk = _Chunks(self.model_name)

        def on_text(k: int, delta: str) -> None:  # the model thread, token by token
            loop.call_soon_threadsafe(queue.put_nowait, (k, delta))

        job = served.enqueue(req, self.limits.request_timeout, n_prompt, on_text)
        job.fut.add_done_callback(lambda _: loop.call_soon_threadsafe(queue.put_nowait, None))
        sent = [""] * req.settings.n
        deadline = loop.time() + self.limits.request_timeout
        try:
            yield chunk([{"index": k, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                          "finish_reason": None} for k in range(req.settings.n)])
            while True:
                try:
                    item = await asyncio.wait_for(queue.get(), max(0.0, deadline - loop.time()))
                except asyncio.TimeoutError:
                    item = Generation(None, error=DEADLINE)
                if isinstance(item, tuple):
                    k, delta = item
                    sent[k] += delta
                    yield chunk([{"index": k, "delta": {"content": delta}, "logprobs": None, "finish_reason": None}])
                    continue
                gen = item if isinstance(item, Generation) else job.fut.result()
                if gen.error:
                    status, kind = _STATUS_OF.get(gen.error, (500, "server_error"))
                    yield f"data: {json.dumps(_json_error(status, gen.error, kind))}\n\n"
                    break
                yield chunk(_final_choices(gen, sent, req, want_logprobs, lp_of))
                usage = _usage(gen, n_prompt)
                if include_usage and usage is not None:
                    yield chunk([], usage=usage)
                yield "data: [DONE]\n\n"
                break
        finally:
            job.cancel()  # a client that left mid-stream stops its generation; a finished job is unaffected


class _Chunks:
    """Writes the ``chat.completion.chunk`` events of one streamed answer (one id, one creation time)."""

    def __init__(self, model_name: str) -> None:
        self.model_name = model_name
        self.ident, self.created = "chatcmpl-" + secrets.token_hex(8), int(time.time())

    def __call__(self, choices: list[dict[str, Any]], **extra: Any) -> str:
        doc = {"id": self.ident, "object": "chat.completion.chunk", "created": self.created,
               "model": self.model_name, "choices": choices, **extra}
        return f"data: {json.dumps(doc)}\n\n"


def _final_choices(gen: Generation, sent: list[str], req: ChatRequest, want_logprobs: bool,
                   lp_of: Any) -> list[dict[str, Any]]:
    """The last chunk's choices: each answer's text not streamed yet (a backend
    that cannot stream sends it all here), its finish reason and log-probabilities."""
    final = []
    for k, text in enumerate(gen.samples or [gen.text or ""]):
        rest = text[len(sent[k]):] if text.startswith(sent[k]) else ""
        choice: dict[str, Any] = {"index": k, "delta": {"content": rest} if rest else {},
                                  "logprobs": None, "finish_reason": gen.finish_reason or "stop"}
        if want_logprobs and k == 0 and gen.steps is not None:
            choice["logprobs"] = lp_of(gen) if lp_of is not None else _logprobs_json(gen, req)
        final.append(choice)
    return final


def build_app(backend: Any, model_name: str, api_key: str | None = None, max_image_bytes: int = 20 * 1024 * 1024,
              max_batch: int = 8, batch_window_ms: float = 10.0, limits: ServeLimits | None = None,
              routers: Sequence[Any] = (), slice_ms: float = 20.0, adapters: Mapping[str, Any] | None = None,
              max_images: int | None = None, prefill_tokens: int | None = 2048, imitate: Any = None) -> Any:
    """The ASGI app of ``editlens serve``.

    ``routers``: extra ``fastapi.APIRouter`` objects to include (more endpoints
    sharing the same backend, auth and access log). ``slice_ms``: least time
    a batch runs before yielding to a shorter request (see
    :mod:`editlens.backends.scheduler`). ``adapters``: more served model
    names, each a local backend running a LoRA adapter of the base
    (:func:`editlens.backends.engine_api.load_adapter`). ``max_images``:
    images one prompt may carry (vLLM's ``--limit-mm-per-prompt``).
    ``prefill_tokens``: a longer prompt is encoded in slices of at most this
    many tokens, other clients' work running between two (``None``: whole).
    ``imitate``: an :class:`~editlens.backends.imitation.Imitation`: answer as
    that engine does (no editlens-only fields, its caps, defaults and quirks).
    """
    from editlens.backends import engine_api

    limits = limits or ServeLimits(max_image_bytes=max_image_bytes)
    adapters = adapters or {}
    batcher = Batcher(backend, max_batch, batch_window_ms, slice_ms=slice_ms, prefill_tokens=prefill_tokens)
    # each adapter runs on its own scheduler: one batch is one model's
    batchers = {model_name: batcher, **{name: Batcher(b, max_batch, batch_window_ms, slice_ms=slice_ms,
                                                      prefill_tokens=prefill_tokens)
                                        for name, b in adapters.items()}}
    service = _ChatService(backend, model_name, batchers, limits, adapters, max_images, imitate)
    if imitate is not None:  # the engine's generation quirks (penalty scope, log-probabilities after penalties)
        for b in (backend, *adapters.values()):
            b.engine_quirks = imitate.quirks()

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        for b in batchers.values():
            b.close()

    app = FastAPI(title="editlens serve", lifespan=lifespan)
    app.state.batcher = batcher
    app.state.batchers = batchers
    app.state.backend = backend
    app.state.limits = limits
    tokenizer = service.tokenizer
    if tokenizer is not None:
        app.include_router(engine_api.tokenizer_router(
            lambda name: tokenizer if name in (None, *batchers) else None, service.max_model_len))
    app.get("/v1/models")(service.models)
    if imitate is not None and imitate.engine == "sglang":
        @app.get("/get_server_info")
        async def server_info() -> dict[str, Any]:  # SGLang's server arguments, the ones clients read
            return {"enable_deterministic_inference": imitate.honours_seed, "version": "editlens-imitation"}

    app.post("/v1/chat/completions")(service.chat)
    for router in routers:
        app.include_router(router)
    return _Guard(app, api_key)

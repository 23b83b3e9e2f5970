"""``POST /v1/score``: scores for a batch of edits from any registered evaluator, for RL trainers over HTTP.

Request: ``{"items": [{"source": IMG, "edited": IMG, "instruction": str}, ...],
"metric": "adiee", "details": false}`` where IMG is a ``data:image/...;base64,``
URL (or raw base64). Response: ``{"metric", "scores": [{"value", "status",
"reason"}, ...]}`` in request order; with ``"details": true`` each score also
carries the evaluator's details (EditScore's sub-scores and reasoning,
EditReward's log-uncertainty and reading, the checkpoint and whether the
prompts are the release's). Bodies are JSON only (never pickled). The whole
batch goes to the evaluator at once (it batches and caches); evaluators are
created once at start-up. Each evaluator scores one batch at a time, and
evaluators served together score concurrently (a long EditScore batch does
not hold an EditReward request). :func:`score_app` serves ``/v1/score`` alone, so a
reward model can run in its own process on its own GPU (``editlens serve
--score editscore --device cuda:1``) beside an RL trainer.

Each score says how it was decoded (``"decoding"``: ``none`` for evaluators
that do not generate, ``greedy``, or ``sampled`` with its temperature, seed
and passes), so a trainer can tell a reproducible reward from a sampled
one. Items may carry a ``"task"`` (an edit type, a prompt set);
``GET /v1/score/stats`` reports, per evaluator and task, how many rewards
were served, their mean and spread, and flags a task whose rewards are
stuck at 0 or constant (a reward that teaches nothing).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Mapping

import numpy as np
from fastapi import APIRouter, Request, Response
from PIL import Image

from editlens.core.json_safe import json_safe
from editlens.core.types import LoadedEdit


def _image(value: Any, where: str, limits: Any) -> np.ndarray:
    """A request image, through the chat server's decoder and limits (bytes, pixels from the
    header, aspect ratio, decompression bombs); :class:`BadRequest` naming ``where``."""
    from editlens.backends.server import BadRequest, _decode_image

    if not isinstance(value, str) or not value:
        raise BadRequest(400, f"{where}: expected a base64 image or data URL")
    url = value if value.startswith("data:") else "data:;base64," + value
    try:
        return _decode_image(url, limits.max_image_bytes, limits.max_image_pixels, limits.max_aspect_ratio)
    except BadRequest as exc:
        raise BadRequest(exc.status, f"{where}: {exc.message}") from None


def decoding(metric: Any) -> dict[str, Any]:
    """How ``metric`` decodes its answers, as each served score records it."""
    if not hasattr(metric, "temperature"):
        return {"decoding": "none"}
    temperature = float(metric.temperature or 0.0)
    if temperature <= 0:
        return {"decoding": "greedy"}
    return {"decoding": "sampled", "temperature": temperature, "seed": getattr(metric, "seed", None),
            "samples": getattr(metric, "samples", 1)}


#: scored rewards a task needs before it is flagged as stuck or constant
MIN_FOR_FLAGS = 8


class RewardStats:
    """Running per-(evaluator, task) statistics of served rewards."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.rows: dict[tuple[str, str], dict[str, Any]] = {}

    def add(self, metric: str, task: str, value: float | None) -> None:
        with self.lock:
            r = self.rows.setdefault((metric, task), {"served": 0, "scored": 0, "zeros": 0, "sum": 0.0, "sumsq": 0.0,
                                                      "min": None, "max": None})
            r["served"] += 1
            if value is None:
                return
            r["scored"] += 1
            r["zeros"] += value == 0
            r["sum"] += value
            r["sumsq"] += value * value
            r["min"] = value if r["min"] is None else min(r["min"], value)
            r["max"] = value if r["max"] is None else max(r["max"], value)

    def report(self) -> dict[str, Any]:
        import math

        out: dict[str, Any] = {}
        with self.lock:
            for (metric, task), r in sorted(self.rows.items()):
                n = r["scored"]
                mean: float | None = None
                std: float | None = None
                if n:
                    mean = r["sum"] / n
                    std = math.sqrt(max(0.0, r["sumsq"] / n - mean * mean))
                flags = []
                if n >= MIN_FOR_FLAGS and r["zeros"] == n:
                    flags.append("stuck at 0")
                elif n >= MIN_FOR_FLAGS and r["max"] - r["min"] <= 1e-9 * max(1.0, abs(r["max"])):
                    flags.append("constant")
                if r["served"] >= MIN_FOR_FLAGS and n == 0:
                    flags.append("never scored")
                out.setdefault(metric, {})[task] = {
                    "served": r["served"], "scored": n, "mean": mean, "std": std, "min": r["min"], "max": r["max"],
                    "zero_fraction": r["zeros"] / n if n else None, "flags": flags}
        return {"min_for_flags": MIN_FOR_FLAGS, "metrics": out}


def _parse(raw: bytes, metrics: Mapping[str, Any], default: str, max_items: int, limits: Any) -> tuple[Any, ...]:
    """The body's evaluator, edits, tasks and details flag; :class:`BadRequest` (400/413) naming
    the field. Runs off the event loop: JSON parsing and image decoding are the costly part."""
    from editlens.backends.server import BadRequest, _load_json

    try:
        body = _load_json(raw)
    except RecursionError:
        raise BadRequest(400, "request body is nested too deeply") from None
    except ValueError as exc:
        raise BadRequest(400, f"body is not JSON ({str(exc)[:200]})") from None
    if not isinstance(body, dict) or not isinstance(body.get("items"), list) or not body["items"]:
        raise BadRequest(400, "body needs a non-empty 'items' list")
    if len(body["items"]) > max_items:
        raise BadRequest(413, f"at most {max_items} items per request")
    metric = body.get("metric")
    if metric is not None and not isinstance(metric, str):
        raise BadRequest(400, "'metric' must be the name of a served evaluator")
    name = metric or default
    if name not in metrics:
        raise BadRequest(400, f"metric {name[:200]!r} is not served here; served: {sorted(metrics)}")
    samples, tasks = [], []
    for n, it in enumerate(body["items"]):
        where = f"items[{n}]"
        if not isinstance(it, dict):
            raise BadRequest(400, f"{where}: expected an object")
        task = it.get("task", "")
        if not isinstance(task, str) or len(task) > 200:
            raise BadRequest(400, f"{where}.task: expected a short string")
        tasks.append(task or "(no task)")
        instr = it.get("instruction")
        if not isinstance(instr, str) or not instr.strip():
            raise BadRequest(400, f"{where}: empty instruction")
        src = _image(it.get("source"), f"{where}.source", limits)
        edt = _image(it.get("edited"), f"{where}.edited", limits)
        if edt.shape[:2] != src.shape[:2]:
            edt = np.asarray(Image.fromarray(edt).resize((src.shape[1], src.shape[0]), Image.Resampling.BICUBIC))
        samples.append(LoadedEdit(id=str(n), source=src, edited=edt, instruction=instr.strip()))
    return name, samples, tasks, body.get("details") is True


def score_router(metrics: Mapping[str, Any], max_items: int = 64, max_image_bytes: int = 20 * 1024 * 1024,
                 limits: Any = None) -> Any:
    """A FastAPI router serving ``POST /v1/score`` with the given evaluators
    (and ``GET /v1/score/stats``, the per-task report of what was served).

    ``limits``: the chat server's :class:`~editlens.backends.server.ServeLimits` (body
    read time and size, image bytes, pixels and aspect ratio; default: its defaults with
    ``max_image_bytes``). As on ``/v1/chat/completions``, the body is parsed and its images
    decoded off the event loop, and every refusal is ``{"error": {"message", "type", "code"}}``.
    """
    from fastapi.responses import JSONResponse
    from starlette.concurrency import run_in_threadpool
    from starlette.requests import ClientDisconnect

    from editlens.backends.server import BadRequest, ServeLimits, _json_error, _read_body
    from editlens.errors import InputError

    limits = limits or ServeLimits(max_image_bytes=max_image_bytes)
    body_limit = limits.max_image_bytes * 4 + 1024 * 1024  # the chat server's
    router = APIRouter()
    # one model call at a time per evaluator: two evaluators served together (a reward model and a judge)
    # score concurrently, neither waiting behind the other's long batch. Evaluators that share a pooled model
    # stay correct: a shared local backend serialises its own generate() calls (TransformersBackend._lock).
    locks = {name: threading.Lock() for name in metrics}
    default = next(iter(metrics))
    stats = RewardStats()

    def error(status: int, message: str, close: bool = False) -> Any:
        return JSONResponse(_json_error(status, message), status_code=status,
                            headers={"Connection": "close"} if close else None)

    @router.get("/v1/score/stats")
    async def score_stats() -> dict[str, Any]:
        return stats.report()

    @router.post("/v1/score")
    async def score(request: Request) -> Any:
        try:
            raw = await _read_body(request, body_limit, limits.read_timeout)
        except BadRequest as exc:
            return error(exc.status, exc.message, close=True)
        except ClientDisconnect:
            return Response(status_code=499)
        try:
            name, samples, tasks, details = await run_in_threadpool(_parse, raw, metrics, default, max_items, limits)
        except BadRequest as exc:
            return error(exc.status, exc.message)
        except RecursionError:
            return error(400, "request body is nested too deeply")

        def run() -> list[Any]:
            with locks[name]:
                return metrics[name].score_batch(samples)

        try:
            scores = await asyncio.get_running_loop().run_in_executor(None, run)
        except InputError as exc:  # the evaluator refuses these edits (e.g. an image it cannot take)
            return error(400, f"{name}: {exc}")
        how = decoding(metrics[name])
        for s, task in zip(scores, tasks):
            stats.add(name, task, s.value if s.status == "scored" else None)
        return {"metric": name, "scores": [{"value": s.value, "status": s.status, "reason": s.reason, **how,
                                            **({"details": json_safe(s.details)} if details else {})}
                                           for s in scores]}

    return router


def score_app(metrics: Mapping[str, Any], api_key: str | None = None, max_image_bytes: int = 20 * 1024 * 1024,
              limits: Any = None) -> Any:
    """A FastAPI app serving only ``POST /v1/score`` (and ``GET /v1/models``
    listing the evaluators), with the same API-key check as ``editlens serve``."""
    import secrets

    from fastapi import FastAPI
    from fastapi.responses import JSONResponse

    app = FastAPI(title="editlens score server")

    @app.middleware("http")
    async def auth(request: Request, call_next: Any) -> Any:
        if api_key is not None and not secrets.compare_digest(request.headers.get("authorization", ""),
                                                               f"Bearer {api_key}"):
            return JSONResponse({"error": {"message": "missing or wrong API key", "type": "authentication_error",
                                           "code": 401}}, status_code=401)
        return await call_next(request)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": n, "object": "evaluator", "owned_by": "editlens"} for n in metrics]}

    app.include_router(score_router(metrics, max_image_bytes=max_image_bytes, limits=limits))
    return app

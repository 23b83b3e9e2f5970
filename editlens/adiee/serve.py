"""``POST /v1/score``: scores for a batch of edits, for RL trainers over HTTP.

Request: ``{"items": [{"source": IMG, "edited": IMG, "instruction": str}, ...],
"metric": "adiee"}`` where IMG is a ``data:image/...;base64,`` URL (or raw
base64). Response: ``{"metric", "scores": [{"value", "status", "reason"}, ...]}``
in request order. The whole batch goes to the evaluator at once (it batches
and caches); evaluators are created once at start-up.
"""

from __future__ import annotations

import asyncio
import base64
import io
import threading
from typing import Any, Mapping

import numpy as np
from fastapi import APIRouter, HTTPException, Request
from PIL import Image, UnidentifiedImageError

from editlens.core.types import LoadedEdit


def _image(value: Any, where: str, max_bytes: int) -> np.ndarray:
    if not isinstance(value, str) or not value:
        raise HTTPException(400, f"{where}: expected a base64 image or data URL")
    data = value.split(",", 1)[1] if value.startswith("data:") else value
    try:
        raw = base64.b64decode(data, validate=True)
    except ValueError:  # binascii.Error is a ValueError
        raise HTTPException(400, f"{where}: not valid base64") from None
    if len(raw) > max_bytes:
        raise HTTPException(413, f"{where}: image larger than {max_bytes} bytes")
    try:
        return np.asarray(Image.open(io.BytesIO(raw)).convert("RGB"), dtype=np.uint8)
    except (UnidentifiedImageError, OSError):
        raise HTTPException(400, f"{where}: not a readable image") from None


def score_router(metrics: Mapping[str, Any], max_items: int = 64, max_image_bytes: int = 20 * 1024 * 1024) -> Any:
    """A FastAPI router serving ``POST /v1/score`` with the given evaluators."""
    router = APIRouter()
    lock = threading.Lock()  # one model call at a time per process
    default = next(iter(metrics))

    @router.post("/v1/score")
    async def score(request: Request) -> dict[str, Any]:
        try:
            body = await request.json()
        except ValueError:
            raise HTTPException(400, "body is not JSON") from None
        if not isinstance(body, dict) or not isinstance(body.get("items"), list) or not body["items"]:
            raise HTTPException(400, "body needs a non-empty 'items' list")
        if len(body["items"]) > max_items:
            raise HTTPException(413, f"at most {max_items} items per request")
        name = str(body.get("metric") or default)
        if name not in metrics:
            raise HTTPException(400, f"metric {name!r} is not served here; served: {sorted(metrics)}")
        samples = []
        for n, it in enumerate(body["items"]):
            where = f"items[{n}]"
            if not isinstance(it, dict):
                raise HTTPException(400, f"{where}: expected an object")
            instr = it.get("instruction")
            if not isinstance(instr, str) or not instr.strip():
                raise HTTPException(400, f"{where}: empty instruction")
            src = _image(it.get("source"), f"{where}.source", max_image_bytes)
            edt = _image(it.get("edited"), f"{where}.edited", max_image_bytes)
            if edt.shape[:2] != src.shape[:2]:
                edt = np.asarray(Image.fromarray(edt).resize((src.shape[1], src.shape[0]), Image.Resampling.BICUBIC))
            samples.append(LoadedEdit(id=str(n), source=src, edited=edt, instruction=instr.strip()))

        def run() -> list[Any]:
            with lock:
                return metrics[name].score_batch(samples)

        scores = await asyncio.get_running_loop().run_in_executor(None, run)
        return {"metric": name, "scores": [{"value": s.value, "status": s.status, "reason": s.reason}
                                           for s in scores]}

    return router

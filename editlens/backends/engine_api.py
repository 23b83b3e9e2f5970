"""What makes ``editlens serve`` a test double of an inference engine (vLLM, SGLang).

* Request fields those engines take beyond OpenAI's API: ``top_k``,
  ``top_p``, ``repetition_penalty``, ``add_generation_prompt`` (and the
  editlens extension ``logprob_tokens``: exact log-probabilities of given
  token ids at every step), read by :func:`apply_engine_fields` after the
  request itself was validated.
* LoRA adapters served as model names beside their base (vLLM's
  ``--lora-modules NAME=DIR``): :func:`load_adapter`.
* A limit on images per prompt (vLLM's ``--limit-mm-per-prompt``), refused
  with a 400 as vLLM refuses it: :func:`image_limit_error`.
* ``POST /tokenize`` and ``POST /detokenize`` as vLLM answers them
  (:func:`tokenizer_router`), so clients can find the token ids of the words
  whose probabilities they read.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping

from fastapi import Request  # at module level: FastAPI resolves the endpoints' annotations here

from editlens.backends.types import ChatRequest


class FieldError(ValueError):
    """A bad engine field: the server answers 400 with this message."""


def _number(body: dict[str, Any], name: str, default: float, low: float, high: float) -> float:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not low <= value <= high:
        raise FieldError(f"bad generation settings: '{name}' must be a number from {low:g} to {high:g}, got {value!r}"[:200])
    return float(value)


def apply_engine_fields(body: dict[str, Any], req: ChatRequest, vocab_size: int | None = None) -> ChatRequest:
    """``req`` with the engine fields of ``body`` applied (a ``top_k`` of -1 means off, as in vLLM)."""
    top_k = body.get("top_k")
    if top_k is None or top_k == -1:
        top_k = 0
    if isinstance(top_k, bool) or not isinstance(top_k, int) or not 0 <= top_k <= 1_000_000:
        raise FieldError(f"bad generation settings: 'top_k' must be -1, 0 or a positive integer, got {top_k!r}"[:200])
    top_p = _number(body, "top_p", 1.0, 0.0, 1.0)
    if top_p <= 0:
        raise FieldError("bad generation settings: 'top_p' must be above 0")
    penalty = _number(body, "repetition_penalty", 1.0, 0.01, 10.0)
    agp = body.get("add_generation_prompt", True)
    if not isinstance(agp, bool):
        raise FieldError(f"'add_generation_prompt' must be true or false, got {agp!r}"[:200])
    tokens = body.get("logprob_tokens") or []
    if not isinstance(tokens, list) or len(tokens) > 64 or not all(
            isinstance(t, int) and not isinstance(t, bool) and 0 <= t < (vocab_size or 2**31) for t in tokens):
        raise FieldError("'logprob_tokens' must be a list of at most 64 token ids of this model's vocabulary")
    settings = replace(req.settings, top_k=int(top_k), top_p=top_p, repetition_penalty=penalty)
    return replace(req, settings=settings, add_generation_prompt=agp, logprob_tokens=tuple(tokens))


def image_limit_error(req: ChatRequest, max_images: int | None) -> str | None:
    """vLLM's refusal of a prompt with more images than it was started for, or ``None``."""
    n = len(req.images)
    if max_images is None or n <= max_images:
        return None
    return (f"At most {max_images} image(s) may be provided in one prompt, got {n} "
            "(editlens serve --max-images-per-prompt; vLLM: --limit-mm-per-prompt)")


def model_entries(base_name: str, adapters: Mapping[str, str], max_model_len: int | None) -> list[dict[str, Any]]:
    """``/v1/models`` entries as vLLM lists them: the base, then each adapter with its base as ``parent``."""
    extra = {"max_model_len": max_model_len} if max_model_len else {}
    out = [{"id": base_name, "object": "model", "owned_by": "editlens", "root": base_name, "parent": None, **extra}]
    for name, path in adapters.items():
        out.append({"id": name, "object": "model", "owned_by": "editlens", "root": str(path), "parent": base_name,
                    **extra})
    return out


def load_adapter(backend: Any, adapter_dir: str | Path, name: str, merge: bool = False) -> Any:
    """``backend`` (a freshly loaded local backend of the base) running the
    LoRA adapter in ``adapter_dir`` as the model ``name``. Every adapter weight
    must land on a LoRA parameter and every LoRA parameter must get one.
    ``merge``: fold the adapter into the weights (as EditScore runs in-process)
    instead of keeping it beside them (as vLLM and DICE in-process run it).
    The loading is the one VLM loader's (:func:`editlens.models.vlm.with_adapter`)."""
    from editlens.models.fingerprint import fingerprint
    from editlens.models.resolve import ModelRef
    from editlens.models.vlm import with_adapter

    path = Path(adapter_dir).expanduser()
    backend.model, merged = with_adapter(backend.model, path, merge, what=f"--adapter {name}={adapter_dir}")

    backend.model_id = name
    backend.revision = f"{backend.revision or ''}+adapter:{path}"
    backend.adapter = {"name": name, "path": str(path), "merged": merged,
                       "weights": fingerprint(ModelRef(None, str(path), "literal"))}
    return backend


def tokenizer_router(tokenizer_of: Any, max_model_len: int | None) -> Any:
    """``POST /tokenize`` and ``POST /detokenize`` (vLLM's shapes; at the server root and under ``/v1``).
    ``tokenizer_of(model name)`` gives the tokenizer, or ``None`` for a model not served."""
    from fastapi import APIRouter
    from fastapi.responses import JSONResponse

    router = APIRouter()

    def bad(status: int, message: str) -> JSONResponse:
        return JSONResponse({"error": {"message": message, "type": "invalid_request_error", "code": status}},
                            status_code=status)

    async def body_of(request: Request) -> tuple[Any, Any]:
        try:
            body = await request.json()
        except ValueError:
            return None, bad(400, "request body is not valid JSON")
        if not isinstance(body, dict):
            return None, bad(400, "request body must be a JSON object")
        tok = tokenizer_of(body.get("model"))
        if tok is None:
            return None, bad(404, f"model {str(body.get('model'))[:60]!r} is not served here")
        return (body, tok), None

    async def tokenize(request: Request) -> Any:
        got, err = await body_of(request)
        if err is not None:
            return err
        body, tok = got
        prompt = body.get("prompt")
        if not isinstance(prompt, str) or len(prompt) > 100_000:
            return bad(400, "'prompt' must be a string (at most 100000 characters)")
        ids = tok.encode(prompt, add_special_tokens=bool(body.get("add_special_tokens", True)))
        out: dict[str, Any] = {"tokens": ids, "count": len(ids), "max_model_len": max_model_len}
        if body.get("return_token_strs"):
            out["token_strs"] = tok.convert_ids_to_tokens(ids)
        return out

    async def detokenize(request: Request) -> Any:
        got, err = await body_of(request)
        if err is not None:
            return err
        body, tok = got
        ids = body.get("tokens")
        if not isinstance(ids, list) or len(ids) > 100_000 or not all(
                isinstance(t, int) and not isinstance(t, bool) and 0 <= t < len(tok) for t in ids):
            return bad(400, "'tokens' must be a list of token ids of this model's vocabulary")
        return {"prompt": tok.decode(ids)}

    for prefix in ("", "/v1"):
        router.add_api_route(prefix + "/tokenize", tokenize, methods=["POST"])
        router.add_api_route(prefix + "/detokenize", detokenize, methods=["POST"])
    return router

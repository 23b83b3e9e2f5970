"""The OpenAI chat-completions wire format, shared by client and server."""

from __future__ import annotations

import base64
import io
import math
from typing import Any

import numpy as np
from PIL import Image

from editlens.backends.types import ChatRequest, EncodedImage, Generation, Message, TokenStep


def image_to_data_url(arr: np.ndarray) -> str:
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _image_part(p: Any) -> dict[str, Any]:
    if isinstance(p, EncodedImage):  # sent as given (a benchmark release's own encoding)
        url = f"data:{p.mime};base64," + base64.b64encode(p.data).decode("ascii")
        return {"type": "image_url", "image_url": {"url": url, **({"detail": p.detail} if p.detail else {})}}
    return {"type": "image_url", "image_url": {"url": image_to_data_url(p)}}


def message_to_wire(m: Message) -> dict[str, Any]:
    content = [{"type": "text", "text": p} if isinstance(p, str) else _image_part(p) for p in m.parts]
    return {"role": m.role, "content": content}


def request_body(req: ChatRequest, model: str, extensions: bool) -> dict[str, Any]:
    s = req.settings
    body: dict[str, Any] = {"model": model, "messages": [message_to_wire(m) for m in req.messages],
                            "max_tokens": s.max_new_tokens, "temperature": s.temperature, "n": s.n}
    if s.seed is not None:
        body["seed"] = s.seed
    # vLLM and SGLang read these as request fields (OpenAI's API has top_p only)
    if s.top_k:
        body["top_k"] = s.top_k
    if s.top_p < 1.0:
        body["top_p"] = s.top_p
    if s.repetition_penalty != 1.0:
        body["repetition_penalty"] = s.repetition_penalty
    if not req.add_generation_prompt:
        body["add_generation_prompt"] = False
    if req.candidates or s.top_logprobs:
        body["logprobs"] = True
        body["top_logprobs"] = max(s.top_logprobs, 20 if req.candidates else 0)
        if extensions and req.candidates:
            body["candidates"] = list(req.candidates)  # editlens servers return their exact log-probabilities
    if req.logprob_tokens:
        body["logprobs"] = True
        body["top_logprobs"] = max(body.get("top_logprobs", 0), 20)
        if extensions:
            body["logprob_tokens"] = list(req.logprob_tokens)
    return body


def _candidates_from_top(top: list[dict[str, Any]], candidates: tuple[str, ...]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for c in candidates:
        # any capitalisation of the word counts ("YES", "Yes", " yes")
        hits = [t["logprob"] for t in top
                if str(t.get("token", "")).strip().upper() == c.upper() and t.get("logprob") is not None]
        if hits:
            m = max(hits)
            out[c] = m + math.log(sum(math.exp(h - m) for h in hits))
        else:
            out[c] = None  # not among the server's top tokens: unknown, not zero
    return out


def parse_response(data: Any, candidates: tuple[str, ...]) -> Generation:
    """A :class:`Generation` from a chat-completions body; a body that is not
    one (an array, no choices) is a backend error, never an answer.

    >>> parse_response([1, 2], ()).error
    'response is a JSON list, not an object'
    >>> parse_response({"choices": [{"message": {"content": "YES"}}]}, ()).text
    'YES'
    """
    if not isinstance(data, dict):
        return Generation(None, error=f"response is a JSON {_json_kind(data)}, not an object")
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not all(isinstance(c, dict) for c in choices):
        return Generation(None, error=f"response without choices: {str(data)[:200]}")
    first = choices[0]
    msg = first.get("message") if isinstance(first.get("message"), dict) else {}
    text = msg.get("content")
    if isinstance(text, list):  # some servers return content parts
        text = "".join(p.get("text", "") for p in text if isinstance(p, dict))
    steps: list[TokenStep] | None = None
    logprobs = first.get("logprobs")
    lp = logprobs.get("content") if isinstance(logprobs, dict) else None
    if isinstance(lp, list):
        steps = []
        for e in (e for e in lp if isinstance(e, dict)):
            top = [t for t in e.get("top_logprobs") or [] if isinstance(t, dict)]
            cands = e.get("candidates")
            if not isinstance(cands, dict):
                cands = _candidates_from_top(top, candidates)
            step = TokenStep(str(e.get("token", "")), e.get("logprob"), dict(cands),
                             [(t.get("token", ""), t.get("logprob")) for t in top])
            exact = e.get("token_logprobs")  # editlens servers: the asked-for token ids' log-probabilities
            if isinstance(exact, dict):
                step.ids = {int(k): float(v) for k, v in exact.items() if str(k).lstrip("-").isdigit()
                            and _is_finite_number(v)}
            bad = impossible_logprob(step)
            if bad is not None:  # a broken answer, never cached: a rerun asks again
                return Generation(None, error=f"the server returned {bad} at token {len(steps)}")
            steps.append(step)
    samples = [(((c.get("message") if isinstance(c.get("message"), dict) else {}) or {}).get("content") or "")
               for c in choices] if len(choices) > 1 else []
    if text is not None and not isinstance(text, str):
        return Generation(None, error=f"response content is a JSON {_json_kind(text)}, not text")
    refusal = msg.get("refusal") or None
    finish = first.get("finish_reason")
    if not (text or "").strip() and refusal is None and finish not in ("length", "content_filter"):
        # A model that was let finish says something: null or blank content is an
        # answer lost on the way (a proxy, an overloaded server), retried and never
        # cached. Cut off at max_tokens ("length") it is the model's, kept as such.
        why = "null content" if text is None else "empty content"
        return Generation(None, error=f"{why} with finish_reason {finish!r} ({str(data)[:120]})")
    return Generation(text, steps, finish, refusal=refusal, samples=samples)


def impossible_logprob(step: TokenStep) -> str | None:
    """Why a step's log-probabilities cannot be real (NaN, not a number, or above 0), else ``None``.

    >>> impossible_logprob(TokenStep("YES", float("nan"), {}, []))
    'the log-probability nan'
    >>> impossible_logprob(TokenStep("YES", -0.1, {"YES": 0.3}, []))
    'the log-probability 0.3 (above 0: a probability above 1)'
    >>> impossible_logprob(TokenStep("YES", -0.1, {"YES": -0.1, "NO": None}, [("NO", -2.4)])) is None
    True
    """
    values = [step.logprob, *step.candidates.values(), *(v for _, v in step.top), *(getattr(step, "ids", None) or {}).values()]
    for v in values:
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(v):
            return f"the log-probability {v!r}"
        if v > 1e-6:  # float rounding of log(1) aside
            return f"the log-probability {v:g} (above 0: a probability above 1)"
    return None


def _is_finite_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _json_kind(value: Any) -> str:
    return {list: "list", str: "string", int: "number", float: "number", bool: "boolean",
            type(None): "null", dict: "object"}.get(type(value), type(value).__name__)

"""The OpenAI chat-completions wire format, shared by client and server."""

from __future__ import annotations

import base64
import io
import math
from typing import Any

import numpy as np
from PIL import Image

from editlens.backends.types import ChatRequest, Generation, Message, TokenStep


def image_to_data_url(arr: np.ndarray) -> str:
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def message_to_wire(m: Message) -> dict[str, Any]:
    content = [{"type": "text", "text": p} if isinstance(p, str) else
               {"type": "image_url", "image_url": {"url": image_to_data_url(p)}} for p in m.parts]
    return {"role": m.role, "content": content}


def request_body(req: ChatRequest, model: str, extensions: bool) -> dict[str, Any]:
    s = req.settings
    body: dict[str, Any] = {"model": model, "messages": [message_to_wire(m) for m in req.messages],
                            "max_tokens": s.max_new_tokens, "temperature": s.temperature, "n": s.n}
    if s.seed is not None:
        body["seed"] = s.seed
    if req.candidates or s.top_logprobs:
        body["logprobs"] = True
        body["top_logprobs"] = max(s.top_logprobs, 20 if req.candidates else 0)
        if extensions and req.candidates:
            body["candidates"] = list(req.candidates)  # editlens servers return their exact log-probabilities
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


def parse_response(data: dict[str, Any], candidates: tuple[str, ...]) -> Generation:
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        return Generation(None, error=f"response without choices: {str(data)[:200]}")
    first = choices[0]
    msg = first.get("message") or {}
    text = msg.get("content")
    if isinstance(text, list):  # some servers return content parts
        text = "".join(p.get("text", "") for p in text if isinstance(p, dict))
    steps = None
    lp = (first.get("logprobs") or {}).get("content")
    if isinstance(lp, list):
        steps = []
        for e in lp:
            top = e.get("top_logprobs") or []
            cands = e.get("candidates")
            if not isinstance(cands, dict):
                cands = _candidates_from_top(top, candidates)
            steps.append(TokenStep(str(e.get("token", "")), e.get("logprob"), dict(cands),
                                   [(t.get("token", ""), t.get("logprob")) for t in top]))
    samples = [((c.get("message") or {}).get("content") or "") for c in choices] if len(choices) > 1 else []
    return Generation(text, steps, first.get("finish_reason"), refusal=msg.get("refusal") or None, samples=samples)

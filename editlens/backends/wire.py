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


#: the engines whose dialect editlens speaks (``owned_by`` of their ``/v1/models`` entries)
ENGINES = ("editlens", "vllm", "sglang")
#: top log-probabilities asked for when a candidate's exact one cannot be asked: vLLM's cap (--max-logprobs 20)
ENGINE_TOP_LOGPROBS = 20


def dialect_of(extensions: bool | str | None) -> str | None:
    """``"editlens"``, ``"vllm"``, ``"sglang"`` or ``None`` (another OpenAI-compatible server)."""
    if extensions is True:
        return "editlens"
    return extensions if extensions in ENGINES else None


def request_body(req: ChatRequest, model: str, extensions: bool | str | None) -> dict[str, Any]:
    """The request's JSON. ``extensions``: the server's dialect (``True`` or
    ``"editlens"``: an editlens server, ``"vllm"``, ``"sglang"``; ``False``/``None``:
    another OpenAI-compatible server).

    To an engine every sampling field is sent, neutral values included: both
    vLLM and SGLang fill an omitted one from the model's
    ``generation_config.json`` (a 1.05 repetition penalty, a top-k of 20), which
    would change an answer editlens reads as greedy. Other servers get OpenAI's
    fields, the rest only where it is not neutral (OpenAI's API refuses
    unknown fields).
    """
    s = req.settings
    dialect = dialect_of(extensions)
    body: dict[str, Any] = {"model": model, "messages": [message_to_wire(m) for m in req.messages],
                            "max_tokens": s.max_new_tokens, "temperature": s.temperature, "n": s.n}
    if s.seed is not None:
        body["seed"] = s.seed
    if dialect is not None:
        body.update(top_k=s.top_k or -1, top_p=s.top_p, repetition_penalty=s.repetition_penalty)
    else:  # vLLM and SGLang read these as request fields (OpenAI's API has top_p only)
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
        body["top_logprobs"] = max(s.top_logprobs, ENGINE_TOP_LOGPROBS if req.candidates else 0)
        if dialect == "editlens" and req.candidates:
            body["candidates"] = list(req.candidates)  # editlens servers return their exact log-probabilities
    if req.logprob_tokens:
        body["logprobs"] = True
        body["top_logprobs"] = max(body.get("top_logprobs", 0), ENGINE_TOP_LOGPROBS)
        if dialect == "editlens":
            body["logprob_tokens"] = list(req.logprob_tokens)
        elif dialect == "vllm":  # exactly these ids, every step (vLLM's logprob_token_ids), tokens written as ids
            body["logprob_token_ids"] = list(req.logprob_tokens)
            body["return_tokens_as_token_ids"] = True
        if dialect is not None:
            body["return_token_ids"] = True  # the generated ids (vLLM and SGLang), for token offsets
    return body


def _token_id(text: Any) -> int | None:
    """``N`` of vLLM's ``"token_id:N"`` (``return_tokens_as_token_ids``), else ``None``."""
    if isinstance(text, str) and text.startswith("token_id:") and text[9:].isdigit():
        return int(text[9:])
    return None


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
            step.token_id = _token_id(step.token)
            exact = e.get("token_logprobs")  # editlens servers: the asked-for token ids' log-probabilities
            if isinstance(exact, dict):
                step.ids = {int(k): float(v) for k, v in exact.items() if str(k).lstrip("-").isdigit()
                            and _is_finite_number(v)}
            for t in top:  # vLLM with return_tokens_as_token_ids: every top entry names its id
                tid = _token_id(t.get("token"))
                if tid is not None and _is_finite_number(t.get("logprob")) and t["logprob"] > -9999.0:
                    step.ids.setdefault(tid, float(t["logprob"]))
            bad = impossible_logprob(step)
            if bad is not None:  # a broken answer, never cached: a rerun asks again
                return Generation(None, error=f"the server returned {bad} at token {len(steps)}")
            steps.append(step)
    ids = first.get("token_ids")  # vLLM and SGLang with return_token_ids: the generated ids
    if steps is not None and isinstance(ids, list) and all(isinstance(t, int) for t in ids):
        if len(ids) == len(steps) + 1 and all(s.token_id is None or s.token_id == t for s, t in zip(steps, ids)):
            ids = ids[: len(steps)]  # an engine that lists the end-of-turn token it gave no log-probability for
        if len(ids) == len(steps):
            for step, tid in zip(steps, ids):
                step.token_id = tid if step.token_id is None else step.token_id
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

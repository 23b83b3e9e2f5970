"""Evaluators on an inference engine (vLLM, SGLang, ``editlens serve``): what
they need of it, checked once at start with one clear error naming the
option to set, never discovered row by row.

:func:`check_engine` asks the engine's ``/v1/models`` (served model names,
``max_model_len``) and sends one probe request carrying as many images as
the evaluator sends, asking for log-probabilities when the evaluator reads
them. What it learnt is kept on the backend (``backend.capabilities``) and
recorded in the run's provenance.

:func:`engine_tokens` asks the engine's ``/tokenize`` and ``/detokenize``
for the first token of words whose probability an evaluator reads (DICE's
ADD/EDIT/REMOVE, YES/NO), so the formulas run on the tokens the engine's
model emits. Both engines serve them with the same request
(``{"model", "prompt", "add_special_tokens"}`` -> ``{"tokens", "count",
"max_model_len"}``; ``{"model", "tokens"}`` to detokenize) but answer
``/detokenize`` differently: vLLM ``{"prompt": text}``
(vllm/entrypoints/serve/tokenize/api_router.py, at the server root only),
SGLang ``{"text": text}`` (sglang/srt/entrypoints/openai/serving_tokenize.py,
at the root and under ``/v1``); both are read, and ``/v1/...`` is tried when
the root has no route (a proxy that forwards ``/v1`` only).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from editlens.backends.types import ChatRequest, GenerationSettings, Message
from editlens.errors import ModelUnavailableError

#: the start-up probe's question (beside as many images as the evaluator's prompts carry; a 1-token answer)
PROBE_TEXT = "Answer with one word: YES or NO."


def is_engine_url(ref: str | None) -> bool:
    return bool(ref) and str(ref).startswith(("http://", "https://"))


@dataclass(frozen=True)
class EngineNeeds:
    """What an evaluator needs of an engine."""

    images: int = 1  # images in one prompt
    logprobs: bool = False  # per-step log-probabilities (top_logprobs) of the answer
    max_new_tokens: int = 1  # longest answer it asks for (the context must hold it beside the prompt)


def _raw(backend: Any) -> Any:
    """The HTTP backend under wrappers (response cache, settings)."""
    seen = 0
    while not hasattr(backend, "base_url") and hasattr(backend, "backend") and seen < 5:
        backend, seen = backend.backend, seen + 1
    return backend


def _one_engine(backend: Any) -> Any:
    """The HTTP backend to ask for token ids: a pool's first engine (engines of one model share a tokenizer)."""
    be = _raw(backend)
    return (getattr(be, "members", None) or [be])[0]


def check_engine(backend: Any, needs: EngineNeeds, who: str, option: str) -> dict[str, Any]:
    """Probe the engine behind ``backend`` once for ``needs``; raise
    :class:`ModelUnavailableError` naming ``option`` (how the evaluator was
    pointed at the engine) and the engine's own setting when it falls short.
    Returns the capabilities found (also kept on the backend)."""
    be = _raw(backend)
    members = getattr(be, "members", None)
    if members:  # several engines of one model (--vlm URL --vlm URL): each is probed
        found, sick = [], []
        for m in members:
            try:
                found.append(check_engine(m, needs, who, option))
            except ModelUnavailableError as exc:
                if "gave up after" not in str(exc):  # the engine answers, and refuses: a setting to fix
                    raise
                sick.append(str(exc))  # lost on the way (time-outs, 5xx): left out for now, as at run time
                be.leave_out(m)
        if not found:
            raise ModelUnavailableError(f"{who}: no engine of {option} answers: " + "; ".join(sick))
        be.capabilities = found[0]
        return found[0]
    if not hasattr(be, "base_url"):
        return {}
    url, model = be.base_url, be.model_id
    memo = _CHECKED.get((url, model, be.revision))
    if memo and memo["images"] >= needs.images and (memo["logprobs"] or not needs.logprobs):
        be.capabilities = memo["caps"]
        return memo["caps"]
    entry: dict[str, Any] = next((m for m in be.models_answer if m.get("id") == model), {})
    # vLLM lists no max_model_len for a LoRA adapter's name (nor SGLang for BASE:ADAPTER): the base's holds
    base_name = entry.get("parent") or (str(model).split(":")[0] if ":" in str(model) else None)
    base_entry: dict[str, Any] = next((m for m in be.models_answer if m.get("id") == base_name), {})
    limit = entry.get("max_model_len", base_entry.get("max_model_len"))
    caps: dict[str, Any] = {"served_model": model, "max_model_len": limit, "adapter_of": entry.get("parent")}
    if entry.get("max_model_len") is None and limit is not None:
        caps["max_model_len_from"] = f"the base model {base_name!r} (none listed for {model!r})"
    if isinstance(limit, int) and needs.max_new_tokens >= limit:
        raise ModelUnavailableError(
            f"{who}: the engine at {url} serves {model!r} with a context of {limit} tokens, less than the "
            f"{needs.max_new_tokens} new tokens {who} asks for beside its prompt and images: start the engine with "
            f"a longer context (vLLM: --max-model-len; SGLang: --context-length), or point {option} elsewhere")
    parts: list[Any] = [np.full((56, 56, 3), 127 + 40 * k, dtype=np.uint8) for k in range(needs.images)]
    probe = ChatRequest([Message("user", [*parts, PROBE_TEXT])],
                        GenerationSettings(max_new_tokens=1, top_logprobs=5 if needs.logprobs else 0))
    (gen,) = be.generate([probe])
    if gen.error:
        text = gen.error.lower()
        if needs.images > 1 and "image" in text and any(w in text for w in ("at most", "limit", "maximum", "only")):
            raise ModelUnavailableError(
                f"{who}: the engine at {url} refuses prompts with {needs.images} images ({gen.error[:200]}); "
                f"{who} sends {needs.images} per prompt: start vLLM with --limit-mm-per-prompt "
                f"'{{\"image\": {needs.images}}}' (editlens serve: --max-images-per-prompt {needs.images}), "
                f"or point {option} at an engine that takes them")
        raise ModelUnavailableError(f"{who}: the engine at {url} ({model!r}) refused a probe request with "
                                    f"{needs.images} image(s): {gen.error[:300]} (set with {option})")
    if needs.logprobs and not (gen.steps and any(s.top or s.logprob is not None for s in gen.steps)):
        raise ModelUnavailableError(
            f"{who}: the engine at {url} answers without logprobs/top_logprobs, which {who} reads its "
            "confidences from: serve the model with vLLM or SGLang (both return them; vLLM caps top_logprobs at "
            f"--max-logprobs, 20 by default), or run {who} in-process (drop {option})")
    caps["images_per_prompt"] = f"at least {needs.images}"
    caps["logprobs"] = bool(gen.steps and any(s.top for s in gen.steps))
    _CHECKED[(url, model, be.revision)] = {"images": needs.images, "logprobs": needs.logprobs, "caps": caps}
    be.capabilities = caps
    return caps


#: (url, served model, what it says it serves) -> what was checked: a process probes an engine once
_CHECKED: dict[tuple[Any, ...], dict[str, Any]] = {}


class _EnginePoster:
    """POSTs to an engine's tokenizer endpoints (``/tokenize``, ``/detokenize``): at the root, else under
    ``/v1`` (vLLM: root only; SGLang: both; some proxies: ``/v1`` only); each answer a JSON object, or
    :class:`ModelUnavailableError` naming the engine, the endpoint and ``why`` it is needed."""

    def __init__(self, backend: Any, why: str) -> None:
        import httpx

        self.be = be = _one_engine(backend)
        self.root = be.base_url[:-3] if be.base_url.endswith("/v1") else be.base_url
        self.why = why
        self.client = httpx.Client(timeout=min(getattr(be, "timeout", 30.0), 30.0),
                                   headers=be._headers() if hasattr(be, "_headers") else {})

    def __enter__(self) -> _EnginePoster:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.client.close()

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        import httpx

        be, status, said = self.be, 0, ""
        for base in (self.root, self.root + "/v1"):
            try:
                r = self.client.post(base + path, json={"model": be.model_id, **body})
            except httpx.HTTPError as exc:
                raise ModelUnavailableError(f"the engine at {be.base_url}: {path} failed ({exc})") from None
            status, said = r.status_code, r.text[:200]
            if status not in (404, 405):
                break
        if status >= 400:
            raise ModelUnavailableError(f"the engine at {be.base_url} has no usable {path} (HTTP {status}: {said}); "
                                        f"{self.why}")
        try:
            answer = r.json()
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            raise ModelUnavailableError(f"the engine at {be.base_url}: {path} answered something that is not a "
                                        "JSON object")
        return answer

    def detokenize(self, tokens: Sequence[int]) -> str:
        answer = self.post("/detokenize", {"tokens": list(tokens)})
        text = answer.get("prompt", answer.get("text"))  # vLLM: "prompt"; SGLang: "text"
        if not isinstance(text, str):
            raise ModelUnavailableError(f"the engine at {self.be.base_url}: /detokenize answered without the text "
                                        f"(neither vLLM's 'prompt' nor SGLang's 'text' field: {sorted(answer)[:8]})")
        return text

    def tokenize(self, text: str) -> list[int]:
        ids = self.post("/tokenize", {"prompt": text, "add_special_tokens": False}).get("tokens")
        if not isinstance(ids, list) or not all(isinstance(t, int) for t in ids):
            raise ModelUnavailableError(f"the engine at {self.be.base_url}: /tokenize answered without token ids")
        return [int(t) for t in ids]


def engine_tokens(backend: Any, words: Sequence[str]) -> list[dict[str, tuple[int, str]]]:
    """For ``words``, the engine's first token of each (id and decoded text),
    written bare and after a space; a variant is kept only when every word
    has its own first token (as :func:`editlens.dice.released_format.candidate_variants`).
    Raises :class:`ModelUnavailableError` when the engine has no ``/tokenize``."""
    out: list[dict[str, tuple[int, str]]] = []
    with _EnginePoster(backend, "the token probabilities of words are read through it (vLLM and SGLang serve "
                                "it: check the URL, or run in-process)") as engine:
        for prefix in ("", " "):
            found: dict[str, tuple[int, str]] = {}
            for w in words:
                ids = engine.tokenize(prefix + w)
                if ids:
                    found[w] = (ids[0], engine.detokenize([ids[0]]))
            if len(found) == len(words) and len({v[0] for v in found.values()}) == len(words) and found not in out:
                out.append(found)
    return out


def engine_detokenize(backend: Any, tokens: Sequence[int]) -> str:
    """The engine's text of ``tokens`` (its ``/detokenize``; vLLM answers
    ``{"prompt"}``, SGLang ``{"text"}``), special tokens written as the
    tokenizer writes them. Raises :class:`ModelUnavailableError` when it has none."""
    with _EnginePoster(backend, "token offsets are computed through it") as engine:
        return engine.detokenize(tokens)


def engine_honours_seed(backend: Any) -> bool | None:
    """Whether the engine uses a request's ``seed``: vLLM and editlens serve do;
    SGLang only when started with ``--enable-deterministic-inference``, which
    its ``/get_server_info`` tells (``None``: the engine does not say)."""
    import httpx

    be = _one_engine(backend)
    dialect = getattr(be, "dialect", None)
    if dialect in ("vllm", "editlens"):
        return True
    if dialect != "sglang":
        return None
    root = be.base_url[:-3] if be.base_url.endswith("/v1") else be.base_url
    try:
        r = httpx.get(root + "/get_server_info", headers=be._headers() if hasattr(be, "_headers") else {},
                      timeout=min(getattr(be, "timeout", 30.0), 30.0))
        info = r.json() if r.status_code < 400 else None
    except (httpx.HTTPError, ValueError):
        return None
    flag = info.get("enable_deterministic_inference") if isinstance(info, dict) else None
    return flag if isinstance(flag, bool) else None


def engine_tokenize(backend: Any, text: str) -> list[int]:
    """The engine's token ids of ``text`` without special tokens (its ``/tokenize``, at the root or under
    ``/v1``). Raises :class:`ModelUnavailableError` when it has none."""
    with _EnginePoster(backend, "candidate words' token ids are read through it") as engine:
        return engine.tokenize(text)

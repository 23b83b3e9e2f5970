"""OpenAI-compatible HTTP backend (vLLM, SGLang, TGI, hosted APIs, ``editlens serve``).

Many requests are in flight at once (bounded by ``concurrency``); 429, 5xx
and time-outs are retried with exponential backoff (honouring
``Retry-After``); the API key is read from an environment variable; a
refusal is recorded as such, never as a score. An empty or ``null`` answer
(unless cut off at ``max_tokens``) is an answer lost on the way and is
retried like a 5xx (:func:`~editlens.backends.wire.parse_response`).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import threading
from collections.abc import Callable, Coroutine
from typing import Any, Sequence, TypeVar

import httpx

from editlens.backends.types import ChatRequest, Generation
from editlens.backends.wire import parse_response, request_body
from editlens.errors import ModelUnavailableError

T = TypeVar("T")

RETRY_STATUS = {408, 409, 429, 500, 502, 503, 504}


def run_async(make: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run the coroutine ``make()`` makes to its end from synchronous code; called from inside an event
    loop (e.g. a notebook), in a helper thread."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(make())
    box: list[T] = []
    t = threading.Thread(target=lambda: box.append(asyncio.run(make())))
    t.start()
    t.join()
    return box[0]


class OpenAIBackend:
    name = "openai-http"
    #: what the engine check at start found (set by :mod:`editlens.backends.engine`)
    capabilities: dict[str, Any] | None = None

    def __init__(self, base_url: str, model: str | None = None, api_key_env: str = "EDITLENS_API_KEY",
                 concurrency: int = 8, timeout: float = 120.0, max_retries: int = 5, backoff: float = 0.5,
                 option: str = "--vlm-model") -> None:
        self.base_url = base_url.rstrip("/")
        self.api_key = os.environ.get(api_key_env) or None
        self.api_key_env = api_key_env
        self.concurrency = max(1, int(concurrency))
        if not timeout > 0:
            raise ValueError(f"timeout must be positive seconds, got {timeout}")
        self.timeout = float(timeout)
        self.max_retries = max(0, int(max_retries))
        self.backoff = backoff
        self.revision: str | None = None
        self.calls = 0
        info = self._discover()
        self.models_answer = info  # the server's /v1/models answer, pinned in run manifests
        ids = [m.get("id") for m in info]
        if model is None:
            if not ids:
                raise ModelUnavailableError(f"{self.base_url}/models lists no model; name the model the server "
                                            "serves with --vlm-model NAME (Python: vlm_model=...)")
            model = ids[0]
        elif ids and model not in ids and not any(str(model).startswith(f"{i}:") for i in ids):
            # at start, not as an HTTP 404 on every row (SGLang names an adapter BASE:ADAPTER, unlisted)
            raise ModelUnavailableError(f"{self.base_url} does not serve a model named {model!r}; it serves "
                                        f"{', '.join(repr(i) for i in ids)}: set the name with {option} (vLLM serves "
                                        "a LoRA adapter under the name given in --lora-modules NAME=DIR)")
        self.model_id = str(model)
        entry = next((m for m in info if m.get("id") == model), {})
        self.extensions = entry.get("owned_by") == "editlens"
        #: the server's dialect (editlens, vllm, sglang; None: another OpenAI-compatible server), from owned_by
        owner = entry.get("owned_by") or next((m.get("owned_by") for m in info  # SGLang's BASE:ADAPTER, unlisted
                                               if str(model).startswith(f"{m.get('id')}:")), None)
        self.dialect = owner if owner in ("editlens", "vllm", "sglang") else None
        # What the server says it serves goes into cache keys: a new checkpoint
        # behind the same name must not be answered from old cache rows.
        served = {k: entry[k] for k in ("root", "parent", "revision", "owned_by") if entry.get(k) is not None}
        self.revision = json.dumps(served, sort_keys=True, default=str) if served else None

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def _discover(self) -> list[dict[str, Any]]:
        """The server's model list; a URL given without ``/v1`` is retried with it."""
        status, info = self._models(self.base_url)
        if status == 404 and not self.base_url.endswith("/v1"):
            status_v1, info_v1 = self._models(self.base_url + "/v1")
            if status_v1 < 400:
                self.base_url += "/v1"
                return info_v1
            raise ModelUnavailableError(f"{self.base_url}/models: HTTP 404; OpenAI-compatible servers answer under "
                                        f"/v1: pass --vlm {self.base_url}/v1")
        return info

    def _models(self, base: str) -> tuple[int, list[dict[str, Any]]]:
        try:
            r = httpx.get(f"{base}/models", headers=self._headers(), timeout=min(self.timeout, 30))
        except httpx.HTTPError as exc:
            raise ModelUnavailableError(f"cannot reach {base} ({type(exc).__name__}: {exc}); "
                                        "is the server running, and does the URL end in /v1?") from exc
        if r.status_code == 401:
            raise ModelUnavailableError(f"{base}: 401 unauthorised; set the API key in ${self.api_key_env}")
        if r.status_code >= 400:
            return r.status_code, []
        try:
            data = r.json()
            models = data.get("data") if isinstance(data, dict) else None
            return r.status_code, [m for m in models or [] if isinstance(m, dict)]
        except ValueError:
            return r.status_code, []

    def describe(self) -> dict[str, Any]:
        # concurrency, time-out and retries change how answers are fetched, not
        # what they are: they stay out of the settings that key stored results
        return {"backend": self.name, "url": self.base_url, "model": self.model_id, "served": self.revision}

    def provenance(self) -> dict[str, Any]:
        """What the run manifest pins (never part of result identity): the URL, the served
        model name and the server's whole ``/v1/models`` answer."""
        out: dict[str, Any] = {"backend": self.name, "url": self.base_url, "served_model": self.model_id,
                               "models_answer": self.models_answer}
        if self.capabilities:
            out["capabilities"] = self.capabilities
        return out

    def _candidate_ids(self, candidates: tuple[str, ...]) -> dict[str, dict[int, str]] | None:
        """vLLM: each candidate word's first-token ids (the word, capitalised and lower case, bare and after
        a space; a first token shared with another candidate left out, as in-process) and their texts, from
        the engine's /tokenize and /detokenize, to ask for exactly (``logprob_token_ids``). ``None`` where
        the engine cannot tell them (no tokenizer endpoints): its top log-probabilities are read then."""
        memo = self.__dict__.setdefault("_cand_memo", {})
        if candidates not in memo:
            from editlens.backends.engine import engine_detokenize, engine_tokenize

            try:
                firsts: dict[str, set[int]] = {}
                for c in candidates:
                    forms = dict.fromkeys((c, c.capitalize(), c.lower()))
                    firsts[c] = {ids[0] for f in forms for v in (f, " " + f)
                                 if (ids := engine_tokenize(self, v))}
                out: dict[str, dict[int, str]] = {}
                for c in candidates:
                    own = firsts[c] - set().union(*(firsts[o] for o in candidates if o != c))
                    out[c] = {t: engine_detokenize(self, [t]) for t in sorted(own)}
                memo[candidates] = out
            except ModelUnavailableError:
                memo[candidates] = None
        return memo[candidates]

    def generate(self, requests: Sequence[ChatRequest]) -> list[Generation]:
        if not requests:
            return []
        if self.dialect == "vllm":  # the candidates' token ids, asked once per candidate set
            for r in requests:
                if r.candidates and not r.logprob_tokens:
                    self._candidate_ids(r.candidates)
        return run_async(lambda: self._generate_all(requests))

    async def _generate_all(self, requests: Sequence[ChatRequest]) -> list[Generation]:
        sem = asyncio.Semaphore(self.concurrency)
        limits = httpx.Limits(max_connections=self.concurrency, max_keepalive_connections=self.concurrency)
        async with httpx.AsyncClient(timeout=self.timeout, limits=limits, headers=self._headers()) as client:
            return list(await asyncio.gather(*(self._one(client, sem, r) for r in requests)))

    async def _one(self, client: httpx.AsyncClient, sem: asyncio.Semaphore, req: ChatRequest) -> Generation:
        body = request_body(req, self.model_id, self.dialect)
        exact = self._candidate_ids(req.candidates) if (self.dialect == "vllm" and req.candidates
                                                        and not req.logprob_tokens) else None
        if exact and all(exact.values()):  # vLLM: exactly these ids at every step (logprob_token_ids)
            body["logprob_token_ids"] = sorted({t for ids in exact.values() for t in ids})
            body["return_token_ids"] = True
        else:
            exact = None
        last = "no attempt"
        async with sem:
            for attempt in range(self.max_retries + 1):
                self.calls += 1
                try:
                    r = await client.post(f"{self.base_url}/chat/completions", json=body)
                except (httpx.TimeoutException, httpx.TransportError) as exc:
                    last = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                else:
                    if r.status_code < 400:
                        try:
                            data = r.json()
                        except ValueError:
                            # a proxy's error page or a cut-off body: a fault of the
                            # transport, retried and never cached as an answer
                            last = f"HTTP {r.status_code}: response is not JSON ({r.text[:80]!r})"
                        else:
                            gen = parse_response(data, req.candidates)
                            if gen.error is None:
                                return self._with_source(gen, req, exact)
                            last = f"HTTP {r.status_code}: {gen.error}"
                    else:
                        last = f"HTTP {r.status_code}: {r.text[:300]}"
                        if r.status_code not in RETRY_STATUS:
                            return Generation(None, error=last)
                        retry_after = r.headers.get("retry-after")
                        if attempt < self.max_retries and retry_after and retry_after.replace(".", "", 1).isdigit():
                            await asyncio.sleep(min(float(retry_after), 60.0))
                            continue
                if attempt < self.max_retries:
                    # exponential backoff with jitter, so many clients do not retry in lockstep
                    await asyncio.sleep(self.backoff * (2**attempt) * (0.5 + random.random()))
        return Generation(None, error=f"gave up after {self.max_retries + 1} attempts: {last}")

    def _with_source(self, gen: Generation, req: ChatRequest, exact: dict[str, dict[int, str]] | None) -> Generation:
        """``gen`` with its candidates read from the ids asked for (vLLM) and where they came from."""
        import math

        if exact is not None:
            for step in gen.steps or []:
                found: dict[str, float | None] = {}
                for c, ids in exact.items():
                    texts = set(ids.values())
                    hits = [lp for t, lp in step.top if t in texts and lp is not None and lp > -9999.0]
                    if hits:
                        m = max(hits)
                        found[c] = m + math.log(sum(math.exp(h - m) for h in hits))
                    else:
                        found[c] = None
                step.candidates = found
        if req.candidates or req.logprob_tokens:
            gen.logprob_source = logprob_source(self.dialect, exact is not None)
        return gen


def logprob_source(dialect: str | None, exact_ids: bool) -> str:
    """Where an engine's candidate log-probabilities come from (recorded with each result)."""
    if dialect == "editlens":
        return "exact (editlens serve: the candidates' log-probabilities)"
    if dialect == "vllm" and exact_ids:
        return "engine ids (vLLM logprob_token_ids: exact log-probabilities of the candidates' first tokens)"
    what = "engine top-20 log-probabilities (a candidate outside them has none)"
    return what + (", after the engine's penalties" if dialect == "sglang" else "")


class PooledBackend:
    """Several OpenAI-compatible engines serving one model (``--vlm URL --vlm URL``): requests go
    round robin over the healthy ones; a request an engine gave up on (time-outs, 5xx after its
    retries) is sent to another, and that engine is left out for ``cooldown`` seconds. A request
    every engine gave up on is *failed* (redone on rerun). An engine unreachable at start is left
    out with a warning; none reachable, or engines serving different models, is an error."""

    name = "openai-http"
    capabilities: dict[str, Any] | None = None

    def __init__(self, urls: Sequence[str], cooldown: float = 30.0, **options: Any) -> None:
        import time
        import warnings

        self.members: list[OpenAIBackend] = []
        down: list[str] = []
        for url in urls:
            try:
                self.members.append(OpenAIBackend(url, **options))
            except ModelUnavailableError as exc:
                if "cannot reach" not in str(exc):
                    raise
                down.append(f"{url} ({exc})")
        if not self.members:
            raise ModelUnavailableError("no engine of --vlm answers: " + "; ".join(down))
        for url in down:
            warnings.warn(f"engine left out (unreachable at start): {url}", stacklevel=2)
        first = self.members[0]
        for m in self.members[1:]:
            if (m.model_id, m.revision) != (first.model_id, first.revision):
                raise ModelUnavailableError(f"{m.base_url} serves {m.model_id!r} ({m.revision}) but {first.base_url} "
                                            f"serves {first.model_id!r} ({first.revision}): the engines of one judge "
                                            "must serve the same model")
        for m in self.members[1:]:
            if m.dialect != first.dialect:
                raise ModelUnavailableError(f"{m.base_url} is a {m.dialect or 'other'} server but {first.base_url} a "
                                            f"{first.dialect or 'other'} one: the engines of one judge must be of "
                                            "one kind (they return log-probabilities differently)")
        self.model_id, self.revision, self.extensions = first.model_id, first.revision, first.extensions
        self.dialect = first.dialect
        self.models_answer = first.models_answer
        self.cooldown = float(cooldown)
        self._down_until = {id(m): 0.0 for m in self.members}
        self._next = 0
        self._clock = time.monotonic
        self.unreachable = down

    @property
    def calls(self) -> int:
        return sum(m.calls for m in self.members)

    @property
    def base_url(self) -> str:
        return " ".join(m.base_url for m in self.members)

    def describe(self) -> dict[str, Any]:
        # which engines answered does not change the answers: the model and its revision key results
        return {"backend": self.name, "url": "pool", "model": self.model_id, "served": self.revision}

    def provenance(self) -> dict[str, Any]:
        out: dict[str, Any] = {"backend": self.name, "urls": [m.base_url for m in self.members],
                               "unreachable_at_start": self.unreachable, "served_model": self.model_id,
                               "models_answer": self.models_answer}
        if self.capabilities:
            out["capabilities"] = self.capabilities
        return out

    def leave_out(self, member: OpenAIBackend) -> None:
        """Send ``member`` nothing for ``cooldown`` seconds (it gave up on a request)."""
        self._down_until[id(member)] = self._clock() + self.cooldown

    def health(self) -> dict[str, bool]:
        """``{url: healthy}`` now."""
        now = self._clock()
        return {m.base_url: self._down_until[id(m)] <= now for m in self.members}

    def generate(self, requests: Sequence[ChatRequest]) -> list[Generation]:
        if not requests:
            return []
        for m in self.members:
            if m.dialect == "vllm":  # the candidates' token ids, asked once per candidate set and engine
                for r in requests:
                    if r.candidates and not r.logprob_tokens:
                        m._candidate_ids(r.candidates)
        return run_async(lambda: self._generate_all(requests))

    async def _generate_all(self, requests: Sequence[ChatRequest]) -> list[Generation]:
        results: list[Generation | None] = [None] * len(requests)
        pending = list(range(len(requests)))
        tried: dict[int, set[int]] = {i: set() for i in pending}
        while pending:
            now = self._clock()
            healthy = [m for m in self.members if self._down_until[id(m)] <= now] or list(self.members)
            plan: dict[int, list[int]] = {}
            for i in pending:  # round robin over the healthy engines this request has not tried
                options = [m for m in healthy if id(m) not in tried[i]] or \
                          [m for m in self.members if id(m) not in tried[i]]
                if not options:
                    continue
                m = options[self._next % len(options)]
                self._next += 1
                plan.setdefault(self.members.index(m), []).append(i)
            if not plan:
                break
            answers = await asyncio.gather(*(self.members[k]._generate_all([requests[i] for i in idx])
                                             for k, idx in plan.items()))
            pending = []
            for (k, idx), gens in zip(plan.items(), answers):
                m = self.members[k]
                for i, gen in zip(idx, gens):
                    results[i] = gen
                    tried[i].add(id(m))
                    if gen.error is not None and gen.error.startswith("gave up after"):
                        self.leave_out(m)
                        pending.append(i)
        return [g if g is not None else Generation(None, error="no engine left to ask") for g in results]

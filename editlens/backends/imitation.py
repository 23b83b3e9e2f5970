"""``editlens serve --imitate vllm|sglang``: the test double answering as the
engine does, not as editlens would like it to.

Plain ``editlens serve`` answers with editlens-only fields (``candidates``,
``token_logprobs`` for ``logprob_tokens``) and exact log-probabilities of any
token asked for. vLLM and SGLang do not; an evaluator tested only against the
plain double can be right there and wrong on the real engine. An imitation
keeps the engine's behaviour where it changes what an evaluator reads,
learnt from the engines' sources:

vLLM (``vllm/entrypoints/openai/chat_completion/protocol.py``,
``.../chat_completion/serving.py``, ``vllm/config/model.py``):

* ``top_logprobs`` above ``--max-logprobs`` (20 by default) is refused with a
  400 ("Requested sample logprobs of N, which is greater than max allowed: 20");
* ``logprob_token_ids`` (a list of token ids, needs ``logprobs: true``) returns
  the log-probabilities of exactly those ids, beside the sampled token, in
  each step's ``top_logprobs`` (``top_logprobs`` is then not used);
* ``return_tokens_as_token_ids`` writes every token as ``"token_id:N"``;
  ``return_token_ids`` adds the choice's ``token_ids``;
* omitted ``temperature``/``top_p``/``top_k``/``repetition_penalty`` come from
  the model's ``generation_config.json`` (``--generation-config auto``), else
  OpenAI's defaults (temperature 1: an omitted temperature samples);
* the repetition penalty counts prompt and generated tokens (as transformers);
  log-probabilities are the model's, before penalties (``--logprobs-mode``
  ``raw_logprobs``); seeds are honoured;
* ``/v1/models`` lists ``max_model_len`` for the base model only, not for LoRA
  adapters (``vllm/entrypoints/openai/models/serving.py``).

SGLang (``python/sglang/srt/entrypoints/openai/protocol.py``,
``serving_chat.py``, ``python/sglang/srt/server_args.py``,
``python/sglang/srt/sampling/penaltylib/repetition_penalty.py``):

* no ``add_generation_prompt`` request field: ``false`` is dropped and the
  generation prompt is always added;
* no ``logprob_token_ids`` in chat requests; ``top_logprobs`` has no cap in
  the protocol; ``return_token_ids`` adds the choice's ``token_ids``;
* omitted sampling fields come from ``generation_config.json``
  (``--sampling-defaults model``, the default);
* the repetition penalty counts generated tokens only, and the
  log-probabilities it returns are taken after the penalties;
* a request's ``seed`` is used only when the server runs with
  ``--enable-deterministic-inference`` (``/get_server_info`` says whether).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from editlens.backends.types import ChatRequest

#: sampling fields both engines fill from ``generation_config.json`` when a request omits them
GENERATION_DEFAULT_FIELDS = ("temperature", "top_p", "top_k", "repetition_penalty")
#: OpenAI's (and both engines') values when neither the request nor the model's generation config gives one
OPENAI_DEFAULTS = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0}


@dataclass(frozen=True)
class Imitation:
    """What an engine does differently from plain ``editlens serve``."""

    engine: str
    #: largest ``top_logprobs`` (``None``: no cap, up to the vocabulary)
    max_logprobs: int | None
    #: the request field ``logprob_token_ids`` is honoured (vLLM)
    logprob_token_ids: bool
    #: ``add_generation_prompt: false`` is honoured (vLLM); SGLang drops it
    honours_add_generation_prompt: bool
    #: the repetition penalty counts the prompt's tokens too (vLLM, transformers); SGLang: generated only
    penalty_counts_prompt: bool
    #: log-probabilities are returned after the penalties (SGLang), not the model's own (vLLM)
    logprobs_after_penalties: bool
    #: a request's seed is used (vLLM; SGLang only with --enable-deterministic-inference)
    honours_seed: bool
    #: ``return_tokens_as_token_ids`` is honoured (vLLM)
    tokens_as_ids: bool

    def quirks(self) -> dict[str, str]:
        """What the local model's generation must do differently (read by :mod:`editlens.backends.stepping`)."""
        return {"penalty": "all" if self.penalty_counts_prompt else "generated",
                "logprobs": "after-penalties" if self.logprobs_after_penalties else "raw"}

    def describe(self) -> dict[str, Any]:
        return {"engine": self.engine, "max_logprobs": self.max_logprobs, "logprob_token_ids": self.logprob_token_ids,
                "add_generation_prompt_false": self.honours_add_generation_prompt,
                "penalty_counts_prompt": self.penalty_counts_prompt,
                "logprobs_after_penalties": self.logprobs_after_penalties, "seed": self.honours_seed}


def imitation(engine: str, deterministic: bool = False, max_logprobs: int = 20) -> Imitation:
    """The imitation of ``engine`` (``vllm`` or ``sglang``). ``deterministic``:
    SGLang started with ``--enable-deterministic-inference`` (seeds honoured);
    ``max_logprobs``: vLLM's ``--max-logprobs``."""
    if engine == "vllm":
        return Imitation("vllm", max_logprobs, True, True, True, False, True, True)
    if engine == "sglang":
        return Imitation("sglang", None, False, False, False, True, deterministic, False)
    raise ValueError(f"--imitate must be vllm or sglang, got {engine!r}")


def generation_defaults(backend: Any) -> dict[str, Any]:
    """The sampling fields the served model's ``generation_config.json`` sets
    (what the engines fill omitted request fields from); only values the file
    sets, not transformers' own defaults."""
    config = getattr(getattr(backend, "model", None), "generation_config", None)
    if config is None:
        return {}
    try:
        diff = config.to_diff_dict()
    except Exception:  # a config transformers cannot compare: nothing set
        return {}
    out = {k: diff[k] for k in GENERATION_DEFAULT_FIELDS if diff.get(k) is not None}
    if "top_k" in out and not out["top_k"]:
        out["top_k"] = -1
    return out


def engine_body(body: dict[str, Any], imitated: Imitation, defaults: dict[str, Any]) -> dict[str, Any]:
    """The request as the engine reads it: editlens-only fields gone, omitted
    sampling fields filled from the model's generation config, then OpenAI's
    defaults; SGLang's dropped fields dropped."""
    out = {k: v for k, v in body.items() if k not in ("candidates", "logprob_tokens")}
    for name in GENERATION_DEFAULT_FIELDS:
        if out.get(name) is None:
            out[name] = defaults.get(name, OPENAI_DEFAULTS[name])
    if not imitated.honours_add_generation_prompt:
        out.pop("add_generation_prompt", None)
    if not imitated.honours_seed:
        out.pop("seed", None)
    if not imitated.logprob_token_ids:
        out.pop("logprob_token_ids", None)
    return out


def check_logprobs(body: dict[str, Any], imitated: Imitation, vocab: int | None) -> str | None:
    """The engine's refusal of the log-probability fields, or ``None``."""
    top = body.get("top_logprobs")
    if isinstance(top, int) and not isinstance(top, bool) and body.get("logprobs"):
        cap = imitated.max_logprobs if imitated.max_logprobs is not None else vocab
        if cap is not None and top > cap:
            return f"Requested sample logprobs of {top}, which is greater than max allowed: {cap}"
    ids = body.get("logprob_token_ids")
    if ids is not None and imitated.logprob_token_ids:
        if not isinstance(ids, list) or not ids:
            return "`logprob_token_ids` must not be an empty list."
        if not body.get("logprobs"):
            return "when using `logprob_token_ids`, `logprobs` must be set to true."
        if not all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < (vocab or 2**31) for t in ids):
            return "`logprob_token_ids` must be token ids of this model's vocabulary"
    return None


def with_token_ids(req: ChatRequest, body: dict[str, Any]) -> ChatRequest:
    """``req`` asking for the log-probabilities of vLLM's ``logprob_token_ids``."""
    ids = body.get("logprob_token_ids")
    if not ids:
        return req
    return replace(req, logprob_tokens=tuple(int(t) for t in ids))


def logprobs_json(gen: Any, body: dict[str, Any], imitated: Imitation, decode: Any = None) -> dict[str, Any]:
    """``choice.logprobs`` as the engine writes it (no editlens fields);
    ``decode(token id)``: a token's text (for the ids a request asked for)."""
    as_ids = imitated.tokens_as_ids and bool(body.get("return_tokens_as_token_ids"))
    exact = imitated.logprob_token_ids and bool(body.get("logprob_token_ids"))

    def name(token_id: int | None, text: str) -> str:
        return f"token_id:{token_id}" if as_ids and token_id is not None else text

    def entry(token: str, lp: float | None) -> dict[str, Any]:
        value = -9999.0 if lp is None or not math.isfinite(lp) else max(lp, -9999.0)
        return {"token": token, "logprob": value, "bytes": list(token.encode("utf-8", errors="replace"))}

    content = []
    for s in gen.steps or []:
        if exact:  # vLLM: the sampled token, then exactly the ids asked for
            top = [entry(name(s.token_id, s.token), s.logprob)]
            top += [entry(name(k, decode(k) if decode is not None else f"token_id:{k}"), v)
                    for k, v in s.ids.items() if k != s.token_id]
        else:
            ids = s.top_ids if len(s.top_ids) == len(s.top) else [None] * len(s.top)
            top = [entry(name(i, text), lp) for (text, lp), i in zip(s.top, ids)]
        content.append({**entry(name(s.token_id, s.token), s.logprob), "top_logprobs": top})
    return {"content": content}

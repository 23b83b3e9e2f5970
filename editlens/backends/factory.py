"""Build a backend from a reference: an ``http(s)://`` URL is an
OpenAI-compatible server; anything else is a model for the local backend.
Backends are shared per (reference, settings) through the model pool
(:mod:`editlens.models.pool`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, astuple, dataclass
from typing import Any

from editlens.backends.cache import CachedBackend, ResponseCache


@dataclass(frozen=True)
class HttpSettings:
    """How an HTTP backend fetches answers (CLI: ``--timeout``, ``--max-retries``, ``--concurrency``): seconds a
    request may take before it is retried, retries after 429/5xx/time-outs, requests in flight at once. Passed
    down with the judge's settings (:class:`editlens.runner.judge_settings.JudgeSettings`), never set for the
    whole process; how answers are fetched, not what they are, so it keys no stored result.

    >>> HttpSettings(timeout=30).timeout
    30.0
    """

    timeout: float = 120.0
    max_retries: int = 5
    concurrency: int = 8

    def __post_init__(self) -> None:
        if not (isinstance(self.timeout, (int, float)) and self.timeout > 0 and math.isfinite(self.timeout)):
            raise ValueError(f"--timeout must be a positive number of seconds, got {self.timeout}")
        if int(self.max_retries) != self.max_retries or self.max_retries < 0:
            raise ValueError(f"--max-retries must be a whole number, 0 or more, got {self.max_retries}")
        if int(self.concurrency) != self.concurrency or self.concurrency < 1:
            raise ValueError(f"--concurrency must be a whole number, at least 1, got {self.concurrency}")
        object.__setattr__(self, "timeout", float(self.timeout))
        object.__setattr__(self, "max_retries", int(self.max_retries))
        object.__setattr__(self, "concurrency", int(self.concurrency))

    @classmethod
    def of(cls, timeout: float | None = None, max_retries: int | None = None,
           concurrency: int | None = None) -> HttpSettings:
        """The settings with what is given (``None``: the built-in value)."""
        given: dict[str, Any] = {"timeout": timeout, "max_retries": max_retries, "concurrency": concurrency}
        return cls(**{k: v for k, v in given.items() if v is not None})


def create_backend(ref: str, *, device: str = "auto", dtype: str = "auto", batch_size: int = 8,
                   cache: bool | str = True, http_model: str | None = None, api_key_env: str = "EDITLENS_API_KEY",
                   models: dict[str, str] | None = None,
                   http: HttpSettings | Mapping[str, Any] | None = None,
                   model_option: str = "--vlm-model",
                   needs: Any = None, who: str = "this evaluator", engine_option: str = "--vlm") -> Any:
    """``cache``: True for the default cache file, a path, or False for none.
    ``http``: how an HTTP backend fetches answers (an :class:`HttpSettings` or its fields as a mapping, the
    form an evaluator's options hold; ``None``: the built-in values).
    ``needs`` (an :class:`~editlens.backends.engine.EngineNeeds`): behind a URL, what the caller ``who``
    needs of the engine, checked once here (errors name ``engine_option`` and ``model_option``)."""
    fetch = http if isinstance(http, HttpSettings) else HttpSettings(**http) if http else HttpSettings()
    local = not ref.startswith(("http://", "https://"))
    if local:  # the policy's decision, so "auto" and the dtype it means share one loaded model
        from editlens.models.precision import decide

        prec = decide(dtype, device)
        device, dtype = prec.device, prec.dtype
    key = ("backend", ref, device, dtype, batch_size, str(cache), http_model, api_key_env,
           astuple(fetch), tuple(sorted((models or {}).items())))

    def load() -> Any:
        if not local:
            from editlens.backends.http import OpenAIBackend, PooledBackend

            urls = ref.split()  # --vlm URL --vlm URL: several engines of one model, round robin
            backend: Any = (PooledBackend(urls, model=http_model, api_key_env=api_key_env, option=model_option,
                                         **asdict(fetch))
                            if len(urls) > 1 else
                            OpenAIBackend(ref, model=http_model, api_key_env=api_key_env, option=model_option,
                                         **asdict(fetch)))
        else:
            from editlens.models.loader import load_model

            backend = load_model(ref, kind="vlm", device=device, dtype=dtype, models=models, batch_size=batch_size)
        if cache:
            backend = CachedBackend(backend, ResponseCache(None if cache is True else cache))
        return backend

    from editlens.models import pool

    backend = pool.shared(key, load)
    if needs is not None and not local:
        from editlens.backends.engine import check_engine

        check_engine(backend, needs, who, engine_option)
    return backend

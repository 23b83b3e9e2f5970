"""Build a backend from a reference: an ``http(s)://`` URL is an
OpenAI-compatible server; anything else is a model for the local backend.
Backends are shared per (reference, settings) through the model pool
(:mod:`editlens.models.pool`)."""

from __future__ import annotations

from typing import Any

from editlens.backends.cache import CachedBackend, ResponseCache

#: How HTTP backends fetch answers unless a caller says otherwise (CLI:
#: ``--timeout``, ``--max-retries``, ``--concurrency``).
HTTP_BUILTIN: dict[str, Any] = {"timeout": 120.0, "max_retries": 5, "concurrency": 8}
HTTP_DEFAULTS: dict[str, Any] = dict(HTTP_BUILTIN)


def set_http_defaults(*, timeout: float | None = None, max_retries: int | None = None,
                      concurrency: int | None = None) -> dict[str, Any]:
    """Change how HTTP backends created from now on fetch answers; returns the new defaults.

    >>> set_http_defaults(timeout=30)["timeout"]
    30.0
    >>> _ = set_http_defaults(timeout=120)
    """
    if timeout is not None:
        if not timeout > 0:
            raise ValueError(f"--timeout must be a positive number of seconds, got {timeout}")
        HTTP_DEFAULTS["timeout"] = float(timeout)
    if max_retries is not None:
        if max_retries < 0:
            raise ValueError(f"--max-retries must be 0 or more, got {max_retries}")
        HTTP_DEFAULTS["max_retries"] = int(max_retries)
    if concurrency is not None:
        if concurrency < 1:
            raise ValueError(f"--concurrency must be at least 1, got {concurrency}")
        HTTP_DEFAULTS["concurrency"] = int(concurrency)
    return dict(HTTP_DEFAULTS)


def create_backend(ref: str, *, device: str = "auto", dtype: str = "auto", batch_size: int = 8,
                   cache: bool | str = True, http_model: str | None = None, api_key_env: str = "EDITLENS_API_KEY",
                   concurrency: int | None = None, models: dict[str, str] | None = None,
                   timeout: float | None = None, max_retries: int | None = None, model_option: str = "--vlm-model",
                   needs: Any = None, who: str = "this evaluator", engine_option: str = "--vlm") -> Any:
    """``cache``: True for the default cache file, a path, or False for none.
    ``concurrency``, ``timeout``, ``max_retries``: HTTP only; ``None`` takes :data:`HTTP_DEFAULTS`.
    ``needs`` (an :class:`~editlens.backends.engine.EngineNeeds`): behind a URL, what the caller ``who``
    needs of the engine, checked once here (errors name ``engine_option`` and ``model_option``)."""
    http: dict[str, Any] = {"concurrency": concurrency if concurrency is not None else HTTP_DEFAULTS["concurrency"],
            "timeout": timeout if timeout is not None else HTTP_DEFAULTS["timeout"],
            "max_retries": max_retries if max_retries is not None else HTTP_DEFAULTS["max_retries"]}
    local = not ref.startswith(("http://", "https://"))
    if local:  # the policy's decision, so "auto" and the dtype it means share one loaded model
        from editlens.models.precision import decide

        prec = decide(dtype, device)
        device, dtype = prec.device, prec.dtype
    key = ("backend", ref, device, dtype, batch_size, str(cache), http_model, api_key_env,
           tuple(sorted(http.items())), tuple(sorted((models or {}).items())))

    def load() -> Any:
        if not local:
            from editlens.backends.http import OpenAIBackend, PooledBackend

            urls = ref.split()  # --vlm URL --vlm URL: several engines of one model, round robin
            backend: Any = (PooledBackend(urls, model=http_model, api_key_env=api_key_env, option=model_option, **http)
                            if len(urls) > 1 else
                            OpenAIBackend(ref, model=http_model, api_key_env=api_key_env, option=model_option, **http))
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

"""Build a backend from a reference: an ``http(s)://`` URL is an
OpenAI-compatible server; anything else is a model for the local backend.
Backends are shared per (reference, settings) within a process."""

from __future__ import annotations

import threading
from typing import Any

from editlens.backends.cache import CachedBackend, ResponseCache

_POOL: dict[tuple, Any] = {}
_LOCK = threading.Lock()


def create_backend(ref: str, *, device: str = "auto", dtype: str = "auto", batch_size: int = 8,
                   cache: bool | str = True, http_model: str | None = None, api_key_env: str = "EDITLENS_API_KEY",
                   concurrency: int = 8, models: dict[str, str] | None = None) -> Any:
    """``cache``: True for the default cache file, a path, or False for none."""
    key = (ref, device, dtype, batch_size, str(cache), http_model, api_key_env, concurrency)
    with _LOCK:
        if key in _POOL:
            return _POOL[key]
    if ref.startswith(("http://", "https://")):
        from editlens.backends.http import OpenAIBackend

        backend: Any = OpenAIBackend(ref, model=http_model, api_key_env=api_key_env, concurrency=concurrency)
    else:
        from editlens.backends.local import TransformersBackend

        backend = TransformersBackend(ref, device=device, dtype=dtype, batch_size=batch_size, models=models)
    if cache:
        backend = CachedBackend(backend, ResponseCache(None if cache is True else cache))
    with _LOCK:
        _POOL.setdefault(key, backend)
        return _POOL[key]


def clear_backends() -> None:
    with _LOCK:
        _POOL.clear()

"""The response cache: a rerun of the same evaluation makes no model calls.

Keyed by backend, model id and revision (for HTTP: what the server reports it
serves; for local models: also device and dtype), the exact prompt text,
image content hashes and generation settings (:func:`request_key`). It is a
table of the one SQLite cache layer (:mod:`editlens.core.cache`: safe for
several processes, never costs an answer when it cannot be written).
Answers with a transport error are not cached (they are retried next time;
an empty answer from a server is one); refusals, and the empty answer of a
local model that stopped at once, are model outputs and are cached as such.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Sequence

from editlens.backends.types import Backend, ChatRequest, Generation, request_key
from editlens.core.cache import SqliteCache
from editlens.paths import cache_dir


def default_cache_path() -> Path:
    return cache_dir() / "responses.sqlite"


class ResponseCache(SqliteCache):
    """Cached answers (:class:`Generation`) in one SQLite file.

    Args:
        path: the file (default: ``responses.sqlite`` in the user cache folder).
        timeout: seconds to wait for another process's lock before giving up
            writing (answers are then returned uncached, with one warning).
    """

    def __init__(self, path: str | Path | None = None, timeout: float = 10.0) -> None:
        super().__init__(Path(path) if path else default_cache_path(), "responses", what="response cache",
                         hint="Pass --cache PATH for another file, or --cache none.", value_column="response",
                         columns=("backend", "model", "created"), timeout=timeout)

    def encode(self, value: Generation) -> str:
        return json.dumps(value.to_dict())

    def decode(self, text: str) -> Generation:
        g = Generation.from_dict(json.loads(text))
        g.cached = True
        return g

    def put_many(self, items: Sequence[tuple[Any, ...]] | dict[str, Any]) -> bool:
        """Store ``(key, backend name, model id, Generation)`` tuples."""
        if isinstance(items, dict):
            return super().put_many(items)
        return super().put_many([(k, g, b, m, time.time()) for k, b, m, g in items])


class CachedBackend:
    """Wraps a backend: answers found in the cache cost no model call."""

    def __init__(self, backend: Backend, cache: ResponseCache) -> None:
        self.backend = backend
        self.cache = cache
        self.name = backend.name
        self.model_id = backend.model_id
        self.revision = backend.revision
        self.hits = 0
        self.misses = 0

    def describe(self) -> dict[str, Any]:
        return self.backend.describe()

    def provenance(self) -> dict[str, Any]:
        from editlens.backends.types import backend_provenance

        return backend_provenance(self.backend)

    def generate(self, requests: Sequence[ChatRequest]) -> list[Generation]:
        keys = [request_key(self.backend, r) for r in requests]
        found = self.cache.get_many(list(dict.fromkeys(keys)))
        todo = [i for i, k in enumerate(keys) if k not in found]
        self.hits += len(requests) - len(todo)
        self.misses += len(todo)
        if todo:
            # identical requests in one batch are asked once
            first: dict[str, int] = {}
            for i in todo:
                first.setdefault(keys[i], i)
            uniq = list(first.values())
            gens = self.backend.generate([requests[i] for i in uniq])
            new = {keys[i]: g for i, g in zip(uniq, gens)}
            self.cache.put_many([(k, self.backend.name, self.backend.model_id, g) for k, g in new.items()
                                 if g.error is None])
            found.update(new)
        return [found[k] for k in keys]

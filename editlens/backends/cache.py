"""SQLite response cache: a rerun of the same evaluation makes no model calls.

Keyed by backend, model id and revision, the exact prompt text, image
content hashes and generation settings (:func:`request_key`). WAL mode and
a busy timeout make it safe for several processes writing at once; a
corrupt or locked file raises one clear error instead of losing results.
Answers with a transport error are not cached (they are retried next time);
refusals and empty answers are model outputs and are cached as such.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Sequence

from editlens.backends.types import Backend, ChatRequest, Generation, request_key
from editlens.errors import EditlensError
from editlens.paths import cache_dir


def default_cache_path() -> Path:
    return cache_dir() / "responses.sqlite"


class ResponseCache:
    def __init__(self, path: str | Path | None = None, timeout: float = 60.0) -> None:
        self.path = Path(path) if path else default_cache_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        try:
            self.conn = sqlite3.connect(self.path, timeout=timeout, check_same_thread=False)
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute(f"PRAGMA busy_timeout={int(timeout * 1000)}")
            self.conn.execute("CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, backend TEXT, model TEXT,"
                              " created REAL, response TEXT NOT NULL)")
            self.conn.execute("SELECT count(*) FROM responses").fetchone()
        except sqlite3.OperationalError as exc:
            raise EditlensError(f"{self.path}: the response cache is locked or unusable ({exc}). "
                                "Another process may hold it; retry, or pass a different --cache path.") from exc
        except sqlite3.DatabaseError as exc:
            raise EditlensError(f"{self.path}: the response cache is corrupt ({exc}). Move it away to start a "
                                "fresh cache (cached answers will then be recomputed).") from exc

    def get_many(self, keys: Sequence[str]) -> dict[str, Generation]:
        if not keys:
            return {}
        out = {}
        with self._lock:
            for i in range(0, len(keys), 500):
                part = list(keys[i : i + 500])
                q = f"SELECT key, response FROM responses WHERE key IN ({','.join('?' * len(part))})"
                for key, resp in self.conn.execute(q, part).fetchall():
                    g = Generation.from_dict(json.loads(resp))
                    g.cached = True
                    out[key] = g
        return out

    def put_many(self, items: Sequence[tuple[str, str, str, Generation]]) -> None:
        rows = [(k, b, m, time.time(), json.dumps(g.to_dict())) for k, b, m, g in items]
        with self._lock:
            try:
                with self.conn:
                    self.conn.executemany("INSERT OR REPLACE INTO responses VALUES (?,?,?,?,?)", rows)
            except sqlite3.OperationalError as exc:
                raise EditlensError(f"{self.path}: could not write to the response cache ({exc})") from exc

    def __len__(self) -> int:
        with self._lock:
            return int(self.conn.execute("SELECT count(*) FROM responses").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self.conn.close()


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

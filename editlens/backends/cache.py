"""SQLite response cache: a rerun of the same evaluation makes no model calls.

Keyed by backend, model id and revision (for HTTP: what the server reports it
serves; for local models: also device and dtype), the exact prompt text,
image content hashes and generation settings (:func:`request_key`). A busy
timeout makes it safe for several processes writing at once.

The cache uses SQLite's rollback journal, not WAL: WAL maps a shared-memory
file (``-shm``) into every process, and a process whose mapping goes bad
(the file truncated, replaced or on a file system turned read-only) is
killed by SIGBUS at its next access, even after its run has finished. A
cache left in WAL mode by an older editlens is switched when opened; while
another process holds it in WAL mode, this one warns and goes on without it.

A cache must never cost an answer that was already paid for: when it cannot
be written (locked for longer than the time-out, a read-only file or
folder) editlens warns once and goes on without caching; a row that cannot
be decoded is reported and recomputed. Only a corrupt file is an error,
raised when the cache is opened, before any model call.
Answers with a transport error are not cached (they are retried next time;
an empty answer from a server is one); refusals, and the empty answer of a
local model that stopped at once, are model outputs and are cached as such.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Sequence

from editlens.backends.types import Backend, ChatRequest, Generation, request_key
from editlens.errors import EditlensError
from editlens.paths import cache_dir

log = logging.getLogger("editlens.cache")

_SCHEMA = ("CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, backend TEXT, model TEXT,"
           " created REAL, response TEXT NOT NULL)")


def default_cache_path() -> Path:
    return cache_dir() / "responses.sqlite"


def _connect(path: Path, timeout: float) -> sqlite3.Connection:
    return sqlite3.connect(path, timeout=timeout, check_same_thread=False)


def _connect_readonly(path: Path, timeout: float) -> sqlite3.Connection:
    return sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=timeout, check_same_thread=False)


class _StillWal(sqlite3.OperationalError):
    """The cache is held in WAL mode by another process."""


def _rollback_journal(conn: sqlite3.Connection, timeout: float) -> None:
    """Use a rollback journal (no ``-shm`` mapping: see the module docstring).

    Leaving WAL needs the only connection to the file: another process
    opening it at the same moment is waited for (a little); one that keeps
    it open in WAL mode (an older editlens) raises :class:`_StillWal`."""
    if conn.execute("PRAGMA journal_mode").fetchone()[0].lower() == "truncate":
        return
    deadline = time.monotonic() + min(timeout, 2.0)
    conn.execute("PRAGMA busy_timeout=0")
    try:
        while True:
            try:
                if conn.execute("PRAGMA journal_mode=TRUNCATE").fetchone()[0].lower() == "truncate":
                    return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc):
                    raise
            if time.monotonic() > deadline:
                raise _StillWal("it is open in WAL mode in another process (an older editlens?), and a process "
                                "sharing its memory map can be killed by SIGBUS")
            time.sleep(0.05)
    finally:
        conn.execute(f"PRAGMA busy_timeout={int(timeout * 1000)}")


class ResponseCache:
    """Cached answers in one SQLite file.

    Args:
        path: the file (default: ``responses.sqlite`` in the user cache folder).
        timeout: seconds to wait for another process's lock before giving up
            writing (answers are then returned uncached, with one warning).
    """

    def __init__(self, path: str | Path | None = None, timeout: float = 10.0) -> None:
        self.path = Path(path) if path else default_cache_path()
        self.timeout = timeout
        self._lock = threading.Lock()
        self.writable = True
        self.conn: sqlite3.Connection | None = None
        self._warned: set[str] = set()
        self.bad_rows = 0
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.conn = self._open(timeout)
        except _StillWal as exc:
            self.writable = False
            self._warn("open", f"{self.path}: the response cache is not used ({exc}); going on without a cache. "
                               "Pass --cache PATH for another file, or --cache none.")
        except sqlite3.DatabaseError as exc:
            if not isinstance(exc, sqlite3.OperationalError):  # "file is not a database", malformed
                raise EditlensError(f"{self.path}: the response cache is corrupt ({exc}). Move it away to start a "
                                    "fresh cache (cached answers will then be recomputed).") from exc
            self._fall_back(exc)
        except OSError as exc:  # the folder cannot be created
            self._fall_back(exc)

    def _open(self, timeout: float) -> sqlite3.Connection:
        # Setting the journal mode or creating the table can meet another process
        # doing the same, and SQLite does not always wait (busy_timeout does not
        # apply to every lock), so processes opening a new cache at once retry here.
        deadline = time.monotonic() + timeout
        while True:
            conn = _connect(self.path, timeout)
            try:
                conn.execute(f"PRAGMA busy_timeout={int(timeout * 1000)}")
                _rollback_journal(conn, timeout)
                conn.execute(_SCHEMA)
                conn.execute("SELECT count(*) FROM responses").fetchone()
                return conn
            except sqlite3.OperationalError as exc:
                conn.close()
                if isinstance(exc, _StillWal) or "locked" not in str(exc) and "busy" not in str(exc) \
                        or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def _fall_back(self, exc: BaseException) -> None:
        """Go on reading what can be read, without writing."""
        if self.conn is not None:
            self.conn.close()
            self.conn = None
        self.writable = False
        try:
            if self.path.is_file():
                conn = _connect_readonly(self.path, self.timeout)
                conn.execute("SELECT count(*) FROM responses").fetchone()
                self.conn = conn
        except (sqlite3.Error, OSError):
            self.conn = None
        what = "reading cached answers only" if self.conn is not None else "without a cache"
        self._warn("open", f"{self.path}: the response cache cannot be written ({exc}); going on {what}. "
                           "Pass --cache PATH for another file, or --cache none.")

    def _warn(self, kind: str, message: str) -> None:
        if kind not in self._warned:
            self._warned.add(kind)
            log.warning("warning: %s", message)

    def get_many(self, keys: Sequence[str]) -> dict[str, Generation]:
        """Cached answers of ``keys``; a row that cannot be decoded counts as missing."""
        if not keys or self.conn is None:
            return {}
        out = {}
        with self._lock:
            for i in range(0, len(keys), 500):
                part = list(keys[i : i + 500])
                q = f"SELECT key, response FROM responses WHERE key IN ({','.join('?' * len(part))})"
                try:
                    found = self.conn.execute(q, part).fetchall()
                except sqlite3.Error as exc:
                    self._warn("read", f"{self.path}: cached answers cannot be read ({exc}); asking the model")
                    return out
                for key, resp in found:
                    try:
                        g = Generation.from_dict(json.loads(resp))
                    except (ValueError, TypeError, KeyError, AttributeError) as exc:
                        self.bad_rows += 1
                        self._warn("decode", f"{self.path}: a cached answer cannot be decoded "
                                             f"({type(exc).__name__}: {exc}); it is recomputed")
                        continue
                    g.cached = True
                    out[key] = g
        return out

    def put_many(self, items: Sequence[tuple[str, str, str, Generation]]) -> bool:
        """Store answers; ``False`` (with one warning) when the cache cannot be written."""
        if not items or not self.writable or self.conn is None:
            return False
        rows = [(k, b, m, time.time(), json.dumps(g.to_dict())) for k, b, m, g in items]
        with self._lock:
            try:
                with self.conn:
                    self.conn.executemany("INSERT OR REPLACE INTO responses VALUES (?,?,?,?,?)", rows)
            except sqlite3.Error as exc:
                # the answers are in hand: keep them, stop trying to cache
                self.writable = False
                self._warn("write", f"{self.path}: could not write to the response cache ({exc}); going on "
                                    "without caching new answers")
                return False
        return True

    def __len__(self) -> int:
        if self.conn is None:
            return 0
        with self._lock:
            return int(self.conn.execute("SELECT count(*) FROM responses").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            if self.conn is not None:
                self.conn.close()
                self.conn = None


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

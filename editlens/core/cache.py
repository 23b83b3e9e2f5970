"""The one SQLite cache layer: a map from a request key to a JSON value.

Every cache of editlens (a judge's answers, ADIEE's and EditReward's scores)
is a :class:`SqliteCache` over its own table; what differs is only how a
value is encoded (:meth:`SqliteCache.encode` / :meth:`SqliteCache.decode`).

A cache must never cost an answer that was already paid for: when it cannot
be written (locked for longer than the time-out, a read-only file or folder)
it warns once and goes on reading what it can, or without a cache; a row that
cannot be decoded is reported and recomputed. Only a corrupt file is an
error, raised when the cache is opened, before any model call. A busy
time-out makes it safe for several processes writing at once.

It uses SQLite's rollback journal, not WAL: WAL maps a shared-memory file
(``-shm``) into every process, and a process whose mapping goes bad (the file
truncated, replaced or on a file system turned read-only) is killed by
SIGBUS at its next access, even after its run has finished. A cache left in
WAL mode (by an older editlens) is switched when opened; while another
process holds it in WAL mode, this one warns and goes on without it.

>>> import tempfile, pathlib
>>> c = SqliteCache(pathlib.Path(tempfile.mkdtemp()) / "c.sqlite", "scores", what="score cache")
>>> c.put_many([("k1", {"score": 7.5})])
True
>>> c.get_many(["k1", "k2"])
{'k1': {'score': 7.5}}
"""

from __future__ import annotations

import hashlib
import json
import logging
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Sequence

from editlens.errors import EditlensError

log = logging.getLogger("editlens.cache")


def key_of(*parts: Any) -> str:
    """A cache key: a hash of JSON-able parts (dict order does not matter)."""
    return hashlib.blake2b(json.dumps(parts, sort_keys=True, default=str).encode(), digest_size=20).hexdigest()


def cache_option(value: Any) -> bool | str:
    """An evaluator's ``cache`` option: ``True``/``"default"`` (the user
    cache folder), ``False``/``"none"``, or a path.

    >>> cache_option("none"), cache_option("default"), cache_option("/tmp/c.sqlite")
    (False, True, '/tmp/c.sqlite')
    """
    if value in (True, "default", "true", "True"):
        return True
    if value in (False, None, "none", "false", "False"):
        return False
    return str(value)


def _connect(path: Path, timeout: float) -> sqlite3.Connection:
    return sqlite3.connect(path, timeout=timeout, check_same_thread=False)


def _connect_readonly(path: Path, timeout: float) -> sqlite3.Connection:
    return sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=timeout, check_same_thread=False)


class StillWal(sqlite3.OperationalError):
    """The cache is held in WAL mode by another process."""


def _rollback_journal(conn: sqlite3.Connection, timeout: float) -> None:
    """Use a rollback journal (no ``-shm`` mapping: see the module docstring).

    Leaving WAL needs the only connection to the file: another process
    opening it at the same moment is waited for (a little); one that keeps
    it open in WAL mode raises :class:`StillWal`."""
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
                raise StillWal("it is open in WAL mode in another process (an older editlens?), and a process "
                               "sharing its memory map can be killed by SIGBUS")
            time.sleep(0.05)
    finally:
        conn.execute(f"PRAGMA busy_timeout={int(timeout * 1000)}")


class SqliteCache:
    """Key -> JSON value in one table of one SQLite file.

    Args:
        path: the file.
        table: its table; the value column is ``value_column``, and
            ``columns`` are extra informative columns (filled by
            :meth:`put_many`'s extra tuple items; never read back).
        what: what the cache is, for messages ("response cache").
        hint: how to do without it, for messages ("pass --cache none").
        timeout: seconds to wait for another process's lock before giving up
            writing (values are then returned uncached, with one warning).
    """

    def __init__(self, path: str | Path, table: str, *, what: str = "cache", hint: str = "",
                 value_column: str = "value", columns: Sequence[str] = (), timeout: float = 10.0) -> None:
        self.path = Path(path)
        self.table, self.value_column, self.columns = table, value_column, tuple(columns)
        self.what, self.hint = what, hint
        self.timeout = timeout
        self._lock = threading.Lock()
        self.writable = True
        self.conn: sqlite3.Connection | None = None
        self._warned: set[str] = set()
        self.bad_rows = 0
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.conn = self._open(timeout)
        except StillWal as exc:
            self.writable = False
            self._warn("open", f"{self.path}: the {what} is not used ({exc}); going on without a cache. {hint}")
        except sqlite3.DatabaseError as exc:
            if not isinstance(exc, sqlite3.OperationalError):  # "file is not a database", malformed
                raise EditlensError(f"{self.path}: the {what} is corrupt ({exc}). Move it away to start a fresh "
                                    f"cache (what it held will then be recomputed). {hint}".rstrip()) from exc
            self._fall_back(exc)
        except OSError as exc:  # the folder cannot be created
            self._fall_back(exc)

    # -- what a value is (subclasses change these) --------------------------------------------------------

    def encode(self, value: Any) -> str:
        return json.dumps(value)

    def decode(self, text: str) -> Any:
        return json.loads(text)

    # -- opening ------------------------------------------------------------------------------------------

    @property
    def _schema(self) -> str:
        cols = "".join(f", {c}" for c in self.columns)
        return f"CREATE TABLE IF NOT EXISTS {self.table} (key TEXT PRIMARY KEY{cols}, {self.value_column} TEXT NOT NULL)"

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
                conn.execute(self._schema)
                conn.execute(f"SELECT count(*) FROM {self.table}").fetchone()
                return conn
            except sqlite3.OperationalError as exc:
                conn.close()
                if isinstance(exc, StillWal) or "locked" not in str(exc) and "busy" not in str(exc) \
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
                conn.execute(f"SELECT count(*) FROM {self.table}").fetchone()
                self.conn = conn
        except (sqlite3.Error, OSError):
            self.conn = None
        how = "reading cached values only" if self.conn is not None else "without a cache"
        self._warn("open", f"{self.path}: the {self.what} cannot be written ({exc}); going on {how}. {self.hint}")

    def _warn(self, kind: str, message: str) -> None:
        if kind not in self._warned:
            self._warned.add(kind)
            log.warning("warning: %s", message.rstrip())

    # -- reading and writing ------------------------------------------------------------------------------

    def get_many(self, keys: Sequence[str]) -> dict[str, Any]:
        """Cached values of ``keys``; a row that cannot be decoded counts as missing."""
        if not keys or self.conn is None:
            return {}
        out: dict[str, Any] = {}
        with self._lock:
            for i in range(0, len(keys), 500):
                part = list(keys[i : i + 500])
                q = f"SELECT key, {self.value_column} FROM {self.table} WHERE key IN ({','.join('?' * len(part))})"
                try:
                    found = self.conn.execute(q, part).fetchall()
                except sqlite3.Error as exc:
                    self._warn("read", f"{self.path}: the {self.what} cannot be read ({exc}); recomputing")
                    return out
                for key, text in found:
                    try:
                        out[key] = self.decode(text)
                    except (ValueError, TypeError, KeyError, AttributeError) as exc:
                        self.bad_rows += 1
                        self._warn("decode", f"{self.path}: a cached value cannot be decoded "
                                             f"({type(exc).__name__}: {exc}); it is recomputed")
        return out

    def put_many(self, items: Sequence[tuple[Any, ...]] | dict[str, Any]) -> bool:
        """Store ``(key, value, *columns)`` tuples (or a ``{key: value}`` dict
        when the table has no extra columns); ``False`` (with one warning) when
        the cache cannot be written."""
        rows = list(items.items()) if isinstance(items, dict) else list(items)
        if not rows or not self.writable or self.conn is None:
            return False
        cols = ("key", *self.columns, self.value_column)
        data = [(r[0], *r[2:], self.encode(r[1])) for r in rows]
        q = f"INSERT OR REPLACE INTO {self.table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})"
        with self._lock:
            try:
                with self.conn:
                    self.conn.executemany(q, data)
            except sqlite3.Error as exc:
                # the values are in hand: keep them, stop trying to cache
                self.writable = False
                self._warn("write", f"{self.path}: could not write to the {self.what} ({exc}); going on without "
                                    "caching new values")
                return False
        return True

    def absorb(self, other: str | Path) -> int:
        """Add the rows of another file of this cache's table (``runs merge`` joins shards' caches); rows
        already here are kept. Returns how many rows this cache has now."""
        if self.conn is None or not self.writable:
            raise EditlensError(f"{self.path}: the {self.what} cannot be written, so {other} cannot be joined to it")
        with self._lock:
            try:
                self.conn.execute("ATTACH DATABASE ? AS other", (str(other),))
                try:
                    with self.conn:
                        self.conn.execute(f"INSERT OR IGNORE INTO main.{self.table} SELECT * FROM other.{self.table}")
                finally:
                    self.conn.execute("DETACH DATABASE other")
            except sqlite3.Error as exc:
                raise EditlensError(f"{other}: cannot be joined to the {self.what} {self.path} ({exc})") from exc
            return int(self.conn.execute(f"SELECT count(*) FROM {self.table}").fetchone()[0])

    def __bool__(self) -> bool:  # an empty cache is still a cache (``if self.cache:`` must not skip it)
        return True

    def __len__(self) -> int:
        if self.conn is None:
            return 0
        with self._lock:
            return int(self.conn.execute(f"SELECT count(*) FROM {self.table}").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            if self.conn is not None:
                # the rollback journal is kept (empty) between transactions; leaving, it goes: switching to
                # DELETE mode removes it unless another process is mid-transaction (then it stays, as before)
                try:
                    self.conn.execute("PRAGMA journal_mode=DELETE")
                except sqlite3.Error:
                    pass
                self.conn.close()
                self.conn = None

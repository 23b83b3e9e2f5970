"""``DIR/votes.sqlite``: the task, its items, the annotators, who sees what, and every vote.

SQLite in write-ahead-log mode with ``synchronous=FULL``: each vote is one
transaction, committed before the page is told it was saved, so a vote the
page confirmed survives a SIGKILL of the server (and a power cut). Votes are
never updated or deleted; a second answer to the same position of an
annotator's list (a retried request) is refused as a duplicate and the first
kept.

Tables: ``meta`` (the task's settings, the plan's seed), ``items`` (one JSON
body per item), ``annotators`` (name, token, where their votes came from),
``assignments`` (annotator, position, item, kind ``item``/``repeat``/``gold``,
the edit shown on the left), ``votes`` (annotator, position, item, kind,
answer JSON, reason, left, time, ms on screen, origin, external id).
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from editlens.errors import InputError

DB_NAME = "votes.sqlite"
SCHEMA = "editlens.annotate/1"

_TABLES = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS items (item_id TEXT PRIMARY KEY, ord INTEGER NOT NULL, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS annotators (name TEXT PRIMARY KEY, token TEXT UNIQUE, origin TEXT NOT NULL,
    created REAL NOT NULL);
CREATE TABLE IF NOT EXISTS assignments (annotator TEXT NOT NULL, position INTEGER NOT NULL, item_id TEXT,
    kind TEXT NOT NULL, left_id TEXT, repeat_of INTEGER, PRIMARY KEY (annotator, position));
CREATE TABLE IF NOT EXISTS votes (vote_id INTEGER PRIMARY KEY AUTOINCREMENT, annotator TEXT NOT NULL,
    position INTEGER NOT NULL, item_id TEXT NOT NULL, kind TEXT NOT NULL, answer TEXT NOT NULL, reason TEXT,
    left_id TEXT, at REAL NOT NULL, shown_ms INTEGER, origin TEXT NOT NULL, external_id TEXT UNIQUE,
    UNIQUE (annotator, position));
CREATE INDEX IF NOT EXISTS votes_item ON votes (item_id);
"""


class DuplicateVote(InputError):
    """A second answer to a position that already has one (the first is kept)."""


class VoteStore:
    """The votes store of an annotation folder. Thread-safe: one connection, one lock."""

    def __init__(self, folder: str | Path, create: bool = False) -> None:
        self.folder = Path(folder)
        self.path = self.folder / DB_NAME
        if not self.path.is_file():
            if not create:
                raise InputError(f"{self.folder}: no {DB_NAME} there; start a task with "
                                 "`editlens annotate RUN_OR_MANIFEST --task pairwise|pointwise --out DIR`")
            self.folder.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        try:
            self.db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=30)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=FULL")  # a committed vote is on disk, power cut included
            self.db.executescript(_TABLES)
        except sqlite3.DatabaseError as exc:
            raise InputError(f"{self.path}: not a votes store ({exc})") from None
        if create and self.get_meta("schema") is None:
            self.set_meta("schema", SCHEMA)
        elif self.get_meta("schema") not in (None, SCHEMA):
            raise InputError(f"{self.path}: schema {self.get_meta('schema')!r}, this editlens reads {SCHEMA}")

    # ------------------------------------------------------------------ plumbing
    def close(self) -> None:
        with self._lock:
            self.db.close()

    def __enter__(self) -> "VoteStore":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _write(self, sql: str, rows: Iterable[Sequence[Any]] | Sequence[Any], many: bool = False) -> int:
        with self._lock:
            self.db.execute("BEGIN IMMEDIATE")
            try:
                cur = self.db.executemany(sql, rows) if many else self.db.execute(sql, rows)  # type: ignore[arg-type]
                self.db.execute("COMMIT")
            except BaseException:
                self.db.execute("ROLLBACK")
                raise
            return int(cur.lastrowid or 0)

    def _read(self, sql: str, args: Sequence[Any] = ()) -> list[tuple]:
        with self._lock:
            return self.db.execute(sql, args).fetchall()

    # ------------------------------------------------------------------ meta
    def set_meta(self, key: str, value: Any) -> None:
        self._write("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, json.dumps(value)))

    def get_meta(self, key: str, default: Any = None) -> Any:
        rows = self._read("SELECT value FROM meta WHERE key = ?", (key,))
        return json.loads(rows[0][0]) if rows else default

    def settings(self) -> dict[str, Any]:
        found = self.get_meta("settings")
        if found is None:
            raise InputError(f"{self.path}: holds no task (it was never planned)")
        return dict(found)

    # ------------------------------------------------------------------ items and plan
    def put_items(self, items: Sequence[Mapping[str, Any]]) -> None:
        self._write("INSERT INTO items (item_id, ord, body) VALUES (?, ?, ?)",
                    [(it["id"], k, json.dumps(it)) for k, it in enumerate(items)], many=True)

    def items(self) -> dict[str, dict[str, Any]]:
        return {r[0]: json.loads(r[1]) for r in self._read("SELECT item_id, body FROM items ORDER BY ord")}

    def add_annotator(self, name: str, token: str | None, origin: str = "web") -> None:
        self._write("INSERT INTO annotators (name, token, origin, created) VALUES (?, ?, ?, ?)",
                    (name, token, origin, time.time()))

    def annotators(self) -> dict[str, dict[str, Any]]:
        return {r[0]: {"token": r[1], "origin": r[2]} for r in
                self._read("SELECT name, token, origin FROM annotators ORDER BY created, name")}

    def put_assignments(self, rows: Sequence[tuple[str, int, str | None, str, str | None, int | None]]) -> None:
        """``(annotator, position, item, kind, left, repeat_of)`` rows."""
        self._write("INSERT INTO assignments (annotator, position, item_id, kind, left_id, repeat_of) "
                    "VALUES (?, ?, ?, ?, ?, ?)", rows, many=True)

    def fill_assignment(self, annotator: str, position: int, item_id: str, left: str | None) -> None:
        """Name the item of a position planned open (adaptive pairs): once, never changed after."""
        self._write("UPDATE assignments SET item_id = ?, left_id = ? WHERE annotator = ? AND position = ? "
                    "AND item_id IS NULL", (item_id, left, annotator, position))

    def assignments(self, annotator: str | None = None) -> list[dict[str, Any]]:
        sql = "SELECT annotator, position, item_id, kind, left_id, repeat_of FROM assignments"
        args: tuple = ()
        if annotator is not None:
            sql += " WHERE annotator = ?"
            args = (annotator,)
        return [{"annotator": r[0], "position": r[1], "item": r[2], "kind": r[3], "left": r[4], "repeat_of": r[5]}
                for r in self._read(sql + " ORDER BY annotator, position", args)]

    # ------------------------------------------------------------------ votes
    def add_vote(self, annotator: str, position: int, item_id: str, kind: str, answer: Mapping[str, Any],
                 reason: str | None = None, left: str | None = None, shown_ms: int | None = None,
                 origin: str = "web", external_id: str | None = None, at: float | None = None) -> int:
        """Write one vote in its own committed transaction; returns its id. A second vote for the same
        (annotator, position), or an imported vote seen before (its external id), is a :class:`DuplicateVote`."""
        try:
            return self._write(
                "INSERT INTO votes (annotator, position, item_id, kind, answer, reason, left_id, at, shown_ms, origin, "
                "external_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (annotator, position, item_id, kind, json.dumps(dict(answer)), reason or None, left,
                 time.time() if at is None else at, shown_ms, origin, external_id))
        except sqlite3.IntegrityError:
            raise DuplicateVote(f"{annotator}: position {position} already has a vote (the first is kept)") from None

    def assignment(self, annotator: str, position: int) -> dict[str, Any] | None:
        rows = self._read("SELECT item_id, kind, left_id, repeat_of FROM assignments WHERE annotator = ? AND position = ?",
                          (annotator, position))
        if not rows:
            return None
        r = rows[0]
        return {"annotator": annotator, "position": position, "item": r[0], "kind": r[1], "left": r[2], "repeat_of": r[3]}

    def progress_of(self, annotator: str) -> dict[str, int]:
        planned = self._read("SELECT COUNT(*) FROM assignments WHERE annotator = ?", (annotator,))[0][0]
        voted = self._read("SELECT COUNT(*) FROM votes WHERE annotator = ?", (annotator,))[0][0]
        return {"planned": int(planned), "voted": int(voted)}

    def votes(self, annotator: str | None = None) -> list[dict[str, Any]]:
        sql = ("SELECT vote_id, annotator, position, item_id, kind, answer, reason, left_id, at, shown_ms, origin, "
               "external_id FROM votes")
        args: tuple = ()
        if annotator is not None:
            sql += " WHERE annotator = ?"
            args = (annotator,)
        return [{"vote_id": r[0], "annotator": r[1], "position": r[2], "item": r[3], "kind": r[4],
                 "answer": json.loads(r[5]), "reason": r[6], "left": r[7], "at": r[8], "shown_ms": r[9],
                 "origin": r[10], "external_id": r[11]}
                for r in self._read(sql + " ORDER BY vote_id", args)]

    def voted_positions(self, annotator: str) -> set[int]:
        return {r[0] for r in self._read("SELECT position FROM votes WHERE annotator = ?", (annotator,))}

    def count_votes(self) -> int:
        return int(self._read("SELECT COUNT(*) FROM votes")[0][0])

    def progress(self) -> dict[str, dict[str, int]]:
        """Per annotator: positions planned, votes given."""
        planned = dict(self._read("SELECT annotator, COUNT(*) FROM assignments GROUP BY annotator"))
        given = dict(self._read("SELECT annotator, COUNT(*) FROM votes GROUP BY annotator"))
        return {name: {"planned": int(planned.get(name, 0)), "voted": int(given.get(name, 0))}
                for name in self.annotators()}

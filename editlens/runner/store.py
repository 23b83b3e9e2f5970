"""The results store of a run directory: one SQLite file, ``results.sqlite``.

One row per (sample, evaluator, config hash), and in ``loaded_images`` one
per (sample, role): the image file the run decoded it from (``editlens view``
serves those files and no other). Rows of a batch are written in
one transaction as the batch finishes, in WAL mode, so a process killed at
any moment leaves a consistent store that holds every finished batch.
Exports (JSONL, CSV, Parquet) are written atomically (:mod:`editlens.core.io`).
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import sqlite3
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

from editlens.core.io import atomic_write
from editlens.core.types import Score
from editlens.errors import EditlensError

SCHEMA = """
CREATE TABLE IF NOT EXISTS results (
    sample_id TEXT NOT NULL,
    evaluator TEXT NOT NULL,
    config_hash TEXT NOT NULL,
    model TEXT,
    status TEXT NOT NULL,
    value REAL,
    reason TEXT,
    details TEXT,
    created REAL NOT NULL,
    PRIMARY KEY (sample_id, evaluator, config_hash)
);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS loaded_images (
    sample_id TEXT NOT NULL,
    role TEXT NOT NULL,
    ref TEXT NOT NULL,
    resolved TEXT NOT NULL,
    PRIMARY KEY (sample_id, role)
);
"""

#: meta key set when every image this store's results were computed from is in ``loaded_images``
#: (a store begun before the record existed lacks it: ``editlens view`` then falls back)
IMAGES_RECORDED = "loaded_images_complete"


def resolved_image(ref: str) -> str:
    """What an image reference reads: the real path of its file (symbolic links
    followed); for an image inside a parquet/arrow file, that file's real path in the reference.

    >>> resolved_image("/d/../d/t.parquet#row=3&column=input")
    '/d/t.parquet#row=3&column=input'
    """
    from dataclasses import replace

    from editlens.core.embedded import parse_ref

    table = parse_ref(ref)
    if table is not None:
        return replace(table, file=os.path.realpath(table.file)).uri()
    return os.path.realpath(ref)


def _recorded_rows(run_dir: str | os.PathLike) -> list[tuple[str, str, str]] | None:
    """``(sample id, role, resolved image)`` of every image the run in ``run_dir`` decoded, or ``None``
    when its store has no complete record (runs made before it existed, and runs resumed from them).
    Only reads; a run may be writing meanwhile."""
    path = Path(run_dir) / "results.sqlite"
    if not path.is_file():
        return None
    try:
        # not mode=ro: a read-only connection leaves the -wal and -shm files behind, which
        # `editlens view` would take for a change of the run
        conn = sqlite3.connect(path, timeout=10)
        try:
            flag = conn.execute("SELECT value FROM meta WHERE key=?", (IMAGES_RECORDED,)).fetchone()
            if not flag or not json.loads(flag[0]):
                return None
            return [(r[0], r[1], r[2]) for r in conn.execute("SELECT sample_id, role, resolved FROM loaded_images")]
        finally:
            conn.close()
    except sqlite3.DatabaseError:  # no such table: a store older than the record
        return None


def recorded_images(run_dir: str | os.PathLike) -> set[str] | None:
    """The resolved images the run in ``run_dir`` decoded (:func:`resolved_image`),
    or ``None`` when its store has no complete record (see :func:`_recorded_rows`)."""
    rows = _recorded_rows(run_dir)
    return None if rows is None else {r[2] for r in rows}


def recorded_image_map(run_dir: str | os.PathLike) -> dict[tuple[str, str], str] | None:
    """Per ``(sample id, role)``, the resolved image the run decoded for that row
    (:func:`resolved_image`); ``None`` as :func:`recorded_images`. A report shows a
    row's image only when it is the one the run scored for that row."""
    rows = _recorded_rows(run_dir)
    return None if rows is None else {(r[0], r[1]): r[2] for r in rows}


def config_hash(config: dict[str, Any]) -> str:
    """Stable short hash of an evaluator's settings."""
    blob = json.dumps(config, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


class ResultsStore:
    """SQLite-backed results of one run directory."""

    def __init__(self, run_dir: str | os.PathLike, timeout: float = 30.0) -> None:
        self.dir = Path(run_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / "results.sqlite"
        self._lock = threading.Lock()
        try:
            self.conn = sqlite3.connect(self.path, timeout=timeout, check_same_thread=False)
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute("PRAGMA synchronous=NORMAL")
            self.conn.executescript(SCHEMA)
            self.conn.execute("SELECT count(*) FROM results").fetchone()
        except sqlite3.DatabaseError as exc:
            raise EditlensError(
                f"{self.path}: the results store cannot be opened ({exc}). If the file is corrupt, "
                "move it away and rerun; finished work in it is then recomputed."
            ) from exc

    def close(self) -> None:
        with self._lock:
            self.conn.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            try:
                self.conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                # no transaction was opened: there is nothing to roll back
                raise EditlensError(
                    f"{self.path}: the results store is busy ({exc}); another process holds it for writing. "
                    "Wait for it to finish (editlens run --wait queues behind it) and rerun."
                ) from exc
            try:
                yield self.conn
                self.conn.execute("COMMIT")
            except BaseException:
                if self.conn.in_transaction:
                    self.conn.execute("ROLLBACK")
                raise

    def absorb(self, other_dir: str | os.PathLike, moves: Sequence[tuple[str, str]] = (), meta: bool = False) -> None:
        """Add another run's stored results and image records (``runs merge`` joins shards' stores): a
        loaded image's path under a prefix ``a`` of ``moves`` is rewritten under ``b`` (the shard's own
        folder becomes the merged one); ``meta``: take its run metadata too (the first shard's)."""
        other = Path(other_dir) / "results.sqlite"
        with self._lock:  # not inside a transaction: SQLite refuses to attach there
            self.conn.execute("ATTACH DATABASE ? AS shard", (str(other),))
        try:
            with self._tx() as conn:
                conn.execute("INSERT OR REPLACE INTO results SELECT * FROM shard.results")
                conn.execute("INSERT OR REPLACE INTO loaded_images SELECT * FROM shard.loaded_images")
                for a, b in moves:
                    for col in ("ref", "resolved"):
                        conn.execute(f"UPDATE loaded_images SET {col} = ? || substr({col}, ?) "
                                     f"WHERE substr({col}, 1, ?) = ?", (b, len(a) + 1, len(a), a))
                if meta:
                    conn.execute("INSERT OR REPLACE INTO meta SELECT * FROM shard.meta")
        finally:
            with self._lock:
                self.conn.execute("DETACH DATABASE shard")

    def done(self, evaluator: str, chash: str, redo: Iterable[str] = ("failed",)) -> set[str]:
        """Sample ids finished for this evaluator configuration.

        Rows whose status is in ``redo`` are not finished: by default a
        ``failed`` row (a transport error, a crash) is retried on rerun, while
        ``unscored`` (a real answer that could not be parsed) is kept.
        """
        redo = tuple(redo)
        q = "SELECT sample_id FROM results WHERE evaluator=? AND config_hash=?"
        if redo:
            q += f" AND status NOT IN ({','.join('?' * len(redo))})"
        with self._lock:
            rows = self.conn.execute(q, (evaluator, chash, *redo)).fetchall()
        return {r[0] for r in rows}

    def current_configs(self) -> dict[str, str]:
        """``{evaluator: config hash}`` most recently run for each evaluator of this directory.

        Every evaluator ever run here is listed (not only the last command's);
        stores written before this was recorded fall back to the newest row.
        """
        recorded = self.get_meta("current_configs") or {}
        with self._lock:
            # SQLite takes a bare column of a max() aggregate from the row holding the max:
            # one pass, where a correlated subquery was quadratic in the rows (seconds at 10k)
            newest = self.conn.execute(
                "SELECT evaluator, config_hash, max(created) FROM results GROUP BY evaluator"
            ).fetchall()
        return {**{ev: ch for ev, ch, _ in newest}, **recorded}

    def record_configs(self, configs: dict[str, str]) -> None:
        self.set_meta("current_configs", {**(self.get_meta("current_configs") or {}), **configs})

    def write(self, rows: Iterable[tuple[str, str, str, str | None, Score]],
              images: dict[str, dict[str, str]] | None = None) -> int:
        """Insert ``(sample_id, evaluator, config_hash, model, score)`` rows in one transaction,
        with ``images``: ``{sample_id: {role: reference}}`` of the image files those samples
        were decoded from (what ``editlens view`` may serve)."""
        now = time.time()
        data = [
            (sid, ev, ch, model, s.status, s.value, s.reason,
             json.dumps(s.details, default=str) if s.details else None, now)
            for sid, ev, ch, model, s in rows
        ]
        loaded = [(sid, role, ref, resolved_image(ref)) for sid, refs in (images or {}).items()
                  for role, ref in refs.items()]
        with self._tx() as conn:
            conn.executemany("INSERT OR REPLACE INTO results VALUES (?,?,?,?,?,?,?,?,?)", data)
            conn.executemany("INSERT OR REPLACE INTO loaded_images VALUES (?,?,?,?)", loaded)
        return len(data)

    def start_image_record(self) -> bool:
        """Mark the image record complete when nothing was scored here before it
        (a store with earlier results lacks their images: it stays unmarked). Returns the mark."""
        with self._tx() as conn:
            row = conn.execute("SELECT value FROM meta WHERE key=?", (IMAGES_RECORDED,)).fetchone()
            if row is not None:
                return bool(json.loads(row[0]))
            complete = conn.execute("SELECT count(*) FROM results").fetchone()[0] == 0
            conn.execute("INSERT INTO meta VALUES (?, ?)", (IMAGES_RECORDED, json.dumps(complete)))
        return complete

    def set_meta(self, key: str, value: Any) -> None:
        with self._tx() as conn:
            conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, json.dumps(value, default=str)))

    def get_meta(self, key: str, default: Any = None) -> Any:
        with self._lock:
            row = self.conn.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return json.loads(row[0]) if row else default

    def rows(self, configs: dict[str, str] | None = None, parse: bool = True) -> list[dict[str, Any]]:
        """All rows, or only those of the given ``{evaluator: config_hash}``. ``parse=False`` leaves
        ``details`` as the stored JSON text (a reader that caches by content parses only what changed)."""
        with self._lock:
            cur = self.conn.execute(
                "SELECT sample_id, evaluator, config_hash, model, status, value, reason, details FROM results "
                "ORDER BY sample_id, evaluator"
            )
            out = []
            for sid, ev, ch, model, status, value, reason, details in cur.fetchall():
                if configs is not None and configs.get(ev) != ch:
                    continue
                out.append({"sample_id": sid, "evaluator": ev, "config_hash": ch, "model": model,
                            "status": status, "value": value, "reason": reason,
                            "details": (json.loads(details) if parse else details) if details else None})
        return out

    def count(self) -> int:
        with self._lock:
            return int(self.conn.execute("SELECT count(*) FROM results").fetchone()[0])


def wide_records(rows: list[dict[str, Any]], samples: dict[str, dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """One record per sample: ``{"id", "model", "scores": {evaluator: {...}}}``."""
    by: dict[str, dict[str, Any]] = {}
    for r in rows:
        rec = by.setdefault(r["sample_id"], {"id": r["sample_id"], "model": r["model"], "scores": {}})
        entry = {"value": r["value"], "status": r["status"]}
        if r["reason"]:
            entry["reason"] = r["reason"]
        if r["details"]:
            entry["details"] = r["details"]
        rec["scores"][r["evaluator"]] = entry
    if samples:
        for sid, extra in samples.items():
            if sid in by:
                by[sid].update({k: v for k, v in extra.items() if k not in by[sid]})
    return [by[k] for k in sorted(by)]


EXPORT_FORMATS = ("jsonl", "csv", "parquet")


def check_export_formats(value: str | None) -> list[str]:
    """The formats of ``--export`` (comma-separated), checked before any scoring: an unknown
    format, or parquet without pyarrow, is an error now, not after hours of work."""
    if value is None:
        return []
    fmts = [f.strip().lower() for f in value.split(",") if f.strip()]
    if not fmts:
        raise EditlensError("--export needs at least one format: jsonl, csv or parquet")
    for fmt in fmts:
        if fmt not in EXPORT_FORMATS:
            raise EditlensError(f"unknown export format {fmt!r}; use jsonl, csv or parquet")
        if fmt == "parquet":
            try:
                import pyarrow.parquet  # noqa: F401
            except ImportError as exc:
                raise EditlensError("Parquet export needs pyarrow: pip install 'editlens[parquet]'") from exc
    return list(dict.fromkeys(fmts))


def export(rows: list[dict[str, Any]], path: str | os.PathLike, fmt: str | None = None,
           columns: dict[str, dict[str, Any]] | None = None) -> Path:
    """Export long-format rows (one per sample and evaluator) atomically.

    ``fmt`` is ``jsonl``, ``csv`` or ``parquet`` (default: from the suffix).
    ``columns``: the manifest's extra columns of each sample (``{sample_id:
    {column: value}}``), added to its rows after the result columns (a column
    named like one of those is left out); in CSV and Parquet a list or object
    value is written as JSON text.
    """
    target = Path(path)
    fmt = fmt or target.suffix.lstrip(".").lower()
    base = ["sample_id", "evaluator", "config_hash", "model", "status", "value", "reason", "details"]
    extra: list[str] = []
    if columns:
        for of_sample in columns.values():
            extra += [c for c in of_sample if c not in base and c not in extra]
        rows = [{**r, **{c: v for c, v in (columns.get(r["sample_id"]) or {}).items() if c not in base}}
                for r in rows]
    flat = [{**{k: _cell(v) for k, v in r.items() if k != "details"},
             "details": json.dumps(r["details"]) if r.get("details") else None} for r in rows]
    if fmt == "jsonl":
        return atomic_write(target, lambda fh: fh.writelines(json.dumps(r, default=str) + "\n" for r in rows))
    if fmt == "csv":
        cols = base + extra

        def w(fh: Any) -> None:
            writer = csv.DictWriter(fh, fieldnames=cols)
            writer.writeheader()
            writer.writerows(flat)

        return atomic_write(target, w)
    if fmt == "parquet":
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError as exc:
            raise EditlensError("Parquet export needs pyarrow: pip install 'editlens[parquet]'") from exc
        # every row has every column (absent: null), so a column's type comes from all its values
        table = pa.Table.from_pylist([{c: r.get(c) for c in base + extra} for r in flat]) if flat else \
            pa.Table.from_pylist(flat)
        return atomic_write(target, lambda fh: pq.write_table(table, fh), mode="wb")
    raise EditlensError(f"unknown export format {fmt!r}; use jsonl, csv or parquet")


def _cell(value: Any) -> Any:
    """A value for one CSV/Parquet cell: lists and objects as JSON text."""
    return json.dumps(value, default=str) if isinstance(value, (list, dict)) else value

"""A resumable dataset folder: ``train.jsonl`` (one record per line,
appended after its images are written), ``images/``, ``provenance.json``
and ``stats.json``. A rerun skips the records already there; a line cut off
by a crash is dropped and redone."""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path
from typing import Any, Iterable

import numpy as np


class DatasetStore:
    def __init__(self, out: str | Path, name: str = "train.jsonl") -> None:
        self.out = Path(out)
        (self.out / "images").mkdir(parents=True, exist_ok=True)
        self.path = self.out / name
        self.records = self._read_clean()
        self.done = {str(r["id"]) for r in self.records}

    def _read_clean(self) -> list[dict[str, Any]]:
        if not self.path.is_file():
            return []
        rows, good = [], 0
        raw = self.path.read_bytes()
        for line in raw.splitlines(keepends=True):
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                break  # a crash cut this line: keep what precedes it
            good += len(line)
        if good != len(raw):
            with open(self.path, "r+b") as fh:
                fh.truncate(good)
        return rows

    def add(self, record: dict[str, Any]) -> None:
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        self.records.append(record)
        self.done.add(str(record["id"]))

    def save_image(self, arr: np.ndarray, name: str, quality: int | None = None) -> str:
        """Write ``images/name`` (JPEG at ``quality`` when given) atomically; returns the relative path."""
        from PIL import Image

        from editlens.core.io import atomic_write

        rel = f"images/{name}"
        img = Image.fromarray(np.ascontiguousarray(arr))
        if quality is not None:
            atomic_write(self.out / rel, lambda fh: img.save(fh, format="JPEG", quality=int(quality)), mode="wb")
        else:
            atomic_write(self.out / rel, lambda fh: img.save(fh, format="PNG"), mode="wb")
        return rel

    def check_config(self, config: dict[str, Any], free: tuple[str, ...] = ()) -> None:
        """Refuse to resume a folder built with other settings (``free`` keys may change,
        e.g. how many images to process)."""
        from editlens.errors import InputError

        p = self.out / "provenance.json"
        if not p.is_file() or not self.records:
            return
        from editlens.core.io import read_json

        doc = read_json(p, "the data set's provenance", hint="use another --out")
        before = (doc.get("config") if isinstance(doc, dict) else None) or {}
        now = json.loads(json.dumps(config))  # tuples -> lists, as stored
        diff = {k: (before.get(k), v) for k, v in now.items() if k not in free and before.get(k) != v}
        if diff:
            raise InputError(f"{self.out} was built with other settings {diff} (was, now); use another --out")

    def write_json(self, name: str, data: Any) -> Path:
        from editlens.core.io import write_json

        return write_json(self.out / name, data, default=str)


def provenance(command: str, config: dict[str, Any], sources: Iterable[str | Path]) -> dict[str, Any]:
    import editlens
    from editlens.core.images import file_sha256

    return {"command": command, "config": config, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "editlens": getattr(editlens, "__version__", None), "python": platform.python_version(),
            "sources": {str(s): file_sha256(s) for s in sources}}


def difference_stats(records: list[dict[str, Any]]) -> dict[str, Any]:
    by_cmd: dict[str, int] = {}
    by_obj: dict[str, int] = {}
    unchanged = 0
    for r in records:
        if not r["differences"]:
            unchanged += 1
        for d in r["differences"]:
            by_cmd[d["command"]] = by_cmd.get(d["command"], 0) + 1
            by_obj[d["object"]] = by_obj.get(d["object"], 0) + 1
    return {"records": len(records), "unchanged": unchanged, "differences": sum(by_cmd.values()),
            "by_command": dict(sorted(by_cmd.items())),
            "top_objects": dict(sorted(by_obj.items(), key=lambda kv: -kv[1])[:20])}

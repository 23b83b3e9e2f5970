"""Fingerprints of model weights for run manifests: where the weights came
from (local path or hub revision) and SHA-256 of each weight file.

Hashes are cached by (path, size, mtime) in the user cache directory, so a
large checkpoint is read once, not at every run.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from editlens.core.images import file_sha256
from editlens.core.io import read_json, write_json
from editlens.errors import InputError
from editlens.models.resolve import ModelRef, _in_hub_cache
from editlens.paths import cache_dir

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pth", ".pt", ".ckpt")
_LOCK = threading.Lock()


def cached_sha256(path: Path) -> str:
    st = path.stat()
    key = f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}"
    store = cache_dir() / "file_hashes.json"
    with _LOCK:
        try:
            table = read_json(store) if store.is_file() else {}
        except InputError:  # a damaged cache is rebuilt
            table = {}
        table = table if isinstance(table, dict) else {}
        if key in table:
            return table[key]
        digest = file_sha256(path)
        table[key] = digest
        try:
            write_json(store, table, indent=None)
        except OSError:
            pass  # a read-only cache only costs re-hashing next time
        return digest


def _snapshot_dir(repo_id: str) -> Path | None:
    try:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(repo_id, "config.json")
    except Exception:
        return None
    return Path(found).parent if isinstance(found, str) else None


def fingerprint(mref: ModelRef) -> dict[str, Any]:
    """``{"ref", "origin", "path", "revision", "weights": {file: sha256}}``."""
    out: dict[str, Any] = {"ref": mref.ref, "origin": mref.origin}
    folder = mref.local_dir
    if folder is None and _in_hub_cache(mref.ref):
        folder = _snapshot_dir(mref.ref)
        if folder is not None:
            out["revision"] = folder.name  # hub cache snapshots are named by commit
    if folder is None:
        out["weights"] = None
        return out
    out["path"] = str(folder.resolve())
    out["weights"] = {p.name: cached_sha256(p) for p in sorted(folder.iterdir())
                      if p.is_file() and p.suffix in WEIGHT_SUFFIXES}
    return out

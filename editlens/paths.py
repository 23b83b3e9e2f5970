"""Where editlens keeps user-level files (never the current folder)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """``$EDITLENS_CACHE_DIR``, else ``$XDG_CACHE_HOME/editlens``, else ``~/.cache/editlens``."""
    if os.environ.get("EDITLENS_CACHE_DIR"):
        return Path(os.environ["EDITLENS_CACHE_DIR"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "editlens"


def samples_dir() -> Path:
    """The sample edits shipped inside the package (real AURORA photos, MIT): ``images/`` and ``manifest.jsonl``."""
    return Path(__file__).resolve().parent / "samples"

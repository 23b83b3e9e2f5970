"""The run manifest: how a run was produced, for reproducibility."""

from __future__ import annotations

import importlib.metadata
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import editlens
from editlens.models.precision import runtime_info


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def git_commit() -> str | None:
    """The commit of the editlens checkout, when it is installed from one."""
    root = Path(editlens.__file__).resolve().parent.parent
    if not (root / ".git").exists():
        return None
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def environment() -> dict[str, Any]:
    libs = ["torch", "transformers", "numpy", "pillow", "scipy", "tokenizers", "huggingface_hub"]
    return {
        "editlens": editlens.__version__,
        "git_commit": git_commit(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "libraries": {name: _version(name) for name in libs},
        "cpu": runtime_info(),  # CPU features (native bf16 or not) behind dtype=auto
    }


def provenance_of(evaluator: Any) -> dict[str, Any]:
    """What a run manifest pins of an evaluator beyond its settings (``provenance()``:
    served model and its ``/v1/models`` answer, weight hashes). Never fails a run: a
    problem is recorded instead."""
    fn = getattr(evaluator, "provenance", None)
    if not callable(fn):
        return {}
    try:
        return dict(fn())
    except Exception as exc:  # noqa: BLE001 - provenance is a record, not a requirement
        return {"error": f"{type(exc).__name__}: {exc}"}


def new_manifest(command: list[str] | None, evaluators: list[dict[str, Any]], inputs: dict[str, Any],
                 device: str, seed: int | None = None, precision: dict[str, Any] | None = None) -> dict[str, Any]:
    """``precision``: the policy's decision for the run's ``--dtype``/``--device``
    (:meth:`editlens.models.precision.Precision.to_dict`); each evaluator's own
    entry says what its model really ran in."""
    return {
        "command": command,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "environment": environment(),
        "device": device,
        "precision": precision,
        "seed": seed,
        "inputs": inputs,
        "evaluators": evaluators,
    }

"""What both reward models need: Qwen's resize rule, where a checkpoint
lives and what exactly it is (revision, weight hashes), a small result
cache, and reading string constants from an authors' prompt module."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from editlens.core.cache import SqliteCache
from editlens.errors import InputError, ModelUnavailableError

# -------------------------------------------------------------------------------------------- images

def smart_resize(height: int, width: int, factor: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """Qwen-VL's resize rule: both sides multiples of ``factor`` (patch x
    merge), the area within ``[min_pixels, max_pixels]``, the aspect ratio
    kept as well as the rounding allows.

    >>> smart_resize(512, 512, 28, 256 * 28 * 28, 256 * 28 * 28)
    (448, 448)
    >>> smart_resize(40, 60, 28, 4 * 28 * 28, 16384 * 28 * 28)
    (56, 84)
    """
    if height < 1 or width < 1:
        raise InputError(f"image of {width}x{height} pixels cannot be resized")
    if max(height, width) / min(height, width) > 200:
        raise InputError(f"image of {width}x{height} pixels: aspect ratio over 200, which Qwen-VL models refuse")
    h = max(factor, round(height / factor) * factor)
    w = max(factor, round(width / factor) * factor)
    if h * w > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h = max(factor, math.floor(height / beta / factor) * factor)
        w = max(factor, math.floor(width / beta / factor) * factor)
    elif h * w < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h = math.ceil(height * beta / factor) * factor
        w = math.ceil(width * beta / factor) * factor
    return h, w


def resize_to_pixels(image: np.ndarray, factor: int, min_pixels: int, max_pixels: int) -> np.ndarray:
    """``image`` resized by :func:`smart_resize` (bicubic), unchanged when already there."""
    from PIL import Image

    h, w = smart_resize(image.shape[0], image.shape[1], factor, min_pixels, max_pixels)
    if (h, w) == image.shape[:2]:
        return image
    return np.asarray(Image.fromarray(np.ascontiguousarray(image)).resize((w, h), Image.Resampling.BICUBIC))


def vision_factor(processor: Any) -> int:
    """Side multiple of a Qwen-VL processor's images: patch size x merge size (28 for Qwen2.5-VL, 32 for Qwen3-VL)."""
    ip = processor.image_processor
    return int(getattr(ip, "patch_size", 14)) * int(getattr(ip, "merge_size", 2))


def processor_images_kwargs(images: Sequence[np.ndarray]) -> dict[str, Any]:
    """Processor pixel bounds that let images already at Qwen sizes through
    unchanged (each is a multiple of the factor and inside the bounds)."""
    areas = [int(i.shape[0] * i.shape[1]) for i in images]
    return {"min_pixels": min(areas), "max_pixels": max(areas)} if areas else {}


# -------------------------------------------------------------------------------------------- checkpoints

def locate(ref: str, what: str) -> Path:
    """A local folder, or a hub repository (``owner/name[/sub]``) in the cache (downloaded where allowed)."""
    from editlens.models.vlm import locate as locate_model

    try:
        return locate_model(ref)
    except ModelUnavailableError as exc:
        raise ModelUnavailableError(f"{what}: {exc}") from None


def is_present(ref: str) -> bool:
    """Whether ``ref`` is a local folder or a hub repository already in the cache (no download)."""
    if Path(ref).expanduser().is_dir():
        return True
    parts = ref.strip("/").split("/")
    if len(parts) < 2 or ref.startswith((".", "/", "~")):
        return False
    try:
        from huggingface_hub import snapshot_download

        snapshot_download("/".join(parts[:2]), local_files_only=True)
        return True
    except Exception:  # noqa: BLE001 - any miss means "not here"
        return False


def revision_of(path: Path) -> str | None:
    """The hub commit of a cached snapshot folder (``.../snapshots/<commit>/...``), else ``None``."""
    parts = Path(path).resolve().parts
    if "snapshots" in parts:
        i = parts.index("snapshots")
        if i + 1 < len(parts):
            return parts[i + 1]
    return None


def provenance(path: Path, ref: str, files: Sequence[str] | None = None) -> dict[str, Any]:
    """What a checkpoint is: its reference, folder, hub revision (when it
    comes from the hub cache) and the SHA-256 of its weight files (cached
    per file size and time, so a 16 GB file is read once)."""
    from editlens.models.fingerprint import WEIGHT_SUFFIXES, cached_sha256

    folder = Path(path)
    names = list(files) if files is not None else sorted(
        p.name for p in folder.iterdir() if p.is_file() and p.suffix in WEIGHT_SUFFIXES)
    return {"ref": ref, "path": str(folder.resolve()), "revision": revision_of(folder),
            "weights": {n: cached_sha256(folder / n) for n in names if (folder / n).is_file()}}


def short_id(prov: dict[str, Any]) -> str:
    """A short identity of a checkpoint for per-result records: the hub
    revision when known, else the first 12 hex digits of its weights' hash."""
    if prov.get("revision"):
        return str(prov["revision"])[:12]
    blob = json.dumps(prov.get("weights") or {}, sort_keys=True)
    return "sha256:" + hashlib.sha256(blob.encode()).hexdigest()[:12]


# -------------------------------------------------------------------------------------------- result cache

def result_cache(path: str | Path | None, name: str) -> SqliteCache:
    """A reward model's result cache: a table of the one cache layer."""
    from editlens.paths import cache_dir

    return SqliteCache(Path(path) if path else cache_dir() / f"{name}.sqlite", "results", value_column="result",
                       what=f"{name} cache", hint=f"Or pass --option {name}.cache=none.")


# -------------------------------------------------------------------------------------------- authors' prompts

def prompts_sha(*texts: str) -> str:
    return hashlib.sha256("\0".join(texts).encode()).hexdigest()

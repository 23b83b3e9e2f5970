"""Encode each distinct image once per batch in a VLM's vision tower.

Judging edits sends the same pictures again and again: one source photo
edited by every model under comparison, and DICE's coherence questions, one
per difference, about the very same pair. On a CPU the vision tower is most
of a request's cost (about 1.4 s of 3.2 s per two-image SmolVLM request
here), and batching does nothing for it: it is compute-bound. So the local
backend wraps the tower: rows of a batch whose pixels (and patch mask) are
equal are encoded once and their outputs copied back in place. Rows are
compared exactly (a fingerprint to group, ``torch.equal`` to confirm), so
results are those of encoding every row.

On a CPU the tower is also run a few rows at a time: past two 512-px images
per forward, attention's working set leaves the cache and each image costs
more (1.37 s per image at 2 rows, 1.63 s at 16, SmolVLM's tower, 2 cores).

Towers that encode each row on its own (ViT towers of Idefics3, SmolVLM,
LLaVA-NeXT) are wrapped row by row. Qwen2.5-VL's and Qwen3-VL's towers take
one flat sequence of patches with a grid per image (``grid_thw``) and attend
within each image only (``cu_seqlens``), so they are wrapped image by image:
equal images (same grid, same patches) are encoded once and their patch and
merged-token outputs copied back in place (:func:`install` tells the two
kinds apart by the tower's ``grid_thw`` parameter). A family whose tower
mixes images declares none (Qwen2-VL is left as it was).
"""

from __future__ import annotations

import functools
import hashlib
import inspect
from dataclasses import dataclass, field
from typing import Any

import torch

#: Rows per tower forward on a CPU (see the module docstring).
CPU_ROWS_PER_FORWARD = 2


@dataclass
class TowerStats:
    """What the wrapper did, for benchmarks and tests."""

    rows: int = 0  # rows the model asked for
    encoded: int = 0  # rows actually run through the tower
    forwards: int = 0  # tower forward calls
    history: list[tuple[int, int]] = field(default_factory=list)  # (rows, encoded) per call


def _fingerprint(row: torch.Tensor) -> bytes:
    """A cheap hash of a strided sample of a row; equal rows share it, and
    rows that share it are compared in full before being merged."""
    flat = row.reshape(-1)
    step = max(1, flat.numel() // 4096)
    sample = flat[::step].detach().float().cpu().contiguous().numpy()
    return hashlib.blake2b(sample.tobytes(), digest_size=16).digest()


def unique_rows(pixels: torch.Tensor, masks: torch.Tensor | None = None) -> tuple[list[int], list[int]]:
    """Indices of the first occurrence of each distinct row, and for every
    row the position of its representative in that list.

    >>> x = torch.tensor([[1., 2.], [3., 4.], [1., 2.]])
    >>> unique_rows(x)
    ([0, 1], [0, 1, 0])
    """
    keep: list[int] = []
    inverse: list[int] = []
    groups: dict[bytes, list[int]] = {}
    for i in range(pixels.shape[0]):
        fp = _fingerprint(pixels[i])
        match = None
        for pos in groups.get(fp, []):
            j = keep[pos]
            if torch.equal(pixels[i], pixels[j]) and (masks is None or torch.equal(masks[i], masks[j])):
                match = pos
                break
        if match is None:
            match = len(keep)
            keep.append(i)
            groups.setdefault(fp, []).append(match)
        inverse.append(match)
    return keep, inverse


def _take(value: Any, index: torch.Tensor, rows: int) -> Any:
    """``value`` with its batch dimension re-indexed, for tensors (and
    tuples of them) whose first dimension is the tower's rows."""
    if isinstance(value, torch.Tensor) and value.dim() > 0 and value.shape[0] == rows:
        return value.index_select(0, index.to(value.device))
    if isinstance(value, tuple):
        return tuple(_take(v, index, rows) for v in value)
    return value


def _concat(parts: list[Any]) -> Any:
    """Concatenate per-chunk tower outputs (tensors, tuples, ModelOutputs)."""
    first = parts[0]
    if isinstance(first, torch.Tensor):
        return torch.cat(parts, 0) if first.dim() > 0 else first
    if isinstance(first, tuple):
        return tuple(_concat([p[k] for p in parts]) for k in range(len(first)))
    if hasattr(first, "keys"):  # a transformers ModelOutput
        return type(first)(**{k: _concat([p[k] for p in parts]) for k in first.keys()})
    return first


def _reindex(out: Any, index: torch.Tensor, rows: int) -> Any:
    if hasattr(out, "keys"):  # a transformers ModelOutput (a dict subclass)
        return type(out)(**{k: _take(out[k], index, rows) for k in out.keys()})
    return _take(out, index, rows)


def install(model: torch.nn.Module, path: str, device: str) -> TowerStats | None:
    """Wrap the vision tower at attribute ``path`` of ``model`` (e.g.
    ``model.vision_model``); ``None`` when the model has no such module."""
    tower: Any = model
    for part in path.split("."):
        tower = getattr(tower, part, None)
        if tower is None:
            return None
    if not isinstance(tower, torch.nn.Module):
        return None
    if "grid_thw" in inspect.signature(tower.forward).parameters:
        return _install_grid(tower)
    stats = TowerStats()
    original = tower.forward
    chunk = CPU_ROWS_PER_FORWARD if str(device).startswith("cpu") else 0

    @functools.wraps(original)
    def forward(*given: Any, **kwargs: Any) -> Any:
        args = list(given)
        pixels = kwargs.get("pixel_values") if "pixel_values" in kwargs else (args[0] if args else None)
        if not isinstance(pixels, torch.Tensor) or pixels.dim() < 2:
            return original(*args, **kwargs)
        rows = pixels.shape[0]
        mask = kwargs.get("patch_attention_mask")
        mask = mask if isinstance(mask, torch.Tensor) and mask.shape[0] == rows else None
        keep, inverse = unique_rows(pixels, mask)

        def run(sel: list[int]) -> Any:
            idx = torch.tensor(sel, device=pixels.device)
            kw = dict(kwargs)
            a = list(args)
            if "pixel_values" in kw:
                kw["pixel_values"] = pixels.index_select(0, idx)
            else:
                a[0] = pixels.index_select(0, idx)
            if mask is not None:
                kw["patch_attention_mask"] = mask.index_select(0, idx)
            stats.forwards += 1
            return original(*a, **kw)

        step = chunk or len(keep)
        parts = [run(keep[k : k + step]) for k in range(0, len(keep), step)]
        out = parts[0] if len(parts) == 1 else _concat(parts)
        stats.rows += rows
        stats.encoded += len(keep)
        stats.history.append((rows, len(keep)))
        if len(keep) == rows:
            return out
        return _reindex(out, torch.tensor(inverse), len(keep))

    tower.forward = forward
    return stats


def unique_images(patches: torch.Tensor, grid_thw: torch.Tensor) -> tuple[list[int], list[int], list[int]]:
    """For a flat patch sequence with one ``(t, h, w)`` grid row per image:
    patch rows per image, the first occurrence of each distinct image, and
    for every image the position of its representative (equal grid and
    equal patches, compared exactly).

    >>> p = torch.tensor([[1.], [2.], [3.], [4.], [1.], [2.]])
    >>> unique_images(p, torch.tensor([[1, 1, 2], [1, 1, 2], [1, 1, 2]]))
    ([2, 2, 2], [0, 1], [0, 1, 0])
    """
    sizes = [int(x) for x in grid_thw.prod(-1).tolist()]
    chunks = torch.split(patches, sizes)
    keep: list[int] = []
    inverse: list[int] = []
    groups: dict[tuple, list[int]] = {}
    for i, chunk in enumerate(chunks):
        key = (tuple(int(v) for v in grid_thw[i].tolist()), _fingerprint(chunk))
        match = next((pos for pos in groups.get(key, []) if torch.equal(chunk, chunks[keep[pos]])), None)
        if match is None:
            match = len(keep)
            keep.append(i)
            groups.setdefault(key, []).append(match)
        inverse.append(match)
    return sizes, keep, inverse


def _spread(value: Any, parts: dict[int, list[int]], inverse: list[int]) -> Any:
    """Copy per-image slices of an output encoded for the distinct images
    back to every image. ``parts`` maps a total row count (patch rows or
    merged-token rows of the distinct images) to their per-image sizes."""
    if isinstance(value, torch.Tensor) and value.dim() > 0 and value.shape[0] in parts:
        pieces = torch.split(value, parts[value.shape[0]])
        return torch.cat([pieces[j] for j in inverse], 0)
    if isinstance(value, (list, tuple)):
        return type(value)(_spread(v, parts, inverse) for v in value)
    if hasattr(value, "keys"):  # a transformers ModelOutput
        return type(value)(**{k: _spread(value[k], parts, inverse) for k in value.keys()})
    return value


def _install_grid(tower: torch.nn.Module) -> TowerStats:
    """Wrap a flat-sequence tower (``forward(pixels, grid_thw, **kw)``): equal images encoded once."""
    stats = TowerStats()
    original = tower.forward
    merge = int(getattr(tower, "spatial_merge_size", None) or getattr(getattr(tower, "config", None),
                                                                      "spatial_merge_size", 1) or 1)

    @functools.wraps(original)
    def forward(hidden_states: Any, grid_thw: Any = None, **kwargs: Any) -> Any:
        plain = (not isinstance(hidden_states, torch.Tensor) or not isinstance(grid_thw, torch.Tensor)
                 or any(isinstance(v, torch.Tensor) for v in kwargs.values()))  # precomputed per-batch inputs
        if plain:
            return original(hidden_states, grid_thw, **kwargs)
        sizes, keep, inverse = unique_images(hidden_states, grid_thw)
        stats.rows += len(sizes)
        stats.encoded += len(keep)
        stats.forwards += 1
        stats.history.append((len(sizes), len(keep)))
        if len(keep) == len(sizes):
            return original(hidden_states, grid_thw, **kwargs)
        chunks = torch.split(hidden_states, sizes)
        out = original(torch.cat([chunks[i] for i in keep], 0), grid_thw[keep], **kwargs)
        kept = [sizes[i] for i in keep]
        parts = {sum(kept): kept, sum(kept) // merge**2: [k // merge**2 for k in kept]}
        return _spread(out, parts, inverse)

    tower.forward = forward
    return stats

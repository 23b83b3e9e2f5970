"""Edit sets for training and evaluation: (source, edited, instruction) rows.

Images are keyed by their resolved file path, so a source shared by many
edits is loaded, cropped and encoded once. Rows come from any editlens
manifest (``id, source, edited, instruction``); an optional numeric column
(``--label-column``) carries human scores or match labels for calibration
and meta-evaluation.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from editlens.core.images import ImageLoadOptions, load_image
from editlens.errors import InputError


@dataclass
class EditSet:
    """Parallel lists of edits; ``paths`` maps image key -> file."""

    ids: list[str]
    source_keys: list[str]
    edited_keys: list[str]
    instructions: list[str]
    labels: list[float] | None = None
    metadata: list[dict[str, Any]] = field(default_factory=list)
    options: ImageLoadOptions = field(default_factory=ImageLoadOptions)

    def __len__(self) -> int:
        return len(self.ids)

    def image(self, key: str) -> np.ndarray:
        arr, _ = load_image(key, self.options, name=key)
        return arr

    def unique_keys(self) -> list[str]:
        return list(dict.fromkeys(self.source_keys + self.edited_keys))

    def subset(self, idx: Sequence[int]) -> "EditSet":
        pick = lambda xs: [xs[i] for i in idx]  # noqa: E731
        return EditSet(pick(self.ids), pick(self.source_keys), pick(self.edited_keys), pick(self.instructions),
                       pick(self.labels) if self.labels is not None else None,
                       pick(self.metadata) if self.metadata else [], self.options)

    def split_by_source(self, fraction: float, seed: int = 0) -> tuple["EditSet", "EditSet"]:
        """(train, validation), with every edit of a source on the same side
        so validation never sees a training source."""
        if not 0 < fraction < 1:
            raise ValueError(f"validation fraction must be in (0, 1), got {fraction}")
        groups = list(dict.fromkeys(self.source_keys))
        if len(groups) < 2:
            raise InputError("cannot split off a validation set: every edit has the same source")
        rng = np.random.default_rng(seed)
        rng.shuffle(groups)
        n_val = min(len(groups) - 1, max(1, int(round(len(groups) * fraction))))
        val_groups = set(groups[:n_val])
        val = [i for i, k in enumerate(self.source_keys) if k in val_groups]
        train = [i for i, k in enumerate(self.source_keys) if k not in val_groups]
        return self.subset(train), self.subset(val)


def read_edits(path: str | os.PathLike, *, label_column: str | None = None, skip_invalid: bool = False,
               options: ImageLoadOptions | None = None) -> EditSet:
    """An :class:`EditSet` from a manifest; ``label_column`` must be numeric in every row when given."""
    from editlens.data.manifest import read_manifest

    report = read_manifest(path, skip_invalid=skip_invalid)
    labels: list[float] | None = [] if label_column else None
    for s in report.samples:
        if label_column:
            value = s.metadata.get(label_column, getattr(s, label_column, None))
            try:
                labels.append(float(value))  # type: ignore[union-attr, arg-type]
            except (TypeError, ValueError):
                raise InputError(f"{path}: sample {s.id!r} has no numeric {label_column!r} column (got {value!r})") from None
    return EditSet([s.id for s in report.samples], [str(s.source) for s in report.samples],
                   [str(s.edited) for s in report.samples], [s.instruction.strip() for s in report.samples], labels,
                   [dict(s.metadata, model=s.model) for s in report.samples], options or ImageLoadOptions())

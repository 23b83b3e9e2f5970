"""The data types every part of editlens passes around."""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, field
from functools import cached_property
from typing import Any, Literal

import numpy as np

from editlens.core.embedded import TableImage
from editlens.core.images import (
    ImageLike,
    ImageLoadOptions,
    describe,
    image_hash,
    load_image,
    resize_to,
)
from editlens.errors import InputError

ScoreStatus = Literal["scored", "skipped", "unscored", "failed", "info"]
#: how an evaluator sees images of other sizes than the source: resized to it (``source``, the default)
#: or each at its own size (``native``); see :meth:`LoadedEdit.at_sizes`
SIZE_POLICIES_PER_EVALUATOR = ("source", "native")


@dataclass
class EditSample:
    """One instruction-guided edit to evaluate.

    Images may be file paths, PIL images or numpy arrays; they are decoded by
    :meth:`load`. ``metadata`` keeps any extra manifest columns.
    """

    id: str
    source: ImageLike
    edited: ImageLike
    instruction: str
    reference: ImageLike | None = None
    model: str | None = None
    source_caption: str | None = None
    target_caption: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id.strip():
            raise InputError("sample id must be a non-empty string")
        if not isinstance(self.instruction, str) or not self.instruction.strip():
            raise InputError(f"sample {self.id!r}: empty instruction")
        for name in ("source_caption", "target_caption"):
            value = getattr(self, name)
            if value is not None and not str(value).strip():
                setattr(self, name, None)

    def columns(self) -> dict[str, Any]:
        """The extra manifest columns (``metadata``) as JSON-able values: an image of a
        table (:class:`~editlens.core.embedded.TableImage`) as its reference string."""
        return {k: _plain(v) for k, v in self.metadata.items()}

    def image_refs(self) -> dict[str, str]:
        """``{role: path or table reference}`` of the sample's file and table images (not of
        images passed as arrays): what a report opens to show them later."""
        out = {}
        for role in ("source", "edited", "reference"):
            value = getattr(self, role)
            if isinstance(value, TableImage) or (isinstance(value, (str, os.PathLike)) and str(value)):
                out[role] = str(value)
        return out

    def load(self, options: ImageLoadOptions | None = None) -> LoadedEdit:
        """Decode and normalise the images; see :class:`ImageLoadOptions`."""
        options = options or ImageLoadOptions()
        notes: list[str] = []
        source, n = load_image(self.source, options, name=_label(self.source, "source"))
        notes += [f"source: {x}" for x in n]
        edited, n = load_image(self.edited, options, name=_label(self.edited, "edited"))
        notes += [f"edited: {x}" for x in n]
        edited_native = edited
        edited = _match_size(edited, source, options, "edited", self.edited, notes)
        reference = reference_native = None
        if self.reference is not None:
            reference, n = load_image(self.reference, options, name=_label(self.reference, "reference"))
            notes += [f"reference: {x}" for x in n]
            reference_native = reference
            reference = _match_size(reference, source, options, "reference", self.reference, notes)
        return LoadedEdit(
            id=self.id,
            source=source,
            edited=edited,
            instruction=self.instruction.strip(),
            reference=reference,
            model=self.model,
            source_caption=self.source_caption,
            target_caption=self.target_caption,
            metadata=dict(self.metadata),
            notes=notes,
            edited_native=edited_native if edited_native is not edited else None,
            reference_native=reference_native if reference_native is not reference else None,
        )


def _plain(value: Any) -> Any:
    if isinstance(value, TableImage):
        return value.uri()
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (bytes, bytearray)):
        return f"<{len(value)} bytes>"
    return value


def _label(src: ImageLike, role: str) -> str:
    return describe(src) if isinstance(src, (str,)) or hasattr(src, "__fspath__") else f"{role} {describe(src)}"


def _match_size(
    arr: np.ndarray, source: np.ndarray, options: ImageLoadOptions, role: str, src: ImageLike, notes: list[str]
) -> np.ndarray:
    if arr.shape[:2] == source.shape[:2]:
        return arr
    got = f"{arr.shape[1]}x{arr.shape[0]}"
    want = f"{source.shape[1]}x{source.shape[0]}"
    if options.size_policy == "error":
        raise InputError(
            f"{describe(src)}: {role} image is {got} but the source is {want} "
            "(size_policy='error'; use 'resize' to resize it to the source size)"
        )
    notes.append(f"{role}: resized from {got} to source size {want} (bicubic)")
    return resize_to(arr, source.shape[:2])


@dataclass
class LoadedEdit:
    """An :class:`EditSample` with decoded RGB ``uint8`` arrays of equal size."""

    id: str
    source: np.ndarray
    edited: np.ndarray
    instruction: str
    reference: np.ndarray | None = None
    model: str | None = None
    source_caption: str | None = None
    target_caption: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    #: results derived from the images that several evaluators need (the change
    #: map, DICE's differences), computed once per sample; see :meth:`derive`
    derived: dict[Any, Any] = field(default_factory=dict, repr=False, compare=False)
    #: the edited (reference) image at its own size when loading resized it to the source's; ``None`` otherwise
    edited_native: np.ndarray | None = field(default=None, repr=False, compare=False)
    reference_native: np.ndarray | None = field(default=None, repr=False, compare=False)

    def at_sizes(self, policy: str) -> LoadedEdit:
        """This sample as an evaluator with size ``policy`` sees it: ``source``
        (every image at the source's size, as loaded) or ``native`` (each image
        at its own size, as DICE, ADIEE and EditReward were released)."""
        if policy not in SIZE_POLICIES_PER_EVALUATOR:
            raise ValueError(f"size policy must be one of {SIZE_POLICIES_PER_EVALUATOR}, got {policy!r}")
        if policy == "source" or (self.edited_native is None and self.reference_native is None):
            return self
        from dataclasses import replace

        kept = [n for n in self.notes if "resized" not in n]
        sizes = [f"{role}: kept at its own size {a.shape[1]}x{a.shape[0]} (the evaluator's size policy: native)"
                 for role, a in (("edited", self.edited_native), ("reference", self.reference_native)) if a is not None]
        return replace(self, edited=self.edited if self.edited_native is None else self.edited_native,
                       reference=self.reference if self.reference_native is None else self.reference_native,
                       edited_native=None, reference_native=None, notes=kept + sizes, derived={})

    def derive(self, key: Any, compute: Any) -> Any:
        """``compute()`` once per ``key`` for this sample, then the stored result."""
        if key not in self.derived:
            self.derived[key] = compute()
        return self.derived[key]

    @cached_property
    def source_hash(self) -> str:
        return image_hash(self.source)

    @cached_property
    def edited_hash(self) -> str:
        return image_hash(self.edited)

    @cached_property
    def reference_hash(self) -> str | None:
        return None if self.reference is None else image_hash(self.reference)

    @property
    def resized(self) -> bool:
        return any("resized" in note for note in self.notes)


@dataclass
class Score:
    """One evaluator's verdict on one sample.

    ``status`` is ``"scored"`` when ``value`` is a real number; ``"skipped"``
    when the sample lacks an input the evaluator needs (``reason`` says which);
    ``"unscored"`` when a model answered but the answer could not be parsed
    (``details["raw"]`` keeps the text); ``"failed"`` when evaluation raised
    or the model's backend failed (time-out, server error: a rerun retries it);
    ``"info"`` for rows that carry data but no score (e.g. generated captions).
    A value is never invented for any but ``"scored"``.
    """

    metric: str
    value: float | None
    status: ScoreStatus = "scored"
    reason: str | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.status == "scored":
            if self.value is None or not math.isfinite(float(self.value)):
                raise ValueError(f"{self.metric}: a scored result needs a finite value, got {self.value!r}")
            self.value = float(self.value)
        elif self.value is not None:
            raise ValueError(f"{self.metric}: a {self.status} result carries no value")

    @classmethod
    def skipped(cls, metric: str, reason: str) -> Score:
        return cls(metric, None, "skipped", reason)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if not out["details"]:
            del out["details"]
        if out["reason"] is None:
            del out["reason"]
        return out

"""Control edits for sanity probes, built on disk, deterministically.

For each edit of a manifest, a control replaces one part of it with
something an evaluator that can be trusted must score worse:

* ``noop``: the source returned as the edit (nothing done);
* ``blank``: a flat grey image as the edit;
* ``noise``: the edit under heavy Gaussian noise;
* ``swapped``: source and edit exchanged (the edit undone);
* ``wrong_instruction``: the instruction (and captions) of another edit,
  one of a different source;
* ``unrelated``: another source's edit as the edit.

Controls are ordinary :class:`~editlens.core.types.EditSample` rows with
ids ``ID::CONTROL`` (plus ``=DONOR`` / ``=sSEED`` where the control depends
on another edit or the seed, so a stored score is never reused for a
different control), scored by the normal runner: a rerun recomputes nothing.
New images (grey, noisy) are written once under the probe's folder, named by
what they are made from.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from editlens.core.embedded import TableImage, source_identity
from editlens.core.types import EditSample
from editlens.errors import InputError

#: every control, in display order
CONTROLS = ("noop", "blank", "noise", "swapped", "wrong_instruction", "unrelated")
#: controls that change an image (the others change the text)
IMAGE_CONTROLS = ("noop", "blank", "noise", "swapped", "unrelated")
#: what each control is, for tables and reports
DESCRIPTIONS = {
    "noop": "the source returned as the edit (nothing done)",
    "blank": "a flat grey image as the edit",
    "noise": "the edit under heavy Gaussian noise",
    "swapped": "source and edit exchanged (the edit undone)",
    "wrong_instruction": "the instruction of another edit, of a different source",
    "unrelated": "another source's edit as the edit",
}
GREY = 128
#: standard deviation of the noise control, in 0-255 pixel units ("heavy": most structure is gone)
NOISE_SIGMA = 80.0
SEP = "::"


@dataclass
class ControlSet:
    """Control samples and the controls that could not be built (with why)."""

    samples: list[EditSample]
    #: control sample id -> (real sample id, control name)
    of: dict[str, tuple[str, str]]
    not_built: list[dict[str, str]] = field(default_factory=list)


def parse_controls(value: str | Sequence[str] | None) -> tuple[str, ...]:
    """``"noop,blank"`` -> ``("noop", "blank")``; unknown names are an error listing the valid ones."""
    if value is None:
        return CONTROLS
    names = [n.strip() for n in (value.split(",") if isinstance(value, str) else value) if n.strip()]
    bad = [n for n in names if n not in CONTROLS]
    if bad or not names:
        raise InputError(f"unknown control(s) {', '.join(bad) or '(none given)'}; choose from {', '.join(CONTROLS)}")
    return tuple(dict.fromkeys(names))


def _key(value: Any) -> str:
    if isinstance(value, TableImage):
        return value.uri()
    return os.path.normpath(os.fspath(value)) if isinstance(value, (str, os.PathLike)) else f"<{id(value)}>"


def _stable_int(text: str) -> int:
    return int(hashlib.sha256(text.encode()).hexdigest()[:15], 16)


def _donor(i: int, samples: Sequence[EditSample], seed: int, ok: Any) -> EditSample | None:
    """A deterministic other sample for which ``ok(candidate)`` holds: a seeded
    random start, then the next one that qualifies (linear only when few do)."""
    n = len(samples)
    if n < 2:
        return None
    start = int(np.random.default_rng([seed, _stable_int(samples[i].id)]).integers(0, n))
    for step in range(n):
        j = (start + step) % n
        if j != i and ok(samples[j]):
            return samples[j]
    return None


def _path(value: Any, sid: str, role: str) -> Any:
    if isinstance(value, TableImage):  # an image inside a parquet/arrow file: used as it is, read when loaded
        return value
    if not isinstance(value, (str, os.PathLike)):
        raise InputError(f"sample {sid!r}: the probe builds controls on disk and needs image paths; "
                         f"its {role} is {type(value).__name__}")
    return os.fspath(value)


def _write_png(arr: np.ndarray, target: Path) -> None:
    from PIL import Image

    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    Image.fromarray(arr).save(tmp, format="PNG")
    os.replace(tmp, target)  # a reader never sees half a file


def _file_tag(path: Any) -> str:
    if isinstance(path, TableImage):
        return "|".join(map(str, source_identity(path) or (path.uri(),)))
    st = os.stat(path)
    return f"{os.path.abspath(path)}|{st.st_size}|{st.st_mtime_ns}"


def _size(path: str) -> tuple[int, int]:
    """(height, width) of an image as editlens loads it (EXIF rotation applied), from its header."""
    from PIL import Image, UnidentifiedImageError

    if isinstance(path, TableImage):
        from editlens.core.images import image_size

        w, h = image_size(path)
        return (h, w)
    try:
        with Image.open(path) as im:
            w, h = im.size
            rotated = im.getexif().get(0x0112) in (5, 6, 7, 8)  # orientations that swap the sides
    except (OSError, UnidentifiedImageError) as exc:
        raise InputError(f"{path}: cannot be read as an image ({exc})") from None
    return (w, h) if rotated else (h, w)


def build_controls(samples: Sequence[EditSample], folder: str | Path, controls: Sequence[str] = CONTROLS,
                   seed: int = 0, noise_sigma: float = NOISE_SIGMA) -> ControlSet:
    """Control samples of ``samples`` with their new images under ``folder``.

    Deterministic for a given manifest and ``seed``; images already written
    are kept (their names say what they are made from).
    """
    from editlens.core.images import load_image

    folder = Path(folder)
    controls = parse_controls(controls)
    out: list[EditSample] = []
    of: dict[str, tuple[str, str]] = {}
    not_built: list[dict[str, str]] = []
    sizes: dict[str, tuple[int, int]] = {}

    def add(real: EditSample, control: str, suffix: str = "", **changes: Any) -> None:
        sid = f"{real.id}{SEP}{control}{suffix}"
        fields = {"source": real.source, "edited": real.edited, "instruction": real.instruction,
                  "reference": real.reference, "source_caption": real.source_caption,
                  "target_caption": real.target_caption, **changes}
        out.append(EditSample(sid, model=f"control:{control}",
                              metadata={**real.metadata, "probe_of": real.id, "control": control}, **fields))
        of[sid] = (real.id, control)

    for i, s in enumerate(samples):
        try:
            src, edt = _path(s.source, s.id, "source"), _path(s.edited, s.id, "edited")
        except InputError as exc:
            not_built.append({"id": s.id, "control": "all", "reason": str(exc)})
            continue
        for control in controls:
            try:
                if control == "noop":
                    add(s, control, edited=src)
                elif control == "swapped":
                    add(s, control, source=edt, edited=src)
                elif control == "blank":
                    if src not in sizes:
                        sizes[src] = _size(src)
                    h, w = sizes[src]
                    target = folder / "images" / "blank" / f"grey{GREY}_{w}x{h}.png"
                    if not target.is_file():
                        _write_png(np.full((h, w, 3), GREY, dtype=np.uint8), target)
                    add(s, control, edited=str(target))
                elif control == "noise":
                    name = hashlib.sha256(f"{_file_tag(edt)}|{seed}|{noise_sigma}".encode()).hexdigest()[:24]
                    target = folder / "images" / "noise" / f"{name}.png"
                    if not target.is_file():
                        arr, _ = load_image(edt)
                        rng = np.random.default_rng([seed, _stable_int(name)])
                        noisy = arr.astype(np.float32) + rng.normal(0.0, noise_sigma, arr.shape).astype(np.float32)
                        _write_png(np.clip(np.rint(noisy), 0, 255).astype(np.uint8), target)
                    add(s, control, f"=s{seed}", edited=str(target))
                elif control == "wrong_instruction":
                    mine = s.instruction.strip().lower()
                    donor = _donor(i, samples, seed, lambda d, s=s, mine=mine: _key(d.source) != _key(s.source)
                                   and d.instruction.strip().lower() != mine)
                    if donor is None:
                        raise InputError("no edit of another source with another instruction")
                    add(s, control, f"={donor.id}", instruction=donor.instruction,
                        source_caption=donor.source_caption, target_caption=donor.target_caption)
                elif control == "unrelated":
                    donor = _donor(i, samples, seed + 1, lambda d, s=s: _key(d.source) != _key(s.source)
                                   and _key(d.edited) not in (_key(s.edited), _key(s.source)))
                    if donor is None:
                        raise InputError("no edit of another source")
                    add(s, control, f"={donor.id}", edited=_path(donor.edited, donor.id, "edited"))
            except InputError as exc:
                not_built.append({"id": s.id, "control": control, "reason": str(exc)})
    return ControlSet(out, of, not_built)

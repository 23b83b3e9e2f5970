"""Score one edit from Python: the simplest entry point.

>>> import numpy as np
>>> from editlens import score_edit
>>> src = np.zeros((32, 32, 3), dtype=np.uint8)
>>> out = score_edit(src, src, "do nothing", metrics=["l1"])
>>> out["l1"].value
0.0
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from editlens.core.images import ImageLike, ImageLoadOptions
from editlens.core.types import EditSample, Score
from editlens.runner.selection import select_metrics


@dataclass
class EditReport:
    """Scores of one edit, plus how its inputs were normalised."""

    scores: dict[str, Score]
    notes: list[str] = field(default_factory=list)

    def __getitem__(self, name: str) -> Score:
        return self.scores[name]

    def to_dict(self) -> dict[str, Any]:
        return {"scores": {k: v.to_dict() for k, v in self.scores.items()}, "input_notes": list(self.notes)}


def score_edit(
    source: ImageLike,
    edited: ImageLike,
    instruction: str,
    *,
    reference: ImageLike | None = None,
    metrics: Sequence[str] | None = None,
    source_caption: str | None = None,
    target_caption: str | None = None,
    models: Mapping[str, str] | None = None,
    options: Mapping[str, Mapping[str, Any]] | None = None,
    image_options: ImageLoadOptions | None = None,
    metadata: dict[str, Any] | None = None,
    extra: Sequence[str] = (),
    vlm: str | Mapping[str, Any] | None = None,
    progress: bool = False,
    device: str = "auto",
    dtype: str = "auto",
    calibration: Any = None,
) -> EditReport:
    """Score one edit; ``report[name]`` is that metric's :class:`Score`.

    With ``metrics=None`` every default metric whose model is present runs;
    the others appear as *skipped* scores whose reason says what is missing.
    ``vlm`` is the judge model: a hub id, a local folder or an
    ``http(s)://HOST/v1`` URL (or a dict of judge options such as
    ``{"vlm": URL, "vlm_model": NAME, "cache": False}``). A judge whose backend
    failed (time-out, server error) reports ``failed`` with the reason; an
    answer that could not be parsed reports ``unscored`` with the raw text.
    ``device``/``dtype`` go to every model (``auto``: the precision policy,
    :mod:`editlens.models.precision`).
    ``calibration`` (a file from ``editlens calibrate``) adds ``calibrated``,
    the probability that people rate the edit good, to each mapped score's details.
    """
    from editlens.runner.isolation import score_isolated

    if calibration is not None:
        from editlens.meta.calibration import load_calibration

        calibration = load_calibration(calibration)  # a bad file fails before any model loads

    if isinstance(vlm, str):
        vlm = {"vlm": vlm}
    sample = EditSample("edit", source, edited, instruction, reference=reference,
                        source_caption=source_caption, target_caption=target_caption, metadata=metadata or {})
    loaded = sample.load(image_options)
    sel = select_metrics(metrics, extra=extra, models=models, options=options, with_reference=reference is not None,
                         vlm=vlm, device=device, dtype=dtype)
    out: dict[str, Score] = {}
    from editlens.runner.run import in_run_order

    ordered = in_run_order(sel.metrics)
    bar = None
    if progress and any(getattr(getattr(m, "spec", None), "vlm", "none") != "none" for m in ordered):
        from tqdm.auto import tqdm

        bar = tqdm(total=len(ordered), unit="metric", desc="scoring", leave=False)
    for metric in ordered:
        if bar is not None:
            bar.set_postfix_str(metric.name)
        out[metric.name] = score_isolated(metric, [loaded])[0]
        if calibration is not None:
            out[metric.name] = calibration.apply(out[metric.name])
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    for name, reason in sel.skipped:
        out[name] = Score.skipped(name, reason)
    return EditReport(out, loaded.notes)

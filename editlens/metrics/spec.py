"""What an evaluator is and needs, as data: :class:`MetricSpec`.

Kept apart from the registry (which loads the catalog) and the catalog
(which declares specs), so neither imports the other to get this type.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Mapping

from editlens.core.registry import load_target

if TYPE_CHECKING:
    from editlens.metrics.base import Metric

#: Inputs a metric can need from a sample.
INPUTS = ("source", "edited", "reference", "instruction", "source_caption", "target_caption", "mask")
#: How a metric takes part in runs that name no metrics.
DEFAULT_USE = ("no", "yes", "with_reference")
#: What a score says about an edit (``MetricSpec.measures``), with the words reports use for it.
#: Reports rank editors by the first three only: a similarity to the source is best for an
#: editor that changes nothing, so it is shown, labelled, and never called "better".
MEASURES = {
    "quality": "edit quality",
    "following": "instruction following",
    "reference": "agreement with the reference edit",
    "similarity": "similarity to the source",
    "none": "no score",
}
RANKED_MEASURES = ("quality", "following", "reference")
#: Images a box can be drawn on.
IMAGE_ROLES = ("source", "edited", "reference")


def _frozen(mapping: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return MappingProxyType(dict(mapping or {}))


@dataclass(frozen=True)
class BoxLayer:
    """Boxes an evaluator keeps in its result ``details``, and how reports draw them.

    Declared as ``MetricSpec(..., boxes=BoxLayer(...))``; the reports read
    nothing else to draw, label, colour, toggle and list an evaluator's boxes.

    Attributes:
        items: dotted path in ``details`` to the list of items, each a dict
            holding a box (``"regions"``; ``"dice.differences"`` for a list
            kept under ``details["dice"]``).
        box: key of an item's box, ``[x0, y0, x1, y1]`` as fractions of the
            image's width and height.
        name: what the items are, plural, for legends and toggles.
        label: ``str.format`` template over an item's fields, for its list
            entry (``"{command} {object}"``); fields that are missing or null
            are left out, and an item it cannot format is labelled by number.
        kind_labels: kind (upper case, as ``colours``) -> label template for items of that kind (e.g. a
            change map's whole-image change: ``"whole image: {cause}"``).
        kind: item field naming the item's kind (``"command"``); it picks the
            colour (``colours``) and the images (``on_kind``).
        colour: CSS colour of the boxes (of kinds ``colours`` does not name).
        colours: kind -> CSS colour.
        legend: kind -> text of its legend entry (default: the kind).
        on: images the boxes are drawn on; ``on_kind``: kind -> images.
        dashed: dashed outline, to tell layers of the same colour apart.
        rank: numeric item field; a thumbnail shows the highest first and
            counts the rest as "+N more".
        verdict: dotted path in an item to a ``True``/``False``/``None``
            judgement of it (``"verdict.coherent"``). Only layers with one
            give edits tags: ``tags`` for an item judged true / false,
            ``"unscored"`` for ``None`` (or a verdict object without the
            value), ``"not judged"`` when there is no verdict at all, ``"no
            change"`` when the evaluator found no item.
        verdict_words: how an item judged true / false is shown.
        tags: the edit-level tags of an item judged true / false.
        fields: dotted item fields listed with each item (numbers inline,
            text as a paragraph).
        empty: what to say when the evaluator found no item.
    """

    items: str
    box: str = "box"
    name: str = "boxes"
    label: str = ""
    kind_labels: Mapping[str, str] = field(default_factory=dict)
    kind: str | None = None
    colour: str = "#f5c400"
    colours: Mapping[str, str] = field(default_factory=dict)
    legend: Mapping[str, str] = field(default_factory=dict)
    on: tuple[str, ...] = ("source", "edited")
    on_kind: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    dashed: bool = False
    rank: str | None = None
    verdict: str | None = None
    verdict_words: tuple[str, str] = ("yes", "no")
    tags: tuple[str, str] = ("correct", "unwanted")
    fields: tuple[str, ...] = ()
    empty: str = "none found"

    def __post_init__(self) -> None:
        for name in ("colours", "legend", "on_kind", "kind_labels"):
            object.__setattr__(self, name, _frozen(getattr(self, name)))
        roles = set(self.on).union(*self.on_kind.values()) if self.on_kind else set(self.on)
        if not roles <= set(IMAGE_ROLES):
            raise ValueError(f"BoxLayer {self.items!r}: boxes go on {IMAGE_ROLES}, got {sorted(roles - set(IMAGE_ROLES))}")
        if not self.items:
            raise ValueError("BoxLayer: items (the path of the item list in details) is required")

    def to_dict(self) -> dict[str, Any]:
        return {"items": self.items, "name": self.name, "kind": self.kind, "colour": self.colour,
                "colours": dict(self.colours), "legend": dict(self.legend), "on": list(self.on),
                "on_kind": {k: list(v) for k, v in self.on_kind.items()}, "dashed": self.dashed,
                "verdict": self.verdict, "empty": self.empty}


@dataclass(frozen=True)
class MetricSpec:
    """What a metric is and needs.

    Positional fields (the original signature, kept stable):

    Attributes:
        name: registry name (lower case, ``[a-z0-9_]``).
        target: ``"module:Class"`` import path (or the class itself).
        needs: sample inputs required; a sample lacking one is skipped with a reason.
        higher_is_better: direction of the score.
        value_range: ``(low, high)`` of possible values (``inf`` allowed).
        model: model role the metric loads (``"clip"``, ``"dino"``,
            ``"lpips-alex"``, ...) or ``None`` for model-free metrics.
        description: one line for ``editlens metrics``.
        defaults: options passed to the class unless the caller overrides them.
        vlm: whether the metric uses a vision-language model: ``"none"``,
            ``"optional"`` (DICE: model-free without one) or ``"required"``
            (judges). Metrics that use one receive the run's VLM options
            (``vlm``, ``cache``, ``templates``, ``samples``, ``temperature``...).

    Keyword-only metadata (all optional; new evaluators declare these by data
    instead of the runner or the reports knowing them by name):

    Attributes:
        default: ``"no"`` (run only when named), ``"yes"`` (in the default set
            of ``editlens score``/``run`` when its model is present) or
            ``"with_reference"`` (in the default set when samples have a
            reference edit).
        runtime: run-time options the runner passes when the class accepts
            them, e.g. ``("models", "device")``; ``None`` (default) passes
            each of ``models`` and ``device`` that the constructor takes.
        summary: ``"module:function"`` of a run-level summary this evaluator
            contributes (``function(rows) -> list[dict]``, ``rows`` being
            ``(editing model, details)`` pairs of its stored results), shown
            by ``editlens runs summary``; ``None`` for none.
        summary_title: heading of that summary table.
        ensemble: whether the evaluator honours ``samples``/``temperature``
            (self-ensembling over sampled answers).
        availability: ``"module:function"`` deciding whether the evaluator's
            model can load here, for models that are not a plain hub id or
            folder (a ``.pth`` checkpoint, a base + adapter pair):
            ``function(options, models) -> (ok, reason)``; ``None`` uses the
            standard model-reference lookup of ``model``.
        measures: what the score says about an edit, one of :data:`MEASURES`:
            ``"quality"`` (how good the edit is overall), ``"following"``
            (whether the instruction was carried out), ``"reference"``
            (agreement with a reference edit), ``"similarity"`` (closeness to
            the source image: an editor that does nothing scores best) or
            ``"none"`` (no score). Reports rank editors by quality, following
            and reference scores only.
        boxes: a :class:`BoxLayer` when the evaluator's details hold boxes
            (regions, differences) that reports draw on the images.
        unchanged_at: a scored value at or below this means the edited image
            is unchanged from the source; reports flag such edits, and the
            editors that make them, as no-ops. ``None``: the score says nothing
            about that.
        sub_scores: ``details`` keys holding sub-scores of one edit (EditScore's
            ``prompt_following``, ``consistency``, ``perceptual_quality``);
            comparisons list them side by side.
        preference: ``"module:function"`` giving P(edit A is better than B)
            from two of this evaluator's scores and its own uncertainty
            (``function(score_a, score_b) -> float | None``; EditReward's
            Gaussian heads); ``None`` when the evaluator has no such notion.
        orders: for a *pairwise* judge (it compares two edits of one source,
            through ``editlens compare``, never per edit in a run): the
            presentation orders its ``orders`` option accepts, e.g.
            ``("both", "forward", "reverse")`` (``both``: asked A-then-B and
            B-then-A, see :mod:`editlens.judges.pairwise`); empty for
            evaluators that score one edit at a time.
        size_policy: how the evaluator sees an edited (or reference) image
            whose size differs from the source's: ``"source"`` (resized to the
            source, as loaded; EditScore's benchmark does this) or ``"native"``
            (each image at its own size, as the DICE, ADIEE and EditReward
            releases feed them). Recorded in each such result's details.
    """

    name: str
    target: Any
    needs: tuple[str, ...]
    higher_is_better: bool
    value_range: tuple[float, float]
    model: str | None = None
    description: str = ""
    defaults: dict[str, Any] = field(default_factory=dict)
    vlm: str = "none"
    default: str = field(default="no", kw_only=True)
    runtime: tuple[str, ...] | None = field(default=None, kw_only=True)
    summary: str | None = field(default=None, kw_only=True)
    summary_title: str | None = field(default=None, kw_only=True)
    ensemble: bool = field(default=False, kw_only=True)
    availability: str | None = field(default=None, kw_only=True)
    measures: str = field(default="quality", kw_only=True)
    boxes: BoxLayer | None = field(default=None, kw_only=True)
    unchanged_at: float | None = field(default=None, kw_only=True)
    orders: tuple[str, ...] = field(default=(), kw_only=True)
    size_policy: str = field(default="source", kw_only=True)
    sub_scores: tuple[str, ...] = field(default=(), kw_only=True)
    preference: str | None = field(default=None, kw_only=True)

    @property
    def pairwise(self) -> bool:
        """Whether this evaluator judges pairs of edits (see ``orders``)."""
        return bool(self.orders)

    def __post_init__(self) -> None:
        if self.vlm not in ("none", "optional", "required"):
            raise ValueError(f"metric {self.name!r}: vlm must be none, optional or required, got {self.vlm!r}")
        unknown = set(self.needs) - set(INPUTS)
        if unknown:
            raise ValueError(f"metric {self.name!r}: unknown inputs {sorted(unknown)}")
        if self.default not in DEFAULT_USE:
            raise ValueError(f"metric {self.name!r}: default must be one of {DEFAULT_USE}, got {self.default!r}")
        if self.measures not in MEASURES:
            raise ValueError(f"metric {self.name!r}: measures must be one of {tuple(MEASURES)}, got {self.measures!r}")
        if self.boxes is not None and not isinstance(self.boxes, BoxLayer):
            raise ValueError(f"metric {self.name!r}: boxes must be a BoxLayer, got {type(self.boxes).__name__}")
        if self.size_policy not in ("source", "native"):
            raise ValueError(f"metric {self.name!r}: size_policy must be source or native, got {self.size_policy!r}")

    def load_class(self) -> type[Metric]:
        return load_target(self.target, f"metric {self.name!r}")

    def load_summary(self) -> Any:
        """The summary function, or ``None`` when the evaluator contributes none."""
        if not self.summary:
            return None
        return load_target(self.summary, f"metric {self.name!r} summary")

    def load_preference(self) -> Any:
        """The preference function (see ``preference``), or ``None``."""
        if not self.preference:
            return None
        return load_target(self.preference, f"metric {self.name!r} preference")

    def load_availability(self) -> Any:
        """The evaluator's own availability check, or ``None`` for the standard one."""
        if not self.availability:
            return None
        return load_target(self.availability, f"metric {self.name!r} availability")

    def in_defaults(self, with_reference: bool) -> bool:
        return self.default == "yes" or (self.default == "with_reference" and with_reference)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "needs": list(self.needs),
            "higher_is_better": self.higher_is_better,
            # JSON has no infinity: an unbounded end is null
            "range": [None if abs(v) == float("inf") else v for v in self.value_range],
            "model": self.model,
            "description": self.description,
            "defaults": dict(self.defaults),
            "vlm": self.vlm,
            "default": self.default,
            "ensemble": self.ensemble,
            "measures": self.measures,
            "boxes": self.boxes.to_dict() if self.boxes else None,
            "unchanged_at": self.unchanged_at,
            **({"orders": list(self.orders)} if self.orders else {}),
            **({"size_policy": self.size_policy} if self.size_policy != "source" else {}),
        }

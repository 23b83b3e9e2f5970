"""What an evaluator is and needs, as data: :class:`MetricSpec`.

Kept apart from the registry (which loads the catalog) and the catalog
(which declares specs), so neither imports the other to get this type.
``from editlens.metrics.registry import MetricSpec`` keeps working.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from editlens.metrics.base import Metric

#: Inputs a metric can need from a sample.
INPUTS = ("source", "edited", "reference", "instruction", "source_caption", "target_caption", "mask")
#: How a metric takes part in runs that name no metrics.
DEFAULT_USE = ("no", "yes", "with_reference")


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
        orders: for a *pairwise* judge (it compares two edits of one source,
            through ``editlens compare``, never per edit in a run): the
            presentation orders its ``orders`` option accepts, e.g.
            ``("both", "forward", "reverse")`` (``both``: asked A-then-B and
            B-then-A, see :mod:`editlens.judges.pairwise`); empty for
            evaluators that score one edit at a time.
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
    orders: tuple[str, ...] = field(default=(), kw_only=True)

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

    def load_class(self) -> type[Metric]:
        if not isinstance(self.target, str):
            return self.target
        module, _, attr = self.target.partition(":")
        return getattr(importlib.import_module(module), attr)

    def load_summary(self) -> Any:
        """The summary function, or ``None`` when the evaluator contributes none."""
        if not self.summary:
            return None
        module, _, attr = self.summary.partition(":")
        return getattr(importlib.import_module(module), attr)

    def load_availability(self) -> Any:
        """The evaluator's own availability check, or ``None`` for the standard one."""
        if not self.availability:
            return None
        module, _, attr = self.availability.partition(":")
        return getattr(importlib.import_module(module), attr)

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
            **({"orders": list(self.orders)} if self.orders else {}),
        }

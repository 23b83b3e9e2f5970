"""The labelling scales, as data (``presets.json`` beside this module): the pairwise outcomes and the
point-wise presets (criteria, values, a key per value, the rubric shown on the page)."""

from __future__ import annotations

import json
import math
from functools import lru_cache
from importlib import resources
from typing import Any, Mapping

from editlens.errors import InputError

#: the four GenAI-Bench outcomes of a pair, in the canonical orientation of the pair (a, b)
PAIR_OUTCOMES = ("A", "B", "tie", "both_bad")


@lru_cache(maxsize=1)
def _presets() -> dict[str, Any]:
    return json.loads(resources.files("editlens.annotate").joinpath("presets.json").read_text(encoding="utf-8"))


def pairwise_preset() -> dict[str, Any]:
    return dict(_presets()["pairwise"])


def pointwise_names() -> list[str]:
    return sorted(_presets()["pointwise"])


def pointwise_preset(name: str) -> dict[str, Any]:
    """A point-wise preset by name (``imagenhub``, ``gedit``, ``likert``)."""
    found = _presets()["pointwise"].get(name)
    if found is None:
        raise InputError(f"--preset {name!r}: unknown; the presets are {', '.join(pointwise_names())}")
    return {"name": name, **found}


def check_scores(preset: Mapping[str, Any], scores: Any) -> dict[str, float]:
    """A point-wise answer ``{criterion: value}``: every criterion of the preset, each value on its scale."""
    if not isinstance(scores, dict):
        raise InputError("scores must be an object {criterion: value}")
    out: dict[str, float] = {}
    for c in preset["criteria"]:
        if c["name"] not in scores:
            raise InputError(f"criterion {c['name']!r} has no value")
        v = scores[c["name"]]
        allowed = [s["value"] for s in c["scale"]]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not any(math.isclose(v, a) for a in allowed):
            raise InputError(f"criterion {c['name']!r}: {v!r} is not on its scale ({', '.join(map(str, allowed))})")
        out[c["name"]] = float(v)
    extra = set(scores) - set(out)
    if extra:
        raise InputError(f"unknown criteria {sorted(extra)}; this preset has {[c['name'] for c in preset['criteria']]}")
    return out


def overall(preset: Mapping[str, Any], scores: Mapping[str, float]) -> float | None:
    """The preset's overall value of one rater's scores: the square root of the product (ImagenHub's and
    VIEScore's O = sqrt(SC * PQ)), or the single criterion. ``None`` when a criterion is missing."""
    rule = preset["overall"]
    vals = [scores.get(n) for n in rule["of"]]
    if any(v is None for v in vals):
        return None
    if rule["rule"] == "sqrt_product":
        return math.sqrt(math.prod(float(v) for v in vals if v is not None))
    return float(vals[0])  # type: ignore[arg-type]
